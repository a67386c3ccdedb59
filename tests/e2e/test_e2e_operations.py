"""What an operator sees and does: the analyst's log and health, SIGTERM, participants that wait
for late peers, explain TLS failures, and refuse data that does not fit the federation's schema
(telling the others who failed)."""

from __future__ import annotations

import datetime
import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from e2e_support import FEDERATION, free_port, random_upload, send, wait_until

from noisyanchor.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    PreconditionError,
)
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.deploy.certs import write_pki
from noisyanchor.deploy.demo import write_participant
from noisyanchor.deploy.launch import child_env, start, stop
from noisyanchor.participant import tls_check

pytestmark = pytest.mark.e2e

N, D, R = 20, 4, 16

#: Lines gRPC's C-core writes itself (glog-style prefix, absl's warning, TLS internals).
CORE_NOISE = re.compile(r"^[EWID]\d{4} |absl::InitializeLog|ssl_transport_security|"
                        r"handshaker", re.MULTILINE)


def _participant(fed, pid: str, x: np.ndarray, *, timeout: float | None = 60.0, **names):
    """Write ``pid``'s data (``x``, random labels, all three splits) and config."""
    path = fed.files.root / f"{pid}.npz"
    extra = {"feature_names": np.array(names["feature_names"])} if names else {}
    np.savez(path, x=x, labels=np.arange(len(x)) % 2, tags=np.arange(len(x)) % 3, **extra)
    fed.files.data[pid] = path
    return write_participant(fed.files, pid, federation_id=FEDERATION,
                             address=f"127.0.0.1:{fed.port}", method=fed.method, anchors=None,
                             dim=None, projection_seed=None, sigma=0.0, v=0.0, timeout=timeout)


def _upload(fed, pid: str, config) -> subprocess.Popen:
    return start(["participant", "upload", "--config", config], fed.files.root / f"{pid}.log")


def _log(fed, name: str) -> str:
    return (fed.files.root / f"{name}.log").read_text(errors="replace")


def test_an_operator_can_watch_the_analyst_probe_its_health_and_stop_it(analyst, rng, tmp_path):
    health_port = free_port()
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, extra={"server": {
        "health_port": health_port, "log_json": "analyst.jsonl"}})
    probe = [sys.executable, "-m", "noisyanchor", "analyst", "health", "--port", str(health_port)]
    ok = subprocess.run(probe, capture_output=True, text=True, env=child_env(), timeout=60)
    assert (ok.returncode, ok.stdout.strip()) == (0, "SERVING")
    # A client from another CA: the analyst's log stays free of C-core handshake lines.
    outsider = write_pki(tmp_path / "outsider", ["p0"])
    with fed.client("p0", tls=TlsFiles(outsider.ca, *outsider.clients["p0"]), timeout=0.5) as c:
        with pytest.raises(Exception, match="UNAVAILABLE"):
            c.status()
    procs = [_upload(fed, pid, _participant(fed, pid, rng.standard_normal((N, D))))
             for pid in ("p0", "p1")]
    try:
        assert [p.wait(120) for p in procs] == [0, 0]
        assert wait_until(lambda: "alignment done" in fed.log.read_text(), 60)
    finally:
        for p in procs:
            stop(p)
    fed.proc.send_signal(signal.SIGTERM)
    assert fed.proc.wait(30) == 0  # bounded wait; the time itself is measured in benchmarks
    text = fed.log.read_text()
    for event in ("p0 connected from", "p1 published its exchange key",
                  "dealer p0 sealed the anchor seed to p1", "p1 committed to the anchor",
                  "upload stream of p1 started", "committed upload of p0",
                  "alignment started", "downstream model logistic", "alignment done",
                  "SIGTERM received", "stopped"):
        assert event in text, event
    assert not CORE_NOISE.search(text), CORE_NOISE.search(text).group(0)
    lines = [json.loads(line) for line in
             (fed.files.root / "analyst.jsonl").read_text().splitlines()]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any(r["message"].startswith("alignment started") and r["level"] == "INFO"
               for r in lines)
    gone = subprocess.run([*probe, "--timeout", "1"], capture_output=True, text=True,
                          env=child_env(), timeout=60)
    assert gone.returncode == 1 and gone.stdout.startswith("UNREACHABLE")


@pytest.mark.slow
def test_sigterm_during_a_long_alignment_exits_and_keeps_the_store(analyst, rng):
    """Ten participants with unrelated random anchors, far above the phase transition: GOPP
    does not converge, so the alignment is still running when SIGTERM comes."""
    ids = [f"p{i}" for i in range(10)]
    fed = analyst(ids, "aa-igdp-an", dim=60, anchors=240,
                  extra={"solver": {"max_iter": 1_000_000, "tol": 1e-300}})
    for pid in ids:
        with fed.client(pid) as c:
            send(c, "aa-igdp-an", random_upload(rng, N, 60, 240))
    assert wait_until(lambda: "alignment started" in fed.log.read_text(), 30)
    time.sleep(1.0)  # well inside the GPM iterations
    fed.proc.send_signal(signal.SIGTERM)
    assert fed.proc.wait(30) == 0
    text = fed.log.read_text()
    assert "abandoning the alignment" in text and "alignment done" not in text
    assert len(list((fed.files.store / "uploads").glob("*.bundle"))) == 10  # nothing lost
    assert not (fed.files.store / "result").exists()


