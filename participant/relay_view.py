"""The anchor agreement (:func:`participant.anchor.agree_on_seed`) run against a snapshot of
the relay instead of a live connection, for transports where the analyst speaks first (Flower:
the ServerApp sends, the ClientApp answers).

:class:`RelayView` answers the agreement's reads (the signed keys, this site's sealed share,
the commitments) from what the analyst sent, records its writes (its key, the dealer's sealed
shares, its commitment) for the reply, and where the agreement would wait for something the
snapshot does not hold yet it stops with :class:`Suspended`, naming whom it waits for. Run
again on the next snapshot, the agreement resumes exactly as after a restart: its X25519 key is
kept in the state folder, the dealer reopens the seed it sealed to itself, and repeating a key,
a share or a commitment is a no-op at the relay. So every check, signature and seal is the
gRPC path's own code, not a copy of it.

References: SPEC.md section 1 (the agreement); issue 32, item 4.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noisyanchor.common.errors import NoisyAnchorError, NotFoundError
from noisyanchor.common.progress import Pending
from noisyanchor.protos.v1 import analyst_pb2 as pb


class Suspended(NoisyAnchorError):
    """The agreement waits for something the snapshot does not hold yet (:attr:`pending`)."""

    def __init__(self, pending: Pending) -> None:
        super().__init__(f"waiting for {pending}")
        self.pending = pending


class _ViewStub:
    """The relay's RPCs the agreement makes (``client.stub.X(request)``), on the snapshot."""

    def __init__(self, view: RelayView) -> None:
        self._view = view

    def ListKeys(self, request: pb.ListKeysRequest) -> pb.ListKeysReply:
        return self._view.keys

    def ListCommitments(self, request: pb.ListCommitmentsRequest
                        ) -> pb.ListCommitmentsReply:
        return self._view.commitments

    def GetSealed(self, request: pb.GetSealedRequest) -> pb.SealedShare:
        if self._view.share is None:
            raise NotFoundError("no sealed share for this participant yet")
        return self._view.share

    def PublishKey(self, request: pb.PublishKeyRequest) -> pb.PublishKeyReply:
        self._view.sent.append(request)
        return pb.PublishKeyReply()

    def PostSealed(self, request: pb.PostSealedRequest) -> pb.PostSealedReply:
        self._view.sent.append(request)
        return pb.PostSealedReply()

    def PublishCommitment(self, request: pb.PublishCommitmentRequest
                          ) -> pb.PublishCommitmentReply:
        self._view.sent.append(request)
        return pb.PublishCommitmentReply()


class RelayView:
    """What :func:`participant.anchor.agree_on_seed` needs of its client, answered from one
    snapshot of the relay.

    Parameters
    ----------
    federation_id : str
    expected : sequence of str
        Every participant, in the federation's order.
    keys : pb.ListKeysReply
        The signed exchange keys published so far.
    commitments : pb.ListCommitmentsReply
        The commitments published so far.
    share : pb.SealedShare or None
        The dealer's share sealed to this participant, once posted.

    Attributes
    ----------
    sent : list of protobuf requests
        ``PublishKeyRequest``, ``PostSealedRequest`` and ``PublishCommitmentRequest`` the
        agreement made, in order: what the reply carries to the relay.
    """

    def __init__(self, federation_id: str, expected: list[str], keys: pb.ListKeysReply,
                 commitments: pb.ListCommitmentsReply, share: pb.SealedShare | None) -> None:
        self.federation_id = federation_id
        self.expected = list(expected)
        self.keys, self.commitments, self.share = keys, commitments, share
        self.sent: list[Any] = []
        self.stub = _ViewStub(self)

    def status(self, *, rejoin: bool = False) -> pb.StatusReply:
        """The federation's participants (all the agreement asks of the status)."""
        return pb.StatusReply(federation_id=self.federation_id, expected=self.expected)

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """One read or write on the snapshot (nothing to retry)."""
        return fn()

    def wait_for(self, what: str, fn: Callable[[], Any], ready: Callable[[Any], bool],
                 missing: Callable[[Any], list[str] | Pending] | None = None) -> Any:
        """The snapshot's answer when it is ``ready``, else :class:`Suspended` naming whom the
        wait is for (``missing``)."""
        try:
            result = fn()
        except NotFoundError:
            result = None
        if result is not None and ready(result):
            return result
        who = missing(result) if missing is not None else None
        raise Suspended(who if isinstance(who, Pending)
                        else Pending(tuple(who or ("the others",)), what))
