"""A draft ``[schema]`` from one site's table, for the operator to review
(``noisyanchor schema draft --data site.csv``).

One pass over the table (the reader's streaming rows, :mod:`common.tabular.reader`), keeping per
column a count of cells, missing cells, numbers, their running mean and spread (Welford) and
range, and up to ``max_categories + 1`` distinct texts. A column is drafted as numeric when every
present cell is a number, boolean when every present cell is a true/false text, categorical when
it holds at most ``max_categories`` distinct texts, and left out (commented) otherwise (an
identifier or free text). A numeric column's ``unit`` is read from its name's end (``_mm``,
``_g``, ``_pct``, ...), and one of whole numbers that differ on every record and count through
the file (or are named like an id) without a unit is marked, in its own table, as a likely
identifier: a measurement in whole units is not one. The file says, at its top and beside
every value, that centres, scales, ranges and categories taken from one site's data are that
site's statistics, and should be replaced by public ones where they exist: they differ between
sites, and they tell every party something about this site's records.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from noisyanchor.common.tabular.columns import (
    FALSE_TOKENS,
    MAX_COLUMN_CATEGORIES,
    MAX_SCHEMA_COLUMNS,
    TRUE_TOKENS,
    check_count_limit,
)
from noisyanchor.common.tabular.errors import TableError
from noisyanchor.common.tabular.reader import (
    DECIMAL_COMMA,
    FROM_DECIMAL_COMMA,
    check_decimal,
    open_table_text,
    table_header,
    table_rows,
)

#: Distinct texts up to which a text column is drafted as categorical.
MAX_CATEGORIES = 30

#: Scalings the draft can propose for numeric columns.
SCALINGS = ("standard", "range")

#: Units read from a column name's last ``_`` part (compared in lower case): ``length_mm`` is
#: in mm. A column with a unit is a measurement, never an identifier. (No ``_min``: in
#: ``temp_min`` it is the minimum, not minutes.)
UNIT_SUFFIXES = {"mm": "mm", "cm": "cm", "m": "m", "km": "km", "um": "um", "nm": "nm",
                 "mg": "mg", "g": "g", "kg": "kg", "ug": "ug", "ml": "ml", "l": "l",
                 "ms": "ms", "s": "s", "sec": "s", "h": "h", "hr": "h",
                 "days": "days", "yrs": "years", "years": "years", "pct": "%",
                 "percent": "%", "mmhg": "mmHg", "bpm": "bpm", "kcal": "kcal",
                 "mm2": "mm2", "cm2": "cm2", "m2": "m2", "mm3": "mm3", "cm3": "cm3",
                 "degc": "degC", "celsius": "degC", "hz": "Hz", "kb": "kB", "mb": "MB"}

#: Name ends (lower case, after ``_`` or as the whole name) of columns that usually number
#: records.
ID_NAMES = ("id", "key", "no", "nr", "number", "code", "uuid", "index", "idx")

#: Header names (compared in lower case) that usually hold the label, named first when the
#: table has no ``--label`` column.
LABEL_NAMES = ("label", "labels", "target", "class", "outcome", "diagnosis", "y")


@dataclass
class ColumnStats:
    """What one pass saw of one column.

    Attributes
    ----------
    n, missing : int
        Cells, and empty ones among them.
    numbers : int
        Cells that are numbers; ``mean``, ``m2`` (Welford's sum of squared deviations),
        ``low``, ``high`` over them.
    texts : dict of str to int
        Distinct cells and their counts, kept up to ``max_categories + 1`` texts.
    overflow : bool
        More distinct texts were seen than were kept.
    whole : int
        Numbers among them that are whole.
    rising, falling : bool
        Whether the numbers, in file order, only rise (each above the last) or only fall: a
        record counter's mark.
    commas : int
        Cells that are numbers written with a decimal comma, read as texts (``decimal='.'``).
    """

    name: str
    n: int = 0
    missing: int = 0
    numbers: int = 0
    mean: float = 0.0
    m2: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    texts: dict[str, int] = field(default_factory=dict)
    overflow: bool = False
    last: float = math.nan
    whole: int = 0
    rising: bool = True
    falling: bool = True
    commas: int = 0

    def add(self, cell: str, max_categories: int, decimal: str = ".") -> None:
        self.n += 1
        if cell == "":
            self.missing += 1
            return
        if cell in self.texts:
            self.texts[cell] += 1
        elif len(self.texts) <= max_categories:
            self.texts[cell] = 1
        else:
            self.overflow = True
        try:
            value = float(cell.translate(FROM_DECIMAL_COMMA) if decimal == "," else cell)
        except ValueError:
            value = math.nan
            self.commas += bool(DECIMAL_COMMA.fullmatch(cell))
        if not math.isfinite(value) or "_" in cell or not cell.isascii():
            return
        if self.numbers:
            self.rising &= value > self.last
            self.falling &= value < self.last
        self.last = value
        self.numbers += 1
        self.whole += value.is_integer()
        delta = value - self.mean
        self.mean += delta / self.numbers
        self.m2 += delta * (value - self.mean)
        self.low, self.high = min(self.low, value), max(self.high, value)

    @property
    def present(self) -> int:
        """Cells that are not empty."""
        return self.n - self.missing

    @property
    def std(self) -> float:
        """Sample standard deviation of the numbers (0 with fewer than two)."""
        return math.sqrt(self.m2 / (self.numbers - 1)) if self.numbers > 1 else 0.0

    @property
    def unit(self) -> str:
        """The unit its name ends with (``_mm``, ``_g``, ``_pct``, ...), else empty."""
        head, _, end = self.name.casefold().rpartition("_")
        return UNIT_SUFFIXES.get(end, "") if head else ""

    @property
    def identifier(self) -> bool:
        """Whether it looks like a record number: whole numbers, one per record, counting up
        or down the file (or named like an id and spread over at least as many values as it
        has), and no unit in its name (a length in whole mm is a measurement)."""
        if self.unit or not self.numbers or self.whole != self.numbers \
                or self.numbers != self.present or self.numbers < 3 \
                or (not self.overflow and len(self.texts) < self.present):  # a value repeats
            return False
        name = self.name.casefold().replace("-", "_").replace(" ", "_")
        named = name in ID_NAMES or name.rpartition("_")[2] in ID_NAMES or name.endswith("id")
        return self.rising or self.falling or (named and self.high - self.low >= self.numbers - 1)

    @property
    def kind(self) -> str | None:
        """``numeric``, ``boolean``, ``categorical`` or None (left out)."""
        if not self.present:
            return None
        if self.numbers == self.present:
            return "numeric"
        if self.numbers + self.commas == self.present:  # numbers, some with a decimal comma
            return None
        tokens = set(TRUE_TOKENS) | set(FALSE_TOKENS)
        if not self.overflow and {t.casefold() for t in self.texts} <= tokens:
            return "boolean"
        if not self.overflow and len(self.texts) >= 2:
            return "categorical"
        return None


@dataclass(frozen=True)
class Draft:
    """A pass over one table: its name, records, every feature column's statistics and the
    label's."""

    source: str
    records: int
    columns: tuple[ColumnStats, ...]
    label: ColumnStats | None
    label_column: str
    max_categories: int = MAX_CATEGORIES

    def label_candidates(self) -> list[str]:
        """Columns that may be the label when ``label_column`` is not in the table: those
        named like a label, then the other categorical and boolean ones (at most 3). A label
        drafted as a feature column would be refused (it must not be both) or, worse, feed the
        model its own answer."""
        kinds = [c for c in self.columns if c.kind in ("categorical", "boolean")]
        named = [c for c in self.columns if c.name.casefold() in LABEL_NAMES]
        return list(dict.fromkeys(c.name for c in [*named, *kinds]))[:3]


def survey(path: Path, *, label_column: str = "label", tag_column: str = "split",
           delimiter: str = ",", decimal: str = ".",
           max_categories: int = MAX_CATEGORIES) -> Draft:
    """One streaming pass over ``path`` (errors as :func:`common.tabular.read_table`'s)."""
    path = Path(path)
    shown = str(path)
    check_decimal(decimal, delimiter)
    check_count_limit(max_categories, MAX_COLUMN_CATEGORIES,
                      f"max_categories = {max_categories:,} categories")
    with open_table_text(path, shown) as fh:
        rows = table_rows(fh, path, shown, delimiter, decimal)
        header_line, header = table_header(rows, shown, delimiter, decimal)
        if len(header) > MAX_SCHEMA_COLUMNS + 2:  # the features, the label and the tag
            raise TableError(shown, f"the header names {len(header):,} columns, more than the "
                             f"{MAX_SCHEMA_COLUMNS:,} a schema may declare (and the label and "
                             "tag columns)", line=header_line)
        stats = [ColumnStats(name) for name in header]
        records = 0
        for line, row in rows:
            if len(row) != len(header):
                raise TableError(shown, f"the row has {len(row)} fields, the header "
                                 f"{len(header)}", line=line)
            records += 1
            for s, cell in zip(stats, row, strict=True):
                s.add(cell.strip(), max_categories, decimal)
    if not records:
        raise TableError(shown, "the file has a header but no records", line=header_line)
    label = next((s for s in stats if s.name == label_column), None)
    features = tuple(s for s in stats if s.name not in (label_column, tag_column))
    return Draft(path.name, records, features, label, label_column, max_categories)


def _toml(value) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _sig(value: float) -> float:
    """``value`` to 6 significant digits (a draft's statistics need no more)."""
    return float(f"{value:.6g}")


def draft_text(draft: Draft, *, scaling: str = "standard",
               today: datetime.date | None = None) -> str:
    """The draft ``[schema]`` table as commented TOML (what ``schema draft`` writes)."""
    if scaling not in SCALINGS:
        raise TableError(draft.source, f"scaling must be one of {', '.join(SCALINGS)}, got "
                         f"{scaling!r}")
    day = (today or datetime.date.today()).isoformat()
    out = [
        f"# DRAFT [schema] from {draft.source} ({draft.records} records), written by",
        f"# 'noisyanchor schema draft' on {day}. Review every column before the federation uses",
        "# it, then give it to 'noisyanchor provision --schema' (or paste it into the project",
        "# file in place of its [schema]).",
        "#",
        "# The centres, scales, ranges and categories below are THIS SITE'S OWN STATISTICS, taken",
        "# from one site's data: other sites' data differ, and every party of the federation",
        "# reads the schema, so these numbers tell them about this site's records. Replace them",
        "# with public values wherever they exist (a published reference range, a standard, the",
        "# unit's natural bounds, values agreed before anyone looked at the data). Add the",
        "# categories other sites hold, and the public fill of a missing cell.",
        "",
        "[schema]",
    ]
    label = draft.label
    if label is None:
        candidates = draft.label_candidates()
        out.append(f"# no column {draft.label_column!r} in the table: name the label column")
        if candidates:
            out.append(f"# ({' or '.join(map(repr, candidates))}? then leave its column below "
                       "out, or run the draft again with --label)")
        out.append(f'# label = "{draft.label_column}"')
    else:
        out.append(f"label = {_toml(label.name)}")
        if label.numbers != label.present and not label.overflow:
            classes = sorted(label.texts)
            out.append(f"label_classes = {_toml(classes)}  # seen at this site; every site maps "
                       "them to 0, 1, ... in this order")
        elif label.overflow:
            out.append(f"# {label.name!r} holds more than {draft.max_categories} distinct texts: "
                       "is it the label?")
    for stats in draft.columns:
        out += ["", *_column_lines(stats, scaling, draft.max_categories)]
    return "\n".join(out) + "\n"


def _column_lines(s: ColumnStats, scaling: str, max_categories: int) -> list[str]:
    kind = s.kind
    seen = f"{s.present} of {s.n} cells present"
    if kind is None:
        why = ("every cell is empty" if not s.present else
               "numbers with a decimal comma: run the draft again with --decimal ','"
               if s.commas else
               f"more than {max_categories} distinct texts (an identifier or free text?)"
               if s.overflow else "one text only")
        return [f"# column {s.name!r} left out: {why}; {seen}"]
    lines = ["[[schema.column]]", f"name = {_toml(s.name)}", f'type = "{kind}"']
    if kind == "numeric":
        if s.identifier:  # inside its own table: a comment above would sit with the last one
            lines.append("# a different whole number on every record (counting through the "
                         "file, or named like an id): an identifier? If so, leave this column "
                         "out (it is no feature and it names records)")
        seen_here = (f"seen at this site: min {_sig(s.low):g}, max {_sig(s.high):g}, mean "
                     f"{_sig(s.mean):g}, standard deviation {_sig(s.std):g}")
        lines.append(f"unit = {_toml(s.unit)}  # from the name; {seen_here}" if s.unit
                     else f'# unit = ""  # {seen_here}')
        if scaling == "standard":
            scale = _sig(s.std) if s.std > 0 else 1.0
            lines += [f"center = {_toml(_sig(s.mean))}  # this site's mean: use a public value",
                      f"scale = {_toml(scale)}  # this site's standard deviation: use a public "
                      "value"]
        else:
            high = _sig(s.high) if s.high > s.low else _sig(s.low) + 1.0
            lines += [f"min = {_toml(_sig(s.low))}  # this site's minimum: use a public bound",
                      f"max = {_toml(high)}  # this site's maximum: use a public bound"]
    elif kind == "categorical":
        cats = sorted(s.texts)
        lines.append(f"categories = {_toml(cats)}  # seen at this site: add the others'")
        lines.append('unknown = "refuse"  # or the category unknown values are read as')
    if s.missing:  # a draft that refused its own table's empty cells would fail its pilot
        lines += ['missing = "fill"  # or "refuse": every site then fills its empty cells in',
                  f"fill = {_toml(_fill(s))}  # this site's {_FILLS[kind]}, for its {s.missing} "
                  f"of {s.n} empty cells: use a public value"]
    return lines


#: What a drafted fill value is, by column kind (:func:`_fill`).
_FILLS = {"numeric": "mean", "categorical": "most frequent category",
          "boolean": "most frequent value"}


def _fill(s: ColumnStats) -> float | str | bool:
    """The draft's fill value of column ``s``'s empty cells: this site's mean, or its most
    frequent category or true/false value."""
    if s.kind == "numeric":
        return _sig(s.mean)
    common = max(sorted(s.texts), key=s.texts.__getitem__)
    return common.casefold() in TRUE_TOKENS if s.kind == "boolean" else common
