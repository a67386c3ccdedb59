"""Linear algebra on a shared host: each workload alone and beside one busy competing process,
under the BLAS thread policy of ``common/blas.py`` (issue 14).

Workloads, each run in this process with the threads the policy chooses:

* ``eigh`` of a random symmetric matrix, n = 400 and n = 1,600 (``np.linalg.eigh``);
* a DP Gram release at n = 1,000 at the default projector (``release_gram``, epsilon = 1,
  delta = 1e-5, record-level sensitivity);
* GOPP to the default stopping rule, certificate included, at p = 50, d = 100, r = 400 and at
  the CelebA size p = 10, d = 400, r = 1,600 (both at 0.5 v_PT), under the policy (idle time
  over a window, issue 31) and under the policy before it (the count of runnable tasks, three
  reads 1 ms apart: :func:`runnable_count_idle_cpus`);
* GOPP above v_PT (p = 10, d = 200, r = 800 at 1.5 v_PT), the default solve (the certificate's
  early exit) and the same solve with the full certificate (issue 31).

Beside that, ``decisions``: how often each policy grants more than one BLAS thread, alone and
beside the competitor (:data:`DECISIONS` decisions each).

Each is timed alone, then beside a competitor: a separate process spinning on one core
(``python -c "while True: pass"``) that the benchmark starts before and stops after. The floor
(issue 14): beside the competitor no workload is more than 3x slower than alone (about 2x is
ideal on 2 cores). The straightforward baseline is the same ``eigh`` at the BLAS library's
default thread count (every CPU, busy-waiting OpenBLAS threads), alone and beside the competitor;
``--baseline-all`` times every workload that way (the release and GOPP can then take minutes).

``--only TEXT`` keeps the workloads whose name contains TEXT (``--merge``: their rows replace
their old ones in the existing JSON, the others kept). ``--crossover`` instead measures,
alone, where a second BLAS thread starts to pay for ``eigh`` and for matrix products (the
constants ``EIGH_CROSSOVER`` and ``GEMM_CROSSOVER_FLOPS`` of ``common/blas.py``); it needs a
quiet machine to mean anything.

Run: ``flock /work/bench.lock python -m benchmarks.bench_shared_host`` (writes
``benchmarks/results/shared_host.json`` and a bar chart beside it; ``--quick`` for small sizes,
written nowhere unless ``--out`` is given). The JSON records the load average before and after,
the CPUs, the BLAS libraries and the threads chosen for every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.bench_gopp import make_anchors
from noisyanchor.common import blas
from noisyanchor.common.blas import (
    available_cpus,
    blas_settings,
    blas_threads,
    configure_blas,
    eigh_threads,
)
from noisyanchor.common.gopp import solve_gopp
from noisyanchor.common.scoreshield import calibrate, gram_record_sensitivity, release_gram

RESULTS = Path(__file__).resolve().parent / "results" / "shared_host.json"

#: The floor of issue 14: beside one busy process, at most this many times slower than alone.
FLOOR = 3.0

#: Seconds the competitor spins before a timed run, so that it is running at full speed.
COMPETITOR_WARMUP = 0.5

#: Thread decisions of each policy counted alone and beside the competitor.
DECISIONS = 40

#: ``(p, d, r)`` of GOPP above ``v_PT`` (1.5 ``v_PT``), default solve and full certificate: the
#: certificate's early exit beside a busy process (issue 31; ``m = 800``: the matrix-free path).
ABOVE_V_PT_SIZE = (10, 200, 800)

#: Reads of the runnable-task count by the policy before issue 31 (the smallest was kept).
RUNNABLE_SAMPLES = 3


def runnable_count_idle_cpus() -> int:
    """The policy before issue 31, kept to compare: CPUs less the other runnable tasks of
    ``/proc/loadavg`` (less this thread and this process's runnable threads that Python did not
    start), the smallest of :data:`RUNNABLE_SAMPLES` reads 1 ms apart."""
    cpus = available_cpus()
    others = []
    for i in range(RUNNABLE_SAMPLES):
        if i:
            time.sleep(0.001)
        try:
            with open("/proc/loadavg") as fh:
                total = int(fh.read().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return cpus
        python = {t.native_id for t in threading.enumerate()}
        native = sum(1 for tid, (state, _, _) in blas._thread_stats().items()
                     if state == "R" and tid not in python)
        others.append(max(0, total - 1 - native))
    return max(1, cpus - min(others))


#: The policies compared: name and the idle-CPU measure each uses.
POLICIES = {"idle window": None, "runnable count (before issue 31)": runnable_count_idle_cpus}


@contextmanager
def idle_policy(name: str) -> Iterator[None]:
    """Run the block under the policy ``name`` of :data:`POLICIES` (the current one: None)."""
    measure = POLICIES[name]
    if measure is None:
        yield
        return
    current = blas.idle_cpus
    blas.idle_cpus = measure
    try:
        yield
    finally:
        blas.idle_cpus = current


@contextmanager
def library_default_threads() -> Iterator[int]:
    """The baseline: every operation at the BLAS library's default count, every CPU (what the
    process did before ``common/blas.py``); the policy is restored afterwards."""
    configure_blas(available_cpus(), announce=False)
    try:
        yield available_cpus()
    finally:
        configure_blas(announce=False)


@dataclass(frozen=True)
class Workload:
    """One timed operation: ``run()`` returns the BLAS threads it used (a dict for the JSON)."""

    name: str
    run: Callable[[], dict]


def _threads(default_threads: bool) -> AbstractContextManager:
    return library_default_threads() if default_threads else nullcontext()


def _eigh(n: int, *, default_threads: bool = False) -> Workload:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    a = a + a.T

    def run() -> dict:
        with _threads(default_threads), blas_threads(eigh_threads(n)) as held:
            np.linalg.eigh(a)
        return {"blas": held}

    label = " (library default threads)" if default_threads else ""
    return Workload(f"eigh n={n}{label}", run)


def _gram_release(n: int, *, default_threads: bool = False) -> Workload:
    rng = np.random.default_rng(n)
    e = rng.standard_normal((n, 64))
    gram = (e / np.linalg.norm(e, axis=1, keepdims=True)) @ (e / np.linalg.norm(
        e, axis=1, keepdims=True)).T
    calibration = calibrate(1.0, 1e-5, gram_record_sensitivity(n))

    def run() -> dict:
        with _threads(default_threads), blas_threads(eigh_threads(n)) as held:
            out = release_gram(gram, calibration, rng=np.random.default_rng(0))
        return {"blas": held, "projector": out.projection.method if out.projection else "none",
                "iterations": out.projection.iterations if out.projection else 0}

    label = " (library default threads)" if default_threads else ""
    return Workload(f"Gram release n={n}, default projector{label}", run)


def _gopp(p: int, d: int, r: int, *, default_threads: bool = False,
          policy: str = "idle window", factor: float = 0.5,
          early_exit: bool = True) -> Workload:
    anchors = list(make_anchors(p, d, r, factor, seed=1))

    def run() -> dict:
        with _threads(default_threads), idle_policy(policy):
            res = solve_gopp(anchors, certificate_early_exit=early_exit)
        return {**res.blas_threads, "iterations": res.iterations, "certified": res.certified,
                "stopped_by": res.stopped_by, "certificate_seconds": res.certificate_seconds,
                "certificate_early_exit": bool(res.certificate_early_exit),
                "polar_route": res.polar_route}

    label = (" (library default threads)" if default_threads
             else "" if policy == "idle window" else f" ({policy})")
    if not early_exit:
        label += " (full certificate)"
    return Workload(f"GOPP p={p} d={d} r={r}, {factor} v_PT{label}", run)


def workloads(quick: bool, baseline_all: bool) -> list[Workload]:
    """The issue's workloads (small sizes with ``quick``), then the default-thread baselines."""
    eigh_sizes = (100, 300) if quick else (400, 1600)
    gram_n = 200 if quick else 1000
    gopp_sizes = ((8, 10, 40), (4, 20, 80)) if quick else ((50, 100, 400), (10, 400, 1600))
    above = (10, 20, 80) if quick else ABOVE_V_PT_SIZE
    ours = ([_eigh(n) for n in eigh_sizes] + [_gram_release(gram_n)]
            + [_gopp(*size, policy=policy) for size in gopp_sizes for policy in POLICIES]
            + [_gopp(*above, factor=1.5, early_exit=early) for early in (True, False)])
    baselines = [_eigh(n, default_threads=True) for n in eigh_sizes]
    if baseline_all:
        baselines += ([_gram_release(gram_n, default_threads=True)]
                      + [_gopp(*size, default_threads=True) for size in gopp_sizes])
    return ours + baselines


