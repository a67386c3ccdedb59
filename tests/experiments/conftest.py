"""Fixtures of the bench's tests."""

import gzip
import struct

import numpy as np
import pytest


def _write_idx(path, array: np.ndarray, type_code: int) -> None:
    """Write ``array`` as an IDX file (gzip-compressed when ``path`` ends in .gz)."""
    header = struct.pack(">BBBB", 0, 0, type_code, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as fh:
        fh.write(data)


@pytest.fixture
def write_idx():
    """The IDX writer (MNIST's format) for loader round trips."""
    return _write_idx
