"""What a site keeps of its federation, read without the analyst (issue 34, item 3): the
receipt file and its refusals, ``participant status`` from the state folder when nothing
listens at the analyst's address, and a rerun of a committed upload answered from the receipt.
The analyst's address here is a closed port; the e2e test stops a real analyst."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from noisyanchor.cli import main
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import GdpKey
from noisyanchor.deploy.demo import write_analyst, write_participant
from noisyanchor.participant import run
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.local_state import (
    UploadReceipt,
    keep_last_status,
    keep_receipt,
    keep_withdrawal,
    load_receipt,
    load_withdrawal,
    receipt_path,
)
from noisyanchor.participant.site_state import SiteKey, keep_site_key, records_digest

X = np.arange(12.0).reshape(6, 2)
LABELS = np.array([0, 1, 0, 1, 0, 1])


@pytest.fixture
def site(tmp_path, monkeypatch):
    """p0's config, its analyst at a closed port, its records and a kept key for them."""
    monkeypatch.setattr(run, "CONNECT_WAIT", 0.3)  # nothing listens: no need to wait longer
    data = tmp_path / "p0.npz"
    np.savez(data, x=X, labels=LABELS)
    files = write_analyst(tmp_path, ("p0", "p1"), federation_id="f", method="i-gdp",
                          anchors=None, dim=None, sigma=None, v=None, accept_collusion=False,
                          data={"p0": data})
    path = write_participant(files, "p0", federation_id="f", address="127.0.0.1:1",
                             method="i-gdp", anchors=None, dim=None, projection_seed=None,
                             sigma=0.0, v=0.0, timeout=60.0)
    cfg = load_participant_config(path)
    keep_site_key(cfg, SiteKey("f", "p0", "i-gdp", GdpKey(np.eye(2), np.zeros(2)), None, 2,
                               np.zeros(6, dtype="i1"), records_digest(X, LABELS)))
    return path, cfg


def _receipt(**changes) -> UploadReceipt:
    fields = {"federation_id": "f", "participant": "p0", "receipt": "ab" * 32,
              "received_at": "2026-12-04T20:00:00+00:00", "already_committed": False,
              "records": 6, "bytes": 1234, "analyst": "127.0.0.1:1"} | changes
    return UploadReceipt(**fields)


def test_a_kept_receipt_reads_back_and_a_missing_one_is_none(site):
    _, cfg = site
    assert load_receipt(cfg) is None
    keep_receipt(cfg, _receipt())
    assert load_receipt(cfg) == _receipt()
    assert oct(receipt_path(cfg).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(("text", "named"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"receipt": "ab"}', "already_committed, analyst, bytes"),
])
def test_a_corrupt_receipt_is_refused_naming_the_file_and_what_is_wrong(site, text, named):
    _, cfg = site
    receipt_path(cfg).write_text(text)
    with pytest.raises(InvalidInputError, match=named) as caught:
        load_receipt(cfg)
    assert str(receipt_path(cfg)) in str(caught.value)


def test_a_receipt_with_a_count_of_the_wrong_type_or_another_sites_is_refused(site):
    _, cfg = site
    keep_receipt(cfg, _receipt())
    value = json.loads(receipt_path(cfg).read_text())
    receipt_path(cfg).write_text(json.dumps(value | {"records": True}))
    with pytest.raises(InvalidInputError, match="wrong type: records"):
        load_receipt(cfg)
    keep_receipt(cfg, _receipt(participant="p1"))
    with pytest.raises(InvalidInputError, match="receipt of 'p1' in federation 'f', not of"):
        load_receipt(cfg)


def test_a_committed_upload_ends_the_kept_withdrawal(site):
    _, cfg = site
    keep_withdrawal(cfg, "p0's data: line 3 is bad")
    assert load_withdrawal(cfg)["reason"] == "p0's data: line 3 is bad"
    keep_receipt(cfg, _receipt())
    assert load_withdrawal(cfg) is None


