"""``noisyanchor analyst status --serve [ADDRESS]``: the operator's status as a web page that
refreshes itself, and as ``/status.json``.

``/status.json`` is :func:`analyst.status_report.operator_status`, the document ``analyst status
--json`` prints, so the page shows nothing the operator's status does not; the page
(``status_page.html``: no external asset, a few lines of script polling ``/status.json`` every
few seconds) writes every value with ``textContent``, never as HTML: site ids and withdrawal
reasons come from the sites.

:class:`StatusSite` answers one request (method, target, ``Host``, body length) with a
:class:`Response`, without a socket, so its tests need no server; :class:`_Handler` is the thin
transport around it. It reads the store read-only (beside the running analyst or without it,
as ``analyst status`` does), at most once a second whatever the number of requests.

Served by the standard library's ``http.server.ThreadingHTTPServer``: the page is read-only,
for one operator and a handful of requests a minute, so a web framework would add a dependency
(and its updates) to every analyst install for nothing this needs. What ``http.server`` leaves
to its user is done here: only GET and HEAD (405 otherwise), unknown paths 404, a bounded
request (line, headers, no body), a socket timeout, at most :data:`MAX_CONNECTIONS` at once, a
strict Content-Security-Policy and ``nosniff`` on every answer, and a ``Host`` check on
loopback against DNS rebinding (a web page the operator visits cannot make the browser read
the status through a name that resolves to 127.0.0.1).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import logging
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.status_address import Address, exposure_warning, parse_address
from noisyanchor.common.errors import NoisyAnchorError, PreconditionError

log = logging.getLogger(__name__)

#: The page; its script polls /status.json every REFRESH_SECONDS (written into the page).
PAGE_FILE = "status_page.html"

#: Seconds between two polls of the page, and the shortest time between two reads of the store.
REFRESH_SECONDS, MIN_READ_SECONDS = 3, 1.0

#: Longest request line accepted (bytes); headers are bounded by the standard library (at most
#: 100 lines of 64 KiB each), and a request may carry no body.
MAX_REQUEST_LINE = 8192

#: Seconds a connection may stay silent before it is closed.
SOCKET_TIMEOUT = 10.0

#: Connections served at once (one thread each); more are closed at once.
MAX_CONNECTIONS = 32


def _inline_hash(html: str, tag: str) -> str:
    """The CSP source of the one inline ``<tag>`` of ``html``: ``'sha256-...'`` of its text."""
    body = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.S)
    assert body is not None, f"{PAGE_FILE} has no <{tag}>"
    digest = hashlib.sha256(body.group(1).encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def _page() -> tuple[bytes, str]:
    """The page's bytes and its Content-Security-Policy: nothing loads but its own inline
    script and style (by hash) and what the script fetches from this origin."""
    html = (resources.files("noisyanchor.analyst") / PAGE_FILE).read_text(encoding="utf-8")
    html = html.replace("__REFRESH_MS__", str(REFRESH_SECONDS * 1000))
    csp = (f"default-src 'none'; script-src {_inline_hash(html, 'script')}; "
           f"style-src {_inline_hash(html, 'style')}; connect-src 'self'; img-src 'none'; "
           "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return html.encode(), csp


@dataclass(frozen=True)
class Response:
    """One answer: status code, content type and body (a HEAD answer sends no body)."""

    status: int
    content_type: str
    body: bytes


def _text(status: int, message: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", (message + "\n").encode())


class StatusSite:
    """The page and ``/status.json`` of one federation, answered without a socket.

    Parameters
    ----------
    read : callable
        Returns the status document (:func:`analyst.status_report.operator_status`).
    hosts : frozenset of str or None
        ``Host`` values accepted (None: any, when the operator chose an address other than
        loopback and names it as they like).
    """

    def __init__(self, read: Callable[[], dict[str, Any]], hosts: frozenset[str] | None) -> None:
        self._read, self.hosts = read, hosts
        self.page, self.csp = _page()
        self._lock = threading.Lock()
        self._cached: tuple[float, Response] | None = None

    def headers(self) -> list[tuple[str, str]]:
        """Headers of every answer, errors included."""
        return [("Content-Security-Policy", self.csp), ("X-Content-Type-Options", "nosniff"),
                ("Referrer-Policy", "no-referrer"), ("X-Frame-Options", "DENY"),
                ("Cache-Control", "no-store")]

    def respond(self, method: str, target: str, host: str | None,
                body_length: int) -> Response:
        """The answer to ``method target`` with header ``Host: host`` and a body of
        ``body_length`` bytes."""
        if method not in ("GET", "HEAD"):
            return _text(405, f"{method} is not allowed: this page is read-only (GET, HEAD)")
        if body_length:
            return _text(413, "a GET or HEAD request carries no body")
        if self.hosts is not None and host is not None and host.lower() not in self.hosts:
            return _text(421, "this page answers only to its own address "
                         f"({', '.join(sorted(self.hosts))})")
        path = urlsplit(target).path
        if path == "/":
            return Response(200, "text/html; charset=utf-8", self.page)
        if path == "/status.json":
            return self.status()
        return _text(404, f"no such page: {path[:200]}; the status is at / and /status.json")

    def status(self) -> Response:
        """``/status.json``, read again at most every :data:`MIN_READ_SECONDS`; 503 with
        ``{"error": why}`` when the store cannot be read."""
        with self._lock:  # one read at a time; the others take its answer
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= MIN_READ_SECONDS:
                try:
                    answer = Response(200, "application/json",
                                      json.dumps(self._read(), indent=1).encode())
                except (NoisyAnchorError, OSError, ValueError) as err:
                    answer = Response(503, "application/json",
                                      json.dumps({"error": f"cannot read the status: {err}"}
                                                 ).encode())
                self._cached = (time.monotonic(), answer)
            return self._cached[1]


def loopback_hosts(port: int) -> frozenset[str]:
    """The ``Host`` values of a page on loopback ``port``."""
    return frozenset(f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]"))


class _Handler(http.server.BaseHTTPRequestHandler):
    """The transport: reads one request, hands it to the server's :class:`StatusSite`."""

    server: _Server
    timeout = SOCKET_TIMEOUT
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return "noisyanchor-status"  # no Python version for whoever probes the port

    def parse_request(self) -> bool:
        if len(self.raw_requestline) > MAX_REQUEST_LINE:
            self.requestline, self.request_version, self.command = "", "HTTP/1.1", ""
            self.send_error(414)
            return False
        return super().parse_request()

    def __getattr__(self, name: str) -> Any:
        # http.server calls do_<METHOD> and answers 501 to a method it finds no handler for:
        # every method comes here, so that all but GET and HEAD are answered 405.
        if name.startswith("do_"):
            return self._answer
        raise AttributeError(name)

    def _answer(self) -> None:
        try:  # a body of unknown length (chunked, or a bad length) is refused as one
            length = -1 if "Transfer-Encoding" in self.headers else \
                int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        self._send(self.server.site.respond(self.command, self.path, self.headers.get("Host"),
                                            length))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None
                   ) -> None:
        # The standard library's own refusals (bad request line, headers too long) get the
        # same headers as every other answer.
        self.close_connection = True
        self._send(_text(code, message or self.responses.get(code, ("error",))[0]))

    def _send(self, response: Response) -> None:
        if response.status >= 400:
            self.close_connection = True
        self.send_response(response.status)
        for key, value in self.server.site.headers():
            self.send_header(key, value)
        if response.status == 405:
            self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class _Server(http.server.ThreadingHTTPServer):
    """A threading server on one :class:`Address` (IPv4 or IPv6) serving one site."""

    daemon_threads = True  # a stalled reader never holds the exit
    block_on_close = False

    def __init__(self, address: Address, site: StatusSite) -> None:
        self.address_family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        self.site = site
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((address.host, address.port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # threads stay bounded
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def status_server(address: Address, read: Callable[[], dict[str, Any]]) -> _Server:
    """A server listening on ``address`` for the status ``read`` returns (not yet serving).

    Raises
    ------
    PreconditionError
        The address cannot be listened on (in use, or not this host's).
    """
    site = StatusSite(read, None)
    try:
        server = _Server(address, site)
    except OSError as err:
        raise PreconditionError(f"cannot listen on {address.url_host}:{address.port} for the "
                                f"status page: {err.strerror or err}") from None
    if address.loopback:
        site.hosts = loopback_hosts(server.server_address[1])
    return server


def serve_status_page(config: AnalystConfig, address_text: str) -> int:
    """Serve ``config``'s status on ``address_text`` until SIGINT or SIGTERM (exit 0)."""
    from noisyanchor.analyst.status_report import operator_status

    address = parse_address(address_text)
    server = status_server(address, lambda: operator_status(config))
    port = server.server_address[1]
    if (warning := exposure_warning(address, port)) is not None:
        print(warning, file=sys.stderr, flush=True)

    def stop(signum: int, frame: Any) -> None:
        # serve_forever returns once shutdown() is called from another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    print(f"status page of federation {config.federation_id}: http://{address.url_host}:{port}/ "
          f"(its JSON at /status.json), refreshed every {REFRESH_SECONDS} s; SIGINT or "
          "SIGTERM stops it", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    return 0
