"""A participant's mutual-TLS connection to the analyst: deadlines, retries, waits with progress.

* Every RPC carries a deadline (:data:`RPC_DEADLINE` for a unary call, set by a channel
  interceptor so no call can forget it; a bundle stream gets one scaled to its size).
* Only ``UNAVAILABLE`` is retried (the analyst restarting or not started yet, a dropped
  connection), with capped exponential back-off and jitter until the client's deadline; an upload
  is then re-streamed from its start, which the analyst answers idempotently. When the analyst
  stays unavailable the client finds out why (:mod:`participant.tls_check`) and stops at once
  with the cause when it is a certificate problem, which no retry can fix.
* Every other status is a refusal and becomes the matching :mod:`common.errors` exception,
  carrying the analyst's message; ``DEADLINE_EXCEEDED`` becomes
  :class:`~common.errors.DeadlineExceededError`.
* :meth:`AnalystClient.wait_for` polls until the other participants have done their part,
  reporting who is missing, and stops as soon as the analyst says one of them withdrew.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import numpy as np
from cryptography import x509

from noisyanchor.common import errors
from noisyanchor.common.durations import human_duration, human_time
from noisyanchor.common.errors import (
    AnalystUnavailableError,
    FederationFailedError,
    IntegrityError,
    InvalidInputError,
    NoisyAnchorError,
    UnauthenticatedError,
)
from noisyanchor.common.identity import participant_id
from noisyanchor.common.progress import Pending
from noisyanchor.common.text import MAX_PEER_TEXT, peer_text
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import CHUNK_SIZE, PROTO_HEADERS, BundleSender, BundleSpec
from noisyanchor.participant import tls_check
from noisyanchor.participant.core.upload import SiteSigner
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Project error class for each gRPC status code an analyst returns.
_ERRORS_BY_CODE: dict[str, type[NoisyAnchorError]] = {
    cls.grpc_code: cls for cls in (
        errors.InvalidInputError, errors.AlreadyExistsError, errors.UnauthenticatedError,
        errors.PermissionDeniedError, errors.PreconditionError, errors.NotFoundError,
        errors.IntegrityError, errors.BudgetExceededError, errors.DeadlineExceededError,
        errors.AnalystUnavailableError)}

#: Seconds one unary RPC may take.
RPC_DEADLINE = 30.0

#: A bundle stream may take this long plus one second per :data:`STREAM_MIN_RATE` bytes.
STREAM_DEADLINE_BASE, STREAM_MIN_RATE = 60.0, 1 << 20

#: Seconds a site model fetch may take, and the largest site model accepted (bytes).
SITE_MODEL_DEADLINE, MAX_SITE_MODEL_BYTES = 300.0, 1 << 30

#: Seconds between polls of the relay while waiting for other participants (first, largest).
POLL_SECONDS, MAX_POLL_SECONDS = 0.1, 1.0

#: Back-off between connection attempts: first and largest delay (seconds).
RETRY_FIRST, RETRY_MAX = 0.2, 5.0

#: Seconds between two progress lines of one wait.
PROGRESS_EVERY = 10.0

#: Seconds of unavailability after which the client looks for the cause.
DIAGNOSE_AFTER = 2.0


def as_project_error(err: grpc.RpcError, what: str) -> NoisyAnchorError:
    """The project error for a gRPC failure, with the status code and the server's message."""
    code = err.code()
    cls = _ERRORS_BY_CODE.get(code.name, NoisyAnchorError)
    return cls(f"{what} refused by the analyst: {code.name}: {err.details()}")