def test_a_participant_started_alone_waits_for_a_late_peer_and_says_whom_it_waits_for(
        analyst, rng):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    configs = {pid: _participant(fed, pid, rng.standard_normal((N, D)), timeout=None)
               for pid in ("p0", "p1")}
    first = _upload(fed, "p1", configs["p1"])
    late = None
    try:
        assert wait_until(lambda: "waiting for p0 to publish their exchange keys" in
                          _log(fed, "p1"), 30)
        late = _upload(fed, "p0", configs["p0"])
        assert [first.wait(120), late.wait(120)] == [0, 0]
    finally:
        for p in (first, late):
            if p is not None:
                stop(p)
    assert "joined federation e2e" in _log(fed, "p1")


def test_wrong_feature_count_is_refused_before_the_agreement_and_the_others_are_told(
        analyst, rng):
    schema = {"features": D, "dtype": "float64", "feature_names": [f"f{j}" for j in range(D)]}
    fed = analyst(["p0", "p1", "p2"], "aa-igdp", dim=None, anchors=None,
                  extra={"schema": schema})
    names = schema["feature_names"]
    good = {pid: _participant(fed, pid, rng.standard_normal((N, D)), feature_names=names)
            for pid in ("p0", "p1")}
    waiting = [_upload(fed, pid, cfg) for pid, cfg in good.items()]
    try:
        assert wait_until(lambda: (fed.files.store / "relay/keys/p1.pb").exists(), 30)
        bad = _participant(fed, "p2", rng.standard_normal((N, D - 1)),
                           feature_names=names[:-1])
        refused = _upload(fed, "p2", bad)
        assert refused.wait(60) == 1
        message = _log(fed, "p2")
        assert f"has {D - 1} feature columns" in message and f"declares {D} float64" in message
        assert not (fed.files.store / "relay/keys/p2.pb").exists()  # refused before agreeing
        assert [p.wait(60) for p in waiting] == [1, 1]
    finally:
        for p in waiting:
            stop(p)
    for pid in ("p0", "p1"):
        told = _log(fed, pid)
        assert "p2 withdrew" in told and f"has {D - 1} feature columns" in told
    # The analyst re-checks on upload: a hand-made upload of the wrong width is refused.
    with fed.client("p2") as c, pytest.raises(InvalidInputError, match=r"\[schema\] features"):
        send(c, "aa-igdp", random_upload(rng, N, D - 1, 4 * (D - 1)))


@pytest.mark.slow
def test_participants_wait_until_the_federation_deadline_and_name_who_is_missing(analyst,
                                                                                    rng):
    deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=6)
    fed = analyst(["p0", "p1", "p2"], "aa-igdp", dim=D, anchors=R,
                  extra={"federation": {"deadline": deadline}})
    from noisyanchor.participant.config import load_participant_config
    from noisyanchor.participant.run import run_upload

    cfg = load_participant_config(_participant(fed, "p0", rng.standard_normal((N, D)),
                                               timeout=None))  # the dealer
    with pytest.raises(DeadlineExceededError, match="waiting for p1, p2 to publish their"):
        run_upload(cfg)
    with fed.client("p1") as c, pytest.raises(PreconditionError, match="at its deadline"):
        send(c, "aa-igdp", random_upload(rng, N, D, R))


def test_tls_failures_are_explained(analyst, tmp_path):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)
    address = f"127.0.0.1:{fed.port}"
    cert, key = fed.files.pki.clients["p0"]
    ours = TlsFiles(fed.files.pki.ca, cert, key)
    assert tls_check.explain(address, ours, "localhost") is None
    assert "wrong server name" in tls_check.explain(address, ours, "analyst.example")
    other = write_pki(tmp_path / "other", ["p0"], ca_name="another CA")
    theirs = TlsFiles(other.ca, *other.clients["p0"])
    assert "certificate from another CA" in tls_check.explain(address, theirs, "localhost")
    mixed = TlsFiles(fed.files.pki.ca, *other.clients["p0"])
    assert "not issued by the CA" in tls_check.explain(address, mixed, "localhost")
    refused = tls_check.probe(address, mixed, "localhost")
    assert "refused this participant's certificate" in refused
    stop(fed.proc)
    assert "nothing listens" in tls_check.explain(address, ours, "localhost")
