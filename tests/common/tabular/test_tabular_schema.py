"""Typed schemas: TOML and wire round trips keep the preprocessing (and its digest); the digest
changes with every declared parameter; bad declarations are refused naming the key."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.tabular import (
    BooleanColumn,
    CategoricalColumn,
    NumericColumn,
    TabularSchema,
)
from noisyanchor.common.wire_messages import schema_of, tabular_message, tabular_of
from noisyanchor.deploy.launch import toml_text

SCHEMA = TabularSchema(
    (NumericColumn("area", center=500.0, scale=250.0, unit="mm2"),
     NumericColumn("ratio", min=0.0, max=1.0, missing="fill", fill=0.5),
     NumericColumn("count"),
     CategoricalColumn("region", categories=("north", "south"), unknown="south"),
     BooleanColumn("smoker", true=("ja",), false=("nein",), missing="fill", fill=False)),
    label="diagnosis", label_classes=("benign", "malignant"), missing_tokens=("", "NA"))


def _toml(tmp_path, schema_text: str):
    path = tmp_path / "analyst.toml"
    path.write_text(schema_text)
    return tomllib.loads(schema_text)["schema"], path


def test_toml_and_wire_round_trips_keep_the_preprocessing(tmp_path):
    text = toml_text({"schema": SCHEMA.to_toml()})
    table, path = _toml(tmp_path, text)
    assert TabularSchema.from_toml(table, path) == SCHEMA
    assert tabular_of(tabular_message(SCHEMA)) == SCHEMA
    typed = schema_of(tabular_message(SCHEMA))
    assert typed.tabular == SCHEMA and typed.features == SCHEMA.width == 6
    assert typed.preprocessing_sha256 == SCHEMA.digest()


@pytest.mark.parametrize("change", [
    lambda s: dataclasses.replace(s, label="outcome"),
    lambda s: dataclasses.replace(s, label_classes=("malignant", "benign")),
    lambda s: dataclasses.replace(s, missing_tokens=("",)),
    lambda s: dataclasses.replace(s, columns=s.columns[::-1]),
    lambda s: dataclasses.replace(s, columns=(dataclasses.replace(s.columns[0], scale=250.5),
                                              *s.columns[1:])),
    lambda s: dataclasses.replace(s, columns=(dataclasses.replace(s.columns[0], unit="cm2"),
                                              *s.columns[1:])),
    lambda s: dataclasses.replace(s, columns=(*s.columns[:3], dataclasses.replace(
        s.columns[3], unknown="refuse"), s.columns[4])),
    lambda s: dataclasses.replace(s, columns=(*s.columns[:1], dataclasses.replace(
        s.columns[1], fill=0.25), *s.columns[2:])),
])
def test_the_digest_changes_with_every_declared_parameter(change):
    assert change(SCHEMA).digest() != SCHEMA.digest()


def test_the_digest_depends_on_values_not_on_how_they_were_written(tmp_path):
    a, path = _toml(tmp_path, '[schema]\n[[schema.column]]\nname = "x"\ncenter = 1\nscale = 2\n')
    b, _ = _toml(tmp_path, '[schema]\n[[schema.column]]\nname = "x"\ntype = "numeric"\n'
                 'scale = 2.0\ncenter = 1.0\nmissing = "refuse"\n')
    assert TabularSchema.from_toml(a, path).digest() == TabularSchema.from_toml(b, path).digest()


def test_a_tampered_wire_schema_is_refused_against_its_digest():
    msg = tabular_message(SCHEMA)
    msg.columns[0].scale = 1.0
    with pytest.raises(InvalidInputError, match="does not match the preprocessing digest"):
        tabular_of(msg)


@pytest.mark.parametrize("column, match", [
    ('name = "x"\ncenter = 1.0', "center and scale go together"),
    ('name = "x"\ncenter = 1.0\nscale = 0.0', "scale must be > 0"),
    ('name = "x"\nmin = 2.0\nmax = 1.0', "max must be > min"),
    ('name = "x"\nmin = 0.0\nmax = 1.0\nscale = 1.0\ncenter = 0.0', "not both"),
    ('name = "x"\ntype = "date"', "expected one of numeric, categorical, boolean"),
    ('name = "x"\ntype = "categorical"\ncategories = ["a"]', "at least 2 categories"),
    ('name = "x"\ntype = "categorical"\ncategories = ["a", "b"]\nunknown = "c"',
     "unknown must be 'refuse' or one of the categories"),
    ('name = "x"\ntype = "categorical"\ncategories = ["a", "b"]\nmissing = "fill"\nfill = "c"',
     "fill must be one of the categories"),
    ('name = "x"\nmissing = "fill"', "fill value is given exactly when"),
    ('name = "x"\ncategories = ["a", "b"]', "unknown key"),
    ('name = "x"\ntype = "boolean"\nmissing = "fill"\nfill = 1', "fill must be true or false"),
])
def test_a_bad_column_is_refused_naming_it(tmp_path, column, match):
    table, path = _toml(tmp_path, f"[schema]\n[[schema.column]]\n{column}\n")
    with pytest.raises(ConfigError, match=match) as info:
        TabularSchema.from_toml(table, path)
    assert "schema.column #1" in str(info.value)


def test_features_given_beside_typed_columns_must_be_their_encoded_width(tmp_path):
    table, path = _toml(tmp_path, '[schema]\nfeatures = 3\n[[schema.column]]\nname = "c"\n'
                        'type = "categorical"\ncategories = ["a", "b"]\n')
    with pytest.raises(ConfigError, match="encode to d_in = 2"):
        TabularSchema.from_toml(table, path)


def test_repeated_columns_and_labels_among_the_features_are_refused():
    with pytest.raises(InvalidInputError, match="more than once"):
        TabularSchema((NumericColumn("a"), BooleanColumn("a")))
    with pytest.raises(InvalidInputError, match="must not also be a feature"):
        TabularSchema((NumericColumn("a"),), label="a")


def _numeric_columns(n: int) -> str:
    return "".join(f'[[schema.column]]\nname = "c{i}"\n' for i in range(n))


def test_columns_and_categories_are_limited_with_the_limit_in_the_error(tmp_path):
    from noisyanchor.common.tabular.columns import MAX_COLUMN_CATEGORIES, MAX_SCHEMA_COLUMNS
    from noisyanchor.protos.v1 import analyst_pb2 as pb

    table, path = _toml(tmp_path, "[schema]\n" + _numeric_columns(MAX_SCHEMA_COLUMNS + 1))
    with pytest.raises(ConfigError, match=r"\[schema\] column: 10,001 \[\[schema.column\]\] "
                       "tables, more than the 10,000 a schema may declare"):
        TabularSchema.from_toml(table, path)
    table, path = _toml(tmp_path, "[schema]\n" + _numeric_columns(MAX_SCHEMA_COLUMNS))
    assert len(TabularSchema.from_toml(table, path).columns) == MAX_SCHEMA_COLUMNS
    many = tuple(f"k{i}" for i in range(MAX_COLUMN_CATEGORIES + 1))
    with pytest.raises(InvalidInputError, match="declares 10,001 categories, more than the "
                       "10,000"):
        CategoricalColumn("c", categories=many)
    with pytest.raises(InvalidInputError, match="label_classes declares 10,001 classes"):
        TabularSchema((NumericColumn("a"),), label="y", label_classes=many)
    # d_in: 20 columns of 10,000 categories each encode to 200,000 columns.
    wide = tuple(CategoricalColumn(f"c{j}", categories=many[:-1]) for j in range(20))
    with pytest.raises(InvalidInputError, match="d_in = 200,000 columns, more than the 100,000"):
        TabularSchema(wide)
    # The schema an analyst serves is held to the same limits before its columns are built.
    msg = pb.RecordSchema(features=MAX_SCHEMA_COLUMNS + 1)
    for i in range(MAX_SCHEMA_COLUMNS + 1):
        msg.columns.add(name=f"c{i}", type="numeric")
    with pytest.raises(InvalidInputError, match="the analyst's schema declares 10,001 columns"):
        tabular_of(msg)
    with pytest.raises(InvalidInputError, match="declares 1,000,000 features, more than the "
                       "100,000"):
        schema_of(pb.RecordSchema(features=1_000_000, dtype="float64"))


def test_a_repeated_category_is_named_not_the_whole_list():
    cats = (*(f"k{i}" for i in range(5000)), "k7")
    with pytest.raises(InvalidInputError, match=r"categories repeat: \['k7'\]$"):
        CategoricalColumn("c", categories=cats)
