"""What the public projection ``F`` costs a site's own model, measured on its own rows before
it uploads.

With a projection the federation's model sees ``X_i F`` (``h`` columns), not ``X_i`` (``d_in``):
whatever ``F`` drops is lost to every site's model. Each site measures the loss on its own
records, nothing leaving it: the federation's model family with the same hyper-parameter search
(:func:`common.downstream.fit_downstream`, ``C`` chosen on the site's validation rows when it
has any) fitted on the raw records and on the projected ones, in each of ``k`` stratified folds
(the fold's rows are the test rows, the rest trains), and the balanced accuracies compared fold
by fold. The cost is the mean paired difference ``c = mean_j (b_j(X) - b_j(X F))``; its 95%
interval is Student's ``t`` with ``k - 1`` degrees of freedom on the fold differences, with the
variance corrected for the overlap of the folds' training rows (Nadeau and Bengio's corrected
resampled t: ``(1/k + n_test/n_train) s^2`` instead of ``s^2 / k``). The cost exceeds the noise
of its measurement when the interval lies above zero; the site then says so in its log.

References: issue 29 (item 1); C. Nadeau and Y. Bengio, "Inference for the generalization
error", Machine Learning 52 (2003), section 4 (the corrected resampled t-test).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION

#: Folds ``k`` of the cross-validation.
FOLDS = 5

#: Two-sided level of the interval.
LEVEL = 0.95


@dataclass(frozen=True)
class ProjectionCost:
    """What ``F`` costs the site's model (balanced accuracy, raw minus projected).

    Attributes
    ----------
    cost : float
        ``c``, the mean over folds of ``b_j(X) - b_j(X F)``; > 0: the projection costs.
    low, high : float
        Its 95% interval (corrected resampled t, module docstring).
    raw, projected : tuple of float
        ``b_j(X)`` and ``b_j(X F)`` per fold.
    d_in, h : int
        Columns before and after ``F``.
    """

    cost: float
    low: float
    high: float
    raw: tuple[float, ...]
    projected: tuple[float, ...]
    d_in: int
    h: int

    @property
    def exceeds_noise(self) -> bool:
        """Whether the cost is larger than the noise of its measurement (interval above 0)."""
        return self.low > 0.0

    def text(self) -> str:
        """One sentence for the site's log."""
        return (f"the public projection F ({self.d_in} -> {self.h} columns) costs this site's "
                f"own model {self.cost:+.3f} balanced accuracy (95% interval {self.low:+.3f} to "
                f"{self.high:+.3f}; {len(self.raw)}-fold cross-validation on its own rows, raw "
                f"{np.mean(self.raw):.3f} vs projected {np.mean(self.projected):.3f})")


def fold_tags(labels: np.ndarray, tags: np.ndarray, folds: int,
              rng: np.random.Generator) -> list[np.ndarray]:
    """Per fold ``j``: TEST on the fold's rows (each class dealt round the folds in a random
    order, so every fold holds its share of each class), elsewhere TRAIN, and VALIDATION where
    the site's own split has validation rows (they keep choosing ``C``)."""
    labels = np.asarray(labels)
    fold = np.empty(len(labels), dtype=int)
    for label in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == label))
        fold[idx] = (np.arange(len(idx)) + rng.integers(folds)) % folds
    rest = np.where(np.asarray(tags) == VALIDATION, VALIDATION, TRAIN).astype(np.int8)
    return [np.where(fold == j, TEST, rest).astype(np.int8) for j in range(folds)]


def projection_cost(x: np.ndarray, labels: np.ndarray, tags: np.ndarray, f: np.ndarray, *,
                    model: str = "logistic", folds: int = FOLDS,
                    rng: np.random.Generator) -> ProjectionCost:
    """Cross-validated cost of ``F`` to the site's own model (module docstring).

    Parameters
    ----------
    x : (n, d_in) ndarray
        The site's records ``X_i`` as encoded for the upload, before ``F``.
    labels : (n,) ndarray
    tags : (n,) ndarray
        The site's own split (only its VALIDATION rows matter: the search over ``C``).
    f : (d_in, h) ndarray
        The public projection ``F``.
    model : str
        The federation's model family (:data:`common.downstream.MODELS`).
    folds : int
        ``k >= 2``.
    rng : numpy.random.Generator
        Draws the folds.

    Raises
    ------
    InvalidInputError
        Fewer than ``k`` records of some class (a fold would lack it), or a single class.
    """
    from scipy import stats

    from noisyanchor.common.downstream import fit_downstream

    x, labels, f = np.asarray(x, dtype=float), np.asarray(labels), np.asarray(f, dtype=float)
    if x.ndim != 2 or f.ndim != 2 or f.shape[0] != x.shape[1]:
        raise InvalidInputError(f"F must be (d_in, h) = ({x.shape[-1]}, h) for records of "
                                f"shape {x.shape}, got {f.shape}")
    if folds < 2:
        raise InvalidInputError(f"folds must be >= 2, got {folds}")
    classes, counts = np.unique(labels, return_counts=True)
    if len(classes) < 2 or counts.min() < folds:
        raise InvalidInputError(f"measuring what F costs needs at least two classes with "
                                f"{folds} records each (one per fold); this site has "
                                f"{dict(zip(classes.tolist(), counts.tolist(), strict=True))}")
    projected = x @ f
    raw_scores, projected_scores = [], []
    for t in fold_tags(labels, tags, folds, rng):
        raw_scores.append(fit_downstream(x, labels, t, model=model).utility.balanced_accuracy)
        projected_scores.append(fit_downstream(projected, labels, t, model=model)
                                .utility.balanced_accuracy)
    diff = np.array(raw_scores) - np.array(projected_scores)
    test_share = 1.0 / folds  # n_test / n_train = (1/k) / (1 - 1/k)
    half = (stats.t.ppf(0.5 + LEVEL / 2, folds - 1)
            * np.sqrt((1.0 / folds + test_share / (1.0 - test_share)) * diff.var(ddof=1)))
    cost = float(diff.mean())
    return ProjectionCost(cost, cost - float(half), cost + float(half), tuple(raw_scores),
                          tuple(projected_scores), x.shape[1], f.shape[1])
