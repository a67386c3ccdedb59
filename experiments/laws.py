"""``noisyanchor experiment laws``: measured vs predicted reconstruction error of the anchor
attacks over a grid of (v, d, r), with the figure and a JSON of the same numbers.

For every ``(v, d, r)`` a fixed Gaussian record block ``X`` (``n x d``) is uploaded by a target
with a fresh Haar key and fresh anchor noise per repetition; the known-anchor, OP and
scale-corrected OP attacks (v disclosed) reconstruct it, and the mean over repetitions of
``||X^ - X||_F^2 / ||X||_F^2`` is compared with the laws of :mod:`common.theory`:
``v^2 d`` (known-anchor), ``2 (1 - alpha(d, v))`` (OP), ``1/alpha^2 - 1`` (scaled OP), each plus
its translation term. The figure shows square roots (relative errors).

References: SPEC.md section 3 (error laws).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.attacks import AttackerView, Disclosure, attack_all, available_attacks
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.methods import make_upload
from noisyanchor.common.theory import known_anchor_error, op_error, op_scaled_error

#: The attacks with a law, and the law (a relative error) of each.
LAWS = {"known_anchor": known_anchor_error, "op": op_error, "op_scaled": op_scaled_error}
DEFAULT_V = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
DEFAULT_D = (4, 16, 64)
#: Anchor rows as functions of d: the minimum, the paper's 4 d, and 16 d.
R_OF_D = {"d+1": lambda d: d + 1, "4d": lambda d: 4 * d, "16d": lambda d: 16 * d}


def measure_point(v: float, d: int, r: int, rng: np.random.Generator, *, n: int = 200,
                  reps: int = 20) -> dict[str, Any]:
    """Mean squared relative error per attack over ``reps`` draws, and the laws' predictions."""
    anchor = make_anchor(r, d, rng)
    x = rng.standard_normal((n, d))
    m2 = float(np.mean(np.sum(x**2, axis=1)))
    attacks = {k: a for k, a in available_attacks(plugins=False).items() if k in LAWS}
    total = dict.fromkeys(LAWS, 0.0)
    for _ in range(reps):  # a fresh key and noise per repetition: the laws are expectations
        keys = [sample_key(d, rng), sample_key(d, rng)]
        ups = [make_upload("aa-igdp-an", x, k, anchor=anchor, v=v, rng=rng)[0] for k in keys]
        view = AttackerView("aa-igdp-an", Disclosure(0, x, keys[0], anchor, v),
                            [u.data for u in ups], [u.anchor for u in ups])
        for name, per_target in attack_all(view, attacks).reconstructions.items():
            total[name] += float(np.sum((per_target[1] - x) ** 2) / np.sum(x**2)) / reps
    return {"v": v, "d": d, "r": r, "n": n, "reps": reps,
            "measured": {k: float(np.sqrt(e)) for k, e in total.items()},
            "predicted": {k: law(d, v, r, record_norm2=m2) for k, law in LAWS.items()}}


def run_laws(out: Path, *, vs=DEFAULT_V, ds=DEFAULT_D, reps: int = 20, seed: int = 2026,
             command: str = "") -> dict[str, Any]:
    """Measure the grid, write ``laws.json`` and ``fig_laws.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    points = [measure_point(v, d, rof(d), rng, reps=reps) | {"r_rule": rule}
              for d in ds for rule, rof in R_OF_D.items() for v in vs]
    worst = {k: max(abs(p["measured"][k] / p["predicted"][k] - 1) for p in points)
             for k in LAWS}
    result = {"command": command, "seed": seed, "reps": reps, "points": points,
              "max_relative_deviation": worst, "seconds": time.perf_counter() - start}
    (out / "laws.json").write_text(json.dumps(result, indent=1))
    _figure(points, out / "fig_laws.png")
    return result


def _figure(points: list[dict[str, Any]], path: Path) -> None:
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(LAWS), figsize=(5 * len(LAWS), 4.2), sharey=True)
    markers = dict(zip(R_OF_D, ("o", "s", "^"), strict=True))
    ds = sorted({p["d"] for p in points})
    for ax, attack in zip(axes, LAWS, strict=True):
        for k, d in enumerate(ds):
            line = sorted((p for p in points if p["d"] == d and p["r_rule"] == "4d"),
                          key=lambda p: p["v"])
            ax.plot([p["v"] for p in line], [p["predicted"][attack] for p in line],
                    color=f"C{k}", label=f"law, d={d} (r=4d)")
            for rule, marker in markers.items():
                pts = [p for p in points if p["d"] == d and p["r_rule"] == rule]
                ax.scatter([p["v"] for p in pts], [p["measured"][attack] for p in pts],
                           marker=marker, facecolors="none", edgecolors=f"C{k}", s=22,
                           label=f"measured, r={rule}" if k == 0 else None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("v")
        ax.set_title(attack)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("relative error ||X^ - X||_F / ||X||_F")
    save_figure(plt, fig, path)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment laws``."""
    from noisyanchor.common.cliargs import int_at_least

    ps = sub.add_parser("laws", help="measured vs predicted attack error over (v, d, r): "
                        "laws.json and fig_laws.png")
    ps.add_argument("--out", required=True, help="output folder")
    ps.add_argument("--reps", type=int_at_least(1), default=20,
                    help="noise draws per grid point")
    ps.add_argument("--seed", type=int_at_least(0), default=2026, help="root seed")
    ps.add_argument("--json", action="store_true", help="print the result as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    res = run_laws(Path(args.out), reps=args.reps, seed=args.seed,
                   command=f"noisyanchor experiment laws --out {args.out} --reps {args.reps}")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{len(res['points'])} grid points in {res['seconds']:.1f} s; largest relative "
              "deviation from the law: " + ", ".join(
                  f"{k} {100 * v:.1f}%" for k, v in res["max_relative_deviation"].items()))
    return 0
