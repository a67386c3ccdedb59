"""Typed columns of a federation's record schema and their public preprocessing.

Every site encodes its table with exactly these parameters *before* GDP (SPEC.md section 1): GDP
preserves distances and the protocol's noise is isotropic, so a column in the thousands would
dominate every distance and a column in ``[0, 1]`` drown in the noise; once the records are
rotated nobody can rescale a column any more. The encoded width is the protocol's ``d_in``.

* :class:`NumericColumn`: a number, mapped to ``(x - center) / scale`` or to
  ``(x - min) / (max - min)`` with public parameters (or left as it is).
* :class:`CategoricalColumn`: one of the declared ``categories``, one-hot encoded (one column
  per category, in declared order); an unknown category is refused or mapped to a declared one.
* :class:`BooleanColumn`: true/false, as 1.0/0.0.

Each column has a missing-value policy: ``refuse`` (the default) or ``fill`` with a declared
public value, used as if the cell held it. Columns encode one chunk of cells at a time
(:meth:`Column.encode`) and report a bad cell as a :class:`CellError` with its index in the
chunk; the table reader adds the file, line and column (:mod:`common.tabular.reader`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from noisyanchor.common.errors import InvalidInputError

#: Missing-value policies of a column.
MISSING_POLICIES = ("refuse", "fill")

#: What ``unknown`` may say besides naming a declared category.
UNKNOWN_REFUSE = "refuse"

#: Most typed columns a schema may declare, categories a categorical column may declare, and
#: encoded columns (``d_in``) a typed schema may encode to: far above a table a federation
#: aligns (each record is a ``d_in``-vector, each site's map ``d_in x d_in``), and low enough
#: that every check of a project file, a config or a served schema stays a fraction of a
#: second. Stated in every refusal, which comes before the columns are built.
MAX_SCHEMA_COLUMNS = 10_000
MAX_COLUMN_CATEGORIES = 10_000
MAX_ENCODED_WIDTH = 100_000

#: Cell texts a boolean column reads as true / false by default (compared in lower case).
TRUE_TOKENS = ("true", "t", "yes", "y", "1")
FALSE_TOKENS = ("false", "f", "no", "n", "0")


class CellError(Exception):
    """A cell of a chunk that a column cannot encode.

    ``index`` is the cell's position in the chunk; ``problem`` phrases what is wrong with
    ``{value}`` standing for the cell (see :class:`common.tabular.errors.TableError`).
    """

    def __init__(self, index: int, problem: str, value: str | None = None,
                 hint: str = "") -> None:
        super().__init__(problem)
        self.index, self.problem, self.value, self.hint = index, problem, value, hint


#: Texts exports commonly write for a missing cell (compared in lower case): a cell holding
#: one that the schema does not declare in ``missing_tokens`` gets a hint saying how to.
MISSING_MARKERS = frozenset({"na", "n/a", "#n/a", "null", "none", "nil", "missing", "?", "-",
                             "--", "."})

#: The hint for such a cell (public: it quotes no value).
MISSING_MARKER_HINT = ("if the export writes this text for a missing value, fill in the value, "
                       "or ask the federation's operator to declare it in [schema] "
                       'missing_tokens (and missing = "fill" with a public fill for this column)')


def _hint(cell: str, otherwise: str) -> str:
    """:data:`MISSING_MARKER_HINT` for a cell that looks like a missing marker, else
    ``otherwise``."""
    return MISSING_MARKER_HINT if cell.casefold() in MISSING_MARKERS else otherwise


def _missing(index: int, cell: str) -> CellError:
    problem = "the cell is empty" if cell == "" else "{value} marks a missing value"
    return CellError(index, problem, cell or None,
                     "fill in the value, or ask the federation's operator to declare "
                     'missing = "fill" with a public fill value for this column')


@dataclass(frozen=True)
class Column:
    """What every column declares.

    Attributes
    ----------
    name : str
        The header name every site's table uses for it.
    missing : str
        ``"refuse"`` (a missing cell is an error) or ``"fill"`` (it is read as ``fill``).
    fill : float, str, bool or None
        The public value of a missing cell (``missing = "fill"`` only), in the column's own
        terms: a number in the column's unit, a declared category, true or false.
    unit : str
        The unit the values are in (documentation every site sees; empty: not declared).
    """

    name: str
    missing: str = "refuse"
    fill: float | str | bool | None = None
    unit: str = ""

    #: Type name in the schema (``type = "numeric"``).
    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or self.name != \
                self.name.strip():
            raise InvalidInputError(f"a column name must be non-empty text without surrounding "
                                    f"spaces, got {self.name!r}")
        if self.missing not in MISSING_POLICIES:
            raise InvalidInputError(f"column {self.name!r}: missing must be one of "
                                    f"{', '.join(MISSING_POLICIES)}, got {self.missing!r}")
        if (self.missing == "fill") != (self.fill is not None):
            raise InvalidInputError(f"column {self.name!r}: a fill value is given exactly when "
                                    'missing = "fill"')

    @property
    def width(self) -> int:
        """Encoded columns this column becomes."""
        return 1

    @property
    def encoded_names(self) -> tuple[str, ...]:
        """Names of the encoded columns (``name``, or ``name=category`` for one-hot)."""
        return (self.name,)

    def canonical(self) -> dict[str, Any]:
        """Every declared parameter, for the preprocessing digest and the wire."""
        return {"name": self.name, "type": self.kind, "missing": self.missing,
                "fill": self.fill, "unit": self.unit}

    def describe(self) -> str:
        """One line for people: name, type, parameters."""
        unit = f" [{self.unit}]" if self.unit else ""
        fill = f", missing -> {self.fill!r}" if self.missing == "fill" else ""
        return f"{self.name}{unit}: {self.kind}{fill}"

    def encode(self, cells: Sequence[str], missing_tokens: Collection[str]) -> np.ndarray:
        """The chunk's ``cells`` (text as read; surrounding spaces do not matter) as an
        ``(len(cells), width)`` float64 block.

        Each column first tries one pass at C speed over the whole chunk (``map`` of a parser or
        a dict lookup) and only when that fails walks the cells one by one, to find and name the
        first bad one.

        Raises
        ------
        CellError
            The first cell that is missing (and the policy refuses it) or cannot be encoded.
        """
        raise NotImplementedError

    def _fill_or_refuse(self, k: int, cell: str) -> Any:
        """The fill value of missing cell ``k``, or the error of refusing it."""
        if self.fill is None:
            raise _missing(k, cell)
        return self.fill


def _parses(text: str) -> bool:
    """Whether ``float(text)`` succeeds."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class NumericColumn(Column):
    """A number, scaled with public parameters.

    ``x`` becomes ``(x - center) / scale`` (``center``, ``scale > 0`` given), or
    ``(x - min) / (max - min)`` (``min < max`` given), or stays ``x`` (neither).
    """

    center: float | None = None
    scale: float | None = None
    min: float | None = None
    max: float | None = None

    kind: ClassVar[str] = "numeric"

    def __post_init__(self) -> None:
        super().__post_init__()
        where = f"column {self.name!r}"
        standard = (self.center is not None, self.scale is not None)
        ranged = (self.min is not None, self.max is not None)
        if any(standard) and any(ranged):
            raise InvalidInputError(f"{where}: give center and scale, or min and max, not both")
        if any(standard) and not all(standard):
            raise InvalidInputError(f"{where}: center and scale go together")
        if any(ranged) and not all(ranged):
            raise InvalidInputError(f"{where}: min and max go together")
        for key in ("center", "scale", "min", "max"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _finite(getattr(self, key), f"{where}: {key}"))
        if self.scale is not None and not self.scale > 0:
            raise InvalidInputError(f"{where}: scale must be > 0, got {self.scale}")
        if self.min is not None and self.max is not None and not self.max > self.min:
            raise InvalidInputError(f"{where}: max must be > min, got min {self.min}, max "
                                    f"{self.max}")
        if self.fill is not None:
            object.__setattr__(self, "fill", _finite(self.fill, f"{where}: fill"))

    @property
    def offset_factor(self) -> tuple[float, float]:
        """``(a, b)`` of the map ``x -> (x - a) / b``."""
        if self.center is not None and self.scale is not None:
            return self.center, self.scale
        if self.min is not None and self.max is not None:
            return self.min, self.max - self.min
        return 0.0, 1.0

    def canonical(self) -> dict[str, Any]:
        return super().canonical() | {"center": self.center, "scale": self.scale,
                                      "min": self.min, "max": self.max}

    def describe(self) -> str:
        scaled = (f"(x - {self.center:g}) / {self.scale:g}" if self.scale is not None
                  else f"(x - {self.min:g}) / ({self.max:g} - {self.min:g})"
                  if self.max is not None and self.min is not None else "unscaled")
        return f"{super().describe()}, {scaled}"

    def encode(self, cells: Sequence[str], missing_tokens: Collection[str]) -> np.ndarray:
        # float() is the fastest exact text-to-double parser at hand (about 4x numpy's
        # str-to-float cast); it also takes 1_000 and non-ASCII digits, refused here. A missing
        # cell fails float() unless its text is a number ("nan", "-999"), written perhaps with
        # spaces around it: a chunk holding such a number takes the slow path, which compares
        # the stripped texts.
        numbers = [float(t) for t in missing_tokens if _parses(t)]
        try:
            out = np.fromiter(map(float, cells), dtype=np.float64, count=len(cells))
            joined = "".join(cells)
            if "_" in joined or not joined.isascii() or (
                    numbers and (not np.isfinite(out).all() or np.isin(out, numbers).any())):
                raise ValueError
        except ValueError:
            out = self._parse_each(cells, missing_tokens)
        bad = np.flatnonzero(~np.isfinite(out))
        if bad.size:
            k = int(bad[0])
            raise CellError(k, "{value} is not a finite number", cells[k].strip(),
                            "NaN and Inf are not values; if the export writes them for a "
                            "missing value, ask the operator to declare that text in "
                            "[schema] missing_tokens and a fill for this column")
        a, b = self.offset_factor
        return ((out - a) / b)[:, None]

    def _parse_each(self, cells: Sequence[str], missing_tokens: Collection[str]) -> np.ndarray:
        out = np.empty(len(cells), dtype=np.float64)
        for k, raw in enumerate(cells):  # the slow path: find the first bad cell
            cell = raw.strip()
            if cell in missing_tokens:
                out[k] = self._fill_or_refuse(k, cell)
                continue
            try:
                out[k] = float(cell)
            except ValueError:
                raise CellError(k, "{value} is not a number", cell,
                                _hint(cell, "numbers use '.' as the decimal point and no "
                                      "thousands separator")) from None
            if "_" in cell or not cell.isascii():
                raise CellError(k, "{value} is not a plain decimal number", cell)
        return out


