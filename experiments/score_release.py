"""``noisyanchor experiment scores``: utility of ScoreShield DP score releases on digits.

Collection: scikit-learn's bundled handwritten digits (1,797 records, 64 pixels, offline). The
"encoder" is public: pixels are centred by the mean of a disjoint public split, then every row is
unit-normalised (cosine geometry, scores in ``[-1, 1]``). A seeded permutation splits the records
into the private collection (``n`` rows), ``queries`` held-out probes, and the public rest.

Regime (i), score vector (SPEC.md section 5): for every probe ``q`` the curator releases
``s = E q`` (one release per probe, L2 sensitivity 2 under record replacement). Reported vs
epsilon for the clean, noisy (unclipped) and clipped releases: verification on all
(probe, gallery) pairs (same label = genuine) ROC-AUC, TAR at FAR 1e-2 and 1e-3, EER; retrieval
Recall@1 (the top-scored gallery row has the probe's label, ties broken at random); and the
false-match rate at the clean threshold vs at the threshold recalibrated from public impostor
scores (paper App. G, :func:`common.scoreshield.recalibrate_threshold`).

The probes are separate releases: the summary prints their composed total beside every
per-probe epsilon (exact Gaussian composition at the same delta, as the analyst's ledger does:
:func:`common.scoreshield.composed_epsilon`).

Regime (ii), Gram matrix: ``S = E E^T`` of the collection, released noisy, projected by Newton (the
metric projection, run to a relative feasibility gap of ``tol``), and by AAP and Dykstra capped at
``aap_iter`` / ``dykstra_iter`` iterations (each labelled with the iterations run and the relative
gap reached before the final normalisation), under two calibrations reported under their own
names: record-level (``Delta_F = 2 sqrt(2 (n - 1))``, (epsilon, delta)-DP for replacing one
record) and per-entry (``Delta = 2``, the paper's App. K calibration: output-space adjacency at
radius 2, which protects ONE entry of the Gram, NOT a record). Beside every row: the identity
matrix's error (releasing nothing; computed here from the clean Gram, for evaluation) and what the
release itself states without the clean Gram (its data-free baseline, :mod:`common.scoreshield.
baseline`: the public bound, the SURE estimate, the DP estimate of the identity's error, the
verdict and the epsilon at which it would be useful). Metrics: 10-NN majority-vote accuracy and
Recall@1 from the Gram rows (diagonal excluded), same/different-label pair ROC-AUC,
spectral-clustering NMI (scikit-learn SpectralClustering on the precomputed affinity
``clip((1 + S)/2, 0, 1)``, 10 clusters), squared Frobenius error ``||S_hat - S||_F^2``. Also the
Frobenius errors of the noisy, AAP and Newton releases and of the identity at ``n`` = 250, 500,
1000, 2000 (record-level, one epsilon; digits has 1,797 rows, so ``n`` = 2000 samples rows with
replacement, which puts exact duplicates in the collection).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield import (
    Regime,
    auc,
    calibrate,
    calibrate_sigma,
    composed_epsilon,
    eer,
    gaussian_epsilon,
    gram_record_sensitivity,
    per_entry_sensitivity,
    project_correlation,
    recalibrate_threshold,
    release_gram,
    score_vector_sensitivity,
    symmetrize,
    tar_at_far,
)

log = logging.getLogger(__name__)

DEFAULT_EPSILONS = (0.1, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)

#: Guarantee statements printed next to the numbers.
GUARANTEES = {
    "record": "record-level: (epsilon, delta)-DP for replacing any one record of the collection "
              "(Delta_F = 2 sqrt(2 (n - 1)) for the Gram, 2 for one score vector)",
    "per_entry": "per-entry (paper App. K): noise calibrated to ONE Gram entry (Delta = 2); NOT "
                 "record-level DP: replacing one record moves 2 (n - 1) entries",
}


@dataclass(frozen=True)
class ScoresConfig:
    """Parameters of one evaluation run (all recorded in the summary)."""

    n: int = 1000
    queries: int = 400
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    delta: float = 1e-5
    seed: int = 0
    aap_iter: int = 30
    dykstra_iter: int = 30
    tol: float = 1e-6
    knn: int = 10
    scaling_n: tuple[int, ...] = (250, 500, 1000, 2000)
    scaling_epsilon: float = 1.0
    scaling_iter: int = 30
    spectral: bool = True
    # Under the working directory's git-ignored runs/, so a run from the repository root never
    # overwrites the committed experiments/results/scores (pass --out there on purpose).
    out: str = "runs/scores"
    command: str = field(default="", compare=False)


# ---- data -------------------------------------------------------------------------------------

def _encode(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    z = x - mean
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    return z / np.where(norms > 0, norms, 1.0)


def _splits(config: ScoresConfig, rng: np.random.Generator):
    from noisyanchor.experiments.datasets import load_digits

    data = load_digits()
    total = data.x.shape[0]
    if config.n + config.queries >= total:
        raise InvalidInputError(f"n + queries must be < {total} (digits rows), got "
                         f"{config.n} + {config.queries}")
    perm = rng.permutation(total)
    gal, qry, pub = (perm[: config.n], perm[config.n: config.n + config.queries],
                     perm[config.n + config.queries:])
    mean = data.x[pub].mean(axis=0)  # public encoder parameter: never the private rows
    enc = _encode(data.x, mean)
    return data, enc, gal, qry, pub


# ---- regime (i) -------------------------------------------------------------------------------

def _random_top1(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Index of the row maximum, ties broken uniformly at random (clipping creates ties)."""
    perm = rng.permutation(scores.shape[1])
    return perm[np.argmax(scores[:, perm], axis=1)]


