"""The analyst killed (SIGKILL) 30 times in a row at seeded random points (issue 9, "Must show"):
during the anchor agreement and the uploads of real participant processes, then during DP
releases and their ledger writes, with clients that keep asking throughout.

After every kill, before the restart, the store on disk is checked: no charge the ledger held
before is gone, every release a client was answered before the kill is charged, every release
output on disk is charged, and no request is charged twice. After every restart the analyst
answers Status within 10 s and still holds every upload a participant was acknowledged.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from e2e_support import ReleaseFederation, start_release_federation, start_uploads, stop_federation

from noisyanchor.common.errors import NoisyAnchorError
from noisyanchor.deploy.demo import wait_for_result
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.release_client import (
    load_key,
    release_gram,
    release_scores,
    transform_query,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.extended]  # 30 kills: ~1 min

IDS, N_I, D, R = ("p0", "p1", "p2"), 40, 6, 16
DELTA = 1e-5
KILLS, SEED = 30, 2026
#: Kills while the participant processes agree on the anchor and upload (at most).
AGREEMENT_KILLS = 8
#: Seconds a restarted analyst may take to answer Status (the issue's bound).
SERVE_WITHIN = 10.0
TIMEOUT = 90.0


def _charges(store: Path) -> list[tuple[str, str]]:
    """``(participant, request id)`` of every ledger row (the file as a kill left it)."""
    path = store / "privacy_ledger.json"
    if not path.is_file():
        return []
    return [(row["participant"], row["request_id"])
            for rows in json.loads(path.read_text())["datasets"].values() for row in rows]


def _outputs(store: Path) -> set[tuple[str, str]]:
    """Releases whose output is on disk (a score reply or a Gram's done marker)."""
    return {(f.parent.parent.name, f.parent.name) for name in ("reply.pb", "header.pb")
            for f in (store / "releases").glob(f"*/*/{name}")}


class _Releases:
    """Clients that ask for releases until stopped, each with fresh request ids (a score
    release per participant, and p0's Gram releases); the ids they were answered for."""

    def __init__(self, fed: ReleaseFederation) -> None:
        self.fed, self.stop = fed, threading.Event()
        self.answered: set[tuple[str, str]] = set()
        self.refused: Counter = Counter()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._scores, args=(pid,)) for pid in IDS]
        self.threads.append(threading.Thread(target=self._grams))

    def _loop(self, pid: str, kind: str, ask) -> None:
        k = 0
        while not self.stop.is_set():
            rid = f"{kind}-{k}"
            try:
                ask(rid)  # retried by the client while the analyst is down: same id
            except NoisyAnchorError as err:  # e.g. a score still being computed: ask afresh
                with self.lock:
                    self.refused[type(err).__name__] += 1
            else:
                with self.lock:
                    self.answered.add((pid, rid))
            k += 1

    def _scores(self, pid: str) -> None:
        cfg = load_participant_config(self.fed.configs[pid])
        t = transform_query(cfg, np.load(cfg.data)["x"][0], load_key(cfg))
        self._loop(pid, "score", lambda rid: release_scores(cfg, t, 1.0, DELTA, top_k=3,
                                                              request_id=rid))

    def _grams(self) -> None:
        cfg = load_participant_config(self.fed.configs["p0"])
        self._loop("p0", "gram", lambda rid: release_gram(cfg, 1.0, DELTA, request_id=rid,
                                                            poll=0.05))

    def snapshot(self) -> set[tuple[str, str]]:
        with self.lock:
            return set(self.answered)

    def __enter__(self) -> _Releases:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(TIMEOUT)


def test_the_analyst_killed_30_times_at_random_points_loses_nothing(tmp_path):
    rng = np.random.default_rng(SEED)
    chooser = random.Random(SEED)
    records = [rng.standard_normal((N_I, D)) + 3.0 * np.eye(D)[k] for k in range(len(IDS))]
    fed = start_release_federation(
        tmp_path, IDS, records, dim=D, anchors=R, timeout=TIMEOUT,
        tables="[privacy]\nepsilon_budget = 100000.0\ndelta_budget = 1e-05\n",
        extra={"model": {"name": "none"}})
    analyst, store = fed.analyst, fed.analyst.files.store
    acknowledged: set[str] = set()  # uploads whose participant was answered (exit 0)
    charged: list[tuple[str, str]] = []
    kills: list[str] = []

    def kill_and_check(where: str, answered: set[tuple[str, str]]) -> None:
        nonlocal charged
        analyst.kill()
        kills.append(where)
        now = _charges(store)
        assert len(now) == len(set(now)), f"kill {len(kills)}: a release was charged twice"
        assert set(charged) <= set(now), f"kill {len(kills)} ({where}): charges were lost"
        assert answered <= set(now), f"kill {len(kills)}: answered releases not charged: " \
                                     f"{sorted(answered - set(now))}"
        assert _outputs(store) <= set(now), f"kill {len(kills)}: an output without a charge"
        charged = now
        began = time.monotonic()
        analyst.restart()
        with analyst.client("p1", timeout=SERVE_WITHIN) as c:
            committed = set(c.status().committed)
        assert time.monotonic() - began <= SERVE_WITHIN, f"kill {len(kills)}: slow to serve"
        assert acknowledged <= committed, f"kill {len(kills)}: acknowledged uploads lost"

    try:
        # Agreement and uploads: real participant processes, retrying while the analyst is down.
        uploads = dict(zip(IDS, start_uploads(fed), strict=True))
        while len(kills) < AGREEMENT_KILLS and any(p.poll() is None for p in uploads.values()):
            time.sleep(chooser.uniform(0.1, 1.5))
            acknowledged |= {pid for pid, p in uploads.items() if p.poll() == 0}
            kill_and_check("agreement/uploads", set())
        for pid, p in uploads.items():
            assert p.wait(TIMEOUT) == 0, (tmp_path / f"{pid}.log").read_text()[-2000:]
        acknowledged = set(IDS)
        wait_for_result(store, analyst.proc, TIMEOUT)
        # Releases and their ledger writes: the clients keep asking; each kill comes a random
        # moment after a new answer, so it falls while releases are being charged and computed.
        with _Releases(fed) as clients:
            while len(kills) < KILLS:
                seen = len(clients.snapshot())
                deadline = time.monotonic() + TIMEOUT
                while len(clients.snapshot()) == seen and time.monotonic() < deadline:
                    time.sleep(0.02)
                time.sleep(chooser.uniform(0.0, 0.6))
                kill_and_check("releases", clients.snapshot())
        answered = clients.snapshot()
        final = _charges(store)
        assert answered <= set(final) and len(final) == len(set(final))
        assert _outputs(store) <= set(final)
        assert len(kills) == KILLS and kills.count("releases") >= KILLS - AGREEMENT_KILLS
        assert {pid for pid, _ in answered} == set(IDS)  # every client got releases through
        assert any(rid.startswith("gram-") for _, rid in answered)
        with analyst.client("p2") as c:
            status = c.status()
        assert status.state == "done" and sorted(status.committed) == list(IDS)
        assert "Traceback" not in analyst.log.read_text(errors="replace")
        print(f"{len(kills)} kills ({Counter(kills)}); {len(answered)} releases answered, "
              f"{len(final)} charged; refusals {dict(clients.refused)}")
    finally:
        stop_federation(fed)
