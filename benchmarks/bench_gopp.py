"""GOPP solver benchmark: ``common.gopp.solve_gopp`` against a straightforward implementation run
in the same process on the same inputs (issue 2, performance part).

The straightforward baseline forms the dense ``pd x pd`` matrix ``G``, takes the full
eigendecomposition of ``G`` for the spectral start and one SVD per block per iteration.

Three measurements per size, anchors ``B_i = A O_i + 1 Psi_i^T + v W_i`` at ``v = factor v_PT``:

(a) the same number of iterations, initialisation included (``v = 0.5 v_PT``): wall time and
    objective of the baseline, of ours (default ``precision="auto"``) and of ours in float64
    throughout (``precision="double"``); the objectives must agree to 1e-7 relative;
(b) below ``v_PT`` (``0.5 v_PT``): iterations and time to the stopping rule, certificate
    included, for the default objective rule ("ours"), the plain rule (relative step
    ``||R^(t+1) - R^(t)||_F <= 1e-7 ||R||_F``) and the old rule (the paper's
    ``||R^(t+1) - R^(t)||_F <= 1e-7``), with each objective and certificate next to the old
    rule's; the opt-in extrapolated GPM; and the baseline to the old rule;
(c) above ``v_PT`` (``1.5 v_PT``), capped at 500 iterations: the same runs, objective reached and
    time.

``--sections early-exit`` (issue 31) times, on one CPU at the CelebA size and 1.5 ``v_PT``
(``--exit-size`` for another), the default solve with the certificate's early exit, the same
solve with the full certificate, and the paper's 500-iteration GPM (certificate off):
``gopp_early_exit.json``, with each solve's time over the paper GPM's (floor 0.2).
``--sections polar`` (issue 31) times one stack of 10 polar factors at d = 50, 100, 200, 400,
500 by the eigh route, by Newton-Schulz in batched matrix products and by the SVD, same process,
one BLAS thread: ``gopp_polar.json``, with Newton-Schulz's time over the eigh route's.

Peak memory is the tracemalloc peak of a short run (spectral start, 3 iterations, and for ours the
certificate), so it counts numpy's arrays (the baseline's dense ``G`` included) but not BLAS
threads' private buffers.

Run: ``python -m benchmarks.bench_gopp [--quick] [--out PATH]`` (JSON, and a bar chart of (a) as
PNG beside it; ``--replot`` redraws the chart of an existing JSON). BLAS threads follow the
project's policy (:mod:`common.blas`: one thread unless a size crossover and an idle CPU say
otherwise; ``solve_gopp`` chooses its block workers so workers x BLAS threads fit the CPUs, and
the baseline runs at the process default of one thread); the policy, each library's thread count
and the load average at the start and the end are recorded in the JSON, and each solve's
``blas_threads`` in its row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy

from noisyanchor.common.blas import (
    THREAD_VARIABLES,
    blas_settings,
    blas_threads,
    configure_blas,
)
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.gopp import solve_gopp
from noisyanchor.common.theory import phase_transition_v

RESULTS = Path(__file__).resolve().parent / "results" / "gopp.json"
PEER_RESULTS = RESULTS.with_name("gopp_peers.json")
EXIT_RESULTS = RESULTS.with_name("gopp_early_exit.json")
POLAR_RESULTS = RESULTS.with_name("gopp_polar.json")

#: ``(p, d, r)``: the paper's CelebA size and the many-participants size of the issue.
FULL_SIZES = ((10, 400, 1600), (50, 100, 400))
QUICK_SIZES = ((4, 20, 80), (8, 10, 40))

#: A tolerance no step reaches: runs a fixed number of iterations.
NEVER = 1e-300


@dataclass(frozen=True)
class BaselineRun:
    """Result of :func:`straightforward_gopp`."""

    rotations: np.ndarray
    iterations: int
    converged: bool
    objective: float
    init_seconds: float
    seconds: float
    checkpoints: dict[int, tuple[float, float, float]]


def straightforward_gopp(anchors: np.ndarray, *, max_iter: int, tol: float,
                         checkpoints: tuple[int, ...] = ()) -> BaselineRun:
    """The straightforward GOPP solver the issue compares against (SPEC.md section 2).

    Dense ``G = K^T K`` (``K = [Bc_1, ..., Bc_p]``), full ``eigh(G)`` for the spectral start,
    and per iteration one dense product ``G R`` and one SVD per block.

    Parameters
    ----------
    anchors : (p, r, d) ndarray
        ``B_i``.
    max_iter, tol : int, float
        ``T_max`` and ``eps`` of the stopping rule ``||R^(t+1) - R^(t)||_F <= eps``.
    checkpoints : tuple of int
        Iteration counts at which ``(seconds so far, CPU seconds so far, objective)`` is
        recorded, so that one run times several iteration counts.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    p, r, d = anchors.shape
    bc = anchors - anchors.mean(axis=1, keepdims=True)
    k = bc.transpose(1, 0, 2).reshape(r, p * d)
    g = k.T @ k
    _, vecs = np.linalg.eigh(g)
    u = vecs[:, -d:].reshape(p, d, d)

    def polar(m: np.ndarray) -> np.ndarray:
        out = np.empty_like(m)
        for i in range(p):  # one SVD per block, as in the paper's description
            uu, _, vt = np.linalg.svd(m[i])
            out[i] = uu @ vt
        return out

    rot = polar(u)
    gr = (g @ rot.reshape(p * d, d)).reshape(p, d, d)
    init_seconds = time.perf_counter() - start
    step, iterations, marks = np.inf, 0, {}
    while iterations < max_iter and step > tol:
        new = polar(gr)
        step = float(np.linalg.norm(new - rot))
        rot = new
        gr = (g @ rot.reshape(p * d, d)).reshape(p, d, d)
        iterations += 1
        if iterations in checkpoints:
            marks[iterations] = (time.perf_counter() - start, time.process_time() - cpu_start,
                                 float(np.vdot(rot, gr)))
    return BaselineRun(rotations=rot, iterations=iterations, converged=bool(step <= tol),
                       objective=float(np.vdot(rot, gr)), init_seconds=init_seconds,
                       seconds=time.perf_counter() - start, checkpoints=marks)


