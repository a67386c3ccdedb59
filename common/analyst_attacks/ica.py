"""The ICA attack: an upload decoded with no side knowledge at all, when the records' attributes
are independent and non-Gaussian.

``Y = X O + 1 Psi^T``: the centred upload ``Yc = Xc O`` mixes the records' attributes by an
orthogonal ``O``. When the columns of ``X`` are independent and at most one is Gaussian,
independent component analysis recovers them up to order, sign and scale (Comon 1994); the
mixing being orthogonal, the scale is fixed too: after whitening ``Yc`` (its SVD, keeping the
``k`` directions with variance), FastICA finds an orthogonal unmixing ``W``, and the rows of
``W V_k^T`` are unit directions ``u_j`` with ``Yc u_j = +- (Xc)_{:, pi(j)}``. What no data
fixes, conventions fix: each component's sign makes its skewness positive, components come in
decreasing variance, and the translation is not recovered (``X^`` is centred). So

    X^ = [Yc u_1, ..., Yc u_k, 0, ..., 0]   (columns ordered and signed as above),

exact up to the unmixing's estimation error when the attributes are independent, skewed and of
distinct variances in decreasing order; a heuristic otherwise (pixels are far from
independent).

Side information used: the upload alone (no sample, no known record, no labels).

References: Liu, Kargupta and Ryan, "Random projection-based multiplicative data perturbation
for privacy preserving distributed data mining", IEEE TKDE 18(1), 2006, Section 5 (ICA
attack); Chen, Sun and Liu, "Towards attack-resilient geometric data perturbation", SDM 2007;
Hyvarinen and Oja, "Independent component analysis: algorithms and applications", Neural
Networks 13, 2000 (FastICA).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.linalg import polar_factor
from noisyanchor.common.validation import as_matrix, check_count

#: FastICA iterations before it is stopped.
DEFAULT_MAX_ITER = 400
#: Relative singular-value floor of the directions kept by the whitening.
RANK_RTOL = 1e-10


@dataclass(frozen=True)
class IcaResult:
    """The ICA decoding of one upload.

    Attributes
    ----------
    reconstruction : (n, d) ndarray
        ``X^`` (centred; the last ``d - kept`` columns 0).
    directions : (kept, d) ndarray
        ``u_j`` as rows, in the order and with the signs of the reconstruction's columns.
    kept : int
        ``k``: directions of ``Yc`` with variance.
    """

    reconstruction: np.ndarray
    directions: np.ndarray
    kept: int


def ica_attack(y: np.ndarray, rng: np.random.Generator, *,
               max_iter: int = DEFAULT_MAX_ITER) -> IcaResult:
    """Decode an upload by FastICA (module docstring).

    Parameters
    ----------
    y : (n, d) ndarray
        ``Y``.
    rng : numpy.random.Generator
        Seeds FastICA's starting unmixing.
    max_iter : int
        FastICA iterations.
    """
    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    y = as_matrix(y, "data upload")
    max_iter = check_count(max_iter, "max_iter", minimum=1)
    n, d = y.shape
    yc = y - y.mean(axis=0)
    u, s, vt = np.linalg.svd(yc, full_matrices=False)
    keep = s > RANK_RTOL * max(float(s[0]) if len(s) else 0.0, 1e-300)
    k = int(keep.sum())
    white = u[:, keep] * np.sqrt(n)  # unit-variance, uncorrelated components
    ica = FastICA(whiten=False, max_iter=max_iter,
                  random_state=int(rng.integers(2**31 - 1)))
    with warnings.catch_warnings():  # an unconverged unmixing is still an estimate
        warnings.simplefilter("ignore", ConvergenceWarning)
        ica.fit(white)
    dirs = polar_factor(ica.components_) @ vt[keep]  # (k, d), orthonormal rows
    comps = yc @ dirs.T
    signs = np.where(np.mean(comps**3, axis=0) < 0, -1.0, 1.0)
    order = np.argsort(-np.var(comps, axis=0), kind="stable")
    x_hat = np.zeros((n, d))
    x_hat[:, :k] = (comps * signs)[:, order]
    return IcaResult(x_hat, (dirs * signs[:, None])[order], k)
