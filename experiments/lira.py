"""The likelihood-ratio membership attack (LiRA; Carlini et al., "Membership Inference Attacks
From First Principles", S&P 2022), against a returned classifier.

The attacker holds the returned model ``f``, a population ``P`` of labelled records in the
model's frame (its own: the public pool, and in the online variant also the candidates it
queries with) and the model's recipe. For a candidate ``(x, y)`` the statistic is the
logit-scaled confidence (Carlini et al., Section IV-B)

    phi(x, y) = log p - log (1 - p),   p = f(x)_y,

which is close to Gaussian over the randomness of training. ``K`` shadow models are trained with
the recipe, each on a random half of ``P``. For each candidate the shadows that did not train on
it give ``phi_out`` samples (mean ``mu_out(x)``), those that did ``phi_in`` samples
(``mu_in(x)``). With few shadows (here 8-16) each per-example variance rests on a handful of
samples, so both variants use a *global* variance: the residuals ``phi - mu(x)`` pooled over
every candidate (the paper's fixed-variance option, Section VI-A, for fewer than 64 shadows).

* online (``online=True``): the candidates join ``P``, so each is IN for about half the
  shadows; the score is the log likelihood ratio
  ``log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2)`` (eq. (4) of the paper).
* offline (``online=False``): the shadows train on the attacker's own records only, every
  candidate is OUT for every shadow; the one-sided score ``(phi - mu_out(x)) / s_out`` (its
  Gaussian tail, Section VI-C, is monotone in it, so the ROC is the same).

Each attack is reported by its AUC and its true-positive rate at 0.1% and 1% false positives
(the paper's low-FPR view; :func:`experiments.membership.roc_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError

#: Probability clip before the logit (exact 0 and 1 from k-NN or a lookup stay finite).
_CLIP = 1e-12


def label_probability(prob: np.ndarray, classes: np.ndarray, y: np.ndarray,
                      floor: float = _CLIP) -> np.ndarray:
    """``p_y = f(x)_y`` of every row, at least ``floor`` (a label the model never saw: the
    floor).

    Parameters
    ----------
    prob : (n, c) ndarray
        ``f(x)``, class probabilities in the order of ``classes``.
    classes : (c,) ndarray
    y : (n,) ndarray
        Each row's label.
    """
    column = {c: k for k, c in enumerate(np.asarray(classes).tolist())}
    idx = np.asarray([column.get(label, -1) for label in np.asarray(y).tolist()])
    p = np.where(idx >= 0, prob[np.arange(len(prob)), np.maximum(idx, 0)], floor)
    return np.maximum(p, floor)


def logit_confidence(prob: np.ndarray, classes: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``phi = log p_y - log(1 - p_y)`` of every row, ``p_y`` clipped to ``[c, 1 - c]``
    (arguments as :func:`label_probability`'s)."""
    p = np.minimum(label_probability(prob, classes, y), 1 - _CLIP)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class LiraScores:
    """Per-candidate LiRA scores (higher: more likely a member) and their calibration.

    Attributes
    ----------
    scores : (n,) ndarray
    phi : (n,) ndarray
        ``phi`` of each candidate under the target model.
    sigma_in, sigma_out : float
        Global standard deviations ``s_in`` (nan offline) and ``s_out``.
    shadow_models : int
        ``K``.
    """

    scores: np.ndarray
    phi: np.ndarray
    sigma_in: float
    sigma_out: float
    shadow_models: int


def _pooled(phi: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, float]:
    """Per-row mean of ``phi`` over the shadows ``mask`` selects, and the global standard
    deviation of the residuals (rows with no sample get the mean of the others' means)."""
    count = mask.sum(axis=0)
    mean = np.where(count > 0, (phi * mask).sum(axis=0) / np.maximum(count, 1), np.nan)
    if not np.isfinite(mean).any():
        raise InvalidInputError("LiRA: no shadow model gives a sample on this side")
    mean = np.where(np.isfinite(mean), mean, np.nanmean(mean))
    resid = (phi - mean)[mask]
    sd = float(np.sqrt(np.mean(resid ** 2))) if resid.size > 1 else 0.0
    return mean, max(sd, 1e-6)  # a floor: a lookup's shadows agree exactly


def lira(confidence: Callable[[Any, np.ndarray, np.ndarray], np.ndarray],
         fit: Callable[[np.ndarray, np.ndarray], Any], target: Any,
         candidates: tuple[np.ndarray, np.ndarray], population: tuple[np.ndarray, np.ndarray],
         rng: np.random.Generator, shadow_models: int = 16, online: bool = True) -> LiraScores:
    """LiRA scores of ``candidates`` against ``target`` (module docstring).

    Parameters
    ----------
    confidence : callable ``(model, z, y) -> phi``
        The logit-scaled confidence of a model on labelled rows (:func:`logit_confidence`).
    fit : callable ``(z, y) -> model``
        The target's recipe: a shadow trained on ``(z, y)``.
    target
        The returned model.
    candidates : (z, y), ``(n, d)`` and ``(n,)``
        The records scored.
    population : (z, y), ``(m, d)`` and ``(m,)``
        The attacker's own records (never candidates).
    shadow_models : int
        ``K``; a shadow whose half holds a single class is skipped.
    online : bool
        Whether the candidates join the shadows' population.
    """
    zc, yc = (np.asarray(a) for a in candidates)
    zp, yp = (np.asarray(a) for a in population)
    if len(zc) != len(yc) or len(zp) != len(yp) or not len(zc) or not len(zp):
        raise InvalidInputError("LiRA needs candidates and a population, each rows with labels")
    pool_z, pool_y = (np.vstack([zp, zc]), np.concatenate([yp, yc])) if online else (zp, yp)
    n_pool = len(pool_y)
    phis, ins = [], []
    for _ in range(shadow_models):
        inside = np.zeros(n_pool, dtype=bool)
        inside[rng.permutation(n_pool)[: n_pool // 2]] = True
        if len(np.unique(pool_y[inside])) < 2:
            continue
        shadow = fit(pool_z[inside], pool_y[inside])
        phis.append(confidence(shadow, zc, yc))
        ins.append(inside[len(yp):] if online else np.zeros(len(yc), dtype=bool))
    if not phis:
        raise InvalidInputError("LiRA: every shadow's half held a single class")
    phi_s, in_s = np.asarray(phis), np.asarray(ins)
    observed = confidence(target, zc, yc)
    mu_out, s_out = _pooled(phi_s, ~in_s)
    if not online:
        return LiraScores((observed - mu_out) / s_out, observed, float("nan"), s_out, len(phis))
    mu_in, s_in = _pooled(phi_s, in_s)
    score = (-0.5 * ((observed - mu_in) / s_in) ** 2 - np.log(s_in)
             + 0.5 * ((observed - mu_out) / s_out) ** 2 + np.log(s_out))
    return LiraScores(score, observed, s_in, s_out, len(phis))
