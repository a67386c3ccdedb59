"""What ``noisyanchor demo`` leaves in its folder: ``summary.json`` (every number),
``summary.md`` (the same in sentences), ``fig_sites.png`` (per site: the model it could train
alone, the federation's, and a centralised model on the pooled raw records) and
``fig_attacks.png`` (records of one target beside what each attack of the colluder made of
them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Relative errors below these read as "almost exactly" and "recognisably".
ALMOST_EXACT, RECOGNISABLE = 0.1, 0.3

#: Records of the target shown per attack in the figure.
SHOWN_RECORDS = 8

#: The three models compared per site, in figure order: summary key and label.
SITE_MODELS = (("local_only", "alone (own records only)"), ("federation", "federation"),
               ("centralised", "centralised (pooled raw records)"))


@dataclass(frozen=True)
class AttackRow:
    """One row of the attack figure: an attack's reconstructions of the shown records.

    Attributes
    ----------
    name : str
    error : float
        Mean relative error ``||X^ - X||_F / ||X||_F`` over the targets (working space).
    guess_error : float
        The same error of guessing every record to be the colluder's average record: what an
        attacker gets without any attack.
    records : (k, d_in) ndarray
        The reconstructed records, decoded to input space.
    """

    name: str
    error: float
    guess_error: float
    records: np.ndarray


def error_meaning(error: float, guess: float) -> str:
    """A sentence saying what a relative reconstruction error means for the records."""
    share = f"each record is off by about {100 * error:.0f}% of its own size"
    if error < ALMOST_EXACT:
        return f"the records came back almost exactly ({share})"
    if error < RECOGNISABLE:
        return f"the records came back recognisably, with visible distortion ({share})"
    if error < guess:
        return (f"the records came back only roughly ({share}; guessing every record to be the "
                f"colluder's average record is off by {100 * guess:.0f}%)")
    return (f"the records did not come back: no closer than guessing every record to be the "
            f"colluder's average record ({100 * guess:.0f}%)")


def _image(record: np.ndarray) -> np.ndarray:
    """A record as a picture: square when its length is a square (8 x 8 digits), else a strip."""
    side = math.isqrt(record.size)
    return record.reshape(side, side) if side * side == record.size else record[None, :]


def attack_figure(originals: np.ndarray, rows: list[AttackRow], target: str,
                  path: Path) -> None:
    """``originals`` (``k x d_in``) in the top row, each attack's reconstructions below."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    k = min(SHOWN_RECORDS, len(originals))
    fig, axes = plt.subplots(1 + len(rows), k, figsize=(1.3 * k + 2.5, 1.4 * (1 + len(rows))),
                             squeeze=False)
    lo, hi = float(np.min(originals)), float(np.max(originals))
    labelled = [(f"{target}'s records", originals)] + [
        (f"{r.name}\nerror {r.error:.3f}", r.records) for r in rows]
    for i, (label, records) in enumerate(labelled):
        for j in range(k):
            ax = axes[i][j]
            image = _image(np.clip(records[j], lo, hi))
            ax.imshow(image, cmap="gray_r", vmin=lo, vmax=hi,
                      aspect="auto" if image.shape[0] == 1 else "equal")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[i][0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle(f"What the colluding analyst reconstructs of {target}'s records")
    save_figure(plt, fig, path)


def site_figure(sites: dict[str, dict[str, Any]], path: Path) -> None:
    """Per site, balanced accuracy on its test rows and accuracy on its held-back records of
    the three models (:data:`SITE_MODELS`)."""
    from noisyanchor.experiments.figures import pyplot

    plt = pyplot()
    ids = list(sites)
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 2.4 * len(ids) + 3), 4.2), sharey=True)
    width = 0.8 / len(SITE_MODELS)
    x = np.arange(len(ids))
    metrics = (("test_balanced_accuracy", "balanced accuracy on the site's test rows"),
               ("held_back_accuracy", "accuracy on records it never uploaded"))
    values = [v for pid in ids for key, _ in SITE_MODELS for m, _ in metrics
              if (v := sites[pid][key].get(m)) is not None]
    low = max(0.0, np.floor(10 * min(values, default=0.0)) / 10 - 0.1)
    for ax, (metric, title) in zip(axes, metrics, strict=True):
        for k, (key, label) in enumerate(SITE_MODELS):
            got = [sites[pid][key].get(metric) for pid in ids]
            bars = ax.bar(x + (k - 1) * width, [np.nan if v is None else v for v in got], width,
                          label=label, color=f"C{k}")
            ax.bar_label(bars, labels=["" if v is None else f"{v:.2f}" for v in got],
                         fontsize=7, padding=1)
        ax.set_xticks(x, ids)
        ax.set_ylim(low, 1.04)
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel(f"fraction (axis from {low:.1f})")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(SITE_MODELS), fontsize=8,
               frameon=False)
    fig.suptitle("What each site gets: alone, from the federation, and if all records were "
                 "pooled (not private)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room for the legend below the axes
    fig.savefig(path, dpi=120)
    plt.close(fig)


def number_text(value: float | None) -> str:
    """A metric to three decimals, or ``n/a`` when there is none (a site without test rows)."""
    return "n/a" if value is None else f"{value:.3f}"


def gain_text(value: float | None, interval: list[float] | None = None) -> str:
    """A site's gain from joining, signed (``+0.026``), with its 95% interval when given
    (``+0.026, 95% interval [-0.010, +0.061]``), or ``n/a`` (not told: too few test rows, one
    class)."""
    if value is None:
        return "n/a"
    return f"{value:+.3f}" + ("" if interval is None else
                              f", 95% interval [{interval[0]:+.3f}, {interval[1]:+.3f}]")


#: What a site can change after seeing the attacks, and where each defence is measured: the
#: closing section of ``summary.md`` and the demo's last printed line points to it.
WHAT_A_SITE_CAN_CHANGE = (
    "Who can attack whom, with what, and what each defence costs, measured: `THREAT_MODEL.md` "
    "in the repository. What the sites can change, together, in the project file (the demo: "
    "its options):",
    "",
    "- **anchor noise** `v` (`[federation] v`; `--v`): more noise on each site's copy of the "
    "anchor makes the colluder's anchor attacks less accurate, and the alignment, so the "
    "model, less accurate too; it gives nothing against the analyst alone holding a few known "
    "records of a site (the records' upload carries no noise);",
    "- **private-data noise** `sigma` on the records themselves (methods `c-gdp-pn`, "
    "`aa-igdp-pn`; `[federation] sigma`; `--sigma`): the one defence measured in "
    "`THREAT_MODEL.md` to work against every threat, at a cost in accuracy;",
    "- **a public projection** `F` to `h` columns (`[federation] dim = h`, `h` < `d_in`; "
    "`--dim`): attackers recover records only up to `F`, and every site's model loses what `F` "
    "drops (each site measures that cost on its own rows before it uploads);",
    "- **the downstream model** (`[model] name`): changes the accuracy, not what the uploads "
    "reveal.",
)


def summary_markdown(s: dict[str, Any]) -> str:
    """``summary.md``: the run, what each site gained and predicted, what each attack means,
    and what a site can change (:data:`WHAT_A_SITE_CAN_CHANGE`); every symbol in words."""
    solver = s["solver"]
    lines = [f"# noisyanchor demo, {s.get('dataset', 'digits')}, {s['method']}, "
             f"{s['participants']} sites",
             "",
             f"Analyst, {s['participants']} sites"
             + (f", the colluder {s['colluder']}'s disclosure and the attack" if s["colluder"]
                else "")
             + f" ran as {len(s['pids'])} separate processes over mutual TLS on 127.0.0.1, in "
             f"{s['seconds']:.1f} s (seed {s['seed']}: the seed of every random draw of the "
             "run). The protocol's parameters: each record has d = "
             f"{s['dim']} columns as the sites align them (the data set's columns, or h after a "
             f"public projection F); the shared synthetic anchor A has r = {s['anchors']} rows; "
             f"v = {s['v']} is the standard deviation of the Gaussian noise each site adds to "
             f"its copy of the anchor; sigma = {s['sigma']} that of the noise added to the "
             "records themselves (0: none). The collaboration matrix Z (every site's records "
             "in one common frame, which the analyst fits the model on) equals the one the "
             f"in-process simulator computes from the same seeds: {s['z_matches_inprocess']}. "
             f"Alignment: {solver.get('name')} (the solver), converged "
             f"{solver.get('converged')}, certified {solver.get('certified')} (a certificate "
             "proves the alignment found is the best possible one). The federation's model: "
             f"balanced accuracy {number_text(s['utility'].get('balanced_accuracy'))} on every "
             "site's test rows together.",
             "",
             "## What each site gained (`fig_sites.png`)",
             "",
             "Each site kept its key, fetched its own map and the model, and predicted records "
             "it had held back from its upload, on its own host. *Alone* is the same kind of "
             "model trained on the site's own training records only; *centralised* pools every "
             "site's raw records in one place (what the protocol avoids), for reference: it is "
             "not a bound, and on a site's few test rows it can score below the federation's "
             "model or the site's own. *Gain* is the federation's balanced accuracy minus the "
             "site's alone, on the site's test rows.",
             "",
             "| site | test rows | alone | federation | centralised | gain | held-back records "
             "| predicted correctly (alone / federation / centralised) |",
             "|---|---|---|---|---|---|---|---|"]
    for pid, site in s["sites"].items():
        gain = site.get("gain")
        lines.append(
            f"| {pid} | {site['test_rows']} | "
            + " | ".join(number_text(site[k]["test_balanced_accuracy"]) for k, _ in SITE_MODELS)
            + f" | {gain_text(gain, site.get('gain_interval'))} | {site['held_back']} | "
            + " / ".join(number_text(site[k]["held_back_accuracy"]) for k, _ in SITE_MODELS)
            + " |")
    lines += ["", "Test-row columns are balanced accuracy (the mean over the classes of the "
              "share of each class predicted correctly); the gain is the federation's minus "
              "alone's on the same test rows, with its 95% interval (stratified paired "
              "bootstrap; n/a: not told, below 20 test rows or "
              "with one class, `gain_not_told` in `summary.json` says why); held-back columns "
              "are the share of records predicted correctly.", ""]
    if s["attacks"]:
        lines += [f"## What the colluder {s['colluder']} reconstructs (`fig_attacks.png`)", "",
                  "The relative error is `||X^ - X|| / ||X||` over each target's records: `X` "
                  "holds a target's records, `X^` the attack's reconstruction of them, and "
                  "`||.||` is the root of the sum of squares of every entry; 0 is an exact "
                  "copy.", ""]
        for name, res in s["attacks"].items():
            lines.append(f"- **{name}**: error {res['relative_error']:.3f}: {res['meaning']}.")
        lines.append("")
    lines += ["## What a site can change", "", *WHAT_A_SITE_CAN_CHANGE, ""]
    lines += ["## Files", "",
              "`summary.json` holds every number above; `store/` is the analyst's store, "
              "`state/<site>/` each site's kept key, site model and `gain.json`, `new/` and "
              "`predictions/` the held-back records and their predictions, `logs/` every "
              "process's output.", ""]
    return "\n".join(lines)


def write_report(root: Path, summary: dict[str, Any], originals: np.ndarray | None,
                 rows: list[AttackRow], target: str | None) -> dict[str, str]:
    """Write ``summary.json``, ``summary.md`` and the figures into ``root``; their names."""
    root = Path(root)
    files = {"summary_json": "summary.json", "summary_md": "summary.md",
             "sites_figure": "fig_sites.png"}
    site_figure(summary["sites"], root / files["sites_figure"])
    if rows and originals is not None and target is not None:
        files["attacks_figure"] = "fig_attacks.png"
        attack_figure(originals, rows, target, root / files["attacks_figure"])
    summary["files"] = files
    (root / files["summary_md"]).write_text(summary_markdown(summary))
    (root / files["summary_json"]).write_text(json.dumps(summary, indent=2) + "\n")
    return files
