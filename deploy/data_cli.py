"""Subcommands that prepare a site's table: ``schema draft`` (a draft ``[schema]`` from one
site's CSV, for the operator to review), ``schema check`` (a site's table read with a schema,
offline, as its upload will read it) and ``data split`` (one CSV per site from a bundled data
set or the operator's own table)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

#: Top-level commands of this role and their one-line help (see :mod:`noisyanchor.cli`).
COMMANDS = {"schema": "draft a typed [schema] from one site's CSV table, or check a table "
                      "against one",
            "data": "split a data set into one CSV table per site"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``schema draft`` and ``data split`` to the top-level parser."""
    from noisyanchor.common.cliargs import nonnegative_float
    from noisyanchor.common.tabular.draft import MAX_CATEGORIES, SCALINGS

    schema = sub.add_parser("schema", help=COMMANDS["schema"])
    inner = schema.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    draft = inner.add_parser("draft", help="write a draft [schema] (types, categories, ranges) "
                             "from one site's table; its statistics are that site's: replace "
                             "them with public values")
    draft.add_argument("--data", type=Path, required=True, help="the site's CSV table")
    draft.add_argument("--label", default="label", help="the label column")
    draft.add_argument("--tag", default="split", help="the optional split column (left out)")
    draft.add_argument("--delimiter", default=",", help="between values")
    draft.add_argument("--decimal", default=".", choices=(".", ","),
                       help="the decimal mark of numbers (',' with another delimiter)")
    draft.add_argument("--scaling", choices=SCALINGS, default="standard",
                       help="numeric columns: center/scale (standard) or min/max (range)")
    draft.add_argument("--max-categories", type=int, default=MAX_CATEGORIES,
                       help="a text column with more distinct values is left out")
    draft.add_argument("--out", type=Path, default=None,
                       help="write the draft here (refused if it exists; default: print it)")
    draft.set_defaults(handler=_draft)
    check = inner.add_parser("check", help="read a site's table with a [schema] as the upload "
                             "will, offline: the first bad cell by file, line, column and value, "
                             "or the records' count, d_in and the preprocessing digest")
    check.add_argument("--schema", type=Path, required=True,
                       help="a file with the [schema] table: a site's kit config "
                       "(kits/<site>/<site>.toml, whose [participant] data, delimiter, "
                       "decimal, label_column and tag_column are used too), the project file, the "
                       "analyst config or a draft")
    check.add_argument("--data", type=Path, default=None,
                       help="the site's CSV table (default: the kit's [participant] data)")
    check.add_argument("--label", default=None, help="the label column, unless the schema "
                       "names it (default: the kit's label_column, else 'label')")
    check.add_argument("--tag", default=None, help="the optional split column (default: the "
                       "kit's tag_column, else 'split')")
    check.add_argument("--delimiter", default=None,
                       help="between values (default: the kit's delimiter, else ',')")
    check.add_argument("--decimal", default=None, choices=(".", ","),
                       help="the decimal mark of numbers (default: the kit's decimal, else '.')")
    check.add_argument("--no-labels", action="store_true",
                       help="a table without labels (records to predict)")
    check.add_argument("--json", action="store_true", help="print the outcome as JSON")
    check.set_defaults(handler=_check)

    data = sub.add_parser("data", help=COMMANDS["data"])
    inner = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    split = inner.add_parser("split", help="one CSV per site, as each would export it")
    split.add_argument("--dataset", required=True, metavar="digits|breast-cancer|fair|FILE",
                       help="a bundled data set, or a CSV table with a label column")
    split.add_argument("--sites", required=True, help="site names, comma-separated")
    split.add_argument("--out", required=True, metavar="DIR",
                       help="folder of the tables, or a pattern with {site} (e.g. "
                       "'kits/{site}/data')")
    split.add_argument("--alpha", type=float, default=None,
                       help="label skew: Dirichlet concentration (small: strong skew; default: "
                       "stratified, no skew)")
    split.add_argument("--holdout", type=nonnegative_float, default=0.0,
                       help="fraction of each site's records held back for prediction "
                       "(<site>-new.csv without labels, <site>-new-labels.csv)")
    split.add_argument("--label", default="label", help="the label column of a FILE")
    split.add_argument("--delimiter", default=",", help="between the values of a FILE, and of "
                       "the sites' tables made from it")
    split.add_argument("--seed", type=int, default=0, help="of the split")
    split.add_argument("--json", action="store_true", help="print what each site got, and "
                       "where the summary is, as JSON")
    split.set_defaults(handler=_split)


def _draft(args: argparse.Namespace) -> int:
    from noisyanchor.common.errors import AlreadyExistsError
    from noisyanchor.common.files import atomic_write
    from noisyanchor.common.tabular.draft import draft_text, survey

    draft = survey(args.data, label_column=args.label, tag_column=args.tag,
                   delimiter=args.delimiter, decimal=args.decimal,
                   max_categories=args.max_categories)
    text = draft_text(draft, scaling=args.scaling)
    if draft.label is None:
        candidates = draft.label_candidates()
        print(f"warning: {args.data.name} has no label column {args.label!r}; every column is "
              "drafted as a feature"
              + (f": if the label is {' or '.join(map(repr, candidates))}, run again with "
                 f"--label {shlex.quote(candidates[0])}" if candidates else ""), file=sys.stderr)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    if args.out.exists():
        raise AlreadyExistsError(f"{args.out} exists; choose another --out (nothing written)")
    atomic_write(args.out, text.encode())
    print(f"draft schema of {args.data.name} in {args.out}: review it, and replace this site's "
          "statistics (centres, scales, ranges, categories) with public values")
    return 0


