"""The operator's status page (analyst/status_page.py, analyst/status_address.py): answers
without a socket, then the same over a real server on loopback: only GET and HEAD, unknown paths
404, a strict CSP and nosniff on every answer, bounded requests, the Host check, and what
listening elsewhere than loopback says."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from noisyanchor.analyst.status_address import (
    DEFAULT_ADDRESS,
    Address,
    exposure_warning,
    parse_address,
)
from noisyanchor.analyst.status_page import (
    MAX_CONNECTIONS,
    StatusSite,
    loopback_hosts,
    status_server,
)
from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.progress import Progress

HOSTILE = "<script>alert(1)</script>"
#: What analyst status --json says of a federation with a site whose id and withdrawal reason
#: are markup (a site chooses both).
DOCUMENT = Progress("f", "collecting", ("org-a", HOSTILE), ("org-a",), ("org-a",), ("org-a",),
                    "org-a", {HOSTILE: "<img src=x onerror=window.__pwned=true>"}).as_dict() | {
    "store": "/srv/store", "analyst": None, "privacy": None}


@pytest.fixture
def server():
    """A status server on a free loopback port, serving DOCUMENT, stopped at the end."""
    srv = status_server(parse_address("127.0.0.1:0"), lambda: DOCUMENT)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def _ask(srv, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def test_the_page_and_its_json_are_the_only_paths():
    site = StatusSite(lambda: DOCUMENT, None)
    page = site.respond("GET", "/", None, 0)
    assert page.status == 200 and page.content_type == "text/html; charset=utf-8"
    status = site.respond("GET", "/status.json?t=1", None, 0)
    assert status.status == 200 and status.content_type == "application/json"
    assert json.loads(status.body) == DOCUMENT
    for path in ("/index.html", "/status.json/", "/../etc/passwd", "/favicon.ico"):
        assert site.respond("GET", path, None, 0).status == 404, path
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"):
        assert site.respond(method, "/status.json", None, 0).status == 405, method


def test_the_page_holds_no_value_and_writes_values_only_as_text():
    """Every value reaches the page through the script, which never parses one as HTML."""
    page = StatusSite(lambda: DOCUMENT, None).page.decode()
    assert "innerHTML" not in page and "outerHTML" not in page and "insertAdjacentHTML" not in \
        page and "document.write" not in page and "eval(" not in page
    assert "textContent" in page
    assert "http://" not in page and "https://" not in page  # no external asset
    assert page.count("<script>") == 1 and "<script src" not in page


def test_a_store_that_cannot_be_read_is_a_503_with_the_reason():
    def broken() -> dict:
        raise OSError("store is gone")

    answer = StatusSite(broken, None).respond("GET", "/status.json", None, 0)
    assert answer.status == 503 and "store is gone" in json.loads(answer.body)["error"]


def test_every_answer_has_a_strict_csp_and_nosniff(server):
    for method, path, want in (("GET", "/", 200), ("GET", "/status.json", 200),
                               ("HEAD", "/", 200), ("GET", "/nope", 404),
                               ("POST", "/status.json", 405), ("BREW", "/", 405)):
        status, headers, body = _ask(server, method, path)
        assert status == want, (method, path)
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Cache-Control"] == "no-store"
        if method == "HEAD":
            assert body == b"" and int(headers["Content-Length"]) > 0
        if status == 405:
            assert headers["Allow"] == "GET, HEAD"
    status, headers, body = _ask(server, "GET", "/status.json")
    assert headers["Content-Type"] == "application/json" and json.loads(body) == DOCUMENT
    # the site id stays a JSON string, served as JSON (never sniffed as HTML)
    assert json.loads(body)["expected"] == ["org-a", HOSTILE]


def test_the_inline_script_and_style_are_allowed_by_their_hash_only(server):
    import base64
    import hashlib
    import re

    _, headers, body = _ask(server, "GET", "/")
    csp, page = headers["Content-Security-Policy"], body.decode()
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        text = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.S).group(1)
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{directive} 'sha256-{digest}';" in csp


def test_requests_are_bounded(server):
    status, headers, _ = _ask(server, "GET", "/?" + "a" * 9000)
    assert status == 414 and headers["X-Content-Type-Options"] == "nosniff"
    assert _ask(server, "GET", "/status.json", body=b"x" * 10)[0] == 413
    assert _ask(server, "GET", "/status.json", {"Transfer-Encoding": "chunked"}, b"x")[0] == 413
    # connections that send nothing hold a thread each, at most MAX_CONNECTIONS of them; once
    # they are gone the page answers again
    idle = [socket.create_connection(("127.0.0.1", server.server_address[1]))
            for _ in range(MAX_CONNECTIONS)]
    try:
        assert wait_until(lambda: _refused(server))
    finally:
        for conn in idle:
            conn.close()
    assert wait_until(lambda: _ask(server, "GET", "/status.json")[0] == 200)


def _refused(srv) -> bool:
    try:
        _ask(srv, "GET", "/status.json")
    except (ConnectionError, http.client.HTTPException):
        return True
    return False


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_on_loopback_only_its_own_address_is_answered(server):
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) is refused."""
    port = server.server_address[1]
    assert _ask(server, "GET", "/status.json", {"Host": "evil.example"})[0] == 421
    assert _ask(server, "GET", "/status.json", {"Host": f"evil.example:{port}"})[0] == 421
    for host in loopback_hosts(port):
        assert _ask(server, "GET", "/status.json", {"Host": host})[0] == 200


