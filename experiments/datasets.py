"""Data sets the bench runs on: scikit-learn's bundled handwritten digits (real, offline), a
synthetic Gaussian mixture (optionally with identities: several noisy records per identity), and
loaders for the user's own files (MNIST IDX, ``.npz`` / ``.npy`` / ``.csv``).

Image features are scaled to unit range; labels are integers; identity ids are optional.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import check_count

DATASETS = ("digits", "synthetic", "breast-cancer", "breast-cancer-unscaled", "fair",
            "fair-unscaled")  # the last four: TABLE_DATASETS


@dataclass(frozen=True)
class Dataset:
    """Records ``X`` (``n x d_in``) with labels ``y`` (``n``) and a name.

    Attributes
    ----------
    ids : (n,) int ndarray or None
        Identity of each record (several records per identity), for identity-disjoint splits and
        cross-record identity linkage.
    image_shape : (height, width) or None
        Shape to draw a record as an image (reconstruction grids); None for tabular rows.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    ids: np.ndarray | None = None
    image_shape: tuple[int, int] | None = None


def load_digits() -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1,797 records, 64 features), pixels / 16."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError as err:  # pragma: no cover - depends on the install
        raise InvalidInputError("the digits data set needs scikit-learn: "
                                "pip install 'noisyanchor[eval]'") from err
    bunch = sk_load_digits()
    return Dataset("digits", bunch.data.astype(np.float64) / 16.0, bunch.target.astype(np.int64),
                   image_shape=(8, 8))


def make_synthetic(
    rng: np.random.Generator, *, n: int = 2000, d: int = 32, classes: int = 5, spread: float = 1.5,
    identities: int | None = None, identity_spread: float = 1.0,
) -> Dataset:
    """Gaussian mixture: ``classes`` unit-variance clusters with means ``N(0, spread^2 I_d)``.

    With ``identities``, each identity gets a class and a centre ``class mean +
    N(0, identity_spread^2 I)``; its records are that centre plus ``N(0, 0.5^2 I)`` noise, so
    records of one identity resemble each other more than records of another identity.
    """
    n = check_count(n, "n", minimum=classes)
    d = check_count(d, "d", minimum=1)
    classes = check_count(classes, "classes", minimum=2)
    means = spread * rng.standard_normal((classes, d))
    if identities is None:
        y = np.arange(n) % classes
        rng.shuffle(y)
        return Dataset("synthetic", means[y] + rng.standard_normal((n, d)), y.astype(np.int64))
    k = check_count(identities, "identities", minimum=classes)
    if n < 2 * k:
        raise InvalidInputError(f"{n} records are too few for {k} identities (need 2 each)")
    id_class = np.arange(k) % classes
    centres = means[id_class] + identity_spread * rng.standard_normal((k, d))
    ids = np.arange(n) % k
    rng.shuffle(ids)
    x = centres[ids] + 0.5 * rng.standard_normal((n, d))
    return Dataset("synthetic", x, id_class[ids].astype(np.int64), ids.astype(np.int64))


