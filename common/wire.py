"""Bundles on the gRPC wire: the protobuf encoding of the transport-free bundles of
:mod:`common.bundles` (re-exported here, so callers import them from either module).

A bundle stream is an ``UploadRequest`` header, the raw little-endian bytes in bounded chunk
messages, and every array's SHA-256, in the header or in a trailer. :class:`BundleSender`
encodes one; a sender that does not know the digests yet leaves them out of the header, hashes
each chunk while gRPC sends the one before, and ends with a trailer carrying them (issue 14:
uploads at wire speed). The receiving side reads the messages with :func:`stream_of_messages`
(chunk payloads without a copy). :data:`PROTO_HEADERS` is the protobuf :class:`HeaderCodec`
the analyst's store and receipts use.

The gRPC path converts with plain functions (:func:`bundle_header` / :func:`bundle_spec_of`,
:func:`array_header` / :func:`array_spec_of`, :func:`proto_receipt`, :func:`stream_of_messages`),
so :mod:`common.bundles` (and the protocol core above it) never imports the generated code.

References: issues 3, 14 (wire format) and 32; ``protos/v1/analyst.proto``.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from google.protobuf.message import DecodeError

from noisyanchor.common.bundles import (
    CHUNK_SIZE,
    DIGEST_SIZE,
    MAX_NDIM,
    ArraySpec,
    BundleDigester,
    BundleSpec,
    BundleStream,
    HeaderCodec,
    HeaderDecodeError,
    _check_digest,
    _pieces,
    bundle_spec,
    drain,
    iter_chunks,
    little_endian,
    raw_bytes,
    receipt,
    wire_dtype,
)
from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.protos.v1 import analyst_pb2 as pb

__all__ = [
    "CHUNK_SIZE",
    "DIGEST_SIZE",
    "HASH_AHEAD",
    "MAX_NDIM",
    "PROTO_HEADERS",
    "ArraySpec",
    "BundleDigester",
    "BundleSender",
    "BundleSpec",
    "BundleStream",
    "HeaderCodec",
    "array_header",
    "array_spec_of",
    "bundle_header",
    "bundle_spec",
    "bundle_spec_of",
    "decode_array",
    "drain",
    "encode_chunk",
    "iter_chunks",
    "little_endian",
    "parse_request",
    "proto_receipt",
    "raw_bytes",
    "request_stream",
    "stream_of_messages",
    "wire_dtype",
]

#: Tag byte of ``UploadRequest.chunk`` on the wire (field number 2, length-delimited).
_CHUNK_TAG = bytes([2 << 3 | 2])

#: Chunks a sender may send ahead of its hashing thread (memory: views, no copies).
HASH_AHEAD = 16


def array_spec_of(msg: pb.ArrayHeader) -> ArraySpec:
    """Spec from a header message, after checking it is self-consistent
    (:meth:`ArraySpec.checked`)."""
    return ArraySpec.checked(msg.name, msg.dtype, msg.shape, msg.nbytes, msg.sha256)


def array_header(spec: ArraySpec) -> pb.ArrayHeader:
    """Header message of ``spec``."""
    return pb.ArrayHeader(name=spec.name, dtype=spec.dtype, shape=list(spec.shape),
                          nbytes=spec.nbytes, sha256=spec.sha256)


def bundle_spec_of(msg: pb.BundleHeader) -> BundleSpec:
    """Spec from a header message (:meth:`BundleSpec.checked`)."""
    return BundleSpec.checked(
        msg.federation_id, msg.method, tuple(array_spec_of(a) for a in msg.arrays),
        bytes(msg.preprocessing_sha256),
        msg.projection_cost if msg.HasField("projection_cost") else None)


def bundle_header(spec: BundleSpec) -> pb.BundleHeader:
    """Header message of ``spec``."""
    return pb.BundleHeader(federation_id=spec.federation_id, method=spec.method,
                           arrays=[array_header(a) for a in spec.arrays],
                           preprocessing_sha256=spec.preprocessing_sha256,
                           projection_cost=spec.projection_cost)


class ProtoHeaders:
    """The protobuf :class:`HeaderCodec`: a ``BundleHeader`` serialized deterministically."""

    def header_bytes(self, spec: BundleSpec) -> bytes:
        """The canonical bytes of ``spec``."""
        return bundle_header(spec).SerializeToString(deterministic=True)

    def header_of(self, raw: bytes) -> BundleSpec:
        """The checked spec ``raw`` encodes; HeaderDecodeError when it does not parse."""
        msg = pb.BundleHeader()
        try:
            msg.ParseFromString(raw)
        except DecodeError:
            raise HeaderDecodeError("the bytes are not a BundleHeader") from None
        return bundle_spec_of(msg)


#: The codec of the gRPC path (and of every store it wrote).
PROTO_HEADERS = ProtoHeaders()


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


def _chunk_payload(view: memoryview) -> memoryview | None:
    """The payload of a serialized ``UploadRequest`` that is exactly one ``chunk`` field (what
    :func:`encode_chunk` and the protobuf runtime write), as a view; None for anything else."""
    if not len(view) or view[0] != _CHUNK_TAG[0]:
        return None
    length, shift, pos = 0, 0, 1
    while pos < len(view) and pos <= 10:
        byte = view[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return view[pos:] if pos + length == len(view) else None
        shift += 7
    return None


def parse_request(message: bytes | memoryview | pb.UploadRequest) -> tuple[str, object]:
    """``(part, value)`` of one message of a bundle stream: ``("header", BundleHeader)``,
    ``("chunk", payload)`` or ``("trailer", BundleTrailer)``.

    A serialized message (the analyst reads bundle streams without the protobuf runtime) that
    is one chunk field yields a view of its payload, without a copy (hand-decoded, the inverse of
    :func:`encode_chunk`, because parsing a 1 MiB message and reading its field copies the
    payload twice); anything else is parsed by the protobuf runtime.
    """
    if isinstance(message, pb.UploadRequest):
        msg = message
    else:
        view = memoryview(message)
        payload = _chunk_payload(view)
        if payload is not None:
            return "chunk", payload
        try:
            msg = pb.UploadRequest.FromString(view.tobytes())
        except DecodeError:
            raise InvalidInputError("a bundle stream message is not an UploadRequest") from None
    part = msg.WhichOneof("part")
    if part is None:
        raise InvalidInputError("an UploadRequest carries no header, chunk or trailer")
    return part, getattr(msg, part)


class BundleSender:
    """The client-streaming messages of one bundle, replayable for retries.

    When ``spec`` has no digests (``bundle_spec(..., digests=False)``), a pass sends the header
    without them, hashes every chunk in a helper thread (SHA-256 releases the GIL) while gRPC
    sends the chunks before it, and ends with the trailer. Once a pass has sent the trailer the
    digests are known (:attr:`spec`), and later passes (retries) carry them in the header, so
    that the analyst can answer an identical retry before reading any chunk.

    Parameters
    ----------
    spec : BundleSpec
        The header, with or without digests.
    arrays : mapping of str to ndarray
        The arrays, in ``spec`` order.
    chunk_size : int
        Bytes per chunk message.
    sign : callable, optional
        The sender's signature of the spec with every digest (its signed receipt,
        :func:`common.signed_statements.bundle_statement`): sent in the header when the digests
        are known, else in the trailer.
    """

    def __init__(self, spec: BundleSpec, arrays: Mapping[str, np.ndarray],
                 chunk_size: int = CHUNK_SIZE,
                 sign: Callable[[BundleSpec], bytes] | None = None) -> None:
        self.spec = spec
        self._arrays = arrays
        self._chunk_size = chunk_size
        self._sign = sign

    def _signature(self, spec: BundleSpec) -> bytes:
        return self._sign(spec) if self._sign is not None else b""

    def messages(self) -> Iterator[bytes]:
        """The serialized messages of one pass: header, chunks, and the trailer when needed."""
        spec = self.spec
        header = bundle_header(spec)
        if spec.has_digests:
            header.signature = self._signature(spec)
        yield pb.UploadRequest(header=header).SerializeToString()
        if spec.has_digests:
            for piece in iter_chunks(self._arrays, self._chunk_size):
                yield encode_chunk(piece)
            return
        hashes = [hashlib.sha256() for _ in spec.arrays]
        with ThreadPoolExecutor(1, thread_name_prefix="bundle-hash") as hasher:
            pending: deque[Future] = deque()
            for index, piece in _pieces(self._arrays, self._chunk_size):
                pending.append(hasher.submit(hashes[index].update, piece))
                if len(pending) > HASH_AHEAD:
                    pending.popleft().result()
                yield encode_chunk(piece)
            for done in pending:
                done.result()
        digests = [h.digest() for h in hashes]
        self.spec = spec.with_digests(digests)
        yield pb.UploadRequest(trailer=pb.BundleTrailer(
            sha256=digests, signature=self._signature(self.spec))).SerializeToString()


def request_stream(
    spec: BundleSpec, arrays: Mapping[str, np.ndarray], chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """The serialized client-streaming messages of one bundle (one :class:`BundleSender` pass)."""
    return BundleSender(spec, arrays, chunk_size).messages()



def stream_of_messages(messages: Iterable[bytes | memoryview | pb.UploadRequest]
                       ) -> BundleStream:
    """The stream of wire messages: a header first, then chunks, then at most a trailer."""
    it = iter(messages)
    first = next(it, None)
    part, header = parse_request(first) if first is not None else ("", None)
    if part != "header":
        raise InvalidInputError("a bundle stream must start with its header")
    assert isinstance(header, pb.BundleHeader)
    stream = BundleStream(bundle_spec_of(header), (), signature=bytes(header.signature))
    stream._chunks = _payloads(stream, it)
    return stream


def _payloads(stream: BundleStream, messages: Iterator) -> Iterator[bytes | memoryview]:
    for message in messages:
        part, value = parse_request(message)
        if stream.trailer is not None:
            raise InvalidInputError("nothing may follow the trailer of a bundle stream")
        if part == "chunk":
            yield value  # type: ignore[misc]  # bytes or a view of them
        elif part == "trailer":
            trailer: pb.BundleTrailer = value  # type: ignore[assignment]
            stream.trailer = tuple(bytes(d) for d in trailer.sha256)
            stream.signature = bytes(trailer.signature) or stream.signature
        else:
            raise InvalidInputError("only chunks and a trailer may follow the header")


def decode_array(header: pb.ArrayHeader, data: bytes) -> np.ndarray:
    """One array carried whole in a message field: checked against its header, then viewed.

    Raises
    ------
    InvalidInputError
        The header is malformed or has no digest (:func:`array_spec_of`).
    IntegrityError
        ``data`` has another length than the header declares, or another SHA-256.
    """
    spec = array_spec_of(header)
    _check_digest(spec.sha256, spec.name)
    if len(data) != spec.nbytes:
        raise IntegrityError(f"array {spec.name!r} carries {len(data)} bytes, its header "
                             f"declares {spec.nbytes}")
    if hashlib.sha256(data).digest() != spec.sha256:
        raise IntegrityError(f"array {spec.name!r}: SHA-256 of the bytes differs from the header")
    return np.frombuffer(data, dtype=wire_dtype(spec.dtype)).reshape(spec.shape)


def proto_receipt(spec: BundleSpec, participant_id: str) -> bytes:
    """:func:`common.bundles.receipt` over the protobuf header."""
    return receipt(spec, participant_id, PROTO_HEADERS.header_bytes)
