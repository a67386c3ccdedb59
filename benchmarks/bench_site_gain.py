"""What each site gains by joining: the model it could train alone against the federation's,
both scored on records the site never uploaded, for every shipped project template.

    python -m benchmarks.bench_site_gain [--seeds 10] [--sites 3 10] [--section templates]

Section ``templates``: each template in ``deploy/templates/`` that has bundled data
(:data:`TEMPLATES`: the one-host quick start on the digits, the breast cancer hospitals, the
Fair survey) is run with its own ``[federation]`` settings (method, anchors ``r``, projection
``h``, noises ``sigma`` and ``v``) and its ``[model]``, at 3 and 10 sites, over seeds. Each run
is a whole ``noisyanchor demo`` over real processes and mutual TLS without a colluder
(:func:`deploy.demo.run_demo`): every site holds back a share of its records, uploads the rest
once, fetches its own map and the model, and predicts its held-back records with ``participant
predict``. Per site, the baseline is the same model (same family, same hyper-parameter search)
trained on the site's own raw training records alone; a centralised model on every site's pooled
raw records (what the protocol avoids) is shown beside them. Each seed is a new split of the
data, new keys and noise.

Per site, a run keeps the demo's three models on the held-back records, the whole ``gain.json``
the site wrote (``gain_json``: whatever fields it carries, e.g. an interval) and every per-site
entry of the analyst's ``result.json`` (``analyst``: each dict of the result keyed by site id,
e.g. the model's per-site metrics or contributions), copied as they are.

More sections (a poisoned site, ...) are added to :data:`SECTIONS`: a name, the cases it runs
and how one case runs. Writes ``benchmarks/results/site_gain.json`` (every site of every run,
and a summary per configuration, by section), rewritten after every run so an interrupted
benchmark keeps what it measured, and ``site_gain.png`` (per template and number of sites, each
site's mean gain over seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "site_gain.json"
TEMPLATE_DIR = ROOT / "deploy" / "templates"

#: Shipped templates with bundled data, and the data set the demo loads for each (the digits
#: of the one-host quick start; the typed tables encoded with the template's public ranges).
TEMPLATES = {"federation-local.toml": "digits",
             "federation-breast-cancer.toml": "breast-cancer",
             "federation-fair.toml": "fair"}

#: Share of each site's records held back for prediction: at 10 sites about 54 of ~180 digits.
HELD_BACK = 0.3

#: The three models per site, as the demo's summary names them.
MODELS = ("local_only", "federation", "centralised")

#: ``[federation]`` keys of a template that the demo takes (the rest are deployment details).
PROTOCOL_KEYS = ("method", "anchors", "dim", "sigma", "v")


@dataclass(frozen=True)
class Case:
    """One run of a section: a template's protocol on its data, at ``participants`` sites."""

    section: str
    template: str
    dataset: str
    participants: int
    seed: int
    protocol: dict[str, Any]
    model: str


def template_protocol(name: str) -> tuple[dict[str, Any], str]:
    """The ``[federation]`` settings the demo takes from template ``name`` and its model."""
    doc = tomllib.loads((TEMPLATE_DIR / name).read_text())
    fed = doc["federation"]
    return ({k: fed[k] for k in PROTOCOL_KEYS if k in fed},
            doc.get("model", {}).get("name", "logistic"))


def template_cases(sites: list[int], seeds: int) -> list[Case]:
    """Every template at every number of sites, seed by seed (so a benchmark stopped early
    has every configuration at its first seeds)."""
    cases = []
    for seed in range(1, seeds + 1):
        for p in sites:
            for template, dataset in TEMPLATES.items():
                protocol, model = template_protocol(template)
                cases.append(Case("templates", template, dataset, p, seed, protocol, model))
    return cases


def per_site_files(root: Path, pid: str, result: dict[str, Any]) -> dict[str, Any]:
    """What a run's files say of site ``pid``: its whole ``gain.json``, and from the analyst's
    ``result.json`` every dict (top level or under ``model``) keyed by site id, at ``pid``."""
    gain = root / "state" / pid / "gain.json"
    tables = {**{k: v for k, v in result.items() if k != "model"},
              **{f"model.{k}": v for k, v in (result.get("model") or {}).items()}}
    return {"gain_json": json.loads(gain.read_text()) if gain.is_file() else None,
            "analyst": {k: v[pid] for k, v in tables.items()
                        if isinstance(v, dict) and pid in v}}


