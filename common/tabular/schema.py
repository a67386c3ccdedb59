"""A federation's typed record schema: columns, label, missing-value texts, and the digest of
the preprocessing they declare.

The analyst declares it (``[schema]`` with ``[[schema.column]]`` tables) and serves it
(``Describe``); every site encodes its table with it before GDP and names its digest in the
upload header, and the analyst refuses an upload whose digest differs before storing anything.
The digest is SHA-256 over a domain label and the canonical JSON of every declared parameter
(:meth:`TabularSchema.canonical`: sorted keys, no whitespace, numbers as Python's shortest
round-trip repr), so two declarations have the same digest exactly when every site encodes
every table the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.tabular.columns import (
    COLUMN_TYPES,
    FALSE_TOKENS,
    MAX_COLUMN_CATEGORIES,
    MAX_SCHEMA_COLUMNS,
    TRUE_TOKENS,
    BooleanColumn,
    Column,
    check_columns,
    check_count_limit,
)
from noisyanchor.common.tomlconfig import Table

#: Domain separation label of the preprocessing digest (and the canonical form's version).
DIGEST_DOMAIN = b"noisyanchor/v1/preprocessing\x00"

#: Cell texts read as missing when the schema names none: the empty cell.
DEFAULT_MISSING_TOKENS = ("",)


@dataclass(frozen=True)
class TabularSchema:
    """Typed columns and the label of a federation's records.

    Attributes
    ----------
    columns : tuple of Column
        In encoding order: the encoded record is the columns' blocks side by side, ``d_in``
        (:attr:`width`) wide.
    label : str or None
        The label column's header name; None: the site config's ``label_column``.
    label_classes : tuple of str
        Label texts in the order that maps them to ``0 .. k-1`` (empty: integer labels).
    missing_tokens : tuple of str
        Cell texts that mean "missing" in every column (default: the empty cell).
    """

    columns: tuple[Column, ...]
    label: str | None = None
    label_classes: tuple[str, ...] = ()
    missing_tokens: tuple[str, ...] = field(default=DEFAULT_MISSING_TOKENS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", check_columns(self.columns))
        object.__setattr__(self, "label_classes", tuple(self.label_classes))
        object.__setattr__(self, "missing_tokens", tuple(self.missing_tokens))
        names = {c.name for c in self.columns}
        if self.label is not None and (not self.label or self.label in names):
            raise InvalidInputError(f"the label column {self.label!r} must be named and must not "
                                    "also be a feature column")
        check_count_limit(len(self.label_classes), MAX_COLUMN_CATEGORIES,
                          f"label_classes declares {len(self.label_classes):,} classes")
        if len(set(self.label_classes)) != len(self.label_classes) or "" in self.label_classes:
            raise InvalidInputError(f"label_classes must be distinct non-empty texts, got "
                                    f"{list(self.label_classes)}")
        if len(self.label_classes) == 1:
            raise InvalidInputError("label_classes declares at least 2 classes")
        tokens = self.missing_tokens
        if len(set(tokens)) != len(tokens) or any(t != t.strip() for t in tokens):
            raise InvalidInputError(f"missing_tokens must be distinct texts without surrounding "
                                    f"spaces, got {list(tokens)}")
        for column in self.columns:
            categories = getattr(column, "categories", ())
            if set(categories) & set(tokens):
                raise InvalidInputError(f"column {column.name!r}: a category is also a missing "
                                        f"value text ({sorted(set(categories) & set(tokens))})")

    @property
    def width(self) -> int:
        """``d_in``: encoded columns of a record."""
        return sum(c.width for c in self.columns)

    @property
    def encoded_names(self) -> tuple[str, ...]:
        """Names of the ``d_in`` encoded columns, in order."""
        return tuple(n for c in self.columns for n in c.encoded_names)

    def canonical(self) -> dict[str, Any]:
        """Every declared parameter (what the digest covers)."""
        return {"columns": [c.canonical() for c in self.columns], "label": self.label,
                "label_classes": list(self.label_classes),
                "missing_tokens": list(self.missing_tokens)}

    def digest(self) -> bytes:
        """SHA-256 of the canonical declaration: equal digests, equal preprocessing."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=True, allow_nan=False)
        return hashlib.sha256(DIGEST_DOMAIN + text.encode()).digest()

    def describe(self) -> str:
        """``31 typed columns (29 numeric, 1 categorical, 1 boolean), d_in = 33``."""
        counts = {k: sum(c.kind == k for c in self.columns) for k in COLUMN_TYPES}
        kinds = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        return f"{len(self.columns)} typed columns ({kinds}), d_in = {self.width}"

    # -- TOML ---------------------------------------------------------------------------------
    @classmethod
    def from_toml(cls, schema: Mapping[str, Any], path: Path) -> TabularSchema:
        """From a config's ``[schema]`` table holding ``[[schema.column]]`` tables (``features``,
        when also given, must equal the encoded width). Errors name the file and key."""
        table = Table({"schema": dict(schema)}, "schema", path)
        raw = table.value("column", None, (list,), "a list of [[schema.column]] tables")
        if not raw:
            raise table.error("column", "declares no column")
        table.checked("column", len(raw), lambda n: check_count_limit(
            n, MAX_SCHEMA_COLUMNS, f"{n:,} [[schema.column]] tables"))
        columns = [_column_from_toml(entry, i, path) for i, entry in enumerate(raw, 1)]
        classes = table.strs("label_classes", [])
        try:
            out = cls(tuple(columns), table.str("label", None), tuple(classes),
                      tuple(table.strs("missing_tokens", list(DEFAULT_MISSING_TOKENS))))
        except InvalidInputError as err:
            raise ConfigError(f"{path}: [schema]: {err}") from None
        features = table.int("features", None, minimum=1)
        if features is not None and features != out.width:
            raise table.error("features", f"is {features} but the declared columns encode to "
                              f"d_in = {out.width} ({out.describe()})")
        table.str("dtype", "float64", check=lambda d: _float64(d))
        table.done()
        return out

    def to_toml(self) -> dict[str, Any]:
        """The ``[schema]`` table of this schema (keys as :meth:`from_toml` reads them; unset
        values left out)."""
        out: dict[str, Any] = {}
        if self.label is not None:
            out["label"] = self.label
        if self.label_classes:
            out["label_classes"] = list(self.label_classes)
        if self.missing_tokens != DEFAULT_MISSING_TOKENS:
            out["missing_tokens"] = list(self.missing_tokens)
        out["column"] = [{k: v for k, v in c.canonical().items() if v not in (None, "")
                          and not (k == "missing" and v == "refuse")
                          and not _default_tokens(c, k, v)} for c in self.columns]
        return out


