"""Reading a site's CSV table into the encoded records ``X_i`` (``n x d_in``), streaming.

The parser is the standard library's :mod:`csv`: well kept (CPython's own C reader), streaming
(one row at a time), dependency-free, RFC 4180 quoting included, and it reports the physical
line it is on (``reader.line_num``), which every error here names. pandas or pyarrow would read
faster but add heavy core dependencies every site must install, and their errors name neither
the line nor the column of a bad cell.

Rows are encoded in chunks of :data:`CHUNK_ROWS` (:meth:`Column.encode`), so the text of at most
one chunk is held at a time, into arrays allocated once for as many records as the file has
lines (one fast pass counting newlines): memory is the encoded float64 matrix (8 bytes a value,
about a CSV cell's own size) plus one chunk (``benchmarks/bench_tabular.py`` measures it).

Every problem is a :class:`~common.tabular.errors.TableError` naming the file, the line, the
column and the value: an empty file, a header without records, a duplicated or empty header
name, a header that is one field holding another delimiter (a ``;`` export read as ``,``),
UTF-16 text or bytes that are not UTF-8, short and long rows, broken quoting, a missing label
column, a declared column the header lacks, a missing, non-numeric, NaN/Inf or unknown cell, a
label outside the declared classes, an unknown split tag. A UTF-8 byte-order mark (what Excel
writes) is read and ignored; blank lines are skipped.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import itertools
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import SPLIT_NAMES
from noisyanchor.common.tabular.columns import CellError, Column, NumericColumn, encode_labels
from noisyanchor.common.tabular.errors import TableError
from noisyanchor.common.tabular.schema import DEFAULT_MISSING_TOKENS, TabularSchema

log = logging.getLogger(__name__)

#: Rows encoded at a time.
CHUNK_ROWS = 8192

#: Delimiters recognised when a header turns out to be one field holding one of them.
OTHER_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "pipe", ",": "comma"}

#: Records looked at, after a header in another delimiter, for the export's other habits.
SNIFF_ROWS = 50

#: A number written with a decimal comma (``3,5``, ``-0,25``), and one with thousands separators
#: (``1.234,5``, ``1 234``, ``1'234.5``; ``1.234`` alone may be a decimal point, so it is not).
DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:(?:\.\d{3})+,\d+|(?:[ '\u00a0]\d{3})+(?:[.,]\d+)?)")

#: The fix of a table whose numbers have a decimal comma.
DECIMAL_COMMA_FIX = ("set [participant] decimal = ',' in the site's config (schema check reads "
                     "it; else --decimal ','), or export numbers with '.' as the decimal point")

#: Swaps a decimal comma and a point: ``3,5`` reads as 3.5, and a point (a thousands separator
#: in such an export, ``1.234,5``) becomes a comma that no number holds, refused with its cell.
FROM_DECIMAL_COMMA = str.maketrans({",": ".", ".": ","})

#: Byte-order marks of encodings other than UTF-8 (refused: export as UTF-8).
_FOREIGN_BOMS = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32",
                 codecs.BOM_UTF16_LE: "UTF-16", codecs.BOM_UTF16_BE: "UTF-16"}


@dataclass(frozen=True)
class EncodedTable:
    """A table after the public preprocessing.

    Attributes
    ----------
    x : (n, d_in) float64 ndarray
        The encoded records ``X_i``.
    labels : (n,) int64 ndarray or None
        None when the table has no label column and none was required (prediction input).
    tags : (n,) int8 ndarray or None
        Split tags (``common.splits``) when the table has the split column.
    lines : (n,) int64 ndarray
        The line of the file each record starts on (the header is line 1).
    feature_names : tuple of str
        The ``d_in`` encoded column names.
    ignored : tuple of str
        Header columns the schema does not use (left out of ``x``).
    """

    x: np.ndarray
    labels: np.ndarray | None
    tags: np.ndarray | None
    lines: np.ndarray
    feature_names: tuple[str, ...]
    ignored: tuple[str, ...] = ()


def open_table_text(path: Path, shown: str):
    """``path`` as UTF-8 text for :mod:`csv` (a UTF-8 byte-order mark is skipped)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except FileNotFoundError:
        raise TableError(shown, "the file does not exist") from None
    except IsADirectoryError:
        raise TableError(shown, "is a folder, not a file") from None
    except OSError as err:
        raise TableError(shown, f"cannot be read ({err.strerror})") from None
    for bom, name in _FOREIGN_BOMS.items():
        if head.startswith(bom):  # UTF-32 first: its mark starts with UTF-16's
            raise TableError(shown, f"the file is {name} text", line=1,
                             hint="export it as UTF-8 (CSV UTF-8 in a spreadsheet's Save As)")
    if head.startswith(codecs.BOM_UTF8):
        log.info("%s starts with a UTF-8 byte-order mark; it is ignored", shown)
    return path.open(encoding="utf-8-sig", newline="")


