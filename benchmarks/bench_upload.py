"""Upload throughput of the analyst over mutual TLS on loopback, next to a plain gRPC
bytes-streaming baseline in the same run, and the analyst's peak memory during the upload.

Both servers are separate processes with the same TLS credentials and the same 1 MiB messages:

* system: ``noisyanchor analyst serve``; one participant streams a ``SIZE``-byte float64 array
  (plus labels and tags) as its upload the way ``participant upload`` does (digests computed
  while sending, in the trailer); timed from the first message to the receipt, so it includes
  the participant's SHA-256, and at the analyst the incremental SHA-256, the NaN scan, the write
  to disk, fsync and rename.
* baseline: a generic gRPC stream-unary handler that only counts the bytes it receives;
* durable baseline (issue 24): the same handler, but it writes every chunk to a file as it
  arrives and fsyncs it before answering: the plain cost of a durable upload, which the system
  should be judged against (it adds the two SHA-256 passes, the NaN scan and the rename).

Peak memory is the analyst's ``VmHWM`` (peak resident set) from ``/proc/<pid>/status`` after the
upload, next to its value just before. The upload must not be held in memory several times over.

On one host both ends share the cores, so the system's extra per-byte work (SHA-256 at both
ends, the write and fsync) competes with the stream itself: the JSON records those costs measured
alone (``per_byte_costs_alone``) and the best ratio they allow on this machine's cores
(``cpu_bound``), next to every run's client and server CPU seconds, the load average at the start
and the end, and the BLAS thread settings.

Every step's CPU seconds per GiB (client and server of each stream, the system's participant and
analyst, SHA-256 and write + fsync alone) are in ``cpu_seconds_per_gib``.

Run: ``flock -x /work/bench.lock python benchmarks/bench_upload.py`` (1 GiB, writes
benchmarks/results/upload.json); ``--size-mib 64`` for a quick check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

from noisyanchor.common.blas import available_cpus, blas_settings, configure_blas
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import CHUNK_SIZE, bundle_spec
from noisyanchor.deploy.demo import write_analyst
from noisyanchor.deploy.launch import child_env, start, stop, wait_for_port
from noisyanchor.participant.client import AnalystClient

ROOT = Path(__file__).resolve().parent.parent

#: Fully qualified name of the baseline's one method.
BASELINE_METHOD = "/baseline.Bytes/Stream"

#: gRPC worker threads of the baseline server.
BASELINE_WORKERS = 4

#: Feature width of the benchmark array (rows follow from the size).
WIDTH = 128


def rss_mib(pid: int, field: str) -> float:
    """``VmHWM`` (peak) or ``VmRSS`` (current) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (every thread: gRPC's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve_baseline(port_file: Path, cert: Path, key: Path, ca: Path,
                   durable_dir: Path | None = None) -> None:
    """The baseline server: receive a bytes stream, answer with the byte count; with
    ``durable_dir``, write the chunks to a file there as they arrive and fsync it first."""
    def count(request_iterator, context):
        return str(sum(len(chunk) for chunk in request_iterator)).encode()

    def durable(request_iterator, context):
        path = durable_dir / f"upload-{time.monotonic_ns()}.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            total = 0
            for chunk in request_iterator:
                os.write(fd, chunk)
                total += len(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
            path.unlink()
        return str(total).encode()

    stream = count if durable_dir is None else durable

    handler = grpc.method_handlers_generic_handler("baseline.Bytes", {
        "Stream": grpc.stream_unary_rpc_method_handler(stream)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=BASELINE_WORKERS))
    server.add_generic_rpc_handlers((handler,))
    creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())],
                                        root_certificates=ca.read_bytes(),
                                        require_client_auth=True)
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    port_file.write_text(f"{port}\n")
    server.wait_for_termination()


