"""``noisyanchor experiment report``: spline fits, the paper's figures and a markdown summary of
a sweep's rows.

The numbers (``summary.json``, ``fits.json``) and the figures come from the same fits; the
summary states, per claim of the paper, whether it holds on the swept data.

References: noisy-anchor GDP paper, Section 5 (Figs. 2-11 and the quoted numbers).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.attacks import ATTACK_NAMES
from noisyanchor.common.cliargs import int_at_least
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.methods import Method
from noisyanchor.experiments.linkage import CHANCE
from noisyanchor.experiments.study import (
    ATTACK_SETS,
    METRICS,
    PAPER_ANCHOR_ATTACKS,
    Study,
    load_rows,
    main_participant_count,
)
from noisyanchor.experiments.sweep import ROWS_FILE, RUNS_FILE

#: Linkage levels at which methods' fitted utilities are compared (paper: 12.4% and chance).
MATCHED_LEVELS = (0.124, 0.15, 0.20, 0.30)
#: Levels quoted for "anchor noise keeps more utility at matched low linkage"; the verdict is
#: judged on every 0.5% step of [12.4%, 20%] that both fits reach (``LOW_GRID``).
LOW_LEVELS = (0.124, 0.15, 0.20)
LOW_GRID = tuple(np.round(np.arange(0.124, 0.2001, 0.005), 3))
NOISY = (Method.C_GDP_PN.value, Method.AA_IGDP_PN.value, Method.AA_IGDP_AN.value)


def runtime_text(results: Path) -> str | None:
    """The sweep's measured wall time and machine load, from ``runs.jsonl`` (None if absent)."""
    path = results / RUNS_FILE
    if not path.exists():
        return None
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    total = sum(r["seconds"] for r in runs)
    ran = sum(r["ran"] for r in runs)
    last = runs[-1]
    return (f"{total:.1f} s wall ({total / 60:.2f} min) for {ran} tasks in {len(runs)} run(s), "
            f"{last['workers']} worker processes on a {last['cpu_count']}-core machine; load "
            f"average (1/5/15 min) {'/'.join(f'{x:.1f}' for x in last['load_average_start'])} "
            f"at the start and {'/'.join(f'{x:.1f}' for x in last['load_average_end'])} at the "
            f"end of the last run (the machine is shared), finished {last['finished_utc']}")


def _pairs(study: Study) -> dict[str, Any]:
    aa = {r["draw"]: r for r in study.draws.get(Method.AA_IGDP_PN.value, [])}
    cg = {r["draw"]: r for r in study.draws.get(Method.C_GDP_PN.value, [])}
    both = sorted(set(aa) & set(cg))
    if not both:
        return {"pairs": 0}
    link = [abs(aa[k]["linkage"]["known_anchor"] - cg[k]["linkage"]["known_secret"])
            for k in both]
    return {"pairs": len(both),
            "identical_linkage_pairs": int(sum(v == 0 for v in link)),
            "max_linkage_difference": max(link),
            "max_relative_z_difference": max(aa[k]["pair_z_rel_diff"] for k in both),
            "max_utility_difference": max(abs(aa[k]["utility"] - cg[k]["utility"])
                                          for k in both),
            "max_relative_error_difference": max(
                abs(aa[k]["relative_error"]["known_anchor"]
                    - cg[k]["relative_error"]["known_secret"]) for k in both)}


def _attack_ranking(study: Study) -> dict[str, Any]:
    rs = study.draws.get(Method.AA_IGDP_AN.value, [])
    if not rs:
        return {}
    means = {a: float(np.mean([r["linkage"][a] for r in rs])) for a in rs[0]["linkage"]}
    paper = {a: means[a] for a in PAPER_ANCHOR_ATTACKS if a in means}
    op_max = sum(r["linkage"]["op"] >= max(r["linkage"][a] for a in paper) for r in rs)
    return {"mean_linkage": means, "strongest_of_paper_three": max(paper, key=paper.get),
            "op_pointwise_max_draws": int(op_max), "draws": len(rs),
            "strongest_of_all": max(means, key=means.get)}


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


