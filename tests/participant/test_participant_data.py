"""Local data formats of a participant, with clear errors for anything else."""

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.schema import RecordSchema
from noisyanchor.common.tabular import CategoricalColumn, NumericColumn, TabularSchema
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
    ("d.csv", "a,label\nx,1\n", "line 2, column 'a': 'x' is not a number"),
    ("d.csv", "a,label,split\n1,1,later\n", "line 2, column 'split': 'later' is not a split"),
    ("d.csv", "a,label\n1,0.5\n", "line 2, column 'label': '0.5' is not an integer label"),
    ("d.csv", "a,label\n1,nan\n", "'nan' is not an integer label"),
])
def test_bad_text_files_are_refused_with_a_reason(tmp_path, name, content, match):
    (tmp_path / name).write_text(content)
    with pytest.raises(InvalidInputError, match=match):
        load_local_data(tmp_path / name)


def test_bad_array_files_are_refused_with_a_reason(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((3, 2)))
    with pytest.raises(InvalidInputError, match=r"needs arrays .* \(missing \['labels'\]"):
        load_local_data(tmp_path / "a.npz")
    np.save(tmp_path / "b.npy", np.zeros(4))
    with pytest.raises(InvalidInputError, match="must be 2-D"):
        load_local_data(tmp_path / "b.npy")
    x = np.zeros((3, 2))
    x[1, 1] = np.nan
    np.savez(tmp_path / "c.npz", x=x, labels=[0, 1, 0], feature_names=["u", "w"])
    with pytest.raises(InvalidInputError, match="line 2, column 'w': 'nan' is not a finite"):
        load_local_data(tmp_path / "c.npz")
    (tmp_path / "d.npy").write_bytes(b"not numpy")
    with pytest.raises(InvalidInputError, match=r"not a readable \.npy array"):
        load_local_data(tmp_path / "d.npy")
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_local_data(tmp_path / "none.npz")


def test_typed_columns_are_read_from_a_csv_table_and_refused_for_arrays(tmp_path):
    tabular = TabularSchema((NumericColumn("a", center=1.0, scale=2.0),
                             CategoricalColumn("c", categories=("x", "y"))))
    schema = RecordSchema.typed(tabular)
    (tmp_path / "d.csv").write_text("c,a,label,split\ny,5,1,test\nx,1,0,train\n")
    data = load_local_data(tmp_path / "d.csv", schema=schema)
    np.testing.assert_array_equal(data.x, [[2.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    np.testing.assert_array_equal(data.lines, [2, 3])
    assert data.feature_names == ("a", "c=x", "c=y")
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 3)), labels=[0, 1])
    with pytest.raises(InvalidInputError, match=r"export the records as \.csv"):
        load_local_data(tmp_path / "d.npz", schema=schema)


def test_records_without_labels_are_read_for_prediction(tmp_path):
    (tmp_path / "new.csv").write_text("f0,f1\n1,2\n3,4\n")
    data = load_local_data(tmp_path / "new.csv", require_labels=False)
    assert data.labels is None and data.x.shape == (2, 2)
    np.savez(tmp_path / "new.npz", x=np.ones((2, 2)))
    assert load_local_data(tmp_path / "new.npz", require_labels=False).labels is None
    with pytest.raises(InvalidInputError, match="needs arrays"):
        load_local_data(tmp_path / "new.npz")
