"""The analyst's gRPC server: mutual TLS, the Analyst, Release and standard Health services on
one port, and serving until a signal, then a bounded graceful shutdown.

Shutdown (SIGTERM or SIGINT): the health service answers NOT_SERVING at once, new RPCs are
refused, RPCs in flight get :data:`SHUTDOWN_GRACE` seconds to finish and are then cancelled, and
the process exits within :data:`SHUTDOWN_DEADLINE` seconds even when an alignment or a release is
still computing (their results are only ever written atomically, so an interrupted alignment
simply runs again at the next start, and a release charged to the ledger but not sent stays
charged: the budget errs on the safe side).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from noisyanchor.analyst.admission import AdmissionPool, global_limit
from noisyanchor.analyst.caller_limits import CallerGate, StreamLimits, worker_count
from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.connection_front import (
    KEEPALIVE_TIME,
    KEEPALIVE_TIMEOUT,
    ConnectionFront,
    ConnectionLimits,
)
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.release_service import add_release_servicer
from noisyanchor.analyst.service import AnalystServicer, add_analyst_servicer
from noisyanchor.analyst.storage import Store
from noisyanchor.common.blas import load_scipy_blas
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import atomic_write
from noisyanchor.protos.v1 import analyst_pb2 as analyst_pb
from noisyanchor.protos.v1 import release_pb2 as release_pb

log = logging.getLogger(__name__)

#: Seconds RPCs in flight may take to finish after SIGTERM before they are cancelled.
SHUTDOWN_GRACE = 3.0

#: Seconds from SIGTERM to process exit, whatever is still computing.
SHUTDOWN_DEADLINE = 8.0

#: Services whose health is reported (besides the server as a whole, the empty name).
SERVICE_NAMES = tuple(
    module.DESCRIPTOR.services_by_name[name].full_name
    for module, name in ((analyst_pb, "Analyst"), (release_pb, "Release")))


@dataclass
class Running:
    """A started analyst: the mTLS server, the optional plaintext health server, the
    federation, the health servicer and the bound port."""

    server: grpc.Server
    health_server: grpc.Server | None
    federation: Federation
    health: health.HealthServicer
    port: int
    pool: AdmissionPool
    front: ConnectionFront

    def stop(self, grace: float = SHUTDOWN_GRACE) -> None:
        """NOT_SERVING, refuse new RPCs, cancel what is still running after ``grace`` seconds."""
        self.health.enter_graceful_shutdown()
        self.federation.close()
        stopped = [self.server.stop(grace)]
        if self.health_server is not None:
            stopped.append(self.health_server.stop(0))
        for event in stopped:
            event.wait(grace + 1.0)
        self.front.stop()


def server_credentials(config: AnalystConfig) -> grpc.ServerCredentials:
    """Mutual TLS: the analyst's certificate, and client certificates required from the CA."""
    tls = config.tls
    return grpc.ssl_server_credentials(
        [(tls.key.read_bytes(), tls.cert.read_bytes())],
        root_certificates=tls.ca.read_bytes(), require_client_auth=True)


def transport_options(config: AnalystConfig) -> list[tuple[str, int]]:
    """gRPC core arguments of the mutual-TLS port: the transport limits of the config
    (``[server]`` keys, see :class:`~analyst.config.AnalystConfig`) and no port sharing.

    gRPC sets SO_REUSEPORT by default, which lets a second analyst bind the same port and take
    half of the connections; ``grpc.so_reuseport = 0`` makes the second bind fail instead.
    ``grpc.http.overload_protection`` (on by default, set here so it stays on) counts the
    streams a client reset but the analyst has not let go of towards
    ``max_streams_per_connection``: a stream-reset flood cannot queue more than that many calls
    per connection (HTTP/2 "rapid reset", CVE-2023-44487).
    """
    pending = pending_calls(config)
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_concurrent_streams", config.max_streams_per_connection),
        ("grpc.http.overload_protection", 1),
        ("grpc.max_allowed_incoming_connections", config.max_connections),
        ("grpc.server_handshake_timeout_ms", int(config.handshake_timeout * 1000)),
        ("grpc.max_connection_idle_ms", int(config.connection_idle_timeout * 1000)),
        # Every client pinged (with calls or without, data sent or not): one that does not
        # answer is closed by gRPC, and the front closes one that sends nothing for longer.
        ("grpc.keepalive_time_ms", int(KEEPALIVE_TIME * 1000)),
        ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # gRPC drops calls at random (CANCELLED) from the first of these counts on, not the
        # second: the first must hold everything the analyst promises to keep.
        ("grpc.server.max_pending_requests", pending),
        ("grpc.server.max_pending_requests_hard_limit", 2 * pending),
    ]


def pending_calls(config: AnalystConfig) -> int:
    """Calls the transport may hold before the analyst takes them: ``[server]
    max_pending_calls``, raised to what every participant's connections and one source
    address's could send at once (``(P * max_connections_per_caller +
    max_connections_per_address) * max_streams_per_connection``), so that one identity or one
    address filling its connections with unread calls cannot push another participant's call
    past the count from which gRPC cancels calls at random (``grpc.server.max_pending_requests``,
    its soft limit; every call past twice it)."""
    connections = (len(config.participants) * config.max_connections_per_caller
                   + config.max_connections_per_address)
    return max(config.max_pending_calls, connections * config.max_streams_per_connection)


