"""The ScoreShield releases: a DP score vector (regime (i)), one record's row of the Gram
(regime (iii)) and the whole Gram (regime (ii)), at record or identity level.

Every release derives its :class:`common.scoreshield.regimes.Regime` from its own input (``n``,
the adjacency asked for, the identity column and its public bound, a public margin) and refuses
a :class:`Calibration` whose sensitivity is not that regime's: the noise applied always delivers
the guarantee the result states. Every result also states the record-level epsilon of its noise,
and what it would take to be useful: ``noise_dominated`` / ``useful_epsilon`` for vectors and
rows, the data-free baseline (:mod:`common.scoreshield.baseline`) for Grams.

References
----------
SPEC.md section 5; ScoreShield paper Section 3.1 (Algorithm 1, Theorem 3.1), Section 3.2
(Algorithm 2, Theorem 3.4, Corollary C.10), Appendix C.3 (identity adjacency), Appendix D
(regime (iii)), Appendix H.1 (public margin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield.baseline import (
    GramBaseline,
    gram_baseline,
    projection_risk_estimate,
)
from noisyanchor.common.scoreshield.calibration import (
    SENSITIVITY_RTOL,
    Calibration,
    gaussian_epsilon,
)
from noisyanchor.common.scoreshield.projection import (
    PROJECTION_METHODS,
    Progress,
    ProjectionResult,
    project_correlation,
    symmetrize,
)
from noisyanchor.common.scoreshield.regimes import (
    Regime,
    check_margin,
    identity_regime_bound,
    useful_sigma,
)
from noisyanchor.common.validation import as_matrix, as_vector, check_count

#: Post-processing choices of :func:`release_gram`, the default first.
GRAM_PROJECTORS = (*PROJECTION_METHODS, "none")

#: How far a clean input may stray from a valid cosine object (unit diagonal, entries in
#: [-1, 1], symmetry) and still be accepted: rounding of ``E E^T``, not a different statistic.
INPUT_ATOL = 1e-9


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
    regime : Regime
        What was released and under which adjacency (``scores`` or ``row``).
    record_epsilon : float
        Epsilon (at ``delta``) of the noise under record replacement.
    noise_dominated : bool
        ``sigma`` exceeds :func:`common.scoreshield.regimes.useful_sigma`: the largest noise
        draw exceeds half the score range, so a ranking reflects the noise.
    useful_epsilon : float
        Epsilon (same regime and delta) at which the noise falls to that level.
    """

    scores: np.ndarray
    noisy: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    n_clipped: int
    regime: Regime
    record_epsilon: float
    noise_dominated: bool
    useful_epsilon: float


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
    regime : Regime
        ``gram`` under record, identity or output-space adjacency.
    record_epsilon : float
        Epsilon (at ``delta``) of the noise under record replacement (the true record-level
        guarantee of an output-space release).
    baseline : GramBaseline
        Expected distances of this release and of the identity (releasing nothing), and whether
        the release is expected to beat it (:mod:`common.scoreshield.baseline`).
    """

    matrix: np.ndarray
    noisy: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    projector: str
    projection: ProjectionResult | None
    regime: Regime
    record_epsilon: float
    baseline: GramBaseline


def _check_calibration(calibration: object, regime: Regime) -> Calibration:
    """``calibration`` if its sensitivity is ``regime``'s (and its regime, when it names one)."""
    if not isinstance(calibration, Calibration):
        raise InvalidInputError("calibration must be a Calibration from "
                                f"common.scoreshield.calibrate, got {type(calibration).__name__}")
    if calibration.regime is not None and calibration.regime != regime:
        raise InvalidInputError(
            f"the calibration was made for regime {calibration.regime.name}, this release is "
            f"{regime.name}; calibrate for {regime.name}")
    if not math.isclose(calibration.sensitivity, regime.sensitivity, rel_tol=SENSITIVITY_RTOL):
        true_eps = calibration.epsilon_under(regime.sensitivity)
        raise InvalidInputError(
            f"the calibration's sensitivity {calibration.sensitivity:.6g} is not that of this "
            f"release ({regime.name}: {regime.formula} = {regime.sensitivity:.6g}); its noise "
            f"(sigma={calibration.sigma:.6g}) would deliver epsilon={true_eps:.6g} here, not "
            f"{calibration.epsilon:g}; calibrate with common.scoreshield.Regime("
            f"{regime.kind!r}, {regime.n}, ...)")
    return calibration


