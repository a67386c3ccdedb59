"""One protocol, two transports (issue 32): the 3-site federation's wall time and bytes over
noisyanchor's gRPC service and over the Flower app on Flower's simulation engine, and the
Flower simulation demo at 10, 30 and 100 virtual sites.

* transports: three sites of synthetic float64 records (``d = 16`` columns, as many rows as
  make ``--sizes-mib`` MiB per site), method aa-igdp-an, no downstream model (the transports
  and the alignment are timed, not a fit). gRPC: the analyst process is started first, then
  the three ``participant upload`` processes; timed from starting them to ``result.json``.
  Flower: :func:`deploy.flower_sim.simulate` from its call to its return (Ray's start
  included, measured alone as ``ray_start_seconds``). Bytes: the uploads' bundle bytes (the
  same over both), and for Flower every message's content both ways as the ServerApp counted it.
* scale: ``noisyanchor demo --transport flower --participants N`` (digits, seed 3): the
  demo's own seconds (federation, every site's offline prediction, the summary).

Run: ``flock -x /work/bench.lock python benchmarks/bench_flower.py`` (writes
benchmarks/results/flower.json and flower.png); ``--sizes-mib 1 --sites 10`` for a quick check.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from noisyanchor.common.splits import split_tags
from noisyanchor.deploy.demo import (
    participant_ids,
    run_demo,
    wait_for_result,
    write_analyst,
    write_participant,
)
from noisyanchor.deploy.launch import start, stop, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
SITES, D, SEED = 3, 16, 3


def _federation(root: Path, mib: float, address_of) -> tuple[Path, dict[str, Path]]:
    """The synthetic 3-site federation under ``root``: the analyst's config and the kits
    (``address_of(files)`` names the analyst in them)."""
    rng = np.random.default_rng(SEED)
    ids = participant_ids(SITES)
    rows = max(8, int(mib * 2**20 / (D * 8)))
    data = {}
    for pid in ids:
        x = rng.standard_normal((rows, D))
        labels = (x[:, 0] > 0).astype(np.int64)
        data[pid] = root / "data" / f"{pid}.npz"
        data[pid].parent.mkdir(parents=True, exist_ok=True)
        np.savez(data[pid], x=x, labels=labels, tags=split_tags(labels, rng))
    files = write_analyst(root, ids, federation_id="bench", method="aa-igdp-an", anchors=None,
                          dim=None, sigma=None, v=0.02, accept_collusion=False, data=data,
                          extra={"model": {"name": "none"},
                                 "server": {"max_upload_bytes": 2**40}})
    address = address_of(files)
    kits = {pid: write_participant(files, pid, federation_id="bench", address=address,
                                   method="aa-igdp-an", anchors=None, dim=None,
                                   projection_seed=None, sigma=0.0, v=0.02, seed=SEED + i,
                                   anchor_seed=bytes(32) if i == 0 else None, timeout=1800.0)
            for i, pid in enumerate(ids)}
    return files.analyst_config, kits


def _upload_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "uploads").glob("*.bundle"))


def grpc_run(root: Path, mib: float) -> dict:
    """The federation over gRPC: analyst and sites as processes over mutual TLS."""
    holder: dict = {}

    def address(files) -> str:
        holder["files"] = files
        holder["analyst"] = start(["analyst", "serve", "--config", files.analyst_config],
                                  root / "analyst.log")
        return f"127.0.0.1:{wait_for_port(files.port_file, holder['analyst'])}"

    _, kits = _federation(root, mib, address)
    files, procs = holder["files"], [holder["analyst"]]
    try:
        began = time.perf_counter()
        procs += [start(["participant", "upload", "--config", kit], root / f"{pid}.log")
                  for pid, kit in kits.items()]
        wait_for_result(files.store, holder["analyst"], 3600.0, root / "analyst.log")
        seconds = time.perf_counter() - began
    finally:
        for proc in procs:
            stop(proc)
    return {"seconds": seconds, "upload_bytes": _upload_bytes(files.store)}


def flower_run(root: Path, mib: float) -> dict:
    """The federation on Flower's simulation engine (the ServerApp in this process)."""
    from noisyanchor.deploy.flower_sim import simulate

    analyst, kits = _federation(root, mib, lambda files: "flower-superlink")
    run = simulate(analyst, list(kits.values()), reply_timeout=3600.0)
    store = analyst.parent / "store"
    return {"seconds": run.seconds, "upload_bytes": _upload_bytes(store),
            "message_bytes_sent": run.sent_bytes, "message_bytes_received": run.received_bytes}


def ray_start_seconds() -> float:
    """Ray's start and stop alone, as the simulation makes them (one CPU per site's app)."""
    import ray

    from noisyanchor.deploy.flower_sim import backend_config

    began = time.perf_counter()
    ray.init(**backend_config(2)["init_args"])
    ray.shutdown()
    return time.perf_counter() - began


def scale_run(root: Path, sites: int) -> dict:
    """``noisyanchor demo --transport flower --participants sites``."""
    s = run_demo(participants=sites, colluder=None, seed=SEED, workdir=root,
                 transport="flower")
    return {"sites": sites, "seconds": s["seconds"], "z_matches_inprocess":
            s["z_matches_inprocess"], "balanced_accuracy": s["utility"]["balanced_accuracy"],
            "certified": s["solver"].get("certified")}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [r["mib_per_site"] for r in results["transports"]]
    width = 0.35
    xs = np.arange(len(sizes))
    for k, name in enumerate(("grpc", "flower")):
        left.bar(xs + (k - 0.5) * width, [r[name]["seconds"] for r in results["transports"]],
                 width, label=name)
    left.set_xticks(xs, [f"{s:g} MiB" for s in sizes])
    left.set_ylabel("wall time (s)")
    left.set_title("3 sites, per-site upload size")
    left.legend()
    scale = results["scale"]
    right.plot([r["sites"] for r in scale], [r["seconds"] for r in scale], "o-")
    right.set_xlabel("virtual sites")
    right.set_ylabel("demo wall time (s)")
    right.set_title("demo --transport flower")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=[1.0, 200.0])
    parser.add_argument("--sites", type=int, nargs="+", default=[10, 30, 100])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                        "flower.json")
    args = parser.parse_args()
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                              "load_at_start": os.getloadavg()},
                     "ray_start_seconds": ray_start_seconds(), "transports": [], "scale": []}
    with tempfile.TemporaryDirectory() as tmp:
        for mib in args.sizes_mib:
            row = {"mib_per_site": mib}
            for name, run in (("grpc", grpc_run), ("flower", flower_run)):
                row[name] = run(Path(tmp) / f"{name}-{mib:g}", mib)
                print(name, mib, row[name], flush=True)
            results["transports"].append(row)
        for sites in args.sites:
            results["scale"].append(scale_run(Path(tmp) / f"scale-{sites}", sites))
            print(results["scale"][-1], flush=True)
    results["host"]["load_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
