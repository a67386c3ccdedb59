"""Hostile clients against the analyst's streams (issue 9, "silent streams"): each attack runs
over mutual TLS against a real analyst process and must be refused with a status code and a
message naming the limit, keep nothing, and leave honest calls served.

The limits: the caller gate authenticates before a stream is read, caps open streams per
caller, and every stream keeps a minimum data rate (bytes, not messages) and an absolute
deadline (analyst.caller_limits, analyst.stream_watchdog).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import grpc
import numpy as np
import pytest
from e2e_support import FEDERATION, random_upload, refused_upload, send, wait_until

from noisyanchor.common.wire import bundle_header, bundle_spec, iter_chunks
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import release_pb2, release_pb2_grpc

pytestmark = pytest.mark.e2e

N, D, R = 20, 8, 16


def _stored(fed) -> list[str]:
    store = fed.files.store
    return sorted(p.name for d in ("uploads", "disclosures") for p in (store / d).iterdir())


@contextmanager
def _held_open(fed, pid: str, messages, *, timeout: float = 30.0, tls=None):
    """Upload streams from ``pid`` that send ``messages`` and then stay silent (connected)
    until the block ends; yields the list their outcomes (gRPC errors) are appended to."""
    release, outcomes = threading.Event(), []

    def silent_after():
        yield from messages
        release.wait(timeout)  # bounded: the sending thread always ends

    def run():
        with fed.client(pid, tls=tls) as c:
            try:
                c.stub.Upload(silent_after(), timeout=timeout)
            except grpc.RpcError as err:
                outcomes.append(err)

    threads = []

    def open_one() -> None:
        threads.append(threading.Thread(target=run))
        threads[-1].start()

    try:
        yield open_one, outcomes
    finally:
        release.set()
        for t in threads:
            t.join(timeout + 5)


def test_a_certificate_that_names_no_participant_is_refused_before_its_stream_is_read(
        analyst, rng):
    """p9 holds a certificate of the federation CA but is no participant: its silent streams
    are refused at once (the idle timeout is 60 s; the client would wait 20 s)."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, extra_certificates=["p9"])
    with _held_open(fed, "p9", [], timeout=20.0) as (open_one, outcomes):
        for _ in range(8):
            open_one()
        assert wait_until(lambda: len(outcomes) == 8, 15.0)
    assert {e.code() for e in outcomes} == {grpc.StatusCode.PERMISSION_DENIED}
    assert {e.details() for e in outcomes} == {"'p9' is not a participant of federation 'e2e'"}
    with fed.client("p9") as c, pytest.raises(grpc.RpcError) as err:
        next(release_pb2_grpc.ReleaseStub(c.channel).FetchGram(
            release_pb2.ReleaseRef(federation_id=FEDERATION, request_id="r1"), timeout=10))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _stored(fed) == []


