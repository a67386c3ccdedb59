"""Typed tables: what the declared public scaling does to utility and to the colluder's
reconstruction, and what the streaming table reader costs.

    flock /work/bench.lock python -m benchmarks.bench_tabular

1. **Scaling.** Three sites on the bundled breast cancer data (30 numeric columns from ~0.001 to
   ~4000) and on Fair's survey (numbers and one-hot occupations), AA-I-GDP with anchor noise at
   the default ``v``, participant 0 colluding: each run once with the schema's declared public
   scaling and once without (every number in its own unit), paired (same seed: same partition,
   keys, anchor and noise draws). Per run: the analyst's held-out balanced accuracy (logistic
   regression on ``Z``) and the colluder's strongest reconstruction of the other two sites
   (smallest relative error among every attack), as its relative error in the run's own
   encoded space and, comparable across the two, per column in the column's own unit: RMSE
   divided by the column's spread (its standard deviation over the targets' records); the
   median over columns, the largest, and the fraction of columns above 0.5. Means over the
   seeds with 95% bootstrap intervals, and of the paired differences.
2. **Reader.** A generated CSV of breast-cancer-like records (``--rows``): seconds and peak
   traced memory of :func:`common.tabular.read_table` (typed, chunked) against
   ``numpy.loadtxt`` and against the loader it replaced (every row read into a list, then one
   array of strings converted), each in the same process; memory as a multiple of the encoded
   matrix's bytes.

Writes ``benchmarks/results/tabular.json`` and ``tabular.png``; records the load and the BLAS
settings of each part (``--sections`` runs one part and keeps the other's figures).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from noisyanchor.common.blas import blas_settings, configure_blas
from noisyanchor.common.methods import DEFAULT_ANCHOR_NOISE
from noisyanchor.common.tabular import NumericColumn, read_table
from noisyanchor.experiments.datasets import bundled_table, table_schema
from noisyanchor.experiments.simulate import SimulationConfig, simulate

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "tabular.json"

#: Bundled typed tables the scaling comparison runs on.
TABLES = ("breast-cancer", "fair")

#: A column's error above this fraction of its spread is "not reconstructed".
LOST = 0.5


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def bootstrap(values, rng: np.random.Generator, resamples: int = 4000) -> dict:
    """Mean and 95% percentile-bootstrap interval of the mean of ``values``."""
    v = np.asarray(values, dtype=float)
    means = v[rng.integers(0, len(v), (resamples, len(v)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"mean": float(v.mean()), "ci95": [float(low), float(high)], "n": len(v)}


def _raw(name: str, scaled: bool):
    """``(a, b)`` per encoded column: raw = encoded * b + a (identity for one-hot columns)."""
    schema = table_schema(name, scaled=scaled)
    a, b = [], []
    for c in schema.columns:
        offset, factor = c.offset_factor if isinstance(c, NumericColumn) else (0.0, 1.0)
        a += [offset] * c.width
        b += [factor] * c.width
    return np.asarray(a), np.asarray(b)


def column_errors(x_hat: np.ndarray, x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per column, RMSE of the reconstruction in the column's own unit over the column's
    standard deviation (0: exact; about 1.4: no better than an unrelated record)."""
    raw_hat, raw = x_hat * b + a, x * b + a
    spread = raw.std(axis=0)
    return np.sqrt(np.mean((raw_hat - raw) ** 2, axis=0)) / np.where(spread > 0, spread, 1.0)


