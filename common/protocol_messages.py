"""The protocol's messages as plain frozen dataclasses, shared by both roles and every
transport: what a site and the analyst say to each other, free of any encoding.

Field names follow ``protos/v1/analyst.proto`` (the gRPC encoding,
:mod:`common.wire_messages`), so a protobuf message and its dataclass read alike. Bundles
(uploads, disclosures) are :mod:`common.bundles`.

References: issue 32 (a transport-free protocol core).
"""

from __future__ import annotations

from dataclasses import dataclass

from noisyanchor.common.schema import RecordSchema


@dataclass(frozen=True)
class SignedKey:
    """A site's X25519 public key, signed with its kit key over (federation, site, key,
    bound_to) (:func:`common.sealing.key_statement`); ``certificate_pem`` is the kit
    certificate the key came with, ``bound_to`` the dealer's key of this agreement (empty for
    the dealer's own)."""

    participant_id: str
    public_key: bytes
    signature: bytes
    certificate_pem: bytes = b""
    bound_to: bytes = b""


@dataclass(frozen=True)
class SealedShare:
    """The dealer's anchor seed sealed to one recipient, signed by the dealer's kit key
    (:func:`common.sealing.share_statement`)."""

    dealer_id: str
    recipient_id: str
    nonce: bytes
    ciphertext: bytes
    signature: bytes


@dataclass(frozen=True)
class Commitment:
    """A site's SHA-256 commitment to the anchor it derived."""

    participant_id: str
    digest: bytes


@dataclass(frozen=True)
class Withdrawal:
    """A site that said it cannot take part, and why."""

    participant_id: str
    reason: str


@dataclass(frozen=True)
class FederationInfo:
    """What the analyst's config declares, read by sites before the agreement (``None``: left
    open by the config; ``deadline_unix`` 0: no deadline)."""

    federation_id: str
    participants: tuple[str, ...]
    method: str
    reference: str
    deadline_unix: float
    anchors: int | None = None
    dim: int | None = None
    sigma: float | None = None
    v: float | None = None
    dealer: str | None = None
    projection_seed: int | None = None
    translation_scale: float | None = None
    model: str | None = None
    schema: RecordSchema | None = None
    report_projection_cost: bool = False


@dataclass(frozen=True)
class AnchorSecret:
    """What the dealer seals to each recipient: the 256-bit seed, the common parameters it was
    dealt for, and every recipient's X25519 key it was sealed to (so a restarted dealer that
    reopens its seed never seals it again to a key that changed)."""

    seed: bytes
    method: str
    anchors: int
    dim: int
    translation_scale: float
    sealed_to: dict[str, bytes]
