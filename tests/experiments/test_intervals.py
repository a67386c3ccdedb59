"""Claims' intervals (experiments.intervals, experiments.claims): percentile bootstraps that
cover what they should, verdicts from them, and the exact noiseless control once coupled."""

import numpy as np
import pytest

from noisyanchor.common.methods import Method
from noisyanchor.experiments.bench import BenchConfig, prepare_bench
from noisyanchor.experiments.intervals import (
    accuracy_difference,
    matched_margin,
    paired_min_difference,
    percentile_interval,
    verdict,
)
from noisyanchor.experiments.sweep import CONTROL_DRAW, _Decoder, run_task


def test_verdicts_follow_the_interval():
    assert verdict(0.01, 0.3) == "holds"
    assert verdict(-0.3, -0.01) == "fails"
    assert verdict(-0.1, 0.1) == "undecided"
    assert verdict(None, None) == "not reached"
    assert percentile_interval([np.nan, np.nan]) == (None, None)
    low, high = percentile_interval(np.arange(1001.0))
    assert (low, high) == pytest.approx((25.0, 975.0))


def _method(rng, n, slope, lift):
    """Draws of a noisy method: linkage falls with noise, utility falls with noise, plus a
    ``lift`` in utility at every noise level."""
    noise = rng.uniform(0, 1, n)
    link = 0.3 - 0.2 * noise + 0.005 * rng.standard_normal(n)
    util = 0.9 - slope * noise + lift + 0.01 * rng.standard_normal(n)
    return noise, link, util


def test_matched_margin_interval_covers_the_true_margin(rng):
    """Same linkage curve for both, utility higher by 0.2 for one: the margin at every level is
    0.2 (to the fits' error) and its 95% interval holds it and excludes zero."""
    an = _method(rng, 120, 0.5, 0.2)
    pn = _method(rng, 120, 0.5, 0.0)
    res = matched_margin(an, pn, (0.15, 0.2), rng, 200, headline=0.2)
    assert res["levels"] == [0.15, 0.2]
    assert res["worst"]["estimate"] == pytest.approx(0.2, abs=0.02)
    low, high = res["worst"]["interval"]
    assert 0 < low <= 0.2 <= high
    assert res["headline"]["estimate"] == pytest.approx(0.2, abs=0.02)
    assert res["verdict"] == "holds"
    behind = matched_margin(pn, an, (0.15, 0.2), rng, 200)
    assert behind["verdict"] == "fails" and behind["best"]["interval"][1] < 0
    same = matched_margin(pn, _method(rng, 120, 0.5, 0.0), (0.15, 0.2), rng, 200)
    assert same["verdict"] == "undecided"
    unreached = matched_margin(an, pn, (0.01,), rng, 20)
    assert unreached["levels"] == [] and unreached["verdict"] == "not reached"


def test_paired_and_record_level_differences(rng):
    a = rng.normal(0.3, 0.05, 200)
    res = paired_min_difference(a, [a - 0.02, a - 0.05], rng, 300)
    assert res["estimate"] == pytest.approx(0.02)
    assert res["interval"][0] == pytest.approx(0.02) == res["interval"][1]  # paired: exact
    truth = rng.integers(0, 3, 400)
    good = np.where(rng.uniform(size=400) < 0.9, truth, (truth + 1) % 3)
    bad = rng.integers(0, 3, 400)
    from sklearn.metrics import balanced_accuracy_score

    diff = accuracy_difference(truth, good, bad, rng, 300, balanced_accuracy_score)
    assert diff["interval"][0] > 0.4 and diff["records"] == 400


@pytest.mark.slow  # two MLP controls on digits: about 15 s
def test_noiseless_controls_agree_exactly_for_the_mlp_once_coupled():
    """The C-GDP control coupled to AA-I-GDP's reference key (O_s, Psi_s): the two collaboration
    matrices agree to rounding, and a model that is not rotation invariant (the MLP) gives the
    same predictions on every test record and the same utility, exactly."""
    cfg = BenchConfig.from_dict({"name": "mlp", "dataset": "digits", "max_records": 600,
                                 "participants": [3], "dim": 8, "draws": 9, "episodes": 100,
                                 "models": ["mlp"], "seed": 4})
    bench = prepare_bench(cfg, 3)
    aa, c = run_task(bench, _Decoder(bench), (3, Method.AA_IGDP.value, CONTROL_DRAW, 0.0))
    assert (aa["method"], c["method"]) == ("aa-igdp", "c-gdp")
    assert c["pair_z_rel_diff"] < 1e-13
    assert c["test_predictions_by_model"]["mlp"] == aa["test_predictions_by_model"]["mlp"]
    assert c["utility_by_model"]["mlp"]["utility"] == aa["utility_by_model"]["mlp"]["utility"]
    assert c["linkage"]["known_secret"] == aa["linkage"]["known_anchor"]


