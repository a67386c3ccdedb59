"""The table reader: every bad table is refused naming its file, line, column and value; the
public reason names the line and column but neither the value nor the folder."""

from __future__ import annotations

import codecs

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.tabular import (
    BooleanColumn,
    CategoricalColumn,
    NumericColumn,
    TableError,
    TabularSchema,
    read_table,
    read_table_chunks,
)

SCHEMA = TabularSchema((NumericColumn("area", center=500.0, scale=250.0, unit="mm2"),
                        NumericColumn("ratio", min=0.0, max=2.0),
                        CategoricalColumn("region", categories=("north", "south", "east")),
                        BooleanColumn("smoker")),
                       label="diagnosis", label_classes=("benign", "malignant"))

GOOD = ("area,ratio,region,smoker,diagnosis\n"
        "750,0.5,north,yes,benign\n"
        "250,1.5,east,no,malignant\n")


def _write(tmp_path, text: str | bytes, name: str = "site.csv"):
    path = tmp_path / "exports" / name
    path.parent.mkdir(exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _refused(tmp_path, text, schema=SCHEMA, **kwargs) -> TableError:
    path = _write(tmp_path, text)
    with pytest.raises(TableError) as info:
        read_table(path, schema, **kwargs)
    err = info.value
    assert str(path) in str(err)  # the local message names the file as configured
    public = err.public()
    assert str(path.parent) not in public and public.startswith("site.csv")  # no folder
    if err.value:
        assert repr(err.value) not in public  # a private cell never travels
    return err


def test_a_good_table_is_encoded_with_the_declared_public_parameters(tmp_path):
    table = read_table(_write(tmp_path, GOOD), SCHEMA)
    # area (x - 500) / 250, ratio (x - 0) / 2, region one-hot (north, south, east), smoker.
    np.testing.assert_array_equal(table.x, [[1.0, 0.25, 1, 0, 0, 1], [-1.0, 0.75, 0, 0, 1, 0]])
    np.testing.assert_array_equal(table.labels, [0, 1])
    np.testing.assert_array_equal(table.lines, [2, 3])
    assert table.feature_names == ("area", "ratio", "region=north", "region=south",
                                   "region=east", "smoker")
    assert table.tags is None


def test_columns_are_found_by_name_and_other_columns_left_out(tmp_path):
    text = ("patient_id,diagnosis,smoker,region,ratio,area\n"
            "p-17,benign,yes,north,0.5,750\n")
    table = read_table(_write(tmp_path, text), SCHEMA)
    np.testing.assert_array_equal(table.x, [[1.0, 0.25, 1, 0, 0, 1]])
    assert table.ignored == ("patient_id",)


def test_chunked_reading_equals_one_chunk(tmp_path, rng):
    rows = [f"{a:.17g},{r:.17g},{rng.choice(['north', 'south', 'east'])},"
            f"{rng.choice(['yes', 'no'])},{rng.choice(['benign', 'malignant'])}"
            for a, r in zip(rng.uniform(0, 1000, 50), rng.uniform(0, 2, 50), strict=True)]
    path = _write(tmp_path, GOOD.splitlines()[0] + "\n" + "\n".join(rows) + "\n")
    whole, chunked = read_table(path, SCHEMA), read_table(path, SCHEMA, chunk_rows=7)
    np.testing.assert_array_equal(whole.x, chunked.x)
    np.testing.assert_array_equal(whole.labels, chunked.labels)
    np.testing.assert_array_equal(chunked.lines, np.arange(2, 52))
    # Streamed (participant predict): the same records, a chunk of 7 at a time.
    parts = list(read_table_chunks(path, SCHEMA, chunk_rows=7))
    assert [len(p.x) for p in parts] == [7] * 7 + [1]
    np.testing.assert_array_equal(np.concatenate([p.x for p in parts]), whole.x)
    np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), whole.labels)
    np.testing.assert_array_equal(np.concatenate([p.lines for p in parts]), whole.lines)


def test_a_streamed_table_names_a_bad_cell_in_a_later_chunk(tmp_path):
    path = _write(tmp_path, GOOD + "250,1.5,west,no,benign\n")
    chunks = read_table_chunks(path, SCHEMA, chunk_rows=1)
    assert len(next(chunks).x) == 1 and len(next(chunks).x) == 1
    with pytest.raises(TableError, match="line 4") as err:
        next(chunks)
    assert err.value.column == "region"
    header_only = _write(tmp_path, GOOD.splitlines()[0] + "\n", "empty.csv")
    with pytest.raises(TableError, match="a header but no records"):
        list(read_table_chunks(header_only, SCHEMA))