def _receive_site_model(parts, max_bytes: int) -> bytes:
    """The bytes of a ``FetchSiteModel`` stream: a header, then chunks adding up to exactly its
    byte count and SHA-256."""
    first = next(iter(parts), None)
    if first is None or first.WhichOneof("part") != "header":
        raise IntegrityError("the site model stream does not start with its header")
    header = first.header
    if header.nbytes > max_bytes:
        raise InvalidInputError(f"the analyst announces a {header.nbytes}-byte site model, more "
                                f"than the limit of {max_bytes}")
    buf, digest = bytearray(), hashlib.sha256()
    for part in parts:
        if part.WhichOneof("part") != "chunk":
            raise IntegrityError("only chunks may follow the header of a site model stream")
        if len(buf) + len(part.chunk) > header.nbytes:
            raise IntegrityError(f"the site model stream carries more than the "
                                 f"{header.nbytes} bytes its header announces")
        buf += part.chunk
        digest.update(part.chunk)
    if len(buf) != header.nbytes or digest.digest() != header.sha256:
        raise IntegrityError(f"the site model stream ended after {len(buf)} of {header.nbytes} "
                             "bytes or does not match its SHA-256 (truncated or corrupt)")
    return bytes(buf)


class _DefaultDeadline(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                       grpc.StreamUnaryClientInterceptor):
    """Gives every call without a timeout the default one."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def _details(self, details):
        if details.timeout is not None:
            return details
        return _Details(details.method, self.seconds, details.metadata, details.credentials,
                        details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _Details(grpc.ClientCallDetails):
    """Call details with a timeout (gRPC's own class is private)."""

    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = (credentials, wait_for_ready,
                                                                    compression)


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
        Seconds allowed for retries and waits from now (:meth:`wait_until` moves the deadline).
    rpc_deadline : float
        Seconds one unary RPC may take.
    """

    def __init__(self, address: str, tls: TlsFiles, server_name: str, federation_id: str,
                 timeout: float = 120.0, rpc_deadline: float = RPC_DEADLINE) -> None:
        creds = grpc.ssl_channel_credentials(root_certificates=tls.ca.read_bytes(),
                                             private_key=tls.key.read_bytes(),
                                             certificate_chain=tls.cert.read_bytes())
        self.channel = grpc.intercept_channel(
            grpc.secure_channel(address, creds,
                                options=[("grpc.ssl_target_name_override", server_name)]),
            _DefaultDeadline(rpc_deadline))
        self.stub = pb_grpc.AnalystStub(self.channel)
        # Bundle streams take pre-serialized messages (see common.wire.encode_chunk).
        service = pb.DESCRIPTOR.services_by_name["Analyst"].full_name
        self.raw_upload, self.raw_disclose = (
            self.channel.stream_unary(f"/{service}/{name}", request_serializer=None,
                                      response_deserializer=pb.Receipt.FromString)
            for name in ("Upload", "Disclose"))
        self.address, self.tls, self.server_name = address, tls, server_name
        self.federation_id = federation_id
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self._diagnosed = False
        # The federation's deadline (Unix seconds) when the waits follow it (follow_deadline).
        self._followed: float | None = None

    def connect(self, within: float) -> None:
        """Connect (TCP and the TLS handshake) within ``within`` seconds, or raise
        :class:`~common.errors.AnalystUnavailableError` with the likely cause
        (:func:`participant.tls_check.explain`, itself bounded by ``within``): a question
        that returns promptly when the analyst is down, where :meth:`call` would retry."""
        try:
            grpc.channel_ready_future(self.channel).result(timeout=within)
        except grpc.FutureTimeoutError:
            cause = tls_check.explain(self.address, self.tls, self.server_name, timeout=within)
            raise AnalystUnavailableError(
                f"the analyst at {self.address} did not answer within {within:g} s"
                + (f": {cause}" if cause else "")) from None

    def __enter__(self) -> AnalystClient:
        return self

    def __exit__(self, *exc) -> None:
        self.channel.close()

    def wait_until(self, deadline: float) -> None:
        """Retry and wait until ``deadline`` (``time.monotonic()`` seconds)."""
        self.deadline = deadline
        self.timeout = max(0.0, deadline - time.monotonic())

    def follow_deadline(self, deadline_unix: float) -> None:
        """Wait until the federation's deadline (Unix seconds), and keep following it: when the
        analyst declares a later one (its operator extended it), waits last until then."""
        self._followed = deadline_unix
        self.wait_until(time.monotonic() + max(0.0, deadline_unix - time.time()))

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _unavailable(self, what: str, err: grpc.RpcError, since: float) -> str | None:
        """The cause of a lasting UNAVAILABLE when it is one no retry fixes (TLS), else None."""
        if self._diagnosed or time.monotonic() - since < DIAGNOSE_AFTER:
            return None
        self._diagnosed = True
        cause = tls_check.explain(self.address, self.tls, self.server_name)
        fatal = cause is not None and not cause.startswith(("nothing listens", "cannot reach",
                                                            "cannot resolve"))
        if cause is not None:
            log.log(logging.WARNING if fatal else logging.INFO,
                    "%s: the analyst at %s is unavailable: %s", what, self.address, cause)
        return cause if fatal else None

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (one RPC), retrying while the analyst is UNAVAILABLE until the deadline."""
        delay = RETRY_FIRST
        since = time.monotonic()
        while True:
            try:
                return fn()
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise as_project_error(err, what) from None
                cause = self._unavailable(what, err, since)
                if cause is not None:
                    raise AnalystUnavailableError(f"{what}: cannot connect to the analyst at "
                                                  f"{self.address} (UNAVAILABLE): {cause}") \
                        from None
                if self._remaining() <= 0:
                    hint = tls_check.explain(self.address, self.tls, self.server_name)
                    raise AnalystUnavailableError(
                        f"{what}: the analyst at {self.address} stayed unavailable for "
                        f"{human_duration(time.monotonic() - since)} (UNAVAILABLE: "
                        f"{err.details()})"
                        + (f"; likely cause: {hint}" if hint else "")) from None
                log.info("%s: analyst at %s unavailable (%s); retrying in %.1f s", what,
                         self.address, err.details(), delay)
                time.sleep(max(0.0, min(delay, self._remaining())))
                delay = min(RETRY_MAX, delay * 2) * random.uniform(0.8, 1.0)

    def check_federation(self) -> None:
        """Raise when the federation cannot complete any more: a participant withdrew, or the
        analyst reports it failed."""
        status = self.status()
        if self._followed is not None and status.deadline_unix > self._followed:
            log.info("the federation's deadline moved to %s: waiting until then",
                     human_time(datetime.datetime.fromtimestamp(status.deadline_unix,
                                                                datetime.UTC)))
            self.follow_deadline(status.deadline_unix)
        if status.withdrawn:
            who = "; ".join(f"{w.participant_id}: {peer_text(w.reason, MAX_PEER_TEXT)}"
                            for w in status.withdrawn)  # relayed text: cleaned again here
            ids = ", ".join(w.participant_id for w in status.withdrawn)
            raise FederationFailedError(f"participant(s) {ids} withdrew from federation "
                                        f"{self.federation_id!r} ({who}); stopping instead of "
                                        f"waiting for them. Once {ids} run(s) the upload again "
                                        "(that clears the withdrawal), run this one again: it "
                                        "resumes where it stopped")
        if status.state == "failed":
            raise FederationFailedError(f"federation {self.federation_id!r} failed: "
                                        f"{status.error}")

    def wait_for(self, what: str, fn: Callable[[], Any], ready: Callable[[Any], bool],
                 missing: Callable[[Any], list[str] | Pending] | None = None) -> Any:
        """Poll ``fn`` until ``ready(result)`` or the deadline; NOT_FOUND counts as not ready.

        ``missing(result)`` (``result`` None before the first answer) names whom the wait is
        for, who then still have to ``what``, or a :class:`~common.progress.Pending` when
        whom and what change during the wait (logged every :data:`PROGRESS_EVERY` seconds and
        whenever it changes, with the time waited and left in human units). A participant's
        withdrawal ends the wait at once; a deadline the analyst extends is followed.
        """
        started = time.monotonic()
        last_report, last_pending = started, None
        pause = POLL_SECONDS
        while True:
            result = None
            try:
                result = self.call(what, fn)
                if ready(result):
                    return result
            except errors.NotFoundError:
                pass
            now = time.monotonic()
            who = missing(result) if missing is not None else None
            pending = who if isinstance(who, Pending) else Pending(tuple(who or ("the others",)),
                                                                    what)
            if now - last_report >= PROGRESS_EVERY or pending != last_pending:
                self.check_federation()
                log.info("waiting for %s (%s so far, %s left)", pending,
                         human_duration(now - started), human_duration(max(0.0, self._remaining())))
                last_report, last_pending = now, pending
            if self._remaining() <= 0 and self._followed is not None:
                with contextlib.suppress(AnalystUnavailableError):
                    self.check_federation()  # one last look: the deadline may have moved
            if self._remaining() <= 0:
                raise errors.DeadlineExceededError(
                    f"timed out after {human_duration(now - started)} waiting for {pending}; "
                    "every participant must run before the deadline (the analyst's "
                    "[federation] deadline, or [participant] timeout)")
            time.sleep(max(0.0, min(pause, self._remaining())))
            pause = min(MAX_POLL_SECONDS, pause * 1.5)

    def send_bundle(self, kind: str, spec: BundleSpec, arrays: Mapping[str, np.ndarray],
                    chunk_size: int = CHUNK_SIZE) -> pb.Receipt:
        """Stream one bundle (``kind`` is ``upload`` or ``disclosure``), signed by this site's
        kit key over its receipt (:class:`participant.core.upload.SiteSigner`); re-streamed on
        retry. The analyst's receipt is checked against the one this site computes.

        With ``spec`` from ``bundle_spec(..., digests=False)`` the arrays are hashed while they
        are sent and the digests follow in the trailer (:class:`common.wire.BundleSender`); a
        retry after a complete pass carries them in its header.
        """
        rpc = self.raw_upload if kind == "upload" else self.raw_disclose
        deadline = STREAM_DEADLINE_BASE + spec.nbytes / STREAM_MIN_RATE
        signer = self.signer
        sender = BundleSender(spec, arrays, chunk_size, sign=None if signer is None else (
            lambda final: signer.bundle_signature(kind, final)))
        reply = self.call(kind, lambda: rpc(sender.messages(), timeout=deadline))
        if signer is not None:
            signer.checked_receipt(kind, sender.spec, reply.receipt)
        return reply

    @functools.cached_property
    def signer(self) -> SiteSigner | None:
        """This site's statements, signed with its kit key as the id its own certificate names
        (:func:`common.identity.participant_id`). None when it names no one participant: such a
        site's statements go unsigned, and the analyst refuses the certificate saying why."""
        try:
            pid = participant_id(x509.load_pem_x509_certificate(self.tls.cert.read_bytes()))
        except (UnauthenticatedError, ValueError):
            return None
        return SiteSigner(self.federation_id, pid, self.tls.key.read_bytes(), PROTO_HEADERS)

    def status(self, *, rejoin: bool = False) -> pb.StatusReply:
        """The federation's progress; ``rejoin``: this participant takes part again, which
        clears its own standing withdrawal (``StatusRequest.rejoin``)."""
        return self.call("status", lambda: self.stub.Status(
            pb.StatusRequest(federation_id=self.federation_id, rejoin=rejoin)))

    def describe(self) -> pb.FederationInfo:
        """The federation's declaration (schema, method parameters, deadline)."""
        return self.call("describe the federation", lambda: self.stub.Describe(
            pb.DescribeRequest(federation_id=self.federation_id)))

    def fetch_site_model(self, participant_id: str,
                         max_bytes: int = MAX_SITE_MODEL_BYTES) -> bytes:
        """This participant's site model file from the analyst (``FetchSiteModel``), checked by
        its size and SHA-256 as it arrives; retried (from its start) while the analyst is
        unavailable. A federation that is not done is a refusal (FAILED_PRECONDITION) naming
        what it waits for. The request is signed by this site's kit key."""
        request = pb.SiteModelRequest(
            federation_id=self.federation_id, participant_id=participant_id,
            signature=b"" if self.signer is None else self.signer.site_model_signature(
                participant_id))
        return self.call("fetch the site model", lambda: _receive_site_model(
            self.stub.FetchSiteModel(request, timeout=SITE_MODEL_DEADLINE), max_bytes))

    def withdraw(self, reason: str) -> None:
        """Tell the analyst (and through it the others) that this participant cannot take
        part, and why."""
        self.call("withdraw", lambda: self.stub.Withdraw(
            pb.WithdrawRequest(federation_id=self.federation_id, reason=reason)))