def _verification(scores: np.ndarray, genuine: np.ndarray, y_gal: np.ndarray,
                  y_q: np.ndarray, rng: np.random.Generator) -> dict:
    flat, lab = scores.ravel(), genuine.ravel()
    return {
        "auc": auc(lab, flat),
        "tar_at_far_1e-2": tar_at_far(lab, flat, 1e-2),
        "tar_at_far_1e-3": tar_at_far(lab, flat, 1e-3),
        "eer": eer(lab, flat),
        "recall_at_1": float(np.mean(y_gal[_random_top1(scores, rng)] == y_q)),
    }


def regime_i(config: ScoresConfig, enc, y, gal, qry, pub, rng, progress) -> dict:
    """Score-vector releases for every probe, per epsilon."""
    e_gal, e_q = enc[gal], enc[qry]
    clean = e_q @ e_gal.T  # (queries, n): one score vector per probe
    genuine = y[qry][:, None] == y[gal][None, :]
    # public impostor scores for recalibration: different-label pairs inside the public split
    e_pub, y_pub = enc[pub], y[pub]
    iu = np.triu_indices(len(pub), 1)
    imp_pub = (e_pub @ e_pub.T)[iu][(y_pub[:, None] != y_pub[None, :])[iu]]
    impostor_private = clean[~genuine]
    sens = score_vector_sensitivity()
    out = {"clean": _verification(clean, genuine, y[gal], y[qry], rng), "epsilons": []}
    for eps in progress(config.epsilons, desc="regime (i) score vectors"):
        sigma = calibrate_sigma(eps, config.delta, sens)
        noisy = clean + rng.normal(0.0, sigma, size=clean.shape)
        clipped = np.clip(noisy, -1.0, 1.0)
        row = {"epsilon": eps, "sigma": sigma,
               "composed_epsilon": composed_epsilon([eps] * len(qry), config.delta,
                                                    config.delta),
               "clipped_fraction": float(np.mean(clipped != noisy)),
               "noisy": _verification(noisy, genuine, y[gal], y[qry], rng),
               "clipped": _verification(clipped, genuine, y[gal], y[qry], rng),
               "recalibration": {}}
        imp_noisy = clipped[~genuine]
        for target in (1e-2, 1e-3):
            rec = recalibrate_threshold(imp_pub, sigma, target)
            tau0 = rec.clean_threshold
            row["recalibration"][f"{target:g}"] = {
                "clean_threshold": tau0,
                "recalibrated_threshold": rec.threshold,
                "feasible": rec.feasible,
                "far_clean_scores_at_clean_threshold": float(np.mean(impostor_private > tau0)),
                "far_at_clean_threshold": float(np.mean(imp_noisy > tau0)),
                "far_at_recalibrated_threshold": float(np.mean(imp_noisy > rec.threshold)),
                "tar_at_recalibrated_threshold": float(np.mean(clipped[genuine] > rec.threshold)),
            }
        out["epsilons"].append(row)
    return out


# ---- regime (ii) ------------------------------------------------------------------------------

