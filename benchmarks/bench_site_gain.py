"""What each site gains by joining: the model it could train alone against the federation's,
both scored on records the site never uploaded.

    python -m benchmarks.bench_site_gain

On the bundled digits at 3 and 10 sites, at the default anchor noise (AA-I-GDP with anchor
noise, v = 0.02) and at zero noise (the same method with v = 0), each run is a whole
``noisyanchor demo`` over real processes and mutual TLS without a colluder
(:func:`deploy.demo.run_demo`): every site holds back a share of its records, uploads the rest
once, fetches its own map and the model, and predicts its held-back records with
``participant predict``. Per site, the baseline is the same model (logistic regression, same
hyper-parameter search) trained on the site's own raw training records alone; a centralised
model on every site's pooled raw records (what the protocol avoids) is the ceiling. Runs are
repeated over seeds (each seed: a new split of the data, new keys and noise; the two noise
levels share the seed's split, so the local-only baseline is the same for both).

Writes ``benchmarks/results/site_gain.json`` (every site of every run, and the summary per
configuration) and ``site_gain.png`` (per configuration, mean over seeds and sites).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "site_gain.json"

#: Share of each site's records held back for prediction: at 10 sites about 54 of ~180.
HELD_BACK = 0.3

#: The three models per site, as the demo's summary names them.
MODELS = ("local_only", "federation", "centralised")


def run_config(participants: int, v: float, seed: int, held_back: float,
               root: Path) -> dict[str, Any]:
    """One demo without a colluder: per site, held-back and test-row metrics of the three
    models."""
    from noisyanchor.deploy.demo import run_demo

    s = run_demo(participants=participants, method="aa-igdp-an", v=v, colluder=None, seed=seed,
                 workdir=root, held_back=held_back)
    return {"participants": participants, "v": v, "seed": seed, "seconds": s["seconds"],
            "z_matches_inprocess": s["z_matches_inprocess"],
            "solver": {k: s["solver"].get(k) for k in ("name", "iterations", "certified")},
            "federation_balanced_accuracy": s["utility"]["balanced_accuracy"],
            "sites": s["sites"]}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (sites, v): mean over seeds and sites of each model's balanced accuracy on the
    held-back records, the mean gain and its range, and how many sites gained."""
    out = []
    for key in sorted({(r["participants"], r["v"]) for r in runs}):
        group = [r for r in runs if (r["participants"], r["v"]) == key]
        sites = [site for r in group for site in r["sites"].values()]

        def values(model: str, metric: str = "held_back_balanced_accuracy",
                   sites=sites) -> np.ndarray:
            return np.array([s[model][metric] for s in sites
                             if s[model][metric] is not None], dtype=float)

        pairs = [(s["federation"]["held_back_balanced_accuracy"],
                  s["local_only"]["held_back_balanced_accuracy"]) for s in sites]
        gains = np.array([f - a for f, a in pairs if f is not None and a is not None])
        out.append({
            "participants": key[0], "v": key[1], "seeds": len(group), "sites": len(sites),
            "held_back_per_site": float(np.mean([s["held_back"] for s in sites])),
            **{f"{m}_held_back_balanced_accuracy": float(values(m).mean()) for m in MODELS},
            **{f"{m}_test_balanced_accuracy": float(values(m, "test_balanced_accuracy").mean())
               for m in MODELS},
            "gain_mean": float(gains.mean()), "gain_min": float(gains.min()),
            "gain_max": float(gains.max()),
            "sites_gaining": int(np.sum(gains > 0)), "sites_losing": int(np.sum(gains < 0)),
            "z_matches_inprocess": all(r["z_matches_inprocess"] for r in group)})
    return out


