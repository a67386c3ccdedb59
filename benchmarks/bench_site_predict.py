"""A site's peak memory predicting 1e4 and 1e6 new records with ``participant predict``, with
this tree's code next to a baseline commit's (issue 31, item 3).

A small synthetic federation runs once over real processes and mutual TLS (the analyst and
:data:`SITES` sites of :data:`RECORDS` records, :data:`D` columns, AA-I-GDP with anchor noise,
the logistic model); each site keeps its local-only baseline when its upload commits. Then one
site predicts CSV tables of new records (``participant predict``, a process of its own, its
peak resident set from ``/usr/bin/time``), each code version on the same state folder:

* ``first``: its first predict (1e4 records), which computes ``gain.json``: this tree's from
  the kept baseline, the baseline commit's by reading the site's table and training the
  local-only model (``gain.json`` is removed before each);
* then 1e4 and 1e6 records with ``gain.json`` kept: what every later predict costs.

The baseline commit's code is extracted with ``git archive`` and imported ahead of the
installed tree (:func:`benchmarks.bench_scale.baseline_tree`); it ignores the kept baseline.
The 1e6-record table (about 200 MB) is written to a temporary folder and deleted afterwards.

Run: ``python -m benchmarks.bench_site_predict`` (writes benchmarks/results/site_predict.json
and .png); ``--records 1000 20000 --no-plot`` for a quick check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_scale import SINGLE_THREAD, baseline_tree

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: Sites, records per site, columns and classes of the federation.
SITES, RECORDS, D, CLASSES = 2, 20_000, 20, 3
#: New records predicted (the first size also measures the first predict).
SIZES = (10_000, 1_000_000)
#: Rows written at a time into the tables of new records.
WRITE_ROWS = 50_000
TIMEOUT = 600.0
IDS = tuple(f"s{k}" for k in range(SITES))
NAMES = [f"f{j}" for j in range(D)]


def _records(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` records of :data:`D` columns around one centre per class, and their labels."""
    y = rng.integers(0, CLASSES, n)
    centres = np.random.default_rng(0).standard_normal((CLASSES, D))
    return centres[y] + rng.standard_normal((n, D)), y


def write_table(path: Path, n: int, rng: np.random.Generator, *, labels: bool) -> Path:
    """A CSV table of ``n`` records (6 decimals a value), written :data:`WRITE_ROWS` at a
    time."""
    with path.open("w") as fh:
        fh.write(",".join(NAMES + (["label"] if labels else [])) + "\n")
        for start in range(0, n, WRITE_ROWS):
            x, y = _records(rng, min(WRITE_ROWS, n - start))
            body = np.column_stack([x, y]) if labels else x
            fmt = ["%.6f"] * D + (["%d"] if labels else [])
            np.savetxt(fh, body, fmt=fmt, delimiter=",")
    return path


def federation(root: Path) -> dict[str, Path]:
    """Run the federation once; each site's config."""
    from noisyanchor.deploy.demo import wait_for_result, write_analyst, write_participant
    from noisyanchor.deploy.launch import start, stop, wait_for_port
    from noisyanchor.deploy.provision import free_port
    from noisyanchor.participant.config import load_participant_config
    from noisyanchor.participant.predict import site_model

    rng = np.random.default_rng(1)
    root.mkdir(parents=True)
    data = {pid: write_table(root / f"{pid}.csv", RECORDS, rng, labels=True) for pid in IDS}
    files = write_analyst(root, IDS, federation_id="bench", method="aa-igdp-an", anchors=4 * D,
                          dim=None, sigma=0.0, v=0.01, accept_collusion=False, data=data)
    port = free_port("127.0.0.1", start=55_000 + os.getpid() % 5_000)  # apart from the e2e's
    analyst = start(["analyst", "serve", "--config", files.analyst_config, "--port", port],
                    root / "analyst.log")
    try:
        wait_for_port(files.port_file, analyst)
        configs = {pid: write_participant(files, pid, federation_id="bench",
                                          address=f"127.0.0.1:{port}", method="aa-igdp-an",
                                          anchors=4 * D, dim=None, projection_seed=None,
                                          sigma=0.0, v=0.01, timeout=TIMEOUT) for pid in IDS}
        uploads = [start(["participant", "upload", "--config", configs[pid]],
                         root / f"{pid}-upload.log") for pid in IDS]
        for pid, proc in zip(IDS, uploads, strict=True):
            if proc.wait(TIMEOUT) != 0:
                raise RuntimeError((root / f"{pid}-upload.log").read_text())
        wait_for_result(files.store, analyst, TIMEOUT)
        for config in configs.values():  # fetched and kept: predict then needs no analyst
            site_model(load_participant_config(config))
    finally:
        stop(analyst)
    return configs


