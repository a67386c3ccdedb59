"""Leakage measured by an independent, frozen auditor: exact-source and cross-record identity
linkage over fixed ten-way galleries.

The auditor is an embedding fitted once on clean public records that no participant uploads
(here PCA, a small scikit-learn model, in place of the paper's CNN), then frozen before any
attack. A reconstruction is *linked* when its embedding has the highest cosine similarity with its
true candidate among the gallery's clean candidates; with ten candidates, chance is 10%.

References: SPEC.md section 3 (last item); noisy-anchor GDP paper, Sections 5.2.1 and 5.3.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.attacks import PAPER_ANCHOR_ATTACKS
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import as_matrix, check_count

#: Candidates per gallery (true one + 9 distractors); chance is ``1 / GALLERY_SIZE``.
GALLERY_SIZE = 10
#: Chance linkage: one true candidate in a gallery of ``GALLERY_SIZE``.
CHANCE = 1.0 / GALLERY_SIZE
#: How an auditor's embeddings are compared: highest cosine, or smallest Euclidean distance.
SIMILARITIES = ("cosine", "euclidean")
#: The attacks the paper evaluates against each method (Sections 5.2-5.3): the known-secret and
#: known-anchor inversions, and MP/OP/AM on anchor noise. Other attacks are the engine's own.
PAPER_ATTACKS = {"c-gdp": ("known_secret",), "c-gdp-pn": ("known_secret",),
                 "aa-igdp": ("known_anchor",), "aa-igdp-pn": ("known_anchor",),
                 "aa-igdp-an": PAPER_ANCHOR_ATTACKS}
#: Attack sets whose strongest member is reported: the paper's; every attack of the colluder's
#: threat model (built-in and plug-in, the paper's included: "all"); the analyst alone with known
#: records of the target ("analyst"); the analyst with public data ("public"). The attacks on the
#: uploads alone (ICA) belong to every set but "paper": each threat allows them.
ATTACK_SETS = ("paper", "all", "analyst", "public")
#: The threats (:data:`common.attacks.THREATS`) whose attacks each set holds, but "paper".
SET_THREATS = {"all": ("colluder", "uploads"), "analyst": ("analyst", "uploads"),
               "public": ("public", "uploads")}


def attack_set_members(names: Iterable[str], method: str, attack_set: str,
                       threats: Mapping[str, str] | None = None) -> list[str]:
    """The attacks of ``names`` in ``attack_set`` for ``method``: the paper's for the method
    (none for I-GDP), or those whose threat (``threats``; an attack missing from it is a
    colluder's) is one of the set's."""
    if attack_set == "paper":
        paper = PAPER_ATTACKS.get(method, ())
        return [a for a in names if a in paper]
    if attack_set not in SET_THREATS:
        raise InvalidInputError(f"attack set {attack_set!r} is not one of "
                                f"{', '.join(ATTACK_SETS)}")
    threats = threats or {}
    return [a for a in names if threats.get(a, "colluder") in SET_THREATS[attack_set]]


def strongest_attack(linkage: Mapping[str, float], method: str, attack_set: str = "all",
                     threats: Mapping[str, str] | None = None, *,
                     selection: Mapping[str, float] | None = None) -> tuple[str, float] | None:
    """The strongest attack of ``attack_set`` (:func:`attack_set_members`) and its linkage:
    the one with the highest ``selection`` linkage (held-out galleries), else the highest
    ``linkage`` itself (the first in attack order on ties); the linkage returned is always
    ``linkage``'s. None when no attack of the set ran."""
    members = attack_set_members(linkage, method, attack_set, threats)
    if not members:
        return None
    judge = linkage if selection is None else selection
    name = max(members, key=lambda a: judge.get(a, -np.inf))
    return name, linkage[name]


@dataclass(frozen=True)
class PcaAuditor:
    """Frozen linear embedding ``e(x) = normalize((x - mu) V)``.

    Attributes
    ----------
    mean : (d_in,) ndarray
        ``mu``, the public pool's mean.
    components : (d_in, k) ndarray
        ``V``, the pool's top-``k`` principal directions.
    """

    mean: np.ndarray
    components: np.ndarray

    def embed(self, x: np.ndarray) -> np.ndarray:
        """Unit-norm embeddings (``n x k``) of input-space records ``x`` (``n x d_in``)."""
        return _unit_rows((as_matrix(x, "records", cols=len(self.mean)) - self.mean)
                          @ self.components)


def fit_auditor(pool: np.ndarray, components: int = 32) -> PcaAuditor:
    """Fit the auditor's PCA embedding on clean public records ``pool`` (``m x d_in``)."""
    from sklearn.decomposition import PCA

    pool = as_matrix(pool, "public pool")
    k = min(check_count(components, "auditor components", minimum=1), *pool.shape)
    pca = PCA(n_components=k, svd_solver="full").fit(pool)
    return PcaAuditor(pca.mean_.copy(), pca.components_.T.copy())


@dataclass(frozen=True)
class Galleries:
    """Fixed linkage episodes over a bank of clean records.

    Attributes
    ----------
    queries : (E,) int ndarray
        Bank index of the record whose reconstruction is the query of each episode.
    candidates : (E, GALLERY_SIZE) int ndarray
        Bank indices of each gallery's clean candidates, in shuffled order.
    truth : (E,) int ndarray
        Column of ``candidates`` holding the true candidate.
    """

    queries: np.ndarray
    candidates: np.ndarray
    truth: np.ndarray


def _shuffled(queries: np.ndarray, true: np.ndarray, distractors: np.ndarray,
              rng: np.random.Generator) -> Galleries:
    """Put the true candidate at a random column of every gallery (argmax ties favour none)."""
    cand = np.column_stack([true, distractors])
    order = rng.permuted(np.tile(np.arange(cand.shape[1]), (len(cand), 1)), axis=1)
    cand = np.take_along_axis(cand, order, axis=1)
    return Galleries(queries, cand, np.argmax(order == 0, axis=1))


def exact_source_galleries(
    labels: np.ndarray, eligible: np.ndarray, rng: np.random.Generator, *, episodes: int = 1000,
) -> Galleries:
    """Exact-source episodes: the query's own clean record + 9 distinct clean records of the same
    label from the bank.

    Parameters
    ----------
    labels : (N,) ndarray
        Labels of the bank records.
    eligible : (m,) int ndarray
        Bank indices that may be queried (records of target participants).
    """
    labels = np.asarray(labels)
    episodes = check_count(episodes, "episodes", minimum=1)
    eligible = np.asarray(eligible)
    queries = rng.choice(eligible, size=episodes, replace=episodes > len(eligible))
    distractors = np.empty((episodes, GALLERY_SIZE - 1), dtype=np.int64)
    for e, q in enumerate(queries):  # per-episode draw: the same-label pool differs per query
        pool = np.flatnonzero((labels == labels[q]) & (np.arange(len(labels)) != q))
        if len(pool) < GALLERY_SIZE - 1:
            raise InvalidInputError(f"label {labels[q]} has {len(pool)} other records; a gallery "
                                    f"needs {GALLERY_SIZE - 1}")
        distractors[e] = rng.choice(pool, size=GALLERY_SIZE - 1, replace=False)
    return _shuffled(queries, queries, distractors, rng)


def identity_galleries(
    ids: np.ndarray, reference: np.ndarray, eligible: np.ndarray, rng: np.random.Generator, *,
    episodes: int = 1000,
) -> Galleries:
    """Cross-record identity episodes: the query's identity's held-out reference record (never
    uploaded, so a different record of the same identity) + references of 9 other identities.

    Parameters
    ----------
    ids : (N,) ndarray
        Identity of every bank record.
    reference : (N,) bool ndarray
        The one held-out reference record per identity.
    eligible : (m,) int ndarray
        Bank indices that may be queried (uploaded records of targets whose identity has a
        reference).
    """
    ids = np.asarray(ids)
    reference = np.asarray(reference, dtype=bool)
    episodes = check_count(episodes, "episodes", minimum=1)
    ref_rows = np.flatnonzero(reference)
    ref_of = dict(zip(ids[ref_rows].tolist(), ref_rows.tolist(), strict=True))
    eligible = np.asarray([q for q in np.asarray(eligible).tolist() if ids[q] in ref_of])
    if len(eligible) == 0 or len(ref_rows) < GALLERY_SIZE:
        raise InvalidInputError(f"identity linkage needs queries with a reference and at least "
                                f"{GALLERY_SIZE} identities with references")
    queries = rng.choice(eligible, size=episodes, replace=episodes > len(eligible))
    true = np.asarray([ref_of[k] for k in ids[queries].tolist()])
    distractors = np.empty((episodes, GALLERY_SIZE - 1), dtype=np.int64)
    for e, t in enumerate(true):  # per-episode draw: exclude this query's own identity
        distractors[e] = rng.choice(ref_rows[ref_rows != t], size=GALLERY_SIZE - 1, replace=False)
    return _shuffled(queries, true, distractors, rng)


def _unit_rows(e: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(e, axis=-1, keepdims=True)
    return e / np.where(norms > 0, norms, 1.0)


def linkage_accuracy(
    query_embeddings: np.ndarray, bank_embeddings: np.ndarray, galleries: Galleries,
    metric: str = "cosine",
) -> float:
    """Fraction of episodes whose query is nearest to its true candidate: highest cosine
    similarity (``metric="cosine"``) or smallest Euclidean distance (``"euclidean"``).

    Parameters
    ----------
    query_embeddings : (E, k) ndarray
        Auditor embeddings of the reconstructed queries, one per episode.
    bank_embeddings : (N, k) ndarray
        Auditor embeddings of the clean bank.
    """
    cand = bank_embeddings[galleries.candidates]
    if metric == "cosine":
        scores = np.einsum("ek,egk->eg", _unit_rows(query_embeddings), _unit_rows(cand))
    elif metric == "euclidean":
        scores = -np.sum((cand - query_embeddings[:, None, :]) ** 2, axis=2)
    else:
        raise InvalidInputError(f"metric {metric!r} is not one of {', '.join(SIMILARITIES)}")
    return float(np.mean(np.argmax(scores, axis=1) == galleries.truth))
