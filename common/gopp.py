"""Centered generalized orthogonal Procrustes (GOPP): spectral initialisation, generalized power
method (GPM) and a certificate of global optimality.

The analyst maximises ``tr(R^T G R)`` over stacked ``R = [R_1; ...; R_p]``, ``R_i in O(d)``, where
``G_ij = Bc_i^T Bc_j`` is built from the centered uploaded anchors ``Bc_i = B_i - 1 b_i^T``.

``G`` is never formed: with the ``m x pd`` factor ``K`` (``K = [Bc_1, ..., Bc_p]`` when
``r <= pd``, else the triangular factor of its thin QR), ``G = K^T K`` and
``G R = K^T (K R)``; the top-``d`` eigenvectors of ``G`` come from the ``m x m`` problem ``K K^T``.

References: SPEC.md section 2; noisy-anchor GDP paper, Algorithm 4 and Section 4.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

from common.errors import InvalidInputError
from common.linalg import center_rows, polar_factor, polar_factor_fast
from common.validation import check_count, check_positive, stack_blocks

#: Largest ``pd`` for which the certificate uses a dense eigensolver rather than Lanczos.
DENSE_CERTIFICATE_MAX = 1500

#: Relative tolerance (times ``||G||_2``) of the certificate ``lambda_min(Lambda - G) >= -tol``.
CERTIFICATE_RTOL = 1e-6


@dataclass(frozen=True)
class GoppResult:
    """Solution and diagnostics of the centered GOPP (SPEC.md section 2).

    Attributes
    ----------
    rotations : (p, d, d) ndarray
        ``R_i``; the map is ``N_i(T) = (T - 1 b_i^T) R_i``.
    means : (p, d) ndarray
        ``b_i = B_i^T 1 / r``.
    iterations : int
        GPM iterations run after the spectral initialisation.
    converged : bool
        ``||R^(t+1) - R^(t)||_F <= tol`` was reached before ``max_iter``.
    objective : float
        ``tr(R^T G R)`` at the returned ``R``.
    fixed_point_residual : float
        ``||R^(T) - R^(T-1)||_F``.
    gopp_residual : float
        ``sum_i ||Bc_i||_F^2 - tr(R^T G R) / p`` (the GOPP loss at the solution).
    certificate_min_eig : float or None
        ``lambda_min(Lambda - G)`` with ``Lambda_ii = sym((G R)_i R_i^T)``; None if not computed.
    certificate_tol : float
        Tolerance used: certified when ``certificate_min_eig >= -certificate_tol``.
    certified : bool
    seconds : float
        Wall time of initialisation, iterations and certificate.
    objective_trace : (iterations + 1,) ndarray
        Objective at the spectral start and after every GPM step.
    """

    rotations: np.ndarray
    means: np.ndarray
    iterations: int
    converged: bool
    objective: float
    fixed_point_residual: float
    gopp_residual: float
    certificate_min_eig: float | None
    certificate_tol: float
    certified: bool
    seconds: float
    objective_trace: np.ndarray

    def template(self, anchors: Sequence[np.ndarray]) -> np.ndarray:
        """Consensus template ``C = (1/p) sum_i Bc_i R_i`` (``r x d``)."""
        _, bc = center_rows(stack_blocks(anchors, "anchors"))
        return np.einsum("prd,pde->re", bc, self.rotations) / len(bc)


class _GramOperator:
    """``G = K^T K`` in factored form; ``apply`` computes ``G R`` for stacked ``R``."""

    def __init__(self, bc: np.ndarray) -> None:
        p, r, d = bc.shape
        self.p, self.d = p, d
        k = np.ascontiguousarray(bc.transpose(1, 0, 2).reshape(r, p * d))
        if r > p * d:
            # A tall factor is compressed by QR: same Gram, fewer rows to multiply by.
            k = scipy.linalg.qr(k, mode="r", check_finite=False)[0][: p * d]
        self.k = k

    def apply(self, r_blocks: np.ndarray) -> np.ndarray:
        """``(G R)_i = Bc_i^T sum_j Bc_j R_j`` for ``R`` given as ``(p, d, d)``."""
        s = self.k @ r_blocks.reshape(self.p * self.d, self.d)
        return (self.k.T @ s).reshape(self.p, self.d, self.d)

    def top_eigvecs(self) -> tuple[np.ndarray, float]:
        """Top-``d`` eigenvectors ``U`` (``pd x d``) of ``G`` and ``lambda_1(G)``, via ``K K^T``."""
        m = self.k.shape[0]
        kkt = self.k @ self.k.T
        w, v = scipy.linalg.eigh(kkt, subset_by_index=[m - self.d, m - 1], check_finite=False)
        w = np.clip(w, np.finfo(float).tiny, None)
        return (self.k.T @ v) / np.sqrt(w), float(w[-1])


def _objective(r_blocks: np.ndarray, gr: np.ndarray) -> float:
    """``tr(R^T G R) = sum_i <R_i, (G R)_i>``."""
    return float(np.vdot(r_blocks, gr))


def certificate_min_eig(op: _GramOperator, r_blocks: np.ndarray, gr: np.ndarray) -> float:
    """``lambda_min(Lambda - G)`` with ``Lambda_ii = sym((G R)_i R_i^T)`` (block diagonal).

    At a stationary point ``R`` spans a null space of ``Lambda - G``. For ``pd`` up to
    ``DENSE_CERTIFICATE_MAX`` a dense solver is used; above, Lanczos (ARPACK) runs on
    ``Lambda - G`` restricted to the orthogonal complement of ``span(R)``, and the result is
    combined with the ``d x d`` compression ``R^T (Lambda - G) R / p`` on ``span(R)``.
    """
    p, d, _ = r_blocks.shape
    lam = gr @ np.swapaxes(r_blocks, 1, 2)
    lam = 0.5 * (lam + np.swapaxes(lam, 1, 2))
    n = p * d
    if n <= DENSE_CERTIFICATE_MAX:
        g = op.k.T @ op.k
        return float(scipy.linalg.eigvalsh(scipy.linalg.block_diag(*lam) - g,
                                           subset_by_index=[0, 0], check_finite=False)[0])

    basis = r_blocks.reshape(n, d) / np.sqrt(p)  # orthonormal columns spanning span(R)

    def lam_minus_g(x: np.ndarray) -> np.ndarray:
        x = x.reshape(n, -1)
        lx = np.einsum("pij,pjk->pik", lam, x.reshape(p, d, -1)).reshape(n, -1)
        return lx - op.k.T @ (op.k @ x)

    def deflate(x: np.ndarray) -> np.ndarray:
        return x - basis @ (basis.T @ x)

    def matvec(x: np.ndarray) -> np.ndarray:
        return deflate(lam_minus_g(deflate(x.reshape(n, -1)))).reshape(x.shape)

    on_span = basis.T @ lam_minus_g(basis)
    span_min = float(np.linalg.eigvalsh(0.5 * (on_span + on_span.T))[0])
    linop = scipy.sparse.linalg.LinearOperator((n, n), matvec=matvec, matmat=matvec,
                                               dtype=np.float64)
    # A deterministic start vector keeps the certificate reproducible; it is deflated first.
    v0 = deflate(np.random.default_rng(0).standard_normal((n, 1)))[:, 0]
    try:
        comp_min = scipy.sparse.linalg.eigsh(linop, k=1, which="SA", v0=v0, tol=1e-10,
                                             ncv=min(n - 1, 64), maxiter=20 * n,
                                             return_eigenvectors=False)[0]
    except scipy.sparse.linalg.ArpackNoConvergence as err:
        if not len(err.eigenvalues):
            raise
        comp_min = float(np.min(err.eigenvalues))
    return float(min(span_min, comp_min))


def solve_gopp(
    anchors: Sequence[np.ndarray],
    *,
    max_iter: int = 500,
    tol: float = 1e-7,
    certify: bool = True,
) -> GoppResult:
    """Solve the centered GOPP by spectral initialisation and the generalized power method.

    Parameters
    ----------
    anchors : list of p (r, d) ndarrays
        The uploaded anchor representations ``B_i`` (``p >= 2``, ``r >= d + 1``).
    max_iter : int
        ``T_max``, the cap on GPM iterations (paper: 500).
    tol : float
        ``eps`` of the stopping rule ``||R^(t+1) - R^(t)||_F <= eps`` (paper: 1e-7).
    certify : bool
        Compute the certificate of global optimality ``lambda_min(Lambda - G)``.

    Returns
    -------
    GoppResult

    References
    ----------
    SPEC.md section 2 (Algorithm 4 of the noisy-anchor GDP paper, plus the certificate).
    """
    start = time.perf_counter()
    b = stack_blocks(anchors, "anchors")
    p, r, d = b.shape
    if r < d + 1:
        raise InvalidInputError(f"anchors need r >= d + 1 rows, got r={r}, d={d}")
    max_iter = check_count(max_iter, "max_iter", minimum=0)
    tol = check_positive(tol, "tol")
    means, bc = center_rows(b)
    op = _GramOperator(bc)

    u, lambda_1 = op.top_eigvecs()
    rot = polar_factor(u.reshape(p, d, d))
    gr = op.apply(rot)
    trace = [_objective(rot, gr)]
    step = np.inf
    iterations = 0
    while iterations < max_iter and step > tol:
        new = polar_factor_fast(gr)
        step = float(np.linalg.norm(new - rot))
        rot = new
        gr = op.apply(rot)
        trace.append(_objective(rot, gr))
        iterations += 1

    objective = trace[-1]
    cert_tol = CERTIFICATE_RTOL * max(lambda_1, 1.0)
    min_eig = certificate_min_eig(op, rot, gr) if certify else None
    return GoppResult(
        rotations=rot,
        means=means,
        iterations=iterations,
        converged=bool(step <= tol),
        objective=objective,
        fixed_point_residual=float(step),
        gopp_residual=float((bc**2).sum() - objective / p),
        certificate_min_eig=min_eig,
        certificate_tol=cert_tol,
        certified=bool(min_eig is not None and min_eig >= -cert_tol),
        seconds=time.perf_counter() - start,
        objective_trace=np.asarray(trace),
    )


def rotational_error(true_rotations: np.ndarray, rotations: np.ndarray) -> float:
    """``E = max_i ||O_i R_i - Q||_F`` with ``Q = Pi(sum_i O_i R_i)`` (gauge-fixed error).

    Parameters
    ----------
    true_rotations : (p, d, d) ndarray
        The participants' secret ``O_i`` (known in simulations only).
    rotations : (p, d, d) ndarray
        The analyst's ``R_i``.
    """
    o = np.asarray(true_rotations, dtype=float)
    rr = np.asarray(rotations, dtype=float)
    if o.shape != rr.shape or o.ndim != 3:
        raise InvalidInputError(f"true_rotations {o.shape} and rotations {rr.shape} must both be "
                                "(p, d, d)")
    prod = o @ rr
    q = polar_factor(prod.sum(axis=0))
    return float(np.linalg.norm(prod - q, axis=(1, 2)).max())