def make_anchors(p: int, d: int, r: int, factor: float, seed: int) -> np.ndarray:
    """``B_i = A O_i + 1 Psi_i^T + v W_i`` with ``v = factor * v_PT(p, d, r)``, as ``(p, r, d)``."""
    rng = np.random.default_rng(seed)
    anchor = make_anchor(r, d, rng)
    v = factor * phase_transition_v(p, d, r)
    return np.stack([anchor @ key.rotation + key.translation + v * rng.standard_normal((r, d))
                     for key in (sample_key(d, rng, translation_scale=10.0) for _ in range(p))])


def peak_megabytes(run: Callable[[], object]) -> float:
    """tracemalloc peak (MB) of the allocations made while ``run()`` executes."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def _ours_init_seconds(anchors: np.ndarray) -> float:
    """Median over 3 runs of the spectral initialisation alone."""
    return float(np.median([solve_gopp(list(anchors), max_iter=0, certify=False).seconds
                            for _ in range(3)]))


def _row(label: str, seconds: float, init: float, iterations: int, objective: float,
         **extra: object) -> dict:
    per_iter = (seconds - init) / iterations if iterations else float("nan")
    return {"variant": label, "seconds": seconds, "init_seconds": init, "iterations": iterations,
            "seconds_per_iteration": per_iter,
            "iterations_per_second": 1.0 / per_iter if iterations else float("nan"),
            "objective": objective, **extra}


def fixed_iterations(anchors: np.ndarray, counts: tuple[int, ...]) -> list[dict]:
    """(a) Same number of iterations, initialisation included, certificate off (one baseline
    run timed at each count). ``ours`` is the default solver (``precision="auto"``: float32
    increments once the steps are small), ``ours_double`` the all-float64 one. CPU seconds (all
    threads) are recorded too: unlike wall time they are not inflated by other processes on a
    shared machine."""
    base = straightforward_gopp(anchors, max_iter=max(counts), tol=NEVER, checkpoints=counts)
    ours_init = _ours_init_seconds(anchors)
    rows = []
    for n in counts:
        base_seconds, base_cpu, base_objective = base.checkpoints[n]
        row = {"iterations": n,
               "baseline": _row("baseline", base_seconds, base.init_seconds, n, base_objective,
                                cpu_seconds=base_cpu)}
        for key, precision in (("ours", "auto"), ("ours_double", "double")):
            cpu_start = time.process_time()
            ours = solve_gopp(list(anchors), max_iter=n, tol=NEVER, certify=False,
                              precision=precision)
            ours_cpu = time.process_time() - cpu_start
            rel = abs(ours.objective - base_objective) / abs(base_objective)
            row[key] = _row(key, ours.seconds, ours_init, ours.iterations, ours.objective,
                            cpu_seconds=ours_cpu, objective_rel_diff=rel,
                            mixed_precision_steps=ours.mixed_precision_steps,
                            product_drift=ours.product_drift)
            row[f"speedup{key[4:]}"] = base_seconds / ours.seconds
        row["cpu_seconds_ratio"] = base_cpu / row["ours"]["cpu_seconds"]
        row["objective_rel_diff"] = max(row[k]["objective_rel_diff"] for k in ("ours",
                                                                               "ours_double"))
        row["objective_agrees"] = bool(row["objective_rel_diff"] <= 1e-7)
        rows.append(row)
    return rows


#: ``(label, stopping rule, accelerate)`` of the runs to the stopping rule: the default
#: objective rule ("ours"), the plain relative step rule and the paper's (old) absolute rule,
#: and the opt-in extrapolated GPM under the default rule.
RULE_RUNS = (("ours", "objective", False), ("plain-rule", "relative", False),
             ("old-rule", "absolute", False), ("ours-accelerated", "objective", True))


def to_tolerance(anchors: np.ndarray, max_iter: int, *, with_baseline: bool) -> list[dict]:
    """(b)/(c) Each stopping rule (:data:`RULE_RUNS`) to its stop or the cap, certificate
    included; objectives and rotations compared with the old rule's run."""
    init = _ours_init_seconds(anchors)
    results = {label: solve_gopp(list(anchors), max_iter=max_iter, accelerate=accelerate,
                                 stopping=rule)
               for label, rule, accelerate in RULE_RUNS}
    old = results["old-rule"]
    rows = []
    for label, rule, _ in RULE_RUNS:
        res = results[label]
        rows.append(_row(label, res.seconds - res.certificate_seconds, init, res.iterations,
                         res.objective, stopping=rule, stopped_by=res.stopped_by,
                         seconds_with_certificate=res.seconds,
                         certificate_seconds=res.certificate_seconds, converged=res.converged,
                         fixed_point_residual=res.fixed_point_residual,
                         objective_rel_diff_to_old_rule=abs(res.objective - old.objective)
                         / abs(old.objective),
                         max_rotation_diff_to_old_rule=float(
                             np.abs(res.rotations - old.rotations).max()),
                         rejected_extrapolations=res.rejected_extrapolations,
                         mixed_precision_steps=res.mixed_precision_steps,
                         certificate_min_eig=res.certificate_min_eig,
                         certificate_tol=res.certificate_tol, certified=res.certified,
                         blas_threads=res.blas_threads))
    if with_baseline:
        base = straightforward_gopp(anchors, max_iter=max_iter, tol=1e-7)
        rows.append(_row("baseline", base.seconds, base.init_seconds, base.iterations,
                         base.objective, converged=base.converged))
    return rows