def _record_epsilon(cal: Calibration, regime: Regime) -> float:
    if math.isclose(regime.record_sensitivity, cal.sensitivity, rel_tol=SENSITIVITY_RTOL):
        return cal.epsilon
    return cal.epsilon_under(regime.record_sensitivity)


def _cosines(values: object, what: str) -> np.ndarray:
    """``values`` as a finite vector of cosines in ``[-1, 1]`` (to :data:`INPUT_ATOL`)."""
    s = as_vector(values, what)
    if s.size == 0:
        raise InvalidInputError(f"{what} is empty")
    worst = float(np.abs(s).max())
    if worst > 1.0 + INPUT_ATOL:
        raise InvalidInputError(f"{what} must be cosine similarities in [-1, 1], got max |s| = "
                                f"{worst:.6g}")
    return s


def _identity_regime(kind: str, n: int, identities: object, bound: int | None,
                     margin: float | None) -> Regime:
    """Record-level regime, or identity-level after enforcing the public bound."""
    if identities is None:
        if bound is not None:
            raise InvalidInputError("max_records_per_identity needs the identity column "
                                    "(identities) it bounds")
        return Regime(kind, n, margin=margin)
    if bound is None:
        raise InvalidInputError("an identity-level release needs the public bound "
                                "max_records_per_identity")
    labels = np.asarray(identities)
    if labels.shape != (n,):
        raise InvalidInputError(f"identities must hold one label per record ({n}), got shape "
                                f"{labels.shape}")
    k = identity_regime_bound(labels, bound)
    return Regime(kind, n, adjacency="identity", max_records_per_identity=k, margin=margin)


def _vector_release(clean: np.ndarray, keep: np.ndarray | None, cal: Calibration,
                    regime: Regime, rng: np.random.Generator | None) -> ScoreRelease:
    """Noise every coordinate (but ``keep``, left as is), clip to the public range."""
    lo = -1.0 if regime.margin is None else regime.margin
    rng = np.random.default_rng() if rng is None else rng
    noise = rng.normal(0.0, cal.sigma, size=clean.shape)
    if keep is not None:
        noise[keep] = 0.0
    noisy = clean + noise
    clipped = np.clip(noisy, lo, 1.0)
    limit = useful_sigma(regime)
    return ScoreRelease(scores=clipped, noisy=noisy, sigma=cal.sigma,
                        sensitivity=cal.sensitivity, epsilon=cal.epsilon, delta=cal.delta,
                        n_clipped=int(np.count_nonzero(clipped != noisy)), regime=regime,
                        record_epsilon=_record_epsilon(cal, regime),
                        noise_dominated=cal.sigma > limit,
                        useful_epsilon=gaussian_epsilon(limit, cal.delta, regime.sensitivity))


