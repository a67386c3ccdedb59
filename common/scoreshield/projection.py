"""Projection of a symmetric matrix onto the correlation matrices (the elliptope).

The feasible set of cosine Gram matrices is ``C = C_psd ∩ C_box`` with ``C_psd = {S ⪰ 0}`` and
``C_box = {diag(S) = 1, |S_ij| <= 1}`` (paper eq. (8) / (352)). Two solvers share the two
closed-form projectors, and the default solver works on the dual:

- ``"newton"`` (default): the semismooth Newton method on the dual of the nearest correlation
  problem (Qi and Sun 2006; Borsdorf and Higham 2010; :mod:`common.scoreshield.newton`): the
  metric projection ``P_C(M)``, typically in 5-15 eigendecompositions to a relative feasibility
  gap of 1e-6, where the two methods below need hundreds.
- ``"aap"``: averaged alternating projections ``S <- (P_psd(S) + P_box(S)) / 2`` (paper eq. (9),
  Algorithm 6), a feasibility method: its limit is feasible but in general not the nearest point.
- ``"dykstra"``: Dykstra's algorithm with the same two projectors (paper Algorithm 7,
  Theorem J.18), which converges to the Frobenius metric projection ``P_C(M)``. Since
  ``C_psd ∩ {diag = 1}`` already implies ``|S_ij| <= 1`` (paper Lemma C.22), this is the same
  point as Higham's nearest correlation matrix.

All three end with the same normalisation so the output is feasible to rounding error whatever the
iteration count: one PSD projection, the congruence ``D^{-1/2} X D^{-1/2}`` (``D = diag(X)``), which
keeps ``X`` PSD and makes the diagonal 1, then a clip of the off-diagonal entries to ``[-1, 1]``
(a no-op up to rounding, by Cauchy-Schwarz for PSD matrices with unit diagonal); Newton's
iterate ``(M + Diag(y))_+`` is PSD by construction, so its PSD step is skipped. The extracted
paper text lost Algorithm 6's body, so this final step follows SPEC.md section 5 and the issue.
Post-processing of a DP release, so none of this changes the privacy guarantee (Lemma 2.8).

References
----------
SPEC.md section 5; ScoreShield paper Section 3.2 ("Fast Projection via Averaged Alternating
Projections"), Appendix J.4 (eqs. (352)-(355)), J.7 (Dykstra, Theorem J.18), K.1 (stopping rule:
relative Frobenius change below a tolerance); H. Qi and D. Sun, SIAM J. Matrix Anal. Appl. 28(2),
2006; R. Borsdorf and N. J. Higham, IMA J. Numer. Anal. 30(1), 2010.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).
from noisyanchor.common.blas import eigh_threads, with_blas_threads
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield.newton import newton_dual
from noisyanchor.common.validation import as_matrix, check_count, check_positive

#: Solvers accepted by :func:`project_correlation`, the default first.
PROJECTION_METHODS = ("newton", "aap", "dykstra")

#: ``progress(iteration, relative_residual)``, called after every iteration of a projection.
Progress = Callable[[int, float], None]

#: Diagonal entries at or below this after the final PSD step are treated as zero: that row and
#: column are replaced by the unit vector (still PSD, unit diagonal).
_DIAG_FLOOR = 1e-12


@dataclass(frozen=True)
class ProjectionResult:
    """Output of :func:`project_correlation`.

    Attributes
    ----------
    matrix : (n, n) ndarray
        The released correlation matrix ``S_hat``: symmetric, PSD, unit diagonal, ``|S_ij| <= 1``.
    method : str
        ``"newton"``, ``"aap"`` or ``"dykstra"``.
    iterations : int
        Iterations run: Newton steps, or alternating-projection rounds (each one PSD projection
        and one box projection).
    eigendecompositions : int
        Full symmetric eigendecompositions the solver and its normalisation computed (the cost
        that grows like ``n^3``; the diagnostic ``min_eigenvalue`` is not counted).
    single_precision_eigendecompositions : int
        How many of them were single precision (Newton's early steps; about half the cost).
    converged : bool
        Whether the stopping rule was met before ``max_iter`` (and ``max_seconds``).
    relative_change : float
        ``||S_{k+1} - S_k||_F / max(||S_k||_F, 1)`` at the last iteration (the paper's rule); for
        Newton the same of the dual iterate ``y``.
    residual : float
        Feasibility gap at the last iteration before normalisation (absolute): for AAP and
        Dykstra ``||P_psd(.) - P_box(.)||_F`` of the two half-steps, whose box half-step has unit
        diagonal, bounded entries and ``lambda_min >= -residual``; for Newton
        ``||diag(X) - 1||_2`` of its PSD iterate ``X``, the distance to the unit-diagonal matrix
        with the same off-diagonal entries. Both are the Frobenius distance between a PSD matrix
        and a unit-diagonal one.
    relative_residual : float
        ``residual / max(||X||_F, 1)`` with ``X`` the last iterate.
    normalization_shift : float
        ``||S_hat - X||_F`` where ``X`` is the last iterate before the final normalisation.
    distance_to_input : float
        ``||S_hat - M||_F`` to the symmetrised input ``M``.
    min_eigenvalue : float
        ``lambda_min(S_hat)`` (>= -1e-8 up to rounding).
    max_diag_error : float
        ``max_i |S_hat_ii - 1|``.
    max_abs_entry : float
        ``max_ij |S_hat_ij|``.
    seconds : float
        Wall time of the projection including the final normalisation.
    """

    matrix: np.ndarray
    method: str
    iterations: int
    eigendecompositions: int
    single_precision_eigendecompositions: int
    converged: bool
    relative_change: float
    residual: float
    relative_residual: float
    normalization_shift: float
    distance_to_input: float
    min_eigenvalue: float
    max_diag_error: float
    max_abs_entry: float
    seconds: float


def symmetrize(matrix: np.ndarray) -> np.ndarray:
    """``(M + M^T) / 2`` (paper eq. (23)); a DP post-processing step."""
    return 0.5 * (matrix + matrix.T)


def project_psd(matrix: np.ndarray) -> np.ndarray:
    """``P_psd(S) = V max(Lambda, 0) V^T`` for symmetric ``S = V Lambda V^T`` (paper eq. (10)).

    Uses ``scipy.linalg.eigh`` (LAPACK ``syevd``). The product is formed from whichever of the
    positive or negative eigenpairs is the smaller set: ``S - V_- Lambda_- V_-^T`` when few
    eigenvalues are negative, which is the common case near convergence.
    """
    import scipy.linalg

    w, v = scipy.linalg.eigh(matrix, driver="evd", check_finite=False)
    neg = w < 0.0
    n_neg = int(neg.sum())
    if n_neg == 0:
        return symmetrize(matrix)
    if n_neg <= w.size // 2:
        vn = v[:, neg]
        out = matrix - (vn * w[neg]) @ vn.T
    else:
        vp = v[:, ~neg]
        out = (vp * w[~neg]) @ vp.T
    return symmetrize(out)


def project_box(matrix: np.ndarray) -> np.ndarray:
    """``P_box(S)``: unit diagonal, off-diagonal entries clipped to ``[-1, 1]`` (paper eq. (11))."""
    out = np.clip(matrix, -1.0, 1.0)
    np.fill_diagonal(out, 1.0)
    return out


def _normalize(matrix: np.ndarray, *, psd: bool = False) -> np.ndarray:
    """Final step: PSD projection (skipped when ``psd``: the input is PSD by construction),
    ``D^{-1/2} X D^{-1/2}``, unit diagonal, clip to ``[-1, 1]``."""
    x = symmetrize(matrix) if psd else project_psd(matrix)
    d = np.diag(x).copy()
    dead = d <= _DIAG_FLOOR
    scale = np.zeros_like(d)
    scale[~dead] = 1.0 / np.sqrt(d[~dead])
    x = x * scale[:, None] * scale[None, :]  # congruence: stays PSD
    # rows with a (numerically) zero diagonal were zeroed by scale 0; the unit diagonal put back by
    # fill_diagonal adds a PSD diagonal matrix, so the result stays PSD.
    x = symmetrize(x)
    np.fill_diagonal(x, 1.0)
    return np.clip(x, -1.0, 1.0)


def _min_eigenvalue(matrix: np.ndarray) -> float:
    """Smallest eigenvalue only (LAPACK ``syevr`` with an index subset)."""
    import scipy.linalg

    w = scipy.linalg.eigh(matrix, eigvals_only=True, subset_by_index=[0, 0], driver="evr",
                         check_finite=False)
    return float(w[0])


def _fro(x: np.ndarray) -> float:
    return float(np.linalg.norm(x, "fro"))


def _order(matrix: object, *args: object, **kwargs: object) -> int:
    """Rows of ``matrix`` (0 for a malformed one, which ``project_correlation`` refuses)."""
    shape = np.shape(matrix)  # type: ignore[call-overload]  # any array_like
    return int(shape[0]) if shape else 0


# BLAS threads by the order of the eigensolves, one unless large and CPUs are idle (issue 14).
@with_blas_threads(lambda *args, **kwargs: eigh_threads(_order(*args, **kwargs)))
def project_correlation(
    matrix: object,
    *,
    method: str = "newton",
    tol: float = 1e-6,
    max_iter: int = 500,
    residual_tol: float | None = None,
    max_seconds: float | None = None,
    progress: Progress | None = None,
) -> ProjectionResult:
    """Project a (noisy) symmetric matrix onto the correlation matrices.

    Parameters
    ----------
    matrix : (n, n) array_like
        Noisy Gram ``M`` (finite, square). It is symmetrised first, ``(M + M^T)/2``.
    method : {"newton", "aap", "dykstra"}
        ``"newton"``: semismooth Newton on the dual (:func:`common.scoreshield.newton.
        newton_dual`), the metric projection; stops when the relative feasibility gap
        ``||diag(X) - 1||_2 / max(||X||_F, 1) < tol``. ``"aap"``: averaged alternating
        projections ``S <- (P_psd(S) + P_box(S))/2`` (paper eq. (9)); stops when the relative
        change ``||S_{k+1} - S_k||_F / max(||S_k||_F, 1) < tol`` (paper App. K.1). ``"dykstra"``:
        Dykstra's algorithm with the same projectors and correction terms, converging to the
        metric projection (paper Theorem J.18); stops when both the relative change of the box
        iterate and the relative gap ``||X_k - Y_k||_F / max(||X_k||_F, 1)`` are below ``tol``.
    tol : float
        Stopping tolerance, > 0.
    max_iter : int
        Iteration cap (>= 1). A capped run is still normalised to a feasible output and reports
        ``converged=False`` and its ``residual``.
    residual_tol : float, optional
        If given, additionally require the relative feasibility gap ``relative_residual <=
        residual_tol`` before stopping (the benchmark times every method to one such level).
    max_seconds : float, optional
        Wall-time cap: no new iteration starts after this many seconds (a capped run is
        normalised and reports ``converged=False``).
    progress : callable, optional
        ``progress(iteration, relative_residual)`` after every iteration.

    Returns
    -------
    ProjectionResult
        Output matrix and diagnostics.

    Raises
    ------
    InvalidInputError
        Non-square, empty or non-finite ``matrix``; bad ``method``, ``tol``, ``max_iter`` or
        ``max_seconds``.

    References
    ----------
    SPEC.md section 5; ScoreShield paper Section 3.2, Appendix J.4 and J.7; Qi and Sun (2006);
    Borsdorf and Higham (2010).
    """
    m = as_matrix(matrix, "matrix")
    if m.shape[0] != m.shape[1]:
        raise InvalidInputError(f"matrix must be square, got shape {m.shape}")
    if method not in PROJECTION_METHODS:
        raise InvalidInputError(f"method must be one of {PROJECTION_METHODS}, got {method!r}")
    tol = check_positive(tol, "tol")
    max_iter = check_count(max_iter, "max_iter", minimum=1)
    if residual_tol is not None:
        residual_tol = check_positive(residual_tol, "residual_tol")
    if max_seconds is not None:
        max_seconds = check_positive(max_seconds, "max_seconds")

    t0 = time.perf_counter()
    m = symmetrize(m)
    if method == "newton":
        out = newton_dual(m, tol=min(tol, residual_tol or tol), max_iter=max_iter,
                          max_seconds=max_seconds, progress=progress)
        run = _Run(out.matrix, out.iterations, out.eigendecompositions, out.converged,
                   out.relative_change, out.residual, out.relative_residual,
                   out.single_precision)
    else:
        solver = _aap if method == "aap" else _dykstra
        deadline = math.inf if max_seconds is None else t0 + max_seconds
        run = solver(m, _Stop(tol, max_iter, residual_tol, deadline, progress))
    out_matrix = _normalize(run.last, psd=method == "newton")
    seconds = time.perf_counter() - t0
    return ProjectionResult(
        matrix=out_matrix,
        method=method,
        iterations=run.iterations,
        eigendecompositions=run.eigendecompositions + (method != "newton"),
        single_precision_eigendecompositions=run.single_precision,
        converged=run.converged,
        relative_change=run.relative_change,
        residual=run.residual,
        relative_residual=run.relative_residual,
        normalization_shift=_fro(out_matrix - run.last),
        distance_to_input=_fro(out_matrix - m),
        min_eigenvalue=_min_eigenvalue(out_matrix),
        max_diag_error=float(np.abs(np.diag(out_matrix) - 1.0).max()),
        max_abs_entry=float(np.abs(out_matrix).max()),
        seconds=seconds,
    )


@dataclass(frozen=True)
class _Run:
    """Last iterate and statistics of one solver run (before the final normalisation)."""

    last: np.ndarray
    iterations: int
    eigendecompositions: int
    converged: bool
    relative_change: float
    residual: float
    relative_residual: float
    single_precision: int = 0


@dataclass(frozen=True)
class _Stop:
    """Stopping rule shared by the alternating-projection solvers."""

    tol: float
    max_iter: int
    residual_tol: float | None
    deadline: float
    progress: Progress | None

    def met(self, it: int, change: float, rel_gap: float, *, gap_rule: bool = True) -> bool:
        """Whether iteration ``it`` met the rule: ``max(change, rel_gap) < tol`` (only
        ``change`` without ``gap_rule``), and ``rel_gap <= residual_tol`` when that is set.
        Reports progress first."""
        if self.progress is not None:
            self.progress(it, rel_gap)
        measured = max(change, rel_gap) if gap_rule else change
        return measured < self.tol and (self.residual_tol is None
                                        or rel_gap <= self.residual_tol)

    def out_of_time(self) -> bool:
        """Whether the wall-time cap has passed."""
        return time.perf_counter() >= self.deadline


def _aap(m: np.ndarray, stop: _Stop) -> _Run:
    """Averaged alternating projections (paper eq. (9)); returns the last iterate and stats."""
    s = m
    change = gap = rel_gap = math.inf
    it = 0
    while it < stop.max_iter and not stop.out_of_time():
        it += 1
        a = project_psd(s)
        b = project_box(s)
        gap = _fro(a - b)
        rel_gap = gap / max(_fro(b), 1.0)
        new = 0.5 * (a + b)
        change = _fro(new - s) / max(_fro(s), 1.0)
        s = new
        # the paper's rule for AAP is the relative change alone
        if stop.met(it, change, rel_gap, gap_rule=False):
            return _Run(s, it, it, True, change, gap, rel_gap)
    return _Run(s, it, it, False, change, gap, rel_gap)


def _dykstra(m: np.ndarray, stop: _Stop) -> _Run:
    """Dykstra's algorithm for ``P_{C_psd ∩ C_box}(m)`` (paper Algorithm 7).

    ``Y_k = P_psd(X_{k-1} + P_{k-1})``, ``P_k = X_{k-1} + P_{k-1} - Y_k``,
    ``X_k = P_box(Y_k + Q_{k-1})``, ``Q_k = Y_k + Q_{k-1} - X_k``; ``X_k -> P_C(m)``.
    Both corrections are kept because ``C_box`` is not an affine set.
    """
    x = m
    p = np.zeros_like(m)
    q = np.zeros_like(m)
    change = gap = rel_gap = math.inf
    it = 0
    while it < stop.max_iter and not stop.out_of_time():
        it += 1
        y = project_psd(x + p)
        p = x + p - y
        x_new = project_box(y + q)
        q = y + q - x_new
        gap = _fro(x_new - y)
        scale = max(_fro(x), 1.0)
        change = _fro(x_new - x) / scale
        rel_gap = gap / max(_fro(x_new), 1.0)
        x = x_new
        if stop.met(it, change, rel_gap):
            return _Run(x, it, it, True, change, gap, rel_gap)
    return _Run(x, it, it, False, change, gap, rel_gap)