def stops_first(rows: list[dict]) -> bool:
    """Issue 14's check: the default rule stops no later than the plain rule, which stops no
    later than the old one, at the old rule's objective (1e-10 relative) and certificate."""
    by = {x["variant"]: x for x in rows}
    ours, plain, old = by["ours"], by["plain-rule"], by["old-rule"]
    return bool(ours["iterations"] <= plain["iterations"] <= old["iterations"]
                and all(x["objective_rel_diff_to_old_rule"] <= 1e-10 for x in (ours, plain))
                and ours["certified"] == plain["certified"] == old["certified"])


def peak_memory(anchors: np.ndarray) -> dict:
    """tracemalloc peaks (MB) of a 3-iteration run of each solver."""
    listed = list(anchors)
    return {
        "baseline": peak_megabytes(lambda: straightforward_gopp(anchors, max_iter=3, tol=NEVER)),
        "ours": peak_megabytes(lambda: solve_gopp(listed, max_iter=3, tol=NEVER, certify=False)),
        "ours_with_certificate": peak_megabytes(
            lambda: solve_gopp(listed, max_iter=3, tol=NEVER, certify=True)),
    }


#: ``(p, d, r)`` of the peer comparison (issue 24): the CelebA size and the small sizes where
#: fixed costs decide (``r = 4 d``, the paper's ratio).
PEER_SIZES = ((10, 400, 1600), (10, 20, 80), (30, 20, 80))
QUICK_PEER_SIZES = ((4, 20, 80), (5, 8, 32))

#: ``v / v_PT`` below and above the phase transition, and the thread counts compared.
PEER_FACTORS = (0.5, 1.5)
PEER_THREADS = (1, 2)

#: Repeats of each solve at sizes whose solve takes under a second (the median is kept).
SMALL_REPEATS = 7


def _use_threads(threads: int) -> None:
    """Run on ``threads`` CPUs: this process's affinity (so the solver's block workers and the
    BLAS policy see that many CPUs) and the project's BLAS policy."""
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))
                                [:threads]))
    configure_blas(announce=False)


