"""Formal DP baselines for the bench: a Gaussian release of the records and DP training.

Two mechanisms with a record-level ``(epsilon, delta)`` under replacement of one record (the
adjacency the private-data-noise arm protects, :mod:`common.data_noise_privacy`), both
calibrated with the analytic Gaussian calibration the release service uses (Balle and Wang
2018, :func:`common.scoreshield.calibrate`):

* :func:`gaussian_data_release`: every record centred by a public mean, optionally projected by
  a public JL matrix (Kenthapadi et al. 2013), clipped to ``||u||_2 <= C`` and released once
  with ``N(0, sigma^2 I)`` noise, ``sigma`` calibrated at ``Delta = 2 C``. Any model trained on
  the released rows is post-processing.
* :func:`output_perturbed_logistic`: L2-regularised multinomial logistic regression trained on
  the clean records, its weights released with Gaussian noise calibrated at their sensitivity
  (output perturbation, Chaudhuri, Monteleoni and Sarwate, JMLR 2011, Section 3 and Corollary
  8, with Gaussian instead of their Gamma-norm noise, so ``(epsilon, delta)``- rather than
  ``epsilon``-DP). Written here by hand: IBM's ``diffprivlib`` (0.6.6) installs from PyPI but
  fails to import against scikit-learn 1.9 (``sklearn.tree._tree.DOUBLE`` is gone).

References: Balle and Wang, ICML 2018, Theorem 8; Kenthapadi, Korolova, Mironov and Mishra,
"Privacy via the Johnson-Lindenstrauss transform", J. Privacy and Confidentiality 2013;
Chaudhuri, Monteleoni and Sarwate, "Differentially private empirical risk minimization",
JMLR 12 (2011).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield.calibration import Calibration, calibrate
from noisyanchor.common.validation import check_count, check_positive

#: ``L``: the multinomial log-loss gradient in ``W`` at a record with ``||x||_2 <= 1`` is
#: ``(p - e_y) x^T``, of Frobenius norm ``||p - e_y||_2 ||x||_2 <= sqrt(2)``.
SOFTMAX_LIPSCHITZ = math.sqrt(2.0)


def clip_rows(x: np.ndarray, clip: float) -> np.ndarray:
    """Rows of ``x`` scaled down to ``||x_i||_2 <= C`` (rows inside the ball are kept).

    Parameters
    ----------
    x : (n, d) ndarray
    clip : float
        ``C > 0``.
    """
    c = check_positive(clip, "clip bound C")
    x = np.asarray(x, dtype=float)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    scale = np.divide(c, norms, out=np.ones_like(norms), where=norms > c)  # no 0/0 for 0 rows
    return x * scale


def jl_projection(d: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Public JL matrix ``P`` (``d x k``, ``P_jl ~ N(0, 1/k)``: norms kept in expectation)."""
    d = check_count(d, "d", minimum=1)
    k = check_count(k, "JL dimension k", minimum=1)
    return rng.standard_normal((d, k)) / math.sqrt(k)


@dataclass(frozen=True)
class DataRelease:
    """One Gaussian release of a data set, every record once.

    Attributes
    ----------
    records : (n, k) ndarray
        ``clip_C((x_i - mu) P) + sigma w_i``.
    calibration : Calibration
        ``(epsilon, delta)``, ``Delta = 2 C`` and the ``sigma`` that was applied.
    clip : float
        ``C``.
    """

    records: np.ndarray
    calibration: Calibration
    clip: float


def gaussian_data_release(x: np.ndarray, epsilon: float, delta: float, clip: float,
                          rng: np.random.Generator, *, center: np.ndarray | None = None,
                          projection: np.ndarray | None = None) -> DataRelease:
    """Release every row of ``x`` once under ``(epsilon, delta)``-DP (record replacement).

    Replacing one record moves one released row, and that row's clipped value by at most
    ``2 C`` in L2, so ``Delta = 2 C`` whatever ``mu`` and ``P`` are (both public, fixed before
    the data is seen).

    Parameters
    ----------
    x : (n, d) ndarray
        Records.
    epsilon, delta : float
        The guarantee.
    clip : float
        ``C``, applied after centring and projection.
    rng : numpy.random.Generator
        Noise source.
    center : (d,) ndarray, optional
        ``mu``, a public centre (e.g. of a public pool); default none.
    projection : (d, k) ndarray, optional
        Public ``P`` (:func:`jl_projection`); default none.
    """
    u = np.asarray(x, dtype=float)
    if center is not None:
        u = u - np.asarray(center, dtype=float)
    if projection is not None:
        u = u @ projection
    cal = calibrate(epsilon, delta, 2.0 * check_positive(clip, "clip bound C"))
    records = clip_rows(u, clip) + cal.sigma * rng.standard_normal(u.shape)
    return DataRelease(records, cal, float(clip))


