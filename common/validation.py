"""Input checks at the door, in the manner of scipy's ``check_finite``.

Every public function of :mod:`common` validates its arguments with these helpers so bad input
fails early with an error that names the argument and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from noisyanchor.common.chunks import all_finite
from noisyanchor.common.errors import InvalidInputError


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
    if not all_finite(arr):  # no full-size temporary: arr may be a memory map of an upload
        bad = int((~np.isfinite(arr)).sum())
        raise InvalidInputError(f"{name} contains {bad} NaN or Inf value(s)")
    return arr


def as_matrix(
    x: object,
    name: str,
    *,
    rows: int | None = None,
    cols: int | None = None,
) -> np.ndarray:
    """Return ``x`` as a finite float64 2-D array with the required shape."""
    arr = as_float_array(x, name, ndim=2)
    n, m = arr.shape
    if rows is not None and n != rows:
        raise InvalidInputError(f"{name} must have {rows} rows, got shape {arr.shape}")
    if cols is not None and m != cols:
        raise InvalidInputError(f"{name} must have {cols} columns, got shape {arr.shape}")
    if arr.size == 0:
        raise InvalidInputError(f"{name} is empty (shape {arr.shape})")
    return arr


def as_vector(x: object, name: str) -> np.ndarray:
    """Return ``x`` as a finite float64 1-D array."""
    return as_float_array(x, name, ndim=1)


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


def check_choice(value: str, name: str, choices: Sequence[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``."""
    if value not in choices:
        raise InvalidInputError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_anchor_rows(r: int, d: int, what: str) -> None:
    """Raise unless an anchor has ``r >= d + 1`` rows for dimension ``d``.

    ``what`` starts the message, e.g. ``"anchors need"`` gives
    ``"anchors need r >= d + 1 rows, got r=3, d=4"``.
    """
    if r < d + 1:
        raise InvalidInputError(f"{what} r >= d + 1 rows, got r={r}, d={d}")


def check_projection_dim(h: int, d: int, width: str) -> None:
    """Raise unless a public projection ``F`` (``d x h``) maps the ``d`` record columns to
    ``h <= d`` of them; ``width`` says where ``d`` comes from (``"[schema] features"``)."""
    if h > d:
        raise InvalidInputError(f"h = {h} exceeds the record width d = {d} ({width}): a "
                                "public projection F maps d columns to h <= d of them "
                                "(omit dim for none)")


def stack_blocks(blocks: Sequence[object], name: str) -> np.ndarray:
    """Stack ``p >= 2`` equally shaped finite ``(r, d)`` blocks into a ``(p, r, d)`` array.

    Raises when there are fewer than two blocks or when any block differs in shape.
    """
    if isinstance(blocks, np.ndarray) and blocks.ndim == 3:
        blocks = list(blocks)
    if not isinstance(blocks, Sequence) or isinstance(blocks, str | bytes):
        raise InvalidInputError(f"{name} must be a list of 2-D arrays")
    if len(blocks) < 2:
        raise InvalidInputError(f"{name} needs at least 2 blocks (p >= 2), got {len(blocks)}")
    mats = [as_matrix(b, f"{name}[{i}]") for i, b in enumerate(blocks)]
    shape = mats[0].shape
    for i, m in enumerate(mats):
        if m.shape != shape:
            raise InvalidInputError(f"{name}[{i}] has shape {m.shape}, expected {shape} like "
                                    f"{name}[0]")
    return np.stack(mats)
