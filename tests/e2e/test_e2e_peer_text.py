"""Peer text (issue 22, item 5) over real processes: a withdrawal reason carrying terminal
escape sequences, a right-to-left override, zero-width characters and forged log lines reaches
the analyst's store, its log and the other participants' Status without any control or format
character."""

from __future__ import annotations

import unicodedata

import pytest

pytestmark = pytest.mark.e2e

HOSTILE = ("data error\x1b[2J\x1b[1;31m\n2026-01-01 00:00:00 noisyanchor INFO org-b committed "
           "upload\u202e txt.exe\u200b\ufeff\x9b0m\x07")


def _clean(text: str) -> bool:
    return not any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


def test_a_withdrawal_reason_is_stored_logged_and_relayed_without_control_characters(analyst):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=8, anchors=16)
    with fed.client("p0") as c:
        c.withdraw(HOSTILE)
    with fed.client("p1") as c:
        (withdrawal,) = c.status().withdrawn
    assert withdrawal.participant_id == "p0" and _clean(withdrawal.reason)
    assert withdrawal.reason.startswith("data error[2J[1;31m 2026-01-01 00:00:00 noisyanchor")
    stored = (fed.files.store / "withdrawn" / "p0.txt").read_text()
    assert stored == withdrawal.reason
    log = fed.log.read_text()
    line = next(x for x in log.splitlines() if "p0 withdrew" in x)
    assert _clean(line) and "txt.exe" in line
    assert "\x1b" not in log and "\u202e" not in log
    # the forged line stayed inside the withdrawal's own line
    assert not any(x.startswith("2026-01-01 00:00:00") for x in log.splitlines())


def test_long_peer_text_is_cut_before_it_is_read_and_ids_refused_unechoed(analyst, tmp_path):
    """Issue 30, item 2: a participant's 3 MiB requested ids (another site's model, another
    federation) are refused without being echoed, 3.9 MB withdrawal reasons are stored cut,
    and refusals and withdrawals with distinct texts leave a bounded text and JSON log, no
    record longer than the formatter's maximum."""
    import json

    import grpc

    from noisyanchor.analyst.edge import REFUSALS_LOGGED
    from noisyanchor.common.errors import InvalidInputError
    from noisyanchor.common.logs import MAX_RECORD_BYTES
    from noisyanchor.protos.v1 import analyst_pb2 as pb

    json_log = tmp_path / "analyst.jsonl"
    fed = analyst(["p0", "p1"], "aa-igdp", dim=8, anchors=16,
                  extra={"server": {"log_json": json_log}})
    before = fed.log.stat().st_size
    huge = "x" * (3 << 20)
    with fed.client("p0") as c:
        with pytest.raises(InvalidInputError) as refused:
            c.fetch_site_model("p1" + huge)
        assert "participant_id is not an id" in str(refused.value)
        assert len(str(refused.value)) < 1000
        with pytest.raises(grpc.RpcError) as other:
            c.stub.Status(pb.StatusRequest(federation_id="e2e" + huge), timeout=60)
        assert other.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert len(other.value.details()) < 1000 and "xxxxxxxx" not in other.value.details()
        for k in range(40):  # different federation ids: each refusal's text differs
            with pytest.raises(grpc.RpcError) as other:
                c.stub.Status(pb.StatusRequest(federation_id=f"f{k}-" + "y" * 60), timeout=30)
            assert other.value.code() == grpc.StatusCode.PERMISSION_DENIED
        for k in range(3 * REFUSALS_LOGGED):  # a site repeating its withdrawal, new text each
            c.withdraw(f"{k}" + "\u00e9" * 1_950_000)
    with fed.client("p1") as c:
        (withdrawal,) = c.status().withdrawn
    last = f"{3 * REFUSALS_LOGGED - 1}" + "\u00e9" * 1_950_000
    assert withdrawal.reason == last[:2000]  # MAX_PEER_TEXT
    text = fed.log.read_text()
    grown = fed.log.stat().st_size - before
    assert grown < 64 << 10, grown
    assert text.count("p0 withdrew: ") <= REFUSALS_LOGGED
    assert "x" * 100 not in text
    records = [json.loads(line) for line in json_log.read_text().splitlines()]
    assert max(len(r["message"].encode()) for r in records) <= MAX_RECORD_BYTES + 100
    assert json_log.stat().st_size < 128 << 10