def gram_metrics(s: np.ndarray, y: np.ndarray, rng: np.random.Generator, *, knn: int,
                 spectral: bool, seed: int) -> dict:
    """Utility of a (released) Gram for neighbours, verification and clustering."""
    n = s.shape[0]
    m = s.copy()
    np.fill_diagonal(m, -np.inf)
    top1 = _random_top1(m, rng)
    nbrs = np.argpartition(-m, knn, axis=1)[:, :knn]
    votes = np.zeros((n, int(y.max()) + 1))
    np.add.at(votes, (np.repeat(np.arange(n), knn), y[nbrs].ravel()), 1.0)
    iu = np.triu_indices(n, 1)
    same = (y[:, None] == y[None, :])[iu]
    res = {
        "knn_accuracy": float(np.mean(votes.argmax(axis=1) == y)),  # ties: smallest label
        "recall_at_1": float(np.mean(y[top1] == y)),
        "pair_auc": auc(same, s[iu]),
        "nmi": None,
    }
    if spectral:
        from sklearn.cluster import SpectralClustering
        from sklearn.metrics import normalized_mutual_info_score

        affinity = np.clip((1.0 + symmetrize(s)) / 2.0, 0.0, 1.0)
        labels = SpectralClustering(n_clusters=int(y.max()) + 1, affinity="precomputed",
                                    assign_labels="cluster_qr",
                                    random_state=seed).fit_predict(affinity)
        res["nmi"] = float(normalized_mutual_info_score(y, labels))
    return res


#: Releases of a Gram row, in table order.
GRAM_RELEASES = ("noisy", "newton", "aap", "dykstra")


def _projection_info(p) -> dict:
    return {"iterations": p.iterations, "converged": p.converged,
            "residual": p.residual, "relative_residual": p.relative_residual,
            "relative_change": p.relative_change, "min_eigenvalue": p.min_eigenvalue,
            "seconds": p.seconds, "label": projector_label(p)}


def projector_label(p) -> str:
    """What a projected release is: the solver, the iterations it ran and the relative
    feasibility gap it reached before the final normalisation, and whether it converged."""
    what = {"newton": "metric projection", "dykstra": "metric projection if converged",
            "aap": "feasibility method"}[p.method]
    state = ("converged" if p.converged else
             "NOT converged: capped, then normalised to a feasible matrix")
    return (f"{p.method} ({what}; {p.iterations} it., relative gap "
            f"{p.relative_residual:.1e}, {state})")


def regime_ii(config: ScoresConfig, enc, y, gal, rng, progress) -> dict:
    """Gram releases per epsilon and calibration: noisy, AAP, Dykstra."""
    e = enc[gal]
    yg = y[gal]
    clean = e @ e.T
    np.fill_diagonal(clean, 1.0)
    kw = {"knn": config.knn, "spectral": config.spectral, "seed": config.seed}
    out = {"clean": gram_metrics(clean, yg, rng, **kw), "calibrations": {},
           # reference errors: a release that says nothing (the identity, feasible) and ||S||_F^2
           "identity_frobenius_sq_error": float(np.linalg.norm(clean - np.eye(config.n)) ** 2),
           "clean_frobenius_sq": float(np.linalg.norm(clean) ** 2)}
    regimes = {"record": Regime("gram", config.n),
               "per_entry": Regime("gram", config.n, adjacency="output",
                                   radius=per_entry_sensitivity())}
    jobs = [(c, eps) for c in regimes for eps in config.epsilons]
    for cal in regimes:
        out["calibrations"][cal] = {"sensitivity": regimes[cal].sensitivity,
                                    "guarantee": GUARANTEES[cal], "epsilons": []}
    for cal, eps in progress(jobs, desc="regime (ii) Gram releases"):
        reg = regimes[cal]
        # the library's default release: Newton to tol, with its data-free baseline
        rel = release_gram(clean, calibrate(eps, config.delta, reg), rng=rng,
                           projector="newton", tol=config.tol, adjacency=reg.adjacency,
                           radius=reg.radius, dimension=e.shape[1])
        noisy, newton = rel.noisy, rel.projection
        aap = project_correlation(noisy, method="aap", tol=config.tol, max_iter=config.aap_iter)
        dyk = project_correlation(noisy, method="dykstra", tol=config.tol,
                                  max_iter=config.dykstra_iter)
        row = {"epsilon": eps, "sigma": rel.sigma, "record_epsilon": rel.record_epsilon,
               "baseline": rel.baseline.as_dict()}
        for name, proj in (("noisy", None), ("newton", newton), ("aap", aap), ("dykstra", dyk)):
            mat = noisy if proj is None else proj.matrix
            row[name] = gram_metrics(mat, yg, rng, **kw)
            row[name]["frobenius_sq_error"] = float(np.linalg.norm(mat - clean) ** 2)
            if proj is not None:
                row[name]["projection"] = _projection_info(proj)
        out["calibrations"][cal]["epsilons"].append(row)
    return out


