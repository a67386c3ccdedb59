"""``noisyanchor experiment dp-baseline``: a formal DP baseline at matched utility (issue 33,
item 2).

On the study's own deployments (:func:`experiments.bench.prepare_bench`, every replicate: the
same uploaded records in ``X F``, labels, split tags and public pool), three things:

1. **The private-data-noise arm as a Gaussian mechanism.** Every drawn ``sigma`` of the study's
   C-GDP-pn runs gets its record-level ``(epsilon, delta)`` (:func:`common.data_noise_privacy.
   record_privacy`), with ``C`` the largest record norm of that deployment's uploads: the arm
   clips nothing, so this is the bound its records meet (a deployment would fix ``C`` in
   advance; taking it from the data is itself not private, so these epsilons flatter the arm).
   Beside the study's draws the arm is rerun here at the epsilon grid (``sigma`` from the
   calibration at ``2 C``, no centring, no clipping): its Z is that release up to an orthogonal
   key and translation, which the downstream model does not see.
2. **DP release of the data** (:func:`experiments.dp_mechanisms.gaussian_data_release`): the
   records centred by the public pool's mean, clipped to a quantile of the public pool's norms
   (public: costs no privacy), optionally projected by a public JL matrix first, every record
   released once; the study's downstream model (:func:`common.downstream.fit_downstream`,
   logistic, ``C`` chosen on the released validation rows: post-processing) scored on the
   released test rows, as the federation scores the test rows of ``Z``.
3. **DP training** (:func:`experiments.dp_mechanisms.output_perturbed_logistic`): output
   perturbation of L2-regularised logistic regression on the clean training rows (same centre
   and clip), scored on the clean test rows; ``lambda`` chosen per release on the clean
   validation rows and not charged (in the baseline's favour).

Each is scored by held-out balanced accuracy over an epsilon grid (mean over deployments and
noise draws); the matched-utility epsilon is the smallest epsilon at which the mean reaches the
federation's utility (the noiseless federation, and the anchor-noise arm's median over its
draws), interpolated in ``log epsilon`` between the two grid points around it. The anchor-noise
arm has no epsilon: it perturbs the key, not the records (:mod:`common.data_noise_privacy`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.data_noise_privacy import DEFAULT_DELTA, record_privacy
from noisyanchor.common.downstream import fit_downstream, held_out_metrics
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION
from noisyanchor.experiments.dp_mechanisms import (
    fit_regularised_logistic,
    gaussian_data_release,
    jl_projection,
    perturb_output,
    predict_logistic,
)

log = logging.getLogger(__name__)

#: The epsilon grid (record level, at ``delta``).
DEFAULT_EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5)
#: ``lambda`` values of the DP-training model (chosen on validation per release).
LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1)
#: Methods of the study read back: the private-data-noise arm (C-GDP-pn; AA-I-GDP-pn is its
#: coupled twin) and the anchor-noise arm.
DATA_NOISE_ARM, ANCHOR_NOISE_ARM = "c-gdp-pn", "aa-igdp-an"
#: The baselines, keyed as in the JSON.
BASELINES = ("data_noise_arm", "dp_release", "dp_release_jl", "dp_training")


@dataclass(frozen=True)
class Deployment:
    """One replicated deployment of the study, as the baselines need it.

    Attributes
    ----------
    x : (n, h) ndarray
        Uploaded records in the working space ``X F``.
    labels, tags : (n,) ndarrays
    public : (m, h) ndarray
        Public pool in ``X F`` (never uploaded).
    max_norm : float
        ``max_i ||x_i||_2``: the ``C`` the private-data-noise arm's records meet.
    """

    x: np.ndarray
    labels: np.ndarray
    tags: np.ndarray
    public: np.ndarray
    max_norm: float

    @property
    def center(self) -> np.ndarray:
        """``mu``: the public pool's mean."""
        return self.public.mean(axis=0)

    def public_clip(self, quantile: float) -> float:
        """``C``: the ``quantile`` of the centred public records' norms."""
        return float(np.quantile(np.linalg.norm(self.public - self.center, axis=1), quantile))


