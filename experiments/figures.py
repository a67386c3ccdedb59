"""PNG figures of a sweep, matching the paper's Figs. 2-11 (matplotlib, Agg backend).

Every curve drawn here is a :class:`experiments.fits.SplineFit` also written to ``fits.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.experiments.linkage import CHANCE
from noisyanchor.experiments.study import Study


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend (matplotlib is in the eval extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt, fig, path: Path, dpi: int = 120) -> None:
    """Write ``fig`` to ``path`` (PNG, ``dpi``, default 120) and close it (room is kept for a
    figure title, and legends outside the axes are kept in the file)."""
    fig.tight_layout(rect=(0, 0, 1, 0.96) if fig._suptitle is not None else None)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def fit_to_points(ax, values, axis: str = "y") -> None:
    """Limits of ``axis`` around the observed points (a spline can swing far outside them where
    the draws are sparse; the curve is then cut, never the data)."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if len(v):
        pad = 0.08 * max(float(v.max() - v.min()), 0.02)
        (ax.set_ylim if axis == "y" else ax.set_xlim)(float(v.min()) - pad, float(v.max()) + pad)


def title(study: Study, dataset: str = "", *, model: bool = True, auditor: bool = True) -> str:
    """What a figure shows: data set, ``p``, replicate, and the model and auditor its numbers
    come from (a figure about linkage alone needs no model, one about utility no auditor)."""
    parts = [dataset or "sweep", f"p = {study.meta['p']}", f"replicate {study.replicate}"]
    if model and study.model:
        parts.append(f"model {study.model}")
    if auditor and study.auditor:
        parts.append(f"{study.auditor} auditor")
    return ", ".join(parts)


#: What the noise axes say: the level and where it is added (data units for sigma; the anchor
#: ``A`` has unit columns, so v is on the scale of its entries).
SIGMA_LABEL = "sigma: s.d. of the noise on each entry of Y_i (data units)"
V_LABEL = "v: s.d. of the noise on each entry of B_i (A has unit-norm columns)"


def noise_axis(ax, kind: str, v_pt: float | None = None, fontsize: float = 7) -> None:
    """Label a noise axis with the level's unit: ``kind`` "sigma" or "v"; with ``v_pt`` a top
    axis in units of ``v_PT`` (the GOPP phase transition)."""
    ax.set_xlabel(SIGMA_LABEL if kind == "sigma" else V_LABEL, fontsize=fontsize)
    if kind == "v" and v_pt:
        top = ax.secondary_xaxis("top", functions=(lambda v: v / v_pt, lambda u: u * v_pt))
        top.set_xlabel("v / v_PT", fontsize=fontsize)
        top.tick_params(labelsize=fontsize)


