"""``noisyanchor experiment wider-threats``: the wider threat model of issue 33, item 5, measured
on digits at the study's working size (``h = 16``, ``r = 4 h = 64``).

* **k colluders** (k of p): participants ``0 .. k-1`` disclose jointly
  (:class:`common.attacks.AttackerView` with ``k`` disclosures); the target is the last
  participant, never a colluder, so every ``k`` attacks the same uploads. Reported: the target's
  relative reconstruction error ``||X^ - X||_F / ||X||_F`` per attack and ``k``.
* **A crafted anchor**: the dealer (participant 0, the colluder) deals an anchor of its choosing
  instead of the protocol's draw, every participant uploads with it (no detection), and the
  colluder discloses it. Reported per anchor: whether the participants' test
  (:mod:`common.anchor_distribution`) refuses it and which test, and the target's error of the
  best colluder attack without detection; with detection a refused anchor stops the federation
  before any upload, so the attack gets nothing.

Output: ``summary.json`` and ``fig_wider_threats.png`` in ``--out``.

References: SPEC.md sections 1 and 3.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from noisyanchor.common.alignment import align
from noisyanchor.common.anchor_distribution import run_anchor_tests
from noisyanchor.common.attacks import (
    AttackerView,
    Disclosure,
    attack_all,
    available_attacks,
    relative_error,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import anchor_from_seed, sample_key
from noisyanchor.common.linalg import center_rows
from noisyanchor.common.methods import make_upload
from noisyanchor.common.theory import phase_transition_v
from noisyanchor.experiments.simulate import Federation, SimulationConfig, prepare

#: The colluder attacks measured (every built-in one that applies to anchor noise).
ATTACKS = ("known_anchor", "mp", "op", "am", "op_scaled", "known_anchor_recentered", "ml")
#: Anchors a dealer may deal, in report order (``protocol`` is the honest draw).
ANCHOR_KINDS = ("protocol", "scaled_x10", "dealer_records", "dealer_records_orthonormal",
                "coordinate")
SUMMARY_FILE = "summary.json"
FIGURE_FILE = "fig_wider_threats.png"


def crafted_anchor(kind: str, fed: Federation) -> np.ndarray:
    """The anchor ``A'`` a dealer (participant 0) deals instead of the protocol's ``A``.

    ``scaled_x10``: ``10 A`` (the anchor noise then weighs a tenth); ``dealer_records``: its
    first ``r`` working records, centred; ``dealer_records_orthonormal``: the same, centred
    and orthonormalised (as the protocol's construction does to ``Omega``);
    ``coordinate``: an orthonormal centred frame on ``d + 1`` rows only, the others zero."""
    r, d = fed.r, fed.d
    anchor = anchor_from_seed(fed.shared_seed, r, d)
    if kind == "protocol":
        return anchor
    if kind == "scaled_x10":
        return 10.0 * anchor
    records = center_rows(fed.working(0)[:r])[1]
    if kind == "dealer_records":
        return records
    if kind == "dealer_records_orthonormal":
        q, rr = np.linalg.qr(records)
        return q * np.where(np.diag(rr) < 0, -1.0, 1.0)
    if kind == "coordinate":
        out = np.zeros((r, d))
        out[:d + 1] = anchor_from_seed(fed.shared_seed, d + 1, d)
        return out
    raise InvalidInputError(f"anchor kind {kind!r} is not one of {ANCHOR_KINDS}")


def _uploads(fed: Federation, anchor: np.ndarray, v: float) -> list[Any]:
    """Every participant's upload with ``anchor`` and no test of it (the bench's dealer wins)."""
    out = []
    for i in range(fed.config.participants):
        rng = np.random.default_rng(fed.participant_seeds[i])  # key first, then W_i
        key = sample_key(fed.d, rng, translation_scale=fed.config.translation_scale)
        out.append(make_upload("aa-igdp-an", fed.working(i), key, anchor=anchor, v=v, rng=rng))
    return out


def _errors(fed: Federation, pairs: list[Any], anchor: np.ndarray, v: float,
            colluders: range, target: int, names: tuple[str, ...]) -> dict[str, float]:
    """The target's relative error under every attack in ``names`` with ``colluders``
    disclosing jointly (the analyst's GOPP alignment of every upload)."""
    uploads = [u for u, _ in pairs]
    al = align("aa-igdp-an", [u.data for u in uploads], [u.anchor for u in uploads])
    disclosures = [Disclosure(c, fed.working(c), pairs[c][1].key, anchor, v) for c in colluders]
    view = AttackerView("aa-igdp-an", disclosures, [u.data for u in uploads],
                        [u.anchor for u in uploads], al.rotations)
    every = available_attacks(plugins=False)
    run = attack_all(view, {n: every[n] for n in names})
    return {n: relative_error(run.reconstructions[n][target], fed.working(target))
            for n in names}


def run_seed(seed: int, v: float, *, participants: int, dim: int, ks: tuple[int, ...],
             ) -> dict[str, Any]:
    """One deployment: errors per ``k`` and per crafted anchor."""
    fed = prepare(SimulationConfig(dataset="digits", method="aa-igdp-an",
                                   participants=participants, dim=dim, v=v, seed=seed,
                                   utility=False))
    target = participants - 1
    honest = crafted_anchor("protocol", fed)
    pairs = _uploads(fed, honest, v)
    by_k = {str(k): _errors(fed, pairs, honest, v, range(k), target, ATTACKS) for k in ks}
    crafted = {}
    for kind in ANCHOR_KINDS:
        anchor = crafted_anchor(kind, fed)
        test = run_anchor_tests(anchor)
        errs = _errors(fed, _uploads(fed, anchor, v), anchor, v, range(1), target, ATTACKS)
        crafted[kind] = {"refused_by": test.failed_test, "max_leverage": test.max_leverage,
                         "gram_error": test.gram_error, "errors": errs}
    return {"seed": seed, "v": v, "by_k": by_k, "crafted": crafted}


def _mean_sd(values: list[float]) -> dict[str, float]:
    """Mean, sd and the t interval's half-width (95%) of the mean over deployments."""
    n = len(values)
    sd = float(np.std(values, ddof=1)) if n > 1 else 0.0
    half = float(stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)) if n > 1 else 0.0
    return {"mean": float(np.mean(values)), "sd": sd, "ci95_half_width": half}