def deployment(bench: Any) -> Deployment:
    """The :class:`Deployment` of a prepared :class:`experiments.bench.Bench`."""
    fed = bench.federation
    x = np.vstack([fed.working(i) for i in range(len(fed.x))])
    return Deployment(x, np.concatenate(fed.labels), np.concatenate(fed.tags),
                      bench.working(np.flatnonzero(bench.public)),
                      float(np.linalg.norm(x, axis=1).max()))


def matched_epsilon(epsilons: list[float], utility: list[float], target: float) -> float | None:
    """Smallest epsilon at which ``utility`` (over the increasing grid ``epsilons``) reaches
    ``target``: linear in ``log epsilon`` between the grid points around the first crossing;
    the first grid point when it already reaches it; None when no grid point does."""
    for k, (eps, u) in enumerate(zip(epsilons, utility, strict=True)):
        if u >= target:
            if k == 0:
                return float(eps)
            lo, ulo = math.log(epsilons[k - 1]), utility[k - 1]
            return float(math.exp(lo + (target - ulo) / (u - ulo) * (math.log(eps) - lo)))
    return None


# ---- the three baselines on one deployment -------------------------------------------------------

def release_utilities(dep: Deployment, epsilons, delta: float, repeats: int, clip_quantile: float,
                      jl_dim: int, rng: np.random.Generator) -> dict[str, list[list[float]]]:
    """Balanced accuracy of the model trained on each release, ``[epsilon][repeat]``."""
    proj = jl_projection(dep.x.shape[1], jl_dim, rng)  # public, drawn before any noise
    jl_public = (dep.public - dep.center) @ proj
    variants = {  # name: (centre, projection, C)
        "data_noise_arm": (None, None, dep.max_norm),
        "dp_release": (dep.center, None, dep.public_clip(clip_quantile)),
        "dp_release_jl": (dep.center, proj,
                          float(np.quantile(np.linalg.norm(jl_public, axis=1), clip_quantile))),
    }
    out: dict[str, list[list[float]]] = {}
    for name, (center, projection, clip) in variants.items():
        out[name] = [[fit_downstream(gaussian_data_release(
            dep.x, eps, delta, clip, rng, center=center, projection=projection).records,
            dep.labels, dep.tags).utility.balanced_accuracy for _ in range(repeats)]
            for eps in epsilons]
    return out


def training_utilities(dep: Deployment, epsilons, delta: float, repeats: int,
                       clip_quantile: float, rng: np.random.Generator
                       ) -> tuple[list[list[float]], float]:
    """Held-out balanced accuracy of output-perturbed logistic regression ``[epsilon][repeat]``
    (``lambda`` chosen per release on the validation rows), and the non-private model's (the
    same ``lambda`` grid, chosen the same way)."""
    u = dep.x - dep.center
    clip = dep.public_clip(clip_quantile)
    tr, va, te = (dep.tags == t for t in (TRAIN, VALIDATION, TEST))
    fits = [fit_regularised_logistic(u[tr], dep.labels[tr], clip, lam) for lam in LAMBDAS]

    def score(predict, rows) -> float:
        return held_out_metrics(dep.labels[rows], predict(u[rows]))["balanced_accuracy"]

    def chosen(predictors) -> float:  # the model best on validation, scored on test
        return score(max(predictors, key=lambda f: score(f, va)), te)

    n = int(tr.sum())
    private = [[chosen([perturb_output(w, c, n, clip, lam, eps, delta, rng).predict
                        for (w, c), lam in zip(fits, LAMBDAS, strict=True)])
                for _ in range(repeats)] for eps in epsilons]
    clean = chosen([partial(predict_logistic, w, c, clip) for w, c in fits])
    return private, clean


