"""Certificate of global optimality of a centered GOPP solution: ``lambda_min(Lambda - G)``.

``G = K^T K`` with the ``m x pd`` factor ``K`` of :class:`common.gopp._GramOperator` (the stacked
centered anchors, or the triangle of their thin QR when ``r > pd``) and the block-diagonal
``Lambda_ii = sym((G R)_i R_i^T)``. The solution ``R`` is certified a global maximiser when
``lambda_min(Lambda - G) >= -tol`` (SPEC.md section 2). Three exact paths, chosen by cost
(:func:`certificate_path`):

* ``"dense"``: the ``pd x pd`` matrix and one subset eigensolve, when ``K`` is square (then no
  reduction is cheaper) and small;
* ``"secular"``: Newton's method on the secular equation of ``Lambda - K^T K``, each step one top
  eigenpair of an ``m x m`` matrix formed densely, when ``m`` is small;
* ``"secular-matrix-free"``: the same Newton steps with the top eigenpair from LOBPCG on the
  ``m x m`` operator ``u -> K Q (D - s)^{-1} Q^T K^T u``, i.e. products with ``K`` and ``K^T``
  only, warm-started from the block of the previous step (the first step from ``K R``, which
  spans the operator's eigenvalue-1 subspace at a stationary point, plus random columns): no
  ``m x m`` or ``pd x pd`` matrix is formed. A step whose LOBPCG does not converge is taken
  densely instead.

When the secular start is outside the equation's domain (an indefinite ``Lambda_ii``), Lanczos
(ARPACK) runs on the operator ``Lambda - G`` (``"lanczos"``).

Early exit (``certify(..., tol=...)``, issue 31): the secular paths stop, "not certified", as
soon as an upper bound of ``lambda_min`` is below ``-EARLY_EXIT_MARGIN * tol``. Above ``v_PT``
this is the first Newton step, where the full run took several (15-21 s at the CelebA size).
The verdict is the full certificate's: the full run would have ended at ``lambda_min``, below
every such bound.

References: SPEC.md section 2 (certificate); issue 24 (matrix-free certificate); issue 31 (early
exit).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).
from noisyanchor.common.linalg import extreme_eigh

#: Largest ``pd`` for which the certificate may use a dense ``pd x pd`` eigensolver.
DENSE_CERTIFICATE_MAX = 1500

#: Smallest order ``m`` of the secular equation's problems solved matrix-free: below it one
#: dense ``m x m`` step (``m^2 pd`` flops to form, a subset eigensolve) costs less than LOBPCG's
#: few dozen block products with ``K`` and ``K^T`` and their Python overhead.
MATRIX_FREE_MIN_ORDER = 600

#: Newton steps allowed on the certificate's secular equation before falling back to Lanczos.
SECULAR_MAX_STEPS = 50

#: Newton step (relative to ``max |Lambda|``) below which the secular root counts as found.
SECULAR_ATOL = 1e-13

#: Block size of LOBPCG in the matrix-free steps (one column from ``K R``, the rest random).
LOBPCG_BLOCK = 4

#: LOBPCG iterations per Newton step before that step is taken densely instead.
LOBPCG_MAX_ITER = 80

#: LOBPCG residual tolerance: loose while Newton steps are long (the eigenvalue's error is about
#: the residual squared over the gap, and a long step only needs a few digits), tight near the
#: root.
LOBPCG_TOL_FAR, LOBPCG_TOL_NEAR = 1e-4, 1e-7

#: A converged top eigenpair has ``||M u - mu u|| <= LOBPCG_ACCEPT`` (``M``'s top eigenvalue is
#: about 1 near the root); above it the step is taken densely.
LOBPCG_ACCEPT = 1e-5

#: :func:`certify` with a tolerance ``tol`` stops, "not certified", once a proven upper bound of
#: ``lambda_min(Lambda - G)`` is below ``-EARLY_EXIT_MARGIN * tol``: the bound is then below the
#: threshold by a further ``tol``, some 1e7 times the rounding of a Newton step (``1e-13`` of
#: ``max |Lambda|`` against ``tol = 1e-6 lambda_1(G)``), so rounding cannot turn the verdict.
EARLY_EXIT_MARGIN = 2.0

#: Paths of :func:`certify`.
CERTIFICATE_PATHS = ("dense", "secular", "secular-matrix-free", "lanczos")


@dataclass(frozen=True)
class Certificate:
    """``lambda_min(Lambda - G)`` and how it was computed.

    Attributes
    ----------
    min_eig : float
        ``lambda_min(Lambda - G)``.
    path : str
        One of :data:`CERTIFICATE_PATHS` (``"lanczos"`` when the secular path fell back).
    newton_steps : int
        Newton steps on the secular equation (0 on the dense path).
    products : int
        Columns multiplied by ``K`` and by ``K^T`` in the matrix-free steps (and the Lanczos
        fallback).
    dense_steps : int
        Matrix-free Newton steps whose LOBPCG did not converge and that were taken densely.
    early_exit : str
        Empty when ``min_eig`` is ``lambda_min`` to the solver's accuracy; otherwise why the
        certificate stopped early (:data:`EARLY_EXIT_MARGIN`), and ``min_eig`` is then a proven
        upper bound of ``lambda_min``, below ``-tol``: not certified.
    """

    min_eig: float
    path: str
    newton_steps: int = 0
    products: int = 0
    dense_steps: int = 0
    early_exit: str = ""


def symmetric_multipliers(r_blocks: np.ndarray, gr: np.ndarray) -> np.ndarray:
    """``Lambda_ii = sym((G R)_i R_i^T)`` as a ``(p, d, d)`` stack."""
    lam = gr @ np.swapaxes(r_blocks, 1, 2)
    return 0.5 * (lam + np.swapaxes(lam, 1, 2))


def certificate_path(p: int, d: int, m: int) -> str:
    """The cheapest exact path for ``p`` blocks of order ``d`` and a factor of ``m`` rows.

    Flop estimates: dense ``m (pd)^2`` to form ``G`` plus about ``2 (pd)^3`` for the subset
    eigensolve; the secular path ``2 m pd d`` for ``K Q`` plus, for the two Newton steps a
    certified solution takes, ``m^2 pd`` and ``2 m^3`` each."""
    n = p * d
    if m >= MATRIX_FREE_MIN_ORDER:
        return "secular-matrix-free" if m < n or n > DENSE_CERTIFICATE_MAX else "dense"
    dense = m * n**2 + 2.0 * n**3
    secular = 2.0 * m * n * d + 2 * (m**2 * n + 2.0 * m**3)
    return "dense" if n <= DENSE_CERTIFICATE_MAX and dense <= secular else "secular"


def certify(k: np.ndarray, r_blocks: np.ndarray, gr: np.ndarray, *,
            path: str | None = None, tol: float | None = None) -> Certificate:
    """``lambda_min(Lambda - K^T K)`` with ``Lambda_ii = sym((G R)_i R_i^T)`` (block diagonal).

    Parameters
    ----------
    k : (m, pd) ndarray
        ``K`` with ``G = K^T K``.
    r_blocks, gr : (p, d, d) ndarrays
        ``R`` and ``G R``.
    path : str, optional
        Force one of ``"dense"``, ``"secular"``, ``"secular-matrix-free"`` (tests compare them);
        default :func:`certificate_path`.
    tol : float, optional
        The certificate's tolerance (certified when ``lambda_min >= -tol``). Given, the secular
        paths stop early, "not certified", once a proven upper bound ``U >= lambda_min`` has
        ``U < -EARLY_EXIT_MARGIN * tol`` (:attr:`Certificate.early_exit` says which bound and
        after how many Newton steps; ``min_eig`` is then ``U``). The bounds: every Newton
        iterate of the secular equation, including one taken from a top eigenvector LOBPCG did
        not converge on (:class:`_Secular`). The full run ends at ``lambda_min <= U`` (to
        ``SECULAR_ATOL``, far below the margin of one more ``tol``): the verdict is the same,
        and a solution with
        ``lambda_min >= -tol`` never meets the rule (each ``U >= lambda_min``), so it is
        certified exactly as without ``tol``. None: no early exit. The dense path (one
        eigensolve) and the Lanczos fallback have none.

    At a stationary point ``R`` spans a null space of ``Lambda - G``. The secular paths start
    Newton's method at the Rayleigh quotient on ``span(R)``; when that start is outside the
    equation's domain, Lanczos runs on the operator.
    """
    import scipy.linalg

    p, d, _ = r_blocks.shape
    m, n = k.shape[0], p * d
    path = path or certificate_path(p, d, m)
    lam = symmetric_multipliers(r_blocks, gr)
    if path == "dense":
        g = k.T @ k
        return Certificate(float(extreme_eigh(scipy.linalg.block_diag(*lam) - g, 1,
                                              largest=False, vectors=False)[0][0]), "dense")
    # The Rayleigh quotient on span(R) (orthonormal basis R / sqrt(p)) from G R, without a
    # product with G: R^T (Lambda - G) R = sum_i R_i^T Lambda_ii R_i - R_i^T (G R)_i.
    rt = np.swapaxes(r_blocks, 1, 2)
    on_span = ((rt @ lam @ r_blocks).sum(axis=0) - (rt @ gr).sum(axis=0)) / p
    span_min = float(np.linalg.eigvalsh(0.5 * (on_span + on_span.T))[0])
    secular = _Secular(k, lam, give_up=None if tol is None else -EARLY_EXIT_MARGIN * tol)
    if path == "secular-matrix-free":
        value = secular.solve(span_min, start_block=k @ r_blocks.reshape(n, d))
    else:
        value = secular.solve(span_min)
    if value is not None:
        reason = "" if not secular.early else (
            f"not certifiable: Newton step {secular.steps} of the secular equation proves "
            f"lambda_min(Lambda - G) <= {value:.6g} < -{EARLY_EXIT_MARGIN:g} tol = "
            f"{secular.give_up:.6g}")
        return Certificate(value, path, secular.steps, secular.products, secular.dense_steps,
                           reason)
    lanczos, products = _lanczos_min_eig(k, lam)
    return Certificate(min(span_min, lanczos), "lanczos", secular.steps,
                       secular.products + products, secular.dense_steps)


def lam_minus_g(k: np.ndarray, lam: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``(Lambda - G) X`` for ``X`` of shape ``(pd, b)``."""
    p, d, _ = lam.shape
    lx = np.matmul(lam, x.reshape(p, d, -1)).reshape(p * d, -1)
    return lx - k.T @ (k @ x)


