"""Honest participants against one analyst under hostile streams (issue 9, "Must show"): the
scenario shared by the e2e load test (``tests/e2e/test_e2e_hostile_load.py``, small) and the
benchmark (``benchmarks/bench_hostile.py``, the issue's full size).

One real analyst process over mutual TLS on 127.0.0.1, its config at the defaults but for a
``[privacy]`` budget. Participants: ``honest`` ones (``h..``), which upload and poll Status from
this process, and ``insiders`` (``x..``), participants of the same federation that attack; plus
``outsiders`` (``o..``), certificates the federation CA signed for non-participants. The hostile
clients run in separate OS processes (``python -m benchmarks.hostile_scenario SPEC.json``), each
stream in its own thread on its own connection, re-opened whenever the analyst ends it:

1. Uploads phase: every insider holds ``streams_per_insider`` upload streams (one more than the
   per-caller cap by default), each ``silent`` (nothing sent), ``zero`` (a header, then a
   zero-byte chunk every 0.5 s) or ``slow`` (a header, then 16 bytes every second); outsiders
   hold silent streams. Meanwhile the honest participants upload, staggered over the window
   (each phase's window starts once the hostile processes have started their streams: on a
   loaded machine their start-up alone takes seconds).
   Then the insiders upload for real and the federation aligns.
2. Releases phase: every insider pays for one Gram release, and its streams turn into
   ``stopped`` readers (FetchGram, one message read, then never another; a new stream every
  :data:`STOPPED_HOLD` seconds); outsiders go on.

Throughout, one honest participant after another calls Status every 0.1 s on its own kept
connection (the latency of each call is recorded), and the analyst's resident memory is read
from ``/proc/<pid>/status`` (VmRSS every 0.2 s, VmHWM at the end). With ``hostile=False`` the
same federation runs without the hostile processes (the insiders upload and release honestly):
the baseline the benchmark divides by.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
import numpy as np

from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.common.errors import NoisyAnchorError
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import bundle_header, bundle_spec, iter_chunks
from noisyanchor.deploy.demo import write_analyst
from noisyanchor.deploy.launch import child_env, start, stop, wait_for_port
from noisyanchor.participant.client import AnalystClient
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc
from noisyanchor.protos.v1 import release_pb2, release_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
FEDERATION = "hostile"
METHOD = "aa-igdp"
#: Upload-phase kinds of the insiders' streams, in turn.
UPLOAD_KINDS = ("silent", "zero", "slow")

#: ``[server] max_connections_per_address`` of the scenario's analyst: every participant and
#: attacker here shares 127.0.0.1.
ONE_ADDRESS_CONNECTIONS = 4096
#: Request id of each insider's paid Gram release (what its stopped readers fetch).
HELD_RELEASE = "held"
#: Seconds a hostile stream waits before it is opened again after a refusal.
REFUSED_BACKOFF = 1.0
#: Seconds a stopped reader holds its stream before it opens another.
STOPPED_HOLD = 5.0
#: Seconds between two honest Status calls, and between two memory samples.
STATUS_PERIOD, RSS_PERIOD = 0.1, 0.2


@dataclass(frozen=True)
class HostileMix:
    """Size of the scenario.

    Attributes
    ----------
    honest : int
        Honest participants (each uploads ``rows`` records once).
    insiders : int
        Hostile participants of the federation.
    streams_per_insider : int
        Streams each insider holds (or tries to) at once.
    outsiders : int
        Non-participant certificates of the federation CA.
    outsider_streams : int
        Silent streams the outsiders hold together.
    rows, dim, anchors : int
        Records per participant ``n_i``, width ``d`` and anchor rows ``r``; the Gram matrix
        every stopped reader fetches is ``n x n`` for ``n = (honest + insiders) rows``.
    window : float
        Seconds each phase is measured under attack.
    """

    honest: int
    insiders: int
    streams_per_insider: int
    outsiders: int
    outsider_streams: int
    rows: int = 12
    dim: int = 8
    anchors: int = 16
    window: float = 20.0

    @property
    def hostile_streams(self) -> int:
        """Hostile streams attempted at once."""
        return self.insiders * self.streams_per_insider + self.outsider_streams

    def ids(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """``(honest, insiders, outsiders)`` certificate names."""
        return (tuple(f"h{i:02d}" for i in range(self.honest)),
                tuple(f"x{i:02d}" for i in range(self.insiders)),
                tuple(f"o{i:02d}" for i in range(self.outsiders)))


@dataclass
class ScenarioReport:
    """What one run measured (latencies in seconds, memory in MiB; ``*_samples`` are
    ``(seconds since the sampling began, value)``)."""

    hostile: bool
    mix: dict
    limits: dict
    state: str = ""
    committed: list[str] = field(default_factory=list)
    status_latency: dict[str, list[float]] = field(default_factory=dict)
    status_errors: dict[str, list[str]] = field(default_factory=dict)
    upload_latency: list[float] = field(default_factory=list)
    rss_before_mib: float = 0.0
    rss_peak_mib: float = 0.0
    hwm_mib: float = 0.0
    rss_samples: list[tuple[float, float]] = field(default_factory=list)
    status_samples: list[tuple[float, float]] = field(default_factory=list)
    hostile_outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def rss_growth_mib(self) -> float:
        """Peak resident memory during the run minus before it (the attack's cost)."""
        return self.rss_peak_mib - self.rss_before_mib

    def status_all(self) -> list[float]:
        """Every honest Status latency of both phases."""
        return [s for phase in self.status_latency.values() for s in phase]

    def to_json(self) -> dict:
        """The report with summary percentiles (``status_latency``: calls per phase)."""
        out = asdict(self)
        # Each latency is in status_samples already (with its time); only the counts here.
        out["status_latency"] = {phase: len(v) for phase, v in self.status_latency.items()}
        out["rss_growth_mib"] = self.rss_growth_mib
        out["summary"] = {
            "status_p50_s": percentile(self.status_all(), 50),
            "status_p99_s": percentile(self.status_all(), 99),
            "status_max_s": max(self.status_all(), default=float("nan")),
            "status_calls": len(self.status_all()),
            "status_errors": sum(len(v) for v in self.status_errors.values()),
            "upload_p50_s": percentile(self.upload_latency, 50),
            "upload_p99_s": percentile(self.upload_latency, 99),
            **{f"status_p99_{phase}_s": percentile(v, 99)
               for phase, v in self.status_latency.items()}}
        return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (NaN for no values)."""
    return float(np.percentile(values, q)) if values else float("nan")


def memory_mib(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` (peak resident) of process ``pid``, in MiB."""
    fields_ = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields_[key] = int(value.split()[0]) / 1024
    return fields_


def aligned_uploads(rng: np.random.Generator, ids: tuple[str, ...], rows: int, dim: int,
                    anchors: int) -> dict[str, dict[str, np.ndarray]]:
    """Uploads as participants make them: one shared anchor ``A`` (``r x d``) and each
    participant's records ``X_i`` under its own rotation ``Q_i`` and translation ``t_i``
    (``A Q_i + t_i``, ``X_i Q_i + t_i``), so the alignment converges at once. ``A`` has the
    protocol's form (centred, orthonormal columns: :func:`common.gdp.make_anchor`), so the
    analyst's screening passes every upload."""
    from noisyanchor.common.gdp import make_anchor

    anchor = make_anchor(anchors, dim, rng)
    uploads = {}
    for pid in ids:
        q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
        t = rng.standard_normal(dim)
        uploads[pid] = {"data": rng.standard_normal((rows, dim)) @ q + t,
                        "anchor": anchor @ q + t,
                        "labels": (np.arange(rows) % 2).astype("<i8"),
                        "tags": np.zeros(rows, dtype="|i1")}
    return uploads


# --- the hostile clients (run in their own processes) ----------------------------------------


def _channel(spec: dict, cert: str, key: str) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(Path(spec["ca"]).read_bytes(), Path(key).read_bytes(),
                                         Path(cert).read_bytes())
    return grpc.secure_channel(spec["address"], creds,
                               options=[("grpc.ssl_target_name_override", "localhost")])


def _upload_messages(kind: str, header: pb.UploadRequest, raw: bytes,
                     stop: threading.Event) -> Iterator[pb.UploadRequest]:
    """What a hostile upload stream sends until ``stop``: nothing, or a header and then empty
    chunks (``zero``) or 16 bytes a second (``slow``)."""
    if kind != "silent":
        yield header
    offset = 0
    while not stop.wait(0.5 if kind == "zero" else 1.0):
        if kind == "zero":
            yield pb.UploadRequest(chunk=b"")
        elif kind == "slow" and offset < len(raw):
            yield pb.UploadRequest(chunk=raw[offset:offset + 16])
            offset += 16


def _hold_once(spec: dict, stream: dict, channel: grpc.Channel, stop: threading.Event,
               header: pb.UploadRequest, raw: bytes) -> str:
    """Open one hostile stream and hold it until the analyst ends it (or ``stop``); the status
    code it ended with (``HELD``: still open when given up)."""
    kind = stream["kind"]
    try:
        if kind == "stopped":
            call = release_pb2_grpc.ReleaseStub(channel).FetchGram(release_pb2.ReleaseRef(
                federation_id=spec["federation"], request_id=HELD_RELEASE), timeout=3600)
            next(call)  # one message, then never another: the client cannot tell when the
            stop.wait(STOPPED_HOLD)  # analyst ends the stream, so it opens a new one later
            call.cancel()
            return "HELD"
        call = pb_grpc.AnalystStub(channel).Upload.future(
            _upload_messages(kind, header, raw, stop), timeout=3600)
        while not call.done() and not stop.wait(0.2):
            pass
        if not call.done():  # still held when the attack ends
            call.cancel()
            return "HELD"
        return call.code().name
    except grpc.RpcError as err:
        return err.code().name
    except StopIteration:  # FetchGram ended before its first message
        return "EMPTY"


def _hostile_thread(spec: dict, stream: dict, stop: threading.Event, outcomes: Counter,
                    lock: threading.Lock) -> None:
    rng = np.random.default_rng(zlib.crc32(stream["cert"].encode()))
    arrays = aligned_uploads(rng, ("any",), spec["rows"], spec["dim"], spec["anchors"])["any"]
    header = pb.UploadRequest(header=bundle_header(bundle_spec(spec["federation"], METHOD, arrays)))
    raw = b"".join(bytes(c) for c in iter_chunks(arrays))
    channel = _channel(spec, stream["cert"], stream["key"])
    try:
        while not stop.is_set():
            began = time.monotonic()
            code = _hold_once(spec, stream, channel, stop, header, raw)
            with lock:
                outcomes[f"{stream['kind']}:{code}"] += 1
            if time.monotonic() - began < REFUSED_BACKOFF:  # refused at once: do not spin
                stop.wait(REFUSED_BACKOFF)
    finally:
        channel.close()


def run_hostile_clients(spec_path: Path) -> None:
    """Entry of a hostile client process: every stream of the spec in its own thread until
    SIGTERM or ``spec["seconds"]``; the outcome counts (``kind:STATUS``) written to
    ``spec["out"]``."""
    spec = json.loads(Path(spec_path).read_text())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    outcomes: Counter = Counter()
    lock = threading.Lock()
    threads = [threading.Thread(target=_hostile_thread, args=(spec, s, stop, outcomes, lock),
                                daemon=True) for s in spec["streams"]]
    for t in threads:
        t.start()
    Path(spec["ready"]).touch()  # imports done, every stream on its way
    stop.wait(spec["seconds"])
    stop.set()
    began = time.monotonic()
    for t in threads:
        t.join(10.0)
    print(f"{len(threads)} streams stopped in {time.monotonic() - began:.1f} s", flush=True)
    Path(spec["out"]).write_text(json.dumps(dict(outcomes)))


# --- the honest side and the analyst (this process) ------------------------------------------


class _Sampler:
    """Honest Status latencies and the analyst's memory, sampled in background threads; the
    current ``phase`` names the list each latency goes to."""

    def __init__(self, clients: list[AnalystClient], pid: int, report: ScenarioReport) -> None:
        self.clients, self.pid, self.report = clients, pid, report
        self.phase = "idle"
        self.stop = threading.Event()
        self.began = time.monotonic()
        self.threads = [threading.Thread(target=self._status, daemon=True),
                        threading.Thread(target=self._memory, daemon=True)]

    def __enter__(self) -> _Sampler:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60.0)

    def _status(self) -> None:
        k = 0
        while not self.stop.wait(STATUS_PERIOD):
            client = self.clients[k % len(self.clients)]
            k += 1
            phase, began = self.phase, time.monotonic()
            try:
                client.stub.Status(pb.StatusRequest(federation_id=FEDERATION), timeout=30.0)
            except grpc.RpcError as err:
                self.report.status_errors.setdefault(phase, []).append(err.code().name)
            seconds = time.monotonic() - began
            self.report.status_latency.setdefault(phase, []).append(seconds)
            self.report.status_samples.append((round(began - self.began, 2), round(seconds, 5)))

    def _memory(self) -> None:
        while not self.stop.wait(RSS_PERIOD):
            try:
                rss = memory_mib(self.pid)["VmRSS"]
            except (OSError, KeyError):
                return
            self.report.rss_samples.append((round(time.monotonic() - self.began, 2),
                                            round(rss, 2)))
            self.report.rss_peak_mib = max(self.report.rss_peak_mib, rss)


