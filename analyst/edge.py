"""The gRPC edge shared by the analyst's services: who the caller is, and project errors as
gRPC status codes.

The participant id comes from the verified client certificate of the connection (mutual TLS),
read whole by :func:`common.identity.peer_id`, never from a field of a request.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import grpc

from noisyanchor.common.errors import NoisyAnchorError, UnauthenticatedError
from noisyanchor.common.identity import peer_id

log = logging.getLogger(__name__)


def caller_id(context: grpc.ServicerContext) -> tuple[str, bytes]:
    """The authenticated participant id and the certificate PEM it was read from.

    Not gRPC's ``x509_common_name``: it stops at a NUL byte and shows only the first of several
    common names (see :mod:`common.identity` for the rule).
    """
    pems = context.auth_context().get("x509_pem_cert") or []
    if len(pems) != 1:
        raise UnauthenticatedError("no verified client certificate on this connection")
    return peer_id(pems[0]), pems[0]


def abort(context: grpc.ServicerContext, rpc: str, err: NoisyAnchorError) -> None:
    """End the call with ``err``'s status code and message (raises, as ``context.abort``
    does), and log the refusal."""
    code = getattr(grpc.StatusCode, err.grpc_code)
    # NOT_FOUND is the normal answer to a relay poll that comes early.
    log.log(logging.DEBUG if code == grpc.StatusCode.NOT_FOUND else logging.WARNING,
            "%s refused: %s: %s", rpc, code.name, err)
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
