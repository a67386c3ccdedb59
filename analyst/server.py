"""The analyst's gRPC server: mutual TLS, the Analyst and Release services on one port, and
serving until a signal."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures
from pathlib import Path

import grpc

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.release_service import add_release_servicer
from noisyanchor.analyst.service import AnalystServicer
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import atomic_write
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


def server_credentials(config: AnalystConfig) -> grpc.ServerCredentials:
    """Mutual TLS: the analyst's certificate, and client certificates required from the CA."""
    tls = config.tls
    return grpc.ssl_server_credentials(
        [(tls.key.read_bytes(), tls.cert.read_bytes())],
        root_certificates=tls.ca.read_bytes(), require_client_auth=True)


def start_server(config: AnalystConfig) -> tuple[grpc.Server, Federation, int]:
    """Open the store, resume, and start serving; returns the server, federation and port."""
    fed = Federation(config, Store(config.output_dir))
    # One worker per participant for its upload stream, plus room for relay polls.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=len(config.participants) + 16))
    pb_grpc.add_AnalystServicer_to_server(AnalystServicer(fed), server)
    add_release_servicer(server, fed)  # DP similarity release on the same mTLS port
    port = server.add_secure_port(f"{config.host}:{config.port}", server_credentials(config))
    if port == 0:
        raise InvalidInputError(f"cannot listen on {config.host}:{config.port}")
    server.start()
    fed.maybe_align()
    if config.port_file is not None:
        atomic_write(Path(config.port_file), f"{port}\n".encode())
    log.info("federation %s: serving on %s:%d", config.federation_id, config.host, port)
    return server, fed, port


def serve(config: AnalystConfig) -> int:
    """Serve until SIGTERM or SIGINT; returns the bound port."""
    server, _, port = start_server(config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"analyst: federation {config.federation_id} listening on {config.host}:{port}",
          flush=True)
    stop.wait()
    server.stop(grace=2.0).wait()
    return port