@dataclass(frozen=True)
class CategoricalColumn(Column):
    """One of the declared ``categories``, one-hot encoded in declared order.

    ``unknown`` is ``"refuse"`` (a value outside ``categories`` is an error) or the declared
    category every unknown value is read as (e.g. ``"other"``).
    """

    categories: tuple[str, ...] = field(default=())
    unknown: str = UNKNOWN_REFUSE

    kind: ClassVar[str] = "categorical"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "categories", tuple(self.categories))
        where = f"column {self.name!r}"
        check_count_limit(len(self.categories), MAX_COLUMN_CATEGORIES,
                          f"{where} declares {len(self.categories):,} categories")
        if len(self.categories) < 2:
            raise InvalidInputError(f"{where}: a categorical column declares at least 2 "
                                    f"categories, got {list(self.categories)}")
        if not all(isinstance(c, str) and c and c == c.strip() for c in self.categories):
            raise InvalidInputError(f"{where}: categories must be non-empty text without "
                                    "surrounding spaces")
        repeated = _repeated(self.categories)
        if repeated:
            raise InvalidInputError(f"{where}: categories repeat: {repeated}")
        if self.unknown != UNKNOWN_REFUSE and self.unknown not in self.categories:
            raise InvalidInputError(f"{where}: unknown must be {UNKNOWN_REFUSE!r} or one of the "
                                    f"categories, got {self.unknown!r}")
        if self.fill is not None and self.fill not in self.categories:
            raise InvalidInputError(f"{where}: fill must be one of the categories, got "
                                    f"{self.fill!r}")

    @property
    def width(self) -> int:
        return len(self.categories)

    @property
    def encoded_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}={c}" for c in self.categories)

    def canonical(self) -> dict[str, Any]:
        return super().canonical() | {"categories": list(self.categories),
                                      "unknown": self.unknown}

    def describe(self) -> str:
        shown = ", ".join(self.categories[:6]) + (", ..." if len(self.categories) > 6 else "")
        other = "refused" if self.unknown == UNKNOWN_REFUSE else f"read as {self.unknown!r}"
        return f"{super().describe()}, one-hot of {shown} (unknown {other})"

    def encode(self, cells: Sequence[str], missing_tokens: Collection[str]) -> np.ndarray:
        index = {c: j for j, c in enumerate(self.categories)}
        try:
            codes = np.fromiter(map(index.__getitem__, cells), dtype=np.intp, count=len(cells))
        except KeyError:
            codes = self._look_up_each(cells, missing_tokens, index)
        out = np.zeros((len(cells), self.width), dtype=np.float64)
        out[np.arange(len(cells)), codes] = 1.0
        return out

    def _look_up_each(self, cells: Sequence[str], missing_tokens: Collection[str],
                      index: dict[str, int]) -> np.ndarray:
        fallback = None if self.unknown == UNKNOWN_REFUSE else index[self.unknown]
        codes = np.empty(len(cells), dtype=np.intp)
        for k, raw in enumerate(cells):
            cell = raw.strip()
            if cell in missing_tokens:
                cell = str(self._fill_or_refuse(k, cell))
            j = index.get(cell, fallback)
            if j is None:
                near = [c for c in self.categories if c.casefold() == cell.casefold()]
                raise CellError(k, "{value} is not one of the declared categories", cell,
                                f"did you mean {near[0]!r}? (categories are case-sensitive)"
                                if near else _hint(cell, "declared: "
                                                   f"{', '.join(self.categories)}; fix the "
                                                   "cell, or ask the federation's operator to "
                                                   "add this category to the column, or to "
                                                   "read unknown values as a declared one "
                                                   '(the column\'s unknown = "<category>")'))
            codes[k] = j
        return codes


