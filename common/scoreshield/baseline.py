"""The data-free baseline of a Gram release: is it closer to the truth than releasing nothing?

The identity matrix ``I`` is a correlation matrix that uses no data, so releasing it is
(0, 0)-DP. A DP Gram release ``S_hat`` is only worth its privacy cost if it is closer to the true
Gram ``S`` than ``I`` is. At record level the noise is so large (``sigma ~ 2 sqrt(2 n) z``) that
below epsilon ~ 10-100 the projected release is typically FARTHER from ``S`` than ``I``.
:func:`gram_baseline` states, for one release, the expected squared Frobenius distances of the
release and of the identity and whether the release can be expected to beat the identity. Every
figure is either public (a function of ``n``, ``sigma`` and the release's public parameters) or a
function of the noisy matrix ``S_tilde = S + W`` the release was computed from: post-processing
of the same Gaussian mechanism, so stating it costs no further privacy (paper Lemma 2.8). Never
the clean ``S``: the identity's distance ``||S - I||_F^2`` is itself private.

``W`` is symmetric with ``W_ii ~ N(0, sigma^2)`` and ``W_ij = W_ji ~ N(0, sigma^2 / 2)``
(``(N + N^T) / 2``). Write ``N_off = n (n - 1) / 2``.

Public (data-free) statements:

- unprojected release: ``E ||S_tilde - S||_F^2 = sigma^2 n (n + 1) / 2`` exactly;
- metric projection ``P_C`` onto the correlation matrices: ``P_C`` ignores the input's diagonal
  (``<X, Diag(h)> = sum h_i`` on ``C``) and is non-expansive with ``P_C(S) = S``, so
  ``E ||S_hat - S||^2 <= E ||W_off||^2 = sigma^2 N_off``; and from the projection's optimality
  ``||S_hat - S||^2 <= 2 <W, S_hat - S> <= 2 (n lambda_max(W_off) - <W_off, S>)``, whose
  expectation is at most ``2 n sigma sqrt(2 n)`` (Sudakov-Fernique against ``2 <g, u>`` gives
  ``E lambda_max <= 2 sqrt(n)`` for the off-diagonal GOE): the Gaussian-complexity bound of paper
  Section 3.2 / Corollary F.2 with its constant. Any two correlation matrices are within
  ``4 n (n - 1)``. :func:`projected_distance_bound` is the least of these (only the last holds
  for AAP, which is not the metric projection, or for a capped run);
- the identity: ``||S - I||_F^2 <= n (n - 1)`` for every collection, and ``>= n^2 / d - n`` for
  rows of a public width ``d`` (``||S||_F^2 >= (tr S)^2 / rank S``).

Estimates from ``S_tilde`` (post-processing):

- the identity's distance: ``||S_tilde - I||_off^2 - sigma^2 N_off`` is unbiased for
  ``||S - I||_F^2``, standard error ``sqrt(n (n - 1) sigma^4 + 4 sigma^2 ||S - I||^2)``;
- the release's distance: Stein's unbiased risk estimate (SURE) over the off-diagonal
  coordinates, ``||S_hat - S_tilde||_off^2 + 2 sigma^2 div - sigma^2 N_off`` with ``div = sum_{i<j}
  d S_hat_ij / d S_tilde_ij`` estimated by one Rademacher probe and a finite difference
  (Monte-Carlo SURE, Ramani, Blu and Unser, IEEE TIP 2008): one more projection of the same kind.
  Stein's lemma needs the projector to be (weakly) differentiable; a projection onto a convex set
  is 1-Lipschitz. Standard error (first order): ``sqrt(n (n - 1) sigma^4 + 4 sigma^2 R + 8
  sigma^4 div)``.

Decision: the release is reported ``no_better_than_identity`` unless it is shown closer at three
standard errors: ``min(bound, SURE + 3 se) < max(identity estimate - 3 se, public floor)``, where
SURE is used only when it is resolved (positive, standard error at most half of it). At record
level and small epsilon SURE's standard error (``~ sigma^2 n``) dwarfs every distance a
correlation matrix can have, and an unresolved (e.g. negative) estimate must not pass for a small
one: there only the public bound counts, which never shows such a release closer.
``useful_epsilon`` is an epsilon (same adjacency, same delta) at which the release is expected to
beat releasing nothing: this release's own epsilon when it is shown closer, else the epsilon at
which the public bound on the metric projection's distance falls to the identity's (estimated)
distance, from where the projection is guaranteed, in expectation, to be closer (and never below
this release's epsilon, at which it was not shown closer). When the estimate is too noisy to use
(standard error above half of it) the worst case ``n (n - 1)`` is used instead and the figure is a
lower limit.

References
----------
ScoreShield paper Section 3.2 ("Risk Scaling"), Corollary F.2, Lemma C.22, Lemma 2.8; C. Stein,
Ann. Statist. 9(6), 1981; S. Ramani, T. Blu and M. Unser, IEEE Trans. Image Process. 17(9),
2008; issue 26.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.scoreshield.calibration import gaussian_epsilon

#: Finite-difference step of the divergence probe, relative to ``sigma`` (small against the
#: noise, large against the projection's stopping tolerance).
SURE_STEP = 1e-2

#: Standard errors a comparison is made at (one-sided: about 1 in 700 for a normal error).
CONFIDENCE_SE = 3.0


@dataclass(frozen=True)
class GramBaseline:
    """How one Gram release compares with releasing the identity (module docstring).

    Every distance is a squared Frobenius distance to the true Gram ``S``.

    Attributes
    ----------
    n : int
    sigma : float
        Noise of the release.
    noisy_distance : float
        ``sigma^2 n (n + 1) / 2``: expected distance of the unprojected release (public, exact).
    projected_bound : float
        Public upper bound on the expected distance of this release (exact for ``"none"``).
    projected_estimate, projected_stderr : float or None
        SURE of this release's distance and its standard error (None for ``"none"`` or when not
        computed).
    identity_estimate, identity_stderr : float
        DP estimate of ``||S - I||_F^2`` (clamped to the public range) and its standard error.
    identity_max : float
        ``n (n - 1)``: the identity's distance for the worst-case collection (public).
    identity_floor : float
        Public lower bound on the identity's distance (``n^2 / d - n`` for rows of width ``d``,
        else 0).
    no_better_than_identity : bool
        The release is not shown closer to ``S`` than the identity.
    useful_epsilon : float or None
        An epsilon at which the release is expected closer than the identity (module
        docstring; None when the identity's distance is 0: nothing beats it).
    useful_epsilon_basis : str
        What ``useful_epsilon`` compares with (the estimate, or the worst case: a lower limit).
    warning : str or None
        The sentence a client prints when ``no_better_than_identity``.
    """

    n: int
    sigma: float
    noisy_distance: float
    projected_bound: float
    projected_estimate: float | None
    projected_stderr: float | None
    identity_estimate: float
    identity_stderr: float
    identity_max: float
    identity_floor: float
    no_better_than_identity: bool
    useful_epsilon: float | None
    useful_epsilon_basis: str
    warning: str | None

    def as_dict(self) -> dict:
        """Plain JSON-ready mapping of every field."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def noisy_expected_distance(n: int, sigma: float) -> float:
    """``E ||S_tilde - S||_F^2 = sigma^2 n (n + 1) / 2`` of the symmetrised noisy Gram."""
    return sigma * sigma * n * (n + 1) / 2.0


def projected_distance_bound(n: int, sigma: float, *, metric: bool) -> float:
    """Public upper bound on ``E ||S_hat - S||_F^2`` (module docstring).

    Parameters
    ----------
    n : int
    sigma : float
    metric : bool
        Whether ``S_hat`` is the metric projection (Newton, or Dykstra run to convergence);
        otherwise only the diameter bound ``4 n (n - 1)`` of the correlation matrices holds.
    """
    diameter = 4.0 * n * (n - 1)
    if not metric:
        return diameter
    return min(sigma * sigma * n * (n - 1) / 2.0, 2.0 * math.sqrt(2.0) * sigma * n ** 1.5,
               diameter)


def _off_sq(m: np.ndarray) -> float:
    """``||m||_F^2`` over the off-diagonal entries."""
    return float(np.einsum("ij,ij->", m, m) - np.einsum("ii,ii->", m, m))


def identity_distance_estimate(noisy: np.ndarray, sigma: float) -> tuple[float, float]:
    """Unbiased DP estimate of ``||S - I||_F^2`` from ``S_tilde`` and its standard error.

    Not clamped (an unbiased estimate can be negative); :func:`gram_baseline` clamps what it
    reports.
    """
    n = noisy.shape[0]
    est = _off_sq(noisy) - sigma * sigma * n * (n - 1) / 2.0
    se = math.sqrt(n * (n - 1) * sigma ** 4 + 4.0 * sigma * sigma * max(est, 0.0))
    return est, se


def projection_risk_estimate(noisy: np.ndarray, released: np.ndarray, sigma: float,
                             project: Callable[[np.ndarray], np.ndarray],
                             rng: np.random.Generator) -> tuple[float, float]:
    """Monte-Carlo SURE of ``||S_hat - S||_F^2`` for ``S_hat = project(S_tilde)``.

    Parameters
    ----------
    noisy : (n, n) ndarray
        ``S_tilde``, the symmetrised noisy Gram the release projected.
    released : (n, n) ndarray
        ``S_hat = project(noisy)`` (unit diagonal).
    sigma : float
        Noise of ``S_tilde`` (off-diagonal variance ``sigma^2 / 2``).
    project : callable
        The release's projector, applied once more to ``noisy + tau B``.
    rng : numpy.random.Generator
        Source of the Rademacher probe ``B`` (symmetric, zero diagonal).

    Returns
    -------
    (estimate, stderr) : tuple of float
    """
    n = noisy.shape[0]
    tau = SURE_STEP * sigma
    probe = np.triu(rng.choice((-1.0, 1.0), size=(n, n)), 1)
    probe = probe + probe.T
    moved = project(noisy + tau * probe)
    div = float(np.einsum("ij,ij->", probe, moved - released)) / (2.0 * tau)
    pairs = n * (n - 1) / 2.0
    div = min(max(div, 0.0), pairs)  # the Jacobian of a projection is a contraction
    est = _off_sq(released - noisy) + 2.0 * sigma * sigma * div - sigma * sigma * pairs
    se = math.sqrt(n * (n - 1) * sigma ** 4 + 4.0 * sigma * sigma * max(est, 0.0)
                   + 8.0 * sigma ** 4 * div)
    return est, se


def _useful_sigma(n: int, target: float, projector: str) -> float:
    """Largest ``sigma`` at which the public bound is at most ``target``."""
    if projector == "none":
        return math.sqrt(2.0 * target / (n * (n + 1)))
    return max(math.sqrt(2.0 * target / (n * (n - 1))),
               target / (2.0 * math.sqrt(2.0) * n ** 1.5))


def gram_baseline(noisy: np.ndarray, sigma: float, *, projector: str, metric: bool,
                  sensitivity: float, epsilon: float, delta: float,
                  risk: tuple[float, float] | None = None,
                  dimension: int | None = None) -> GramBaseline:
    """The data-free baseline of one Gram release (module docstring).

    Parameters
    ----------
    noisy : (n, n) ndarray
        ``S_tilde``, the symmetrised noisy Gram.
    sigma : float
        Its noise.
    projector : str
        ``"newton"``, ``"aap"``, ``"dykstra"`` or ``"none"``.
    metric : bool
        Whether the released matrix is the metric projection (see
        :func:`projected_distance_bound`).
    sensitivity : float
        ``Delta`` of the release's regime (``useful_epsilon`` is stated under it).
    epsilon, delta : float
        The release's guarantee.
    risk : (estimate, stderr), optional
        :func:`projection_risk_estimate` of the release, when computed.
    dimension : int, optional
        Public width ``d`` of the rows (floor ``n^2 / d - n`` on the identity's distance).
    """
    n = noisy.shape[0]
    identity_max = float(n * (n - 1))
    floor = max(n * n / dimension - n, 0.0) if dimension else 0.0
    floor = min(floor, identity_max)
    raw, se_i = identity_distance_estimate(noisy, sigma)
    ident = min(max(raw, floor), identity_max)
    if projector == "none":
        bound = noisy_expected_distance(n, sigma)
        upper, est, se_p = bound, None, None
    else:
        bound = projected_distance_bound(n, sigma, metric=metric)
        est, se_p = risk if risk is not None else (None, None)
        upper = bound
        if est is not None and se_p is not None and 0.0 < est and se_p <= est / 2.0:
            upper = min(bound, est + CONFIDENCE_SE * se_p)  # the estimate is resolved
    lower = max(raw - CONFIDENCE_SE * se_i, floor)
    worse = not upper < lower
    resolved = raw > 0.0 and se_i <= raw / 2.0
    target = ident if resolved else identity_max
    basis = ("the identity's DP-estimated distance" if resolved else
             f"the identity's worst-case distance n (n - 1) = {identity_max:.4g} (its estimate "
             "is too noisy at this epsilon): a lower limit")
    useful = None
    if target > 0.0:
        guaranteed = gaussian_epsilon(_useful_sigma(n, target, projector), delta, sensitivity)
        useful = max(guaranteed, epsilon) if worse else min(guaranteed, epsilon)
    warning = None
    if worse:
        shown = (f"its expected squared distance to the true Gram is at most {bound:.3g}"
                 + ("" if est is None else f" (estimated {max(est, 0.0):.3g} +- {se_p:.2g})"))
        if useful is None:
            need = "no epsilon makes it closer"
        elif useful <= epsilon:
            need = (f"it needs an epsilon above {epsilon:g} (delta={delta:g}); the estimates "
                    "cannot tell how much at this noise")
        else:
            need = (f"it would be at epsilon >= {useful:.3g}" + ("" if resolved else " at least")
                    + f" (delta={delta:g})")
        warning = (f"this Gram release is not expected to be closer to the true Gram than the "
                   f"identity matrix (releasing nothing, which costs no privacy): {shown}; the "
                   f"identity's is about {ident:.3g} +- {se_i:.2g} (DP estimate from the same "
                   f"noise, no extra privacy; at most {identity_max:.3g}); {need}")
    return GramBaseline(n=n, sigma=sigma, noisy_distance=noisy_expected_distance(n, sigma),
                        projected_bound=bound, projected_estimate=est, projected_stderr=se_p,
                        identity_estimate=ident, identity_stderr=se_i,
                        identity_max=identity_max, identity_floor=floor,
                        no_better_than_identity=worse, useful_epsilon=useful,
                        useful_epsilon_basis=basis, warning=warning)
