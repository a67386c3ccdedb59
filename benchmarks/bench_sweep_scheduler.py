"""The same sweep on the process pool and on a Dask ``LocalCluster`` of as many worker processes
(issue 24): rows compared key by key (every field but wall times), wall seconds of each, load.

Run: ``flock -x /work/bench.lock python -m benchmarks.bench_sweep_scheduler
[--config experiments/configs/digits.toml] [--draws N]`` (writes
``benchmarks/results/sweep_scheduler.json``; the two results folders go to a temporary folder
unless ``--keep DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from noisyanchor.experiments.bench import BenchConfig
from noisyanchor.experiments.sweep import ROWS_FILE, row_key, run_sweep

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "sweep_scheduler.json"

#: Row fields that hold wall times (the only ones allowed to differ).
TIMINGS = ("seconds",)


def read_rows(folder: Path) -> dict:
    """Rows of a results folder by key; a key written twice is an error."""
    rows = [json.loads(line) for line in (folder / ROWS_FILE).read_text().splitlines()]
    keyed = {row_key(r): r for r in rows}
    if len(keyed) != len(rows):
        raise AssertionError(f"{folder}: {len(rows) - len(keyed)} rows written twice")
    return keyed


def without_timings(row: dict) -> dict:
    """``row`` less its wall times (its own and its solver's)."""
    out = {k: v for k, v in row.items() if k not in TIMINGS}
    if isinstance(out.get("solver"), dict):
        out["solver"] = {k: v for k, v in out["solver"].items() if k not in TIMINGS}
    return out


def compare(a: dict, b: dict) -> dict:
    """Keys only in one, and keys whose rows differ beyond wall times."""
    differ = [list(k) for k in sorted(a.keys() & b.keys(), key=str)
              if without_timings(a[k]) != without_timings(b[k])]
    return {"rows": len(a), "only_first": [list(k) for k in a.keys() - b.keys()],
            "only_second": [list(k) for k in b.keys() - a.keys()], "differ": differ,
            "identical": not differ and a.keys() == b.keys()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "experiments/configs/digits.toml")
    parser.add_argument("--draws", type=int, default=None, help="override draws per method")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, default=None, help="keep both results folders here")
    args = parser.parse_args(argv)
    cfg = BenchConfig.from_toml(args.config, draws=args.draws)
    report = {"config": str(args.config), "draws": cfg.draws, "workers": cfg.workers,
              "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="sweep-scheduler-") as tmp:
        root = args.keep or Path(tmp)
        folders = {}
        for scheduler in ("pool", "local"):
            folders[scheduler] = root / scheduler
            print(f"sweep on {scheduler}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            result = run_sweep(cfg, folders[scheduler], progress=True, scheduler=scheduler)
            report["runs"][scheduler] = {"seconds": time.perf_counter() - t0,
                                         "tasks": result["tasks"], "ran": result["ran"],
                                         "rows_written": result["rows_written"],
                                         "loadavg_end": os.getloadavg()}
        report["comparison"] = compare(read_rows(folders["pool"]), read_rows(folders["local"]))
    report["loadavg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "comparison"}, indent=2))
    print(json.dumps({k: v for k, v in report["comparison"].items() if k != "differ"}))
    return 0 if report["comparison"]["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
