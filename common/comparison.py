"""Two classifiers compared on the same labelled rows: the difference in balanced accuracy with a
95% interval, or what cannot be told and why (what a site is told it gained by joining).

The interval is a stratified paired bootstrap: each resample draws, within every true class,
as many rows as the class has, with replacement, and scores both models on the same drawn rows;
the interval is the percentile interval of the resampled differences. Resampling within each
class keeps the class counts, so the balanced accuracy (mean recall over the classes present)
of a resample is defined, and both models share every draw, so what they get right or wrong
together cancels. Drawing ``n_k`` rows of class ``k`` counts how many fall in each of the four
cells (both right, only the first, only the second, neither): one multinomial draw per class
and resample, without materialising the rows. Each class's resampled deviation is rescaled by
``sqrt(n_k / (n_k - 1))``, the rescaling bootstrap of stratified samples (Rao and Wu 1988), so
its variance is the unbiased one. Measured coverage of the 95% interval on simulated paired
draws (as ``tests/common/test_comparison.py`` draws them): 0.958 and 0.940 with 3 classes of
40 rows and of 60/35/25 rows (400 data sets each), 0.93 with 10 classes of 11 rows (a digits
site's test rows; 600 data sets), 0.85 with 10 classes of 2 rows (0.73 without the rescaling):
with very few rows per class the interval is too narrow.

Below :data:`MIN_ROWS` labelled rows no number is told: on 19 rows two federations on identical
tables gave -0.067 and +0.083, and one row gives a balanced accuracy of 0 or 1. With one class
among the labels, balanced accuracy is the recall of that class alone: it says how often a model
recognises that class, not whether it tells it from the others (a model that always answers
that class scores 1), so the gain in balanced accuracy is not told and the recall of that class
is compared instead (:attr:`PairedComparison.own_class`), saying what it means.

References: issue 29 (item 2); Efron and Tibshirani, An Introduction to the Bootstrap (1993),
section 13.3 (percentile interval); Rao and Wu, Resampling inference with complex survey
data, JASA 83 (1988) 231-241 (rescaling bootstrap of stratified samples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from noisyanchor.common.downstream import FittedDownstream, fit_downstream
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST

#: Fewest labelled rows a comparison is told on.
MIN_ROWS = 20
#: Two-sided confidence of the interval.
CONFIDENCE = 0.95
#: Bootstrap resamples: the 2.5% and 97.5% quantiles of 2000 draws move by about 0.002 between
#: seeds on 100 rows, well inside the interval's own width.
RESAMPLES = 2000
#: The bootstrap's default seed. Public on purpose: the interval is a statement about the rows,
#: and the same rows give the same interval at every run and every reader.
SEED = 29


@dataclass(frozen=True)
class PairedComparison:
    """The first model against the second on the same labelled rows.

    Attributes
    ----------
    measure : str
        What is compared: ``"balanced accuracy"``, or ``"recall of class c"`` (:attr:`own_class`).
    first, second : float or None
        The measure of each model on the rows (None: no rows, or no second model).
    difference : float or None
        ``first - second``; None when not told (then :attr:`not_told` says why).
    interval : (float, float) or None
        The :attr:`confidence` interval of the difference, by :attr:`method`.
    rows, classes : int
        How many labelled rows, and how many distinct classes among them, it rests on.
    confidence : float
    method : str
        How the interval was computed, in words.
    not_told : str or None
        Why no difference is told (too few rows, one class, no second model); None when told.
    own_class : PairedComparison or None
        With one class among the labels: the recall of that class, compared the same way.
    """

    measure: str
    first: float | None
    second: float | None
    difference: float | None
    interval: tuple[float, float] | None
    rows: int
    classes: int
    confidence: float
    method: str
    not_told: str | None = None
    own_class: PairedComparison | None = None


def bootstrap_method(resamples: int = RESAMPLES, confidence: float = CONFIDENCE) -> str:
    """The interval's method in words (stored beside every interval)."""
    return (f"stratified paired bootstrap: {resamples} resamples of the rows within each true "
            f"class, the same rows for both models, each class's spread rescaled by "
            f"sqrt(n_k / (n_k - 1)) (Rao and Wu 1988); {confidence:.0%} percentile interval")