def test_nested_resample_draws_whole_deployments_shared_by_the_series():
    """Two-stage bootstrap: every resample keeps each series' size per drawn deployment, and
    the series (the compared methods) share the drawn deployments."""
    from noisyanchor.experiments.intervals import nested_resample

    rng = np.random.default_rng(3)
    a, b = np.repeat([0, 1, 2], [4, 5, 6]), np.repeat([0, 1, 2], [3, 3, 2])
    for _ in range(20):
        ia, ib = nested_resample([a, b], rng)
        picked_a = np.bincount(a[ia], minlength=3) // np.array([4, 5, 6])
        picked_b = np.bincount(b[ib], minlength=3) // np.array([3, 3, 2])
        assert picked_a.sum() == 3 and np.array_equal(picked_a, picked_b)


def test_mean_interval_nested_in_deployments_carries_their_spread():
    """Deployments whose means differ by far more than their draws: the nested interval covers
    the spread between deployments; by draw it is much narrower."""
    from noisyanchor.experiments.intervals import mean_interval

    rng = np.random.default_rng(4)
    groups = np.repeat([0, 1, 2], 30)
    values = np.array([0.0, 1.0, 2.0])[groups] + 0.01 * rng.standard_normal(90)
    nested = mean_interval(values, rng, 500, groups)
    by_draw = mean_interval(values, rng, 500)
    assert nested["estimate"] == pytest.approx(1.0, abs=0.01)
    width = lambda r: r["interval"][1] - r["interval"][0]  # noqa: E731
    assert width(nested) > 0.8 and width(by_draw) < 0.5


def test_deployment_level_interval_matches_a_hand_computation_on_three_estimates():
    """theta = (0, 2, 6), each with standard error 1 (a 95% interval of half-width z):
    mean 8/3, s^2 = 28/3, so the t interval is 8/3 +- t_{2, 0.975} sqrt(28) / 3; and
    DerSimonian-Laird: Q = 168/9, tau^2 = (Q - 2) / (3 - 1) = 25/3, I^2 = (Q - 2) / Q = 25/28,
    mu = 8/3 with standard error sqrt((1 + 25/3) / 3) = sqrt(28) / 3."""
    from scipy.stats import norm

    from noisyanchor.experiments.intervals import deployment_level, random_effects, t_interval

    z, t2 = norm.ppf(0.975), 4.302652729911275  # t_{2, 0.975} from tables: 4.303
    est = [0.0, 2.0, 6.0]
    got = deployment_level([{"estimate": e, "interval": [e - z, e + z]} for e in est])
    half = t2 * np.sqrt(28) / 3
    assert got["deployments"] == 3 and got["df"] == 2 and got["method"] == "t"
    assert got["estimate"] == pytest.approx(8 / 3, abs=1e-12)
    np.testing.assert_allclose(got["interval"], [8 / 3 - half, 8 / 3 + half], atol=1e-9)
    assert got["verdict"] == "undecided"  # 8/3 - 4.30 * 1.76 < 0
    re = got["random_effects"]
    assert re["q"] == pytest.approx(168 / 9, abs=1e-12)
    assert re["tau2"] == pytest.approx(25 / 3, abs=1e-12)
    assert re["i2"] == pytest.approx(25 / 28, abs=1e-12)
    np.testing.assert_allclose(re["interval"], [8 / 3 - z * np.sqrt(28) / 3,
                                                8 / 3 + z * np.sqrt(28) / 3], atol=1e-9)
    assert t_interval(est)["interval"] == got["interval"]
    # homogeneous deployments: Q < k - 1, no between-deployment variance, I^2 = 0
    flat = random_effects([1.0, 1.1, 0.9], [1.0, 1.0, 1.0])
    assert flat["tau2"] == 0 and flat["i2"] == 0