class _Hostiles:
    """The hostile client processes of one phase (stopped and reaped on exit)."""

    def __init__(self, root: Path, files, address: str, streams: list[dict], mix: HostileMix,
                 name: str, processes: int = 2) -> None:
        self.procs: list[tuple[subprocess.Popen, Path]] = []
        for k in range(processes):
            part = streams[k::processes]
            if not part:
                continue
            out = root / f"hostile-{name}-{k}.json"
            spec_path = root / f"hostile-{name}-{k}.spec.json"
            spec_path.write_text(json.dumps({
                "address": address, "ca": str(files.pki.ca), "federation": FEDERATION,
                "rows": mix.rows, "dim": mix.dim, "anchors": mix.anchors,
                "seconds": 10 * mix.window + 600, "out": str(out), "streams": part,
                "ready": str(out.with_suffix(".ready"))}))
            with open(root / f"hostile-{name}-{k}.log", "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.hostile_scenario", str(spec_path)],
                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                    env=child_env() | {"PYTHONPATH": str(ROOT)})
            self.procs.append((proc, out))

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until every process has started its streams (bounded): on a loaded machine
        their start-up alone can take seconds, which must not come out of a phase's window."""
        deadline = time.monotonic() + timeout
        while (time.monotonic() < deadline
               and not all(out.with_suffix(".ready").is_file() for _, out in self.procs)
               and all(proc.poll() is None for proc, _ in self.procs)):
            time.sleep(0.1)

    def finish(self) -> dict[str, int]:
        """Stop the processes; their outcome counts, summed."""
        total: Counter = Counter()
        for proc, out in self.procs:
            stop(proc, timeout=30.0)
            if out.is_file():
                total.update(json.loads(out.read_text()))
        return dict(total)


