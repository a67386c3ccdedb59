"""Known-sample (distribution) attack: a public sample of the same population, whose principal
axes and then whose distribution the attacker matches with the upload's.

Model (SPEC.md section 3, "Without a colluder"): the rows of ``Y = X O + 1 Psi^T`` come from the
population of the sample ``S`` (``N x d``, working space), rotated and shifted. Centred,
``C_Y = O^T C_X O``: with the eigenvectors ``V_Y`` of ``C_Y`` and ``V_S`` of ``C_S ~ C_X``
(descending eigenvalues), ``V_Y = O^T V_S D`` for a diagonal ``D`` of signs, so the decoder is

    Q = O^T ~ V_Y D V_S^T,   X^ = (Y - 1 ybar^T) Q + 1 t^T,   t = sbar.

Eigenvectors are defined up to sign; the third moment resolves it: along axis ``k``,
``skew((Y - ybar) v_Y,k) = d_k skew((S - sbar) v_S,k)``, so ``d_k = sign(g_Y,k g_S,k)``. A
sample skewness has standard error ``sqrt(6 / n)``; axes whose skewness is within that of zero
are ambiguous, and the ``flips`` least certain of them are tried both ways (``2^flips`` starts).
Axes whose eigenvalues are closer than their sampling error (``lambda sqrt(2 / n)``) are not
identified by second moments at all: any rotation inside such a cluster fits ``C_Y`` equally well
(the diagnostics count them). That is the limit of principal-axes alignment, and why each start
is refined by Wasserstein-Procrustes (Grave, Joulin and Berthet, AISTATS 2019): alternate the
optimal assignment ``pi`` of the reconstructed rows to the sample's rows (minimum total squared
distance, ``scipy.optimize.linear_sum_assignment``) with the centred Procrustes update

    Q = Pi(Yc_pi^T Sc_pi),   t = mean(S_pi) - mean(Yc_pi) Q,

for at most ``iterations`` rounds or until the assignment repeats. The start whose final mean
squared matched distance ``W`` (an empirical 2-Wasserstein cost) is lowest wins. With
``n > N`` only ``N`` upload rows are matched per round. The attack is a heuristic with no
exactness guarantee: how well it does depends on how anisotropic and skewed the population is.

References: Liu, Giannella and Kargupta (2008), known-sample and PCA-based attacks on
rotation perturbation; Grave et al. (2019), Wasserstein-Procrustes; SPEC.md section 3.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.linalg import polar_factor
from noisyanchor.common.validation import as_matrix, check_count

#: Sign flips of the least certain axes tried (``2^flips`` starts).
DEFAULT_FLIPS = 2
#: Wasserstein-Procrustes rounds per start.
DEFAULT_ITERATIONS = 10


@dataclass(frozen=True)
class KnownSampleResult:
    """The decoder the known-sample attack found.

    Attributes
    ----------
    decoder : (d, d) ndarray
        ``Q`` (orthogonal; an estimate of ``O^T``).
    center : (d,) ndarray
        ``ybar``: mean of the rows the decoder was fitted on.
    offset : (d,) ndarray
        ``t``.
    cost : float
        ``W`` of the chosen start (mean squared matched distance).
    pca_cost : float
        ``W`` of principal axes and skewness signs alone, before refinement.
    starts : int
        Starts tried.
    chosen_start : int
        Index of the winner (0 = skewness signs as estimated).
    iterations : int
        Refinement rounds of the winner.
    ambiguous_signs : int
        Axes whose skewness is within one standard error of zero.
    unidentified_axes : int
        Axes whose eigenvalue gap to a neighbour is below its sampling error.
    """

    decoder: np.ndarray
    center: np.ndarray
    offset: np.ndarray
    cost: float
    pca_cost: float
    starts: int
    chosen_start: int
    iterations: int
    ambiguous_signs: int
    unidentified_axes: int

    def decode(self, rows: np.ndarray) -> np.ndarray:
        """``X^ = (rows - 1 ybar^T) Q + 1 t^T`` for rows in the frame the decoder was fitted in."""
        return (np.asarray(rows, dtype=float) - self.center) @ self.decoder + self.offset


def _axes(centred: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenvalues (descending), eigenvectors (columns) and skewness along each."""
    n = len(centred)
    lam, vec = np.linalg.eigh(centred.T @ centred / n)
    lam, vec = lam[::-1], vec[:, ::-1]
    proj = centred @ vec
    scale = np.sqrt(np.maximum(lam, 1e-300))
    return lam, vec, np.mean(proj**3, axis=0) / scale**3


