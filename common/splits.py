"""Split tags carried beside every uploaded row (train / validation / test), and how a
participant or a simulation draws them."""

from __future__ import annotations

import numpy as np

from noisyanchor.common.errors import InvalidInputError

TRAIN, VALIDATION, TEST = 0, 1, 2
SPLIT_NAMES = {TRAIN: "train", VALIDATION: "validation", TEST: "test"}


def check_fractions(test_fraction: float, validation_fraction: float) -> None:
    """Raise unless ``0 < test_fraction < 1`` and ``0 <= validation_fraction < 1 - test``."""
    if not 0 < test_fraction < 1 or not 0 <= validation_fraction < 1 - test_fraction:
        raise InvalidInputError("need 0 < test_fraction < 1 and "
                                "0 <= validation_fraction < 1 - test_fraction")


def split_tags(
    y: np.ndarray, rng: np.random.Generator, *, test_fraction: float = 0.2,
    validation_fraction: float = 0.0,
) -> np.ndarray:
    """Per-record tags TRAIN / VALIDATION / TEST, stratified by label."""
    check_fractions(test_fraction, validation_fraction)
    y = np.asarray(y)
    tags = np.full(len(y), TRAIN, dtype=np.int8)
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        n_test = round(test_fraction * len(idx))
        n_val = round(validation_fraction * len(idx))
        tags[idx[:n_test]] = TEST
        tags[idx[n_test:n_test + n_val]] = VALIDATION
    return tags
