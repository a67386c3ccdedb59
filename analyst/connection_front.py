"""The analyst's public port: a thin TCP front that knows whose each connection is.

gRPC's server counts connections only for the whole port (``grpc.max_allowed_incoming_
connections``) and shows Python nothing of a connection until a call arrives on it, so one
source (or one certificate) holding idle connections could use up the port for everyone. The
front accepts on the configured address, opens one loopback connection to the gRPC server per
client connection, and copies bytes both ways, unread: TLS stays end to end between the client
and gRPC (the client certificate is verified by gRPC, the identity read by
:mod:`analyst.admission` as before). What the front adds:

1. **Per source address**: at most ``max_connections_per_address`` connections at once (and
   ``max_connections`` in all); one more is closed at accept.
2. **Claimed or closed**: a connection must carry a call admitted for a participant within
   ``connection_claim_timeout`` seconds of its accept (TLS handshake included), or it is closed.
   Once it has, it belongs to that participant (:meth:`ConnectionFront.claim`).
3. **Per identity**: at most ``max_connections_per_caller`` connections claimed by one
   participant; a call that would claim one more is refused and its connection closed.
4. **Refused for who it is**: a connection whose call was refused because of its certificate
   (no participant, not issued by the CA) is closed :data:`REFUSAL_GRACE` seconds after that
   first refusal (:meth:`ConnectionFront.reject`): long enough for the refusals of the calls it
   already carries to reach the client (each is refused at arrival, without a worker), so a
   misconfigured site reads why, and short enough that no outsider holds the port.
5. **Heard from or closed**: a connection whose client sent nothing for ``silence_timeout``
   seconds (:data:`SILENCE_TIMEOUT`) is closed, whatever calls it carries. The gRPC server pings
   every client every :data:`KEEPALIVE_TIME` seconds (``transport_options`` in
   :mod:`analyst.server`), so a live client always answers within it; a host that crashed or
   lost its network (no FIN ever comes), or a client that stopped reading, does not, and its
   connections give their slots back: a site restarting after a crash is admitted again within
   ``silence_timeout`` seconds (60 by default) of its last byte. The client sockets also carry
   TCP keepalive and ``TCP_USER_TIMEOUT`` of the same span, so the kernel drops a dead peer's
   socket too (a process that is killed is seen at once: its kernel closes the socket).

Why a front rather than socket options or gRPC channel arguments: no gRPC core argument limits
connections per source or per certificate, and ``max_connection_idle_ms`` closes a connection
only when it has no call, which a held stream defeats and reopening sidesteps. A kernel limit
(nftables ``ct count``) counts per source but knows no certificate; it is the right tool for
floods from many addresses (deploy/README.md, section 6), not for this. The front is plain
asyncio on one thread: a connection costs two sockets and two small buffers, and the bytes it
copies are the ones gRPC would have read anyway.

The loopback leg lets gRPC see each connection's own local port as its peer (``ipv4:127.0.0.1:
<port>``), which is how a call is matched with its front connection. A connection made to the
gRPC listener directly (local processes only: it listens on 127.0.0.1) matches none and its
calls are refused.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from noisyanchor.common.errors import ResourceLimitError, UnauthenticatedError

log = logging.getLogger(__name__)

#: Seconds a rejected connection still carries the server's answers before it is closed.
REFUSAL_GRACE = 2.0

#: Seconds between the gRPC server's keepalive pings to each client, and seconds it waits for
#: the answer before it closes the connection (``grpc.keepalive_time_ms``, ``..._timeout_ms``).
KEEPALIVE_TIME, KEEPALIVE_TIMEOUT = 20.0, 10.0

#: Seconds a client may send nothing before its connection is closed: two pings unanswered.
SILENCE_TIMEOUT = 2 * (KEEPALIVE_TIME + KEEPALIVE_TIMEOUT)

#: Bytes read at a time from either side.
_CHUNK = 256 << 10


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections the port holds (``[server]`` keys of the analyst config).

    Attributes
    ----------
    max_connections : int
        Connections at once, all sources together.
    max_connections_per_address : int
        Connections at once from one source address.
    max_connections_per_caller : int
        Connections one participant has claimed, at once.
    claim_timeout : float
        Seconds from accept to the first admitted call.
    silence_timeout : float
        Seconds a client may send nothing before its connection is closed.
    """

    max_connections: int
    max_connections_per_address: int
    max_connections_per_caller: int
    claim_timeout: float
    silence_timeout: float = SILENCE_TIMEOUT

    @classmethod
    def of(cls, config) -> ConnectionLimits:
        """The limits an :class:`~analyst.config.AnalystConfig` sets."""
        return cls(config.max_connections, config.max_connections_per_address,
                   config.max_connections_per_caller, config.connection_claim_timeout)


