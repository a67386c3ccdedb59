"""The anchor agreement's state machine (:class:`participant.core.agreement.SeedAgreement`)
driven on a snapshot of the relay, for transports where the analyst speaks first (Flower: the
ServerApp sends, the ClientApp answers).

:func:`step` answers the machine's reads (the signed keys, this site's sealed share, the
commitments) from the snapshot the analyst sent, collects its writes (its key, the dealer's
sealed shares, its commitment) for the reply, and stops where the machine would wait for
something the snapshot does not hold yet, naming whom it waits for. Run again on the next
snapshot, the machine resumes exactly as after a restart: the site's X25519 key is kept in its
state folder, the dealer reopens the seed it sealed to itself, and repeating a key, a share or
a commitment is a no-op at the relay. Every check, signature and seal is the core's.

References: SPEC.md section 1 (the agreement); issue 32, items 2 and 4.
"""

from __future__ import annotations

from dataclasses import dataclass

from noisyanchor.common.progress import COMMIT, PUBLISH_KEYS, Pending
from noisyanchor.common.protocol_messages import Commitment, SealedShare, SignedKey
from noisyanchor.participant.core.agreement import (
    Action,
    Agreed,
    FetchShare,
    ListCommitments,
    ListKeys,
    PostShares,
    PublishCommitment,
    PublishKey,
    SeedAgreement,
)

#: The actions that write to the relay (the reply carries them).
Write = PublishKey | PostShares | PublishCommitment


@dataclass(frozen=True)
class Snapshot:
    """The relay as one site may see it: every signed key, every commitment, and the share
    sealed to this site (None until the dealer posted it)."""

    keys: tuple[SignedKey, ...]
    commitments: tuple[Commitment, ...]
    share: SealedShare | None


@dataclass(frozen=True)
class Step:
    """One pass of the agreement over a snapshot: the writes to relay, in order, and either
    the agreed ``seed`` or whom and what it waits for (``waiting``)."""

    sent: tuple[Write, ...]
    seed: bytes | None
    waiting: Pending | None


def step(machine: SeedAgreement, snapshot: Snapshot) -> Step:
    """Run a fresh ``machine`` as far as ``snapshot`` allows."""
    sent: list[Write] = []
    action: Action = machine.start()
    while not isinstance(action, Agreed):
        reply = _answer(machine, action, snapshot)
        if isinstance(reply, Pending):
            return Step(tuple(sent), None, reply)
        if isinstance(action, Write):
            sent.append(action)
        action = machine.receive(reply)
    return Step(tuple(sent), action.seed, None)


def _missing(wanted: tuple[str, ...], have: tuple[SignedKey, ...] | tuple[Commitment, ...]
             ) -> tuple[str, ...]:
    ids = {item.participant_id for item in have}
    return tuple(p for p in wanted if p not in ids)


def _answer(machine: SeedAgreement, action: Action, snapshot: Snapshot) -> object:
    """The reply ``action`` expects, from ``snapshot``; a :class:`Pending` when it must wait."""
    if isinstance(action, ListKeys):
        late = _missing(action.wanted, snapshot.keys)
        return Pending(late, PUBLISH_KEYS) if late else list(snapshot.keys)
    if isinstance(action, ListCommitments):
        late = _missing(action.expected, snapshot.commitments)
        return Pending(late, COMMIT) if late else list(snapshot.commitments)
    if isinstance(action, FetchShare):
        if snapshot.share is None and action.wait:
            # The dealer seals once every site published its key.
            late = _missing(machine.expected, snapshot.keys)
            return Pending(late, f"{PUBLISH_KEYS}, after which {machine.dealer} seals the "
                           "anchor seed") if late else \
                Pending((machine.dealer,), "seal the anchor seed to this participant")
        return snapshot.share
    return None  # a write: the relay stores it once the reply carries it