def _streams(files, mix: HostileMix, insiders: tuple[str, ...], outsiders: tuple[str, ...],
             phase: str) -> list[dict]:
    """The hostile streams of one phase: each insider's ``streams_per_insider`` (upload kinds
    in turn, or stopped readers), and the outsiders' silent ones."""
    streams = []
    for i, pid in enumerate(insiders):
        cert, key = files.pki.clients[pid]
        for s in range(mix.streams_per_insider):
            kind = ("stopped" if phase == "releases"
                    else UPLOAD_KINDS[(i + s) % len(UPLOAD_KINDS)])
            streams.append({"cert": str(cert), "key": str(key), "kind": kind})
    for s in range(mix.outsider_streams):
        cert, key = files.pki.clients[outsiders[s % len(outsiders)]]
        streams.append({"cert": str(cert), "key": str(key), "kind": "silent"})
    return streams


def run_scenario(root: Path, mix: HostileMix, *, hostile: bool, seed: int = 0,
                 progress: Callable[[str], None] = lambda _msg: None,
                 extra: dict[str, dict] | None = None) -> ScenarioReport:
    """Run the scenario once under ``root`` (see the module docstring); every process it starts
    is stopped before it returns. ``extra``: config keys beside the defaults (as
    :func:`deploy.demo.write_analyst` takes them)."""
    honest, insiders, outsiders = mix.ids()
    extra = dict(extra or {})
    # Every simulated host connects from 127.0.0.1, so the per-address limit (meant for one
    # host) is raised to hold them all; the per-participant limits apply as they are.
    server = {"max_connections_per_address": ONE_ADDRESS_CONNECTIONS} | extra.pop("server", {})
    files = write_analyst(root, honest + insiders, federation_id=FEDERATION, method=METHOD,
                          anchors=mix.anchors, dim=mix.dim, sigma=None, v=None,
                          accept_collusion=False, extra_certificates=outsiders, extra={
                              "privacy": {"epsilon_budget": 1000.0, "delta_budget": 1e-5},
                              "model": {"name": "none"}, "server": server, **extra})
    cfg = load_analyst_config(files.analyst_config)
    limits = {"max_streams_per_caller": cfg.max_streams_per_caller,
              "stream_idle_timeout": cfg.stream_idle_timeout,
              "stream_min_rate": cfg.stream_min_rate, "stream_deadline": cfg.stream_deadline,
              **{f"release.{k}": v for k, v in asdict(cfg.release).items()}}
    report = ScenarioReport(hostile, asdict(mix) | {"hostile_streams": mix.hostile_streams},
                            limits)
    uploads = aligned_uploads(np.random.default_rng(seed), honest + insiders, mix.rows, mix.dim,
                              mix.anchors)
    proc = start(["analyst", "serve", "--config", files.analyst_config], root / "analyst.log")
    hostiles: list[_Hostiles] = []
    clients: dict[str, AnalystClient] = {}
    try:
        address = f"127.0.0.1:{wait_for_port(files.port_file, proc)}"
        clients = {pid: AnalystClient(address, TlsFiles(files.pki.ca, *files.pki.clients[pid]),
                                      "localhost", FEDERATION, 120.0)
                   for pid in honest + insiders}
        clients[honest[0]].status()  # serving, connections warm
        time.sleep(1.0)
        report.rss_before_mib = memory_mib(proc.pid)["VmRSS"]
        report.rss_peak_mib = report.rss_before_mib
        with _Sampler([clients[pid] for pid in honest], proc.pid, report) as sampler:
            sampler.phase = "uploads"
            began = time.monotonic()
            if hostile:
                hostiles.append(_Hostiles(root, files, address, _streams(
                    files, mix, insiders, outsiders, "uploads"), mix, "uploads"))
                hostiles[-1].wait_ready()
                began = time.monotonic()  # the window is the attack's, not the start-up's
                progress(f"uploads phase: {mix.hostile_streams} hostile streams opening")
                time.sleep(min(5.0, mix.window / 4))  # let them connect and settle in
            _honest_uploads(clients, honest, uploads, mix.window / 2, report)
            progress(f"honest uploads done: p99 {percentile(report.upload_latency, 99):.2f} s")
            sampler.stop.wait(max(0.0, began + mix.window - time.monotonic()))
            if hostiles:
                report.hostile_outcomes["uploads"] = hostiles.pop().finish()
            report.phase_seconds["uploads"] = time.monotonic() - began
            sampler.phase = "aligning"
            _insiders_upload(clients, insiders, uploads)
            done = clients[honest[0]].wait_for("the result", clients[honest[0]].status,
                                               lambda s: s.state in ("done", "failed"))
            report.state, report.committed = done.state, sorted(done.committed)
            progress(f"federation {done.state}; releases phase")
            sampler.phase = "releases"
            began = time.monotonic()
            _insiders_release(clients, insiders)
            if hostile:
                hostiles.append(_Hostiles(root, files, address, _streams(
                    files, mix, insiders, outsiders, "releases"), mix, "releases"))
                hostiles[-1].wait_ready()
                began = time.monotonic()
            else:
                for pid in insiders:  # the baseline's honest fetches of the same releases
                    _fetch(clients[pid])
            sampler.stop.wait(max(0.0, began + mix.window - time.monotonic()))
            if hostiles:
                report.hostile_outcomes["releases"] = hostiles.pop().finish()
            report.phase_seconds["releases"] = time.monotonic() - began
        report.hwm_mib = memory_mib(proc.pid)["VmHWM"]
    finally:
        for h in hostiles:
            h.finish()
        for c in clients.values():
            c.channel.close()
        stop(proc)
    return report