def test_status_without_the_analyst_shows_what_the_site_keeps_and_says_so(site, capsys):
    path, cfg = site
    keep_receipt(cfg, _receipt())
    keep_last_status(cfg, {"federation_id": "f", "state": "collecting", "expected": ["p0", "p1"],
                           "committed": ["p0"], "withdrawn": []})
    assert main(["participant", "status", "--config", str(path)]) == 0
    text = capsys.readouterr().out
    assert "the analyst at 127.0.0.1:1 did not answer within 0.3 s: nothing listens" in text
    assert f"upload committed: receipt {'ab' * 32}, received 2026-12-04 20:00:00 UTC" in text
    assert "no site model kept yet" in text
    assert "federation f collecting, committed p0 of p0, p1" in text
    assert main(["participant", "status", "--json", "--config", str(path)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["analyst_reachable"] is False and status["source"] == "local"
    assert status["unreachable"]["address"] == "127.0.0.1:1"
    assert status["upload_receipt"]["receipt"] == "ab" * 32
    assert status["state"] == "collecting" and status["as_of"] is not None
    assert status["deadline_unix"] is None  # a key of the analyst's answer, not kept here
    assert status["site_model"]["kept"] is False and status["gain"] is None


def test_status_with_a_corrupt_receipt_names_the_file_and_shows_the_rest(site, capsys):
    path, cfg = site
    receipt_path(cfg).write_text("{not json")
    keep_withdrawal(cfg, "gave up")
    assert main(["participant", "status", "--config", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"upload receipt: {receipt_path(cfg)} does not hold an upload receipt" in captured.out
    assert "withdrew " in captured.out and "Traceback" not in captured.err


def test_status_of_a_site_that_keeps_nothing_fails_saying_so(site, capsys):
    path, _ = site
    assert main(["participant", "status", "--json", "--config", str(path)]) == 1
    captured = capsys.readouterr()
    assert "keeps nothing of federation 'f'" in captured.err
    assert json.loads(captured.out)["error"]["code"] == "UNAVAILABLE"


def test_a_rerun_of_a_committed_upload_answers_from_the_receipt(site, capsys):
    path, cfg = site
    keep_receipt(cfg, _receipt())
    assert main(["participant", "upload", "--config", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"p0: upload of 6 records (1234 bytes) already committed; receipt {'ab' * 32}, " \
           "received 2026-12-04 20:00:00 UTC (" in text
    assert f"ago), kept in {receipt_path(cfg)}" in text
    assert "the analyst could not be asked" in text and "nothing listens" in text
    # Other records than the uploaded ones: refused at once, naming the receipt.
    np.savez(cfg.data, x=X + 1, labels=LABELS)
    assert main(["participant", "upload", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "'p0' already uploaded at 2026-12-04T20:00:00+00:00, receipt abababababababab..." \
        in err and "nothing was sent" in err


def test_a_corrupt_receipt_stops_the_upload_naming_the_file(site, capsys):
    path, cfg = site
    receipt_path(cfg).write_text('{"receipt": 1}')
    assert main(["participant", "upload", "--config", str(path)]) == 1
    captured = capsys.readouterr()
    assert f"{receipt_path(cfg)} is not an upload receipt" in captured.err
    assert "Traceback" not in captured.err


def test_status_returns_from_an_analyst_address_that_accepts_but_never_answers(site, capsys):
    """A listener that never completes the TLS handshake (a stalled host, a wrong service):
    the connect attempt and the look for its cause are each bounded, so status still answers
    from the state folder."""
    path, cfg = site
    keep_receipt(cfg, _receipt())
    with socket.create_server(("127.0.0.1", 0)) as stalled:  # listens, never accepts
        address = f"127.0.0.1:{stalled.getsockname()[1]}"
        assert main(["participant", "status", "--config", str(path), "--analyst",
                     address]) == 0
    text = capsys.readouterr().out
    assert f"the analyst at {address} did not answer within 0.3 s; tried " in text
    assert f"upload committed: receipt {'ab' * 32}" in text
