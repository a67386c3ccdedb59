"""A site whose table holds a column in another unit, over real processes (issue 29, item 4):
the analyst's screening names it before anything is aligned (the default ``refuse``), the
operator and every other site see which site and why, and once the site fixes its table and
runs its upload again the federation completes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from e2e_support import FEDERATION, wait_until
from test_e2e_tabular import IDS, _federation, _table

from noisyanchor.analyst.screening import REFUSED
from noisyanchor.deploy.launch import child_env, start, stop
from noisyanchor.participant.anchor import exchange_key_path
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.predict import site_model
from noisyanchor.participant.run import analyst_status

pytestmark = pytest.mark.e2e


def _cli(*args: object) -> str:
    done = subprocess.run([sys.executable, "-m", "noisyanchor", *map(str, args)],
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _upload_all(files, configs, logs, sites=IDS) -> None:
    procs = {pid: start(["participant", "upload", "--config", configs[pid]], logs[pid])
             for pid in sites}
    try:
        assert {p: procs[p].wait(120) for p in sites} == dict.fromkeys(sites, 0), \
            {p: logs[p].read_text()[-600:] for p in sites}
    finally:
        for proc in procs.values():
            stop(proc)


def test_a_site_in_another_unit_is_refused_before_alignment_then_fixed_and_the_federation_completes(
        tmp_path):
    with _federation(tmp_path) as (files, configs):
        files.data["p0"].parent.mkdir(exist_ok=True)
        for pid in IDS:
            files.data[pid].write_text(_table(30))
        # p1 exported its areas in um2 (10^6 of the declared mm2).
        files.data["p1"].write_text("\n".join(
            ",".join(f"{float(c) * 1e6:g}" if k == 1 and n else c
                     for k, c in enumerate(row.split(",")))
            for n, row in enumerate(_table(30).split("\n"))))
        logs = {pid: files.root / f"{pid}.log" for pid in IDS}
        _upload_all(files, configs, logs)
        cfg = load_participant_config(configs["p0"])
        assert wait_until(lambda: bool(analyst_status(cfg).withdrawn), 120)
        status = analyst_status(cfg)
        assert status.state == "collecting" and list(status.committed) == ["p0", "p2"]
        [told] = status.withdrawn
        assert told.participant_id == "p1" and told.reason.startswith(REFUSED), told.reason
        assert "two of p1's records lie" in told.reason and "box of diagonal" in told.reason
        assert not (files.store / "result").exists()  # nothing aligned
        # Every other site's status and the operator's name the site and why (never data).
        shown = _cli("participant", "status", "--config", configs["p2"])
        assert f"p1 withdrew: {REFUSED}" in shown and "participant upload' again" in shown
        operator = _cli("analyst", "status", "--config", files.analyst_config)
        assert f"p1 withdrew: {REFUSED}" in operator
        assert "screening (policy refuse): p1" in (files.root / "analyst.log").read_text()
        # p1 fixes its export and runs its upload again: screened again, aligned, done.
        files.data["p1"].write_text(_table(30))
        _upload_all(files, configs, logs, ("p1",))
        assert wait_until(lambda: analyst_status(cfg).state == "done", 120)
        result = json.loads(analyst_status(cfg).result_json)
        assert result["participants"] == list(IDS)
        assert result["screening"]["policy"] == "refuse" and result["screening"]["findings"] == []
        # Done: a site forgets its exchange key once it has fetched its site model.
        keys = {pid: exchange_key_path(load_participant_config(configs[pid]).state_dir,
                                       FEDERATION) for pid in IDS}
        assert all(path.is_file() for path in keys.values())
        site_model(cfg)
        assert [pid for pid, path in keys.items() if path.is_file()] == ["p1", "p2"]
