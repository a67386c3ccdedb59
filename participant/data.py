"""A participant's local records: ``.npz``, ``.npy`` or ``.csv`` with a label column.

* ``.npz``: arrays ``x`` (``n x d_in``) and ``labels`` (``n``), optionally ``tags`` and
  ``feature_names`` (``d_in`` strings).
* ``.npy``: one 2-D numeric array; the labels are column ``label_index`` (default: the last).
* ``.csv``: a header row; the label column is named ``label_column``, an optional split column
  ``tag_column`` holds ``train``/``validation``/``test``; every other column is a feature.

Records never leave the participant except through its GDP upload.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import SPLIT_NAMES
from noisyanchor.common.validation import as_matrix


@dataclass(frozen=True)
class LocalData:
    """Records ``X_i`` (``n_i x d_in``), integer labels, split tags and feature names (None:
    not given)."""

    x: np.ndarray
    labels: np.ndarray
    tags: np.ndarray | None
    feature_names: tuple[str, ...] | None = None


def _labels(values: np.ndarray, path: Path) -> np.ndarray:
    labels = np.asarray(values)
    if labels.dtype.kind == "f":
        if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
            raise InvalidInputError(f"{path}: labels must be integers")
    elif labels.dtype.kind not in "iub":
        raise InvalidInputError(f"{path}: labels must be integers, got dtype {labels.dtype}")
    return labels.astype("<i8")


def _tags(values: np.ndarray, path: Path) -> np.ndarray:
    tags = np.asarray(values)
    if tags.dtype.kind in "US":
        by_name = {v: k for k, v in SPLIT_NAMES.items()}
        unknown = sorted(set(tags.astype(str).tolist()) - set(by_name))
        if unknown:
            raise InvalidInputError(f"{path}: unknown split tag(s) {unknown}; expected "
                                    f"{sorted(by_name)}")
        tags = np.array([by_name[t] for t in tags.astype(str)])
    if tags.dtype.kind not in "iu" or not np.isin(tags, list(SPLIT_NAMES)).all():
        raise InvalidInputError(f"{path}: split tags must be in {sorted(SPLIT_NAMES)}")
    return tags.astype("|i1")


def _load_npz(path: Path) -> LocalData:
    with np.load(path, allow_pickle=False) as z:
        missing = {"x", "labels"} - set(z.files)
        if missing:
            raise InvalidInputError(f"{path}: the .npz file needs arrays 'x' and 'labels' "
                                    f"(missing {sorted(missing)}; has {sorted(z.files)})")
        names = (tuple(str(n) for n in z["feature_names"].reshape(-1))
                 if "feature_names" in z.files else None)
        return LocalData(z["x"], _labels(z["labels"], path),
                         _tags(z["tags"], path) if "tags" in z.files else None, names)


def _load_npy(path: Path, label_index: int) -> LocalData:
    arr = np.load(path, allow_pickle=False)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise InvalidInputError(f"{path}: a .npy file must be 2-D with features and a label "
                                f"column, got shape {arr.shape}")
    if not -arr.shape[1] <= label_index < arr.shape[1]:
        raise InvalidInputError(f"{path}: label_index {label_index} is outside the "
                                f"{arr.shape[1]} columns")
    keep = np.ones(arr.shape[1], dtype=bool)
    keep[label_index] = False
    return LocalData(arr[:, keep], _labels(arr[:, label_index], path), None)


def _load_csv(path: Path, label_column: str, tag_column: str) -> LocalData:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise InvalidInputError(f"{path}: a .csv file needs a header row and at least one record")
    header, body = rows[0], rows[1:]
    if label_column not in header:
        raise InvalidInputError(f"{path}: no label column {label_column!r} in the header "
                                f"{header}")
    table = np.array(body, dtype=str)
    if table.ndim != 2 or table.shape[1] != len(header):
        raise InvalidInputError(f"{path}: every row must have {len(header)} fields")
    li = header.index(label_column)
    ti = header.index(tag_column) if tag_column in header else None
    features = [j for j in range(len(header)) if j not in (li, ti)]
    try:
        x = table[:, features].astype(np.float64)
        labels = table[:, li].astype(np.float64)
    except ValueError as err:
        raise InvalidInputError(f"{path}: non-numeric feature or label: {err}") from None
    return LocalData(x, _labels(labels, path),
                     _tags(table[:, ti], path) if ti is not None else None,
                     tuple(header[j] for j in features))


def load_local_data(path: Path, *, label_column: str = "label", tag_column: str = "split",
                    label_index: int = -1) -> LocalData:
    """Load and check a participant's records (see the module docstring for the formats)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            data = _load_npz(path)
        elif suffix == ".npy":
            data = _load_npy(path, label_index)
        elif suffix == ".csv":
            data = _load_csv(path, label_column, tag_column)
        else:
            raise InvalidInputError(f"{path}: unsupported data format {suffix!r}; use .npy, "
                                    ".npz or .csv")
    except (OSError, ValueError) as err:
        if isinstance(err, InvalidInputError):
            raise
        raise InvalidInputError(f"{path}: cannot read the data file: {err}") from None
    x = as_matrix(data.x, f"{path}: records")
    if len(data.labels) != len(x) or (data.tags is not None and len(data.tags) != len(x)):
        raise InvalidInputError(f"{path}: {len(x)} records but {len(data.labels)} labels"
                                + ("" if data.tags is None else f" and {len(data.tags)} tags"))
    if data.feature_names is not None and len(data.feature_names) != x.shape[1]:
        raise InvalidInputError(f"{path}: {len(data.feature_names)} feature names for "
                                f"{x.shape[1]} feature columns")
    return LocalData(x, data.labels, data.tags, data.feature_names)
