"""GOPP methods (issue 24): ``method="auto"`` (the default) is the paper's GPM while it contracts
fast and switches to the extrapolated GPM once it contracts slowly (above ``v_PT``), never
lowering the objective; ``method="gpm"`` keeps the paper's iteration with its cap."""

import numpy as np
import pytest

from benchmarks import bench_gopp
from noisyanchor.common import gopp as gopp_module
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gopp import (
    GAIN_RATE_PER_TOL,
    GAIN_STALL_RATIO,
    GAIN_WINDOW,
    METHODS,
    SLOW_CONTRACTION_RATE,
    solve_gopp,
)


@pytest.mark.parametrize(("seed", "p", "d", "r"), [(0, 6, 10, 40), (1, 12, 8, 30),
                                                   (2, 4, 30, 120)])
def test_below_v_pt_auto_is_exactly_the_papers_gpm(seed, p, d, r):
    b = list(bench_gopp.make_anchors(p, d, r, 0.5, seed))
    auto, gpm = solve_gopp(b), solve_gopp(b, method="gpm")
    assert auto.method == gpm.method == "gpm" and auto.switched_at is None
    assert auto.iterations == gpm.iterations and auto.stopped_by == gpm.stopped_by
    np.testing.assert_array_equal(auto.rotations, gpm.rotations)
    assert auto.certified and gpm.certified


@pytest.mark.parametrize(("seed", "factor", "p", "d", "r"), [
    (0, 1.5, 6, 10, 40), (1, 2.0, 6, 10, 40), (2, 3.0, 6, 10, 40), (4, 1.5, 6, 10, 40),
    (5, 2.5, 6, 10, 40), (2, 1.5, 10, 20, 80), (3, 1.5, 10, 20, 80)])
def test_above_v_pt_auto_stops_at_the_capped_gpm_objective_in_a_fraction_of_its_steps(
        seed, factor, p, d, r):
    b = list(bench_gopp.make_anchors(p, d, r, factor, seed))
    cap = 500  # the paper's
    gpm = solve_gopp(b, max_iter=cap, method="gpm", stopping="absolute", certify=False)
    auto = solve_gopp(b, max_iter=cap, certify=False)
    assert auto.method == "gpm+momentum" and auto.switched_at is not None
    assert f">= {SLOW_CONTRACTION_RATE}" in auto.switch_reason
    # it stops by a rule (not the cap), says which and why, in at most a quarter of the steps
    assert auto.converged and auto.stopped_by in ("gain", "objective", "step")
    assert auto.stop_reason and auto.iterations <= cap // 4
    trace = auto.objective_trace
    # never lower: each objective at least the one before, up to 1e-12 relative rounding
    assert np.all(np.diff(trace) >= -1e-12 * abs(trace[-1]))
    # at least the capped GPM's objective, less 1e-5 relative (measured at most 5.2e-6 below on
    # 13 draws, GAIN_RATE_PER_TOL's comment)
    assert auto.objective >= gpm.objective * (1 - 1e-5)


def test_the_gain_rule_says_its_rate_and_is_off_for_the_step_rules():
    b = list(bench_gopp.make_anchors(10, 20, 80, 1.5, seed=2))
    auto = solve_gopp(b, certify=False)
    assert auto.stopped_by == "gain" and "per step over the last 20 steps (<= 1e-06)" in (
        auto.stop_reason)
    rate = float(auto.stop_reason.split("rose ")[1].split(" ")[0])
    assert 0.0 <= rate <= GAIN_RATE_PER_TOL * 1e-7
    # the mean gain it stopped on, recomputed from the trace; one step earlier it was above
    gains = np.diff(auto.objective_trace)
    assert auto.iterations - auto.switched_at >= GAIN_WINDOW
    assert rate == pytest.approx(gains[-GAIN_WINDOW:].mean() / auto.objective, rel=0.05)
    assert gains[-GAIN_WINDOW - 1:-1].mean() > 1e-6 * auto.objective_trace[-2]
    for stopping in ("relative", "absolute"):
        res = solve_gopp(b, certify=False, stopping=stopping, max_iter=auto.iterations + 5)
        assert res.stopped_by == "max_iter" and "max_iter = " in res.stop_reason
    # eps -> 0 switches it off like the other rules
    never = solve_gopp(b, certify=False, tol=1e-300, max_iter=auto.iterations + 5)
    assert never.stopped_by == "max_iter" and never.switched_at == auto.switched_at


