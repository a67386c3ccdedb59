"""Benchmark: the nearest correlation matrix of DP-noised digits Grams, Newton vs three baselines.

For each ``n`` and each epsilon, the Gram ``S = E E^T`` of ``n`` unit-normalised digits records
(the bundled 1,797, then one-pixel shifts of them, for ``n`` beyond) is perturbed with the
record-level Gaussian noise a release at that epsilon adds (``sigma`` calibrated to
``Delta_F = 2 sqrt(2 (n - 1))`` at delta = 1e-5, symmetrised: SPEC.md section 5), and the same
noisy matrix is projected by

- ``newton``: :func:`common.scoreshield.project_correlation`, semismooth Newton on the dual,
- ``dykstra``: the same with ``method="dykstra"`` (the exact alternating reference),
- ``aap``: the same with ``method="aap"`` (the paper's averaged alternating projections),
- ``statsmodels``: ``statsmodels.stats.correlation_tools.corr_nearest`` (Higham's alternating
  projections with a Dykstra correction),

each to the same certificate: a relative feasibility gap
``||X_psd - X_unit||_F / max(||X_psd||_F, 1) <= 1e-6`` between a PSD iterate and the unit-diagonal
matrix next to it (ours through ``residual_tol``; statsmodels by watching its loop, see
:func:`run_statsmodels`). Newton runs first and uncapped; each baseline is then capped at
``cap_factor`` times Newton's time (clamped to ``[min_cap, max_cap]`` seconds), and a capped
run's time is a lower bound (``reached_target`` false, the cap stated in the JSON). Reported per
run: seconds, eigendecompositions (Newton's single-precision ones counted apart), the gap
reached, the feasibility of the returned matrix ``max(-lambda_min, max|diag - 1|,
max(|x_ij| - 1)_+)``, its Frobenius distance to the noisy input (the metric projection is the
minimiser) and to the clean Gram, and the peak of memory allocated during the run (tracemalloc:
numpy arrays and LAPACK workspaces, which numpy allocates). All in one process, one run on the
machine's cores, with the project's BLAS thread policy (:mod:`common.blas`: threads per
operation by size and by the CPUs idle at the time; statsmodels runs under the count our
projector would take); the policy and the load average before and after every row are recorded,
since other work may share the machine.

Run from the repository root (under the benchmark lock on the shared development machine)::

    flock -x /work/cpu.lock python benchmarks/bench_projection.py

or split into runs that each hold the lock for less time, merged into one JSON (each row
records its own caps and load)::

    flock -x /work/cpu.lock python benchmarks/bench_projection.py --n 1000,2000
    flock -x /work/cpu.lock python benchmarks/bench_projection.py --n 4000 --merge

A PNG of seconds against n per method is written beside the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
import scipy.linalg

from noisyanchor.common.blas import blas_settings, blas_threads, configure_blas, eigh_threads
from noisyanchor.common.scoreshield import (
    calibrate,
    gram_record_sensitivity,
    project_correlation,
    symmetrize,
)

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5


def digits_rows(n: int) -> np.ndarray:
    """``n`` unit-norm digits records: the 1,797 bundled ones, then one-pixel shifts of them
    (right, left, down, up) as further distinct records."""
    from sklearn.datasets import load_digits

    x = load_digits().data.astype(np.float64)
    imgs = x.reshape(-1, 8, 8)
    shifted = [np.roll(imgs, s, axis=a).reshape(-1, 64) for a in (2, 1) for s in (1, -1)]
    pool = np.vstack([x, *shifted])
    if n > len(pool):
        raise SystemExit(f"at most {len(pool)} records (digits and four shifts), asked {n}")
    rows = pool[:n]
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def noisy_gram(clean: np.ndarray, epsilon: float, seed: int) -> tuple[np.ndarray, float]:
    """The symmetrised record-level noisy Gram of a release at ``epsilon`` and its sigma."""
    n = clean.shape[0]
    sigma = calibrate(epsilon, DELTA, gram_record_sensitivity(n)).sigma
    noise = np.random.default_rng(seed).normal(0.0, sigma, size=clean.shape)
    return symmetrize(clean + noise), sigma


def feasibility(x: np.ndarray) -> float:
    """``max(-lambda_min, max|diag - 1|, max(|x_ij| - 1)_+)`` of a symmetric matrix."""
    lam = scipy.linalg.eigh(x, eigvals_only=True, subset_by_index=[0, 0], driver="evr",
                            check_finite=False)[0]
    return float(max(-lam, np.abs(np.diag(x) - 1.0).max(), max(np.abs(x).max() - 1.0, 0.0)))


def measured(fn: Callable[[], dict]) -> dict:
    """``fn()``'s result with the peak of memory allocated meanwhile (MiB)."""
    tracemalloc.start()
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out["peak_memory_mib"] = peak / 2**20
    return out


