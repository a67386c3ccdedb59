"""Descriptive curve fits of the sweeps: cubic regression splines with five equally spaced
interior knots and pointwise percentile-bootstrap bands (the paper's Section 5 fits); with
fewer than :data:`POINTS_PER_COEFFICIENT` points per coefficient, fewer interior knots (down to
none, a cubic), so a fit on few draws smooths instead of interpolating.

References: noisy-anchor GDP paper, Section 5.2.2 (fits and bands).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import make_lsq_spline

from noisyanchor.common.errors import InvalidInputError

#: Interior knots and degree of the paper's fits.
INTERIOR_KNOTS, DEGREE = 5, 3
#: Fewest points per spline coefficient before an interior knot is dropped (a fit on 12 draws
#: with the paper's 9 coefficients swung far outside the data between them).
POINTS_PER_COEFFICIENT = 6


def interior_knots(n: int) -> int:
    """Interior knots of a fit on ``n`` points: the paper's :data:`INTERIOR_KNOTS` while every
    coefficient has :data:`POINTS_PER_COEFFICIENT` points, fewer below that (none: a cubic)."""
    return min(INTERIOR_KNOTS, max(0, n // POINTS_PER_COEFFICIENT - DEGREE - 1))


@dataclass(frozen=True)
class SplineFit:
    """A fitted curve on a grid with its pointwise 95% band.

    Attributes
    ----------
    grid : (g,) ndarray
        Noise levels where the curve is evaluated (the observed range).
    fit, low, high : (g,) ndarrays
        Fitted values and the 2.5% / 97.5% bootstrap percentiles.
    resamples : int
        Bootstrap resamples that gave a fit (resamples breaking the Schoenberg-Whitney
        condition are skipped).
    """

    grid: np.ndarray
    fit: np.ndarray
    low: np.ndarray
    high: np.ndarray
    resamples: int

    def at(self, x: float) -> float:
        """Fitted value at ``x`` (linear interpolation on the grid)."""
        return float(np.interp(x, self.grid, self.fit))

    def first_crossing(self, level: float) -> float | None:
        """Smallest noise level at which the fit is at ``level`` or below (linear
        interpolation between grid points; the grid's start if the fit starts there); None if
        it never is."""
        below = np.flatnonzero(self.fit <= level)
        if len(below) == 0:
            return None
        k = int(below[0])
        if k == 0:
            return float(self.grid[0])
        x0, x1, y0, y1 = self.grid[k - 1], self.grid[k], self.fit[k - 1], self.fit[k]
        if y0 == y1:  # flat at the level between the two grid points
            return float(x1)
        return float(x0 + (y0 - level) * (x1 - x0) / (y0 - y1))


def _knots(lo: float, hi: float, interior: int) -> np.ndarray:
    inner = np.linspace(lo, hi, interior + 2)[1:-1]
    return np.r_[[lo] * (DEGREE + 1), inner, [hi] * (DEGREE + 1)]


def _fit(x: np.ndarray, y: np.ndarray, knots: np.ndarray, grid: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    return make_lsq_spline(x[order], y[order], knots, k=DEGREE)(grid)


def fit_spline(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator, *, resamples: int = 500,
    points: int = 201,
) -> SplineFit:
    """Cubic least-squares spline of ``y`` on ``x`` with :func:`interior_knots` equally spaced
    interior knots over ``[min x, max x]`` (5 from 54 points on), and a 95% pointwise
    percentile bootstrap over (x, y) pairs."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise InvalidInputError("fit_spline needs two 1-D arrays of equal length")
    if len(x) < INTERIOR_KNOTS + DEGREE + 1:
        raise InvalidInputError(f"a spline fit needs at least {INTERIOR_KNOTS + DEGREE + 1} "
                                f"points, got {len(x)}")
    knots = _knots(float(x.min()), float(x.max()), interior_knots(len(x)))
    grid = np.linspace(x.min(), x.max(), points)
    fit = _fit(x, y, knots, grid)
    boots = []
    for _ in range(resamples):  # each resample is its own least-squares problem
        idx = rng.integers(0, len(x), len(x))
        try:
            boot = _fit(x[idx], y[idx], knots, grid)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(boot).all():  # a resample on too few distinct x can leave NaNs
            boots.append(boot)
    if boots:
        low, high = np.percentile(np.asarray(boots), [2.5, 97.5], axis=0)
    else:
        low = high = np.full_like(fit, np.nan)
    return SplineFit(grid, fit, low, high, len(boots))
