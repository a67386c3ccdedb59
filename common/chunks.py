"""Passes over a tall matrix (``Z``, an upload) a bounded number of rows at a time, so that a
matrix kept on disk as a memory map is never copied whole into memory.

References: issue 31 (an analyst in bounded memory).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: Rows per chunk: 8 MiB of float64 at d = 128, so each temporary stays small whatever ``n``.
CHUNK_ROWS = 1 << 13


def row_chunks(n: int, step: int | None = None) -> Iterator[slice]:
    """Consecutive slices ``[start, start + step)`` covering rows ``0..n`` (``step`` defaults
    to :data:`CHUNK_ROWS`, read when called so a test can shrink it)."""
    step = CHUNK_ROWS if step is None else step
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def all_finite(x: np.ndarray) -> bool:
    """Whether every entry of ``x`` is finite, without a temporary the size of ``x`` when it is:
    the sum of finite values is finite unless it overflows, and only then (or when some entry
    is not finite) are the chunks checked one by one."""
    if x.size == 0 or np.isfinite(x.sum()):
        return True
    flat = x.reshape(len(x), -1) if x.ndim > 1 else x.reshape(-1, 1)
    return all(np.isfinite(flat[rows]).all() for rows in row_chunks(len(flat)))