def _unidentified(lam: np.ndarray, n: int) -> int:
    """Axes with a neighbour's eigenvalue within sampling error ``lambda sqrt(2/n)``."""
    err = lam * np.sqrt(2.0 / n)
    close = np.abs(np.diff(lam)) < np.maximum(err[:-1], err[1:])
    return int(np.sum(np.r_[close, False] | np.r_[False, close]))


def _matched_cost(x_hat: np.ndarray, sample: np.ndarray,
                  sq_sample: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    cost = (np.sum(x_hat * x_hat, axis=1)[:, None] + sq_sample[None, :]
            - 2 * x_hat @ sample.T)
    rows, cols = linear_sum_assignment(cost)
    return float(np.mean(np.maximum(cost[rows, cols], 0.0))), rows, cols


def known_sample_attack(y: np.ndarray, sample: np.ndarray, *, flips: int = DEFAULT_FLIPS,
                        iterations: int = DEFAULT_ITERATIONS) -> KnownSampleResult:
    """Fit the decoder of rows ``y`` against the public ``sample`` (module docstring).

    Parameters
    ----------
    y : (n, d) ndarray
        Rows in one frame: a target's upload ``Y_i``, or the analyst's aligned ``Z``.
    sample : (N, d) ndarray
        Public records of the same population, working space (``X F``), disjoint from the
        targets'.
    flips : int
        Least certain sign choices tried both ways.
    iterations : int
        Wasserstein-Procrustes rounds per start (0: principal axes and signs only).
    """
    y = as_matrix(y, "rows to decode")
    sample = as_matrix(sample, "public sample", cols=y.shape[1])
    flips = check_count(flips, "flips", minimum=0)
    iterations = check_count(iterations, "iterations", minimum=0)
    n, d = y.shape
    if n < 3 or len(sample) < 3:
        raise InvalidInputError("the known-sample attack needs at least 3 rows and 3 public "
                                "records (second and third moments)")
    center, sbar = y.mean(axis=0), sample.mean(axis=0)
    yc, sc = y - center, sample - sbar
    lam_y, vec_y, skew_y = _axes(yc)
    _, vec_s, skew_s = _axes(sc)
    signs = np.where(skew_y * skew_s < 0, -1.0, 1.0)
    certainty = np.minimum(np.abs(skew_y) / np.sqrt(6.0 / n),
                           np.abs(skew_s) / np.sqrt(6.0 / len(sample)))
    doubtful = np.argsort(certainty, kind="stable")[:min(flips, d)]
    sq_sample = np.sum(sample * sample, axis=1)
    best: tuple[float, int, np.ndarray, np.ndarray, int] | None = None
    pca_cost = float("nan")
    starts = list(itertools.product((1.0, -1.0), repeat=len(doubtful)))
    for index, flip in enumerate(starts):
        s = signs.copy()
        s[doubtful] *= np.asarray(flip)
        q = (vec_y * s) @ vec_s.T
        t = sbar
        cost, rows, cols = _matched_cost(yc @ q + t, sample, sq_sample)
        if index == 0:
            pca_cost = cost
        rounds = 0
        while rounds < iterations:
            rounds += 1
            ym, sm = yc[rows], sample[cols]
            ymc = ym - ym.mean(axis=0)
            q = polar_factor(ymc.T @ (sm - sm.mean(axis=0)))
            t = sm.mean(axis=0) - ym.mean(axis=0) @ q
            new_cost, new_rows, new_cols = _matched_cost(yc @ q + t, sample, sq_sample)
            same = np.array_equal(new_rows, rows) and np.array_equal(new_cols, cols)
            cost, rows, cols = new_cost, new_rows, new_cols
            if same:
                break
        if best is None or cost < best[0]:
            best = (cost, index, q, t, rounds)
    assert best is not None
    cost, index, q, t, rounds = best
    ambiguous = int(np.sum(certainty < 1.0))
    return KnownSampleResult(q, center, np.asarray(t, dtype=float), cost, pca_cost, len(starts),
                             index, rounds, ambiguous, _unidentified(lam_y, n))
