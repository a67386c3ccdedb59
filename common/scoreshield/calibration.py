"""Noise calibration of the Gaussian mechanism: analytic (Balle and Wang, 2018) and classic.

References
----------
SPEC.md section 5 ("Calibration"); ScoreShield paper, Lemma 2.6 (classic) and Theorem C.12
(analytic Gaussian calibration); B. Balle and Y.-X. Wang, "Improving the Gaussian mechanism for
differential privacy: analytical calibration and optimal denoising", ICML 2018, Theorem 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield.regimes import Regime
from noisyanchor.common.validation import check_positive

#: Calibration methods accepted by :func:`calibrate_sigma`.
CALIBRATION_METHODS = ("analytic", "classic")


def check_epsilon_delta(epsilon: float, delta: float) -> tuple[float, float]:
    """Return ``(epsilon, delta)`` as floats, checking ``epsilon > 0`` and ``0 < delta < 1``."""
    eps = check_positive(epsilon, "epsilon")
    try:
        dlt = float(delta)
    except (TypeError, ValueError):
        raise InvalidInputError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not (math.isfinite(dlt) and 0.0 < dlt < 1.0):
        raise InvalidInputError(f"delta must be a number in (0, 1), got {delta!r}")
    return eps, dlt


def _log_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """``ln delta(sigma)`` of the Gaussian mechanism, computed in log space.

    ``delta = Phi(a) - e^eps Phi(b)`` with ``a = Delta/(2 sigma) - eps sigma/Delta`` and
    ``b = -Delta/(2 sigma) - eps sigma/Delta``. Both terms underflow double precision for large
    ``eps`` (``e^eps`` overflows beyond eps ~ 709), so we combine their logarithms from
    ``scipy.special.log_ndtr``: ``ln delta = la + log1p(-exp(lb - la))``.
    """
    from scipy.special import log_ndtr

    ratio = sensitivity / sigma
    a = 0.5 * ratio - epsilon / ratio
    b = -0.5 * ratio - epsilon / ratio
    la = float(log_ndtr(a))
    lb = epsilon + float(log_ndtr(b))
    if lb >= la:  # only through rounding: the true delta is > 0 for every finite sigma
        return -math.inf
    return la + math.log1p(-math.exp(lb - la))


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """The smallest ``delta`` for which ``N(0, sigma^2)`` noise gives (epsilon, delta)-DP.

    Balle and Wang's exact characterisation (paper Theorem C.12, eq. (26)):
    ``delta(sigma) = Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) -
    eps sigma/Delta)``, evaluated in log space so it stays accurate for large epsilon.

    Parameters
    ----------
    sigma : float
        Noise standard deviation ``sigma > 0``.
    epsilon : float
        Privacy parameter ``epsilon > 0``.
    sensitivity : float
        L2 (Frobenius) sensitivity ``Delta > 0`` of the released statistic.

    Returns
    -------
    delta : float
        In ``[0, 1)``.
    """
    sig = check_positive(sigma, "sigma")
    eps = check_positive(epsilon, "epsilon")
    sens = check_positive(sensitivity, "sensitivity")
    return math.exp(_log_gaussian_delta(sig, eps, sens))


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float) -> float:
    """Smallest ``epsilon`` for which ``N(0, sigma^2)`` noise gives (epsilon, delta)-DP.

    The inverse of :func:`gaussian_delta` in ``epsilon`` (``delta(epsilon)`` is strictly
    decreasing), found by :func:`scipy.optimize.brentq`; 0 when ``sigma`` alone already gives
    ``delta`` at epsilon = 0. Used to state what a release calibrated for one sensitivity
    guarantees under another (e.g. a per-entry-calibrated Gram under record replacement).

    Parameters
    ----------
    sigma : float
        Noise standard deviation, > 0.
    delta : float
        ``0 < delta < 1``.
    sensitivity : float
        L2 sensitivity ``Delta > 0`` under the adjacency of interest.
    """
    from scipy.optimize import brentq

    sig = check_positive(sigma, "sigma")
    sens = check_positive(sensitivity, "sensitivity")
    _, dlt = check_epsilon_delta(1.0, delta)
    log_target = math.log(dlt)

    def excess(eps: float) -> float:
        return _log_gaussian_delta(sig, eps, sens) - log_target

    tiny = 1e-12
    if excess(tiny) <= 0.0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0.0:
        hi *= 2.0
        if hi > 1e12:
            raise InvalidInputError(f"no finite epsilon reaches delta={delta!r} at sigma={sigma!r}")
    eps = float(brentq(excess, tiny, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500))
    for _ in range(64):  # return a value that meets delta, never one just below the root
        if math.exp(_log_gaussian_delta(sig, eps, sens)) <= dlt:
            break
        eps = math.nextafter(eps, math.inf) * (1.0 + 1e-15)
    return eps


def classic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Classic Gaussian calibration ``sigma = Delta sqrt(2 ln(1.25/delta)) / epsilon``.

    Valid only for ``epsilon < 1`` (paper Lemma 2.6; Dwork and Roth, Theorem A.1).

    Raises
    ------
    InvalidInputError
        When ``epsilon >= 1``: the classic bound does not hold there; use ``method="analytic"``.
    """
    eps, dlt = check_epsilon_delta(epsilon, delta)
    sens = check_positive(sensitivity, "sensitivity")
    if eps >= 1.0:
        raise InvalidInputError(
            f"epsilon must be < 1 for the classic Gaussian calibration, got {epsilon!r}; "
            "use method='analytic' (valid for every epsilon > 0)")
    return sens * math.sqrt(2.0 * math.log(1.25 / dlt)) / eps


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest ``sigma`` with ``gaussian_delta(sigma, epsilon, sensitivity) <= delta``.

    ``delta(sigma)`` is strictly decreasing in ``sigma`` (Balle and Wang, Lemma 7), so the root
    of ``ln delta(sigma) - ln delta`` is unique; it is bracketed on ``t = ln(sigma/Delta)`` and
    found by :func:`scipy.optimize.brentq`. The returned value is nudged up by a few ulps if
    needed so that the target is met, never missed.
    """
    from scipy.optimize import brentq

    eps, dlt = check_epsilon_delta(epsilon, delta)
    sens = check_positive(sensitivity, "sensitivity")
    log_target = math.log(dlt)

    def excess(t: float) -> float:
        return _log_gaussian_delta(sens * math.exp(t), eps, sens) - log_target

    # Bracket: delta -> 1/2 or more as sigma -> 0 and -> 0 as sigma -> inf; widen geometrically.
    lo, hi = -1.0, 1.0
    while excess(lo) <= 0.0:
        lo -= 2.0
        if lo < -60.0:  # sigma < 1e-26 Delta already meets delta: no noise worth the name
            raise InvalidInputError(
                f"epsilon={epsilon!r} is too large to calibrate: noise below 1e-26 times the "
                f"sensitivity already meets delta={delta!r}, so the release would carry no "
                "privacy; ask for a smaller epsilon")
    while excess(hi) > 0.0:
        hi += 2.0
        if hi > 60.0:
            raise InvalidInputError(
                f"no finite sigma meets delta={delta!r} at epsilon={epsilon!r}")
    t = brentq(excess, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    sigma = sens * math.exp(t)
    for _ in range(64):  # brentq returns a point within xtol of the root, possibly below it
        # compare in the same (linear) units gaussian_delta reports, so the promise holds there
        if math.exp(_log_gaussian_delta(sigma, eps, sens)) <= dlt:
            break
        sigma = math.nextafter(sigma, math.inf) * (1.0 + 1e-15)
    return sigma


def calibrate_sigma(
    epsilon: float, delta: float, sensitivity: float, method: str = "analytic"
) -> float:
    """Noise standard deviation ``sigma`` of the Gaussian mechanism for (epsilon, delta)-DP.

    Parameters
    ----------
    epsilon : float
        ``epsilon > 0``. The classic method additionally requires ``epsilon < 1``.
    delta : float
        ``0 < delta < 1``.
    sensitivity : float
        L2 / Frobenius sensitivity ``Delta > 0`` of the released statistic under the chosen
        adjacency (see :mod:`common.scoreshield.sensitivity`).
    method : {"analytic", "classic"}
        ``"analytic"``: Balle-Wang, the smallest ``sigma`` meeting ``delta`` (Theorem C.12);
        ``"classic"``: ``Delta sqrt(2 ln(1.25/delta)) / epsilon`` (Lemma 2.6).

    Returns
    -------
    sigma : float

    References
    ----------
    SPEC.md section 5 (Calibration); ScoreShield paper Lemma 2.6 and Theorem C.12.
    """
    if method == "analytic":
        return analytic_sigma(epsilon, delta, sensitivity)
    if method == "classic":
        return classic_sigma(epsilon, delta, sensitivity)
    raise InvalidInputError(f"method must be one of {CALIBRATION_METHODS}, got {method!r}")


@dataclass(frozen=True)
class Calibration:
    """The noise of one Gaussian release, fixed once: what a ledger charges is what is applied.

    Build it with :func:`calibrate`, charge it, and hand the same object to the release
    (:func:`common.scoreshield.release_gram`, :func:`common.scoreshield.release_score_vector`,
    :func:`common.scoreshield.release_record_row`), so the charged ``sigma`` and the sampled one
    are the same number by construction.

    A Calibration cannot promise more than its noise delivers: construction (directly, or via
    :func:`dataclasses.replace`) checks that ``sigma`` is at least the analytic Gaussian sigma
    of ``(epsilon, delta)`` at ``sensitivity`` (the smallest noise meeting them exactly, Balle
    and Wang), so a hand-made ``sigma = 1e-3`` or ``sigma = 0`` is refused; and that a
    ``regime``'s derived sensitivity is the one stated. The releases then check the
    sensitivity against their own regime (derived from their input's ``n``).

    Attributes
    ----------
    epsilon, delta : float
        The requested guarantee of this release alone.
    sensitivity : float
        L2 / Frobenius sensitivity ``Delta`` under the adjacency the guarantee is about.
    sigma : float
        Noise standard deviation meeting ``(epsilon, delta)`` at ``Delta``.
    method : str
        ``"analytic"`` or ``"classic"`` (:func:`calibrate_sigma`).
    regime : Regime or None
        The release this noise is for (:class:`common.scoreshield.regimes.Regime`), when it was
        calibrated for one; None for a bare sensitivity (the release then checks the number).

    Raises
    ------
    InvalidInputError
        (at construction) bad parameters, ``sigma`` below what ``(epsilon, delta)`` needs at
        ``sensitivity`` (the message states the epsilon the noise really delivers), or a
        sensitivity other than its regime's.
    """

    epsilon: float
    delta: float
    sensitivity: float
    sigma: float
    method: str
    regime: Regime | None = None

    def __post_init__(self) -> None:
        eps, dlt = check_epsilon_delta(self.epsilon, self.delta)
        sens = check_positive(self.sensitivity, "sensitivity")
        sig = check_positive(self.sigma, "sigma")
        if self.method not in CALIBRATION_METHODS:
            raise InvalidInputError(f"method must be one of {CALIBRATION_METHODS}, got "
                                    f"{self.method!r}")
        if self.regime is not None:
            if not isinstance(self.regime, Regime):
                raise InvalidInputError(f"regime must be a Regime, got "
                                        f"{type(self.regime).__name__}")
            if not math.isclose(sens, self.regime.sensitivity, rel_tol=SENSITIVITY_RTOL):
                raise InvalidInputError(
                    f"sensitivity {sens:.6g} is not that of regime {self.regime.name} "
                    f"({self.regime.formula} = {self.regime.sensitivity:.6g})")
        need = analytic_sigma(eps, dlt, sens)
        if sig < need * (1.0 - SIGMA_RTOL):
            delivered = gaussian_epsilon(sig, dlt, sens)
            raise InvalidInputError(
                f"sigma={sig:.6g} is below the {need:.6g} that epsilon={eps:g}, delta={dlt:g} "
                f"need at sensitivity {sens:.6g}: this noise delivers epsilon={delivered:.6g}, "
                "not the epsilon stated; build calibrations with common.scoreshield.calibrate")

    @property
    def noise_multiplier(self) -> float:
        """``z = sigma / Delta``: all that the privacy loss of the release depends on."""
        return self.sigma / self.sensitivity

    def epsilon_under(self, sensitivity: float, delta: float | None = None) -> float:
        """The epsilon (at ``delta``, default this calibration's) that this noise delivers for
        a statistic of sensitivity ``sensitivity``: e.g. the record-level epsilon of a Gram
        released under output-space adjacency."""
        return gaussian_epsilon(self.sigma, self.delta if delta is None else delta, sensitivity)


#: Relative tolerance of a sensitivity comparison (a regime's formula evaluated twice).
SENSITIVITY_RTOL = 1e-12

#: Relative slack of the sigma check: ``analytic_sigma`` is deterministic, so a calibration from
#: :func:`calibrate`, or rebuilt from its charged row, has exactly that sigma.
SIGMA_RTOL = 1e-12


def calibrate(epsilon: float, delta: float, sensitivity: float | Regime,
              method: str = "analytic") -> Calibration:
    """:class:`Calibration` of a Gaussian release: :func:`calibrate_sigma` with its inputs.

    Parameters
    ----------
    epsilon, delta : float
        The guarantee.
    sensitivity : float or Regime
        A :class:`common.scoreshield.regimes.Regime` (preferred: the sensitivity is derived
        from it, and the release and the ledger can check it), or a bare ``Delta > 0``.
    method : {"analytic", "classic"}

    Raises
    ------
    InvalidInputError
        Bad ``epsilon``, ``delta``, ``sensitivity`` or ``method``, or an ``epsilon`` so large
        that no meaningful noise meets it.
    """
    eps, dlt = check_epsilon_delta(epsilon, delta)
    regime = sensitivity if isinstance(sensitivity, Regime) else None
    sens = check_positive(sensitivity.sensitivity if isinstance(sensitivity, Regime)
                          else sensitivity, "sensitivity")
    return Calibration(eps, dlt, sens, calibrate_sigma(eps, dlt, sens, method=method), method,
                       regime)


# ---- composition ----------------------------------------------------------------------------

def epsilon_of_mu(mu: float, delta: float) -> float:
    """Epsilon at ``delta`` of ``mu``-GDP (a Gaussian mechanism with ``Delta / sigma = mu``)."""
    if mu <= 0.0:
        return 0.0
    return gaussian_epsilon(1.0 / mu, delta, 1.0)


def mu_of_epsilon(epsilon: float, delta: float) -> float:
    """The ``mu`` whose ``mu``-GDP is ``(epsilon, delta)``-DP exactly (analytic calibration)."""
    return 1.0 / analytic_sigma(epsilon, delta, 1.0)


def composed_epsilon(epsilons: object, deltas: object, delta: float) -> float:
    """Epsilon at ``delta`` of a set of Gaussian releases, each ``(epsilon_i, delta_i)``-DP
    with the analytic calibration, composed exactly.

    Each release is ``mu_i``-GDP with ``mu_i`` the inverse of the analytic calibration of
    ``(epsilon_i, delta_i)``; ``k`` of them compose to ``sqrt(sum mu_i^2)``-GDP (Dong, Roth and
    Su 2022, Corollary 3.3), converted back at ``delta``. This is what the analyst's ledger
    does; e.g. 400 score-vector releases at epsilon = 1, delta = 1e-5 compose to epsilon = 36.5
    at delta = 1e-5, not 400 and not 1. Releases calibrated with the classic formula have more
    noise than this assumes, so the result is an upper bound for them.

    Parameters
    ----------
    epsilons : sequence of float
        Per-release epsilons.
    deltas : float or sequence of float
        Per-release deltas (one number: all the same).
    delta : float
        Delta at which the composition is stated (a ledger's ``delta_budget``).
    """
    import numpy as np

    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    dls = np.broadcast_to(np.asarray(deltas, dtype=np.float64), eps.shape)
    _, target = check_epsilon_delta(1.0, delta)
    mu_sq = 0.0
    for e, d in zip(eps.tolist(), dls.tolist(), strict=True):
        mu_sq += mu_of_epsilon(e, d) ** 2
    return epsilon_of_mu(math.sqrt(mu_sq), target)
