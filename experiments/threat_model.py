"""The generated parts of ``THREAT_MODEL.md``: one section per sweep, rewritten from the sweep's
report numbers (``noisyanchor experiment report --threat-model THREAT_MODEL.md``), between
markers that name the sweep; the text around them is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import atomic_write
from noisyanchor.experiments.claims import CLAIM_AXES, CLAIMS


def markers(name: str) -> tuple[str, str]:
    """The lines that open and close the generated section of sweep ``name``."""
    return (f"<!-- generated from the {name} sweep by noisyanchor experiment report "
            "--threat-model: do not edit by hand -->",
            f"<!-- end of the generated {name} section -->")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _claim_cell(result: dict[str, Any]) -> str:
    est, interval = result.get("estimate"), result.get("interval")
    text = result["verdict"]
    if est is not None and interval is not None:
        text += f" {100 * est:+.1f} [{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]"
    return text


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
             "target (known input) or holds the public pool (known sample). Linkage: "
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
    lines += ["", f"Claims ({primary['pair']}; margins in points with 95% intervals; robust = "
              "holds in every replicate, model and auditor):", "",
              "| claim | " + " | ".join(f"replicate {k}" for k in reps) + " | robust |",
              "|---|" + "---|" * (len(reps) + 1)]
    for claim, text in CLAIMS.items():
        axis = primary[CLAIM_AXES[claim]]
        cells = [_claim_cell(summary["claims_by_replicate"][k][claim].get(axis, {"verdict": "-"}))
                 for k in reps]
        lines.append(f"| {text} | " + " | ".join(cells)
                     + f" | {'yes' if summary['robust'][claim] else 'no'} |")
    mi = summary.get("membership") or {}
    if mi:
        best = max(((m, label, entry["model"][config["model"]])
                    for m, bins in mi.items() for label, entry in bins.items()),
                    key=lambda t: t[2].get("loss_threshold", {}).get("auc", 0))
        cell = best[2]
        lines += ["", f"Membership inference against the returned {config['model']} model is "
                  f"near chance everywhere: the largest mean loss-threshold AUC is "
                  f"{cell['loss_threshold']['auc']:.3f} (TPR at 1% FPR "
                  f"{cell['loss_threshold']['tpr_at_1pct_fpr']:.3f}) for {best[0]} at noise "
                  f"{best[1]}; every method, noise level and model is in `summary.md`."]
    ml = summary.get("ml_attack")
    if ml:
        lines += ["", f"Maximum-likelihood attack: {ml['converged']}/{ml['targets']} target "
                  f"estimates converged ({ml['starts']} starts each; a start other than OP won "
                  f"{ml['other_start_won']} times)."]
    return "\n".join(lines) + "\n"


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
