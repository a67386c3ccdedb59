"""Pace limits of a client stream (analyst.stream_watchdog.PacedRequests), fed by a local
generator: silence, zero-byte messages, too few bytes, the absolute deadline, and time the
server spends elsewhere. Windows are a few tenths of a second; the assertions are on what is
refused and why, never on how long anything took."""

from __future__ import annotations

import threading
import time

import pytest

from noisyanchor.analyst.stream_watchdog import PacedRequests, PaceRule, Reaper, SendWatch
from noisyanchor.common.errors import StreamIdleError
from noisyanchor.protos.v1 import analyst_pb2 as pb


def _drip(messages, pause: float, stop: threading.Event):
    """``messages`` with ``pause`` seconds before each; ends early once ``stop`` is set."""
    for m in messages:
        if stop.wait(pause):
            return
        yield m


@pytest.fixture
def stop():
    event = threading.Event()
    yield event
    event.set()  # lets every read-ahead thread of the test end


def _consume(paced: PacedRequests) -> list:
    try:
        return list(paced)
    finally:
        paced.close()


def test_a_stream_that_keeps_pace_passes_every_message_in_order(stop):
    messages = [bytes([k]) * 100 for k in range(20)]
    paced = PacedRequests(_drip(messages, 0.0, stop), PaceRule(0.5, 100.0, 30.0), "s")
    assert _consume(paced) == messages


def test_a_silent_stream_is_refused_after_one_window(stop):
    paced = PacedRequests(_drip([b"x" * 10], 60.0, stop), PaceRule(0.3, 0.0, 30.0),
                          "Upload stream of 'p1'")
    with pytest.raises(StreamIdleError, match=r"^Upload stream of 'p1' sent nothing for 0.3 s "
                                              r"\(\[server\] stream_idle_timeout\)"):
        _consume(paced)


def test_zero_byte_messages_do_not_keep_a_stream_alive(stop):
    """A header, then an empty chunk every 50 ms: the messages keep coming, the bytes do not."""
    header = pb.UploadRequest(header=pb.BundleHeader(federation_id="f", method="i-gdp"))
    empty = [pb.UploadRequest(chunk=b"")] * 1000
    rule = PaceRule(0.4, 1024.0, 30.0)  # 410 bytes due per 0.4 s of waiting
    paced = PacedRequests(_drip([header, *empty], 0.05, stop), rule, "Upload stream of 'p1'")
    with pytest.raises(StreamIdleError, match=r"sent \d+ bytes in the last 0.4 s, below the "
                                              r"minimum of 410 \(1024 bytes/s, \[server\] "
                                              r"stream_min_rate\)"):
        _consume(paced)
    assert empty[0].ByteSize() == 2  # what each empty chunk weighs on the wire


def test_raw_empty_messages_count_as_silence(stop):
    paced = PacedRequests(_drip([b""] * 1000, 0.02, stop), PaceRule(0.3, 0.0, 30.0), "s")
    with pytest.raises(StreamIdleError, match=r"sent nothing for 0\.3 s"):
        _consume(paced)


def test_a_stream_open_past_its_deadline_is_refused_even_at_a_good_pace(stop):
    paced = PacedRequests(_drip([b"y" * 1000] * 10_000, 0.01, stop),
                          PaceRule(0.5, 10.0, 0.5), "Upload stream of 'p2'")
    with pytest.raises(StreamIdleError, match=r"Upload stream of 'p2' is still open after 0.5 s, "
                                              r"the limit for one stream \(\[server\] "
                                              r"stream_deadline\)"):
        _consume(paced)


def test_time_the_server_spends_elsewhere_does_not_count(stop):
    """The handler works 0.2 s on each message (longer than the window): the client, which
    always has the next message ready, is never refused."""
    messages = [b"z" * 50] * 4
    paced = PacedRequests(_drip(messages, 0.0, stop), PaceRule(0.1, 400.0, 30.0), "s")
    received = []
    for m in paced:
        received.append(m)
        time.sleep(0.2)
    paced.close()
    assert received == messages


def test_an_error_of_the_stream_reaches_the_handler(stop):
    def broken():
        yield b"a" * 10
        raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError, match="peer went away"):
        _consume(PacedRequests(broken(), PaceRule(1.0, 0.0, 30.0), "s"))


def test_the_reaper_cancels_a_server_stream_whose_client_stopped_reading():
    cancelled = threading.Event()
    watch = SendWatch(PaceRule(0.2, 0.0, 30.0), "ReleaseGram stream of 'p0'", cancelled.set)
    Reaper(0.05).add(watch)
    responses = watch.watch(iter([b"header", b"chunk"]))
    assert next(responses) == b"header"  # handed to gRPC, never taken by the client
    assert cancelled.wait(10)
    assert watch.overdue(time.monotonic()).startswith(
        "ReleaseGram stream of 'p0' stopped reading: a message waited")