def _median_run(solve: Callable[[], object], seconds_of: Callable[[object], float],
                repeats: int) -> tuple[object, float]:
    """The last result and the median wall seconds of ``repeats`` calls."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = solve()
        times.append(seconds_of(out) if seconds_of is not None else time.perf_counter() - t0)
    return out, float(np.median(times))


def peer_comparison(anchors: np.ndarray, threads: int, *, cap: int,
                    pymanopt_seconds: float, skip: frozenset[str] = frozenset()) -> dict:
    """Every solver on ``anchors`` at ``threads`` CPUs: seconds to its stopping rule, objective,
    gap to the best objective of the row, and our certificate of its answer.

    ``ours`` is the default solve (certificate included in its seconds), ``paper-gpm`` the
    paper's capped GPM (``method="gpm"``, the paper's rule, ``cap`` iterations; seconds without
    its certificate), ``stacked-gpm`` the straightforward stacked GPM with SVD polar factors
    (below ``v_PT`` only: above it is the same iteration as ``paper-gpm``), ``qc-procrustes``
    and ``pymanopt`` the peers of :mod:`benchmarks.gopp_peers`. ``ours_time_to_paper_objective``
    is when ours first held an objective at least the paper's GPM's (1e-12 relative). Peers
    in ``skip`` are reported as not run."""
    from benchmarks import gopp_peers as peers
    from noisyanchor.common.gopp_certificate import certify

    bc = peers.centered(anchors)
    listed = list(anchors)
    small = solve_gopp(listed, max_iter=0, certify=False).seconds < 0.05
    repeats = SMALL_REPEATS if small else 1
    rows: dict[str, dict] = {}
    paper, paper_s = _median_run(
        lambda: solve_gopp(listed, max_iter=cap, method="gpm", stopping="absolute",
                           certify=False), lambda r: r.seconds, repeats)
    rows["paper-gpm"] = {"seconds": paper_s, "iterations": paper.iterations,
                         "converged": paper.converged, "rotations": paper.rotations}
    to_paper = []  # seconds at which each run of ours first held the paper GPM's objective

    def ours_run() -> object:
        res = solve_gopp(listed, max_iter=cap)
        reached = np.flatnonzero(res.objective_trace >= paper.objective * (1 - 1e-12))
        to_paper.append(float(res.trace_seconds[reached[0]]) if len(reached) else None)
        return res

    ours, ours_s = _median_run(ours_run, lambda r: r.seconds, repeats)
    rows["ours"] = {"seconds": ours_s, "solve_seconds": ours.seconds - ours.certificate_seconds,
                    "certificate_seconds": ours.certificate_seconds,
                    "iterations": ours.iterations, "converged": ours.converged,
                    "stopped_by": ours.stopped_by, "stop_reason": ours.stop_reason,
                    "method": ours.method,
                    "switch_reason": ours.switch_reason, "rotations": ours.rotations,
                    "certificate_path": ours.certificate_path,
                    "mixed_precision_steps": ours.mixed_precision_steps,
                    "blas_threads": ours.blas_threads}
    with blas_threads(threads):
        below = not ours.switched_at
        if below or small:
            stacked, stacked_s = _median_run(lambda: peers.stacked_gpm(anchors, max_iter=cap),
                                             lambda r: r.seconds, repeats)
            rows["stacked-gpm"] = {"seconds": stacked_s, "iterations": stacked.iterations,
                                   "converged": stacked.converged,
                                   "rotations": stacked.rotations}
        for name, solve in (("qc-procrustes", lambda: peers.qc_procrustes(anchors)),
                            ("pymanopt", lambda: peers.pymanopt_trust_regions(
                                anchors, max_time=pymanopt_seconds))):
            if name in skip:
                rows[name] = {"missing": "not run (--skip-peers)"}
                continue
            try:
                run_, secs = _median_run(solve, lambda r: r.seconds, repeats)
            except ImportError as err:  # the optional extra "bench" is missing
                rows[name] = {"missing": str(err)}
                continue
            rows[name] = {"seconds": secs, "iterations": run_.iterations,
                          "converged": run_.converged, "rotations": run_.rotations}
    k = gopp_module_factor(anchors)
    p, _, d = anchors.shape
    for row in rows.values():
        if "rotations" not in row:
            continue
        rot = row.pop("rotations")
        row["objective"] = peers.objective(bc, rot)
        gr = (k.T @ (k @ rot.reshape(p * d, d))).reshape(p, d, d)
        cert = certify(k, rot, gr)
        tol = rows_tol(k)
        row.update(certificate_min_eig=cert.min_eig, certificate_tol=tol,
                   certified=bool(cert.min_eig >= -tol))
    best = max(r["objective"] for r in rows.values() if "objective" in r)
    for row in rows.values():
        if "objective" in row:
            row["objective_gap_to_best"] = (best - row["objective"]) / abs(best)
    reached = np.flatnonzero(ours.objective_trace >= paper.objective * (1 - 1e-12))
    times = [t for t in to_paper if t is not None]
    return {"threads": threads, "repeats": repeats, "loadavg": os.getloadavg(),
            "runs": rows, "best_objective": best,
            "ours_time_to_paper_objective": (float(np.median(times))
                                             if len(times) == len(to_paper) else None),
            "ours_iterations_to_paper_objective": int(reached[0]) if len(reached) else None}


#: ``(p, d, r)``, ``v / v_PT`` and cap of the certificate's early-exit measurement (issue 31): the
#: CelebA size above ``v_PT``, against the paper's 500-iteration GPM.
EXIT_SIZE, EXIT_FACTOR, EXIT_CAP = (10, 400, 1600), 1.5, 500
QUICK_EXIT_SIZE = (10, 60, 240)

#: Issue 31's floor: the default solve, certificate included, within this fraction of the time of
#: the paper's capped GPM (certificate off) at the CelebA size above ``v_PT``.
EXIT_FLOOR = 0.2


def early_exit(size: tuple[int, int, int], *, factor: float = EXIT_FACTOR, cap: int = EXIT_CAP,
               threads: int = 1) -> dict:
    """The default solve (certificate with its early exit) and the same solve with the full
    certificate (``certificate_early_exit=False``), each against the paper's capped GPM, at
    ``size`` and ``factor v_PT`` on ``threads`` CPUs (issue 31): seconds, the certificate's
    share, objective and verdict, when it first held the paper GPM's objective, and
    ``seconds / paper GPM seconds`` (floor :data:`EXIT_FLOOR`). The same ratio of CPU seconds
    (``time.process_time``, one thread) beside it: other processes on the shared cores stretch
    wall time unevenly over the paper GPM's minutes and our one, not CPU time. The load
    average after each solve is in its row."""
    p, d, r = size
    listed = list(make_anchors(p, d, r, factor, seed=2))
    cpus = os.sched_getaffinity(0)
    _use_threads(threads)
    try:
        print(f"p={p} d={d} r={r} {factor} v_PT: paper GPM, {cap} iterations", file=sys.stderr,
              flush=True)
        cpu = time.process_time()
        paper = solve_gopp(listed, max_iter=cap, method="gpm", stopping="absolute",
                           certify=False)
        paper_cpu = time.process_time() - cpu
        runs = {"paper-gpm": {"seconds": paper.seconds, "cpu_seconds": paper_cpu,
                              "iterations": paper.iterations, "objective": paper.objective,
                              "polar_route": paper.polar_route, "loadavg": os.getloadavg()}}
        for name, early in (("ours", True), ("ours-full-certificate", False)):
            print(f"  {name}", file=sys.stderr, flush=True)
            cpu = time.process_time()
            res = solve_gopp(listed, max_iter=cap, certificate_early_exit=early)
            res_cpu = time.process_time() - cpu
            reached = np.flatnonzero(res.objective_trace >= paper.objective * (1 - 1e-12))
            runs[name] = {"seconds": res.seconds, "cpu_seconds": res_cpu,
                          "certificate_seconds": res.certificate_seconds,
                          "iterations": res.iterations, "objective": res.objective,
                          "objective_rel_to_paper_gpm": (res.objective - paper.objective)
                          / abs(paper.objective),
                          "iterations_to_paper_objective": (int(reached[0]) if len(reached)
                                                            else None),
                          "seconds_to_paper_objective": (float(res.trace_seconds[reached[0]])
                                                         if len(reached) else None),
                          "stopped_by": res.stopped_by, "stop_reason": res.stop_reason,
                          "polar_route": res.polar_route,
                          "certified": res.certified,
                          "certificate_min_eig": res.certificate_min_eig,
                          "certificate_tol": res.certificate_tol,
                          "certificate_path": res.certificate_path,
                          "certificate_early_exit": res.certificate_early_exit,
                          "blas_threads": res.blas_threads,
                          "ratio_to_paper_gpm": res.seconds / paper.seconds,
                          "cpu_ratio_to_paper_gpm": res_cpu / paper_cpu,
                          "loadavg": os.getloadavg()}
    finally:  # the CPUs this process had before
        os.sched_setaffinity(0, cpus)
        configure_blas(announce=False)
    ours, full = runs["ours"], runs["ours-full-certificate"]
    return {"p": p, "d": d, "r": r, "factor": factor, "v_pt": phase_transition_v(p, d, r),
            "threads": threads, "cap": cap, "loadavg": os.getloadavg(), "runs": runs,
            "objective_rel_diff_early_vs_full": abs(ours["objective"] - full["objective"])
            / abs(full["objective"]),
            "same_verdict": ours["certified"] == full["certified"],
            "floor": EXIT_FLOOR, "floor_met": bool(ours["ratio_to_paper_gpm"] <= EXIT_FLOOR),
            "cpu_floor_met": bool(ours["cpu_ratio_to_paper_gpm"] <= EXIT_FLOOR)}


#: Orders ``d`` of the polar-factor measurement (issue 31), ``p`` blocks each.
POLAR_ORDERS, POLAR_BLOCKS = (50, 100, 200, 400, 500), 10
QUICK_POLAR_ORDERS = (10, 30)


def polar_routes(orders: tuple[int, ...], *, blocks: int = POLAR_BLOCKS, repeats: int = 3,
                 threads: int = 1) -> dict:
    """Seconds of one stack of ``blocks`` polar factors at each order ``d`` by the eigh route
    (the solver's default), by Newton-Schulz in batched matrix products and by the SVD, best of
    ``repeats`` in this process at ``threads`` BLAS threads, wall and this thread's CPU time
    (what other processes on the shared cores do not stretch); each route's largest entrywise
    distance to the SVD's factor; ``newton_schulz_over_eigh`` in CPU time (below 1:
    Newton-Schulz pays; ``_wall`` in wall time), the
    route :func:`common.linalg.polar_route` chooses, and the load average of each row. Blocks
    like the GPM's ``(G R)_i``: singular values spread over ``[1, POLAR_PROBE_KAPPA]``, and
    Gaussian blocks (wider spread)."""
    from noisyanchor.common.linalg import (
        POLAR_PROBE_KAPPA,
        POLAR_ROUTES,
        polar_factor,
        polar_route,
    )

    rng = np.random.default_rng(7)
    rows = []
    with blas_threads(threads):
        for d in orders:
            u, v = polar_factor(rng.standard_normal((2, blocks, d, d)))
            cases = {"gpm-like": u * np.geomspace(1.0, POLAR_PROBE_KAPPA, d) @ v,
                     "gaussian": rng.standard_normal((blocks, d, d))}
            for case, m in cases.items():
                exact = polar_factor(m)
                row = {"d": d, "blocks": blocks, "case": case, "loadavg": os.getloadavg()}
                for name, route in (*POLAR_ROUTES.items(), ("svd", polar_factor)):
                    wall, cpu = [], []
                    for _ in range(repeats):
                        start, cpu_start = time.perf_counter(), time.thread_time()
                        out = route(m)
                        cpu.append(time.thread_time() - cpu_start)
                        wall.append(time.perf_counter() - start)
                    row[f"{name}_seconds"], row[f"{name}_cpu_seconds"] = min(wall), min(cpu)
                    row[f"{name}_max_error"] = float(np.abs(out - exact).max())
                row["newton_schulz_over_eigh"] = (row["newton-schulz_cpu_seconds"]
                                                  / row["eigh_cpu_seconds"])
                row["newton_schulz_over_eigh_wall"] = (row["newton-schulz_seconds"]
                                                       / row["eigh_seconds"])
                row["chosen"] = polar_route(d, threads)
                print(f"  polar d={d} {case}: ns/eigh {row['newton_schulz_over_eigh']:.2f}",
                      file=sys.stderr, flush=True)
                rows.append(row)
    ratios = [r["newton_schulz_over_eigh"] for r in rows if r["case"] == "gpm-like"]
    pays = [r["d"] for r in rows if r["case"] == "gpm-like" and r["newton_schulz_over_eigh"] < 1]
    return {"threads": threads, "repeats": repeats, "rows": rows,
            "newton_schulz_pays_at": pays, "best_ratio": min(ratios)}


def polar_table(report: dict) -> str:
    """Human-readable summary of :func:`polar_routes`."""
    lines = [f"polar factors, {report['threads']} BLAS thread(s), best of {report['repeats']}"]
    for r in report["rows"]:
        lines.append(f"    d={r['d']:4d} {r['case']:9s} eigh {r['eigh_cpu_seconds'] * 1e3:8.2f} ms"
                     f"  newton-schulz {r['newton-schulz_cpu_seconds'] * 1e3:8.2f} ms  svd "
                     f"{r['svd_cpu_seconds'] * 1e3:8.2f} ms (CPU)  ns/eigh "
                     f"{r['newton_schulz_over_eigh']:.2f}  chosen {r['chosen']}  "
                     f"(errors {r['eigh_max_error']:.0e}, {r['newton-schulz_max_error']:.0e}; "
                     f"load {r['loadavg'][0]:.1f})")
    return "\n".join(lines)


def gopp_module_factor(anchors: np.ndarray) -> np.ndarray:
    """The solver's factor ``K`` of ``G = K^T K`` for ``anchors``."""
    from noisyanchor.common.gopp import _GramOperator

    return _GramOperator(anchors - anchors.mean(axis=1, keepdims=True)).k


