"""The operator's status document (analyst/status_report.py): what ``analyst status --json``
prints is :func:`operator_status`, the privacy budget included, read without writing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from noisyanchor import deploy
from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.analyst.privacy_budget import LEDGER_HEAD, PrivacyLedger
from noisyanchor.analyst.status_report import operator_status, privacy_spent, status_lines
from noisyanchor.cli import main
from noisyanchor.common.progress import Progress
from noisyanchor.common.scoreshield import calibrate, score_vector_sensitivity
from noisyanchor.deploy.provision import provision

LOCAL = Path(deploy.__file__).parent / "templates" / "federation-local.toml"
DELTA = 1e-5


@pytest.fixture
def kit(tmp_path) -> Path:
    shutil.copy(LOCAL, tmp_path / "federation.toml")
    return provision(tmp_path / "federation.toml").out / "analyst" / "analyst.toml"


def _with_privacy(kit: Path) -> Path:
    kit.write_text(kit.read_text() + f"\n[privacy]\nepsilon_budget = 4.0\ndelta_budget = {DELTA}\n")
    return kit


def test_status_json_is_the_operator_status_document(kit, capsys):
    assert main(["analyst", "status", "--config", str(kit), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = operator_status(load_analyst_config(kit))
    assert printed == expected
    assert printed["privacy"] is None  # no [privacy] table: releases are refused
    assert printed["waiting_for"]["to"] == "publish their exchange keys"


@pytest.mark.parametrize("other", ["--json", "--wait"])
def test_serve_is_refused_beside_json_or_wait(kit, other, capsys):
    assert main(["analyst", "status", "--config", str(kit), "--serve", other]) == 1
    assert "--serve shows the status until it is stopped" in capsys.readouterr().err


def test_the_privacy_budget_spent_is_read_without_touching_the_ledger(kit, capsys):
    cfg = load_analyst_config(_with_privacy(kit))
    assert privacy_spent(cfg)["releases"] == 0  # no ledger yet: nothing spent
    head = cfg.output_dir / LEDGER_HEAD
    ledger = PrivacyLedger(cfg.ledger_path, 4.0, DELTA, participants=cfg.participants,
                           head_path=head)
    for i in range(2):
        ledger.charge(cfg.federation_id, "org-b", calibrate(0.5, DELTA,
                                                            score_vector_sensitivity()),
                      request_id=f"r{i}", label="scores")
    files = {p: p.read_bytes() for p in (cfg.ledger_path, head)}
    spent = privacy_spent(cfg)
    assert {p: p.read_bytes() for p in files} == files
    assert spent["releases"] == 2 and spent["participants"]["org-b"]["releases"] == 2
    assert spent["participants"]["org-a"]["spent_epsilon"] == 0.0
    # two releases of epsilon 0.5 compose to less than their sum (mu-GDP), to more than one
    assert 0.5 < spent["spent_epsilon"] < 1.0 and spent["epsilon_budget"] == 4.0
    assert spent == ledger_view(ledger, cfg)
    text = "\n".join(status_lines(operator_status(cfg), Progress(cfg.federation_id,
                                                                 "collecting", (), ())))
    assert f"privacy budget (DP releases of {cfg.federation_id}, at delta=1e-05): spent " \
           f"epsilon={spent['spent_epsilon']:.4g} of 4 in 2 releases" in text
    assert "org-b: spent" in text and "org-a: spent" not in text  # only who released
    cfg.ledger_path.write_text("{broken")
    assert "unreadable or corrupt" in privacy_spent(cfg)["error"]


def ledger_view(ledger: PrivacyLedger, cfg) -> dict:
    """What the writing ledger itself says, in privacy_spent's words."""
    whole = ledger.account(cfg.federation_id)
    return {"dataset": cfg.federation_id, "delta": DELTA, "epsilon_budget": 4.0,
            "spent_epsilon": whole.spent_epsilon, "left_epsilon": whole.left_epsilon,
            "releases": 2, "participants": {
                pid: {"epsilon_budget": a.budget_epsilon, "spent_epsilon": a.spent_epsilon,
                      "left_epsilon": a.left_epsilon, "releases": a.releases,
                      "max_releases": a.max_releases}
                for pid in cfg.participants
                for a in [ledger.account(cfg.federation_id, pid)]}}