def test_a_table_without_labels_is_read_for_prediction(tmp_path):
    text = "area,ratio,region,smoker\n750,0.5,north,yes\n"
    table = read_table(_write(tmp_path, text), SCHEMA, require_label=False)
    assert table.labels is None and table.x.shape == (1, 6)


def test_blank_lines_are_skipped_and_lines_still_counted(tmp_path):
    text = GOOD.replace("benign\n", "benign\n\n", 1) + "\n\n"
    np.testing.assert_array_equal(read_table(_write(tmp_path, text), SCHEMA).lines, [2, 4])


def test_a_utf8_byte_order_mark_is_ignored(tmp_path):
    table = read_table(_write(tmp_path, codecs.BOM_UTF8 + GOOD.encode()), SCHEMA)
    assert table.x.shape == (2, 6)  # the first column is still named 'area'


def test_without_a_schema_every_other_column_is_a_plain_number(tmp_path):
    table = read_table(_write(tmp_path, "f0,label,f1,split\n1.5,3,2,test\n"), None)
    np.testing.assert_array_equal(table.x, [[1.5, 2.0]])
    np.testing.assert_array_equal(table.labels, [3])
    np.testing.assert_array_equal(table.tags, [2])


def test_declared_fill_values_replace_missing_cells(tmp_path):
    schema = TabularSchema((NumericColumn("a", missing="fill", fill=4.0, center=0.0, scale=2.0),
                            CategoricalColumn("c", categories=("x", "y"), missing="fill",
                                              fill="y"),
                            BooleanColumn("b", missing="fill", fill=True)),
                           missing_tokens=("", "NA"))
    table = read_table(_write(tmp_path, "a,c,b,label\nNA,,NA,0\n"), schema)
    np.testing.assert_array_equal(table.x, [[2.0, 0.0, 1.0, 1.0]])


def test_unknown_categories_may_be_mapped_to_a_declared_one(tmp_path):
    schema = TabularSchema((CategoricalColumn("c", categories=("a", "other"), unknown="other"),))
    table = read_table(_write(tmp_path, "c,label\nzzz,1\na,0\n"), schema)
    np.testing.assert_array_equal(table.x, [[0.0, 1.0], [1.0, 0.0]])


# -- every bad table: file, line, column, value --------------------------------------------
@pytest.mark.parametrize("text, line, column, value, words", [
    (GOOD + "250,1.5,east\n", 4, "smoker", None, "3 fields, the header 5"),  # short row
    (GOOD + "250;1.5;east;no;benign\n", 4, "ratio", None, "seems semicolon-separated"),
    (GOOD + "250,1.5,east,no,benign,7\n", 4, "field 6", None, "6 fields"),  # long row
    (GOOD.replace("750", "7,50"), 2, "field 6", None, "decimal comma"),
    (GOOD.replace("750", "abc"), 2, "area", "abc", "is not a number"),
    (GOOD.replace("750", "NaN"), 2, "area", "NaN", "is not a finite number"),
    (GOOD.replace("0.5", "inf"), 2, "ratio", "inf", "is not a finite number"),
    (GOOD.replace("750", "1_000"), 2, "area", "1_000", "not a plain decimal number"),
    (GOOD.replace("east", "west"), 3, "region", "west", "not one of the declared categories"),
    (GOOD.replace("east", "west"), 3, "region", "west", "fix the cell, or ask the federation's "
     "operator to add this category to the column, or to read unknown values as a declared "
     "one (the column's unknown = \"<category>\")"),
    (GOOD.replace("east", "East"), 3, "region", "East", "did you mean 'east'"),
    (GOOD.replace("no,", "maybe,"), 3, "smoker", "maybe", "neither true nor false"),
    (GOOD.replace("750", ""), 2, "area", None, "the cell is empty"),
    (GOOD.replace("benign", "unsure"), 2, "diagnosis", "unsure",
     "not one of the declared label classes"),
    (GOOD.replace(",benign", ","), 2, "diagnosis", None, "the label is missing"),
    (GOOD.replace("750", '"750'), 2, None, None, "cannot be parsed"),
])
def test_a_bad_cell_or_row_is_named_by_line_column_and_value(tmp_path, text, line, column,
                                                             value, words):
    err = _refused(tmp_path, text)
    assert err.line == line and err.column == column and err.value == value, str(err)
    assert words in str(err)
    assert f"line {line}" in err.public() and (column is None or repr(column) in err.public())