def _honest_uploads(clients: dict[str, AnalystClient], honest: tuple[str, ...],
                    uploads: dict, spread: float, report: ScenarioReport) -> None:
    """Each honest participant uploads once, the starts spread over ``spread`` seconds; the
    latency of each upload is recorded."""
    def one(k: int, pid: str) -> None:
        time.sleep(spread * k / len(honest))
        began = time.monotonic()
        arrays = uploads[pid]
        clients[pid].send_bundle("upload", bundle_spec(FEDERATION, METHOD, arrays,
                                                       digests=False), arrays)
        report.upload_latency.append(time.monotonic() - began)

    _in_threads([lambda k=k, pid=pid: one(k, pid) for k, pid in enumerate(honest)])


def _insiders_upload(clients: dict[str, AnalystClient], insiders: tuple[str, ...],
                     uploads: dict) -> None:
    """The insiders' real uploads, once the analyst has ended their hostile streams (refused
    with RESOURCE_EXHAUSTED while it still counts them: asked again, for up to a minute)."""
    def one(pid: str) -> None:
        spec = bundle_spec(FEDERATION, METHOD, uploads[pid], digests=False)
        deadline = time.monotonic() + 60.0
        while True:
            try:
                clients[pid].send_bundle("upload", spec, uploads[pid])
                return
            except NoisyAnchorError as err:
                if err.grpc_code != "RESOURCE_EXHAUSTED" or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    _in_threads([lambda pid=pid: one(pid) for pid in insiders])


