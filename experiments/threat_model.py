"""The generated parts of ``THREAT_MODEL.md``: one section per sweep, rewritten from the sweep's
report numbers (``noisyanchor experiment report --threat-model THREAT_MODEL.md``), between
markers that name the sweep; the text around them is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import atomic_write
from noisyanchor.experiments.claims import (
    CLAIM_AXES,
    CLAIMS,
    estimate_text,
    summary_deployments,
    summary_robust,
)


def markers(name: str) -> tuple[str, str]:
    """The lines that open and close the generated section of sweep ``name``."""
    return (f"<!-- generated from the {name} sweep by noisyanchor experiment report "
            "--threat-model: do not edit by hand -->",
            f"<!-- end of the generated {name} section -->")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _claim_cell(result: dict[str, Any] | None) -> str:
    """``verdict +x.x [lo, hi]`` with every interval the verdict read (none for an exact
    check)."""
    if result is None:
        return "-"
    if result.get("interval") is None:
        return result["verdict"]
    return f"{result['verdict']} {estimate_text(result)}"


def render(config: dict[str, Any], summary: dict[str, Any], results: Path) -> str:
    """The generated section: the setup, every method under every threat, every claim with its
    interval per replicate, membership inference and the ML attack's convergence."""
    b = summary["bench"]
    reps = sorted(summary["claims_by_replicate"], key=int)
    lines = [f"### Measured: {config['name']} (p = {summary['p']}, h = {b['d']}, r = {b['r']})",
             "",
             f"From `{results}` (`summary.md` there has every number and its interval). "
             f"{len(reps)} replicated deployments, {config['draws']} draws per noisy method "
             f"each; the attacker without a colluder knows m = "
             f"{', '.join(str(m) for m in config.get('known_records') or [])} records of each "
             "target (known input) or holds the public pool (known sample); ICA needs the "
             "uploads alone and joins every threat. Linkage: "
             f"{config['auditor']} auditor, exact-source, chance 10%; the strongest attack of "
             "each threat chosen per draw on held-out galleries.", "",
             "| method | analyst + colluder | analyst alone | analyst + public data |",
             "|---|---|---|---|"]
    for m, entry in (summary.get("threat_table") or {}).items():
        cells = []
        for aset in ("all", "analyst", "public"):
            got = entry["sets"].get(aset)
            cells.append("-" if got is None else (
                f"{_pct(got['mean'])} ({got['attack']})" if entry["control"]
                else f"{_pct(got['mean'])} (range {_pct(got['min'])}-{_pct(got['max'])})"))
        lines.append(f"| {m}{' (noiseless)' if entry['control'] else ''} | "
                     + " | ".join(cells) + " |")
    primary = {"pair": f"{config['model']}/{config['auditor']}", "model": config["model"],
               "auditor": config["auditor"]}
    pooled = summary.get("claims_pooled") or {}
    deployments = summary_deployments(summary)
    robust_now = summary_robust(summary)
    lines += ["", f"Claims ({primary['pair']}; margins in points with 95% intervals, per "
              "deployment over its draws, pooled over every deployment with the draws "
              f"nested in deployments, and at the deployment level: the {len(reps)} "
              f"per-deployment estimates, t interval with {len(reps) - 1} degrees of freedom; "
              "each verdict is its interval's; robust = holds in every replicate, model and "
              "auditor, pooled and at the deployment level):", "",
              "| claim | " + " | ".join(f"replicate {k}" for k in reps)
              + " | pooled | deployment level | robust |",
              "|---|" + "---|" * (len(reps) + 3)]
    for claim, text in CLAIMS.items():
        axis = primary[CLAIM_AXES[claim]]
        cells = [_claim_cell(summary["claims_by_replicate"][k][claim].get(axis, {"verdict": "-"}))
                 for k in reps]
        cells += [_claim_cell(got[claim][axis]) if axis in got.get(claim, {}) else "-"
                  for got in (pooled, deployments)]
        lines.append(f"| {text} | " + " | ".join(cells)
                     + f" | {'yes' if robust_now[claim] else 'no'} |")
    lines += _membership_lines(summary.get("membership") or {}, config["model"])
    ml = summary.get("ml_attack")
    if ml:
        beat = ml.get("start_beat_reported")
        lines += ["", f"Maximum-likelihood attack: {ml['converged']}/{ml['targets']} target "
                  f"estimates converged ({ml['starts']} starts each; a start other than OP won "
                  f"{ml['other_start_won']} times; "
                  + ("no start beat the reported likelihood" if beat == 0 else
                     f"a start beat the reported likelihood for {beat}" if beat is not None
                     else "starts' likelihoods not recorded") + ")."]
    return "\n".join(lines) + "\n"


def _auc_text(cell: dict[str, Any]) -> str:
    """``AUC a.aaa [l, h] (TPR at 1% FPR t.ttt)``, saying whether the interval covers chance."""
    ci = cell.get("auc_interval")
    text = f"AUC {cell['auc']:.3f}"
    if ci:
        text += (f" [{ci[0]:.3f}, {ci[1]:.3f}], "
                 + ("covering chance (0.5)" if ci[0] <= 0.5 <= ci[1] else "excluding chance"))
    return text + f" (TPR at 1% FPR {cell['tpr_at_1pct_fpr']:.3f})"


def _membership_lines(mi: dict[str, Any], model: str) -> list[str]:
    """The largest membership AUC against the returned ``model`` and against ``Z`` per threat,
    as measured (every cell is in ``summary.md``)."""
    if not mi:
        return []
    cells = [(m, label, entry) for m, bins in mi.items() for label, entry in bins.items()]
    got = [(m, label, entry["model"][model]["loss_threshold"]) for m, label, entry in cells
           if entry["model"].get(model, {}).get("loss_threshold")]
    lines = [""]
    if got:
        m, label, cell = max(got, key=lambda t: t[2]["auc"])
        lines.append(f"Membership inference against the returned {model} model (loss "
                     f"threshold): the largest mean AUC over methods and noise bins is "
                     f"{_auc_text(cell)}, for {m} at noise {label}.")
    for aset, who in (("all", "the analyst with a colluder"), ("analyst", "the analyst alone"),
                      ("public", "the analyst with public data")):
        z = [(m, label, entry["z"][aset]) for m, label, entry in cells if aset in entry["z"]]
        if z:
            m, label, cell = max(z, key=lambda t: t[2]["auc"])
            lines.append(f"Against Z, {who}: largest mean {_auc_text(cell)}, for {m} at noise "
                         f"{label}.")
    lines.append("Every method, noise bin, model and attack is in `summary.md`.")
    return [lines[0], " ".join(lines[1:])]


def update_threat_model(path: Path, config: dict[str, Any], summary: dict[str, Any],
                        results: Path) -> None:
    """Rewrite the generated section of this sweep in ``path`` (appended when absent)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidInputError(f"cannot read {path}: {err}") from err
    start, end = markers(config["name"])
    block = f"{start}\n{render(config, summary, results)}{end}"
    if start in text:
        if end not in text.split(start, 1)[1]:
            raise InvalidInputError(f"{path}: the generated {config['name']} section has no end "
                                    "marker; nothing was changed")
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write(path, text.encode())
