"""Array bundles on the wire: specs, chunking and incremental digests."""

import numpy as np
import pytest

from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.wire import (
    ArraySpec,
    BundleDigester,
    BundleSender,
    BundleStream,
    bundle_header,
    bundle_spec,
    bundle_spec_of,
    drain,
    encode_chunk,
    iter_chunks,
    proto_receipt,
    request_stream,
    stream_of_messages,
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
    back = bundle_spec_of(msgs[0].header)
    assert back == spec and proto_receipt(back, "p0") == proto_receipt(spec, "p0")
    assert proto_receipt(spec, "p0") != proto_receipt(spec, "p1")
    changed = bundle_spec("f", "aa-igdp", arrays | {"labels": arrays["labels"] + 1})
    assert proto_receipt(changed, "p0") != proto_receipt(spec, "p0")


def test_a_projection_cost_travels_only_when_sent_and_must_be_a_difference(arrays):
    plain = bundle_spec("fed", "aa-igdp-an", arrays)
    assert not bundle_header(plain).HasField("projection_cost")  # receipts of others unchanged
    sent = bundle_spec("fed", "aa-igdp-an", arrays, projection_cost=0.042)
    assert bundle_spec_of(bundle_header(sent)).projection_cost == 0.042
    assert bundle_spec_of(bundle_header(plain)).projection_cost is None
    assert proto_receipt(sent, "p0") != proto_receipt(plain, "p0")
    msg = bundle_header(sent)
    msg.projection_cost = 3.0
    with pytest.raises(InvalidInputError, match=r"projection cost 3.0 .*\[-1, 1\]"):
        bundle_spec_of(msg)


@pytest.mark.parametrize("dtype", [">f8", "O", "<U3", "<c16", "float64x"])
def test_only_little_endian_numeric_dtypes_are_accepted(dtype):
    with pytest.raises(InvalidInputError):
        wire_dtype(dtype)


def test_header_with_inconsistent_size_or_digest_length_is_refused(arrays):
    msg = bundle_header(bundle_spec("f", "aa-igdp", arrays))
    msg.arrays[0].nbytes += 8
    with pytest.raises(InvalidInputError, match="declares"):
        bundle_spec_of(msg)
    msg = bundle_header(bundle_spec("f", "aa-igdp", arrays))
    msg.arrays[0].sha256 = b"short"
    with pytest.raises(InvalidInputError, match="SHA-256"):
        bundle_spec_of(msg)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 1 << 20])
def test_hand_encoded_chunk_equals_the_protobuf_encoding(size):
    data = np.random.default_rng(size).bytes(size)
    encoded = encode_chunk(memoryview(data))
    assert encoded == pb.UploadRequest(chunk=data).SerializeToString()
    assert pb.UploadRequest.FromString(encoded).chunk == data


def _digests(arrays):
    return [ArraySpec.of(name, a).sha256 for name, a in arrays.items()]


def test_sender_without_digests_hashes_while_sending_and_ends_with_the_trailer(arrays):
    sender = BundleSender(bundle_spec("f", "aa-igdp", arrays, digests=False), arrays,
                          chunk_size=64)
    msgs = [pb.UploadRequest.FromString(m) for m in sender.messages()]
    assert msgs[0].WhichOneof("part") == "header"
    assert all(not a.sha256 for a in msgs[0].header.arrays)  # the header carries none
    assert all(m.WhichOneof("part") == "chunk" for m in msgs[1:-1])
    assert b"".join(m.chunk for m in msgs[1:-1]) == b"".join(iter_chunks(arrays))
    assert msgs[-1].WhichOneof("part") == "trailer"
    assert list(msgs[-1].trailer.sha256) == _digests(arrays)
    # After a complete pass the digests are known: a retry carries them in its header.
    assert sender.spec == bundle_spec("f", "aa-igdp", arrays)
    again = [pb.UploadRequest.FromString(m) for m in sender.messages()]
    assert bundle_spec_of(again[0].header) == sender.spec
    assert again[-1].WhichOneof("part") == "chunk"


