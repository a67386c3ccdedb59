"""noisyanchor installs beside Flower: pip resolves the project together with ``flwr==1.42.*``
(whose ``protobuf<7`` the checked-in generated code must accept).

Needs the package index; skipped, with the reason, when pip cannot reach it.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOWER = "flwr==1.42.*"

pytestmark = [pytest.mark.slow, pytest.mark.network]


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=600)


def test_pip_resolves_the_project_beside_flower(tmp_path):
    report = tmp_path / "report.json"
    # --ignore-installed: a fresh environment's resolution, not this one's upgrades;
    # --no-build-isolation: the project's metadata from this environment's setuptools, offline.
    run = _pip("install", "--dry-run", "--quiet", "--ignore-installed", "--no-build-isolation",
               "--report", str(report), FLOWER, str(ROOT))
    if run.returncode != 0:
        probe = _pip("index", "versions", "flwr")
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"the package index is unreachable (pip index versions flwr: {last})")
    assert run.returncode == 0, run.stderr
    chosen = {item["metadata"]["name"]: item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    assert chosen["flwr"].startswith("1.42.")
    assert "noisyanchor" in chosen
    assert int(chosen["protobuf"].split(".")[0]) < 7  # Flower's ceiling, met by our code