def scaling(config: ScoresConfig, data_x, rng, progress) -> dict:
    """Frobenius error ratio noisy / AAP-projected vs n (record-level, one epsilon)."""
    rows = []
    total = data_x.shape[0]
    for n in progress(config.scaling_n, desc="Frobenius ratio vs n"):
        replace = n > total
        idx = rng.choice(total, size=n, replace=replace)
        rest = np.setdiff1d(np.arange(total), idx)
        mean = data_x[rest].mean(axis=0) if rest.size else data_x.mean(axis=0)
        e = _encode(data_x[idx], mean)
        clean = e @ e.T
        np.fill_diagonal(clean, 1.0)
        rel = release_gram(clean, calibrate(config.scaling_epsilon, config.delta,
                                            Regime("gram", n)),
                           rng=rng, projector="newton", tol=config.tol, dimension=e.shape[1])
        sigma, noisy, newton = rel.sigma, rel.noisy, rel.projection
        aap = project_correlation(noisy, method="aap", tol=config.tol,
                                  max_iter=config.scaling_iter)
        err_noisy = float(np.linalg.norm(noisy - clean) ** 2)
        err_aap = float(np.linalg.norm(aap.matrix - clean) ** 2)
        rows.append({"n": n, "sampled_with_replacement": replace, "sigma": sigma,
                     "frobenius_sq_noisy": err_noisy,
                     "expected_frobenius_sq_noisy": sigma ** 2 * n * (n + 1) / 2.0,
                     "frobenius_sq_aap": err_aap, "ratio_noisy_over_aap": err_noisy / err_aap,
                     "frobenius_sq_newton": float(np.linalg.norm(newton.matrix - clean) ** 2),
                     "frobenius_sq_identity": float(np.linalg.norm(clean - np.eye(n)) ** 2),
                     "baseline": rel.baseline.as_dict(),
                     "aap": _projection_info(aap), "newton": _projection_info(newton)})
    return {"epsilon": config.scaling_epsilon, "delta": config.delta, "rows": rows}


# ---- driver -----------------------------------------------------------------------------------

def run_scores(config: ScoresConfig) -> dict:
    """Run both regimes and the scaling study; write JSON, figures and markdown to ``out``."""
    try:
        from tqdm.auto import tqdm as progress
    except ImportError:  # pragma: no cover - tqdm is in the eval extra
        def progress(it, **_):
            return it
    t0 = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    data, enc, gal, qry, pub = _splits(config, rng)
    y = data.y
    chance = float(np.sum((np.bincount(y[gal]) / len(gal)) ** 2))
    summary = {
        "config": asdict(config),
        "data": {"name": "digits", "rows": int(data.x.shape[0]), "collection": config.n,
                 "queries": config.queries, "public": len(pub),
                 "encoder": "pixels/16, centred by the public split's mean, rows unit-normalised",
                 "chance_recall_at_1": chance},
        "guarantees": GUARANTEES,
        "regime_i": regime_i(config, enc, y, gal, qry, pub, rng, progress),
        "regime_ii": regime_ii(config, enc, y, gal, rng, progress),
        "scaling": scaling(config, data.x, rng, progress),
    }
    summary["seconds"] = time.perf_counter() - t0
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    figures(summary, out)
    (out / "summary.md").write_text(markdown(summary))
    return summary


