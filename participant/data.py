"""A participant's local records: ``.csv`` with a header, ``.npz`` or ``.npy``, read into the
matrix the protocol sees, ``X_i`` (``n x d_in``) after the federation's public preprocessing.

One loader for every use of a site's records (the upload, the colluder's disclosure, a release
query, prediction on new records), so that every record goes through the same chain: read ->
schema checks -> public preprocessing (typed columns) -> (the caller's) public projection ``F``
-> the site's key.

* ``.csv``: a header row; columns are found by name. With a typed schema
  (:class:`common.tabular.TabularSchema`) the declared columns are encoded and others ignored;
  without one every column but the label and split columns is a number. The label column is
  the schema's ``label`` or ``label_column``; an optional split column ``tag_column`` holds
  ``train`` / ``validation`` / ``test``. Read by :func:`common.tabular.read_table` (streaming;
  every error names the file, line, column and value).
* ``.npz``: arrays ``x`` (``n x d_in``) and ``labels`` (``n``), optionally ``tags`` and
  ``feature_names`` (``d_in`` strings).
* ``.npy``: one 2-D numeric array; the labels are column ``label_index`` (default: the last).

A table for prediction may lack the label column (``require_labels=False``). Records never
leave the participant except through its GDP upload.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.npy_files import NUMERIC, load_npy, load_npz
from noisyanchor.common.schema import RecordSchema
from noisyanchor.common.splits import SPLIT_NAMES
from noisyanchor.common.tabular import TableError, read_table, read_table_chunks
from noisyanchor.common.tabular.reader import CHUNK_ROWS


@dataclass(frozen=True)
class LocalData:
    """Records ``X_i`` after the public preprocessing (``n_i x d_in``), labels, split tags,
    encoded feature names and where each record is in the file.

    Attributes
    ----------
    x : (n, d_in) float64 ndarray
    labels : (n,) int64 ndarray or None
        None: a table without labels, read for prediction.
    tags : (n,) int8 ndarray or None
        None: not given.
    feature_names : tuple of str or None
        None: not given (an ``.npy`` file).
    lines : (n,) int64 ndarray or None
        The line each record starts on in a CSV file (header: line 1), or its 1-based row in
        an ``.npz``/``.npy`` array; what messages about a record name.
    """

    x: np.ndarray
    labels: np.ndarray | None
    tags: np.ndarray | None
    feature_names: tuple[str, ...] | None = None
    lines: np.ndarray | None = None


def _labels(values: np.ndarray, shown: str) -> np.ndarray:
    labels = np.asarray(values)
    if labels.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(labels) | (labels != np.round(labels)))
        if bad.size:
            raise TableError(shown, "{value} is not an integer label", line=int(bad[0]) + 1,
                             column="labels", value=repr(float(labels[bad[0]])))
    elif labels.dtype.kind not in "iub":
        raise TableError(shown, f"labels must be integers, got dtype {labels.dtype}",
                         column="labels")
    return labels.astype("<i8")


def _tags(values: np.ndarray, shown: str) -> np.ndarray:
    tags = np.asarray(values)
    if tags.dtype.kind in "US":
        by_name = {v: k for k, v in SPLIT_NAMES.items()}
        unknown = sorted(set(tags.astype(str).tolist()) - set(by_name))
        if unknown:
            raise TableError(shown, f"unknown split tag(s) {unknown}; expected "
                             f"{sorted(by_name)}", column="tags")
        tags = np.array([by_name[t] for t in tags.astype(str)])
    if tags.dtype.kind not in "iu" or not np.isin(tags, list(SPLIT_NAMES)).all():
        raise TableError(shown, f"split tags must be in {sorted(SPLIT_NAMES)}", column="tags")
    return tags.astype("|i1")


def _finite_matrix(x: np.ndarray, shown: str, names: tuple[str, ...] | None) -> np.ndarray:
    """``x`` as a finite float64 matrix; the first NaN/Inf is named by row and column."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TableError(shown, f"the records must be numbers, got dtype {np.asarray(x).dtype}",
                         column="x") from None
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise TableError(shown, f"the records must be a non-empty 2-D array, got shape "
                         f"{arr.shape}", column="x")
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise TableError(shown, "{value} is not a finite number", line=i + 1,
                         column=names[j] if names else f"field {j + 1}",
                         value=repr(float(arr[i, j])),
                         hint=f"{len(bad)} NaN or Inf value(s) in all (the line is the row)")
    return arr


def _load_npz(path: Path, shown: str, require_labels: bool) -> LocalData:
    # NaN/Inf are named by row and column by _finite_matrix and _labels, not by the loader.
    z = load_npz(path, shown, kinds=NUMERIC + "US", finite=False)
    needed = {"x", "labels"} if require_labels else {"x"}
    missing = needed - set(z)
    if missing:
        raise TableError(shown, f"the .npz file needs arrays {sorted(needed)} (missing "
                         f"{sorted(missing)}; has {sorted(z)})")
    names = (tuple(str(n) for n in z["feature_names"].reshape(-1))
             if "feature_names" in z else None)
    labels = _labels(z["labels"], shown) if "labels" in z else None
    return LocalData(_finite_matrix(z["x"], shown, names), labels,
                     _tags(z["tags"], shown) if "tags" in z else None, names)


