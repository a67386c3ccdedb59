"""A federation's progress as a person reads it (common/progress.py): the step it is at, who
is missing for it, and the model once done."""

from __future__ import annotations

import datetime as dt

import pytest

from noisyanchor.common.progress import Pending, Progress

SITES = ("org-a", "org-b", "org-c")
NOW = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)


def _progress(**changes) -> Progress:
    base = {"federation_id": "pilot", "state": "collecting", "expected": SITES, "committed": (),
            "keys": (), "commitments": (), "dealer": "org-a",
            "deadline": NOW + dt.timedelta(days=6, hours=3)}
    return Progress(**(base | changes))


@pytest.mark.parametrize("changes, pending", [
    ({}, Pending(SITES, "publish their exchange keys")),
    ({"keys": ("org-a", "org-c")}, Pending(("org-b",), "publish their exchange keys")),
    ({"keys": SITES}, Pending(("org-a",), "seal the anchor seed")),  # the dealer's turn
    ({"keys": SITES, "commitments": ("org-a",)},
     Pending(("org-b", "org-c"), "commit to the anchor")),
    ({"keys": SITES, "commitments": SITES, "committed": ("org-b",)},
     Pending(("org-a", "org-c"), "upload")),
    ({"keys": None, "commitments": None, "committed": ("org-a",)},  # i-gdp: no agreement
     Pending(("org-b", "org-c"), "upload")),
    ({"state": "aligning", "committed": SITES}, None),
    ({"withdrawn": {"org-c": "60 columns, not 64"}}, None),  # nobody is waited for any more
])
def test_the_first_unfinished_step_names_the_sites_missing_for_it(changes, pending):
    assert _progress(**changes).pending() == pending


def test_the_text_shows_state_deadline_each_step_and_whom_it_waits_for():
    lines = _progress(keys=("org-a", "org-b"), commitments=()).lines(NOW)
    assert lines == [
        "federation pilot: collecting; deadline 2026-12-07 15:00:00 UTC (in 6 days 3 h)",
        "  exchange keys 2 of 3, missing org-c",
        "  commitments   0 of 3, missing org-a, org-b, org-c",
        "  uploads       0 of 3, missing org-a, org-b, org-c",
        "waiting for org-c to publish their exchange keys",
    ]
    closed = _progress(deadline=NOW - dt.timedelta(minutes=5)).lines(NOW)[0]
    assert closed.endswith("(5 min ago) (closed: sites are refused)")


def test_withdrawals_and_failures_are_shown_with_their_reasons():
    lines = _progress(withdrawn={"org-c": "org-c's data has 60 feature columns"}).lines(NOW)
    assert "  org-c withdrew: org-c's data has 60 feature columns" in lines
    assert not any(ln.startswith("waiting for") for ln in lines)
    failed = _progress(state="failed", committed=SITES, error="InvalidInputError: NaN").lines(NOW)
    assert "  error: InvalidInputError: NaN" in failed


def test_once_done_the_model_and_the_alignment_are_shown():
    result = {"solver": {"name": "gopp", "converged": True, "certified": False,
                         "iterations": 12}, "seconds": 1.234, "records": 1797,
              "model": {"name": "logistic", "balanced_accuracy": 0.96123, "n_test": 360,
                        "n_train": 1437, "participant_only_balanced_accuracy": 0.1,
                        "sites": {"org-a": {"balanced_accuracy": 0.95, "n_test": 120},
                                  "org-b": {"balanced_accuracy": None, "n_test": 0}}}}
    lines = _progress(state="done", committed=SITES, keys=SITES, commitments=SITES,
                      result=result).lines(NOW)
    assert lines[0] == "federation pilot: done"  # no deadline once done
    assert lines[1:4] == [
        "  uploads       3 of 3",
        "  alignment: gopp, converged, not certified, 12 iterations in 1.2 s; 1797 records",
        "  model logistic: held-out balanced accuracy 0.9612 on 360 test rows (1437 training "
        "rows)"]
    # Issue 34: the baseline says what it is ("told only whose record each row is" did not).
    assert lines[4] == ("    (baseline: the same model knowing only which site each record "
                        "comes from scores 0.1000; near it, it learned nothing from the records)")
    assert lines[-2:] == ["    on org-a's 120 test rows: balanced accuracy 0.9500",
                          "    on org-b's 0 test rows: no test rows"]
    unfitted = _progress(state="done", committed=SITES, result={
        "model": {"name": "mlp", "error": "no test rows"}}).lines(NOW)
    assert "  model mlp: not fitted: no test rows" in unfitted


def test_a_sites_gain_against_its_local_only_model_is_shown_with_its_interval():
    import numpy as np

    from noisyanchor.common.comparison import comparison_fields, paired_comparison

    labels = np.arange(60) % 3
    worse = np.where(np.arange(60) % 5 == 0, (labels + 1) % 3, labels)
    site = {"balanced_accuracy": 1.0, "n_test": 60} | comparison_fields(
        paired_comparison(labels, labels, worse))
    lo, hi = site["gain_interval"]
    lines = _progress(state="done", committed=SITES, result={"model": {
        "name": "logistic", "balanced_accuracy": 1.0, "n_test": 60, "n_train": 200,
        "sites": {"org-a": site}}}).lines(NOW)
    assert lines[-1] == (f"    on org-a's 60 test rows: balanced accuracy 1.0000; against a "
                         f"local-only model on its own rows of Z: {site['gain']:+.3f} balanced "
                         f"accuracy from joining, 95% interval [{lo:+.3f}, {hi:+.3f}] "
                         f"(federation model 1.000 vs local-only "
                         f"{site['local_only_balanced_accuracy']:.3f}; stratified paired "
                         "bootstrap)")


def test_the_json_form_carries_whom_it_waits_for():
    as_json = _progress(keys=SITES, commitments=("org-a", "org-b")).as_dict()
    assert as_json["waiting_for"] == {"participants": ["org-c"], "to": "commit to the anchor"}
    assert as_json["deadline"] == "2026-12-07T15:00:00+00:00"