def rows_tol(k: np.ndarray) -> float:
    """The solver's certificate tolerance ``CERTIFICATE_RTOL * max(lambda_1(G), 1)``."""
    from noisyanchor.common.gopp import CERTIFICATE_RTOL

    return CERTIFICATE_RTOL * max(float(np.linalg.norm(k, 2)) ** 2, 1.0)


def floors(report: dict) -> dict:
    """Issue 24's floors at 1 thread, from the peer rows: (1) at the CelebA size and 1.5 v_PT,
    ours holds the paper GPM's objective within 1/5 of its time; (2) below v_PT at the CelebA
    size ours (certified) is at least 1.3x faster than the stacked GPM; (3) below v_PT at
    p=10, d=20, ours is no slower than qc-procrustes."""
    out = {}
    for entry in report["peers"]:
        for row in entry["rows"]:
            if row["threads"] != 1:
                continue
            runs = row["runs"]
            size = (entry["p"], entry["d"], entry["r"])
            if size == (10, 400, 1600) and row["factor"] > 1:
                t = row["ours_time_to_paper_objective"]
                ratio = None if t is None else t / runs["paper-gpm"]["seconds"]
                out["celeba_above_time_to_paper_objective_ratio"] = ratio
                out["celeba_above_met"] = bool(ratio is not None and ratio <= 0.2)
            if size == (10, 400, 1600) and row["factor"] < 1 and "stacked-gpm" in runs:
                speed = runs["stacked-gpm"]["seconds"] / runs["ours"]["seconds"]
                out["celeba_below_speedup_over_stacked_gpm"] = speed
                out["celeba_below_met"] = bool(speed >= 1.3 and runs["ours"]["certified"])
            if size[:2] == (10, 20) and row["factor"] < 1 and "seconds" in runs["qc-procrustes"]:
                ratio = runs["ours"]["seconds"] / runs["qc-procrustes"]["seconds"]
                out["small_below_ours_over_qc_procrustes"] = ratio
                out["small_below_met"] = bool(ratio <= 1.0 and runs["ours"]["certified"])
    return out


