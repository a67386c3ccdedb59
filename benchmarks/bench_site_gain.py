"""What each site gains by joining: the model it could train alone against the federation's,
both scored on records the site never uploaded, for every shipped project template.

    python -m benchmarks.bench_site_gain [--seeds 10] [--sites 3 10] [--section templates poisoned]

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

Section ``poisoned``: each template's data at 3 and 10 sites, over seeds, with one site's
column multiplied by 10,000 (a column in another scale) or by 0.001 (a unit slip), run in-process
through the analyst's federation state machine under the screening policies ``refuse``,
``exclude`` and ``accept`` (:func:`benchmarks.poisoned_sites.poisoned_run`): per run whether the
site was named before alignment under each policy, that ``refuse`` aligned nothing, the largest
difference of an other site's balanced accuracy under ``exclude`` against the same federation
run without the site, and the others' mean balanced accuracy honest / accepted / excluded /
without; summarised per data set, number of sites and factor.

Sections are named in :data:`SECTIONS` (the cases it runs, how one case runs, its summary, its
line of progress and its PNG). Writes ``benchmarks/results/site_gain.json`` (per section its
meta data, a summary per configuration and every run, compact), rewritten after every run so an
interrupted benchmark keeps what it measured; the sections not run this time are kept as they
were. Beside it ``site_gain.png`` (per template and number of sites, each site's mean gain over
seeds) and ``site_gain_poisoned.png`` (the others' balanced accuracy per policy, and how often
the poisoned site was named).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

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
    """One run of a section: a template's protocol on its data, at ``participants`` sites;
    ``variant`` holds what a section changes besides (e.g. which site is poisoned, and how):
    runs are summarised per template, number of sites and variant."""

    section: str
    template: str
    dataset: str
    participants: int
    seed: int
    protocol: dict[str, Any]
    model: str
    variant: dict[str, Any] = field(default_factory=dict)


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


def held_back_gain(site: dict[str, Any]) -> float | None:
    """Federation minus local-only balanced accuracy on a site's held-back records."""
    fed = site["federation"]["held_back_balanced_accuracy"]
    alone = site["local_only"]["held_back_balanced_accuracy"]
    return None if fed is None or alone is None else fed - alone


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (template, sites, variant): mean over seeds and sites of each model's balanced
    accuracy, the gain on held-back records and on test rows (``gain.json``'s), their ranges,
    how many site-runs gained, and each site's mean gain over seeds (``site_mean_gain``: the
    gain a site can expect from joining; its minimum over sites says whether every site
    gains)."""
    out = []

    def configuration(run: dict[str, Any]) -> tuple[str, int, str]:
        return run["template"], run["participants"], json.dumps(run.get("variant", {}),
                                                                 sort_keys=True)

    for key in sorted({configuration(r) for r in runs}):
        group = [r for r in runs if configuration(r) == key]
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
            "variant": group[0].get("variant", {}),
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

#: A poisoned site's column scaled by each factor: a column x10,000 and a unit slip x0.001.
FACTORS = (1e4, 1e-3)


def poisoned_cases(sites: list[int], seeds: int) -> list[Case]:
    """Every template's data at every number of sites with one site's column multiplied by
    each of :data:`FACTORS`, seed by seed."""
    return [dataclasses.replace(case, section="poisoned", variant={"factor": factor})
            for case in template_cases(sites, seeds) for factor in FACTORS]


def run_poisoned_case(case: Case, held_back: float, root: Path) -> dict[str, Any]:
    """One :func:`benchmarks.poisoned_sites.poisoned_run` on ``case`` (the template's method
    and anchor noise ``v``; ``held_back`` is not used: the others' balanced accuracy is on
    their test rows), kept compact: per policy whether the site was named before alignment,
    the screening's checks that named it, and the mean over the other sites of each balanced
    accuracy (``others_mean``)."""
    from benchmarks.poisoned_sites import poisoned_run

    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    out = poisoned_run(case.dataset, case.participants, case.seed,
                       factor=case.variant["factor"], method=case.protocol["method"],
                       v=case.protocol.get("v"), workdir=root)
    accuracy = out["others_balanced_accuracy"]
    return {**{k: v for k, v in asdict(case).items() if k not in ("section", "protocol")},
            "seconds": time.perf_counter() - started,
            "poisoned_site": out["poisoned_site"], "column": out["column"],
            "named_before_alignment": out["named_before_alignment"],
            "checks": sorted({f["check"] for f in out["findings"]
                              if f["site"] == out["poisoned_site"]}),
            "refuse_aligned_nothing": out["refuse_aligned_nothing"],
            "exclude_max_difference": out["exclude_max_difference"],
            "others_mean": {k: mean_of(v.values()) for k, v in accuracy.items()}}


def mean_of(values: Any) -> float | None:
    """Mean of the values that are not None (None when there are none)."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def summarise_poisoned(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (data set, sites, factor): how many runs named the poisoned site before alignment
    under each policy, in how many ``refuse`` aligned nothing, the largest ``exclude``
    difference against the federation without the site (over the runs that named it: must be
    at most 1e-9) and the mean over runs of the others' mean balanced accuracy ``honest``
    (no site poisoned), ``accepted``, ``excluded`` and ``without`` (the site left out)."""
    out = []
    keys = sorted({(r["dataset"], r["participants"], r["variant"]["factor"]) for r in runs},
                  key=lambda k: (list(TEMPLATES.values()).index(k[0])
                                 if k[0] in TEMPLATES.values() else len(TEMPLATES), k[1], -k[2]))
    for dataset, participants, factor in keys:
        group = [r for r in runs if (r["dataset"], r["participants"],
                                     r["variant"]["factor"]) == (dataset, participants, factor)]
        diffs = [r["exclude_max_difference"] for r in group
                 if r["exclude_max_difference"] is not None]
        out.append({
            "template": group[0]["template"], "dataset": dataset, "participants": participants,
            "factor": factor, "runs": len(group),
            "named_before_alignment": {p: sum(r["named_before_alignment"][p] for r in group)
                                       for p in group[0]["named_before_alignment"]},
            "checks": sorted({c for r in group for c in r["checks"]}),
            "refuse_aligned_nothing": sum(r["refuse_aligned_nothing"] for r in group),
            "exclude_max_difference": max(diffs) if diffs else None,
            **{f"others_{k}_balanced_accuracy": mean_of(r["others_mean"][k] for r in group)
               for k in ("honest", "accepted", "excluded", "without")}})
    return out


def plot_poisoned(summary: list[dict[str, Any]], path: Path) -> None:
    """Per data set: the other sites' mean balanced accuracy with every site honest, with the
    poisoned site accepted, excluded, and left out (bars), per number of sites and factor, and
    the share of runs that named the poisoned site before alignment under every policy."""
    from noisyanchor.experiments.figures import pyplot

    plt = pyplot()
    datasets = list(dict.fromkeys(row["dataset"] for row in summary))
    kinds = ("honest", "accepted", "excluded", "without")
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8),
                             squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        rows = [row for row in summary if row["dataset"] == dataset]
        for x, row in enumerate(rows):
            for i, kind in enumerate(kinds):
                value = row[f"others_{kind}_balanced_accuracy"]
                ax.bar(x + (i - 1.5) * 0.2, value or 0.0, 0.2, color=f"C{i}",
                       label=kind if x == 0 else None)
            named = min(row["named_before_alignment"].values()) / row["runs"]
            ax.text(x, 0.02, f"named\n{named:.0%}", ha="center", fontsize=7, color="w")
        ax.set_xticks(range(len(rows)), [f"{row['participants']} sites\nx{row['factor']:g}\n"
                                         f"({row['runs']} seeds)" for row in rows], fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(f"{rows[0]['template']}\n({dataset})", fontsize=9)
    axes[0][0].set_ylabel("other sites' balanced accuracy\n(mean over sites and seeds)",
                          fontsize=8)
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle("One site's column scaled: the others' accuracy when it is accepted, excluded "
                 "or absent; named: share of runs it was named before alignment under every "
                 "policy", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def template_line(run: dict[str, Any]) -> str:
    """A templates run in one line: each site's gain on its held-back records."""
    gains = [held_back_gain(s) for s in run["sites"].values()]
    return f"held-back gain per site {' '.join(f'{g:+.3f}' for g in gains)}"