def run_baseline(files, tls: TlsFiles, payload: memoryview, *, durable: bool = False) -> dict:
    """Time streaming ``payload`` in 1 MiB messages to the baseline server process (``durable``:
    the one that writes and fsyncs, in the analyst's store folder's file system)."""
    port_file = files.root / ("durable.port" if durable else "baseline.port")
    args = [sys.executable, __file__, "--serve-baseline", str(port_file),
            str(files.pki.server_cert), str(files.pki.server_key), str(files.pki.ca)]
    if durable:
        folder = files.root / "durable-baseline"
        folder.mkdir(exist_ok=True)
        args += ["--durable-dir", str(folder)]
    proc = subprocess.Popen(args, env=child_env())
    try:
        port = wait_for_port(port_file, proc)
        creds = grpc.ssl_channel_credentials(tls.ca.read_bytes(), tls.key.read_bytes(),
                                             tls.cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{port}", creds,
                                 options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
            call = ch.stream_unary(BASELINE_METHOD)
            chunks = (bytes(payload[i:i + CHUNK_SIZE])
                      for i in range(0, len(payload), CHUNK_SIZE))
            server_cpu, client_cpu = cpu_seconds(proc.pid), own_cpu_seconds()
            t0 = time.perf_counter()
            received = int(call(chunks, timeout=3600))
            seconds = time.perf_counter() - t0
            server_cpu = cpu_seconds(proc.pid) - server_cpu
            client_cpu = own_cpu_seconds() - client_cpu
        assert received == len(payload), (received, len(payload))
        return {"seconds": seconds, "mb_per_s": len(payload) / seconds / 1e6,
                "server_cpu_seconds": server_cpu, "client_cpu_seconds": client_cpu,
                "server_peak_rss_mib": rss_mib(proc.pid, "VmHWM")}
    finally:
        stop(proc)


def run_system(files, tls: TlsFiles, arrays: dict) -> dict:
    """Time one upload to an analyst process and read its peak memory."""
    analyst = start(["analyst", "serve", "--config", files.analyst_config],
                    files.root / "analyst.log")
    try:
        port = wait_for_port(files.port_file, analyst)
        spec = bundle_spec("bench", "i-gdp", arrays, digests=False)  # hashed while sending
        idle = rss_mib(analyst.pid, "VmHWM")
        analyst_cpu, client_cpu = cpu_seconds(analyst.pid), own_cpu_seconds()
        sampled = []
        done = threading.Event()

        def sample() -> None:  # current RSS during the upload, to see it stays flat
            while not done.wait(0.2):
                sampled.append(rss_mib(analyst.pid, "VmRSS"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with AnalystClient(f"127.0.0.1:{port}", tls, "localhost", "bench", 60) as client:
            t0 = time.perf_counter()
            receipt = client.send_bundle("upload", spec, arrays)
            seconds = time.perf_counter() - t0
        analyst_cpu = cpu_seconds(analyst.pid) - analyst_cpu
        client_cpu = own_cpu_seconds() - client_cpu
        done.set()
        sampler.join()
        assert not receipt.already_committed
        return {"seconds": seconds, "mb_per_s": spec.nbytes / seconds / 1e6,
                "bytes": spec.nbytes, "analyst_cpu_seconds": analyst_cpu,
                "client_cpu_seconds": client_cpu,
                "analyst_idle_peak_rss_mib": idle,
                "analyst_peak_rss_mib": rss_mib(analyst.pid, "VmHWM"),
                "analyst_max_sampled_rss_mib": max(sampled, default=idle)}
    finally:
        stop(analyst)


def component_costs(payload: memoryview, folder: Path) -> dict:
    """CPU seconds this process spends, alone, on the two per-byte costs the system adds to the
    plain stream: SHA-256 of the payload (done once by the participant and once by the analyst)
    and writing it to a file in ``folder`` with fsync (the analyst's way: 1 MiB writes, the
    written range handed to the disk every ``WRITEBACK_BYTES``)."""
    from noisyanchor.analyst.storage import WRITEBACK_BYTES

    cpu = own_cpu_seconds()
    digest = hashlib.sha256()
    for i in range(0, len(payload), CHUNK_SIZE):
        digest.update(payload[i:i + CHUNK_SIZE])
    sha = own_cpu_seconds() - cpu
    path = folder / "component-write.bin"
    cpu, began = own_cpu_seconds(), time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        flushed = 0
        for i in range(0, len(payload), CHUNK_SIZE):
            os.write(fd, payload[i:i + CHUNK_SIZE])
            end = min(i + CHUNK_SIZE, len(payload))
            if end - flushed >= WRITEBACK_BYTES:
                os.posix_fadvise(fd, flushed, end - flushed, os.POSIX_FADV_DONTNEED)
                flushed = end
        os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink()
    return {"sha256_cpu_seconds": sha, "write_fsync_cpu_seconds": own_cpu_seconds() - cpu,
            "write_fsync_wall_seconds": time.perf_counter() - began}


def cpu_per_gib(runs: list[dict], costs: dict, nbytes: int) -> dict:
    """Median CPU seconds per GiB of each step: both ends of the plain and the durable stream,
    the system's participant and analyst, and SHA-256 and write + fsync measured alone."""
    gib = nbytes / 2**30

    def med(kind: str, key: str) -> float:
        return float(np.median([r[kind][key] for r in runs])) / gib

    return {"plain_stream_client": med("baseline_plain_grpc_bytes", "client_cpu_seconds"),
            "plain_stream_server": med("baseline_plain_grpc_bytes", "server_cpu_seconds"),
            "durable_stream_client": med("baseline_durable_grpc_bytes", "client_cpu_seconds"),
            "durable_stream_server": med("baseline_durable_grpc_bytes", "server_cpu_seconds"),
            "system_participant": med("system", "client_cpu_seconds"),
            "system_analyst": med("system", "analyst_cpu_seconds"),
            "sha256_one_pass_alone": costs["sha256_cpu_seconds"] / gib,
            "write_fsync_alone": costs["write_fsync_cpu_seconds"] / gib}


def cpu_bound(runs: list[dict], costs: dict, cpus: int) -> dict:
    """The best throughput ratio the system could reach on ``cpus`` shared cores: the plain
    stream's CPU (client and server) plus two SHA-256 passes and one write, spread perfectly over
    the cores, against the plain stream's median wall time (an optimistic estimate)."""
    base = [r["baseline_plain_grpc_bytes"] for r in runs]
    base_cpu = float(np.median([b["server_cpu_seconds"] + b["client_cpu_seconds"] for b in base]))
    needed = base_cpu + 2 * costs["sha256_cpu_seconds"] + costs["write_fsync_cpu_seconds"]
    base_wall = float(np.median([b["seconds"] for b in base]))
    return {"baseline_cpu_seconds": base_cpu, "system_cpu_seconds_at_least": needed,
            "best_wall_seconds_on_these_cpus": needed / cpus,
            "best_ratio_on_these_cpus": min(1.0, base_wall / (needed / cpus))}


def main() -> None:
    """Command-line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the data array")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/upload.json")
    parser.add_argument("--serve-baseline", nargs=4, type=Path, default=None,
                        help=argparse.SUPPRESS)
    parser.add_argument("--durable-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(*args.serve_baseline, durable_dir=args.durable_dir)
        return
    configure_blas()
    load_start = list(os.getloadavg())
    rows = args.size_mib * (1 << 20) // (8 * WIDTH)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((rows, WIDTH))
    arrays = {"data": data, "labels": np.zeros(rows, dtype="<i8"),
              "tags": np.zeros(rows, dtype="|i1")}
    payload = memoryview(data.reshape(-1).view(np.uint8))
    runs = []
    for _ in range(args.repeat):  # alternate the two so both see the same machine load
        with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
            files = write_analyst(Path(tmp), ("p0", "p1"), federation_id="bench",
                                  method="i-gdp", anchors=None, dim=WIDTH, sigma=0.0, v=0.0,
                                  accept_collusion=False)
            tls = TlsFiles(files.pki.ca, *files.pki.clients["p0"])
            runs.append({"baseline_plain_grpc_bytes": run_baseline(files, tls, payload),
                         "baseline_durable_grpc_bytes": run_baseline(files, tls, payload,
                                                                     durable=True),
                         "system": run_system(files, tls, arrays)})
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
        costs = component_costs(payload, Path(tmp))
    med = {k: float(np.median([r[k]["mb_per_s"] for r in runs]))
           for k in ("system", "baseline_plain_grpc_bytes", "baseline_durable_grpc_bytes")}
    growth = max(r["system"]["analyst_peak_rss_mib"] - r["system"]["analyst_idle_peak_rss_mib"]
                 for r in runs)
    result = {
        "benchmark": "upload over mutual TLS on loopback, one participant, 1 MiB chunks",
        "size_mib": args.size_mib, "chunk_bytes": CHUNK_SIZE, "repeats": args.repeat,
        "median_mb_per_s": med,
        "system_over_baseline_throughput": med["system"] / med["baseline_plain_grpc_bytes"],
        "system_over_durable_baseline_throughput": (med["system"]
                                                    / med["baseline_durable_grpc_bytes"]),
        "cpu_seconds_per_gib": cpu_per_gib(runs, costs, len(payload)),
        "per_byte_costs_alone": costs,
        "cpu_bound": cpu_bound(runs, costs, available_cpus()),
        "analyst_peak_rss_mib": max(r["system"]["analyst_peak_rss_mib"] for r in runs),
        "analyst_peak_rss_growth_mib": growth,
        "analyst_peak_rss_growth_over_upload_size": growth / args.size_mib,
        "runs": runs,
        "machine": {"cpus": available_cpus(),
                    "load_average_1_5_15_start": load_start,
                    "load_average_1_5_15": list(os.getloadavg()),
                    "blas": blas_settings(),
                    "thread_env": {k: os.environ.get(k) for k in (
                        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GRPC_POLL_STRATEGY")},
                    "baseline_server_workers": BASELINE_WORKERS,
                    "python": platform.python_version(), "grpcio": grpc.__version__,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
