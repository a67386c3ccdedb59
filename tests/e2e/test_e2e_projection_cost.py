"""Issue 29: with a public projection F each site measures, on its own rows before it uploads,
what F costs its own model, says so in its log, and sends that one number only when the
project asks (result.json's projection_costs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisyanchor.common.splits import split_tags
from noisyanchor.deploy.demo import wait_for_result, write_analyst, write_participant
from noisyanchor.deploy.launch import start, stop, wait_for_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SITES = ("p0", "p1")


@pytest.mark.parametrize("report", [True, False])
def test_sites_measure_what_the_projection_costs_and_send_it_only_when_asked(tmp_path, report):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))[:800]
    data = {}
    for k, pid in enumerate(SITES):
        rows = order[k::2]
        data[pid] = tmp_path / "data" / f"{pid}.npz"
        data[pid].parent.mkdir(parents=True, exist_ok=True)
        np.savez(data[pid], x=x[rows], labels=y[rows], tags=split_tags(y[rows], rng))
    # 64 pixels to h = 4 columns: far too few for ten digits, a cost well above the noise.
    files = write_analyst(tmp_path, SITES, federation_id="cost", method="aa-igdp", anchors=None,
                          dim=4, sigma=0.0, v=0.0, accept_collusion=False, data=data,
                          extra={"federation": {"report_projection_cost": report}})
    procs = [start(["analyst", "serve", "--config", files.analyst_config],
                   tmp_path / "analyst.log")]
    try:
        port = wait_for_port(files.port_file, procs[0])
        for pid in SITES:
            config = write_participant(files, pid, federation_id="cost",
                                       address=f"127.0.0.1:{port}", method="aa-igdp",
                                       anchors=None, dim=4, projection_seed=7, sigma=0.0, v=0.0)
            procs.append(start(["participant", "upload", "--config", config],
                               tmp_path / f"{pid}.log"))
        for proc in procs[1:]:
            assert proc.wait(240) == 0
        result = wait_for_result(files.store, procs[0], 240, tmp_path / "analyst.log")
    finally:
        for proc in procs:
            stop(proc)
    for pid in SITES:
        log = (tmp_path / f"{pid}.log").read_text()
        assert "the public projection F (64 -> 4 columns) costs this site's own model +0." in log
        assert "more than the noise of the measurement" in log  # the warning
        assert ("sent with the upload" in log) == report
    if report:
        costs = result["projection_costs"]
        assert set(costs) == set(SITES) and all(0.1 < c < 1 for c in costs.values())
        assert json.loads((files.store / "result" / "result.json").read_text()) == result
    else:
        assert "projection_costs" not in result