@dataclass(frozen=True)
class BooleanColumn(Column):
    """True or false as 1.0 / 0.0; ``true`` and ``false`` list the accepted texts (compared
    in lower case)."""

    true: tuple[str, ...] = TRUE_TOKENS
    false: tuple[str, ...] = FALSE_TOKENS

    kind: ClassVar[str] = "boolean"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "true", tuple(t.casefold() for t in self.true))
        object.__setattr__(self, "false", tuple(t.casefold() for t in self.false))
        where = f"column {self.name!r}"
        if not self.true or not self.false or set(self.true) & set(self.false):
            raise InvalidInputError(f"{where}: true and false need distinct, non-empty lists "
                                    "of texts")
        if self.fill is not None and not isinstance(self.fill, bool):
            raise InvalidInputError(f"{where}: fill must be true or false, got {self.fill!r}")

    def canonical(self) -> dict[str, Any]:
        return super().canonical() | {"true": list(self.true), "false": list(self.false)}

    def encode(self, cells: Sequence[str], missing_tokens: Collection[str]) -> np.ndarray:
        truth = dict.fromkeys(self.true, 1.0) | dict.fromkeys(self.false, 0.0)
        try:
            if any(t in cells for t in missing_tokens if t.casefold() in truth):
                raise KeyError  # a missing-value text that reads as true or false
            out = np.fromiter(map(truth.__getitem__, map(str.casefold, cells)),
                              dtype=np.float64, count=len(cells))
        except KeyError:
            out = np.empty(len(cells), dtype=np.float64)
            for k, raw in enumerate(cells):
                cell = raw.strip()
                if cell in missing_tokens:
                    out[k] = float(self._fill_or_refuse(k, cell))
                    continue
                value = truth.get(cell.casefold())
                if value is None:
                    raise CellError(k, "{value} is neither true nor false", cell,
                                    _hint(cell, f"true: {', '.join(self.true)}; false: "
                                          f"{', '.join(self.false)}")) from None
                out[k] = value
        return out[:, None]