class _Secular:
    """Newton's method on the secular equation ``h(s) = 1`` of ``Lambda - K^T K``.

    With ``Lambda = Q diag(D) Q^T`` blockwise, for ``s < min(D)``
    ``h(s) = lambda_max(M(s))``, ``M(s) = K Q diag(1/(D - s)) Q^T K^T`` (``m x m``), is
    increasing and convex, and ``Lambda - s I - K^T K`` is PSD exactly when ``h(s) <= 1``
    (Sylvester's law of inertia on the Schur complement). So ``lambda_min`` is the root of
    ``h(s) = 1``; Newton's method started to its right (a Rayleigh quotient, hence
    ``>= lambda_min``) decreases monotonically to it and stays an upper bound; its derivative
    is ``h'(s) = ||diag(1/(D - s)) Q^T K^T u||^2`` at the top unit eigenvector ``u``.

    Every iterate is an upper bound of ``lambda_min``, even one from a vector ``u`` that is not
    the top eigenvector (an unconverged LOBPCG): ``f(s) = u^T M(s) u`` is convex, increasing and
    at most ``h(s)``, so the root ``s'`` of its tangent at ``s`` has ``h(s') >= f(s') >= 1``,
    i.e. ``lambda_min <= s'``. With ``give_up`` set, :meth:`solve` returns the first iterate
    below it (``early`` is then True), the unconverged LOBPCG's included.
    Hand-written because no library solves this secular equation for a block-diagonal plus
    low-rank matrix; the eigenpairs come from LAPACK or scipy's LOBPCG.
    """

    def __init__(self, k: np.ndarray, lam: np.ndarray, *, give_up: float | None = None) -> None:
        self.k = k
        self.give_up = give_up
        self.early = False
        self.p, self.d, _ = lam.shape
        dvals, self.q = np.linalg.eigh(lam)
        self.dvals = dvals.reshape(self.p * self.d)
        self.scale = max(1.0, float(np.abs(self.dvals).max()))
        self.steps = self.products = self.dense_steps = 0
        self._l: np.ndarray | None = None  # K Q, formed only by the dense steps

    def _kq(self) -> np.ndarray:
        """``L = K Q`` (``m x pd``)."""
        if self._l is None:
            m, p, d = self.k.shape[0], self.p, self.d
            self._l = np.ascontiguousarray(np.matmul(
                self.k.reshape(m, p, d).transpose(1, 0, 2), self.q).transpose(1, 0, 2)
            ).reshape(m, p * d)
        return self._l

    def _qt_kt(self, u: np.ndarray) -> np.ndarray:
        """``Q^T K^T U`` for ``U`` of shape ``(m, b)``: ``(pd, b)``."""
        y = (self.k.T @ u).reshape(self.p, self.d, -1)
        return np.matmul(np.swapaxes(self.q, 1, 2), y).reshape(self.p * self.d, -1)

    def _dense_top(self, inv: np.ndarray) -> tuple[float, np.ndarray]:
        """Top eigenpair of ``M(s)``, formed densely (``inv = 1 / (D - s)``)."""
        w = self._kq() * np.sqrt(inv)
        mu, u = extreme_eigh(w @ w.T, 1, largest=True)
        return float(mu[0]), u[:, 0]

    def _lobpcg_top(self, inv: np.ndarray, block: np.ndarray,
                    tol: float) -> tuple[float, np.ndarray, np.ndarray, bool] | None:
        """Top eigenpair of ``M(s)`` by LOBPCG from ``block`` (the Rayleigh quotient ``mu`` of
        the unit vector ``u`` it found), the block to warm-start the next step, and whether it
        converged (residual at most :data:`LOBPCG_ACCEPT`); None when ``mu`` is not finite."""
        import scipy.sparse.linalg

        m, p, d = self.k.shape[0], self.p, self.d

        def matmat(u: np.ndarray) -> np.ndarray:
            u = u.reshape(m, -1)
            self.products += u.shape[1]
            y = self._qt_kt(u) * inv[:, None]
            return self.k @ np.matmul(self.q, y.reshape(p, d, -1)).reshape(p * d, -1)

        op = scipy.sparse.linalg.LinearOperator((m, m), matvec=matmat, matmat=matmat,
                                                dtype=np.float64)
        with warnings.catch_warnings():  # non-convergence is judged by the residual below
            warnings.simplefilter("ignore")
            w, x = scipy.sparse.linalg.lobpcg(op, block, largest=True, tol=tol,
                                              maxiter=LOBPCG_MAX_ITER)
        u = x[:, int(np.argmax(w))]
        u = u / np.linalg.norm(u)
        mu_u = matmat(u[:, None])[:, 0]
        mu = float(u @ mu_u)
        if not np.isfinite(mu):
            return None
        return mu, u, x, bool(np.linalg.norm(mu_u - mu * u) <= LOBPCG_ACCEPT * max(mu, 1.0))

    def _newton_step(self, inv: np.ndarray, mu: float, u: np.ndarray) -> float:
        """``(f(s) - 1) / f'(s)`` for ``f(s) = u^T M(s) u = mu`` (``inv = 1 / (D - s)``)."""
        z = self._qt_kt(u[:, None])[:, 0] * inv
        return (mu - 1.0) / max(float(z @ z), np.finfo(float).tiny)

    def _gives_up(self, s: float) -> bool:
        """``s`` (an upper bound of ``lambda_min``) is below ``give_up``; marks the exit."""
        self.early = self.give_up is not None and s < self.give_up
        return self.early

    def solve(self, start: float, *, start_block: np.ndarray | None = None) -> float | None:
        """The root of ``h(s) = 1`` from ``s = start``, or None off the equation's domain.

        ``start_block`` (``K R``, ``m x d``) switches to the matrix-free steps."""
        dvals, scale = self.dvals, self.scale
        if not start < dvals.min() - 1e-9 * scale:
            return None
        block = None
        if start_block is not None:
            rng = np.random.default_rng(0)  # a fixed start keeps the certificate reproducible
            m = start_block.shape[0]
            spread = float(np.linalg.norm(start_block)) / np.sqrt(m * start_block.shape[1])
            block = np.hstack([start_block @ rng.standard_normal((start_block.shape[1], 1)),
                               spread * rng.standard_normal((m, LOBPCG_BLOCK - 1))])
        s, newton = start, np.inf
        for _ in range(SECULAR_MAX_STEPS):
            self.steps += 1
            inv = 1.0 / (dvals - s)
            top = None
            if block is not None:
                tol = LOBPCG_TOL_NEAR if newton <= 1e-6 * scale else LOBPCG_TOL_FAR
                top = self._lobpcg_top(inv, block, tol)
                if top is not None and not top[3]:
                    if self.give_up is not None:
                        # unconverged, but its Newton step still bounds lambda_min from above
                        bound = s - max(self._newton_step(inv, top[0], top[1]), 0.0)
                        if np.isfinite(bound) and self._gives_up(bound):
                            return float(bound)
                    top = None
            if top is None:
                if block is not None:
                    self.dense_steps += 1
                mu, u = self._dense_top(inv)
            else:
                mu, u, block, _ = top
            newton = self._newton_step(inv, mu, u)
            if not np.isfinite(newton):
                return None  # rounding broke the iteration: the Lanczos path answers instead
            s -= max(newton, 0.0)
            if newton <= SECULAR_ATOL * scale or self._gives_up(s):
                return float(s)
        return None


