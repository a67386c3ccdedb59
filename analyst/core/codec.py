"""What the protocol core asks of an encoding: the canonical bytes of the objects it keeps in
its store, and the objects back from them.

The core never imports generated code; the transport that opens the store hands it a codec.
Every store so far holds protobuf bundle headers and relay objects
(:data:`common.wire_messages.PROTO_CODEC`), and a store written under one codec is read only
under the same one.
"""

from __future__ import annotations

from typing import Protocol

from noisyanchor.common.bundles import HeaderCodec
from noisyanchor.common.protocol_messages import SealedShare, SignedKey


class RelayCodec(Protocol):
    """Encoding of the relay objects the store keeps (``relay/keys``, ``relay/sealed``)."""

    def key_bytes(self, key: SignedKey) -> bytes:
        """The canonical bytes of a signed exchange key (with the certificate it came with)."""
        ...

    def key_of(self, raw: bytes) -> SignedKey:
        """The signed key ``raw`` encodes."""
        ...

    def share_bytes(self, share: SealedShare) -> bytes:
        """The canonical bytes of a sealed share."""
        ...

    def share_of(self, raw: bytes) -> SealedShare:
        """The sealed share ``raw`` encodes."""
        ...


class StoreCodec(HeaderCodec, RelayCodec, Protocol):
    """Everything a store encodes: bundle headers and relay objects."""