@dataclass(frozen=True)
class PrivateLogistic:
    """A multinomial logistic model whose weights were released by output perturbation.

    Attributes
    ----------
    weights : (K, k + 1) ndarray
        ``W_hat = W* + sigma N``; the last column multiplies the constant feature.
    classes : (K,) ndarray
    clip : float
        ``C``: features are clipped to ``C`` and divided by ``C`` before the model sees them.
    lam : float
        ``lambda``, the L2 regularisation of the averaged loss.
    calibration : Calibration
        ``Delta = 2 L / (n lambda)`` and the ``sigma`` applied.
    """

    weights: np.ndarray
    classes: np.ndarray
    clip: float
    lam: float
    calibration: Calibration

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Labels of rows ``x`` (in the frame the model was trained in)."""
        return predict_logistic(self.weights, self.classes, self.clip, x)


def predict_logistic(weights: np.ndarray, classes: np.ndarray, clip: float,
                     x: np.ndarray) -> np.ndarray:
    """``argmax_k (W u(x))_k`` over the classes, ``u`` :func:`unit_features` at ``C``."""
    return classes[np.argmax(unit_features(x, clip) @ weights.T, axis=1)]


def unit_features(x: np.ndarray, clip: float) -> np.ndarray:
    """``[clip_C(x) / C, 1] / sqrt(2)``: every row in the unit ball, with a constant feature
    (an intercept that is regularised like the rest, so the objective stays strongly convex)."""
    u = clip_rows(x, clip) / clip
    return np.hstack([u, np.ones((len(u), 1))]) / math.sqrt(2.0)


def fit_regularised_logistic(x: np.ndarray, y: np.ndarray, clip: float,
                             lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``W* = argmin (1/n) sum_i l(W; x_i, y_i) + (lambda/2) ||W||_F^2`` (multinomial log-loss,
    rows :func:`unit_features`) and the classes; scikit-learn's ``C = 1 / (n lambda)``, solved
    to a tight tolerance since the sensitivity bound is about the exact minimiser."""
    from sklearn.linear_model import LogisticRegression

    u = unit_features(x, clip)
    lam = check_positive(lam, "lambda")
    model = LogisticRegression(C=1.0 / (len(u) * lam), fit_intercept=False, tol=1e-10,
                               max_iter=20000).fit(u, y)
    w = model.coef_
    if w.shape[0] == 1:
        # binary: one sigmoid row w (L = 1, so it moves by <= 2 / (n lambda)); as the softmax
        # pair (-w/2, w/2) it moves by sqrt(2) / (n lambda), within output_sensitivity
        w = np.vstack([-w / 2.0, w / 2.0])
    return w, model.classes_


def output_sensitivity(n: int, lam: float) -> float:
    """``Delta = 2 L / (n lambda)``: how far one replaced record moves ``W*`` (Chaudhuri et al.
    2011, Corollary 8: ``lambda``-strong convexity against a gradient change of ``2 L / n``)."""
    return 2.0 * SOFTMAX_LIPSCHITZ / (check_count(n, "training rows n", minimum=1)
                                      * check_positive(lam, "lambda"))


def perturb_output(weights: np.ndarray, classes: np.ndarray, n: int, clip: float, lam: float,
                   epsilon: float, delta: float, rng: np.random.Generator) -> PrivateLogistic:
    """Release ``W*`` (fitted on ``n`` rows by :func:`fit_regularised_logistic`) under
    ``(epsilon, delta)``-DP: ``W* + sigma N``, ``sigma`` the analytic Gaussian calibration at
    :func:`output_sensitivity`."""
    cal = calibrate(epsilon, delta, output_sensitivity(n, lam))
    return PrivateLogistic(weights + cal.sigma * rng.standard_normal(weights.shape), classes,
                           float(clip), float(lam), cal)


def output_perturbed_logistic(x: np.ndarray, y: np.ndarray, epsilon: float, delta: float,
                              clip: float, lam: float,
                              rng: np.random.Generator) -> PrivateLogistic:
    """Train and release a logistic model under ``(epsilon, delta)``-DP (output perturbation).

    Parameters
    ----------
    x : (n, k) ndarray
        Training records (centred by a public mean; clipped to ``C`` here).
    y : (n,) ndarray
        Labels (at least two classes).
    epsilon, delta : float
        The guarantee.
    clip : float
        ``C``.
    lam : float
        ``lambda > 0`` (fixed before the data is seen, or chosen on data the guarantee does not
        cover).
    rng : numpy.random.Generator
        Noise source.
    """
    if len(np.unique(y)) < 2:
        raise InvalidInputError("output-perturbed logistic regression needs two classes")
    w, classes = fit_regularised_logistic(x, y, clip, lam)
    return perturb_output(w, classes, len(x), clip, lam, epsilon, delta, rng)
