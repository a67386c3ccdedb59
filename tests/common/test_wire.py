"""Array bundles on the wire: specs, chunking and incremental digests."""

import numpy as np
import pytest

from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.wire import (
    ArraySpec,
    BundleDigester,
    BundleSpec,
    bundle_spec,
    encode_chunk,
    iter_chunks,
    request_stream,
    wire_dtype,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb


@pytest.fixture
def arrays(rng):
    return {"data": rng.standard_normal((37, 5)), "labels": np.arange(37, dtype="<i8"),
            "tags": np.zeros(37, dtype="|i1"), "empty": np.zeros((0, 5))}


def test_chunks_concatenate_to_the_little_endian_bytes_in_bounded_pieces(arrays):
    chunks = list(iter_chunks(arrays, chunk_size=100))
    assert max(len(c) for c in chunks) <= 100
    assert b"".join(chunks) == b"".join(np.ascontiguousarray(a).tobytes()
                                        for a in arrays.values())


def test_big_endian_input_travels_as_little_endian():
    be = np.arange(6, dtype=">f8").reshape(2, 3)
    spec = ArraySpec.of("x", be)
    assert spec.dtype == "<f8"
    assert b"".join(iter_chunks({"x": be})) == be.astype("<f8").tobytes()


@pytest.mark.parametrize("size", [1, 7, 64, 4096])
def test_digester_accepts_a_stream_cut_anywhere(arrays, size):
    spec = bundle_spec("f", "aa-igdp", arrays)
    raw = b"".join(iter_chunks(arrays))
    digester = BundleDigester(spec)
    for start in range(0, len(raw), size):
        digester.feed(raw[start:start + size])
    digester.finish()


def test_digester_refuses_truncated_overlong_and_corrupt_streams(arrays):
    spec = bundle_spec("f", "aa-igdp", arrays)
    raw = b"".join(iter_chunks(arrays))
    short = BundleDigester(spec)
    short.feed(raw[:-1])
    with pytest.raises(IntegrityError, match="truncated"):
        short.finish()
    with pytest.raises(IntegrityError, match="more than"):
        BundleDigester(spec).feed(raw + b"x")
    bad = bytearray(raw)
    bad[10] ^= 1
    corrupt = BundleDigester(spec)
    corrupt.feed(bytes(bad))
    with pytest.raises(IntegrityError, match="'data'"):
        corrupt.finish()


def test_header_round_trips_and_receipt_depends_on_sender_and_content(arrays):
    spec = bundle_spec("f", "aa-igdp", arrays)
    msgs = [pb.UploadRequest.FromString(m) for m in request_stream(spec, arrays, chunk_size=256)]
    assert msgs[0].WhichOneof("part") == "header"
    assert all(m.WhichOneof("part") == "chunk" for m in msgs[1:])
    assert b"".join(m.chunk for m in msgs[1:]) == b"".join(iter_chunks(arrays))
    back = BundleSpec.from_proto(msgs[0].header)
    assert back == spec and back.receipt("p0") == spec.receipt("p0")
    assert spec.receipt("p0") != spec.receipt("p1")
    changed = bundle_spec("f", "aa-igdp", arrays | {"labels": arrays["labels"] + 1})
    assert changed.receipt("p0") != spec.receipt("p0")


@pytest.mark.parametrize("dtype", [">f8", "O", "<U3", "<c16", "float64x"])
def test_only_little_endian_numeric_dtypes_are_accepted(dtype):
    with pytest.raises(InvalidInputError):
        wire_dtype(dtype)


def test_header_with_inconsistent_size_or_digest_length_is_refused(arrays):
    msg = bundle_spec("f", "aa-igdp", arrays).to_proto()
    msg.arrays[0].nbytes += 8
    with pytest.raises(InvalidInputError, match="declares"):
        BundleSpec.from_proto(msg)
    msg = bundle_spec("f", "aa-igdp", arrays).to_proto()
    msg.arrays[0].sha256 = b"short"
    with pytest.raises(InvalidInputError, match="SHA-256"):
        BundleSpec.from_proto(msg)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 1 << 20])
def test_hand_encoded_chunk_equals_the_protobuf_encoding(size):
    data = np.random.default_rng(size).bytes(size)
    encoded = encode_chunk(memoryview(data))
    assert encoded == pb.UploadRequest(chunk=data).SerializeToString()
    assert pb.UploadRequest.FromString(encoded).chunk == data