def summarize(study: Study) -> dict[str, Any]:
    """Every number the markdown summary quotes, for one ``p``."""
    ctrl = study.controls
    controls = {m: {"utility": r["utility"], "linkage": r["linkage"],
                    "relative_error": r["relative_error"],
                    "participant_only_utility": r.get("participant_only_utility")}
                for m, r in ctrl.items()}
    matched = {aset: {f"{lvl:.3f}": {m: study.matched_utility(m, lvl, aset) for m in NOISY}
                      for lvl in (*MATCHED_LEVELS, CHANCE)} for aset in ATTACK_SETS}
    crossings = {name: fit.first_crossing(CHANCE) for name, fit in study.fits.items()
                 if not name.endswith("/utility")}
    pairs = _pairs(study)
    ranking = _attack_ranking(study)
    u = {m: ctrl[m]["utility"] for m in ("c-gdp", "aa-igdp", "i-gdp") if m in ctrl}
    claims = {}
    if pairs.get("pairs"):
        claims["pn_pairs_identical"] = bool(
            pairs["identical_linkage_pairs"] == pairs["pairs"]
            and pairs["max_relative_z_difference"] < 1e-10)
    if len(u) == 3:
        claims["noiseless_c_eq_aa_gt_i"] = bool(abs(u["c-gdp"] - u["aa-igdp"]) < 1e-9
                                                and u["aa-igdp"] > u["i-gdp"])
    low_margins = {}
    for aset in ATTACK_SETS:
        diffs = []
        for lvl in LOW_GRID:
            an = study.matched_utility(Method.AA_IGDP_AN.value, lvl, aset)["utility"]
            pn = study.matched_utility(Method.AA_IGDP_PN.value, lvl, aset)["utility"]
            if an is not None and pn is not None:
                diffs.append(an - pn)
        low_margins[aset] = {"levels": len(diffs), "grid_levels": len(LOW_GRID),
                             "anchor_ahead": int(sum(d > 0 for d in diffs)),
                             "min_margin": min(diffs, default=None),
                             "max_margin": max(diffs, default=None)}
        claims[f"anchor_noise_beats_data_noise_at_low_linkage_{aset}_attacks"] = (
            bool(all(d > 0 for d in diffs)) if diffs else None)
    if ranking:
        claims["op_strongest_of_three"] = ranking["strongest_of_paper_three"] == "op"
    return {"p": study.meta["p"], "bench": {k: v for k, v in study.meta.items()
                                            if not k.startswith("grid")},
            "draws": {m: len(rs) for m, rs in study.draws.items()}, "controls": controls,
            "pairs": pairs, "attack_ranking": ranking, "matched_linkage": matched,
            "low_linkage_margins": low_margins,
            "mean_relative_error": {m: {a: float(np.mean([r["relative_error"][a] for r in rs]))
                                        for a in rs[0]["relative_error"]}
                                    for m, rs in sorted(study.draws.items())},
            "chance_crossings": crossings, "solver": _solver_counts(study), "claims": claims}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _verdict(holds: bool | None) -> str:
    if holds is None:
        return "**not measurable** (a fit does not reach the level in the swept range)"
    return "**holds**" if holds else "**does not hold**"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "not reached" if x is None else format(x, fmt)