def run_template_case(case: Case, held_back: float, root: Path) -> dict[str, Any]:
    """One demo without a colluder on ``case``: per site, the three models on the held-back
    records and test rows, with the site's and the analyst's per-site files copied through."""
    from noisyanchor.deploy.demo import run_demo

    p = case.protocol
    s = run_demo(participants=case.participants, method=p["method"], v=p.get("v", 0.0),
                 sigma=p.get("sigma", 0.0), dim=p.get("dim"), anchors=p.get("anchors"),
                 colluder=None, seed=case.seed, workdir=root, held_back=held_back,
                 dataset=case.dataset)
    result = json.loads((root / "store" / "result" / "result.json").read_text())
    return {**asdict(case), "seconds": s["seconds"],
            "z_matches_inprocess": s["z_matches_inprocess"],
            "solver": {k: s["solver"].get(k) for k in ("name", "iterations", "certified")},
            "federation_balanced_accuracy": s["utility"]["balanced_accuracy"],
            "sites": {pid: site | per_site_files(root, pid, result)
                      for pid, site in s["sites"].items()}}


#: Sections of the benchmark: name -> (its cases from --sites and --seeds, one case's run).
SECTIONS: dict[str, tuple[Callable[[list[int], int], list[Case]],
                          Callable[[Case, float, Path], dict[str, Any]]]] = {
    "templates": (template_cases, run_template_case)}


