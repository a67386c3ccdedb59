"""``fig_dp_baseline.png``: utility against record-level epsilon for the formal DP baselines
and the private-data-noise arm, and utility against linkage for the study's two arms
(:mod:`experiments.dp_baseline`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.experiments.figures import outside_legend, pyplot, save_figure
from noisyanchor.experiments.linkage import CHANCE

#: How each curve of the epsilon panel is drawn: label, colour, marker.
CURVES = {
    "data_noise_arm": ("private-data noise as a Gaussian mechanism (rerun, C = max norm)",
                       "tab:red", "o"),
    "dp_release": ("DP data release (Gaussian, clipped at the public median norm)",
                   "tab:blue", "s"),
    "dp_release_jl": ("DP data release after a JL projection to k dims", "tab:cyan", "D"),
    "dp_training": ("DP training (output-perturbed logistic regression)", "tab:green", "^"),
}
ANCHOR_NOTE = "anchor noise (federation): no epsilon,\nit perturbs the key, not the records"


def _epsilon_panel(ax, result: dict[str, Any]) -> None:
    eps = result["epsilons"]
    draws = result["study_draws"]["c-gdp-pn"]
    ax.scatter([d["epsilon"] for d in draws], [d["utility"] for d in draws], s=8,
               color="tab:red", alpha=0.3, label="private-data noise, the study's draws")
    for name, (label, color, marker) in CURVES.items():
        if name == "dp_release_jl":
            label = label.replace("k dims", f"k = {result['jl_dim']}")
        ax.plot(eps, result["utility"][name], color=color, marker=marker, ms=4, label=label)
    anchor = [d["utility"] for d in result["study_draws"]["aa-igdp-an"]]
    if anchor:
        lo, hi = np.quantile(anchor, [0.25, 0.75])
        ax.axhspan(lo, hi, color="tab:purple", alpha=0.15,
                   label=ANCHOR_NOTE + " (quartiles of its draws)")
    ax.axhline(result["targets"]["federation_noiseless"], color="k", ls="--", lw=1,
               label="noiseless federation (no protection)")
    ax.axhline(CHANCE, color="grey", ls=":", lw=1, label="chance")
    ax.set_xscale("log")
    ax.set_xlabel(f"record-level epsilon (delta = {result['delta']:g})")
    ax.set_ylabel("held-out balanced accuracy (logistic)")
    ax.set_title("utility against epsilon", fontsize=9)
    outside_legend(ax)


def _linkage_panel(ax, fig, result: dict[str, Any]) -> None:
    draws = result["study_draws"]
    pn = [d for d in draws["c-gdp-pn"] if d["linkage"] is not None]
    points = ax.scatter([d["linkage"] for d in pn], [d["utility"] for d in pn],
                        c=np.log10([d["epsilon"] for d in pn]), cmap="viridis", s=10,
                        marker="o", label="private-data noise (colour: log10 epsilon)")
    # the colour bar sits in the empty corner (low linkage, high utility), clear of the legend
    fig.colorbar(points, cax=ax.inset_axes((0.04, 0.5, 0.025, 0.42)), label="log10 epsilon")
    an = [d for d in draws["aa-igdp-an"] if d["linkage"] is not None]
    ax.scatter([d["linkage"] for d in an], [d["utility"] for d in an], s=12, marker="x",
               color="tab:purple", label=ANCHOR_NOTE)
    ax.axvline(CHANCE, color="grey", ls=":", lw=1, label="chance linkage")
    ax.set_xlabel("linkage, strongest attack of the colluder")
    ax.set_ylabel("held-out balanced accuracy (logistic)")
    ax.set_title("utility against linkage (the study's draws, every replicate)", fontsize=9)
    outside_legend(ax)


def draw(result: dict[str, Any], path: Path) -> None:
    """Write the two panels to ``path`` (PNG)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(2, 1, figsize=(9.5, 8.5))
    _epsilon_panel(left, result)
    _linkage_panel(right, fig, result)
    fig.suptitle(f"Formal DP baselines at matched utility: {result['deployments']} deployments, "
                 f"{result['repeats']} noise draws each", fontsize=10)
    save_figure(plt, fig, path, dpi=90)
