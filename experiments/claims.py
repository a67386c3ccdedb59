"""The paper's claims the report judges, each with its statistic, its interval and the axes it
is judged on, in every replicated deployment.

A claim is judged per replicate and per axis: ``pair`` claims (utility at matched linkage)
under every (downstream model, auditor) pair, ``model`` claims (utility only) once per model,
``auditor`` claims (linkage only) once per auditor. It is **robust** only when it holds, its
interval excluding zero, in every replicate and on every axis, each with at least the config's
``min_draws`` draws of every compared method (:mod:`experiments.intervals` for the verdicts),
when the claims judged on the draws of every deployment pooled (:func:`judge_pooled`: the
matched-linkage margins and OP's, bootstrapped with draws nested in deployments) hold too, and
when the same claims hold at the deployment level (:func:`judge_deployments`: the
per-deployment estimates as ``k`` observations, t interval with ``k - 1`` degrees of freedom).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from noisyanchor.common.methods import Method
from noisyanchor.experiments.intervals import (
    accuracy_difference,
    deployment_level,
    margin_verdict,
    matched_margin,
    paired_min_difference,
    verdict,
)
from noisyanchor.experiments.study import Study

#: The claims, in report order, with the sentence each stands for.
CLAIMS = {
    "pn_pairs_identical": "C-GDP-pn and AA-I-GDP-pn paired runs coincide",
    "noiseless_c_eq_aa_gt_i": "noiseless C-GDP = AA-I-GDP utility > I-GDP",
    "anchor_noise_beats_data_noise_at_low_linkage_paper_attacks":
        "at matched low linkage anchor noise keeps more utility (the paper's attacks)",
    "anchor_noise_beats_data_noise_at_low_linkage_all_attacks":
        "at matched low linkage anchor noise keeps more utility (every attack of the colluder)",
    "anchor_noise_beats_data_noise_at_low_linkage_analyst_attacks":
        "at matched low linkage anchor noise keeps more utility (the analyst alone, known "
        "records)",
    "anchor_noise_beats_data_noise_at_low_linkage_public_attacks":
        "at matched low linkage anchor noise keeps more utility (the analyst with public data)",
    "op_strongest_of_three": "OP is the strongest of MP/OP/AM",
}
#: What each claim is judged per: every (model, auditor) pair, every model, or every auditor.
CLAIM_AXES = {"pn_pairs_identical": "auditor", "noiseless_c_eq_aa_gt_i": "model",
              "op_strongest_of_three": "auditor"} | {
    c: "pair" for c in CLAIMS if c.startswith("anchor_noise_beats")}
#: Prefix of the matched-linkage claims (the attack set follows it).
LOW_PREFIX = "anchor_noise_beats_data_noise_at_low_linkage_"
#: Level whose margin is quoted beside the claim's worst margin (the audit's headline).
HEADLINE_LEVEL = 0.20


def low_claim_set(claim: str) -> str | None:
    """The attack set of a matched-linkage claim, else None."""
    if not claim.startswith(LOW_PREFIX):
        return None
    return claim[len(LOW_PREFIX):].removesuffix("_attacks")


def _result(state: str, estimate: float | None = None, interval: list[float] | None = None,
            **detail: Any) -> dict[str, Any]:
    return {"verdict": state, "estimate": estimate, "interval": interval, **detail}


def coupled_pairs(study: Study) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(AA-I-GDP-pn row, C-GDP-pn row)`` of every draw both hold, in draw order."""
    aa = {r["draw"]: r for r in study.draws.get(Method.AA_IGDP_PN.value, [])}
    cg = {r["draw"]: r for r in study.draws.get(Method.C_GDP_PN.value, [])}
    return [(aa[k], cg[k]) for k in sorted(set(aa) & set(cg))]


