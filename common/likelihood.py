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
For fixed ``O`` the best ``Psi`` is closed-form; over ``O`` a Riemannian gradient ascent with
Barzilai-Borwein steps and a non-monotone Armijo search (Wen and Yin, Math. Program. 142, 2013)
starts from OP. At ``v = 0`` only the anchor term is left and the estimate is OP's (exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.linalg import center_rows, polar_factor
from noisyanchor.common.validation import as_matrix, check_nonnegative

#: Iteration cap and tolerance (Riemannian gradient norm relative to ``1 + |f|``) of the ascent.
ML_MAX_ITER, ML_TOL = 300, 1e-5
#: Armijo constant and the memory of the non-monotone reference value.
_ARMIJO, _MEMORY = 1e-4, 5


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
    converged : bool
        The gradient tolerance was met before :data:`ML_MAX_ITER`.
    objective : float
        ``f`` (the ``v^2``-scaled log-likelihood up to a constant) at the estimate.
    """

    rotation: np.ndarray
    translation: np.ndarray
    iterations: int
    converged: bool
    objective: float


class _Objective:
    """``f(O)`` with ``Psi`` profiled out, and its Euclidean gradient in ``O``."""

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

    def translation(self, o: np.ndarray) -> np.ndarray:
        """``argmax_Psi f(O, Psi) = O^T z``, ``z = (r I + k P)^-1 (r (O b - a) + k P (O ybar -
        mu))`` (``z = O Psi`` is the translation seen in the records' frame)."""
        z = self.solve_z @ (self.r * (o @ self.b - self.a) + self.k * self.p @ (o @ self.ybar
                                                                               - self.mu))
        return o.T @ z

    def value_and_gradient(self, o: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        psi = self.translation(o)
        dev = self.b - o.T @ self.a - psi
        wbar = self.ybar - psi
        w = o @ wbar - self.mu
        pos = self.p @ o @ self.s
        f = (float(np.sum(o * self.m)) - self.r / 2 * float(dev @ dev)
             - self.k / 2 * (float(np.sum(pos * o)) + float(w @ self.p @ w)))
        grad = (self.m + self.r * np.outer(self.a, dev) - self.k * pos
                - self.k * np.outer(self.p @ w, wbar))
        return f, grad, psi


def _riemannian(o: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Projection of a Euclidean gradient onto the tangent space of ``O(d)`` at ``O``:
    ``O skew(O^T G)``."""
    s = o.T @ grad
    return o @ ((s - s.T) / 2)


def ml_transform(y: np.ndarray, b: np.ndarray, anchor: np.ndarray, v: float,
                 prior: RecordPrior, *, max_iter: int = ML_MAX_ITER,
                 tol: float = ML_TOL) -> MlTransform:
    """Maximum-likelihood ``(O^_i, Psi^_i)`` of one target (module docstring for the model).

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
    """
    anchor = as_matrix(anchor, "anchor")
    b = as_matrix(b, "anchor upload", rows=anchor.shape[0], cols=anchor.shape[1])
    y = as_matrix(y, "data upload", cols=anchor.shape[1])
    v = check_nonnegative(v, "v")
    obj = _Objective(y, b, anchor, v, prior)
    o = polar_factor(obj.m)  # OP: the maximiser of the anchor term alone
    f, grad, psi = obj.value_and_gradient(o)
    if v == 0:
        return MlTransform(o, psi, 0, True, f)
    g = _riemannian(o, grad)
    step = float(1.0 / (np.linalg.norm(grad) + 1e-300))
    history = [f]
    steps = 0
    while True:
        gnorm2 = float(np.sum(g * g))
        if np.sqrt(gnorm2) <= tol * (1 + abs(f)):
            return MlTransform(o, psi, steps, True, f)
        if steps == max_iter:
            return MlTransform(o, psi, steps, False, f)
        reference = max(history[-_MEMORY:])
        while True:  # Armijo backtracking against the non-monotone reference
            o_new = polar_factor(o + step * g)
            f_new, grad_new, psi_new = obj.value_and_gradient(o_new)
            if f_new >= reference + _ARMIJO * step * gnorm2 or step < 1e-300:
                break
            step /= 2
        g_new = _riemannian(o_new, grad_new)
        s_k, y_k = o_new - o, g_new - g
        sy = abs(float(np.sum(s_k * y_k)))
        step = float(np.sum(s_k * s_k)) / sy if sy > 0 else 2 * step  # Barzilai-Borwein
        o, f, g, psi = o_new, f_new, g_new, psi_new
        history.append(f)
        steps += 1
