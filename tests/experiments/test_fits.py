"""Cubic regression splines with five interior knots (fewer on few points) and bootstrap
bands."""

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.fits import fit_spline, interior_knots


def test_spline_reproduces_a_cubic_exactly(rng):
    x = rng.uniform(0, 2, 60)
    y = 1 - x + 0.5 * x**3
    fit = fit_spline(x, y, rng, resamples=20)
    np.testing.assert_allclose(fit.fit, 1 - fit.grid + 0.5 * fit.grid**3, atol=1e-9)
    np.testing.assert_allclose(fit.low, fit.fit, atol=1e-8)  # noiseless: zero-width band


def test_bootstrap_band_brackets_the_fit_of_noisy_data(rng):
    x = rng.uniform(0, 1, 200)
    fit = fit_spline(x, np.sin(3 * x) + 0.1 * rng.standard_normal(200), rng, resamples=300)
    assert fit.resamples >= 290
    assert np.all(fit.low <= fit.fit + 1e-12) and np.all(fit.fit <= fit.high + 1e-12)
    # Mean error well under the noise sd 0.1 (boundary points alone may be ~2-3x worse).
    assert np.mean(np.abs(fit.fit - np.sin(3 * fit.grid))) < 0.05


def test_first_crossing_interpolates_a_decreasing_fit(rng):
    x = np.linspace(0, 10, 50)
    fit = fit_spline(x, 1 - 0.08 * x, rng, resamples=0)
    assert fit.first_crossing(0.5) == pytest.approx(6.25, abs=1e-6)
    assert fit.first_crossing(0.0) is None
    assert fit.first_crossing(2.0) == 0.0


def test_spline_needs_enough_points(rng):
    with pytest.raises(InvalidInputError, match="at least"):
        fit_spline(np.arange(5.0), np.arange(5.0), rng)


def test_few_points_get_fewer_knots_and_stay_within_the_data(rng):
    """The paper's 5 interior knots from 54 points on (6 per coefficient), none (a cubic) on
    12: a fit on 12 noisy points of a line stays near it instead of swinging between them."""
    assert [interior_knots(n) for n in (9, 12, 30, 53, 54, 200)] == [0, 0, 1, 4, 5, 5]
    x = np.linspace(0, 1, 12)
    y = 0.2 - 0.1 * x + 0.02 * rng.standard_normal(12)
    fit = fit_spline(x, y, rng, resamples=0)
    assert np.max(np.abs(fit.fit - (0.2 - 0.1 * fit.grid))) < 0.05