#: Element types of the IDX format (third byte of the magic number).
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Array stored in an IDX file (MNIST's format; ``.gz`` compressed files are read too).

    The IDX header is two zero bytes, a type byte, a dimension count ``k``, then ``k`` big-endian
    32-bit sizes; numpy has no reader for it, hence this short parser.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except OSError as err:
        raise InvalidInputError(f"cannot read IDX file {path}: {err}") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise InvalidInputError(f"{path} is not an IDX file (bad magic number)")
    ndim = raw[3]
    shape = tuple(int(v) for v in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    offset = 4 + 4 * ndim
    if len(raw) - offset != dtype.itemsize * int(np.prod(shape)):
        raise InvalidInputError(f"{path}: payload size does not match the header shape {shape}")
    return np.frombuffer(raw, dtype, offset=offset).reshape(shape)


def load_mnist_idx(images: str | Path, labels: str | Path, *, name: str = "mnist") -> Dataset:
    """MNIST-style IDX pair: ``(n, H, W)`` uint8 images scaled to [0, 1], ``(n,)`` labels."""
    img = read_idx(images)
    lab = read_idx(labels)
    if img.ndim != 3 or lab.ndim != 1 or len(img) != len(lab):
        raise InvalidInputError(f"IDX images {img.shape} and labels {lab.shape} do not match")
    x = img.reshape(len(img), -1).astype(np.float64) / 255.0
    return Dataset(name, x, lab.astype(np.int64), image_shape=(img.shape[1], img.shape[2]))


def _numeric(fields: list[str]) -> bool:
    """Whether every field of a CSV line parses as a number (else the line is a header)."""
    try:
        [float(f) for f in fields]
    except ValueError:
        return False
    return True


def load_array_file(
    path: str | Path, *, x_key: str = "x", y_key: str = "y", ids_key: str = "ids",
    label_column: int = -1, id_column: int | None = None,
    image_shape: tuple[int, int] | None = None, scale: float = 1.0,
) -> Dataset:
    """Records from the user's ``.npz``, ``.npy`` or ``.csv`` file.

    * ``.npz``: arrays ``x_key`` (``n x ...``, images are flattened), ``y_key`` and optionally
      ``ids_key``.
    * ``.npy`` / ``.csv``: one record a row, the label in ``label_column`` and the identity id in
      ``id_column`` (optional); every other column is a feature. A CSV header line is skipped.

    Features are divided by ``scale`` (e.g. 255 for 8-bit images).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    ids = None
    try:
        if suffix == ".npz":
            with np.load(path) as arrays:
                if x_key not in arrays or y_key not in arrays:
                    raise InvalidInputError(f"{path} needs arrays {x_key!r} and {y_key!r}; "
                                            f"found {', '.join(arrays.files)}")
                raw_x = np.asarray(arrays[x_key])
                y = np.asarray(arrays[y_key])
                ids = np.asarray(arrays[ids_key]) if ids_key in arrays else None
            if raw_x.ndim == 3 and image_shape is None:
                image_shape = (raw_x.shape[1], raw_x.shape[2])
            x = raw_x.reshape(len(raw_x), -1)
        elif suffix in (".npy", ".csv"):
            if suffix == ".npy":
                table = np.load(path)
            else:
                with open(path) as fh:
                    first = fh.readline().strip().split(",")
                table = np.loadtxt(path, delimiter=",", skiprows=int(not _numeric(first)),
                                   ndmin=2)
            table = np.asarray(table, dtype=np.float64)
            if table.ndim != 2 or table.shape[1] < 2:
                raise InvalidInputError(f"{path}: expected a 2-D table with a label column")
            cols = table.shape[1]
            special = {label_column % cols}
            if id_column is not None:
                special.add(id_column % cols)
            y = table[:, label_column % cols]
            ids = table[:, id_column % cols] if id_column is not None else None
            x = table[:, [j for j in range(cols) if j not in special]]
        else:
            raise InvalidInputError(f"{path}: unsupported file type {suffix!r} "
                                    "(expected .npz, .npy or .csv)")
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read {path}: {err}") from err
    if len(x) != len(y) or (ids is not None and len(ids) != len(y)):
        raise InvalidInputError(f"{path}: records, labels and ids have different lengths")
    return Dataset(path.stem, x.astype(np.float64) / scale, y.astype(np.int64),
                   None if ids is None else ids.astype(np.int64), image_shape)


@dataclass(frozen=True)
class Table:
    """A table as a site would export it: header names and rows of cell texts.

    Attributes
    ----------
    label : str
        The label column's name (its cells are the label texts).
    """

    name: str
    header: tuple[str, ...]
    rows: list[list[str]]
    label: str

    def column(self, name: str) -> list[str]:
        """The cells of column ``name``."""
        j = self.header.index(name)
        return [row[j] for row in self.rows]


#: Bundled tables (``noisyanchor data split --dataset``), all offline.
TABLES = ("digits", "breast-cancer", "fair")

#: The project template (``deploy/templates/``) whose ``[schema]`` types each bundled table.
TABLE_TEMPLATES = {"breast-cancer": "federation-breast-cancer.toml",
                   "fair": "federation-fair.toml"}

#: Dataset names of the bundled typed tables: encoded as declared, or in their own units.
TABLE_DATASETS = tuple(f"{name}{form}" for name in TABLE_TEMPLATES for form in ("", "-unscaled"))

#: Fair's occupation codes (statsmodels.datasets.fair's description) as category names.
FAIR_OCCUPATIONS = {1: "student", 2: "unskilled", 3: "white-collar", 4: "skilled",
                    5: "managerial", 6: "professional"}


def _cell(value: float) -> str:
    """A number as a CSV cell: exact for the bundled data's values (at most 10 digits)."""
    return f"{value:.10g}"


def bundled_table(name: str) -> Table:
    """A bundled data set as the table a site exports: ``digits`` (64 pixel columns / 16 and an
    integer label), ``breast-cancer`` (scikit-learn's Wisconsin diagnostic data: 30 numeric
    columns by their published names, ``diagnosis`` malignant/benign) or ``fair`` (statsmodels'
    Fair affairs survey: occupations as category names, ``affair`` no/yes)."""
    if name == "digits":
        digits = load_digits()
        header = (*(f"f{j}" for j in range(64)), "label")
        rows = [[*(f"{v:.6g}" for v in x), str(int(y))] for x, y in zip(digits.x, digits.y,
                                                                         strict=True)]
        return Table(name, header, rows, "label")
    if name == "breast-cancer":
        try:
            from sklearn.datasets import load_breast_cancer
        except ImportError as err:  # pragma: no cover - depends on the install
            raise InvalidInputError("the breast cancer data set needs scikit-learn: "
                                    "pip install 'noisyanchor[eval]'") from err
        bunch = load_breast_cancer()
        header = (*(str(n) for n in bunch.feature_names), "diagnosis")
        rows = [[*(_cell(v) for v in x), str(bunch.target_names[y])]
                for x, y in zip(bunch.data, bunch.target, strict=True)]
        return Table(name, header, rows, "diagnosis")
    if name == "fair":
        try:
            from statsmodels.datasets import fair
        except ImportError as err:
            raise InvalidInputError("the fair data set is bundled with statsmodels: pip install "
                                    "statsmodels") from err
        data = fair.load_pandas().data
        numeric = ["rate_marriage", "age", "yrs_married", "children", "religious", "educ"]
        header = (*numeric, "occupation", "occupation_husb", "affair")
        rows = [[*(_cell(float(r[c])) for c in numeric), FAIR_OCCUPATIONS[int(r["occupation"])],
                 FAIR_OCCUPATIONS[int(r["occupation_husb"])], "yes" if r["affairs"] > 0 else "no"]
                for _, r in data.iterrows()]
        return Table(name, header, rows, "affair")
    raise InvalidInputError(f"unknown bundled table {name!r}; expected one of {', '.join(TABLES)}")


def table_schema(name: str, *, scaled: bool = True):
    """The typed schema of bundled table ``name`` (from its template in ``deploy/templates/``);
    ``scaled=False`` drops every numeric column's public scaling (the bench's baseline)."""
    import dataclasses
    import tomllib

    from noisyanchor import deploy
    from noisyanchor.common.tabular import NumericColumn, TabularSchema

    path = Path(deploy.__file__).parent / "templates" / TABLE_TEMPLATES[name]
    schema = TabularSchema.from_toml(tomllib.loads(path.read_text())["schema"], path)
    if scaled:
        return schema
    raw = tuple(dataclasses.replace(c, center=None, scale=None, min=None, max=None)
                if isinstance(c, NumericColumn) else c for c in schema.columns)
    return dataclasses.replace(schema, columns=raw)


def load_tabular(name: str, *, scaled: bool = True) -> Dataset:
    """Bundled table ``name`` encoded with its template's schema (``scaled=False``: numeric
    columns in their own units), as every site of its pilot encodes its share."""
    from noisyanchor.common.tabular.reader import encode_rows

    table = bundled_table(name)
    encoded = encode_rows(table_schema(name, scaled=scaled), table.header, table.rows,
                          shown=name)
    return Dataset(name if scaled else f"{name}-unscaled", encoded.x, encoded.labels)


def load_dataset(name: str, rng: np.random.Generator) -> Dataset:
    """Dataset by name: ``digits``, ``synthetic`` (``rng`` drives its generation), or a
    bundled typed table as its pilot encodes it (``breast-cancer``, ``fair``) or unscaled
    (``breast-cancer-unscaled``, ``fair-unscaled``)."""
    if name == "digits":
        return load_digits()
    if name == "synthetic":
        return make_synthetic(rng)
    base = name.removesuffix("-unscaled")
    if base in TABLE_TEMPLATES:
        return load_tabular(base, scaled=base == name)
    raise InvalidInputError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