def _check(args: argparse.Namespace) -> int:
    from noisyanchor.common.errors import ConfigError
    from noisyanchor.common.tabular import TableError, TabularSchema, read_table
    from noisyanchor.common.tabular.ranges import far_values
    from noisyanchor.common.tomlconfig import read_toml

    doc = read_toml(args.schema)
    if not isinstance(doc.get("schema"), dict):
        raise ConfigError(f"{args.schema}: no [schema] table")
    reading = _kit_reading(doc, args)
    data = reading["data"]
    typed = "column" in doc["schema"]
    schema = TabularSchema.from_toml(doc["schema"], args.schema) if typed else None
    try:
        table = read_table(data, schema, label_column=reading["label_column"],
                           tag_column=reading["tag_column"], require_label=not args.no_labels,
                           delimiter=reading["delimiter"], decimal=reading["decimal"])
    except TableError as err:
        raise _naming_the_kit(err, args.schema) if "participant" in doc else err from None
    features = doc["schema"].get("features")
    if not typed and features is not None and table.x.shape[1] != features:
        raise ConfigError(f"{data} has {table.x.shape[1]} feature columns but "
                          f"{args.schema} declares features = {features}")
    digest = schema.digest().hex() if schema is not None else None
    far = far_values(schema, table.x, table.lines) if schema is not None else []
    columns = schema.columns if schema is not None else ()
    outcome = {"records": int(table.x.shape[0]), "d_in": int(table.x.shape[1]),
               "labels": table.labels is not None, "ignored": list(table.ignored),
               "preprocessing_sha256": digest,
               "columns": [{"name": c.name, "type": c.kind, "unit": c.unit or None,
                            "encoded": list(c.encoded_names), "encoding": c.describe()}
                           for c in columns],
               "warnings": [str(f) for f in far]}
    if args.json:
        print(json.dumps(outcome, indent=2))
        return 0
    print(f"{data}: {outcome['records']} records read, d_in = {outcome['d_in']}"
          + (f", columns left out: {', '.join(table.ignored)}" if table.ignored else "")
          + (f"; preprocessing {digest} (the kit's [protocol] preprocessing_sha256 must be "
             "the same)" if digest else ""))
    for column in columns:  # how each column is read and encoded, in its declared unit
        print(f"  {column.describe()}")
    for warning in outcome["warnings"]:
        print(f"warning: {warning}")
    return 0


def _naming_the_kit(err, kit: Path):
    """``err`` with its fix naming the kit the site gave (``--schema``), where it says "the
    site's config": the file to edit, not a description of it."""
    from noisyanchor.common.tabular import TableError

    return TableError(err.file, err.problem, line=err.line, column=err.column, value=err.value,
                      hint=err.hint.replace("the site's config", str(kit)).replace(
                          "<the kit's config>", str(kit)), detail=err.detail)


def _kit_reading(doc: dict, args: argparse.Namespace) -> dict:
    """How ``schema check`` reads the table: the command line's options, else the site kit's
    ``[participant]`` settings (when ``--schema`` is a kit config), else the defaults: the same
    reading as the site's upload."""
    from noisyanchor.common.errors import ConfigError
    from noisyanchor.common.tomlconfig import Table

    kit = Table(doc, "participant", args.schema, required=False)
    reading = {"data": args.data if args.data is not None else kit.path("data", None),
               "delimiter": args.delimiter or kit.str("delimiter", ","),
               "decimal": args.decimal or kit.str("decimal", "."),
               "label_column": args.label or kit.str("label_column", "label"),
               "tag_column": args.tag or kit.str("tag_column", "split")}
    if reading["data"] is None:
        raise ConfigError(f"no table to check: give --data, or a site's kit config as --schema "
                          f"({args.schema} has no [participant] data)")
    return reading


def _split(args: argparse.Namespace) -> int:
    from noisyanchor.deploy.datasplit import read_source, split_table, summary_path

    table = read_source(args.dataset, label_column=args.label, delimiter=args.delimiter)
    shares = split_table(table, [s.strip() for s in args.sites.split(",") if s.strip()],
                         args.out, alpha=args.alpha, holdout=args.holdout, seed=args.seed,
                         delimiter=args.delimiter)
    summary = summary_path(args.out)
    if args.json:
        # keyed by site id, as every --json output's "sites" (common.json_vocabulary)
        print(json.dumps({"sites": {s.site: {"site": s.site, "table": str(s.path),
                                             "records": s.records, "labels": s.labels,
                                             "held_back": s.held_back,
                                             "new": str(s.new) if s.new else None,
                                             "new_labels": str(s.new_labels) if s.new_labels
                                             else None}
                                    for s in shares},
                          "summary": str(summary)}, indent=2))
        return 0
    for s in shares:
        held = f"; {s.held_back} held back in {s.new}" if s.held_back else ""
        print(f"{s.site}: {s.records} records in {s.path} (labels "
              f"{', '.join(f'{k} {v}' for k, v in s.labels.items())}){held}")
    print(f"every site's counts and paths in {summary}: yours, the operator's; it goes to no site")
    return 0
