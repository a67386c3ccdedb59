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


def test_long_peer_text_is_cut_before_it_is_read_and_ids_refused_unechoed(analyst):
    """Issue 30, item 2: a 3 MiB requested id is refused without being echoed, a 3.9 MB
    withdrawal reason is stored cut, and a stream of refusals with distinct texts leaves a
    bounded log."""
    import grpc

    from noisyanchor.common.errors import InvalidInputError
    from noisyanchor.protos.v1 import analyst_pb2 as pb

    fed = analyst(["p0", "p1"], "aa-igdp", dim=8, anchors=16)
    before = fed.log.stat().st_size
    with fed.client("p0") as c:
        with pytest.raises(InvalidInputError) as refused:
            c.fetch_site_model("x" * (3 << 20))
        assert "participant_id is not an id" in str(refused.value)
        assert len(str(refused.value)) < 1000
        for k in range(40):  # different federation ids: each refusal's text differs
            with pytest.raises(grpc.RpcError) as other:
                c.stub.Status(pb.StatusRequest(federation_id=f"f{k}-" + "y" * 60), timeout=30)
            assert other.value.code() == grpc.StatusCode.PERMISSION_DENIED
        c.withdraw("\u00e9" * 1_950_000)
    with fed.client("p1") as c:
        (withdrawal,) = c.status().withdrawn
    assert withdrawal.reason == "\u00e9" * 2000  # MAX_PEER_TEXT
    grown = fed.log.stat().st_size - before
    assert grown < 64 << 10, grown