def skipped_peers(spec: str, size: tuple[int, int, int], factor: float) -> frozenset[str]:
    """Peers ``--skip-peers`` leaves out of the row at ``size`` and ``factor``: a comma-separated
    list of ``NAME`` (every row) or ``NAME:P,D,R:FACTOR`` (that row only), e.g.
    ``qc-procrustes:10,400,1600:1.5`` (500 of its sweeps there take about 40 min on a loaded
    core)."""
    out = set()
    for entry in filter(None, (x.strip() for x in spec.split(";"))):
        name, *where = entry.split(":")
        if not where or (tuple(int(x) for x in where[0].split(",")) == size
                         and (len(where) < 2 or float(where[1]) == factor)):
            out.add(name)
    return frozenset(out)


def run_peers(quick: bool, *, on_row: Callable[[dict], None] | None = None,
              threads_list: tuple[int, ...] = PEER_THREADS, skip: str = "") -> dict:
    """The peer comparison at every size, factor and thread count (issue 24); the rows the
    floors need (one thread) first, and ``on_row(report so far)`` after each row, so that a
    long run that is stopped keeps what it measured."""
    sizes = QUICK_PEER_SIZES if quick else PEER_SIZES
    cap = 100 if quick else 500
    entries = [{"p": p, "d": d, "r": r, "v_pt": phase_transition_v(p, d, r), "rows": []}
               for p, d, r in sizes]
    order = [(threads, factor, i) for threads in threads_list
             for factor in sorted(PEER_FACTORS, reverse=True) for i in range(len(sizes))]
    for threads, factor, i in order:
        entry = entries[i]
        p, d, r = entry["p"], entry["d"], entry["r"]
        print(f"p={p} d={d} r={r} {factor} v_PT, {threads} thread(s)", file=sys.stderr,
              flush=True)
        anchors = make_anchors(p, d, r, factor, seed=1 if factor < 1 else 2)
        _use_threads(threads)
        row = peer_comparison(anchors, threads, cap=cap,
                              pymanopt_seconds=10.0 if quick else 30.0,
                              skip=skipped_peers(skip, (p, d, r), factor))
        row["factor"] = factor
        entry["rows"].append(row)
        if on_row is not None:
            on_row({"peers": entries})
    _use_threads(os.cpu_count() or 1)
    return {"peers": entries}


def peers_table(report: dict) -> str:
    """Human-readable summary of :func:`run_peers`."""
    lines = []
    for e in report["peers"]:
        for row in e["rows"]:
            lines.append(f"p={e['p']} d={e['d']} r={e['r']} at {row['factor']} v_PT, "
                         f"{row['threads']} thread(s), load {row['loadavg'][0]:.1f}: "
                         f"ours at the paper GPM's objective after "
                         f"{row['ours_time_to_paper_objective']} s")
            for name, x in row["runs"].items():
                if "missing" in x:
                    lines.append(f"    {name:14s} missing ({x['missing']})")
                    continue
                lines.append(f"    {name:14s} {x['seconds']:9.4f} s  it {x['iterations']:4d}  "
                             f"gap {x['objective_gap_to_best']:.2e}  "
                             f"certified {x['certified']} ({x['certificate_min_eig']:.2e})")
    lines.append(f"floors: {json.dumps(report.get('floors', {}))}")
    return "\n".join(lines)


def exit_table(report: dict) -> str:
    """Human-readable summary of :func:`early_exit`."""
    lines = [f"p={report['p']} d={report['d']} r={report['r']} at {report['factor']} v_PT, "
             f"{report['threads']} thread(s), load {report['loadavg'][0]:.1f}"]
    for name, x in report["runs"].items():
        extra = (f"  certificate {x['certificate_seconds']:.2f} s, certified {x['certified']} "
                 f"({x['certificate_min_eig']:.3g}), {x['ratio_to_paper_gpm']:.3f} of the paper "
                 f"GPM's time ({x['cpu_ratio_to_paper_gpm']:.3f} of its CPU time), "
                 f"{x['stopped_by']}" if "certified" in x else "")
        lines.append(f"    {name:22s} {x['seconds']:9.2f} s  cpu {x['cpu_seconds']:9.2f} s  "
                     f"it {x['iterations']:4d}  load {x['loadavg'][0]:.1f}{extra}")
    lines.append(f"    same objective (rel diff {report['objective_rel_diff_early_vs_full']:.1e}), "
                 f"same verdict {report['same_verdict']}; floor {report['floor']} met "
                 f"{report['floor_met']}")
    return "\n".join(lines)


#: Solvers of the peer chart, in bar order, with their colours.
PEER_BARS = (("ours", "C0"), ("paper-gpm", "0.55"), ("stacked-gpm", "0.8"),
             ("qc-procrustes", "C2"), ("pymanopt", "C3"))


