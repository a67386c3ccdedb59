"""A store that knows itself (issue 22, item 3), with real analyst processes: one analyst per
store (a second is refused with the first's PID, and a taken port is one clear line), and a
restart refuses a store that was tampered with while the analyst was stopped, naming the file:
a flipped byte in an upload or a result file, a store of another federation or protocol."""

from __future__ import annotations

import subprocess
import sys

import pytest
from e2e_support import random_upload, send

from noisyanchor.common.errors import NoisyAnchorError
from noisyanchor.deploy.demo import wait_for_result
from noisyanchor.deploy.launch import child_env, stop

pytestmark = pytest.mark.e2e

D, R = 8, 16


def _serve(fed, *extra: object, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``analyst serve`` on ``fed``'s config (with ``extra`` arguments), expected to refuse:
    its exit status and output."""
    return subprocess.run([sys.executable, "-m", "noisyanchor", "analyst", "serve", "--config",
                           str(fed.files.analyst_config), *map(str, extra)],
                          capture_output=True, text=True, timeout=timeout, env=child_env())


def _lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines()
            if line.strip() and "BLAS threads" not in line]


def test_a_second_analyst_is_refused_with_the_pid_of_the_first(analyst):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    second = _serve(fed)
    assert second.returncode == 1
    out = "\n".join(_lines(second))
    assert f"in use by another analyst (PID {fed.proc.pid} holds" in out, out
    with fed.client("p0") as c:  # the first one is untouched and serving
        assert c.status().state == "collecting"


def test_a_taken_port_is_one_clear_line(analyst, tmp_path):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    second = _serve(fed, "--output-dir", tmp_path / "other-store", "--port", fed.port)
    assert second.returncode == 1
    lines = _lines(second)
    assert len(lines) == 1, lines
    assert f"cannot listen on 127.0.0.1:{fed.port}: the port is in use" in lines[0]
    assert "Traceback" not in second.stderr


def _done(analyst, rng):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    for pid in ("p0", "p1"):
        with fed.client(pid) as c:
            send(c, "aa-igdp", random_upload(rng, 40, D, R))
    wait_for_result(fed.files.store, fed.proc, 60)
    stop(fed.proc)
    return fed


def _flip(path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("tamper, named", [
    (lambda store: _flip(store / "uploads" / "p1.bundle", -9), "uploads/p1.bundle: array"),
    (lambda store: _flip(store / "result" / "z.npy", -3), "result/z.npy does not match"),
    (lambda store: _flip(store / "result" / "result.json", 2), "result/result.json does not"),
    (lambda store: (store / "result" / "manifest.json").unlink(), "result/manifest.json is"),
], ids=["upload-byte", "result-array-byte", "result-json-byte", "manifest-removed"])
def test_a_restart_refuses_a_tampered_store_naming_the_file(analyst, rng, tamper, named):
    fed = _done(analyst, rng)
    tamper(fed.files.store)
    refused = _serve(fed)
    assert refused.returncode == 1
    out = "\n".join(_lines(refused))
    assert named in out and "not serving" in out, out


def test_a_store_of_another_federation_is_refused(analyst, rng, tmp_path):
    fed = _done(analyst, rng)
    config = fed.files.analyst_config.read_text()
    other = tmp_path / "other.toml"
    other.write_text(config.replace('id = "e2e"', 'id = "another-federation"'))
    refused = subprocess.run([sys.executable, "-m", "noisyanchor", "analyst", "serve",
                              "--config", str(other)], capture_output=True, text=True,
                             timeout=60, env=child_env())
    assert refused.returncode == 1
    assert "belongs to another federation: federation 'e2e'" in refused.stderr
    # The same config with another protocol value (more anchors) is refused too.
    other.write_text(config.replace(f"anchors = {R}", f"anchors = {2 * R}"))
    refused = subprocess.run([sys.executable, "-m", "noisyanchor", "analyst", "serve",
                              "--config", str(other)], capture_output=True, text=True,
                             timeout=60, env=child_env())
    assert "belongs to another protocol configuration" in refused.stderr
    # And the store itself is still whole: its own analyst starts and reports done.
    fed.restart()
    with fed.client("p0") as c:
        assert c.status().state == "done"


def test_a_repeated_upload_is_answered_only_from_verified_bytes(analyst, rng):
    """A retry of a committed upload gets its receipt again; once the stored copy is corrupt
    (while the analyst runs), the retry is refused naming the file, not answered."""
    fed = analyst(["p0", "p1", "p2"], "aa-igdp", dim=D, anchors=R)
    upload = random_upload(rng, 40, D, R)
    with fed.client("p0") as c:
        first = send(c, "aa-igdp", upload, digests=True)
        assert send(c, "aa-igdp", upload, digests=True).receipt == first.receipt
        _flip(fed.files.store / "uploads" / "p0.bundle", -5)
        with pytest.raises(NoisyAnchorError, match=r"DATA_LOSS.*uploads/p0\.bundle"):
            send(c, "aa-igdp", upload, digests=True)