def held_back_gain(site: dict[str, Any]) -> float | None:
    """Federation minus local-only balanced accuracy on a site's held-back records."""
    fed = site["federation"]["held_back_balanced_accuracy"]
    alone = site["local_only"]["held_back_balanced_accuracy"]
    return None if fed is None or alone is None else fed - alone


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (template, sites): mean over seeds and sites of each model's balanced accuracy, the
    gain on held-back records and on test rows (``gain.json``'s), their ranges, how many
    site-runs gained, and each site's mean gain over seeds (``site_mean_gain``: the gain a site
    can expect from joining; its minimum over sites says whether every site gains)."""
    out = []
    for key in sorted({(r["template"], r["participants"]) for r in runs}):
        group = [r for r in runs if (r["template"], r["participants"]) == key]
        sites = [site for r in group for site in r["sites"].values()]

        def mean(model: str, metric: str, sites=sites) -> float:
            return float(np.mean([s[model][metric] for s in sites
                                  if s[model][metric] is not None]))

        held = np.array([g for g in map(held_back_gain, sites) if g is not None])
        test = np.array([s["gain"] for s in sites if s["gain"] is not None])
        per_site = {pid: float(np.mean([held_back_gain(r["sites"][pid]) for r in group]))
                    for pid in group[0]["sites"]}
        out.append({
            "template": key[0], "dataset": group[0]["dataset"], "participants": key[1],
            "protocol": group[0]["protocol"], "seeds": len(group), "site_runs": len(sites),
            "held_back_per_site": float(np.mean([s["held_back"] for s in sites])),
            "test_rows_per_site": float(np.mean([s["test_rows"] for s in sites])),
            **{f"{m}_held_back_balanced_accuracy": mean(m, "held_back_balanced_accuracy")
               for m in MODELS},
            **{f"{m}_test_balanced_accuracy": mean(m, "test_balanced_accuracy")
               for m in MODELS},
            "held_back_gain_mean": float(held.mean()), "held_back_gain_min": float(held.min()),
            "held_back_gain_max": float(held.max()),
            "held_back_site_runs_gaining": int(np.sum(held > 0)),
            "held_back_site_runs_losing": int(np.sum(held < 0)),
            "test_gain_mean": float(test.mean()), "test_gain_min": float(test.min()),
            "test_site_runs_gaining": int(np.sum(test > 0)),
            "test_site_runs_losing": int(np.sum(test < 0)),
            "site_mean_gain": per_site, "site_mean_gain_min": min(per_site.values()),
            "sites_gaining_on_average": int(sum(g > 0 for g in per_site.values())),
            "z_matches_inprocess": all(r["z_matches_inprocess"] for r in group)})
    return out


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    """Per template and number of sites: each site's mean gain over seeds on its held-back
    records (a dot per site), the mean over sites (a bar), what pooling every site's raw
    records would give over alone (a dash: the gain there is to have) and zero (no gain)."""
    from noisyanchor.experiments.figures import pyplot

    plt = pyplot()
    shown = {row["template"] for row in summary}
    templates = [t for t in TEMPLATES if t in shown] + sorted(shown - set(TEMPLATES))
    fig, axes = plt.subplots(1, len(templates), figsize=(4.2 * len(templates), 3.8),
                             squeeze=False, sharey=True)
    for ax, template in zip(axes[0], templates, strict=True):
        rows = [row for row in summary if row["template"] == template]
        for x, row in enumerate(rows):
            gains = list(row["site_mean_gain"].values())
            ax.bar(x, row["held_back_gain_mean"], 0.6, color="C0", alpha=0.35)
            ax.plot(x + np.linspace(-0.2, 0.2, len(gains)), gains, "o", color="C0", ms=4,
                    label="a site (mean over seeds)" if x == 0 else None)
            pooled = (row["centralised_held_back_balanced_accuracy"]
                      - row["local_only_held_back_balanced_accuracy"])
            ax.plot([x - 0.3, x + 0.3], [pooled, pooled], "k--", lw=1.2,
                    label="pooled raw records minus alone" if x == 0 else None)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xticks(range(len(rows)), [f"{row['participants']} sites\n"
                                         f"({row['seeds']} seeds)" for row in rows], fontsize=8)
        ax.set_title(f"{template}\n({rows[0]['dataset']})", fontsize=9)
    axes[0][0].set_ylabel("gain in balanced accuracy on held-back\nrecords (bar: mean over "
                          "sites and seeds)", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("What each site gains by joining, each shipped template on its bundled data",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(out: Path, meta: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    """The JSON at ``out``: the meta data, and per section its summary and every run."""
    sections = {name: {"summary": summarise(rs), "runs": rs} for name, rs in runs.items() if rs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "sections": sections}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--sites", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--seeds", type=int, default=10, help="repeats per configuration")
    parser.add_argument("--template", nargs="+", choices=list(TEMPLATES),
                        help="only these templates (default: all)")
    parser.add_argument("--held-back", type=float, default=HELD_BACK)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--replot", action="store_true",
                        help="only draw the PNG again from the JSON at --out")
    args = parser.parse_args(argv)
    if args.replot:
        report = json.loads(args.out.read_text())
        plot(report["sections"]["templates"]["summary"], args.out.with_suffix(".png"))
        return 0
    meta = {"command": "python -m benchmarks.bench_site_gain", "held_back": args.held_back,
            "seeds_asked": args.seeds, "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "note": "held_back_*: balanced accuracy on each site's held-back records (never "
                    "uploaded); test_*: on its test rows (gain.json); the machine is shared "
                    "with other work: loadavg_start/end record it"}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.section}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-site-gain-") as tmp:
        for name in args.section:
            make_cases, run_case = SECTIONS[name]
            for case in make_cases(args.sites, args.seeds):
                if args.template and case.template not in args.template:
                    continue
                where = Path(tmp) / f"{name}-{case.dataset}-p{case.participants}-s{case.seed}"
                run = run_case(case, args.held_back, where)
                runs[name].append(run)
                gains = [held_back_gain(s) for s in run["sites"].values()]
                print(f"{name}: {case.template}, {case.participants} sites, seed {case.seed}: "
                      f"held-back gain per site {' '.join(f'{g:+.3f}' for g in gains)} "
                      f"({run['seconds']:.0f} s)", flush=True)
                meta |= {"loadavg_end": os.getloadavg(),
                         "seconds": time.perf_counter() - start}
                write(args.out, meta, runs)  # after every run: a stopped benchmark keeps it
    report = json.loads(args.out.read_text())
    if "templates" in report["sections"]:
        plot(report["sections"]["templates"]["summary"], args.out.with_suffix(".png"))
    for name, section in report["sections"].items():
        for row in section["summary"]:
            print(f"{name}: {row['template']}, {row['participants']} sites, {row['seeds']} "
                  f"seeds: held-back balanced accuracy alone "
                  f"{row['local_only_held_back_balanced_accuracy']:.3f}, federation "
                  f"{row['federation_held_back_balanced_accuracy']:.3f}; gain "
                  f"{row['held_back_gain_mean']:+.3f}, each site's mean gain from "
                  f"{row['site_mean_gain_min']:+.3f}, {row['sites_gaining_on_average']} of "
                  f"{row['participants']} sites gain on average")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
