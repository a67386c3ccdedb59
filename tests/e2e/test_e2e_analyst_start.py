"""The analyst listens before it imports what only computing needs (issue 22): a restarted
analyst must answer within seconds on a loaded host, and importing scipy's statistics,
scikit-learn (with pandas) or matplotlib once cost it most of its start.

A real ``analyst serve`` process runs with ``-X importtime``, whose lines reach stderr in import
order together with the log; every module imported before the "serving" line is checked.
Without a ``[privacy]`` table nothing of scipy is imported before listening; with one, the
budget's analytic calibration (a root find, checked before serving so that a bad budget refuses
the start) needs ``scipy.optimize`` and ``scipy.special``, but nothing else heavy.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from e2e_support import FEDERATION, wait_until

from noisyanchor.deploy.demo import write_analyst
from noisyanchor.deploy.launch import child_env, stop, wait_for_port

pytestmark = pytest.mark.e2e

#: Packages only computing, fitting or plotting needs.
HEAVY = ("scipy", "sklearn", "pandas", "matplotlib")
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$")


def _imported_before_listening(tmp_path, extra: dict) -> set[str]:
    files = write_analyst(tmp_path, ("p0", "p1"), federation_id=FEDERATION, method="aa-igdp",
                          anchors=16, dim=8, sigma=None, v=None, accept_collusion=False,
                          extra=extra)
    log = tmp_path / "analyst.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "noisyanchor",
                                 "analyst", "serve", "--config", str(files.analyst_config)],
                                stdout=out, stderr=subprocess.STDOUT, env=child_env())
    try:
        wait_for_port(files.port_file, proc)
        assert wait_until(lambda: " serving aa-igdp on " in log.read_text(), 30)
    finally:
        stop(proc)
    before = log.read_text().split(" serving aa-igdp on ")[0]
    modules = {m.group(1) for m in map(IMPORTED.match, before.splitlines()) if m}
    assert "grpc" in modules and "numpy" in modules  # the lines were read
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_the_analyst_listens_before_importing_scipy_or_scikit_learn(tmp_path):
    assert _imported_before_listening(tmp_path / "plain", {}) == set()


def test_with_a_privacy_budget_only_its_calibration_is_imported_first(tmp_path):
    heavy = _imported_before_listening(
        tmp_path / "privacy", {"privacy": {"epsilon_budget": 10.0, "delta_budget": 1e-5}})
    packages = {".".join(m.split(".")[:2]) for m in heavy}
    assert {"scipy.optimize", "scipy.special"} <= packages  # the budget is calibrated
    assert not packages & {"scipy.stats", "sklearn", "pandas", "matplotlib"}, sorted(packages)
