"""Semismooth Newton method on the dual of the nearest correlation matrix problem.

The nearest correlation matrix ``P_C(G) = argmin {||X - G||_F : X ⪰ 0, diag(X) = 1}`` (the
metric projection of SPEC.md section 5; the box ``|X_ij| <= 1`` holds automatically for such
``X``, ScoreShield paper Lemma C.22) has the unconstrained, convex, once continuously
differentiable dual (Qi and Sun 2006, eq. (9); Malick 2004)

    ``min_y theta(y) = 1/2 ||(G + Diag(y))_+||_F^2 - b^T y``,  ``b = 1``,

with gradient ``F(y) = diag((G + Diag(y))_+) - b`` and primal solution
``X* = (G + Diag(y*))_+``. ``F`` is strongly semismooth, and every element of its generalised
(Clarke) Jacobian at the solution is positive definite (constraint nondegeneracy holds for every
``G``), so the semismooth Newton method converges quadratically (Qi and Sun 2006, Theorem 5.3).

With ``A = G + Diag(y) = P Lambda P^T`` (``lambda_1 >= ... >= lambda_n``), ``alpha = {i :
lambda_i > 0}``, the element of ``∂F(y)`` used is

    ``V h = diag(P (Omega ∘ (P^T Diag(h) P)) P^T)``,
    ``Omega_ij = 1`` (``i, j`` in ``alpha``), ``lambda_i / (lambda_i - lambda_j)`` (``i`` in
    ``alpha``, ``j`` not), ``0`` (neither),

applied in ``O(n^2 min(r, n - r))`` flops (``r = |alpha|``) through whichever of the two index
blocks is smaller, as in Borsdorf and Higham (2010, Section 3). Each Newton step solves
``(V + eps_k I) d = -F`` by conjugate gradients preconditioned with ``diag(V)`` (Borsdorf and
Higham 2010, Section 3.2; also computed in ``O(n^2 min(r, n - r))``), to a relative residual
``eta_k = min(eta, ||F||)`` (inexact Newton, superlinear), and takes an Armijo backtracking step
on ``theta``. ``eps_k = min(1, ||F||) * 1e-6`` keeps the system positive definite far from the
solution, where ``V`` may be singular, and vanishes as ``F -> 0``.

One symmetric eigendecomposition per evaluation of ``theta`` is the whole cost that grows like
``n^3``; a unit step is accepted near the solution, so the count is typically the number of
Newton steps plus a few backtracks, against hundreds for alternating projections.

Mixed precision: while the relative gap is above 1e-3 (and the tolerance) the eigendecompositions
are computed in single precision, which LAPACK does in about half the time; they steer the
early, globalising steps as well as double precision would (the same iteration counts, measured),
and every quantity derived from them (``theta``, ``F``, the Jacobian) is formed in double
precision from the rounded factors, so the reported gap is that of the matrix returned. The
steps that reach the tolerance use double precision.

Start: the first eigendecomposition of ``G + Diag(1 - diag(G))`` is reused to choose the scalar
shift ``c`` with ``trace((A_0 - c I)_+) = n`` (found by sorting the eigenvalues), so Newton starts
from ``y_0 = 1 - diag(G) - c`` with the right trace. This matters for the noisy Grams of DP
releases, whose noise spectrum is far wider than the unit diagonal.

References
----------
H. Qi and D. Sun, "A quadratically convergent Newton method for computing the nearest correlation
matrix", SIAM J. Matrix Anal. Appl. 28(2), 2006, 360-385. R. Borsdorf and N. J. Higham, "A
preconditioned Newton algorithm for the nearest correlation matrix", IMA J. Numer. Anal. 30(1),
2010, 94-107. SPEC.md section 5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).

#: Armijo sufficient-decrease constant, the largest and smallest factor a backtrack shrinks the
#: step by, and the cap on backtracks of the line search.
_ARMIJO, _BACKTRACK, _SHRINK_MIN, _MAX_BACKTRACKS = 1e-4, 0.5, 0.1, 20

_EPS, _EPS32 = float(np.finfo(np.float64).eps), float(np.finfo(np.float32).eps)

#: Eigendecompositions are computed in single precision while the relative gap is above this
#: (and above the tolerance): there they are accurate enough to steer Newton and cost about half
#: (measured at n = 1,000 on DP-noised digits Grams: the same iterations, 1.4-2x less time).
_SINGLE_ABOVE = 1e-3

#: The first step tried is ``min(1, _GROW * s)`` after an accepted step ``s``: while the Newton
#: model is poor (far from the solution, a rank that is still growing) the accepted steps are
#: short, and trying the unit step each time would waste an eigendecomposition per iteration.
_GROW = 4.0

#: Cap on the forcing term ``eta_k`` of the inner conjugate-gradient solve.
_ETA = 1e-2

#: Cap on conjugate-gradient iterations per Newton step (the preconditioned system is well
#: conditioned near the solution; far from it an inexact direction is enough).
_MAX_CG = 200

#: Regularisation ``eps_k = _REG * min(1, ||F||)`` of the Newton system.
_REG = 1e-6


@dataclass(frozen=True)
class NewtonOutcome:
    """What :func:`newton_dual` returns.

    Attributes
    ----------
    matrix : (n, n) ndarray
        ``X = (G + Diag(y))_+`` at the last dual iterate (PSD by construction; its diagonal is
        ``1 + F(y)``).
    iterations : int
        Newton steps taken.
    eigendecompositions : int
        Full symmetric eigendecompositions computed.
    single_precision : int
        How many of them were computed in single precision.
    cg_iterations : int
        Conjugate-gradient iterations over all steps (one Jacobian product each).
    relative_change : float
        ``||y_k - y_{k-1}||_2 / max(||y_k||_2, 1)`` of the last step (inf when none was taken).
    residual : float
        ``||F(y)||_2 = ||diag(X) - 1||_2``: the Frobenius distance from ``X`` to the
        unit-diagonal matrix with the same off-diagonal entries (the feasibility gap).
    relative_residual : float
        ``residual / max(||X||_F, 1)``.
    converged : bool
        Whether the stopping rule was met.
    rank : int
        ``r``, positive eigenvalues of ``G + Diag(y)`` (the rank of ``X``).
    """

    matrix: np.ndarray
    iterations: int
    eigendecompositions: int
    single_precision: int
    cg_iterations: int
    relative_change: float
    residual: float
    relative_residual: float
    converged: bool
    rank: int


class _Point:
    """``A = G + Diag(y)`` at one dual point, with its eigendecomposition and derived terms."""

    def __init__(self, y: np.ndarray, w: np.ndarray, v: np.ndarray, eps: float) -> None:
        self.y = y
        self.w, self.v = w, v  # ascending eigenvalues and their eigenvectors (float64)
        self.eps = eps  # unit roundoff of the eigendecomposition they came from
        # ascending eigenvalues: alpha is the last r columns (views, no n x n copies)
        split = int(np.searchsorted(w, 0.0, side="right"))
        self.r = w.size - split
        self.lam = w[split:]  # lambda_alpha
        self.lam_neg = w[:split]
        self.p_pos = v[:, split:]  # P_alpha (n x r)
        self.p_neg = v[:, :split]  # P_alpha-bar (n x (n - r))
        # diag((A)_+) = sum_i lambda_i p_i∘p_i over alpha
        self.diag_x = (self.p_pos ** 2) @ self.lam
        self.theta = 0.5 * float(self.lam @ self.lam) - float(y.sum())
        self.f = self.diag_x - 1.0

    @classmethod
    def at(cls, g: np.ndarray, y: np.ndarray, single: bool) -> _Point:
        """The point ``y``: one eigendecomposition of ``G + Diag(y)`` (LAPACK ``syevd``), in
        single precision when ``single`` (``g`` is then ``G`` as float32)."""
        import scipy.linalg

        a = g.copy()
        a[np.diag_indices_from(a)] += y.astype(a.dtype)
        w, v = scipy.linalg.eigh(a, driver="evd", check_finite=False, overwrite_a=True)
        eps = float(np.finfo(a.dtype).eps)
        return cls(y, w.astype(np.float64), v.astype(np.float64, copy=False), eps)

    def matrix(self) -> np.ndarray:
        """``X = P_alpha Lambda_alpha P_alpha^T``."""
        x = (self.p_pos * self.lam) @ self.p_pos.T
        return 0.5 * (x + x.T)


class _Jacobian:
    """The element ``V`` of ``∂F(y)`` at one point, applied and preconditioned in
    ``O(n^2 min(r, n - r))`` (Borsdorf and Higham 2010, Section 3)."""

    def __init__(self, pt: _Point) -> None:
        n, r = pt.v.shape[0], pt.r
        self.n, self.r = n, r
        self.p_pos, self.p_neg = pt.p_pos, pt.p_neg
        # Omega_12 (r x (n - r)): lambda_i / (lambda_i - lambda_j), i in alpha, j not
        self.omega = pt.lam[:, None] / (pt.lam[:, None] - pt.lam_neg[None, :])
        self.small = r <= n - r  # work through alpha (else through its complement)
        q_pos, q_neg = self.p_pos ** 2, self.p_neg ** 2
        if self.small:
            # diag(V)_k = (sum_{i in alpha} P_ki^2)^2 + 2 sum_{i in alpha, j not} P_ki^2 w_ij P_kj^2
            d = q_pos.sum(axis=1) ** 2 + 2.0 * np.einsum("ij,ij->i", q_pos @ self.omega, q_neg)
        else:
            # V = I - V~ with Omega~ = E - Omega: 1 - w_ij off the alpha block, 1 on alpha-bar
            d_c = (q_neg.sum(axis=1) ** 2
                   + 2.0 * np.einsum("ij,ij->i", q_pos @ (1.0 - self.omega), q_neg))
            d = 1.0 - d_c
        self.diag = np.maximum(d, 1e-8)

    def apply(self, h: np.ndarray) -> np.ndarray:
        """``V h``."""
        p_pos, p_neg = self.p_pos, self.p_neg
        if self.r == 0:
            return np.zeros_like(h)
        if self.small:
            b = p_pos.T * h  # P_alpha^T Diag(h), r x n
            m_aa = b @ p_pos
            m_ab = (b @ p_neg) * self.omega
            return (np.einsum("ij,ij->i", p_pos @ m_aa, p_pos)
                    + 2.0 * np.einsum("ij,ij->i", p_pos @ m_ab, p_neg))
        if self.r == self.n:
            return h.copy()
        c = p_neg.T * h  # P_alpha-bar^T Diag(h), (n - r) x n
        m_bb = c @ p_neg
        m_ba = (c @ p_pos) * (1.0 - self.omega).T
        term = (np.einsum("ij,ij->i", p_neg @ m_bb, p_neg)
                + 2.0 * np.einsum("ij,ij->i", p_neg @ m_ba, p_pos))
        return h - term


def _pcg(jac: _Jacobian, rhs: np.ndarray, reg: float, tol: float) -> tuple[np.ndarray, int]:
    """Preconditioned CG for ``(V + reg I) d = rhs`` to ``||residual|| <= tol``; ``(d, its)``."""
    precond = 1.0 / (jac.diag + reg)
    d = np.zeros_like(rhs)
    res = rhs.copy()
    z = precond * res
    p = z.copy()
    rz = float(res @ z)
    for it in range(1, _MAX_CG + 1):
        vp = jac.apply(p) + reg * p
        curv = float(p @ vp)
        if curv <= 0.0:  # numerically singular direction: keep what we have
            return (d if it > 1 else z), it
        step = rz / curv
        d += step * p
        res -= step * vp
        if float(np.linalg.norm(res)) <= tol:
            return d, it
        z = precond * res
        rz_new = float(res @ z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return d, _MAX_CG


def _trace_shift(w: np.ndarray, n: int) -> float:
    """The ``c`` with ``sum_i (w_i - c)_+ = n`` (``w`` ascending; unique: the sum decreases
    from infinity to 0 as ``c`` grows)."""
    desc = w[::-1]
    cums = np.cumsum(desc)
    k = np.arange(1, desc.size + 1)
    # with the top k eigenvalues above c: sum = cums_k - k c = n -> c = (cums_k - n) / k, valid
    # when desc[k] <= c < desc[k - 1]
    c = (cums - n) / k
    nxt = np.r_[desc[1:], -np.inf]
    ok = np.flatnonzero((c < desc) & (c >= nxt))
    return float(c[ok[0]]) if ok.size else 0.0


def _late(t0: float, max_seconds: float | None) -> bool:
    return max_seconds is not None and time.perf_counter() - t0 >= max_seconds


def newton_dual(
    g: np.ndarray,
    *,
    tol: float,
    max_iter: int,
    max_seconds: float | None = None,
    progress: Callable[[int, float], None] | None = None,
    mixed: bool = True,
) -> NewtonOutcome:
    """Solve the dual of the nearest correlation problem by semismooth Newton (module docstring).

    Parameters
    ----------
    g : (n, n) ndarray
        Symmetric input ``G`` (finite).
    tol : float
        Stop when ``||F(y)||_2 / max(||X||_F, 1) <= tol`` (relative feasibility gap).
    max_iter : int
        Cap on Newton steps.
    max_seconds : float, optional
        Stop after the step during which this much wall time has passed (``converged=False``).
    progress : callable, optional
        ``progress(iteration, relative_residual)`` after every step (and once at the start).
    mixed : bool
        Single-precision eigendecompositions far from the solution (default); False: double
        precision throughout.

    Returns
    -------
    NewtonOutcome
    """
    t0 = time.perf_counter()
    n = g.shape[0]
    g32 = g.astype(np.float32) if mixed else None

    counts = {"all": 0, "single": 0}  # eigendecompositions computed

    def point(y: np.ndarray, far: bool) -> _Point:
        # single precision while the gap is far above what it can resolve (module docstring)
        single = g32 is not None and far
        counts["all"] += 1
        counts["single"] += single
        return _Point.at(g32, y, True) if g32 is not None and single else _Point.at(g, y, False)

    first = point(1.0 - np.diag(g), True)
    c = _trace_shift(first.w, n)
    # c is known to the precision of the eigenvalues only; 0 when it is within that (a feasible
    # input then comes back unchanged: its start is y = 0, recomputed in double precision)
    if abs(c) <= n * first.eps * max(float(np.abs(first.w).max()), 1.0):
        c = 0.0
    pt = _Point(first.y - c, first.w - c, first.v, first.eps)
    cg_total, it, last_step, change = 0, 0, 1.0, math.inf

    def rel(point: _Point) -> tuple[float, float]:
        res = float(np.linalg.norm(point.f))
        # ||X||_F^2 = sum of squared positive eigenvalues
        return res, res / max(math.sqrt(float(point.lam @ point.lam)), 1.0)

    res, rel_res = rel(pt)
    if progress is not None:
        progress(0, rel_res)

    converged = False
    while True:
        if rel_res <= tol or (pt.eps > _EPS and (it >= max_iter or _late(t0, max_seconds))):
            if pt.eps <= _EPS:
                converged = rel_res <= tol
                break
            # a point from a single-precision eigendecomposition is never returned: the last
            # digits of X (e.g. a feasible input given back) need double precision
            pt = point(pt.y, False)
            res, rel_res = rel(pt)
            continue
        if it >= max_iter or _late(t0, max_seconds):
            break
        it += 1
        jac = _Jacobian(pt)
        reg = _REG * min(1.0, res)
        d, k = _pcg(jac, -pt.f, reg, min(_ETA, res) * res)
        cg_total += k
        slope = float(pt.f @ d)
        if slope >= 0.0:  # not a descent direction (CG broke down): steepest descent
            d, slope = -pt.f, -res * res
        step = min(1.0, _GROW * last_step)
        far = rel_res > max(tol, _SINGLE_ABOVE)
        # rounding error of theta: eigenvalues carry an absolute error ~ n eps ||A||
        noise = n * max(pt.eps, _EPS if not far else _EPS32) * (
            float(pt.lam @ pt.lam) + float(np.abs(pt.y).sum()) + n)
        accepted: _Point | None = None
        for _ in range(_MAX_BACKTRACKS):
            trial = point(pt.y + step * d, far)
            if trial.theta <= pt.theta + _ARMIJO * step * slope:
                accepted = trial  # Armijo
                break
            if -step * slope <= noise:
                # the predicted decrease is below theta's rounding error, so Armijo cannot tell;
                # near the solution the residual can: keep a step that reduces it, or stop
                if np.linalg.norm(trial.f) < res:
                    accepted = trial
                break
            # minimiser of the quadratic through theta(0), theta'(0) = slope and theta(step),
            # kept within [0.1, 0.5] of the step (safeguarded backtracking): far from the
            # solution the Newton step overshoots by orders of magnitude, and halving alone
            # would spend one eigendecomposition per factor of 2
            excess = trial.theta - pt.theta - step * slope
            quad = -slope * step * step / (2.0 * excess) if excess > 0.0 else _BACKTRACK * step
            step = min(_BACKTRACK * step, max(_SHRINK_MIN * step, quad))
        if accepted is None:
            if pt.eps > _EPS:  # single precision is the limit here: go on in double
                pt = point(pt.y, False)
                res, rel_res = rel(pt)
                continue
            break  # no step makes progress: this is as close as rounding allows
        change = step * float(np.linalg.norm(d)) / max(float(np.linalg.norm(accepted.y)), 1.0)
        pt, last_step = accepted, step
        res, rel_res = rel(pt)
        if progress is not None:
            progress(it, rel_res)
    return NewtonOutcome(matrix=pt.matrix(), iterations=it, eigendecompositions=counts["all"],
                         single_precision=counts["single"],
                         cg_iterations=cg_total, relative_change=change, residual=res,
                         relative_residual=rel_res, converged=converged, rank=pt.r)
