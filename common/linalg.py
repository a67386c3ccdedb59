"""Small linear-algebra kernels: batched polar factors, extreme eigenpairs, centering, and the
worker threads that split a stack of blocks across cores (BLAS threads: :mod:`common.blas`).

References: SPEC.md section 2 (``Pi(M) = U V^T``).
"""

from __future__ import annotations

import itertools
import threading
import time
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


#: Assumed lower bound ``l_0`` of ``sigma_min(M) / alpha`` that sets the scaled Newton-Schulz
#: steps (:func:`polar_factor_newton_schulz`); 12 steps take ``[l_0, 1]`` to 1 within 1e-15.
NEWTON_SCHULZ_LOWER = 1e-3

#: Newton-Schulz finishes with one plain step once ``max |X^T X - I|`` is at most this (the step
#: squares it: about 1e-14 after it).
NEWTON_SCHULZ_DEFECT = 1e-7

#: Steps after which a block whose defect is still above ``NEWTON_SCHULZ_DEFECT`` is near
#: singular and takes the SVD instead: measured, blocks of ``sigma_min(M) / sigma_max(M)`` down
#: to 1e-6 finish within it (to 1e-12 of the SVD's factor), 1e-7 and below do not.
NEWTON_SCHULZ_MAX_STEPS = 30


def polar_factor_newton_schulz(m: np.ndarray) -> np.ndarray:
    """``Pi(M)`` for a stack of square matrices by scaled Newton-Schulz steps, in float64 matrix
    products batched over the stack (numpy ``matmul`` on the ``(p, d, d)`` array).

    ``X_0 = M / alpha`` with ``alpha = ||M^T M||_1^(1/2) >= sigma_max(M)`` puts every singular
    value in ``(0, 1]``. Each step ``X <- X (3/2 c I - 1/2 c^3 X^T X)`` maps the interval
    ``[l, 1]`` into ``[l', 1]`` with ``c = (3 / (1 + l + l^2))^(1/2)``, the scaling of Chen and
    Chow (2014) that makes ``l`` and 1 land on the same value ``l'``, starting from
    ``l_0 = NEWTON_SCHULZ_LOWER`` (an assumption: smaller singular values still converge, more
    slowly). Every step keeps ``X = M q(M^T M)`` for a polynomial ``q``, so the limit is
    ``Pi(M)`` itself. Once ``max |X^T X - I| <= NEWTON_SCHULZ_DEFECT`` a plain step
    (``c = 1``), which squares the defect, finishes the block. Condition check: a block not
    finished after ``NEWTON_SCHULZ_MAX_STEPS`` steps (near singular), or not finite, takes
    :func:`polar_factor` (the SVD). Agrees with the SVD's polar factor to about 1e-15 on
    well-conditioned blocks (the eigh route :func:`polar_factor_fast` loses ``kappa^2`` eps).

    Parameters
    ----------
    m : (p, d, d) ndarray
    """
    m = np.asarray(m, dtype=np.float64)
    d = m.shape[-1]
    eye = np.eye(d)
    xtx = np.swapaxes(m, -1, -2) @ m
    # ||A||_1 >= ||A||_2 = sigma_max(M)^2 for the symmetric A = M^T M.
    alpha2 = np.abs(xtx).sum(axis=-2).max(axis=-1)
    alpha2[alpha2 == 0.0] = 1.0  # a zero block: never finishes, takes the SVD
    x = m / np.sqrt(alpha2)[:, None, None]
    xtx = xtx / alpha2[:, None, None]
    out = np.empty_like(m)
    todo = np.arange(m.shape[0])
    lower = NEWTON_SCHULZ_LOWER
    for _ in range(NEWTON_SCHULZ_MAX_STEPS):
        defect = np.abs(xtx - eye).max(axis=(-2, -1))
        done = defect <= NEWTON_SCHULZ_DEFECT
        if done.any():  # the finishing plain step
            out[todo[done]] = x[done] @ (1.5 * eye - 0.5 * xtx[done])
            todo, x, xtx = todo[~done], x[~done], xtx[~done]
            if not len(todo):
                return out
        c = float(np.sqrt(3.0 / (1.0 + lower + lower * lower)))
        x = x @ (1.5 * c * eye - 0.5 * c**3 * xtx)
        xtx = np.swapaxes(x, -1, -2) @ x
        lower = min(1.5 * c * lower - 0.5 * (c * lower) ** 3, 1.0)
    out[todo] = polar_factor(m[todo])
    return out


#: Blocks timed per route when :func:`polar_route` calibrates an order ``d`` (one: the
#: calibration costs a few polar factors, 0.4 s of CPU at d = 400).
POLAR_PROBE_BLOCKS = 1

#: Largest condition number of the calibration's blocks: the GPM's blocks ``(G R)_i`` have 5 to
#: 11 near ``v_PT`` (measured).
POLAR_PROBE_KAPPA = 10.0

#: Calls of each route timed by the calibration (the best counts).
POLAR_PROBE_REPEATS = 3

#: Newton-Schulz is chosen when it takes at most this fraction of the eigh route's time (a
#: margin against timing noise).
POLAR_PROBE_MARGIN = 0.8

_ROUTES: dict[tuple[int, int], str] = {}
_ROUTES_LOCK = threading.Lock()

#: The exact polar-factor routes :func:`polar_route` chooses from.
POLAR_ROUTES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "eigh": polar_factor_fast, "newton-schulz": polar_factor_newton_schulz}


def polar_route(d: int, threads: int = 1) -> str:
    """The faster exact route to a stack's polar factors at order ``d`` on this machine:
    ``"eigh"`` (:func:`polar_factor_fast`) or ``"newton-schulz"``
    (:func:`polar_factor_newton_schulz`).

    Rule: measured once per process for each ``(d, threads)``, on ``POLAR_PROBE_BLOCKS``
    blocks with singular values spread over ``[1, POLAR_PROBE_KAPPA]``, the best of
    ``POLAR_PROBE_REPEATS`` calls of each route; Newton-Schulz when it took at most
    ``POLAR_PROBE_MARGIN`` of the eigh route's time. Its matrix products gain on the
    eigensolve where BLAS runs near its peak and LAPACK's ``syevd`` does not (measured on 2
    shared cores, OpenBLAS: never at d = 50 to 500, benchmarks/bench_gopp.py ``polar``).
    Measured at the BLAS threads in force, which the caller passes as ``threads`` (the cache
    key); at one thread in this thread's CPU time, so that other processes on a shared host
    do not decide it."""
    key = (int(d), int(threads))
    with _ROUTES_LOCK:
        if key not in _ROUTES:
            _ROUTES[key] = _calibrate_polar(*key)
        return _ROUTES[key]


def _calibrate_polar(d: int, threads: int) -> str:
    rng = np.random.default_rng(0)
    u, v = polar_factor(rng.standard_normal((2, POLAR_PROBE_BLOCKS, d, d)))
    m = u * np.geomspace(1.0, POLAR_PROBE_KAPPA, d) @ v
    clock = time.thread_time if threads == 1 else time.perf_counter
    best = {}
    for name, route in POLAR_ROUTES.items():
        times = []
        for _ in range(POLAR_PROBE_REPEATS):
            start = clock()
            route(m)
            times.append(clock() - start)
        best[name] = min(times)
    ns_pays = best["newton-schulz"] <= POLAR_PROBE_MARGIN * best["eigh"]
    return "newton-schulz" if ns_pays else "eigh"


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
