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

The protocol itself is :class:`participant.core.agreement.SeedAgreement`, free of any
transport; this module keeps the site's exchange key in its state folder and drives the
machine over the gRPC client (waits with progress, retries).
"""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from noisyanchor.common.errors import NotFoundError
from noisyanchor.common.files import atomic_write, private_dir, read_under
from noisyanchor.common.progress import COMMIT, PUBLISH_KEYS, Pending
from noisyanchor.common.sealing import exchange_key_from_bytes, new_exchange_key, private_bytes
from noisyanchor.common.wire_messages import (
    PROTO_CODEC,
    commitment_of,
    key_of,
    share_of,
)
from noisyanchor.participant.client import AnalystClient
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
    SharedParameters,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb

__all__ = ["SharedParameters", "agree_on_seed", "exchange_key_path", "kept_exchange_key"]

log = logging.getLogger(__name__)


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


def _listed(client: AnalystClient, what: str, rpc, request, field: str,
            wanted: tuple[str, ...]) -> list:
    """Poll a listing RPC until every id of ``wanted`` is in its ``field``: the items."""
    def ids(reply) -> set[str]:
        return {item.participant_id for item in getattr(reply, field)}
    reply = client.wait_for(what, lambda: rpc(request), lambda r: set(wanted) <= ids(r),
                            lambda r: [p for p in wanted if r is None or p not in ids(r)])
    return list(getattr(reply, field))


def _perform(client: AnalystClient, machine: SeedAgreement, action: Action) -> object:
    """Do ``action`` over gRPC; the reply the machine expects (its module docstring)."""
    fid, stub = client.federation_id, client.stub
    if isinstance(action, ListKeys):
        return [key_of(k) for k in _listed(client, PUBLISH_KEYS, stub.ListKeys,
                                           pb.ListKeysRequest(federation_id=fid), "keys",
                                           action.wanted)]
    if isinstance(action, PublishKey):
        client.call("publish exchange key", lambda: stub.PublishKey(pb.PublishKeyRequest(
            federation_id=fid, public_key=action.public_key, bound_to=action.bound_to,
            signature=action.signature)))
        return None
    if isinstance(action, FetchShare):
        request = pb.GetSealedRequest(federation_id=fid)
        if action.wait:
            return share_of(client.wait_for(
                "seal the anchor seed to this participant", lambda: stub.GetSealed(request),
                lambda s: True,
                lambda s: _behind_the_dealer(client, machine.dealer, list(machine.expected))))
        try:
            return share_of(client.call("fetch sealed share", lambda: stub.GetSealed(request)))
        except NotFoundError:
            return None
    if isinstance(action, PostShares):
        # The dealer names itself by its connection, not in the message (the wire contract).
        shares = [pb.SealedShare(recipient_id=s.recipient_id, nonce=s.nonce,
                                 ciphertext=s.ciphertext, signature=s.signature)
                  for s in action.shares]
        client.call("post sealed shares", lambda: stub.PostSealed(
            pb.PostSealedRequest(federation_id=fid, shares=shares)))
        return None
    if isinstance(action, PublishCommitment):
        client.call("publish commitment", lambda: stub.PublishCommitment(
            pb.PublishCommitmentRequest(federation_id=fid, digest=action.digest,
                                        signature=action.signature)))
        return None
    if isinstance(action, ListCommitments):
        return [commitment_of(c) for c in _listed(
            client, COMMIT, stub.ListCommitments, pb.ListCommitmentsRequest(federation_id=fid),
            "commitments", action.expected)]
    raise TypeError(f"no gRPC call for {type(action).__name__}")


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
    expected = list(client.status().expected)
    machine = SeedAgreement(
        federation_id=client.federation_id, participant_id=participant_id, dealer=dealer,
        expected=expected, exchange_key=kept_exchange_key(key_path), tls_key_pem=tls_key_pem,
        ca_pem=ca_pem, params=params, codec=PROTO_CODEC, dealer_seed=dealer_seed)
    action = machine.start()
    while not isinstance(action, Agreed):
        action = machine.receive(_perform(client, machine, action))
    log.info("anchor agreed with %d participants", len(expected))
    return action.seed
