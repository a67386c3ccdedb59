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
    from noisyanchor.common.json_vocabulary import problems

    out = tmp_path / "scores"
    code = main(["experiment", "scores", "--n", "60", "--queries", "30", "--epsilons", "1,1000",
                 "--scaling-n", "30,60", "--aap-iter", "3", "--dykstra-iter", "3",
                 "--scaling-iter", "3", "--no-spectral", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert not problems(summary)  # the --json vocabulary (tests/cli/test_json_vocabulary.py)
    for name in ("summary.json", "summary.md", "regime_i.png", "regime_ii.png", "scaling.png"):
        assert (out / name).exists(), name
    assert set(summary["regime_ii"]["calibrations"]) == {"record", "per_entry"}
    record = summary["regime_ii"]["calibrations"]["record"]["epsilons"]
    assert record[0]["sigma"] > record[1]["sigma"]
    for row in record:
        assert row["aap"]["projection"]["min_eigenvalue"] >= -1e-8
        # projection never makes the Frobenius error worse than the raw noisy release here
        assert row["aap"]["frobenius_sq_error"] < row["noisy"]["frobenius_sq_error"]
        # every Gram row carries the release's own baseline beside the identity's true error
        assert row["baseline"]["identity_max"] == 60 * 59
        assert row["newton"]["projection"]["converged"]
        assert "NOT converged" in row["aap"]["projection"]["label"]  # capped at 3 iterations
    assert record[0]["baseline"]["no_better_than_identity"]  # record level, epsilon 1
    r1 = summary["regime_i"]["epsilons"]
    assert r1[0]["composed_epsilon"] > 5 * r1[0]["epsilon"]  # 30 probes at epsilon 1 compose
    text = (out / "summary.md").read_text()
    assert "NOT record-level DP" in text and "Command:" in text
    assert "Composed totals of the 30 probes" in text and "vs identity" in text
    assert "stated verdict" in text and "no better than identity" in text
    assert "aap (feasibility method; 3 it., relative gap" in text
