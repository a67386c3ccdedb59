"""Membership inference: against the downstream model returned to the sites, and against the
collaboration matrix ``Z`` the analyst holds.

Against the returned model. The attacker is a site: it holds the model (with its preprocessing
``u = (z - mu) / s``) and its own map ``N_c``, both returned to it, so it can put any record
``x`` (with its label ``y``, uploaded in the clear) into the model's frame as
``z' = N_c(x F O_c + 1 Psi_c^T)``. Members are the targets' training records, non-members
their test records (same participants, same population, never trained on). Two attacks:

* loss threshold (Yeom et al., CSF 2018): score ``log p(y | z')``, higher for members;
* shadow models (Shokri et al., S&P 2017; one attack model for every class, as in Salem et al.,
  NDSS 2019): ``K`` shadow models with the returned model's recipe and hyper-parameter, each
  trained on a random half of the public pool mapped through ``N_c``; a logistic regression on
  the features ``[log p(y | z), log max_k p(k | z), entropy of p(. | z)]`` of the shadow models'
  in/out records scores the candidates.

* LiRA (Carlini et al., S&P 2022; :mod:`experiments.lira`), online and offline, with the
  shadow models of the returned model's recipe on random halves of the attacker's population
  (the public pool mapped through ``N_c``; online also the candidates).

Against ``Z``. The attacker is the analyst with a reconstruction ``X^`` of the targets' rows (the
strongest attack of a threat): score ``-min_j ||x F - x^_j||``. Members are the targets'
uploaded records *other than the ones the attacker already knows* (the known-input attacker's
``m`` records of each target, :func:`unknown_rows`): a record it was given proves nothing;
non-members are records of the same population never uploaded nor public.

Each attack is summarised by the area under its ROC curve (AUC; 0.5 is chance) and the true
positive rate at 1% and 0.1% false positives (the largest TPR of the empirical ROC with FPR at
most that; chance is the FPR): the average-case and the worst-case view of the same scores.
With fewer than 1,000 non-members, "FPR <= 0.1%" means no false positive at all
(``fpr_resolution`` is one non-member's share).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from noisyanchor.common.downstream import BENCH_MODELS, FittedDownstream, fit_model
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.lira import label_probability, lira, logit_confidence

#: False-positive rates at which the true-positive rate is reported, by JSON key.
LOW_FPRS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0_1pct_fpr": 0.001}
#: Probability floor before logarithms (k-NN gives exact zeros).
_FLOOR = 1e-12


def roc_metrics(members: np.ndarray, non_members: np.ndarray) -> dict[str, Any]:
    """AUC and TPR at each of :data:`LOW_FPRS` of scores that should be higher for members."""
    from sklearn.metrics import roc_auc_score, roc_curve

    members, non_members = np.asarray(members, float), np.asarray(non_members, float)
    if not len(members) or not len(non_members):
        raise InvalidInputError("membership metrics need members and non-members")
    truth = np.r_[np.ones(len(members)), np.zeros(len(non_members))]
    scores = np.r_[members, non_members]
    fpr, tpr, _ = roc_curve(truth, scores)
    return {"auc": float(roc_auc_score(truth, scores)),
            **{key: float(tpr[fpr <= at].max(initial=0.0)) for key, at in LOW_FPRS.items()},
            "fpr_resolution": 1.0 / len(non_members),
            "members": len(members), "non_members": len(non_members)}


def unknown_rows(rows: np.ndarray, known: np.ndarray | None) -> np.ndarray:
    """Mask of a target's records (bank indices ``rows``) the attacker does not already know
    (``known``: bank indices of its known records, None for none): the members it is scored
    on."""
    rows = np.asarray(rows)
    return np.ones(len(rows), dtype=bool) if known is None else ~np.isin(rows, known)


def features(model: FittedDownstream, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[log p(y | z), log max_k p(k | z), entropy]`` under a fitted model, one row per
    record (a label the model never saw gets the floor probability)."""
    est = model.estimator
    prob = np.clip(est.predict_proba((np.asarray(z, float) - model.center) / model.scale),
                   _FLOOR, 1.0)
    own = label_probability(prob, est.classes_, y, _FLOOR)
    return np.column_stack([np.log(own), np.log(prob.max(axis=1)),
                            -np.sum(prob * np.log(prob), axis=1)])


