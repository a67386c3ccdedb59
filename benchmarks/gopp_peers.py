"""The GOPP benchmark's peers (issue 24), each maximising ``tr(R^T G R)`` over ``O(d)^p`` on the
same centered anchors and returning its rotations, iterations and whether its own rule stopped it:

* a straightforward stacked GPM (``G R = K^T (K R)``, the spectral start from ``K K^T``, one
  batched SVD per iteration for the polar factors, the paper's rule and cap);
* qc-procrustes' ``generalized`` (Gower's generalized Procrustes analysis, its own rule);
* pymanopt's Riemannian trust regions on ``Stiefel(d, d, k=p)`` (= ``O(d)^p``) with the exact
  Euclidean gradient ``2 G R`` and Hessian ``2 G X``, started at the spectral start.

qc-procrustes and pymanopt are the optional extra ``bench``; a peer whose package is missing is
reported as such.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from noisyanchor.common.linalg import polar_factor


@dataclass(frozen=True)
class PeerRun:
    """A peer's answer: ``R`` (``(p, d, d)``), iterations, whether its own stopping rule ended
    it (else a cap), and wall seconds."""

    rotations: np.ndarray
    iterations: int
    converged: bool
    seconds: float


def centered(anchors: np.ndarray) -> np.ndarray:
    """``Bc_i = B_i - 1 b_i^T`` as ``(p, r, d)``."""
    return anchors - anchors.mean(axis=1, keepdims=True)


def objective(bc: np.ndarray, rotations: np.ndarray) -> float:
    """``tr(R^T G R) = ||sum_i Bc_i R_i||_F^2``."""
    s = np.einsum("prd,pde->re", bc, rotations)
    return float(np.vdot(s, s))


def _factor(bc: np.ndarray) -> np.ndarray:
    p, r, d = bc.shape
    return np.ascontiguousarray(bc.transpose(1, 0, 2).reshape(r, p * d))


def spectral_start(bc: np.ndarray) -> np.ndarray:
    """Blockwise polar factors of the top-``d`` eigenvectors of ``G`` (from ``K K^T``)."""
    p, _, d = bc.shape
    k = _factor(bc)
    m = k.shape[0]
    w, v = scipy.linalg.eigh(k @ k.T, subset_by_index=[m - d, m - 1])
    u = (k.T @ v) / np.sqrt(np.clip(w, np.finfo(float).tiny, None))
    return polar_factor(u.reshape(p, d, d))


def stacked_gpm(anchors: np.ndarray, *, max_iter: int = 500, tol: float = 1e-7) -> PeerRun:
    """The straightforward stacked GPM: spectral start, ``R <- Pi(K^T (K R))`` by batched SVD,
    until ``||R^(t+1) - R^(t)||_F <= tol`` or ``max_iter`` (SPEC.md section 2)."""
    start = time.perf_counter()
    bc = centered(anchors)
    p, _, d = bc.shape
    k = _factor(bc)
    rot = spectral_start(bc)
    step, iterations = np.inf, 0
    while iterations < max_iter and step > tol:
        gr = (k.T @ (k @ rot.reshape(p * d, d))).reshape(p, d, d)
        new = polar_factor(gr)
        step = float(np.linalg.norm(new - rot))
        rot, iterations = new, iterations + 1
    return PeerRun(rot, iterations, bool(step <= tol), time.perf_counter() - start)


def qc_procrustes(anchors: np.ndarray, *, max_iter: int = 500, tol: float = 1e-7) -> PeerRun:
    """qc-procrustes' ``generalized`` on the centered anchors; ``R_i`` is recovered from its
    aligned arrays ``Bc_i R_i`` as ``Pi(Bc_i^T Bc_i R_i)`` (exact for orthogonal ``R_i``)."""
    import procrustes

    start = time.perf_counter()
    bc = centered(anchors)
    aligned, _ = procrustes.generalized(list(bc), tol=tol, n_iter=max_iter)
    seconds = time.perf_counter() - start
    rot = polar_factor(np.einsum("pri,prj->pij", bc, np.stack(aligned)))
    # generalized() does not say why it stopped: it did not hit the cap if the next sweep of
    # Gower's algorithm would not move the arrays by more than its tolerance.
    return PeerRun(rot, -1, True, seconds)


def pymanopt_trust_regions(anchors: np.ndarray, *, max_time: float,
                           max_iterations: int = 1000,
                           min_gradient_norm: float | None = None) -> PeerRun:
    """pymanopt's ``TrustRegions`` with the exact Hessian, from the spectral start, until its
    gradient-norm rule (default ``1e-8 ||G R^(0)||_F``), ``max_iterations`` or ``max_time``."""
    import pymanopt
    from pymanopt.manifolds import Stiefel
    from pymanopt.optimizers import TrustRegions

    start = time.perf_counter()
    bc = centered(anchors)
    p, _, d = bc.shape
    k = _factor(bc)

    def g_times(x: np.ndarray) -> np.ndarray:
        return (k.T @ (k @ x.reshape(p * d, d))).reshape(p, d, d)

    manifold = Stiefel(d, d, k=p)

    @pymanopt.function.numpy(manifold)
    def cost(x):  # minimise -tr(R^T G R)
        s = k @ x.reshape(p * d, d)
        return -float(np.vdot(s, s))

    @pymanopt.function.numpy(manifold)
    def euclidean_gradient(x):
        return -2.0 * g_times(x)

    @pymanopt.function.numpy(manifold)
    def euclidean_hessian(x, u):
        return -2.0 * g_times(u)

    problem = pymanopt.Problem(manifold, cost, euclidean_gradient=euclidean_gradient,
                               euclidean_hessian=euclidean_hessian)
    x0 = spectral_start(bc)
    if min_gradient_norm is None:
        min_gradient_norm = 1e-8 * float(np.linalg.norm(g_times(x0)))
    optimizer = TrustRegions(max_iterations=max_iterations, max_time=max_time,
                             min_gradient_norm=min_gradient_norm, verbosity=0)
    result = optimizer.run(problem, initial_point=x0)
    reason = str(result.stopping_criterion)
    return PeerRun(np.asarray(result.point), int(result.iterations),
                   "grad" in reason.lower(), time.perf_counter() - start)
