"""Small linear-algebra kernels: batched polar factors and centering.

References: SPEC.md section 2 (``Pi(M) = U V^T``).
"""

from __future__ import annotations

import numpy as np


def polar_factor(m: np.ndarray) -> np.ndarray:
    """Nearest orthogonal matrix ``Pi(M) = U V^T`` of each square matrix in a stack.

    Parameters
    ----------
    m : (..., d, d) ndarray

    Returns
    -------
    (..., d, d) ndarray
        ``U V^T`` for the SVD ``M = U S V^T`` of every matrix in the stack (one batched LAPACK
        call: numpy's ``svd`` loops over the stack in C).
    """
    u, _, vt = np.linalg.svd(m)
    return u @ vt


def polar_factor_fast(m: np.ndarray, *, rcond: float = 1e-6) -> np.ndarray:
    """``Pi(M)`` for a stack of well-conditioned matrices via one batched symmetric eigensolve.

    ``M^T M = V diag(s^2) V^T`` gives ``Pi(M) = M V diag(1/s) V^T``. A symmetric eigensolve is
    several times cheaper than an SVD, at the price of squaring the condition number; blocks whose
    smallest singular value falls below ``rcond`` times the largest fall back to the SVD.

    Parameters
    ----------
    m : (p, d, d) ndarray
    rcond : float
        Relative singular-value threshold below which the SVD is used instead.
    """
    mtm = np.swapaxes(m, -1, -2) @ m
    w, v = np.linalg.eigh(mtm)
    s = np.sqrt(np.clip(w, 0.0, None))
    ok = s[..., 0] > rcond * s[..., -1]
    out = np.empty_like(m)
    if ok.any():
        vs = v[ok] / s[ok][:, None, :]
        out[ok] = m[ok] @ vs @ np.swapaxes(v[ok], -1, -2)
    if (~ok).any():
        out[~ok] = polar_factor(m[~ok])
    return out


def center_rows(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and the row-centered matrix: ``b = B^T 1 / r``, ``Bc = B - 1 b^T``.

    Works on one ``(r, d)`` matrix or a stack ``(p, r, d)``.
    """
    mean = b.mean(axis=-2)
    return mean, b - mean[..., None, :]