def outside_legend(ax, **kwargs) -> None:
    """A legend to the right of the axes, so it covers no data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7,
              **kwargs)


#: How a curve identical to another by construction (the coupled C-GDP-pn / AA-I-GDP-pn runs)
#: is drawn: dashed over the solid one, hollow markers, and said so in its label.
IDENTICAL = {"ls": "--", "lw": 2.2}
IDENTICAL_NOTE = " (= C-GDP-pn: coupled, identical)"


def _curve(ax, fit, color, label, **style):
    ax.plot(fit.grid, fit.fit, color=color, label=label, **style)
    ax.fill_between(fit.grid, fit.low, fit.high, color=color, alpha=0.2)


def _scatter_fit(ax, study, method, key, color, label, value, identical=False):
    rs = study.draws.get(method, [])
    if not rs:
        return
    marker = {"facecolors": "none", "edgecolors": color} if identical else {"color": color}
    ax.scatter([r["noise"] for r in rs], [value(r) for r in rs], s=10 if identical else 6,
               alpha=0.5, **marker)
    fit = study.fits.get(f"{method}/{key}")
    if fit is not None:
        _curve(ax, fit, color, label + (IDENTICAL_NOTE if identical else ""),
               **(IDENTICAL if identical else {}))


def linkage(study: Study, path: Path, dataset: str = "") -> None:
    """Fig. 2/6: linkage (exact-source or identity) vs noise per attack; (a) the paired
    private-data-noise trajectory (the coupled AA-I-GDP-pn curve dashed over C-GDP-pn's: they
    are identical), (b) every colluder attack on anchor noise."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    _scatter_fit(axes[0], study, "c-gdp-pn", "known_secret", "C0", "C-GDP-pn known-secret",
                 lambda r: r["linkage"]["known_secret"])
    _scatter_fit(axes[0], study, "aa-igdp-pn", "known_anchor", "C1",
                 "AA-I-GDP-pn known-anchor", lambda r: r["linkage"]["known_anchor"],
                 identical=True)
    noise_axis(axes[0], "sigma")
    an = study.draws.get("aa-igdp-an", [])
    colluder = [a for a in (an[0]["linkage"] if an else [])
                if study.threats.get(a, "colluder") == "colluder"]
    for k, attack in enumerate(colluder):
        _scatter_fit(axes[1], study, "aa-igdp-an", attack, f"C{k + 2}", attack,
                     lambda r, a=attack: r["linkage"][a])
    noise_axis(axes[1], "v", study.meta.get("v_pt"))
    ctrl = study.controls.get("c-gdp")
    for ax, name in zip(axes, ("(a) private-data noise", "(b) AA-I-GDP anchor noise, colluder"),
                        strict=True):
        ax.axhline(CHANCE, color="gray", ls=":", label="chance")
        if ctrl:
            ax.axhline(max(ctrl["linkage"].values()), color="k", ls="-.",
                       label="noiseless control")
        ax.set_ylabel(study.metric_label)
        ax.set_title(name, fontsize=9)
        outside_legend(ax)
    seen = [v for m in ("c-gdp-pn", "aa-igdp-an") for r in study.draws.get(m, [])
            for a, v in r["linkage"].items() if study.threats.get(a, "colluder") == "colluder"]
    for ax in axes:
        fit_to_points(ax, [*seen, CHANCE, *(max(c["linkage"].values(), default=CHANCE)
                                            for c in study.controls.values())])
    fig.suptitle(title(study, dataset, model=False), fontsize=10)
    save_figure(plt, fig, path)


