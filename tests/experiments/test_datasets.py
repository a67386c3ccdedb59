"""Loaders of the bench's data sets: IDX, .npz, .npy, .csv, and the synthetic identities."""

import struct

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.datasets import (
    load_array_file,
    load_mnist_idx,
    make_synthetic,
    read_idx,
)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_mnist_idx_pair_round_trips_images_and_labels(tmp_path, rng, suffix, write_idx):
    images = rng.integers(0, 256, size=(7, 4, 5), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7, dtype=np.uint8)
    write_idx(tmp_path / f"img{suffix}", images, 0x08)
    write_idx(tmp_path / f"lab{suffix}", labels, 0x08)
    data = load_mnist_idx(tmp_path / f"img{suffix}", tmp_path / f"lab{suffix}")
    np.testing.assert_array_equal(data.x, images.reshape(7, -1) / 255.0)
    np.testing.assert_array_equal(data.y, labels)
    assert data.image_shape == (4, 5)


def test_idx_reader_keeps_big_endian_float_values(tmp_path, rng, write_idx):
    arr = rng.standard_normal((3, 2))
    write_idx(tmp_path / "f.idx", arr, 0x0E)
    np.testing.assert_array_equal(read_idx(tmp_path / "f.idx"), arr)


def test_idx_reader_rejects_a_truncated_payload(tmp_path):
    (tmp_path / "bad").write_bytes(struct.pack(">BBBBI", 0, 0, 8, 1, 10) + b"\x00" * 3)
    with pytest.raises(InvalidInputError, match="payload size"):
        read_idx(tmp_path / "bad")


def test_npz_loader_reads_images_labels_and_ids(tmp_path, rng):
    x = rng.random((6, 3, 3))
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(6) % 2, ids=np.arange(6) // 2)
    data = load_array_file(tmp_path / "d.npz")
    np.testing.assert_array_equal(data.x, x.reshape(6, 9))
    np.testing.assert_array_equal(data.ids, np.arange(6) // 2)
    assert data.image_shape == (3, 3)


def test_npy_and_csv_loaders_split_label_and_id_columns(tmp_path, rng):
    feats = rng.random((5, 3))
    table = np.column_stack([np.arange(5) % 3, feats, np.arange(5)])  # id, features, label
    np.save(tmp_path / "t.npy", table)
    np.savetxt(tmp_path / "t.csv", table, delimiter=",", header="id,a,b,c,label", comments="")
    for name in ("t.npy", "t.csv"):
        data = load_array_file(tmp_path / name, label_column=-1, id_column=0)
        np.testing.assert_allclose(data.x, feats, rtol=1e-12)  # CSV keeps 18 digits
        np.testing.assert_array_equal(data.y, np.arange(5))
        np.testing.assert_array_equal(data.ids, np.arange(5) % 3)


def test_loader_names_an_unsupported_file_type(tmp_path):
    (tmp_path / "x.txt").write_text("1,2")
    with pytest.raises(InvalidInputError, match="unsupported file type"):
        load_array_file(tmp_path / "x.txt")


def test_synthetic_identities_keep_one_label_per_identity(rng):
    data = make_synthetic(rng, n=400, d=8, classes=4, identities=40)
    assert data.ids is not None and len(np.unique(data.ids)) == 40
    for k in np.unique(data.ids):
        assert len(np.unique(data.y[data.ids == k])) == 1
