"""Theory helpers of the noisy-anchor GDP paper: the empirical phase transition ``v_PT``, the
sufficient condition and error bound of Theorem 4.6, the residual-translation law, and the
anchor-noise laws of the colluder's attacks (the polar shrinkage ``alpha(d, v)`` and the expected
reconstruction errors of the known-anchor, OP and scale-corrected OP estimators).

References: SPEC.md sections 2-3; noisy-anchor GDP paper, Section 4 (Proposition 4.5,
Theorem 4.6).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from noisyanchor.common.blas import blas_threads
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.linalg import polar_factor
from noisyanchor.common.validation import (
    check_anchor_rows,
    check_count,
    check_nonnegative,
    check_positive,
)


def _check_sizes(p: int, d: int, r: int) -> tuple[int, int, int]:
    p = check_count(p, "p", minimum=2)
    d = check_count(d, "d", minimum=1)
    r = check_count(r, "r", minimum=2)
    check_anchor_rows(r, d, "the anchor needs")
    return p, d, r


def _check_gamma(gamma: float) -> float:
    if not gamma > 2:
        raise InvalidInputError(f"gamma must be > 2 (Theorem 4.6), got {gamma!r}")
    return float(gamma)


def _noise_scale(p: int, d: int, r: int, log_term: float) -> float:
    """``sqrt(p d) + sqrt(r - 1) + log_term``: the spectral scale of the anchor noise."""
    return math.sqrt(p * d) + math.sqrt(r - 1) + log_term


def phase_transition_v(p: int, d: int, r: int) -> float:
    """Empirical phase transition of GPM convergence,
    ``v_PT = 1.89 sqrt(p) / (sqrt(p d) + sqrt(r - 1) + 2 sqrt(p ln p))``.

    Reproduces the paper's 0.0977 (p=10, d=100, r=400) and 0.06383 (p=50, d=400, r=1600).
    """
    p, d, r = _check_sizes(p, d, r)
    return 1.89 * math.sqrt(p) / _noise_scale(p, d, r, 2 * math.sqrt(p * math.log(p)))


def sufficient_noise_level(p: int, d: int, r: int, *, gamma: float = 2.5) -> float:
    """Largest ``v`` covered by Theorem 4.6:
    ``sqrt(p) / (14336 sqrt(d) (sqrt(p d) + sqrt(r-1) + sqrt(2 gamma p ln p)))``.
    """
    p, d, r = _check_sizes(p, d, r)
    gamma = _check_gamma(gamma)
    scale = _noise_scale(p, d, r, math.sqrt(2 * gamma * p * math.log(p)))
    return math.sqrt(p) / (14336 * math.sqrt(d) * scale)


def rotational_error_bound(v: float, p: int, d: int, r: int, *, gamma: float = 2.5) -> float:
    """Theorem 4.6 bound on the rotational error ``E`` when ``v`` meets the sufficient condition:
    ``6/(1 - 1/1024) * v sqrt(d) (sqrt(p d) + sqrt(r-1) + sqrt(2 gamma p ln p)) / sqrt(p)``.

    Raises when ``v`` exceeds :func:`sufficient_noise_level` (the bound does not apply there).
    """
    v = check_nonnegative(v, "v")
    limit = sufficient_noise_level(p, d, r, gamma=gamma)
    if v > limit:
        raise InvalidInputError(f"v={v:g} exceeds the Theorem 4.6 condition v <= {limit:.3g}")
    scale = _noise_scale(p, d, r, math.sqrt(2 * gamma * p * math.log(p)))
    return 6 / (1 - 1 / 1024) * v * math.sqrt(d) * scale / math.sqrt(p)


def residual_translation_variance(d: int, v: float, r: int) -> float:
    """Proposition 4.5: ``eta_i = v W_i^T 1 / r ~ N(0, v^2/r I_d)``, so
    ``E ||R_i^T eta_i - R_j^T eta_j||^2 = 2 d v^2 / r``.
    """
    d = check_count(d, "d", minimum=1)
    r = check_count(r, "r", minimum=1)
    return 2 * d * check_nonnegative(v, "v") ** 2 / r


#: Seed of the fixed Gaussian sample behind :func:`polar_shrinkage` (common random numbers:
#: the estimate is deterministic and smooth in ``v``).
SHRINKAGE_SEED = 20260
#: Target standard error of the Monte Carlo :func:`polar_shrinkage` estimate.
SHRINKAGE_STANDARD_ERROR = 0.002


def _shrinkage_samples(d: int) -> int:
    """Monte Carlo samples for a standard error of about :data:`SHRINKAGE_STANDARD_ERROR`: one
    sample's ``tr(Pi(I + v N)) / d`` has standard deviation at most about ``0.9 / d`` for
    ``d >= 8`` (measured for d = 16, 100, 400 and v in [0.1, 3]) and up to 0.5 below."""
    sd = 0.5 if d < 8 else 0.9 / d
    return int(min(20000, max(4, math.ceil((sd / SHRINKAGE_STANDARD_ERROR) ** 2))))


@functools.lru_cache(maxsize=256)
def _polar_shrinkage(d: int, v: float, samples: int) -> float:
    rng = np.random.default_rng(SHRINKAGE_SEED)
    total = 0.0
    # A stack of small SVDs gains nothing from a threaded BLAS and loses much under contention.
    with blas_threads(1):
        for start in range(0, samples, 256):  # bounded memory for large d
            n = rng.standard_normal((min(256, samples - start), d, d))
            total += float(np.trace(polar_factor(np.eye(d) + v * n), axis1=1, axis2=2).sum())
    return total / (samples * d)


def polar_shrinkage(d: int, v: float, *, samples: int | None = None) -> float:
    """Expected shrinkage ``alpha(d, v)`` of the polar factor of a noisy identity:
    ``E[Pi(I + v N)] = alpha(d, v) I`` for ``N`` a ``d x d`` standard Gaussian matrix.

    ``E[Pi(I + v N)]`` commutes with every orthogonal matrix (``Q^T N Q`` has the law of ``N``),
    so it is a multiple of ``I``; ``alpha = E[tr Pi(I + v N)] / d``. It is 1 at ``v = 0``,
    ``1 - v^2 (d - 1) / 4 + O(v^4)`` for small ``v``, and falls like ``0.85 / (v sqrt(d))`` for
    large ``v sqrt(d)``. Exact for ``d = 1`` (``alpha = erf(1 / (v sqrt 2))``); otherwise a Monte
    Carlo mean over a fixed seeded sample (standard error about 0.002; no closed form is known
    for d >= 2), cached per ``(d, v)``.

    Parameters
    ----------
    d : int
        Working dimension.
    v : float
        Anchor-noise level (SPEC.md section 1); for OP on a centred orthonormal anchor the
        estimate is ``Pi(Ac^T Bc_i) = O_i Pi(I + v G)`` with ``G`` standard Gaussian.
    samples : int, optional
        Monte Carlo sample size (default: enough for a standard error of about 0.002).

    References
    ----------
    SPEC.md section 3 (scale-corrected OP).
    """
    d = check_count(d, "d", minimum=1)
    v = check_nonnegative(v, "v")
    if v == 0:
        return 1.0
    if d == 1:
        return math.erf(1.0 / (v * math.sqrt(2.0)))
    samples = _shrinkage_samples(d) if samples is None else check_count(samples, "samples",
                                                                         minimum=1)
    return _polar_shrinkage(d, float(v), samples)


def _translation_term(d: int, v: float, r: int, record_norm2: float | None) -> float:
    """``d v^2 / (r m2)``: the residual translation ``eta_i`` (Proposition 4.5) relative to the
    mean squared record norm ``m2`` (default ``d``: standard Gaussian records)."""
    m2 = float(d) if record_norm2 is None else check_positive(record_norm2, "record_norm2")
    return d * v * v / (check_count(r, "r", minimum=1) * m2)


def known_anchor_error(d: int, v: float, r: int, *, record_norm2: float | None = None) -> float:
    """Expected relative error of the known-anchor reconstruction under anchor noise,
    ``sqrt(E||X^ - X||_F^2 / ||X||_F^2)`` with
    ``E||X^ - X||^2 / ||X||^2 = v^2 d + (d v^2 / (r m2)) (1 + v^2 d)``.

    For a centred orthonormal anchor ``Ac^T Bc_i = O_i + v N`` (``N`` a ``d x d`` standard Gaussian
    whatever ``r`` is), so ``X^ = X (I + v O_i N^T) - 1 eta^T (O_i + v N)^T`` and
    ``E[(T - I)(T - I)^T] = v^2 d I`` for ``T = I + v O_i N^T``: exact in expectation for any
    ``X``; ``r`` enters only through the translation term (``m2`` = mean squared row norm of
    ``X``, default ``d``).
    """
    d = check_count(d, "d", minimum=1)
    v = check_nonnegative(v, "v")
    return math.sqrt(v * v * d + _translation_term(d, v, r, record_norm2) * (1 + v * v * d))


def op_error(d: int, v: float, r: int, *, record_norm2: float | None = None) -> float:
    """Expected relative error of the OP reconstruction under anchor noise:
    ``E||X^ - X||^2 / ||X||^2 = 2 (1 - alpha(d, v)) + d v^2 / (r m2)``.

    ``X^ = X T - 1 eta^T U^T O_i^T`` with ``T = O_i U^T O_i^T`` orthogonal, ``E[T] = alpha I``,
    so ``E[(T - I)(T - I)^T] = 2 (1 - alpha) I``. Small ``v``: about ``v sqrt((d - 1) / 2)``;
    large ``v``: towards ``sqrt(2)`` (a Haar-random rotation).
    """
    alpha = polar_shrinkage(d, v)
    return math.sqrt(2 * (1 - alpha) + _translation_term(d, v, r, record_norm2))


def op_scaled_error(d: int, v: float, r: int, *, record_norm2: float | None = None) -> float:
    """Expected relative error of the scale-corrected OP reconstruction (OP divided by
    ``alpha``): ``E||X^ - X||^2 / ||X||^2 = 1 / alpha^2 - 1 + d v^2 / (r m2 alpha^2)``."""
    alpha = polar_shrinkage(d, v)
    return math.sqrt(1 / alpha**2 - 1 + _translation_term(d, v, r, record_norm2) / alpha**2)
