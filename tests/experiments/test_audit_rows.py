"""The audit copy of a sweep's rows (experiments.audit_rows) and the committed digits and
breast-cancer studies recomputed from their committed audit copies."""

import gzip
import json
from pathlib import Path

import pytest

from noisyanchor.experiments.audit_rows import (
    AUDIT_ROWS_FILE,
    audit_row,
    read_rows,
    write_audit_rows,
)
from noisyanchor.experiments.sweep import ROWS_FILE

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"
#: Parts of a claim's result that come from its bootstrap (they change with the resamples).
BOOTSTRAPPED = ("interval", "reached", "resamples", "verdict")


def _row(control: bool) -> dict:
    return {"method": "aa-igdp" if control else "aa-igdp-an", "control": control,
            "utility": 0.9, "linkage": {"op": 0.1}, "grid": {"op": [[0.0] * 4]},
            "relative_error": {"op": 0.5}, "relative_error_per_target": {"op": [0.5, 0.4]},
            "attack_diagnostics": {"ml": {"1": {"converged": True}}, "ica": {"1": {}}},
            "test_predictions_by_model": {"logistic": [0, 1]}, "test_labels": [0, 1]}


def test_audit_row_keeps_what_the_report_reads_and_drops_the_rest():
    """No grid, per-target errors or non-ML diagnostics; test predictions and labels only on the
    noiseless controls (the noiseless claim reads them there)."""
    draw, control = audit_row(_row(False)), audit_row(_row(True))
    for row in (draw, control):
        assert "grid" not in row and "relative_error_per_target" not in row
        assert row["attack_diagnostics"] == {"ml": {"1": {"converged": True}}}
        assert row["utility"] == 0.9 and row["relative_error"] == {"op": 0.5}
    assert "test_predictions_by_model" not in draw and "test_labels" not in draw
    assert control["test_predictions_by_model"] == {"logistic": [0, 1]}
    assert control["test_labels"] == [0, 1]
    assert "attack_diagnostics" not in audit_row({"control": False, "method": "c-gdp-pn"})


def test_rows_are_read_from_the_audit_copy_only_when_the_full_rows_are_absent(tmp_path):
    rows = [_row(False), _row(True)]
    (tmp_path / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = write_audit_rows(tmp_path)
    packed = (tmp_path / AUDIT_ROWS_FILE).read_bytes()
    assert first["rows"] == 2 and first["bytes"] == len(packed)
    assert read_rows(tmp_path) == rows  # the full rows win while they are there
    write_audit_rows(tmp_path)
    assert (tmp_path / AUDIT_ROWS_FILE).read_bytes() == packed  # same rows, same bytes
    (tmp_path / ROWS_FILE).unlink()
    assert read_rows(tmp_path) == [audit_row(r) for r in rows]
    assert gzip.decompress(packed).decode().count("\n") == 2


def _recomputed_claims(study: str, claim_resamples: int) -> tuple[dict, dict]:
    """The committed ``study``'s summary claims and those recomputed from its committed audit
    rows with ``claim_resamples`` bootstrap resamples (the report's code and seeds)."""
    from noisyanchor.experiments.claims import judge_deployments
    from noisyanchor.experiments.report import _studies, judge_sweep
    from noisyanchor.experiments.study import load_rows

    results = RESULTS / study
    assert (results / AUDIT_ROWS_FILE).stat().st_size < 500_000
    if (results / ROWS_FILE).exists():  # a local sweep's full rows: audit the committed copy
        pytest.skip(f"{results / ROWS_FILE} exists; the audit reads the committed "
                    f"{AUDIT_ROWS_FILE}")
    doc = json.loads((results / "summary.json").read_text())
    committed = doc["studies"][str(doc["main_p"])]
    meta, rows = load_rows(results)
    p = doc["main_p"]
    _, pairs = _studies([r for r in rows if r["p"] == p], meta, p, committed["metric"], 0)
    judgements, pooled = judge_sweep(pairs, meta["config"], p, claim_resamples)
    got = {"claims_by_replicate": {str(k): v for k, v in judgements.items()},
           "claims_pooled": pooled or {}, "claims_deployment_level": judge_deployments(judgements)}
    return ({k: committed[k] for k in got}, json.loads(json.dumps(got)))


def _without(doc, keys: tuple[str, ...]):
    """``doc`` without ``keys`` at any depth."""
    if isinstance(doc, dict):
        return {k: _without(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [_without(v, keys) for v in doc]
    return doc


def test_committed_digits_claim_estimates_are_recomputed_from_the_committed_audit_rows():
    """Audit of experiments/results/digits from committed files only: every claim's estimate in
    every deployment and pooled, and the deployment-level t intervals on those estimates, are
    what the report's code makes of rows.jsonl.gz (the bootstrap intervals, 1,000 resamples a
    claim, are checked by the extended test below; here 10 keep it to seconds)."""
    committed, got = _recomputed_claims("digits", 10)
    # The random-effects weights read each deployment's bootstrap interval.
    drop = (*BOOTSTRAPPED, "random_effects")
    assert _without(got["claims_deployment_level"], ("random_effects",)) == _without(
        committed["claims_deployment_level"], ("random_effects",))
    for key in ("claims_by_replicate", "claims_pooled"):
        assert _without(got[key], drop) == _without(committed[key], drop), key


@pytest.mark.parametrize("study", [
    # 1,000 bootstrap resamples of every claim in 10 deployments: ~6 min, an audit run by hand
    # (`python -m pytest -q -m audit`), outside CI's 30 minutes; the fast test above checks
    # every estimate and deployment-level interval that needs no bootstrap
    pytest.param("digits", marks=[pytest.mark.slow, pytest.mark.audit]),
    "breast-cancer"])
def test_committed_claims_are_recomputed_exactly_from_the_committed_audit_rows(study):
    """The audit with the report's own resamples: every verdict, interval and deployment-level
    summary in the study's summary.json is reproduced exactly."""
    from noisyanchor.experiments.report import CLAIM_RESAMPLES

    committed, got = _recomputed_claims(study, CLAIM_RESAMPLES)
    assert got == committed