def utility(study: Study, path: Path, dataset: str = "") -> None:
    """Fig. 4/7: test balanced accuracy vs noise; open markers are GPM runs capped at the
    iteration limit."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    _scatter_fit(axes[0], study, "c-gdp-pn", "utility", "C0", "C-GDP-pn", lambda r: r["utility"])
    _scatter_fit(axes[0], study, "aa-igdp-pn", "utility", "C1", "AA-I-GDP-pn",
                 lambda r: r["utility"], identical=True)
    noise_axis(axes[0], "sigma")
    an = study.draws.get("aa-igdp-an", [])
    conv = [r for r in an if r["solver"]["converged"]]
    cap = [r for r in an if not r["solver"]["converged"]]
    axes[1].scatter([r["v"] for r in conv], [r["utility"] for r in conv], s=8, color="C2",
                    label="GPM converged")
    axes[1].scatter([r["v"] for r in cap], [r["utility"] for r in cap], s=8,
                    facecolors="none", edgecolors="C2", label="GPM at cap")
    if "aa-igdp-an/utility" in study.fits:
        _curve(axes[1], study.fits["aa-igdp-an/utility"], "C2", "AA-I-GDP-an fit")
    axes[1].axvline(study.meta["v_pt"], color="C3", ls="--", label="v_PT")
    noise_axis(axes[1], "v", study.meta.get("v_pt"))
    for ax in axes:
        if "c-gdp" in study.controls:
            ax.axhline(study.controls["c-gdp"]["utility"], color="k", ls="-.",
                       label="noiseless C-GDP = AA-I-GDP")
        if "i-gdp" in study.controls:
            ax.axhline(study.controls["i-gdp"]["utility"], color="gray", ls="--",
                       label="noiseless I-GDP")
        if study.meta.get("classes"):
            ax.axhline(1.0 / study.meta["classes"], color="gray", ls=":", label="chance")
        ax.set_ylabel("test balanced accuracy")
        outside_legend(ax)
        fit_to_points(ax, [r["utility"] for rs in study.draws.values() for r in rs]
                      + [c["utility"] for c in study.controls.values()])
    fig.suptitle(title(study, dataset, auditor=False), fontsize=10)
    save_figure(plt, fig, path)


def _frontier_axes(ax, study, methods, colors, attack_set, label_suffix=""):
    xs, ys = [CHANCE], []
    for m, color in zip(methods, colors, strict=True):
        rs = study.draws.get(m, [])
        if not rs or attack_set not in study.attack_sets(m):
            continue
        xs += study.strongest_series(m, attack_set)
        ys += [r["utility"] for r in rs]
        same = m == "aa-igdp-pn" and "c-gdp-pn" in methods
        marker = {"facecolors": "none", "edgecolors": color} if same else {"color": color}
        ax.scatter(study.strongest_series(m, attack_set), [r["utility"] for r in rs],
                   s=10 if same else 6, alpha=0.4, **marker)
        lf = study.fits.get(f"{m}/strongest-{attack_set}")
        uf = study.fits.get(f"{m}/utility")
        if lf is not None and uf is not None:
            ax.plot(lf.fit, uf.fit, color=color,
                    label=f"{m}{label_suffix}" + (IDENTICAL_NOTE if same else ""),
                    **(IDENTICAL if same else {}))
    if ys:
        fit_to_points(ax, xs, "x")
        fit_to_points(ax, ys)


#: Panels of the frontier figure: attack set and what it holds.
FRONTIER_PANELS = (("paper", "(a) the paper's attacks (anchor noise: best of MP/OP/AM)"),
                   ("all", "(b) every attack of the colluder (corrected estimators included)"),
                   ("analyst", "(c) the analyst alone, knowing m records of each target"),
                   ("public", "(d) the analyst with a public sample"))


def frontier(study: Study, path: Path, dataset: str = "") -> None:
    """Fig. 5/8: utility vs the strongest attack's linkage (fitted curves parametrised by
    noise), one panel per attack set that ran."""
    plt = pyplot()
    panels = [(a, t) for a, t in FRONTIER_PANELS
              if any(a in study.attack_sets(m) for m in ("c-gdp-pn", "aa-igdp-an"))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 2, 4.4), sharey=True,
                             squeeze=False)
    for ax, (aset, name) in zip(axes[0], panels, strict=True):
        _frontier_axes(ax, study, ("c-gdp-pn", "aa-igdp-pn", "aa-igdp-an"),
                       ("C0", "C1", "C2"), aset)
        ax.axvline(CHANCE, color="gray", ls=":", label="chance linkage")
        ax.set_xlabel("linkage of the strongest attack")
        ax.set_ylabel("test balanced accuracy")
        ax.set_title(name, fontsize=8)
    outside_legend(axes[0][-1])
    fig.suptitle(title(study, dataset), fontsize=10)
    save_figure(plt, fig, path)


def solver(study: Study, path: Path, dataset: str = "") -> None:
    """Fig. 9: GPM iterations, fixed-point residual and wall time vs v, with v_PT marked."""
    plt = pyplot()
    rs = study.draws.get("aa-igdp-an", [])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    v = np.array([r["v"] for r in rs])
    cert = np.array([bool(r["solver"]["certified"]) for r in rs])
    for ax, key, ylabel, log in ((axes[0], "iterations", "GPM iterations", False),
                                 (axes[1], "fixed_point_residual", "fixed-point residual", True),
                                 (axes[2], "seconds", "solver seconds", False)):
        y = np.array([r["solver"][key] or 0.0 for r in rs], dtype=float)
        if log:
            y = np.maximum(y, 1e-16)
            ax.set_yscale("log")
        ax.scatter(v[cert], y[cert], s=8, color="C0", label="certified")
        ax.scatter(v[~cert], y[~cert], s=8, facecolors="none", edgecolors="C3",
                   label="not certified")
        ax.axvline(study.meta["v_pt"], color="k", ls="--", label="v_PT")
        noise_axis(ax, "v", study.meta.get("v_pt"))
        ax.set_ylabel(ylabel)
    outside_legend(axes[-1])
    fig.suptitle(title(study, dataset, model=False, auditor=False), fontsize=10)
    save_figure(plt, fig, path)


def grid(study: Study, path: Path, dataset: str = "") -> bool:
    """Fig. 3/10: originals, projection-only control, and reconstructions of saved draws
    ordered by decreasing linkage (one record per column). False when records are not images
    or no row carries its reconstructions."""
    shape = study.meta.get("image_shape")
    # the audit copy of the rows (experiments.audit_rows) drops the reconstructed images
    if not shape or not any(r.get("grid") for rs in study.draws.values() for r in rs):
        return False
    plt = pyplot()
    rows = [("original", study.meta["grid_original"]),
            ("projection only\nX F F+", study.meta["grid_projection_floor"])]
    for method, attack in (("c-gdp-pn", "known_secret"), ("aa-igdp-an", "op"),
                           ("aa-igdp-an", "known_anchor")):
        saved = [r for r in study.draws.get(method, []) if r.get("grid")]
        saved.sort(key=lambda r: -r["linkage"][attack])
        ctrl = study.controls.get("c-gdp" if method == "c-gdp-pn" else "aa-igdp")
        seq = ([ctrl] if ctrl and ctrl.get("grid") else []) + saved
        cols = len(rows[0][1])
        pick = [seq[round(k)] for k in np.linspace(0, len(seq) - 1, cols)] if seq else []
        if pick:  # the noiseless control's attack has the same name (known_secret / op / ...)
            rows.append((f"{method} ({attack})",
                         [r["grid"][attack][j] for j, r in enumerate(pick)],
                         [r["linkage"][attack] for r in pick]))
    cols = len(rows[0][1])
    fig, axes = plt.subplots(len(rows), cols, figsize=(1.1 * cols + 1.2, 1.25 * len(rows)),
                             squeeze=False)
    for i, row in enumerate(rows):
        for j in range(cols):
            ax = axes[i][j]
            ax.imshow(np.reshape(row[1][j], shape), cmap="gray_r")
            ax.set_xticks([])
            ax.set_yticks([])
            if len(row) > 2:
                ax.set_xlabel(f"{100 * row[2][j]:.1f}%", fontsize=6, labelpad=1)
        axes[i][0].set_ylabel(row[0], fontsize=6, rotation=0, ha="right", va="center")
    fig.suptitle(title(study, dataset, model=False), fontsize=8)
    save_figure(plt, fig, path)
    return True


def participants(studies: dict[int, Study], path: Path, dataset: str = "") -> None:
    """Fig. 11: utility vs the strongest attack's linkage for each participant count ``p``:
    private-data noise (C-GDP-pn, its known-secret attack) beside anchor noise under the paper's
    attacks and under every attack."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    panels = (("c-gdp-pn", "paper", "(a) C-GDP private-data noise"),
              ("aa-igdp-an", "paper", "(b) anchor noise, paper's attacks (MP/OP/AM)"),
              ("aa-igdp-an", "all", "(c) anchor noise, every attack"))
    for ax, (method, attack_set, name) in zip(axes, panels, strict=True):
        for k, (p, study) in enumerate(sorted(studies.items())):
            _frontier_axes(ax, study, (method,), (f"C{k}",), attack_set, f" p={p}")
        ax.axvline(CHANCE, color="gray", ls=":")
        ax.set_xlabel("linkage of the strongest attack")
        ax.set_ylabel("test balanced accuracy")
        ax.set_title(name, fontsize=9)
    outside_legend(axes[-1])
    any_study = next(iter(studies.values()))
    fig.suptitle(f"{dataset or 'sweep'}, every p, replicate {any_study.replicate}, model "
                 f"{any_study.model}, {any_study.auditor} auditor", fontsize=10)
    save_figure(plt, fig, path)


