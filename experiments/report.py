"""``noisyanchor experiment report``: spline fits, the paper's figures and a markdown summary of
a sweep's rows.

The numbers (``summary.json``, ``fits.json``) and the figures come from the same fits; the
summary states, per claim of the paper, whether it holds on the swept data, under every
(downstream model, auditor) pair the sweep measured, with a "robust" verdict that is true only
when the claim holds under all of them; and which attack was strongest per draw, among every
attack and among the paper's.

References: noisy-anchor GDP paper, Section 5 (Figs. 2-11 and the quoted numbers).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.attacks import ATTACK_NAMES, PAPER_ANCHOR_ATTACKS
from noisyanchor.common.cliargs import int_at_least
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.methods import Method
from noisyanchor.experiments.audit_rows import AUDIT_ROWS_FILE
from noisyanchor.experiments.claims import (
    CLAIM_AXES,
    CLAIMS,
    coupled_pairs,
    estimate_text,
    judge,
    judge_deployments,
    judge_pooled,
    low_claim_set,
    pair_linkage_differences,
    robust,
    summary_deployments,
    summary_robust,
)
from noisyanchor.experiments.intervals import mean_interval
from noisyanchor.experiments.linkage import ATTACK_SETS, CHANCE, PAPER_ATTACKS, strongest_attack
from noisyanchor.experiments.study import (
    METRICS,
    Study,
    load_rows,
    main_participant_count,
    replicate_of,
    view_rows,
)
from noisyanchor.experiments.sweep import COUPLED, ROWS_FILE, RUNS_FILE

#: Linkage levels at which methods' fitted utilities are compared (paper: 12.4% and chance).
MATCHED_LEVELS = (0.124, 0.15, 0.20, 0.30)
#: Levels quoted for "anchor noise keeps more utility at matched low linkage"; the verdict is
#: judged on every 0.5% step of [12.4%, 20%] that both fits reach (``LOW_GRID``).
LOW_LEVELS = (0.124, 0.15, 0.20)
LOW_GRID = tuple(np.round(np.arange(0.124, 0.2001, 0.005), 3))
NOISY = (Method.C_GDP_PN.value, Method.AA_IGDP_PN.value, Method.AA_IGDP_AN.value)
#: Resamples of every claim's interval (each resample refits the splines it compares).
CLAIM_RESAMPLES = 1000
#: Names of the attack sets in text.
SET_TEXT = {"paper": "the paper's attacks", "all": "every attack of the colluder",
            "analyst": "the analyst alone with known records", "public":
            "the analyst with public data"}
#: Every method, in the order of the threat tables.
ALL_METHODS = tuple(m.value for m in Method)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "not reached" if x is None else format(x, fmt)


def _grid_text() -> str:
    """The low-linkage grid as quoted in the report, from :data:`LOW_GRID`."""
    return f"{_pct(LOW_GRID[0])}, {_pct(LOW_GRID[1])}, ..., {_pct(LOW_GRID[-1])}"


def _rows_cpu_seconds(rows: list[dict[str, Any]]) -> tuple[int, float] | None:
    """Tasks and their CPU time summed from the rows (a coupled C-GDP row shares its task's
    time and is not counted again); None when a row lacks it (older sweeps)."""
    if not rows or not all("cpu_seconds" in r for r in rows):
        return None
    coupled = {m.value for m in COUPLED.values()}
    own = [r["cpu_seconds"] for r in rows if r["method"] not in coupled]
    return len(own), float(sum(own))


def runtime_text(results: Path, rows: list[dict[str, Any]] | None = None) -> str | None:
    """The sweep's measured wall time and machine load, from ``runs.jsonl`` (None if absent);
    with ``rows``, also every task's CPU time when the runs recorded ran only some tasks (a
    sweep resumed after a run that ended before recording itself)."""
    path = results / RUNS_FILE
    if not path.exists():
        return None
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    total = sum(r["seconds"] for r in runs)
    ran = sum(r["ran"] for r in runs)
    last = runs[-1]
    cpu = ""
    if all("task_cpu_seconds" in r for r in runs):
        spent = sum(r["task_cpu_seconds"] for r in runs)
        cpu = (f" ({spent:.0f} CPU-s in the tasks: {spent / last['workers'] / 60:.1f} min on "
               f"{last['workers']} cores of its own)")
    text = (f"{total:.1f} s wall ({total / 60:.2f} min){cpu} for {ran} tasks in {len(runs)} "
            f"run(s), {last['workers']} worker processes on a {last['cpu_count']}-core machine; "
            "load "
            f"average (1/5/15 min) {'/'.join(f'{x:.1f}' for x in last['load_average_start'])} "
            f"at the start and {'/'.join(f'{x:.1f}' for x in last['load_average_end'])} at the "
            f"end of the last run (the machine is shared), finished {last['finished_utc']}")
    every = _rows_cpu_seconds(rows or [])
    if every is not None and every[0] > ran:  # a run that ended before recording itself
        text += (f"; all {every[0]} tasks of the rows, an unrecorded earlier run's included, "
                 f"took {every[1]:.0f} CPU-s ({every[1] / last['workers'] / 60:.1f} min on "
                 f"{last['workers']} cores of their own)")
    return text


# ---- numbers of one study ---------------------------------------------------------------------

def _pairs(study: Study) -> dict[str, Any]:
    pairs = coupled_pairs(study)
    if not pairs:
        return {"pairs": 0}
    link = pair_linkage_differences(pairs)
    return {"pairs": len(pairs),
            "identical_linkage_pairs": int(sum(v == 0 for v in link)),
            "max_linkage_difference": max(link),
            "max_relative_z_difference": max(a["pair_z_rel_diff"] for a, _ in pairs),
            "max_utility_difference": max(abs(a["utility"] - c["utility"]) for a, c in pairs),
            "max_relative_error_difference": max(
                abs(a["relative_error"]["known_anchor"] - c["relative_error"]["known_secret"])
                for a, c in pairs)}


def _attack_ranking(study: Study) -> dict[str, Any]:
    rs = study.draws.get(Method.AA_IGDP_AN.value, [])
    if not rs:
        return {}
    means = {a: float(np.mean([r["linkage"][a] for r in rs])) for a in rs[0]["linkage"]}
    paper = {a: means[a] for a in PAPER_ANCHOR_ATTACKS if a in means}
    op_max = sum(r["linkage"]["op"] >= max(r["linkage"][a] for a in paper) for r in rs)
    return {"mean_linkage": means, "strongest_of_paper_three": max(paper, key=paper.__getitem__),
            "op_pointwise_max_draws": int(op_max), "draws": len(rs),
            "strongest_of_all": max(means, key=means.__getitem__)}


def _solver_counts(study: Study) -> dict[str, Any]:
    rs = study.draws.get(Method.AA_IGDP_AN.value, [])
    v_pt = study.meta["v_pt"]
    out = {"v_pt": v_pt}
    for side, sel in (("below_v_pt", [r for r in rs if r["v"] < v_pt]),
                      ("above_v_pt", [r for r in rs if r["v"] >= v_pt])):
        secs = [r["solver"]["seconds"] for r in sel]
        out[side] = {"draws": len(sel),
                     "converged": int(sum(bool(r["solver"]["converged"]) for r in sel)),
                     "certified": int(sum(bool(r["solver"]["certified"]) for r in sel)),
                     "median_iterations": float(np.median([r["solver"]["iterations"]
                                                           for r in sel])) if sel else None,
                     "median_seconds": float(np.median(secs)) if secs else None}
    return out


def _low_margins(study: Study) -> dict[str, dict[str, Any]]:
    """Anchor noise minus private-data noise in fitted utility over :data:`LOW_GRID`."""
    out = {}
    for aset in ATTACK_SETS:
        diffs = []
        for lvl in LOW_GRID:
            an = study.matched_utility(Method.AA_IGDP_AN.value, lvl, aset)["utility"]
            pn = study.matched_utility(Method.AA_IGDP_PN.value, lvl, aset)["utility"]
            if an is not None and pn is not None:
                diffs.append(an - pn)
        lowest = {m: (float(np.min(fit.fit)) if (fit := study.fits.get(
            f"{m}/strongest-{aset}")) is not None else None)
            for m in (Method.AA_IGDP_PN.value, Method.AA_IGDP_AN.value)}
        out[aset] = {"levels": len(diffs), "grid_levels": len(LOW_GRID),
                     "anchor_ahead": int(sum(d > 0 for d in diffs)),
                     "min_margin": min(diffs, default=None),
                     "max_margin": max(diffs, default=None),
                     "lowest_fitted_linkage": lowest}
    return out


def _strongest_tables(rows: list[dict[str, Any]], metric: str, auditors: list[str],
                      threats: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per auditor and noisy method (every replicate's draws): mean linkage of every attack,
    how many draws each was the strongest of each attack set (chosen on the selection
    galleries), and the strongest per draw of the anchor-noise sweep."""
    out: dict[str, dict[str, Any]] = {}
    for auditor in auditors:
        seen = view_rows(rows, metric, None, auditor)
        per: dict[str, Any] = {}
        for m in NOISY:
            rs = sorted((r for r in seen if r["method"] == m and not r["control"]),
                        key=lambda r: (replicate_of(r), r["draw"]))
            if not rs:
                continue

            def best(r: dict[str, Any], aset: str) -> tuple[str, float] | None:
                return strongest_attack(r["linkage"], r["method"], aset, threats,
                                        selection=r.get("selection"))

            counts = {aset: Counter(b[0] for r in rs if (b := best(r, aset)) is not None)
                      for aset in ATTACK_SETS}
            per[m] = {"draws": len(rs),
                      "mean_linkage": {a: float(np.mean([r["linkage"][a] for r in rs]))
                                       for a in rs[0]["linkage"]},
                      "strongest_draws": {aset: dict(c) for aset, c in counts.items() if c},
                      "per_draw": [[replicate_of(r), r["draw"], r["noise"],
                                    *(best(r, "all") or (None, None)),
                                    *(best(r, "paper") or (None, None))]
                                   for r in rs] if m == Method.AA_IGDP_AN.value else None}
        out[auditor] = per
    return out


