"""Partitions of a data set across participants, and train/test split tags."""

from __future__ import annotations

import numpy as np

from common.errors import InvalidInputError
from common.splits import TEST, TRAIN, VALIDATION
from common.validation import check_count


def stratified_iid(y: np.ndarray, p: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Deal the records of every class round-robin (after a shuffle) to ``p`` participants.

    Returns ``p`` sorted index arrays covering ``range(len(y))`` exactly once.
    """
    p = check_count(p, "participants", minimum=2)
    y = np.asarray(y)
    if len(y) < 2 * p:
        raise InvalidInputError(f"{len(y)} records are too few for {p} participants")
    parts: list[list[int]] = [[] for _ in range(p)]
    offset = 0
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        for k, j in enumerate(idx):
            parts[(k + offset) % p].append(int(j))
        offset += len(idx)
    return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]


def split_tags(
    y: np.ndarray, rng: np.random.Generator, *, test_fraction: float = 0.2,
    validation_fraction: float = 0.0,
) -> np.ndarray:
    """Per-record tags TRAIN / VALIDATION / TEST, stratified by label."""
    if not 0 < test_fraction < 1 or not 0 <= validation_fraction < 1 - test_fraction:
        raise InvalidInputError("need 0 < test_fraction < 1 and "
                                "0 <= validation_fraction < 1 - test_fraction")
    y = np.asarray(y)
    tags = np.full(len(y), TRAIN, dtype=np.int8)
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        n_test = round(test_fraction * len(idx))
        n_val = round(validation_fraction * len(idx))
        tags[idx[:n_test]] = TEST
        tags[idx[n_test:n_test + n_val]] = VALIDATION
    return tags
