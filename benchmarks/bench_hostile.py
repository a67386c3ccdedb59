"""Honest latency and analyst memory under hostile streams (issue 9): the issue's full size.

    flock -x /work/cpu.lock python -m benchmarks.bench_hostile

20 honest participants and 200 hostile streams against one analyst at its default limits
(:mod:`benchmarks.hostile_scenario`): 32 hostile participants hold 5 streams each (one over the
per-caller cap), silent, zero-byte-chunk and slow uploads while the honest ones upload, then Gram
readers that take one message and stop; 40 silent streams from two CA-signed non-participants
throughout. Each phase is measured for ``--window`` seconds (longer than the 60 s idle window,
so the analyst's cuts and the attackers' re-opened streams are inside it). Recorded: honest
Status and upload latency (p50, p99), the analyst's peak resident memory and its growth over
the run, the same scenario without the hostile streams in the same run (the baseline the ratios
divide by), the limits in force, the load average and BLAS settings. Floors (the issue's):
honest Status p99 under 2 s, memory growth under 300 MiB; exit status 1 when one is missed.
Writes ``benchmarks/results/hostile.json`` and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from benchmarks.hostile_scenario import HostileMix, ScenarioReport, run_scenario
from noisyanchor.common.blas import available_cpus, blas_settings

ROOT = Path(__file__).resolve().parents[1]
#: The issue's floors: honest Status p99 (seconds) and analyst memory growth (MiB).
STATUS_P99_FLOOR, RSS_GROWTH_FLOOR = 2.0, 300.0


def _mix(args: argparse.Namespace) -> HostileMix:
    return HostileMix(honest=args.honest, insiders=args.insiders,
                      streams_per_insider=args.streams_per_insider, outsiders=2,
                      outsider_streams=args.outsider_streams, rows=args.rows,
                      window=args.window)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def summarise(hostile: ScenarioReport, baseline: ScenarioReport) -> dict:
    """The figures the README states: each run's percentiles, ratios, the floors."""
    h, b = hostile.to_json()["summary"], baseline.to_json()["summary"]
    return {
        "hostile": h | {"rss_before_mib": hostile.rss_before_mib,
                        "rss_peak_mib": hostile.rss_peak_mib, "hwm_mib": hostile.hwm_mib,
                        "rss_growth_mib": hostile.rss_growth_mib},
        "baseline": b | {"rss_before_mib": baseline.rss_before_mib,
                         "rss_peak_mib": baseline.rss_peak_mib, "hwm_mib": baseline.hwm_mib,
                         "rss_growth_mib": baseline.rss_growth_mib},
        "ratio_hostile_over_baseline": {
            "status_p50": _ratio(h["status_p50_s"], b["status_p50_s"]),
            "status_p99": _ratio(h["status_p99_s"], b["status_p99_s"]),
            "upload_p99": _ratio(h["upload_p99_s"], b["upload_p99_s"]),
            "rss_peak": _ratio(hostile.rss_peak_mib, baseline.rss_peak_mib)},
        "floors": {"status_p99_s": STATUS_P99_FLOOR, "rss_growth_mib": RSS_GROWTH_FLOOR,
                   "status_p99_met": h["status_p99_s"] < STATUS_P99_FLOOR
                   and h["status_errors"] == 0,
                   "rss_growth_met": hostile.rss_growth_mib < RSS_GROWTH_FLOOR,
                   "honest_completed": hostile.state == "done"}}


def plot(runs: dict[str, ScenarioReport], path: Path) -> None:
    """Honest Status latency and analyst memory over time, hostile run against the baseline."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    fig, (lat, mem) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for name, run in runs.items():
        colour = "C3" if name == "hostile" else "C0"
        t, s = np.array(run.status_samples).T
        lat.plot(t, s, ".", ms=2, color=colour, label=f"{name}: Status latency")
        t, r = np.array(run.rss_samples).T
        mem.plot(t, r, color=colour, label=f"{name}: VmRSS")
    lat.axhline(STATUS_P99_FLOOR, color="k", ls="--", lw=0.8, label="floor (p99)")
    lat.set_yscale("log")
    lat.set_ylabel("honest Status, s (log)")
    lat.legend(fontsize=8)
    base = runs["hostile"].rss_before_mib
    mem.axhline(base + RSS_GROWTH_FLOOR, color="k", ls="--", lw=0.8,
                label="floor: before + 300 MiB")
    mem.set_ylabel("analyst resident MiB")
    mem.set_xlabel("seconds since the analyst started serving (uploads phase, alignment, "
                   "releases phase)")
    mem.legend(fontsize=8)
    mix = runs["hostile"].mix
    lat.set_title(f"{mix['honest']} honest participants, {mix['hostile_streams']} hostile "
                  "streams vs none (baseline)")
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; 1 when a floor is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--honest", type=int, default=20)
    parser.add_argument("--insiders", type=int, default=32)
    parser.add_argument("--streams-per-insider", type=int, default=5)
    parser.add_argument("--outsider-streams", type=int, default=40)
    parser.add_argument("--rows", type=int, default=20,
                        help="records per participant (the held Gram is n x n for n = rows x "
                             "participants)")
    parser.add_argument("--window", type=float, default=75.0, help="seconds of each phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/hostile.json")
    args = parser.parse_args(argv)
    mix = _mix(args)
    meta = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_start": os.getloadavg(), "cpus": available_cpus(),
            "python": platform.python_version(), "numpy": np.__version__,
            "grpcio": grpc.__version__, "blas": blas_settings(),
            "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                   "MKL_NUM_THREADS")},
            "command": "python -m benchmarks.bench_hostile " + " ".join(argv or sys.argv[1:])}
    runs: dict[str, ScenarioReport] = {}
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        for name in ("baseline", "hostile"):
            print(f"{name} run: {mix.honest} honest participants, "
                  f"{mix.hostile_streams if name == 'hostile' else 0} hostile streams, "
                  f"{mix.window:g} s per phase", file=sys.stderr, flush=True)
            runs[name] = run_scenario(Path(tmp) / name, mix, hostile=name == "hostile",
                                      seed=args.seed,
                                      progress=lambda m: print("  " + m, file=sys.stderr,
                                                               flush=True))
    meta["loadavg_end"] = os.getloadavg()
    summary = summarise(runs["hostile"], runs["baseline"])
    report = {"benchmark": "honest latency and analyst memory under hostile streams (issue 9)",
              "mix": runs["hostile"].mix, "limits": runs["hostile"].limits,
              "hostile_outcomes": runs["hostile"].hostile_outcomes, **summary,
              "runs": {k: v.to_json() for k, v in runs.items()}, "meta": meta}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, separators=(",", ":")) + "\n")
    plot(runs, args.out.with_suffix(".png"))
    print(json.dumps({k: report[k] for k in ("hostile", "baseline",
                                              "ratio_hostile_over_baseline", "floors")},
                     indent=1))
    floors = summary["floors"]
    return 0 if floors["status_p99_met"] and floors["rss_growth_met"] and \
        floors["honest_completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
