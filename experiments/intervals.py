"""Confidence intervals of the report's claims: percentile bootstraps over the draws (or, for
single noiseless runs, over the test records), and the verdict each interval supports.

Verdicts (:data:`VERDICTS`): ``holds`` when the 95% interval of the claim's statistic lies above
zero, ``fails`` when it lies below, ``undecided`` when it covers zero, ``not reached`` when the
data do not reach what the claim is judged at, ``not enough draws`` when a compared method has
fewer than the stated minimum of draws. Exact claims (equalities of coupled runs) have no
interval: they hold or fail.

Statistics:

* matched-linkage margin (:func:`matched_margin`): anchor noise minus private-data noise in
  fitted utility where each method's strongest-attack linkage fit first reaches the level
  ``L``, ``Delta(L) = U_an(v_an(L)) - U_pn(sigma_pn(L))``, over the levels of a grid both
  point fits reach. The claim (anchor noise keeps more utility at every such level) holds when
  the interval of the worst margin ``min_L Delta(L)`` lies above zero, and fails when the
  interval of the best margin ``max_L Delta(L)`` lies below zero (behind at every level); in
  between it is undecided (uncertain, or ahead at some levels and behind at others), and the
  report shows both intervals, the two the verdict read (:func:`margin_verdict`). The worst
  margin's interval below zero alone is no failure: the smallest of several noisy margins sits
  below zero even when the methods are equal. Each resample draws every method's draws with
  replacement (the methods' draws are independent) and refits all four splines.
* paired mean difference (:func:`paired_min_difference`): ``min_k mean(a - b_k)`` over draws,
  resampled by draw (OP against MP and against AM on the same draws).
* over replicated deployments (``groups``, :func:`nested_resample`): the same statistics on the
  draws of every deployment pooled, with a two-stage bootstrap (Davison and Hinkley 1997,
  Section 3.8): deployments drawn with replacement, then each drawn deployment's draws with
  replacement, so the interval carries the variation between deployments (split, ``F``,
  anchor, galleries) as well as between draws. With few deployments (3) the first stage has
  few distinct outcomes: the interval is then wide rather than exact.
* deployment level (:func:`deployment_level`): the per-deployment estimates ``theta_1..theta_k``
  as ``k`` observations, a t interval with ``k - 1`` degrees of freedom (the verdict's; for a
  matched-linkage claim one of the worst and one of the best margins), and
  beside it the DerSimonian-Laird random-effects interval with each deployment's standard error
  read off its bootstrap interval and the share of variation between deployments ``I^2``
  (:func:`random_effects`). With ``k = 3`` the t quantile is 4.30: these intervals are wider
  than the two-stage bootstrap's, whose first stage has only 10 distinct outcomes.
* mean with its interval (:func:`mean_interval`), per draw or nested in deployments
  (membership inference: mean AUC over the rows of a noise bin).
* balanced-accuracy difference on shared test records (:func:`accuracy_difference`), resampled
  by test record.

References: Efron and Tibshirani, "An Introduction to the Bootstrap" (1993), percentile
intervals; DerSimonian and Laird, "Meta-analysis in clinical trials", Controlled Clinical
Trials 7 (1986), eq. (4)-(8); Higgins and Thompson, "Quantifying heterogeneity in a
meta-analysis", Stat. Med. 21 (2002), ``I^2``; the paper's Section 5.2.2 (splines and pointwise
bands).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.fits import fit_spline

#: Every verdict a claim can get.
VERDICTS = ("holds", "fails", "undecided", "not reached", "not enough draws")
#: Two-sided level of every interval.
CONFIDENCE = 0.95


def verdict(low: float | None, high: float | None) -> str:
    """``holds`` / ``fails`` / ``undecided`` from an interval (None: not reached)."""
    if low is None or high is None:
        return "not reached"
    if low > 0:
        return "holds"
    if high < 0:
        return "fails"
    return "undecided"


def margin_verdict(worst: Sequence[float] | None, best: Sequence[float] | None) -> str:
    """The matched-linkage verdict from the worst and best margins' intervals (module
    docstring): ``holds`` when the worst's lies above zero, ``fails`` when the best's lies below,
    else ``undecided`` (``not reached`` without a worst interval)."""
    if worst is None:
        return "not reached"
    if worst[0] > 0:
        return "holds"
    if best is not None and best[1] < 0:
        return "fails"
    return "undecided"


def percentile_interval(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The central :data:`CONFIDENCE` percentile interval of bootstrap values (NaNs, the
    resamples where the statistic is undefined, left out); Nones without any."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return None, None
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(v, [tail, 100 - tail])
    return float(low), float(high)


def nested_resample(groups: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """One two-stage bootstrap resample of series observed in the same deployments.

    ``groups[s][j]`` is the deployment of draw ``j`` of series ``s`` (the series, e.g. the
    two compared methods, share each deployment). Deployments are drawn with replacement once
    for all series; each drawn deployment's draws of every series are then drawn with
    replacement (as many as it holds). Returns the drawn indices per series.
    """
    labels = np.unique(np.concatenate([np.asarray(g) for g in groups]))
    picked = rng.choice(labels, len(labels), replace=True)
    out = []
    for g in groups:
        members = [np.flatnonzero(np.asarray(g) == k) for k in picked]
        out.append(np.concatenate([rng.choice(m, len(m), replace=True) for m in members
                                   if len(m)] or [np.zeros(0, dtype=int)]))
    return out


def _resample(sizes: Sequence[int], groups: Sequence[np.ndarray] | None,
              rng: np.random.Generator) -> list[np.ndarray]:
    """Indices of one resample of each series: by draw (independent series) or nested."""
    if groups is None:
        return [rng.integers(0, n, n) for n in sizes]
    return nested_resample(groups, rng)


def mean_interval(values: Sequence[float], rng: np.random.Generator, resamples: int,
                  groups: Sequence[int] | None = None) -> dict[str, Any]:
    """Mean of ``values`` with its percentile interval, resampled by value or, with ``groups``
    (each value's deployment), nested in deployments."""
    v = np.asarray(values, dtype=float)
    g = None if groups is None else [np.asarray(groups)]
    boots = [float(v[_resample([len(v)], g, rng)[0]].mean()) for _ in range(resamples)]
    low, high = percentile_interval(boots)
    return {"estimate": float(v.mean()), "interval": None if low is None else [low, high]}


def _curves(noise: np.ndarray, link: np.ndarray, util: np.ndarray,
            rng: np.random.Generator) -> tuple[Any, Any]:
    return (fit_spline(noise, link, rng, resamples=0), fit_spline(noise, util, rng, resamples=0))


def _utility_at(curves: tuple[Any, Any], level: float) -> float:
    """Fitted utility where the linkage fit first reaches ``level``, clipped to [0, 1] (a
    balanced accuracy; a spline fitted to a resample can overshoot near its range's ends)."""
    link, util = curves
    noise = link.first_crossing(level)
    return np.nan if noise is None else float(np.clip(util.at(noise), 0.0, 1.0))


def matched_margin(an: tuple[np.ndarray, np.ndarray, np.ndarray],
                   pn: tuple[np.ndarray, np.ndarray, np.ndarray], levels: Sequence[float],
                   rng: np.random.Generator, resamples: int,
                   headline: float | None = None,
                   groups: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """The matched-linkage margin of anchor over private-data noise with its interval.

    Parameters
    ----------
    an, pn : (noise, strongest linkage, utility) arrays of each method's draws
    levels : linkage levels of the grid; the statistic uses those both point fits reach
    resamples : bootstrap resamples
    headline : float, optional
        A level whose own margin and interval are reported too (e.g. 20%).
    groups : (an, pn) deployment of every draw, optional
        Given, the draws of several deployments are pooled and resampled nested in them
        (:func:`nested_resample`); else each method's draws are resampled independently.

    Returns
    -------
    dict
        ``levels`` judged; ``worst`` and ``best``: the point fits' smallest and largest margin
        over them with their intervals (None when no level is reached); ``verdict`` from them
        (module docstring); ``reached`` (resamples in which a judged level was reached by
        both); ``per_level`` point margins; ``headline`` (level, estimate, interval);
        ``lowest_fitted_linkage`` of each method's point fit (an, pn).
    """
    point_an, point_pn = _curves(*an, rng), _curves(*pn, rng)
    margins = {float(lvl): _utility_at(point_an, lvl) - _utility_at(point_pn, lvl)
               for lvl in levels}
    judged = [lvl for lvl, m in margins.items() if np.isfinite(m)]
    wanted = sorted(set(judged) | ({float(headline)} if headline is not None else set()))
    worst, best, at_headline = [], [], []
    for _ in range(resamples):  # each resample is its own four least-squares problems
        ia, ip = _resample((len(an[0]), len(pn[0])), groups, rng)
        try:
            boot_an = _curves(*(a[ia] for a in an), rng)
            boot_pn = _curves(*(a[ip] for a in pn), rng)
        except (ValueError, np.linalg.LinAlgError):
            continue
        got = {lvl: _utility_at(boot_an, lvl) - _utility_at(boot_pn, lvl) for lvl in wanted}
        per = [got[lvl] for lvl in judged if np.isfinite(got[lvl])]
        worst.append(min(per) if per else np.nan)
        best.append(max(per) if per else np.nan)
        if headline is not None:
            at_headline.append(got[float(headline)])
    ends: dict[str, Any] = {}
    for name, boots, pick in (("worst", worst, min), ("best", best, max)):
        low, high = percentile_interval(boots) if judged else (None, None)
        ends[name] = {"estimate": pick((margins[lvl] for lvl in judged), default=None),
                      "interval": None if low is None else [low, high]}
    state = (margin_verdict(ends["worst"]["interval"], ends["best"]["interval"]) if judged
             else "not reached")
    out: dict[str, Any] = {
        "levels": judged, **ends, "verdict": state,
        "reached": int(np.sum(np.isfinite(worst))), "resamples": len(worst),
        "lowest_fitted_linkage": [float(np.min(c[0].fit)) for c in (point_an, point_pn)],
        "per_level": {f"{lvl:.3f}": (None if not np.isfinite(m) else m)
                      for lvl, m in margins.items()}}
    if headline is not None:
        h_low, h_high = percentile_interval(at_headline)
        est = margins.get(float(headline), _utility_at(point_an, headline)
                          - _utility_at(point_pn, headline))
        out["headline"] = {"level": float(headline),
                           "estimate": None if not np.isfinite(est) else float(est),
                           "interval": None if h_low is None else [h_low, h_high]}
    return out


def paired_min_difference(a: np.ndarray, others: Sequence[np.ndarray], rng: np.random.Generator,
                          resamples: int, groups: np.ndarray | None = None) -> dict[str, Any]:
    """``min_k mean(a - b_k)`` over paired draws with its interval (resampled by draw, or
    nested in deployments with ``groups``, each draw's deployment)."""
    a = np.asarray(a, dtype=float)
    diffs = np.stack([a - np.asarray(b, dtype=float) for b in others])

    def stat(idx: np.ndarray) -> float:
        return float(diffs[:, idx].mean(axis=1).min())

    g = None if groups is None else [np.asarray(groups)]
    boots = [stat(_resample([len(a)], g, rng)[0]) for _ in range(resamples)]
    low, high = percentile_interval(boots)
    return {"estimate": stat(np.arange(len(a))),
            "interval": None if low is None else [low, high]}


def accuracy_difference(truth: np.ndarray, first: np.ndarray, second: np.ndarray,
                        rng: np.random.Generator, resamples: int,
                        score: Callable[[np.ndarray, np.ndarray], float]) -> dict[str, Any]:
    """``score(truth, first) - score(truth, second)`` on the same test records, with its
    interval resampled by record (a resample missing a class still scores)."""
    import warnings

    truth, first, second = (np.asarray(v) for v in (truth, first, second))

    def stat(idx: np.ndarray) -> float:
        with warnings.catch_warnings():  # a resample may lack a class the model predicts
            warnings.simplefilter("ignore")
            return float(score(truth[idx], first[idx]) - score(truth[idx], second[idx]))

    boots = [stat(rng.integers(0, len(truth), len(truth))) for _ in range(resamples)]
    low, high = percentile_interval(boots)
    return {"estimate": stat(np.arange(len(truth))),
            "interval": None if low is None else [low, high], "records": len(truth)}


def t_interval(estimates: Sequence[float]) -> dict[str, Any]:
    """Mean of ``k >= 2`` estimates with its t interval on ``k - 1`` degrees of freedom:
    ``theta_bar +- t_{k-1, 0.975} s / sqrt(k)``, ``s`` the sample standard deviation."""
    from scipy.stats import t as student_t

    x = np.asarray(estimates, dtype=float)
    k = len(x)
    if k < 2 or not np.isfinite(x).all():
        raise InvalidInputError(f"a t interval needs at least 2 finite estimates, got {x}")
    mean = float(x.mean())
    half = float(student_t.ppf(0.5 + CONFIDENCE / 2, k - 1) * x.std(ddof=1) / np.sqrt(k))
    return {"estimate": mean, "interval": [mean - half, mean + half], "df": k - 1}


def random_effects(estimates: Sequence[float], std_errors: Sequence[float]) -> dict[str, Any]:
    """DerSimonian-Laird random-effects mean of ``k`` estimates with known standard errors.

    With ``w_i = 1 / se_i^2``, ``theta_F = sum w_i theta_i / sum w_i``,
    ``Q = sum w_i (theta_i - theta_F)^2``,
    ``tau^2 = max(0, (Q - (k - 1)) / (sum w_i - sum w_i^2 / sum w_i))`` (between-deployment
    variance), ``w*_i = 1 / (se_i^2 + tau^2)``, the mean ``mu = sum w*_i theta_i / sum w*_i``
    has the normal interval ``mu +- z_{0.975} / sqrt(sum w*_i)``, and
    ``I^2 = max(0, (Q - (k - 1)) / Q)`` is the share of the variation due to the deployments.
    """
    from scipy.stats import norm

    x = np.asarray(estimates, dtype=float)
    se = np.asarray(std_errors, dtype=float)
    if len(x) < 2 or se.shape != x.shape or not (np.isfinite(se).all() and (se > 0).all()):
        raise InvalidInputError("random effects need at least 2 estimates, each with a finite "
                                f"standard error > 0; got {len(x)} estimates and errors {se}")
    w = 1 / se**2
    fixed = float(np.sum(w * x) / w.sum())
    q = float(np.sum(w * (x - fixed) ** 2))
    df = len(x) - 1
    tau2 = max(0.0, (q - df) / float(w.sum() - np.sum(w**2) / w.sum()))
    w_star = 1 / (se**2 + tau2)
    mu = float(np.sum(w_star * x) / w_star.sum())
    half = float(norm.ppf(0.5 + CONFIDENCE / 2) / np.sqrt(w_star.sum()))
    return {"estimate": mu, "interval": [mu - half, mu + half], "tau2": tau2, "q": q,
            "i2": max(0.0, (q - df) / q) if q > 0 else 0.0}


def interval_standard_error(interval: Sequence[float]) -> float:
    """The standard error a 95% interval implies under normality: ``(high - low) / (2 z)``."""
    from scipy.stats import norm

    low, high = interval
    return float((high - low) / (2 * norm.ppf(0.5 + CONFIDENCE / 2)))


def deployment_level(results: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """A claim judged on its per-deployment results (each ``estimate`` and ``interval``) as
    ``k`` observations (module docstring): the t interval with ``k - 1`` degrees of freedom,
    which the ``verdict`` uses, and the DerSimonian-Laird interval with ``I^2`` beside it
    (``random_effects`` None when a deployment's interval has no width). None unless every
    deployment, at least 2, has an estimate with an interval."""
    if len(results) < 2 or any(r.get("estimate") is None or r.get("interval") is None
                               for r in results):
        return None
    est = [float(r["estimate"]) for r in results]
    se = [interval_standard_error(r["interval"]) for r in results]
    t = t_interval(est)
    re = random_effects(est, se) if min(se) > 0 else None
    return {"deployments": len(est), "method": "t", **t,
            "verdict": verdict(*t["interval"]), "random_effects": re}