def scaling_run(name: str, scaled: bool, seed: int) -> dict:
    """One simulated federation (see the module docstring, part 1)."""
    config = SimulationConfig(dataset=name if scaled else f"{name}-unscaled",
                              method="aa-igdp-an", participants=3, colluder=0, seed=seed)
    result = simulate(config)
    summary = result.summary()
    errors = summary["attacks"]
    strongest = min(errors, key=lambda k: errors[k]["relative_error"])
    fed = result.federation
    targets = sorted(result.reconstructions[strongest])
    a, b = _raw(name, scaled)
    per_column = column_errors(
        np.vstack([result.reconstructions[strongest][t] for t in targets]),
        np.vstack([fed.working(t) for t in targets]), a, b)
    return {"seed": seed, "balanced_accuracy": summary["utility"]["balanced_accuracy"],
            "strongest_attack": strongest,
            "relative_error": errors[strongest]["relative_error"],
            "attacks": {k: v["relative_error"] for k, v in errors.items()},
            "column_error_median": float(np.median(per_column)),
            "column_error_max": float(per_column.max()),
            "columns_lost": float(np.mean(per_column > LOST)),
            "column_errors": per_column.round(4).tolist(),
            "certified": summary["solver"].get("certified"), "v": summary["v"],
            "v_pt": summary["v_pt"], "seconds": summary["seconds"]}


METRICS = ("balanced_accuracy", "relative_error", "column_error_median", "column_error_max",
           "columns_lost")


def scaling_study(seeds: int, rng: np.random.Generator) -> dict:
    """Part 1 for every table: runs, means with intervals, paired differences."""
    out: dict = {}
    for name in TABLES:
        runs = {"declared": [], "unscaled": []}
        for seed in range(seeds):
            for label, scaled in (("declared", True), ("unscaled", False)):
                runs[label].append(scaling_run(name, scaled, seed))
            d, u = runs["declared"][-1], runs["unscaled"][-1]
            print(f"{name} seed {seed}: balanced accuracy {d['balanced_accuracy']:.3f} declared "
                  f"/ {u['balanced_accuracy']:.3f} unscaled; column error median "
                  f"{d['column_error_median']:.3f} / {u['column_error_median']:.3f}", flush=True)
        summary = {label: {m: bootstrap([r[m] for r in rs], rng) for m in METRICS}
                   for label, rs in runs.items()}
        summary["difference_declared_minus_unscaled"] = {
            m: bootstrap([d[m] - u[m] for d, u in zip(runs["declared"], runs["unscaled"],
                                                      strict=True)], rng) for m in METRICS}
        table = bundled_table(name)
        schema = table_schema(name)
        out[name] = {"records": len(table.rows), "d_in": schema.width,
                     "columns": list(schema.encoded_names), "summary": summary, "runs": runs}
    return out


def _write_csv(path: Path, rows: int, rng: np.random.Generator) -> None:
    """``rows`` breast-cancer-like records: bundled rows resampled, each value jittered by 1%."""
    table = bundled_table("breast-cancer")
    x = np.array([[float(v) for v in r[:-1]] for r in table.rows])
    pick = rng.integers(0, len(x), rows)
    values = x[pick] * rng.uniform(0.99, 1.01, (rows, x.shape[1]))
    labels = [table.rows[i][-1] for i in pick]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(table.header)
        for row, label in zip(values, labels, strict=True):
            writer.writerow([f"{v:.6g}" for v in row] + [label])


