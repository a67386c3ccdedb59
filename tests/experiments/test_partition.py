"""Partitions: label-skewed non-IID and identity-disjoint splits with held-out references."""

import numpy as np

from noisyanchor.common.splits import TEST, TRAIN, VALIDATION
from noisyanchor.experiments.partition import identity_disjoint, label_skewed, stratified_iid


def _label_share(parts, y, classes):
    return np.array([np.bincount(y[ix], minlength=classes) / len(ix) for ix in parts])


def test_label_skewed_partition_covers_every_record_once_and_is_skewed(rng):
    y = np.arange(2000) % 10
    parts = label_skewed(y, 10, rng, alpha=0.3)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(2000))
    iid = stratified_iid(y, 10, rng)
    # Largest class share per participant: about 0.1 for IID, far above it under skew.
    assert _label_share(iid, y, 10).max(axis=1).mean() < 0.12
    assert _label_share(parts, y, 10).max(axis=1).mean() > 0.3


def test_identity_disjoint_split_keeps_identities_in_one_split_with_one_reference(rng):
    ids = rng.integers(0, 50, size=600)
    tags, reference = identity_disjoint(ids, rng, test_fraction=0.2, validation_fraction=0.1)
    for k in np.unique(ids):
        rows = ids == k
        assert len(np.unique(tags[rows])) == 1
        assert reference[rows].sum() == (1 if rows.sum() >= 2 else 0)
    people = {t: len(np.unique(ids[tags == t])) for t in (TRAIN, VALIDATION, TEST)}
    assert people[TEST] == 10 and people[VALIDATION] == 5 and people[TRAIN] == 35
