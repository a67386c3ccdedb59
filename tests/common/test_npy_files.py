"""The one checked reader of .npy/.npz arrays from disk (common.npy_files): no pickles, numbers
only, the expected dimensions, no NaN or Inf, each refusal naming the file and the array."""

from __future__ import annotations

import io

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.npy_files import load_npy, load_npz


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_floats_are_refused_naming_the_file(tmp_path, value):
    x = np.ones((3, 2))
    x[2, 1] = value
    np.save(tmp_path / "r.npy", x)
    with pytest.raises(InvalidInputError, match=r"r\.npy holds NaN or Inf"):
        load_npy(tmp_path / "r.npy", str(tmp_path / "r.npy"))
    np.savez(tmp_path / "k.npz", rotation=np.eye(2), translation=x[2])
    with pytest.raises(InvalidInputError, match=r"k\.npz: array 'translation' holds NaN or Inf"):
        load_npz(tmp_path / "k.npz", str(tmp_path / "k.npz"))
    assert load_npy(tmp_path / "r.npy", "r", finite=False).shape == (3, 2)  # the caller checks


def test_pickles_objects_texts_and_wrong_dimensions_are_refused():
    with pytest.raises(InvalidInputError, match=r"not a readable \.npy array"):
        load_npy(_npy(np.array([{"a": 1}], dtype=object)), "the query")
    with pytest.raises(InvalidInputError, match="holds a <U1 array; expected integers"):
        load_npy(_npy(np.array(["a"])), "the query")
    with pytest.raises(InvalidInputError, match="holds a complex128 array"):
        load_npy(_npy(np.ones(2, dtype=complex)), "the query")
    with pytest.raises(InvalidInputError, match=r"shape \(2,\); expected 2 dimension"):
        load_npy(_npy(np.ones(2)), "records file r.npy", ndim=2)
    with pytest.raises(InvalidInputError, match=r"not a readable \.npy array"):
        load_npy(b"not numpy", "x.npy")
    assert load_npy(_npy(np.arange(3)), "x", ndim=(1, 2)).tolist() == [0, 1, 2]


def test_an_npz_where_an_npy_belongs_and_the_reverse_are_named(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.ones(2))
    with pytest.raises(InvalidInputError, match=r"is an \.npz archive"):
        load_npy(tmp_path / "a.npz", "a.npz")
    np.save(tmp_path / "b.npy", np.ones(2))
    with pytest.raises(InvalidInputError, match=r"is one \.npy array"):
        load_npz(tmp_path / "b.npy", "b.npy")
