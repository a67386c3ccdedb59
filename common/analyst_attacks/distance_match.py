"""Distance inference with a candidate pool: records the attacker holds but cannot place (a
population register, a leaked table), matched to a target's upload rows by their distances to
``m`` located known records, then the key from every record placed.

Anchor noise perturbs the key, not the records: the upload ``Y = X O + 1 Psi^T`` keeps every
distance between a participant's records exact. With the known records ``k_1..k_m`` located in
rows ``j_1..j_m`` (:func:`.known_input.locate_known_records`, by label where labels are given),
a candidate ``c`` sits in row ``a`` only if ``||y_a - y_{j_l}||^2 = ||c - k_l||^2`` for every
``l``; under private-data noise ``sigma`` each observed distance is offset by ``2 d sigma^2``
and has variance ``8 sigma^2 ||c - k_l||^2 + 8 d sigma^4``, so a pair ``(c, a)`` scores

    s(c, a) = sum_l (D_Y[a, j_l] - 2 d sigma^2 - ||c - k_l||^2)^2
              / (8 sigma^2 ||c - k_l||^2 + 8 d sigma^4 + tau),

about chi-squared with ``m`` degrees of freedom at the true row (``tau`` a floor that matters
only at ``sigma = 0``, where the true row scores ~0 and every other row far more). A candidate
is placed at its best row when ``s`` is below the ``chi2_m`` quantile at ``alpha / n``
(Bonferroni over the ``n`` rows), each row taking the best-scoring candidate only; its best
score ``min_a s(c, a)`` is a membership statistic from distances alone. The known records and
the placed candidates, ``m + q`` records at known rows, then go through the known-input
decoder: from ``m + q >= d + 1`` records in general position the key is exact without data
noise, even when ``m`` alone (2, say) is far below ``d + 1``.

Side information used: the upload's rows, ``m`` known records of the target, the candidate
pool, and, when given, the labels every upload carries in the clear (rows and candidates are
then matched within a label).

References: Turgay, Pedersen, Saygin, Savas and Levi, "Disclosure risks of distance preserving
data transformations", SSDBM 2008 (distance inference with background knowledge); Liu,
Giannella and Kargupta, PKDD 2006 (known input-output attacks); SPEC.md section 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noisyanchor.common.analyst_attacks.known_input import (
    DEFAULT_BEAM,
    KnownInputResult,
    Location,
    decode_located,
    locate_known_records,
    squared_distances,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import as_matrix, check_nonnegative

#: Family-wise false-placement rate of the acceptance threshold.
DEFAULT_ALPHA = 0.01


@dataclass(frozen=True)
class DistanceMatchResult:
    """Candidates placed among a target's rows and the reconstruction from every placed record.

    Attributes
    ----------
    rows : (N,) int ndarray
        Upload row of each candidate, -1 when not placed (judged a non-member).
    scores : (N,) ndarray
        ``min_a s(c, a)``: each candidate's best score (small: a member).
    threshold : float
        The acceptance threshold on ``s``.
    known : Location
        Where the ``m`` known records sit.
    decoded : KnownInputResult
        The known-input decoder from the known and the placed records.
    """

    rows: np.ndarray
    scores: np.ndarray
    threshold: float
    known: Location
    decoded: KnownInputResult


def _same_label(labels: np.ndarray | None, other: np.ndarray | None, n: int,
                count: int) -> np.ndarray | None:
    """``allowed[c, a]``: candidate ``c`` may sit in row ``a``; None without labels."""
    if labels is None and other is None:
        return None
    if labels is None or other is None or len(labels) != n or len(other) != count:
        raise InvalidInputError(f"matching by label needs the {n} rows' and the {count} "
                                "candidates' labels")
    return np.asarray(other).ravel()[:, None] == np.asarray(labels).ravel()[None, :]


def distance_match_attack(y: np.ndarray, known: np.ndarray, candidates: np.ndarray, *,
                          data_noise: float = 0.0, labels: np.ndarray | None = None,
                          known_labels: np.ndarray | None = None,
                          candidate_labels: np.ndarray | None = None,
                          alpha: float = DEFAULT_ALPHA,
                          beam: int = DEFAULT_BEAM) -> DistanceMatchResult:
    """Place candidates among ``y``'s rows by their distances to the located known records,
    then decode from every placed record (module docstring).

    Parameters
    ----------
    y : (n, d) ndarray
        The target's upload ``Y``.
    known : (m, d) ndarray
        ``K``: ``m >= 2`` records of the target (working space).
    candidates : (N, d) ndarray
        The pool ``C`` (working space): members and non-members of the target, unknown which.
    data_noise : float
        ``sigma`` (0 without private-data noise; anchor noise leaves ``Y`` noiseless).
    labels, known_labels, candidate_labels : ndarrays, optional
        Labels of ``y``'s rows, of the known records and of the candidates: given, every
        placement stays within a label.
    alpha : float
        Family-wise rate of placing a candidate in a row it does not hold, per candidate.
    beam : int
        Beam width of the known records' location.
    """
    from scipy.stats import chi2

    y = as_matrix(y, "data upload")
    known = as_matrix(known, "known records", cols=y.shape[1])
    candidates = as_matrix(candidates, "candidate pool", cols=y.shape[1])
    sigma = check_nonnegative(data_noise, "data noise sigma")
    if not 0 < alpha < 1:
        raise InvalidInputError(f"alpha must lie in (0, 1), got {alpha!r}")
    n, d = y.shape
    m = len(known)
    loc = locate_known_records(y, known, data_noise=sigma, beam=beam, labels=labels,
                               known_labels=known_labels)
    allowed = _same_label(labels, candidate_labels, n, len(candidates))
    dy = squared_distances(y)[:, loc.rows]  # (n, m): row a to known row j_l
    diff = candidates[:, None, :] - known[None, :, :]
    dc = np.einsum("cld,cld->cl", diff, diff)  # (N, m): ||c - k_l||^2
    floor = (1e-9 * max(float(dy.max()), float(dc.max()), 1e-300)) ** 2
    var = 8 * sigma**2 * dc + 8 * d * sigma**4 + floor  # (N, m)
    # (N, n) scores: one (N, n, m) residual array, small for the pools and uploads studied
    resid = dy[None, :, :] - 2 * d * sigma**2 - dc[:, None, :]
    score = np.sum(resid**2 / var[:, None, :], axis=2)
    score[:, loc.rows] = np.inf  # a known record's row is taken
    if allowed is not None:
        score[~allowed] = np.inf
    best_row = np.argmin(score, axis=1)
    best = score[np.arange(len(candidates)), best_row]
    threshold = float(chi2.isf(alpha / n, m))
    rows = np.full(len(candidates), -1, dtype=np.int64)
    taken: set[int] = set()
    for c in np.argsort(best, kind="stable"):  # best-scoring candidates claim their rows first
        if best[c] > threshold:
            break
        if int(best_row[c]) not in taken:
            rows[c] = best_row[c]
            taken.add(int(best_row[c]))
    placed = rows >= 0
    records = np.vstack([known, candidates[placed]])
    at = np.concatenate([loc.rows, rows[placed]])
    decoded = decode_located(y, records, Location(at, loc.score, loc.runner_up))
    return DistanceMatchResult(rows, best, threshold, loc, decoded)
