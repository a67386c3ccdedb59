"""Passes over a tall matrix (``Z``, an upload) a bounded number of rows at a time, so that a
matrix kept on disk as a memory map is never copied whole into memory.

References: issue 31 (an analyst in bounded memory).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator

import numpy as np

#: Rows per chunk: 8 MiB of float64 at d = 128, so each temporary stays small whatever ``n``.
CHUNK_ROWS = 1 << 13


def row_chunks(n: int, step: int | None = None, *,
               release: np.ndarray | None = None) -> Iterator[slice]:
    """Consecutive slices ``[start, start + step)`` covering rows ``0..n`` (``step`` defaults
    to :data:`CHUNK_ROWS`, read when called so a test can shrink it); with ``release``, each
    chunk's rows of that array are let go of (:func:`let_go`) once the caller moves on."""
    step = CHUNK_ROWS if step is None else step
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    for start in range(0, n, step):
        rows = slice(start, min(start + step, n))
        yield rows
        if release is not None:
            let_go(release, rows)


def let_go(a: np.ndarray, rows: slice) -> None:
    """Drop the pages of rows ``rows`` of a memory-mapped ``a`` from this process's resident
    set (``MADV_DONTNEED``); nothing for an array in memory.

    The file keeps its contents (written pages stay dirty in the page cache): touching the rows
    again reads them back. Without this a pass over a memory map leaves every page it read
    mapped, so the process's resident set grows by the whole file, page cache the kernel could
    drop but that counts against a memory limit until it does.
    """
    mm = _mapping(a)
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if mm is None or advice is None or mm.closed or not a.flags.c_contiguous or a.ndim == 0:
        return
    base = np.frombuffer(mm, np.uint8, count=1).ctypes.data  # the mapping's first byte
    first = a.ctypes.data - base + rows.start * a.strides[0]
    last = a.ctypes.data - base + rows.stop * a.strides[0]
    first = -(-first // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages of these rows only
    last = last // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        mm.madvise(advice, first, last - first)


def rows_of(a: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """The rows of ``a`` flagged by the boolean ``flags``, gathered a chunk at a time into one
    new array, each chunk's pages let go of once read (:func:`let_go`): picking scattered rows
    (the test rows) out of a memory map otherwise leaves nearly all of its pages resident."""
    flags = np.asarray(flags, dtype=bool)
    if flags.shape != a.shape[:1]:
        raise ValueError(f"flags must give one flag per row ({len(a)}), got shape {flags.shape}")
    out = np.empty((int(flags.sum()), *a.shape[1:]), dtype=a.dtype)
    filled = 0
    for rows in row_chunks(len(a), release=a):
        part = a[rows][flags[rows]]
        out[filled:filled + len(part)] = part
        filled += len(part)
    return out


def predict_chunked(predict: Callable[[np.ndarray], np.ndarray], a: np.ndarray,
              flags: np.ndarray | None = None) -> np.ndarray:
    """``predict`` (rows to labels) of the rows of ``a`` flagged by the boolean ``flags`` (all
    rows without), a chunk at a time, each chunk's pages let go of once read: only the labels
    are kept, never the rows nor what ``predict`` makes of them."""
    parts = []
    for rows in row_chunks(len(a), release=a):
        part = a[rows] if flags is None else a[rows][flags[rows]]
        if len(part):
            parts.append(predict(part))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def column_mean(a: np.ndarray) -> np.ndarray:
    """The mean row of ``a`` (``(d,)``), summed a chunk at a time (each let go of once read)."""
    total = np.zeros(a.shape[1:])
    for rows in row_chunks(len(a), release=a):
        total += a[rows].sum(axis=0)
    return total / len(a)


def row_norms(a: np.ndarray, center: np.ndarray) -> np.ndarray:
    """``||a_k - center||`` of every row ``k`` (``(n,)``), a chunk at a time: no copy of ``a``."""
    out = np.empty(len(a))
    for rows in row_chunks(len(a), release=a):
        out[rows] = np.linalg.norm(a[rows] - center, axis=1)
    return out


def centered_gram(a: np.ndarray, center: np.ndarray) -> np.ndarray:
    """``(A - 1 center^T)^T (A - 1 center^T)`` (``(d, d)``), a chunk at a time."""
    gram = np.zeros((a.shape[1], a.shape[1]))
    for rows in row_chunks(len(a), release=a):
        part = a[rows] - center
        gram += part.T @ part
    return gram


def _mapping(a: np.ndarray) -> mmap.mmap | None:
    """The ``mmap`` behind ``a`` (a memory map, or a view of one, however deep), else None."""
    base: object = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return base


def all_finite(x: np.ndarray) -> bool:
    """Whether every entry of ``x`` is finite, a chunk of rows at a time (each let go of once
    read, :func:`let_go`): a chunk whose sum is finite holds only finite values, and only a
    chunk whose sum is not (a NaN or an Inf, or an overflow) is checked entry by entry."""
    if x.size == 0 or x.ndim == 0:
        return bool(np.isfinite(x).all())
    flat = x.reshape(len(x), -1)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is answered entry-wise
        for rows in row_chunks(len(flat), release=x):
            part = flat[rows]
            if not np.isfinite(part.sum()) and not np.isfinite(part).all():
                return False
    return True