def summarise(rows: list[dict[str, Any]], ks: tuple[int, ...]) -> dict[str, Any]:
    """Per ``v``: the target's error per attack and ``k`` (mean and sd over deployments), and
    per crafted anchor its refusal and the best attack's error without detection."""
    out: dict[str, Any] = {}
    for v in sorted({r["v"] for r in rows}):
        sel = [r for r in rows if r["v"] == v]
        colluders = {a: {str(k): _mean_sd([r["by_k"][str(k)][a] for r in sel]) for k in ks}
                     for a in ATTACKS}
        # Paired within each deployment: the same uploads at every k.
        change = {a: {str(k): _mean_sd([r["by_k"][str(k)][a] - r["by_k"][str(ks[0])][a]
                                        for r in sel]) for k in ks[1:]} for a in ATTACKS}
        best = {str(k): _mean_sd([min(r["by_k"][str(k)].values()) for r in sel]) for k in ks}
        crafted = {}
        for kind in ANCHOR_KINDS:
            refused = {r["crafted"][kind]["refused_by"] for r in sel} - {None}
            refused_in = sum(r["crafted"][kind]["refused_by"] is not None for r in sel)
            errs = [min(r["crafted"][kind]["errors"].values()) for r in sel]
            base = [min(r["crafted"]["protocol"]["errors"].values()) for r in sel]
            gain = [b - e for b, e in zip(base, errs, strict=True)]
            # A refused anchor stops the federation before any upload: nothing to attack.
            kept = [g for g, r in zip(gain, sel, strict=True)
                    if r["crafted"][kind]["refused_by"] is None]
            crafted[kind] = {
                "refused_by": sorted(refused), "refused_in": refused_in,
                "best_error_without_detection": _mean_sd(errs),
                "gain_without_detection": _mean_sd(gain),
                "uploads_with_detection": len(sel) - refused_in,
                "gain_with_detection": float(np.sum(kept) / len(sel)),
                "best_attack": max(ATTACKS, key=lambda a, kind=kind: sum(
                    min(r["crafted"][kind]["errors"], key=r["crafted"][kind]["errors"].get)
                    == a for r in sel))}
        out[f"{v:g}"] = {"deployments": len(sel), "colluders": colluders,
                         "change_from_first_k": change,
                         "best_by_k": best, "crafted": crafted}
    return out


def run_study(out: Path, *, vs: tuple[float, ...], seeds: int, ks: tuple[int, ...] = (1, 2, 3),
              participants: int = 6, dim: int = 16, seed: int = 2026,
              command: str = "") -> dict[str, Any]:
    """Every ``(v, deployment)``; writes the summary and the figure into ``out``."""
    rows = [run_seed(seed + s, v, participants=participants, dim=dim, ks=ks)
            for v in vs for s in range(seeds)]
    summary = {
        "command": command, "date": datetime.date.today().isoformat(),
        "load_average": list(os.getloadavg()), "dataset": "digits", "method": "aa-igdp-an",
        "participants": participants, "dim": dim, "anchors": 4 * dim, "ks": list(ks),
        "target": participants - 1, "dealer": 0, "seeds": seeds,
        "v_pt": phase_transition_v(participants, dim, 4 * dim),
        "error": "||X^ - X||_F / ||X||_F of the target's working records (X F)",
        "by_v": summarise(rows, ks)}
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    figure(summary, out / FIGURE_FILE)
    return summary