def _undecodable_line(path: Path) -> tuple[int, bytes]:
    """The first line of ``path`` that is not UTF-8, and its first bad byte (the text layer
    decodes in blocks, so the reader's own line count is not where the bad byte is)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                decoder.decode(raw)
            except UnicodeDecodeError as err:
                return number, raw[err.start:err.start + 1]
    return 0, b""


def table_rows(fh, path: Path, shown: str, delimiter: str,
               decimal: str = ".") -> Iterator[tuple[int, list[str]]]:
    """``(first line, fields)`` of every non-blank row (fields as read: the columns ignore
    surrounding spaces); ``decimal`` only shapes the message about bytes that are not UTF-8."""
    reader = csv.reader(fh, delimiter=delimiter, strict=True)
    end = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:  # the row starting here (an open quote runs on to the end)
            raise TableError(shown, f"the row cannot be parsed ({err})", line=end + 1,
                             hint="check the quotes on this line: a quoted value must end "
                                  "with a quote before the next delimiter") from None
        except UnicodeDecodeError:
            line, byte = _undecodable_line(path)
            with path.open(encoding="utf-8", errors="replace", newline="") as text:
                head = [t.rstrip("\r\n") for t in itertools.islice(text, SNIFF_ROWS + 1)]
            also, fixes = _dialect(head, delimiter, decimal)
            raise _dialect_error(shown, line or None, [f"byte 0x{byte.hex()} is not UTF-8 text",
                                                       *also],
                                 ["export the table as UTF-8", *fixes]) from None
        start, end = end + 1, reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        yield start, row


def table_header(rows: Iterator[tuple[int, list[str]]], shown: str,
                 delimiter: str, decimal: str = ".") -> tuple[int, list[str]]:
    try:
        line, header = next(rows)
    except StopIteration:
        raise TableError(shown, "the file is empty", hint="expected a header line naming the "
                         "columns, then one record a line") from None
    header = [name.strip() for name in header]
    if len(header) == 1 and any(d != delimiter and d in header[0] for d in OTHER_DELIMITERS):
        # The rows as written (quotes aside): the export's other habits, in the same message.
        texts = [header[0], *(delimiter.join(row) for _, row in
                              itertools.islice(rows, SNIFF_ROWS))]
        raise _dialect_error(shown, line, *_dialect(texts, delimiter, decimal))
    seen: dict[str, int] = {}
    for j, name in enumerate(header, 1):
        if not name:
            raise TableError(shown, "the header names no column here", line=line,
                             column=f"field {j}", hint="every column needs a name")
        if name in seen:
            raise TableError(shown, f"the header names this column twice (fields {seen[name]} "
                             f"and {j})", line=line, column=name,
                             hint="rename or drop one of them")
        seen[name] = j
    return line, header


def _dialect(lines: Sequence[str], delimiter: str,
             decimal: str = ".") -> tuple[list[str], list[str]]:
    """The export habits that ``lines`` (the header's text, then records' as written) show
    against reading with ``delimiter`` and ``decimal``: another delimiter in a one-field header,
    decimal commas, thousands separators. Returns what is seen, each with where (line and
    column; never a value), and the fix of each, so that one message names every fix."""
    header = next(csv.reader(lines[:1], delimiter=delimiter), [""])
    other = next((d for d in OTHER_DELIMITERS if d != delimiter and len(header) == 1
                  and d in header[0]), None)
    split = other or delimiter
    columns = [c.strip() for c in next(csv.reader(lines[:1], delimiter=split), [])]
    seen: dict[str, str] = {}
    for at, text in enumerate(lines[1:], 2):
        for j, cell in enumerate(c.strip() for c in next(csv.reader([text], delimiter=split), [])):
            where = f"line {at}, column {columns[j] if j < len(columns) else f'field {j + 1}'!r}"
            if split != "," and decimal != "," and DECIMAL_COMMA.fullmatch(cell):
                seen.setdefault("decimal", where)
            if _THOUSANDS.fullmatch(cell):
                seen.setdefault("thousands", where)
    also, fixes = [], []
    if other is not None:
        name = OTHER_DELIMITERS[other]
        also.append(f"the header is a single field holding {other!r}: the file seems "
                    f"{name}-separated, not "
                    f"{OTHER_DELIMITERS.get(delimiter, repr(delimiter))}-separated")
        fixes.append(f"set [participant] delimiter = {other!r} in the site's config (schema "
                     f"check --schema <the kit's config> reads it; else --delimiter {other!r}), "
                     f"or export it with {delimiter!r} between values")
    if "decimal" in seen:
        also.append(f"its numbers have a decimal comma ({seen['decimal']})")
        fixes.append(DECIMAL_COMMA_FIX)
    if "thousands" in seen:
        also.append(f"thousands separators ({seen['thousands']})")
        fixes.append("export numbers without thousands separators")
    return also, fixes


def _dialect_error(shown: str, line: int | None, problems: list[str],
                   fixes: list[str]) -> TableError:
    """Every problem of the export's dialect (:func:`_dialect`) and every fix in one error."""
    return TableError(shown, "; and ".join(problems), line=line, hint="; ".join(fixes))


