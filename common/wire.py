"""Arrays on the wire: a header naming each array (dtype, shape, size, SHA-256), then the raw
little-endian bytes in bounded chunks. Never pickled.

A bundle is the ordered set of arrays one stream carries (an upload ``Y_i, B_i``, labels and
split tags, or a colluder's disclosure). :func:`request_stream` encodes one; the receiving side
feeds the chunk bytes, in whatever sizes they arrive, to a :class:`BundleDigester`, which tracks
array boundaries, hashes incrementally and refuses a stream that is too long, too short or
corrupt.

References: issue 3 (wire format); ``protos/v1/analyst.proto``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.protos.v1 import analyst_pb2 as pb

#: Bytes per chunk message: far below gRPC's 4 MB default message limit, large enough that the
#: per-message overhead is negligible.
CHUNK_SIZE = 1 << 20

#: Largest number of dimensions an array may declare (every array of the protocol is 1-D or 2-D).
MAX_NDIM = 2

#: Tag byte of ``UploadRequest.chunk`` on the wire (field number 2, length-delimited).
_CHUNK_TAG = bytes([2 << 3 | 2])

#: Domain separation label of receipts.
_RECEIPT_DOMAIN = b"noisyanchor/v1/receipt\x00"


def wire_dtype(dtype: str) -> np.dtype:
    """The numpy dtype named by a header, refusing anything but little-endian numbers.

    Allowed: booleans, signed and unsigned integers and floats, little-endian or single-byte
    (``"<f8"``, ``"<i8"``, ``"|i1"``); never objects, strings or big-endian data.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidInputError(f"unknown dtype {dtype!r}") from None
    if dt.kind not in "biuf" or dt.str != dtype or dt.str[0] not in "<|":
        raise InvalidInputError(f"dtype {dtype!r} is not a little-endian numeric dtype "
                                "like '<f8', '<i8' or '|i1'")
    return dt


def little_endian(array: np.ndarray) -> np.ndarray:
    """``array`` as a C-contiguous array in its little-endian dtype (no copy when already so)."""
    arr = np.asarray(array)
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))


def raw_bytes(array: np.ndarray) -> memoryview:
    """Flat byte view of ``array``'s little-endian data (no copy when already so)."""
    return little_endian(array).reshape(-1).view(np.uint8).data


@dataclass(frozen=True)
class ArraySpec:
    """What the header says about one array.

    Attributes
    ----------
    name : str
    dtype : str
        numpy dtype string, little-endian (``"<f8"``).
    shape : tuple of int
    sha256 : bytes
        Digest of the array's raw bytes.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    sha256: bytes

    @property
    def nbytes(self) -> int:
        """Byte count of the raw data (``prod(shape) * itemsize``)."""
        return math.prod(self.shape) * wire_dtype(self.dtype).itemsize

    @classmethod
    def of(cls, name: str, array: np.ndarray) -> ArraySpec:
        """Spec of ``array`` (hashing its little-endian bytes)."""
        arr = little_endian(array)
        return cls(name, arr.dtype.str, tuple(int(n) for n in arr.shape),
                   hashlib.sha256(raw_bytes(arr)).digest())

    @classmethod
    def from_proto(cls, msg: pb.ArrayHeader) -> ArraySpec:
        """Spec from a header message, after checking it is self-consistent."""
        if not msg.name:
            raise InvalidInputError("an array in the header has no name")
        wire_dtype(msg.dtype)
        if len(msg.shape) > MAX_NDIM:
            raise InvalidInputError(f"array {msg.name!r} has {len(msg.shape)} dimensions; at most "
                                    f"{MAX_NDIM} are allowed")
        if len(msg.sha256) != hashlib.sha256().digest_size:
            raise InvalidInputError(f"array {msg.name!r} has a {len(msg.sha256)}-byte digest; "
                                    "SHA-256 has 32")
        spec = cls(msg.name, msg.dtype, tuple(int(n) for n in msg.shape), bytes(msg.sha256))
        if spec.nbytes != msg.nbytes:
            raise InvalidInputError(f"array {msg.name!r} declares {msg.nbytes} bytes but dtype "
                                    f"{msg.dtype} and shape {spec.shape} make {spec.nbytes}")
        return spec

    def to_proto(self) -> pb.ArrayHeader:
        """Header message of this spec."""
        return pb.ArrayHeader(name=self.name, dtype=self.dtype, shape=list(self.shape),
                              nbytes=self.nbytes, sha256=self.sha256)


@dataclass(frozen=True)
class BundleSpec:
    """A whole stream header: federation, method and the arrays in stream order."""

    federation_id: str
    method: str
    arrays: tuple[ArraySpec, ...]

    @property
    def nbytes(self) -> int:
        """Total raw bytes the stream must carry after the header."""
        return sum(a.nbytes for a in self.arrays)

    def array(self, name: str) -> ArraySpec | None:
        """The spec named ``name``, or None."""
        return next((a for a in self.arrays if a.name == name), None)

    @classmethod
    def from_proto(cls, msg: pb.BundleHeader) -> BundleSpec:
        """Spec from a header message; array names must be unique."""
        arrays = tuple(ArraySpec.from_proto(a) for a in msg.arrays)
        names = [a.name for a in arrays]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"array names in the header repeat: {names}")
        return cls(msg.federation_id, msg.method, arrays)

    def to_proto(self) -> pb.BundleHeader:
        """Header message of this spec."""
        return pb.BundleHeader(federation_id=self.federation_id, method=self.method,
                               arrays=[a.to_proto() for a in self.arrays])

    def receipt(self, participant_id: str) -> bytes:
        """SHA-256 over a domain label, the sender and the canonical header.

        The header holds every array's digest, so an identical retry gets the same receipt and
        any change of content gets a different one.
        """
        h = hashlib.sha256(_RECEIPT_DOMAIN)
        h.update(participant_id.encode() + b"\x00")
        h.update(self.to_proto().SerializeToString(deterministic=True))
        return h.digest()


def bundle_spec(federation_id: str, method: str, arrays: Mapping[str, np.ndarray]) -> BundleSpec:
    """Spec of ``arrays`` (stream order = mapping order)."""
    return BundleSpec(federation_id, method,
                      tuple(ArraySpec.of(name, arr) for name, arr in arrays.items()))


def iter_chunks(
    arrays: Mapping[str, np.ndarray], chunk_size: int = CHUNK_SIZE
) -> Iterator[memoryview]:
    """The arrays' raw little-endian bytes, concatenated, in pieces of at most ``chunk_size``.

    Views into the arrays: nothing is copied (beyond a byte-order conversion).
    """
    if chunk_size < 1:
        raise InvalidInputError(f"chunk_size must be >= 1, got {chunk_size}")
    for arr in arrays.values():
        view = raw_bytes(arr)
        for start in range(0, len(view), chunk_size):
            yield view[start:start + chunk_size]


def _varint(n: int) -> bytes:
    """Protobuf base-128 varint of ``n >= 0``."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_chunk(piece: memoryview | bytes) -> bytes:
    """The serialized ``UploadRequest(chunk=piece)``, with one copy of ``piece``.

    Hand-encoded (tag of field 2 with wire type 2, varint length, bytes) because building and
    serializing the message with the protobuf runtime copies a 1 MiB payload several times and
    made the client several times slower than the network; tests check the bytes parse back
    with the library.
    """
    return b"".join((_CHUNK_TAG, _varint(len(piece)), piece))


