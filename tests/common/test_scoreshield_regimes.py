"""Tests of issue 26: calibrations that cannot under-noise, the regimes (record row, identity level,
public margin) against brute-force worst cases, the data-free baseline of Gram releases, and
composition. Every misuse of the issue is refused, with the true epsilon of its noise stated."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy.optimize import minimize

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield import (
    Calibration,
    Regime,
    analytic_sigma,
    calibrate,
    composed_epsilon,
    gaussian_epsilon,
    gram_identity_sensitivity,
    gram_record_sensitivity,
    project_correlation,
    record_row_sensitivity,
    release_gram,
    release_record_row,
    release_score_vector,
    symmetrize,
)
from noisyanchor.common.scoreshield.baseline import (
    identity_distance_estimate,
    projected_distance_bound,
    projection_risk_estimate,
)


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    e = rng.standard_normal((n, d))
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _gram(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    e = _unit_rows(rng, n, d)
    g = e @ e.T
    np.fill_diagonal(g, 1.0)
    return g


def _epsilon_in(message: str) -> float:
    """The epsilon a refusal says the noise delivers ("... deliver(s) epsilon=X ...")."""
    found = re.search(r"deliver\w* epsilon=([-+0-9.e]+)", message)
    assert found, message
    return float(found.group(1))


# --- calibrations that cannot lie -------------------------------------------------------------

def test_a_hand_made_calibration_with_too_little_noise_is_refused() -> None:
    # the issue: sigma = 1e-3 for epsilon 1 at sensitivity 2 delivers about 2e6
    true_eps = gaussian_epsilon(1e-3, 1e-5, 2.0)
    with pytest.raises(InvalidInputError, match="below") as exc:
        Calibration(epsilon=1.0, delta=1e-5, sensitivity=2.0, sigma=1e-3, method="analytic")
    assert _epsilon_in(str(exc.value)) == pytest.approx(true_eps, rel=0.01)
    with pytest.raises(InvalidInputError, match="sigma"):
        Calibration(epsilon=1.0, delta=1e-5, sensitivity=2.0, sigma=0.0, method="analytic")
    with pytest.raises(InvalidInputError, match="below"):
        dataclasses.replace(calibrate(1.0, 1e-5, 2.0), sigma=1e-3)
    with pytest.raises(InvalidInputError, match="below"):  # just under the analytic sigma
        dataclasses.replace(calibrate(1.0, 1e-5, 2.0), sigma=analytic_sigma(1, 1e-5, 2) * 0.999)


def test_more_noise_than_needed_and_rebuilt_calibrations_are_accepted() -> None:
    cal = calibrate(0.5, 1e-5, 2.0, method="classic")  # more noise than analytic: fine
    assert cal.sigma > analytic_sigma(0.5, 1e-5, 2.0)
    again = calibrate(1.0, 1e-5, Regime("gram", 50))
    rebuilt = Calibration(epsilon=1.0, delta=1e-5, sensitivity=again.sensitivity,
                          sigma=again.sigma, method="analytic")  # as a ledger row restores it
    assert rebuilt.sigma == again.sigma


def test_a_calibration_must_carry_its_regime_sensitivity() -> None:
    with pytest.raises(InvalidInputError, match="not that of regime gram/record"):
        Calibration(1.0, 1e-5, 2.0, analytic_sigma(1.0, 1e-5, 2.0), "analytic",
                    Regime("gram", 10))


def test_gram_calibrated_for_one_entry_is_refused_at_record_level_with_the_true_epsilon(
        rng: np.random.Generator) -> None:
    # the issue: release_gram(G, calibrate(1, 1e-5, 2.0)) on 200 records; true epsilon 36.4
    g = _gram(rng, 200, 8)
    cal = calibrate(1.0, 1e-5, 2.0)
    with pytest.raises(InvalidInputError, match="not that of this release") as exc:
        release_gram(g, cal, rng=rng)
    true_eps = gaussian_epsilon(cal.sigma, 1e-5, gram_record_sensitivity(200))
    assert true_eps == pytest.approx(36.4, abs=0.05)
    assert _epsilon_in(str(exc.value)) == pytest.approx(true_eps, rel=0.01)


def test_gram_calibrated_for_another_n_is_refused_with_the_true_epsilon(
        rng: np.random.Generator) -> None:
    g = _gram(rng, 200, 8)
    for cal in (calibrate(1.0, 1e-5, gram_record_sensitivity(100)),
                calibrate(1.0, 1e-5, Regime("gram", 100))):
        with pytest.raises(InvalidInputError) as exc:
            release_gram(g, cal, rng=rng)
        if cal.regime is None:
            assert _epsilon_in(str(exc.value)) == pytest.approx(1.47, rel=0.01)
        else:
            assert "made for regime gram/record" in str(exc.value)
    # over-noising is refused too: the result would state a guarantee it does not have
    with pytest.raises(InvalidInputError, match="not that of this release"):
        release_gram(g, calibrate(1.0, 1e-5, gram_record_sensitivity(400)), rng=rng)


@pytest.mark.parametrize(("bad", "match"), [
    ("diag", "unit diagonal"), ("range", r"\[-1, 1\]"), ("asym", "symmetric"),
])
def test_release_gram_refuses_matrices_that_are_not_cosine_grams(
        rng: np.random.Generator, bad: str, match: str) -> None:
    x = rng.standard_normal((30, 4)) * 3.0
    g = _gram(rng, 30, 4)
    if bad == "diag":  # the issue: not unit vectors, diagonal up to 164
        g = x @ x.T
    elif bad == "range":
        g[0, 1] = g[1, 0] = 1.0 + 1e-6
    else:
        g[0, 1] += 1e-6
    with pytest.raises(InvalidInputError, match=match):
        release_gram(g, calibrate(1.0, 1e-5, Regime("gram", 30)), rng=rng)
    g_ok = _gram(rng, 30, 4)
    g_ok[0, 0] += 5e-10  # rounding within 1e-9 is accepted
    release_gram(g_ok, calibrate(1.0, 1e-5, Regime("gram", 30)), rng=rng, projector="none")


def test_a_record_row_through_the_score_vector_calibration_is_refused(
        rng: np.random.Generator) -> None:
    g = _gram(rng, 101, 5)
    cal = calibrate(1.0, 1e-5, Regime("scores", 101))
    with pytest.raises(InvalidInputError) as exc:
        release_record_row(g[7], 7, cal, rng=rng)
    assert "made for regime scores/record" in str(exc.value)
    bare = calibrate(1.0, 1e-5, 2.0)
    with pytest.raises(InvalidInputError) as exc:
        release_record_row(g[7], 7, bare, rng=rng)
    assert _epsilon_in(str(exc.value)) == pytest.approx(
        gaussian_epsilon(bare.sigma, 1e-5, 2.0 * math.sqrt(100)), rel=0.01)


def test_score_vector_calibration_for_another_regime_is_refused(
        rng: np.random.Generator) -> None:
    s = rng.uniform(-1, 1, 50)
    with pytest.raises(InvalidInputError, match="margin"):
        release_score_vector(s, calibrate(1.0, 1e-5, 2.0), margin=0.0, rng=rng)
    with pytest.raises(InvalidInputError, match="made for regime scores/record"):
        release_score_vector(s, calibrate(1.0, 1e-5, Regime("scores", 50)), rng=rng,
                             identities=np.arange(50) // 2, max_records_per_identity=2)


# --- regimes: formulas against brute force ----------------------------------------------------

def test_regime_sensitivities_follow_their_formulas() -> None:
    n = 37
    assert Regime("scores", n).sensitivity == 2.0
    assert Regime("scores", n, margin=0.2).sensitivity == pytest.approx(0.8)
    assert Regime("scores", n, adjacency="identity",
                  max_records_per_identity=4).sensitivity == pytest.approx(4.0)
    assert Regime("row", n).sensitivity == pytest.approx(2 * math.sqrt(36)) == \
        record_row_sensitivity(n)
    assert Regime("row", n, margin=-0.5).sensitivity == pytest.approx(1.5 * 6)
    assert Regime("gram", n).sensitivity == gram_record_sensitivity(n)
    assert Regime("gram", n, adjacency="output", radius=2.0).sensitivity == 2.0
    assert Regime("gram", n, adjacency="identity",
                  max_records_per_identity=1).sensitivity == pytest.approx(
                      gram_record_sensitivity(n))
    k = 5
    assert gram_identity_sensitivity(n, k) == pytest.approx(
        2 * math.sqrt(2 * k * (n - k) + min(k * (k - 1), k * k / 2)))
    # record-level sensitivity of every regime: what a record-level ledger charges
    assert Regime("gram", n, adjacency="output", radius=2.0).record_sensitivity == \
        gram_record_sensitivity(n)
    assert Regime("scores", n, adjacency="identity",
                  max_records_per_identity=4).record_sensitivity == 2.0
    assert Regime("scores", n, margin=0.5).record_sensitivity == 0.5
    for bad in (dict(kind="gram", n=5, margin=0.1), dict(kind="scores", n=5, adjacency="output",
                                                          radius=1.0),
                dict(kind="gram", n=5, adjacency="output"), dict(kind="scores", n=5, margin=1.0),
                dict(kind="row", n=1), dict(kind="scores", n=5, max_records_per_identity=2)):
        with pytest.raises(InvalidInputError):
            Regime(**bad)


def _row_change(e: np.ndarray, e2: np.ndarray, k: int) -> float:
    return float(np.linalg.norm(e @ e[k] - e2 @ e2[k]))


def test_record_row_sensitivity_is_the_worst_case_of_replacing_one_record(
        rng: np.random.Generator) -> None:
    n, d, k = 9, 3, 4
    worst = 0.0
    for _ in range(300):
        e = _unit_rows(rng, n, d)
        e2 = e.copy()
        j = int(rng.integers(n))
        e2[j] = _unit_rows(rng, 1, d)[0]
        worst = max(worst, _row_change(e, e2, k))
    assert worst <= record_row_sensitivity(n) + 1e-12
    u = _unit_rows(rng, 1, d)[0]
    e = np.tile(u, (n, 1))
    e2 = e.copy()
    e2[k] = -u  # the reference record itself turns around: every entry moves by 2
    assert _row_change(e, e2, k) == pytest.approx(record_row_sensitivity(n), rel=1e-12)
    e3 = e.copy()
    e3[0] = -u  # another record: one entry
    assert _row_change(e, e3, k) == pytest.approx(2.0)


def test_margin_sensitivity_bounds_clipped_scores(rng: np.random.Generator) -> None:
    a = 0.3
    s = rng.uniform(-1, 1, (2000, 2))
    moved = np.abs(np.clip(s[:, 0], a, 1) - np.clip(s[:, 1], a, 1))
    assert moved.max() <= Regime("scores", 5, margin=a).sensitivity + 1e-15
    assert abs(np.clip(1.0, a, 1) - np.clip(-1.0, a, 1)) == pytest.approx(1 - a)  # tight


def test_identity_score_sensitivity_is_the_worst_case_of_one_identity(
        rng: np.random.Generator) -> None:
    n, d, k = 12, 3, 3
    q = _unit_rows(rng, 1, d)[0]
    e = np.tile(q, (n, 1))
    e2 = e.copy()
    e2[:k] = -q  # all k records of one identity turn around
    assert np.linalg.norm(e @ q - e2 @ q) == pytest.approx(
        Regime("scores", n, adjacency="identity", max_records_per_identity=k).sensitivity)


def _gram_change_sq(e: np.ndarray, rows: np.ndarray, k: int) -> float:
    e2 = e.copy()
    e2[:k] = rows
    return float(np.linalg.norm(e @ e.T - e2 @ e2.T) ** 2)


@pytest.mark.parametrize(("n", "k", "d"), [(5, 2, 2), (6, 3, 3), (5, 5, 3), (7, 1, 3)])
def test_identity_gram_sensitivity_bounds_brute_force_worst_cases(
        rng: np.random.Generator, n: int, k: int, d: int) -> None:
    bound_sq = gram_identity_sensitivity(n, k) ** 2

    def loss(theta: np.ndarray) -> float:
        x = theta.reshape(n + k, d)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return -_gram_change_sq(x[:n], x[n:], k)

    worst = 0.0
    for _ in range(12):  # multi-start local maximisation of ||S - S'||_F^2
        res = minimize(loss, rng.standard_normal((n + k) * d), method="L-BFGS-B",
                       options={"maxiter": 300})
        worst = max(worst, -res.fun)
    for _ in range(200):  # and random configurations
        worst = max(worst, -loss(rng.standard_normal((n + k) * d)))
    assert worst <= bound_sq * (1 + 1e-9)
    # the cross part alone is attained: the bound is tight to 1 + k / (4 (n - k))
    assert worst >= 8 * k * (n - k) * (1 - 1e-6)


def test_identity_bound_is_enforced_on_the_identity_column(rng: np.random.Generator) -> None:
    n = 40
    g = _gram(rng, n, 4)
    labels = np.repeat(np.arange(10), 4)
    cal = calibrate(5.0, 1e-5, Regime("gram", n, adjacency="identity",
                                      max_records_per_identity=4))
    rel = release_gram(g, cal, rng=rng, identities=labels, max_records_per_identity=4)
    assert rel.regime.adjacency == "identity" and rel.sensitivity == gram_identity_sensitivity(n, 4)
    assert rel.record_epsilon < rel.epsilon  # a record is part of an identity: cheaper
    labels[:5] = 99  # identity 99 now has 5 records
    with pytest.raises(InvalidInputError, match="identity 99 has 5 records"):
        release_gram(g, cal, rng=rng, identities=labels, max_records_per_identity=4)
    with pytest.raises(InvalidInputError, match="public bound"):
        release_gram(g, cal, rng=rng, identities=labels)
    not_psd = np.full((n, n), -0.5)  # cosines in range, unit diagonal, but no Gram of unit rows
    np.fill_diagonal(not_psd, 1.0)
    with pytest.raises(InvalidInputError, match="positive semidefinite"):
        release_gram(not_psd, cal, rng=rng, identities=np.arange(n) // 4,
                     max_records_per_identity=4)


def test_identity_score_vector_release(rng: np.random.Generator) -> None:
    s = rng.uniform(-1, 1, 60)
    labels = np.arange(60) % 20  # 3 records each
    regime = Regime("scores", 60, adjacency="identity", max_records_per_identity=3)
    rel = release_score_vector(s, calibrate(2.0, 1e-6, regime), rng=rng, identities=labels,
                               max_records_per_identity=3)
    assert rel.sensitivity == pytest.approx(2 * math.sqrt(3))
    assert rel.sigma == pytest.approx(analytic_sigma(2.0, 1e-6, 2 * math.sqrt(3)))
    assert rel.record_epsilon == pytest.approx(gaussian_epsilon(rel.sigma, 1e-6, 2.0), rel=1e-9)
    with pytest.raises(InvalidInputError, match="above the public bound"):
        release_score_vector(s, calibrate(2.0, 1e-6, Regime(
            "scores", 60, adjacency="identity", max_records_per_identity=2)), rng=rng,
            identities=labels, max_records_per_identity=2)


def test_record_row_release(rng: np.random.Generator) -> None:
    g = _gram(rng, 50, 4)
    cal = calibrate(3.0, 1e-5, Regime("row", 50))
    rel = release_record_row(g[3], 3, cal, rng=rng)
    assert rel.scores[3] == 1.0 and rel.noisy[3] == 1.0  # public diagonal, no noise
    assert rel.sigma == pytest.approx(analytic_sigma(3.0, 1e-5, 2 * 7.0))
    assert np.abs(rel.scores).max() <= 1.0
    assert rel.regime.kind == "row" and rel.record_epsilon == 3.0
    with pytest.raises(InvalidInputError, match="must be 1"):
        release_record_row(g[3], 4, cal, rng=rng)
    with pytest.raises(InvalidInputError, match="outside"):
        release_record_row(g[3], 50, cal, rng=rng)


def test_margin_release_clips_before_the_noise_and_to_the_margin(
        rng: np.random.Generator) -> None:
    s = rng.uniform(-1, 1, 500)
    a = 0.2
    cal = calibrate(5.0, 1e-5, Regime("scores", 500, margin=a))
    rel = release_score_vector(s, cal, rng=np.random.default_rng(3), margin=a)
    noise = np.random.default_rng(3).normal(0.0, cal.sigma, 500)
    np.testing.assert_allclose(rel.noisy, np.clip(s, a, 1) + noise, rtol=0, atol=1e-12)
    assert rel.scores.min() >= a and rel.sensitivity == pytest.approx(0.8)


def test_score_vector_states_when_noise_dominates(rng: np.random.Generator) -> None:
    s = rng.uniform(-1, 1, 900)
    low = release_score_vector(s, calibrate(1.0, 1e-5, Regime("scores", 900)), rng=rng)
    high = release_score_vector(s, calibrate(200.0, 1e-5, Regime("scores", 900)), rng=rng)
    assert low.noise_dominated and not high.noise_dominated
    limit = 1.0 / math.sqrt(2 * math.log(900))
    assert low.useful_epsilon == pytest.approx(gaussian_epsilon(limit, 1e-5, 2.0))
    assert low.useful_epsilon == high.useful_epsilon


# --- the data-free baseline -------------------------------------------------------------------

def test_record_level_gram_at_epsilon_1_warns_it_is_no_better_than_the_identity(
        rng: np.random.Generator) -> None:
    g = _gram(rng, 300, 64)
    rel = release_gram(g, calibrate(1.0, 1e-5, Regime("gram", 300)), rng=rng)
    b = rel.baseline
    true_release = np.linalg.norm(rel.matrix - g) ** 2
    true_identity = np.linalg.norm(g - np.eye(300)) ** 2
    assert true_release > true_identity  # what the warning says
    assert b.no_better_than_identity and "not expected to be closer" in b.warning
    assert b.useful_epsilon is not None and b.useful_epsilon > 1.0
    assert f"{b.useful_epsilon:.3g}" in b.warning
    assert b.noisy_distance == pytest.approx(rel.sigma ** 2 * 300 * 301 / 2)
    assert b.identity_max == 300 * 299


def test_noise_dominated_gram_releases_never_claim_to_beat_the_identity() -> None:
    # record level at epsilon 3: SURE's standard error (~ sigma^2 n) dwarfs every distance a
    # correlation matrix can have; an unresolved (e.g. strongly negative) estimate must not pass
    # for a small one (it did, 1 release in 16, in the first rerun of experiment scores)
    rng = np.random.default_rng(26)
    g = _gram(rng, 120, 16)
    ident = np.linalg.norm(g - np.eye(120)) ** 2
    cal = calibrate(3.0, 1e-5, Regime("gram", 120))
    for _ in range(40):
        rel = release_gram(g, cal, rng=rng)
        assert np.linalg.norm(rel.matrix - g) ** 2 > ident  # the truth: worse than nothing
        assert rel.baseline.no_better_than_identity, rel.baseline


def test_projection_on_low_rank_data_at_output_adjacency_is_not_warned(
        rng: np.random.Generator) -> None:
    g = _gram(rng, 200, 3)
    rel = release_gram(g, calibrate(30.0, 1e-5, Regime("gram", 200, adjacency="output",
                                                       radius=2.0)),
                       rng=rng, adjacency="output", radius=2.0, dimension=3)
    b = rel.baseline
    assert np.linalg.norm(rel.matrix - g) ** 2 < np.linalg.norm(g - np.eye(200)) ** 2
    assert not b.no_better_than_identity and b.warning is None
    assert b.useful_epsilon <= 30.0
    assert b.identity_floor == pytest.approx(200 ** 2 / 3 - 200)


def test_baseline_estimates_are_unbiased_and_the_bound_holds(rng: np.random.Generator) -> None:
    n, sigma = 40, 0.8
    g = _gram(rng, n, 3)
    ident = np.linalg.norm(g - np.eye(n)) ** 2
    true, sure, ses, iest = [], [], [], []
    for _ in range(40):
        noisy = symmetrize(g + rng.normal(0.0, sigma, (n, n)))
        proj = project_correlation(noisy).matrix
        true.append(np.linalg.norm(proj - g) ** 2)
        est, se = projection_risk_estimate(noisy, proj, sigma,
                                           lambda m: project_correlation(m).matrix, rng)
        sure.append(est)
        ses.append(se)
        iest.append(identity_distance_estimate(noisy, sigma)[0])
    true, sure = np.array(true), np.array(sure)
    # SURE: unbiased (4 standard errors of the mean of 40) and its stated error is not small
    assert abs(sure.mean() - true.mean()) < 4 * (sure - true).std() / math.sqrt(40)
    assert np.mean(ses) >= 0.8 * (sure - true).std()
    se_i = math.sqrt(n * (n - 1) * sigma ** 4 + 4 * sigma ** 2 * ident)
    assert abs(np.mean(iest) - ident) < 4 * se_i / math.sqrt(40)
    assert true.mean() <= projected_distance_bound(n, sigma, metric=True)


def test_baseline_of_the_unprojected_release_is_exact(rng: np.random.Generator) -> None:
    g = _gram(rng, 30, 3)
    rel = release_gram(g, calibrate(3.0, 1e-5, Regime("gram", 30)), rng=rng, projector="none")
    b = rel.baseline
    assert b.projected_bound == b.noisy_distance and b.projected_estimate is None
    assert b.no_better_than_identity  # sigma^2 n (n + 1) / 2 >> n (n - 1)


# --- composition ------------------------------------------------------------------------------

@pytest.mark.parametrize(("epsilon", "total"), [(1.0, 36.5), (10.0, 970.0), (100.0, 23215.0)])
def test_400_probes_compose_to_the_issue_totals(epsilon: float, total: float) -> None:
    assert composed_epsilon([epsilon] * 400, 1e-5, 1e-5) == pytest.approx(total, rel=1e-3)


def test_composition_agrees_with_the_pld_accountant() -> None:
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    eps = [0.5, 1.0, 2.0]
    sigmas = [analytic_sigma(e, 1e-6, 1.0) for e in eps]
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s)
                                               for s in sigmas]))
    ours = composed_epsilon(eps, 1e-6, 1e-5)
    assert ours - 1e-9 <= acc.get_epsilon(1e-5) <= ours + 1e-3