def plot(summary: list[dict[str, Any]], runs: list[dict[str, Any]], path: Path) -> None:
    """Per number of sites: each site's held-back balanced accuracy alone and from the
    federation at both noise levels (mean over seeds), and the centralised ceiling."""
    from noisyanchor.experiments.figures import pyplot

    plt = pyplot()
    counts = sorted({r["participants"] for r in runs})
    noises = sorted({r["v"] for r in runs})
    fig, axes = plt.subplots(1, len(counts), figsize=(5 + 3.2 * len(counts), 4.2), squeeze=False)
    for ax, p in zip(axes[0], counts, strict=True):
        ids = list(next(r for r in runs if r["participants"] == p)["sites"])
        series = [("alone", "local_only", noises[0], "C0")]
        series += [(f"federation, v = {v:g}", "federation", v, f"C{k + 1}")
                   for k, v in enumerate(noises)]
        series += [("centralised (pooled raw)", "centralised", noises[0], "C3")]
        width = 0.8 / len(series)
        x = np.arange(len(ids))
        for k, (label, model, v, color) in enumerate(series):
            means = [np.mean([r["sites"][pid][model]["held_back_balanced_accuracy"]
                              for r in runs if r["participants"] == p and r["v"] == v])
                     for pid in ids]
            ax.bar(x + (k - (len(series) - 1) / 2) * width, means, width, label=label,
                   color=color)
        row = {(s["participants"], s["v"]): s for s in summary}
        gains = ", ".join(f"v = {v:g}: {row[(p, v)]['gain_mean']:+.3f}" for v in noises)
        ax.set_title(f"{p} sites (mean gain {gains})", fontsize=9)
        ax.set_xticks(x, ids, fontsize=8)
        ax.set_ylim(0.8, 1.0)
        ax.set_ylabel("balanced accuracy on held-back records (axis from 0.8)", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle("Digits: each site alone vs the federation's model, on records it never "
                 f"uploaded (mean over {len({r['seed'] for r in runs})} seeds)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room for the legend below the axes
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.02, 0.0],
                        help="anchor noise levels v")
    parser.add_argument("--seeds", type=int, default=3, help="repeats per configuration")
    parser.add_argument("--held-back", type=float, default=HELD_BACK)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--replot", action="store_true",
                        help="only draw the PNG again from the JSON at --out")
    args = parser.parse_args(argv)
    if args.replot:
        report = json.loads(args.out.read_text())
        plot(report["summary"], report["runs"], args.out.with_suffix(".png"))
        return 0
    meta = {"command": "python -m benchmarks.bench_site_gain", "dataset": "digits",
            "method": "aa-igdp-an", "model": "logistic", "held_back": args.held_back,
            "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "note": "balanced accuracy is on each site's held-back records (never uploaded); "
                    "the machine is shared with other work: loadavg_start/end record it"}
    runs = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-site-gain-") as tmp:
        for p in args.sites:
            for seed in range(1, args.seeds + 1):
                for v in args.noise:
                    where = Path(tmp) / f"p{p}-v{v:g}-s{seed}"
                    run = run_config(p, v, seed, args.held_back, where)
                    runs.append(run)
                    gains = [s["gain"] for s in run["sites"].values()]
                    print(f"{p} sites, v = {v:g}, seed {seed}: federation "
                          f"{run['federation_balanced_accuracy']:.3f}, mean test-row gain "
                          f"{np.mean([g for g in gains if g is not None]):+.3f} "
                          f"({run['seconds']:.0f} s)", flush=True)
    meta["loadavg_end"] = os.getloadavg()
    meta["seconds"] = time.perf_counter() - start
    summary = summarise(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs},
                                   indent=2) + "\n")
    plot(summary, runs, args.out.with_suffix(".png"))
    for row in summary:
        print(f"{row['participants']} sites, v = {row['v']:g}: held-back balanced accuracy "
              f"alone {row['local_only_held_back_balanced_accuracy']:.3f}, federation "
              f"{row['federation_held_back_balanced_accuracy']:.3f}, centralised "
              f"{row['centralised_held_back_balanced_accuracy']:.3f}; gain "
              f"{row['gain_mean']:+.3f} ({row['gain_min']:+.3f} to {row['gain_max']:+.3f}), "
              f"{row['sites_gaining']} of {row['sites']} sites gained")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