def plot_peers(report: dict, path: Path) -> None:
    """Chart of :func:`run_peers`: one panel per size and ``v / v_PT``, wall seconds of each
    solver (log scale) at each thread count, each bar labelled with its objective gap to the
    row's best (``0`` = best) and ``*`` where our certificate proves it globally optimal; for
    ours above ``v_PT`` a tick marks when it first held the paper GPM's objective."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    entries = report["peers"]
    factors = sorted({row["factor"] for e in entries for row in e["rows"]})
    if not factors:
        return
    fig, axes = plt.subplots(len(factors), len(entries), figsize=(4.6 * len(entries),
                                                                  3.6 * len(factors)),
                             squeeze=False)
    for ax, (factor, e) in zip(axes.flat, ((f, e) for f in factors for e in entries),
                               strict=True):
        rows = sorted((r for r in e["rows"] if r["factor"] == factor), key=lambda r: r["threads"])
        width = 0.8 / len(PEER_BARS)
        for k, (name, color) in enumerate(PEER_BARS):
            xs, secs, labels = [], [], []
            for i, row in enumerate(rows):
                run = row["runs"].get(name)
                if run is None or "seconds" not in run:
                    continue
                xs.append(i + (k - (len(PEER_BARS) - 1) / 2) * width)
                secs.append(run["seconds"])
                gap = run["objective_gap_to_best"]
                labels.append(("0" if gap == 0 else f"{gap:.0e}") + ("*" if run["certified"]
                                                                    else ""))
                if name == "ours" and row.get("ours_time_to_paper_objective") is not None \
                        and factor > 1:
                    ax.plot(xs[-1], row["ours_time_to_paper_objective"], "k_", ms=10)
            if xs:
                bars = ax.bar(xs, secs, width, color=color, label=name)
                ax.bar_label(bars, labels, fontsize=6, rotation=90, padding=2)
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        ax.set_ylim(low / 3, high * 4)  # room for the labels
        ax.set_xticks(range(len(rows)), [f"{r['threads']} thread(s)\nload "
                                         f"{r['loadavg'][0]:.1f}" for r in rows])
        ax.set_ylabel("wall seconds to the solver's stop")
        ax.set_title(f"p={e['p']}, d={e['d']}, r={e['r']}, {factor} v_PT", fontsize=9)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle("GOPP peers: labels = objective gap to the best (* certified); "
                 "tick = ours at the paper GPM's objective", fontsize=9)
    save_figure(plt, fig, path)


def _meta(quick: bool) -> dict:
    """Conditions of a run: time, load, CPUs, versions, BLAS policy and thread pins."""
    return {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "blas": blas_settings(),
            "env": {k: os.environ.get(k) for k in THREAD_VARIABLES}, "quick": quick}


def run(quick: bool) -> dict:
    sizes = QUICK_SIZES if quick else FULL_SIZES
    counts = (5, 20) if quick else (20, 100)
    cap = 100 if quick else 500
    report = {"meta": _meta(quick), "sizes": []}
    for p, d, r in sizes:
        below = make_anchors(p, d, r, 0.5, seed=1)
        above = make_anchors(p, d, r, 1.5, seed=2)
        entry = {"p": p, "d": d, "r": r, "v_pt": phase_transition_v(p, d, r)}
        print(f"p={p} d={d} r={r}: fixed iterations", file=sys.stderr, flush=True)
        entry["fixed_iterations"] = fixed_iterations(below, counts)
        print("  to tolerance below v_PT", file=sys.stderr, flush=True)
        entry["below_v_pt"] = {"factor": 0.5, "tol": 1e-7,
                               "runs": to_tolerance(below, cap, with_baseline=True)}
        entry["below_v_pt"]["ours_stops_first_at_the_same_answer"] = stops_first(
            entry["below_v_pt"]["runs"])
        print("  capped above v_PT", file=sys.stderr, flush=True)
        entry["above_v_pt"] = {"factor": 1.5, "max_iter": cap,
                               "runs": to_tolerance(above, cap, with_baseline=False)}
        entry["peak_memory_mb"] = peak_memory(below)
        report["sizes"].append(entry)
    report["meta"]["loadavg_end"] = os.getloadavg()
    report["meta"]["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def table(report: dict) -> str:
    """Human-readable summary of :func:`run`'s report."""
    lines = []
    for e in report["sizes"]:
        mem = e["peak_memory_mb"]
        lines.append(f"p={e['p']} d={e['d']} r={e['r']}  (v_PT={e['v_pt']:.5f}; peak MB baseline "
                     f"{mem['baseline']:.1f}, ours {mem['ours']:.1f}, ours+certificate "
                     f"{mem['ours_with_certificate']:.1f})")
        lines.append("  (a) same iterations, 0.5 v_PT: iters | init s base/ours | s/iter "
                     "base/ours | it/s base/ours | total s base/ours | ratio | CPU s base/ours "
                     "| rel obj diff")
        for f in e["fixed_iterations"]:
            b = f["baseline"]
            for key in ("ours", "ours_double"):
                o = f[key]
                lines.append(f"      {f['iterations']:4d} | {b['init_seconds']:7.2f} / "
                             f"{o['init_seconds']:5.2f} | {b['seconds_per_iteration']:.4f} / "
                             f"{o['seconds_per_iteration']:.4f} | "
                             f"{b['iterations_per_second']:6.2f} / "
                             f"{o['iterations_per_second']:6.2f} | {b['seconds']:7.2f} / "
                             f"{o['seconds']:6.2f} | {f['speedup' + key[4:]]:5.2f}x | "
                             f"{b['cpu_seconds']:7.2f} / {o['cpu_seconds']:6.2f} | "
                             f"{o['objective_rel_diff']:.1e}  [{key}: "
                             f"{o['mixed_precision_steps']} float32-increment steps]")
        for key, title in (("below_v_pt", "(b) 0.5 v_PT to tol 1e-7"),
                           ("above_v_pt", "(c) 1.5 v_PT, cap")):
            lines.append(f"  {title}: variant | iters | solve s (+certificate s) | it/s | "
                         "objective (rel diff to old rule) | stopped by | certified (min eig)")
            for x in e[key]["runs"]:
                cert = (f"{x['certified']} ({x['certificate_min_eig']:.2e})"
                        if "certified" in x else "-")
                cs = f"(+{x['certificate_seconds']:.2f})" if "certificate_seconds" in x else ""
                diff = (f" ({x['objective_rel_diff_to_old_rule']:.1e})"
                        if "objective_rel_diff_to_old_rule" in x else "")
                lines.append(f"      {x['variant']:16s} | {x['iterations']:4d} | "
                             f"{x['seconds']:7.2f} {cs:8s} | {x['iterations_per_second']:6.2f} | "
                             f"{x['objective']:.12g}{diff} | {x.get('stopped_by', '-')} | "
                             f"{cert}")
            if key == "below_v_pt":
                lines.append("      ours stops no later than the plain rule, at the old rule's "
                             "objective (1e-10 relative) and certificate: "
                             f"{e[key]['ours_stops_first_at_the_same_answer']}")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Bar chart of (a), one panel per size: wall seconds of the baseline, of ours and of ours in
    float64 throughout, at each iteration count, each bar labelled with its speedup."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    sizes = report["sizes"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.2 * len(sizes), 3.8), squeeze=False)
    variants = (("baseline", "straightforward", "0.6"), ("ours", "ours (default)", "C0"),
                ("ours_double", "ours, float64 only", "C1"))
    for ax, e in zip(axes[0], sizes, strict=True):
        rows = e["fixed_iterations"]
        x = np.arange(len(rows))
        for k, (key, label, color) in enumerate(variants):
            secs = [f[key]["seconds"] for f in rows]
            bars = ax.bar(x + (k - 1) * 0.27, secs, 0.27, label=label, color=color)
            if key != "baseline":
                ax.bar_label(bars, [f"{f['speedup' + key[4:]]:.1f}x" for f in rows],
                             fontsize=8)
        ax.set_xticks(x, [f"{f['iterations']} iterations" for f in rows])
        ax.set_ylabel("wall seconds, start included")
        ax.set_title(f"p={e['p']}, d={e['d']}, r={e['r']}")
        ax.legend(fontsize=8, loc="upper left")
    save_figure(plt, fig, path)



