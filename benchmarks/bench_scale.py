"""The analyst's memory and the wall times at scale (issue 31): the real system, and in process
against a baseline commit's code.

``python -m benchmarks.bench_scale`` runs the real system (:mod:`benchmarks.scale_system`): for
each size of ``--grid`` (``p:n:d``; default :data:`benchmarks.scale_system.GRID`) a setup step
writes each site's synthetic table, then the analyst (``analyst serve``) and ``p`` participants
run as processes over mutual TLS on 127.0.0.1: the wall time from the first ``participant
upload`` to ``result.json`` and to every site's ``participant predict`` of 1,000 new records,
the analyst's peak resident set (``VmHWM`` of ``/proc/<pid>/status``, read before it stops)
against the uploaded bytes, and the growth exponents over the sizes; writes
benchmarks/results/scale_system.json and .png. ``--limit MIB`` instead runs a federation whose
uploads are twice MIB with the analyst under ``RLIMIT_DATA`` = MIB and ``[model] fit = auto``,
and compares ``Z``, the alignment maps and the model with the same federation's without a limit
(fitted out of core: the same estimator); recorded under ``limit`` in the same JSON.

``--in-process`` (writes scale.json) is the first version, for each size (``p`` sites of ``n``
records, ``d`` features, AA-I-GDP with anchor noise, so GOPP, then the logistic model, every
site's gain and the leave-one-site-out refits):

1. a setup process writes the ``p`` verified upload bundles into a fresh analyst store (the
   same bundle files ``analyst serve`` commits);
2. a run process per code version opens the store as ``analyst serve`` does (which verifies
   every bundle), starts the alignment and waits for ``result.json``: once with the baseline
   commit's code (extracted with ``git archive``, imported ahead of the installed tree), once
   with this tree's.

First version, in-process: the run process is the analyst's ``Federation`` without its gRPC
server, and the uploads are written by the setup process rather than streamed over mutual TLS
(the path after the uploads is the same code). Each run process records its peak resident set
(``ru_maxrss``), its resident set just before the alignment (imports and the store's
verification done), and the peaks of its anonymous and file-backed resident memory sampled
every 10 ms from ``/proc/self/status``: file-backed pages (memory maps of the uploads and of
``z.npy``) are page cache the kernel can drop under a memory limit; anonymous pages are not.

Run: ``python -m benchmarks.bench_scale --in-process`` (writes benchmarks/results/scale.json
and .png); ``--in-process --sizes 1000 --no-plot`` for a quick check. BLAS runs one thread in
every process.

``--fit`` measures the downstream fit alone instead (writes benchmarks/results/scale_fit.json):
for each of ``--fit-rows``, a ``z.npy`` of that many rows (``D`` columns, three overlapping
classes, ``TEST_SHARE`` test rows) on disk, then one process per ``[model] fit`` mode
memory-maps it, as the analyst does, and fits the logistic model: its seconds, peak RSS, the
peak sampled anonymous RSS (the part a memory limit cannot take back) and the test balanced
accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: Sites, features, anchor rows and anchor noise of every size.
P, D, R, V = 3, 50, 100, 0.01
#: Records per site of the default run.
SIZES = (10_000, 100_000, 300_000)
#: Share of each site's records tagged for testing (the rest train; no validation rows).
TEST_SHARE = 0.2
#: One BLAS thread in every process: the machine is shared.
SINGLE_THREAD = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                  "MKL_NUM_THREADS")}


def _config(store: Path):
    from noisyanchor.analyst.config import AnalystConfig
    from noisyanchor.common.tomlconfig import TlsFiles

    tls = TlsFiles(store / "ca.pem", store / "a.pem", store / "a.key")  # never read: no server
    return AnalystConfig(federation_id="bench-scale", participants=tuple(f"s{i}" for i in
                                                                       range(P)),
                         method="aa-igdp-an", anchors=R, dim=D, sigma=0.0, v=V, reference="s0",
                         max_iter=500, tol=1e-7, output_dir=store, tls=tls)


def setup(store: Path, n: int) -> int:
    """Write the ``P`` upload bundles of ``n`` records each into a new store; their bytes."""
    from noisyanchor.analyst.federation import Federation
    from noisyanchor.analyst.storage import Store, receive_bundle
    from noisyanchor.common.splits import TEST, TRAIN
    from noisyanchor.common.wire import BundleStream, bundle_spec, iter_chunks
    from noisyanchor.participant.compute import compute_upload

    cfg = _config(store)
    fed = Federation(cfg, Store(store))
    rng = np.random.default_rng(0)
    centres = 0.2 * rng.standard_normal((3, D))  # overlapping classes: a fit that works
    for k, pid in enumerate(cfg.participants):
        y = rng.integers(0, 3, n)
        x = centres[y] + rng.standard_normal((n, D))
        tags = np.where(rng.random(n) < TEST_SHARE, TEST, TRAIN).astype("|i1")
        up, _ = compute_upload("aa-igdp-an", x, np.random.default_rng(k), shared_seed=b"s" * 32,
                               anchors=R, v=V)
        arrays = {"data": up.data, "anchor": up.anchor, "labels": y.astype("<i8"), "tags": tags}
        spec = bundle_spec(cfg.federation_id, "aa-igdp-an", arrays)
        receive_bundle(fed.store.upload_path(pid), BundleStream(spec, iter_chunks(arrays)))
    return sum(fed.store.upload_path(pid).stat().st_size for pid in cfg.participants)


class _Sampler(threading.Thread):
    """Peaks of ``RssAnon`` and ``RssFile`` (bytes), read every 10 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.01):
            for line in Path("/proc/self/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in self.peaks:
                    self.peaks[key] = max(self.peaks[key], int(value.split()[0]) * 1024)


def run(store: Path) -> dict:
    """Open the store as ``analyst serve`` does, align, fit, write the result; the memory."""
    import noisyanchor
    from noisyanchor.analyst.federation import Federation
    from noisyanchor.analyst.storage import Store

    fed = Federation(_config(store), Store(store))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sampler = _Sampler()
    sampler.start()
    start = time.perf_counter()
    fed.maybe_align()
    fed.wait()
    seconds = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    if fed.state != "done":
        raise RuntimeError(f"the analyst did not finish: {fed.status()}")
    result = json.loads((store / "result" / "result.json").read_text())
    return {"code": str(Path(noisyanchor.__file__).parent), "seconds": seconds,
            "rss_before_alignment": before,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_rss_anon_sampled": sampler.peaks["RssAnon"],
            "peak_rss_file_sampled": sampler.peaks["RssFile"],
            "balanced_accuracy": result["model"]["balanced_accuracy"],
            "contributions_matrix": result["contributions"].get("matrix")}


def fit_setup(folder: Path, n: int) -> int:
    """``z.npy`` (``n x D``, written a chunk at a time), ``labels.npy`` and ``tags.npy`` in
    ``folder``; the bytes of ``z.npy``."""
    from noisyanchor.common.chunks import row_chunks
    from noisyanchor.common.splits import TEST, TRAIN

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    centres = 0.2 * rng.standard_normal((3, D))
    y = rng.integers(0, 3, n)
    z = np.lib.format.open_memmap(folder / "z.npy", mode="w+", dtype=np.float64, shape=(n, D))
    for rows in row_chunks(n, release=z):
        z[rows] = centres[y[rows]] + rng.standard_normal((rows.stop - rows.start, D))
    z.flush()
    del z
    np.save(folder / "labels.npy", y)
    np.save(folder / "tags.npy", np.where(rng.random(n) < TEST_SHARE, TEST, TRAIN).astype("i1"))
    return (folder / "z.npy").stat().st_size


def fit_run(folder: Path, mode: str) -> dict:
    """The logistic model fitted on the memory-mapped ``z.npy`` of ``folder`` with ``[model]
    fit = mode``; the memory and the time."""
    from noisyanchor.common.downstream import fit_downstream

    z = np.load(folder / "z.npy", mmap_mode="r")
    labels, tags = np.load(folder / "labels.npy"), np.load(folder / "tags.npy")
    import sklearn.linear_model  # noqa: F401 - imported before the baseline RSS is read

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sampler = _Sampler()
    sampler.start()
    start = time.perf_counter()
    fitted = fit_downstream(z, labels, tags, fit=mode)
    seconds = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    return {"fit": mode, "estimator": type(fitted.estimator).__name__, "seconds": seconds,
            "rss_before_fit": before,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_rss_anon_sampled": sampler.peaks["RssAnon"],
            "peak_rss_file_sampled": sampler.peaks["RssFile"],
            "balanced_accuracy": fitted.utility.balanced_accuracy, "c": fitted.utility.c}


def measure_fit(n: int, work: Path) -> dict:
    """The fit of both modes on the same ``z.npy`` of ``n`` rows."""
    folder = work / f"fit-{n}"
    z_bytes = _child(["--fit-setup", str(folder), "--n", str(n)])["z_bytes"]
    runs = {}
    for mode in ("in-memory", "out-of-core"):
        runs[mode] = run = _child(["--fit-run", str(folder), "--mode", mode])
        run["added_rss_per_z_byte"] = (run["peak_rss"] - run["rss_before_fit"]) / z_bytes
        print(f"fit n={n} {mode}: {run['seconds']:.1f} s, peak RSS "
              f"{run['peak_rss'] / 2**20:.0f} MiB "
              f"(+{run['added_rss_per_z_byte']:.2f}x z.npy of {z_bytes / 2**20:.0f} MiB), "
              f"balanced accuracy {run['balanced_accuracy']:.4f}", file=sys.stderr)
    row = {"rows": n, "d": D, "z_bytes": z_bytes, "runs": runs,
            "peak_rss_ratio_out_of_core_to_in_memory":
                runs["out-of-core"]["peak_rss"] / runs["in-memory"]["peak_rss"],
            "balanced_accuracy_difference": runs["out-of-core"]["balanced_accuracy"]
                - runs["in-memory"]["balanced_accuracy"]}
    shutil.rmtree(folder)
    return row


def baseline_tree(commit: str, into: Path) -> Path:
    """The code of ``commit`` laid out as the installed package (``pyproject.toml``'s
    package-dir), importable by putting the returned folder first on ``PYTHONPATH``."""
    src = into / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                             capture_output=True).stdout
    tar = into / "code.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as fh:
        fh.extractall(src, filter="data")
    package_dir = tomllib.loads((src / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-dir"]
    site = into / "site"
    for name, folder in sorted(package_dir.items(), key=lambda kv: kv[0].count(".")):
        target = site.joinpath(*name.split("."))
        if not target.exists():  # a subpackage inside its parent's folder is already there
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(src / folder)
    return site


def _child(args: list[str], pythonpath: Path | None = None) -> dict:
    env = os.environ | SINGLE_THREAD
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    # Run as a script from outside the checkout: its folder is first on sys.path, so the
    # checkout's own noisyanchor/ folder cannot shadow the baseline's code.
    out = subprocess.run([sys.executable, __file__, *args], cwd=tempfile.gettempdir(), env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(sizes: tuple[int, ...], baseline: str, work: Path) -> list[dict]:
    """Every size: the uploads, then the baseline's run and this tree's on the same store."""
    old_code = baseline_tree(baseline, work / "baseline")
    rows = []
    for n in sizes:
        store = work / f"store-{n}"
        uploaded = _child(["--setup", str(store), "--n", str(n)])["uploaded_bytes"]
        row: dict = {"p": P, "d": D, "anchors": R, "records_per_site": n,
                     "uploaded_bytes": uploaded}
        for label, path in (("baseline", old_code), ("streamed", None)):
            shutil.rmtree(store / "result", ignore_errors=True)
            row[label] = _child(["--run", str(store)], path)
            if (path is not None) != row[label]["code"].startswith(str(path)):
                raise RuntimeError(f"the {label} run imported {row[label]['code']}")
            for key in ("peak_rss", "peak_rss_anon_sampled"):
                row[label][f"{key}_per_uploaded_byte"] = row[label][key] / uploaded
            row[label]["added_rss_per_uploaded_byte"] = (
                row[label]["peak_rss"] - row[label]["rss_before_alignment"]) / uploaded
            print(f"n={n} {label}: {row[label]['seconds']:.1f} s, peak RSS "
                  f"{row[label]['peak_rss'] / 2**20:.0f} MiB = "
                  f"{row[label]['peak_rss_per_uploaded_byte']:.2f}x the uploads "
                  f"({uploaded / 2**20:.0f} MiB)", file=sys.stderr)
        matrices = (row["baseline"].pop("contributions_matrix"),
                    row["streamed"].pop("contributions_matrix"))
        row["same_result"] = {
            "balanced_accuracy_difference": abs(row["baseline"]["balanced_accuracy"]
                                                - row["streamed"]["balanced_accuracy"]),
            "contributions_equal_to_1e-12": _close(*matrices)}
        for key in ("peak_rss", "peak_rss_anon_sampled", "seconds"):
            row[f"{key}_ratio_streamed_to_baseline"] = row["streamed"][key] / row["baseline"][key]
        rows.append(row)
        shutil.rmtree(store)
    return rows


def _close(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a == b
    return a.keys() == b.keys() and all(
        abs((a[j][k] or 0.0) - (b[j][k] or 0.0)) <= 1e-12 for j in a for k in a[j])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    mib = np.array([r["uploaded_bytes"] for r in rows]) / 2**20
    for label, style in (("baseline", "o-"), ("streamed", "s-")):
        ax.plot(mib, [r[label]["peak_rss"] / 2**20 for r in rows], style,
                label=f"{label}: peak RSS")
        ax.plot(mib, [r[label]["peak_rss_anon_sampled"] / 2**20 for r in rows], style,
                alpha=0.4, label=f"{label}: peak anonymous RSS (sampled)")
    ax.plot(mib, mib, "k:", label="1x the uploads")
    ax.set(xscale="log", yscale="log", xlabel="uploaded MiB (p = 3, d = 50)",
           ylabel="analyst MiB", title="Analyst memory, stored uploads to result")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                    help="records per site, one run each")
    ap.add_argument("--baseline", default="main",
                    help="commit whose code is the baseline (default: main)")
    ap.add_argument("--grid", nargs="+", metavar="P:N:D",
                    help="sizes of the real system's runs: sites, records per site, columns "
                         "(default: benchmarks.scale_system.GRID)")
    ap.add_argument("--limit", type=int, metavar="MIB",
                    help="run one federation of uploads twice MIB with the analyst under a "
                         "data-segment limit of MIB, against the same without a limit")
    ap.add_argument("--in-process", action="store_true",
                    help="the analyst in process, this tree vs --baseline (writes scale.json "
                         "beside --out)")
    ap.add_argument("--out", type=Path, default=RESULTS / "scale_system.json")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--setup", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--fit", action="store_true",
                    help="measure the downstream fit alone, in memory vs out of core "
                         "(writes scale_fit.json beside --out)")
    ap.add_argument("--fit-rows", type=int, nargs="+", default=[1_000_000, 3_000_000],
                    help="rows of Z for --fit, one run of each mode per value")
    ap.add_argument("--fit-setup", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--fit-run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.fit_setup:
        print(json.dumps({"z_bytes": fit_setup(args.fit_setup, args.n)}))
        return
    if args.fit_run:
        print(json.dumps(fit_run(args.fit_run, args.mode)))
        return
    if args.fit:
        with tempfile.TemporaryDirectory(prefix="bench-scale-fit-") as work:
            rows = [measure_fit(n, Path(work)) for n in args.fit_rows]
        out = args.out.with_name("scale_fit.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "what": "the logistic downstream fit alone on a memory-mapped z.npy, [model] fit = "
                    "in-memory vs out-of-core, one process each", "model": "logistic",
            "test_share": TEST_SHARE, "blas_threads": 1, "load_average_end": os.getloadavg(),
            "sizes": rows}, indent=1) + "\n")
        return
    if args.setup:
        print(json.dumps({"uploaded_bytes": setup(args.setup, args.n)}))
        return
    if args.run:
        print(json.dumps(run(args.run)))
        return
    if not args.in_process:
        system(args)
        return
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.baseline], check=True,
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
        rows = measure(tuple(args.sizes), commit, Path(work))
    report = {"what": "the analyst's peak memory from stored uploads to result.json, in "
              "process (Federation without its gRPC server; uploads written by a setup "
              "process), baseline commit vs this tree", "baseline_commit": commit,
              "method": "aa-igdp-an", "model": "logistic", "test_share": TEST_SHARE,
              "blas_threads": 1, "load_average_end": os.getloadavg(), "sizes": rows}
    out = args.out.with_name("scale.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if not args.no_plot:
        plot(rows, out.with_suffix(".png"))


def system(args: argparse.Namespace) -> None:
    """The real system's grid, or with ``--limit`` the limited analyst; merged into
    ``--out`` (each section rewritten by its own run)."""
    # Imported here: the in-process children run this file as a script, outside the package.
    from benchmarks import scale_system

    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    report["what"] = ("the real system: analyst and participants as processes over mutual "
                      "TLS on 127.0.0.1, synthetic tables (three overlapping classes, 20% test "
                      "rows), AA-I-GDP with anchor noise, logistic model, one BLAS thread a "
                      "process, 2 shared cores")
    with tempfile.TemporaryDirectory(prefix="bench-scale-system-") as work:
        if args.limit:
            report["limit"] = scale_system.measure_limit(args.limit << 20, Path(work))
        else:
            grid = (tuple(map(scale_system.parse_size, args.grid)) if args.grid
                    else scale_system.GRID)
            rows = scale_system.measure_grid(grid, Path(work))
            report["sizes"] = rows
            report["exponents"] = scale_system.exponents(rows)
            if not args.no_plot:
                scale_system.plot(rows, args.out.with_suffix(".png"))
    scale_system.save_json(args.out, report)


if __name__ == "__main__":
    main()
