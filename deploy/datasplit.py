"""``noisyanchor data split``: one CSV table per site, as each would export it from its own
systems, from a bundled data set or the operator's own table.

Records are dealt to the sites stratified by label (every site sees every class in about the
same proportion), or label-skewed with a Dirichlet ``alpha`` (small ``alpha``: each site holds
mostly a few classes; :func:`experiments.partition.label_skewed`). Optionally a fraction of each
site's records is held back for prediction: ``<site>-new.csv`` holds them without the label
column (next week's records, what ``participant predict`` reads), ``<site>-new-labels.csv``
their labels in the same order, to score the predictions. A FILE keeps its cells as written
(typed columns, categories, missing cells and all) and its delimiter; rows stay in their
original order.

``--out`` is a folder, or a pattern with ``{site}`` (``'kits/{site}/data'`` puts each table
where the site's kit expects it). The summary ``split.json`` (every site's counts and paths: the
operator's, for no site to see) goes in the folder, or beside the sites' folders of a pattern
(``kits/split.json``), never into one site's folder. Nothing is written when any target file
exists already.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import AlreadyExistsError, InvalidInputError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.tabular.errors import TableError
from noisyanchor.common.tabular.reader import open_table_text, table_header, table_rows
from noisyanchor.common.tomlconfig import check_id
from noisyanchor.experiments.datasets import TABLES, Table, bundled_table
from noisyanchor.experiments.partition import label_skewed, stratified_iid

#: Name of the summary written beside the tables (:func:`summary_path`).
SUMMARY = "split.json"


@dataclass(frozen=True)
class SiteShare:
    """What one site received: its table, and the held-back records if any."""

    site: str
    path: Path
    records: int
    labels: dict[str, int]
    new: Path | None = None
    new_labels: Path | None = None
    held_back: int = 0


def read_source(source: str, *, label_column: str = "label", delimiter: str = ",") -> Table:
    """A bundled table by name, else the CSV file ``source`` (its header and cells as they
    are; it must have the label column: records are dealt by label)."""
    if source in TABLES:
        return bundled_table(source)
    path = Path(source)
    if path.suffix.lower() != ".csv" and not path.is_file():
        raise InvalidInputError(f"--dataset {source!r} is neither a bundled data set "
                                f"({', '.join(TABLES)}) nor a .csv file")
    shown = str(path)
    with open_table_text(path, shown) as fh:
        rows = table_rows(fh, path, shown, delimiter)
        header_line, header = table_header(rows, shown, delimiter)
        if label_column not in header:
            raise TableError(shown, f"the header has no label column {label_column!r}",
                             line=header_line, hint="name it with --label")
        body = []
        for line, row in rows:
            if len(row) != len(header):
                raise TableError(shown, f"the row has {len(row)} fields, the header "
                                 f"{len(header)}", line=line)
            body.append(row)
    if not body:
        raise TableError(shown, "the file has a header but no records", line=header_line)
    return Table(path.stem, tuple(header), body, label_column)


def _target(out: str, site: str) -> Path:
    return Path(out.replace("{site}", site)) if "{site}" in out else Path(out)


def summary_path(out: str) -> Path:
    """Where the summary goes: in ``out``, or, for a pattern, in the folder above the first
    part naming ``{site}`` (``kits/{site}/data``: ``kits/split.json``), outside every site's
    folder."""
    parts = Path(out).parts
    at = next((j for j, part in enumerate(parts) if "{site}" in part), None)
    return (Path(out) if at is None else Path(*parts[:at])) / SUMMARY


def _csv(header: Sequence[str], rows: Sequence[Sequence[str]], delimiter: str = ",") -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode()


def split_table(table: Table, sites: Sequence[str], out: str, *, alpha: float | None = None,
                holdout: float = 0.0, seed: int = 0, delimiter: str = ",") -> list[SiteShare]:
    """Deal ``table``'s records to ``sites`` and write one CSV per site (see the module
    docstring); returns what each site got. ``seed`` makes the split reproducible;
    ``delimiter`` is the source's, kept in every site's table (a ``;`` export's decimal commas
    stay readable, as ``[participant] decimal = ','`` reads them)."""
    sites = [check_id(s, "site name") for s in sites]
    if len(sites) < 2 or len(set(sites)) != len(sites):
        raise InvalidInputError(f"--sites needs at least 2 distinct names, got {sites}")
    if not 0.0 <= holdout < 1.0:
        raise InvalidInputError(f"--holdout must be in [0, 1), got {holdout}")
    if alpha is not None and not alpha > 0:
        raise InvalidInputError(f"--alpha must be > 0, got {alpha}")
    texts = [t.strip() for t in table.column(table.label)]
    classes, y = np.unique(np.asarray(texts, dtype=str), return_inverse=True)
    rng = np.random.default_rng(seed)
    parts = (stratified_iid(y, len(sites), rng) if alpha is None
             else label_skewed(y, len(sites), rng, alpha=alpha))
    label_at = table.header.index(table.label)
    plan: dict[Path, bytes] = {}
    shares = []
    for site, part in zip(sites, parts, strict=True):
        folder = _target(out, site)
        held = np.zeros(len(part), dtype=bool)
        if holdout:
            held[rng.permutation(len(part))[:round(holdout * len(part))]] = True
        kept = part[~held]
        path = folder / f"{site}.csv"
        plan[path] = _csv(table.header, [table.rows[i] for i in kept], delimiter)
        share = SiteShare(site, path, len(kept), {str(c): int(np.sum(y[kept] == k))
                                                  for k, c in enumerate(classes)})
        if held.any():
            features = [j for j in range(len(table.header)) if j != label_at]
            new, new_labels = folder / f"{site}-new.csv", folder / f"{site}-new-labels.csv"
            plan[new] = _csv([table.header[j] for j in features],
                             [[table.rows[i][j] for j in features] for i in part[held]],
                             delimiter)
            plan[new_labels] = _csv([table.label], [[texts[i]] for i in part[held]], delimiter)
            share = SiteShare(site, path, len(kept), share.labels, new, new_labels,
                              int(held.sum()))
        shares.append(share)
    plan[summary_path(out)] = json.dumps({
        "source": table.name, "sites": {s.site: {
            "table": str(s.path), "records": s.records, "labels": s.labels,
            "held_back": s.held_back, "new": str(s.new) if s.new else None,
            "new_labels": str(s.new_labels) if s.new_labels else None} for s in shares},
        "label": table.label, "columns": list(table.header), "alpha": alpha,
        "holdout": holdout, "seed": seed},
        indent=2).encode()
    existing = [str(p) for p in plan if p.exists()]
    if existing:
        raise AlreadyExistsError(f"refusing to overwrite {', '.join(existing[:3])}"
                                 f"{' ...' if len(existing) > 3 else ''}: choose another --out "
                                 "or remove them; nothing was written")
    for path, data in plan.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    return shares