def _lanczos_min_eig(k: np.ndarray, lam: np.ndarray) -> tuple[float, int]:
    """``lambda_min(Lambda - G)`` by ARPACK Lanczos on the operator, and the columns multiplied.

    The whole operator, not its restriction to the complement of ``span(R)``: that restriction
    gives ``lambda_min`` only when ``span(R)`` is invariant (a stationary point); elsewhere (a
    capped run) it was an upper bound (found by issue 24's tests: -8.65 for -8.84)."""
    import scipy.sparse.linalg

    p, d, _ = lam.shape
    n = p * d
    products = 0

    def matvec(x: np.ndarray) -> np.ndarray:
        nonlocal products
        x2 = x.reshape(n, -1)
        products += x2.shape[1]
        return lam_minus_g(k, lam, x2).reshape(x.shape)

    linop = scipy.sparse.linalg.LinearOperator((n, n), matvec=matvec, matmat=matvec,
                                               dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(n)  # a fixed start: reproducible
    try:
        value = float(scipy.sparse.linalg.eigsh(linop, k=1, which="SA", v0=v0, tol=1e-10,
                                                ncv=min(n - 1, 64), maxiter=20 * n,
                                                return_eigenvectors=False)[0])
    except scipy.sparse.linalg.ArpackNoConvergence as err:
        if not len(err.eigenvalues):
            raise
        value = float(np.min(err.eigenvalues))
    return value, products
