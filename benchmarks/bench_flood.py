"""Honest Status and FetchSiteModel latency during every wire flood of issues 22 and 30.

    flock -x /work/bench.lock python -m benchmarks.bench_flood

Each run starts a fresh analyst process (three participants org-a, org-b, org-c; mutual TLS on
127.0.0.1; ``[server]`` at its defaults) and completes the federation (random uploads of the
protocol's form, the fit), so FetchSiteModel answers. Then, while honest sites call Status
every 50 ms on a kept connection (org-a), FetchSiteModel every 100 ms (org-b) and Status on a
new connection every 100 ms (org-a), an attacker runs for ``--seconds`` (20) in a process of
its own (so its Python does not slow the honest probes'):

``quiet``
    no attacker: the baseline every ratio divides by.
``idle_outsider`` (a)
    a CA-signed non-participant, from its own address (127.0.0.2), opens
    ``--idle-connections`` (1,000) TLS connections with the HTTP/2 preface and no call, and
    reopens every one the analyst closes (:func:`benchmarks.stream_flood.handshake_flood`).
``idle_participant`` (b)
    the same from a participant's certificate (org-c).
``refusal_text`` (c)
    org-c makes calls that are refused, each with another text: 3 MiB malformed site and
    federation ids, another site's model, other federations, 3 MiB withdrawal reasons after its
    upload (:func:`benchmarks.call_flood.text_flood`), 8 at a time; the analyst's log growth
    (text and JSON log) is measured in bytes/s.
``withdrawal_reasons`` (d)
    the federation is left collecting (org-c has not uploaded; FetchSiteModel is then answered
    FAILED_PRECONDITION, measured as an answer) and org-c sends 3.9 MB withdrawal reasons, 32
    at a time on 8 connections; the analyst's CPU-seconds are measured.
``pending_queue`` (e)
    org-c, from 127.0.0.2, sends complete Status calls 32 at a time on each of 60 connections
    (reopened when closed) as fast as they are taken, never waiting for an answer
    (:func:`benchmarks.stream_flood.rapid_reset` without resets): the pending-call queue's
    flood. Honest calls CANCELLED are counted.
``stream_reset`` (f)
    the HTTP/2 stream-reset flood of issue 22: a non-participant opens ``--streams`` (30,000)
    Status calls on ``--connections`` (10) connections and resets each 2 ms after it was sent.

Optional controls (``--runs``): ``idle_port_count_only``, the outsider's idle flood against the
port as it was before issue 30 (one ``max_connections`` count; per-address, per-caller and
claim limits lifted), and ``stream_reset_participant`` (the reset flood from org-c).

Recorded per run: each honest probe's calls, errors (CANCELLED counted apart), p50, p99, max
(calls started from the attacker's start to :data:`AFTER` seconds after its end), the ratios to
``quiet``, the analyst's CPU-seconds, log growth (bytes, bytes/s) and resident memory over the
window, what the attacker sent and what it was answered, the load average. Floors (the
issues'): in each flood (a-f) the honest Status and FetchSiteModel p99 under :data:`P99_FLOOR`
s (and Status on a new connection in (a) and (b), the lockout they attempt) with no honest
error in any probe, and the log growth of ``refusal_text`` under :data:`LOG_FLOOR` bytes/s;
exit status 1 when one is missed. Writes ``benchmarks/results/flood.json`` (no per-call
samples: small) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from benchmarks.call_flood import text_flood
from benchmarks.hostile_scenario import memory_mib
from benchmarks.stream_flood import StatusProbe, handshake_flood, percentile, rapid_reset
from noisyanchor.analyst import config as analyst_config
from noisyanchor.common.blas import available_cpus, blas_settings
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.deploy.demo import FederationFiles, write_analyst
from noisyanchor.deploy.launch import start, stop, wait_for_port
from noisyanchor.participant.client import AnalystClient
from noisyanchor.protos.v1 import analyst_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
FEDERATION = "bench"
SITES = ("org-a", "org-b", "org-c")
#: The issues' floor: every honest probe's p99 (seconds) during a flood.
P99_FLOOR = 2.0
#: The analyst's log growth (text and JSON log together, bytes/s) the refusal flood may cause.
LOG_FLOOR = 64 << 10
#: Seconds of honest probes after the attacker ends that still count as "during" (its backlog).
AFTER = 2.0
#: The attackers' own loopback address (the honest sites connect from 127.0.0.1).
ATTACK_SOURCE = "127.0.0.2"
#: Thread settings the analyst inherits from this process's environment.
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "GRPC_POLL_STRATEGY", "GRPC_VERBOSITY")
#: Probes whose p99 has the floor in every flood, and in the idle-connection floods (the
#: lockout they attempt is of new connections).
FLOOR_PROBES = ("status", "fetch_site_model")
LOCKOUT_PROBES = (*FLOOR_PROBES, "status_new_connection")
#: Answers of an honest probe that are answers, not errors (FetchSiteModel of a collecting
#: federation is refused FAILED_PRECONDITION, naming what it waits for).
ANSWERED = (grpc.StatusCode.FAILED_PRECONDITION,)


@dataclass(frozen=True)
class Run:
    """One run: what attacks, with which certificate, against which ``[server]`` keys."""

    label: str
    attacker: str | None = None
    server: dict = field(default_factory=dict)
    uploaders: tuple[str, ...] = SITES  # sites that upload before the flood (all: a done fit)
    control: bool = False  # not a flood of the issue: no floor


#: The port as it was before issue 30: one count of connections for the whole port.
PORT_COUNT_ONLY = {"max_connections_per_address": 10**6, "max_connections_per_caller": 10**6,
                   "connection_claim_timeout": 10.0**6}
RUNS = {
    "quiet": Run("baseline: no flood", control=True),
    "idle_outsider": Run("(a) idle TLS connections, one outsider certificate, one address",
                         "outsider"),
    "idle_participant": Run("(b) idle TLS connections, a participant's certificate", "org-c"),
    "refusal_text": Run("(c) refused calls carrying 3 MiB ids and texts", "org-c"),
    "withdrawal_reasons": Run("(d) 3.9 MB withdrawal reasons from a site that has not uploaded",
                              "org-c", uploaders=("org-a", "org-b")),
    "pending_queue": Run("(e) one identity's calls on 60 connections x 32 streams, unawaited",
                         "org-c"),
    "stream_reset": Run("(f) HTTP/2 stream-reset flood from an outsider", "outsider"),
    "idle_port_count_only": Run("control: (a) against one max_connections for the port",
                                "outsider", PORT_COUNT_ONLY, control=True),
    "stream_reset_participant": Run("control: (f) from a participant", "org-c", control=True),
}
DEFAULT_RUNS = ("quiet", "idle_outsider", "idle_participant", "refusal_text",
                "withdrawal_reasons", "pending_queue", "stream_reset")


def transport_defaults() -> dict:
    """The ``[server]`` transport limits every run but the controls uses (no config sets
    them)."""
    return {name.removeprefix("DEFAULT_").lower(): getattr(analyst_config, name)
            for name in dir(analyst_config)
            if name.startswith(("DEFAULT_MAX_", "DEFAULT_HANDSHAKE", "DEFAULT_CONNECTION"))}


def commit() -> str | None:
    """The checkout's commit (and ``+dirty`` when it has changes), or None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "-uno"],
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def cpu_seconds(pid: int) -> float:
    """User and system CPU-seconds process ``pid`` has used (``/proc/<pid>/stat``)."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


def _upload(files: FederationFiles, port: int, uploaders: tuple[str, ...]) -> None:
    """``uploaders`` upload random arrays of the protocol's form (``A Q_i + t_i``, so the
    screening passes them); when every site has, wait for the fit, which must succeed."""
    from noisyanchor.common.gdp import haar_orthogonal, make_anchor
    from noisyanchor.common.wire import bundle_spec

    rng = np.random.default_rng(0)
    for pid in uploaders:
        anchor = make_anchor(16, 8, rng) @ haar_orthogonal(8, rng) + rng.standard_normal(8)
        arrays = {"data": rng.standard_normal((60, 8)), "anchor": anchor,
                  "labels": rng.integers(0, 3, 60).astype("<i8"),
                  "tags": rng.integers(0, 3, 60).astype("|i1")}
        with _client(files, port, pid, 60.0) as client:
            client.send_bundle("upload", bundle_spec(FEDERATION, "aa-igdp", arrays), arrays)
    if set(uploaders) == set(SITES):
        with _client(files, port, "org-a", 120.0) as client:
            state = client.wait_for("the fit", client.status,
                                    lambda r: r.state in ("done", "failed")).state
        if state != "done":
            raise RuntimeError(f"the federation ended {state!r} before the flood")


def _client(files: FederationFiles, port: int, pid: str, timeout: float = 30.0
            ) -> AnalystClient:
    cert, key = files.pki.clients[pid]
    return AnalystClient(f"127.0.0.1:{port}", TlsFiles(files.pki.ca, cert, key), "localhost",
                         FEDERATION, timeout)


def attack(name: str, files: FederationFiles, port: int, args: argparse.Namespace):
    """The attacker of run ``name``: ``(function, keyword arguments)``, run in a process of its
    own; each returns a report with ``to_json()``."""
    cert, key = files.pki.clients[RUNS[name].attacker]
    tls = (files.pki.ca, cert, key)
    address = f"127.0.0.1:{port}"
    if name.startswith("idle_"):
        return handshake_flood, dict(host="127.0.0.1", port=port,
                                     connections=args.idle_connections, hold=args.seconds,
                                     tls=tls, source=ATTACK_SOURCE, reopen=True)
    if name == "refusal_text":
        return text_flood, dict(address=address, tls=tls, federation_id=FEDERATION,
                                kind="refusals", seconds=args.seconds, threads=8,
                                connections=4, text_bytes=3 << 20)
    if name == "withdrawal_reasons":
        return text_flood, dict(address=address, tls=tls, federation_id=FEDERATION,
                                kind="withdrawals", seconds=args.seconds, threads=32,
                                connections=8, text_bytes=3_900_000)
    if name == "pending_queue":
        return rapid_reset, dict(host="127.0.0.1", port=port, tls=tls, server_name="localhost",
                                 streams=10**9, batch=32, connections=60, reset=False,
                                 timeout=args.seconds, source=ATTACK_SOURCE)
    return rapid_reset, dict(host="127.0.0.1", port=port, tls=tls, server_name="localhost",
                             streams=args.streams, batch=500, connections=args.connections,
                             reset_after=0.002, timeout=300.0, source=ATTACK_SOURCE)


def _fetch_site_model(client: AnalystClient) -> None:
    """One honest FetchSiteModel read to its end (FAILED_PRECONDITION: answered)."""
    try:
        for _ in client.stub.FetchSiteModel(pb.SiteModelRequest(federation_id=FEDERATION),
                                            timeout=10):
            pass
    except grpc.RpcError as err:
        if err.code() not in ANSWERED:
            raise


def _summary(probe: StatusProbe, begin: float, end: float) -> dict:
    during = probe.between(begin, end)
    return {"calls": len(during), "errors": probe.errors[:3],
            "error_count": len(probe.errors),
            "cancelled": sum("CANCELLED" in e for e in probe.errors),
            "p50_s": percentile(during, 0.5), "p99_s": percentile(during, 0.99),
            "max_s": max(during) if during else float("nan")}


class _Analyst:
    """What one analyst process used between two readings: CPU, log bytes, memory."""

    def __init__(self, pid: int, logs: tuple[Path, ...]) -> None:
        self.pid, self.logs = pid, logs
        self.t, self.cpu, self.log = time.monotonic(), cpu_seconds(pid), self._log_bytes()
        self.rss = memory_mib(pid)["VmRSS"]

    def _log_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.logs if p.is_file())

    def since(self) -> dict:
        seconds = time.monotonic() - self.t
        cpu, log = cpu_seconds(self.pid) - self.cpu, self._log_bytes() - self.log
        mem = memory_mib(self.pid)
        return {"seconds": seconds, "cpu_s": cpu, "cpu_s_per_s": cpu / seconds,
                "log_bytes": log, "log_bytes_per_s": log / seconds,
                "rss_before_mib": self.rss, "rss_after_mib": mem["VmRSS"],
                "hwm_mib": mem["VmHWM"]}


def one_run(root: Path, name: str, args: argparse.Namespace,
            pool: concurrent.futures.Executor) -> dict:
    """A fresh analyst, the honest probes, and the attacker of run ``name``."""
    run = RUNS[name]
    load_before = os.getloadavg()
    json_log = root / name / "analyst.jsonl"
    files = write_analyst(root / name, SITES, federation_id=FEDERATION, method="aa-igdp",
                          anchors=16, dim=8, sigma=None, v=None, accept_collusion=False,
                          extra_certificates=("outsider",),
                          extra={"server": {**run.server, "log_json": json_log}})
    text_log = root / f"{name}.log"
    proc = start(["analyst", "serve", "--config", files.analyst_config], text_log)
    try:
        port = wait_for_port(files.port_file, proc)
        _upload(files, port, run.uploaders)

        def fresh_status() -> None:
            with _client(files, port, "org-a") as client:
                client.status()

        with _client(files, port, "org-a") as a, _client(files, port, "org-b") as b:
            probes = {"status": StatusProbe(a, FEDERATION, interval=0.05),
                      "fetch_site_model": StatusProbe(b, FEDERATION, 0.1,
                                                      call=lambda: _fetch_site_model(b)),
                      "status_new_connection": StatusProbe(a, FEDERATION, 0.1,
                                                           call=fresh_status)}
            for probe in probes.values():
                probe.__enter__()
            try:
                time.sleep(1.0)
                used = _Analyst(proc.pid, (text_log, json_log))
                begin = {k: p.now() for k, p in probes.items()}
                if run.attacker is None:
                    time.sleep(args.quiet_window)
                    report = None
                else:
                    fn, kwargs = attack(name, files, port, args)
                    report = pool.submit(fn, **kwargs).result().to_json()
                end = {k: p.now() for k, p in probes.items()}
                analyst = used.since()
                time.sleep(AFTER + 0.5)
            finally:
                for probe in probes.values():
                    probe.__exit__(None, None, None)
        out = {"label": run.label, "attacker": run.attacker, "server": run.server,
               "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
               "analyst": analyst, "attack": report,
               "probes": {k: _summary(p, begin[k], end[k] + AFTER) for k, p in probes.items()}}
        if name == "withdrawal_reasons":
            stored = files.store / "withdrawn" / "org-c.txt"
            out["stored_reason_chars"] = len(stored.read_text()) if stored.is_file() else None
            out["cpu_s_per_withdrawal"] = analyst["cpu_s"] / max(1, report["codes"].get("OK", 0))
        out["_status_samples"] = [(t - begin["status"], s) for t, s in probes["status"].samples]
        for k, v in out["probes"].items():
            print(f"  {name} {k}: p50 {v['p50_s'] * 1e3:.1f} ms, p99 {v['p99_s'] * 1e3:.1f} "
                  f"ms, {v['error_count']} errors", file=sys.stderr, flush=True)
        print(f"  {name}: analyst {analyst['cpu_s']:.1f} CPU-s, log "
              f"{analyst['log_bytes_per_s']:.0f} B/s; attack {report}", file=sys.stderr,
              flush=True)
        return out
    finally:
        stop(proc)


def floors(runs: dict[str, dict]) -> dict:
    """Which floor each flood run missed: an honest p99 of :data:`FLOOR_PROBES` (or
    :data:`LOCKOUT_PROBES` in the idle floods) not under :data:`P99_FLOOR`, an honest error,
    the refusal flood's log growth not under :data:`LOG_FLOOR`."""
    missed = []
    for name, run in runs.items():
        if RUNS[name].control:
            continue
        floored = LOCKOUT_PROBES if name.startswith("idle_") else FLOOR_PROBES
        for k, probe in run["probes"].items():
            if (k in floored and not probe["p99_s"] < P99_FLOOR) or probe["error_count"]:
                missed.append(f"{name} {k}: p99 {probe['p99_s']:.3f} s, "
                              f"{probe['error_count']} errors")
    if "refusal_text" in runs and not (
            runs["refusal_text"]["analyst"]["log_bytes_per_s"] < LOG_FLOOR):
        missed.append("refusal_text: log growth")
    return {"p99_s": P99_FLOOR, "log_bytes_per_s": LOG_FLOOR, "missed": missed,
            "met": not missed and any(not RUNS[n].control for n in runs)}


