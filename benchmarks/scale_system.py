"""One federation of real processes for ``benchmarks/bench_scale.py``: the analyst (``analyst
serve``) and ``p`` participants over mutual TLS on 127.0.0.1, synthetic tables written by a setup
step; the wall times from the first upload to ``result.json`` and to every site's prediction,
and the analyst's memory sampled from ``/proc/<pid>/status`` (issue 31).

The analyst may run under a limit on its data segment (``RLIMIT_DATA``, what ``prlimit --data``
sets): since Linux 4.7 it bounds the process's private writable memory (heap, anonymous maps)
and not its shared file-backed maps, the uploads' and ``z.npy``'s, whose pages the kernel takes
back when it needs them. ``RLIMIT_AS`` would count those maps too (a limit on address space, not
on memory), and no cgroup of this host is the benchmark's to create.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Anchor rows per column, anchor noise and the share of each site's records tagged for testing.
ANCHORS_PER_D, V, TEST_SHARE = 2, 0.01, 0.2
#: New records each site predicts once the model is fitted.
PREDICT_ROWS = 1_000
#: Seconds any one step may take.
TIMEOUT = 3_600.0
#: Status fields sampled (bytes): resident set, its anonymous and file-backed parts, the data
#: segment that ``RLIMIT_DATA`` bounds.
FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmData")


@dataclass(frozen=True)
class Size:
    """``p`` sites of ``n`` records, ``d`` columns."""

    p: int
    n: int
    d: int


def site_ids(p: int) -> tuple[str, ...]:
    return tuple(f"s{k:02d}" for k in range(p))


def write_tables(folder: Path, size: Size) -> tuple[dict[str, Path], dict[str, Path]]:
    """Each site's table (``.npz``: ``x`` of ``n x d`` around three overlapping class centres,
    ``labels``, ``tags``) and its :data:`PREDICT_ROWS` new records (``.npy``), one site at a
    time (the setup step)."""
    folder.mkdir(parents=True, exist_ok=True)
    from noisyanchor.common.splits import TEST, TRAIN

    centres = 0.2 * np.random.default_rng(0).standard_normal((3, size.d))
    tables, new = {}, {}
    for k, pid in enumerate(site_ids(size.p)):
        rng = np.random.default_rng(1 + k)
        y = rng.integers(0, 3, size.n)
        x = centres[y]
        x += rng.standard_normal(x.shape)
        tags = np.where(rng.random(size.n) < TEST_SHARE, TEST, TRAIN).astype("i1")
        tables[pid] = folder / f"{pid}.npz"
        np.savez(tables[pid], x=x, labels=y, tags=tags)
        del x
        new[pid] = folder / f"{pid}-new.npy"
        np.save(new[pid], centres[rng.integers(0, 3, PREDICT_ROWS)]
                + rng.standard_normal((PREDICT_ROWS, size.d)))
    return tables, new


class StatusSampler(threading.Thread):
    """Peaks of :data:`FIELDS` of process ``pid``, read from ``/proc/<pid>/status`` every
    ``every`` seconds until stopped; ``VmHWM`` (the kernel's own peak of the resident set) read
    on request."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.path, self.every = Path(f"/proc/{pid}/status"), every
        self.peaks = dict.fromkeys(FIELDS, 0)
        self.halt = threading.Event()

    def read(self) -> dict[str, int]:
        """The status fields of the process now, in bytes (empty once it is gone)."""
        try:
            text = self.path.read_text()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[key] = int(value.split()[0]) * 1024
        return out

    def run(self) -> None:
        while not self.halt.wait(self.every):
            now = self.read()
            for key in FIELDS:
                self.peaks[key] = max(self.peaks[key], now.get(key, 0))


def _start_analyst(config: Path, port: int, log: Path, data_limit: int | None
                   ) -> subprocess.Popen:
    """``analyst serve`` as :func:`deploy.launch.start` starts it, under ``RLIMIT_DATA`` =
    ``data_limit`` bytes when given."""
    from noisyanchor.deploy.launch import child_env

    def limit() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))

    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "noisyanchor", "analyst", "serve",
                                 "--config", str(config), "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, env=child_env(),
                                preexec_fn=limit if data_limit else None)