def poisoned_line(run: dict[str, Any]) -> str:
    """A poisoned run in one line: the factor, who named the site, exclude's difference."""
    named = ",".join(p for p, v in run["named_before_alignment"].items() if v) or "none"
    return (f"x{run['variant']['factor']:g}: named under {named}, refuse aligned nothing "
            f"{run['refuse_aligned_nothing']}, exclude difference "
            f"{run['exclude_max_difference']}")


class Section(NamedTuple):
    """A section of the benchmark: its cases from --sites and --seeds, one case's run, the
    summary of its runs, a run in one line, and its PNG beside the JSON (suffix, drawing)."""

    cases: Callable[[list[int], int], list[Case]]
    run: Callable[[Case, float, Path], dict[str, Any]]
    summarise: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    line: Callable[[dict[str, Any]], str]
    png: tuple[str, Callable[[list[dict[str, Any]], Path], None]]


#: Sections of the benchmark by name.
SECTIONS: dict[str, Section] = {
    "templates": Section(template_cases, run_template_case, summarise, template_line,
                         (".png", plot)),
    "poisoned": Section(poisoned_cases, run_poisoned_case, summarise_poisoned, poisoned_line,
                        ("_poisoned.png", plot_poisoned))}


#: Decimals kept of a run's numbers in the JSON (balanced accuracies on tens of records).
DECIMALS = 4


