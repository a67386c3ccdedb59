"""Local data formats of a participant, with clear errors for anything else."""

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.participant.data import load_local_data


def test_npz_npy_and_csv_load_the_same_records(tmp_path, rng):
    x = rng.standard_normal((6, 3))
    y = np.array([0, 1, 2, 0, 1, 2])
    np.savez(tmp_path / "d.npz", x=x, labels=y, tags=np.array([0, 0, 0, 0, 2, 2]))
    np.save(tmp_path / "d.npy", np.c_[x, y])
    split = ["train"] * 4 + ["test"] * 2
    rows = ["f1,label,f2,f3,split"] + [
        ",".join([repr(float(a)), str(lab), repr(float(b)), repr(float(c)), s])
        for (a, b, c), lab, s in zip(x, y, split, strict=True)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    npz, npy, csv = (load_local_data(tmp_path / f"d.{ext}") for ext in ("npz", "npy", "csv"))
    for d in (npz, npy, csv):
        np.testing.assert_array_equal(d.x, x)  # exact: repr round-trips floats
        np.testing.assert_array_equal(d.labels, y)
    np.testing.assert_array_equal(npz.tags, csv.tags)
    assert npy.tags is None


@pytest.mark.parametrize("name, content, match", [
    ("d.txt", "1,2", "unsupported data format"),
    ("d.csv", "a,b\n1,2\n", "no label column 'label'"),
    ("d.csv", "a,label\nx,1\n", "non-numeric"),
    ("d.csv", "a,label,split\n1,1,later\n", "unknown split tag"),
    ("d.csv", "a,label\n1,0.5\n", "labels must be integers"),
    ("d.csv", "a,label\n1,nan\n", "labels must be integers"),
])
def test_bad_text_files_are_refused_with_a_reason(tmp_path, name, content, match):
    (tmp_path / name).write_text(content)
    with pytest.raises(InvalidInputError, match=match):
        load_local_data(tmp_path / name)


def test_bad_array_files_are_refused_with_a_reason(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((3, 2)))
    with pytest.raises(InvalidInputError, match="needs arrays 'x' and 'labels'"):
        load_local_data(tmp_path / "a.npz")
    np.save(tmp_path / "b.npy", np.zeros(4))
    with pytest.raises(InvalidInputError, match="must be 2-D"):
        load_local_data(tmp_path / "b.npy")
    np.savez(tmp_path / "c.npz", x=np.full((2, 2), np.nan), labels=[0, 1])
    with pytest.raises(InvalidInputError, match="NaN"):
        load_local_data(tmp_path / "c.npz")
    (tmp_path / "d.npy").write_bytes(b"not numpy")
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_local_data(tmp_path / "d.npy")
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_local_data(tmp_path / "none.npz")
