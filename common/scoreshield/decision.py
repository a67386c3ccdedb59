"""Decision-level tools on privatised scores: ROC, AUC, TAR at a FAR, EER, recalibration.

Thresholding, ranking and top-k on released scores are post-processing of a DP release (paper
Lemma 2.8). ROC and AUC are implemented with numpy sorting (scikit-learn is an optional extra, not
a core dependency); tests check them against ``sklearn.metrics``. Convention: a pair is accepted
when its score is ``>= threshold`` for ROC points, as in ``sklearn.metrics.roc_curve``; the
recalibration of paper App. G uses the strict rule ``score > threshold`` (the two differ only on
ties, which have probability zero for Gaussian-perturbed scores).

References
----------
SPEC.md section 5 (decision level); ScoreShield paper Section 3.1, Appendix G.2 (Proposition G.12
flip probability; Definitions G.15, G.26 and Proposition G.25, threshold recalibration),
Appendix G.3 (ROC/AUC stability), Appendix H (FR operating points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import as_vector, check_nonnegative, check_positive


def _labels_scores(labels: object, scores: object) -> tuple[np.ndarray, np.ndarray]:
    s = as_vector(scores, "scores")
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != s.shape[0]:
        raise InvalidInputError(f"labels must be 1-D with the length of scores ({s.shape[0]}), "
                                f"got shape {y.shape}")
    if y.dtype != bool:
        uniq = np.unique(y)
        if not np.isin(uniq, (0, 1)).all():
            raise InvalidInputError(f"labels must be 0/1 or boolean, got values {uniq[:5]}")
        y = y.astype(bool)
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        raise InvalidInputError("labels must contain both genuine (1) and impostor (0) pairs")
    return y, s


def roc_curve(labels: object, scores: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve: false-accept and true-accept rates at every distinct score threshold.

    Parameters
    ----------
    labels : (m,) array_like of {0, 1} or bool
        1 for genuine (same-identity) pairs, 0 for impostor pairs.
    scores : (m,) array_like
        Similarity scores; higher means more similar.

    Returns
    -------
    fpr, tpr : (k + 1,) ndarray
        FAR and TAR for accepting ``score >= thresholds[j]``, starting at ``(0, 0)``.
    thresholds : (k + 1,) ndarray
        Decreasing distinct scores, preceded by ``inf`` (as ``sklearn.metrics.roc_curve`` with
        ``drop_intermediate=False``).
    """
    y, s = _labels_scores(labels, scores)
    order = np.argsort(-s, kind="mergesort")
    s_sorted = s[order]
    y_sorted = y[order]
    # last index of each run of equal scores: the ROC moves one step per distinct threshold
    distinct = np.flatnonzero(np.diff(s_sorted)) if s_sorted.size > 1 else np.array([], int)
    ends = np.r_[distinct, s_sorted.size - 1]
    tps = np.cumsum(y_sorted)[ends]
    fps = (ends + 1) - tps
    tpr = np.r_[0.0, tps / tps[-1]]
    fpr = np.r_[0.0, fps / fps[-1]]
    thresholds = np.r_[np.inf, s_sorted[ends]]
    return fpr, tpr, thresholds


def auc(labels: object, scores: object) -> float:
    """Area under the ROC curve, ``P(s_genuine > s_impostor) + P(tie)/2`` (Mann-Whitney U).

    Computed from mid-ranks (``scipy.stats.rankdata``), which equals the trapezoidal area under
    :func:`roc_curve` and ``sklearn.metrics.roc_auc_score``.
    """
    from scipy.stats import rankdata

    y, s = _labels_scores(labels, scores)
    ranks = rankdata(s)  # average ranks for ties
    n_pos = float(y.sum())
    n_neg = float(y.size - n_pos)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def tar_at_far(labels: object, scores: object, far: float) -> float:
    """Largest true-accept rate over ROC points whose false-accept rate is ``<= far``.

    Parameters
    ----------
    far : float
        Target false-accept (false-match) rate in ``[0, 1]``.
    """
    target = check_nonnegative(far, "far")
    if target > 1.0:
        raise InvalidInputError(f"far must be in [0, 1], got {far!r}")
    fpr, tpr, _ = roc_curve(labels, scores)
    ok = fpr <= target + 1e-12
    return float(tpr[ok].max())


def eer(labels: object, scores: object) -> float:
    """Equal error rate: the FAR at which ``FAR = 1 - TAR`` on the linearly interpolated ROC."""
    fpr, tpr, _ = roc_curve(labels, scores)
    g = fpr + tpr - 1.0  # FAR - FRR, non-decreasing along the curve, from -1 to +1
    k = int(np.flatnonzero(g >= 0.0)[0])
    if k == 0 or g[k] == 0.0:
        return float(fpr[k])
    t = -g[k - 1] / (g[k] - g[k - 1])
    return float(fpr[k - 1] + t * (fpr[k] - fpr[k - 1]))


