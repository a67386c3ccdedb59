"""Honest Status latency during an HTTP/2 stream-reset flood (issue 22): the issue's size.

    flock -x /work/bench.lock python -m benchmarks.bench_flood

One analyst process (three participants, the defaults of ``[server]``) and a CA-signed
non-participant that opens and resets ``--streams`` gRPC Status calls (30,000) on
``--connections`` connections (:func:`benchmarks.stream_flood.rapid_reset`: each stream a
whole call, reset ``--reset-after`` seconds after it was sent so the analyst has it), while an
honest participant calls Status every 20 ms on its own connection. Three runs, each with a fresh
analyst: ``quiet`` (no flood: the baseline the ratios divide by), ``flood`` (the defaults),
``flood_participant`` (the same flood from a participant, org-c, whose calls are admitted up to
its own ``max_calls_per_caller``) and ``flood_unbounded_streams`` (the non-participant's flood
with ``max_streams_per_connection`` lifted to 2^31 - 1, what gRPC allows by default: how much the
per-connection limit does). Recorded: honest Status
p50, p99 and max during the flood and for 2 s after it, honest errors, the flood's counts
(streams sent, refused by the transport), the analyst's resident memory, load average. Floor
(the issue's): honest Status p99 under 2 s at the defaults, no honest error; exit status 1 when
missed. Writes ``benchmarks/results/flood.json`` and a PNG beside it.

Idle connections (issue 30), ``--runs idle_outsider idle_participant idle_port_count_only --out
benchmarks/results/idle_flood.json``: the federation is completed first (three random uploads,
so FetchSiteModel answers), then an attacker from another loopback address (127.0.0.2) opens
``--idle-connections`` (1,000) TLS connections with the HTTP/2 preface and no call, and reopens
every one the analyst closes, for ``--idle-seconds`` (20); meanwhile the honest sites call
Status on a kept connection, Status on a new connection each time (what a locked port refuses)
and FetchSiteModel. ``idle_outsider``: a CA-signed non-participant; ``idle_participant``:
org-c; ``idle_port_count_only``: the outsider against the port as it was before (one
``max_connections`` for everyone; per-address, per-caller and claim limits lifted), the
control. Floor: honest p99 of each of the three under 2 s with no error, in the first two.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from benchmarks.hostile_scenario import memory_mib
from benchmarks.stream_flood import StatusProbe, handshake_flood, percentile, rapid_reset
from noisyanchor.analyst import config as analyst_config
from noisyanchor.common.blas import available_cpus, blas_settings
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.deploy.demo import write_analyst
from noisyanchor.deploy.launch import start, stop, wait_for_port
from noisyanchor.participant.client import AnalystClient

ROOT = Path(__file__).resolve().parents[1]
#: The issue's floor: honest Status p99 (seconds) during the flood.
STATUS_P99_FLOOR = 2.0
#: Seconds of honest probes after the flood that still count as "during" (its backlog).
AFTER = 2.0
RUNS = {"quiet": None, "flood": {}, "flood_participant": {},
        "flood_unbounded_streams": {"max_streams_per_connection": 2**31 - 1},
        "idle_outsider": {}, "idle_participant": {},
        # The port as it was before issue 30: one count of connections for the whole port.
        "idle_port_count_only": {"max_connections_per_address": 10**6,
                                 "max_connections_per_caller": 10**6,
                                 "connection_claim_timeout": 10.0**6}}
#: Who floods in each run (the certificate's name); the others: the non-participant.
ATTACKERS = {"flood_participant": "org-c", "idle_participant": "org-c"}
#: Runs whose attacker holds idle TLS connections (issue 30) instead of resetting streams.
IDLE_RUNS = ("idle_outsider", "idle_participant", "idle_port_count_only")
#: Thread settings the analyst inherits from this process's environment.
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "GRPC_POLL_STRATEGY", "GRPC_VERBOSITY")


def transport_defaults() -> dict:
    """The ``[server]`` transport limits the ``flood`` run uses (its config sets none)."""
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


def _finish_federation(port: int, files) -> None:
    """Every site uploads random arrays, and the analyst fits (FetchSiteModel then answers)."""
    import numpy as np

    from noisyanchor.common.wire import bundle_spec

    rng = np.random.default_rng(0)
    for pid in ("org-a", "org-b", "org-c"):
        cert, key = files.pki.clients[pid]
        arrays = {"data": rng.standard_normal((60, 8)), "anchor": rng.standard_normal((16, 8)),
                  "labels": rng.integers(0, 3, 60).astype("<i8"),
                  "tags": rng.integers(0, 3, 60).astype("|i1")}
        with AnalystClient(f"127.0.0.1:{port}", TlsFiles(files.pki.ca, cert, key),
                           "localhost", "bench", 60.0) as client:
            client.send_bundle("upload", bundle_spec("bench", "aa-igdp", arrays), arrays)
    cert, key = files.pki.clients["org-a"]
    with AnalystClient(f"127.0.0.1:{port}", TlsFiles(files.pki.ca, cert, key), "localhost",
                       "bench", 60.0) as client:
        client.wait_for("the fit", client.status, lambda r: r.state in ("done", "failed"))


def idle_run(port: int, files, name: str, args: argparse.Namespace) -> dict:
    """Honest Status (its connection kept), Status on a new connection each time, and
    FetchSiteModel, while an attacker from 127.0.0.2 holds ``--idle-connections`` idle TLS
    connections and reopens every one the analyst closes (issue 30)."""
    import threading

    _finish_federation(port, files)
    tls = {pid: TlsFiles(files.pki.ca, *files.pki.clients[pid]) for pid in ("org-a", "org-b")}
    address = f"127.0.0.1:{port}"

    def fresh_status() -> None:
        with AnalystClient(address, tls["org-a"], "localhost", "bench", 30.0) as client:
            client.status()

    ocert, okey = files.pki.clients[ATTACKERS.get(name, "outsider")]
    report: dict = {}
    with AnalystClient(address, tls["org-a"], "localhost", "bench", 30.0) as a, \
            AnalystClient(address, tls["org-b"], "localhost", "bench", 30.0) as b:
        probes = {"status": StatusProbe(a, "bench", interval=0.05),
                  "status_new_connection": StatusProbe(a, "bench", 0.1, call=fresh_status),
                  "fetch_site_model": StatusProbe(b, "bench", 0.1,
                                                  call=lambda: b.fetch_site_model(""))}
        for probe in probes.values():
            probe.__enter__()
        time.sleep(1.0)
        flood = threading.Thread(target=lambda: report.update(held=handshake_flood(
            "127.0.0.1", port, args.idle_connections, hold=args.idle_seconds,
            tls=(files.pki.ca, ocert, okey), source="127.0.0.2", reopen=True)))
        begin = {k: p.now() for k, p in probes.items()}
        flood.start()
        flood.join()
        end = {k: p.now() for k, p in probes.items()}
        for probe in probes.values():
            probe.__exit__(None, None, None)
    out = {"idle_flood": report["held"].to_json()}
    for k, probe in probes.items():
        during = probe.between(begin[k], end[k])
        out[k] = {"calls": len(during), "errors": probe.errors[:5],
                  "error_count": len(probe.errors), "p50_s": percentile(during, 0.5),
                  "p99_s": percentile(during, 0.99),
                  "max_s": max(during) if during else float("nan")}
        print(f"  {name} {k}: p50 {out[k]['p50_s'] * 1e3:.1f} ms, p99 "
              f"{out[k]['p99_s'] * 1e3:.1f} ms, {len(probe.errors)} errors",
              file=sys.stderr, flush=True)
    out["samples"] = [(round(t - begin["status"], 4), round(x, 5))
                      for t, x in probes["status_new_connection"].samples]
    return out


def one_run(root: Path, name: str, args: argparse.Namespace) -> dict:
    """A fresh analyst, the honest probe, and the flood of run ``name`` (or a quiet window)."""
    server = RUNS[name]
    load_before = os.getloadavg()
    files = write_analyst(root / name, ("org-a", "org-b", "org-c"), federation_id="bench",
                          method="aa-igdp", anchors=16, dim=8, sigma=None, v=None,
                          accept_collusion=False, extra_certificates=("outsider",),
                          extra={"server": server or {}})
    proc = start(["analyst", "serve", "--config", files.analyst_config], root / f"{name}.log")
    try:
        port = wait_for_port(files.port_file, proc)
        if name in IDLE_RUNS:
            return {"server": server, "attacker": ATTACKERS.get(name, "outsider"),
                    **idle_run(port, files, name, args)}
        cert, key = files.pki.clients["org-a"]
        honest = AnalystClient(f"127.0.0.1:{port}", TlsFiles(files.pki.ca, cert, key),
                               "localhost", "bench", 30.0)
        rss_before = memory_mib(proc.pid)["VmRSS"]
        with honest, StatusProbe(honest, "bench", interval=0.02) as probe:
            time.sleep(1.0)
            begin = probe.now()
            flood = None
            if server is None:
                time.sleep(args.quiet_window)
            else:
                ocert, okey = files.pki.clients[ATTACKERS.get(name, "outsider")]
                flood = rapid_reset("127.0.0.1", port, (files.pki.ca, ocert, okey),
                                    "localhost", args.streams, batch=args.batch,
                                    connections=args.connections,
                                    reset_after=args.reset_after, timeout=300.0)
            end = probe.now()
            time.sleep(AFTER + 0.5)
        during = probe.between(begin, end + AFTER)
        mem = memory_mib(proc.pid)
        result = {
            "server": server, "attacker": ATTACKERS.get(name, "outsider") if server is not None
            else None, "seconds": end - begin,
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
            "honest_calls": len(during), "honest_errors": probe.errors,
            "status_p50_s": percentile(during, 0.5), "status_p99_s": percentile(during, 0.99),
            "status_max_s": max(during) if during else float("nan"),
            "rss_before_mib": rss_before, "rss_after_mib": mem["VmRSS"],
            "hwm_mib": mem["VmHWM"],
            "flood": flood.to_json() if flood is not None else None,
            "samples": [(round(t - begin, 4), round(s, 5)) for t, s in probe.samples]}
        print(f"  {name}: honest Status p50 {result['status_p50_s'] * 1e3:.1f} ms, p99 "
              f"{result['status_p99_s'] * 1e3:.1f} ms, max {result['status_max_s'] * 1e3:.1f} "
              f"ms, {len(probe.errors)} errors"
              + (f"; {flood.streams_sent} streams in {flood.seconds:.2f} s, "
                 f"{flood.refused_streams} refused by the transport" if flood else ""),
              file=sys.stderr, flush=True)
        return result
    finally:
        stop(proc)


def plot(runs: dict[str, dict], path: Path) -> None:
    """Honest Status latency over time in each run."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for (name, run), colour in zip(runs.items(), ("C0", "C3", "C2", "C1"), strict=False):
        t = [x for x, _ in run["samples"]]
        s = [y for _, y in run["samples"]]
        ax.plot(t, s, ".", ms=3, color=colour, label=f"{name}: p99 {run['status_p99_s']:.3f} s")
    ax.axhline(STATUS_P99_FLOOR, color="k", ls="--", lw=0.8, label="floor (p99)")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the flood started")
    ax.set_ylabel("honest Status, s (log)")
    ax.legend(fontsize=8)
    flood = runs["flood"]["flood"]
    ax.set_title(f"{flood['streams_sent']} reset streams from a CA-signed non-participant "
                 f"(or a participant) on {flood['connections']} connection(s)")
    save_figure(plt, fig, path)


