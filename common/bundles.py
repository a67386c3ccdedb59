"""Bundles of arrays, free of any transport: what a header says about each array (dtype, shape,
size, SHA-256), the stream of raw little-endian bytes in bounded chunks, and the incremental
check of those bytes against the header. Never pickled; no generated code, no gRPC.

A bundle is the ordered set of arrays one stream carries (an upload ``Y_i, B_i``, labels and
split tags, or a colluder's disclosure). A receiver reads it as a :class:`BundleStream` (the
header's spec, the chunk payloads, the declared digests) and feeds the chunk bytes, in whatever
sizes they arrive, to a :class:`BundleDigester`, which tracks array boundaries, hashes
incrementally and refuses a stream that is too long, too short or corrupt.

How a header is encoded is a transport's business: :class:`HeaderCodec` is what the protocol
core asks of it (the canonical bytes of a header, for the store and for receipts, and the header
back from them); :mod:`common.wire` is the protobuf one, with the functions that convert
these classes to and from their messages.

References: issues 3, 14 (wire format) and 32 (a transport-free core).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from noisyanchor.common.errors import IntegrityError, InvalidInputError

#: Bytes per chunk message: far below gRPC's 4 MB default message limit, large enough that the
#: per-message overhead is negligible.
CHUNK_SIZE = 1 << 20

#: Largest number of dimensions an array may declare (every array of the protocol is 1-D or 2-D).
MAX_NDIM = 2

#: Bytes of a SHA-256 digest.
DIGEST_SIZE = hashlib.sha256().digest_size

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
        Digest of the array's raw bytes; empty while unknown (a header whose digests follow in
        the trailer).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    sha256: bytes = b""

    @property
    def nbytes(self) -> int:
        """Byte count of the raw data (``prod(shape) * itemsize``)."""
        return math.prod(self.shape) * wire_dtype(self.dtype).itemsize

    @classmethod
    def of(cls, name: str, array: np.ndarray, *, digest: bool = True) -> ArraySpec:
        """Spec of ``array`` (hashing its little-endian bytes unless ``digest=False``)."""
        arr = little_endian(array)
        return cls(name, arr.dtype.str, tuple(int(n) for n in arr.shape),
                   hashlib.sha256(raw_bytes(arr)).digest() if digest else b"")


    @classmethod
    def checked(cls, name: str, dtype: str, shape: Sequence[int], nbytes: int,
                sha256: bytes) -> ArraySpec:
        """Spec from a header's fields, after checking they are self-consistent."""
        if not name:
            raise InvalidInputError("an array in the header has no name")
        wire_dtype(dtype)
        if len(shape) > MAX_NDIM:
            raise InvalidInputError(f"array {name!r} has {len(shape)} dimensions; at most "
                                    f"{MAX_NDIM} are allowed")
        _check_digest(sha256, name, allow_empty=True)
        spec = cls(name, dtype, tuple(int(n) for n in shape), bytes(sha256))
        if spec.nbytes != nbytes:
            raise InvalidInputError(f"array {name!r} declares {nbytes} bytes but dtype "
                                    f"{dtype} and shape {spec.shape} make {spec.nbytes}")
        return spec



def _check_digest(digest: bytes, name: str, *, allow_empty: bool = False) -> None:
    if len(digest) != DIGEST_SIZE and not (allow_empty and not digest):
        raise InvalidInputError(f"array {name!r} has a {len(digest)}-byte digest; SHA-256 has "
                                f"{DIGEST_SIZE}")


