"""Theory helpers of the noisy-anchor GDP paper: the empirical phase transition ``v_PT``, the
sufficient condition and error bound of Theorem 4.6, and the residual-translation law.

References: SPEC.md section 2; noisy-anchor GDP paper, Section 4 (Proposition 4.5, Theorem 4.6).
"""

from __future__ import annotations

import math

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import check_anchor_rows, check_count, check_nonnegative


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
