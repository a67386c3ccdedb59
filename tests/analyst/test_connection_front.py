"""The connection front of the analyst's port (analyst.connection_front), in front of a plain
TCP echo server: per-address and per-caller limits, the claim timeout, rejection."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from noisyanchor.analyst.connection_front import ConnectionFront, ConnectionLimits, peer_port
from noisyanchor.common.errors import ResourceLimitError, UnauthenticatedError


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def front():
    """Factory: a started front with the given limits, before an echo server."""
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    echo.daemon_threads = True
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    made = []

    def make(**limits) -> ConnectionFront:
        f = ConnectionFront(ConnectionLimits(**({
            "max_connections": 100, "max_connections_per_address": 5,
            "max_connections_per_caller": 2, "claim_timeout": 30.0} | limits)))
        f.start("127.0.0.1", 0, echo.server_address[1])
        made.append(f)
        return f

    yield make
    for f in made:
        f.stop()
    echo.shutdown()


def _connect(front: ConnectionFront, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", front.port), timeout=10,
                                 source_address=(source, 0))
    try:  # through to the echo server, or closed at accept
        s.sendall(b"ping")
        s.recv(64)
    except OSError:
        pass
    return s


def _alive(s: socket.socket) -> bool:
    """Whether ``s`` still gets its bytes echoed (False once the front closed it)."""
    try:
        s.sendall(b"x")
        return bool(s.recv(64))
    except OSError:
        return False


def _wait_open(front: ConnectionFront, count: int) -> None:
    deadline = time.monotonic() + 30
    while ((front.counts()["open"], len(front._by_port)) != (count, count)
           and time.monotonic() < deadline):
        time.sleep(0.02)
    assert front.counts()["open"] == len(front._by_port) == count


def _peer(front: ConnectionFront, k: int) -> str:
    """gRPC's name of the k-th open connection's loopback leg."""
    return f"ipv4:127.0.0.1:{sorted(front._by_port)[k]}"


def test_one_address_gets_its_share_and_another_address_still_connects(front):
    f = front()
    held = [_connect(f, "127.0.0.2") for _ in range(8)]
    assert sum(_alive(s) for s in held) == 5  # max_connections_per_address
    assert _alive(_connect(f, "127.0.0.3"))


def test_a_connection_without_an_admitted_call_is_closed_at_the_claim_timeout(front):
    f = front(claim_timeout=0.5)
    idle, claimed = _connect(f), _connect(f)
    _wait_open(f, 2)
    f.claim(_peer(f, 1), "p1")  # whichever leg: one of the two is claimed
    _wait_open(f, 1)
    assert f.counts()["claimed"] == 1
    assert sum(_alive(s) for s in (idle, claimed)) == 1


def test_a_caller_past_its_share_is_refused_and_its_new_connection_closed(front):
    f = front()
    socks = [_connect(f) for _ in range(3)]
    _wait_open(f, 3)
    peers = [_peer(f, k) for k in range(3)]
    f.claim(peers[0], "p1")
    f.claim(peers[0], "p1")  # the same connection again: no second share
    f.claim(peers[1], "p1")
    with pytest.raises(ResourceLimitError, match="max_connections_per_caller = 2"):
        f.claim(peers[2], "p1")
    _wait_open(f, 2)
    assert sum(_alive(s) for s in socks) == 2


def test_a_rejected_connection_is_closed_and_a_stranger_connection_refused(front):
    f = front()
    s = _connect(f)
    _wait_open(f, 1)
    f.reject(_peer(f, 0))
    _wait_open(f, 0)
    assert not _alive(s)
    with pytest.raises(UnauthenticatedError, match="did not come through"):
        f.claim("ipv4:127.0.0.1:1", "p1")
    assert peer_port("ipv6:[::1]:5000") is None


def _claim_all(front: ConnectionFront, caller: str) -> None:
    for k in range(front.counts()["open"]):
        front.claim(_peer(front, k), caller)


def _claimed_after(front: ConnectionFront, caller: str) -> bool:
    """Whether a new connection (a site back after a crash) can be claimed for ``caller``."""
    s = _connect(front)
    _wait_open(front, 1)
    front.claim(_peer(front, 0), caller)  # raises while the old ones hold the share
    return _alive(s)


def test_a_killed_site_process_gives_its_connections_back_at_once(front):
    """SIGKILL: the kernel closes the dead process's sockets, the front sees their end."""
    import signal
    import subprocess
    import sys

    f = front()
    site = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys, time\n"
        f"socks = [socket.create_connection(('127.0.0.1', {f.port})) for _ in range(2)]\n"
        "for s in socks: s.sendall(b'ping'); s.recv(64)\n"
        "print('ready', flush=True); time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert site.stdout.readline().strip() == "ready"
        _wait_open(f, 2)
        _claim_all(f, "p1")
        assert f.counts()["claimed"] == 2  # p1's whole share (max_connections_per_caller)
        site.send_signal(signal.SIGKILL)
        site.wait(30)
        _wait_open(f, 0)
        assert _claimed_after(f, "p1")
    finally:
        site.kill()
        site.wait(30)


def test_a_silent_half_open_connection_gives_its_slot_back_within_the_silence_timeout(front):
    """A host that crashed leaves its connections open with no FIN; here a client that stops
    reading and sending (the front's copy to it stuck on a full window, as to a dead host):
    closed once nothing was heard from it for silence_timeout seconds."""
    f = front(silence_timeout=10.0)  # a margin for the steps before the share is checked
    stuck, quiet = _connect(f), _connect(f)
    _wait_open(f, 2)
    _claim_all(f, "p1")
    stuck.settimeout(1.0)
    try:  # echoed back into a socket nobody reads, until every buffer on the way is full
        stuck.sendall(b"x" * (64 << 20))
    except TimeoutError:
        pass
    held = set(f._by_port)
    again = _connect(f)
    _wait_open(f, 3)
    with pytest.raises(ResourceLimitError):  # the share is held until they fall silent
        f.claim(f"ipv4:127.0.0.1:{(set(f._by_port) - held).pop()}", "p1")
    _wait_open(f, 0)  # all closed: the stuck one, the merely quiet one, the refused one
    assert _claimed_after(f, "p1")
    for s in (stuck, quiet, again):
        s.close()