@dataclass(frozen=True)
class BundleSpec:
    """A whole stream header: federation, method, the arrays in stream order, the digest of
    the preprocessing the sender applied to its records (empty: none declared) and, when the
    federation asks for it, what the public projection ``F`` costs the sender's own model
    (:mod:`participant.projection_cost`; None: not sent)."""

    federation_id: str
    method: str
    arrays: tuple[ArraySpec, ...]
    preprocessing_sha256: bytes = b""
    projection_cost: float | None = None

    @property
    def nbytes(self) -> int:
        """Total raw bytes the stream must carry after the header."""
        return sum(a.nbytes for a in self.arrays)

    @property
    def has_digests(self) -> bool:
        """Whether every array's digest is known (else they come in the trailer)."""
        return all(a.sha256 for a in self.arrays)

    def array(self, name: str) -> ArraySpec | None:
        """The spec named ``name``, or None."""
        return next((a for a in self.arrays if a.name == name), None)

    def with_digests(self, digests: Sequence[bytes]) -> BundleSpec:
        """This spec with the digests of its arrays (``b""`` each: without them)."""
        if len(digests) != len(self.arrays):
            raise InvalidInputError(f"{len(digests)} digests for the {len(self.arrays)} arrays of "
                                    "the header")
        for array, digest in zip(self.arrays, digests, strict=True):
            _check_digest(digest, array.name, allow_empty=True)
        return replace(self, arrays=tuple(replace(a, sha256=bytes(d))
                                          for a, d in zip(self.arrays, digests, strict=True)))

    def without_digests(self) -> BundleSpec:
        """This spec with every digest left out (what a trailer-mode header carries)."""
        return self.with_digests([b""] * len(self.arrays))


    @classmethod
    def checked(cls, federation_id: str, method: str, arrays: tuple[ArraySpec, ...],
                preprocessing_sha256: bytes = b"",
                projection_cost: float | None = None) -> BundleSpec:
        """Spec from a header's fields; array names must be unique, and the digests all given
        or all left to the trailer."""
        names = [a.name for a in arrays]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"array names in the header repeat: {names}")
        if len({bool(a.sha256) for a in arrays}) > 1:
            raise InvalidInputError("the header carries the digests of some arrays only: give "
                                    "all of them, or none and send them in the trailer")
        if len(preprocessing_sha256) not in (0, DIGEST_SIZE):
            raise InvalidInputError(f"the header's preprocessing digest has "
                                    f"{len(preprocessing_sha256)} bytes; SHA-256 has "
                                    f"{DIGEST_SIZE}")
        if projection_cost is not None and not -1.0 <= projection_cost <= 1.0:
            # a difference of balanced accuracies
            raise InvalidInputError(f"the header's projection cost {projection_cost} is not a "
                                    "difference of balanced accuracies (in [-1, 1])")
        return cls(federation_id, method, arrays, bytes(preprocessing_sha256), projection_cost)


class HeaderCodec(Protocol):
    """How a transport encodes a bundle header (the protobuf one: :mod:`common.wire`)."""

    def header_bytes(self, spec: BundleSpec) -> bytes:
        """The canonical (deterministic) bytes of ``spec``: what the store keeps and what a
        receipt hashes."""
        ...

    def header_of(self, raw: bytes) -> BundleSpec:
        """The spec encoded in ``raw``, checked (:meth:`BundleSpec.checked`).

        Raises
        ------
        HeaderDecodeError
            ``raw`` is not an encoded header.
        """
        ...


class HeaderDecodeError(InvalidInputError):
    """Bytes that are not an encoded bundle header."""


def receipt(spec: BundleSpec, participant_id: str,
            header_bytes: Callable[[BundleSpec], bytes]) -> bytes:
    """SHA-256 over a domain label, the sender and the canonical header with every digest
    (``header_bytes``, the codec's).

    The header then holds every array's digest, so an identical retry gets the same receipt
    (whether its digests travelled in the header or the trailer) and any change of content
    gets a different one.
    """
    if not spec.has_digests:
        raise InvalidInputError("a receipt needs the digest of every array")
    h = hashlib.sha256(_RECEIPT_DOMAIN)
    h.update(participant_id.encode() + b"\x00")
    h.update(header_bytes(spec))
    return h.digest()


def bundle_spec(federation_id: str, method: str, arrays: Mapping[str, np.ndarray], *,
                digests: bool = True, preprocessing_sha256: bytes = b"",
                projection_cost: float | None = None) -> BundleSpec:
    """Spec of ``arrays`` (stream order = mapping order); ``digests=False`` leaves the digests
    to be computed while sending (:class:`BundleSender`); ``preprocessing_sha256`` names the
    preprocessing the records went through (:mod:`common.tabular.schema`);
    ``projection_cost`` is sent only when not None."""
    return BundleSpec(federation_id, method, tuple(ArraySpec.of(name, arr, digest=digests)
                                                   for name, arr in arrays.items()),
                      preprocessing_sha256, projection_cost)


def _pieces(arrays: Mapping[str, np.ndarray],
            chunk_size: int) -> Iterator[tuple[int, memoryview]]:
    """``(array index, view)`` of the arrays' raw bytes in pieces of at most ``chunk_size``."""
    if chunk_size < 1:
        raise InvalidInputError(f"chunk_size must be >= 1, got {chunk_size}")
    for index, arr in enumerate(arrays.values()):
        view = raw_bytes(arr)
        for start in range(0, len(view), chunk_size):
            yield index, view[start:start + chunk_size]


def iter_chunks(
    arrays: Mapping[str, np.ndarray], chunk_size: int = CHUNK_SIZE
) -> Iterator[memoryview]:
    """The arrays' raw little-endian bytes, concatenated, in pieces of at most ``chunk_size``.

    Views into the arrays: nothing is copied (beyond a byte-order conversion).
    """
    for _, piece in _pieces(arrays, chunk_size):
        yield piece


