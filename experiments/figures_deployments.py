"""The figures drawn over every replicated deployment: the claims' intervals (per replicate,
pooled and at the deployment level), the linkage of each threat's strongest attack (small
multiples per replicate and auditor, with the deployments' binned means), and membership
inference against the returned model (binned means with their intervals).

Kept apart from :mod:`experiments.figures` (one deployment's curves) so each module stays
small; both share its helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.experiments.figures import fit_to_points, noise_axis, pyplot, save_figure
from noisyanchor.experiments.linkage import CHANCE
from noisyanchor.experiments.study import Study, strongest

#: Colours of the verdicts in the claims figure.
VERDICT_COLORS = {"holds": "C2", "fails": "C3", "undecided": "C7", "not reached": "C1",
                  "not enough draws": "C1"}
#: Equal-width noise bins the binned means are taken over.
BINS = 6
#: The threats of the threats figure: attack set and legend text.
THREAT_SETS = (("all", "colluder (+ analyst)"), ("analyst", "analyst alone, known records"),
               ("public", "analyst + public data"))
#: Membership attacks against the returned model and their markers.
MEMBERSHIP_ATTACKS = (("loss_threshold", "o", "loss threshold"), ("shadow", "s", "shadow models"),
                      ("lira", "^", "LiRA (online)"), ("lira_offline", "v", "LiRA (offline)"))


def binned_mean(x: np.ndarray, y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of ``y`` in each bin of ``x`` (``edges``; NaN where a bin is empty)."""
    idx = np.clip(np.digitize(x, edges[1:-1]), 0, len(edges) - 2)
    return np.array([float(np.mean(y[idx == b])) if np.any(idx == b) else np.nan
                     for b in range(len(edges) - 1)])


def mean_interval(values: np.ndarray) -> tuple[float, float, float] | None:
    """Mean of the finite ``values`` with its 95% t interval (the interval collapses to the
    mean with a single value); None without any."""
    from noisyanchor.experiments.intervals import t_interval

    v = values[np.isfinite(values)]
    if not len(v):
        return None
    if len(v) == 1:
        return float(v[0]), float(v[0]), float(v[0])
    got = t_interval(v)
    return got["estimate"], *got["interval"]


def _draw_interval(ax, x: float, got: tuple[float, float, float] | None, color: str,
                   marker: str, label: str | None = None, filled: bool = True) -> None:
    if got is None:
        return
    mean, low, high = got
    ax.plot([x, x], [low, high], color=color, lw=1.0)
    ax.scatter([x], [mean], color=color if filled else "white", edgecolors=color,
               marker=marker, s=16, zorder=3, label=label)


# ---- claims ----------------------------------------------------------------------------------

def _claim_rows(summary: dict[str, Any], claim: str, axis: str,
                reps: list[str]) -> list[tuple[str, dict[str, Any] | None]]:
    from noisyanchor.experiments.claims import summary_deployments

    pooled = (summary.get("claims_pooled") or {}).get(claim, {})
    deployment = summary_deployments(summary).get(claim, {})
    rows = [(f"replicate {k}", summary["claims_by_replicate"][k][claim].get(axis)) for k in reps]
    if claim in (summary.get("claims_pooled") or {}):
        rows += [("pooled", pooled.get(axis)), ("deployment level", deployment.get(axis))]
    return rows


#: Marker of each kind of result in the claims figure.
CLAIM_MARKERS = {"replicate": "o", "pooled": "D", "deployment level": "s"}


