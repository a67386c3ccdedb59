"""`noisyanchor schema draft`: a draft that loads as the federation's schema, types each column
from what it holds, and says that its numbers are this one site's statistics."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest

from noisyanchor.cli import main
from noisyanchor.common.tabular import (
    BooleanColumn,
    CategoricalColumn,
    NumericColumn,
    TabularSchema,
    read_table,
)
from noisyanchor.common.tabular.draft import ColumnStats

TABLE = ("patient_id,area,region,smoker,note,diagnosis\n"
         + "".join(f"{1000 + i},{100.0 + 10 * i},{['north', 'south'][i % 2]},"
                   f"{['yes', 'no'][i % 3 == 0]},{'text ' * (i % 2)}{i},"
                   f"{['benign', 'malignant'][i % 2]}\n" for i in range(40)))


def test_the_draft_types_each_column_and_loads_as_a_schema(tmp_path, capsys):
    (tmp_path / "site.csv").write_text(TABLE.replace(",110.0,", ",,", 1))
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv"), "--label",
                 "diagnosis", "--out", str(tmp_path / "draft.toml")]) == 0
    text = (tmp_path / "draft.toml").read_text()
    assert "THIS SITE'S OWN STATISTICS" in text and "use a public value" in text
    assert "column 'note' left out" in text and "an identifier?" in text
    schema = TabularSchema.from_toml(tomllib.loads(text)["schema"], tmp_path / "draft.toml")
    kinds = {c.name: type(c) for c in schema.columns}
    assert kinds == {"patient_id": NumericColumn, "area": NumericColumn,
                     "region": CategoricalColumn, "smoker": BooleanColumn}
    area = next(c for c in schema.columns if c.name == "area")
    present = [100.0 + 10 * i for i in range(40) if i != 1]
    # The draft's centre/scale are the site's mean and sample deviation, to 6 digits.
    np.testing.assert_allclose([area.center, area.scale],
                               [np.mean(present), np.std(present, ddof=1)], rtol=1e-5)
    # Issue 34: the empty cell is filled with the site's mean (marked as such), so the draft
    # reads the table it came from; it used to refuse it.
    assert "this site's mean, for its 1 of 40 empty cells: use a public value" in text
    assert area.missing == "fill" and area.fill == pytest.approx(np.mean(present), rel=1e-5)
    assert read_table(tmp_path / "site.csv", schema).x.shape == (40, 5)
    assert schema.label == "diagnosis" and schema.label_classes == ("benign", "malignant")
    (tmp_path / "full.csv").write_text(TABLE)
    assert read_table(tmp_path / "full.csv", schema).x.shape == (40, 5)
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv"), "--out",
                 str(tmp_path / "draft.toml")]) == 1  # never overwritten
    assert "exists" in capsys.readouterr().err


def test_a_table_without_the_label_column_names_the_likely_label(tmp_path, capsys):
    (tmp_path / "site.csv").write_text(TABLE)
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv")]) == 0
    out, err = capsys.readouterr()
    assert "# no column 'label' in the table: name the label column\n# ('diagnosis' or " \
        "'region' or 'smoker'? then leave its column below out" in out
    assert "site.csv has no label column 'label'; every column is drafted as a feature: if the " \
        "label is 'diagnosis' or 'region' or 'smoker', run again with --label diagnosis" in err


def test_a_range_draft_proposes_min_and_max(tmp_path, capsys):
    (tmp_path / "site.csv").write_text(TABLE)
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv"), "--label",
                 "diagnosis", "--scaling", "range"]) == 0
    schema = TabularSchema.from_toml(tomllib.loads(capsys.readouterr().out)["schema"],
                                     tmp_path / "x.toml")
    area = next(c for c in schema.columns if c.name == "area")
    assert (area.min, area.max) == (100.0, 490.0)


def test_schema_check_reads_a_table_offline_as_the_upload_will(tmp_path, capsys):
    (tmp_path / "site.csv").write_text(TABLE)
    draft = tmp_path / "draft.toml"
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv"), "--label",
                 "diagnosis", "--out", str(draft)]) == 0
    capsys.readouterr()
    assert main(["schema", "check", "--schema", str(draft), "--data",
                 str(tmp_path / "site.csv"), "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["records"] == 40 and outcome["d_in"] == 5 and outcome["ignored"] == ["note"]
    assert len(outcome["preprocessing_sha256"]) == 64
    (tmp_path / "bad.csv").write_text(TABLE.replace(",north,", ",west,", 1))
    assert main(["schema", "check", "--schema", str(draft), "--data",
                 str(tmp_path / "bad.csv")]) == 1
    err = capsys.readouterr().err
    assert "bad.csv, line 2, column 'region': 'west' is not one of the declared" in err


def test_schema_check_reads_the_table_as_the_sites_kit_says(tmp_path, capsys):
    """Regression (issue 34): schema check ignored the kit's [participant] delimiter, which its
    own error told the site to set; the kit also names the table and its label column."""
    (tmp_path / "site.csv").write_text(TABLE)
    draft = tmp_path / "draft.toml"
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv"), "--label",
                 "diagnosis", "--out", str(draft)]) == 0
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "org-a.csv").write_text(TABLE.replace(",", ";"))
    kit = tmp_path / "org-a.toml"
    kit.write_text('[participant]\nid = "org-a"\ndata = "data/org-a.csv"\ndelimiter = ";"\n\n'
                   + draft.read_text())
    capsys.readouterr()
    assert main(["schema", "check", "--schema", str(kit), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 40
    assert main(["schema", "check", "--schema", str(kit), "--delimiter", ","]) == 1  # overrides
    err = " ".join(capsys.readouterr().err.split())
    assert "seems semicolon-separated" in err
    assert f"set [participant] delimiter = ';' in {kit} (schema check --schema {kit}" in err
    # A decimal-comma export: the kit's [participant] decimal reads it (--decimal overrides).
    (tmp_path / "data" / "org-b.csv").write_text(TABLE.replace(",", ";").replace(".0;", ",0;"))
    kit_b = kit.with_name("org-b.toml")
    kit_b.write_text(kit.read_text().replace('org-a', 'org-b').replace(
        'delimiter = ";"', 'delimiter = ";"\ndecimal = ","'))
    assert main(["schema", "check", "--schema", str(kit_b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 40
    assert main(["schema", "check", "--schema", str(kit_b), "--decimal", "."]) == 1
    assert f"a decimal comma: set [participant] decimal = ',' in {kit_b}" in \
        " ".join(capsys.readouterr().err.split())
    assert main(["schema", "check", "--schema", str(draft)]) == 1  # no kit: --data needed
    assert "no table to check: give --data" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["schema", "check", "--help"])
    assert "a site's kit config" in " ".join(capsys.readouterr().out.split())


def test_measurements_in_whole_units_get_their_unit_and_no_identifier_hint(tmp_path, capsys):
    """Regression (issue 34): two physical measurements (distinct whole numbers) were called
    "an identifier?", the comment sat above the wrong column, and unit stayed empty although
    the names end in _mm and _g."""
    rng = np.random.default_rng(3)
    counts = rng.permutation(1000)[:79]  # distinct whole numbers, in no order, no unit
    rows = [f"{i},{rng.integers(170, 231)},{2700 + 47 * i},{counts[i - 1]},{'ab'[i % 2]}"
            for i in range(1, 80)]
    (tmp_path / "site.csv").write_text("record_id,flipper_length_mm,body_mass_g,visits,species\n"
                                       + "\n".join(rows) + "\n")
    assert main(["schema", "draft", "--data", str(tmp_path / "site.csv"), "--label",
                 "species"]) == 0
    text = capsys.readouterr().out
    # Each column's lines, from its table header to the next: a hint belongs to its column.
    blocks = {tomllib.loads(b)["name"]: b for b in text.split("[[schema.column]]")[1:]}
    assert [n for n, b in blocks.items() if "an identifier?" in b] == ["record_id"]
    schema = TabularSchema.from_toml(tomllib.loads(text)["schema"], tmp_path / "draft.toml")
    assert {c.name: c.unit for c in schema.columns} == {
        "record_id": "", "flipper_length_mm": "mm", "body_mass_g": "g", "visits": ""}


@pytest.mark.parametrize("name, unit", [("length_mm", "mm"), ("mass_KG", "kg"),
                                        ("share_pct", "%"), ("latency_ms", "ms"),
                                        ("temp_min", ""), ("mass", ""), ("_g", "")])
def test_a_unit_is_read_from_the_names_last_part(name, unit):
    assert ColumnStats(name).unit == unit


def test_a_decimal_comma_export_is_drafted_with_decimal_comma_and_named_without(tmp_path,
                                                                               capsys):
    """Issue 34: read with ';' alone, a decimal-comma column was drafted as free text (or as
    categories), silently; the draft says what to run, and --decimal ',' drafts its numbers."""
    (tmp_path / "site.csv").write_text(TABLE.replace(",", ";").replace(".0;", ",5;"))
    args = ["schema", "draft", "--data", str(tmp_path / "site.csv"), "--label", "diagnosis",
            "--delimiter", ";"]
    assert main(args) == 0
    assert "# column 'area' left out: numbers with a decimal comma: run the draft again with " \
        "--decimal ','" in capsys.readouterr().out
    assert main([*args, "--decimal", ","]) == 0
    schema = TabularSchema.from_toml(tomllib.loads(capsys.readouterr().out)["schema"],
                                     tmp_path / "x.toml")
    area = next(c for c in schema.columns if c.name == "area")
    assert area.center == pytest.approx(np.mean([100.5 + 10 * i for i in range(40)]))


def test_the_draft_refuses_a_table_wider_than_a_schema_may_be(tmp_path, capsys):
    from noisyanchor.common.tabular.columns import MAX_SCHEMA_COLUMNS

    header = ",".join(f"c{j}" for j in range(MAX_SCHEMA_COLUMNS + 3))
    (tmp_path / "wide.csv").write_text(header + "\n" + ",".join(["1"] * (MAX_SCHEMA_COLUMNS + 3))
                                       + "\n")
    assert main(["schema", "draft", "--data", str(tmp_path / "wide.csv")]) == 1
    assert "names 10,003 columns, more than the 10,000 a schema may declare" in \
        capsys.readouterr().err
    assert main(["schema", "draft", "--data", str(tmp_path / "wide.csv"),
                 "--max-categories", "10001"]) == 1
    assert "max_categories = 10,001 categories, more than the 10,000" in capsys.readouterr().err
