"""A participant's mutual-TLS connection to the analyst, with bounded retries.

Only ``UNAVAILABLE`` is retried (the analyst restarting, a dropped connection), with capped
exponential back-off until the configured deadline; an upload is then re-streamed from its
start, which the analyst answers idempotently. Every other status is a refusal and becomes the
matching :mod:`common.errors` exception, carrying the analyst's message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import numpy as np

from noisyanchor.common import errors
from noisyanchor.common.errors import NoisyAnchorError
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import CHUNK_SIZE, BundleSpec, request_stream
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Project error class for each gRPC status code an analyst returns.
_ERRORS_BY_CODE: dict[str, type[NoisyAnchorError]] = {
    cls.grpc_code: cls for cls in (
        errors.InvalidInputError, errors.AlreadyExistsError, errors.UnauthenticatedError,
        errors.PermissionDeniedError, errors.PreconditionError, errors.NotFoundError,
        errors.IntegrityError, errors.BudgetExceededError)}

#: Seconds between polls of the relay while waiting for other participants.
POLL_SECONDS = 0.1


class AnalystUnavailableError(NoisyAnchorError):
    """The analyst could not be reached before the deadline."""

    grpc_code = "UNAVAILABLE"


def as_project_error(err: grpc.RpcError, what: str) -> NoisyAnchorError:
    """The project error for a gRPC failure, with the status code and the server's message."""
    code = err.code()
    cls = _ERRORS_BY_CODE.get(code.name, AnalystUnavailableError
                              if code == grpc.StatusCode.UNAVAILABLE else NoisyAnchorError)
    return cls(f"{what} refused by the analyst: {code.name}: {err.details()}")


class AnalystClient:
    """Stub calls over one mutual-TLS channel (use as a context manager).

    Parameters
    ----------
    address : str
        ``host:port`` of the analyst.
    tls : TlsFiles
        CA to trust, own client certificate and key (the certificate names the participant).
    server_name : str
        Name the analyst's certificate must carry.
    federation_id : str
    timeout : float
        Overall seconds allowed for retries and waits.
    """

    def __init__(self, address: str, tls: TlsFiles, server_name: str, federation_id: str,
                 timeout: float = 120.0) -> None:
        creds = grpc.ssl_channel_credentials(root_certificates=tls.ca.read_bytes(),
                                             private_key=tls.key.read_bytes(),
                                             certificate_chain=tls.cert.read_bytes())
        self.channel = grpc.secure_channel(
            address, creds, options=[("grpc.ssl_target_name_override", server_name)])
        self.stub = pb_grpc.AnalystStub(self.channel)
        # Bundle streams take pre-serialized messages (see common.wire.encode_chunk).
        service = pb.DESCRIPTOR.services_by_name["Analyst"].full_name
        self.raw_upload, self.raw_disclose = (
            self.channel.stream_unary(f"/{service}/{name}", request_serializer=None,
                                      response_deserializer=pb.Receipt.FromString)
            for name in ("Upload", "Disclose"))
        self.federation_id = federation_id
        self.timeout = timeout

    def __enter__(self) -> AnalystClient:
        return self

    def __exit__(self, *exc) -> None:
        self.channel.close()

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (one RPC), retrying while the analyst is UNAVAILABLE until the deadline."""
        deadline = time.monotonic() + self.timeout
        delay = 0.1
        while True:
            try:
                return fn()
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                    raise as_project_error(err, what) from None
                log.info("%s: analyst unavailable (%s); retrying", what, err.details())
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(2 * delay, 2.0)

    def wait_for(self, what: str, fn: Callable[[], Any], ready: Callable[[Any], bool]) -> Any:
        """Poll ``fn`` until ``ready(result)`` or the deadline; NOT_FOUND counts as not ready."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                result = self.call(what, fn)
                if ready(result):
                    return result
            except errors.NotFoundError:
                pass
            if time.monotonic() >= deadline:
                raise errors.PreconditionError(f"timed out after {self.timeout:g} s waiting for "
                                               f"{what}")
            time.sleep(POLL_SECONDS)

    def send_bundle(self, kind: str, spec: BundleSpec, arrays: Mapping[str, np.ndarray],
                    chunk_size: int = CHUNK_SIZE) -> pb.Receipt:
        """Stream one bundle (``kind`` is ``upload`` or ``disclosure``); re-streamed on retry."""
        rpc = self.raw_upload if kind == "upload" else self.raw_disclose
        return self.call(kind, lambda: rpc(request_stream(spec, arrays, chunk_size)))

    def status(self) -> pb.StatusReply:
        """The federation's progress."""
        return self.call("status", lambda: self.stub.Status(
            pb.StatusRequest(federation_id=self.federation_id)))
