"""Frozen auditors of the bench, and the interface through which other packages add their own.

An auditor turns clean or reconstructed records (input space, e.g. pixels) into embeddings; the
linkage of :mod:`experiments.linkage` picks, in each ten-way gallery, the candidate nearest to the
query. It is fitted once on the public pool (never uploaded) and frozen before any attack.

Built-in auditors (:data:`AUDITORS`):

* ``pca``: centred PCA of the pool, cosine similarity (the bench's default, as in the first
  reports; :func:`experiments.linkage.fit_auditor`).
* ``pixel``: the raw records, uncentred cosine (plain pixel cosine: no learned part at all).
* ``knn-identity``: a k-nearest-neighbour identity auditor, for data sets with identity ids:
  neighbourhood components analysis (NCA, Goldberger et al. 2004) learns a linear map under which
  records of one pool identity are each other's nearest neighbours; a query is linked to the
  gallery candidate nearest in that space (1-NN, Euclidean). Skipped without identities.

Plug-in auditors
----------------
A package registers a factory under the entry-point group ``noisyanchor.auditors``
(:mod:`common.plugins`)::

    def fit_my_auditor(data: AuditorData) -> Auditor | None: ...

It gets the public pool (:class:`AuditorData`) and returns a fitted auditor, or None when it does
not apply (e.g. it needs identities). An auditor has ``embed(x) -> (n, k) ndarray`` for records
``x`` (``n x d_in``, input space) and, optionally, ``metric``: ``"cosine"`` (default) or
``"euclidean"``. The entry point's name is the auditor's name in rows, tables and figures.

References: noisy-anchor GDP paper, Sections 5.2.1 and 5.3 (frozen auditors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.plugins import AUDITOR_GROUP, load_plugins
from noisyanchor.experiments.linkage import SIMILARITIES, fit_auditor


class Auditor(Protocol):
    """A fitted, frozen auditor (module docstring)."""

    def embed(self, x: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class AuditorData:
    """What an auditor may be fitted on: clean public records, never uploaded.

    Attributes
    ----------
    pool : (m, d_in) ndarray
    labels : (m,) ndarray
    ids : (m,) ndarray or None
        Identity of each pool record (data sets with identities).
    components : int
        The config's ``auditor_components`` (embedding width, where an auditor has one).
    """

    pool: np.ndarray
    labels: np.ndarray
    ids: np.ndarray | None
    components: int


@dataclass(frozen=True)
class FittedAuditor:
    """An auditor with its metric and the embeddings of the clean bank."""

    name: str
    auditor: Any
    metric: str
    bank_embeddings: np.ndarray


def _pca(data: AuditorData) -> Any:
    return fit_auditor(data.pool, data.components)


class _Pixel:
    """Raw records; the cosine in :func:`experiments.linkage.linkage_accuracy` normalises."""

    def embed(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=float)


def _pixel(data: AuditorData) -> Any:
    return _Pixel()


@dataclass(frozen=True)
class _Linear:
    """``e(x) = (x - mu) V`` compared in Euclidean distance."""

    mean: np.ndarray
    transform: np.ndarray
    metric: str = "euclidean"

    def embed(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=float) - self.mean) @ self.transform


def _knn_identity(data: AuditorData) -> Any:
    """NCA on the pool's identities after a PCA to ``components`` dimensions (NCA's cost grows
    with the square of the pool size times the width)."""
    if data.ids is None or len(np.unique(data.ids)) < 2:
        return None
    from sklearn.decomposition import PCA
    from sklearn.neighbors import NeighborhoodComponentsAnalysis

    k = min(data.components, *data.pool.shape)
    pca = PCA(n_components=k, svd_solver="full").fit(data.pool)
    reduced = pca.transform(data.pool)
    nca = NeighborhoodComponentsAnalysis(random_state=0, max_iter=100).fit(reduced, data.ids)
    return _Linear(pca.mean_.copy(), pca.components_.T @ nca.components_.T)


#: Built-in auditor factories by name.
AUDITORS: dict[str, Callable[[AuditorData], Any]] = {
    "pca": _pca, "pixel": _pixel, "knn-identity": _knn_identity}


def available_auditors(*, plugins: bool = True) -> dict[str, Callable[[AuditorData], Any]]:
    """Built-in auditor factories, then every plug-in of the ``noisyanchor.auditors`` group."""
    out = dict(AUDITORS)
    if plugins:
        for name, factory in load_plugins(AUDITOR_GROUP, reserved=tuple(AUDITORS)).items():
            if not callable(factory):
                raise InvalidInputError(f"plug-in auditor {name!r} is not callable")
            out[name] = factory
    return out


def fit_auditors(names: list[str], data: AuditorData, bank: np.ndarray,
                 factories: dict[str, Callable[[AuditorData], Any]] | None = None,
                 ) -> dict[str, FittedAuditor]:
    """Fit every named auditor that applies (a factory returning None is left out) and embed the
    bank once; plug-ins are included when ``names`` lists them."""
    factories = available_auditors() if factories is None else factories
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise InvalidInputError(f"unknown auditor(s) {', '.join(unknown)}; available: "
                                f"{', '.join(factories)}")
    out = {}
    for name in names:
        auditor = factories[name](data)
        if auditor is None:
            continue
        metric = getattr(auditor, "metric", "cosine")
        if metric not in SIMILARITIES:
            raise InvalidInputError(f"auditor {name!r}: metric {metric!r} is not one of "
                                    f"{', '.join(SIMILARITIES)}")
        emb = np.asarray(auditor.embed(bank), dtype=float)
        if emb.ndim != 2 or len(emb) != len(bank) or not np.isfinite(emb).all():
            raise InvalidInputError(f"auditor {name!r} must embed n records as a finite (n, k) "
                                    f"array; got shape {emb.shape}")
        out[name] = FittedAuditor(name, auditor, metric, emb)
    return out
