"""A swept study: the rows of one participant count, seen through one downstream model and one
auditor, with their spline fits, and the attack sets whose strongest member the report and the
figures compare methods by.

Kept apart from :mod:`experiments.report` and :mod:`experiments.figures` so both read it and
neither imports the other.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.audit_rows import read_rows
from noisyanchor.experiments.fits import SplineFit, fit_spline
from noisyanchor.experiments.linkage import ATTACK_SETS, strongest_attack
from noisyanchor.experiments.sweep import META_FILE

#: The participant count a report leads with (the paper's main setting), if swept.
MAIN_P = 10
#: Fewest draws of a method for its curves to be fitted (the spline has 9 coefficients).
MIN_DRAWS_TO_FIT = 9


def load_rows(results: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``meta.json`` and every row of ``rows.jsonl`` in ``results`` (of its audit copy
    ``rows.jsonl.gz`` when absent: :mod:`experiments.audit_rows`)."""
    try:
        meta = json.loads((results / META_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise InvalidInputError(f"cannot read sweep results in {results}: {err}") from err
    return meta, read_rows(results)


def strongest(row: dict[str, Any], attack_set: str = "all",
              threats: dict[str, str] | None = None) -> float | None:
    """Linkage of the strongest attack of ``attack_set`` on this row: the attack that links most
    on the row's held-out selection galleries (``selection``; rows of older sweeps without them:
    the pointwise maximum), with its linkage on the reported galleries."""
    best = strongest_attack(row["linkage"], row["method"], attack_set, threats,
                            selection=row.get("selection"))
    return None if best is None else best[1]


def strongest_name(row: dict[str, Any], attack_set: str = "all",
                   threats: dict[str, str] | None = None) -> str | None:
    """Name of that attack (None when none of the set ran)."""
    best = strongest_attack(row["linkage"], row["method"], attack_set, threats,
                            selection=row.get("selection"))
    return None if best is None else best[0]


def replicate_of(row: dict[str, Any]) -> int:
    """The replicated deployment a row belongs to (0 for sweeps without replicates)."""
    return int(row.get("replicate", 0))


#: Leakage metrics a report can use: row key and label.
METRICS = {"exact": ("linkage", "exact-source linkage"),
           "identity": ("identity_linkage", "cross-record identity linkage")}


def view_rows(rows: list[dict[str, Any]], metric: str, model: str | None,
              auditor: str | None) -> list[dict[str, Any]]:
    """Rows with ``linkage`` set to ``metric``'s linkage under ``auditor``, ``selection`` to its
    linkage on the selection galleries (None in sweeps without them) and ``utility`` to
    ``model``'s (None: the sweep's primary auditor or model)."""
    key = METRICS[metric][0]
    out = []
    for r in rows:
        link = r[key] if auditor is None else (r.get(f"{key}_by_auditor") or {}).get(auditor)
        sel = (None if auditor is None
               else (r.get(f"selection_{key}_by_auditor") or {}).get(auditor))
        util = (r["utility"] if model is None
                else r.get("utility_by_model", {}).get(model, {}).get("utility"))
        if link is None:
            raise InvalidInputError(f"rows carry no {key} under auditor {auditor!r}")
        out.append({**r, "linkage": link, "selection": sel, "utility": util})
    return out


class Study:
    """Rows of one participant count ``p`` under one (model, auditor) pair, with their fits.

    With ``metric="identity"`` every row's ``linkage`` is its cross-record identity linkage, so
    the fits, claims and figures all use that metric (the paper's CelebA protocol).
    ``model``/``auditor`` None: the sweep's primary ones. ``full=False`` fits only the curves
    the claims need (utility and the strongest-attack linkage per method), without bands.
    """

    def __init__(self, rows: list[dict[str, Any]], meta: dict[str, Any],
                 rng: np.random.Generator, resamples: int, metric: str = "exact", *,
                 model: str | None = None, auditor: str | None = None, full: bool = True,
                 replicate: int = 0):
        self.meta = meta
        self.metric = metric
        self.model, self.auditor = model, auditor
        self.replicate = replicate
        #: Each attack's threat (sweeps before threats: every attack is the colluder's).
        self.threats: dict[str, str] = meta.get("attack_threats") or {}
        _, self.metric_label = METRICS[metric]
        rows = view_rows([r for r in rows if replicate_of(r) == replicate], metric, model,
                         auditor)
        scale = meta.get("translation_scale")
        self.controls: dict[str, dict[str, Any]] = {}
        #: I-GDP controls at every translation scale swept, by scale.
        self.translation_controls: dict[float, dict[str, Any]] = {}
        self.draws: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            if not r["control"]:
                self.draws[r["method"]].append(r)
                continue
            if r["method"] == "i-gdp":
                self.translation_controls[r.get("translation_scale")] = r
            if scale is None or r.get("translation_scale", scale) == scale:
                self.controls[r["method"]] = r
        for m in self.draws:
            self.draws[m].sort(key=lambda r: r["draw"])
        self.fits: dict[str, SplineFit] = {}
        resamples = resamples if full else 0
        for m, rs in self.draws.items():
            if len(rs) < MIN_DRAWS_TO_FIT:
                continue
            x = np.array([r["noise"] for r in rs])
            self.fits[f"{m}/utility"] = fit_spline(x, [r["utility"] for r in rs], rng,
                                                   resamples=resamples)
            for attack_set in self.attack_sets(m):
                self.fits[f"{m}/strongest-{attack_set}"] = fit_spline(
                    x, self.strongest_series(m, attack_set), rng, resamples=resamples)
            if full:
                for attack in rs[0]["linkage"]:
                    self.fits[f"{m}/{attack}"] = fit_spline(
                        x, [r["linkage"][attack] for r in rs], rng, resamples=resamples)

    def attack_sets(self, method: str) -> list[str]:
        """The attack sets with at least one attack on ``method``'s draws."""
        rs = self.draws.get(method, [])
        return [a for a in ATTACK_SETS if rs and strongest(rs[0], a, self.threats) is not None]

    def strongest_series(self, method: str, attack_set: str) -> list[float]:
        """The strongest-attack linkage of every draw of ``method`` (draw order)."""
        return [strongest(r, attack_set, self.threats) for r in self.draws.get(method, [])]

    def matched_utility(self, method: str, level: float, attack_set: str) -> dict[str, Any]:
        """Noise where ``method``'s strongest-attack fit first reaches ``level``, and the fitted
        utility there."""
        link = self.fits.get(f"{method}/strongest-{attack_set}")
        util = self.fits.get(f"{method}/utility")
        if link is None or util is None:
            return {"noise": None, "utility": None}
        noise = link.first_crossing(level)
        return {"noise": noise, "utility": None if noise is None else util.at(noise)}


def main_participant_count(studies: dict[int, Any]) -> int:
    """:data:`MAIN_P` if it was swept, else the smallest swept participant count."""
    return MAIN_P if MAIN_P in studies else min(studies)
