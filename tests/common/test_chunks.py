"""Passes over memory maps a chunk at a time (issue 31): nothing is lost when pages are let go
of, and the rows picked are the rows flagged."""

import numpy as np
import pytest

from noisyanchor.common.chunks import all_finite, let_go, row_chunks


def test_letting_go_of_mapped_rows_keeps_what_was_written(tmp_path):
    """Issue 31: dropping a memory map's pages from the resident set (written or read, through
    views) loses nothing: the file and the map still hold every row."""
    z = np.lib.format.open_memmap(tmp_path / "z.npy", mode="w+", dtype=np.float64,
                                  shape=(5000, 7))
    expected = np.arange(z.size, dtype=np.float64).reshape(z.shape)
    for rows in row_chunks(len(z), 333, release=z):
        z[rows] = expected[rows]
    view = np.asarray(z)[100:]
    let_go(view, slice(0, len(view)))
    let_go(expected, slice(0, 10))  # in memory: nothing to do
    np.testing.assert_array_equal(z, expected)
    z.flush()
    read = np.load(tmp_path / "z.npy", mmap_mode="r")
    total = sum(float(read[rows].sum()) for rows in row_chunks(len(read), 777, release=read))
    assert total == expected.sum()
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), expected)


def test_rows_of_a_memory_map_are_the_flagged_rows(tmp_path, rng, monkeypatch):
    import noisyanchor.common.chunks as chunks

    z = rng.standard_normal((1000, 3))
    np.save(tmp_path / "z.npy", z)
    mapped = np.load(tmp_path / "z.npy", mmap_mode="r")
    flags = rng.random(1000) < 0.2
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 64)
    np.testing.assert_array_equal(chunks.rows_of(mapped, flags), z[flags])
    assert chunks.rows_of(mapped, np.zeros(1000, bool)).shape == (0, 3)
    with pytest.raises(ValueError, match="one flag per row"):
        chunks.rows_of(mapped, flags[1:])


def test_all_finite_finds_a_nan_and_an_overflowing_sum_of_finite_values():
    z = np.full((50, 4), 1e308)
    assert all_finite(z)  # the sum overflows: the chunks are checked one by one
    z[37, 2] = np.nan
    assert not all_finite(z) and all_finite(np.zeros((0, 4)))
