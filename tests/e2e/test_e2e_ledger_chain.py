"""A ledger that cannot be lost or trimmed quietly (issue 22, item 4), over real processes and
mutual TLS: a federation pays for score releases, the analyst is stopped, and its ledger is
deleted, stripped of one row, edited or replaced by an older copy; every restart refuses naming
the ledger, and deletes no paid output. With the ledger put back, the analyst serves again and
a repeated release is answered at no charge."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from e2e_support import release_federation, stop_federation

from noisyanchor.deploy.launch import child_env, stop
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.release_client import load_key, release_scores, transform_query

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IDS, N_I, D, R = ("p0", "p1"), 30, 6, 16
DELTA = 1e-5


def _refused_start(fed) -> str:
    done = subprocess.run([sys.executable, "-m", "noisyanchor", "analyst", "serve", "--config",
                           str(fed.analyst.files.analyst_config)], capture_output=True,
                          text=True, timeout=90, env=child_env())
    assert done.returncode == 1, done.stderr[-2000:]
    return done.stderr


def test_a_lost_trimmed_or_edited_ledger_stops_the_analyst_and_keeps_paid_outputs(tmp_path):
    rng = np.random.default_rng(7)
    fed = release_federation(
        tmp_path, IDS, [rng.standard_normal((N_I, D)) + 3.0 * np.eye(D)[k] for k in range(2)],
        dim=D, anchors=R, timeout=60.0,
        tables=f"[privacy]\nepsilon_budget = 100.0\ndelta_budget = {DELTA}\n")
    store = fed.analyst.files.store
    ledger = store / "privacy_ledger.json"
    try:
        cfg = load_participant_config(fed.configs["p0"])
        query = transform_query(cfg, np.load(cfg.data)["x"][0], load_key(cfg))
        first = [release_scores(cfg, query, 1.0, DELTA, top_k=2, request_id=f"r{k}")
                 for k in range(3)]
        stop(fed.analyst.proc)
        outputs = sorted(p.relative_to(store) for p in (store / "releases").rglob("*.pb"))
        assert len(outputs) == 3
        good = ledger.read_text()

        ledger.unlink()  # deleted, or its volume not mounted
        assert "privacy_ledger.json is missing, but 3 charges were recorded" in \
            _refused_start(fed)

        doc = json.loads(good)
        doc["datasets"]["e2e"].pop()  # the last row removed
        ledger.write_text(json.dumps(doc))
        assert "has 2 rows, but 3 charges were recorded" in _refused_start(fed)

        doc = json.loads(good)
        doc["datasets"]["e2e"][0]["sigma"] *= 10  # a charge made to look cheaper
        ledger.write_text(json.dumps(doc))
        assert "row 0 (dataset 'e2e', participant 'p0', request 'r0') does not continue" in \
            _refused_start(fed)

        # Ledger and head both gone: the paid job folders still tell, and nothing is deleted.
        ledger.unlink()
        (store / "ledger.head.json").unlink()
        assert "was charged" in _refused_start(fed) and "has no row for it" in \
            _refused_start(fed)
        assert sorted(p.relative_to(store) for p in (store / "releases").rglob("*.pb")) == \
            outputs

        ledger.write_text(good)
        (store / "ledger.head.json").write_text(json.dumps(
            {"rows": 3, "chain": max(json.loads(good)["datasets"]["e2e"],
                                     key=lambda r: r["seq"])["chain"]}))
        fed.analyst.restart()
        again = release_scores(cfg, query, 1.0, DELTA, top_k=2, request_id="r1")
        assert again.spend.repeated
        np.testing.assert_array_equal(again.scores, first[1].scores)  # the same release, kept
        assert sum(len(v) for v in json.loads(ledger.read_text())["datasets"].values()) == 3
    finally:
        stop_federation(fed)
