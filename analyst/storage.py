"""The analyst's store as the gRPC service keeps it: :mod:`analyst.core.store` bound to the
protobuf codec every store so far was written with (:data:`common.wire_messages.PROTO_CODEC`).
Callers that only need the store's files and folders import from here, as before the core.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from noisyanchor.analyst.core import store as _core
from noisyanchor.analyst.core.store import (
    FEDERATION_FILE,
    IDENTITY_FILE,
    LOCK_FILE,
    MAGIC,
    MANIFEST,
    MUTABLE_KEYS,
    WRITEBACK_BYTES,
    StoreInUseError,
    npy_bytes,
    serving_pid,
    store_identity,
)
from noisyanchor.common.wire_messages import PROTO_CODEC

__all__ = ["FEDERATION_FILE", "IDENTITY_FILE", "LOCK_FILE", "MAGIC", "MANIFEST", "MUTABLE_KEYS",
           "WRITEBACK_BYTES", "Store", "StoreInUseError", "npy_bytes", "read_bundle",
           "read_bundle_spec", "receive_bundle", "serving_pid", "store_identity",
           "verify_bundle"]


class Store(_core.Store):
    """A store whose bundle headers and relay objects are protobuf (:class:`core.store.Store`
    with :data:`PROTO_CODEC`)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, PROTO_CODEC)


receive_bundle = partial(_core.receive_bundle, codec=PROTO_CODEC)
read_bundle_spec = partial(_core.read_bundle_spec, codec=PROTO_CODEC)
verify_bundle = partial(_core.verify_bundle, codec=PROTO_CODEC)
read_bundle = partial(_core.read_bundle, codec=PROTO_CODEC)
