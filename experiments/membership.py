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

Against ``Z``. The attacker is the analyst with a reconstruction ``X^`` of the targets' rows (the
strongest attack of a threat): score ``-min_j ||x F - x^_j||``. Members are the targets'
uploaded records, non-members records of the same population never uploaded nor public.

Each attack is summarised by the area under its ROC curve (AUC; 0.5 is chance) and the true
positive rate at 1% false positives (the largest TPR of the empirical ROC with FPR <= 0.01;
0.01 is chance): the average-case and the worst-case view of the same scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from noisyanchor.common.downstream import MODELS, FittedDownstream, fit_model
from noisyanchor.common.errors import InvalidInputError

#: False-positive rate at which the true-positive rate is reported.
LOW_FPR = 0.01
#: Probability floor before logarithms (k-NN gives exact zeros).
_FLOOR = 1e-12


def roc_metrics(members: np.ndarray, non_members: np.ndarray) -> dict[str, Any]:
    """AUC and TPR at :data:`LOW_FPR` of scores that should be higher for members."""
    from sklearn.metrics import roc_auc_score, roc_curve

    members, non_members = np.asarray(members, float), np.asarray(non_members, float)
    if not len(members) or not len(non_members):
        raise InvalidInputError("membership metrics need members and non-members")
    truth = np.r_[np.ones(len(members)), np.zeros(len(non_members))]
    scores = np.r_[members, non_members]
    fpr, tpr, _ = roc_curve(truth, scores)
    return {"auc": float(roc_auc_score(truth, scores)),
            "tpr_at_1pct_fpr": float(tpr[fpr <= LOW_FPR].max(initial=0.0)),
            "members": len(members), "non_members": len(non_members)}


def features(model: FittedDownstream, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[log p(y | z), log max_k p(k | z), entropy]`` under a fitted model, one row per
    record (a label the model never saw gets the floor probability)."""
    est = model.estimator
    prob = np.clip(est.predict_proba((np.asarray(z, float) - model.center) / model.scale),
                   _FLOOR, 1.0)
    column = {c: k for k, c in enumerate(est.classes_.tolist())}
    idx = np.asarray([column.get(label, -1) for label in np.asarray(y).tolist()])
    own = np.where(idx >= 0, prob[np.arange(len(prob)), np.maximum(idx, 0)], _FLOOR)
    return np.column_stack([np.log(own), np.log(prob.max(axis=1)),
                            -np.sum(prob * np.log(prob), axis=1)])


def _refit(model: FittedDownstream, name: str, z: np.ndarray,
           y: np.ndarray) -> tuple[FittedDownstream, bool]:
    """A shadow: the returned model's recipe (``name`` and its chosen hyper-parameter) trained on
    ``z`` with the returned preprocessing; and whether its optimiser converged."""
    est, converged = fit_model(MODELS[name], model.utility.c, (z - model.center) / model.scale, y)
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
        Its recipe (a key of :data:`common.downstream.MODELS`), for the shadows.
    members, non_members : (z, y) pairs
        Candidates in the model's frame as the attacker computes them, with their labels.
    shadow : (z, y) pair or None
        The attacker's own labelled records in the model's frame (None: no shadow attack).
    shadow_models : int
        ``K``.
    """
    fm, fn = features(model, *members), features(model, *non_members)
    out = {"loss_threshold": roc_metrics(fm[:, 0], fn[:, 0])}
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
