"""Values far outside a numeric column's declared public scaling: the sign of an export in
another unit (an area in cm² where the federation declares mm²) or of a mistyped cell.

Such a value is not an error (the public map is affine and clips nothing, and a record may
truly lie outside a published reference range), so it is not refused; but a column exported in
the wrong unit spoils the collaboration matrix unnoticed once the records are rotated. The site
is told locally, before it uploads (``schema check`` and the upload's log), naming the column,
its declared unit, how many values and the first line. Nothing of this leaves the site.

Only values written in the file count: a missing cell filled with the column's declared
``fill`` is left out (a cell holding exactly the fill cannot be told from one). When most values
lie outside, the power of ten that brings most of them back inside names the unit the export
likely uses (:func:`likely_unit`: values 1000 times smaller than a range declared in
g look like kg).

Both are measured on the encoded value ``e = (x - a) / b``
(:attr:`NumericColumn.offset_factor`). A ``min``/``max`` column maps the declared range onto
``[0, 1]``: a value is *outside* it when ``e`` is not in ``[0, 1]`` and *far* when ``e`` lies
more than :data:`RANGE_WIDTHS` whole ranges beyond it. A ``center``/``scale`` column: outside
at ``|e| >`` :data:`OUTSIDE_SCALES`, far at ``|e| >`` :data:`FAR_SCALES`. Most values outside
is the mark of another unit (an area in cm² below a range declared in mm²); a few far values
that of mistyped cells. A unit slip that keeps the values near the declared centre (a column
centred near 0 read in a larger unit) looks like ordinary data and is not detected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.tabular.columns import NumericColumn
from noisyanchor.common.tabular.schema import TabularSchema

#: A ``min``/``max`` column's value is far when it lies more than this many ranges beyond it.
RANGE_WIDTHS = 1.0

#: A ``center``/``scale`` column's value is outside beyond this many scales from the centre.
OUTSIDE_SCALES = 3.0

#: A ``center``/``scale`` column's value is far beyond this many scales from the centre.
FAR_SCALES = 10.0


#: Decimal prefixes of a unit and their power of ten.
PREFIXES = {"p": -12, "n": -9, "u": -6, "µ": -6, "μ": -6, "m": -3, "c": -2, "d": -1, "": 0,
            "k": 3, "M": 6, "G": 9}

#: Units a prefix can be put before (SI and a few common ones).
BASE_UNITS = ("g", "m", "l", "L", "s", "Pa", "mol", "V", "W", "J", "Hz", "B", "A")

_UNIT = re.compile(r"^(?P<prefix>[pnuµμmcdkMG]?)(?P<base>" + "|".join(BASE_UNITS)
                   + r")(?P<power>\^?[23²³]?)$")


def likely_unit(declared: str, power: int) -> str | None:
    """The unit in which values ``10^power`` times those in ``declared`` are written (a
    prefixed unit, possibly squared or cubed: ``g`` and ``-3`` give ``kg``, ``mm2`` and ``6``
    give ``um2``); None when ``declared`` is not a prefixed unit or no prefix fits."""
    match = _UNIT.match(declared)  # backtracks: "m" is the metre, "mm" a milli-metre
    if match is None:
        return None
    exponent = {"": 1, "2": 2, "3": 3, "²": 2, "³": 3}[match["power"].lstrip("^")]
    shift, rest = divmod(-power, exponent)
    wanted = PREFIXES[match["prefix"]] + shift
    name = next((p for p, k in PREFIXES.items() if k == wanted), None)
    return None if rest or name is None else f"{name}{match['base']}{match['power']}"


@dataclass(frozen=True)
class FarValues:
    """Values of one numeric column outside its declared scaling.

    Attributes
    ----------
    column : NumericColumn
        The column, with its declared unit and public parameters.
    count, records : int
        How many of the ``records`` values are outside (:attr:`unit` True) or far.
    unit : bool
        Whether most values lie outside (another unit?) rather than a few far (typos?).
    low, high : float
        The smallest and largest value of the column seen, in the table's own terms.
    first_line : int
        The line of the first record counted.
    power : int
        The values are about ``10^power`` times what was declared (0: no power of ten fits
        better).
    """

    column: NumericColumn
    count: int
    records: int
    unit: bool
    low: float
    high: float
    first_line: int
    power: int = 0

    def __str__(self) -> str:
        c = self.column
        unit = f" [{c.unit}]" if c.unit else ""
        if c.min is not None and c.max is not None:
            declared = f"the declared range {c.min:g} .. {c.max:g}"
            outside = f"lie outside {declared}"
            far = f"lie more than {RANGE_WIDTHS:g} range width beyond {declared}"
        else:
            declared = f"the declared center {c.center:g} (scale {c.scale:g})"
            outside = f"lie more than {OUTSIDE_SCALES:g} scales from {declared}"
            far = f"lie more than {FAR_SCALES:g} scales from {declared}"
        if self.unit:
            what = outside
            ask = f"is the export in {c.unit}?" if c.unit else \
                "is the export in the unit the federation agreed on?"
            guess = likely_unit(c.unit, self.power) if self.power else None
            if self.power:
                ask += (f" (values about 10^{self.power} times the declared ones"
                        + (f": it looks like {guess} where {c.unit} is declared)" if guess
                           else ")"))
        else:
            what, ask = far, "check those records"
        return (f"column {c.name!r}{unit}: {self.count} of {self.records} values {what} (seen "
                f"{self.low:g} .. {self.high:g}, first on line {self.first_line}): {ask}")


def far_values(schema: TabularSchema, x: np.ndarray, lines: np.ndarray) -> list[FarValues]:
    """Every scaled numeric column of ``x`` (``n x d_in``, encoded with ``schema``; ``lines``
    the records' lines) with most written values outside its declared scaling or some far
    from it, in column order (cells holding the column's ``fill`` are not counted)."""
    tally = RangeTally(schema)
    tally.add(x, lines)
    return tally.found()


@dataclass
class _ColumnCounts:
    """What :func:`far_values` needs of one column, summed over chunks of records."""

    column: NumericColumn
    j: int
    written: int = 0
    outside: int = 0
    far: int = 0
    low: float = np.inf
    high: float = -np.inf
    first_outside: int = 0
    first_far: int = 0
    inside_by_power: np.ndarray | None = None


class RangeTally:
    """:func:`far_values` of a table read in chunks (``participant predict``): counts, extremes,
    first lines and the per-power counts of :func:`_power` are sums and minima over the chunks,
    so :meth:`found` is what :func:`far_values` gives on the whole table."""

    def __init__(self, schema: TabularSchema) -> None:
        self.counts: list[_ColumnCounts] = []
        start = 0
        for column in schema.columns:
            j, start = start, start + column.width
            if isinstance(column, NumericColumn) and column.offset_factor != (0.0, 1.0):
                self.counts.append(_ColumnCounts(column, j))

    def add(self, x: np.ndarray, lines: np.ndarray) -> None:
        """Count the records ``x`` (encoded; ``lines``: where each is in the file)."""
        for c in self.counts:
            a, b = c.column.offset_factor
            written = np.ones(len(x), dtype=bool) if c.column.fill is None else \
                x[:, c.j] != (float(c.column.fill) - a) / b  # the encoder's arithmetic
            e = x[written, c.j]
            if not len(e):
                continue
            outside, far = _outside_far(c.column, e)
            at = lines[written]
            if not c.outside and outside.any():
                c.first_outside = int(at[np.argmax(outside)])
            if not c.far and far.any():
                c.first_far = int(at[np.argmax(far)])
            c.written += len(e)
            c.outside += int(outside.sum())
            c.far += int(far.sum())
            c.low, c.high = min(c.low, float(e.min())), max(c.high, float(e.max()))
            inside = _inside_by_power(c.column, e * b + a)
            c.inside_by_power = inside if c.inside_by_power is None else \
                c.inside_by_power + inside

    def found(self) -> list[FarValues]:
        """The columns :func:`far_values` names, in column order."""
        found = []
        for c in self.counts:
            unit = 2 * c.outside > c.written
            count, first = (c.outside, c.first_outside) if unit else (c.far, c.first_far)
            if not count:
                continue
            a, b = c.column.offset_factor
            power = 0
            if unit and c.inside_by_power is not None:
                power = int(POWERS[np.argmax(c.inside_by_power)])  # argmax: the first of equals
            found.append(FarValues(c.column, count, c.written, unit, c.low * b + a,
                                   c.high * b + a, first, power))
        return found


#: The powers of ten :func:`_inside_by_power` tries, the smallest ``|k|`` first.
POWERS = np.array(sorted(range(-12, 13), key=abs))


def _outside_far(column: NumericColumn, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which encoded values ``e`` lie outside the declared scaling, and which far from it."""
    if column.scale is not None:
        return np.abs(e) > OUTSIDE_SCALES, np.abs(e) > FAR_SCALES
    return (e < 0.0) | (e > 1.0), (e < -RANGE_WIDTHS) | (e > 1.0 + RANGE_WIDTHS)


def _inside_by_power(column: NumericColumn, values: np.ndarray) -> np.ndarray:
    """For each power of ten ``k`` of :data:`POWERS` (``|k| <= 12``), how many of ``values /
    10^k`` lie inside the declared scaling: the ``k`` with the most (the smallest ``|k|``
    among equals; 0 when none does better than the values as written) says the values are
    about ``10^k`` times what was declared."""
    a, b = column.offset_factor
    e = (values[None, :] / 10.0 ** POWERS[:, None] - a) / b
    inside = (np.abs(e) <= OUTSIDE_SCALES) if column.scale is not None else \
        (e >= 0.0) & (e <= 1.0)
    return inside.sum(axis=1)