@dataclass(eq=False)
class _Link:
    """One client connection and its loopback leg."""

    address: str
    peer: str  # the client's address and port as gRPC writes a peer (ipv4:10.0.0.7:5123)
    client: asyncio.StreamWriter
    backend: asyncio.StreamWriter | None = None
    caller: str | None = None
    condemned: bool = False  # refused for who it is: closing after REFUSAL_GRACE
    tasks: list[asyncio.Task] = field(default_factory=list)
    heard: float = 0.0  # the event loop's time of the client's last bytes

    def hear(self) -> None:
        self.heard = asyncio.get_running_loop().time()

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in (self.client, self.backend):
            if writer is not None:
                writer.transport.abort()


def peer_port(peer: str) -> int | None:
    """The client-side port of a gRPC peer string (``ipv4:127.0.0.1:5123`` -> 5123)."""
    head, _, port = peer.rpartition(":")
    return int(port) if head.startswith("ipv4:127.0.0.1") and port.isdigit() else None


class ConnectionFront:
    """The TCP front (see the module docstring).

    Parameters
    ----------
    limits : ConnectionLimits
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.port = 0  # the public port, once started
        self.backend_port = 0  # the gRPC server's port on 127.0.0.1
        self._lock = threading.Lock()  # the tables below; claims come from gRPC's threads
        self._by_port: dict[int, _Link] = {}
        self._links: set[_Link] = set()
        self._per_address: Counter[str] = Counter()
        self._per_caller: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._watch: asyncio.Future | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="connection-front",
                                        daemon=True)

    # -- what the admission of calls tells the front (any thread) --------------------------

    def claim(self, peer: str, caller: str) -> None:
        """The call on connection ``peer`` was admitted for ``caller``: the connection is
        ``caller``'s from now on. Raises (and closes the connection) when it is not one of the
        front's, or ``caller`` already holds its share of connections."""
        port = peer_port(peer)
        with self._lock:
            link = self._by_port.get(port) if port is not None else None
            if link is None:
                raise UnauthenticatedError("this connection did not come through the analyst's "
                                           "port")
            if link.caller == caller:
                return
            held = self._per_caller[caller]
            if link.caller is not None or held >= self.limits.max_connections_per_caller:
                refusal = ResourceLimitError(
                    f"{caller!r} already holds {held} connections to the analyst, the limit "
                    f"([server] max_connections_per_caller = "
                    f"{self.limits.max_connections_per_caller}); this one is closed, reuse one")
            else:
                link.caller = caller
                self._per_caller[caller] = held + 1
                log.info("%s connected from %s", caller, link.peer)
                return
        self._loop.call_soon_threadsafe(self._condemn, link)
        raise refusal

    def reject(self, peer: str) -> None:
        """A call on connection ``peer`` was refused for who sent it: close the connection
        :data:`REFUSAL_GRACE` seconds from now."""
        port = peer_port(peer)
        with self._lock:
            link = self._by_port.get(port) if port is not None else None
        if link is not None:
            self._loop.call_soon_threadsafe(self._condemn, link)

    def counts(self) -> dict[str, int]:
        """Connections now: in all, and claimed (for tests and the log)."""
        with self._lock:
            return {"open": len(self._links), "claimed": sum(self._per_caller.values())}

    # -- the event loop ------------------------------------------------------------------

    def start(self, host: str, port: int, backend_port: int) -> int:
        """Listen on ``host:port`` (0: any free port) for the gRPC server on
        ``127.0.0.1:backend_port``; returns the bound port. Raises OSError when the address
        cannot be bound."""
        self.backend_port = backend_port
        self._thread.start()
        done = asyncio.run_coroutine_threadsafe(self._listen(host, port), self._loop)
        self.port = done.result()
        return self.port

    async def _listen(self, host: str, port: int) -> int:
        # No SO_REUSEPORT: a second analyst on the same port fails to bind instead of taking
        # half of the connections.
        self._server = await asyncio.start_server(self._accepted, host.strip("[]") or None,
                                                  port, reuse_port=False, limit=_CHUNK)
        self._watch = asyncio.ensure_future(self._close_silent())
        return self._server.sockets[0].getsockname()[1]

    async def _close_silent(self) -> None:
        """Every quarter of ``silence_timeout``, close the connections whose client sent
        nothing for ``silence_timeout`` seconds (a crashed host, a client that stopped
        reading: see the module docstring)."""
        silence = self.limits.silence_timeout
        while True:
            await asyncio.sleep(silence / 4)
            now = self._loop.time()
            with self._lock:
                silent = [link for link in self._links if now - link.heard > silence]
            for link in silent:
                log.info("connection %s%s closed: nothing heard from it for %g s (a crashed "
                         "or disconnected host?)", link.peer,
                         f" of {link.caller}" if link.caller else "", silence)
                link.close()

    def stop(self) -> None:
        """Stop accepting and close every connection."""
        async def close_all() -> None:
            if self._server is not None:
                self._server.close()
            if self._watch is not None:
                self._watch.cancel()
            for link in list(self._links):
                link.close()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(5.0)
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _admit(self, link: _Link) -> str | None:
        """Count a new connection; the reason it is refused, or None."""
        limits = self.limits
        with self._lock:
            if len(self._links) >= limits.max_connections:
                return f"{len(self._links)} connections open ([server] max_connections)"
            if self._per_address[link.address] >= limits.max_connections_per_address:
                return (f"{self._per_address[link.address]} connections from {link.address} "
                        "([server] max_connections_per_address)")
            self._links.add(link)
            self._per_address[link.address] += 1
        return None

    def _forget(self, link: _Link, port: int | None) -> None:
        with self._lock:
            if link not in self._links:
                return
            self._links.discard(link)
            self._by_port.pop(port, None)
            for table, key in ((self._per_address, link.address),
                               (self._per_caller, link.caller)):
                if key is not None:
                    table[key] -= 1
                    if not table[key]:
                        del table[key]

    async def _accepted(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        family = "ipv6" if ":" in str(peer[0]) else "ipv4"
        host = f"[{peer[0]}]" if family == "ipv6" else str(peer[0])
        link = _Link(str(peer[0]), f"{family}:{host}:{peer[1]}", writer)
        link.hear()
        refused = self._admit(link)
        if refused is not None:
            log.debug("connection from %s closed at accept: %s", link.address, refused)
            writer.transport.abort()
            return
        port = None
        try:
            b_reader, link.backend = await asyncio.open_connection(
                "127.0.0.1", self.backend_port, limit=_CHUNK)
            port = link.backend.get_extra_info("sockname")[1]
            sock = link.backend.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _detect_dead_peer(writer.get_extra_info("socket"), self.limits.silence_timeout)
            with self._lock:
                self._by_port[port] = link
            upstream = asyncio.ensure_future(_copy(reader, link.backend, link.hear))  # -> gRPC
            link.tasks = [upstream, asyncio.ensure_future(_copy(b_reader, writer))]
            claim = self._loop.call_later(self.limits.claim_timeout, self._unclaimed, link)
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
            if upstream.done() and not upstream.cancelled() and upstream.exception() is None:
                # The client half-closed: gRPC finishes its answer, then closes.
                await asyncio.wait(link.tasks[1:])
            claim.cancel()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            link.close()
            self._forget(link, port)

    def _unclaimed(self, link: _Link) -> None:
        if link.caller is None:
            log.debug("connection from %s closed: no admitted call within %g s ([server] "
                      "connection_claim_timeout)", link.address, self.limits.claim_timeout)
            link.close()

    def _condemn(self, link: _Link) -> None:
        if not link.condemned:
            link.condemned = True
            self._loop.call_later(REFUSAL_GRACE, link.close)


def _detect_dead_peer(sock: socket.socket | None, span: float) -> None:
    """TCP keepalive on ``sock`` (first probe after a third of ``span`` idle, then every sixth,
    three probes) and ``TCP_USER_TIMEOUT`` of ``span``: the kernel gives up on a peer that
    acknowledges nothing, data in flight or not, within about ``span`` seconds."""
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", span / 3), ("TCP_KEEPINTVL", span / 6),
                          ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", span * 1000)):
        if hasattr(socket, option):  # Linux; other systems keep their defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), max(1, int(value)))


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                heard: Callable[[], None] | None = None) -> None:
    """Copy until end of stream, then half-close (TLS close_notify and FIN pass through);
    ``heard`` is called whenever bytes arrive."""
    while data := await reader.read(_CHUNK):
        if heard is not None:
            heard()
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