def plot_idle(runs: dict[str, dict], path: Path) -> None:
    """Honest Status on a new connection each time, over the idle-connection floods."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for (name, run), colour in zip(runs.items(), ("C3", "C2", "C7"), strict=False):
        probe = run["status_new_connection"]
        ax.plot([t for t, _ in run["samples"]], [y for _, y in run["samples"]], ".", ms=3,
                color=colour, label=f"{name}: p99 {probe['p99_s']:.3f} s, "
                f"{probe['error_count']} errors")
    ax.axhline(STATUS_P99_FLOOR, color="k", ls="--", lw=0.8, label="floor (p99)")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the flood started")
    ax.set_ylabel("honest Status on a new connection, s (log)")
    ax.legend(fontsize=8)
    ax.set_title("idle TLS connections held and reopened from one address (issue 30)")
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; 1 when the floor is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=30000)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--batch", type=int, default=500, help="streams per write")
    parser.add_argument("--reset-after", type=float, default=0.002,
                        help="seconds between a batch's streams and their resets")
    parser.add_argument("--quiet-window", type=float, default=3.0)
    parser.add_argument("--idle-connections", type=int, default=1000,
                        help="idle TLS connections the idle_* runs' attacker holds")
    parser.add_argument("--idle-seconds", type=float, default=20.0,
                        help="seconds the idle_* runs' attacker holds and reopens them")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/flood.json")
    args = parser.parse_args(argv)
    meta = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_start": os.getloadavg(), "cpus": available_cpus(),
            "python": platform.python_version(), "grpcio": grpc.__version__,
            "blas": blas_settings(), "env": {k: os.environ.get(k) for k in THREAD_ENV},
            "transport_defaults": transport_defaults(), "commit": commit(),
            "command": "python -m benchmarks.bench_flood " + " ".join(argv or sys.argv[1:])}
    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        for name in args.runs:
            runs[name] = one_run(Path(tmp), name, args)
    meta["loadavg_end"] = os.getloadavg()
    flood, quiet = runs.get("flood"), runs.get("quiet")
    floods = [runs[k] for k in ("flood", "flood_participant") if k in runs]
    idle = {k: {m: v[m] for m in ("status", "status_new_connection", "fetch_site_model",
                                  "idle_flood")} for k, v in runs.items() if k in IDLE_RUNS}
    met = [r["status_p99_s"] < STATUS_P99_FLOOR and not r["honest_errors"] for r in floods]
    met += [probe["p99_s"] < STATUS_P99_FLOOR and not probe["error_count"]
            for name, r in idle.items() if name != "idle_port_count_only"
            for k, probe in r.items() if k != "idle_flood"]
    floors = {"status_p99_s": STATUS_P99_FLOOR, "met": bool(met) and all(met)}
    ratios = {} if flood is None or quiet is None else {
        "status_p99_flood_over_quiet": flood["status_p99_s"] / quiet["status_p99_s"],
        "status_p50_flood_over_quiet": flood["status_p50_s"] / quiet["status_p50_s"]}
    report = {"benchmark": "honest Status (and FetchSiteModel) during an HTTP/2 stream-reset "
                           "flood (issue 22) or idle TLS connections (issue 30)",
              "attack": {"streams": args.streams, "connections": args.connections,
                         "batch": args.batch, "reset_after_s": args.reset_after,
                         "attacker": "CA-signed non-participant",
                         "attacker_flood_participant": "participant org-c",
                         "idle_connections": args.idle_connections,
                         "idle_seconds": args.idle_seconds},
              "floors": floors, "ratios": ratios,
              "summary": {k: {m: v[m] for m in ("status_p50_s", "status_p99_s", "status_max_s",
                                                  "honest_calls", "honest_errors", "flood",
                                                  "rss_before_mib", "hwm_mib")}
                          for k, v in runs.items() if k not in IDLE_RUNS},
              "idle": idle, "runs": runs, "meta": meta}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, separators=(",", ":")) + "\n")
    if flood is not None:
        plot({k: v for k, v in runs.items() if k not in IDLE_RUNS}, args.out.with_suffix(".png"))
    elif idle:
        plot_idle({k: runs[k] for k in idle}, args.out.with_suffix(".png"))
    print(json.dumps({k: report[k] for k in ("summary", "idle", "ratios", "floors")}, indent=1))
    return 0 if floors["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