def _wait_all(procs: dict[str, subprocess.Popen], root: Path, what: str) -> dict[str, float]:
    """Wait for every process; the time each ended (``perf_counter``); a failure names its log."""
    ended = {}
    pending = dict(procs)
    deadline = time.monotonic() + TIMEOUT
    while pending:
        for pid, proc in list(pending.items()):
            if proc.poll() is not None:
                ended[pid] = time.perf_counter()
                if proc.returncode != 0:
                    raise RuntimeError(f"{what} of {pid} failed: "
                                       f"{(root / f'{pid}-{what}.log').read_text()[-1500:]}")
                del pending[pid]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not end within {TIMEOUT:g} s: {sorted(pending)}")
        time.sleep(0.05)
    return ended


def run_federation(root: Path, size: Size, *, fit: str = "auto",
                   data_limit: int | None = None, keep: tuple[str, ...] = (),
                   extra_model: dict | None = None) -> dict:
    """Run one federation of ``size`` in ``root`` (tables, kits, store; removed afterwards but
    for the store's result files named in ``keep``, copied to ``root/kept``); its timings and
    the analyst's memory.

    ``fit`` is the analyst's ``[model] fit``, ``extra_model`` more ``[model]`` keys;
    ``data_limit`` its ``RLIMIT_DATA`` (bytes).
    """
    from noisyanchor.deploy.demo import wait_for_result, write_analyst, write_participant
    from noisyanchor.deploy.launch import start, stop, wait_for_port
    from noisyanchor.deploy.provision import free_port

    ids = site_ids(size.p)
    anchors = ANCHORS_PER_D * size.d
    started = time.perf_counter()
    tables, new = write_tables(root / "data", size)
    setup_seconds = time.perf_counter() - started
    files = write_analyst(root, ids, federation_id="bench-scale", method="aa-igdp-an",
                          anchors=anchors, dim=None, sigma=0.0, v=V, accept_collusion=False,
                          data=tables, extra={"model": {"name": "logistic", "fit": fit}
                                 | (extra_model or {})})
    port = free_port("127.0.0.1", start=56_000 + os.getpid() % 4_000)  # apart from the e2e's
    analyst = _start_analyst(files.analyst_config, port, root / "analyst.log", data_limit)
    procs: list[subprocess.Popen] = [analyst]
    sampler = StatusSampler(analyst.pid)
    try:
        wait_for_port(files.port_file, analyst)
        idle = sampler.read()
        sampler.start()
        configs = {pid: write_participant(
            files, pid, federation_id="bench-scale", address=f"127.0.0.1:{port}",
            method="aa-igdp-an", anchors=anchors, dim=None, projection_seed=None, sigma=0.0, v=V,
            seed=11 + k, anchor_seed=b"a" * 32 if k == 0 else None, timeout=TIMEOUT)
            for k, pid in enumerate(ids)}
        t0 = time.perf_counter()
        uploads = {pid: start(["participant", "upload", "--config", cfg],
                              root / f"{pid}-upload.log") for pid, cfg in configs.items()}
        procs += uploads.values()
        uploaded = _wait_all(uploads, root, "upload")
        result = wait_for_result(files.store, analyst, TIMEOUT, root / "analyst.log")
        t_result = time.perf_counter()
        predicts = {pid: start(["participant", "predict", "--config", configs[pid], "--input",
                                new[pid], "--out", root / f"{pid}-predicted.csv"],
                               root / f"{pid}-predict.log") for pid in ids}
        procs += predicts.values()
        predicted = _wait_all(predicts, root, "predict")
        end = sampler.read()
    finally:
        sampler.halt.set()
        for proc in procs:
            stop(proc)
    uploaded_bytes = sum(files.store.joinpath("uploads", f"{pid}.bundle").stat().st_size
                         for pid in ids)
    kept = root / "kept"
    kept.mkdir()
    for name in keep:
        shutil.copy(files.store / "result" / name, kept / name)
    for item in root.iterdir():
        if item != kept:
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    peak = end.get("VmHWM", 0)
    return {"p": size.p, "records_per_site": size.n, "d": size.d, "anchors": anchors,
            "fit": fit, "data_limit_bytes": data_limit, "uploaded_bytes": uploaded_bytes,
            "setup_seconds": setup_seconds,
            "seconds_to_last_upload": max(uploaded.values()) - t0,
            "seconds_to_result": t_result - t0,
            "seconds_to_every_prediction": max(predicted.values()) - t0,
            "analyst_peak_rss": peak, "analyst_peak_rss_per_uploaded_byte": peak / uploaded_bytes,
            "analyst_rss_idle": idle.get("VmRSS", 0),
            "analyst_peak_sampled": {k.lower(): v for k, v in sampler.peaks.items()},
            "model_fit": result["model"].get("fit"),
            "balanced_accuracy": result["model"]["balanced_accuracy"],
            "load_average": os.getloadavg()}


