"""The gRPC edge shared by the analyst's services: who the caller is, and project errors as
gRPC status codes.

The participant id is the subject common name of the verified client certificate (mutual TLS),
never a field of a request.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import grpc

from noisyanchor.common.errors import NoisyAnchorError, UnauthenticatedError

log = logging.getLogger(__name__)


def caller_id(context: grpc.ServicerContext) -> tuple[str, bytes]:
    """The authenticated participant id (certificate common name) and certificate PEM."""
    auth = context.auth_context()
    names = auth.get("x509_common_name") or []
    if len(names) != 1:
        raise UnauthenticatedError("no verified client certificate on this connection")
    pem = (auth.get("x509_pem_cert") or [b""])[0]
    return names[0].decode(), pem


def grpc_edge(method: Callable) -> Callable:
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
