"""Input checks at the door, in the manner of scipy's ``check_finite``.

Every public function of :mod:`common` validates its arguments with these helpers so bad input
fails early with an error that names the argument and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.errors import InvalidInputError


def as_float_array(x: object, name: str, *, ndim: int | None = None) -> np.ndarray:
    """Return ``x`` as a finite float64 array, or raise naming ``name``.

    Parameters
    ----------
    x : array_like
    name : str
        Argument name used in the error message.
    ndim : int, optional
        Required number of dimensions.
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(f"{name} must be a numeric array: {err}") from None
    if ndim is not None and arr.ndim != ndim:
        raise InvalidInputError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.size and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise InvalidInputError(f"{name} contains {bad} NaN or Inf value(s)")
    return arr


def as_matrix(
    x: object,
    name: str,
    *,
    rows: int | None = None,
    cols: int | None = None,
    min_rows: int | None = None,
) -> np.ndarray:
    """Return ``x`` as a finite float64 2-D array with the required shape."""
    arr = as_float_array(x, name, ndim=2)
    n, m = arr.shape
    if rows is not None and n != rows:
        raise InvalidInputError(f"{name} must have {rows} rows, got shape {arr.shape}")
    if cols is not None and m != cols:
        raise InvalidInputError(f"{name} must have {cols} columns, got shape {arr.shape}")
    if min_rows is not None and n < min_rows:
        raise InvalidInputError(f"{name} must have at least {min_rows} rows, got shape {arr.shape}")
    if arr.size == 0:
        raise InvalidInputError(f"{name} is empty (shape {arr.shape})")
    return arr


def as_vector(x: object, name: str, *, size: int | None = None) -> np.ndarray:
    """Return ``x`` as a finite float64 1-D array of the required length."""
    arr = as_float_array(x, name, ndim=1)
    if size is not None and arr.shape[0] != size:
        raise InvalidInputError(f"{name} must have length {size}, got {arr.shape[0]}")
    return arr


def check_nonnegative(value: float, name: str) -> float:
    """Return ``value`` as a float after checking it is finite and >= 0."""
    v = float(value)
    if not np.isfinite(v) or v < 0:
        raise InvalidInputError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def check_positive(value: float, name: str) -> float:
    """Return ``value`` as a float after checking it is finite and > 0."""
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise InvalidInputError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def check_count(value: int, name: str, *, minimum: int) -> int:
    """Return ``value`` as an int after checking it is an integer >= ``minimum``."""
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def stack_blocks(blocks: Sequence[object], name: str, *, min_blocks: int = 2) -> np.ndarray:
    """Stack ``p`` equally shaped finite ``(r, d)`` blocks into a ``(p, r, d)`` array.

    Raises when there are fewer than ``min_blocks`` blocks or when any block differs in shape.
    """
    if isinstance(blocks, np.ndarray) and blocks.ndim == 3:
        blocks = list(blocks)
    if not isinstance(blocks, Sequence) or isinstance(blocks, str | bytes):
        raise InvalidInputError(f"{name} must be a list of 2-D arrays")
    if len(blocks) < min_blocks:
        raise InvalidInputError(f"{name} needs at least {min_blocks} blocks (p >= {min_blocks}), "
                                f"got {len(blocks)}")
    mats = [as_matrix(b, f"{name}[{i}]") for i, b in enumerate(blocks)]
    shape = mats[0].shape
    for i, m in enumerate(mats):
        if m.shape != shape:
            raise InvalidInputError(f"{name}[{i}] has shape {m.shape}, expected {shape} like "
                                    f"{name}[0]")
    return np.stack(mats)