@pytest.mark.parametrize("text, column", [
    (GOOD.replace("750", "NA"), "area"),
    (GOOD.replace("north", "#N/A"), "region"),
    (GOOD.replace("yes", "null"), "smoker"),
])
def test_a_missing_marker_the_schema_does_not_declare_says_how_to_declare_it(tmp_path, text,
                                                                           column):
    err = _refused(tmp_path, text)
    assert (err.line, err.column) == (2, column)
    assert "declare it in [schema] missing_tokens" in err.public()


def test_an_unknown_split_tag_is_named(tmp_path):
    err = _refused(tmp_path, "a,label,split\n1,0,train\n2,1,later\n", None)
    assert (err.line, err.column, err.value) == (3, "split", "later")


@pytest.mark.parametrize("text, words", [
    ("", "the file is empty"),
    ("\n\n", "the file is empty"),
    ("area,ratio,region,smoker,diagnosis\n", "a header but no records"),
    ("area,ratio,region,smoker\n750,0.5,north,yes\n", "no label column 'diagnosis'"),
    ("area,ratio,smoker,diagnosis\n750,0.5,yes,benign\n", "no such column"),
    ("area,ratio,area,region,smoker,diagnosis\n", "names this column twice (fields 1 and 3)"),
    ("area,,region,smoker,diagnosis\n", "names no column here"),
    ("area;ratio;region;smoker;diagnosis\n750;0.5;north;yes;benign\n",
     "seems semicolon-separated, not comma-separated"),
    ("area\tratio\tregion\tsmoker\tdiagnosis\n", "seems tab-separated"),
])
def test_a_bad_header_is_named_by_its_line(tmp_path, text, words):
    err = _refused(tmp_path, text)
    assert words in str(err)
    if "empty" not in words:
        assert err.line == 1


def test_a_semicolon_export_with_decimal_commas_is_told_both_fixes_at_once(tmp_path):
    """Regression (issue 34): the header's delimiter was refused first, and the decimal commas
    only once the delimiter was set: two round trips where one message could say both."""
    text = GOOD.replace(",", ";").replace("0.5", "0,5").replace("1.5", "1,5")
    err = _refused(tmp_path, text)
    assert err.line == 1 and "seems semicolon-separated, not comma-separated" in str(err)
    assert "decimal comma (line 2, column 'ratio')" in str(err)
    assert "[participant] delimiter = ';'" in err.hint and "--delimiter ';'" in err.hint
    assert "'.' as the decimal point" in err.hint
    assert "0,5" not in err.public()  # where, never the value
    thousands = text.replace("750;", "1.750,0;")
    assert "thousands separators (line 2, column 'area')" in str(_refused(tmp_path, thousands))
    # A Latin-1 export of the same: refused at its first bytes, with every fix still named.
    latin = _refused(tmp_path, (text + "250;1,5;east;no;b\xe9nign\n").encode("latin-1"))
    assert "0xe9 is not UTF-8 text; and the header is a single field holding ';'" in str(latin)
    assert "decimal comma (line 2, column 'ratio')" in str(latin)
    assert latin.hint.startswith("export the table as UTF-8; set [participant] delimiter")
    plain = _refused(tmp_path, GOOD.replace(",", ";"))  # only the delimiter: only its fix
    assert "decimal" not in str(plain) and "thousands" not in str(plain)


def test_another_delimiter_can_be_configured(tmp_path):
    text = GOOD.replace(",", ";")
    np.testing.assert_array_equal(
        read_table(_write(tmp_path, text), SCHEMA, delimiter=";").x,
        read_table(_write(tmp_path, GOOD, "b.csv"), SCHEMA).x)


def test_a_semicolon_export_with_decimal_commas_is_read_with_decimal_comma(tmp_path):
    """Issue 34: a spreadsheet's export in a decimal-comma locale (``;`` between values, ``3,5``)
    is read as it is with ``decimal=','``, as the same table with points; a cell that is no
    number then is named as written, with the setting in its hint."""
    text = GOOD.replace(",", ";").replace("0.5", "0,5").replace("1.5", "1,5")
    np.testing.assert_array_equal(
        read_table(_write(tmp_path, text), SCHEMA, delimiter=";", decimal=",").x,
        read_table(_write(tmp_path, GOOD, "b.csv"), SCHEMA).x)
    err = _refused(tmp_path, text.replace("750", "1.750,0"), delimiter=";", decimal=",")
    assert (err.line, err.column, err.value) == (2, "area", "1.750,0")
    assert "',' as the decimal point ([participant] decimal)" in err.hint
    # Read with ';' alone, the decimal comma of a cell is named with the setting that reads it.
    err = _refused(tmp_path, text, delimiter=";")
    assert (err.column, err.value) == ("ratio", "0,5")
    assert "a decimal comma: set [participant] decimal = ','" in err.hint
    with pytest.raises(InvalidInputError, match="cannot also be the delimiter"):
        read_table(_write(tmp_path, GOOD, "c.csv"), SCHEMA, decimal=",")