def max_concurrent_rpcs(config: AnalystConfig, workers: int) -> int:
    """Calls admitted at once (running or queued for a worker), over which gRPC refuses a call
    at arrival (RESOURCE_EXHAUSTED "Concurrent RPC limit exceeded!"): every participant's
    ``max_calls_per_caller`` (:func:`analyst.admission.global_limit`), so the admission pool's
    per-caller limit always refuses a flooding peer first and gRPC's never refuses an honest
    one."""
    return global_limit(len(config.participants), config.max_calls_per_caller, workers)


def _health_servicer(server: grpc.Server) -> health.HealthServicer:
    servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer


def start_server(config: AnalystConfig) -> Running:
    """Open the store, resume, and start serving."""
    fed = Federation(config, Store(config.output_dir))
    # Calls are admitted at arrival (caller, per-caller queue, turns: analyst.admission), then
    # pass the caller gate (identity again, per-caller stream limits) on a worker; the pool
    # fits every participant's full share of streams plus room for short calls.
    # gRPC listens on loopback only; the public port is the connection front's, which counts
    # connections per source address and per participant (analyst.connection_front).
    front = ConnectionFront(ConnectionLimits.of(config))
    limits = StreamLimits.of(config)
    workers = worker_count(len(config.participants), limits)
    pool = AdmissionPool(workers, fed.check_member, lambda: fed.ca_pems,
                         config.max_queued_calls_per_caller, config.max_calls_per_caller,
                         connections=front)
    server = grpc.server(pool, interceptors=[CallerGate(limits, fed.check_member, fed.ca_pems,
                                                        front)],
                         options=transport_options(config),
                         maximum_concurrent_rpcs=max_concurrent_rpcs(config, workers))
    add_analyst_servicer(AnalystServicer(fed), server)  # bundle streams read raw (issue 14)
    add_release_servicer(server, fed)  # DP similarity release on the same mTLS port
    checks = _health_servicer(server)
    try:
        backend_port = server.add_secure_port("127.0.0.1:0", server_credentials(config))
    except RuntimeError:  # grpcio raises where it used to return 0
        backend_port = 0
    if backend_port == 0:
        raise InvalidInputError("cannot listen on 127.0.0.1 (the analyst's loopback port "
                                "behind its public one): is the loopback interface up?")
    _listen(front, config, backend_port)
    health_server = None
    if config.health_port is not None:
        # Plaintext, health only, on loopback: for container and load-balancer probes, which
        # hold no client certificate. The same servicer answers on the mTLS port.
        health_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(checks, health_server)
        if health_server.add_insecure_port(f"127.0.0.1:{config.health_port}") == 0:
            raise InvalidInputError(f"cannot listen for health checks on "
                                    f"127.0.0.1:{config.health_port}")
        health_server.start()
    server.start()
    port = front.port
    for name in ("", *SERVICE_NAMES):
        checks.set(name, health_pb2.HealthCheckResponse.SERVING)
    fed.maybe_align()
    if config.port_file is not None:
        atomic_write(Path(config.port_file), f"{port}\n".encode())
    log.info("federation %s: serving %s on %s:%d (mutual TLS); waiting for %s",
             config.federation_id, config.method, config.host, port,
             ", ".join(fed.missing_uploads()) or "nobody (all uploads committed)")
    # Nothing before listening imports scipy (a second of the start under load, issue 22): its
    # BLAS is loaded and given the process's thread count now, beside the first calls.
    threading.Thread(target=load_scipy_blas, name="load-scipy", daemon=True).start()
    return Running(server, health_server, fed, checks, port, pool, front)


def _listen(front: ConnectionFront, config: AnalystConfig, backend_port: int) -> None:
    """Start the connection front on the configured public address."""
    try:
        front.start(config.host, config.port, backend_port)
    except OSError as err:
        front.stop()
        raise InvalidInputError(f"cannot listen on {config.host}:{config.port}: the port is in "
                                "use by another program, or the address is not one of this "
                                f"host's ({err.strerror}); stop that program or set another "
                                "[server] port") from err


def _exit(running: Running, started: float) -> NoReturn:
    """Leave the process now, abandoning whatever still computes (an alignment, a release).

    Python would join the RPC worker threads (and gRPC's own grace timer) at interpreter exit,
    so a release in the middle of a long projection would hold the process for minutes; nothing
    they hold is half-written (atomic writes), so the process leaves without them.
    """
    busy = [f"{running.pool.running} RPC handler(s)"] if running.pool.running else []
    if running.federation.state == "aligning":
        busy.append("the alignment (it runs again at the next start)")
    if busy:
        log.warning("abandoning %s", " and ".join(busy))
    log.info("stopped %.1f s after the signal", time.monotonic() - started)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve(config: AnalystConfig) -> NoReturn:
    """Serve until SIGTERM or SIGINT, then shut down within :data:`SHUTDOWN_DEADLINE` and exit
    the process (status 0)."""
    running = start_server(config)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, _frame) -> None:
        received.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    print(f"analyst: federation {config.federation_id} listening on {config.host}:"
          f"{running.port}", flush=True)
    stop.wait()
    started = time.monotonic()
    log.info("%s received: shutting down (health NOT_SERVING, new work refused, %g s grace)",
             signal.Signals(received[0]).name, SHUTDOWN_GRACE)
    running.stop(min(SHUTDOWN_GRACE, SHUTDOWN_DEADLINE - 1.0))
    _exit(running, started)
