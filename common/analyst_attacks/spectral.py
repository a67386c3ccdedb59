"""Spectral filtering against private-data noise: keep the principal directions of an upload
that stand above the noise floor, drop the rest.

Private-data noise adds ``sigma W`` to ``X O + 1 Psi^T``; the rotation does not change the
spectrum, so the centred upload's sample covariance has the records' eigenvalues plus
``sigma^2`` on top, and pure noise of ``n`` rows in ``d`` columns has eigenvalues no larger
than the Marchenko-Pastur edge ``sigma^2 (1 + sqrt(d / n))^2``. Projecting the centred upload
on the ``k`` directions above that edge,

    Y~ = ybar + (Y - 1 ybar^T) V_k V_k^T,

removes the noise in the ``d - k`` others (about ``sigma^2 n (d - k)`` of its
``sigma^2 n d``) while a record's own variation there is below the noise. The filtered upload
is decoded as the raw one would be. Without data noise (``sigma = 0``) nothing is dropped but
directions with no variation at all, so ``Y~ = Y``.

Side information used: the upload and ``sigma`` (a public protocol parameter).

References: Kargupta, Datta, Wang and Sivakumar, "On the privacy preserving properties of
random data perturbation techniques", ICDM 2003 (spectral filtering); Huang, Du and Chen,
"Deriving private information from randomized data", SIGMOD 2005 (PCA-based reconstruction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noisyanchor.common.validation import as_matrix, check_nonnegative


@dataclass(frozen=True)
class SpectralFilter:
    """A filtered upload.

    Attributes
    ----------
    filtered : (n, d) ndarray
        ``Y~``.
    kept : int
        ``k``: directions above the noise edge.
    edge : float
        ``sigma^2 (1 + sqrt(d / n))^2``.
    """

    filtered: np.ndarray
    kept: int
    edge: float


def spectral_filter(y: np.ndarray, data_noise: float) -> SpectralFilter:
    """``Y~`` of the module docstring.

    Parameters
    ----------
    y : (n, d) ndarray
        An upload ``Y``.
    data_noise : float
        ``sigma`` of its private-data noise.
    """
    y = as_matrix(y, "data upload")
    sigma = check_nonnegative(data_noise, "data noise sigma")
    n, d = y.shape
    mean = y.mean(axis=0)
    _, s, vt = np.linalg.svd(y - mean, full_matrices=False)
    eig = s**2 / max(n - 1, 1)
    edge = sigma**2 * (1 + np.sqrt(d / n)) ** 2
    # with sigma = 0, directions of zero variance only (to rounding) are dropped
    keep = eig > max(edge, 1e-12 * float(eig.max(initial=0.0)))
    v = vt[keep].T
    return SpectralFilter(mean + (y - mean) @ v @ v.T, int(keep.sum()), float(edge))