def test_utf16_and_bytes_that_are_not_utf8_are_refused_with_the_line(tmp_path):
    err = _refused(tmp_path, GOOD.encode("utf-16"))
    assert "UTF-16" in str(err) and "export it as UTF-8" in str(err)
    latin = (GOOD + "250,1.5,east,no,malignant\n" * 3000 + "1,1,north,yes,b\xe9nign\n")
    err = _refused(tmp_path, latin.encode("latin-1"))
    assert err.line == 3004 and "0xe9 is not UTF-8" in str(err)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(TableError, match="does not exist"):
        read_table(tmp_path / "none.csv", None)


def test_spaces_around_cells_and_names_do_not_matter(tmp_path):
    text = (" area , ratio,region ,smoker, diagnosis\n"
            " 750 ,0.5 , north,YES , benign\n250,1.5,east,no,malignant\n")
    np.testing.assert_array_equal(read_table(_write(tmp_path, text), SCHEMA).x,
                                  read_table(_write(tmp_path, GOOD, "b.csv"), SCHEMA).x)


def test_integer_labels_with_digit_separators_are_refused(tmp_path):
    err = _refused(tmp_path, "a,label\n1,1_0\n", None)
    assert (err.line, err.column, err.value) == (2, "label", "1_0")


def test_old_mac_line_ends_grow_the_arrays_beyond_the_counted_lines(tmp_path):
    text = GOOD.replace("\n", "\r") * 1
    rows = GOOD.splitlines()
    many = "\r".join([rows[0], *rows[1:] * 40]) + "\r"
    assert read_table(_write(tmp_path, text), SCHEMA).x.shape == (2, 6)
    table = read_table(_write(tmp_path, many, "many.csv"), SCHEMA, chunk_rows=7)
    assert table.x.shape == (80, 6) and table.lines[-1] == 81


def test_a_numeric_missing_text_such_as_nan_is_filled_when_declared(tmp_path):
    schema = TabularSchema((NumericColumn("a", missing="fill", fill=1.0),),
                           missing_tokens=("", "nan"))
    table = read_table(_write(tmp_path, "a,label\nnan,0\n2.5,1\n"), schema)
    np.testing.assert_array_equal(table.x, [[1.0], [2.5]])


def test_a_numeric_missing_text_with_spaces_around_it_is_filled_too(tmp_path):
    schema = TabularSchema((NumericColumn("a", missing="fill", fill=1.0),),
                           missing_tokens=("", "nan", "-999"))
    table = read_table(_write(tmp_path, "a,label\n nan ,0\n -999,1\n-999.5,0\n"), schema)
    np.testing.assert_array_equal(table.x, [[1.0], [1.0], [-999.5]])


def test_windows_line_ends_read_as_unix_ones(tmp_path):
    np.testing.assert_array_equal(
        read_table(_write(tmp_path, GOOD.replace("\n", "\r\n").encode()), SCHEMA).lines, [2, 3])


def test_a_nul_byte_or_an_overlong_field_is_named_by_its_line(tmp_path):
    err = _refused(tmp_path, (GOOD + "1,1\0,north,yes,benign\n").encode())
    assert (err.line, err.column) == (4, "ratio") and "is not a number" in str(err)
    err = _refused(tmp_path, GOOD + "1,1,north,yes," + "x" * 200_000 + "\n")
    assert err.line == 4 and "field larger than field limit" in str(err)


def test_the_sites_other_column_names_stay_in_the_local_message(tmp_path):
    err = _refused(tmp_path, "patient_ssn,area,ratio,region,smoker\n1,750,0.5,north,yes\n")
    assert "its columns: 'patient_ssn', 'area'" in str(err) and "patient_ssn" not in err.public()
    err = _refused(tmp_path, "patient_ssn,area,ratio,smoker,diagnosis\n1,750,0.5,yes,benign\n")
    assert "the header has 'patient_ssn'" in str(err) and "patient_ssn" not in err.public()
    assert "1 declared column(s) missing ('region')" in err.public()
