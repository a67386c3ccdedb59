"""Tests of common.scoreshield: calibration, sensitivities, releases, projection, decision tools."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield import (
    Calibration,
    analytic_sigma,
    auc,
    calibrate,
    calibrate_sigma,
    classic_sigma,
    eer,
    flip_probability,
    gaussian_delta,
    gaussian_epsilon,
    gram_identity_sensitivity,
    gram_output_sensitivity,
    gram_record_sensitivity,
    identity_centroid_sensitivity,
    identity_rows_sensitivity,
    per_entry_sensitivity,
    private_fmr,
    project_correlation,
    recalibrate_threshold,
    release_gram,
    release_score_vector,
    roc_curve,
    score_vector_sensitivity,
    symmetrize,
    tar_at_far,
)

EPS_GRID = np.geomspace(0.01, 50.0, 9)
DELTA_GRID = np.geomspace(1e-9, 1e-2, 5)


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    e = rng.standard_normal((n, d))
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _assert_correlation(s: np.ndarray) -> None:
    assert np.allclose(s, s.T, atol=0.0)
    assert np.linalg.eigvalsh(s)[0] >= -1e-8  # PSD up to rounding
    assert np.abs(np.diag(s) - 1.0).max() <= 1e-12  # unit diagonal
    assert np.abs(s).max() <= 1.0  # entries in [-1, 1]


# --- calibration -------------------------------------------------------------------------------

def _reference_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic Gaussian sigma from an independent implementation: dp-accounting's hockey-
    stick divergence of the Gaussian privacy loss (Balle-Wang's delta(epsilon), a maintained
    library's code), inverted here by plain bisection on sigma (not our log-space brentq)."""
    from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss

    def delta_at(sigma: float) -> float:
        loss = GaussianPrivacyLoss(standard_deviation=sigma, sensitivity=sensitivity,
                                   pessimistic_estimate=False, log_mass_truncation_bound=-200)
        return float(loss.get_delta_for_epsilon(epsilon))

    lo, hi = 1e-6 * sensitivity, 1e6 * sensitivity  # delta_at decreases in sigma
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid, hi)
        if hi / lo - 1.0 < 1e-12:
            break
    return hi


@pytest.mark.parametrize("epsilon", EPS_GRID)
@pytest.mark.parametrize("delta", DELTA_GRID)
def test_analytic_sigma_matches_an_independent_reference(epsilon: float, delta: float) -> None:
    # measured: agreement to 8e-13 relative over this grid (epsilon 0.01-50, delta 1e-9-1e-2)
    assert analytic_sigma(epsilon, delta, 2.0) == pytest.approx(
        _reference_sigma(epsilon, delta, 2.0), rel=1e-9)


@pytest.mark.parametrize("epsilon", [e for e in EPS_GRID if e > 10.0])
@pytest.mark.parametrize("delta", DELTA_GRID)
def test_analytic_sigma_is_exact_for_large_epsilon(epsilon: float, delta: float) -> None:
    # double-precision evaluations of Phi (as in the reference above) lose digits above epsilon
    # ~ 10, where delta is a difference of two tiny terms; compare there with a 50-digit
    # evaluation of the Balle-Wang delta instead: delta(sigma) = target to 1e-6 relative.
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    sigma = analytic_sigma(epsilon, delta, 2.0)
    x, e2 = mp.mpf(2.0) / mp.mpf(sigma), mp.mpf(epsilon)
    exact = mp.ncdf(x / 2 - e2 / x) - mp.e ** e2 * mp.ncdf(-x / 2 - e2 / x)
    assert float(exact / mp.mpf(delta)) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("epsilon", EPS_GRID)
@pytest.mark.parametrize("delta", DELTA_GRID)
def test_delta_at_analytic_sigma_meets_target(epsilon: float, delta: float) -> None:
    sigma = analytic_sigma(epsilon, delta, 2.0)
    assert gaussian_delta(sigma, epsilon, 2.0) <= delta
    assert gaussian_delta(sigma * (1 - 1e-6), epsilon, 2.0) > delta  # smallest such sigma


@pytest.mark.parametrize("epsilon", [0.05, 1.0, 30.0, 800.0])
def test_gaussian_epsilon_inverts_the_calibration(epsilon: float) -> None:
    sigma = analytic_sigma(epsilon, 1e-6, 2.0)
    assert gaussian_epsilon(sigma, 1e-6, 2.0) == pytest.approx(epsilon, rel=1e-9)
    # a per-entry calibrated Gram is a much weaker record-level release (n = 1000)
    assert gaussian_epsilon(sigma, 1e-6, gram_record_sensitivity(1000)) > 10 * epsilon


