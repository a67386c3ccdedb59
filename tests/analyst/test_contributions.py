"""What each site contributed: leave-one-site-out refits, C[j, k] = BA_k(h) - BA_k(h_{-j}); a
site whose labels are flipped makes the others worse and is flagged, honest sites help each
other, the aggregates add up, the cap samples deterministically, and a site sees only its own
aggregates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisyanchor.analyst.contributions import (
    MIN_AGGREGATED,
    TOLERANCE,
    choose_left_out,
    contributions_result,
    leave_one_site_out,
    operator_lines,
    site_aggregates,
    site_view,
)
from noisyanchor.common.contribution_text import site_line
from noisyanchor.common.downstream import fit_downstream, held_out_metrics
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION

IDS = ("a", "b", "c")
D = 4


def _site(rng, n: int, *, flip: bool = False):
    """``n`` rows of three classes around ``e_y`` (noise 0.5): train, train, validation, test;
    with ``flip`` the labels are shifted by one class (a site whose labels are wrong)."""
    y = np.arange(n) % 3
    x = np.eye(D)[y] + 0.5 * rng.standard_normal((n, D))
    tags = np.array([TRAIN, TRAIN, VALIDATION, TEST])[np.arange(n) % 4]
    return x, (y + flip) % 3, tags


def _federation(sizes=(120, 120, 160), flipped=(2,), seed=0):
    """``Z`` of sites with ``sizes`` rows each (already in one frame), sites ``flipped`` with
    wrong labels, and the federation's own balanced accuracy on every site."""
    rng = np.random.default_rng(seed)
    parts = [_site(rng, n, flip=k in flipped) for k, n in enumerate(sizes)]
    z, labels, tags = (np.concatenate([p[i] for p in parts]) for i in range(3))
    owners = np.repeat(np.arange(len(sizes)), sizes)
    fitted = fit_downstream(z, labels, tags)
    predicted = fitted.estimator.predict((z - fitted.center) / fitted.scale)
    per_site = {}
    for k in range(len(sizes)):
        rows = (owners == k) & (tags == TEST)
        per_site["abc"[k]] = held_out_metrics(labels[rows], predicted[rows])
    return z, labels, tags, owners, per_site


def _result(max_sites=20, **kw):
    z, labels, tags, owners, per_site = _federation(**kw)
    return contributions_result(federation_id="f", participants=list(per_site), z=z,
                                labels=labels, tags=tags, owners=owners, per_site=per_site,
                                model="logistic", max_sites=max_sites)


def test_a_site_with_flipped_labels_harms_the_others_and_honest_sites_help_each_other(caplog):
    with caplog.at_level("WARNING", logger="noisyanchor.analyst.contributions"):
        result = _result()
    assert [r.getMessage()[:61] for r in caplog.records] == [
        "contributions: the other sites are better without c's rows (2"]
    c = result["matrix"]
    # Margins measured: C[c, .] <= -0.13 and C[a, b], C[b, a] >= 0.33 on this seed; 0 is far.
    assert c["c"]["a"] < -TOLERANCE and c["c"]["b"] < -TOLERANCE
    assert c["a"]["b"] > TOLERANCE and c["b"]["a"] > TOLERANCE
    assert result["harms_others"] == ["c"]
    sites = result["sites"]
    assert sites["c"]["harms_others"] and sites["c"]["given"]["made_worse"] == 2
    assert sites["c"]["given"]["mean"] < -TOLERANCE
    # a's rows make c (whose labels are wrong) worse, as they should: one of two is no flag.
    assert sites["a"]["given"]["made_worse"] == 1 and sites["a"]["given"]["made_better"] == 1
    assert not sites["a"]["harms_others"] and not sites["b"]["harms_others"]


def test_each_contribution_is_the_full_model_minus_the_refit_without_the_site_by_hand():
    z, labels, tags, owners, per_site = _federation()
    result = _result()
    for j, pid in enumerate(IDS):
        keep = owners != j
        refit = fit_downstream(z[keep], labels[keep], tags[keep])
        for k, other in enumerate(IDS):
            if k == j:
                assert other not in result["matrix"][pid]
                continue
            rows = (owners == k) & (tags == TEST)
            without = held_out_metrics(labels[rows], refit.estimator.predict(
                (z[rows] - refit.center) / refit.scale))["balanced_accuracy"]
            expected = per_site[other]["balanced_accuracy"] - without
            assert result["matrix"][pid][other] == pytest.approx(expected, abs=1e-12)
    assert result["full"] == {pid: per_site[pid]["balanced_accuracy"] for pid in IDS}