def _default_tokens(column: Column, key: str, value: Any) -> bool:
    """Whether ``key = value`` of ``column`` is a boolean's default texts (left out of TOML)."""
    defaults = {"true": TRUE_TOKENS, "false": FALSE_TOKENS}
    return isinstance(column, BooleanColumn) and key in defaults and tuple(value) == defaults[key]


def _float64(dtype: str) -> str:
    if dtype != "float64":
        raise InvalidInputError(f"typed columns encode to float64, got dtype {dtype!r}")
    return dtype


#: Keys a ``[[schema.column]]`` table may hold, by type (besides name, type, missing, fill,
#: unit).
_TYPE_KEYS = {"numeric": ("center", "scale", "min", "max"),
              "categorical": ("categories", "unknown"), "boolean": ("true", "false")}


def _column_from_toml(entry: Any, number: int, path: Path) -> Column:
    """Column ``number`` (1-based) of ``[[schema.column]]``."""
    name = f"schema.column #{number}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    table = Table({name: entry}, name, path)
    col_name = table.str("name")
    kind = table.str("type", "numeric")
    if kind not in COLUMN_TYPES:
        raise table.error("type", f"expected one of {', '.join(COLUMN_TYPES)}, got {kind!r}")
    args: dict[str, Any] = {"name": col_name, "missing": table.str("missing", "refuse"),
                            "unit": table.str("unit", "")}
    if "fill" in entry:
        args["fill"] = table.value("fill", None, (int, float, str, bool),
                                  "a number, a category or true/false")
    for key in _TYPE_KEYS[kind]:
        if key in ("center", "scale", "min", "max"):
            args[key] = table.float(key, None)
        elif key == "unknown":
            args[key] = table.str(key, "refuse")
        elif key in entry:
            args[key] = tuple(table.strs(key))
    try:
        table.done()
    except ConfigError as err:
        raise ConfigError(f"{err} (a {kind} column takes name, type, missing, fill, unit, "
                          f"{', '.join(_TYPE_KEYS[kind])})") from None
    try:
        return COLUMN_TYPES[kind](**args)
    except (InvalidInputError, TypeError) as err:
        raise ConfigError(f"{path}: [{name}] ({col_name!r}): {err}") from None