@pytest.mark.parametrize("epsilon", [50.0, 200.0, 1000.0])
def test_analytic_sigma_is_stable_for_very_large_epsilon(epsilon: float) -> None:
    sens = gram_record_sensitivity(1000)
    sigma = analytic_sigma(epsilon, 1e-5, sens)
    assert np.isfinite(sigma) and sigma > 0
    assert gaussian_delta(sigma, epsilon, sens) == pytest.approx(1e-5, rel=1e-6)


def test_analytic_sigma_matches_spec_values_at_n_1000() -> None:
    # SPEC.md section 5: sigma = 333 at epsilon = 1 and 8.5 at epsilon = 100 (record level)
    sens = gram_record_sensitivity(1000)
    assert calibrate_sigma(1.0, 1e-5, sens) == pytest.approx(333.5, abs=0.1)
    assert calibrate_sigma(100.0, 1e-5, sens) == pytest.approx(8.46, abs=0.01)


def test_analytic_is_tighter_than_classic() -> None:
    for eps in (0.1, 0.5, 0.9):
        assert analytic_sigma(eps, 1e-5, 2.0) < classic_sigma(eps, 1e-5, 2.0)


def test_classic_sigma_formula() -> None:
    expected = 2.0 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    assert calibrate_sigma(0.5, 1e-5, 2.0, method="classic") == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("epsilon", [1.0, 2.0, 100.0])
def test_classic_refuses_epsilon_at_least_one(epsilon: float) -> None:
    with pytest.raises(InvalidInputError, match="epsilon must be < 1"):
        calibrate_sigma(epsilon, 1e-5, 2.0, method="classic")


@pytest.mark.parametrize(("epsilon", "delta"), [
    (0.0, 1e-5), (-1.0, 1e-5), (float("nan"), 1e-5), (1.0, 0.0), (1.0, 1.0), (1.0, -0.1),
    (1.0, float("nan")),
])
def test_calibration_rejects_bad_privacy_parameters(epsilon: float, delta: float) -> None:
    with pytest.raises(InvalidInputError, match=r"epsilon|delta"):
        calibrate_sigma(epsilon, delta, 2.0)


def test_calibration_rejects_unknown_method_and_bad_sensitivity() -> None:
    with pytest.raises(InvalidInputError, match="method"):
        calibrate_sigma(1.0, 1e-5, 2.0, method="laplace")
    with pytest.raises(InvalidInputError, match="sensitivity"):
        calibrate_sigma(1.0, 1e-5, 0.0)


# --- sensitivities -----------------------------------------------------------------------------

def test_sensitivity_values() -> None:
    assert score_vector_sensitivity() == 2.0
    assert per_entry_sensitivity() == 2.0
    assert identity_centroid_sensitivity() == 2.0
    assert gram_record_sensitivity(1000) == pytest.approx(2 * math.sqrt(2 * 999), rel=1e-15)
    assert gram_output_sensitivity(3.5) == 3.5
    assert identity_rows_sensitivity(9) == pytest.approx(6.0)
    assert gram_identity_sensitivity(50, 1) == pytest.approx(gram_record_sensitivity(50))
    with pytest.raises(InvalidInputError, match="n"):
        gram_record_sensitivity(1)
    with pytest.raises(InvalidInputError, match="radius"):
        gram_output_sensitivity(-1.0)


def test_gram_record_sensitivity_bounds_a_record_replacement(rng: np.random.Generator) -> None:
    n = 30
    e = _unit_rows(rng, n, 5)
    worst = 0.0
    for _ in range(50):
        e2 = e.copy()
        e2[3] = _unit_rows(rng, 1, 5)[0]
        worst = max(worst, float(np.linalg.norm(e @ e.T - e2 @ e2.T)))
    e2 = e.copy()
    e2[3] = -e[3]  # every entry of row/column 3 flips sign
    worst = max(worst, float(np.linalg.norm(e @ e.T - e2 @ e2.T)))
    assert worst <= gram_record_sensitivity(n) + 1e-12


def test_gram_identity_sensitivity_bounds_an_identity_replacement(rng: np.random.Generator) -> None:
    n, m = 20, 4
    e = _unit_rows(rng, n, 3)
    e2 = e.copy()
    e2[:m] = _unit_rows(rng, m, 3)
    assert np.linalg.norm(e @ e.T - e2 @ e2.T) <= gram_identity_sensitivity(n, m)


