"""The membership study's intervals and its JSON and figure (experiments.membership_study)."""

import json

import pytest

from noisyanchor.experiments.membership_study import (
    auc_interval,
    make,
    summarise,
    wilson_interval,
)


def test_auc_interval_matches_hanley_mcneil_by_hand():
    # A = 0.8, n1 = n2 = 50: Q1 = 2/3, Q2 = 0.7111, SE^2 = 4.95111 / 2500, SE = 0.044502
    low, high = auc_interval(0.8, 50, 50)
    assert (low, high) == pytest.approx((0.8 - 1.96 * 0.044502, 0.8 + 1.96 * 0.044502),
                                        abs=2e-4)
    assert auc_interval(1.0, 50, 50) == (1.0, 1.0)  # a perfect separation has no spread here


def test_wilson_interval_of_half_of_a_hundred():
    assert wilson_interval(0.5, 100) == pytest.approx((0.4038, 0.5962), abs=1e-4)
    low, high = wilson_interval(0.0, 200)
    assert low == 0.0 and 0 < high < 0.02


def _cell(auc, tpr):
    return {"auc": auc, "tpr_at_1pct_fpr": tpr, "tpr_at_0_1pct_fpr": tpr / 2,
            "fpr_resolution": 0.01, "members": 300, "non_members": 100}


def _row(method, control, draw, sigma, v):
    return {"method": method, "control": control, "draw": draw, "sigma": sigma, "v": v,
            "utility_by_model": {"mlp-overfit": {"utility": 0.9}},
            "membership": {"model": {"mlp-overfit": {
                "accuracy": {"members": 0.99, "non_members": 0.88},
                "loss_threshold": _cell(0.52, 0.02), "lira": _cell(0.6, 0.07)}},
                "z": {"all": {**_cell(1.0, 1.0), "attack": "known_secret"}}}}


def test_the_study_writes_one_json_and_one_figure(tmp_path):
    rows = [_row("c-gdp", True, -1, 0.0, 0.0), _row("aa-igdp-pn", False, 0, 5.0, 0.0),
            _row("aa-igdp-an", False, 0, 0.0, 0.5), {"method": "i-gdp", "membership": None}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "meta.json").write_text(json.dumps({"config": {
        "name": "t", "model": "mlp-overfit", "shadow_models": 8}}))
    entries = summarise(rows, "mlp-overfit")
    assert [e["method"] for e in entries] == ["aa-igdp-an", "aa-igdp-pn", "c-gdp"]
    got = make(tmp_path, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "fig_membership_lira.png", "membership.json"]
    cell = got["entries"][0]["model"]["lira"]
    assert cell["auc_interval"][0] < 0.6 < cell["auc_interval"][1]
    assert got["entries"][0]["accuracy"] == {"members": 0.99, "non_members": 0.88}
