"""Small linear-algebra kernels: batched polar factors, extreme eigenpairs, centering, and the
worker threads that split a stack of blocks across cores (BLAS threads: :mod:`common.blas`).

References: SPEC.md section 2 (``Pi(M) = U V^T``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar, overload

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).

T = TypeVar("T")


@overload
def extreme_eigh(a: np.ndarray, count: int, *, largest: bool,
                 vectors: Literal[True] = ...) -> tuple[np.ndarray, np.ndarray]: ...


@overload
def extreme_eigh(a: np.ndarray, count: int, *, largest: bool,
                 vectors: Literal[False]) -> tuple[np.ndarray, None]: ...


def extreme_eigh(a: np.ndarray, count: int, *, largest: bool,
                 vectors: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """The ``count`` largest (or smallest) eigenpairs of the symmetric matrix ``a``, ascending.

    LAPACK's ``syevr`` computes an index subset several times faster than the full
    decomposition, but on some matrices with clustered extreme eigenvalues it returns fewer
    pairs than asked, even none (scipy issue 13913; seen on certificates at p=200, d=20,
    r=100). Then the full divide-and-conquer ``syevd`` answers instead.

    Parameters
    ----------
    a : (n, n) ndarray
        Symmetric; only finite input is meaningful (not checked, for speed).
    count : int
        Number of eigenpairs, ``1 <= count <= n``.
    largest : bool
        The largest eigenvalues (else the smallest).
    vectors : bool
        Also return the eigenvectors (else ``None`` in their place).

    Returns
    -------
    w : (count,) ndarray
        Eigenvalues, ascending.
    v : (n, count) ndarray or None
        Orthonormal eigenvectors, column ``j`` for ``w[j]``.
    """
    import scipy.linalg

    n = a.shape[0]
    index = [n - count, n - 1] if largest else [0, count - 1]
    out = scipy.linalg.eigh(a, subset_by_index=index, eigvals_only=not vectors,
                            driver="evr", check_finite=False)
    w, v = out if vectors else (out, None)
    if len(w) == count and np.isfinite(w).all():
        return w, v
    out = scipy.linalg.eigh(a, eigvals_only=not vectors, driver="evd", check_finite=False)
    w, v = out if vectors else (out, None)
    keep = slice(n - count, n) if largest else slice(0, count)
    return w[keep], (None if v is None else v[:, keep])


def polar_factor(m: np.ndarray) -> np.ndarray:
    """Nearest orthogonal matrix ``Pi(M) = U V^T`` of each square matrix in a stack.

    Parameters
    ----------
    m : (..., d, d) ndarray

    Returns
    -------
    (..., d, d) ndarray
        ``U V^T`` for the SVD ``M = U S V^T`` of every matrix in the stack (one batched LAPACK
        call: numpy's ``svd`` loops over the stack in C).
    """
    u, _, vt = np.linalg.svd(m)
    return u @ vt


def polar_factor_fast(m: np.ndarray, *, rcond: float = 1e-4) -> np.ndarray:
    """``Pi(M)`` for a stack of well-conditioned matrices via one batched symmetric eigensolve.

    ``M^T M = V diag(s^2) V^T`` gives ``Pi(M) = M V diag(1/s) V^T``. A symmetric eigensolve is
    several times cheaper than an SVD, at the price of squaring the condition number (error about
    ``kappa^2`` times machine epsilon); blocks whose smallest singular value falls below ``rcond``
    times the largest fall back to the SVD.

    Parameters
    ----------
    m : (p, d, d) ndarray
    rcond : float
        Relative singular-value threshold below which the SVD is used instead.
    """
    w, v = np.linalg.eigh(np.swapaxes(m, -1, -2) @ m)
    s = np.sqrt(np.clip(w, 0.0, None))
    ok = s[..., 0] > rcond * s[..., -1]
    if ok.all():  # the usual case: no boolean-mask copies of the stack
        return (m @ (v / s[..., None, :])) @ np.swapaxes(v, -1, -2)
    out = np.empty_like(m)
    if ok.any():
        vs = v[ok] / s[ok][:, None, :]
        out[ok] = m[ok] @ vs @ np.swapaxes(v[ok], -1, -2)
    out[~ok] = polar_factor(m[~ok])
    return out


def center_rows(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and the row-centered matrix: ``b = B^T 1 / r``, ``Bc = B - 1 b^T``.

    Works on one ``(r, d)`` matrix or a stack ``(p, r, d)``.
    """
    mean = b.mean(axis=-2)
    return mean, b - mean[..., None, :]


class BlockWorkers:
    """Runs one function per contiguous group of blocks, each group on its own thread.

    numpy and LAPACK release the GIL, so ``w`` single-threaded BLAS calls on ``w`` groups use
    ``w`` cores; with ``workers=1`` everything runs inline on the calling thread.

    Parameters
    ----------
    n_blocks : int
        ``p``, the number of blocks in the stack.
    workers : int
        Number of groups (and threads), at most ``n_blocks``.
    """

    def __init__(self, n_blocks: int, workers: int) -> None:
        workers = max(1, min(int(workers), int(n_blocks)))
        bounds = np.linspace(0, n_blocks, workers + 1).round().astype(int)
        self.groups = [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> BlockWorkers:
        if len(self.groups) > 1:
            self._pool = ThreadPoolExecutor(max_workers=len(self.groups),
                                            thread_name_prefix="gopp-block")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def map(self, fn: Callable[[slice], T]) -> list[T]:
        """``[fn(group) for group in groups]``, run concurrently; results in group order."""
        if self._pool is None:
            return [fn(g) for g in self.groups]
        return list(self._pool.map(fn, self.groups))
