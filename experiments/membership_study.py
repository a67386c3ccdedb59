"""``noisyanchor experiment membership``: the membership rows of a sweep
(``experiments/configs/digits_membership.toml``: the overfit model, LiRA, ``Z`` by distance)
summarised with an interval on every number, as one small JSON and one figure.

Every row with membership results (the controls and every ``membership_every``-th draw) gives,
per attack against the returned model and per threat against ``Z``, its AUC with a 95% interval
(Hanley and McNeil, Radiology 1982: the AUC's standard error from the AUC and the two counts,
normal approximation, clipped to [0, 1]) and its TPR at 1% and 0.1% FPR with a 95% Wilson
interval over the members (the threshold is taken as fixed: the interval is the members'
sampling only). The intervals are per deployment and per draw: they say how far the number
could move with other records, not with another deployment.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.files import atomic_write
from noisyanchor.experiments.figures import pyplot, save_figure
from noisyanchor.experiments.study import load_rows

#: Attacks against the returned model, in the order drawn, with their legend text.
MODEL_ATTACKS = {"loss_threshold": "loss threshold", "shadow": "shadow models (Shokri)",
                 "lira": "LiRA online", "lira_offline": "LiRA offline"}
#: Threats against ``Z`` drawn, with their legend text (the sweep's attack sets).
Z_THREATS = {"all": "analyst + colluder", "analyst": "analyst alone (known records)",
             "public": "analyst + public data"}
#: Two-sided 95% normal quantile.
_Z95 = 1.959963984540054


def auc_interval(auc: float, members: int, non_members: int) -> tuple[float, float]:
    """95% interval of an AUC from its Hanley-McNeil standard error
    ``SE^2 = (A(1-A) + (n1-1)(Q1-A^2) + (n2-1)(Q2-A^2)) / (n1 n2)``,
    ``Q1 = A / (2-A)``, ``Q2 = 2A^2 / (1+A)``, ``n1`` members, ``n2`` non-members."""
    a, n1, n2 = float(auc), int(members), int(non_members)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = np.sqrt(max(a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n2 - 1) * (q2 - a * a), 0.0)
                 / (n1 * n2))
    return max(0.0, a - _Z95 * se), min(1.0, a + _Z95 * se)


def wilson_interval(rate: float, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``rate`` of ``n``."""
    centre = (rate + _Z95 ** 2 / (2 * n)) / (1 + _Z95 ** 2 / n)
    half = _Z95 / (1 + _Z95 ** 2 / n) * np.sqrt(rate * (1 - rate) / n + _Z95 ** 2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _cell(got: dict[str, Any]) -> dict[str, Any]:
    """One attack's numbers with their intervals."""
    n1, n0 = got["members"], got["non_members"]
    return {"auc": got["auc"], "auc_interval": auc_interval(got["auc"], n1, n0),
            **{key: got[key] for key in ("tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr")},
            "tpr_at_1pct_fpr_interval": wilson_interval(got["tpr_at_1pct_fpr"], n1),
            "tpr_at_0_1pct_fpr_interval": wilson_interval(got["tpr_at_0_1pct_fpr"], n1),
            "members": n1, "non_members": n0, "fpr_resolution": got["fpr_resolution"],
            **({"attack": got["attack"]} if "attack" in got else {})}


def summarise(rows: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """One entry per row with membership results: method, noise, utility, the returned
    ``model``'s accuracy on members and non-members (its train-test gap), every attack's
    cell (:func:`_cell`) and, for tables, attribute inference's median gain over the public
    regression per threat."""
    out = []
    for r in rows:
        mi = r.get("membership")
        if not mi or model not in mi["model"]:
            continue
        out.append({"method": r["method"], "control": r["control"], "replicate":
                    r.get("replicate", 0), "draw": r["draw"], "sigma": r["sigma"], "v": r["v"],
                    "utility": r["utility_by_model"][model]["utility"],
                    "accuracy": mi["model"][model].get("accuracy"),
                    "model": {a: _cell(g) for a, g in mi["model"][model].items()
                              if a in MODEL_ATTACKS},
                    "z": {t: _cell(g) for t, g in (mi.get("z") or {}).items() if t in Z_THREATS},
                    "attribute": {t: {k: g[k] for k in ("attack", "median_gain", "targets")}
                                  for t, g in (mi.get("attribute") or {}).items()
                                  if t in Z_THREATS}})
    return sorted(out, key=lambda e: (e["method"], e["draw"]))


def _errorbar(ax, entries, x_key, cell, value, color, marker, label, offset=0.0):
    """Points with their intervals; nothing when no entry has the cell."""
    pts = [(e[x_key] + offset, c[value], *c[f"{value}_interval"])
           for e in entries if (c := cell(e)) is not None]
    if not pts:
        return
    x, y, lo, hi = (np.asarray(v) for v in zip(*pts, strict=True))
    ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt=marker, color=color, ms=5, capsize=2,
                lw=0.8, label=label)


def draw(entries: list[dict[str, Any]], path: Path, title: str) -> None:
    """Four panels: TPR at 1% FPR against the returned model vs ``sigma`` and vs ``v``, and the
    AUC against ``Z`` vs ``sigma`` and vs ``v``; the noiseless C-GDP control at noise 0 in
    every panel (its coupled AA-I-GDP control scores the same: their ``Z`` agree to rounding)."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    control = [e for e in entries if e["method"] == "c-gdp" and e["control"]]
    arms = ((0, "sigma", "aa-igdp-pn", "private-data noise sigma"),
            (1, "v", "aa-igdp-an", "anchor noise v"))
    for col, x_key, method, xlabel in arms:
        sel = control + [e for e in entries if e["method"] == method and not e["control"]]
        span = max((e[x_key] for e in sel), default=1.0) or 1.0
        for k, (attack, text) in enumerate(MODEL_ATTACKS.items()):
            _errorbar(axes[0][col], sel, x_key, lambda e, a=attack: e["model"].get(a),
                      "tpr_at_1pct_fpr", f"C{k}", "o", text, offset=(k - 1.5) * 0.012 * span)
        axes[0][col].axhline(0.01, color="gray", lw=0.8, ls="--", label="chance (0.01)")
        axes[0][col].set_ylabel("TPR at 1% FPR, returned model")
        for k, (threat, text) in enumerate(Z_THREATS.items()):
            _errorbar(axes[1][col], sel, x_key, lambda e, t=threat: e["z"].get(t), "auc",
                      f"C{k + 4}", "s", text, offset=(k - 1) * 0.012 * span)
        axes[1][col].axhline(0.5, color="gray", lw=0.8, ls="--", label="chance (0.5)")
        axes[1][col].set_ylabel("AUC against Z (distance to the reconstruction)")
        for row in (0, 1):
            ax = axes[row][col]
            ax.set_xlabel(f"{xlabel} ({method}; points at 0: the C-GDP control)")
            ax.legend(fontsize=7, loc="best")
    for col, x_key, method, _ in arms:
        util = [e["utility"] for e in entries if e["method"] == method and not e["control"]]
        kind = "private-data" if x_key == "sigma" else "anchor"
        where = (f"utility {min(util):.2f}-{max(util):.2f} vs C-GDP "
                 f"{control[0]['utility']:.2f}" if util and control else "")
        axes[0][col].set_title(f"against the returned model: {kind} noise\n{where}", fontsize=9)
        axes[1][col].set_title(f"against Z: {kind} noise", fontsize=9)
    fig.suptitle(title + " (95% intervals: Wilson for TPR, Hanley-McNeil for AUC)",
                 fontsize=10)
    save_figure(plt, fig, path)


def make(results: Path, out: Path) -> dict[str, Any]:
    """Summarise the sweep in ``results`` into ``out/membership.json`` and
    ``out/fig_membership_lira.png``; returns the JSON."""
    meta, rows = load_rows(results)
    cfg = meta["config"]
    entries = summarise(rows, cfg["model"])
    summary = {"config": cfg["name"], "model": cfg["model"],
               "shadow_models": cfg["shadow_models"], "lira_variance": "global",
               "entries": entries}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "membership.json", (json.dumps(summary, indent=1) + "\n").encode())
    draw(entries, out / "fig_membership_lira.png",
         f"{cfg['name']}: membership inference, model {cfg['model']}")
    return summary


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment membership``."""
    ps = sub.add_parser("membership", help="a sweep's membership rows with intervals: JSON and "
                        "figure")
    ps.add_argument("--results", required=True, help="the sweep's results folder")
    ps.add_argument("--out", required=True, help="where membership.json and the figure go")
    ps.add_argument("--json", action="store_true", help="print membership.json's content")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    summary = make(Path(args.results), Path(args.out))
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{len(summary['entries'])} rows summarised into {args.out}/membership.json")
    return 0