def save_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")


#: The default grid (issue 31): p = 3 at 1e4..1e6 records per site (d = 50), d = 500 at 1e5,
#: p = 10 at 1e4 and 1e5, p = 30 at 1e4; about 35 min on 2 shared cores.
GRID = (Size(3, 10_000, 50), Size(3, 100_000, 50), Size(3, 1_000_000, 50),
        Size(3, 100_000, 500), Size(10, 10_000, 50), Size(10, 100_000, 50),
        Size(30, 10_000, 50))
#: Wall times and memory whose growth is fitted, over each family of sizes.
GROWN = ("seconds_to_result", "seconds_to_every_prediction", "analyst_peak_rss")


def parse_size(text: str) -> Size:
    """``p:n:d`` (sites, records per site, columns)."""
    try:
        p, n, d = (int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"a size is p:n:d (e.g. 3:10000:50), got {text!r}") from None
    return Size(p, n, d)


def exponents(rows: list[dict]) -> dict[str, dict]:
    """Least-squares slopes of ``log y`` on ``log x`` for each of :data:`GROWN`: over records
    per site (p and d fixed), over sites (n and d fixed) and over columns (p and n fixed),
    wherever at least two sizes differ only there."""
    out: dict[str, dict] = {}
    for vary, fixed in (("records_per_site", ("p", "d")), ("p", ("records_per_site", "d")),
                        ("d", ("p", "records_per_site"))):
        families: dict[tuple, list[dict]] = {}
        for row in rows:
            families.setdefault(tuple(row[k] for k in fixed), []).append(row)
        for key, family in families.items():
            if len({r[vary] for r in family}) < 2:
                continue
            x = np.log([r[vary] for r in family])
            label = f"over {vary} at " + ", ".join(f"{k} = {v}" for k, v in zip(fixed, key,
                                                                                strict=True))
            out[label] = {y: float(np.polyfit(x, np.log([r[y] for r in family]), 1)[0])
                          for y in GROWN} | {vary: sorted({r[vary] for r in family})}
    return out


