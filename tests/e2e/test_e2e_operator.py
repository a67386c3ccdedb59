"""An operator's changes to a running pilot, over real processes and mutual TLS (issue 25): the
CA renewed while sites hold kits shipped before it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