# --- releases ----------------------------------------------------------------------------------

def test_release_score_vector_is_clipped_and_calibrated(rng: np.random.Generator) -> None:
    e = _unit_rows(rng, 200, 8)
    q = _unit_rows(rng, 1, 8)[0]
    cal = calibrate(1.0, 1e-5, score_vector_sensitivity())
    rel = release_score_vector(e @ q, cal, rng=rng)
    assert rel.sigma == cal.sigma == pytest.approx(analytic_sigma(1.0, 1e-5, 2.0))
    assert rel.sensitivity == 2.0
    assert np.abs(rel.scores).max() <= 1.0
    assert rel.n_clipped == int(np.count_nonzero(np.abs(rel.noisy) > 1.0))
    assert np.array_equal(rel.scores, np.clip(rel.noisy, -1, 1))


def test_release_score_vector_rejects_bad_input() -> None:
    cal = calibrate(1.0, 1e-5, 2.0)
    with pytest.raises(InvalidInputError, match="scores"):
        release_score_vector([0.1, np.nan], cal)
    with pytest.raises(InvalidInputError, match="scores"):
        release_score_vector([0.1, 1.5], cal)
    with pytest.raises(InvalidInputError, match="calibration must be a Calibration"):
        release_score_vector([0.1, 0.2], 0.5)
    with pytest.raises(InvalidInputError, match="epsilon"):
        calibrate(0.0, 1e-5, 2.0)
    with pytest.raises(InvalidInputError, match="delta"):
        calibrate(1.0, 1.0, 2.0)


def test_calibration_object_carries_the_sigma_the_release_applies(
        rng: np.random.Generator) -> None:
    cal = calibrate(3.0, 1e-6, gram_record_sensitivity(12))
    assert isinstance(cal, Calibration)
    assert cal.sigma == calibrate_sigma(3.0, 1e-6, cal.sensitivity)  # same function, same number
    assert cal.noise_multiplier == cal.sigma / cal.sensitivity
    e = _unit_rows(rng, 12, 3)
    rel = release_gram(e @ e.T, cal, rng=np.random.default_rng(4), projector="none")
    noise = rel.noisy - e @ e.T  # (N + N^T)/2: off-diagonal variance sigma^2 / 2
    expected = symmetrize(np.random.default_rng(4).normal(0.0, cal.sigma, (12, 12)))
    np.testing.assert_allclose(noise, expected, rtol=0, atol=1e-9 * cal.sigma)


@pytest.mark.parametrize("epsilon", [1e60, 1e300, math.inf])
def test_absurdly_large_epsilon_is_invalid_input_not_a_solver_error(epsilon: float) -> None:
    with pytest.raises(InvalidInputError, match="epsilon"):
        calibrate(epsilon, 1e-5, 2.0)


@pytest.mark.parametrize("projector", ["newton", "aap", "dykstra", "none"])
def test_release_gram_at_record_level_sensitivity(
    rng: np.random.Generator, projector: str
) -> None:
    e = _unit_rows(rng, 40, 4)
    rel = release_gram(e @ e.T, calibrate(50.0, 1e-5, gram_record_sensitivity(40)), rng=rng,
                       projector=projector)
    assert rel.sensitivity == pytest.approx(gram_record_sensitivity(40))
    assert rel.sigma == pytest.approx(analytic_sigma(50.0, 1e-5, rel.sensitivity))
    assert np.array_equal(rel.noisy, rel.noisy.T)
    if projector == "none":
        assert rel.projection is None and rel.matrix is rel.noisy
    else:
        _assert_correlation(rel.matrix)
        assert rel.projection is not None and rel.projection.method == projector


def test_release_gram_states_per_entry_calibration_as_output_space_adjacency(
        rng: np.random.Generator) -> None:
    # the paper's App. K calibration (one entry, Delta = 2) is output-space adjacency at radius 2;
    # the release states it under that name and its record-level epsilon beside it
    e = _unit_rows(rng, 20, 4)
    cal = calibrate(10.0, 1e-5, per_entry_sensitivity())
    rel = release_gram(e @ e.T, cal, rng=rng, adjacency="output", radius=2.0)
    assert rel.sigma == pytest.approx(analytic_sigma(10.0, 1e-5, 2.0))
    assert rel.projector == "newton"  # the default
    assert rel.regime.adjacency == "output" and rel.epsilon == 10.0
    assert rel.record_epsilon == pytest.approx(
        gaussian_epsilon(rel.sigma, 1e-5, gram_record_sensitivity(20)), rel=1e-9)
    assert rel.record_epsilon > 10 * rel.epsilon
    with pytest.raises(InvalidInputError, match=r"deliver epsilon=12\d\.\d+ here, not 10"):
        release_gram(e @ e.T, cal, rng=rng)  # the same noise is no record-level release


