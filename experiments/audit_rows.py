"""The audit copy of a sweep's rows: ``rows.jsonl.gz``, every row with the fields the report's
numbers read, gzip-compressed, small enough to commit beside ``summary.json`` so an auditor can
recompute the claims and intervals from committed rows (``rows.jsonl`` itself, tens of MB at
digits size, is not committed).

Dropped from every row (the report's claims, intervals and tables never read them):

* ``grid``: the reconstructed images of ``fig_grid`` only (half the rows' bytes); without it
  that figure is skipped;
* ``relative_error_per_target``: per-target detail of ``relative_error``, which is kept;
* ``attack_diagnostics`` other than ``ml`` (the ML attack's multi-start, summarised by the
  report): per-target locator scores of the other attacks, for inspection only;
* ``test_predictions_by_model`` and ``test_labels`` of the noisy draws: only the noiseless
  controls' are read (the noiseless claim's paired bootstrap), and those are kept.

``noisyanchor experiment audit-rows --results DIR`` writes it from ``DIR/rows.jsonl``.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.sweep import ROWS_FILE

AUDIT_ROWS_FILE = "rows.jsonl.gz"
#: Fields no row of the audit copy carries.
DROPPED = ("grid", "relative_error_per_target")
#: Fields only the noiseless controls keep (the noiseless claim reads them from the controls).
CONTROL_ONLY = ("test_predictions_by_model", "test_labels")
#: The one ``attack_diagnostics`` entry the report reads.
KEPT_DIAGNOSTICS = ("ml",)


def audit_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without the fields the report's numbers never read (see the module docstring)."""
    out = {k: v for k, v in row.items()
           if k not in DROPPED and k != "attack_diagnostics"
           and (row.get("control") or k not in CONTROL_ONLY)}
    diagnostics = {k: v for k, v in (row.get("attack_diagnostics") or {}).items()
                   if k in KEPT_DIAGNOSTICS}
    if diagnostics:
        out["attack_diagnostics"] = diagnostics
    return out


def read_rows(results: Path) -> list[dict[str, Any]]:
    """Every row of ``results/rows.jsonl``, or of its audit copy ``rows.jsonl.gz`` when the full
    rows are absent (a fresh checkout)."""
    full, audit = results / ROWS_FILE, results / AUDIT_ROWS_FILE
    path = full if full.exists() or not audit.exists() else audit
    try:
        text = (gzip.decompress(path.read_bytes()).decode() if path == audit
                else path.read_text())
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, EOFError, json.JSONDecodeError, gzip.BadGzipFile) as err:
        raise InvalidInputError(f"cannot read the rows in {path}: {err}") from err


def write_audit_rows(results: Path) -> dict[str, Any]:
    """Write ``results/rows.jsonl.gz`` from ``results/rows.jsonl``; its row count and sizes."""
    source = results / ROWS_FILE
    if not source.exists():
        raise InvalidInputError(f"{source} does not exist: the audit copy is made from the "
                                "full rows the sweep wrote")
    rows = read_rows(results)
    text = "".join(json.dumps(audit_row(r)) + "\n" for r in rows).encode()
    # mtime=0: the same rows give the same bytes, so a rewrite leaves git with no change
    packed = gzip.compress(text, compresslevel=9, mtime=0)
    (results / AUDIT_ROWS_FILE).write_bytes(packed)
    return {"rows": len(rows), "bytes": len(packed), "uncompressed_bytes": len(text),
            "source_bytes": source.stat().st_size}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment audit-rows``."""
    ps = sub.add_parser("audit-rows", help="write a sweep's compact rows.jsonl.gz (the fields "
                        "the report's numbers read) to commit beside its summary")
    ps.add_argument("--results", required=True, help="sweep folder holding rows.jsonl")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    res = write_audit_rows(Path(args.results))
    print(f"{res['rows']} rows: {res['source_bytes']} bytes in {ROWS_FILE}, "
          f"{res['bytes']} in {AUDIT_ROWS_FILE}")
    return 0
