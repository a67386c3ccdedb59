"""The gRPC edge shared by the analyst's services: who the caller is, and project errors as
gRPC status codes.

The participant id comes from the verified client certificate of the connection (mutual TLS),
read whole by :func:`common.identity.authenticate`, never from a field of a request.

Text a peer sends is bounded before anything touches it (:func:`bound_request`, on every
request message before its handler runs): an id field (``*_id``, ``dataset``) that breaks the id
rule is refused without being echoed, and every other string is cut to
:data:`MAX_FIELD_BYTES` bytes. What goes back to a caller (and to the log) is cut to
:data:`MAX_STATUS_BYTES` bytes whatever produced it, and what goes back to a caller names no
local absolute path (:func:`remote_text`).

Refusals are logged, but a client cannot fill the analyst's disk with the log: refusals are
counted per caller (participant id, or the name its certificate gives), RPC and status code,
whatever their text, and each such kind is logged at most :data:`REFUSALS_LOGGED` times per
:data:`REFUSAL_WINDOW` seconds; the rest are counted, and the count is logged when that kind of
refusal comes again in a later window.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Sequence

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# REFUSALS_LOGGED and REFUSAL_WINDOW: re-exported, the limits the edge applies.
from noisyanchor.analyst.core.refusal_log import REFUSAL_WINDOW as REFUSAL_WINDOW
from noisyanchor.analyst.core.refusal_log import REFUSALS_LOGGED as REFUSALS_LOGGED
from noisyanchor.analyst.core.refusal_log import RefusalLog
from noisyanchor.common.errors import InvalidInputError, NoisyAnchorError, UnauthenticatedError
from noisyanchor.common.identity import authenticate
from noisyanchor.common.text import cut_bytes
from noisyanchor.common.tomlconfig import ID_PATTERN

log = logging.getLogger(__name__)

#: Longest status message sent to a caller and logged (bytes of UTF-8).
MAX_STATUS_BYTES = 1024
#: Longest string field of a request kept (bytes of UTF-8): a withdrawal reason's 2,000
#: characters at 4 bytes each.
MAX_FIELD_BYTES = 8000
#: Longest id (the id rule: :data:`common.tomlconfig.ID_PATTERN`).
MAX_ID_LENGTH = 64
#: The caller of the call the current thread serves (set by the caller gate), for the refusal
#: log of handlers that do not know it.
_current = threading.local()


def serving(caller: str | None) -> None:
    """Record that the current thread now serves a call of ``caller``."""
    _current.caller = caller


def is_id_field(name: str) -> bool:
    """Request fields that carry an id (a participant, a federation, a release, a dataset)."""
    return name.endswith("_id") or name == "dataset"


def bound_request(message: Message) -> None:
    """Check the ids and cut the strings of a request ``message`` in place, nested messages
    included (see the module docstring). Raises InvalidInputError naming the field, not its
    value."""
    for field, value in message.ListFields():
        repeated = field.is_repeated
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in (value if repeated else [value]):
                if isinstance(item, Message):  # map fields hold scalars
                    bound_request(item)
        elif field.type == FieldDescriptor.TYPE_STRING:
            items = list(value) if repeated else [value]
            for k, text in enumerate(items):
                if is_id_field(field.name):
                    if text and (len(text) > MAX_ID_LENGTH or not ID_PATTERN.fullmatch(text)):
                        raise InvalidInputError(
                            f"{message.DESCRIPTOR.name}.{field.name} is not an id ({len(text)} "
                            f"characters; ids are 1-{MAX_ID_LENGTH} letters, digits, '.', '_' "
                            "or '-', starting with a letter or digit)")
                elif len(text) > MAX_FIELD_BYTES // 4:
                    cut = cut_bytes(text, MAX_FIELD_BYTES)
                    if repeated:
                        value[k] = cut
                    else:
                        setattr(message, field.name, cut)


def shown(err: NoisyAnchorError) -> str:
    """The message of ``err`` as the log keeps it (at most :data:`MAX_STATUS_BYTES` bytes)."""
    return cut_bytes(str(err), MAX_STATUS_BYTES)


#: An absolute local path in a message (two or more segments: ``/srv/store/result/z.npy``).
_LOCAL_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/()]+/)+[^\s'\",;()]*")


def remote_text(err: NoisyAnchorError) -> str:
    """The message of ``err`` as a remote caller sees it: :func:`shown`, with every absolute
    local path cut to its last two parts (``<analyst>/uploads/p0.bundle``: the analyst's folders
    are the operator's business; the file and its folder in the store are enough to report)."""
    return _LOCAL_PATH.sub(
        lambda m: "<analyst>/" + "/".join(m.group(0).rstrip("/").split("/")[-2:]), shown(err))


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


def log_refusal(rpc: str, code: grpc.StatusCode, err: NoisyAnchorError,
                caller: str | None = None) -> None:
    """Log that ``rpc`` of ``caller`` (None: the caller the current thread serves, if known)
    was refused with ``code`` and ``err`` (bounded: :class:`RefusalLog`, per caller)."""
    # NOT_FOUND is the normal answer to a relay poll that comes early.
    level = logging.DEBUG if code == grpc.StatusCode.NOT_FOUND else logging.WARNING
    who = caller or getattr(_current, "caller", None) or "(unauthenticated)"
    number, unlogged = _refusals.admit((who, rpc, code.name))
    if unlogged:
        log.log(level, "%s of %s refused %d more times with %s (not logged, limit %d per "
                "%g s)", rpc, cut_bytes(who, MAX_ID_LENGTH * 4), unlogged, code.name,
                _refusals.limit, _refusals.window)
    if number <= _refusals.limit:
        log.log(level, "%s refused: %s: %s%s", rpc, code.name, shown(err),
                f" (this caller's further {code.name} refusals of {rpc} in the next "
                f"{_refusals.window:g} s are counted, not logged)"
                if number == _refusals.limit else "")


def abort(context: grpc.ServicerContext, rpc: str, err: NoisyAnchorError,
          caller: str | None = None) -> None:
    """End the call with ``err``'s status code and message (raises, as ``context.abort``
    does), and log the refusal."""
    code = getattr(grpc.StatusCode, err.grpc_code)
    log_refusal(rpc, code, err, caller)
    context.abort(code, remote_text(err))


def grpc_edge(method: Callable) -> Callable:
    """Map project errors to gRPC status codes (the message names the problem)."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except NoisyAnchorError as err:
            abort(context, method.__name__, err)

    return wrapper
