"""50 participants, each with its own client certificate, agree on the anchor through the
analyst and upload concurrently to one analyst process; every upload commits and the alignment
runs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from noisyanchor.deploy.demo import participant_ids, write_participant
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.run import run_upload

pytestmark = pytest.mark.e2e

P, N, D, R = 50, 20, 4, 16


def test_fifty_participants_upload_concurrently_without_error(analyst, rng):
    ids = participant_ids(P)
    fed = analyst(ids, "aa-igdp-an", dim=D, anchors=R)
    configs = []
    for pid in ids:
        path = fed.files.root / "data" / f"{pid}.npz"
        path.parent.mkdir(exist_ok=True)
        np.savez(path, x=rng.standard_normal((N, D)), labels=rng.integers(0, 2, N),
                 tags=np.r_[np.zeros(N - 5), np.full(5, 2)].astype(np.int8))
        fed.files.data[pid] = path
        configs.append(load_participant_config(write_participant(
            fed.files, pid, federation_id="e2e", address=f"127.0.0.1:{fed.port}",
            method="aa-igdp-an", anchors=R, dim=None, projection_seed=None, sigma=0.0, v=0.01,
            timeout=120.0)))
    with ThreadPoolExecutor(max_workers=P) as pool:
        sent = list(pool.map(run_upload, configs))
    assert [s.participant for s in sent] == list(ids)
    assert not any(s.already_committed for s in sent)
    with fed.client("p0", timeout=60) as c:
        status = c.wait_for("the result", c.status, lambda s: s.state in ("done", "failed"))
    assert status.state == "done", status.error
    assert list(status.committed) == sorted(ids)
    result = json.loads(status.result_json)
    assert result["records"] == P * N and result["solver"]["converged"]
    assert list(result["row_ranges"]) == ["p0"]  # p0 sees its own rows only (issue 30)