def _cells(labels: np.ndarray, first: np.ndarray, second: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Per class ``k`` (rows of the result, in sorted order): the counts of its rows that both
    models get right, only the first, only the second, neither (``(K, 4)``), and ``n_k``."""
    right_a, right_b = first == labels, second == labels
    cell = np.select([right_a & right_b, right_a, right_b], [0, 1, 2], 3)
    _, klass = np.unique(labels, return_inverse=True)
    counts = np.zeros((klass.max() + 1, 4), dtype=np.int64)
    np.add.at(counts, (klass, cell), 1)
    return counts, counts.sum(axis=1)


def _recalls(counts: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recall of each model per class (last axis: classes) from the cell counts ``(..., K, 4)``."""
    return ((counts[..., 0] + counts[..., 1]) / n, (counts[..., 0] + counts[..., 2]) / n)


def _interval(counts: np.ndarray, n: np.ndarray, rng: np.random.Generator, resamples: int,
              confidence: float) -> tuple[float, float]:
    """Percentile interval of the balanced-accuracy difference over stratified resamples, each
    class's deviation rescaled by ``sqrt(n_k / (n_k - 1))`` (Rao and Wu 1988)."""
    # One multinomial draw per class and resample: the cells of n_k rows drawn with replacement.
    drawn = np.stack([rng.multinomial(n_k, c / n_k, size=resamples)
                      for c, n_k in zip(counts, n, strict=True)], axis=1)  # (B, K, 4)
    observed = np.subtract(*_recalls(counts, n))  # d_k, per class
    deviation = np.subtract(*_recalls(drawn, n)) - observed  # d*_k - d_k, (B, K)
    # A resample's variance within a class is (n_k - 1) / n_k of the unbiased one: with a few
    # rows per class (10 classes, 2 rows each) the plain percentile interval covers 0.73.
    scaled = deviation * np.sqrt(n / np.maximum(n - 1, 1))
    diffs = observed.mean() + scaled.mean(axis=1)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(diffs, [tail, 1 - tail])
    return float(lo), float(hi)


def paired_comparison(labels: np.ndarray, first: np.ndarray, second: np.ndarray | None, *,
                      second_missing: str = "", rng: np.random.Generator | None = None,
                      min_rows: int = MIN_ROWS, confidence: float = CONFIDENCE,
                      resamples: int = RESAMPLES) -> PairedComparison:
    """Balanced accuracy of ``first`` minus that of ``second`` on the same rows, with its
    interval (stratified paired bootstrap, :func:`bootstrap_method`).

    Parameters
    ----------
    labels : (n,) ndarray
        The true labels ``y`` of the rows.
    first, second : (n,) ndarray
        Each model's predicted labels on the same rows; ``second`` None when there is no second
        model (``second_missing`` says why).
    rng : numpy.random.Generator, optional
        The bootstrap's draws; default seeded with the public :data:`SEED`, so the same rows
        give the same interval.
    min_rows : int
        Fewest rows a difference is told on (:data:`MIN_ROWS`).

    Returns
    -------
    PairedComparison
        With one class among ``labels``: not told in balanced accuracy, and
        :attr:`PairedComparison.own_class` compares the recall of that class.
    """
    labels, first = np.asarray(labels).ravel(), np.asarray(first).ravel()
    if second is not None:
        second = np.asarray(second).ravel()
    if len(first) != len(labels) or (second is not None and len(second) != len(labels)):
        raise InvalidInputError(f"labels ({len(labels)} rows) and predictions ("
                                f"{len(first)}, {'-' if second is None else len(second)}) "
                                "must have the same length")
    if not 0 < confidence < 1 or resamples < 1:
        raise InvalidInputError(f"need 0 < confidence < 1 and resamples >= 1, got {confidence} "
                                f"and {resamples}")
    rng = np.random.default_rng(SEED) if rng is None else rng
    present = np.unique(labels)
    if len(present) != 1 or len(labels) < min_rows:  # too few rows: said before one class
        return _compare(labels, first, second, "balanced accuracy", second_missing, rng,
                        min_rows, confidence, resamples)
    only = present[0].item()
    own = _compare(labels, first, second, f"recall of class {only}", second_missing, rng,
                   min_rows, confidence, resamples)
    why = (f"the {len(labels)} rows hold one class ({only}), and balanced accuracy over one "
           f"class is its recall: how often a model answers {only} on records of {only}, not "
           f"whether it tells {only} from the other classes (a model that always answers "
           f"{only} scores 1). What the other classes taught cannot be measured on these rows; "
           "the recall of this class is compared instead")
    return PairedComparison("balanced accuracy", own.first, own.second, None, None, own.rows,
                            1, confidence, own.method, why, own)


def _compare(labels: np.ndarray, first: np.ndarray, second: np.ndarray | None, measure: str,
             second_missing: str, rng: np.random.Generator, min_rows: int, confidence: float,
             resamples: int) -> PairedComparison:
    n_rows, n_classes = len(labels), len(np.unique(labels))
    method = bootstrap_method(resamples, confidence)
    if n_rows == 0:
        return PairedComparison(measure, None, None, None, None, 0, 0, confidence, method,
                                "there are no labelled rows to score")
    counts, n = _cells(labels, first, first if second is None else second)
    recall_a, recall_b = _recalls(counts, n)
    score_a = float(recall_a.mean())
    score_b = None if second is None else float(recall_b.mean())
    base = (measure, score_a, score_b)
    if n_rows < min_rows:
        why = (f"only {n_rows} labelled row{'s' * (n_rows != 1)}, fewer than the {min_rows} a "
               f"difference is told on: on so few rows it is mostly chance (one row scores "
               "0 or 1)")
    elif score_b is None:
        why = f"there is no second model to compare with ({second_missing or 'none given'})"
    else:
        return PairedComparison(*base, score_a - score_b,
                                _interval(counts, n, rng, resamples, confidence), n_rows,
                                n_classes, confidence, method)
    return PairedComparison(*base, None, None, n_rows, n_classes, confidence, method, why)


def against_local_only(x: np.ndarray, labels: np.ndarray, tags: np.ndarray,
                       federation: np.ndarray, *, model: str, fit: str = "auto",
                       rng: np.random.Generator | None = None
                       ) -> tuple[PairedComparison, FittedDownstream | None]:
    """The federation's model against a local-only model of the same family and search, on one
    site's test rows.

    Parameters
    ----------
    x : (n, d) ndarray
        The site's records in a frame it could fit in alone: its raw records ``X_i`` (at the
        site), or its rows of ``Z`` (at the analyst: the logistic model and the
        rotation-equivariant preprocessing make them what the site could do alone).
    labels : (n,) ndarray
    tags : (n,) ndarray of {0: train, 1: validation, 2: test}
        The site's split: the local-only model is trained on its training rows, its
        hyper-parameter chosen on its validation rows (:func:`common.downstream.fit_downstream`).
    federation : (n_test,) ndarray
        The federation model's predicted labels on the site's test rows, in order.
    model : str
        The federation's model name (:data:`common.downstream.MODELS`).
    fit : str
        How it is fitted (:data:`common.downstream.FIT_MODES`).

    Returns
    -------
    PairedComparison
        The federation's model first, the local-only second.
    FittedDownstream or None
        The local-only model (None when it cannot be fitted: the comparison says why).
    """
    test = np.asarray(tags) == TEST
    labels = np.asarray(labels)
    try:
        local = fit_downstream(x, labels, tags, model=model, fit=fit)
    except InvalidInputError as err:
        return paired_comparison(labels[test], federation, None,
                                 second_missing=f"no local-only model: {err}", rng=rng), None
    return paired_comparison(labels[test], federation, local.predict(x, test),
                             rng=rng), local


#: What the federation's model is trained on, in words (stored beside a gain).
FEDERATION_TRAINED_ON = "every site's training rows of Z"
#: How a local-only model is chosen, in words: as the federation's (stored beside a gain).
LOCAL_ONLY_SEARCH = ("the federation's model family and hyper-parameter grid, the value "
                     "chosen on the site's own validation rows (the grid's middle without any)")

#: The keys of :func:`comparison_fields`.
GAIN_FIELDS = ("federation_balanced_accuracy", "local_only_balanced_accuracy", "gain",
               "gain_interval", "confidence", "interval_method", "gain_not_told", "test_rows",
               "test_classes", "own_class")


def comparison_fields(c: PairedComparison) -> dict[str, Any]:
    """The JSON fields of a site's gain (first model: the federation's, second: the local-only
    one), named the same in ``gain.json``, ``participant status``, the analyst's per-site
    metrics and ``participant predict --labels``: ``federation_balanced_accuracy``,
    ``local_only_balanced_accuracy``, ``gain``, ``gain_interval`` ``[lo, hi]``, ``confidence``,
    ``interval_method``, ``gain_not_told`` (the reason, or None when told), ``test_rows``,
    ``test_classes`` and ``own_class`` (with one class among the labels: the recall of that
    class compared the same way, with its ``measure``; None otherwise)."""
    own = c.own_class
    return {"federation_balanced_accuracy": c.first, "local_only_balanced_accuracy": c.second,
            "gain": c.difference, "gain_interval": _pair(c.interval),
            "confidence": c.confidence, "interval_method": c.method,
            "gain_not_told": c.not_told, "test_rows": c.rows, "test_classes": c.classes,
            "own_class": None if own is None else {
                "measure": own.measure, "federation_recall": own.first,
                "local_only_recall": own.second, "gain": own.difference,
                "gain_interval": _pair(own.interval), "gain_not_told": own.not_told}}


def _pair(interval: tuple[float, float] | None) -> list[float] | None:
    return None if interval is None else list(interval)


def _told(gain: float, interval: list[float], confidence: float, what: str = "") -> str:
    return (f"{gain:+.3f}{what}, {confidence:.0%} interval [{interval[0]:+.3f}, "
            f"{interval[1]:+.3f}]")


def comparison_text(fields: dict[str, Any]) -> str:
    """The gain of :func:`comparison_fields` in words with its interval, or what cannot be told
    and why."""
    confidence = fields["confidence"]
    if fields["gain"] is not None:
        told = _told(fields["gain"], fields["gain_interval"], confidence,
                     " balanced accuracy from joining")
        return (f"{told} (federation model "
                f"{fields['federation_balanced_accuracy']:.3f} vs local-only "
                f"{fields['local_only_balanced_accuracy']:.3f}; stratified paired bootstrap)")
    text = f"gain not told: {fields['gain_not_told']}"
    own = fields.get("own_class")
    if own is None:
        return text
    if own["gain"] is not None:
        return (f"{text}: {own['measure']}, federation model {own['federation_recall']:.3f} vs "
                f"local-only {own['local_only_recall']:.3f}: "
                f"{_told(own['gain'], own['gain_interval'], confidence)}")
    recall = own["federation_recall"]
    return (f"{text}; {own['measure']} by the federation model: "
            f"{'n/a' if recall is None else f'{recall:.3f}'}, not compared: "
            f"{own['gain_not_told']}")

