"""The one checked reader of ``.npy`` and ``.npz`` arrays from disk.

Every array the project reads back from a file (the store's result arrays and release queries,
a site's kept secrets, records given on the command line, a site's ``.npy``/``.npz`` table) goes
through :func:`load_npy` or :func:`load_npz`: no pickle (``allow_pickle=False``), numbers only
(no object, string or complex arrays unless asked), the expected number of dimensions, and no
NaN or Inf in a float array, each refusal an :class:`~common.errors.InvalidInputError` naming
the file and the array. A value that was finite when written and is not when read was altered,
and would otherwise end in a traceback, or a silently wrong model, far from the file.

(The project's own arrays files, ``common.models.container``, and the store's bundles,
``analyst.storage``, check the same on their own layouts.)
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

import numpy as np

from noisyanchor.common.errors import InvalidInputError

#: dtype kinds of numeric arrays: signed and unsigned integers, floats, booleans.
NUMERIC = "iufb"

Source = Path | bytes | BinaryIO


def check_loaded(arr: np.ndarray, what: str, *, kinds: str = NUMERIC,
                 ndim: int | Collection[int] | None = None, finite: bool = True) -> np.ndarray:
    """``arr`` once its dtype kind is one of ``kinds``, its dimensions ``ndim`` (a number or
    the allowed numbers) and, with ``finite``, a float array holds no NaN or Inf.

    Raises
    ------
    InvalidInputError
        Naming ``what`` (the file, and the array of an ``.npz``) and what it holds.
    """
    if arr.dtype.kind not in kinds:
        raise InvalidInputError(f"{what} holds a {arr.dtype} array; expected "
                                f"{_kind_names(kinds)}")
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if allowed is not None and arr.ndim not in allowed:
        raise InvalidInputError(f"{what} holds an array of shape {arr.shape}; expected "
                                f"{' or '.join(map(str, allowed))} dimension(s)")
    if finite and arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        raise InvalidInputError(f"{what} holds NaN or Inf values (altered, or not written by "
                                "this project); refused")
    return arr


def load_npy(source: Source, what: str, *, kinds: str = NUMERIC,
             ndim: int | Collection[int] | None = None, finite: bool = True) -> np.ndarray:
    """One ``.npy`` array from ``source`` (a path, the bytes, or an open binary file), checked
    as :func:`check_loaded` says; ``what`` names it in every error (a file that is not a
    ``.npy``, a pickle, a truncated one)."""
    try:
        arr = np.load(_opened(source), allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise InvalidInputError(f"{what} is not a readable .npy array (no pickles): "
                                f"{str(err)[:200]}") from None
    if not isinstance(arr, np.ndarray):  # an .npz where an .npy belongs
        arr.close()
        raise InvalidInputError(f"{what} is an .npz archive; expected one .npy array")
    return check_loaded(arr, what, kinds=kinds, ndim=ndim, finite=finite)


def load_npz(source: Source, what: str, *, kinds: str = NUMERIC,
             finite: bool = True) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive, each checked as :func:`check_loaded` says (errors
    name the file and the array)."""
    try:
        archive = np.load(_opened(source), allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise InvalidInputError(f"{what} is one .npy array; expected an .npz archive")
        with archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        if isinstance(err, InvalidInputError):
            raise
        raise InvalidInputError(f"{what} is not a readable .npz archive (no pickles): "
                                f"{str(err)[:200]}") from None
    return {name: check_loaded(arr, f"{what}: array {name!r}", kinds=kinds, finite=finite)
            for name, arr in arrays.items()}


def _opened(source: Source) -> Path | BinaryIO:
    return io.BytesIO(source) if isinstance(source, bytes | bytearray) else source


def _kind_names(kinds: str) -> str:
    names = {"i": "integers", "u": "unsigned integers", "f": "floats", "b": "booleans",
             "U": "texts", "c": "complex numbers"}
    return ", ".join(names.get(k, k) for k in kinds)
