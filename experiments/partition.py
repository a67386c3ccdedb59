"""Partitions of a data set across participants (split tags: ``common.splits``)."""

from __future__ import annotations

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION, check_fractions
from noisyanchor.common.validation import check_count


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


def fixed_budget(
    y: np.ndarray, p: int, per_participant: int, rng: np.random.Generator,
    ids: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The paper's participant-count design: ``p`` participants each holding exactly
    ``per_participant`` records (``ids`` None: records dealt stratified by label) or all
    records of exactly ``per_participant`` identities (``ids`` given: whole identities dealt
    stratified by each identity's label).

    The first ``q`` parts of a call with ``p`` participants are the parts of a run with ``q``
    (nested prefixes): call once with the largest ``p``. Returns ``p`` sorted index arrays.
    """
    p = check_count(p, "participants", minimum=2)
    k = check_count(per_participant, "records or identities per participant", minimum=1)
    y = np.asarray(y)
    if ids is None:
        units, unit_label = np.arange(len(y)), y
    else:
        ids = np.asarray(ids)
        units, first = np.unique(ids, return_index=True)
        unit_label = y[first]
    if len(units) < p * k:
        what = "records" if ids is None else "identities"
        raise InvalidInputError(f"{len(units)} {what} are too few for {p} participants of {k}")
    # Interleave the labels (a shuffled class-balanced order), then deal it in blocks of k.
    order = np.concatenate([rng.permutation(np.flatnonzero(unit_label == label))
                            for label in np.unique(unit_label)])
    rank = np.empty(len(order), dtype=float)
    start = 0
    for label in np.unique(unit_label):
        n_label = int(np.sum(unit_label == label))
        rank[start:start + n_label] = (np.arange(n_label) + rng.random()) / n_label
        start += n_label
    dealt = order[np.argsort(rank, kind="stable")][: p * k].reshape(p, k)
    if ids is None:
        return [np.sort(part) for part in dealt]
    return [np.sort(np.flatnonzero(np.isin(ids, units[part]))) for part in dealt]


def label_skewed(
    y: np.ndarray, p: int, rng: np.random.Generator, *, alpha: float = 0.5, min_records: int = 2,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Label-skewed non-IID partition: each class is split across participants in proportions
    drawn from ``Dirichlet(alpha 1_p)`` (small ``alpha``: strong skew).

    Draws again (at most ``max_tries`` times) until every participant holds ``min_records``.
    Returns ``p`` sorted index arrays covering ``range(len(y))`` exactly once.
    """
    p = check_count(p, "participants", minimum=2)
    if not alpha > 0:
        raise InvalidInputError(f"alpha must be > 0, got {alpha}")
    y = np.asarray(y)
    if len(y) < min_records * p:
        raise InvalidInputError(f"{len(y)} records are too few for {p} participants")
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(p)]
        for label in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == label))
            cuts = (np.cumsum(rng.dirichlet(np.full(p, alpha)))[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(int(j) for j in chunk)
        if min(len(part) for part in parts) >= min_records:
            return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]
    raise InvalidInputError(f"no Dirichlet({alpha}) draw in {max_tries} gave every participant "
                            f"{min_records} records; raise alpha")


def identity_disjoint(
    ids: np.ndarray, rng: np.random.Generator, *, test_fraction: float = 0.2,
    validation_fraction: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """Identity-disjoint split (the paper's CelebA protocol).

    Identities, not records, are dealt to TRAIN / VALIDATION / TEST, so no identity spans two
    splits; one record of every identity with at least two records is set aside as its held-out
    reference, kept out of every upload (the clean gallery of cross-record identity linkage).

    Returns
    -------
    tags : (n,) int8 ndarray
        TRAIN / VALIDATION / TEST per record (by its identity).
    reference : (n,) bool ndarray
        True for the one held-out reference record per identity.
    """
    check_fractions(test_fraction, validation_fraction)
    ids = np.asarray(ids)
    people = rng.permutation(np.unique(ids))
    n_test = round(test_fraction * len(people))
    n_val = round(validation_fraction * len(people))
    split_of = dict.fromkeys(people[n_test + n_val:].tolist(), TRAIN)
    split_of.update(dict.fromkeys(people[:n_test].tolist(), TEST))
    split_of.update(dict.fromkeys(people[n_test:n_test + n_val].tolist(), VALIDATION))
    tags = np.asarray([split_of[k] for k in ids.tolist()], dtype=np.int8)
    reference = np.zeros(len(ids), dtype=bool)
    for person in people:
        rows = np.flatnonzero(ids == person)
        if len(rows) >= 2:
            reference[rng.choice(rows)] = True
    return tags, reference