def figure(summary: dict[str, Any], path: Path) -> None:
    """One panel per ``v``: the target's error against k per attack (mean over deployments,
    95% t interval). Last panel: the best attack's error per dealt anchor without detection,
    refused anchors hatched."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    blocks = summary["by_v"]
    fig, axes = plt.subplots(1, len(blocks) + 1, figsize=(4.2 * (len(blocks) + 1), 4.2))
    ks = summary["ks"]
    for ax, (v, block) in zip(axes, blocks.items(), strict=False):
        for n, attack in enumerate(ATTACKS):
            per = block["colluders"][attack]
            ax.errorbar(np.array(ks) + 0.04 * (n - 3), [per[str(k)]["mean"] for k in ks],
                        yerr=[per[str(k)]["ci95_half_width"] for k in ks], marker="o", ms=3,
                        capsize=2, color=f"C{n}", label=attack if ax is axes[0] else None)
        ax.set_xticks(ks)
        ax.set_yscale("log")
        ax.set_xlabel(f"k colluders of p = {summary['participants']}")
        ax.set_title(f"v = {v} ({float(v) / summary['v_pt']:.2g} v_PT)", fontsize=10)
    axes[0].set_ylabel("target's relative error (mean, 95% interval)")
    right = axes[-1]
    width = 0.8 / len(blocks)
    for j, (v, block) in enumerate(blocks.items()):
        for n, kind in enumerate(ANCHOR_KINDS):
            c = block["crafted"][kind]
            right.bar(n + j * width, c["best_error_without_detection"]["mean"], width,
                      yerr=c["best_error_without_detection"]["ci95_half_width"], capsize=2,
                      color=f"C{j}", hatch="//" if c["refused_in"] else None, edgecolor="k",
                      label=f"v = {v}" if n == 0 else None)
    right.bar(0, 0, 0, hatch="//", color="w", edgecolor="k", label="refused by the test")
    right.set_xticks(np.arange(len(ANCHOR_KINDS)) + width * (len(blocks) - 1) / 2)
    right.set_xticklabels([k.replace("_", "\n") for k in ANCHOR_KINDS], fontsize=7)
    right.set_yscale("log")
    right.set_ylabel("best attack's relative error, no detection")
    right.set_title("anchor dealt by a colluding dealer, k = 1", fontsize=10)
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(ATTACKS), fontsize=8,
               bbox_to_anchor=(0.5, -0.06))
    save_figure(plt, fig, path)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment wider-threats``."""
    from noisyanchor.common.cliargs import int_at_least

    ps = sub.add_parser("wider-threats", help="k colluders and a dealer's crafted anchor on "
                        "digits: summary.json and fig_wider_threats.png")
    ps.add_argument("--out", required=True, help="output folder")
    ps.add_argument("--v", default="0.05,0.2,0.5", help="anchor-noise levels, comma-separated")
    ps.add_argument("--seeds", type=int_at_least(1), default=20, help="deployments per v")
    ps.add_argument("--participants", type=int_at_least(4), default=6, help="p")
    ps.add_argument("--seed", type=int_at_least(0), default=2026, help="root seed")
    ps.add_argument("--json", action="store_true", help="print the summary as JSON")
    ps.set_defaults(handler=_run)


def _levels(text: str) -> tuple[float, ...]:
    """The ``--v`` levels, refused unless each is a number >= 0."""
    try:
        vs = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidInputError(f"--v {text!r}: expected comma-separated numbers") from None
    if not vs or any(not v >= 0 for v in vs):
        raise InvalidInputError(f"--v {text!r}: expected anchor-noise levels >= 0")
    return vs


def _run(args: argparse.Namespace) -> int:
    vs = _levels(args.v)
    res = run_study(Path(args.out), vs=vs, seeds=args.seeds, participants=args.participants,
                    seed=args.seed,
                    command=f"noisyanchor experiment wider-threats --out {args.out} --v {args.v} "
                            f"--seeds {args.seeds} --participants {args.participants} "
                            f"--seed {args.seed}")
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for v, block in res["by_v"].items():
        best = ", ".join(f"k={k}: {b['mean']:.3f}" for k, b in block["best_by_k"].items())
        print(f"v = {v}: best colluder attack's error {best}")
        for kind, c in block["crafted"].items():
            print(f"  anchor {kind}: refused by {c['refused_by']}, best error without detection "
                  f"{c['best_error_without_detection']['mean']:.3g}")
    return 0
