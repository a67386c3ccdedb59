"""Maximum-likelihood estimate of a target's GDP key ``(O_i, Psi_i)`` from both of its uploads
under the anchor-noise model, with a Gaussian model of the records.

Model (SPEC.md section 3, "ML"): ``B_i = A O_i + 1 Psi_i^T + v W_i`` (``W_i`` standard Gaussian)
and the rows of ``Y_i = X_i O_i + 1 Psi_i^T`` come from records ``x ~ N(mu, Sigma)``; ``mu`` and
``Sigma`` are fitted on the colluder's disclosed records (same population; Ledoit-Wolf
shrinkage). From ``B_i`` alone the maximum-likelihood ``O_i`` is exactly OP's
``Pi(Ac^T Bc_i)``: ``||Ac O||_F`` is the same for every ``O in O(d)``, so the likelihood depends on
``O`` only through ``tr(O^T Ac^T Bc_i)``. The data upload is what adds information.

Scaled by ``v^2``, the log-likelihood to maximise over ``O in O(d)`` and ``Psi`` is::

    f(O, Psi) = tr(O^T Ac^T Bc_i) - (r/2) ||b_i - O^T a - Psi||^2
                - (v^2 n_i / 2) [tr(P O S_i O^T) + w^T P w],   w = O (ybar_i - Psi) - mu,

with ``P = Sigma^-1``, ``ybar_i`` the mean row of ``Y_i`` and ``S_i`` the covariance of its rows.
For fixed ``O`` the best ``Psi`` is closed-form, and profiling it out leaves a quadratic in ``O``
(orthogonal invariance turns ``||b_i - O^T a - Psi||`` into ``||O b_i - a - O Psi||``; the
minimum over ``z = O Psi`` of two quadratics in ``z`` is one in their difference)::

    f(O) = tr(O^T M) - (k/2) tr(P O S_i O^T) - (1/2) delta^T C delta,
    M = Ac^T Bc_i,  k = v^2 n_i,  delta = O (b_i - ybar_i) - (a - mu),
    C = (I / r + (k P)^-1)^-1 = r k (r I + k P)^-1 P,

with Euclidean gradient ``G = M - k P O S_i - C delta (b_i - ybar_i)^T`` and constant Hessian
``H[X] = -k P X S_i - C X (b_i - ybar_i)(b_i - ybar_i)^T``. The likelihood has several local
maxima on ``O(d)`` (for large ``k`` the data term alone has one per sign pattern of the matched
principal axes), so the ascent is multi-start: OP (the maximiser of the anchor term alone), the
data term's maximiser ``V_Sigma D V_S^T`` with the signs ``D`` the anchor term prefers, a
Haar-random rotation, and OP turned by random rotations of the size of its error (about ``v``
per entry). Each start runs damped Riemannian Newton steps (Absil, Mahony and Sepulchre,
"Optimization Algorithms on Matrix Manifolds", 2008, eq. 5.15 for the Hessian on the Stiefel
manifold): in the orthonormal basis of skew matrices ``O Omega``, the Hessian
``Omega -> skew(O^T H[O Omega] - Omega sym(O^T G))`` is a symmetric ``d(d-1)/2`` square matrix;
the step solves ``|Hess| omega = grad`` (each eigenvalue by its absolute value, floored:
saddle-free Newton, so far from a maximum directions of positive curvature are climbed too),
is capped at norm 2, moves along the Cayley retraction and backtracks (Armijo) until ``f``
rises; near a maximum it is Newton's step and converges quadratically.
A start has converged when the Riemannian gradient norm is at most ``tol (1 + |f|)``, or when the
Newton step's predicted gain is below rounding (``grad . step <= 1e-13 (1 + |f|)``); the best
objective over the starts wins, and how many starts converged and which won are reported. At
``v = 0`` only the anchor term is left and the estimate is OP's (exact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.linalg import center_rows, polar_factor
from noisyanchor.common.validation import as_matrix, check_nonnegative

#: Newton iteration cap per start and tolerance (Riemannian gradient norm relative to
#: ``1 + |f|``) of the ascent.
ML_MAX_ITER, ML_TOL = 100, 1e-9
#: Starts of the ascent (:func:`_starts`): OP and the data term's maximiser; more add a
#: Haar-random rotation, then OP turned by small random rotations. (On digits, p = 10, d = 16,
#: the third, Haar-random start never ended strictly above the other two.)
ML_STARTS = 2
#: Haar-random starts among them.
ML_HAAR_STARTS = 1
#: Newton decrement ``grad . step`` (twice the predicted gain) relative to ``1 + |f|`` below
#: which ``f`` is at its maximum to working precision (a converged start even if rounding keeps
#: the gradient norm just above :data:`ML_TOL`).
_DECREMENT = 1e-13
#: Armijo constant of the backtracking line search, and the largest step (skew coordinates,
#: about radians of rotation).
_ARMIJO, _MAX_STEP = 1e-4, 2.0
#: Seed of the starts (the attack is deterministic given its inputs).
ML_SEED = 20260
@dataclass(frozen=True)
class RecordPrior:
    """Gaussian model ``N(mu, Sigma)`` of the records in the working space.

    Attributes
    ----------
    mean : (d,) ndarray
        ``mu``.
    covariance : (d, d) ndarray
        ``Sigma`` (Ledoit-Wolf shrunk towards ``tr(S)/d I``, so it is invertible).
    precision : (d, d) ndarray
        ``P = Sigma^-1``.
    """

    mean: np.ndarray
    covariance: np.ndarray
    precision: np.ndarray

    @classmethod
    def from_records(cls, x: np.ndarray) -> RecordPrior:
        """Fit on records ``x`` (``n x d``, ``n >= 2``): sample mean and the Ledoit-Wolf
        covariance ``rho tr(S)/d I + (1 - rho) S``.

        Written out (ten lines) because scikit-learn's ``ledoit_wolf``, the same formula, is in
        the optional ``eval`` extra and the analyst runs this attack without it.
        """
        x = as_matrix(x, "colluder records")
        n, d = x.shape
        if n < 2:
            raise InvalidInputError("a record prior needs at least 2 disclosed records")
        mean = x.mean(axis=0)
        xc = x - mean
        s = xc.T @ xc / n
        target = np.trace(s) / d
        delta = float(np.sum((s - target * np.eye(d)) ** 2))
        # beta_bar^2 = (1/n^2) sum_k ||x_k x_k^T - S||_F^2, expanded to avoid n d x d products.
        beta = (float(np.sum(np.sum(xc**2, axis=1) ** 2)) / n - float(np.sum(s**2))) / n
        rho = 1.0 if delta <= 0 else min(max(beta, 0.0), delta) / delta
        cov = rho * target * np.eye(d) + (1 - rho) * s
        if not target > 0:
            raise InvalidInputError("the colluder's records have no spread: no record prior")
        return cls(mean, cov, np.linalg.inv(cov))


@dataclass(frozen=True)
class MlTransform:
    """Maximum-likelihood key of one target.

    Attributes
    ----------
    rotation : (d, d) ndarray
        ``O^_i``.
    translation : (d,) ndarray
        ``Psi^_i``.
    iterations : int
        Newton iterations of the winning start.
    converged : bool
        The winning start met the gradient tolerance before :data:`ML_MAX_ITER`.
    objective : float
        ``f`` (the ``v^2``-scaled log-likelihood up to a constant) at the estimate.
    starts : int
        Starts run.
    converged_starts : int
        Starts that met the tolerance.
    best_start : int
        Index of the winner (0 = OP).
    start_objectives : tuple of float
        ``f`` each start ended at, in start order.
    """

    rotation: np.ndarray
    translation: np.ndarray
    iterations: int
    converged: bool
    objective: float
    starts: int = 1
    converged_starts: int = 1
    best_start: int = 0
    start_objectives: tuple[float, ...] = ()

    def diagnostics(self) -> dict[str, object]:
        """JSON-ready convergence facts (reported per target by the attack)."""
        return {"converged": self.converged, "iterations": self.iterations,
                "objective": self.objective, "starts": self.starts,
                "converged_starts": self.converged_starts, "best_start": self.best_start,
                "start_objectives": list(self.start_objectives)}


class _Objective:
    """The profiled log-likelihood ``f(O)`` (module docstring), its gradient and Hessian."""

    def __init__(self, y: np.ndarray, b: np.ndarray, anchor: np.ndarray, v: float,
                 prior: RecordPrior) -> None:
        self.a, ac = center_rows(anchor)
        self.b, bc = center_rows(b)
        self.r, d = anchor.shape
        self.n = len(y)
        self.m = ac.T @ bc  # Ac^T Bc_i
        self.ybar = y.mean(axis=0)
        yc = y - self.ybar
        self.s = yc.T @ yc / self.n
        self.mu, self.p = prior.mean, prior.precision
        self.k = v * v * self.n  # weight of the data term
        self.solve_z = np.linalg.inv(self.r * np.eye(d) + self.k * self.p)
        self.c = self.r * self.k * self.solve_z @ self.p
        self.c = (self.c + self.c.T) / 2  # symmetric in exact arithmetic (functions of P)
        self.g = self.b - self.ybar
        self.gg = np.outer(self.g, self.g)
        self.h = self.a - self.mu
        # Orthonormal basis (E_ij - E_ji) / sqrt(2), i < j, of the skew matrices.
        self.iu, self.ju = np.triu_indices(d, 1)

    def translation(self, o: np.ndarray) -> np.ndarray:
        """``argmax_Psi f(O, Psi) = O^T z``, ``z = (r I + k P)^-1 (r (O b - a) + k P (O ybar -
        mu))`` (``z = O Psi`` is the translation seen in the records' frame)."""
        z = self.solve_z @ (self.r * (o @ self.b - self.a) + self.k * self.p @ (o @ self.ybar
                                                                               - self.mu))
        return o.T @ z

    def value(self, o: np.ndarray) -> float:
        delta = o @ self.g - self.h
        return float(np.sum(o * self.m) - self.k / 2 * np.sum((self.p @ o @ self.s) * o)
                     - delta @ self.c @ delta / 2)

    def gradient(self, o: np.ndarray) -> np.ndarray:
        """Euclidean gradient ``G``."""
        delta = o @ self.g - self.h
        return self.m - self.k * self.p @ o @ self.s - np.outer(self.c @ delta, self.g)

    def coordinates(self, t: np.ndarray) -> np.ndarray:
        """Coordinates of the skew part of ``T`` (last two axes ``d x d``) in the basis:
        ``<(E_ij - E_ji) / sqrt(2), T> = (T_ij - T_ji) / sqrt(2)``."""
        return (t[..., self.iu, self.ju] - t[..., self.ju, self.iu]) / np.sqrt(2)

    def skew(self, omega: np.ndarray) -> np.ndarray:
        """The skew matrices of coordinates ``omega`` (last axis)."""
        d = len(self.m)
        out = np.zeros((*omega.shape[:-1], d, d))
        out[..., self.iu, self.ju] = omega / np.sqrt(2)
        out[..., self.ju, self.iu] = -omega / np.sqrt(2)
        return out

    def hessian_times(self, o: np.ndarray, sym: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """Riemannian Hessian applied to coordinates ``omega`` (last axis; several at once):
        ``coords(skew(O^T H[O Omega] - Omega sym(O^T G)))``."""
        w = self.skew(omega)
        xi = o @ w
        hx = -self.k * self.p @ xi @ self.s - self.c @ xi @ self.gg
        return self.coordinates(o.T @ hx - w @ sym)


#: Tangent dimensions ``d(d-1)/2`` up to which the Hessian is formed and factorised; above, the
#: Newton step comes from conjugate gradients on Hessian-vector products (``O(d^3)`` each).
_EXPLICIT_HESSIAN = 300


def _cayley(o: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """Retraction ``O (I - Omega/2)^-1 (I + Omega/2)`` (orthogonal for skew ``Omega``)."""
    eye = np.eye(len(o))
    return o @ np.linalg.solve(eye - omega / 2, eye + omega / 2)


def _cg_step(apply: Callable[[np.ndarray], np.ndarray], grad: np.ndarray) -> np.ndarray:
    """Truncated conjugate gradients on ``(-Hess) s = grad`` (Steihaug): stops at the forcing
    tolerance ``min(0.5, sqrt(||grad||)) ||grad||`` or at the first direction of non-negative
    Hessian curvature (then the gradient, if no step was taken yet)."""
    s = np.zeros_like(grad)
    r = grad.copy()
    p = r.copy()
    rr = float(r @ r)
    stop = min(0.5, float(np.sqrt(np.sqrt(rr)))) * np.sqrt(rr)
    for _ in range(len(grad)):
        ap = apply(p)
        curvature = float(p @ ap)
        if curvature <= 0:
            return grad if not s.any() else s
        alpha = rr / curvature
        s += alpha * p
        r -= alpha * ap
        rr_new = float(r @ r)
        if np.sqrt(rr_new) <= stop:
            break
        p = r + (rr_new / rr) * p
        rr = rr_new
    return s


def _ascent_step(obj: _Objective, o: np.ndarray, grad: np.ndarray,
                 sym: np.ndarray) -> np.ndarray:
    """The step of one ascent iteration, capped at :data:`_MAX_STEP`. Small problems: Newton's
    ``(-Hess)^-1 grad`` when ``-Hess`` is positive definite (one Cholesky), otherwise saddle-free
    Newton (each eigenvalue by its absolute value, floored, so directions of positive curvature
    are climbed rather than descended). Large ones: :func:`_cg_step`."""
    count = len(grad)
    if count > _EXPLICIT_HESSIAN:
        step = _cg_step(lambda w: -obj.hessian_times(o, sym, w), grad)
    else:
        neg_hess = -obj.hessian_times(o, sym, np.eye(count))  # row k: -Hess e_k
        neg_hess = (neg_hess + neg_hess.T) / 2
        try:
            factor = np.linalg.cholesky(neg_hess)
            step = np.linalg.solve(factor.T, np.linalg.solve(factor, grad))
        except np.linalg.LinAlgError:
            lam, vec = np.linalg.eigh(neg_hess)
            curv = np.maximum(np.abs(lam), 1e-8 * max(float(np.abs(lam).max()), 1.0))
            step = vec @ ((vec.T @ grad) / curv)
    size = float(np.linalg.norm(step))
    return step * (_MAX_STEP / size) if size > _MAX_STEP else step


def _ascend(obj: _Objective, o: np.ndarray, max_iter: int,
            tol: float) -> tuple[np.ndarray, float, int, bool]:
    """Damped Riemannian Newton ascent from ``O`` (module docstring)."""
    f = obj.value(o)
    for it in range(max_iter + 1):
        ot_g = o.T @ obj.gradient(o)
        grad = obj.coordinates(ot_g)
        if np.linalg.norm(grad) <= tol * (1 + abs(f)):
            return o, f, it, True
        if it == max_iter:
            break
        step = _ascent_step(obj, o, grad, (ot_g + ot_g.T) / 2)
        slope = float(grad @ step)
        if slope <= _DECREMENT * (1 + abs(f)):  # the step's predicted gain is below rounding
            return o, f, it, True
        t = 1.0
        while True:  # Armijo backtracking along the retraction
            o_new = _cayley(o, obj.skew(t * step))
            f_new = obj.value(o_new)
            if f_new >= f + _ARMIJO * t * slope or t < 1e-12:
                break
            t /= 2
        if f_new < f:  # no ascent left at this precision
            return o, f, it, False
        o, f = o_new, f_new
    return o, f, max_iter, False


def _data_start(obj: _Objective, prior: RecordPrior) -> np.ndarray:
    """The data term's maximiser with the anchor term's signs: ``S_i = O^T Sigma O`` matches the
    eigenvectors ``V_Sigma`` of the prior with ``V_S`` of the upload (same order), so
    ``O = V_Sigma D V_S^T``, and the signs ``D`` maximise ``tr(O^T M) = sum_k d_k (V_Sigma^T M
    V_S)_kk``."""
    _, v_sigma = np.linalg.eigh(prior.covariance)
    _, v_s = np.linalg.eigh(obj.s)
    signs = np.where(np.diag(v_sigma.T @ obj.m @ v_s) < 0, -1.0, 1.0)
    return (v_sigma * signs) @ v_s.T


def _starts(obj: _Objective, prior: RecordPrior, op: np.ndarray, v: float, count: int,
            rng: np.random.Generator) -> list[np.ndarray]:
    """OP, the data term's maximiser (:func:`_data_start`), :data:`ML_HAAR_STARTS` Haar-random
    rotations, then OP turned by random rotations with entries of size ``v`` (OP's error)."""
    from noisyanchor.common.gdp import haar_orthogonal

    d = len(op)
    out = [op, _data_start(obj, prior)][:count]
    out += [haar_orthogonal(d, rng) for _ in range(min(ML_HAAR_STARTS, count - len(out)))]
    while len(out) < count:
        w = v * rng.standard_normal((d, d))
        out.append(op @ _cayley(np.eye(d), w - w.T))
    return out


def ml_transform(y: np.ndarray, b: np.ndarray, anchor: np.ndarray, v: float,
                 prior: RecordPrior, *, max_iter: int = ML_MAX_ITER,
                 tol: float = ML_TOL, starts: int = ML_STARTS) -> MlTransform:
    """Maximum-likelihood ``(O^_i, Psi^_i)`` of one target (module docstring for the model and
    the multi-start ascent).

    Parameters
    ----------
    y : (n_i, d) ndarray
        ``Y_i``.
    b : (r, d) ndarray
        ``B_i``.
    anchor : (r, d) ndarray
        The disclosed ``A``.
    v : float
        Anchor-noise level (disclosed or estimated).
    prior : RecordPrior
        Gaussian model of the records.
    max_iter : int
        Newton iterations per start (0: OP, no ascent).
    tol : float
        Gradient tolerance relative to ``1 + |f|``.
    starts : int
        Starts of the ascent (OP first).
    """
    anchor = as_matrix(anchor, "anchor")
    b = as_matrix(b, "anchor upload", rows=anchor.shape[0], cols=anchor.shape[1])
    y = as_matrix(y, "data upload", cols=anchor.shape[1])
    v = check_nonnegative(v, "v")
    if starts < 1:
        raise InvalidInputError(f"the ascent needs at least one start, got {starts}")
    obj = _Objective(y, b, anchor, v, prior)
    op = polar_factor(obj.m)  # the maximiser of the anchor term alone
    if v == 0 or max_iter == 0:
        return MlTransform(op, obj.translation(op), 0, v == 0, obj.value(op),
                           start_objectives=(obj.value(op),))
    rng = np.random.default_rng(ML_SEED)
    runs = [_ascend(obj, o, max_iter, tol) for o in _starts(obj, prior, op, v, starts, rng)]
    best = max(range(len(runs)), key=lambda k: runs[k][1])
    o, f, iterations, converged = runs[best]
    return MlTransform(o, obj.translation(o), iterations, converged, f, len(runs),
                       sum(r[3] for r in runs), best, tuple(r[1] for r in runs))