@pytest.mark.parametrize("bad", [
    np.ones((3, 4)), np.array([[1.0, np.nan], [np.nan, 1.0]]), np.ones(4), np.ones((1, 1)),
])
def test_release_gram_rejects_bad_matrices(bad: np.ndarray) -> None:
    with pytest.raises(InvalidInputError, match="gram"):
        release_gram(bad, calibrate(1.0, 1e-5, 2.0))


def test_release_gram_rejects_bad_parameters() -> None:
    g = np.eye(3)
    with pytest.raises(InvalidInputError, match="calibration"):
        release_gram(g, 1.0)
    with pytest.raises(InvalidInputError, match="projector"):
        release_gram(g, calibrate(1.0, 1e-5, 2.0), projector="sdp")


# --- projection --------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(
    arrays(np.float64, (7, 7), elements=st.floats(-20, 20, allow_nan=False)),
    st.sampled_from(["newton", "aap", "dykstra"]),
    st.integers(1, 60),
)
def test_projection_output_is_a_correlation_matrix(a: np.ndarray, method: str, it: int) -> None:
    # whatever the input and however early the iteration stops, the output is feasible
    res = project_correlation(a + a.T, method=method, max_iter=it)
    _assert_correlation(res.matrix)
    assert res.min_eigenvalue >= -1e-8
    assert res.max_diag_error <= 1e-12
    assert res.max_abs_entry <= 1.0


@st.composite
def noisy_grams(draw) -> np.ndarray:
    """A random noisy Gram: unit rows in R^d plus symmetric Gaussian noise of any scale."""
    n = draw(st.integers(2, 8))
    d = draw(st.integers(1, 4))
    sigma = draw(st.floats(1e-2, 10.0))
    seed = draw(st.integers(0, 2**32 - 1))
    r = np.random.default_rng(seed)
    e = _unit_rows(r, n, d)
    return symmetrize(e @ e.T + sigma * r.standard_normal((n, n)))


@settings(max_examples=40, deadline=None)
@given(noisy_grams())
def test_newton_is_the_metric_projection_dykstra_converges_to(noisy: np.ndarray) -> None:
    newton = project_correlation(noisy, method="newton", tol=1e-12)
    dykstra = project_correlation(noisy, method="dykstra", tol=1e-13, max_iter=20_000)
    assert newton.converged
    # Dykstra converges sublinearly when the solution is degenerate (e.g. rank one with entries
    # +-1): there it is no tight reference, and the example is not used
    assume(dykstra.converged)
    # the same matrix: Newton stops at a relative gap of 1e-12, Dykstra (linear convergence) at
    # a relative change and gap of 1e-13; 1e-6 relative in Frobenius is the tolerance
    diff = np.linalg.norm(newton.matrix - dykstra.matrix) / np.linalg.norm(dykstra.matrix)
    assert diff <= 1e-6
    # PSD with unit diagonal to 1e-10
    assert np.linalg.eigvalsh(newton.matrix)[0] >= -1e-10
    assert np.abs(np.diag(newton.matrix) - 1.0).max() <= 1e-10
    # never farther from the input than Dykstra's (both are feasible; the metric projection is
    # the nearest feasible point); slack: rounding of the two distances, 1e-12 relative
    assert newton.distance_to_input <= dykstra.distance_to_input * (1 + 1e-12) + 1e-14


def test_newton_needs_few_eigendecompositions_on_a_dp_noised_gram() -> None:
    # record-level noise at epsilon = 10 on 120 unit rows: sigma ~ 13 against unit entries, the
    # regime of the release service; alternating projections need hundreds of eigh here
    r = np.random.default_rng(11)
    n = 120
    e = _unit_rows(r, n, 8)
    cal = calibrate(10.0, 1e-5, gram_record_sensitivity(n))
    rel = release_gram(e @ e.T, cal, rng=r, tol=1e-8)
    proj = rel.projection
    assert proj.method == "newton" and proj.converged and proj.relative_residual <= 1e-8
    assert proj.eigendecompositions <= 30  # typically 8-12 (Qi and Sun report 10-30)
    _assert_correlation(proj.matrix)
    dyk = project_correlation(rel.noisy, method="dykstra", tol=1e-6, max_iter=60)
    assert proj.distance_to_input <= dyk.distance_to_input


