"""The gRPC edge shared by the analyst's services: who the caller is, and project errors as
gRPC status codes.

The participant id comes from the verified client certificate of the connection (mutual TLS),
read whole by :func:`common.identity.authenticate`, never from a field of a request.

Refusals are logged, but a client that repeats one refused call cannot fill the analyst's disk
with the log: each distinct refusal (RPC, status and message) is logged at most
:data:`REFUSALS_LOGGED` times per :data:`REFUSAL_WINDOW` seconds; the rest are counted, and the
count is logged when that refusal comes again in a later window.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence

import grpc

from noisyanchor.common.errors import NoisyAnchorError, UnauthenticatedError
from noisyanchor.common.identity import authenticate

log = logging.getLogger(__name__)

#: Times one distinct refusal is logged per window, and the window (seconds).
REFUSALS_LOGGED, REFUSAL_WINDOW = 5, 60.0
#: Distinct refusals remembered before those of ended windows are forgotten.
_MAX_REMEMBERED = 4096


class RefusalLog:
    """How often each distinct refusal was seen in its current window (thread-safe).

    :meth:`admit` says whether to log one more, and how many of the same went unlogged in the
    window before (reported once, when the refusal recurs).
    """

    def __init__(self, limit: int = REFUSALS_LOGGED, window: float = REFUSAL_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, ...], tuple[float, int]] = {}  # key -> (window start, count)

    def admit(self, key: tuple[str, ...]) -> tuple[int, int]:
        """``(number of this refusal in its window, unlogged ones of the window before)``:
        log it when the number is at most ``limit``."""
        now = self.clock()
        with self._lock:
            start, count = self._seen.get(key, (now, 0))
            unlogged = 0
            if now - start >= self.window:
                unlogged, start, count = max(0, count - self.limit), now, 0
            self._seen[key] = (start, count + 1)
            if len(self._seen) > _MAX_REMEMBERED:  # forget refusals whose window ended
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window}
            return count + 1, unlogged


_refusals = RefusalLog()


def caller_id(context: grpc.ServicerContext,
              ca_pems: Sequence[bytes]) -> tuple[str, bytes]:
    """The authenticated participant id and the certificate PEM it was read from, by the
    federation's one rule (:func:`common.identity.authenticate`: issued directly by one of the
    CA certificates ``ca_pems``, naming exactly one participant).

    Not gRPC's ``x509_common_name``: it stops at a NUL byte and shows only the first of several
    common names (see :mod:`common.identity` for the rule).
    """
    pems = context.auth_context().get("x509_pem_cert") or []
    if len(pems) != 1:
        raise UnauthenticatedError("no verified client certificate on this connection")
    return authenticate(pems[0], ca_pems), pems[0]


def log_refusal(rpc: str, code: grpc.StatusCode, err: NoisyAnchorError) -> None:
    """Log that ``rpc`` was refused with ``code`` and ``err`` (bounded: :class:`RefusalLog`)."""
    # NOT_FOUND is the normal answer to a relay poll that comes early.
    level = logging.DEBUG if code == grpc.StatusCode.NOT_FOUND else logging.WARNING
    number, unlogged = _refusals.admit((rpc, code.name, str(err)))
    if unlogged:
        log.log(level, "%s refused %d more times with %s as below (not logged, limit %d per "
                "%g s)", rpc, unlogged, code.name, _refusals.limit, _refusals.window)
    if number <= _refusals.limit:
        log.log(level, "%s refused: %s: %s%s", rpc, code.name, err,
                f" (identical refusals in the next {_refusals.window:g} s are counted, not "
                "logged)" if number == _refusals.limit else "")


def abort(context: grpc.ServicerContext, rpc: str, err: NoisyAnchorError) -> None:
    """End the call with ``err``'s status code and message (raises, as ``context.abort``
    does), and log the refusal."""
    code = getattr(grpc.StatusCode, err.grpc_code)
    log_refusal(rpc, code, err)
    context.abort(code, str(err))


def grpc_edge(method: Callable) -> Callable:
    """Map project errors to gRPC status codes (the message names the problem)."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except NoisyAnchorError as err:
            abort(context, method.__name__, err)

    return wrapper