@dataclass
class _OpenTable:
    """A CSV table past its header: its rows still to read, and how each is encoded."""

    shown: str
    header_line: int
    header: list[str]
    columns: list[Column]
    tokens: frozenset[str]
    classes: tuple[str, ...]
    label_at: int | None
    tag_at: int | None
    ignored: tuple[str, ...]
    rows: Iterator[tuple[int, list[str]]]
    decimal: str

    @property
    def names(self) -> tuple[str, ...]:
        """The encoded column names."""
        return tuple(n for c in self.columns for n in c.encoded_names)

    def encoder(self, capacity: int) -> _ChunkEncoder:
        """An encoder of arrays for ``capacity`` records."""
        return _ChunkEncoder(self.shown, self.header, self.columns, self.tokens, self.classes,
                             self.label_at, self.tag_at, capacity, self.decimal)

    def chunks(self, chunk_rows: int) -> Iterator[tuple[list[list[str]], list[int]]]:
        """The rows ``chunk_rows`` at a time, each with the line it starts on (width checked)."""
        chunk: list[list[str]] = []
        starts: list[int] = []
        for line, row in self.rows:
            if len(row) != len(self.header):
                raise _width_error(self.shown, line, row, self.header)
            chunk.append(row)
            starts.append(line)
            if len(chunk) >= chunk_rows:
                yield chunk, starts
                chunk, starts = [], []
        if chunk:
            yield chunk, starts


