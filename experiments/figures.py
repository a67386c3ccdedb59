"""PNG figures of a sweep, matching the paper's Figs. 2-11 (matplotlib, Agg backend).

Every curve drawn here is a :class:`experiments.fits.SplineFit` also written to ``fits.json``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from noisyanchor.experiments.linkage import CHANCE
from noisyanchor.experiments.study import Study, strongest


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend (matplotlib is in the eval extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt, fig, path: Path, dpi: int = 120) -> None:
    """Write ``fig`` to ``path`` (PNG, ``dpi``, default 120) and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _curve(ax, fit, color, label):
    ax.plot(fit.grid, fit.fit, color=color, label=label)
    ax.fill_between(fit.grid, fit.low, fit.high, color=color, alpha=0.2)


def _scatter_fit(ax, study, method, key, color, label, value):
    rs = study.draws.get(method, [])
    if not rs:
        return
    ax.scatter([r["noise"] for r in rs], [value(r) for r in rs], s=6, color=color, alpha=0.5)
    fit = study.fits.get(f"{method}/{key}")
    if fit is not None:
        _curve(ax, fit, color, label)


def linkage(study: Study, path: Path) -> None:
    """Fig. 2/6: linkage (exact-source or identity) vs noise per attack; (a) the paired
    private-data-noise trajectory, (b) every attack on anchor noise."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _scatter_fit(axes[0], study, "c-gdp-pn", "known_secret", "C0", "C-GDP-pn known-secret",
                 lambda r: r["linkage"]["known_secret"])
    _scatter_fit(axes[0], study, "aa-igdp-pn", "known_anchor", "C1",
                 "AA-I-GDP-pn known-anchor (paired)", lambda r: r["linkage"]["known_anchor"])
    axes[0].set_xlabel("sigma")
    an = study.draws.get("aa-igdp-an", [])
    for k, attack in enumerate(an[0]["linkage"] if an else []):
        _scatter_fit(axes[1], study, "aa-igdp-an", attack, f"C{k + 2}", attack,
                     lambda r, a=attack: r["linkage"][a])
    axes[1].set_xlabel("v")
    ctrl = study.controls.get("c-gdp")
    for ax, title in zip(axes, ("(a) private-data noise", "(b) AA-I-GDP anchor noise"),
                         strict=True):
        ax.axhline(CHANCE, color="gray", ls=":", label="chance")
        if ctrl:
            ax.axhline(max(ctrl["linkage"].values()), color="k", ls="-.",
                       label="noiseless control")
        ax.set_ylabel(study.metric_label)
        ax.set_title(title)
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)


def utility(study: Study, path: Path) -> None:
    """Fig. 4/7: test balanced accuracy vs noise; open markers are GPM runs capped at the
    iteration limit."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _scatter_fit(axes[0], study, "c-gdp-pn", "utility", "C0", "C-GDP-pn", lambda r: r["utility"])
    _scatter_fit(axes[0], study, "aa-igdp-pn", "utility", "C1", "AA-I-GDP-pn",
                 lambda r: r["utility"])
    axes[0].set_xlabel("sigma")
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
    axes[1].set_xlabel("v")
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
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)


def _frontier_axes(ax, study, methods, colors, attack_set, label_suffix=""):

    for m, color in zip(methods, colors, strict=True):
        rs = study.draws.get(m, [])
        if not rs:
            continue
        ax.scatter([strongest(r, attack_set) for r in rs], [r["utility"] for r in rs], s=6,
                   color=color, alpha=0.4)
        lf = study.fits.get(f"{m}/strongest-{attack_set}")
        uf = study.fits.get(f"{m}/utility")
        if lf is not None and uf is not None:
            ax.plot(lf.fit, uf.fit, color=color, label=f"{m}{label_suffix}")


def frontier(study: Study, path: Path) -> None:
    """Fig. 5/8: utility vs the strongest attack's linkage (fitted curves parametrised by
    noise); (a) the paper's attacks, (b) every attack of the engine."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, aset, title in zip(axes, ("paper", "all"),
                               ("(a) paper's attacks (anchor noise: max of MP/OP/AM)",
                                "(b) every attack (anchor noise: incl. the corrected estimators)"),
                               strict=True):
        _frontier_axes(ax, study, ("c-gdp-pn", "aa-igdp-pn", "aa-igdp-an"),
                       ("C0", "C1", "C2"), aset)
        ax.axvline(CHANCE, color="gray", ls=":", label="chance linkage")
        ax.set_xlabel("linkage of the strongest attack")
        ax.set_ylabel("test balanced accuracy")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)


def solver(study: Study, path: Path) -> None:
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
        ax.set_xlabel("v")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)


def grid(study: Study, path: Path) -> bool:
    """Fig. 3/10: originals, projection-only control, and reconstructions of saved draws
    ordered by decreasing linkage (one record per column). False when records are not images."""
    shape = study.meta.get("image_shape")
    if not shape:
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
    save_figure(plt, fig, path)
    return True


def participants(studies: dict[int, Study], path: Path) -> None:
    """Fig. 11: utility vs the strongest attack's linkage for each participant count ``p``:
    private-data noise (C-GDP-pn, its known-secret attack) beside anchor noise under the paper's
    attacks and under every attack."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    panels = (("c-gdp-pn", "paper", "(a) C-GDP private-data noise"),
              ("aa-igdp-an", "paper", "(b) anchor noise, paper's attacks (MP/OP/AM)"),
              ("aa-igdp-an", "all", "(c) anchor noise, every attack"))
    for ax, (method, attack_set, title) in zip(axes, panels, strict=True):
        for k, (p, study) in enumerate(sorted(studies.items())):
            _frontier_axes(ax, study, (method,), (f"C{k}",), attack_set, f" p={p}")
        ax.axvline(CHANCE, color="gray", ls=":")
        ax.set_xlabel("linkage of the strongest attack")
        ax.set_ylabel("test balanced accuracy")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)


def frontier_pairs(pairs: dict[str, Study], path: Path) -> None:
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
            ax.legend(fontsize=6)
    save_figure(plt, fig, path)


def draw_all(studies: dict[int, Study], main_p: int, out: Path,
             pairs: dict[str, Study] | None = None) -> list[str]:
    """Every figure into ``out``; returns the file names written. ``pairs``: the main ``p``'s
    view per (model, auditor), for ``fig_frontier_pairs.png``."""
    main = studies[main_p]
    files = []
    if pairs and len(pairs) > 1:
        frontier_pairs(pairs, out / "fig_frontier_pairs.png")
        files.append("fig_frontier_pairs.png")
    for name, draw in (("fig_linkage.png", linkage), ("fig_utility.png", utility),
                       ("fig_frontier.png", frontier), ("fig_solver.png", solver)):
        draw(main, out / name)
        files.append(name)
    if grid(main, out / "fig_grid.png"):
        files.append("fig_grid.png")
    if len(studies) > 1:
        participants(studies, out / "fig_participants.png")
        files.append("fig_participants.png")
    return files
