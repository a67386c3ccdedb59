"""The GOPP solver's fast paths agree with the straightforward ones (SPEC.md section 2): the
eigh-based polar factor, the threaded GPM step, the extrapolated GPM, the secular-equation and
Lanczos certificates (the matrix-free one: tests/common/test_gopp_certificate.py), and the
benchmark's straightforward solver."""

import itertools
import json

import numpy as np
import pytest
import scipy.linalg

from benchmarks import bench_gopp
from noisyanchor.common import gopp as gopp_module
from noisyanchor.common import gopp_certificate as certificate_module
from noisyanchor.common.blas import blas_threads
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.gopp import solve_gopp
from noisyanchor.common.gopp_certificate import certify
from noisyanchor.common.linalg import (
    BlockWorkers,
    extreme_eigh,
    polar_factor,
    polar_factor_fast,
)
from noisyanchor.common.theory import phase_transition_v


def _anchors(seed, p, d, r, factor):
    """``B_i = A O_i + 1 Psi_i^T + v W_i`` with ``v = factor * v_PT``."""
    rng = np.random.default_rng(seed)
    anchor = make_anchor(r, d, rng)
    v = factor * phase_transition_v(p, d, r)
    return [anchor @ k.rotation + k.translation + v * rng.standard_normal((r, d))
            for k in (sample_key(d, rng, translation_scale=5.0) for _ in range(p))]


@pytest.fixture
def threaded(monkeypatch):
    """Force the threaded GPM step (two workers) whatever the problem size and core count."""
    monkeypatch.setattr(gopp_module, "PARALLEL_MIN_FLOPS", 0.0)
    monkeypatch.setattr(gopp_module, "available_cpus", lambda: 2)
    monkeypatch.setattr(gopp_module, "worker_budget", lambda workers: (workers, 1))


@pytest.fixture
def mixed_everywhere(monkeypatch):
    """Float32 increments whatever the problem size (``precision="auto"`` goes mixed)."""
    monkeypatch.setattr(gopp_module, "MIXED_MIN_FLOPS", 0.0)


def test_eigh_polar_equals_svd_polar_including_the_ill_conditioned_fallback(rng):
    m = rng.standard_normal((6, 7, 7))
    m[2] = np.outer(rng.standard_normal(7), rng.standard_normal(7))  # rank 1: SVD fallback
    m[4, :, 0] = 1e-9 * m[4, :, 1]  # nearly rank deficient: SVD fallback
    fast, exact = polar_factor_fast(m), polar_factor(m)
    well = [0, 1, 3, 5]
    assert np.abs(fast[well] - exact[well]).max() < 1e-12  # entrywise, well conditioned blocks
    assert np.abs(fast[[2, 4]] - exact[[2, 4]]).max() == 0.0  # the fallback is the SVD itself
    orth = np.swapaxes(fast, 1, 2) @ fast
    assert np.abs(orth - np.eye(7)).max() < 1e-12  # every block orthogonal to 1e-12


def test_threaded_polar_stack_equals_one_batched_svd(rng):
    # Condition numbers up to 10, as the GPM's blocks (G R)_i have near v_PT (5 to 11 measured).
    u, v = polar_factor(rng.standard_normal((2, 9, 12, 12)))
    m = u * rng.uniform(1.0, 10.0, (9, 1, 12)) @ v
    out = np.empty_like(m)

    def part(g):
        out[g] = polar_factor_fast(m[g])

    with blas_threads(1), BlockWorkers(9, 2) as workers:
        workers.map(part)
    assert np.abs(out - polar_factor(m)).max() < 1e-12


