"""Formal DP baselines (issue 33 item 2): the arm's record-level epsilon, the DP data release's
noise and DP training's two ends."""

import numpy as np
import pytest

from noisyanchor.common.scoreshield import analytic_sigma, gaussian_epsilon
from noisyanchor.experiments.dp_baseline import matched_epsilon, study_draws
from noisyanchor.experiments.dp_mechanisms import (
    clip_rows,
    fit_regularised_logistic,
    gaussian_data_release,
    output_perturbed_logistic,
    output_sensitivity,
    predict_logistic,
)

DELTA = 1e-5


def _row(method: str, sigma: float, replicate: int = 0) -> dict:
    return {"p": 10, "replicate": replicate, "draw": 0, "control": False, "method": method,
            "sigma": sigma, "v": 0.0, "utility": 0.5,
            "linkage": {"known_secret": 0.2}, "selection": {"known_secret": 0.2}}


@pytest.mark.parametrize("sigma", [0.07, 1.0, 5.54, 20.7])  # the study's grid is U(0, 20.7)
def test_record_epsilon_of_every_study_draw_is_the_analytic_calibration(sigma):
    clips = [18.5, 22.5]  # each deployment's own C (its largest record norm)
    draws = study_draws([_row("c-gdp-pn", sigma, 0), _row("c-gdp-pn", sigma, 1)], clips, DELTA)
    for draw, clip in zip(draws["c-gdp-pn"], clips, strict=True):
        assert draw["clip"] == clip
        # the same calibration the release service uses, forwards and backwards, to 1e-9
        assert draw["epsilon"] == pytest.approx(gaussian_epsilon(sigma, DELTA, 2 * clip),
                                                rel=1e-9)
        assert analytic_sigma(draw["epsilon"], DELTA, 2 * clip) == pytest.approx(sigma, rel=1e-9)


def test_anchor_noise_draws_carry_no_epsilon():
    row = {**_row("aa-igdp-an", 0.0), "v": 0.4}
    draws = study_draws([row], [18.5], DELTA)
    assert draws["aa-igdp-an"] and "epsilon" not in draws["aa-igdp-an"][0]


@pytest.mark.parametrize(("epsilon", "clip"), [(0.5, 1.0), (10.0, 8.2), (300.0, 3.0)])
def test_data_release_noise_is_the_calibrated_one(epsilon, clip):
    rng = np.random.default_rng(0)
    zeros = np.zeros((20000, 4))
    rel = gaussian_data_release(zeros, epsilon, DELTA, clip, rng)
    assert rel.calibration.sensitivity == 2 * clip
    assert rel.calibration.sigma == analytic_sigma(epsilon, DELTA, 2 * clip)
    # 80,000 draws: the sample sd is within 0.25% of sigma per standard error; 2% is 8 of them
    assert rel.records.std() == pytest.approx(rel.calibration.sigma, rel=0.02)


def test_release_clips_after_centring_and_projection():
    rng = np.random.default_rng(1)
    x = 10.0 * rng.standard_normal((500, 6))
    u = clip_rows(x - 1.0, 2.0)
    assert np.linalg.norm(u, axis=1).max() <= 2.0 * (1 + 1e-12)
    inside = 0.1 * rng.standard_normal((5, 6))
    np.testing.assert_array_equal(clip_rows(inside, 10.0), inside)  # kept as they are


def _digits_split():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    rng = np.random.default_rng(3)
    idx = rng.permutation(len(bunch.target))[:900]
    x = bunch.data[idx] / 16.0
    x = x - x[:600].mean(axis=0)
    return x[:600], bunch.target[idx[:600]], x[600:], bunch.target[idx[600:]]


def _balanced(y, pred) -> float:
    return float(np.mean([np.mean(pred[y == k] == k) for k in np.unique(y)]))


def test_dp_training_nears_the_non_private_model_at_huge_epsilon_and_chance_at_tiny():
    x_tr, y_tr, x_te, y_te = _digits_split()
    clip, lam = float(np.quantile(np.linalg.norm(x_tr, axis=1), 0.5)), 1e-3
    w, classes = fit_regularised_logistic(x_tr, y_tr, clip, lam)
    clean = _balanced(y_te, predict_logistic(w, classes, clip, x_te))
    assert clean > 0.8  # the non-private model is a real classifier here
    rng = np.random.default_rng(4)
    huge = output_perturbed_logistic(x_tr, y_tr, 1e7, DELTA, clip, lam, rng)
    assert huge.calibration.sensitivity == pytest.approx(output_sensitivity(600, lam))
    assert _balanced(y_te, huge.predict(x_te)) == pytest.approx(clean, abs=0.02)
    tiny = [_balanced(y_te, output_perturbed_logistic(x_tr, y_tr, 1e-3, DELTA, clip, lam,
                                                      rng).predict(x_te)) for _ in range(5)]
    assert np.mean(tiny) < 0.2  # chance is 0.1 on ten balanced classes


def test_output_sensitivity_is_chaudhuri_corollary_8_with_the_softmax_lipschitz_constant():
    assert output_sensitivity(1000, 0.01) == pytest.approx(2 * np.sqrt(2) / (1000 * 0.01),
                                                           rel=1e-15)


def test_matched_epsilon_interpolates_in_log_epsilon():
    eps, util = [1.0, 10.0, 100.0], [0.1, 0.3, 0.7]
    assert matched_epsilon(eps, util, 0.5) == pytest.approx(10 ** 1.5, rel=1e-12)
    assert matched_epsilon(eps, util, 0.05) == 1.0
    assert matched_epsilon(eps, util, 0.9) is None