class BundleStream:
    """A received bundle: the header's spec, the chunk payloads, then the declared digests.

    Parameters
    ----------
    spec : BundleSpec
        The header.
    chunks : iterable of bytes-like
        The chunk payloads in order.
    trailer : sequence of bytes, optional
        Digests of a trailer (set by a transport that finds it after the chunks:
        :func:`common.wire.stream_of_messages`).
    signature : bytes
        The sender's kit-key signature over its receipt
        (:func:`common.signed_statements.bundle_statement`), from the header or the trailer;
        read once the chunks are exhausted.
    """

    def __init__(self, spec: BundleSpec, chunks: Iterable[bytes | memoryview],
                 trailer: Sequence[bytes] | None = None, signature: bytes = b"") -> None:
        self.spec = spec
        self._chunks = chunks
        self.trailer = None if trailer is None else tuple(trailer)
        self.signature = signature

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The chunk payloads (once)."""
        yield from self._chunks

    def digests(self) -> tuple[bytes, ...]:
        """The declared digest of every array: the header's, or the trailer's (call after
        :meth:`chunks` is exhausted).

        Raises
        ------
        IntegrityError
            The header has no digests and the stream ended without its trailer (truncated).
        InvalidInputError
            A malformed trailer, or one that contradicts the header's digests.
        """
        header = tuple(a.sha256 for a in self.spec.arrays)
        if self.trailer is None:
            if not self.spec.has_digests:
                raise IntegrityError("the stream ended without the trailer its header announces "
                                     "(truncated)")
            return header
        self.spec.with_digests(self.trailer)  # checks the count and sizes
        if any(not d for d in self.trailer):
            raise InvalidInputError("the trailer leaves a digest empty")
        if self.spec.has_digests and self.trailer != header:
            raise InvalidInputError("the trailer's digests differ from the header's")
        return self.trailer


class BundleDigester:
    """Incremental SHA-256 of every array of a bundle from chunks of any size.

    ``feed`` (or ``split``) raises :class:`~common.errors.IntegrityError` as soon as the stream
    is longer than the header declared; ``finish`` raises when it was shorter or a digest
    differs, naming the array. ``split`` (accounting) and ``update`` (hashing) may run in
    different threads, ``update`` in stream order.
    """

    def __init__(self, spec: BundleSpec) -> None:
        self.spec = spec
        self.received = 0
        self._index = 0
        self._left = spec.arrays[0].nbytes if spec.arrays else 0
        self._hashes = [hashlib.sha256() for _ in spec.arrays]
        self._skip_empty()

    def _skip_empty(self) -> None:
        # Move past the current array (and any zero-byte arrays after it) once it is complete.
        while self._index < len(self.spec.arrays) and self._left == 0:
            self._index += 1
            if self._index < len(self.spec.arrays):
                self._left = self.spec.arrays[self._index].nbytes

    def split(self, data: bytes | memoryview) -> list[tuple[int, memoryview]]:
        """Account for the next ``data`` bytes of the stream: ``(array index, piece)`` in order,
        each piece within one array."""
        view = memoryview(data)
        if self.received + len(view) > self.spec.nbytes:
            raise IntegrityError(f"the stream carries more than the {self.spec.nbytes} bytes its "
                                 "header declares")
        self.received += len(view)
        pieces = []
        while len(view):
            take = min(self._left, len(view))
            pieces.append((self._index, view[:take]))
            view = view[take:]
            self._left -= take
            self._skip_empty()
        return pieces

    def update(self, pieces: Iterable[tuple[int, memoryview]]) -> None:
        """Hash pieces returned by :meth:`split` (in stream order)."""
        for index, piece in pieces:
            self._hashes[index].update(piece)

    def feed(self, data: bytes | memoryview) -> list[tuple[ArraySpec, memoryview]]:
        """Account for and hash the next ``data`` bytes of the stream.

        Returns the pieces of ``data`` with the array each belongs to, in order, so a caller
        can inspect array contents as they stream by (e.g. for NaN) without re-reading them.
        """
        pieces = self.split(data)
        self.update(pieces)
        return [(self.spec.arrays[i], piece) for i, piece in pieces]

    def digests(self) -> list[bytes]:
        """SHA-256 of every array's bytes received so far."""
        return [h.digest() for h in self._hashes]

    def finish(self, expected: Sequence[bytes] | None = None) -> None:
        """Check the stream was complete and every digest matches ``expected`` (default: the
        header's)."""
        if self.received != self.spec.nbytes:
            raise IntegrityError(f"the stream ended after {self.received} of "
                                 f"{self.spec.nbytes} declared bytes (truncated)")
        if expected is None:
            expected = [a.sha256 for a in self.spec.arrays]
        for array, got, digest in zip(self.spec.arrays, self.digests(), expected, strict=True):
            if got != digest:
                raise IntegrityError(f"array {array.name!r}: SHA-256 of the received bytes "
                                     "differs from the declared one (corrupt)")


def drain(stream: BundleStream) -> BundleSpec:
    """Read a whole stream without keeping it: its spec with the verified digests (the answer to
    a retry of a committed bundle whose header carried no digests)."""
    digester = BundleDigester(stream.spec)
    for chunk in stream.chunks():
        digester.feed(chunk)
    digests = stream.digests()
    digester.finish(digests)
    return stream.spec.with_digests(digests)