def ratios(runs: dict[str, dict]) -> dict:
    """Each flood run's p99 over the quiet run's, per probe."""
    if "quiet" not in runs:
        return {}
    quiet = runs["quiet"]["probes"]
    return {name: {k: probe["p99_s"] / quiet[k]["p99_s"] for k, probe in run["probes"].items()}
            for name, run in runs.items() if name != "quiet"}


def plot(runs: dict[str, dict], samples: dict[str, list], path: Path) -> None:
    """Each probe's p99 per run (bars, the floor), and honest Status over time."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    fig, (bars, time_) = plt.subplots(2, 1, figsize=(10, 8))
    names = list(runs)
    probes = ("status", "fetch_site_model", "status_new_connection")
    for j, k in enumerate(probes):
        bars.bar(np.arange(len(names)) + (j - 1) * 0.27,
                 [runs[n]["probes"][k]["p99_s"] for n in names], 0.27, label=k)
    bars.axhline(P99_FLOOR, color="k", ls="--", lw=0.8, label="floor (p99)")
    bars.set_xticks(np.arange(len(names)), [
        f"{n}\nload {runs[n]['loadavg_before'][0]:.0f}-{runs[n]['loadavg_after'][0]:.0f}"
        for n in names], fontsize=8)
    bars.set_yscale("log")
    bars.set_ylabel("honest p99, s (log)")
    bars.legend(fontsize=8)
    bars.set_title("honest sites' p99 while each flood runs (fresh analyst per run, mutual TLS)")
    for n, colour in zip(names, [f"C{i}" for i in range(10)], strict=False):
        t = [x for x, _ in samples[n]]
        time_.plot(t, [y for _, y in samples[n]], ".", ms=2, color=colour, label=n)
    time_.axhline(P99_FLOOR, color="k", ls="--", lw=0.8)
    time_.set_yscale("log")
    time_.set_xlabel("seconds since the attacker started")
    time_.set_ylabel("honest Status (kept connection), s")
    time_.legend(fontsize=7, ncol=2)
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; 1 when a floor is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds each attacker runs (but the stream-reset flood)")
    parser.add_argument("--streams", type=int, default=30000)
    parser.add_argument("--connections", type=int, default=10,
                        help="connections of the stream-reset flood")
    parser.add_argument("--idle-connections", type=int, default=1000)
    parser.add_argument("--quiet-window", type=float, default=10.0)
    parser.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), choices=list(RUNS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/flood.json")
    args = parser.parse_args(argv)
    meta = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_start": os.getloadavg(), "cpus": available_cpus(),
            "python": platform.python_version(), "grpcio": grpc.__version__,
            "blas": blas_settings(), "env": {k: os.environ.get(k) for k in THREAD_ENV},
            "transport_defaults": transport_defaults(), "commit": commit(),
            "command": "python -m benchmarks.bench_flood " + " ".join(argv or sys.argv[1:])}
    runs, samples = {}, {}
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp, \
            concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        pool.submit(os.getpid).result()  # the attackers' process, started before any window
        for name in args.runs:
            runs[name] = one_run(Path(tmp), name, args, pool)
            samples[name] = runs[name].pop("_status_samples")
    meta["loadavg_end"] = os.getloadavg()
    report = {"benchmark": "honest Status and FetchSiteModel p99 while each wire flood of "
                           "issues 22 and 30 runs (bench_flood.py's docstring)",
              "floors": floors(runs), "ratios_p99_over_quiet": ratios(runs),
              "attack": {"seconds": args.seconds, "idle_connections": args.idle_connections,
                         "streams": args.streams, "connections": args.connections,
                         "source": ATTACK_SOURCE},
              "runs": runs, "meta": meta}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, separators=(",", ":")) + "\n")
    plot(runs, samples, args.out.with_suffix(".png"))
    print(json.dumps({k: report[k] for k in ("floors", "ratios_p99_over_quiet")}, indent=1))
    return 0 if report["floors"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
