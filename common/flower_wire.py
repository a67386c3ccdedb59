"""What the Flower ServerApp and ClientApp say to each other: the message names, the record
keys, and how a refusal travels (a Flower ``Error`` with a code per project error class).

Both apps import this module; neither imports the other (``analyst/`` and ``participant/``
stay apart). The protocol's own objects travel as the bytes of the wire contract
(``protos/v1``: signed keys, sealed shares, commitments, the bundle's stream messages), so the
receipts, digests and signatures are those of the gRPC path bit for bit.

References: issue 32, item 4.
"""

from __future__ import annotations

import os

# Flower and Ray report usage to their vendors by default; a federation of organisations says
# nothing to a third party unless its operator asks (these variables are read at import).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# No GPU is asked for: Ray leaves the GPUs a site has visible (and stops warning that it will).
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from flwr.app import ConfigRecord, Error, Message, RecordDict

from noisyanchor.common import errors

#: The phases, in order; each is a Flower ``query`` message (``query.<phase>``).
HELLO, AGREE, UPLOAD, RESULT = "hello", "agree", "upload", "result"

#: The one record of every message and reply.
RECORD = "noisyanchor"

#: Flower ``Error`` codes of the project's refusals (HTTP's numbers, above Flower's own 0-10),
#: most specific class first: the receiver raises the same class again.
ERROR_CODES: tuple[tuple[type[errors.NoisyAnchorError], int], ...] = (
    (errors.FederationFailedError, 410),
    (errors.DeadlineExceededError, 504),
    (errors.IntegrityError, 422),
    (errors.InvalidInputError, 400),
    (errors.UnauthenticatedError, 401),
    (errors.PermissionDeniedError, 403),
    (errors.NotFoundError, 404),
    (errors.AlreadyExistsError, 409),
    (errors.PreconditionError, 412),
    (errors.NoisyAnchorError, 500),
)

#: Flower's own codes of a message that never reached its node or whose reply never came back.
UNREACHABLE_CODES = {3: "message unavailable", 4: "reply unavailable", 5: "node unavailable"}

#: The domain of the statement a node signs to say which site it is (:func:`hello_statement`).
HELLO_DOMAIN = "noisyanchor/flower-hello/v1"


def message_type(phase: str) -> str:
    """The Flower message type of ``phase`` (a ``query`` the ClientApp registers)."""
    return f"query.{phase}"


def content(**values) -> RecordDict:
    """A message's content: ``values`` (bytes, str, bool, float, lists of them) in one record."""
    return RecordDict({RECORD: ConfigRecord({k: v for k, v in values.items()
                                             if v is not None})})


def values(message: Message) -> ConfigRecord:
    """The record of a message or reply (:func:`content`)."""
    return message.content.config_records[RECORD]


def refusal(err: errors.NoisyAnchorError, reply_to: Message) -> Message:
    """The Flower ``Error`` reply saying no with ``err`` (its class as the code)."""
    code = next(c for cls, c in ERROR_CODES if isinstance(err, cls))
    return Message(Error(code=code, reason=str(err)), reply_to=reply_to)


def refused(error: Error, who: str) -> errors.NoisyAnchorError:
    """The project error a Flower ``Error`` reply of ``who`` stands for: the class its code
    names (:data:`ERROR_CODES`), ``who`` before its reason; a message that never reached the
    node, or an exception the app did not expect, as :class:`~common.errors.PreconditionError`."""
    if error.code in UNREACHABLE_CODES:
        return errors.PreconditionError(
            f"{who} is unreachable ({UNREACHABLE_CODES[error.code]}: {error.reason}): its "
            "SuperNode went offline or stopped")
    for cls, code in ERROR_CODES:
        if code == error.code:
            return cls(f"{who}: {error.reason}")
    return errors.PreconditionError(f"{who} failed (Flower error {error.code}): {error.reason}")


def hello_statement(federation_id: str, participant_id: str, nonce: bytes, node_id: int,
                    withdrawal: str) -> bytes:
    """The bytes a node signs with its kit's TLS key to say it is ``participant_id`` (and, when
    ``withdrawal`` is not empty, that it withdraws, and why): bound to the server's fresh
    ``nonce`` and the node id the SuperLink gave it, so no signature made for another run or
    node passes."""
    from noisyanchor.common.sealing import encode_fields

    return encode_fields(HELLO_DOMAIN, federation_id, participant_id, nonce, node_id,
                         withdrawal)