@contextlib.contextmanager
def _open_table(path: Path, schema: TabularSchema | None, label_column: str,
                tag_column: str | None, require_label: bool, delimiter: str, decimal: str,
                shown: str) -> Iterator[_OpenTable]:
    """``path`` read up to its header, checked against ``schema`` (see :func:`read_table`)."""
    if len(delimiter) != 1:
        raise TableError(shown, f"the delimiter must be one character, got {delimiter!r}")
    check_decimal(decimal, delimiter)
    label = schema.label if schema is not None and schema.label else label_column
    with open_table_text(path, shown) as fh:
        rows = table_rows(fh, path, shown, delimiter, decimal)
        header_line, header = table_header(rows, shown, delimiter, decimal)
        position = {name: j for j, name in enumerate(header)}
        if label not in position and require_label:
            raise TableError(shown, f"the header has no label column {label!r}",
                             line=header_line, detail=f"its columns: {_listed(header)}")
        columns: list[Column]
        if schema is None:
            columns = [NumericColumn(n) for n in header if n not in (label, tag_column)]
            tokens: tuple[str, ...] = DEFAULT_MISSING_TOKENS
            classes: tuple[str, ...] = ()
            if not columns:
                raise TableError(shown, "the header names no feature column", line=header_line)
        else:
            columns, tokens, classes = list(schema.columns), schema.missing_tokens, \
                schema.label_classes
            absent = [c.name for c in columns if c.name not in position]
            if absent:
                raise TableError(shown, "the header has no such column, which the federation's "
                                 "schema declares", line=header_line, column=absent[0],
                                 hint=f"{len(absent)} declared column(s) missing "
                                      f"({_listed(absent)})",
                                 detail=f"the header has {_listed(header)}")
        used = {c.name for c in columns} | {label, tag_column}
        ignored = tuple(n for n in header if n not in used)
        if ignored:
            log.info("%s: columns not in the schema are left out: %s", shown, _listed(ignored))
        yield _OpenTable(shown, header_line, header, columns, frozenset(tokens), classes,
                         position.get(label), position.get(tag_column or ""), ignored, rows,
                         decimal)


def read_table(path: Path, schema: TabularSchema | None, *, label_column: str = "label",
               tag_column: str | None = "split", require_label: bool = True,
               delimiter: str = ",", decimal: str = ".", chunk_rows: int = CHUNK_ROWS,
               shown: str | None = None) -> EncodedTable:
    """Read and encode a CSV table, refusing any problem with its file, line, column and value.

    Parameters
    ----------
    path : Path
    schema : TabularSchema or None
        The typed columns (found by header name, in any order; other columns are ignored).
        None: every column but the label and split columns is a number, used as it is, in file
        order (the plain ``features = N`` schema).
    label_column : str
        The label column's name when ``schema`` names none.
    tag_column : str or None
        The optional split column (``train`` / ``validation`` / ``test``).
    require_label : bool
        Refuse a table without the label column (an upload); False: read it when present
        (prediction input), ``labels`` None otherwise.
    delimiter : str
        Between values (one character).
    decimal : str
        The decimal mark of numeric cells: ``.``, or ``,`` (``3,5``; another delimiter then).
    chunk_rows : int
        Rows encoded at a time.
    shown : str, optional
        The file's name in messages (default: ``path`` as given).

    Returns
    -------
    EncodedTable
    """
    path = Path(path)
    shown = str(path) if shown is None else shown
    with _open_table(path, schema, label_column, tag_column, require_label, delimiter, decimal,
                     shown) as table:
        encoder = table.encoder(count_lines(path) - table.header_line)
        for chunk, starts in table.chunks(chunk_rows):
            encoder.add(chunk, starts)
    if not encoder.n:
        raise TableError(shown, "the file has a header but no records", line=table.header_line)
    return encoder.table(table.names, table.ignored)


def read_table_chunks(path: Path, schema: TabularSchema | None, *, label_column: str = "label",
                      tag_column: str | None = "split", require_label: bool = True,
                      delimiter: str = ",", decimal: str = ".", chunk_rows: int = CHUNK_ROWS,
                      shown: str | None = None) -> Iterator[EncodedTable]:
    """:func:`read_table`'s records ``chunk_rows`` at a time, each chunk an
    :class:`EncodedTable` of its own (its ``lines`` those of the file): memory is one chunk,
    whatever the file's size. The same parameters and the same errors, each raised when its
    chunk is reached."""
    path = Path(path)
    shown = str(path) if shown is None else shown
    with _open_table(path, schema, label_column, tag_column, require_label, delimiter, decimal,
                     shown) as table:
        n = 0
        for chunk, starts in table.chunks(chunk_rows):
            encoder = table.encoder(len(chunk))
            encoder.add(chunk, starts)
            chunk.clear()  # the chunk's text goes before the caller works on its records
            n += encoder.n
            yield encoder.table(table.names, table.ignored)
    if not n:
        raise TableError(shown, "the file has a header but no records", line=table.header_line)