def pair_linkage_differences(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[float]:
    """``|known_anchor - known_secret|`` linkage of each coupled pair."""
    return [abs(a["linkage"]["known_anchor"] - c["linkage"]["known_secret"]) for a, c in pairs]


def _pn_pairs(study: Study, min_draws: int) -> dict[str, Any]:
    pairs = coupled_pairs(study)
    if len(pairs) < min_draws:
        return _result("not enough draws", pairs=len(pairs))
    diff = pair_linkage_differences(pairs)
    z = max(a["pair_z_rel_diff"] for a, _ in pairs)
    same = sum(d == 0 for d in diff)
    holds = same == len(pairs) and z < 1e-10
    return _result("holds" if holds else "fails", float(max(diff)), None, pairs=len(pairs),
                   identical_linkage_pairs=int(same), max_relative_z_difference=z,
                   exact=True)


def _noiseless(study: Study, model: str, rng: np.random.Generator,
               resamples: int) -> dict[str, Any]:
    ctrl = study.controls
    if not all(m in ctrl for m in ("c-gdp", "aa-igdp", "i-gdp")):
        return _result("not reached", note="a noiseless control is missing")
    preds = {m: (ctrl[m].get("test_predictions_by_model") or {}).get(model)
             for m in ("c-gdp", "aa-igdp", "i-gdp")}
    util = {m: ctrl[m]["utility"] for m in ctrl}
    equal = abs(util["c-gdp"] - util["aa-igdp"]) < 1e-12 and (
        preds["c-gdp"] is None or preds["c-gdp"] == preds["aa-igdp"])
    labels = ctrl["aa-igdp"].get("test_labels")
    if labels is None or preds["aa-igdp"] is None or preds["i-gdp"] is None:
        gap = util["aa-igdp"] - util["i-gdp"]
        state = "fails" if not equal else ("holds" if gap > 0 else "fails")
        return _result(state, float(gap), None, equal=equal)
    from sklearn.metrics import balanced_accuracy_score

    diff = accuracy_difference(labels, preds["aa-igdp"], preds["i-gdp"], rng, resamples,
                               balanced_accuracy_score)
    low, high = diff["interval"] or (None, None)
    return _result("fails" if not equal else verdict(low, high), diff["estimate"],
                   diff["interval"], equal=equal, test_records=diff["records"],
                   c_gdp=util["c-gdp"], aa_igdp=util["aa-igdp"], i_gdp=util["i-gdp"])


def _series(studies: list[Study], m: str,
            aset: str) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """(noise, strongest linkage, utility) of ``m``'s draws in ``studies`` (one per deployment)
    pooled, and each draw's deployment (its index in ``studies``)."""
    rs = [(k, r, link) for k, s in enumerate(studies)
          for r, link in zip(s.draws[m], s.strongest_series(m, aset), strict=True)]
    return ((np.array([r["noise"] for _, r, _ in rs]),
             np.array([link for _, _, link in rs], dtype=float),
             np.array([r["utility"] for _, r, _ in rs], dtype=float)),
            np.array([k for k, _, _ in rs]))


def _low_linkage(study: Study | list[Study], aset: str, rng: np.random.Generator,
                 resamples: int, min_draws: int, grid: tuple[float, ...]) -> dict[str, Any]:
    """The matched-linkage claim in one deployment, or (a list: one study per deployment) on
    their draws pooled, resampled nested in deployments."""
    an, pn = Method.AA_IGDP_AN.value, Method.AA_IGDP_PN.value
    studies = study if isinstance(study, list) else [study]
    counts = {m: min(len(s.draws.get(m, [])) for s in studies) for m in (an, pn)}
    if min(counts.values()) < min_draws:
        return _result("not enough draws", draws=counts)
    if any(aset not in s.attack_sets(an) or aset not in s.attack_sets(pn) for s in studies):
        return _result("not reached", draws=counts, note=f"no {aset} attack ran")
    (a_series, a_groups), (p_series, p_groups) = (_series(studies, m, aset) for m in (an, pn))
    nested = (a_groups, p_groups) if len(studies) > 1 else None
    margin = matched_margin(a_series, p_series, grid, rng, resamples, HEADLINE_LEVEL, nested)
    # How low each noise's linkage fit gets: the pooled fits' (the margin's) or the study's.
    lowest = (dict(zip((an, pn), margin["lowest_fitted_linkage"], strict=True))
              if len(studies) > 1 else
              {m: float(np.min(fit.fit)) if (fit := studies[0].fits.get(f"{m}/strongest-{aset}"))
               is not None else None for m in (an, pn)})
    if not margin["levels"]:
        return _result("not reached", draws=counts, lowest_fitted_linkage=lowest,
                       margin=margin)
    end = margin["worst"]  # the best margin is in ``margin``, shown beside unless it holds
    return _result(margin["verdict"], end["estimate"], end["interval"], draws=counts,
                   lowest_fitted_linkage=lowest, margin=margin, statistic="worst margin")


def _op_strongest(study: Study | list[Study], rng: np.random.Generator, resamples: int,
                  min_draws: int) -> dict[str, Any]:
    """OP against MP and AM in one deployment, or pooled over several nested in them."""
    studies = study if isinstance(study, list) else [study]
    per = [s.draws.get(Method.AA_IGDP_AN.value, []) for s in studies]
    if min(len(rs) for rs in per) < min_draws:
        return _result("not enough draws", draws=min(len(rs) for rs in per))
    rs = [r for got in per for r in got]
    groups = np.repeat(np.arange(len(per)), [len(got) for got in per]) if len(per) > 1 else None
    link = {a: np.array([r["linkage"][a] for r in rs]) for a in ("op", "mp", "am")}
    diff = paired_min_difference(link["op"], [link["mp"], link["am"]], rng, resamples, groups)
    low, high = diff["interval"] or (None, None)
    return _result(verdict(low, high), diff["estimate"], diff["interval"], draws=len(rs))


def judge(studies: dict[str, Study], primary: tuple[str, str], rng: np.random.Generator,
          resamples: int, min_draws: int, grid: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    """Every claim of one replicate on its axes: ``{claim: {axis label: result}}``, the axis
    label a ``model/auditor`` pair, a model or an auditor (:data:`CLAIM_AXES`). ``studies``: the
    replicate's view per ``model/auditor``; ``primary``: the sweep's (model, auditor)."""
    models = list(dict.fromkeys(k.split("/")[0] for k in studies))
    auditors = list(dict.fromkeys(k.split("/", 1)[1] for k in studies))
    out: dict[str, dict[str, Any]] = {}
    for claim in CLAIMS:
        axis = CLAIM_AXES[claim]
        per: dict[str, Any] = {}
        if axis == "model":
            for m in models:
                per[m] = _noiseless(studies[f"{m}/{primary[1]}"], m, rng, resamples)
        elif axis == "auditor":
            for a in auditors:
                study = studies[f"{primary[0]}/{a}"]
                per[a] = (_pn_pairs(study, min_draws) if claim == "pn_pairs_identical"
                          else _op_strongest(study, rng, resamples, min_draws))
        else:
            aset = low_claim_set(claim)
            assert aset is not None
            for name, study in studies.items():
                per[name] = _low_linkage(study, aset, rng, resamples, min_draws, grid)
        out[claim] = per
    return out


#: Claims judged on every deployment's draws pooled (those with a statistic over draws).
POOLED_CLAIMS = (*(c for c in CLAIMS if c.startswith(LOW_PREFIX)), "op_strongest_of_three")


def judge_pooled(pairs: dict[int, dict[str, Study]], primary: tuple[str, str],
                 rng: np.random.Generator, resamples: int, min_draws: int,
                 grid: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    """The :data:`POOLED_CLAIMS` on the draws of every deployment pooled, their intervals from
    a bootstrap with draws nested in deployments: ``{claim: {axis label: result}}`` on the same
    axes as :func:`judge` (``pairs``: every deployment's views per ``model/auditor``)."""
    reps = sorted(pairs)
    names = list(pairs[reps[0]])
    out: dict[str, dict[str, Any]] = {}
    for claim in POOLED_CLAIMS:
        if claim == "op_strongest_of_three":
            auditors = dict.fromkeys(n.split("/", 1)[1] for n in names)
            out[claim] = {a: _op_strongest([pairs[k][f"{primary[0]}/{a}"] for k in reps], rng,
                                           resamples, min_draws) for a in auditors}
        else:
            aset = low_claim_set(claim)
            assert aset is not None
            out[claim] = {n: _low_linkage([pairs[k][n] for k in reps], aset, rng, resamples,
                                          min_draws, grid) for n in names}
    return out


def margin_ends(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The worst and best margins (each ``estimate`` and ``interval``) of a matched-linkage
    result, else None. A result written before the worst was always its own estimate (a
    failing one carried the best) reads the same way."""
    margin = result.get("margin") or {}
    if "worst" not in margin:
        return None
    return margin["worst"], margin.get("best") or {"estimate": None, "interval": None}


def estimate_text(result: dict[str, Any], points: bool = True) -> str:
    """``+x.x [lo, hi]`` of a claim's result ('' without an estimate; points: x100 with a
    sign). A matched-linkage result shows its worst margin and, unless it holds, its best
    margin beside (``worst +x.x [lo, hi]; best +y.y [lo, hi]``, each named: a worst margin's
    interval below zero is undecided while the best's covers zero): the two intervals its
    verdict read."""
    fmt = (lambda x: f"{100 * x:+.1f}") if points else (lambda x: f"{x:.3g}")

    def one(part: dict[str, Any]) -> str:
        interval = part.get("interval")
        return fmt(part["estimate"]) + ("" if interval is None else
                                        f" [{fmt(interval[0])}, {fmt(interval[1])}]")

    ends = margin_ends(result)
    if ends is None:
        return "" if result.get("estimate") is None else one(result)
    worst, best = ends
    if worst.get("estimate") is None:
        return ""
    if result["verdict"] == "holds" or best.get("estimate") is None:
        return one(worst)
    return f"worst {one(worst)}; best {one(best)}"


def _deployment_result(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`experiments.intervals.deployment_level` of one claim's per-deployment results;
    for matched-linkage results, of their worst and of their best margins, the verdict from
    both (:func:`experiments.intervals.margin_verdict`) and the result shaped like theirs."""
    ends = [margin_ends(r) for r in results]
    if any(e is None for e in ends):
        return deployment_level(results)
    worst = deployment_level([e[0] for e in ends if e is not None])
    if worst is None:
        return None
    best = deployment_level([e[1] for e in ends if e is not None])
    state = margin_verdict(worst["interval"], None if best is None else best["interval"])
    return {**worst, "verdict": state, "margin": {"worst": worst, "best": best}}


def judge_deployments(judgements: dict[Any, dict[str, dict[str, Any]]]
                      ) -> dict[str, dict[str, dict[str, Any] | None]]:
    """The :data:`POOLED_CLAIMS` at the deployment level: ``{claim: {axis label: result}}``
    from the claim's per-replicate results on that axis (:func:`_deployment_result`); None on
    an axis where some deployment has no estimate. Empty with fewer than 2 replicates."""
    reps = sorted(judgements, key=int)
    if len(reps) < 2:
        return {}
    return {c: {axis: _deployment_result([judgements[k][c][axis] for k in reps])
                for axis in judgements[reps[0]][c]}
            for c in POOLED_CLAIMS if c in judgements[reps[0]]}


def robust(judgements: dict[Any, dict[str, dict[str, Any]]],
           pooled: dict[str, dict[str, Any]] | None = None,
           deployments: dict[str, dict[str, dict[str, Any] | None]] | None = None
           ) -> dict[str, bool]:
    """Per claim: it holds in every replicate on every axis, and on every axis of the pooled
    and the deployment-level judgements where the claim has them."""
    def holds(res: dict[str, Any] | None) -> bool:
        return res is not None and res["verdict"] == "holds"

    return {c: bool(judgements) and all(holds(res) for per in judgements.values()
                                        for res in per[c].values())
            and all(holds(res) for res in (pooled or {}).get(c, {}).values())
            and all(holds(res) for res in (deployments or {}).get(c, {}).values())
            for c in CLAIMS}


def summary_deployments(summary: dict[str, Any]) -> dict[str, dict[str, dict[str, Any] | None]]:
    """The deployment-level judgements of a report summary: stored, or (a summary written before
    they were) computed from its per-replicate results."""
    if "claims_deployment_level" in summary:
        return summary["claims_deployment_level"]
    return judge_deployments(summary["claims_by_replicate"])


def summary_robust(summary: dict[str, Any]) -> dict[str, bool]:
    """The robust verdicts of a report summary on its shown intervals, the deployment level
    included (recomputed: a summary written before did not include it)."""
    return robust(summary["claims_by_replicate"], summary.get("claims_pooled"),
                  summary_deployments(summary))