def test_what_all_sites_received_sums_to_what_all_gave():
    result = _result()
    c = np.array([[result["matrix"][j].get(k, np.nan) for k in IDS] for j in IDS])
    sites = result["sites"]
    for k, pid in enumerate(IDS):
        received, given = sites[pid]["received"], sites[pid]["given"]
        assert received["sum"] == pytest.approx(np.nansum(c[:, k]), abs=1e-12)
        assert given["sum"] == pytest.approx(np.nansum(c[k]), abs=1e-12)
        assert received["mean"] == pytest.approx(received["sum"] / 2, abs=1e-12)
        assert received["sites"] == given["sites"] == 2
        assert given["made_worse"] == int((c[k][~np.isnan(c[k])] < -TOLERANCE).sum())
    total = np.nansum(c)
    assert sum(s["received"]["sum"] for s in sites.values()) == pytest.approx(total, abs=1e-12)
    assert sum(s["given"]["sum"] for s in sites.values()) == pytest.approx(total, abs=1e-12)


def test_the_cap_samples_deterministically_whatever_the_declared_order():
    names = [f"s{i:02d}" for i in range(12)]
    chosen = choose_left_out("f", names, 5)
    assert len(chosen) == 5 and list(chosen) == sorted(chosen)
    shuffled = names[::-1]
    assert {shuffled[i] for i in choose_left_out("f", shuffled, 5)} == \
        {names[i] for i in chosen}
    assert choose_left_out("f", names, 12) == tuple(range(12))
    assert choose_left_out("f", names, 0) == ()


def test_beyond_the_cap_only_the_sampled_sites_are_refitted_and_a_site_is_told_so():
    result = _result(max_sites=2)
    assert result["sampled"] and result["extra_fits"] == len(result["left_out"]) == 2
    (skipped,) = set(IDS) - set(result["left_out"])
    assert result["sites"][skipped]["given"] is None and skipped not in result["matrix"]
    assert "was not left out" in site_view(result, skipped)["given"]["withheld"]
    assert any("sampled: 2 of 3 sites left out" in line for line in operator_lines(result))


def test_zero_turns_the_measure_off_and_says_so():
    result = _result(max_sites=0)
    assert result == {"computed": False, "reason": "off ([model] contributions_max_sites = 0)",
                      "max_sites": 0}
    assert site_view(result, "a") == {"computed": False, "reason": result["reason"]}
    assert operator_lines(result) == ["  contributions: not measured: off ([model] "
                                      "contributions_max_sites = 0)"]
    assert site_line(site_view(result, "a")).startswith("contribution: not measured")


def test_a_site_sees_its_own_aggregates_and_no_other_sites_number():
    result = _result()
    for pid in IDS:
        view = site_view(result, pid)
        text = json.dumps(view)
        assert all(f'"{other}"' not in text for other in IDS)
        assert view["received"] == result["sites"][pid]["received"]
        assert view["harms_others"] == (pid == "c")
        # No entry of C and no other site's own balanced accuracy appears in the view.
        numbers = {x for row in result["matrix"].values() for x in row.values()}
        numbers |= {v for k, v in result["full"].items() if k != pid}
        assert not numbers & {view["received"]["mean"], view["given"]["mean"]}
    assert "HARMS THE OTHERS" in site_line(site_view(result, "c"))


def test_with_a_single_other_site_its_aggregates_are_withheld():
    result = _result(sizes=(120, 120), flipped=())
    assert MIN_AGGREGATED == 2
    view = site_view(result, "a")
    assert "withheld" in view["received"] and "withheld" in view["given"]
    assert "a" in result["matrix"] and "b" in result["matrix"]["a"]  # the operator sees C


def test_a_refit_that_is_not_possible_is_recorded_not_raised():
    z, labels, tags, owners, _ = _federation(flipped=())
    # Sites b and c keep only their class-0 rows: without a, the training rows hold one class.
    keep = (owners == 0) | (labels == 0)
    loo = leave_one_site_out(z[keep], labels[keep], tags[keep], owners[keep],
                             participants=IDS, full=np.array([0.9, 1.0, 1.0]),
                             left_out=(0, 1, 2), model="logistic")
    assert "single class" in loo.errors["a"] and np.isnan(loo.without[0]).all()
    aggregates = site_aggregates(loo)
    assert aggregates["a"]["given"] == {"sum": 0.0, "mean": None, "sites": 0, "made_worse": 0,
                                        "made_better": 0}
    assert not aggregates["a"]["harms_others"]