def test_open_streams_are_capped_per_caller_and_everyone_else_is_served(analyst, rng):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R,
                  extra={"server": {"max_streams_per_caller": 2}})
    arrays = random_upload(rng, N, D, R)
    with _held_open(fed, "p1", []) as (open_one, outcomes):
        open_one()
        open_one()
        # Both held (each on its own connection): the analyst logged both connections.
        assert wait_until(lambda: fed.log.read_text().count("p1 connected") == 2, 15.0)
        with fed.client("p1") as c, pytest.raises(grpc.RpcError) as err:
            c.stub.Upload(iter([]), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.value.details() == (
            "Upload stream of 'p1' refused: 'p1' already holds 2 open streams, the limit "
            "([server] max_streams_per_caller = 2); finish or cancel one first")
        with fed.client("p0") as c:  # the others are not affected
            assert list(c.status().committed) == []
            assert not send(c, "aa-igdp", random_upload(rng, N, D, R)).already_committed
    # The held streams ended (half-closed without a header): the slots are free again.
    assert len(outcomes) == 2
    with fed.client("p1") as c:
        assert not send(c, "aa-igdp", arrays).already_committed
    assert _stored(fed) == ["p0.bundle", "p1.bundle"]


def test_zero_byte_chunks_do_not_keep_a_stream_alive(analyst, rng):
    """A header, then an empty chunk every 0.2 s: messages keep coming, bytes do not. The idle
    window is 1 s; the stream is refused on the minimum rate and keeps nothing."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, stream_idle_timeout=1.0)
    spec = bundle_spec(FEDERATION, "aa-igdp", random_upload(rng, N, D, R))

    def trickle(stop):
        yield pb.UploadRequest(header=bundle_header(spec))
        while not stop.wait(0.2):
            yield pb.UploadRequest(chunk=b"")

    err = refused_upload(fed, "p1", trickle, timeout=30)
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert err.details().startswith("Upload stream of 'p1' sent ")
    assert err.details().endswith(" bytes in the last 1 s, below the minimum of 1024 "
                                        "(1024 bytes/s, [server] stream_min_rate); nothing of "
                                        "it was kept")
    assert wait_until(lambda: _stored(fed) == [])


def test_a_stream_past_its_absolute_deadline_is_ended(analyst, rng):
    """Real data, one byte every 50 ms: fast enough for the rate (10 bytes/s), too slow to end
    within the stream deadline of 2 s."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, stream_idle_timeout=1.0,
                  extra={"server": {"stream_min_rate": 10.0, "stream_deadline": 2.0}})
    arrays = random_upload(rng, N, D, R)
    raw = b"".join(iter_chunks(arrays))

    def byte_by_byte(stop):
        yield pb.UploadRequest(header=bundle_header(bundle_spec(FEDERATION, "aa-igdp", arrays)))
        for k in range(len(raw)):
            if stop.wait(0.05):
                return
            yield pb.UploadRequest(chunk=raw[k:k + 1])

    err = refused_upload(fed, "p1", byte_by_byte, timeout=30)
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert err.details() == ("Upload stream of 'p1' is still open after 2 s, the limit "
                                   "for one stream ([server] stream_deadline); nothing of it "
                                   "was kept")
    assert wait_until(lambda: _stored(fed) == [])
    with fed.client("p1") as c:  # a client at full speed commits
        assert not send(c, "aa-igdp", arrays).already_committed


@pytest.mark.slow
def test_a_client_that_stops_reading_a_release_loses_its_stream(analyst, rng):
    """After the alignment, p0 fetches a computed Gram release (n = 2,000: 32 MB) and stops
    reading after the header. The analyst ends that stream once a message waited 1 s to be sent; the
    stream's slot is free again, and p1's Status was answered meanwhile."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, stream_idle_timeout=1.0,
                  extra={"server": {"max_streams_per_caller": 1},
                         "privacy": {"epsilon_budget": 1000.0, "delta_budget": 1e-5}})
    for pid in ("p0", "p1"):
        with fed.client(pid) as c:
            arrays = random_upload(rng, 1000, D, R)
            arrays["data"] += 5.0  # rows well away from the anchor origin
            send(c, "aa-igdp", arrays)
    with fed.client("p1") as c:
        assert c.wait_for("the result", c.status, lambda s: s.state == "done").state == "done"
    query = release_pb2.GramQuery(federation_id=FEDERATION, epsilon=10.0, delta=1e-6,
                                  projector="none", request_id="gram-1")
    ref = release_pb2.ReleaseRef(federation_id=FEDERATION, request_id="gram-1")
    with fed.client("p0") as c:
        stub = release_pb2_grpc.ReleaseStub(c.channel)
        stub.SubmitGram(query, timeout=30)
        assert c.wait_for("the Gram release", lambda: stub.GetGram(ref, timeout=30),
                          lambda job: job.state == job.DONE).state == release_pb2.GramJob.DONE
        stopped = stub.FetchGram(ref, timeout=60)
        assert next(stopped).WhichOneof("part") == "header"  # ... and no further read
        with pytest.raises(grpc.RpcError) as err:  # its one slot is taken meanwhile
            next(stub.FetchGram(ref, timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with fed.client("p1") as other:
            assert other.status().state == "done"
        assert wait_until(lambda: "FetchGram stream of 'p0' stopped reading" in
                          fed.log.read_text(), 30.0)
        with pytest.raises(grpc.RpcError) as err:
            for _ in stopped:  # what was in flight, then the cancellation
                pass
        assert err.value.code() == grpc.StatusCode.CANCELLED
        header = next(stub.FetchGram(ref, timeout=60))  # the slot is free again
    assert header.header.matrix.shape == [2000, 2000]
    assert np.isfinite(header.header.spend.sigma)