def figures(summary: dict, out: Path) -> None:
    """regime_i.png, regime_ii.png and scaling.png (matplotlib, Agg backend)."""
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    r1 = summary["regime_i"]
    eps = [r["epsilon"] for r in r1["epsilons"]]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, key, title in zip(axes, ["auc", "tar_at_far_1e-2", "tar_at_far_1e-3", "recall_at_1"],
                              ["pair ROC-AUC", "TAR @ FAR 1e-2", "TAR @ FAR 1e-3", "Recall@1"],
                              strict=True):
        ax.axhline(r1["clean"][key], color="k", ls=":", label="clean")
        ax.plot(eps, [r["noisy"][key] for r in r1["epsilons"]], "o-", label="noisy")
        ax.plot(eps, [r["clipped"][key] for r in r1["epsilons"]], "s--", label="clipped")
        ax.set_xscale("log")
        ax.set_xlabel(f"epsilon (delta = {summary['config']['delta']:g})")
        ax.set_title(title)
    axes[0].legend()
    fig.suptitle("Regime (i): DP score vectors on digits (record-level, sensitivity 2)")
    save_figure(plt, fig, out / "regime_i.png", dpi=110)

    r2 = summary["regime_ii"]
    keys = [("knn_accuracy", "10-NN accuracy"), ("recall_at_1", "Recall@1"),
            ("nmi", "spectral NMI"), ("frobenius_sq_error", "||S_hat - S||_F^2")]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for row, cal in enumerate(["record", "per_entry"]):
        rows = r2["calibrations"][cal]["epsilons"]
        eps = [r["epsilon"] for r in rows]
        for col, (key, title) in enumerate(keys):
            ax = axes[row, col]
            if key != "frobenius_sq_error" and r2["clean"].get(key) is not None:
                ax.axhline(r2["clean"][key], color="k", ls=":", label="clean")
            if key == "frobenius_sq_error" and "identity_frobenius_sq_error" in r2:
                ax.axhline(r2["identity_frobenius_sq_error"], color="gray", ls=":",
                           label="identity (no information)")
            for name, style in (("noisy", "o-"), ("newton", "D-"), ("aap", "s--"),
                                ("dykstra", "^-.")):
                vals = [r[name][key] if name in r else None for r in rows]
                if all(v is not None for v in vals):
                    cap = summary["config"].get(f"{name}_iter")
                    label = name if cap is None else f"{name} (capped at {cap} it.)"
                    ax.plot(eps, vals, style, label=label)
            ax.set_xscale("log")
            if key == "frobenius_sq_error":
                ax.set_yscale("log")
            ax.set_title(f"{title} [{cal}]")
            ax.set_xlabel("epsilon")
        axes[row, 0].legend()
        axes[row, 3].legend(fontsize=7)
    fig.suptitle("Regime (ii): DP Gram on digits; top: record-level DP; bottom: per-entry "
                 "calibration (NOT record-level DP)")
    save_figure(plt, fig, out / "regime_ii.png", dpi=110)

    sc = summary["scaling"]["rows"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ns = [r["n"] for r in sc]
    ax.plot(ns, [r["frobenius_sq_noisy"] for r in sc], "o-", label="noisy")
    ax.plot(ns, [r["frobenius_sq_aap"] for r in sc], "s--",
            label=f"AAP (capped at {summary['config']['scaling_iter']} it.)")
    if all("frobenius_sq_newton" in r for r in sc):
        ax.plot(ns, [r["frobenius_sq_newton"] for r in sc], "D-", label="Newton")
        ax.plot(ns, [r["frobenius_sq_identity"] for r in sc], ":", color="gray",
                label="identity (no information)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n")
    ax.set_ylabel("||S_hat - S||_F^2")
    ax.set_title(f"record-level, epsilon = {summary['scaling']['epsilon']:g}")
    ax.legend()
    save_figure(plt, fig, out / "scaling.png", dpi=110)


def _f(v, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and (abs(v) >= 1e4 or (0 < abs(v) < 1e-3)):
        return f"{v:.2e}"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _near_chance_up_to(rows: list[dict], name: str, key: str, chance: float,
                       margin: float) -> float | None:
    """Largest epsilon at which ``rows[*][name][key]`` is within ``margin`` of chance."""
    near = [r["epsilon"] for r in rows if r[name][key] is not None
            and r[name][key] <= chance + margin]
    return max(near) if near else None


def _header_lines(summary: dict) -> list[str]:
    cfg = summary["config"]
    return [
        "# ScoreShield DP score releases on digits",
        "",
        f"Command: `{cfg['command'] or 'noisyanchor experiment scores'}`",
        "",
        f"Collection: digits, n = {cfg['n']} private rows, {cfg['queries']} probes, "
        f"{summary['data']['public']} public rows; encoder: {summary['data']['encoder']}. "
        f"delta = {cfg['delta']:g}, analytic Gaussian calibration (Balle-Wang), seed "
        f"{cfg['seed']}. Wall time {summary['seconds'] / 60:.1f} min.",
        f"Chance Recall@1 / NN accuracy (sum of squared class shares): "
        f"{summary['data']['chance_recall_at_1']:.3f}.",
        "",
    ]


def _regime_i_lines(summary: dict) -> list[str]:
    """Score-vector releases: verification, retrieval and threshold recalibration tables."""
    cfg = summary["config"]
    chance = summary["data"]["chance_recall_at_1"]
    lines = [
        "## Regime (i): score vector per probe",
        "",
        "Guarantee: each probe's released vector is (epsilon, delta)-DP for replacing one "
        "gallery record (sensitivity 2). The "
        f"{cfg['queries']} probes are {cfg['queries']} separate releases: together they are NOT "
        "(epsilon, delta)-DP at the per-probe epsilon. Composed exactly (mu-GDP, as the "
        f"analyst's ledger charges them), all {cfg['queries']} probes together are "
        f"(composed epsilon, delta = {cfg['delta']:g})-DP: the column 'all probes'.",
        "",
        "| epsilon per probe | all probes | sigma | release | AUC | TAR@1e-2 | TAR@1e-3 | EER | "
        "Recall@1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    r1 = summary["regime_i"]
    c = r1["clean"]
    lines.append(f"| - | - | 0 | clean | {_f(c['auc'])} | {_f(c['tar_at_far_1e-2'])} | "
                 f"{_f(c['tar_at_far_1e-3'])} | {_f(c['eer'])} | {_f(c['recall_at_1'])} |")
    for r in r1["epsilons"]:
        total = f"{r['composed_epsilon']:.4g}" if "composed_epsilon" in r else "-"
        for name in ("noisy", "clipped"):
            v = r[name]
            lines.append(f"| {r['epsilon']:g} | {total} | {r['sigma']:.3g} | {name} | "
                         f"{_f(v['auc'])} | "
                         f"{_f(v['tar_at_far_1e-2'])} | {_f(v['tar_at_far_1e-3'])} | "
                         f"{_f(v['eer'])} | {_f(v['recall_at_1'])} |")
    totals = ", ".join(f"{r['epsilon']:g} -> {r['composed_epsilon']:.4g}" for r in r1["epsilons"]
                       if "composed_epsilon" in r)
    if totals:
        lines += ["", f"Composed totals of the {cfg['queries']} probes at delta = "
                  f"{cfg['delta']:g} (per-probe epsilon -> all probes): {totals}."]
    lines += ["", "Threshold recalibration (target FAR 1e-2; thresholds from public impostor "
              "scores, FAR measured on the private pairs, clipped release):", "",
              "| epsilon | clean tau0 | FAR at tau0 | recalibrated tau | FAR at tau | "
              "TAR at tau | feasible |", "|---|---|---|---|---|---|---|"]
    for r in r1["epsilons"]:
        v = r["recalibration"]["0.01"]
        lines.append(f"| {r['epsilon']:g} | {_f(v['clean_threshold'])} | "
                     f"{_f(v['far_at_clean_threshold'])} | {_f(v['recalibrated_threshold'])} | "
                     f"{_f(v['far_at_recalibrated_threshold'])} | "
                     f"{_f(v['tar_at_recalibrated_threshold'])} | {v['feasible']} |")
    lines += ["", "Clipping and ties: at large sigma many scores clip to exactly 1; a tie at the "
              "top of the ranking is broken at random (Recall@1) and cannot be split by a "
              "threshold, so when more than the target FAR of the impostor scores sit at 1 the "
              "clipped TAR at that FAR is 0 (the endpoint effect of paper Remark G.13) and the "
              "recalibration reports the target infeasible (Proposition G.25). The unclipped "
              "noisy vector is the same DP release before a post-processing step; it is shown "
              "for comparison."]
    near = _near_chance_up_to(r1["epsilons"], "clipped", "recall_at_1", chance, 0.05)
    if near is not None:
        lines += ["", f"Near chance: the largest epsilon on the grid where the clipped release's "
                  f"Recall@1 is within 0.05 of chance ({chance:.3f}) is {near:g}."]
    lines.append("")
    return lines


def _release_label(v: dict) -> str:
    proj = v.get("projection")
    if not proj:
        return "noisy (no projection)"
    return proj.get("label") or f"{proj['iterations']} it. / gap {proj['residual']:.1e}"


def _calibration_lines(cfg: dict, cal: str, block: dict, chance: float,
                       identity: float | None) -> list[str]:
    """One calibration of the Gram release: its guarantee, its table (every release beside the
    identity's error), and what each release states about itself (its data-free baseline)."""
    lines = ["", f"### {cal} calibration (sensitivity {block['sensitivity']:.4g})", "",
             f"**Guarantee: {block['guarantee']}.**", ""]
    if cal == "per_entry":
        rows = block["epsilons"]
        rec_sens = gram_record_sensitivity(cfg["n"])
        pairs = ", ".join(
            f"{r['epsilon']:g} -> "
            f"{r.get('record_epsilon') or gaussian_epsilon(r['sigma'], cfg['delta'], rec_sens):.3g}"
            for r in rows)
        lines += [f"Record-level epsilon actually provided by these per-entry releases "
                  f"(same sigma, Delta_F = 2 sqrt(2 (n - 1)), delta = {cfg['delta']:g}): "
                  f"{pairs}.", ""]
    ident = "-" if identity is None else _f(identity)
    lines += [f"Identity matrix (releasing nothing, (0, 0)-DP): squared Frobenius error {ident} "
              "(every row); 'vs identity' is a release's error divided by it (above 1: worse "
              "than releasing nothing).", "",
              "| epsilon | sigma | release | 10-NN acc | Recall@1 | pair AUC | NMI | "
              "sq. Frobenius error | vs identity |", "|---|---|---|---|---|---|---|---|---|"]
    for r in block["epsilons"]:
        for name in GRAM_RELEASES:
            if name not in r:
                continue
            v = r[name]
            ratio = ("-" if not identity else f"{v['frobenius_sq_error'] / identity:.3g}")
            lines.append(f"| {r['epsilon']:g} | {r['sigma']:.3g} | {_release_label(v)} | "
                         f"{_f(v['knn_accuracy'])} | {_f(v['recall_at_1'])} | "
                         f"{_f(v['pair_auc'])} | {_f(v['nmi'])} | "
                         f"{_f(v['frobenius_sq_error'])} | {ratio} |")
    stated = [r for r in block["epsilons"] if "baseline" in r]
    if stated:
        lines += ["", "What the Newton release states about itself, without the clean Gram "
                  "(data-free baseline: public bound on its expected error, SURE estimate, DP "
                  "estimate of the identity's error from the same noise; no extra privacy), "
                  "against the truth measured here:", "",
                  "| epsilon | bound | SURE +- se | identity est. +- se | stated verdict | "
                  "useful epsilon | true: Newton / identity |", "|---|---|---|---|---|---|---|"]
        for r in stated:
            b = r["baseline"]
            sure = ("-" if b["projected_estimate"] is None else
                    f"{_f(b['projected_estimate'])} +- {_f(b['projected_stderr'])}")
            verdict = ("no better than identity" if b["no_better_than_identity"]
                       else "closer than identity")
            useful = "-" if b["useful_epsilon"] is None else f"{b['useful_epsilon']:.3g}"
            if "lower limit" in b["useful_epsilon_basis"]:
                useful += " (at least)"
            truth = ("-" if not identity else
                     f"{r['newton']['frobenius_sq_error'] / identity:.3g}")
            lines.append(f"| {r['epsilon']:g} | {_f(b['projected_bound'])} | {sure} | "
                         f"{_f(b['identity_estimate'])} +- {_f(b['identity_stderr'])} | "
                         f"{verdict} | {useful} | {truth} |")
    for name in GRAM_RELEASES:
        near = _near_chance_up_to([r for r in block["epsilons"] if name in r], name,
                                  "recall_at_1", chance, 0.05)
        if near is not None:
            lines.append(f"\nNear chance ({cal}, {name}): the largest epsilon on the grid "
                         f"where Recall@1 is within 0.05 of chance is {near:g}.")
    return lines


def _regime_ii_lines(summary: dict) -> list[str]:
    """Gram releases: the clean reference, then one table per calibration."""
    cfg = summary["config"]
    r2 = summary["regime_ii"]
    lines = ["## Regime (ii): Gram matrix", ""]
    cl = r2["clean"]
    lines.append(f"Clean Gram: 10-NN accuracy {_f(cl['knn_accuracy'])}, Recall@1 "
                 f"{_f(cl['recall_at_1'])}, pair AUC {_f(cl['pair_auc'])}, NMI {_f(cl['nmi'])}.")
    if "identity_frobenius_sq_error" in r2:
        lines.append(f"Reference errors: ||S||_F^2 = {_f(r2['clean_frobenius_sq'])}; releasing "
                     f"the identity matrix (no information, feasible) has squared Frobenius error "
                     f"{_f(r2['identity_frobenius_sq_error'])}. A projected release with an error "
                     "near that value carries almost no information about S.")
    lines.append(f"Projection: Newton (the release's default) runs to a relative feasibility gap "
                 f"of {cfg['tol']:g}: the metric projection. AAP and Dykstra are capped at "
                 f"{cfg['aap_iter']} and {cfg['dykstra_iter']} iterations and are NOT converged "
                 "there (each row says the iterations run and the relative gap reached); their "
                 "output is made a feasible correlation matrix by the final normalisation, so it "
                 "is neither AAP's limit nor the metric projection.")
    for cal, block in r2["calibrations"].items():
        lines += _calibration_lines(cfg, cal, block, summary["data"]["chance_recall_at_1"],
                                    r2.get("identity_frobenius_sq_error"))
    return lines


def _scaling_lines(summary: dict) -> list[str]:
    """Frobenius error of the noisy and AAP-projected Gram as the collection grows."""
    cfg = summary["config"]
    sc = summary["scaling"]
    lines = ["", f"## Frobenius error vs n (record-level, epsilon = {sc['epsilon']:g}; Newton "
             f"to gap {cfg['tol']:g}, AAP capped at {cfg['scaling_iter']} iterations, NOT "
             "converged)", "",
             "| n | sigma | noisy | expected noisy | AAP (capped) | Newton | identity | "
             "Newton / identity | stated verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sc["rows"]:
        note = " (sampled with replacement)" if r["sampled_with_replacement"] else ""
        newton, ident = r.get("frobenius_sq_newton"), r.get("frobenius_sq_identity")
        ratio = "-" if not (newton and ident) else f"{newton / ident:.3g}"
        verdict = "-"
        if "baseline" in r:
            verdict = ("no better than identity" if r["baseline"]["no_better_than_identity"]
                       else "closer than identity")
        lines.append(f"| {r['n']}{note} | {r['sigma']:.4g} | {_f(r['frobenius_sq_noisy'])} | "
                     f"{_f(r['expected_frobenius_sq_noisy'])} | {_f(r['frobenius_sq_aap'])} | "
                     f"{_f(newton)} | {_f(ident)} | {ratio} | {verdict} |")
    lines.append("")
    return lines


def markdown(summary: dict) -> str:
    """Human summary: command, guarantees next to the numbers, tables, near-chance statements."""
    return "\n".join(_header_lines(summary) + _regime_i_lines(summary)
                     + _regime_ii_lines(summary) + _scaling_lines(summary))


# ---- command line -----------------------------------------------------------------------------

def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(t) for t in text.split(",") if t.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``scores`` experiment (``noisyanchor experiment scores``)."""
    p = sub.add_parser("scores", help="ScoreShield DP score-vector and Gram releases on digits")
    d = ScoresConfig()
    p.add_argument("--n", type=int, default=d.n, help="private collection size")
    p.add_argument("--queries", type=int, default=d.queries, help="probes for regime (i)")
    p.add_argument("--epsilons", type=_floats, default=d.epsilons,
                   help="comma-separated epsilon grid")
    p.add_argument("--delta", type=float, default=d.delta,
                   help="delta of every (epsilon, delta) release")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="seed of the data split and of every release's noise")
    p.add_argument("--aap-iter", type=int, default=d.aap_iter, help="AAP iteration cap")
    p.add_argument("--dykstra-iter", type=int, default=d.dykstra_iter,
                   help="Dykstra iteration cap")
    p.add_argument("--tol", type=float, default=d.tol, help="projection stopping tolerance")
    p.add_argument("--scaling-n", type=_ints, default=d.scaling_n,
                   help="comma-separated n for the Frobenius ratio study")
    p.add_argument("--scaling-epsilon", type=float, default=d.scaling_epsilon,
                   help="epsilon of the Frobenius ratio study")
    p.add_argument("--scaling-iter", type=int, default=d.scaling_iter,
                   help="projection iteration cap of the Frobenius ratio study")
    p.add_argument("--no-spectral", action="store_true", help="skip spectral clustering")
    p.add_argument("--threads", type=int, default=1,
                   help="BLAS threads (1 is fastest on a shared machine)")
    p.add_argument("--out", default=d.out, help="output directory")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results already in --out (refused otherwise)")
    p.add_argument("--json", action="store_true", help="print the summary JSON")
    p.add_argument("--render", metavar="SUMMARY_JSON", default=None,
                   help="only redraw figures and summary.md from an existing summary.json")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import shlex
    import sys

    if args.render:
        src = Path(args.render)
        summary = json.loads(src.read_text())
        figures(summary, src.parent)
        (src.parent / "summary.md").write_text(markdown(summary))
        print(f"redrawn {src.parent}/ (summary.md, regime_i.png, regime_ii.png, scaling.png)")
        return 0
    if (Path(args.out) / "summary.json").exists() and not args.overwrite:
        raise InvalidInputError(f"{args.out} already holds results (summary.json); choose "
                                "another --out or pass --overwrite to replace them")
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    config = ScoresConfig(
        n=args.n, queries=args.queries, epsilons=tuple(args.epsilons), delta=args.delta,
        seed=args.seed, aap_iter=args.aap_iter, dykstra_iter=args.dykstra_iter, tol=args.tol,
        scaling_n=tuple(args.scaling_n), scaling_epsilon=args.scaling_epsilon,
        scaling_iter=args.scaling_iter, spectral=not args.no_spectral, out=args.out,
        command=f"noisyanchor {argv}")
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - installed with scikit-learn
        summary = run_scores(config)
    else:
        with threadpool_limits(limits=args.threads):
            summary = run_scores(config)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(markdown(summary))
    print(f"written to {config.out}/ (summary.json, summary.md, regime_i.png, regime_ii.png, "
          f"scaling.png) in {summary['seconds'] / 60:.1f} min")
    return 0
