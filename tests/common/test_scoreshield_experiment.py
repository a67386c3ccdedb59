"""Smoke test of ``noisyanchor experiment scores`` at a tiny size (seconds, not minutes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")


@pytest.mark.slow
def test_scores_experiment_writes_json_figures_and_markdown(tmp_path: Path, capsys) -> None:
    from noisyanchor.cli import main

    out = tmp_path / "scores"
    code = main(["experiment", "scores", "--n", "60", "--queries", "30", "--epsilons", "1,1000",
                 "--scaling-n", "30,60", "--aap-iter", "3", "--dykstra-iter", "3",
                 "--scaling-iter", "3", "--no-spectral", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    for name in ("summary.json", "summary.md", "regime_i.png", "regime_ii.png", "scaling.png"):
        assert (out / name).exists(), name
    assert set(summary["regime_ii"]["calibrations"]) == {"record", "per_entry"}
    record = summary["regime_ii"]["calibrations"]["record"]["epsilons"]
    assert record[0]["sigma"] > record[1]["sigma"]
    for row in record:
        assert row["aap"]["projection"]["min_eigenvalue"] >= -1e-8
        # projection never makes the Frobenius error worse than the raw noisy release here
        assert row["aap"]["frobenius_sq_error"] < row["noisy"]["frobenius_sq_error"]
    text = (out / "summary.md").read_text()
    assert "NOT record-level DP" in text and "Command:" in text
