"""Agreeing on the anchor seed with the other participants, through the analyst as an untrusted
relay (issue 3, item 4).

1. The dealer (named in every participant's config and in the analyst's, which accepts shares
   from it only) publishes an X25519 key signed with its TLS key.
2. Every other participant checks the dealer's signed key and publishes its own X25519 key,
   signed bound to the dealer's (fresh) key, so no statement of an earlier run can be replayed.
3. The dealer draws the 256-bit seed (OS entropy; an explicit seed only for experiments),
   checks every other participant's signed key against its CA-issued certificate and the
   binding, seals the seed with the common parameters to each of them, and signs each share.
4. Each recipient checks the dealer's signature on its share (made for its current key), opens
   it and checks the parameters.
5. Everyone publishes a commitment to the seed and parameters and checks that all commitments
   are equal before uploading anything derived from the seed.

A participant restarted mid-agreement resumes it: its X25519 key is kept in its state folder
(mode 0600) until its upload is committed, and the dealer seals the seed to itself first, so a
restarted dealer reopens the seed it already sent instead of drawing another, and seals it again
only to the keys it sealed it to before. Re-publishing the same key, shares or commitment is a
no-op at the relay.

The analyst sees only public keys, signatures, certificates, ciphertexts and commitments.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from noisyanchor.common.errors import (
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    UnauthenticatedError,
)
from noisyanchor.common.files import atomic_write, private_dir, read_under
from noisyanchor.common.progress import COMMIT, PUBLISH_KEYS, Pending
from noisyanchor.common.sealing import (
    SEED_BYTES,
    anchor_commitment,
    exchange_key_from_bytes,
    new_exchange_key,
    open_sealed,
    private_bytes,
    public_bytes,
    seal,
    share_statement,
    sign_exchange_key,
    sign_statement,
    verify_exchange_key,
    verify_statement,
)
from noisyanchor.participant.client import AnalystClient
from noisyanchor.protos.v1 import analyst_pb2 as pb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharedParameters:
    """What the seed is bound to: method, ``r``, ``d`` and the translation scale ``s``."""

    method: str
    anchors: int
    dim: int
    translation_scale: float


def exchange_key_path(state_dir: Path, federation_id: str) -> Path:
    """Where a participant keeps its X25519 key for ``federation_id`` during the agreement."""
    return Path(state_dir) / f"exchange-{federation_id}.key"


def kept_exchange_key(path: Path) -> X25519PrivateKey:
    """The X25519 key kept at ``path``, made from OS entropy and written (mode 0600, atomically)
    on first use, so that a restarted participant presents the key the relay already holds."""
    path = Path(path)
    if path.is_file():
        return exchange_key_from_bytes(read_under(path.parent, path, 4096))
    private_dir(path.parent)
    key = new_exchange_key()
    atomic_write(path, private_bytes(key))
    return key


def _open_share(client: AnalystClient, own: X25519PrivateKey, dealer_key: pb.SignedKey,
                share: pb.SealedShare, *, participant_id: str, dealer: str,
                ca_pem: bytes) -> pb.AnchorSecret:
    """Check the dealer's signature on its sealed share addressed to this participant's current
    key, then open it."""
    if share.dealer_id != dealer:
        raise IntegrityError(f"the sealed share comes from {share.dealer_id!r}, not from the "
                             f"dealer {dealer!r}")
    fid, dealer_public = client.federation_id, bytes(dealer_key.public_key)
    verify_statement(dealer_key.certificate_pem, ca_pem, dealer, share_statement(
        fid, dealer, participant_id, dealer_public, public_bytes(own), share.nonce,
        share.ciphertext), share.signature,
        f"the sealed share from {dealer!r} to {participant_id!r} (not made by the dealer for "
        "this participant's current exchange key)")
    secret = pb.AnchorSecret()
    secret.ParseFromString(open_sealed(own, dealer_public, fid, dealer, participant_id,
                                       share.nonce, share.ciphertext))
    return secret


def _checked_seed(secret: pb.AnchorSecret, params: SharedParameters) -> bytes:
    """The seed of an opened share, refused unless it was dealt for ``params``."""
    theirs = SharedParameters(secret.method, secret.anchors, secret.dim,
                              secret.translation_scale)
    if theirs != params or len(secret.seed) != SEED_BYTES:
        raise IntegrityError(f"the dealer's parameters {theirs} differ from this "
                             f"participant's {params}")
    return bytes(secret.seed)


def _own_share(client: AnalystClient) -> pb.SealedShare | None:
    """The share addressed to this participant, or None when the relay has none yet."""
    try:
        return client.call("fetch sealed share", lambda: client.stub.GetSealed(
            pb.GetSealedRequest(federation_id=client.federation_id)))
    except NotFoundError:
        return None


def _behind_the_dealer(client: AnalystClient, dealer: str, expected: list[str]) -> Pending:
    """Whom a wait for the dealer's sealed share is for: the sites whose exchange key the
    dealer still waits for (it seals once every site has published one), else the dealer."""
    fid = client.federation_id
    keys = {k.participant_id for k in client.call("list keys", lambda: client.stub.ListKeys(
        pb.ListKeysRequest(federation_id=fid))).keys}
    late = tuple(p for p in expected if p not in keys)
    if late:
        return Pending(late, f"{PUBLISH_KEYS}, after which {dealer} seals the anchor seed")
    return Pending((dealer,), "seal the anchor seed to this participant")


def _verified_keys(client: AnalystClient, ca_pem: bytes, wanted: list[str],
                   bound_to: bytes) -> dict[str, pb.SignedKey]:
    """Wait for the signed keys of ``wanted`` and verify each, bound to ``bound_to`` (the
    dealer's key; empty for the dealer's own): ``{id: signed key}``."""
    fid = client.federation_id
    reply = client.wait_for(
        PUBLISH_KEYS,
        lambda: client.stub.ListKeys(pb.ListKeysRequest(federation_id=fid)),
        lambda r: set(wanted) <= {k.participant_id for k in r.keys},
        lambda r: [p for p in wanted if r is None or p not in {k.participant_id for k in r.keys}])
    keys = {}
    for k in reply.keys:
        if k.participant_id in wanted:
            if k.bound_to != bound_to:
                raise UnauthenticatedError(f"the exchange key of {k.participant_id!r} is bound "
                                           "to another dealer key than this agreement's (a "
                                           "stale or replayed statement)")
            verify_exchange_key(k.certificate_pem, ca_pem, fid, k.participant_id, k.public_key,
                                k.signature, bound_to=bound_to)
            keys[k.participant_id] = k
    return keys


def agree_on_seed(
    client: AnalystClient, *, participant_id: str, dealer: str, tls_key_pem: bytes,
    ca_pem: bytes, params: SharedParameters, key_path: Path, dealer_seed: bytes | None = None,
) -> bytes:
    """Run (or resume) the agreement and return the 256-bit seed every participant now holds.

    Parameters
    ----------
    client : AnalystClient
    participant_id, dealer : str
        Own id and the dealer's (``[protocol] dealer``; the analyst declares its own).
    tls_key_pem, ca_pem : bytes
        Own TLS private key (signs the exchange key and, for the dealer, the shares) and the
        federation CA.
    params : SharedParameters
        This participant's own view of the parameters; a dealer sending others is refused.
    key_path : Path
        Where the X25519 exchange key is kept (:func:`kept_exchange_key`).
    dealer_seed : bytes, optional
        The dealer's explicit seed (experiments only); OS entropy when omitted.
    """
    fid = client.federation_id
    expected = list(client.status().expected)
    if participant_id not in expected or dealer not in expected:
        raise InvalidInputError(f"participant {participant_id!r} and dealer {dealer!r} must both "
                                f"be in the federation {expected}")
    own = kept_exchange_key(key_path)
    pub = public_bytes(own)
    # Freshness: every key but the dealer's is bound to the dealer's key of this agreement.
    dealer_key = None if participant_id == dealer else \
        _verified_keys(client, ca_pem, [dealer], b"")[dealer]
    bound_to = b"" if dealer_key is None else bytes(dealer_key.public_key)
    client.call("publish exchange key", lambda: client.stub.PublishKey(pb.PublishKeyRequest(
        federation_id=fid, public_key=pub, bound_to=bound_to,
        signature=sign_exchange_key(tls_key_pem, fid, participant_id, pub, bound_to=bound_to))))
    if dealer_key is None:
        seed = _deal(client, own, dealer, params, dealer_seed, expected, ca_pem, tls_key_pem)
    else:
        share = client.wait_for(
            "seal the anchor seed to this participant", lambda: client.stub.GetSealed(
                pb.GetSealedRequest(federation_id=fid)), lambda s: True,
            lambda s: _behind_the_dealer(client, dealer, expected))
        seed = _checked_seed(_open_share(client, own, dealer_key, share,
                                         participant_id=participant_id, dealer=dealer,
                                         ca_pem=ca_pem), params)
    digest = anchor_commitment(fid, seed, method=params.method, anchors=params.anchors,
                               dim=params.dim, translation_scale=params.translation_scale)
    client.call("publish commitment", lambda: client.stub.PublishCommitment(
        pb.PublishCommitmentRequest(federation_id=fid, digest=digest)))
    reply = client.wait_for(
        COMMIT,
        lambda: client.stub.ListCommitments(pb.ListCommitmentsRequest(federation_id=fid)),
        lambda r: {c.participant_id for c in r.commitments} >= set(expected),
        lambda r: [p for p in expected
                   if r is None or p not in {c.participant_id for c in r.commitments}])
    differ = sorted(c.participant_id for c in reply.commitments if c.digest != digest)
    if differ:
        raise IntegrityError(f"participant(s) {differ} committed to a different anchor")
    log.info("anchor agreed with %d participants", len(expected))
    return seed


def _deal(client: AnalystClient, own: X25519PrivateKey, dealer: str, params: SharedParameters,
          dealer_seed: bytes | None, expected: list[str], ca_pem: bytes,
          tls_key_pem: bytes) -> bytes:
    """The dealer's part: draw the seed (or reopen the one this dealer already sealed to itself
    before a restart) and seal and sign it to every participant, itself first.

    A reopened seed is sealed again only to the very keys it was sealed to before (recorded
    inside the dealer's own share): never to a key that changed meanwhile.
    """
    fid, pub = client.federation_id, public_bytes(own)
    others = [p for p in expected if p != dealer]
    keys = {dealer: pub} | {pid: bytes(k.public_key) for pid, k in
                            _verified_keys(client, ca_pem, others, pub).items()}
    kept = _own_share(client)
    if kept is not None:
        if kept.dealer_id != dealer:
            raise IntegrityError(f"the share kept for the dealer comes from {kept.dealer_id!r}")
        secret = pb.AnchorSecret()
        secret.ParseFromString(open_sealed(own, pub, fid, dealer, dealer, kept.nonce,
                                           kept.ciphertext))
        seed = _checked_seed(secret, params)
        changed = sorted(p for p in expected if secret.sealed_to.get(p) != keys[p])
        if changed:
            raise IntegrityError(f"the exchange key(s) of {changed} changed since this dealer "
                                 "sealed its seed; a dealer never seals a seed again to a changed "
                                 "key (start a new agreement under a new federation id)")
        log.info("resuming the anchor agreement with the seed sealed before a restart")
    else:
        seed = dealer_seed if dealer_seed is not None else secrets.token_bytes(SEED_BYTES)
    plaintext = pb.AnchorSecret(
        seed=seed, method=params.method, anchors=params.anchors, dim=params.dim,
        translation_scale=params.translation_scale, sealed_to=keys,
    ).SerializeToString(deterministic=True)
    for batch in ([dealer], others):  # own share durable first
        shares = []
        for pid in batch:
            nonce, ciphertext = seal(own, keys[pid], fid, dealer, pid, plaintext)
            signature = sign_statement(tls_key_pem, share_statement(
                fid, dealer, pid, pub, keys[pid], nonce, ciphertext))
            shares.append(pb.SealedShare(recipient_id=pid, nonce=nonce, ciphertext=ciphertext,
                                         signature=signature))
        client.call("post sealed shares", lambda shares=shares: client.stub.PostSealed(
            pb.PostSealedRequest(federation_id=fid, shares=shares)))
    return seed