# ---- the study's draws ---------------------------------------------------------------------------

def study_draws(rows: list[dict[str, Any]], max_norms: list[float],
                delta: float) -> dict[str, list[dict[str, Any]]]:
    """The study's noisy draws of both arms (primary model's utility, strongest linkage over
    every attack of the colluder), each private-data-noise draw with its record-level epsilon
    at its deployment's ``C``; the anchor-noise draws have none."""
    from noisyanchor.experiments.study import replicate_of, strongest

    out: dict[str, list[dict[str, Any]]] = {DATA_NOISE_ARM: [], ANCHOR_NOISE_ARM: []}
    for row in rows:
        method = row["method"]
        if method not in out or row.get("control") or row.get("p") not in (None, rows[0]["p"]):
            continue
        rep = replicate_of(row)
        item = {"replicate": rep, "draw": row["draw"], "utility": row["utility"],
                "linkage": strongest(row, "all")}
        if method == DATA_NOISE_ARM:
            if row["sigma"] <= 0:
                continue
            priv = record_privacy(row["sigma"], max_norms[rep], delta)
            item.update(sigma=row["sigma"], clip=priv.clip, epsilon=priv.epsilon)
        else:
            item.update(v=row["v"])
        out[method].append(item)
    return out


def noiseless_utility(rows: list[dict[str, Any]], replicate: int) -> float | None:
    """The study's noiseless C-GDP control utility in ``replicate`` (None when absent)."""
    from noisyanchor.experiments.study import replicate_of

    return next((r["utility"] for r in rows if r["method"] == "c-gdp" and r.get("control")
                 and replicate_of(r) == replicate), None)


# ---- the run -------------------------------------------------------------------------------------

def _mean_curve(per_dep: list[list[list[float]]]) -> list[float]:
    """Mean over deployments and repeats of ``[deployment][epsilon][repeat]``."""
    return np.asarray(per_dep).mean(axis=(0, 2)).tolist()


def run_dp_baseline(config: Path, results: Path, out: Path, *, epsilons=DEFAULT_EPSILONS,
                    delta: float = DEFAULT_DELTA, repeats: int = 3, clip_quantile: float = 0.5,
                    jl_dim: int = 8, seed: int = 2026, command: str = "") -> dict[str, Any]:
    """Run the three baselines on every replicated deployment of the study in ``results``
    (configured by ``config``); write ``dp_baseline.json`` and ``fig_dp_baseline.png`` to
    ``out`` and return the JSON's content."""
    from noisyanchor.experiments.bench import BenchConfig, prepare_bench
    from noisyanchor.experiments.study import load_rows

    start = time.monotonic()
    cfg = BenchConfig.from_toml(config)
    counts = np.atleast_1d(cfg.participants).tolist()
    if len(counts) != 1:
        raise InvalidInputError(f"{config}: dp-baseline needs one participant count, got "
                                f"{cfg.participants!r}")
    p = int(counts[0])
    _, rows = load_rows(results)
    epsilons = sorted(float(e) for e in epsilons)
    rng = np.random.default_rng(seed)
    deps, releases, training, clean, checks = [], [], [], [], []
    for rep in range(cfg.replicates):
        dep = deployment(prepare_bench(cfg, p, replicate=rep))
        deps.append(dep)
        log.info("deployment %d: %d records, C_max = %.3f", rep, len(dep.x), dep.max_norm)
        releases.append(release_utilities(dep, epsilons, delta, repeats, clip_quantile, jl_dim,
                                          rng))
        private, exact = training_utilities(dep, epsilons, delta, repeats, clip_quantile, rng)
        training.append(private)
        clean.append(exact)
        checks.append({"replicate": rep,
                       "federation_noiseless": fit_downstream(dep.x, dep.labels, dep.tags)
                       .utility.balanced_accuracy,
                       "study_noiseless": noiseless_utility(rows, rep),
                       "max_norm": dep.max_norm,
                       "public_clip": dep.public_clip(clip_quantile)})
    draws = study_draws(rows, [d.max_norm for d in deps], delta)
    curves = {name: _mean_curve([r[name] for r in releases]) for name in BASELINES[:3]}
    curves["dp_training"] = _mean_curve(training)
    anchor = [d["utility"] for d in draws[ANCHOR_NOISE_ARM]]
    targets = {"federation_noiseless": float(np.mean([c["federation_noiseless"]
                                                      for c in checks])),
               "anchor_noise_median": float(np.median(anchor)) if anchor else None}
    result = {
        "command": command, "config": str(config), "results": str(results),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": time.monotonic() - start, "load_average_end": list(_load()),
        "delta": delta, "epsilons": epsilons, "repeats": repeats, "deployments": len(deps),
        "clip_quantile": clip_quantile, "jl_dim": jl_dim, "lambdas": list(LAMBDAS),
        "deployment_checks": checks,
        "non_private_training": float(np.mean(clean)),
        "utility": curves,
        "utility_per_deployment": {**{n: [np.mean(r[n], axis=1).tolist() for r in releases]
                                      for n in BASELINES[:3]},
                                   "dp_training": [np.mean(t, axis=1).tolist()
                                                   for t in training]},
        "targets": targets,
        "matched_epsilon": {t: {n: (None if v is None else matched_epsilon(epsilons, c, v))
                                for n, c in curves.items()} for t, v in targets.items()},
        "study_draws": draws,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "dp_baseline.json").write_text(json.dumps(result, indent=1) + "\n")
    from noisyanchor.experiments.dp_figure import draw

    draw(result, out / "fig_dp_baseline.png")
    return result


