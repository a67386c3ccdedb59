"""The README's one-host quick start, run as written by a new operator (issue 25): every line of
its block in order, counted, from the install to every site's predictions on records it held
back; nothing edited, nothing added. The install line is counted and run only with
NOISYANCHOR_QUICKSTART_INSTALL=1 (CI installed the package before the tests run)."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest

from noisyanchor.deploy.quickstart import INSTALL, quickstart_commands, run_quickstart

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"
SITES = ("org-a", "org-b", "org-c")

#: The issue's ceiling on the commands from the install to every site's prediction.
MOST_COMMANDS = 8


def _column(path: Path, name: str) -> list[str]:
    with path.open(newline="") as fh:
        return [row[name] for row in csv.DictReader(fh)]


def test_the_readme_quick_start_runs_as_written_in_at_most_8_commands(tmp_path):
    commands = quickstart_commands(README)
    assert commands[0].startswith(INSTALL) and "participant predict" in commands[-1]
    assert len(commands) <= MOST_COMMANDS, commands
    stated = re.search(r"in (\d+) commands from install to every site's\s+predictions",
                       README.read_text())
    assert stated and int(stated.group(1)) == len(commands)  # the README's figure is the count
    run = run_quickstart(tmp_path, README,
                         install=os.environ.get("NOISYANCHOR_QUICKSTART_INSTALL") == "1",
                         timeout=900)
    assert run.returncode == 0, run.output[-4000:]
    # The operator saw whom the federation waited for, then the model, then every site's gain.
    assert "waiting for" in run.output and "federation local-pilot: done" in run.output
    assert "model logistic: held-out balanced accuracy" in run.output
    gains = []
    for site in SITES:
        data = tmp_path / "kits" / site / "data"
        truth = _column(data / f"{site}-new-labels.csv", "label")
        predicted = _column(tmp_path / f"{site}-predictions.csv", "label")
        assert len(predicted) == len(truth) > 0  # one prediction per held-back record
        accuracy = sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth)
        # Digits, ten classes (chance 0.1); the federation's model scores ~0.87 held out.
        assert accuracy > 0.7, (site, accuracy)
        assert f"{site}: predicted {len(truth)} records" in run.output
        # Issue 29: every site is told its gain with its 95% interval, and no site is told it
        # lost (no interval wholly below 0). The template has no public projection, which made
        # every site lose (intervals wholly below 0). One run's point estimate at one site moves
        # by about +-0.02 with its test rows: over 10 seeds every site gains on average
        # (benchmarks/results/site_gain.json); one run of three sites can average slightly below
        # 0 (-0.003 seen), so the run's mean is held to that spread, not to a gain.
        gain = json.loads((tmp_path / "kits" / site / "state" / "gain.json").read_text())
        assert gain["gain_not_told"] is None and gain["test_rows"] >= 20, (site, gain)
        low, high = gain["gain_interval"]
        assert low <= gain["gain"] <= high and high >= 0, (site, gain)  # [0, 0]: both perfect
        assert re.search(rf"on {site}'s \d+ test rows: [+-]\d\.\d+ balanced accuracy from "
                         r"joining, 95% interval \[", run.output), site
        gains.append(gain["gain"])
    assert sum(gains) / len(gains) > -0.02, gains  # no loss beyond one run's spread
    assert "analyst running (health SERVING)" in run.output