def release_score_vector(
    scores: object,
    calibration: Calibration,
    *,
    rng: np.random.Generator | None = None,
    margin: float | None = None,
    identities: object = None,
    max_records_per_identity: int | None = None,
) -> ScoreRelease:
    """Regime (i): release ``clip(s + N(0, sigma^2 I), lo, 1)`` for cosine scores ``s = E q``.

    Sensitivity (derived here, :class:`Regime`): ``Delta = 2`` under record replacement (paper
    Section 3.1); with a public margin ``a`` the clean scores are first clipped to ``[a, 1]``
    (enforced, so ``Delta = 1 - a``, paper App. H.1 eq. (339)) and ``lo = a``, else ``lo = -1``;
    at identity level (records grouped by ``identities``, at most ``k`` per identity, enforced)
    up to ``k`` coordinates move: ``Delta = 2 sqrt(k)`` (``(1 - a) sqrt(k)``; paper App. C.3
    eq. (32)).

    Parameters
    ----------
    scores : (n,) array_like
        Clean scores ``s_k = <e_k, q>`` in ``[-1, 1]`` (unit-norm gallery and public query).
    calibration : Calibration
        The noise, from :func:`common.scoreshield.calibrate` for this release's regime
        (``Regime("scores", n, ...)``) or its sensitivity; another is refused.
    rng : numpy.random.Generator, optional
        Noise source; default a generator seeded from OS entropy.
    margin : float, optional
        Public margin ``a`` in ``[-1, 1)``.
    identities : (n,) array_like, optional
        Identity label of every gallery record: an identity-level release.
    max_records_per_identity : int, optional
        Public bound ``k`` (required with ``identities``; an identity with more is refused).

    Returns
    -------
    ScoreRelease

    References
    ----------
    SPEC.md section 5, regime (i); ScoreShield paper Algorithm 1, Theorem 3.1, App. C.3, H.1.
    """
    s = _cosines(scores, "scores")
    margin = check_margin(margin)
    regime = _identity_regime("scores", s.size, identities, max_records_per_identity, margin)
    cal = _check_calibration(calibration, regime)
    clean = s if margin is None else np.clip(s, margin, 1.0)
    return _vector_release(clean, None, cal, regime, rng)


def release_record_row(
    row: object,
    index: int,
    calibration: Calibration,
    *,
    rng: np.random.Generator | None = None,
    margin: float | None = None,
) -> ScoreRelease:
    """Regime (iii): one record's row ``(<e_k, e_j>)_j`` of the Gram, ``Delta = 2 sqrt(n - 1)``.

    The reference record ``k`` (a public index) is itself private: replacing it moves all
    ``n - 1`` off-diagonal entries of its row by up to 2 each (paper App. D, eqs. (91)-(95)), so
    the row needs ``sqrt(n - 1)`` times the noise of a score vector. The same bound holds at
    identity level. The diagonal entry is 1 for every collection and is released as 1 without
    noise. With a public margin ``a`` the off-diagonal entries are clipped to ``[a, 1]`` first
    (``Delta = (1 - a) sqrt(n - 1)``).

    Parameters
    ----------
    row : (n,) array_like
        Clean row ``S_k.`` (entries in ``[-1, 1]``, ``row[index] = 1``), ``n >= 2``.
    index : int
        ``k``.
    calibration : Calibration
        From :func:`common.scoreshield.calibrate` for ``Regime("row", n, ...)``.
    rng : numpy.random.Generator, optional
    margin : float, optional
        Public margin ``a`` in ``[-1, 1)``.

    Returns
    -------
    ScoreRelease
        ``scores[index] == 1``; the others ``clip(S_kj + N(0, sigma^2), lo, 1)``.
    """
    r = _cosines(row, "row")
    n = r.size
    if n < 2:
        raise InvalidInputError("a record row needs n >= 2 records")
    k = check_count(index, "index", minimum=0)
    if k >= n:
        raise InvalidInputError(f"index {k} is outside the {n} records")
    if abs(r[k] - 1.0) > INPUT_ATOL:
        raise InvalidInputError(f"row[{k}] = {r[k]:.12g} must be 1 (<e_k, e_k> of a unit row): "
                                "is this record k's row?")
    margin = check_margin(margin)
    regime = Regime("row", n, margin=margin)
    cal = _check_calibration(calibration, regime)
    clean = r.copy() if margin is None else np.clip(r, margin, 1.0)
    clean[k] = 1.0
    return _vector_release(clean, np.array([k]), cal, regime, rng)