def encode_rows(schema: TabularSchema, header: Sequence[str], rows: Sequence[Sequence[str]], *,
                shown: str = "table", chunk_rows: int = CHUNK_ROWS) -> EncodedTable:
    """Encode an in-memory table (``header`` and rows of cell texts, line 2 onward) exactly as
    :func:`read_table` encodes a file: the bench and the demo encode bundled tables with it."""
    header = list(header)
    position = {name: j for j, name in enumerate(header)}
    absent = [c.name for c in schema.columns if c.name not in position]
    if absent:
        raise TableError(shown, "the header has no such column, which the schema declares",
                         line=1, column=absent[0])
    encoder = _ChunkEncoder(shown, header, list(schema.columns), frozenset(schema.missing_tokens),
                            schema.label_classes, position.get(schema.label or ""), None,
                            len(rows))
    for start in range(0, len(rows), chunk_rows):
        chunk = [list(row) for row in rows[start:start + chunk_rows]]
        for k, row in enumerate(chunk):
            if len(row) != len(header):
                raise _width_error(shown, start + 2 + k, row, header)
        encoder.add(chunk, list(range(start + 2, start + 2 + len(chunk))))
    if not encoder.n:
        raise TableError(shown, "the table has no records", line=1)
    return encoder.table(schema.encoded_names, ())


def check_decimal(decimal: str, delimiter: str) -> str:
    """``decimal``, if a decimal mark this reader takes with ``delimiter``."""
    if decimal not in (".", ","):
        raise InvalidInputError(f"the decimal mark must be '.' or ',', got {decimal!r}")
    if decimal == delimiter:
        raise InvalidInputError(f"the decimal mark {decimal!r} cannot also be the delimiter: "
                                "a table with decimal commas is exported with ';' between "
                                "values")
    return decimal


def _listed(names, limit: int = 8) -> str:
    names = list(names)
    return ", ".join(repr(n) for n in names[:limit]) + (", ..." if len(names) > limit else "")


def _width_error(shown: str, line: int, row: list[str], header: list[str]) -> TableError:
    if len(row) < len(header):
        other = [name for d, name in OTHER_DELIMITERS.items() if len(row) == 1 and d in row[0]]
        return TableError(shown, f"the row has {len(row)} fields, the header {len(header)}",
                          line=line, column=header[len(row)],
                          hint=f"the line seems {other[0]}-separated, unlike the header" if other
                          else "this and the later columns are missing: a value left out, or "
                               "the line cut short")
    return TableError(shown, f"the row has {len(row)} fields, the header {len(header)}",
                      line=line, column=f"field {len(header) + 1}",
                      hint="a value holding the delimiter without quotes, or a decimal comma?")