#: Column classes by their ``type`` in the schema.
COLUMN_TYPES: dict[str, type[Column]] = {c.kind: c for c in (NumericColumn, CategoricalColumn,
                                                              BooleanColumn)}


def encode_labels(cells: Sequence[str], classes: Sequence[str]) -> np.ndarray:
    """Labels of one chunk as ``int64``: the index in ``classes`` when declared (every site
    maps the same text to the same integer), else the cells' integers (``"3"`` or ``"3.0"``).

    Raises
    ------
    CellError
        A missing label, a label outside ``classes``, or a non-integer label.
    """
    index = {c: j for j, c in enumerate(classes)}
    try:  # one pass at C speed; the loop below only names the first bad label
        out = np.fromiter(map(index.__getitem__ if index else int, cells), dtype=np.int64,
                          count=len(cells))
        joined = "".join(cells)
        if index or ("_" not in joined and joined.isascii()):  # int() takes 1_0 and other digits
            return out
    except (KeyError, ValueError):
        pass
    out = np.empty(len(cells), dtype=np.int64)
    for k, raw in enumerate(cells):
        cell = raw.strip()
        if cell == "":
            raise CellError(k, "the label is missing", None,
                            "every record needs its label; leave unlabelled records out")
        if index:
            if cell not in index:
                raise CellError(k, "{value} is not one of the declared label classes", cell,
                                f"declared: {', '.join(classes)}")
            out[k] = index[cell]
            continue
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        if not value.is_integer() or "_" in cell or not cell.isascii():
            raise CellError(k, "{value} is not an integer label", cell,
                            "labels are integers, or the schema declares label_classes")
        out[k] = int(value)
    return out