def _threat_table(rows: list[dict[str, Any]], threats: dict[str, str],
                  auditor: str) -> dict[str, Any]:
    """Every method under every threat, from every replicate (``auditor``'s linkage): per
    method and attack set the strongest attack's linkage (chosen on the selection galleries;
    controls: one value per replicate; swept methods: every draw), and every attack's mean."""
    seen = view_rows(rows, "exact", None, auditor)
    scale = _main_scale(rows)
    out: dict[str, Any] = {}
    for m in ALL_METHODS:
        rs = [r for r in seen if r["method"] == m and r.get("translation_scale") == scale]
        if not rs:
            continue
        entry: dict[str, Any] = {"rows": len(rs), "control": bool(rs[0]["control"]), "sets": {}}
        for aset in ATTACK_SETS:
            picks = [b for r in rs if (b := strongest_attack(r["linkage"], m, aset, threats,
                                                            selection=r.get("selection")))]
            if not picks:
                continue
            values = [v for _, v in picks]
            entry["sets"][aset] = {"mean": float(np.mean(values)), "min": float(min(values)),
                                   "max": float(max(values)),
                                   "attack": Counter(a for a, _ in picks).most_common(1)[0][0]}
        entry["mean_linkage"] = {a: float(np.mean([r["linkage"][a] for r in rs]))
                                 for a in rs[0]["linkage"]}
        out[m] = entry
    return out


def _main_scale(rows: list[dict[str, Any]]) -> float | None:
    """The translation scale of every method's main rows (I-GDP has controls at several)."""
    return next((r.get("translation_scale") for r in rows if r["method"] != Method.I_GDP.value),
                None)


def _noise_bins(config: dict[str, Any], method: str) -> list[tuple[float, float]]:
    lo, hi = config["v_range"] if method == Method.AA_IGDP_AN.value else config["sigma_range"]
    edges = np.linspace(lo, hi, 4)
    return [(float(a), float(b)) for a, b in itertools.pairwise(edges)]


def _mi_cell(got: list[tuple[int, dict[str, Any]]], rng: np.random.Generator,
             resamples: int) -> dict[str, Any]:
    """Mean AUC and TPR at 1% FPR of one attack over rows ``(replicate, metrics)``, each with
    its 95% interval from a bootstrap of the rows nested in their deployments."""
    groups = [k for k, _ in got]
    cell: dict[str, Any] = {"rows": len(got)}
    for key in ("auc", "tpr_at_1pct_fpr"):
        res = mean_interval([g[key] for _, g in got], rng, resamples, groups)
        cell[key], cell[f"{key}_interval"] = res["estimate"], res["interval"]
    return cell


def _membership_table(rows: list[dict[str, Any]], config: dict[str, Any],
                      rng: np.random.Generator, resamples: int) -> dict[str, Any]:
    """Membership inference per method and noise level (the controls, then thirds of the swept
    range), every replicate: mean AUC and TPR at 1% FPR of each attack on each model with
    their intervals (rows nested in deployments), and the model's mean utility on the same
    rows; against ``Z`` per attack set."""
    scale = _main_scale(rows)
    out: dict[str, Any] = {}
    for m in ALL_METHODS:
        rs = [r for r in rows if r["method"] == m and r.get("membership")
              and r.get("translation_scale") == scale]
        if not rs:
            continue
        bins = ([("none", rs)] if rs[0]["control"] else
                [(f"{lo:.3g}-{hi:.3g}", [r for r in rs if lo <= r["noise"] <= hi])
                 for lo, hi in _noise_bins(config, m)])
        per_bin = {}
        for label, sel in bins:
            if not sel:
                continue
            entry: dict[str, Any] = {"rows": len(sel), "model": {}, "z": {}}
            for model in config["models"]:
                cell = {"utility": float(np.mean([r["utility_by_model"][model]["utility"]
                                                  for r in sel]))}
                for attack in ("loss_threshold", "shadow"):
                    got = [(replicate_of(r), g) for r in sel
                           if (g := r["membership"]["model"][model].get(attack))]
                    if got:
                        cell[attack] = _mi_cell(got, rng, resamples)
                entry["model"][model] = cell
            for aset in ATTACK_SETS:
                got = [(replicate_of(r), r["membership"]["z"][aset]) for r in sel
                       if aset in (r["membership"].get("z") or {})]
                if got:
                    entry["z"][aset] = _mi_cell(got, rng, resamples)
            per_bin[label] = entry
        out[m] = per_bin
    return out