def frontier_pairs(pairs: dict[str, Study], path: Path, dataset: str = "") -> None:
    """Utility vs the strongest attack's linkage (every attack) for private-data and anchor
    noise, one panel per (downstream model, auditor) pair: how far the frontier generalises."""
    names = list(pairs)
    models = list(dict.fromkeys(n.split("/")[0] for n in names))
    auditors = list(dict.fromkeys(n.split("/", 1)[1] for n in names))
    plt = pyplot()
    fig, axes = plt.subplots(len(models), len(auditors), squeeze=False,
                             figsize=(4.2 * len(auditors), 3.4 * len(models)))
    for i, model in enumerate(models):
        for j, auditor in enumerate(auditors):
            ax = axes[i][j]
            study = pairs.get(f"{model}/{auditor}")
            if study is None:
                ax.set_axis_off()
                continue
            for attack_set, ls in (("all", "-"), ("paper", ":")):
                _frontier_axes(ax, study, ("aa-igdp-pn", "aa-igdp-an"), ("C1", "C2"),
                               attack_set, f" ({attack_set})")
                for line in ax.lines[-2:]:
                    line.set_linestyle(ls)
            ax.axvline(CHANCE, color="gray", ls=":")
            ax.set_title(f"{model} / {auditor} auditor", fontsize=9)
            ax.set_xlabel("linkage of the strongest attack", fontsize=8)
            ax.set_ylabel("test balanced accuracy", fontsize=8)
            if j == len(auditors) - 1:
                outside_legend(ax)
    first = next(iter(pairs.values()))
    fig.suptitle(f"{dataset or 'sweep'}, p = {first.meta['p']}, replicate {first.replicate}: "
                 "every (model, auditor) pair; solid: every colluder attack, dotted: the "
                 "paper's", fontsize=10)
    save_figure(plt, fig, path)