def _replaced_loader(path: Path) -> np.ndarray:
    """The loader before issue 21: every row into a list, one string array, one conversion."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    return np.array(rows[1:], dtype=str)[:, :-1].astype(np.float64)


def _measure(fn, repeat: int) -> dict:
    seconds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": float(np.median(seconds)), "peak_traced_bytes": int(peak)}


def reader_study(rows: int, repeat: int, rng: np.random.Generator) -> dict:
    """Part 2 (see the module docstring)."""
    schema = table_schema("breast-cancer")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "site.csv"
        _write_csv(path, rows, rng)
        ours = read_table(path, schema)
        matrix_bytes = ours.x.nbytes
        runs = {"read_table": _measure(lambda: read_table(path, schema), repeat),
                "numpy_loadtxt": _measure(lambda: np.loadtxt(
                    path, delimiter=",", skiprows=1, usecols=range(30)), repeat),
                "replaced_loader": _measure(lambda: _replaced_loader(path), repeat)}
        file_bytes = path.stat().st_size
    for r in runs.values():
        r["peak_over_matrix"] = r["peak_traced_bytes"] / matrix_bytes
        r["megabytes_per_second"] = file_bytes / r["seconds"] / 1e6
    ours_seconds = runs["read_table"]["seconds"]
    for name in ("numpy_loadtxt", "replaced_loader"):
        runs[name]["seconds_over_read_table"] = runs[name]["seconds"] / ours_seconds
    print(f"reader, {rows} rows ({file_bytes / 1e6:.1f} MB): "
          + "; ".join(f"{k} {v['seconds']:.2f} s, peak {v['peak_over_matrix']:.2f}x the matrix"
                      for k, v in runs.items()), flush=True)
    return {"rows": rows, "columns": 30, "file_bytes": file_bytes, "matrix_bytes": matrix_bytes,
            "chunk_rows": 8192, "methods": runs}


def plot(report: dict, path: Path) -> None:
    """Bars of balanced accuracy and median column error, declared vs unscaled, with CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = (("balanced_accuracy", "held-out balanced accuracy"),
               ("column_error_median", "colluder's error per column\n(median RMSE / spread)"),
               ("columns_lost", f"columns with error > {LOST}"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(12, 3.8))
    for ax, (metric, title) in zip(axes, metrics, strict=True):
        for k, name in enumerate(TABLES):
            for j, label in enumerate(("declared", "unscaled")):
                s = report["scaling"][name]["summary"][label][metric]
                x = k + (j - 0.5) * 0.35
                ax.bar(x, s["mean"], 0.35, color=("tab:blue", "tab:orange")[j],
                       label=("declared public scaling", "no scaling (own units)")[j]
                       if k == 0 else None)
                ax.errorbar(x, s["mean"], yerr=[[s["mean"] - s["ci95"][0]],
                                                [s["ci95"][1] - s["mean"]]], color="k",
                            capsize=3)
        ax.set_xticks(range(len(TABLES)), TABLES)
        ax.set_title(title, fontsize=10)
        if metric == "column_error_median":
            ax.set_yscale("log")  # from a few percent of a column's spread to ten times it
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"three sites, aa-igdp-an, v = {DEFAULT_ANCHOR_NOISE}, "
                 f"{report['seeds']} paired seeds (95% bootstrap intervals)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="paired runs per table")
    parser.add_argument("--rows", type=int, default=200_000, help="records of the reader run")
    parser.add_argument("--repeat", type=int, default=3, help="timed reads per method")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="1 seed, 2,000 rows (a test)")
    parser.add_argument("--sections", default="scaling,reader",
                        help="comma-separated parts to run; the others are kept from --out "
                        "(the reader's timing needs the benchmark lock, the scaling does not)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.rows, args.repeat = 1, 2000, 1
    sections = set(args.sections.split(","))
    if not sections <= {"scaling", "reader"}:
        parser.error(f"unknown --sections {args.sections!r}")
    configure_blas(announce=False)
    rng = np.random.default_rng(2026)
    report = json.loads(args.out.read_text()) if args.out.is_file() and sections != {
        "scaling", "reader"} else {}
    for section in sorted(sections):
        meta = {"loadavg_start": _load(), "cpus": os.cpu_count(), "blas": blas_settings(),
                "v": DEFAULT_ANCHOR_NOISE, "method": "aa-igdp-an", "participants": 3,
                "colluder": 0}
        started = time.perf_counter()
        if section == "scaling":
            report["seeds"] = args.seeds
            report["scaling"] = scaling_study(args.seeds, rng)
        else:
            report["reader"] = reader_study(args.rows, args.repeat, rng)
        meta["loadavg_end"] = _load()
        meta["seconds"] = time.perf_counter() - started
        report.setdefault("meta", {})[section] = meta
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    if "scaling" in report:
        plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out}" + (f" and {args.out.with_suffix('.png')}" if "scaling" in report
                                  else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