def _refit(model: FittedDownstream, name: str, z: np.ndarray,
           y: np.ndarray) -> tuple[FittedDownstream, bool]:
    """A shadow: the returned model's recipe (``name`` and its chosen hyper-parameter) trained on
    ``z`` with the returned preprocessing; and whether its optimiser converged."""
    est, converged = fit_model(BENCH_MODELS[name], model.utility.c,
                               (z - model.center) / model.scale, y)
    return FittedDownstream(model.utility, est, model.center, model.scale), converged


def model_membership(model: FittedDownstream, name: str, members: tuple[np.ndarray, np.ndarray],
                     non_members: tuple[np.ndarray, np.ndarray],
                     shadow: tuple[np.ndarray, np.ndarray] | None, rng: np.random.Generator,
                     shadow_models: int = 2) -> dict[str, Any]:
    """Both attacks against one returned model (module docstring).

    Parameters
    ----------
    model : FittedDownstream
        The returned model.
    name : str
        Its recipe (a key of :data:`common.downstream.BENCH_MODELS`), for the shadows.
    members, non_members : (z, y) pairs
        Candidates in the model's frame as the attacker computes them, with their labels.
    shadow : (z, y) pair or None
        The attacker's own labelled records in the model's frame (None: no shadow attack).
    shadow_models : int
        ``K``.
    """
    fm, fn = features(model, *members), features(model, *non_members)
    # the returned model's accuracy on members vs non-members: its overfitting, the signal
    out: dict[str, Any] = {"accuracy": {
        kind: float(np.mean(model.predict(z) == y)) for kind, (z, y) in
        (("members", members), ("non_members", non_members))},
        "loss_threshold": roc_metrics(fm[:, 0], fn[:, 0])}
    if shadow is None:
        return out
    from sklearn.linear_model import LogisticRegression

    zs, ys = shadow
    train_x, train_y = [], []
    converged = 0
    for _ in range(shadow_models):
        inside = np.zeros(len(ys), dtype=bool)
        inside[rng.permutation(len(ys))[: len(ys) // 2]] = True
        if len(np.unique(ys[inside])) < 2:
            continue
        fitted, ok = _refit(model, name, zs[inside], ys[inside])
        converged += ok
        train_x.append(features(fitted, zs, ys))
        train_y.append(inside.astype(int))
    if not train_x:
        return out
    attack, _ = fit_model(lambda c: LogisticRegression(C=c, max_iter=1000), 1.0,
                          np.vstack(train_x), np.concatenate(train_y))
    out["shadow"] = {**roc_metrics(attack.decision_function(fm), attack.decision_function(fn)),
                     "shadow_models": len(train_x), "shadow_models_converged": converged}
    out.update(lira_membership(model, name, members, non_members, shadow, rng, shadow_models))
    return out


def _confidence(model: FittedDownstream, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``phi`` of :func:`experiments.lira.logit_confidence` under a fitted model."""
    est = model.estimator
    return logit_confidence(est.predict_proba((np.asarray(z, float) - model.center) / model.scale),
                            est.classes_, y)


def lira_membership(model: FittedDownstream, name: str, members: tuple[np.ndarray, np.ndarray],
                    non_members: tuple[np.ndarray, np.ndarray],
                    shadow: tuple[np.ndarray, np.ndarray], rng: np.random.Generator,
                    shadow_models: int) -> dict[str, Any]:
    """LiRA online (``lira``) and offline (``lira_offline``) against the returned model, with
    ``shadow_models`` shadows of its recipe each (:mod:`experiments.lira`); arguments as
    :func:`model_membership`'s."""
    zc = np.vstack([members[0], non_members[0]])
    yc = np.concatenate([members[1], non_members[1]])
    n = len(members[1])

    def fit(z: np.ndarray, y: np.ndarray) -> FittedDownstream:
        return _refit(model, name, z, y)[0]

    out = {}
    for key, online in (("lira", True), ("lira_offline", False)):
        got = lira(_confidence, fit, model, (zc, yc), shadow, rng, shadow_models, online)
        out[key] = {**roc_metrics(got.scores[:n], got.scores[n:]),
                    "shadow_models": got.shadow_models, "global_variance": True}
    return out


def z_membership(reconstruction: np.ndarray, members: np.ndarray,
                 non_members: np.ndarray) -> dict[str, Any]:
    """The reconstruction-distance attack against ``Z``: scores ``-min_j ||x - x^_j||`` of
    candidates ``x`` (working space) against the reconstructed rows ``x^_j``."""
    recon = np.asarray(reconstruction, float)
    sq = np.sum(recon * recon, axis=1)

    def score(x: np.ndarray) -> np.ndarray:
        d2 = np.sum(x * x, axis=1)[:, None] + sq[None, :] - 2 * x @ recon.T
        return -np.sqrt(np.maximum(d2.min(axis=1), 0.0))

    return roc_metrics(score(np.asarray(members, float)), score(np.asarray(non_members, float)))


def attribute_inference(reconstruction: np.ndarray, targets: np.ndarray,
                        public: np.ndarray) -> dict[str, Any]:
    """Attribute inference from ``Z`` (tabular data, working space = the columns): the attacker
    knows every column of a target record ``x`` but one, ``j``; it takes the reconstructed row
    nearest to ``x`` on the other columns and reads its column ``j``. Without ``Z`` the best it
    has is a least-squares regression of column ``j`` on the others, fitted on the public pool.
    Done for every ``j`` in turn.

    Parameters
    ----------
    reconstruction : (n, d) ndarray
        ``X^``, the attacker's reconstruction of the targets' rows.
    targets : (t, d) ndarray
        The target records (their true columns), members of ``Z``.
    public : (m, d) ndarray
        The public pool (the attacker's own records).

    Returns
    -------
    dict
        Per column the RMSE through ``Z`` (``rmse_z``), by the regression (``rmse_public``) and
        of the pool's mean (``rmse_mean``); ``median_gain``: the median over columns of
        ``1 - rmse_z / rmse_public`` (> 0: ``Z`` tells more than the public data).
    """
    recon, x, pool = (np.asarray(a, float) for a in (reconstruction, targets, public))
    d = x.shape[1]
    if recon.shape[1] != d or pool.shape[1] != d or d < 2:
        raise InvalidInputError(f"attribute inference needs rows of one width >= 2; got "
                                f"{recon.shape}, {x.shape}, {pool.shape}")
    per = []
    for j in range(d):  # one held-out column at a time (d is a table's width: tens)
        rest = np.delete(np.arange(d), j)
        d2 = (np.sum(x[:, rest] ** 2, axis=1)[:, None] + np.sum(recon[:, rest] ** 2, axis=1)
              - 2 * x[:, rest] @ recon[:, rest].T)
        via_z = recon[np.argmin(d2, axis=1), j]
        design = np.column_stack([pool[:, rest], np.ones(len(pool))])
        coef, *_ = np.linalg.lstsq(design, pool[:, j], rcond=None)
        via_pool = np.column_stack([x[:, rest], np.ones(len(x))]) @ coef
        per.append({"rmse_z": float(np.sqrt(np.mean((via_z - x[:, j]) ** 2))),
                    "rmse_public": float(np.sqrt(np.mean((via_pool - x[:, j]) ** 2))),
                    "rmse_mean": float(np.sqrt(np.mean((pool[:, j].mean() - x[:, j]) ** 2)))})
    gains = [1 - c["rmse_z"] / c["rmse_public"] for c in per if c["rmse_public"] > 0]
    return {"columns": per, "median_gain": float(np.median(gains)) if gains else None,
            "targets": len(x)}