def test_projection_reports_progress_and_honours_a_time_cap() -> None:
    r = np.random.default_rng(2)
    a = r.standard_normal((30, 30)) * 5
    seen: list[tuple[int, float]] = []
    res = project_correlation(a + a.T, progress=lambda it, gap: seen.append((it, gap)))
    assert res.converged and seen[-1] == (res.iterations, res.relative_residual)
    assert [it for it, _ in seen] == list(range(res.iterations + 1))  # Newton reports step 0
    capped = project_correlation(a + a.T, method="dykstra", tol=1e-14, max_iter=10**6,
                                 max_seconds=1e-9)
    assert not capped.converged and capped.iterations <= 1
    _assert_correlation(capped.matrix)  # a capped run is still normalised to a feasible output


def test_projection_keeps_a_feasible_matrix(rng: np.random.Generator) -> None:
    e = _unit_rows(rng, 25, 6)
    g = e @ e.T
    for method in ("newton", "aap", "dykstra"):
        res = project_correlation(g, method=method)
        assert res.converged and res.iterations <= 2
        assert np.abs(res.matrix - g).max() <= 1e-10


def test_projections_reduce_frobenius_error_on_average() -> None:
    # Projection onto a convex set containing the clean Gram cannot increase the distance to it
    # (paper Lemma C.27); AAP is not the metric projection, so check it on average over seeds.
    n, seeds = 30, 8
    ratios = {"aap": [], "dykstra": []}
    for seed in range(seeds):
        r = np.random.default_rng(seed)
        e = _unit_rows(r, n, 4)
        g = e @ e.T
        noise = r.standard_normal((n, n)) * 0.3
        noisy = g + (noise + noise.T) / 2
        err_noisy = np.linalg.norm(noisy - g)
        for method in ratios:
            res = project_correlation(noisy, method=method, tol=1e-8, max_iter=2000)
            ratios[method].append(np.linalg.norm(res.matrix - g) / err_noisy)
    for method, vals in ratios.items():
        assert np.mean(vals) < 1.0, method
    # Dykstra converges to the metric projection: never farther from the clean Gram (up to 1e-6)
    assert all(r <= 1.0 + 1e-6 for r in ratios["dykstra"])


def test_dykstra_is_at_least_as_close_to_the_input_as_aap() -> None:
    for seed in range(6):
        r = np.random.default_rng(100 + seed)
        e = _unit_rows(r, 25, 3)
        noise = r.standard_normal((25, 25)) * 0.5
        noisy = e @ e.T + (noise + noise.T) / 2
        aap = project_correlation(noisy, method="aap", tol=1e-9, max_iter=3000)
        dyk = project_correlation(noisy, method="dykstra", tol=1e-9, max_iter=3000)
        assert dyk.converged
        assert dyk.distance_to_input <= aap.distance_to_input + 1e-6  # tolerance of convergence


def test_dykstra_matches_higham_nearest_correlation_matrix() -> None:
    # statsmodels' corr_nearest is Higham's algorithm for the same metric projection
    ct = pytest.importorskip("statsmodels.stats.correlation_tools")
    r = np.random.default_rng(7)
    e = _unit_rows(r, 15, 3)
    noise = r.standard_normal((15, 15)) * 0.4
    noisy = e @ e.T + (noise + noise.T) / 2
    with warnings.catch_warnings():  # it may stop on its iteration cap; compared to 1e-5 below
        warnings.simplefilter("ignore")
        ref = ct.corr_nearest(noisy, threshold=-1e-12, n_fact=1000)
    dyk = project_correlation(noisy, method="dykstra", tol=1e-10, max_iter=5000)
    assert np.abs(dyk.matrix - ref).max() <= 1e-5


@pytest.mark.parametrize("bad", [np.ones((2, 3)), np.array([[np.inf, 0], [0, 1.0]])])
def test_projection_rejects_bad_matrices(bad: np.ndarray) -> None:
    with pytest.raises(InvalidInputError, match="matrix"):
        project_correlation(bad)


def test_projection_rejects_bad_options() -> None:
    with pytest.raises(InvalidInputError, match="method"):
        project_correlation(np.eye(3), method="sdp")
    with pytest.raises(InvalidInputError, match="tol"):
        project_correlation(np.eye(3), tol=0.0)
    with pytest.raises(InvalidInputError, match="max_iter"):
        project_correlation(np.eye(3), max_iter=0)


