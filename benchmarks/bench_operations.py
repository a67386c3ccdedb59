"""Pilot operations, timed: the scripted three-site pilot from ``provision`` to ``result.json``,
and the analyst's exit after SIGTERM during an alignment and during a Gram release.

    flock /work/bench.lock python -m benchmarks.bench_operations

Baselines, measured in the same run: the pilot without the late site (every site started
seconds apart), and SIGTERM to an idle analyst (what any shutdown costs). Writes
``benchmarks/results/operations.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import bundle_spec
from noisyanchor.deploy.demo import wait_for_result, write_analyst
from noisyanchor.deploy.launch import start, stop, wait_for_port
from noisyanchor.deploy.pilot import run_pilot
from noisyanchor.participant.client import AnalystClient
from noisyanchor.protos.v1 import release_pb2, release_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _analyst(root: Path, ids: tuple[str, ...], method: str, dim: int, anchors: int,
             extra: dict) -> tuple:
    files = write_analyst(root, ids, federation_id="bench", method=method, anchors=anchors,
                          dim=dim, sigma=None, v=None, accept_collusion=False, extra=extra)
    log = root / "analyst.log"
    proc = start(["analyst", "serve", "--config", files.analyst_config], log)
    return files, proc, log, wait_for_port(files.port_file, proc)


def _upload_all(files, port: int, n: int, dim: int, anchors: int, method: str,
                rng: np.random.Generator) -> None:
    for pid in files.participants:
        arrays = {"data": rng.standard_normal((n, dim)),
                  "anchor": rng.standard_normal((anchors, dim)),
                  "labels": rng.integers(0, 2, n).astype("<i8"),
                  "tags": (np.arange(n) % 3).astype("|i1")}
        tls = TlsFiles(files.pki.ca, *files.pki.clients[pid])
        with AnalystClient(f"127.0.0.1:{port}", tls, "localhost", "bench", 60.0) as client:
            client.send_bundle("upload", bundle_spec("bench", method, arrays), arrays)


def _sigterm(proc, log: Path) -> float:
    """Seconds from SIGTERM to the process's exit."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return time.monotonic() - began


def _wait_log(log: Path, text: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{text!r} not in {log} within {timeout:g} s")
        time.sleep(0.05)


def shutdown_idle(root: Path) -> float:
    _, proc, log, _ = _analyst(root, ("p0", "p1"), "aa-igdp", 8, 16, {})
    try:
        time.sleep(1.0)
        return _sigterm(proc, log)
    finally:
        stop(proc)


def shutdown_during_alignment(root: Path, rng: np.random.Generator) -> float:
    """Ten participants with unrelated random anchors: GOPP does not converge, the alignment
    runs until the cap (10^6 iterations) unless stopped."""
    ids = tuple(f"p{i}" for i in range(10))
    files, proc, log, port = _analyst(root, ids, "aa-igdp-an", 60, 240, {
        "solver": {"max_iter": 1_000_000, "tol": 1e-300}, "model": {"name": "none"}})
    try:
        _upload_all(files, port, 20, 60, 240, "aa-igdp-an", rng)
        _wait_log(log, "alignment started")
        time.sleep(2.0)
        return _sigterm(proc, log)
    finally:
        stop(proc)


def shutdown_during_release(root: Path, rng: np.random.Generator, n: int = 600) -> dict:
    """Three participants of ``n`` records each; a Gram release (AAP projection, up to 500
    iterations of an ``3n x 3n`` eigendecomposition) is computing when SIGTERM comes."""
    ids = ("p0", "p1", "p2")
    files, proc, log, port = _analyst(root, ids, "aa-igdp", 8, 16, {
        "privacy": {"epsilon_budget": 100.0, "delta_budget": 1e-5},
        "model": {"name": "none"}})
    try:
        _upload_all(files, port, n, 8, 16, "aa-igdp", rng)
        wait_for_result(files.store, proc, 300)
        creds = grpc.ssl_channel_credentials(files.pki.ca.read_bytes(),
                                             files.pki.clients["p0"][1].read_bytes(),
                                             files.pki.clients["p0"][0].read_bytes())
        outcome: dict = {}

        def release() -> None:
            channel = grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[
                ("grpc.ssl_target_name_override", "localhost")])
            try:
                list(release_pb2_grpc.ReleaseStub(channel).ReleaseGram(release_pb2.GramQuery(
                    federation_id="bench", epsilon=1.0, delta=1e-6, projector="aap",
                    max_iterations=500), timeout=600))
                outcome["finished"] = True
            except grpc.RpcError as err:
                outcome["status"] = err.code().name
            finally:
                channel.close()

        thread = threading.Thread(target=release)
        thread.start()
        time.sleep(5.0)  # the release is charged and projecting
        seconds = _sigterm(proc, log)
        thread.join(60)
        return {"seconds": seconds, "records": 3 * n, "client_saw": outcome}
    finally:
        stop(proc)


def main() -> None:
    """Command-line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each shutdown case")
    parser.add_argument("--late", type=float, default=60.0, help="seconds the third site is late")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/operations.json")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="bench-ops-") as tmp:
        tmp = Path(tmp)
        pilots = {}
        for name, late in (("late_site", args.late), ("baseline_no_late_site", 3.0)):
            run = run_pilot(tmp / name, _free_port(), stagger=3.0, late=late)
            pilots[name] = {"seconds": run.seconds, "exit_codes": run.exit_codes,
                            "balanced_accuracy": run.result.get("model", {}).get(
                                "balanced_accuracy")}
        idle = [shutdown_idle(tmp / f"idle{i}") for i in range(args.repeat)]
        aligning = [shutdown_during_alignment(tmp / f"align{i}", rng)
                    for i in range(args.repeat)]
        releasing = [shutdown_during_release(tmp / f"release{i}", rng)
                     for i in range(args.repeat)]
    late, base = (pilots[k]["seconds"]["result"] for k in ("late_site", "baseline_no_late_site"))
    result = {
        "benchmark": "pilot operations: provision -> result.json, SIGTERM -> exit",
        "pilot_provision_to_result_s": late, "pilot_without_late_site_s": base,
        "pilot_minus_lateness_s": late - args.late,
        "pilots": pilots,
        "sigterm_exit_s": {"idle_median": float(np.median(idle)),
                           "during_alignment_max": max(aligning),
                           "during_alignment_median": float(np.median(aligning)),
                           "during_release_max": max(r["seconds"] for r in releasing),
                           "during_release_median": float(np.median([r["seconds"]
                                                                    for r in releasing]))},
        "sigterm_over_idle": {"alignment": float(np.median(aligning) / np.median(idle)),
                              "release": float(np.median([r["seconds"] for r in releasing])
                                               / np.median(idle))},
        "runs": {"idle": idle, "alignment": aligning, "release": releasing},
        "machine": {"cpus": os.cpu_count(), "load_average_1_5_15_before": load_before,
                    "load_average_1_5_15_after": list(os.getloadavg()),
                    "blas_threads_per_process": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
                    "python": platform.python_version(), "grpcio": grpc.__version__,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs", "pilots")},
                     indent=2))


if __name__ == "__main__":
    main()
