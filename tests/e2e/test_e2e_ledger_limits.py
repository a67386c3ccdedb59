"""The privacy ledger and the analyst's memory stay bounded against a hostile participant
(issue 9, "the ledger" and item 3), over real processes and mutual TLS: nearly free releases
are refused before they are charged, each participant may add at most ``[privacy]
participant_max_releases`` rows, the count survives a restart, one participant's exhausted quota
leaves the others served, and a Gram release needing more than ``[release] max_memory_bytes`` is
refused before it is charged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from e2e_support import release_federation, stop_federation

from noisyanchor.common.errors import BudgetExceededError, InvalidInputError
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.release_client import (
    load_key,
    release_gram,
    release_scores,
    transform_query,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IDS, N_I, D, R = ("p0", "p1"), 60, 6, 16
DELTA = 1e-5
MAX_RELEASES = 3


def _rows(fed) -> list[tuple[str, str]]:
    ledger = json.loads((fed.analyst.files.store / "privacy_ledger.json").read_text())
    return [(r["participant"], r["request_id"]) for rows in ledger["datasets"].values()
            for r in rows]


def test_a_participant_cannot_grow_the_ledger_past_its_release_count(tmp_path):
    rng = np.random.default_rng(3)
    fed = release_federation(
        tmp_path, IDS, [rng.standard_normal((N_I, D)) + 3.0 * np.eye(D)[k] for k in range(2)],
        dim=D, anchors=R, timeout=60.0,
        tables=f"[privacy]\nepsilon_budget = 1000.0\ndelta_budget = {DELTA}\n"
               f"participant_max_releases = {MAX_RELEASES}\n"
               # a Gram of the 120 records needs about 96 n^2 = 1.4 MB: above this cap
               "[release]\nmax_memory_bytes = 1048576\n")
    try:
        cfg = {pid: load_participant_config(fed.configs[pid]) for pid in IDS}
        query = {pid: transform_query(c, np.load(c.data)["x"][0], load_key(c))
                 for pid, c in cfg.items()}

        def ask(pid: str, rid: str, epsilon: float = 1.0):
            return release_scores(cfg[pid], query[pid], epsilon, DELTA, top_k=2, request_id=rid)

        # Releases that cost (next to) nothing are refused before any charge.
        for eps in (1e-300, 0.0, float("nan")):
            with pytest.raises(InvalidInputError, match=r"INVALID_ARGUMENT: epsilon=.* below "
                                                        r"this analyst's minimum 0\.01"):
                ask("p0", f"free-{eps}", eps)
        assert not (fed.analyst.files.store / "privacy_ledger.json").exists()
        for k in range(MAX_RELEASES):
            assert not ask("p0", f"r{k}").spend.repeated
        assert ask("p0", "r0").spend.repeated  # a repeat is answered, not charged again
        refusal = (r"RESOURCE_EXHAUSTED: participant 'p0''s release quota on dataset 'e2e' is "
                   rf"exhausted: {MAX_RELEASES} of {MAX_RELEASES} releases charged "
                   r"\(\[privacy\] participant_max_releases\); left: none")
        with pytest.raises(BudgetExceededError, match=refusal):
            ask("p0", "one-more")
        assert not ask("p1", "r0").spend.repeated  # the others are served
        fed.analyst.kill()
        fed.analyst.restart()
        with pytest.raises(BudgetExceededError, match=refusal):  # the count is on disk
            ask("p0", "after-restart")
        assert sorted(_rows(fed)) == [("p0", f"r{k}") for k in range(MAX_RELEASES)] + [
            ("p1", "r0")]
        with pytest.raises(BudgetExceededError, match=r"RESOURCE_EXHAUSTED: a Gram release of "
                           r"the 120 records needs about .* above \[release\] max_memory_bytes "
                           r"= .*; nothing was charged"):
            release_gram(cfg["p1"], 1.0, DELTA, request_id="too-big")
        assert not list((fed.analyst.files.store / "releases" / "p0").glob("one-more*"))
        assert not (fed.analyst.files.store / "releases" / "p1" / "too-big").exists()
        assert not (fed.analyst.files.store / "releases" / "p0" / "after-restart").exists()
    finally:
        stop_federation(fed)