@pytest.mark.parametrize("text, address", [
    ("127.0.0.1:8642", Address("127.0.0.1", 8642, True)),
    ("localhost:0", Address("127.0.0.1", 0, True)),
    ("[::1]:9000", Address("::1", 9000, True)),
    ("0.0.0.0:8642", Address("0.0.0.0", 8642, False)),
    ("192.0.2.7:80", Address("192.0.2.7", 80, False)),
])
def test_addresses_are_parsed_and_loopback_is_known(text, address):
    assert parse_address(text) == address
    assert parse_address(DEFAULT_ADDRESS).loopback


@pytest.mark.parametrize("text", ["8642", "127.0.0.1", "host.example:8642", "1.2.3.4:99999",
                                  ":8642", "::1:80"])
def test_a_bad_address_is_refused_with_the_expected_form(text):
    with pytest.raises(InvalidInputError, match="--serve"):
        parse_address(text)


def test_listening_elsewhere_than_loopback_says_who_can_read_it():
    assert exposure_warning(parse_address(DEFAULT_ADDRESS), 8642) is None
    warning = exposure_warning(parse_address("0.0.0.0:8642"), 8642)
    assert "anyone who can reach that port from every network this host is on" in warning
    assert "without a password and without TLS" in warning and "ssh -L 8642:127.0.0.1:8642" \
        in warning
    assert "the network of 192.0.2.7" in exposure_warning(parse_address("192.0.2.7:1"), 1)


def test_a_port_in_use_is_refused_with_the_address(server):
    with pytest.raises(PreconditionError, match=rf"cannot listen on 127.0.0.1:"
                       rf"{server.server_address[1]} for the status page"):
        status_server(parse_address(f"127.0.0.1:{server.server_address[1]}"), dict)


@pytest.mark.browser
def test_a_hostile_site_id_and_reason_show_as_text_in_a_real_browser(server, browser_page):
    page, errors = browser_page
    page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
    page.wait_for_selector("#withdrawals table")
    assert HOSTILE in page.inner_text("#steps") and HOSTILE in page.inner_text("#withdrawals")
    assert "<img src=x onerror=window.__pwned=true>" in page.inner_text("#withdrawals")
    assert page.locator("img").count() == 0 and page.locator("script").count() == 1
    assert not page.evaluate("window.__pwned === true")
    assert errors == []  # no CSP violation, no script error