def compact(value: Any) -> Any:
    """A run as the JSON keeps it: numbers to :data:`DECIMALS` decimals, without the digests and
    file names the copied per-site files carry (``*sha256``, ``file``: no measurement in them)
    and without what is then empty, so every seed of every configuration fits one small file."""
    if isinstance(value, dict):
        kept = {k: compact(v) for k, v in value.items() if not k.endswith("sha256") and k != "file"}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(value, list | tuple):
        return [compact(v) for v in value]
    return round(value, DECIMALS) if isinstance(value, float) else value


def write(out: Path, sections: dict[str, dict[str, Any]]) -> None:
    """The JSON at ``out``: per section its ``meta``, ``summary`` and every run, compacted
    (:func:`compact`) on one line each."""
    text = json.dumps({"sections": {name: {**section, "runs": f"@{name}@"}
                                    for name, section in sections.items()}}, indent=1)
    for name, section in sections.items():
        lines = ",\n  ".join(json.dumps(compact(r), separators=(",", ":"))
                             for r in section["runs"])
        text = text.replace(json.dumps(f"@{name}@"), f"[\n  {lines}\n ]")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


def kept_sections(out: Path, running: list[str]) -> dict[str, dict[str, Any]]:
    """The sections already at ``out`` that this invocation does not run, as they are (a
    section run before meta data was kept per section takes the file's)."""
    if not out.is_file():
        return {}
    report = json.loads(out.read_text())
    return {name: {"meta": report.get("meta", {})} | section
            for name, section in report["sections"].items() if name not in running}


def png_path(out: Path, name: str) -> Path:
    """Section ``name``'s PNG beside the JSON at ``out``."""
    return out.with_name(out.stem + SECTIONS[name].png[0])


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
                        help="only draw the PNGs again from the JSON at --out")
    args = parser.parse_args(argv)
    if args.replot:
        for name, section in json.loads(args.out.read_text())["sections"].items():
            SECTIONS[name].png[1](section["summary"], png_path(args.out, name))
        return 0
    kept = kept_sections(args.out, args.section)  # other sections stay as they were measured
    sections: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-site-gain-") as tmp:
        for name in args.section:
            section = SECTIONS[name]
            meta = {"command": f"python -m benchmarks.bench_site_gain --section {name}",
                    "held_back": args.held_back, "seeds_asked": args.seeds,
                    "sites": args.sites, "loadavg_start": os.getloadavg(),
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "note": NOTES[name]}
            runs: list[dict[str, Any]] = []
            start = time.perf_counter()
            for case in section.cases(args.sites, args.seeds):
                if args.template and case.template not in args.template:
                    continue
                where = Path(tmp) / (f"{name}-{case.dataset}-p{case.participants}-s{case.seed}"
                                     f"-{len(runs)}")
                run = section.run(case, args.held_back, where)
                runs.append(run)
                print(f"{name}: {case.template}, {case.participants} sites, seed {case.seed}: "
                      f"{section.line(run)} ({run['seconds']:.0f} s)", flush=True)
                meta |= {"loadavg_end": os.getloadavg(), "runs": len(runs),
                         "seconds": time.perf_counter() - start}
                sections[name] = {"meta": meta, "summary": section.summarise(runs),
                                  "runs": runs}
                write(args.out, kept | sections)  # after every run: a stopped one keeps it
    for name, section in sections.items():
        SECTIONS[name].png[1](section["summary"], png_path(args.out, name))
        for row in section["summary"]:
            print(f"{name}: {json.dumps(compact(row))}")
        print(f"wrote {args.out} and {png_path(args.out, name)}")
    return 0


#: What a section's numbers are, in its meta data.
NOTES = {
    "templates": "held_back_*: balanced accuracy on each site's held-back records (never "
                 "uploaded); test_*: on its test rows (gain.json); the machine is shared "
                 "with other work: loadavg_start/end record it",
    "poisoned": "one site (org-1) has the column of upper-quartile variance multiplied by "
                "factor, through the analyst's Federation in-process under refuse, exclude "
                "and accept (benchmarks.poisoned_sites.poisoned_run; the template's method "
                "and v, its anchors at their default); others_*: the other sites' balanced "
                "accuracy on their test rows: honest (no site poisoned), accepted, excluded "
                "and without (the federation run without the site, same seeds)"}


if __name__ == "__main__":
    raise SystemExit(main())
