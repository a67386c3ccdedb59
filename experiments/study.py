"""A swept study: the rows of one participant count with their spline fits, and the attack sets
whose strongest member the report and the figures compare methods by.

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
from noisyanchor.experiments.fits import SplineFit, fit_spline
from noisyanchor.experiments.sweep import META_FILE, ROWS_FILE

#: The paper's three attacks on AA-I-GDP (anchor noise); ``known_anchor`` is reported beside.
PAPER_ANCHOR_ATTACKS = ("mp", "op", "am")
#: The attacks the paper evaluates against each noisy method (Section 5.2).
PAPER_ATTACKS = {"c-gdp-pn": ("known_secret",), "aa-igdp-pn": ("known_anchor",),
                 "aa-igdp-an": PAPER_ANCHOR_ATTACKS}
#: Attack sets of the "strongest attack" curves: the paper's, and every attack of the engine.
ATTACK_SETS = ("paper", "all")
#: The participant count a report leads with (the paper's main setting), if swept.
MAIN_P = 10


def load_rows(results: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``meta.json`` and every row of ``rows.jsonl`` in ``results``."""
    try:
        meta = json.loads((results / META_FILE).read_text())
        rows = [json.loads(line) for line in (results / ROWS_FILE).read_text().splitlines()
                if line.strip()]
    except (OSError, json.JSONDecodeError) as err:
        raise InvalidInputError(f"cannot read sweep results in {results}: {err}") from err
    return meta, rows


def strongest(row: dict[str, Any], attack_set: str = "all") -> float | None:
    """Linkage of the strongest attack on this row (pointwise maximum over its attacks, or over
    the paper's attacks for this method with ``attack_set="paper"``)."""
    link = row["linkage"]
    if attack_set == "paper" and row["method"] in PAPER_ATTACKS:
        link = {a: link[a] for a in PAPER_ATTACKS[row["method"]]}
    return max(link.values()) if link else None


#: Leakage metrics a report can use: row key and label.
METRICS = {"exact": ("linkage", "exact-source linkage"),
           "identity": ("identity_linkage", "cross-record identity linkage")}


class Study:
    """Rows of one participant count ``p`` with their fits.

    With ``metric="identity"`` every row's ``linkage`` is its cross-record identity linkage, so
    the fits, claims and figures all use that metric (the paper's CelebA protocol).
    """

    def __init__(self, rows: list[dict[str, Any]], meta: dict[str, Any],
                 rng: np.random.Generator, resamples: int,
                 metric: str = "exact"):
        self.meta = meta
        key, self.metric_label = METRICS[metric]
        rows = [{**r, "linkage": r[key]} for r in rows]
        self.controls = {r["method"]: r for r in rows if r["control"]}
        self.draws: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            if not r["control"]:
                self.draws[r["method"]].append(r)
        for m in self.draws:
            self.draws[m].sort(key=lambda r: r["draw"])
        self.fits: dict[str, SplineFit] = {}
        for m, rs in self.draws.items():
            if len(rs) < 9:
                continue
            x = np.array([r["noise"] for r in rs])
            self.fits[f"{m}/utility"] = fit_spline(x, [r["utility"] for r in rs], rng,
                                                   resamples=resamples)
            for attack_set in ATTACK_SETS:
                self.fits[f"{m}/strongest-{attack_set}"] = fit_spline(
                    x, [strongest(r, attack_set) for r in rs], rng, resamples=resamples)
            for attack in rs[0]["linkage"]:
                self.fits[f"{m}/{attack}"] = fit_spline(
                    x, [r["linkage"][attack] for r in rs], rng, resamples=resamples)

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