def check_gram(gram: object, *, psd: bool = False) -> np.ndarray:
    """``gram`` as a float matrix if it is a cosine Gram: square, ``n >= 2``, finite,
    symmetric, unit diagonal, entries in ``[-1, 1]`` (each to :data:`INPUT_ATOL`), and with
    ``psd`` positive semidefinite to rounding.

    The record-level sensitivity ``2 sqrt(2 (n - 1))`` holds for any matrix with these entries;
    the identity-level one also uses that the blocks are PSD.
    """
    import scipy.linalg

    s = as_matrix(gram, "gram")
    n = s.shape[0]
    if s.shape[1] != n:
        raise InvalidInputError(f"gram must be square, got shape {s.shape}")
    if n < 2:
        raise InvalidInputError(f"gram must be at least 2 x 2, got shape {s.shape}")
    diag = float(np.abs(np.diag(s) - 1.0).max())
    if diag > INPUT_ATOL:
        raise InvalidInputError(f"gram must have a unit diagonal (cosines of unit rows), got "
                                f"max |S_ii - 1| = {diag:.6g}")
    worst = float(np.abs(s).max())
    if worst > 1.0 + INPUT_ATOL:
        raise InvalidInputError(f"gram entries must be cosines in [-1, 1], got max |S_ij| = "
                                f"{worst:.6g}")
    asym = float(np.abs(s - s.T).max())
    if asym > INPUT_ATOL:
        raise InvalidInputError(f"gram must be symmetric, got max |S_ij - S_ji| = {asym:.6g}")
    if psd:
        low = float(scipy.linalg.eigh(s, eigvals_only=True, subset_by_index=[0, 0],
                                      driver="evr", check_finite=False)[0])
        if low < -INPUT_ATOL * n:
            raise InvalidInputError(f"gram must be positive semidefinite (a Gram of unit "
                                    f"rows), got smallest eigenvalue {low:.6g}")
    return s