def markdown(main: dict[str, Any], config: dict[str, Any], others: list[dict[str, Any]],
             command: str, runtime: str | None, resamples: int) -> str:
    """The summary page (numbers only from ``main``/``others``)."""
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
             f"{config['episodes']} ten-way episodes (chance 10%); GPM cap {config['max_iter']}.",
             ""]
    if not b.get("has_identities"):
        lines += ["Linkage is exact-source linkage only: this data set carries no identity ids, "
                  "so cross-record identity linkage is not measured.", ""]
    else:
        lines += [f"Every linkage below is {METRICS[main['metric']][1]} (report --metric).", ""]
    lines += ["## Noiseless controls", "", "| method | utility (balanced acc.) | participant "
              "index only | linkage per attack | relative error |", "|---|---|---|---|---|"]
    for m, c in main["controls"].items():
        link = ", ".join(f"{a} {_pct(v)}" for a, v in c["linkage"].items()) or "no attack"
        err = ", ".join(f"{a} {v:.2g}" for a, v in c["relative_error"].items()) or "-"
        alone = c.get("participant_only_utility")
        lines.append(f"| {m} | {_pct(c['utility'])} | {'-' if alone is None else _pct(alone)} "
                     f"| {link} | {err} |")
    lines += ["", "Participant index only: the same model trained on the one-hot participant "
              "index of each row, on the same split: what a `Z` that tells only whose record a "
              "row is would give (it can lie below chance: a participant's train and test class "
              "counts are anti-correlated under a global stratified split)."]
    lines += ["", "## Mean relative reconstruction error over the draws (working space X F)", "",
              "| method | " + " | ".join(ATTACK_NAMES) + " |",
              "|---|" + "---|" * len(ATTACK_NAMES)]
    for m, errs in main["mean_relative_error"].items():
        lines.append(f"| {m} | " + " | ".join(
            f"{errs[a]:.3g}" if a in errs else "-" for a in ATTACK_NAMES) + " |")
    lines += ["", "## The paper's claims on this data", ""]
    cl, pr, rk = main["claims"], main["pairs"], main["attack_ranking"]
    if "pn_pairs_identical" in cl:
        lines.append(
            f"- C-GDP-pn and AA-I-GDP-pn paired runs: {_verdict(cl['pn_pairs_identical'])}. "
            f"{pr['identical_linkage_pairs']}/{pr['pairs']} pairs have identical linkage (max "
            f"difference {pr['max_linkage_difference']:.3g}); max relative difference of the "
            f"collaboration matrices ||Z_aa - Z_c||_F/||Z_aa||_F = "
            f"{pr['max_relative_z_difference']:.2e}; max utility difference "
            f"{pr['max_utility_difference']:.2e}.")
    if "noiseless_c_eq_aa_gt_i" in cl:
        c = main["controls"]
        lines.append(
            "- Noiseless C-GDP = AA-I-GDP utility > I-GDP: "
            f"{_verdict(cl['noiseless_c_eq_aa_gt_i'])} "
            f"({_pct(c['c-gdp']['utility'])} = {_pct(c['aa-igdp']['utility'])} vs "
            f"{_pct(c['i-gdp']['utility'])}).")
    for aset, what in (("paper", "the paper's attacks: known-secret / known-anchor on "
                                 "private-data noise, strongest of MP/OP/AM on anchor noise"),
                       ("all", "every attack of the engine, incl. known-anchor on anchor noise")):
        parts = []
        for lvl in LOW_LEVELS:
            mm = main["matched_linkage"][aset][f"{lvl:.3f}"]
            an, pn = mm["aa-igdp-an"], mm["aa-igdp-pn"]
            parts.append(f"at {_pct(lvl)} linkage anchor noise "
                         f"{_pct(an['utility']) if an['noise'] is not None else 'not reached'}"
                         f" vs private-data noise "
                         f"{_pct(pn['utility']) if pn['noise'] is not None else 'not reached'}")
        verdict = _verdict(cl[f"anchor_noise_beats_data_noise_at_low_linkage_{aset}_attacks"])
        mg = main["low_linkage_margins"][aset]
        judged = (f"anchor noise ahead at {mg['anchor_ahead']}/{mg['levels']} of the "
                  f"{mg['grid_levels']} levels 12.4%, 12.9%, ..., 19.9% that both fits reach, "
                  f"margin {100 * mg['min_margin']:+.1f} to {100 * mg['max_margin']:+.1f} "
                  f"points" if mg["levels"] else "no level of 12.4%-19.9% reached by both")
        lines.append(f"- At matched low linkage ({what}), anchor noise keeps more utility: "
                     f"{verdict} ({'; '.join(parts)}; {judged}).")
    if rk:
        means = ", ".join(f"{a} {_pct(v)}" for a, v in rk["mean_linkage"].items())
        lines.append(
            f"- OP is the strongest of MP/OP/AM: {_verdict(cl['op_strongest_of_three'])} "
            f"(mean linkage over the anchor-noise draws: {means}; OP is the pointwise maximum of "
            f"the three in {rk['op_pointwise_max_draws']}/{rk['draws']} draws, ties included). "
            f"Strongest of every engine attack: {rk['strongest_of_all']}.")
    floor = max((max(c["linkage"].values()) for c in main["controls"].values()
                 if c["linkage"]), default=1.0)
    for aset, title in (("paper", "the paper's attacks"), ("all", "every engine attack")):
        lines += ["", f"## Fitted utility at matched linkage (strongest of {title} per draw)",
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
    lines += ["", "(noise = sigma for *-pn, v for aa-igdp-an: the first noise level where the "
              "fitted strongest-attack linkage is at or below the level; 'not reached' when the "
              "fit never gets there in the swept range.)", "", "## Noise level where each fit "
              "crosses "
              "chance (10%)", "", "| method / attack | crossing |", "|---|---|"]
    for name, x in main["chance_crossings"].items():
        lines.append(f"| {name} | {_num(x)} |")
    s = main["solver"]
    lines += ["", "## GPM (AA-I-GDP anchor noise) below and above v_PT", "",
              f"v_PT = {s['v_pt']:.4f}.", "", "| side | draws | converged (< cap) | certified | "
              "median iterations | median seconds |", "|---|---|---|---|---|---|"]
    for side in ("below_v_pt", "above_v_pt"):
        q = s[side]
        lines.append(f"| {side} | {q['draws']} | {q['converged']} | {q['certified']} | "
                     f"{_num(q['median_iterations'])} | {_num(q['median_seconds'])} |")
    if others:
        lines += ["", "## Participant-count study", "",
                  "Anchor noise minus private-data noise in fitted utility at matched linkage, "
                  "over the 0.5% levels of [12.4%, 20%] both fits reach (k/n: levels where "
                  "anchor noise is ahead).", "",
                  "| p | draws per method | noiseless C-GDP | I-GDP | v_PT | paper's attacks "
                  "| every engine attack | GPM converged below / above v_PT |",
                  "|---|---|---|---|---|---|---|---|"]
        for o in others:
            n = max(o["draws"].values()) if o["draws"] else 0
            cells = []
            for aset in ATTACK_SETS:
                mg = o["low_linkage_margins"][aset]
                cells.append(f"{mg['anchor_ahead']}/{mg['levels']}, "
                             f"{100 * mg['min_margin']:+.1f} to {100 * mg['max_margin']:+.1f} "
                             "points" if mg["levels"] else "no common level")
            sv = o["solver"]
            lines.append(
                f"| {o['p']} | {n} | {_pct(o['controls'].get('c-gdp', {}).get('utility'))} | "
                f"{_pct(o['controls'].get('i-gdp', {}).get('utility'))} | {sv['v_pt']:.4f} | "
                f"{cells[0]} | {cells[1]} | {sv['below_v_pt']['converged']}/"
                f"{sv['below_v_pt']['draws']} / {sv['above_v_pt']['converged']}/"
                f"{sv['above_v_pt']['draws']} |")
    lines += ["", "Figures: fig_linkage.png (Fig. 2/6), fig_utility.png (Fig. 4/7), "
              "fig_frontier.png (Fig. 5/8), fig_solver.png (Fig. 9), fig_grid.png (Fig. 3/10)"
              + (", fig_participants.png (Fig. 11)" if others else "")
              + ". Numbers: summary.json, fits.json.", ""]
    return "\n".join(line for line in lines if line is not None)


def make_report(results: Path, out: Path | None = None, *, resamples: int | None = None,
                command: str = "", metric: str | None = None) -> dict[str, Any]:
    """Fit, plot and summarise the sweep in ``results`` into ``out`` (default: same folder).

    ``metric``: ``"exact"`` or ``"identity"`` linkage (default: identity when the data set
    carries identity ids, as in the paper's CelebA protocol).
    """
    from noisyanchor.experiments import figures

    meta, rows = load_rows(results)
    runtime = runtime_text(results)
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
    studies = {}
    for p in sorted(by_p):
        rng = np.random.default_rng(np.random.SeedSequence(config["seed"], spawn_key=(4, p)))
        studies[p] = Study(by_p[p], meta["benches"][str(p)], rng, resamples, metric)
    main_p = main_participant_count(studies)
    summaries = {p: {**summarize(s), "metric": metric} for p, s in studies.items()}
    others = [summaries[p] for p in sorted(summaries)] if len(studies) > 1 else []
    files = figures.draw_all(studies, main_p, out)
    (out / "fits.json").write_text(json.dumps(
        {str(p): {name: {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                         for k, v in asdict(fit).items()} for name, fit in s.fits.items()}
         for p, s in studies.items()}))
    (out / "summary.json").write_text(json.dumps(
        {"main_p": main_p, "studies": {str(p): s for p, s in summaries.items()},
         "command": command, "runtime": runtime}, indent=1))
    (out / "summary.md").write_text(markdown(summaries[main_p], config, others, command,
                                             runtime, resamples))
    return {"out": str(out), "main_p": main_p, "figures": files,
            "claims": summaries[main_p]["claims"]}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment report``."""
    ps = sub.add_parser("report", help="spline fits, figures and a markdown summary of a sweep")
    ps.add_argument("--results", required=True, help="sweep folder (rows.jsonl, meta.json)")
    ps.add_argument("--out", default=None, help="report folder (default: --results)")
    ps.add_argument("--bootstrap", type=int_at_least(0), default=None,
                    help="bootstrap resamples (default: the config's)")
    ps.add_argument("--command", default="", help="command line to quote in the summary")
    ps.add_argument("--metric", choices=sorted(METRICS), default=None,
                    help="leakage metric (default: identity when the data has identity ids)")
    ps.add_argument("--json", action="store_true", help="print the result as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    res = make_report(Path(args.results), None if args.out is None else Path(args.out),
                      resamples=args.bootstrap, command=args.command, metric=args.metric)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"report for p={res['main_p']} written to {res['out']}: "
              + ", ".join(res["figures"]) + ", summary.md")
        verdicts = {True: "holds", False: "does not hold", None: "not measurable"}
        for claim, holds in res["claims"].items():
            print(f"  {claim}: {verdicts[holds]}")
    return 0