def run_ours(method: str, noisy: np.ndarray, target: float, cap: float | None) -> dict:
    # tol=1 leaves AAP's and Dykstra's relative-change rule out: the common gap decides
    tol = target if method == "newton" else 1.0
    res = project_correlation(noisy, method=method, tol=tol, max_iter=10**6,
                              residual_tol=target, max_seconds=cap)
    return {"seconds": res.seconds, "iterations": res.iterations,
            "eigendecompositions": res.eigendecompositions,
            "single_precision_eigendecompositions": res.single_precision_eigendecompositions,
            "reached_target": bool(res.converged), "relative_gap": res.relative_residual,
            "feasibility": float(max(-res.min_eigenvalue, res.max_diag_error,
                                     max(res.max_abs_entry - 1.0, 0.0))),
            "distance_to_noisy": res.distance_to_input, "matrix": res.matrix}


class _Stop(Exception):
    """Raised inside statsmodels' loop when its iterate meets the certificate or time is up."""

    def __init__(self, matrix: np.ndarray, gap: float, reached: bool):
        super().__init__("stop")
        self.matrix, self.gap, self.reached = matrix, gap, reached


def run_statsmodels(noisy: np.ndarray, target: float, cap: float) -> dict:
    """``corr_nearest`` timed to the same certificate, and capped at ``cap`` seconds.

    Its own stopping test (no eigenvalue of the Dykstra-corrected matrix below ``threshold``)
    practically never fires when the solution is on the PSD boundary. We wrap its
    ``clip_evals`` (one eigendecomposition per iteration): the iterate it just produced is
    ``X = P_psd(.)``, then given a unit diagonal, and ``||X - X_unit||_F = ||diag(X) - 1||_2``
    is the gap our solvers stop on; once it is <= ``target * max(||X||_F, 1)`` (or the cap has
    passed) we stop the loop and keep that unit-diagonal iterate.
    """
    from statsmodels.stats import correlation_tools as ct

    state: dict = {"calls": 0, "last": None}
    original = ct.clip_evals
    t0 = time.perf_counter()

    def stop_with(last: np.ndarray, reached: bool) -> _Stop:
        out = last.copy()
        np.fill_diagonal(out, 1.0)
        gap = float(np.linalg.norm(np.diag(last) - 1.0)) / max(float(np.linalg.norm(last)), 1.0)
        return _Stop(out, gap, reached)

    def watched(x, value=0):
        last = state["last"]
        if last is not None:
            gap = float(np.linalg.norm(np.diag(last) - 1.0))
            if gap <= target * max(float(np.linalg.norm(last)), 1.0):
                raise stop_with(last, True)
            if time.perf_counter() - t0 >= cap:
                raise stop_with(last, False)
        state["calls"] += 1
        x_psd, clipped = original(x, value=value)
        state["last"] = x_psd
        return x_psd, clipped

    ct.clip_evals = watched
    try:
        # the BLAS threads our projector would take for this n (common.blas policy)
        with warnings.catch_warnings(), blas_threads(eigh_threads(noisy.shape[0])):
            warnings.simplefilter("ignore")  # IterationLimitWarning
            try:
                out = ct.corr_nearest(noisy, threshold=0.0, n_fact=10**6 / noisy.shape[0])
                gap, reached = float("nan"), False
            except _Stop as stop:
                out, gap, reached = stop.matrix, stop.gap, stop.reached
            seconds = time.perf_counter() - t0
    finally:
        ct.clip_evals = original
    return {"seconds": seconds, "iterations": state["calls"],
            "eigendecompositions": state["calls"], "single_precision_eigendecompositions": 0,
            "reached_target": reached, "relative_gap": gap, "feasibility": feasibility(out),
            "distance_to_noisy": float(np.linalg.norm(out - noisy)), "matrix": out}


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(v, 2) for v in os.getloadavg()]


