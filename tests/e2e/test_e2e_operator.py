"""An operator's changes to a running pilot, over real processes and mutual TLS (issue 25): the
CA renewed while sites hold kits shipped before it; a late site named by every wait and
status, and a deadline extended while the others wait."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from e2e_support import wait_until

from noisyanchor import deploy
from noisyanchor.deploy.demo import wait_for_result
from noisyanchor.deploy.launch import start, stop
from noisyanchor.deploy.pilot import SITES, write_site_data
from noisyanchor.deploy.provision import provision

pytestmark = pytest.mark.e2e

LOCAL = Path(deploy.__file__).parent / "templates" / "federation-local.toml"


def test_sites_holding_kits_shipped_before_a_ca_renewal_still_take_part(tmp_path):
    project = tmp_path / "federation.toml"
    shutil.copy(LOCAL, project)
    kits = provision(project).out
    write_site_data(kits)
    shipped = tmp_path / "shipped"  # what org-a and org-b received before the renewal
    for site in SITES[:2]:
        shutil.copytree(kits / site, shipped / site)
    renewed = provision(project, renew=("ca",))
    assert set(renewed.changed) == {"analyst", *SITES}
    assert (shipped / "org-a" / "pki" / "ca.pem").read_bytes() != \
        (kits / "analyst" / "pki" / "ca.pem").read_bytes()
    logs = tmp_path / "logs"
    procs = {"analyst": start(["analyst", "serve", "--config", kits / "analyst" / "analyst.toml"],
                              logs / "analyst.log")}
    try:
        # org-a and org-b trust the previous CA certificate, org-c and the analyst the new one:
        # each side's chain, and each site's check of the others' signed exchange keys, hold.
        for site in SITES:
            kit = shipped / site if site in SITES[:2] else kits / site
            procs[site] = start(["participant", "upload", "--config", kit / f"{site}.toml"],
                                logs / f"{site}.log")
        for site in SITES:
            assert procs[site].wait(300) == 0, (logs / f"{site}.log").read_text()[-2000:]
        result = wait_for_result(kits / "analyst" / "store", procs["analyst"], 120,
                                 logs / "analyst.log")
    finally:
        for proc in procs.values():
            stop(proc)
    assert result["participants"] == list(SITES) and result["model"]["n_test"] > 0


def _run(args: list, log: Path, timeout: float = 120) -> str:
    assert start(args, log).wait(timeout) == 0, log.read_text()[-2000:]
    return log.read_text()


@pytest.mark.slow
@pytest.mark.extended  # outlives a 75 s deadline by design
def test_a_late_site_is_named_everywhere_and_a_deadline_extended_meanwhile_is_followed(
        tmp_path):
    """Two sites wait for a third: their messages, `participant status` and `analyst status`
    name it; the operator extends the deadline and restarts the analyst; the waiting sites
    outlive the old deadline and finish once the late site runs; a done federation's deadline
    is not extended."""
    project = tmp_path / "federation.toml"
    project.write_text(LOCAL.read_text().replace('"in 7 days"', '"in 75 seconds"'))
    kits = provision(project).out
    old_deadline = time.monotonic() + 75
    write_site_data(kits)
    logs = tmp_path / "logs"
    analyst_args = ["analyst", "serve", "--config", kits / "analyst" / "analyst.toml"]
    procs = {"analyst": start(analyst_args, logs / "analyst.log")}
    try:
        for site in SITES[:2]:
            procs[site] = start(["participant", "upload", "--config", kits / site /
                                 f"{site}.toml"], logs / f"{site}.log")
        behind = "waiting for org-c to publish their exchange keys, after which org-a seals " \
                 "the anchor seed"
        assert wait_until(lambda: behind in (logs / "org-b.log").read_text(), 60), \
            (logs / "org-b.log").read_text()
        assert wait_until(lambda: "waiting for org-c to publish their exchange keys (" in
                          (logs / "org-a.log").read_text(), 30)
        site_view = _run(["participant", "status", "--config", kits / "org-b" / "org-b.toml"],
                         logs / "status-org-b.log")
        analyst_view = _run(["analyst", "status", "--config", kits / "analyst" /
                             "analyst.toml"], logs / "status-analyst.log")
        for text in (site_view, analyst_view):
            assert "exchange keys 2 of 3, missing org-c" in text
            assert "waiting for org-c to publish their exchange keys" in text
            assert re.search(r"deadline \S+ \S+ UTC \(in (\d+ min( \d+ s)?|\d+(\.\d)? s)\)", text)
        assert "analyst running (health SERVING)" in analyst_view
        moved = _run(["analyst", "deadline", "--config", kits / "analyst" / "analyst.toml",
                      "--extend", "in 10 minutes"], logs / "extend.log")
        # a second may pass between the command reading the clock and printing
        assert re.search(r"\(in (10 min( [0-5] s)?|9 min 5\d s)\)", moved), moved
        stop(procs["analyst"])
        procs["analyst"] = start(analyst_args, logs / "analyst-2.log")
        time.sleep(max(0.0, old_deadline - time.monotonic()) + 5)
        for site in SITES[:2]:  # still waiting, past the deadline they first read
            assert procs[site].poll() is None, (logs / f"{site}.log").read_text()[-2000:]
        assert "the federation's deadline moved to " in (logs / "org-b.log").read_text()
        procs["org-c"] = start(["participant", "upload", "--config", kits / "org-c" /
                                "org-c.toml"], logs / "org-c.log")
        for site in SITES:
            assert procs[site].wait(300) == 0, (logs / f"{site}.log").read_text()[-2000:]
        result = wait_for_result(kits / "analyst" / "store", procs["analyst"], 120,
                                 logs / "analyst-2.log")
        assert result["model"]["n_test"] > 0
        done = _run(["participant", "status", "--config", kits / "org-a" / "org-a.toml"],
                    logs / "status-done.log")
        assert "federation local-pilot: done" in done
        assert "model logistic: held-out balanced accuracy" in done
        refused = start(["analyst", "deadline", "--config", kits / "analyst" / "analyst.toml",
                         "--extend", "in 1 day"], logs / "refused.log")
        assert refused.wait(60) == 1
        assert "is done" in (logs / "refused.log").read_text()
    finally:
        for proc in procs.values():
            stop(proc)