def _ml_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ML attack's multi-start over every anchor-noise draw: targets, converged, starts,
    how often a start other than OP won, iterations."""
    facts = [f for r in rows if r["method"] == Method.AA_IGDP_AN.value and not r["control"]
             for f in ((r.get("attack_diagnostics") or {}).get("ml") or {}).values()]
    if not facts:
        return None
    return {"targets": len(facts), "converged": int(sum(f["converged"] for f in facts)),
            "starts": int(facts[0]["starts"]),
            "all_starts_converged": int(sum(f["converged_starts"] == f["starts"]
                                            for f in facts)),
            "other_start_won": int(sum(f["best_start"] != 0 for f in facts)),
            # A start whose likelihood beats the reported estimate's (relative 1e-9) would
            # mean the attack reported a worse optimum than it found: counted, expected 0.
            "start_beat_reported": int(sum(
                max(f["start_objectives"]) > f["objective"] + 1e-9 * abs(f["objective"])
                for f in facts if f.get("start_objectives"))),
            "median_iterations": float(np.median([f["iterations"] for f in facts]))}


def _model_convergence(rows: list[dict[str, Any]], models: list[str]) -> dict[str, Any]:
    """Per downstream model: fits whose chosen hyper-parameter's optimiser converged, and the
    search's fits that did not (recorded instead of scikit-learn's warnings)."""
    out = {}
    for m in models:
        got = [r["utility_by_model"][m] for r in rows if m in r.get("utility_by_model", {})
               and "converged" in r["utility_by_model"][m]]
        if got:
            out[m] = {"rows": len(got), "chosen_converged": int(sum(g["converged"] for g in got)),
                      "search_fits_not_converged": int(sum(g["fits_not_converged"]
                                                           for g in got))}
    return out


def _controls_by_model(study: Study) -> dict[str, Any]:
    """Noiseless controls' utility under every model, and I-GDP's at every translation scale."""
    models = study.meta.get("models") or []
    ctrl = {m: {k: r.get("utility_by_model", {}).get(k, {}).get("utility") for k in models}
            for m, r in study.controls.items()}
    scales = {str(s): {k: r.get("utility_by_model", {}).get(k, {}).get("utility")
                       for k in models}
              for s, r in sorted(study.translation_controls.items(), key=lambda kv: kv[0] or 0)}
    return {"control_utility_by_model": ctrl, "i_gdp_by_translation_scale": scales}


def _noise_estimate(study: Study) -> dict[str, Any] | None:
    """How well the anchor residuals estimate v: relative error of v^ over the draws."""
    rs = [r for r in study.draws.get(Method.AA_IGDP_AN.value, [])
          if r.get("v_hat") is not None and r["v"] > 0]
    if not rs:
        return None
    rel = [abs(r["v_hat"] - r["v"]) / r["v"] for r in rs]
    return {"draws": len(rs), "median_relative_error": float(np.median(rel)),
            "max_relative_error": float(max(rel))}


def summarize(study: Study, pairs: dict[int, dict[str, Study]] | None = None,
              rows: list[dict[str, Any]] | None = None,
              judgements: dict[int, dict[str, dict[str, Any]]] | None = None,
              config: dict[str, Any] | None = None,
              pooled: dict[str, dict[str, Any]] | None = None,
              rng: np.random.Generator | None = None,
              resamples: int = 0) -> dict[str, Any]:
    """Every number the markdown summary quotes, for one ``p``: ``study`` is the primary
    (model, auditor) view of replicate 0; ``pairs`` every measured view by replicate and
    ``"model/auditor"``; ``judgements`` the claims per replicate and axis
    (:func:`experiments.claims.judge`); ``pooled`` the claims on every deployment's draws
    pooled (:func:`experiments.claims.judge_pooled`); ``rng``/``resamples`` for the membership
    intervals."""
    ctrl = study.controls
    controls = {m: {"utility": r["utility"], "linkage": r["linkage"],
                    "relative_error": r["relative_error"],
                    "participant_only_utility": r.get("participant_only_utility")}
                for m, r in ctrl.items()}
    matched = {aset: {f"{lvl:.3f}": {m: study.matched_utility(m, lvl, aset) for m in NOISY}
                      for lvl in (*MATCHED_LEVELS, CHANCE)} for aset in ATTACK_SETS}
    crossings = {name: fit.first_crossing(CHANCE) for name, fit in study.fits.items()
                 if not name.endswith("/utility")}
    pairs = pairs or {}
    judgements = judgements or {}
    margins_by_pair = {name: _low_margins(s) for name, s in pairs.get(0, {}).items()}
    auditors = study.meta.get("auditors") or []
    primary = {claim: _primary_axis(claim, study) for claim in CLAIMS}
    first = judgements.get(0, {})
    out = {"p": study.meta["p"], "bench": {k: v for k, v in study.meta.items()
                                           if not k.startswith("grid")},
           "draws": {m: len(rs) for m, rs in study.draws.items()}, "controls": controls,
           "pairs": _pairs(study), "attack_ranking": _attack_ranking(study),
           "matched_linkage": matched, "low_linkage_margins": _low_margins(study),
           "mean_relative_error": {m: {a: float(np.mean([r["relative_error"][a] for r in rs]))
                                       for a in rs[0]["relative_error"]}
                                   for m, rs in sorted(study.draws.items())},
           "chance_crossings": crossings, "solver": _solver_counts(study),
           "claims": {c: first[c][primary[c]]["verdict"] for c in first},
           "claim_intervals": {c: first[c][primary[c]] for c in first},
           "claims_by_replicate": {str(k): v for k, v in judgements.items()},
           "claims_pooled": pooled or {},
           "claims_deployment_level": judge_deployments(judgements),
           "robust": robust(judgements, pooled, judge_deployments(judgements)),
           "replicates": len(judgements),
           "low_linkage_margins_by_pair": margins_by_pair,
           **_controls_by_model(study), "noise_estimate": _noise_estimate(study)}
    if rows is not None:
        threats = study.threats
        out["strongest_attacks"] = _strongest_tables(rows, study.metric, auditors, threats)
        out["threat_table"] = _threat_table(rows, threats, study.auditor or auditors[0])
        out["ml_attack"] = _ml_summary(rows)
        if config is not None:
            out["membership"] = _membership_table(
                rows, config, rng if rng is not None else np.random.default_rng(0), resamples)
            out["model_convergence"] = _model_convergence(rows, config["models"])
    return out


def _primary_axis(claim: str, study: Study) -> str:
    """The axis label of the sweep's primary (model, auditor) for ``claim``."""
    axis = CLAIM_AXES[claim]
    return {"model": study.model, "auditor": study.auditor,
            "pair": f"{study.model}/{study.auditor}"}[axis]


# ---- markdown ---------------------------------------------------------------------------------

def _verdict(result: dict[str, Any], points: bool = True) -> str:
    """``**verdict** estimate [low, high]`` with every interval the verdict read
    (:func:`experiments.claims.estimate_text`)."""
    est = estimate_text(result, points)
    return f"**{result['verdict']}**" + (f" {est}" if est else "")