def flip_probability(score: object, threshold: float, sigma: float) -> np.ndarray:
    """Probability that noise ``N(0, sigma^2)`` flips the decision of ``score`` vs ``threshold``.

    ``P(flip) = Q(|s - tau| / sigma)`` for an interior threshold ``tau in (-1, 1)``; clipping to
    ``[-1, 1]`` does not change interior decisions (paper Proposition G.12).
    """
    from scipy.special import ndtr

    s = np.asarray(score, dtype=float)
    sig = check_positive(sigma, "sigma")
    return ndtr(-np.abs(s - float(threshold)) / sig)


def clean_threshold(impostor_scores: object, target_fmr: float) -> float:
    """Smallest observed threshold ``tau_0`` whose empirical FMR ``P(s > tau_0)`` is ``<= target``.

    Paper eq. (245) on the empirical impostor distribution.
    """
    s = as_vector(impostor_scores, "impostor_scores")
    alpha = _check_rate(target_fmr, "target_fmr")
    desc = np.sort(s)[::-1]
    k = int(np.floor(alpha * desc.size))
    return float(desc[k]) if k < desc.size else -1.0


def private_fmr(impostor_scores: object, threshold: float, sigma: float) -> float:
    """Expected FMR after privatisation: ``(1/m) sum_j Q((tau - s_j) / sigma)``.

    Impostor scores smoothed by ``N(0, sigma^2)``, strict rule ``score > tau`` at an interior
    ``tau`` (paper Appendix G.2, Gaussian smoothing of the impostor CDF).
    """
    from scipy.special import ndtr

    s = as_vector(impostor_scores, "impostor_scores")
    sig = check_positive(sigma, "sigma")
    return float(ndtr((s - float(threshold)) / sig).mean())


@dataclass(frozen=True)
class Recalibration:
    """Output of :func:`recalibrate_threshold`.

    Attributes
    ----------
    threshold : float
        Recalibrated ``tau* = tau_0 + Delta_tau`` (paper Definition G.26).
    clean_threshold : float
        ``tau_0``, the threshold meeting the target on clean scores.
    offset : float
        ``Delta_tau = tau* - tau_0``.
    fmr_before : float
        Expected post-privacy FMR if ``tau_0`` is kept (the inflation the paper warns about).
    fmr : float
        Expected post-privacy FMR at ``threshold`` (the target when ``feasible``).
    feasible : bool
        False when the target is below the smallest FMR attainable by an interior threshold
        (paper Proposition G.25(a)); then ``threshold = 1`` (accept nothing under the strict rule).
    """

    threshold: float
    clean_threshold: float
    offset: float
    fmr_before: float
    fmr: float
    feasible: bool


def recalibrate_threshold(
    impostor_scores: object, sigma: float, target_fmr: float
) -> Recalibration:
    """Threshold that restores a target false-match rate on privatised scores.

    Solves ``(1/m) sum_j Q((tau - s_j)/sigma) = alpha`` for ``tau in (-1, 1)`` with
    :func:`scipy.optimize.brentq` (the left side is continuous and strictly decreasing, so the
    root is unique: paper Proposition G.25, Definition G.26, eq. (281)). ``impostor_scores`` must
    describe the impostor population without touching the private gallery (e.g. a public
    calibration set), otherwise the threshold itself leaks.

    Parameters
    ----------
    impostor_scores : (m,) array_like
        Clean impostor scores ``s_j`` in ``[-1, 1]`` (empirical ``F_0``).
    sigma : float
        Noise standard deviation of the score release, > 0.
    target_fmr : float
        Target ``alpha`` in ``(0, 1)``.

    Returns
    -------
    Recalibration
    """
    from scipy.special import ndtr

    s = as_vector(impostor_scores, "impostor_scores")
    if s.size == 0:
        raise InvalidInputError("impostor_scores is empty")
    sig = check_positive(sigma, "sigma")
    alpha = _check_rate(target_fmr, "target_fmr")
    tau0 = clean_threshold(s, alpha)
    before = private_fmr(s, tau0, sig)

    def excess(tau: float) -> float:
        return float(ndtr((s - tau) / sig).mean()) - alpha

    hi = np.nextafter(1.0, -np.inf)
    if excess(hi) > 0.0:  # target unattainable with an interior threshold
        return Recalibration(threshold=1.0, clean_threshold=tau0, offset=1.0 - tau0,
                             fmr_before=before, fmr=0.0, feasible=False)
    if excess(-1.0) <= 0.0:
        tau = -1.0
    else:
        from scipy.optimize import brentq

        tau = float(brentq(excess, -1.0, hi, xtol=1e-12))
    return Recalibration(threshold=tau, clean_threshold=tau0, offset=tau - tau0,
                         fmr_before=before, fmr=private_fmr(s, tau, sig), feasible=True)


def _check_rate(value: float, name: str) -> float:
    v = float(value)
    if not (0.0 < v < 1.0):
        raise InvalidInputError(f"{name} must be in (0, 1), got {value!r}")
    return v