def release_gram(
    gram: object,
    calibration: Calibration,
    *,
    rng: np.random.Generator | None = None,
    projector: str = "newton",
    tol: float = 1e-6,
    max_iter: int = 500,
    progress: Progress | None = None,
    adjacency: str = "record",
    radius: float | None = None,
    identities: object = None,
    max_records_per_identity: int | None = None,
    dimension: int | None = None,
    risk_estimate: bool = True,
) -> GramRelease:
    """Regime (ii): release a DP cosine Gram matrix, perturb then project.

    ``S_tilde = S + (N + N^T)/2`` with ``N_ij ~ N(0, sigma^2)`` iid (paper Corollary C.10: the
    symmetrisation is post-processing of the full-matrix Gaussian mechanism), ``sigma`` from
    ``calibration``, then ``S_hat = P(S_tilde)`` with the chosen projector (post-processing,
    Lemma 2.8).

    Sensitivity (derived here from ``n`` and the adjacency, :class:`Regime`): record
    replacement ``2 sqrt(2 (n - 1))`` (paper Section 3.2, App. J.1); identity level (records
    grouped by ``identities``, at most ``k`` each, enforced) ``2 sqrt(2 k (n - k) + min(k (k - 1),
    k^2 / 2))`` (:func:`common.scoreshield.gram_identity_sensitivity`); output-space adjacency
    at radius ``rho`` (paper Definition 2.3; the paper's App. K per-entry calibration is
    ``rho = 2``): ``rho``, which is NOT a record-level guarantee (``record_epsilon`` states the
    record-level one).

    Parameters
    ----------
    gram : (n, n) array_like
        Clean Gram ``S = E E^T`` of unit-norm rows (:func:`check_gram`).
    calibration : Calibration
        The noise, from :func:`common.scoreshield.calibrate` for this release's regime; a
        calibration for another ``n`` or adjacency is refused.
    rng : numpy.random.Generator, optional
        Noise source; default a generator seeded from OS entropy.
    projector : {"newton", "aap", "dykstra", "none"}
        Post-processing: semismooth Newton (metric projection, the default), averaged
        alternating projections, Dykstra (metric projection), or none.
    tol, max_iter, progress
        Passed to :func:`project_correlation`.
    adjacency : {"record", "identity", "output"}
        ``"identity"`` is implied by ``identities``.
    radius : float, optional
        ``rho`` of output-space adjacency.
    identities : (n,) array_like, optional
        Identity label of every record: an identity-level release.
    max_records_per_identity : int, optional
        Public bound ``k`` (required with ``identities``).
    dimension : int, optional
        Public width ``d`` of the rows (sharpens the baseline's floor).
    risk_estimate : bool
        Estimate the release's distance to the truth (SURE: one more projection) for the
        baseline; without it the baseline uses the public bound alone.

    Returns
    -------
    GramRelease

    References
    ----------
    SPEC.md section 5, regime (ii); ScoreShield paper Algorithm 2, Theorem 3.4.
    """
    if projector not in GRAM_PROJECTORS:
        raise InvalidInputError(f"projector must be one of {GRAM_PROJECTORS}, got {projector!r}")
    if identities is not None and adjacency == "record":
        adjacency = "identity"
    if adjacency not in ("record", "identity", "output"):
        raise InvalidInputError(f"adjacency must be 'record', 'identity' or 'output', got "
                                f"{adjacency!r}")
    if adjacency == "identity" and identities is None:
        raise InvalidInputError("an identity-level Gram release needs the identity column "
                                "(identities) and its public bound")
    s = check_gram(gram, psd=adjacency == "identity")
    n = s.shape[0]
    if adjacency == "output":
        regime = Regime("gram", n, adjacency="output", radius=radius)
    else:
        if radius is not None:
            raise InvalidInputError("radius belongs to adjacency='output'")
        regime = _identity_regime("gram", n, identities, max_records_per_identity, None)
    cal = _check_calibration(calibration, regime)
    rng = np.random.default_rng() if rng is None else rng
    noisy = symmetrize(s + rng.normal(0.0, cal.sigma, size=s.shape))
    proj = None
    matrix = noisy
    risk = None
    if projector != "none":
        proj = project_correlation(noisy, method=projector, tol=tol, max_iter=max_iter,
                                   progress=progress)
        matrix = proj.matrix
        if risk_estimate:
            risk = projection_risk_estimate(
                noisy, matrix, cal.sigma,
                lambda m: project_correlation(m, method=projector, tol=tol,
                                              max_iter=max_iter).matrix, rng)
    metric = proj is not None and proj.method in ("newton", "dykstra") and proj.converged
    baseline = gram_baseline(noisy, cal.sigma, projector=projector, metric=metric,
                             sensitivity=regime.sensitivity, epsilon=cal.epsilon,
                             delta=cal.delta, risk=risk,
                             dimension=dimension)
    return GramRelease(matrix=matrix, noisy=noisy, sigma=cal.sigma,
                       sensitivity=cal.sensitivity, epsilon=cal.epsilon, delta=cal.delta,
                       projector=projector, projection=proj, regime=regime,
                       record_epsilon=_record_epsilon(cal, regime), baseline=baseline)


def useful_score_sigma(n: int) -> float:
    """Largest noise ``sigma`` at which a released score vector of ``n`` records can still rank
    (:func:`common.scoreshield.regimes.useful_sigma` of a record-level score vector:
    ``1 / sqrt(2 ln n)``). Public: it depends on ``n`` only, so reporting it costs no privacy."""
    n = check_count(n, "n", minimum=2)
    return useful_sigma(Regime("scores", n))


def useful_score_epsilon(n: int, delta: float) -> float:
    """The smallest epsilon whose score-vector noise (sensitivity 2, analytic calibration) is
    :func:`useful_score_sigma` ``(n)``: below it, a release is dominated by noise."""
    return gaussian_epsilon(useful_score_sigma(n), delta, Regime("scores", n).sensitivity)