def _header(main: dict[str, Any], config: dict[str, Any], command: str, runtime: str | None,
            resamples: int) -> list[str]:
    b = main["bench"]
    lines = [f"# Sweep report: {config['name']}", "",
             f"Command: `{command}`" if command else "",
             f"Measured sweep runtime: {runtime}." if runtime else "",
             f"Spline bands: {resamples} bootstrap resamples.", "",
             f"Data {config['dataset']}: {b['records']} uploaded records, {b['public_records']} "
             f"public (auditor pool, never uploaded); p = {main['p']}, d_in = {b['input_dim']}, "
             f"h = d = {b['d']}, r = {b['r']}, v_PT = {b['v_pt']:.4f}. Draws: "
             + ", ".join(f"{m} {n}" for m, n in sorted(main["draws"].items()))
             + f"; sigma ~ U{tuple(config['sigma_range'])}, v ~ U{tuple(config['v_range'])}; "
             f"{config['episodes']} ten-way episodes (chance {_pct(CHANCE)}); GPM cap "
             f"{config['max_iter']}.", "",
             f"Downstream models (each selected on validation): {', '.join(config['models'])}; "
             f"figures and the single-pair sections use {config['model']}. Auditors: "
             f"{', '.join(b.get('auditors') or [config['auditor']])}; figures use "
             f"{config['auditor']}. Translations Psi_i ~ N(0, s^2 I) with s = "
             f"{config['translation_scale']:g} (the paper does not state its translations' "
             "distribution; see the I-GDP table below).", ""]
    if not b.get("has_identities"):
        lines += ["Linkage is exact-source linkage only: this data set carries no identity ids, "
                  "so cross-record identity linkage is not measured.", ""]
    else:
        lines += [f"Every linkage below is {METRICS[main['metric']][1]} (report --metric).", ""]
    return lines