def request_stream(
    spec: BundleSpec, arrays: Mapping[str, np.ndarray], chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """The serialized client-streaming messages of one bundle: the header, then the chunks."""
    yield pb.UploadRequest(header=spec.to_proto()).SerializeToString()
    for piece in iter_chunks(arrays, chunk_size):
        yield encode_chunk(piece)


class BundleDigester:
    """Incremental SHA-256 of every array of a bundle from chunks of any size.

    ``feed`` raises :class:`~common.errors.IntegrityError` as soon as the stream is longer than
    the header declared; ``finish`` raises when it was shorter or a digest differs, naming the
    array.
    """

    def __init__(self, spec: BundleSpec) -> None:
        self.spec = spec
        self.received = 0
        self._index = 0
        self._left = spec.arrays[0].nbytes if spec.arrays else 0
        self._hash = hashlib.sha256()
        self._digests: list[bytes] = []
        self._skip_empty()

    def _skip_empty(self) -> None:
        # Close the current array (and any zero-byte arrays after it) once it is complete.
        while self._index < len(self.spec.arrays) and self._left == 0:
            self._digests.append(self._hash.digest())
            self._index += 1
            self._hash = hashlib.sha256()
            if self._index < len(self.spec.arrays):
                self._left = self.spec.arrays[self._index].nbytes

    def feed(self, data: bytes) -> list[tuple[ArraySpec, memoryview]]:
        """Account for the next ``data`` bytes of the stream.

        Returns the pieces of ``data`` with the array each belongs to, in order, so a caller
        can inspect array contents as they stream by (e.g. for NaN) without re-reading them.
        """
        view = memoryview(data)
        if self.received + len(view) > self.spec.nbytes:
            raise IntegrityError(f"the stream carries more than the {self.spec.nbytes} bytes its "
                                 "header declares")
        self.received += len(view)
        pieces = []
        while len(view):
            take = min(self._left, len(view))
            self._hash.update(view[:take])
            pieces.append((self.spec.arrays[self._index], view[:take]))
            view = view[take:]
            self._left -= take
            self._skip_empty()
        return pieces

    def finish(self) -> None:
        """Check the stream was complete and every digest matches its header."""
        if self.received != self.spec.nbytes:
            raise IntegrityError(f"the stream ended after {self.received} of "
                                 f"{self.spec.nbytes} declared bytes (truncated)")
        for array, digest in zip(self.spec.arrays, self._digests, strict=True):
            if digest != array.sha256:
                raise IntegrityError(f"array {array.name!r}: SHA-256 of the received bytes "
                                     "differs from the header (corrupt)")


def decode_array(header: pb.ArrayHeader, data: bytes) -> np.ndarray:
    """One array carried whole in a message field: checked against its header, then viewed.

    Raises
    ------
    InvalidInputError
        The header is malformed (:meth:`ArraySpec.from_proto`).
    IntegrityError
        ``data`` has another length than the header declares, or another SHA-256.
    """
    spec = ArraySpec.from_proto(header)
    if len(data) != spec.nbytes:
        raise IntegrityError(f"array {spec.name!r} carries {len(data)} bytes, its header "
                             f"declares {spec.nbytes}")
    if hashlib.sha256(data).digest() != spec.sha256:
        raise IntegrityError(f"array {spec.name!r}: SHA-256 of the bytes differs from the header")
    return np.frombuffer(data, dtype=wire_dtype(spec.dtype)).reshape(spec.shape)