def claims(summary: dict[str, Any], path: Path, dataset: str = "") -> bool:
    """Every claim's statistic with its 95% interval, one panel per claim, one group of rows
    per axis (model/auditor pair, model or auditor): each replicate (circles), the draws of
    every deployment pooled (diamonds) and the deployment level (t interval over the
    per-deployment estimates, squares), coloured by verdict. A matched-linkage result that does
    not hold shows its best margin's interval too (hollow marker, thin line): the two intervals
    its verdict reads. False without judgements."""
    from noisyanchor.experiments.claims import CLAIMS, margin_ends

    by_rep = summary.get("claims_by_replicate") or {}
    if not by_rep:
        return False
    reps = sorted(by_rep, key=int)
    keys = [c for c in CLAIMS  # the exact pairs check has no interval to draw
            if c != "pn_pairs_identical" and c in by_rep[reps[0]]]
    plt = pyplot()
    cols = 2
    nrows = -(-len(keys) // cols)
    sizes = [len(by_rep[reps[0]][c]) * len(_claim_rows(summary, c, next(iter(by_rep[reps[0]][c])),
                                                     reps)) for c in keys]
    heights = [max(sizes[i * cols:(i + 1) * cols]) for i in range(nrows)]
    fig, axes = plt.subplots(nrows, cols, squeeze=False,
                             figsize=(14, 1.2 * nrows + 0.11 * sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    for ax in axes.flat[len(keys):]:
        ax.set_axis_off()
    for ax, claim in zip(axes.flat, keys, strict=False):
        labels = list(by_rep[reps[0]][claim])
        y, ticks, estimates = 0, [], 0
        for axis in labels:
            group = _claim_rows(summary, claim, axis, reps)
            ticks.append((y + (len(group) - 1) / 2, axis))
            for name, res in group:
                kind = name if name in CLAIM_MARKERS else "replicate"
                if res is None:
                    y += 1
                    continue
                ends = margin_ends(res)
                worst = ends[0] if ends else res
                if worst.get("estimate") is None:
                    ax.text(0.005, y, res["verdict"], fontsize=5, va="center", color="C1",
                            transform=ax.get_yaxis_transform())
                    y += 1
                    continue
                estimates += 1
                color = VERDICT_COLORS[res["verdict"]]
                lo, hi = (100 * v for v in worst["interval"] or [worst["estimate"]] * 2)
                ax.plot([lo, hi], [y, y], color=color, lw=1.4)
                ax.scatter([100 * worst["estimate"]], [y], color=color, s=12, zorder=3,
                           marker=CLAIM_MARKERS[kind],
                           edgecolors="k" if kind != "replicate" else "none")
                best = ends[1] if ends else None
                if (res["verdict"] != "holds" and best is not None
                        and best.get("estimate") is not None):
                    blo, bhi = (100 * v for v in best["interval"] or [best["estimate"]] * 2)
                    ax.plot([blo, bhi], [y + 0.3, y + 0.3], color=color, lw=0.7)
                    ax.scatter([100 * best["estimate"]], [y + 0.3], facecolors="white",
                               edgecolors=color, s=10, zorder=3, marker=CLAIM_MARKERS[kind])
                y += 1
            y += 0.6  # a gap between groups
        if not estimates:
            ax.text(0.5, 0.5, "no interval to draw: each row says why",
                    transform=ax.transAxes, ha="center", va="center", fontsize=7, color="C1")
            ax.set_xticks([])
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks([t for t, _ in ticks], [name for _, name in ticks], fontsize=7)
        ax.set_ylim(y - 0.4, -0.8)
        ax.set_title(CLAIMS[claim], fontsize=8)
        ax.set_xlabel("points of linkage (OP minus the better of MP and AM)"
                      if claim == "op_strongest_of_three"
                      else "points of test balanced accuracy (anchor noise minus private-data "
                      "noise)" if claim.startswith("anchor_noise")
                      else "points of test balanced accuracy (AA-I-GDP minus I-GDP)", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    fig.legend(handles=_claims_legend(plt), loc="upper center", ncol=5, fontsize=7,
               bbox_to_anchor=(0.5, 1.0 - 0.25 / fig.get_figheight()), frameon=False)
    where = (f"in each of the {len(reps)} replicated deployments, pooled, and at the "
             "deployment level" if len(reps) > 1 else "in the one deployment")
    fig.suptitle(f"{dataset or 'sweep'}, p = {summary['p']}: every claim {where} (95% "
                 "intervals)", fontsize=10, y=1.0)
    save_figure(plt, fig, path)
    return True


def _claims_legend(plt) -> list:
    from matplotlib.lines import Line2D

    marks = [Line2D([], [], color="k", marker=m, ls="", markersize=4,
                    markerfacecolor="gray",
                    markeredgecolor="none" if k == "replicate" else "k",
                    label={"replicate": "one replicate (rows in order 0, 1, ...)",
                           "pooled": "pooled (draws nested in deployments)",
                           "deployment level": "deployment level (t over the estimates)"}[k])
             for k, m in CLAIM_MARKERS.items()]
    marks.append(Line2D([], [], color="gray", marker="o", ls="-", lw=0.7, markersize=3,
                        markerfacecolor="white",
                        label="best margin (shown unless the worst holds)"))
    colours = [Line2D([], [], color=c, lw=2, label=v) for v, c in VERDICT_COLORS.items()
               if v not in ("not enough draws",)]
    return marks + colours


# ---- threats ---------------------------------------------------------------------------------

def _threat_points(study: Study, method: str, aset: str) -> tuple[np.ndarray, np.ndarray]:
    rs = [(r["noise"], strongest(r, aset, study.threats)) for r in study.draws.get(method, [])]
    rs = [(x, y) for x, y in rs if y is not None]
    return (np.array([x for x, _ in rs]), np.array([y for _, y in rs])) if rs else (
        np.array([]), np.array([]))


def threats(replicates: dict[int, dict[str, Study]], model: str, path: Path,
            dataset: str = "") -> bool:
    """Linkage of the strongest attack of each threat vs noise, small multiples: one row per
    replicate, one column per (auditor, noise: private-data on the coupled C-GDP-pn =
    AA-I-GDP-pn runs, anchor), draws as points with their spline; the last row the mean over
    the deployments in each noise bin with its t interval. The noiseless C-GDP control's
    strongest linkage per threat as a dashed line. False when only the colluder's attacks
    ran."""
    reps = sorted(replicates)
    first = replicates[reps[0]]
    auditors = list(dict.fromkeys(n.split("/", 1)[1] for n in first if n.startswith(model + "/")))
    any_study = first[f"{model}/{auditors[0]}"]
    sets = [(a, t) for a, t in THREAT_SETS
            if any(a in any_study.attack_sets(m) for m in ("c-gdp-pn", "aa-igdp-an"))]
    if [a for a, _ in sets] in (["all"], []):
        return False
    columns = [(aud, m) for aud in auditors for m in ("c-gdp-pn", "aa-igdp-an")]
    plt = pyplot()
    pooled = len(reps) > 1  # a bottom row of the deployments' means needs two of them
    rows = len(reps) + pooled
    fig, axes = plt.subplots(rows, len(columns), squeeze=False, sharex="col", sharey="col",
                             figsize=(3.4 * len(columns), 1.55 * rows + 1))
    for j, (aud, method) in enumerate(columns):
        kind = "sigma" if method == "c-gdp-pn" else "v"
        studies = [replicates[k][f"{model}/{aud}"] for k in reps]
        xs = np.concatenate([_threat_points(s, method, a)[0] for s in studies for a, _ in sets])
        edges = np.linspace(float(xs.min()), float(xs.max()), BINS + 1) if len(xs) else None
        seen = [CHANCE]  # the column's y range: its points and intervals (a fit may swing out)
        for i, study in enumerate(studies):
            ax = axes[i][j]
            for c, (aset, _) in enumerate(sets):
                x, y = _threat_points(study, method, aset)
                ax.scatter(x, y, s=3, color=f"C{c}", alpha=0.6)
                seen += y.tolist()
                fit = study.fits.get(f"{method}/strongest-{aset}")
                if fit is not None:
                    ax.plot(fit.grid, fit.fit, color=f"C{c}", lw=0.9)
                ctrl = study.controls.get("c-gdp")
                value = None if ctrl is None else strongest(ctrl, aset, study.threats)
                if value is not None:
                    ax.axhline(value, color=f"C{c}", ls="--", lw=0.6)
                    seen.append(value)
            ax.axhline(CHANCE, color="gray", ls=":", lw=0.8)
            if j == 0:
                ax.set_ylabel(f"replicate {study.replicate}\nlinkage", fontsize=7)
            ax.tick_params(labelsize=6)
        ax = axes[rows - 1][j]
        if edges is not None and pooled:
            mids = (edges[:-1] + edges[1:]) / 2
            width = edges[1] - edges[0]
            for c, (aset, _) in enumerate(sets):
                per = np.array([binned_mean(*_threat_points(s, method, aset), edges)
                                if len(_threat_points(s, method, aset)[0]) else
                                np.full(BINS, np.nan) for s in studies])
                for b, mid in enumerate(mids):
                    got = mean_interval(per[:, b])
                    _draw_interval(ax, mid + (c - 1) * 0.12 * width, got, f"C{c}", "o")
                    seen += [] if got is None else list(got)
        ax.axhline(CHANCE, color="gray", ls=":", lw=0.8)
        if j == 0 and pooled:
            ax.set_ylabel(f"all {len(reps)} deployments\nbin mean, 95% t", fontsize=7)
        noise_axis(ax, kind, fontsize=6)
        ax.tick_params(labelsize=6)
        fit_to_points(ax, seen)
        axes[0][j].set_title(f"{aud} auditor, "
                             + ("private-data noise (c-gdp-pn = aa-igdp-pn)"
                                if method == "c-gdp-pn" else "anchor noise (aa-igdp-an)"),
                             fontsize=7)
    fig.legend(handles=_threats_legend(sets, pooled), loc="upper center", ncol=len(sets) + 3,
               fontsize=7, bbox_to_anchor=(0.5, 1.0 - 0.3 / fig.get_figheight()),
               frameon=False)
    fig.suptitle(f"{dataset or 'sweep'}, p = {any_study.meta['p']}: exact-source linkage of "
                 "the strongest attack of each threat (chosen per draw on held-out galleries), "
                 "every replicate and auditor", fontsize=9, y=1.0)
    save_figure(plt, fig, path, dpi=72)  # 11 x 4 panels: kept under 300 KB
    return True


def _threats_legend(sets, pooled: bool) -> list:
    from matplotlib.lines import Line2D

    out = [Line2D([], [], color=f"C{c}", marker="o", markersize=3, lw=1, label=text)
           for c, (_, text) in enumerate(sets)]
    out += [Line2D([], [], color="k", ls="--", lw=0.6, label="noiseless c-gdp, same threat"),
            Line2D([], [], color="gray", ls=":", label="chance")]
    if pooled:
        out.append(Line2D([], [], color="k", marker="o", markersize=3, lw=1,
                          label="bottom row: mean over deployments, 95% t"))
    return out


# ---- membership ------------------------------------------------------------------------------

def membership(rows: list[dict[str, Any]], config: dict[str, Any], path: Path,
               dataset: str = "", p: int | None = None, v_pt: float | None = None) -> bool:
    """Membership inference AUC against the returned model vs noise, one column per model, a
    row per noise (private-data: the coupled C-GDP-pn = AA-I-GDP-pn runs, drawn once; anchor):
    each attack's mean AUC in each noise bin over the draws of every replicate, with its 95% t
    interval, one marker per attack; the noiseless controls' mean as lines. False without
    membership rows."""
    rs = [r for r in rows if r.get("membership") and r["membership"].get("model")]
    if not rs:
        return False
    plt = pyplot()
    models = config["models"]
    fig, axes = plt.subplots(2, len(models), figsize=(4.6 * len(models), 7.0), squeeze=False,
                             sharey=True)
    for col, model in enumerate(models):
        for row, (method, kind) in enumerate((("c-gdp-pn", "sigma"), ("aa-igdp-an", "v"))):
            ax = axes[row][col]
            sel = [r for r in rs if r["method"] == method and not r["control"]]
            noise = np.array([r["noise"] for r in sel])
            if len(noise):
                edges = np.linspace(float(noise.min()), float(noise.max()), BINS + 1)
                width = edges[1] - edges[0]
                idx = np.clip(np.digitize(noise, edges[1:-1]), 0, BINS - 1)
                for k, (attack, marker, text) in enumerate(MEMBERSHIP_ATTACKS):
                    auc = np.array([(r["membership"]["model"][model].get(attack) or {})
                                    .get("auc", np.nan) for r in sel], dtype=float)
                    if not np.isfinite(auc).any():
                        continue
                    for b in range(BINS):
                        x = (edges[b] + edges[b + 1]) / 2 + (k - 1.5) * 0.14 * width
                        _draw_interval(ax, x, mean_interval(auc[idx == b]), f"C{k}", marker,
                                       text if b == 0 else None)
            for ctrl, ls, name in (("aa-igdp", "-.", "noiseless c-gdp = aa-igdp"),
                                   ("i-gdp", "--", "noiseless i-gdp")):
                got = [r["membership"]["model"][model]["loss_threshold"]["auc"] for r in rs
                       if r["method"] == ctrl and r["control"]]
                if got:
                    ax.axhline(float(np.mean(got)), color="k", lw=0.8, ls=ls,
                               label=f"{name}, loss threshold (mean)")
            ax.axhline(0.5, color="gray", lw=0.8, ls=":", label="chance")
            noise_axis(ax, kind, v_pt if kind == "v" else None)
            ax.set_ylabel("membership AUC (95% t per bin)", fontsize=8)
            ax.set_title(f"model {model}, "
                         + ("private-data noise (c-gdp-pn = aa-igdp-pn)" if kind == "sigma"
                            else "anchor noise (aa-igdp-an)"), fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=7,
               bbox_to_anchor=(0.5, 1.0 - 0.3 / fig.get_figheight()), frameon=False)
    fig.suptitle(f"{dataset or 'sweep'}, p = {p}, every replicate: membership inference "
                 "against the returned model", fontsize=10, y=1.0)
    save_figure(plt, fig, path)
    return True
