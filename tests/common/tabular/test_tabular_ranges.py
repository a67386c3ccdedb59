"""Values outside a numeric column's declared public scaling are pointed out, not refused:
most outside asks about the unit, a few far ones name the first line."""

from __future__ import annotations

import numpy as np
import pytest

from noisyanchor.cli import main
from noisyanchor.common.tabular import (
    CategoricalColumn,
    NumericColumn,
    TabularSchema,
    read_table,
)
from noisyanchor.common.tabular.ranges import FAR_SCALES, RangeTally, far_values, likely_unit

SCHEMA = TabularSchema((NumericColumn("area", min=100.0, max=1100.0, unit="mm2"),
                        CategoricalColumn("region", categories=("north", "south")),
                        NumericColumn("age", center=50.0, scale=10.0, unit="years"),
                        NumericColumn("raw")))


def _read(tmp_path, area, age, raw=None):
    raw = raw if raw is not None else [1e9] * len(area)
    rows = [f"{a:g},north,{g:g},{r:g},0" for a, g, r in zip(area, age, raw, strict=True)]
    path = tmp_path / "site.csv"
    path.write_text("area,region,age,raw,label\n" + "\n".join(rows) + "\n")
    return read_table(path, SCHEMA)


def test_values_inside_the_declared_scaling_or_unscaled_raise_nothing(tmp_path):
    table = _read(tmp_path, [100, 600, 1100, 2099], [20, 50, 80, 50 + FAR_SCALES * 10])
    assert far_values(SCHEMA, table.x, table.lines) == []  # 'raw' is unscaled: never


def test_an_export_in_another_unit_is_asked_about(tmp_path):
    # Areas in cm2 (a hundredth of mm2): every value below the declared 100 .. 1100 mm2.
    table = _read(tmp_path, [1.5, 6.0, 11.0, 3.0, 300.0], [40, 45, 50, 55, 60])
    [far] = far_values(SCHEMA, table.x, table.lines)
    assert (far.column.name, far.count, far.records, far.unit) == ("area", 4, 5, True)
    assert (far.low, far.high, far.first_line) == (1.5, 300.0, 2)
    assert str(far) == ("column 'area' [mm2]: 4 of 5 values lie outside the declared range "
                        "100 .. 1100 (seen 1.5 .. 300, first on line 2): is the export in mm2? "
                        "(values about 10^-2 times the declared ones: it looks like cm2 where "
                        "mm2 is declared)")


def test_a_few_far_values_name_the_first_line(tmp_path):
    # age 50 +- 10: 151 is 10.1 scales out (far), 85 only 3.5 (outside, not far).
    table = _read(tmp_path, [500] * 5, [50, 85, 49, 151, 55])
    [far] = far_values(SCHEMA, table.x, table.lines)
    assert (far.column.name, far.count, far.unit, far.first_line) == ("age", 1, False, 5)
    assert "1 of 5 values lie more than 10 scales from the declared center 50 (scale 10)" \
        in str(far) and str(far).endswith("check those records")


def test_schema_check_shows_each_column_with_its_unit_and_the_warnings(tmp_path, capsys):
    (tmp_path / "schema.toml").write_text(
        '[schema]\nlabel = "label"\n'
        '[[schema.column]]\nname = "area"\nunit = "mm2"\nmin = 100.0\nmax = 1100.0\n'
        '[[schema.column]]\nname = "region"\ntype = "categorical"\n'
        'categories = ["north", "south"]\n')
    (tmp_path / "site.csv").write_text("area,region,label\n2.5,north,0\n3.5,south,1\n")
    args = ["schema", "check", "--schema", str(tmp_path / "schema.toml"), "--data",
            str(tmp_path / "site.csv")]
    assert main(args) == 0  # a warning, not a refusal: the records are the site's
    out = capsys.readouterr().out
    assert "  area [mm2]: numeric, (x - 100) / (1100 - 100)\n" in out
    assert "  region: categorical, one-hot of north, south (unknown refused)\n" in out
    assert "warning: column 'area' [mm2]: 2 of 2 values lie outside" in out
    import json

    assert main([*args, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert [(c["name"], c["unit"], c["encoded"]) for c in outcome["columns"]] == [
        ("area", "mm2", ["area"]), ("region", None, ["region=north", "region=south"])]
    assert len(outcome["warnings"]) == 1 and "is the export in mm2?" in outcome["warnings"][0]
    np.testing.assert_equal(outcome["d_in"], 3)


@pytest.mark.parametrize("declared, power, unit", [
    ("g", -3, "kg"), ("g", 3, "mg"), ("kg", 3, "g"), ("mm2", 6, "um2"), ("mm2", -2, "cm2"),
    ("m", -3, "km"), ("cm", 1, "mm"), ("mL", 3, "uL"), ("m2", 1, None), ("years", 2, None)])
def test_the_likely_unit_follows_the_power_of_ten_and_the_declared_unit(declared, power, unit):
    assert likely_unit(declared, power) == unit


def test_filled_missing_cells_are_not_counted_and_kilograms_are_named(tmp_path):
    """A weight declared in g (100 .. 5000) exported in kg, two cells missing and filled with
    a fill outside the range: only the 4 written values count, and kg is named."""
    schema = TabularSchema((NumericColumn("weight", min=100.0, max=5000.0, unit="g",
                                          fill=-1.0, missing="fill"),))
    path = tmp_path / "site.csv"
    path.write_text("weight,label\n0.8,0\n,1\n1.2,0\n2.5,1\n,0\n3.1,1\n")
    table = read_table(path, schema)
    [far] = far_values(schema, table.x, table.lines)
    assert (far.count, far.records, far.unit, far.first_line) == (4, 4, True, 2)
    assert str(far).endswith("is the export in g? (values about 10^-3 times the declared "
                             "ones: it looks like kg where g is declared)")


def test_a_tally_over_chunks_finds_what_the_whole_table_shows(tmp_path):
    """participant predict reads in chunks: the unit question is asked on the majority over
    every chunk, with the first line and the likely unit of the whole table."""
    area = [1.5, 6.0, 500.0, 11.0, 3.0, 300.0, 700.0]  # cm2: outside in most chunks, not all
    age = [40, 45, 50, 160, 55, 60, 49]
    table = _read(tmp_path, area, age)
    tally = RangeTally(SCHEMA)
    for start in range(0, len(area), 2):
        tally.add(table.x[start:start + 2], table.lines[start:start + 2])
    assert tally.found() == far_values(SCHEMA, table.x, table.lines)
    assert [f.column.name for f in tally.found()] == ["area", "age"]