def measure_grid(sizes: tuple[Size, ...], work: Path) -> list[dict]:
    """One federation per size, one after the other; the rows as they come (printed)."""
    rows = []
    for size in sizes:
        row = run_federation(work / f"fed-{size.p}-{size.n}-{size.d}", size)
        rows.append(row)
        print(f"p={size.p} n={size.n} d={size.d}: result {row['seconds_to_result']:.1f} s, "
              f"predictions {row['seconds_to_every_prediction']:.1f} s, analyst peak "
              f"{row['analyst_peak_rss'] / 2**20:.0f} MiB = "
              f"{row['analyst_peak_rss_per_uploaded_byte']:.2f}x the uploads "
              f"({row['uploaded_bytes'] / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
    return rows


#: Result files compared between the limited analyst and the one without a limit.
COMPARED = ("z.npy", "rotations.npy", "means.npy", "shift.npy")


def measure_limit(limit: int, work: Path, d: int = 50, p: int = 3) -> dict:
    """A federation whose uploads are twice ``limit`` bytes, its analyst under ``RLIMIT_DATA``
    = ``limit`` with ``[model] fit = auto``, against the same federation without a limit fitted
    out of core (the same estimator): the largest differences of ``Z``, the alignment maps and
    the model's arrays. Contributions are off (``contributions_max_sites = 0``): one fit."""
    from noisyanchor.analyst.site_models import MODEL_FILE
    from noisyanchor.common.models.classifiers import load_model

    n = -(-2 * limit // (p * (8 * d + 9)))  # 8 d bytes of data, a label and a tag per record
    size, runs, arrays = Size(p, n, d), {}, {}
    for label, fit, data_limit in (("limited", "auto", limit),
                                   ("unlimited", "out-of-core", None)):
        root = work / label
        runs[label] = run_federation(root, size, fit=fit, data_limit=data_limit,
                                     keep=(*COMPARED, MODEL_FILE),
                                     extra_model={"contributions_max_sites": 0})
        model = load_model((root / "kept" / MODEL_FILE).read_bytes())
        arrays[label] = {name: np.load(root / "kept" / name, mmap_mode="r") for name in COMPARED}
        arrays[label] |= {f"model {k}": np.asarray(v) for k, v in model.to_arrays()[1].items()}
        print(f"{label}: {runs[label]['model_fit']} fit, result "
              f"{runs[label]['seconds_to_result']:.1f} s, analyst peak "
              f"{runs[label]['analyst_peak_rss'] / 2**20:.0f} MiB, data segment "
              f"{runs[label]['analyst_peak_sampled']['vmdata'] / 2**20:.0f} MiB",
              file=sys.stderr, flush=True)
    differences = {name: _largest_difference(arrays["limited"][name], arrays["unlimited"][name])
                   for name in arrays["limited"]}
    # The models compare only when both ran the same estimator (auto may stay in memory).
    same = runs["limited"]["model_fit"] == runs["unlimited"]["model_fit"]
    return {"data_limit_bytes": limit, "uploaded_bytes": runs["limited"]["uploaded_bytes"],
            "uploads_per_limit": runs["limited"]["uploaded_bytes"] / limit, "runs": runs,
            "largest_differences": differences, "same_estimator": same,
            "equal_to_1e-9": all(v <= 1e-9 for name, v in differences.items()
                                 if same or not name.startswith("model "))}


def _largest_difference(a: np.ndarray, b: np.ndarray) -> float:
    """``max |a - b|``, a chunk of rows at a time (``Z`` is larger than the memory)."""
    from noisyanchor.common.chunks import row_chunks

    if a.shape != b.shape:
        return float("inf")
    if a.ndim == 0 or len(a) == 0:
        return float(np.max(np.abs(a - b), initial=0.0))
    return max(float(np.max(np.abs(a[rows] - b[rows]), initial=0.0))
               for rows in row_chunks(len(a)))


def plot(rows: list[dict], path: Path) -> None:
    """Analyst peak RSS against the uploads, and the wall times, for every size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, wall) = plt.subplots(1, 2, figsize=(9, 3.8))
    up = np.array([r["uploaded_bytes"] for r in rows]) / 2**20
    peak = np.array([r["analyst_peak_rss"] for r in rows]) / 2**20
    labels = [f"p={r['p']} n={r['records_per_site']:.0e} d={r['d']}" for r in rows]
    for x, y, label in zip(up, peak, labels, strict=True):
        mem.loglog(x, y, "o")
        mem.annotate(label, (x, y), fontsize=6)
    line = np.array([up.min(), up.max()])
    mem.loglog(line, line, "k:", label="1x the uploads")
    mem.loglog(line, 1.5 * line, "r--", label="1.5x (floor at 1e6 records per site)")
    mem.set(xlabel="uploaded MiB", ylabel="analyst peak RSS (MiB)")
    mem.legend(fontsize=7)
    families: dict[tuple[int, int], list[int]] = {}
    for k in np.argsort(up):
        families.setdefault((rows[k]["p"], rows[k]["d"]), []).append(int(k))
    for (p, d), members in families.items():
        for key, style in (("seconds_to_result", "s-"), ("seconds_to_every_prediction", "^--")):
            wall.loglog(up[members], [rows[k][key] for k in members], style,
                        label=f"p={p} d={d}: {key.replace('seconds_to_', 'to ').replace('_', ' ')}")
    wall.set(xlabel="uploaded MiB", ylabel="seconds from the first upload")
    wall.legend(fontsize=6)
    fig.suptitle("A federation of processes over mutual TLS, 2 shared cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