def draw_all(studies: dict[int, Study], main_p: int, out: Path,
             pairs: dict[str, Study] | None = None, summary: dict[str, Any] | None = None,
             rows: list[dict[str, Any]] | None = None,
             config: dict[str, Any] | None = None,
             replicates: dict[int, dict[str, Study]] | None = None) -> list[str]:
    """Every figure into ``out``; returns the file names written. ``pairs``: the main ``p``'s
    view per (model, auditor), for ``fig_frontier_pairs.png``; ``summary``, ``rows`` and
    ``config`` (the main ``p``'s): for the claims and membership figures; ``replicates`` (every
    replicate's views per (model, auditor)) and ``config``: for the threats figure
    (:mod:`experiments.figures_deployments`)."""
    from noisyanchor.experiments import figures_deployments as every

    main = studies[main_p]
    dataset = (config or {}).get("name", "")
    files = []
    if pairs and len(pairs) > 1:
        frontier_pairs(pairs, out / "fig_frontier_pairs.png", dataset)
        files.append("fig_frontier_pairs.png")
    for name, draw in (("fig_linkage.png", linkage), ("fig_utility.png", utility),
                       ("fig_frontier.png", frontier), ("fig_solver.png", solver)):
        draw(main, out / name, dataset)
        files.append(name)
    if grid(main, out / "fig_grid.png", dataset):
        files.append("fig_grid.png")
    if len(studies) > 1:
        participants(studies, out / "fig_participants.png", dataset)
        files.append("fig_participants.png")
    if replicates and config is not None and every.threats(
            replicates, config["model"], out / "fig_threats.png", dataset):
        files.append("fig_threats.png")
    if summary is not None and every.claims(summary, out / "fig_claims.png", dataset):
        files.append("fig_claims.png")
    if rows is not None and config is not None and every.membership(
            rows, config, out / "fig_membership.png", dataset, main_p, main.meta.get("v_pt")):
        files.append("fig_membership.png")
    return files