def _extrapolated_step(objective, gain, size=1.0):
    return gopp_module._Step(rotations=None, gr=None, size=size, objective=objective, gain=gain,
                             drift=0.0)


@pytest.mark.parametrize("tol", [1e-7, 1e-6])
def test_the_gain_rule_on_constructed_gains_stops_at_the_first_window_below_its_rate(tol):
    """Gains ``g_t = 1e-3 / t^2`` of an objective near 1 (a sublinear convergence): the rule
    stops after the first step ``T`` at which ``sum_{t=T-19..T} g_t <= 20 * 10 tol f_T``, never
    before ``GAIN_WINDOW`` steps, and says so."""
    rule = gopp_module._StoppingRule("objective", tol, 4, 5)
    rule.watch_gains()
    f, stopped, gains = 1.0, None, []
    for t in range(1, 2001):
        g = 1e-3 / t**2
        f += g
        gains.append(g)
        if rule.met(_extrapolated_step(f, g), plain=False, exact_input=True):
            stopped = t
            break
    expected = next(t for t in range(GAIN_WINDOW, 2001)
                    if sum(1e-3 / s**2 for s in range(t - GAIN_WINDOW + 1, t + 1))
                    <= GAIN_WINDOW * GAIN_RATE_PER_TOL * tol * (1.0 + sum(
                        1e-3 / s**2 for s in range(1, t + 1))))
    assert stopped == expected and rule.stopped_by == "gain"
    assert f"(<= {GAIN_RATE_PER_TOL * tol:.0e})" in rule.reason
    # before the switch (watch_gains not called) the same gains never stop an extrapolated run
    off = gopp_module._StoppingRule("objective", tol, 4, 5)
    assert not any(off.met(_extrapolated_step(1.0, g), plain=False, exact_input=True)
                   for g in gains)
    # nor do they while the steps contract (halving every 5 steps: shrunk 8-fold over a window,
    # below GAIN_STALL_RATIO): a run heading for a fixed point is left to the step rules
    contracting = gopp_module._StoppingRule("objective", tol, 4, 5)
    contracting.watch_gains()
    assert GAIN_STALL_RATIO > 2.0 ** -3
    assert not any(contracting.met(_extrapolated_step(1.0, g, 0.5 ** (t / 5)), plain=False,
                                   exact_input=True) for t, g in enumerate(gains))


def test_auto_converges_on_a_plain_step_at_a_stationary_point():
    b = list(bench_gopp.make_anchors(6, 10, 40, 2.0, seed=3))
    res = solve_gopp(b, max_iter=5000, stopping="absolute")
    assert res.converged and res.stopped_by == "step" and res.fixed_point_residual <= 1e-7
    op = gopp_module._GramOperator(np.stack(b) - np.stack(b).mean(axis=1, keepdims=True))
    gr = op.apply(res.rotations)
    # a fixed point of the GPM map: R_i = Pi((G R)_i) to 1e-6
    assert np.abs(gopp_module.polar_factor(gr) - res.rotations).max() < 1e-6


def test_method_must_be_a_known_one():
    assert METHODS == ("auto", "gpm")
    with pytest.raises(InvalidInputError, match="method must be one of"):
        solve_gopp(list(bench_gopp.make_anchors(3, 4, 10, 0.5, seed=0)), method="newton")


@pytest.mark.slow  # every peer at two small sizes, below and above v_PT, 1 and 2 threads
def test_quick_peer_benchmark_writes_every_solver_and_its_certificate(tmp_path):
    pytest.importorskip("procrustes")
    pytest.importorskip("pymanopt")
    import json

    out = tmp_path / "peers.json"
    assert bench_gopp.main(["--quick", "--sections", "peers", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0  # the chart beside the JSON
    assert {"loadavg_start", "loadavg_end", "blas"} <= set(report["meta"])
    for entry in report["peers"]:
        assert {(row["factor"], row["threads"]) for row in entry["rows"]} == {
            (f, t) for f in bench_gopp.PEER_FACTORS for t in bench_gopp.PEER_THREADS}
        for row in entry["rows"]:
            runs = row["runs"]
            assert {"ours", "paper-gpm", "qc-procrustes", "pymanopt"} <= set(runs)
            assert min(r["objective_gap_to_best"] for r in runs.values()) == 0.0
            assert all(isinstance(r["certified"], bool) for r in runs.values())
            if row["factor"] < 1:
                assert runs["ours"]["certified"] and "stacked-gpm" in runs
            else:  # the default stops by a rule and says why
                assert runs["ours"]["stop_reason"] and runs["ours"]["stopped_by"] != "max_iter"