def test_received_stream_gives_chunk_views_without_copies_and_the_trailer(arrays):
    messages = list(request_stream(bundle_spec("f", "aa-igdp", arrays, digests=False), arrays,
                                   chunk_size=100))
    stream = stream_of_messages(iter(messages))
    chunks = list(stream.chunks())
    assert all(isinstance(c, memoryview) and c.obj is m for c, m in zip(chunks, messages[1:],
                                                                        strict=False))
    assert b"".join(chunks) == b"".join(iter_chunks(arrays))
    assert list(stream.digests()) == _digests(arrays)
    assert drain(stream_of_messages(iter(messages))) == bundle_spec("f", "aa-igdp",
                                                                            arrays)


def test_messages_the_protobuf_runtime_wrote_parse_the_same(arrays):
    """Chunks serialized by the library, parsed messages, and a chunk field written twice (the
    last one wins, as in protobuf) all reach the same payloads."""
    spec = bundle_spec("f", "aa-igdp", arrays)
    raw = b"".join(iter_chunks(arrays))
    twice = encode_chunk(b"ignored") + encode_chunk(raw)
    for messages in (
        [pb.UploadRequest(header=bundle_header(spec)).SerializeToString(),
         pb.UploadRequest(chunk=raw).SerializeToString()],
        [pb.UploadRequest(header=bundle_header(spec)), pb.UploadRequest(chunk=raw)],
        [pb.UploadRequest(header=bundle_header(spec)).SerializeToString(), twice],
    ):
        stream = stream_of_messages(messages)
        assert b"".join(bytes(c) for c in stream.chunks()) == raw
        assert stream.digests() == tuple(_digests(arrays))


def test_malformed_streams_are_refused_with_the_reason(arrays):
    spec = bundle_spec("f", "aa-igdp", arrays)
    header = pb.UploadRequest(header=bundle_header(spec.without_digests())).SerializeToString()
    raw = b"".join(iter_chunks(arrays))
    trailer = pb.UploadRequest(trailer=pb.BundleTrailer(sha256=_digests(arrays)))

    def consume(messages):
        stream = stream_of_messages(messages)
        for _ in stream.chunks():
            pass
        return stream.digests()

    with pytest.raises(InvalidInputError, match="start with its header"):
        consume([encode_chunk(raw)])
    with pytest.raises(InvalidInputError, match="not an UploadRequest"):
        consume([b"\xff\xff\xff"])
    with pytest.raises(InvalidInputError, match="nothing may follow the trailer"):
        consume([header, encode_chunk(raw), trailer.SerializeToString(), encode_chunk(b"")])
    with pytest.raises(IntegrityError, match="without the trailer"):
        consume([header, encode_chunk(raw)])
    short = pb.UploadRequest(trailer=pb.BundleTrailer(sha256=_digests(arrays)[:-1]))
    with pytest.raises(InvalidInputError, match="digests for the"):
        consume([header, encode_chunk(raw), short.SerializeToString()])
    full = pb.UploadRequest(header=bundle_header(spec)).SerializeToString()
    other = pb.UploadRequest(trailer=pb.BundleTrailer(sha256=[b"\0" * 32] * len(arrays)))
    with pytest.raises(InvalidInputError, match="differ from the header"):
        consume([full, encode_chunk(raw), other.SerializeToString()])
    some = bundle_header(spec)
    some.arrays[0].sha256 = b""
    with pytest.raises(InvalidInputError, match="some arrays only"):
        bundle_spec_of(some)
    with pytest.raises(InvalidInputError, match="receipt needs"):
        proto_receipt(spec.without_digests(), "p0")


def test_drain_refuses_a_trailer_that_does_not_match_the_bytes(arrays):
    spec = bundle_spec("f", "aa-igdp", arrays)
    wrong = _digests(arrays)
    wrong[0] = bytes(32)
    stream = BundleStream(spec.without_digests(), iter_chunks(arrays), wrong)
    with pytest.raises(IntegrityError, match=r"'data'.*corrupt"):
        drain(stream)
