"""What the public projection F costs a site's own model: k-fold cross-validated balanced
accuracy on raw vs projected records, paired over folds, with a corrected-t interval."""

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION
from noisyanchor.participant.projection_cost import FOLDS, fold_tags, projection_cost


def _records(n: int = 300, d: int = 10, seed: int = 0):
    """Two classes told apart by column 5 alone (a margin of 2 standard deviations)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.normal(size=(n, d))
    x[:, 5] += 4.0 * labels - 2.0
    return x, labels, np.full(n, TRAIN, dtype=np.int8)


def test_a_projection_that_drops_the_informative_column_clearly_costs():
    x, labels, tags = _records()
    f = np.eye(10)[:, :3]  # keeps columns 0..2: the label's column 5 is gone
    cost = projection_cost(x, labels, tags, f, rng=np.random.default_rng(1))
    assert min(cost.raw) > 0.9 and max(cost.projected) < 0.7  # raw ~0.98, projected ~chance
    assert cost.cost > 0.3 and cost.exceeds_noise and cost.low > 0
    assert cost.low <= cost.cost <= cost.high and (cost.d_in, cost.h) == (10, 3)
    assert "costs this site's own model +0." in cost.text()


def test_a_projection_that_keeps_the_informative_column_costs_nothing_beyond_noise():
    x, labels, tags = _records()
    f = np.eye(10)[:, 4:7]  # keeps column 5
    cost = projection_cost(x, labels, tags, f, rng=np.random.default_rng(1))
    assert abs(cost.cost) < 0.03  # a few records of 60 per fold either way
    assert not cost.exceeds_noise and cost.low <= 0 <= cost.high


def test_a_rotation_costs_exactly_nothing():
    # Logistic regression with an L2 penalty on records scaled by one number is rotation
    # invariant: F orthogonal (h = d) changes no prediction.
    x, labels, tags = _records()
    q = np.linalg.qr(np.random.default_rng(2).normal(size=(10, 10)))[0]
    cost = projection_cost(x, labels, tags, q, rng=np.random.default_rng(1))
    assert cost.raw == pytest.approx(cost.projected, abs=1e-9) and not cost.exceeds_noise


def test_folds_are_stratified_and_keep_the_sites_validation_rows():
    labels = np.repeat([0, 1, 2], [50, 23, 12])
    tags = np.where(np.arange(85) % 7 == 0, VALIDATION, TRAIN).astype(np.int8)
    folds = fold_tags(labels, tags, FOLDS, np.random.default_rng(0))
    test = np.array([t == TEST for t in folds])
    assert (test.sum(axis=0) == 1).all()  # every record is a test record exactly once
    for label, n in ((0, 50), (1, 23), (2, 12)):
        per_fold = test[:, labels == label].sum(axis=1)
        assert per_fold.max() - per_fold.min() <= 1 and per_fold.sum() == n
    for t in folds:
        assert ((t == VALIDATION) == ((tags == VALIDATION) & (t != TEST))).all()


def test_too_few_records_of_a_class_are_refused_with_the_counts():
    x, labels, tags = _records(n=40)
    labels[:] = 0
    labels[:3] = 1
    with pytest.raises(InvalidInputError, match="5 records each"):
        projection_cost(x, labels, tags, np.eye(10)[:, :3], rng=np.random.default_rng(0))


def test_a_site_refuses_a_projection_wider_than_its_records_naming_the_key():
    from types import SimpleNamespace

    from noisyanchor.participant.core.join import public_projection

    cfg = SimpleNamespace(dim=65, projection_seed=1, data="data/org-a.csv")
    with pytest.raises(InvalidInputError, match=r"^\[protocol\] dim: h = 65 exceeds the record "
                       r"width d = 64 \(the columns of data/org-a.csv\)"):
        public_projection(cfg, 64)
    assert public_projection(SimpleNamespace(dim=64, projection_seed=1, data="x"), 64).shape \
        == (64, 64)
