"""The project's exception hierarchy, one module, mapped to gRPC status codes at the edge.

Every error a user can cause derives from :class:`NoisyAnchorError`; the CLI prints its message and
exits with status 1, a gRPC servicer maps it to the status code named in ``grpc_code``.
"""

from __future__ import annotations


class NoisyAnchorError(Exception):
    """Base class of all errors the project raises on purpose."""

    #: Name of the ``grpc.StatusCode`` member this error maps to at a service edge.
    grpc_code = "INTERNAL"


class InvalidInputError(NoisyAnchorError, ValueError):
    """An argument has the wrong shape, dtype, range or contains NaN/Inf."""

    grpc_code = "INVALID_ARGUMENT"


class ConfigError(InvalidInputError):
    """A configuration file or key is missing or invalid."""


class AlreadyExistsError(NoisyAnchorError):
    """A one-shot object (an upload, a key, a sealed share) was already committed differently."""

    grpc_code = "ALREADY_EXISTS"


class UnauthenticatedError(NoisyAnchorError):
    """The caller did not present a valid identity."""

    grpc_code = "UNAUTHENTICATED"


class PermissionDeniedError(NoisyAnchorError):
    """The caller is known but not allowed to do this."""

    grpc_code = "PERMISSION_DENIED"


class PreconditionError(NoisyAnchorError):
    """The system is not in a state where the request can be served (e.g. not all uploads in)."""

    grpc_code = "FAILED_PRECONDITION"


class BudgetExceededError(PreconditionError):
    """A differentially private release would exceed the privacy budget."""

    grpc_code = "RESOURCE_EXHAUSTED"


class LedgerError(PreconditionError):
    """The privacy ledger file is unreadable, corrupt, or disagrees with the configured budget
    (the analyst refuses to start rather than forget what was spent)."""


class ResourceLimitError(NoisyAnchorError):
    """A request would exceed a configured bound on the server's resources (queue length,
    memory, kept storage); nothing was done, and the message names the bound."""

    grpc_code = "RESOURCE_EXHAUSTED"


class NotFoundError(NoisyAnchorError):
    """A requested object does not exist."""

    grpc_code = "NOT_FOUND"


class IntegrityError(InvalidInputError):
    """Transferred bytes do not match their declared digest, size or shape."""

    grpc_code = "DATA_LOSS"


class DeadlineExceededError(NoisyAnchorError):
    """Something did not happen in the time allowed (a call's deadline, a wait for peers)."""

    grpc_code = "DEADLINE_EXCEEDED"


class StreamIdleError(DeadlineExceededError):
    """A stream broke the server's pace limits: silent or too slow for its idle window, or
    open past its deadline."""


class TooManyStreamsError(NoisyAnchorError):
    """A caller already holds as many open streams as it may."""

    grpc_code = "RESOURCE_EXHAUSTED"


class AnalystUnavailableError(NoisyAnchorError):
    """The analyst could not be reached, or refused the connection (TLS), before the deadline;
    also what a shutting-down analyst answers, so clients retry."""

    grpc_code = "UNAVAILABLE"


class FederationFailedError(PreconditionError):
    """The federation cannot complete: a participant withdrew or the alignment failed."""