def bench_row(n: int, epsilon: float, clean: np.ndarray, args: argparse.Namespace) -> dict:
    """All four methods on one noisy Gram."""
    noisy, sigma = noisy_gram(clean, epsilon, args.seed)
    row: dict = {"n": n, "epsilon": epsilon, "delta": DELTA, "sigma": sigma,
                 "load_before": load(), "eigh_threads_now": eigh_threads(n), "methods": {}}
    newton = measured(lambda: run_ours("newton", noisy, args.target, None))
    cap = min(max(args.cap_factor * newton["seconds"], args.min_cap), args.max_cap)
    row["baseline_cap_seconds"] = cap
    row["baseline_cap"] = {"factor_of_newton_seconds": args.cap_factor,
                           "min_seconds": args.min_cap, "max_seconds": args.max_cap}
    runs = {"newton": newton}
    for name in ("dykstra", "aap"):
        runs[name] = measured(lambda name=name: run_ours(name, noisy, args.target, cap))
    runs["statsmodels"] = measured(lambda: run_statsmodels(noisy, args.target, cap))
    for name, r in runs.items():
        mat = r.pop("matrix")
        r["frobenius_to_clean"] = float(np.linalg.norm(mat - clean))
        r["capped"] = name != "newton" and not r["reached_target"]
        row["methods"][name] = r
        print(f"n={n:5d} eps={epsilon:<4g} {name:11s} {r['seconds']:8.1f} s"
              f"{' (capped)' if r['capped'] else '         '} eigh {r['eigendecompositions']:4d} "
              f"gap {r['relative_gap']:.1e} feasibility {r['feasibility']:.1e} dist "
              f"{r['distance_to_noisy']:.6g} peak {r['peak_memory_mib']:.0f} MiB", flush=True)
    t = newton["seconds"]
    row["speedup_of_newton"] = {
        name: {"ratio": runs[name]["seconds"] / t, "lower_bound": runs[name]["capped"]}
        for name in ("dykstra", "aap", "statsmodels")}
    row["load_after"] = load()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="1000,2000,4000", help="comma-separated sizes")
    parser.add_argument("--epsilons", default="1,10", help="comma-separated release epsilons")
    parser.add_argument("--target", type=float, default=1e-6,
                        help="relative feasibility gap every method must reach")
    parser.add_argument("--cap-factor", type=float, default=20.0,
                        help="a baseline is capped at this many times Newton's seconds")
    parser.add_argument("--min-cap", type=float, default=60.0, help="smallest cap (seconds)")
    parser.add_argument("--max-cap", type=float, default=400.0, help="largest cap (seconds)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise")
    parser.add_argument("--threads", type=int, default=0,
                        help="BLAS threads for every method; 0: the project's policy "
                        "(common.blas: per operation, by size and by the CPUs idle now)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "projection.json"))
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of an existing --out for (n, epsilon) not run now "
                        "(a full benchmark split into runs, e.g. one per n)")
    args = parser.parse_args(argv)
    configure_blas(args.threads or None)
    blas = blas_settings()
    sizes = [int(t) for t in args.n.split(",")]
    epsilons = [float(t) for t in args.epsilons.split(",")]
    rows: list = []
    kept = _kept_rows(Path(args.out), sizes, epsilons) if args.merge else []
    t_all = time.perf_counter()
    for n in sizes:
        clean = digits_rows(n)
        clean = clean @ clean.T
        np.fill_diagonal(clean, 1.0)
        for eps in epsilons:
            rows.append(bench_row(n, eps, clean, args))
            _write(args, kept + rows, blas, t_all)  # a partial file survives an interruption
    rows = _write(args, kept + rows, blas, t_all)
    print("\n| n | epsilon | method | seconds | eigh (single) | gap | peak MiB | Newton faster |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        for name, r in row["methods"].items():
            sp = row["speedup_of_newton"].get(name)
            faster = "" if sp is None else (">= " if sp["lower_bound"] else "") + \
                f"{sp['ratio']:.1f}x"
            secs = (">= " if r["capped"] else "") + f"{r['seconds']:.1f}"
            print(f"| {row['n']} | {row['epsilon']:g} | {name} | {secs} | "
                  f"{r['eigendecompositions']} ({r['single_precision_eigendecompositions']}) | "
                  f"{r['relative_gap']:.1e} | {r['peak_memory_mib']:.0f} | {faster} |")
    plot(rows, Path(args.out).with_suffix(".png"))
    print(f"\nwritten {args.out} and its chart ({(time.perf_counter() - t_all) / 60:.1f} min)")
    return 0


def _kept_rows(out: Path, sizes: list[int], epsilons: list[float]) -> list[dict]:
    """Rows of an existing result file for the (n, epsilon) pairs not run now (rows of an older
    format, without epsilon, are dropped)."""
    if not out.is_file():
        return []
    return [row for row in json.loads(out.read_text()).get("rows", [])
            if "epsilon" in row and not (row["n"] in sizes and row["epsilon"] in epsilons)]


def plot(rows: list[dict], path: Path) -> None:
    """Seconds against n per method, one panel per epsilon (log-log); a hollow marker is a
    capped run, whose time is a lower bound."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    epsilons = sorted({row["epsilon"] for row in rows})
    fig, axes = plt.subplots(1, len(epsilons), figsize=(5.5 * len(epsilons), 4.2),
                             squeeze=False, sharey=True)
    for ax, eps in zip(axes[0], epsilons, strict=True):
        these = sorted((row for row in rows if row["epsilon"] == eps), key=lambda r: r["n"])
        for k, name in enumerate(("newton", "dykstra", "aap", "statsmodels")):
            ns = [row["n"] for row in these]
            secs = [row["methods"][name]["seconds"] for row in these]
            capped = [row["methods"][name]["capped"] for row in these]
            ax.plot(ns, secs, color=f"C{k}", label=name)
            for n, sec, cap in zip(ns, secs, capped, strict=True):
                ax.plot(n, sec, "o", color=f"C{k}", markerfacecolor="none" if cap else f"C{k}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks([row["n"] for row in these], [str(row["n"]) for row in these])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("n (records)")
        ax.set_title(f"epsilon = {eps:g}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("seconds (hollow: capped, a lower bound)")
    axes[0][0].legend(fontsize=8)
    save_figure(plt, fig, path)


def _write(args: argparse.Namespace, rows: list, blas: list, t_all: float) -> list:
    rows = sorted(rows, key=lambda row: (row["n"], row["epsilon"]))
    doc = {
        "benchmark": "nearest correlation matrix of DP-noised digits Grams: semismooth Newton "
                     "vs Dykstra, AAP and statsmodels corr_nearest",
        "target_relative_gap": args.target, "delta": DELTA, "seed": args.seed,
        "noise": "record-level: sigma calibrated to 2 sqrt(2 (n - 1)) (analytic Gaussian)",
        "records": "digits (1,797), then one-pixel shifts of them; rows unit-normalised",
        "baseline_cap": "per row (rows may come from separate runs merged with --merge)",
        "blas_threads_override": args.threads or None, "blas": blas, "cpus": os.cpu_count(),
        "python": platform.python_version(), "numpy": np.__version__,
        "scipy": scipy.__version__, "machine": f"{platform.machine()}, shared 2-core host",
        "seconds_of_the_last_run": time.perf_counter() - t_all, "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