def test_projection_reports_a_capped_run() -> None:
    r = np.random.default_rng(3)
    a = r.standard_normal((20, 20)) * 5
    res = project_correlation(a + a.T, method="aap", tol=1e-14, max_iter=3)
    assert not res.converged and res.iterations == 3 and res.residual > 0
    _assert_correlation(res.matrix)


# --- decision level ----------------------------------------------------------------------------

def _random_verification(rng: np.random.Generator, m: int = 3000, ties: bool = False):
    labels = rng.random(m) < 0.3
    scores = rng.normal(0.0, 1.0, m) + 1.2 * labels
    if ties:
        scores = np.round(scores, 1)  # many tied scores
    return labels, scores


@pytest.mark.parametrize("ties", [False, True])
def test_roc_and_auc_match_sklearn(rng: np.random.Generator, ties: bool) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    labels, scores = _random_verification(rng, ties=ties)
    fpr, tpr, thr = roc_curve(labels, scores)
    rfpr, rtpr, rthr = metrics.roc_curve(labels, scores, drop_intermediate=False)
    np.testing.assert_allclose(fpr, rfpr, rtol=0, atol=1e-15)
    np.testing.assert_allclose(tpr, rtpr, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(thr[1:], rthr[1:])
    assert auc(labels, scores) == pytest.approx(metrics.roc_auc_score(labels, scores), abs=1e-12)


def test_eer_matches_sklearn_roc_interpolation(rng: np.random.Generator) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    from scipy.interpolate import interp1d
    from scipy.optimize import brentq

    labels, scores = _random_verification(rng)
    fpr, tpr, _ = metrics.roc_curve(labels, scores)
    ref = brentq(lambda x: 1.0 - x - interp1d(fpr, tpr)(x), 0.0, 1.0)
    # the reference interpolates a thinned curve; both are within one ROC step of each other
    step = 1.0 / min(labels.sum(), (~labels).sum())
    assert eer(labels, scores) == pytest.approx(ref, abs=step)


def test_tar_at_far_matches_sklearn_roc(rng: np.random.Generator) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    labels, scores = _random_verification(rng)
    fpr, tpr, _ = metrics.roc_curve(labels, scores, drop_intermediate=False)
    for far in (1e-3, 1e-2, 0.1):
        assert tar_at_far(labels, scores, far) == tpr[fpr <= far].max()


def test_perfect_and_random_scores() -> None:
    labels = np.array([0, 0, 1, 1])
    assert auc(labels, [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert eer(labels, [0.1, 0.2, 0.8, 0.9]) == 0.0
    assert auc(labels, [0.5, 0.5, 0.5, 0.5]) == 0.5


def test_decision_tools_reject_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="labels"):
        auc([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(InvalidInputError, match="labels"):
        auc([0, 1], [0.1, 0.2, 0.3])
    with pytest.raises(InvalidInputError, match="scores"):
        roc_curve([0, 1], [0.1, np.nan])
    with pytest.raises(InvalidInputError, match="far"):
        tar_at_far([0, 1], [0.1, 0.2], 2.0)


def test_flip_probability_formula() -> None:
    assert flip_probability(0.5, 0.5, 0.1) == pytest.approx(0.5)
    assert flip_probability(0.7, 0.5, 0.1) == pytest.approx(0.0227501319, rel=1e-8)


def test_recalibration_restores_the_target_false_match_rate(rng: np.random.Generator) -> None:
    impostors = np.tanh(rng.normal(0.0, 0.3, 20000))
    sigma, target = 0.2, 1e-2
    rec = recalibrate_threshold(impostors, sigma, target)
    assert rec.feasible
    assert rec.fmr_before > target  # noise inflates the FMR at the clean threshold
    assert rec.offset > 0  # the threshold moves right (paper Remark G.22)
    assert rec.fmr == pytest.approx(target, rel=1e-6)
    # Monte Carlo check on fresh noise: the empirical FMR at the new threshold is the target
    noisy = np.clip(impostors + rng.normal(0, sigma, (5, impostors.size)), -1, 1)
    assert np.mean(noisy > rec.threshold) == pytest.approx(target, rel=0.1)


def test_recalibration_reports_an_unattainable_target() -> None:
    impostors = np.full(100, 0.9)
    rec = recalibrate_threshold(impostors, 1.0, 1e-4)
    assert not rec.feasible and rec.threshold == 1.0 and rec.fmr == 0.0
    assert private_fmr(impostors, 0.99, 1.0) > 1e-4