def _load_npy(path: Path, shown: str, label_index: int, require_labels: bool) -> LocalData:
    arr = load_npy(path, shown, finite=False)  # _finite_matrix names the row and column
    if not require_labels:
        return LocalData(_finite_matrix(arr, shown, None), None, None)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise TableError(shown, f"a .npy file must be 2-D with features and a label column, "
                         f"got shape {arr.shape}")
    if not -arr.shape[1] <= label_index < arr.shape[1]:
        raise TableError(shown, f"label_index {label_index} is outside the {arr.shape[1]} "
                         "columns")
    keep = np.ones(arr.shape[1], dtype=bool)
    keep[label_index] = False
    return LocalData(_finite_matrix(arr[:, keep], shown, None),
                     _labels(arr[:, label_index], shown), None)


def load_local_data(path: Path, *, schema: RecordSchema | None = None,
                    label_column: str = "label", tag_column: str = "split",
                    label_index: int = -1, require_labels: bool = True,
                    delimiter: str = ",", decimal: str = ".") -> LocalData:
    """Load, check and preprocess a participant's records (formats: the module docstring).

    Parameters
    ----------
    path : Path
    schema : RecordSchema, optional
        The federation's schema as the analyst serves it; its typed columns
        (``schema.tabular``) define the preprocessing of a CSV table. A plain schema is
        checked by the caller (:meth:`RecordSchema.check`).
    label_column, tag_column : str
        CSV column names of the labels (unless the schema names it) and the split tags.
    label_index : int
        Label column of a ``.npy`` file.
    require_labels : bool
        False: a table without labels is read too (prediction input; ``labels`` is None).
    delimiter, decimal : str
        Between the values of a CSV file, and the decimal mark of its numbers.

    Raises
    ------
    TableError
        Naming the file, and where it applies the line (or row), column and value.
    """
    path = Path(path)
    shown = str(path)
    suffix = path.suffix.lower()
    tabular = schema.tabular if schema is not None else None
    if suffix == ".csv":
        table = read_table(path, tabular, label_column=label_column, tag_column=tag_column,
                           require_label=require_labels, delimiter=delimiter, decimal=decimal)
        return LocalData(table.x, table.labels, table.tags, table.feature_names, table.lines)
    if suffix not in (".npz", ".npy"):
        raise TableError(shown, f"unsupported data format {suffix!r}; use .csv, .npz or .npy")
    if tabular is not None:
        raise TableError(shown, "the federation declares typed columns, which are read from a "
                         "table with a header: export the records as .csv")
    if not path.is_file():
        raise TableError(shown, "the file does not exist")
    try:
        data = (_load_npz(path, shown, require_labels) if suffix == ".npz"
                else _load_npy(path, shown, label_index, require_labels))
    except (OSError, ValueError) as err:
        if isinstance(err, InvalidInputError):
            raise
        raise TableError(shown, f"cannot read the data file ({err})") from None
    n = len(data.x)
    for name, values in (("labels", data.labels), ("tags", data.tags)):
        if values is not None and len(values) != n:
            raise TableError(shown, f"{n} records but {len(values)} {name}", column=name)
    if data.feature_names is not None and len(data.feature_names) != data.x.shape[1]:
        raise TableError(shown, f"{len(data.feature_names)} feature names for "
                         f"{data.x.shape[1]} feature columns")
    return LocalData(data.x, data.labels, data.tags, data.feature_names,
                     np.arange(1, n + 1, dtype=np.int64))


def local_data_chunks(path: Path, *, schema: RecordSchema | None = None,
                      label_column: str = "label", tag_column: str = "split",
                      label_index: int = -1, require_labels: bool = True,
                      delimiter: str = ",", decimal: str = ".",
                      chunk_rows: int = CHUNK_ROWS) -> Iterator[LocalData]:
    """:func:`load_local_data`'s records ``chunk_rows`` at a time (the same parameters, checks
    and errors): a CSV table is streamed (:func:`common.tabular.read_table_chunks`), so memory
    is one chunk whatever its size; an ``.npz``/``.npy`` array is loaded whole, then sliced."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        tabular = schema.tabular if schema is not None else None
        for table in read_table_chunks(path, tabular, label_column=label_column,
                                       tag_column=tag_column, require_label=require_labels,
                                       delimiter=delimiter, decimal=decimal,
                                       chunk_rows=chunk_rows):
            yield LocalData(table.x, table.labels, table.tags, table.feature_names, table.lines)
        return
    data = load_local_data(path, schema=schema, label_column=label_column,
                           tag_column=tag_column, label_index=label_index,
                           require_labels=require_labels, delimiter=delimiter,
                           decimal=decimal)
    for start in range(0, len(data.x), chunk_rows):
        rows = slice(start, start + chunk_rows)
        yield LocalData(data.x[rows], None if data.labels is None else data.labels[rows],
                        None if data.tags is None else data.tags[rows], data.feature_names,
                        None if data.lines is None else data.lines[rows])