def _load() -> tuple[float, ...]:
    """The load average (1, 5, 15 min) at the end of the run: the machine is shared."""
    return tuple(round(x, 2) for x in os.getloadavg())


# ---- command line --------------------------------------------------------------------------------

def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment dp-baseline``."""
    from noisyanchor.common.cliargs import int_at_least

    ps = sub.add_parser("dp-baseline", help="formal DP baselines at matched utility: the "
                        "private-data-noise arm's epsilon, a DP data release and DP training; "
                        "dp_baseline.json and fig_dp_baseline.png")
    ps.add_argument("--dataset", default="digits",
                    help="study name: reads experiments/configs/NAME.toml and "
                         "experiments/results/NAME (default digits)")
    ps.add_argument("--config", default=None, help="the study's config (overrides --dataset's)")
    ps.add_argument("--results", default=None,
                    help="the study's sweep results (overrides --dataset's)")
    ps.add_argument("--out", required=True, help="output folder")
    ps.add_argument("--repeats", type=int_at_least(1), default=3,
                    help="noise draws per (deployment, epsilon)")
    ps.add_argument("--seed", type=int_at_least(0), default=2026, help="root seed")
    ps.add_argument("--json", action="store_true", help="print the result as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    config = Path(args.config or f"experiments/configs/{args.dataset}.toml")
    results = Path(args.results or f"experiments/results/{args.dataset}")
    command = (f"noisyanchor experiment dp-baseline --dataset {args.dataset} --out {args.out}"
               f" --repeats {args.repeats}")
    res = run_dp_baseline(config, results, Path(args.out), repeats=args.repeats, seed=args.seed,
                          command=command)
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "study_draws"}, indent=2))
        return 0
    print(f"{res['deployments']} deployments in {res['seconds']:.1f} s; matched-utility "
          f"epsilon (delta = {res['delta']:g}):")
    for target, per in res["matched_epsilon"].items():
        value = res["targets"][target]
        print(f"  {target} ({'-' if value is None else f'{100 * value:.1f}%'}): " + ", ".join(
            f"{name} {'not reached' if eps is None else f'{eps:.3g}'}"
            for name, eps in per.items()))
    return 0
