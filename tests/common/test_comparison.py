"""The paired comparison of two classifiers on the same rows: its 95% interval covers the true
difference in balanced accuracy at its nominal rate on simulated paired draws, it is the same
for the same rows and seed, and below 20 rows or with one class it says what cannot be told
and why instead of a number."""

from __future__ import annotations

import numpy as np
import pytest

from noisyanchor.common.comparison import (
    GAIN_FIELDS,
    MIN_ROWS,
    against_local_only,
    comparison_fields,
    comparison_text,
    paired_comparison,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION

#: Per class: the chance that a row falls in each cell (both right, only the first model, only
#: the second, neither); the true balanced accuracies are means over the classes.
CELLS = np.array([[0.70, 0.15, 0.05, 0.10], [0.60, 0.10, 0.10, 0.20],
                  [0.50, 0.20, 0.10, 0.20]])
#: Simulated data sets per coverage check: the binomial standard error of the coverage at 0.95
#: is 0.011; the tolerance is three of them.
DATASETS, TOLERANCE = 400, 0.035


def _draw(rng: np.random.Generator, per_class: list[int], cells: np.ndarray = CELLS
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels and two models' predictions: each row's cell drawn from its class's ``cells``; a
    wrong answer is another class (the first model's and the second's differ)."""
    k = len(per_class)
    labels = np.repeat(np.arange(k), per_class)
    cell = np.concatenate([rng.choice(4, size=n, p=cells[c]) for c, n in enumerate(per_class)])
    first = np.where(np.isin(cell, (0, 1)), labels, (labels + 1) % k)
    second = np.where(np.isin(cell, (0, 2)), labels, (labels + k - 1) % k)
    return labels, first, second


def _coverage(per_class: list[int], seed: int) -> float:
    rng = np.random.default_rng(seed)
    true = float(np.mean(CELLS[:, 1] - CELLS[:, 2]))  # recall_a - recall_b, per class
    hits = 0
    for _ in range(DATASETS):
        labels, first, second = _draw(rng, per_class)
        lo, hi = paired_comparison(labels, first, second, rng=rng, resamples=1000).interval
        hits += lo <= true <= hi
    return hits / DATASETS


@pytest.mark.parametrize("per_class", [[40, 40, 40], [60, 35, 25]])
def test_the_interval_covers_the_true_difference_at_its_nominal_rate(per_class):
    assert abs(_coverage(per_class, seed=7) - 0.95) <= TOLERANCE


def test_the_difference_is_the_difference_of_the_balanced_accuracies():
    labels = np.array([0] * 12 + [1] * 8 + [2] * 5)
    first = labels.copy()
    first[:3] = 1  # recall of class 0: 9/12
    second = labels.copy()
    second[20:22] = 0  # recall of class 2: 3/5
    c = paired_comparison(labels, first, second)
    assert c.first == pytest.approx((0.75 + 1 + 1) / 3, abs=1e-12)
    assert c.second == pytest.approx((1 + 1 + 0.6) / 3, abs=1e-12)
    assert c.difference == pytest.approx(c.first - c.second, abs=1e-12)
    assert c.rows == 25 and c.classes == 3 and c.not_told is None
    lo, hi = c.interval
    assert lo <= c.difference <= hi


def test_the_same_rows_give_the_same_interval_and_a_seed_changes_the_draws():
    labels, first, second = _draw(np.random.default_rng(1), [30, 30, 30])
    default = paired_comparison(labels, first, second)
    assert paired_comparison(labels, first, second).interval == default.interval
    seeded = [paired_comparison(labels, first, second, rng=np.random.default_rng(5)).interval
              for _ in range(2)]
    assert seeded[0] == seeded[1]
    other = paired_comparison(labels, first, second, rng=np.random.default_rng(6)).interval
    assert other != seeded[0]
    # Resampling noise: the quantiles of 2000 draws move by well under the interval's width.
    assert abs(other[0] - seeded[0][0]) < 0.2 * (seeded[0][1] - seeded[0][0])


def test_identical_predictions_differ_by_exactly_zero():
    labels, first, _ = _draw(np.random.default_rng(2), [25, 25])
    c = paired_comparison(labels, first, first.copy())
    assert c.difference == 0.0 and c.interval == (0.0, 0.0)


def test_too_few_rows_say_why_instead_of_a_number():
    labels, first, second = _draw(np.random.default_rng(3), [10, 9])
    c = paired_comparison(labels, first, second)
    assert c.difference is None and c.interval is None and c.rows == MIN_ROWS - 1
    assert "only 19 labelled rows, fewer than the 20" in c.not_told
    one = comparison_fields(paired_comparison(labels[:1], first[:1], second[:1]))
    assert one["gain"] is None and "only 1 labelled row," in one["gain_not_told"]
    assert "1.000" not in comparison_text(one)  # no balanced accuracy of a single row
    empty = paired_comparison(labels[:0], first[:0], second[:0])
    assert empty.not_told == "there are no labelled rows to score" and empty.first is None


def test_one_class_compares_the_recall_of_that_class_and_says_what_it_means():
    labels = np.full(30, 4)
    first = np.where(np.arange(30) < 27, 4, 1)  # recognises 4 in 27 of 30 records
    c = paired_comparison(labels, first, np.full(30, 4))  # always answers 4
    assert c.difference is None and c.classes == 1
    assert "hold one class (4)" in c.not_told and "a model that always answers 4 scores 1" \
        in c.not_told
    own = c.own_class
    assert own.measure == "recall of class 4" and own.first == pytest.approx(0.9, abs=1e-12)
    assert own.second == 1.0 and own.difference == pytest.approx(-0.1, abs=1e-12)
    # The rescaled spread may reach a hair past the difference's bound (0 here).
    assert own.interval[0] < -0.1 < own.interval[1] < 0.01
    fields = comparison_fields(c)
    assert fields["own_class"]["federation_recall"] == pytest.approx(0.9, abs=1e-12)
    assert "recall of class 4, federation model 0.900 vs local-only 1.000" in \
        comparison_text(fields)
    # A site with one class cannot train alone: the recall of its class is still said.
    alone = comparison_fields(paired_comparison(labels, first, None,
                                                second_missing="one class in training"))
    assert alone["own_class"]["gain_not_told"] == ("there is no second model to compare with "
                                                   "(one class in training)")
    assert "recall of class 4 by the federation model: 0.900" in comparison_text(alone)


def test_the_fields_are_the_named_ones_and_the_text_states_the_interval():
    labels, first, second = _draw(np.random.default_rng(4), [30, 30, 30])
    fields = comparison_fields(paired_comparison(labels, first, second))
    assert tuple(fields) == GAIN_FIELDS
    lo, hi = fields["gain_interval"]
    assert fields["confidence"] == 0.95 and "stratified paired bootstrap" in \
        fields["interval_method"]
    assert f"95% interval [{lo:+.3f}, {hi:+.3f}]" in comparison_text(fields)


def test_mismatched_lengths_are_refused():
    with pytest.raises(InvalidInputError, match="same length"):
        paired_comparison(np.zeros(3), np.zeros(3), np.zeros(2))


def test_the_local_only_model_is_fitted_on_the_sites_own_split(rng):
    y = (np.arange(120) // 4) % 2
    x = rng.standard_normal((120, 3)) + 1.5 * y[:, None]
    tags = np.select([np.arange(120) % 4 == 0, np.arange(120) % 4 == 1], [TEST, VALIDATION],
                     TRAIN)
    federation = y[tags == TEST]  # a perfect federation model
    c, local = against_local_only(x, y, tags, federation, model="logistic")
    assert local is not None and c.rows == 30 and c.first == 1.0
    assert c.second == pytest.approx(local.utility.balanced_accuracy, abs=1e-12)
    assert c.difference == pytest.approx(1.0 - c.second, abs=1e-12)
    single = np.where(tags == TEST, y, 0)  # one class among the training rows
    c, local = against_local_only(x, single, tags, federation, model="logistic")
    assert local is None and "no local-only model: the training rows hold a single class" \
        in c.not_told
