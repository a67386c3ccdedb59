"""The figures over every deployment: binned means with their t intervals, and the claims
figure drawn from per-replicate, pooled and deployment-level results."""

import numpy as np
import pytest

from noisyanchor.experiments.figures_deployments import binned_mean, claims, mean_interval


def test_binned_mean_averages_each_bin_and_leaves_empty_bins_nan():
    x = np.array([0.0, 0.1, 0.9, 1.0])
    y = np.array([1.0, 3.0, 10.0, 20.0])
    got = binned_mean(x, y, np.linspace(0.0, 1.0, 4))
    np.testing.assert_allclose(got[[0, 2]], [2.0, 15.0])
    assert np.isnan(got[1])


def test_mean_interval_is_the_t_interval_of_the_finite_values():
    mean, low, high = mean_interval(np.array([1.0, 2.0, 3.0, np.nan]))
    half = 4.302652729911275 * 1.0 / np.sqrt(3)  # t_{2, 0.975} s / sqrt(3), s = 1
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert mean_interval(np.array([0.5])) == (0.5, 0.5, 0.5)
    assert mean_interval(np.array([np.nan])) is None


def test_claims_figure_draws_replicates_pooled_and_deployment_level(tmp_path):
    """Three replicates, a holding, an undecided (worst below zero, best covering it) and a
    not-reached matched-linkage claim: drawn without error, the deployment level computed
    from the replicates when the summary lacks it."""
    claim = "anchor_noise_beats_data_noise_at_low_linkage_paper_attacks"

    def margin(w, b, state):
        return {"verdict": state, "estimate": w, "interval": [w - 0.01, w + 0.01],
                "margin": {"worst": {"estimate": w, "interval": [w - 0.01, w + 0.01]},
                           "best": {"estimate": b, "interval": [b - 0.01, b + 0.01]}}}

    def rep(k):
        return {"noiseless_c_eq_aa_gt_i": {"logistic": {"verdict": "holds", "estimate": 0.5,
                                                        "interval": [0.4, 0.6]}},
                claim: {"logistic/pca": margin(0.05 + 0.01 * k, 0.1, "holds"),
                        "logistic/pixel": margin(-0.03, 0.01, "undecided")},
                "anchor_noise_beats_data_noise_at_low_linkage_analyst_attacks": {
                    "logistic/pca": {"verdict": "not reached", "estimate": None,
                                     "interval": None}},
                "op_strongest_of_three": {"pca": {"verdict": "holds", "estimate": 0.02,
                                                  "interval": [0.01, 0.03]}}}

    by_rep = {str(k): rep(k) for k in range(3)}
    pooled = {c: by_rep["0"][c] for c in (claim, "op_strongest_of_three",
                                          "anchor_noise_beats_data_noise_at_low_linkage_"
                                          "analyst_attacks")}
    summary = {"p": 10, "claims_by_replicate": by_rep, "claims_pooled": pooled}
    path = tmp_path / "fig_claims.png"
    assert claims(summary, path, "toy")
    assert path.stat().st_size > 0
    assert not claims({"p": 10, "claims_by_replicate": {}}, tmp_path / "none.png")