class _ChunkEncoder:
    """Encodes chunks of rows into arrays allocated once for ``capacity`` records (see
    :func:`read_table`), grown by half when a file holds more records than it has newlines
    (old Mac ``\r`` line ends)."""

    def __init__(self, shown: str, header: list[str], columns, tokens: frozenset[str],
                 classes: tuple[str, ...], label_at: int | None, tag_at: int | None,
                 capacity: int, decimal: str = ".") -> None:
        self.shown, self.header, self.columns, self.tokens = shown, header, columns, tokens
        self.decimal = decimal
        self.classes, self.label_at, self.tag_at = classes, label_at, tag_at
        self.at = [header.index(c.name) for c in columns]
        capacity = max(capacity, 1)
        self.x = np.empty((capacity, sum(c.width for c in columns)), dtype=np.float64)
        self.labels = np.empty(capacity, dtype=np.int64) if label_at is not None else None
        self.tags = np.empty(capacity, dtype=np.int8) if tag_at is not None else None
        self.lines = np.empty(capacity, dtype=np.int64)
        self.n = 0

    def _fail(self, err: CellError, starts: list[int], column: str) -> TableError:
        return TableError(self.shown, err.problem, line=starts[err.index], column=column,
                          value=err.value, hint=err.hint)

    def _as_written(self, err: CellError, cells: Sequence[str]) -> CellError:
        """``err`` about a numeric cell told with the cell as written (not as translated from
        a decimal comma), and with the decimal mark's fix when the mark is the problem."""
        cell = cells[err.index].strip()
        if self.decimal == "," and err.value is not None:
            return CellError(err.index, err.problem, cell, err.hint.replace(
                "'.' as the decimal point", "',' as the decimal point ([participant] decimal)"))
        if DECIMAL_COMMA.fullmatch(cell):
            return CellError(err.index, err.problem, cell, f"a decimal comma: {DECIMAL_COMMA_FIX}")
        return err

    def _grow(self, needed: int) -> None:
        size = max(needed, len(self.lines) * 3 // 2)
        for name in ("x", "labels", "tags", "lines"):
            old = getattr(self, name)
            if old is not None:
                new = np.empty((size, *old.shape[1:]), dtype=old.dtype)
                new[:self.n] = old[:self.n]
                setattr(self, name, new)

    def add(self, chunk: list[list[str]], starts: list[int]) -> None:
        """Encode one chunk of rows (each as wide as the header) starting on lines ``starts``."""
        rows = slice(self.n, self.n + len(chunk))
        if rows.stop > len(self.lines):
            self._grow(rows.stop)
        fields = list(zip(*chunk, strict=True))  # the chunk's columns, transposed at C speed
        j = 0
        for column, at in zip(self.columns, self.at, strict=True):
            cells = fields[at]
            if isinstance(column, NumericColumn) and self.decimal == ",":
                cells = tuple(c.translate(FROM_DECIMAL_COMMA) for c in cells)
            try:
                self.x[rows, j:j + column.width] = column.encode(cells, self.tokens)
            except CellError as err:
                if isinstance(column, NumericColumn):
                    err = self._as_written(err, fields[at])
                raise self._fail(err, starts, column.name) from None
            j += column.width
        self.lines[rows] = starts
        if self.labels is not None and self.label_at is not None:
            try:
                self.labels[rows] = encode_labels(fields[self.label_at], self.classes)
            except CellError as err:
                raise self._fail(err, starts, self.header[self.label_at]) from None
        if self.tags is not None:
            self.tags[rows] = self._tags(fields[self.tag_at or 0], starts)
        self.n = rows.stop

    def _tags(self, cells, starts: list[int]) -> np.ndarray:
        codes = {name: code for code, name in SPLIT_NAMES.items()}
        codes |= {str(code): code for code in SPLIT_NAMES}
        out = np.empty(len(cells), dtype=np.int8)
        for k, raw in enumerate(cells):
            cell = raw.strip()
            if cell not in codes:
                raise TableError(self.shown, "{value} is not a split tag", line=starts[k],
                                 column=self.header[self.tag_at or 0], value=cell,
                                 hint=f"expected {', '.join(SPLIT_NAMES.values())}")
            out[k] = codes[cell]
        return out

    def table(self, names: tuple[str, ...], ignored: tuple[str, ...]) -> EncodedTable:
        """The records encoded so far. Views of the arrays when they are nearly full (the
        capacity counts the header and blank lines too), else copies of the used part."""
        n = self.n

        def used(arr: np.ndarray | None) -> np.ndarray | None:
            if arr is None:
                return None
            return arr[:n] if n >= 0.99 * len(arr) else arr[:n].copy()

        x, lines = used(self.x), used(self.lines)
        assert x is not None and lines is not None
        return EncodedTable(x, used(self.labels), used(self.tags), lines, names, ignored)


def count_lines(path: Path) -> int:
    """Newlines in ``path`` plus one (an upper bound on its records), read in 1 MiB blocks."""
    count = 1
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            count += block.count(b"\n")
    return count