@pytest.mark.parametrize(("n_blocks", "workers"), [(1, 2), (5, 2), (7, 3), (10, 10), (4, 9)])
def test_block_workers_split_blocks_into_contiguous_covering_groups(n_blocks, workers):
    groups = BlockWorkers(n_blocks, workers).groups
    assert len(groups) == min(workers, n_blocks)
    assert groups[0].start == 0 and groups[-1].stop == n_blocks
    assert all(a.stop == b.start and a.start < a.stop for a, b in itertools.pairwise(groups))


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_threaded_gpm_step_equals_the_serial_one(threaded, factor):
    b = _anchors(3, 5, 6, 30, factor)
    fast = solve_gopp(b, max_iter=60, certify=False)
    gopp_module.PARALLEL_MIN_FLOPS = np.inf  # monkeypatched: restored after the test
    serial = solve_gopp(b, max_iter=60, certify=False)
    assert fast.iterations == serial.iterations
    # Only the order of the partial sums of K R differs: agreement to 1e-10 after 60 steps.
    assert np.abs(fast.rotations - serial.rotations).max() < 1e-10
    np.testing.assert_allclose(fast.objective_trace, serial.objective_trace, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accelerated_gpm_reaches_the_plain_certified_optimum_below_v_pt(threaded, seed):
    b = _anchors(seed, 6, 8, 40, 0.5)
    plain = solve_gopp(b)
    fast = solve_gopp(b, accelerate=True)
    assert plain.certified and fast.certified and fast.converged
    assert fast.fixed_point_residual <= 1e-7  # confirmed on a plain GPM step
    assert fast.objective == pytest.approx(plain.objective, rel=1e-12)
    assert np.all(np.diff(fast.objective_trace) >= -1e-12 * abs(fast.objective))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_accelerated_gpm_above_v_pt_is_monotone_and_never_below_plain(seed):
    b = _anchors(seed, 5, 10, 40, 1.5)
    plain = solve_gopp(b, max_iter=150, certify=False)
    fast = solve_gopp(b, max_iter=150, certify=False, accelerate=True)
    # The objective never decreases (relative slack 1e-12) and ends no lower than plain GPM's.
    assert np.all(np.diff(fast.objective_trace) >= -1e-12 * abs(fast.objective))
    assert fast.objective >= plain.objective * (1 - 1e-12)
    assert fast.iterations <= plain.iterations


def test_plain_gpm_is_unchanged_by_the_acceleration_switch_default():
    b = _anchors(4, 4, 5, 20, 0.8)
    res = solve_gopp(b, max_iter=40)
    assert res.rejected_extrapolations == 0
    assert res.iterations == len(res.objective_trace) - 1


def _certificates(b, res, paths):
    """``lambda_min(Lambda - G)`` at ``res.rotations`` by each certificate path."""
    op = gopp_module._GramOperator(np.stack(b) - np.stack(b).mean(axis=1, keepdims=True))
    gr = op.apply(res.rotations)
    return {path: certify(op.k, res.rotations, gr, path=path) for path in paths}


@pytest.mark.parametrize(("p", "d", "r", "factor"),
                         [(5, 12, 60, 0.5), (5, 12, 60, 3.0), (3, 6, 40, 3.0), (6, 20, 50, 2.0),
                          (3, 6, 40, 0.5)])
def test_secular_certificate_equals_the_dense_one(p, d, r, factor):
    """r < pd (K has r rows) and r > pd (QR triangle): lambda_min(Lambda - G) to 1e-10 * ||G||."""
    b = _anchors(7, p, d, r, factor)
    dense = solve_gopp(b, max_iter=50, certificate_early_exit=False)  # lambda_min in full
    certs = _certificates(b, dense, ("dense", "secular"))
    assert certs["secular"].path == "secular"  # the secular path answered
    scale = dense.certificate_tol / gopp_module.CERTIFICATE_RTOL
    for cert in certs.values():  # the solver's own path is one of the two
        assert abs(cert.min_eig - dense.certificate_min_eig) <= 1e-10 * scale
        assert (cert.min_eig >= -dense.certificate_tol) == dense.certified
    assert dense.certified or factor > 1  # below v_PT the converged runs certify


def test_lanczos_fallback_equals_the_dense_certificate_at_a_stationary_point(monkeypatch):
    b = _anchors(8, 5, 12, 60, 0.5)
    dense = solve_gopp(b)
    monkeypatch.setattr(certificate_module._Secular, "solve", lambda *args, **kwargs: None)
    lanczos = _certificates(b, dense, ("secular",))["secular"]
    assert lanczos.path == "lanczos" and lanczos.products > 0
    scale = dense.certificate_tol / gopp_module.CERTIFICATE_RTOL
    assert abs(lanczos.min_eig - dense.certificate_min_eig) <= 1e-8 * scale
    assert lanczos.min_eig >= -dense.certificate_tol and dense.certified


def _evr_finds_nothing(monkeypatch):
    """Make LAPACK's subset eigensolver return no pairs, as it does on some clustered spectra."""
    eigh = scipy.linalg.eigh

    def failing(a, *args, **kwargs):
        if kwargs.get("driver") != "evr":
            return eigh(a, *args, **kwargs)
        empty = np.empty(0)
        return empty if kwargs.get("eigvals_only") else (empty, np.empty((len(a), 0)))

    monkeypatch.setattr(scipy.linalg, "eigh", failing)


@pytest.mark.parametrize("largest", [True, False])
def test_extreme_eigenpairs_fall_back_to_the_full_solver_when_the_subset_one_finds_none(
        monkeypatch, rng, largest):
    a = rng.standard_normal((30, 30))
    a = a + a.T
    w_all, v_all = np.linalg.eigh(a)
    expected = slice(27, 30) if largest else slice(0, 3)
    _evr_finds_nothing(monkeypatch)
    w, v = extreme_eigh(a, 3, largest=largest)
    np.testing.assert_allclose(w, w_all[expected], rtol=0, atol=1e-12)
    # Eigenvectors up to sign: |<v_j, v_all_j>| = 1 to 1e-10 (the spectrum is simple).
    np.testing.assert_allclose(np.abs(np.sum(v * v_all[:, expected], axis=0)), 1.0, atol=1e-10)
    assert extreme_eigh(a, 2, largest=largest, vectors=False)[1] is None


@pytest.mark.parametrize("seed", [2415, 2425])
def test_certificate_of_the_issue_13_draw_is_a_number_equal_to_the_lanczos_one(monkeypatch, seed):
    """p=200, d=20, r=100 at 0.5 v_PT, one worker: LAPACK's subset eigensolver returned no pair
    on some of these draws and the certificate crashed with IndexError."""
    monkeypatch.setattr(gopp_module, "PARALLEL_MIN_FLOPS", np.inf)
    b = list(bench_gopp.make_anchors(200, 20, 100, 0.5, seed=seed))
    res = solve_gopp(b)
    assert res.converged and res.certified and np.isfinite(res.certificate_min_eig)
    assert res.certificate_path == "secular"
    _evr_finds_nothing(monkeypatch)  # every subset solve of the secular path fails
    forced = _certificates(b, res, ("secular",))["secular"]
    monkeypatch.setattr(certificate_module._Secular, "solve", lambda *args, **kwargs: None)
    lanczos = _certificates(b, res, ("secular",))["secular"]
    scale = res.certificate_tol / gopp_module.CERTIFICATE_RTOL
    # Both at a certified stationary point: lambda_min is 0 up to rounding (1e-10 * ||G||).
    for other in (forced, lanczos):
        assert abs(other.min_eig - res.certificate_min_eig) <= 1e-10 * scale
        assert other.min_eig >= -res.certificate_tol


def test_straightforward_baseline_runs_the_same_iteration_as_solve_gopp():
    b = np.stack(_anchors(9, 4, 6, 30, 0.7))
    base = bench_gopp.straightforward_gopp(b, max_iter=25, tol=bench_gopp.NEVER)
    ours = solve_gopp(list(b), max_iter=25, tol=bench_gopp.NEVER, certify=False)
    assert base.iterations == ours.iterations == 25
    assert ours.objective == pytest.approx(base.objective, rel=1e-12)


def test_quick_benchmark_writes_its_report(tmp_path, mixed_everywhere):
    out = tmp_path / "gopp.json"
    assert bench_gopp.main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the bar chart
    assert {"loadavg_start", "loadavg_end", "blas"} <= set(report["meta"])
    assert all(f["objective_agrees"] for s in report["sizes"] for f in s["fixed_iterations"])
    assert any(f["ours"]["mixed_precision_steps"] for s in report["sizes"]
               for f in s["fixed_iterations"])
    for size in report["sizes"]:
        below = size["below_v_pt"]
        assert below["ours_stops_first_at_the_same_answer"]
        assert {r["variant"] for r in below["runs"]} >= {"ours", "plain-rule", "old-rule"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixed_precision_converges_to_the_double_precision_certified_optimum(seed):
    b = _anchors(seed, 6, 30, 120, 0.5)
    # The paper's step rule, met on an exact product: both stop at the same iteration.
    double = solve_gopp(b, precision="double", stopping="absolute")
    mixed = solve_gopp(b, precision="mixed", stopping="absolute")
    assert double.mixed_precision_steps == 0
    assert mixed.mixed_precision_steps > 0  # small steps were carried by float32 increments
    assert mixed.converged and mixed.certified and double.certified
    # The stopping rule was met on a step from an exact product, so at the same iteration.
    assert mixed.iterations == double.iterations
    assert mixed.fixed_point_residual <= 1e-7
    assert mixed.objective == pytest.approx(double.objective, rel=1e-12)
    assert np.abs(mixed.rotations - double.rotations).max() < 1e-8
    assert mixed.product_drift == mixed.product_drift_estimate == 0.0  # last product exact


@pytest.mark.parametrize(("factor", "budget"), [(0.5, None), (1.5, 1e-6), (4.0, 1e-6)])
def test_mixed_precision_drift_estimate_bounds_the_measured_drift(mixed_everywhere, monkeypatch,
                                                                 factor, budget):
    """Fixed iteration counts (the stopping rule never met): the carried ``G R`` drifts, the
    estimate bounds the drift measured against the exact final product, and the objective and
    rotations stay within what the budget allows of the float64 run."""
    if budget is not None:  # above v_PT the steps stay large: widen the budget to carry them
        monkeypatch.setattr(gopp_module, "PRODUCT_DRIFT_BUDGET", budget)
    b = _anchors(11, 5, 40, 160, factor)
    double = solve_gopp(b, max_iter=60, tol=bench_gopp.NEVER, certify=False, precision="double")
    mixed = solve_gopp(b, max_iter=60, tol=bench_gopp.NEVER, certify=False)
    assert mixed.iterations == double.iterations == 60
    assert mixed.mixed_precision_steps > 0
    assert 0.0 < mixed.product_drift <= mixed.product_drift_estimate
    assert mixed.product_drift_estimate <= gopp_module.PRODUCT_DRIFT_BUDGET
    # The returned objective comes from the exact final product of the returned rotations.
    bc = np.stack(b) - np.stack(b).mean(axis=1, keepdims=True)
    gr = np.einsum("pri,prj->pij", bc, np.einsum("prd,pde->re", bc, mixed.rotations)[None])
    assert mixed.objective == pytest.approx(float(np.vdot(mixed.rotations, gr)), rel=1e-12)
    assert mixed.objective == pytest.approx(double.objective,
                                            rel=1e-12 if budget is None else 1e-6)


def test_precision_must_be_a_known_mode():
    with pytest.raises(InvalidInputError, match="precision"):
        solve_gopp(_anchors(0, 3, 4, 10, 0.5), precision="half")


@pytest.mark.parametrize("accelerate", [False, True])
def test_mixed_precision_with_worker_threads_matches_the_serial_double_run(threaded, accelerate):
    b = _anchors(12, 6, 30, 120, 0.5)
    mixed = solve_gopp(b, precision="mixed", accelerate=accelerate)
    gopp_module.PARALLEL_MIN_FLOPS = np.inf  # monkeypatched: restored after the test
    double = solve_gopp(b, precision="double", accelerate=accelerate)
    assert mixed.mixed_precision_steps > 0 and mixed.converged and mixed.certified
    assert mixed.objective == pytest.approx(double.objective, rel=1e-12)
    assert np.abs(mixed.rotations - double.rotations).max() < 1e-8
    # Carried objectives may dip by the drift budget, never more.
    slack = 2 * gopp_module.PRODUCT_DRIFT_BUDGET * abs(mixed.objective)
    assert np.all(np.diff(mixed.objective_trace) >= -slack)
