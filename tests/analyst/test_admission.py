"""Admission of calls at arrival (analyst.admission), on a real gRPC server over mutual TLS in
this process: refusals that take no worker, per-caller queues, turns, cancelled calls dropped."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from noisyanchor.analyst.admission import AdmissionPool, global_limit, supported
from noisyanchor.common.errors import PermissionDeniedError
from noisyanchor.deploy.certs import write_pki

METHOD = "/test.Admission/Call"


def test_this_grpcio_hands_calls_in_the_form_the_pool_reads():
    """A grpcio upgrade that changes its pool's calling convention must fail here, not
    silently turn the admission off."""
    assert supported()


class _Server:
    """One worker, a method that records who ran and can be held, and the pool in front."""

    def __init__(self, tmp_path, members=("p0", "p1", "p2"), queued=3, calls=None) -> None:
        self.pki = write_pki(tmp_path, ["p0", "p1", "p2", "outsider"])
        self.ran: list[str] = []
        self.hold = threading.Event()
        self.started = threading.Event()

        def admit(pid: str) -> None:
            if pid not in members:
                raise PermissionDeniedError(f"{pid!r} is not a participant")

        self.pool = AdmissionPool(1, admit, lambda: (self.pki.ca.read_bytes(),), queued, calls)

        def call(request: bytes, context) -> bytes:
            self.ran.append(request.decode())
            self.started.set()
            if request.startswith(b"hold"):
                self.hold.wait(20)
            return request

        handler = grpc.method_handlers_generic_handler("test.Admission", {
            "Call": grpc.unary_unary_rpc_method_handler(call)})
        self.server = grpc.server(self.pool, handlers=[handler], maximum_concurrent_rpcs=(
            global_limit(len(members), self.pool.max_calls_per_caller, 1)))
        creds = grpc.ssl_server_credentials(
            [(self.pki.server_key.read_bytes(), self.pki.server_cert.read_bytes())],
            root_certificates=self.pki.ca.read_bytes(), require_client_auth=True)
        self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.server.start()
        self.channels: list[grpc.Channel] = []

    def stub(self, pid: str):
        cert, key = self.pki.clients[pid]
        channel = grpc.secure_channel(f"127.0.0.1:{self.port}", grpc.ssl_channel_credentials(
            self.pki.ca.read_bytes(), key.read_bytes(), cert.read_bytes()),
            options=[("grpc.ssl_target_name_override", "localhost")])
        self.channels.append(channel)
        return channel.unary_unary(METHOD)

    def stop(self) -> None:
        self.hold.set()
        for c in self.channels:
            c.close()
        self.server.stop(0)


@pytest.fixture
def served(tmp_path):
    s = _Server(tmp_path)
    yield s
    s.stop()


def _hold_the_worker(served: _Server) -> grpc.Future:
    future = served.stub("p0").future(b"hold", timeout=20)
    assert served.started.wait(10)
    return future


def test_a_non_participant_is_refused_at_arrival_while_every_worker_is_busy(served):
    """The only worker is held by a participant's call: the outsider's call is answered with
    PERMISSION_DENIED and the reason anyway, since no worker is needed to refuse it."""
    held = _hold_the_worker(served)
    with pytest.raises(grpc.RpcError) as err:
        served.stub("outsider")(b"x", timeout=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'outsider' is not a participant" in err.value.details()
    served.hold.set()
    assert held.result() == b"hold"
    assert "x" not in served.ran  # its handler never ran


def test_a_callers_queue_is_bounded_and_the_excess_refused_at_arrival(served):
    held = _hold_the_worker(served)
    queued = [served.stub("p1").future(f"q{k}".encode(), timeout=20) for k in range(3)]
    assert _eventually(lambda: served.pool.queued("p1") == 3)
    with pytest.raises(grpc.RpcError) as err:
        served.stub("p1")(b"one-too-many", timeout=5)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_queued_calls_per_caller = 3" in err.value.details()
    served.hold.set()
    assert [f.result() for f in queued] == [b"q0", b"q1", b"q2"] and held.result()


def test_a_callers_calls_in_progress_are_bounded_and_others_keep_their_share(tmp_path):
    """p1's running call and one waiting fill its share of 2: its next call is refused at
    arrival naming the limit, while p2's calls are still admitted."""
    served = _Server(tmp_path, calls=2)
    try:
        running = served.stub("p1").future(b"hold", timeout=20)
        assert served.started.wait(10)
        waiting = served.stub("p1").future(b"p1-waiting", timeout=20)
        assert _eventually(lambda: served.pool.held("p1") == 2)
        with pytest.raises(grpc.RpcError) as err:
            served.stub("p1")(b"p1-one-too-many", timeout=5)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_calls_per_caller = 2" in err.value.details()
        other = served.stub("p2").future(b"p2-admitted", timeout=20)
        assert _eventually(lambda: served.pool.queued("p2") == 1)
        served.hold.set()
        assert [f.result() for f in (running, waiting, other)] == [
            b"hold", b"p1-waiting", b"p2-admitted"]
        assert _eventually(lambda: served.pool.held("p1") == served.pool.held("p2") == 0)
    finally:
        served.stop()


def test_calls_cancelled_while_they_wait_give_their_slots_back_when_dropped(served):
    """Dropped with no other call waiting, their futures complete at once: a dropped call left
    pending would hold its slot in gRPC's global count of calls for good (a stream-reset flood
    once filled it so that every later call got "Concurrent RPC limit exceeded")."""
    held = _hold_the_worker(served)
    doomed = [served.stub("p1").future(f"c{k}".encode(), timeout=20) for k in range(3)]
    assert _eventually(lambda: served.pool.queued("p1") == 3)
    for f in doomed:
        f.cancel()
    time.sleep(0.3)  # the cancellations reach the server
    served.hold.set()
    assert held.result() == b"hold"
    assert _eventually(lambda: served.pool.held("p1") == 0 and served.pool.held("p0") == 0)
    assert served.ran == ["hold"]


def test_callers_take_turns_whatever_their_backlog(served):
    """p1 queues three calls before p2 queues one: p2's runs second, not fourth."""
    held = _hold_the_worker(served)
    first = [served.stub("p1").future(f"p1-{k}".encode(), timeout=20) for k in range(3)]
    assert _eventually(lambda: served.pool.queued("p1") == 3)
    late = served.stub("p2").future(b"p2-0", timeout=20)
    assert _eventually(lambda: served.pool.queued("p2") == 1)
    served.hold.set()
    for f in [*first, late, held]:
        f.result()
    # p1's calls came on three connections, in any order among themselves.
    assert served.ran[0] == "hold" and served.ran[2] == "p2-0"
    assert sorted(served.ran[1:2] + served.ran[3:]) == ["p1-0", "p1-1", "p1-2"]


def test_a_call_cancelled_while_it_waits_never_runs(served):
    held = _hold_the_worker(served)
    doomed = served.stub("p1").future(b"cancelled", timeout=20)
    assert _eventually(lambda: served.pool.queued("p1") == 1)
    doomed.cancel()
    time.sleep(0.3)  # the cancellation reaches the server
    kept = served.stub("p2").future(b"kept", timeout=20)
    served.hold.set()
    assert kept.result() == b"kept" and held.result() == b"hold"
    assert served.ran == ["hold", "kept"]


def _eventually(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()
