"""The two ScoreShield releases: a DP score vector (regime (i)) and a DP Gram matrix (regime (ii)).

References
----------
SPEC.md section 5; ScoreShield paper Section 3.1 (Algorithm 1, Theorem 3.1) and Section 3.2
(Algorithm 2, Theorem 3.4, Corollary C.10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield.calibration import Calibration, gaussian_epsilon
from noisyanchor.common.scoreshield.projection import (
    PROJECTION_METHODS,
    Progress,
    ProjectionResult,
    project_correlation,
    symmetrize,
)
from noisyanchor.common.scoreshield.sensitivity import score_vector_sensitivity
from noisyanchor.common.validation import as_matrix, as_vector, check_count

#: Post-processing choices of :func:`release_gram`, the default first.
GRAM_PROJECTORS = (*PROJECTION_METHODS, "none")


@dataclass(frozen=True)
class ScoreRelease:
    """Output of :func:`release_score_vector`.

    Attributes
    ----------
    scores : (n,) ndarray
        Released ``s_tilde = clip(s + N(0, sigma^2 I), -1, 1)``.
    noisy : (n,) ndarray
        ``s + N(0, sigma^2 I)`` before clipping (equally DP; kept for evaluation).
    sigma : float
        Noise standard deviation.
    sensitivity : float
        L2 sensitivity used (2, record replacement).
    epsilon, delta : float
        Guarantee of this single release.
    n_clipped : int
        Number of coordinates the clip changed.
    """

    scores: np.ndarray
    noisy: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    n_clipped: int


@dataclass(frozen=True)
class GramRelease:
    """Output of :func:`release_gram`.

    Attributes
    ----------
    matrix : (n, n) ndarray
        The released matrix: the projected one, or the symmetrised noisy one for ``"none"``.
    noisy : (n, n) ndarray
        Symmetrised noisy Gram ``S_tilde = S + (N + N^T)/2`` before projection.
    sigma : float
        Standard deviation of the iid entries of ``N``.
    sensitivity : float
        Frobenius sensitivity ``Delta_F`` the noise was calibrated to.
    epsilon, delta : float
        Guarantee of this single release under the adjacency ``sensitivity`` corresponds to.
    projector : str
        ``"newton"``, ``"aap"``, ``"dykstra"`` or ``"none"``.
    projection : ProjectionResult or None
        Diagnostics of the projection (None for ``"none"``).
    """

    matrix: np.ndarray
    noisy: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    projector: str
    projection: ProjectionResult | None


def release_score_vector(
    scores: object,
    calibration: Calibration,
    *,
    rng: np.random.Generator | None = None,
) -> ScoreRelease:
    """Regime (i): release ``clip(s + N(0, sigma^2 I), -1, 1)`` for cosine scores ``s = E q``.

    Parameters
    ----------
    scores : (n,) array_like
        Clean scores ``s_k = <e_k, q>`` in ``[-1, 1]`` (unit-norm gallery and public query).
    calibration : Calibration
        The noise, from :func:`common.scoreshield.calibrate` with the record-replacement
        sensitivity :func:`score_vector_sensitivity` (2) or another the caller answers for.
    rng : numpy.random.Generator, optional
        Noise source; default a generator seeded from OS entropy.

    Returns
    -------
    ScoreRelease

    References
    ----------
    SPEC.md section 5, regime (i); ScoreShield paper Algorithm 1, Theorem 3.1.
    """
    s = as_vector(scores, "scores")
    if s.size == 0:
        raise InvalidInputError("scores is empty")
    if np.abs(s).max() > 1.0 + 1e-9:
        raise InvalidInputError(
            f"scores must be cosine similarities in [-1, 1], got max |s| = {np.abs(s).max():.6g}")
    cal = _check_calibration(calibration)
    rng = np.random.default_rng() if rng is None else rng
    noisy = s + rng.normal(0.0, cal.sigma, size=s.shape)
    clipped = np.clip(noisy, -1.0, 1.0)
    return ScoreRelease(scores=clipped, noisy=noisy, sigma=cal.sigma,
                        sensitivity=cal.sensitivity, epsilon=cal.epsilon, delta=cal.delta,
                        n_clipped=int(np.count_nonzero(clipped != noisy)))


def release_gram(
    gram: object,
    calibration: Calibration,
    *,
    rng: np.random.Generator | None = None,
    projector: str = "newton",
    tol: float = 1e-6,
    max_iter: int = 500,
    progress: Progress | None = None,
) -> GramRelease:
    """Regime (ii): release a DP cosine Gram matrix, perturb then project.

    ``S_tilde = S + (N + N^T)/2`` with ``N_ij ~ N(0, sigma^2)`` iid (paper Corollary C.10: the
    symmetrisation is post-processing of the full-matrix Gaussian mechanism), ``sigma`` from
    ``calibration``, then ``S_hat = P(S_tilde)`` with the chosen projector (post-processing,
    Lemma 2.8).

    Parameters
    ----------
    gram : (n, n) array_like
        Clean Gram ``S = E E^T`` of unit-norm rows (finite, square, ``n >= 2``).
    calibration : Calibration
        The noise, from :func:`common.scoreshield.calibrate`. Record-level DP needs
        :func:`gram_record_sensitivity` ``(n)``, ``Delta_F = 2 sqrt(2 (n - 1))``;
        :func:`per_entry_sensitivity` reproduces the paper's experimental calibration, which is
        NOT record-level DP.
    rng : numpy.random.Generator, optional
        Noise source; default a generator seeded from OS entropy.
    projector : {"newton", "aap", "dykstra", "none"}
        Post-processing: semismooth Newton (metric projection, the default), averaged
        alternating projections, Dykstra (metric projection), or none.
    tol, max_iter, progress
        Passed to :func:`project_correlation`.

    Returns
    -------
    GramRelease

    References
    ----------
    SPEC.md section 5, regime (ii); ScoreShield paper Algorithm 2, Theorem 3.4.
    """
    s = as_matrix(gram, "gram")
    n = s.shape[0]
    if s.shape[1] != n:
        raise InvalidInputError(f"gram must be square, got shape {s.shape}")
    if n < 2:
        raise InvalidInputError(f"gram must be at least 2 x 2, got shape {s.shape}")
    if projector not in GRAM_PROJECTORS:
        raise InvalidInputError(f"projector must be one of {GRAM_PROJECTORS}, got {projector!r}")
    cal = _check_calibration(calibration)
    rng = np.random.default_rng() if rng is None else rng
    noisy = symmetrize(s + rng.normal(0.0, cal.sigma, size=s.shape))
    if projector == "none":
        return GramRelease(matrix=noisy, noisy=noisy, sigma=cal.sigma, sensitivity=cal.sensitivity,
                           epsilon=cal.epsilon, delta=cal.delta, projector=projector,
                           projection=None)
    proj = project_correlation(noisy, method=projector, tol=tol, max_iter=max_iter,
                               progress=progress)
    return GramRelease(matrix=proj.matrix, noisy=noisy, sigma=cal.sigma,
                       sensitivity=cal.sensitivity, epsilon=cal.epsilon, delta=cal.delta,
                       projector=projector, projection=proj)


def _check_calibration(calibration: object) -> Calibration:
    if not isinstance(calibration, Calibration):
        raise InvalidInputError("calibration must be a Calibration from "
                                f"common.scoreshield.calibrate, got {type(calibration).__name__}")
    return calibration


def useful_score_sigma(n: int) -> float:
    """Largest noise ``sigma`` at which a released score vector of ``n`` records can still rank.

    The largest of ``n`` draws of ``N(0, sigma^2)`` is about ``sigma sqrt(2 ln n)``; once that
    reaches 1, half the range of a cosine score, the noise alone can lift any record to the top
    and push scores past the clip at +-1, so the top of the ranking says more about the noise
    than about the query. The threshold ``1 / sqrt(2 ln n)`` is public (it depends on ``n``
    only), so reporting it costs no privacy.
    """
    n = check_count(n, "n", minimum=2)
    return 1.0 / math.sqrt(2.0 * math.log(n))


def useful_score_epsilon(n: int, delta: float) -> float:
    """The smallest epsilon whose score-vector noise (sensitivity 2, analytic calibration) is
    :func:`useful_score_sigma` ``(n)``: below it, a release is dominated by noise."""
    return gaussian_epsilon(useful_score_sigma(n), delta, score_vector_sensitivity())
