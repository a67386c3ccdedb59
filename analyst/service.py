"""The gRPC edge of the analyst: identify the caller from its TLS certificate, decode, call
:class:`analyst.federation.Federation`, encode; project errors become gRPC status codes here.

The participant id is the subject common name of the verified client certificate (mutual TLS),
never a field of a request.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Committed, Federation
from noisyanchor.analyst.storage import Store
from noisyanchor.analyst.stream_watchdog import IdleWatchdog
from noisyanchor.common.errors import (
    InvalidInputError,
    NoisyAnchorError,
    StreamIdleError,
    UnauthenticatedError,
)
from noisyanchor.common.files import atomic_write
from noisyanchor.common.wire import BundleSpec
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


def caller_id(context: grpc.ServicerContext) -> tuple[str, bytes]:
    """The authenticated participant id (certificate common name) and certificate PEM."""
    auth = context.auth_context()
    names = auth.get("x509_common_name") or []
    if len(names) != 1:
        raise UnauthenticatedError("no verified client certificate on this connection")
    pem = (auth.get("x509_pem_cert") or [b""])[0]
    return names[0].decode(), pem


def _edge(method: Callable) -> Callable:
    """Map project errors to gRPC status codes (the message names the problem)."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except NoisyAnchorError as err:
            code = getattr(grpc.StatusCode, err.grpc_code)
            # NOT_FOUND is the normal answer to a relay poll that comes early.
            log.log(logging.DEBUG if code == grpc.StatusCode.NOT_FOUND else logging.WARNING,
                    "%s refused: %s: %s", method.__name__, code.name, err)
            context.abort(code, str(err))

    return wrapper


def _split_stream(request_iterator: Iterator[pb.UploadRequest]) -> tuple[BundleSpec,
                                                                          Iterator[bytes]]:
    """The header of a bundle stream and an iterator over its chunk payloads."""
    first = next(request_iterator, None)
    if first is None or first.WhichOneof("part") != "header":
        raise InvalidInputError("a bundle stream must start with its header")

    def chunks() -> Iterator[bytes]:
        for msg in request_iterator:
            if msg.WhichOneof("part") != "chunk":
                raise InvalidInputError("only chunks may follow the header")
            yield msg.chunk

    return BundleSpec.from_proto(first.header), chunks()


class AnalystServicer(pb_grpc.AnalystServicer):
    """Thin adapter from the wire contract to :class:`Federation`."""

    def __init__(self, federation: Federation) -> None:
        self.fed = federation

    def _caller(self, context, federation_id: str) -> tuple[str, bytes]:
        pid, pem = caller_id(context)
        self.fed.check_caller(pid, federation_id)
        return pid, pem

    def _receipt(self, pid: str, committed: Committed) -> pb.Receipt:
        return pb.Receipt(participant_id=pid, receipt=committed.receipt,
                          already_committed=committed.already_committed)

    def _bundle(self, request_iterator, context, kind: str,
                commit: Callable[[str, BundleSpec, Iterator[bytes]], Committed]) -> pb.Receipt:
        """Receive one bundle stream under the idle timeout and commit it with ``commit``."""
        pid, _ = caller_id(context)
        timeout = self.fed.config.stream_idle_timeout
        with IdleWatchdog(context, timeout, f"{kind} stream of {pid!r}") as watchdog:
            try:
                spec, chunks = _split_stream(watchdog.watch(request_iterator))
                return self._receipt(pid, commit(pid, spec, chunks))
            except (NoisyAnchorError, grpc.RpcError):
                if watchdog.expired:  # the stream ended because the watchdog cancelled it
                    raise StreamIdleError(f"{kind} stream of {pid!r} sent nothing for "
                                          f"{timeout:g} s; nothing was stored") from None
                raise

    @_edge
    def Upload(self, request_iterator, context):
        return self._bundle(request_iterator, context, "upload", self.fed.upload)

    @_edge
    def Disclose(self, request_iterator, context):
        return self._bundle(request_iterator, context, "disclosure", self.fed.disclose)

    @_edge
    def Status(self, request, context):
        self._caller(context, request.federation_id)
        return pb.StatusReply(**self.fed.status())

    @_edge
    def PublishKey(self, request, context):
        pid, pem = self._caller(context, request.federation_id)
        self.fed.publish_key(pid, request.public_key, request.signature, pem)
        return pb.PublishKeyReply()

    @_edge
    def ListKeys(self, request, context):
        self._caller(context, request.federation_id)
        return pb.ListKeysReply(expected=self.fed.config.participants, keys=self.fed.list_keys())

    @_edge
    def PostSealed(self, request, context):
        pid, _ = self._caller(context, request.federation_id)
        self.fed.post_sealed(pid, list(request.shares))
        return pb.PostSealedReply()

    @_edge
    def GetSealed(self, request, context):
        pid, _ = self._caller(context, request.federation_id)
        return self.fed.get_sealed(pid)

    @_edge
    def PublishCommitment(self, request, context):
        pid, _ = self._caller(context, request.federation_id)
        self.fed.publish_commitment(pid, request.digest)
        return pb.PublishCommitmentReply()

    @_edge
    def ListCommitments(self, request, context):
        self._caller(context, request.federation_id)
        return pb.ListCommitmentsReply(expected=self.fed.config.participants,
                                       commitments=self.fed.list_commitments())


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
    from noisyanchor.analyst.release_service import add_release_servicer  # it imports this module

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