def _insiders_release(clients: dict[str, AnalystClient], insiders: tuple[str, ...]) -> None:
    """Every insider pays for one Gram release (epsilon 1, no projection: what its stopped
    readers hold is the fetch, not the computation) and waits until it is computed."""
    ref = release_pb2.ReleaseRef(federation_id=FEDERATION, request_id=HELD_RELEASE)

    def one(pid: str) -> None:
        c = clients[pid]
        stub = release_pb2_grpc.ReleaseStub(c.channel)
        c.call("submit", lambda: stub.SubmitGram(release_pb2.GramQuery(
            federation_id=FEDERATION, epsilon=1.0, delta=1e-6, projector="none",
            request_id=HELD_RELEASE)))
        c.wait_for("the Gram release", lambda: stub.GetGram(ref),
                   lambda job: job.state == release_pb2.GramJob.DONE)

    _in_threads([lambda pid=pid: one(pid) for pid in insiders])


def _fetch(client: AnalystClient) -> None:
    parts = release_pb2_grpc.ReleaseStub(client.channel).FetchGram(
        release_pb2.ReleaseRef(federation_id=FEDERATION, request_id=HELD_RELEASE), timeout=120)
    for _ in parts:
        pass


def _in_threads(jobs: list[Callable[[], object]]) -> None:
    """Run ``jobs`` at once in threads; the first error is raised once all have ended."""
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        try:
            job()
        except BaseException as err:  # re-raised below, in the caller's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600.0)
    if errors:
        raise errors[0]


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.hostile_scenario SPEC.json``: one hostile client process."""
    parser = argparse.ArgumentParser(description="hostile client process of the scenario")
    parser.add_argument("spec", type=Path)
    run_hostile_clients(parser.parse_args(argv).spec)


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