def check_count_limit(count: int, limit: int, what: str) -> None:
    """Refuse ``count`` above ``limit``, stating both (``what`` says what was counted)."""
    if count > limit:
        raise InvalidInputError(f"{what}, more than the {limit:,} a schema may declare")


def _repeated(texts: Sequence[str]) -> list[str]:
    """The texts that occur more than once in ``texts`` (the first 5), in linear time."""
    counts = Counter(texts)
    return sorted(t for t, n in counts.items() if n > 1)[:5]


def check_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    """``columns`` as a tuple, refusing an empty list, more than :data:`MAX_SCHEMA_COLUMNS`
    columns or :data:`MAX_ENCODED_WIDTH` encoded columns, or repeated names."""
    columns = tuple(columns)
    if not columns:
        raise InvalidInputError("a schema declares at least one column")
    check_count_limit(len(columns), MAX_SCHEMA_COLUMNS,
                      f"the schema declares {len(columns):,} columns")
    width = sum(c.width for c in columns)
    check_count_limit(width, MAX_ENCODED_WIDTH,
                      f"the schema's columns encode to d_in = {width:,} columns")
    repeated = _repeated([c.name for c in columns])
    if repeated:
        raise InvalidInputError(f"the schema declares column(s) {repeated} more than once")
    encoded = [n for c in columns for n in c.encoded_names]
    if len(set(encoded)) != len(encoded):
        raise InvalidInputError("two columns encode to the same name (a column named like "
                                "another's 'name=category')")
    return columns
