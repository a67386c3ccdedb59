"""Agreeing on the anchor seed with the other participants, through the analyst as an untrusted
relay (issue 3, item 4).

1. Every participant publishes an X25519 key signed with its TLS key.
2. The dealer draws the 256-bit seed (OS entropy; an explicit seed only for experiments),
   checks every other participant's signed key against its CA-issued certificate, and seals the
   seed with the common parameters to each of them.
3. Each recipient checks the dealer's signed key, opens its share and checks the parameters.
4. Everyone publishes a commitment to the seed and parameters and checks that all commitments
   are equal before uploading anything derived from the seed.

A participant restarted mid-agreement resumes it: its X25519 key is kept in its state folder
(mode 0600) until its upload is committed, and the dealer seals the seed to itself first, so a
restarted dealer reopens the seed it already sent instead of drawing another. Re-publishing the
same key, shares or commitment is a no-op at the relay.

The analyst sees only public keys, signatures, certificates, ciphertexts and commitments.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from noisyanchor.common.errors import IntegrityError, InvalidInputError, NotFoundError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.sealing import (
    SEED_BYTES,
    anchor_commitment,
    exchange_key_from_bytes,
    new_exchange_key,
    open_sealed,
    private_bytes,
    public_bytes,
    seal,
    sign_exchange_key,
    verify_exchange_key,
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
        return exchange_key_from_bytes(path.read_bytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    key = new_exchange_key()
    atomic_write(path, private_bytes(key))
    return key


def _open_share(client: AnalystClient, own: X25519PrivateKey, dealer_public: bytes,
                share: pb.SealedShare, *, participant_id: str, dealer: str) -> pb.AnchorSecret:
    """Check and open the dealer's sealed share addressed to this participant."""
    if share.dealer_id != dealer:
        raise IntegrityError(f"the sealed share comes from {share.dealer_id!r}, not from the "
                             f"dealer {dealer!r}")
    secret = pb.AnchorSecret()
    secret.ParseFromString(open_sealed(own, dealer_public, client.federation_id, dealer,
                                       participant_id, share.nonce, share.ciphertext))
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


def _verified_keys(client: AnalystClient, ca_pem: bytes, wanted: list[str]) -> dict[str, bytes]:
    """Wait for the signed keys of ``wanted`` and verify each; ``{id: X25519 public key}``."""
    fid = client.federation_id
    reply = client.wait_for(
        "publish their exchange keys",
        lambda: client.stub.ListKeys(pb.ListKeysRequest(federation_id=fid)),
        lambda r: set(wanted) <= {k.participant_id for k in r.keys},
        lambda r: [p for p in wanted if r is None or p not in {k.participant_id for k in r.keys}])
    keys = {}
    for k in reply.keys:
        if k.participant_id in wanted:
            verify_exchange_key(k.certificate_pem, ca_pem, fid, k.participant_id, k.public_key,
                                k.signature)
            keys[k.participant_id] = bytes(k.public_key)
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
    tls_key_pem, ca_pem : bytes
        Own TLS private key (signs the exchange key) and the federation CA.
    params : SharedParameters
        This participant's own view of the parameters; a dealer sending others is refused.
    key_path : Path
        Where the X25519 exchange key is kept (:func:`kept_exchange_key`).
    dealer_seed : bytes, optional
        The dealer's explicit seed (experiments only); OS entropy when omitted.
    """
    fid = client.federation_id
    own = kept_exchange_key(key_path)
    pub = public_bytes(own)
    client.call("publish exchange key", lambda: client.stub.PublishKey(pb.PublishKeyRequest(
        federation_id=fid, public_key=pub,
        signature=sign_exchange_key(tls_key_pem, fid, participant_id, pub))))
    expected = list(client.status().expected)
    if participant_id not in expected or dealer not in expected:
        raise InvalidInputError(f"participant {participant_id!r} and dealer {dealer!r} must both "
                                f"be in the federation {expected}")
    if participant_id == dealer:
        seed = _deal(client, own, dealer, params, dealer_seed, expected, ca_pem)
    else:
        share = client.wait_for(
            "seal the anchor seed to this participant", lambda: client.stub.GetSealed(
                pb.GetSealedRequest(federation_id=fid)), lambda s: True, lambda s: [dealer])
        dealer_key = _verified_keys(client, ca_pem, [dealer])[dealer]
        seed = _checked_seed(_open_share(client, own, dealer_key, share,
                                         participant_id=participant_id, dealer=dealer), params)
    digest = anchor_commitment(fid, seed, method=params.method, anchors=params.anchors,
                               dim=params.dim, translation_scale=params.translation_scale)
    client.call("publish commitment", lambda: client.stub.PublishCommitment(
        pb.PublishCommitmentRequest(federation_id=fid, digest=digest)))
    reply = client.wait_for(
        "commit to the anchor",
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
          dealer_seed: bytes | None, expected: list[str], ca_pem: bytes) -> bytes:
    """The dealer's part: draw the seed (or reopen the one this dealer already sealed to itself
    before a restart) and seal it to every participant, itself first."""
    fid = client.federation_id
    kept = _own_share(client)
    if kept is not None:
        seed = _checked_seed(_open_share(client, own, public_bytes(own), kept,
                                         participant_id=dealer, dealer=dealer), params)
        log.info("resuming the anchor agreement with the seed sealed before a restart")
    else:
        seed = dealer_seed if dealer_seed is not None else secrets.token_bytes(SEED_BYTES)
    secret = pb.AnchorSecret(seed=seed, method=params.method, anchors=params.anchors,
                             dim=params.dim, translation_scale=params.translation_scale)
    plaintext = secret.SerializeToString(deterministic=True)
    keys = {dealer: public_bytes(own)} | _verified_keys(
        client, ca_pem, [p for p in expected if p != dealer])
    for batch in ([dealer], [p for p in expected if p != dealer]):  # own share durable first
        shares = []
        for pid in batch:
            nonce, ciphertext = seal(own, keys[pid], fid, dealer, pid, plaintext)
            shares.append(pb.SealedShare(recipient_id=pid, nonce=nonce, ciphertext=ciphertext))
        client.call("post sealed shares", lambda shares=shares: client.stub.PostSealed(
            pb.PostSealedRequest(federation_id=fid, shares=shares)))
    return seed
