"""The analyst survives SIGKILL mid-upload: committed uploads are kept and not asked for again,
the interrupted upload left nothing, and a participant that keeps retrying gets through once the
analyst is back (same receipt for an upload that had already committed)."""

from __future__ import annotations

import os
import threading

import grpc
import pytest
from e2e_support import FEDERATION, free_port, random_upload, send, wait_until

from noisyanchor.common.errors import AlreadyExistsError, NoisyAnchorError
from noisyanchor.common.wire import bundle_spec, request_stream

pytestmark = pytest.mark.e2e

D, R = 8, 16


def test_analyst_killed_mid_upload_restarts_with_every_committed_upload(analyst, rng):
    fed = analyst(["p0", "p1", "p2", "p3"], "aa-igdp", dim=D, anchors=R, port=free_port())
    uploads = {pid: random_upload(rng, 50_000 if pid == "p2" else 30, D, R)
               for pid in ("p0", "p1", "p2", "p3")}
    receipts = {}
    for pid in ("p0", "p1"):
        with fed.client(pid) as c:
            receipts[pid] = send(c, "aa-igdp", uploads[pid]).receipt

    # p2 streams its header and first chunk, then the analyst dies before the rest arrives.
    spec = bundle_spec(FEDERATION, "aa-igdp", uploads["p2"])
    sent_first_chunk, release = threading.Event(), threading.Event()
    outcome = {}

    def gated():
        for k, msg in enumerate(request_stream(spec, uploads["p2"])):
            yield msg
            if k == 1:
                sent_first_chunk.set()
                release.wait(30)

    def stream_p2():
        with fed.client("p2") as c:
            try:
                c.raw_upload(gated(), timeout=30)
            except grpc.RpcError as err:  # the outcome is asserted below
                outcome["error"] = err

    t = threading.Thread(target=stream_p2)
    t.start()
    assert sent_first_chunk.wait(30)
    uploads_dir = fed.files.store / "uploads"
    # Kill only once the analyst has opened p2's temporary file (bounded wait: 30 s).
    wait_until(lambda: bool(list(uploads_dir.glob(".tmp-*"))))
    fed.kill()
    release.set()
    t.join(30)
    assert "error" in outcome  # the stream died with the analyst
    assert sorted(p.name for p in uploads_dir.glob("*.bundle")) == ["p0.bundle", "p1.bundle"]
    assert len(list(uploads_dir.glob(".tmp-*"))) == 1  # p2's partial stream, never committed

    # p3 keeps retrying while the analyst is down; it gets through after the restart.
    late = {}

    def stream_p3():
        with fed.client("p3", timeout=60) as c:
            late["receipt"] = send(c, "aa-igdp", uploads["p3"])

    t3 = threading.Thread(target=stream_p3)
    t3.start()
    fed.restart()
    t3.join(60)
    assert not late["receipt"].already_committed

    with fed.client("p0") as c:
        status = c.status()
        assert list(status.committed) == ["p0", "p1", "p3"] and status.state == "collecting"
        again = send(c, "aa-igdp", uploads["p0"])  # a retry after the crash: same receipt
        assert again.already_committed and again.receipt == receipts["p0"]
        with pytest.raises(AlreadyExistsError):
            send(c, "aa-igdp", uploads["p1"])  # p0 cannot replace its upload with other data
    assert not list(uploads_dir.glob(".tmp-*"))  # the interrupted stream's file was swept

    with fed.client("p2") as c:
        send(c, "aa-igdp", uploads["p2"])
        status = c.wait_for("the result", c.status, lambda s: s.state in ("done", "failed"))
    assert status.state == "done", status.error
    assert (fed.files.store / "result" / "z.npy").is_file()


def test_a_participant_gives_up_with_a_clear_error_when_the_analyst_stays_down(analyst, rng):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    fed.kill()
    with fed.client("p0", timeout=1.0) as c, pytest.raises(NoisyAnchorError, match="UNAVAILABLE"):
        send(c, "aa-igdp", random_upload(rng, 10, D, R))


def test_stream_dropped_by_the_client_commits_nothing_and_a_retry_goes_through(analyst, rng):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    arrays = random_upload(rng, 50_000, D, R)
    spec = bundle_spec(FEDERATION, "aa-igdp", arrays)
    sent_first_chunk, cancelled = threading.Event(), threading.Event()

    def gated():
        for k, msg in enumerate(request_stream(spec, arrays)):
            yield msg
            if k == 1:
                sent_first_chunk.set()
                cancelled.wait(60)  # the call is cancelled meanwhile

    with fed.client("p0") as c:
        future = c.raw_upload.future(gated(), timeout=60)
        assert sent_first_chunk.wait(30)
        uploads_dir = fed.files.store / "uploads"
        # cancel once the analyst is writing the temporary file of the stream
        assert wait_until(lambda: any(uploads_dir.iterdir()))
        future.cancel()
        cancelled.set()
        # no commit, temporary file removed
        assert wait_until(lambda: list(uploads_dir.iterdir()) == [])
        first = send(c, "aa-igdp", arrays)
        again = send(c, "aa-igdp", arrays)
    assert not first.already_committed and again.already_committed
    assert again.receipt == first.receipt


def test_the_analyst_restarts_over_leftovers_of_every_kind_and_keeps_what_was_committed(
        analyst, rng):
    """A kill during a ledger, ``federation.json``, relay or result write leaves temporary
    files and folders of any kind in the store (issue 9, item 4: a temporary *file* in the store
    root used to crash the restart with NotADirectoryError). Planted here at once: the restart
    removes every one, serves, and keeps the committed upload and key."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, port=free_port())
    arrays = random_upload(rng, 30, D, R)
    with fed.client("p0") as c:
        receipt = send(c, "aa-igdp", arrays).receipt
    fed.kill()
    store = fed.files.store
    (store / "attack" / "cosine").mkdir(parents=True)
    kept_elsewhere = store / "attack" / "cosine" / "p1.npy"
    kept_elsewhere.write_bytes(b"attack output")
    leftovers = [store / ".tmp-privacy_ledger.json.k3j9", store / ".tmp-federation.json.x1",
                 store / ".tmp-result7", store / "uploads" / ".tmp-q2",
                 store / "uploads" / ".tmp-d", store / "relay" / "keys" / ".tmp-p1.pb.a",
                 store / "relay" / "sealed" / ".tmp-f", store / ".tmp-link",
                 store / "attack" / "cosine" / ".tmp-p0.npy.z"]
    leftovers[0].write_text('{"charges": {"e2e": [')  # a ledger write cut short
    leftovers[1].write_bytes(b"")
    (leftovers[2] / "sub").mkdir(parents=True)
    (leftovers[2] / "sub" / "z.npy").write_bytes(b"partial result")
    leftovers[3].write_bytes(b"partial upload")
    leftovers[4].mkdir()
    leftovers[5].write_bytes(b"")
    os.mkfifo(leftovers[6])
    leftovers[7].symlink_to(store / "attack")  # a link to a folder: removed, never followed
    leftovers[8].write_bytes(b"")
    fed.restart()
    with fed.client("p1") as c:
        status = c.status()
    assert list(status.committed) == ["p0"] and status.state == "collecting"
    assert not [p for p in leftovers if os.path.lexists(p)]
    assert kept_elsewhere.read_bytes() == b"attack output"  # the symlink's target was not swept
    with fed.client("p0") as c:
        again = send(c, "aa-igdp", arrays)
    assert again.already_committed and again.receipt == receipt
    assert "Traceback" not in fed.log.read_text()
