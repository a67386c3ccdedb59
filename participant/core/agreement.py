"""The site's side of the anchor agreement as a state machine without I/O (issue 32, item 2),
in the manner of h11: it is handed what the analyst (the untrusted relay) answered and returns
the next thing to ask of it, an action; it never opens a connection, sleeps or reads a file.
A transport (:func:`participant.anchor.agree_on_seed` over gRPC; a Flower ClientApp) performs
each action and feeds the reply back with :meth:`SeedAgreement.receive`.

The protocol (:mod:`participant.anchor` tells it in full): the dealer publishes its signed
X25519 key; every other site checks it and publishes its own, bound to it; the dealer checks
every key, seals the seed to itself first (a restarted dealer reopens it) and then to the
others, each share signed; a recipient checks and opens its share; every site publishes a
commitment to the seed and its parameters and checks they are all equal.

Actions and the reply each expects (``receive`` refuses any other with
:class:`ProtocolStateError`):

========================  ==================================================================
action                    reply
========================  ==================================================================
``ListKeys(wanted)``      the relay's signed keys, once every id of ``wanted`` is among them
``PublishKey(...)``       ``None`` once the relay stored it
``FetchShare(wait)``      the share addressed to this site; ``wait=False``: ``None`` if none
``PostShares(shares)``    ``None`` once the relay stored them
``PublishCommitment(d)``  ``None`` once the relay stored it
``ListCommitments(ids)``  the relay's commitments, once every id of ``ids`` is among them
``Agreed(seed)``          (the end: every site holds ``seed``)
========================  ==================================================================
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from noisyanchor.common.errors import (
    IntegrityError,
    InvalidInputError,
    UnauthenticatedError,
)
from noisyanchor.common.protocol_messages import AnchorSecret, Commitment, SealedShare, SignedKey
from noisyanchor.common.sealing import (
    SEED_BYTES,
    anchor_commitment,
    open_sealed,
    public_bytes,
    seal,
    share_statement,
    sign_exchange_key,
    sign_statement,
    verify_exchange_key,
    verify_statement,
)
from noisyanchor.common.signed_statements import commitment_statement, sign


class ProtocolStateError(InvalidInputError):
    """A reply the state machine cannot take in its current state (a transport's bug)."""


class SecretCodec(Protocol):
    """How the plaintext of a sealed share is encoded (the protobuf ``AnchorSecret`` so far:
    :data:`common.wire_messages.PROTO_CODEC`)."""

    def secret_bytes(self, secret: AnchorSecret) -> bytes:
        """The canonical bytes of ``secret``."""
        ...

    def secret_of(self, raw: bytes) -> AnchorSecret:
        """The secret ``raw`` encodes."""
        ...


@dataclass(frozen=True)
class SharedParameters:
    """What the seed is bound to: method, ``r``, ``d`` and the translation scale ``s``."""

    method: str
    anchors: int
    dim: int
    translation_scale: float


# -- actions -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ListKeys:
    """List the relay's signed keys until every site of ``wanted`` published one."""

    wanted: tuple[str, ...]


@dataclass(frozen=True)
class PublishKey:
    """Publish this site's signed X25519 key."""

    public_key: bytes
    bound_to: bytes
    signature: bytes


@dataclass(frozen=True)
class FetchShare:
    """Fetch the sealed share addressed to this site; ``wait``: until the dealer posted it."""

    wait: bool


@dataclass(frozen=True)
class PostShares:
    """Post sealed shares to the relay (the dealer only)."""

    shares: tuple[SealedShare, ...]


@dataclass(frozen=True)
class PublishCommitment:
    """Publish this site's commitment to the seed and its parameters, signed by its kit key
    (:func:`common.signed_statements.commitment_statement`)."""

    digest: bytes
    signature: bytes


@dataclass(frozen=True)
class ListCommitments:
    """List the relay's commitments until every site of ``expected`` published one."""

    expected: tuple[str, ...]


@dataclass(frozen=True)
class Agreed:
    """The agreement is over: every site committed to the same ``seed``."""

    seed: bytes


Action = ListKeys | PublishKey | FetchShare | PostShares | PublishCommitment | ListCommitments \
    | Agreed


class SeedAgreement:
    """One site's run (or resumption) of the agreement.

    Parameters
    ----------
    federation_id, participant_id, dealer : str
        The federation, this site and the dealer (``[protocol] dealer``).
    expected : sequence of str
        Every site of the federation, as the analyst declares them.
    exchange_key : X25519PrivateKey
        This site's key of the agreement (kept by the transport until its upload commits).
    tls_key_pem, ca_pem : bytes
        This site's kit key (signs its exchange key and, for the dealer, the shares) and the
        federation CA every other site's statements are checked against.
    params : SharedParameters
        This site's own view of the parameters; a dealer sending others is refused.
    codec : SecretCodec
        The encoding of a share's plaintext.
    dealer_seed : bytes, optional
        The dealer's explicit seed (experiments only); OS entropy when omitted.

    Raises
    ------
    InvalidInputError
        This site or the dealer is not one of ``expected``.
    """

    def __init__(self, *, federation_id: str, participant_id: str, dealer: str,
                 expected: Sequence[str], exchange_key: X25519PrivateKey, tls_key_pem: bytes,
                 ca_pem: bytes, params: SharedParameters, codec: SecretCodec,
                 dealer_seed: bytes | None = None) -> None:
        if participant_id not in expected or dealer not in expected:
            raise InvalidInputError(f"participant {participant_id!r} and dealer {dealer!r} must "
                                    f"both be in the federation {list(expected)}")
        self.federation_id, self.participant_id, self.dealer = federation_id, participant_id, \
            dealer
        self.expected = tuple(expected)
        self.params = params
        self._own, self._public = exchange_key, public_bytes(exchange_key)
        self._tls_key_pem, self._ca_pem = tls_key_pem, ca_pem
        self._codec, self._dealer_seed = codec, dealer_seed
        self._dealer_key: SignedKey | None = None
        self._keys: dict[str, bytes] = {}
        self._others_shares: tuple[SealedShare, ...] = ()
        self._seed = b""
        self._digest = b""
        self.state = "start"

    @property
    def is_dealer(self) -> bool:
        """Whether this site deals the seed."""
        return self.participant_id == self.dealer

    def start(self) -> Action:
        """The first action: the dealer publishes its key; every other site first waits for
        the dealer's (its own key is bound to it)."""
        self._expect("start")
        if self.is_dealer:
            return self._publish_key(b"")
        self.state = "dealer key"
        return ListKeys((self.dealer,))

    def receive(self, reply: object) -> Action:
        """The next action, given the reply to the last one.

        Raises
        ------
        UnauthenticatedError
            A key or share whose signature, certificate or binding does not check (naming
            whose).
        IntegrityError
            A share that does not open or was dealt for other parameters; a commitment that
            differs (naming the sites).
        ProtocolStateError
            ``reply`` is not what the last action expects.
        """
        step = {"dealer key": self._on_dealer_key, "key published": self._on_key_published,
                "others' keys": self._on_others_keys, "own share": self._on_own_share,
                "own share posted": self._on_own_share_posted,
                "shares posted": self._on_shares_posted, "share": self._on_share,
                "committed": self._on_committed, "commitments": self._on_commitments}.get(
            self.state)
        if step is None:
            raise ProtocolStateError(f"the agreement of {self.participant_id!r} takes no reply "
                                     f"in state {self.state!r}")
        return step(reply)

    # -- steps ---------------------------------------------------------------------------------
    def _expect(self, state: str) -> None:
        if self.state != state:
            raise ProtocolStateError(f"the agreement of {self.participant_id!r} is in state "
                                     f"{self.state!r}, not {state!r}")

    def _verified_keys(self, reply: object, wanted: Sequence[str],
                       bound_to: bytes) -> dict[str, SignedKey]:
        """The signed keys of ``wanted`` in ``reply``, each checked against the CA and bound to
        ``bound_to`` (the dealer's key; empty for the dealer's own)."""
        keys = {k.participant_id: k for k in _items(reply, SignedKey, "signed keys")
                if k.participant_id in wanted}
        missing = [p for p in wanted if p not in keys]
        if missing:
            raise ProtocolStateError(f"the keys of {missing} are not in the reply")
        for k in keys.values():
            if k.bound_to != bound_to:
                raise UnauthenticatedError(f"the exchange key of {k.participant_id!r} is bound "
                                           "to another dealer key than this agreement's (a "
                                           "stale or replayed statement)")
            verify_exchange_key(k.certificate_pem, self._ca_pem, self.federation_id,
                                k.participant_id, k.public_key, k.signature, bound_to=bound_to)
        return keys

    def _publish_key(self, bound_to: bytes) -> Action:
        self.state = "key published"
        return PublishKey(self._public, bound_to, sign_exchange_key(
            self._tls_key_pem, self.federation_id, self.participant_id, self._public,
            bound_to=bound_to))

    def _on_dealer_key(self, reply: object) -> Action:
        self._dealer_key = self._verified_keys(reply, [self.dealer], b"")[self.dealer]
        return self._publish_key(self._dealer_key.public_key)

    def _on_key_published(self, reply: object) -> Action:
        _no_reply(reply, "a published key")
        if self.is_dealer:
            self.state = "others' keys"
            return ListKeys(self._others())
        self.state = "share"
        return FetchShare(wait=True)

    def _others(self) -> tuple[str, ...]:
        return tuple(p for p in self.expected if p != self.dealer)

    def _on_others_keys(self, reply: object) -> Action:
        self._keys = {self.dealer: self._public} | {
            pid: k.public_key for pid, k in
            self._verified_keys(reply, self._others(), self._public).items()}
        self.state = "own share"
        return FetchShare(wait=False)

    def _on_own_share(self, reply: object) -> Action:
        """The dealer's part: reopen the seed this dealer sealed to itself before a restart
        (sealed again only to the very keys it was sealed to), or draw one; then seal and sign
        it to every site, itself first."""
        if reply is not None:
            kept = _one(reply, SealedShare, "the dealer's own share")
            if kept.dealer_id != self.dealer:
                raise IntegrityError(f"the share kept for the dealer comes from "
                                     f"{kept.dealer_id!r}")
            secret = self._codec.secret_of(open_sealed(
                self._own, self._public, self.federation_id, self.dealer, self.dealer,
                kept.nonce, kept.ciphertext))
            seed = self._checked_seed(secret)
            changed = sorted(p for p in self.expected
                             if secret.sealed_to.get(p) != self._keys[p])
            if changed:
                raise IntegrityError(f"the exchange key(s) of {changed} changed since this "
                                     "dealer sealed its seed; a dealer never seals a seed again "
                                     "to a changed key (start a new agreement under a new "
                                     "federation id)")
        else:
            seed = (self._dealer_seed if self._dealer_seed is not None
                    else secrets.token_bytes(SEED_BYTES))
        self._seed = seed
        p = self.params
        plaintext = self._codec.secret_bytes(AnchorSecret(
            seed, p.method, p.anchors, p.dim, p.translation_scale, dict(self._keys)))
        own, *others = (self._seal(pid, plaintext) for pid in (self.dealer, *self._others()))
        self._others_shares = tuple(others)
        self.state = "own share posted"
        return PostShares((own,))  # own share durable first

    def _seal(self, pid: str, plaintext: bytes) -> SealedShare:
        fid = self.federation_id
        nonce, ciphertext = seal(self._own, self._keys[pid], fid, self.dealer, pid, plaintext)
        signature = sign_statement(self._tls_key_pem, share_statement(
            fid, self.dealer, pid, self._public, self._keys[pid], nonce, ciphertext))
        return SealedShare(self.dealer, pid, nonce, ciphertext, signature)

    def _on_own_share_posted(self, reply: object) -> Action:
        _no_reply(reply, "posted shares")
        self.state = "shares posted"
        return PostShares(self._others_shares)

    def _on_shares_posted(self, reply: object) -> Action:
        _no_reply(reply, "posted shares")
        return self._commit()

    def _on_share(self, reply: object) -> Action:
        """Check the dealer's signature on the share addressed to this site's current key,
        then open it."""
        share = _one(reply, SealedShare, "the sealed share")
        dealer, pid, fid = self.dealer, self.participant_id, self.federation_id
        if share.dealer_id != dealer:
            raise IntegrityError(f"the sealed share comes from {share.dealer_id!r}, not from "
                                 f"the dealer {dealer!r}")
        assert self._dealer_key is not None  # set before this state
        dealer_public = self._dealer_key.public_key
        verify_statement(self._dealer_key.certificate_pem, self._ca_pem, dealer, share_statement(
            fid, dealer, pid, dealer_public, self._public, share.nonce, share.ciphertext),
            share.signature,
            f"the sealed share from {dealer!r} to {pid!r} (not made by the dealer for this "
            "participant's current exchange key)")
        self._seed = self._checked_seed(self._codec.secret_of(open_sealed(
            self._own, dealer_public, fid, dealer, pid, share.nonce, share.ciphertext)))
        return self._commit()

    def _checked_seed(self, secret: AnchorSecret) -> bytes:
        """The seed of an opened share, refused unless it was dealt for this site's
        parameters."""
        theirs = SharedParameters(secret.method, secret.anchors, secret.dim,
                                  secret.translation_scale)
        if theirs != self.params or len(secret.seed) != SEED_BYTES:
            raise IntegrityError(f"the dealer's parameters {theirs} differ from this "
                                 f"participant's {self.params}")
        return secret.seed

    def _commit(self) -> Action:
        p = self.params
        self._digest = anchor_commitment(self.federation_id, self._seed, method=p.method,
                                         anchors=p.anchors, dim=p.dim,
                                         translation_scale=p.translation_scale)
        self.state = "committed"
        return PublishCommitment(self._digest, sign(self._tls_key_pem, commitment_statement(
            self.federation_id, self.participant_id, self._digest)))

    def _on_committed(self, reply: object) -> Action:
        _no_reply(reply, "a published commitment")
        self.state = "commitments"
        return ListCommitments(self.expected)

    def _on_commitments(self, reply: object) -> Action:
        commitments = _items(reply, Commitment, "commitments")
        missing = sorted(set(self.expected) - {c.participant_id for c in commitments})
        if missing:
            raise ProtocolStateError(f"the reply lacks the commitments of {missing}")
        differ = sorted(c.participant_id for c in commitments if c.digest != self._digest)
        if differ:
            raise IntegrityError(f"participant(s) {differ} committed to a different anchor")
        self.state = "done"
        return Agreed(self._seed)


def _items(reply: object, kind: type, what: str) -> list:
    """``reply`` as a list of ``kind`` (the reply to a listing action)."""
    if not isinstance(reply, (list, tuple)) or not all(isinstance(r, kind) for r in reply):
        raise ProtocolStateError(f"expected {what} ({kind.__name__} list), got "
                                 f"{type(reply).__name__}")
    return list(reply)


def _one(reply: object, kind: type, what: str):
    if not isinstance(reply, kind):
        raise ProtocolStateError(f"expected {what} ({kind.__name__}), got "
                                 f"{type(reply).__name__}")
    return reply


def _no_reply(reply: object, what: str) -> None:
    if reply is not None:
        raise ProtocolStateError(f"{what} is answered with None, got {type(reply).__name__}")