def _section_out(args: argparse.Namespace, sections: set[str], name: str,
                 default: Path) -> Path | None:
    """Where section ``name`` writes its JSON: ``--out`` when it is the only section asked
    for, nowhere under ``--quick``, else its committed results file ``default``."""
    if args.out is not None and sections == {name}:
        return args.out
    return None if args.quick else default


def _write_json(path: Path | None, report: dict) -> None:
    """Write ``report`` to ``path`` (its folder made), unless ``path`` is None."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"JSON path (default {RESULTS}; --quick writes nothing unless set); "
                             "the bar chart goes beside it as .png")
    parser.add_argument("--sections", default="fixed,rules",
                        help="comma-separated: fixed,rules (issue 2/14 measurements, gopp.json) "
                             "and/or peers (issue 24: peers, 1 and 2 threads, floors; "
                             "gopp_peers.json) and/or early-exit (issue 31: the certificate's "
                             "early exit above v_PT, 1 thread; gopp_early_exit.json) and/or "
                             "polar (issue 31: polar factors by eigh, Newton-Schulz and SVD at "
                             "d = 50..500; gopp_polar.json)")
    parser.add_argument("--peer-threads", default=",".join(map(str, PEER_THREADS)),
                        help="comma-separated CPU counts of the peer rows (default 1,2)")
    parser.add_argument("--skip-peers", default="",
                        help="peers not to run, ';'-separated: NAME (qc-procrustes, pymanopt) "
                             "or NAME:P,D,R:FACTOR for one row")
    parser.add_argument("--exit-size", default=None,
                        help="P,D,R of --sections early-exit (default the CelebA size "
                             f"{','.join(map(str, EXIT_SIZE))})")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw the chart of an existing JSON (--out or the default; "
                             "with --sections peers, gopp_peers.json's)")
    args = parser.parse_args(argv)
    if args.replot:
        out = args.out or (PEER_RESULTS if args.sections == "peers" else RESULTS)
        replotted = json.loads(out.read_text())
        (plot_peers if "peers" in replotted else plot)(replotted, out.with_suffix(".png"))
        return 0
    configure_blas()
    sections = set(args.sections.split(","))
    one_shot = {  # section: (what it measures, where it writes, how it prints)
        "polar": (lambda: polar_routes(QUICK_POLAR_ORDERS if args.quick else POLAR_ORDERS,
                                       repeats=2 if args.quick else 3),
                  POLAR_RESULTS, polar_table),
        "early-exit": (lambda: early_exit(
            tuple(int(x) for x in args.exit_size.split(",")) if args.exit_size
            else QUICK_EXIT_SIZE if args.quick else EXIT_SIZE,
            cap=100 if args.quick else EXIT_CAP), EXIT_RESULTS, exit_table)}
    for name, (measure, default, show) in one_shot.items():
        if name in sections:
            report = {"meta": _meta(args.quick), **measure()}
            report["meta"]["loadavg_end"] = os.getloadavg()
            _write_json(_section_out(args, sections, name, default), report)
            print(show(report))
            sections.discard(name)
            if not sections:
                return 0
    if "peers" in sections:
        peer_out = _section_out(args, sections, "peers", PEER_RESULTS)
        meta = _meta(args.quick)

        def write(partial: dict) -> dict:
            peer_report = {"meta": {**meta, "loadavg_end": os.getloadavg()}, **partial}
            peer_report["floors"] = floors(peer_report)
            _write_json(peer_out, peer_report)
            return peer_report

        final = write(run_peers(args.quick, on_row=write,
                                threads_list=tuple(int(t) for t in args.peer_threads.split(",")),
                                skip=args.skip_peers))
        if peer_out is not None:
            plot_peers(final, peer_out.with_suffix(".png"))
        print(peers_table(final))
        if sections == {"peers"}:
            return 0
    report = run(args.quick)
    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    _write_json(out, report)
    if out is not None:
        plot(report, out.with_suffix(".png"))
    print(table(report))
    agree = all(f["objective_agrees"] for e in report["sizes"] for f in e["fixed_iterations"])
    if not agree:
        print("objective disagreement above 1e-7 relative", file=sys.stderr)
    first = all(e["below_v_pt"]["ours_stops_first_at_the_same_answer"] for e in report["sizes"])
    if not first:
        print("the default stopping rule stopped later than the plain rule, or at another "
              "objective or certificate", file=sys.stderr)
    agree = agree and first
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