def test_deployment_level_needs_every_deployment_to_have_an_interval():
    from noisyanchor.experiments.intervals import deployment_level

    assert deployment_level([{"estimate": 0.1, "interval": [0.0, 0.2]},
                             {"estimate": None, "interval": None}]) is None
    assert deployment_level([{"estimate": 0.1, "interval": [0.0, 0.2]}]) is None


def test_a_matched_linkage_result_shows_every_interval_its_verdict_reads():
    """Undecided with the worst margin's interval below zero: the best margin's interval, which
    covers zero and keeps the claim from failing, is shown beside it; a holding result shows
    the worst only; a failing result written by the earlier report (its own estimate the best)
    shows the worst first. The robust rule needs the deployment level to hold too."""
    from noisyanchor.experiments.claims import estimate_text, judge_deployments, robust

    worst = {"estimate": -0.02, "interval": [-0.04, -0.001]}
    best = {"estimate": 0.01, "interval": [-0.01, 0.03]}
    undecided = {"verdict": "undecided", **worst, "margin": {"worst": worst, "best": best}}
    assert estimate_text(undecided) == "worst -2.0 [-4.0, -0.1]; best +1.0 [-1.0, +3.0]"
    held = {"verdict": "holds", "estimate": 0.05, "interval": [0.01, 0.09],
            "margin": {"worst": {"estimate": 0.05, "interval": [0.01, 0.09]}, "best": best}}
    assert estimate_text(held) == "+5.0 [+1.0, +9.0]"
    low = {"estimate": -0.01, "interval": [-0.02, -0.005]}
    failed = {"verdict": "fails", **low, "margin": {"worst": worst, "best": low}}
    assert estimate_text(failed) == "worst -2.0 [-4.0, -0.1]; best -1.0 [-2.0, -0.5]"
    claim = "anchor_noise_beats_data_noise_at_low_linkage_paper_attacks"
    spread = [0.01, 0.2, 0.02]  # each deployment holds; their mean's t interval covers zero
    by_rep = {str(k): {c: {"a/b": {"verdict": "holds", "estimate": e,
                                   "interval": [e - 0.005, e + 0.005]}}
                       for c in ("pn_pairs_identical", "noiseless_c_eq_aa_gt_i", claim,
                                 "anchor_noise_beats_data_noise_at_low_linkage_all_attacks",
                                 "anchor_noise_beats_data_noise_at_low_linkage_analyst_attacks",
                                 "anchor_noise_beats_data_noise_at_low_linkage_public_attacks",
                                 "op_strongest_of_three")}
              for k, e in enumerate(spread)}
    deployments = judge_deployments(by_rep)
    assert deployments[claim]["a/b"]["verdict"] == "undecided"
    assert robust(by_rep)[claim] and not robust(by_rep, None, deployments)[claim]


def test_a_matched_linkage_claim_at_the_deployment_level_reads_its_worst_and_best_margins():
    """Worst margins (-5, -4, -3) and best margins (+1, +2, +3) points, each t interval on 2
    degrees of freedom: the worst's lies below zero, the best's covers zero: undecided (ahead
    at some level, behind at others); the cell shows both."""
    from noisyanchor.experiments.claims import estimate_text, judge_deployments

    def rep(w: float, b: float) -> dict:
        return {"verdict": "undecided", "estimate": w, "interval": [w - 0.01, w + 0.01],
                "margin": {"worst": {"estimate": w, "interval": [w - 0.01, w + 0.01]},
                           "best": {"estimate": b, "interval": [b - 0.01, b + 0.01]}}}

    claim = "anchor_noise_beats_data_noise_at_low_linkage_paper_attacks"
    by_rep = {str(k): {claim: {"a/b": rep(-0.05 + 0.01 * k, 0.01 + 0.01 * k)},
                       "op_strongest_of_three": {"pca": rep(0.01, 0.01)}}
              for k in range(3)}
    got = judge_deployments(by_rep)[claim]["a/b"]
    half = 4.302652729911275 * 0.01 / np.sqrt(3)  # t_{2, 0.975} s / sqrt(k), s = 1 point
    np.testing.assert_allclose(got["margin"]["worst"]["interval"], [-0.04 - half, -0.04 + half])
    np.testing.assert_allclose(got["margin"]["best"]["interval"], [0.02 - half, 0.02 + half])
    assert got["verdict"] == "undecided"
    assert estimate_text(got) == "worst -4.0 [-6.5, -1.5]; best +2.0 [-0.5, +4.5]"