class Competitor:
    """A separate process spinning on one core (started and stopped by the benchmark)."""

    def __enter__(self) -> Competitor:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(COMPETITOR_WARMUP)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def _timed(work: Workload, repeat: int) -> dict:
    """Median wall seconds of ``repeat`` runs after one untimed warm-up run."""
    work.run()
    seconds, threads = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        threads = work.run()
        seconds.append(time.perf_counter() - start)
    return {"seconds": float(np.median(seconds)), "runs": seconds, "threads": threads}


def decisions(count: int = DECISIONS) -> list[dict]:
    """Each policy's thread count for a large product, ``count`` times alone and beside the
    competitor: how often it grants more than one thread."""
    rows = []
    for name in POLICIES:
        row: dict = {"policy": name}
        for side in ("alone", "with_competitor"):
            with Competitor() if side == "with_competitor" else nullcontext(), \
                    idle_policy(name):
                counts = [blas.gemm_threads(1e12, blas.once()) for _ in range(count)]
            row[side] = {"granted_more_than_one": sum(c > 1 for c in counts) / count,
                         "counts": counts}
        rows.append(row)
    return rows


def shared_host(quick: bool, repeat: int, baseline_all: bool, only: str = "") -> list[dict]:
    """Each workload alone, then beside the competitor."""
    rows = []
    for work in (w for w in workloads(quick, baseline_all) if only in w.name):
        print(f"{work.name}: alone", file=sys.stderr, flush=True)
        alone = _timed(work, repeat)
        print(f"{work.name}: beside a busy process", file=sys.stderr, flush=True)
        with Competitor():
            beside = _timed(work, repeat)
        ratio = beside["seconds"] / alone["seconds"]
        rows.append({"workload": work.name, "alone": alone, "with_competitor": beside,
                     "slowdown": ratio, "baseline": "library default threads" in work.name,
                     "within_floor": bool(ratio <= FLOOR),
                     "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "loadavg": os.getloadavg()})
    return rows


def crossover(quick: bool, repeat: int) -> dict:
    """Alone: ``eigh`` and square products with one thread and with every CPU, by size."""
    cpus = available_cpus()
    eigh_sizes = (100, 200, 400) if quick else (200, 400, 800, 1200, 1400, 1600, 2000, 2400)
    gemm_sizes = (50, 100) if quick else (100, 200, 300, 400, 600, 800, 1600)
    rng = np.random.default_rng(0)
    rows = []
    for kind, sizes in (("eigh", eigh_sizes), ("gemm", gemm_sizes)):
        for n in sizes:
            a = rng.standard_normal((n, n))
            a = a + a.T
            op = (lambda a=a: np.linalg.eigh(a)) if kind == "eigh" else (lambda a=a: a @ a)
            row = {"kind": kind, "n": n, "flops": 2.0 * n**3 if kind == "gemm" else None}
            for threads in (1, cpus):
                with blas_threads(threads):
                    row[f"seconds_{threads}_threads"] = _timed(Workload(kind, lambda op=op: (
                        op(), {})[1]), repeat)["seconds"]
            row["speedup"] = row["seconds_1_threads"] / row[f"seconds_{cpus}_threads"]
            rows.append(row)
            print(f"{kind} n={n}: speedup with {cpus} threads {row['speedup']:.2f}",
                  file=sys.stderr, flush=True)
    return {"cpus": cpus, "rows": rows}


def _meta(quick: bool, repeat: int) -> dict:
    return {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_start": os.getloadavg(), "cpus": available_cpus(),
            "python": platform.python_version(), "numpy": np.__version__,
            "blas": blas_settings(),
            "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                   "MKL_NUM_THREADS")},
            "quick": quick, "repeat": repeat,
            "note": "the machine is shared with other work: loadavg_start/end record it"}


def table(report: dict) -> str:
    """Human-readable summary."""
    lines = []
    if "shared_host" in report:
        lines.append("workload | alone s | beside a busy process s | slowdown | threads alone / "
                     "beside")
        for r in report["shared_host"]:
            lines.append(f"{r['workload']} | {r['alone']['seconds']:.3f} | "
                         f"{r['with_competitor']['seconds']:.3f} | {r['slowdown']:.2f}x"
                         f"{'' if r['within_floor'] or r['baseline'] else ' (ABOVE FLOOR)'} | "
                         f"{r['alone']['threads']} / {r['with_competitor']['threads']}")
    for r in report.get("decisions", []):
        lines.append(f"policy {r['policy']}: grants more than one BLAS thread in "
                     f"{r['alone']['granted_more_than_one']:.0%} of decisions alone, "
                     f"{r['with_competitor']['granted_more_than_one']:.0%} beside a busy process")
    if "crossover" in report:
        lines.append("kind n | 1 thread s | all CPUs s | speedup")
        c = report["crossover"]
        many = f"seconds_{c['cpus']}_threads"
        for r in c["rows"]:
            lines.append(f"{r['kind']} {r['n']} | {r['seconds_1_threads']:.4f} | "
                         f"{r[many]:.4f} | {r['speedup']:.2f}")
    meta = report["meta"]
    lines.append(f"load average start {meta['loadavg_start']}, end {meta['loadavg_end']}; "
                 f"{meta['cpus']} CPUs")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Bar chart: each workload's seconds alone and beside the competitor, with the slowdown."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    rows = report["shared_host"]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    y = np.arange(len(rows))
    alone = [r["alone"]["seconds"] for r in rows]
    beside = [r["with_competitor"]["seconds"] for r in rows]
    ax.barh(y - 0.2, alone, 0.4, label="alone", color="C0")
    bars = ax.barh(y + 0.2, beside, 0.4, label="beside one busy process", color="C3")
    ax.bar_label(bars, [f"{r['slowdown']:.1f}x" for r in rows], fontsize=8, padding=2)
    ax.set_yticks(y, [r["workload"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("wall seconds (median), log scale")
    metas = [report["meta"], *([report["meta"]["merged_with"]]
                               if "merged_with" in report["meta"] else [])]
    loads = sorted(m["loadavg_start"][0] for m in metas)
    load = f"{loads[0]:.1f}" if len(loads) == 1 else f"{loads[0]:.1f}-{loads[-1]:.1f}"
    ax.set_title(f"shared host: floor {FLOOR:g}x (1-minute load average at start {load})")
    ax.legend(fontsize=8, loc="upper right")
    save_figure(plt, fig, path)


def merged(old: dict, new: dict) -> dict:
    """``new`` with the rows of ``old``'s other workloads kept in their places (a row measured
    again replaces its old one, new workloads come last), ``old``'s meta under
    ``meta["merged_with"]`` and the floor judged on every row."""
    rows = {r["workload"]: r for r in new["shared_host"]}
    kept = [rows.pop(r["workload"], r) for r in old.get("shared_host", [])]
    report = {**new, "shared_host": kept + list(rows.values())}
    report["meta"] = {**new["meta"], "merged_with": old["meta"]}
    report["floor_met"] = all(r["within_floor"] for r in report["shared_host"]
                              if not r["baseline"])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw the chart of the existing JSON (--out or the default)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per condition")
    parser.add_argument("--crossover", action="store_true",
                        help="measure where a second BLAS thread pays (quiet machine) instead")
    parser.add_argument("--baseline-all", action="store_true",
                        help="also time the release and GOPP at the library's default threads")
    parser.add_argument("--only", default="",
                        help="time only the workloads whose name contains this text")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"JSON path (default {RESULTS}, or blas_crossover.json beside it "
                             "with --crossover; --quick writes nothing unless set)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of the existing JSON's other workloads (with --only; "
                             "each row says when it was measured and the load then)")
    args = parser.parse_args(argv)
    if args.replot:
        out = args.out or RESULTS
        plot(json.loads(out.read_text()), out.with_suffix(".png"))
        return 0
    configure_blas()
    report: dict = {"meta": _meta(args.quick, args.repeat)}
    if args.crossover:
        report["crossover"] = crossover(args.quick, args.repeat)
    else:
        report["decisions"] = decisions()
        report["shared_host"] = shared_host(args.quick, args.repeat, args.baseline_all, args.only)
        report["floor"] = FLOOR
        report["floor_met"] = all(r["within_floor"] for r in report["shared_host"]
                                  if not r["baseline"])
    report["meta"]["loadavg_end"] = os.getloadavg()
    default = RESULTS.with_name("blas_crossover.json") if args.crossover else RESULTS
    out = args.out if args.out is not None else (None if args.quick else default)
    if out is not None and args.merge and out.exists() and not args.crossover:
        report = merged(json.loads(out.read_text()), report)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        if not args.crossover:
            plot(report, out.with_suffix(".png"))
    print(table(report))
    return 0 if report.get("floor_met", True) else 1


if __name__ == "__main__":
    sys.exit(main())