def _controls_section(main: dict[str, Any], models: list[str]) -> list[str]:
    lines = ["## Noiseless controls", "",
             "| method | utility | " + " | ".join(models) + " | participant index only "
             "| linkage per attack | relative error |",
             "|---|---|" + "---|" * len(models) + "---|---|---|"]
    for m, c in main["controls"].items():
        link = ", ".join(f"{a} {_pct(v)}" for a, v in c["linkage"].items()) or "no attack"
        err = ", ".join(f"{a} {v:.2g}" for a, v in c["relative_error"].items()) or "-"
        alone = c.get("participant_only_utility")
        per_model = " | ".join(_pct(main["control_utility_by_model"].get(m, {}).get(k))
                               for k in models)
        lines.append(f"| {m} | {_pct(c['utility'])} | {per_model} | "
                     f"{'-' if alone is None else _pct(alone)} | {link} | {err} |")
    lines += ["", "Utility: the primary model's; then every model's. Participant index only: "
              "the primary model trained on the one-hot participant index of each row, on the "
              "same split: what a `Z` that tells only whose record a row is would give (it can "
              "lie below chance: a participant's train and test class counts are "
              "anti-correlated under a global stratified split).", ""]
    scales = main["i_gdp_by_translation_scale"]
    if len(scales) > 1:
        lines += ["### I-GDP utility vs the translations' scale", "",
                  "The paper does not state how its translations Psi_i are drawn. Only I-GDP "
                  "depends on it (alignment removes the translations up to the residual "
                  "eta_i, C-GDP shares one): unaligned blocks far apart hurt a linear model more "
                  "than a local one.", "",
                  "| s | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
        for s, util in scales.items():
            lines.append(f"| {float(s):g} | " + " | ".join(_pct(util.get(k)) for k in models)
                         + " |")
        lines.append("")
    return lines


def _attack_names(main: dict[str, Any]) -> list[str]:
    """Built-in attacks in their order, then plug-ins, as they appear in the rows."""
    seen = {a for errs in main["mean_relative_error"].values() for a in errs}
    return [a for a in ATTACK_NAMES if a in seen] + sorted(seen - set(ATTACK_NAMES))


def _error_section(main: dict[str, Any]) -> list[str]:
    names = _attack_names(main)
    lines = ["## Mean relative reconstruction error over the draws (working space X F)", "",
             "| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for m, errs in main["mean_relative_error"].items():
        lines.append(f"| {m} | " + " | ".join(
            f"{errs[a]:.3g}" if a in errs else "-" for a in names) + " |")
    est = main.get("noise_estimate")
    if est:
        lines += ["", f"v estimated from the anchor residuals (what an attacker without v "
                  f"gets): median relative error {_pct(est['median_relative_error'])}, at most "
                  f"{_pct(est['max_relative_error'])} over {est['draws']} anchor-noise draws."]
    return [*lines, ""]


def _headline_text(margin: dict[str, Any]) -> str:
    """``at 20.0%: +x.x points [lo, hi]`` from a margin's headline level ('' without one)."""
    head = margin.get("headline") or {}
    if head.get("estimate") is None:
        return ""
    return (f"at {_pct(head['level'])}: {100 * head['estimate']:+.1f} points"
            + (f" [{100 * head['interval'][0]:+.1f}, {100 * head['interval'][1]:+.1f}]"
               if head.get("interval") else ""))


def _pooled_text(main: dict[str, Any], claim: str, axis: str) -> str:
    """The claim on every deployment's draws pooled (draws nested in deployments) and at the
    deployment level, or ''."""
    res = (main.get("claims_pooled") or {}).get(claim, {}).get(axis)
    if not res:
        return ""
    head = _headline_text(res.get("margin") or {})
    text = (f" Over the {main['replicates']} deployments pooled (95% interval with the draws "
            f"nested in deployments): {_cell(res, claim, True)}"
            + (f"; {head}" if head else "") + ".")
    dep = summary_deployments(main).get(claim, {}).get(axis)
    if dep is not None:
        text += (f" At the deployment level (the {dep['deployments']} per-deployment estimates, "
                 f"t interval with {dep['df']} degrees of freedom): {_deployment_cell(dep)}.")
    return text


def _deployment_cell(dep: dict[str, Any] | None) -> str:
    """``verdict +x.x [lo, hi] (k = 3); DL [lo, hi], I^2 = 54%``: the t interval(s) the verdict
    read and the DerSimonian-Laird interval with ``I^2`` (points; for a matched-linkage claim
    of the worst margin)."""
    if dep is None:
        return "-"
    text = f"{_verdict(dep).replace('**', '')} (k = {dep['deployments']})"
    re = dep.get("random_effects")
    if re is not None:
        text += (f"; DL [{100 * re['interval'][0]:+.1f}, {100 * re['interval'][1]:+.1f}], "
                 f"I^2 = {100 * re['i2']:.0f}%")
    return text


def _low_linkage_claim(main: dict[str, Any], aset: str, pair: str) -> str:
    parts = []
    for lvl in LOW_LEVELS:
        mm = main["matched_linkage"][aset][f"{lvl:.3f}"]
        an, pn = mm["aa-igdp-an"], mm["aa-igdp-pn"]
        parts.append(f"at {_pct(lvl)} linkage anchor noise "
                     f"{_pct(an['utility']) if an['noise'] is not None else 'not reached'}"
                     f" vs private-data noise "
                     f"{_pct(pn['utility']) if pn['noise'] is not None else 'not reached'}")
    claim = f"anchor_noise_beats_data_noise_at_low_linkage_{aset}_attacks"
    res = main["claim_intervals"][claim]
    margin = res.get("margin") or {}
    judged = (f"worst margin (and, unless it holds, best margin) over the "
              f"{len(margin['levels'])} levels "
              f"of {_grid_text()} both fits reach, 95% interval over the draws"
              if margin.get("levels") else f"no level of {_grid_text()} reached by both")
    if _headline_text(margin):
        judged += f"; {_headline_text(margin)}"
    return (f"- At matched low linkage ({SET_TEXT[aset]}), anchor noise keeps more utility: "
            f"{_verdict(res)} ({'; '.join(parts)}; {judged})." + _pooled_text(main, claim, pair))


def _claims_section(main: dict[str, Any], config: dict[str, Any]) -> list[str]:
    lines = [f"## The paper's claims on this data ({config['model']}, {config['auditor']} "
             "auditor, replicate 0)", "",
             "Each claim's statistic with its 95% bootstrap interval over the draws (margins in "
             "percentage points of balanced accuracy); holds / fails when the interval lies "
             "above / below zero, undecided when it covers zero. A matched-linkage claim holds "
             "on its worst margin and fails on its best (behind at every level); unless it "
             "holds, both intervals are shown.", ""]
    cl, pr, rk, ci = (main["claims"], main["pairs"], main["attack_ranking"],
                      main["claim_intervals"])
    if pr.get("pairs"):
        lines.append(
            f"- C-GDP-pn and AA-I-GDP-pn paired runs: **{cl['pn_pairs_identical']}** (exact "
            f"check). {pr['identical_linkage_pairs']}/{pr['pairs']} pairs have identical "
            f"linkage (max difference {pr['max_linkage_difference']:.3g}); max relative "
            f"difference of the collaboration matrices ||Z_aa - Z_c||_F/||Z_aa||_F = "
            f"{pr['max_relative_z_difference']:.2e}; max utility difference "
            f"{pr['max_utility_difference']:.2e}.")
    c = main["controls"]
    if all(m in c for m in ("c-gdp", "aa-igdp", "i-gdp")):
        lines.append(
            "- Noiseless C-GDP = AA-I-GDP utility > I-GDP (the C-GDP control coupled to "
            "AA-I-GDP's reference key): "
            f"{_verdict(ci['noiseless_c_eq_aa_gt_i'])} ({_pct(c['c-gdp']['utility'])} = "
            f"{_pct(c['aa-igdp']['utility'])} vs {_pct(c['i-gdp']['utility'])}; interval of "
            "AA-I-GDP minus I-GDP over the test records).")
    for aset in ATTACK_SETS:
        lines.append(_low_linkage_claim(main, aset, f"{config['model']}/{config['auditor']}"))
    if rk:
        means = ", ".join(f"{a} {_pct(v)}" for a, v in rk["mean_linkage"].items()
                          if a in PAPER_ANCHOR_ATTACKS)
        lines.append(
            f"- OP is the strongest of MP/OP/AM: {_verdict(ci['op_strongest_of_three'])} "
            f"(smaller of OP's mean linkage margins over MP and AM, paired by draw; mean "
            f"linkage over the anchor-noise draws: {means}; OP is the pointwise maximum of "
            f"the three in {rk['op_pointwise_max_draws']}/{rk['draws']} draws, ties included). "
            f"Strongest of every attack on average: {rk['strongest_of_all']}."
            + _pooled_text(main, "op_strongest_of_three", config["auditor"]))
    return [*lines, ""]


def _axis_text(claim: str) -> str:
    return {"pair": "every (model, auditor)", "model": "every model (utility only)",
            "auditor": "every auditor (linkage only)"}[CLAIM_AXES[claim]]


def _robustness_section(main: dict[str, Any], min_draws: int) -> list[str]:
    by_rep = main["claims_by_replicate"]
    if not by_rep:
        return []
    reps = sorted(by_rep, key=int)
    lines = ["## Do the claims generalise? Every replicate, model and auditor", "",
             f"{len(reps)} replicated deployments (each its own seeded split, public pool, "
             "`F`, anchor, galleries, known records, noise levels and keys). A claim is judged "
             "per (model, auditor) pair, once per model when it is about utility only, once "
             "per auditor when it is about linkage only; robust = it holds, its 95% interval "
             "excluding zero, in every replicate and on every axis, each with at least "
             f"{min_draws} draws of every compared method (fewer: not enough draws), pooled, "
             "and at the deployment level.", "",
             "| claim | judged per | " + " | ".join(f"replicate {k}" for k in reps)
             + " | pooled | deployment level | robust |",
             "|---|---|" + "---|" * (len(reps) + 3)]
    pooled = main.get("claims_pooled") or {}
    deployments = summary_deployments(main)
    robust_now = summary_robust(main)

    def held(per: dict[str, Any]) -> str:
        states = [None if r is None else r["verdict"] for r in per.values()]
        return f"{states.count('holds')}/{len(states)} hold"

    for claim, text in CLAIMS.items():
        cells = [held(by_rep[k][claim]) for k in reps]
        cells += [held(got[claim]) if claim in got else "-" for got in (pooled, deployments)]
        lines.append(f"| {text} | {_axis_text(claim)} | " + " | ".join(cells)
                     + f" | {'**yes**' if robust_now[claim] else 'no'} |")
    lines += ["", f"Pooled: the claim on the draws of all {len(reps)} deployments together, its "
              "95% interval from a two-stage bootstrap (deployments with replacement, then "
              "each drawn deployment's draws), so it carries the variation between deployments; "
              "with few deployments that interval is coarse. Deployment level: the "
              f"{len(reps)} per-deployment estimates taken as {len(reps)} observations, their "
              f"mean with a t interval on {len(reps) - 1} degrees of freedom (the verdict's), "
              "and beside it the DerSimonian-Laird random-effects interval (each deployment's "
              "standard error read off its bootstrap interval; of the worst margin for a "
              "matched-linkage claim) with I^2, the share of the "
              f"variation due to the deployments: every claim there rests on {len(reps)} "
              "deployments. Claims with one exact check or one control per deployment (-) are "
              "judged per deployment only.", ""]
    for claim, text in CLAIMS.items():
        axes = list(by_rep[reps[0]][claim])
        points = claim != "pn_pairs_identical"
        extra = 2 * (claim in pooled)
        lines += [f"### {text}", "", "| " + CLAIM_AXES[claim] + " | "
                  + " | ".join(f"replicate {k}" for k in reps)
                  + (" | pooled | deployment level |" if extra else " |"),
                  "|---|" + "---|" * (len(reps) + extra)]
        for axis in axes:
            cells = [_cell(by_rep[k][claim][axis], claim, points) for k in reps]
            if extra:
                cells += [_cell(pooled[claim][axis], claim, points),
                          _deployment_cell(deployments.get(claim, {}).get(axis))]
            lines.append(f"| {axis} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"Matched-linkage claims: the worst margin over the levels of {_grid_text()} both "
              "fits reach (points): holds when its interval lies above zero; unless it holds, "
              "the best margin beside it, fails when that one's interval lies below zero "
              "(behind at every level); "
              "not reached: the lowest strongest-attack linkage each "
              "noise's fit reaches (an: anchor noise, pn: private-data noise). OP: the smaller of "
              "its mean linkage margins over MP and AM (points). Noiseless: AA-I-GDP minus I-GDP "
              "(points), failing outright when the coupled C-GDP control differs.", ""]
    return lines


def _cell(result: dict[str, Any], claim: str, points: bool) -> str:
    """A verdict with its interval; for a matched-linkage claim not reached, how low each fit
    gets."""
    if result["verdict"] == "not reached" and low_claim_set(claim):
        low = result.get("lowest_fitted_linkage")
        if low:
            return (f"not reached (an >= {_pct(low['aa-igdp-an'])}, pn >= "
                    f"{_pct(low['aa-igdp-pn'])})")
        return f"not reached ({result.get('note', '')})"
    if result["verdict"] == "not enough draws":
        return "not enough draws"
    return _verdict(result, points).replace("**", "")


def _threat_section(main: dict[str, Any], config: dict[str, Any]) -> list[str]:
    table = main.get("threat_table")
    if not table:
        return []
    lines = [f"## Every method under every threat ({config['auditor']} auditor, every "
             "replicate)", "",
             "Exact-source linkage of the strongest attack of each threat (chosen per draw on "
             "held-out galleries): the analyst with a colluder (its disclosure), the analyst "
             "alone knowing m records of each target (known input), the analyst with a public "
             "sample (known sample). Controls: mean over the replicates; swept methods: mean "
             "(min-max) over every draw. '-': no attack of that threat applies.", "",
             "| method | colluder | analyst alone | analyst + public data |",
             "|---|---|---|---|"]
    for m, entry in table.items():
        cells = []
        for aset in ("all", "analyst", "public"):
            got = entry["sets"].get(aset)
            cells.append("-" if got is None else (
                f"{_pct(got['mean'])} ({got['attack']})" if entry["control"]
                else f"{_pct(got['mean'])} ({_pct(got['min'])}-{_pct(got['max'])}; "
                     f"mostly {got['attack']})"))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    names = [a for a in next(iter(table.values()))["mean_linkage"]
             if a.startswith(("known_input_", "distance_match_", "known_sample", "ica"))]
    if names:
        lines += ["", "The attacks without a colluder one by one (mean linkage):", "",
                  "| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for m, entry in table.items():
            lines.append(f"| {m} | " + " | ".join(
                _pct(entry["mean_linkage"].get(a)) if a in entry["mean_linkage"] else "-"
                for a in names) + " |")
    return [*lines, ""]


def _membership_section(main: dict[str, Any], config: dict[str, Any]) -> list[str]:
    table = main.get("membership")
    if not table:
        return []
    models = config["models"]
    lines = ["## Membership inference (every replicate)", "",
             "Against the returned model: a site with the model and its own map scores the "
             "targets' training records (members) against their test records; loss threshold "
             "and shadow models (each trained on half of the public pool). Against Z: the "
             "analyst's strongest reconstruction of each threat, distance to the nearest "
             "reconstructed row; non-members are held-out records never uploaded. AUC (0.5 is "
             "chance) [95% interval, rows nested in deployments] / TPR at 1% FPR (0.01 is "
             "chance), means over the rows of each noise bin, beside the model's utility on the "
             "same rows. k-NN models are not returned to "
             "sites (they hold Z's training rows): their row measures the analyst's model.", ""]
    for model in models:
        lines += [f"### {model}", "", "| method | noise | rows | utility | loss threshold | "
                  "shadow models |", "|---|---|---|---|---|---|"]
        for m, bins in table.items():
            for label, entry in bins.items():
                cell = entry["model"].get(model, {})
                lines.append(f"| {m} | {label} | {entry['rows']} | {_pct(cell.get('utility'))} | "
                             + " | ".join(_mi(cell.get(a)) for a in ("loss_threshold", "shadow"))
                             + " |")
        lines.append("")
    lines += ["### Against Z (strongest reconstruction of each threat)", "",
              "| method | noise | " + " | ".join(SET_TEXT[a] for a in ("all", "analyst",
                                                                         "public")) + " |",
              "|---|---|---|---|---|"]
    for m, bins in table.items():
        for label, entry in bins.items():
            lines.append(f"| {m} | {label} | " + " | ".join(
                _mi(entry["z"].get(a)) for a in ("all", "analyst", "public")) + " |")
    return [*lines, ""]


def _mi(cell: dict[str, Any] | None) -> str:
    """``AUC [low, high] / TPR at 1% FPR`` of a membership cell ('-' without one)."""
    if not cell:
        return "-"
    ci = cell.get("auc_interval")
    return (f"{cell['auc']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            + f" / {cell['tpr_at_1pct_fpr']:.3f}")


def _diagnostics_section(main: dict[str, Any]) -> list[str]:
    lines = []
    ml = main.get("ml_attack")
    if ml:
        lines += ["## Maximum-likelihood attack: starts and convergence", "",
                  f"Over every anchor-noise draw of every replicate: {ml['converged']}/"
                  f"{ml['targets']} target estimates converged (gradient tolerance or no gain "
                  f"left at working precision); {ml['all_starts_converged']} with every one of "
                  f"the {ml['starts']} starts converged; a start other than OP had the highest "
                  f"likelihood for {ml['other_start_won']}; a start with a higher likelihood "
                  f"than the reported estimate: {ml.get('start_beat_reported', 'not recorded')} "
                  f"of {ml['targets']}; median Newton iterations of the "
                  f"winner {ml['median_iterations']:.0f}. Per target in rows.jsonl "
                  "(`attack_diagnostics.ml`).", ""]
    conv = main.get("model_convergence")
    if conv:
        lines += ["## Downstream fits: convergence", "",
                  "Recorded per row (`utility_by_model.<model>.converged`; scikit-learn's "
                  "ConvergenceWarning is caught and counted, not printed).", "",
                  "| model | rows | chosen fit converged | search fits not converged |",
                  "|---|---|---|---|"]
        for m, c in conv.items():
            lines.append(f"| {m} | {c['rows']} | {c['chosen_converged']} | "
                         f"{c['search_fits_not_converged']} |")
        lines.append("")
    return lines


def _strongest_section(main: dict[str, Any]) -> list[str]:
    tables = main["strongest_attacks"]
    lines = ["## Strongest attack per draw, by auditor", "",
             "Mean linkage of every attack over the draws, and in how many draws it was the "
             "strongest of every attack (all) and of the paper's attacks for the method (paper: "
             "MP/OP/AM on anchor noise); ties go to the first attack in table order. The "
             "strongest per draw is in every row of rows.jsonl (`strongest`) and, for anchor "
             "noise, in summary.json (`strongest_attacks.<auditor>.aa-igdp-an.per_draw`).", ""]
    for auditor, per in tables.items():
        for m, t in per.items():
            if len(t["mean_linkage"]) < 2:
                continue
            lines += [f"### {auditor} auditor, {m} ({t['draws']} draws)", "",
                      "| attack | mean linkage | strongest of all | strongest of the paper's |",
                      "|---|---|---|---|"]
            for a, mean in t["mean_linkage"].items():
                paper = (t["strongest_draws"]["paper"].get(a, 0)
                         if a in PAPER_ATTACKS.get(m, ()) else "-")
                lines.append(f"| {a} | {_pct(mean)} | {t['strongest_draws']['all'].get(a, 0)} "
                             f"| {paper} |")
            lines.append("")
    return lines


def _matched_section(main: dict[str, Any]) -> list[str]:
    floor = max((max(c["linkage"].values()) for c in main["controls"].values()
                 if c["linkage"]), default=1.0)
    lines = []
    for aset, title in (("paper", "the paper's attacks"), ("all", "every attack")):
        lines += [f"## Fitted utility at matched linkage (strongest of {title} per draw)",
                  "", "| linkage level | " + " | ".join(NOISY) + " |",
                  "|---|" + "---|" * len(NOISY)]
        for lvl, mm in main["matched_linkage"][aset].items():
            name = f"{100 * float(lvl):.1f}%" + (" (chance)" if float(lvl) == CHANCE else "")
            if float(lvl) >= floor:
                lines.append(f"| {name} | at or above the noiseless controls' linkage "
                             f"({_pct(floor)}): no noise needed |" + " |" * (len(NOISY) - 1))
                continue
            lines.append(f"| {name} | " + " | ".join(
                "not reached" if mm[m]["noise"] is None
                else f"{_pct(mm[m]['utility'])} at noise {_num(mm[m]['noise'])}"
                for m in NOISY) + " |")
        lines.append("")
    lines += ["(noise = sigma for *-pn, v for aa-igdp-an: the first noise level where the "
              "fitted strongest-attack linkage is at or below the level; 'not reached' when the "
              "fit never gets there in the swept range.)", ""]
    return lines


def _crossings_section(main: dict[str, Any]) -> list[str]:
    lines = [f"## Noise level where each fit crosses chance ({_pct(CHANCE)})", "",
             "| method / attack | crossing |", "|---|---|"]
    for name, x in main["chance_crossings"].items():
        lines.append(f"| {name} | {_num(x)} |")
    return [*lines, ""]


def _solver_section(main: dict[str, Any]) -> list[str]:
    s = main["solver"]
    lines = ["## GPM (AA-I-GDP anchor noise) below and above v_PT", "",
             f"v_PT = {s['v_pt']:.4f}. The certificate is a sufficient condition only: "
             "'not certified' means not proven globally optimal, not wrong.", "",
             "| side | draws | converged (< cap) | certified | median iterations | median "
             "seconds |", "|---|---|---|---|---|---|"]
    for side in ("below_v_pt", "above_v_pt"):
        q = s[side]
        lines.append(f"| {side} | {q['draws']} | {q['converged']} | {q['certified']} | "
                     f"{_num(q['median_iterations'])} | {_num(q['median_seconds'])} |")
    return [*lines, ""]


def _margin_cell(mg: dict[str, Any]) -> str:
    return (f"{mg['anchor_ahead']}/{mg['levels']}, {100 * mg['min_margin']:+.1f} to "
            f"{100 * mg['max_margin']:+.1f} points" if mg["levels"] else "no common level")


def _participants_section(others: list[dict[str, Any]]) -> list[str]:
    if not others:
        return []
    lines = ["## Participant-count study", "",
             "Anchor noise minus private-data noise in fitted utility at matched linkage, over "
             f"the 0.5% levels of {_grid_text()} both fits reach (k/n: levels where anchor noise "
             "is ahead).", "",
             "| p | uploaded records | draws per method | noiseless C-GDP | I-GDP | v_PT | "
             "paper's attacks | every attack | GPM converged below / above v_PT | robust claims |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for o in others:
        n = max(o["draws"].values()) if o["draws"] else 0
        sv = o["solver"]
        held = sum(summary_robust(o).values())
        lines.append(
            f"| {o['p']} | {o['bench']['records']} | {n} | "
            f"{_pct(o['controls'].get('c-gdp', {}).get('utility'))} | "
            f"{_pct(o['controls'].get('i-gdp', {}).get('utility'))} | {sv['v_pt']:.4f} | "
            f"{_margin_cell(o['low_linkage_margins']['paper'])} | "
            f"{_margin_cell(o['low_linkage_margins']['all'])} | "
            f"{sv['below_v_pt']['converged']}/{sv['below_v_pt']['draws']} / "
            f"{sv['above_v_pt']['converged']}/{sv['above_v_pt']['draws']} | "
            f"{held}/{len(o['robust'])} |")
    lines += ["", "C-GDP-pn beside anchor noise at every p: fitted utility where each method's "
              "strongest-attack linkage first reaches the level (paper's attacks / every "
              "attack).", "",
              "| p | level | c-gdp-pn | aa-igdp-an (paper's) | aa-igdp-an (every attack) |",
              "|---|---|---|---|---|"]
    for o in others:
        for lvl in (0.15, 0.20):
            key = f"{lvl:.3f}"
            pn = o["matched_linkage"]["paper"][key]["c-gdp-pn"]
            an_p = o["matched_linkage"]["paper"][key]["aa-igdp-an"]
            an_a = o["matched_linkage"]["all"][key]["aa-igdp-an"]
            lines.append(f"| {o['p']} | {_pct(lvl)} | " + " | ".join(
                "not reached" if x["noise"] is None else _pct(x["utility"])
                for x in (pn, an_p, an_a)) + " |")
    return [*lines, ""]


def markdown(main: dict[str, Any], config: dict[str, Any], others: list[dict[str, Any]],
             command: str, runtime: str | None, resamples: int, figures: list[str]) -> str:
    """The summary page (numbers only from ``main``/``others``)."""
    models = list(config["models"])
    lines = (_header(main, config, command, runtime, resamples)
             + _controls_section(main, models) + _error_section(main)
             + _claims_section(main, config)
             + _robustness_section(main, config.get("min_draws", 1))
             + _threat_section(main, config) + _membership_section(main, config)
             + _strongest_section(main) + _matched_section(main) + _crossings_section(main)
             + _solver_section(main) + _diagnostics_section(main)
             + _participants_section(others))
    lines += ["Figures: " + ", ".join(f"{f} ({FIGURE_TEXT[f]})" if f in FIGURE_TEXT else f
                                      for f in figures)
              + ". Numbers: summary.json, fits.json.", ""]
    return "\n".join(lines)


#: What each figure shows, for the summary's list.
FIGURE_TEXT = {"fig_linkage.png": "Fig. 2/6", "fig_utility.png": "Fig. 4/7",
               "fig_frontier.png": "Fig. 5/8", "fig_solver.png": "Fig. 9",
               "fig_grid.png": "Fig. 3/10", "fig_participants.png": "Fig. 11",
               "fig_frontier_pairs.png": "the frontier under every model and auditor",
               "fig_claims.png": "every claim's interval in every replicate",
               "fig_threats.png": "linkage per threat, every method",
               "fig_membership.png": "membership inference vs noise, every model"}


# ---- the report -------------------------------------------------------------------------------

def _studies(rows: list[dict[str, Any]], meta: dict[str, Any], p: int, metric: str,
             resamples: int) -> tuple[Study, dict[int, dict[str, Study]]]:
    """The primary view of one ``p`` in replicate 0 (full fits) and a claims-only view per
    replicate and (model, auditor)."""
    config = meta["config"]
    benches = (meta.get("replicate_benches") or {}).get(str(p)) or [meta["benches"][str(p)]]

    def rng(k: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(config["seed"], spawn_key=(4, p, k)))

    main = Study(rows, benches[0], rng(0), resamples, metric, model=config["model"],
                 auditor=config["auditor"])
    pairs: dict[int, dict[str, Study]] = {}
    k = 0
    for replicate, bench in enumerate(benches):
        pairs[replicate] = {}
        for model in config["models"]:
            for auditor in bench["auditors"]:
                k += 1
                pairs[replicate][f"{model}/{auditor}"] = Study(
                    rows, bench, rng(k), 0, metric, model=model, auditor=auditor, full=False,
                    replicate=replicate)
    return main, pairs


def judge_sweep(pairs: dict[int, dict[str, Study]], config: dict[str, Any], p: int,
                claim_resamples: int) -> tuple[dict[int, Any], dict[str, Any] | None]:
    """The claims of one participant count ``p``: per replicate (:func:`experiments.claims.judge`)
    and, with several replicates, pooled (:func:`experiments.claims.judge_pooled`), from
    ``pairs`` (:func:`_studies`) with the generators the report seeds from the config."""
    primary = (config["model"], config["auditor"])
    min_draws = config.get("min_draws", 1)
    rng = np.random.default_rng(np.random.SeedSequence(config["seed"], spawn_key=(5, p)))
    judgements = {k: judge(views, primary, rng, claim_resamples, min_draws, LOW_GRID)
                  for k, views in pairs.items()}
    pooled = (judge_pooled(pairs, primary, np.random.default_rng(np.random.SeedSequence(
        config["seed"], spawn_key=(6, p))), claim_resamples, min_draws, LOW_GRID)
        if len(pairs) > 1 else None)
    return judgements, pooled


def make_report(results: Path, out: Path | None = None, *, resamples: int | None = None,
                command: str = "", metric: str | None = None,
                claim_resamples: int = CLAIM_RESAMPLES,
                threat_model: Path | None = None) -> dict[str, Any]:
    """Fit, plot and summarise the sweep in ``results`` into ``out`` (default: same folder).

    ``metric``: ``"exact"`` or ``"identity"`` linkage (default: identity when the data set
    carries identity ids, as in the paper's CelebA protocol). ``claim_resamples``: bootstrap
    resamples of every claim's interval. ``threat_model``: a THREAT_MODEL.md whose generated
    section for this sweep (:mod:`experiments.threat_model`) is rewritten from these numbers.
    """
    from noisyanchor.experiments import figures
    from noisyanchor.experiments.threat_model import update_threat_model

    meta, rows = load_rows(results)
    runtime = runtime_text(results, rows)
    config = meta["config"]
    out = results if out is None else out
    out.mkdir(parents=True, exist_ok=True)
    resamples = config["bootstrap"] if resamples is None else resamples
    by_p: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        by_p[r["p"]].append(r)
    if not by_p:
        raise InvalidInputError(f"{results}/{ROWS_FILE} holds no rows")
    has_ids = all(b["has_identities"] for b in meta["benches"].values())
    metric = metric or ("identity" if has_ids else "exact")
    if metric not in METRICS or (metric == "identity" and not has_ids):
        raise InvalidInputError(f"metric {metric!r} is not available for this sweep "
                                f"(identity linkage needs identity ids)")
    studies, summaries, pairs = {}, {}, {}
    for p in sorted(by_p):
        studies[p], pairs[p] = _studies(by_p[p], meta, p, metric, resamples)
        judgements, pooled = judge_sweep(pairs[p], config, p, claim_resamples)
        summaries[p] = {**summarize(studies[p], pairs[p], by_p[p], judgements, config, pooled,
                                    np.random.default_rng(np.random.SeedSequence(
                                        config["seed"], spawn_key=(7, p))), claim_resamples),
                        "metric": metric}
    main_p = main_participant_count(studies)
    others = [summaries[p] for p in sorted(summaries)] if len(studies) > 1 else []
    files = figures.draw_all(studies, main_p, out, pairs[main_p].get(0),
                             summaries[main_p], by_p[main_p], config, pairs[main_p])
    (out / "fits.json").write_text(json.dumps(
        {str(p): {name: {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                         for k, v in asdict(fit).items()} for name, fit in s.fits.items()}
         for p, s in studies.items()}))
    (out / "summary.json").write_text(json.dumps(
        {"main_p": main_p, "studies": {str(p): s for p, s in summaries.items()},
         "command": command, "runtime": runtime, "resamples": resamples, "figures": files},
        indent=1))
    (out / "summary.md").write_text(markdown(summaries[main_p], config, others, command,
                                             runtime, resamples, files))
    if threat_model is not None:
        update_threat_model(threat_model, config, summaries[main_p], results)
    return {"out": str(out), "main_p": main_p, "figures": files,
            "claims": summaries[main_p]["claims"], "robust": summaries[main_p]["robust"]}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment report``."""
    ps = sub.add_parser("report", help="spline fits, figures and a markdown summary of a sweep")
    ps.add_argument("--results", required=True,
                    help="sweep folder (rows.jsonl or its audit copy rows.jsonl.gz, meta.json)")
    ps.add_argument("--out", default=None, help="report folder (default: --results)")
    ps.add_argument("--bootstrap", type=int_at_least(0), default=None,
                    help="bootstrap resamples (default: the config's)")
    # dest apart from the top-level parser's "command", which names the subcommand run
    ps.add_argument("--command", default="", dest="quoted_command",
                    help="command line to quote in the summary")
    ps.add_argument("--metric", choices=sorted(METRICS), default=None,
                    help="leakage metric (default: identity when the data has identity ids)")
    ps.add_argument("--claim-bootstrap", type=int_at_least(10), default=CLAIM_RESAMPLES,
                    help="bootstrap resamples of every claim's interval")
    ps.add_argument("--threat-model", type=Path, default=None, metavar="THREAT_MODEL.md",
                    help="also rewrite this file's generated section for this sweep")
    ps.add_argument("--json", action="store_true", help="print the result as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if not (results / ROWS_FILE).exists() and (results / AUDIT_ROWS_FILE).exists():
        print(f"no {ROWS_FILE} in {results}: reading its audit copy {AUDIT_ROWS_FILE}, which "
              "carries no reconstructed images, so fig_grid.png (image data only) is not drawn; "
              "the claims, intervals and other figures are", file=sys.stderr)
    res = make_report(Path(args.results), None if args.out is None else Path(args.out),
                      resamples=args.bootstrap, command=args.quoted_command, metric=args.metric,
                      claim_resamples=args.claim_bootstrap, threat_model=args.threat_model)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"report for p={res['main_p']} written to {res['out']}: "
              + ", ".join(res["figures"]) + ", summary.md")
        for claim, state in res["claims"].items():
            robust_text = " (robust)" if res["robust"].get(claim) else ""
            print(f"  {claim}: {state}{robust_text}")
    return 0