def predict_peak(config: Path, table: Path, out: Path, site: Path | None) -> dict:
    """One ``participant predict`` process (``site``: the baseline's code first on the
    path): its peak resident set (MiB) and wall time."""
    env = os.environ | SINGLE_THREAD
    if site is not None:
        env["PYTHONPATH"] = f"{site}{os.pathsep}{env.get('PYTHONPATH', '')}"
    report = out.with_suffix(".rss")
    start = time.perf_counter()
    # From outside the checkout, so its own noisyanchor/ folder cannot shadow the baseline's.
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(report), sys.executable,
                           "-m", "noisyanchor", "participant", "predict", "--config",
                           str(config), "--input", str(table), "--out", str(out), "--json"],
                          cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    out.unlink()
    return {"peak_rss_mib": int(report.read_text().split()[-1]) / 1024, "seconds": seconds,
            "records": summary["records"], "gain": summary["gain"].get("gain")}


def measure(sizes: tuple[int, ...], baseline: str, work: Path) -> list[dict]:
    """Each code version: the first predict, then every size with ``gain.json`` kept."""
    from noisyanchor.participant.config import load_participant_config
    from noisyanchor.participant.gain import GAIN_FILE

    configs = federation(work / "federation")
    config = configs[IDS[0]]
    state = load_participant_config(config).state_dir
    rng = np.random.default_rng(2)
    tables = {n: write_table(work / f"new-{n}.csv", n, rng, labels=False) for n in sizes}
    versions = {"this tree": None, f"baseline {baseline[:10]}": baseline_tree(baseline,
                                                                              work / "base")}
    rows = []
    try:
        for code, site in versions.items():
            (state / GAIN_FILE).unlink(missing_ok=True)
            first = predict_peak(config, tables[sizes[0]], work / "out.csv", site)
            rows.append({"code": code, "case": "first predict"} | first)
            print(code, rows[-1], flush=True)
            for n in sizes:
                rows.append({"code": code, "case": "gain kept"}
                            | predict_peak(config, tables[n], work / "out.csv", site))
                print(code, rows[-1], flush=True)
    finally:
        for table in tables.values():
            table.unlink(missing_ok=True)  # the 1e6-record table is never kept
    return rows


def summarise(rows: list[dict], sizes: tuple[int, ...]) -> dict:
    """Peak RSS with ``gain.json`` kept: per code version, at the largest size over that at the
    smallest; and this tree's at the largest over the baseline commit's at the smallest (what
    the straightforward path needs for few records)."""
    kept = {(r["code"], r["records"]): r["peak_rss_mib"] for r in rows
            if r["case"] == "gain kept"}
    codes = list(dict.fromkeys(r["code"] for r in rows))
    ratios = {code: kept[code, sizes[-1]] / kept[code, sizes[0]] for code in codes}
    return {"largest_over_smallest": ratios,
            "this_tree_largest_over_baseline_smallest":
                kept[codes[0], sizes[-1]] / kept[codes[-1], sizes[0]]}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    labels = [f"{r['case']}\n{r['records']:,} records" for r in rows
              if r["code"] == rows[0]["code"]]
    codes = list(dict.fromkeys(r["code"] for r in rows))
    width = 0.8 / len(codes)
    for k, code in enumerate(codes):
        peaks = [r["peak_rss_mib"] for r in rows if r["code"] == code]
        bars = ax.bar(np.arange(len(peaks)) + k * width, peaks, width, label=code)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(np.arange(len(labels)) + width * (len(codes) - 1) / 2, labels, fontsize=8)
    ax.set_ylabel("peak RSS of participant predict (MiB)")
    ax.set_title(f"A site predicting new records (d = {D}; its table: {RECORDS:,} records)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--baseline", default="4389d67",
                        help="the commit to compare with (default: before the kept baseline)")
    parser.add_argument("--out", type=Path, default=RESULTS / "site_predict.json")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    sizes = tuple(sorted(args.records))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.baseline], check=True,
                            capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="bench-site-predict-"))
    try:
        rows = measure(sizes, commit, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = summarise(rows, sizes)
    result = {"command": "python -m benchmarks.bench_site_predict "
                         + " ".join(map(str, argv or [])),
              "sites": SITES, "records_per_site": RECORDS, "d": D, "classes": CLASSES,
              "baseline_commit": commit, "rows": rows,
              "peak_rss_ratio": ratios}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(ratios, indent=2))
    if not args.no_plot:
        plot(rows, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
