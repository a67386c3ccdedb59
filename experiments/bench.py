"""The evaluation bench's fixed deployment: configuration (TOML), data, public pool, partition,
public projection ``F``, frozen auditor and linkage galleries.

Everything here is fixed for a sweep; each noise draw then varies only the participants' secret
keys and noise (see :mod:`experiments.sweep`).

References: noisy-anchor GDP paper, Section 5 (MNIST and CelebA protocols); SPEC.md section 1.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import gaussian_projection, pool_projection
from noisyanchor.common.splits import split_tags
from noisyanchor.common.tomlconfig import read_toml
from noisyanchor.experiments.datasets import (
    Dataset,
    load_array_file,
    load_digits,
    load_mnist_idx,
    make_synthetic,
)
from noisyanchor.experiments.linkage import (
    Auditor,
    Galleries,
    exact_source_galleries,
    fit_auditor,
    identity_galleries,
)
from noisyanchor.experiments.partition import (
    identity_disjoint,
    label_skewed,
    stratified_iid,
)
from noisyanchor.experiments.simulate import Federation, SimulationConfig

DATA_KINDS = ("digits", "synthetic", "mnist-idx", "file")
PARTITIONS = ("stratified", "label-skew")
SPLITS = ("stratified", "identity")
PROJECTIONS = ("gaussian", "svd", "none")


@dataclass(frozen=True)
class BenchConfig:
    """One experiment (``experiments/configs/*.toml``; keys are these field names).

    Attributes
    ----------
    dataset : {"digits", "synthetic", "mnist-idx", "file"}
    path, labels_path : str or None
        User files: an ``.npz``/``.npy``/``.csv`` (``file``) or IDX images and labels
        (``mnist-idx``). Relative paths are taken from the config file's folder.
    participants : list of int
        ``p`` values (one sweep per value; several for the participant-count study).
    model : str
        Downstream model, a name from :data:`analyst.downstream.MODELS`.
    dim : int or None
        Width ``h`` of ``F``; the anchor has ``r = anchors_per_dim * h`` rows (paper: 4).
    sigma_range, v_range : (low, high)
        Private-data noise ``sigma`` and anchor noise ``v`` are drawn uniformly over these.
    """

    name: str = "digits"
    dataset: str = "digits"
    path: str | None = None
    labels_path: str | None = None
    label_column: int = -1
    id_column: int | None = None
    scale: float = 1.0
    max_records: int | None = None
    synthetic_identities: int | None = None
    participants: list[int] = field(default_factory=lambda: [10])
    partition: str = "stratified"
    alpha: float = 0.5
    split: str = "stratified"
    test_fraction: float = 0.2
    validation_fraction: float = 0.1
    public_fraction: float = 0.15
    projection: str = "gaussian"
    dim: int | None = 16
    anchors_per_dim: int = 4
    draws: int = 200
    sigma_range: tuple[float, float] = (0.0, 50.0)
    v_range: tuple[float, float] = (0.0, 0.5)
    episodes: int = 1000
    auditor_components: int = 32
    colluder: int = 0
    model: str = "logistic"
    max_iter: int = 500
    tol: float = 1e-7
    seed: int = 2026
    workers: int = 2
    grid_every: int = 10
    bootstrap: int = 500

    def __post_init__(self) -> None:
        for key, value, allowed in (("dataset", self.dataset, DATA_KINDS),
                                    ("partition", self.partition, PARTITIONS),
                                    ("split", self.split, SPLITS),
                                    ("projection", self.projection, PROJECTIONS)):
            if value not in allowed:
                raise InvalidInputError(f"config key {key!r}: {value!r} is not one of "
                                        f"{', '.join(allowed)}")
        if not self.participants or min(self.participants) < 2:
            raise InvalidInputError("config key 'participants': need values >= 2")
        for key in ("sigma_range", "v_range"):
            lo, hi = getattr(self, key)
            if not 0 <= lo <= hi:
                raise InvalidInputError(f"config key {key!r}: need 0 <= low <= high")
        from noisyanchor.common.downstream import MODELS

        if self.model not in MODELS:
            raise InvalidInputError(f"config key 'model': {self.model!r} is not one of "
                                    f"{', '.join(MODELS)}")
        if self.draws < 1 or self.episodes < 1 or self.workers < 1:
            raise InvalidInputError("config keys 'draws', 'episodes', 'workers' must be >= 1")
        if not 0 < self.public_fraction < 1:
            raise InvalidInputError("config key 'public_fraction' must be in (0, 1)")

    @classmethod
    def from_toml(cls, config_path: str | Path, /, **overrides: Any) -> BenchConfig:
        """Load a config file; relative data paths resolve against its folder."""
        config_path = Path(config_path)
        raw = read_toml(config_path)
        for key in ("path", "labels_path"):
            if raw.get(key) is not None and not Path(raw[key]).is_absolute():
                raw[key] = str(config_path.parent / raw[key])
        return cls.from_dict({**raw, **{k: v for k, v in overrides.items() if v is not None}})

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> BenchConfig:
        """Config from a mapping, with an error naming any unknown key."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidInputError(f"unknown config key(s): {', '.join(unknown)}")
        raw = dict(raw)
        if isinstance(raw.get("participants"), int):
            raw["participants"] = [raw["participants"]]
        for key in ("sigma_range", "v_range"):
            if key in raw:
                raw[key] = tuple(float(v) for v in raw[key])
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written beside the sweep's rows)."""
        return dataclasses.asdict(self)


def load_bench_data(cfg: BenchConfig) -> Dataset:
    """The configured data set, optionally cut to ``max_records`` (a label-stratified subset)."""
    rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(0,)))
    if cfg.dataset == "digits":
        data = load_digits()
    elif cfg.dataset == "synthetic":
        data = make_synthetic(rng, identities=cfg.synthetic_identities)
    elif cfg.path is None:
        raise InvalidInputError(f"dataset {cfg.dataset!r} needs config key 'path'")
    elif cfg.dataset == "mnist-idx":
        if cfg.labels_path is None:
            raise InvalidInputError("dataset 'mnist-idx' needs config key 'labels_path'")
        data = load_mnist_idx(cfg.path, cfg.labels_path)
    else:
        data = load_array_file(cfg.path, label_column=cfg.label_column, id_column=cfg.id_column,
                               scale=cfg.scale)
    if cfg.max_records is not None and cfg.max_records < len(data.y):
        keep = np.sort(rng.choice(len(data.y), size=cfg.max_records, replace=False))
        data = Dataset(data.name, data.x[keep], data.y[keep],
                       None if data.ids is None else data.ids[keep], data.image_shape)
    return data


@dataclass(frozen=True)
class Bench:
    """A prepared deployment for one participant count ``p``.

    Attributes
    ----------
    federation : Federation
        Participants' records (input space), labels, tags, ``F`` and the shared seed.
    bank : (N, d_in) ndarray
        Clean records of the whole data set (input space); ``rows[i]`` are participant ``i``'s.
    rows : list of (n_i,) int ndarrays
        Bank index of each of participant ``i``'s records, in upload order.
    auditor : Auditor
        Fitted on the public pool, frozen.
    bank_embeddings : (N, k) ndarray
    exact : Galleries
        Exact-source episodes (queries are records of non-colluding participants).
    identity : Galleries or None
        Cross-record identity episodes (data sets with identity ids only).
    grid : (g,) int ndarray
        Bank indices of the records drawn in reconstruction grids (one per label, at most 10).
    """

    config: BenchConfig
    data: Dataset
    federation: Federation
    bank: np.ndarray
    rows: list[np.ndarray]
    public: np.ndarray
    auditor: Auditor
    bank_embeddings: np.ndarray
    exact: Galleries
    identity: Galleries | None
    grid: np.ndarray


def _public_pool(data: Dataset, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Mask of public records (never uploaded): whole identities when ids exist, else a
    label-stratified fraction of records."""
    if data.ids is not None:
        people = np.unique(data.ids)
        chosen = rng.choice(people, size=max(1, round(fraction * len(people))), replace=False)
        return np.isin(data.ids, chosen)
    mask = np.zeros(len(data.y), dtype=bool)
    for label in np.unique(data.y):
        idx = rng.permutation(np.flatnonzero(data.y == label))
        mask[idx[:round(fraction * len(idx))]] = True
    return mask


def prepare_bench(cfg: BenchConfig, p: int, data: Dataset | None = None) -> Bench:
    """Fix the deployment for ``p`` participants: public pool, splits, partition, ``F``,
    auditor and galleries, all from ``cfg.seed`` (the same for every method and draw)."""
    data = load_bench_data(cfg) if data is None else data
    seq = np.random.SeedSequence(cfg.seed, spawn_key=(1, p))
    rng_pool, rng_split, rng_part, rng_proj, rng_gal, rng_shared = (
        np.random.default_rng(s) for s in seq.spawn(6))
    public = _public_pool(data, cfg.public_fraction, rng_pool)
    if cfg.split == "identity":
        if data.ids is None:
            raise InvalidInputError("config split='identity' needs a data set with identity ids")
        tags, reference = identity_disjoint(data.ids, rng_split, test_fraction=cfg.test_fraction,
                                            validation_fraction=cfg.validation_fraction)
    else:
        tags = split_tags(data.y, rng_split, test_fraction=cfg.test_fraction,
                          validation_fraction=cfg.validation_fraction)
        reference = np.zeros(len(data.y), dtype=bool)
    uploaded = np.flatnonzero(~public & ~reference)
    if cfg.partition == "stratified":
        parts = stratified_iid(data.y[uploaded], p, rng_part)
    else:
        parts = label_skewed(data.y[uploaded], p, rng_part, alpha=cfg.alpha)
    rows = [uploaded[ix] for ix in parts]

    projection_seed = int(rng_proj.integers(2**63))
    if cfg.projection == "none" or cfg.dim is None:
        projection = None
    elif cfg.projection == "gaussian":
        projection = gaussian_projection(data.x.shape[1], cfg.dim,
                                         np.random.default_rng(projection_seed))
    else:
        projection = pool_projection(data.x[public], cfg.dim)
    d = data.x.shape[1] if projection is None else projection.shape[1]
    sim = SimulationConfig(dataset=data.name, participants=p, anchors=cfg.anchors_per_dim * d,
                           dim=cfg.dim if projection is not None else None,
                           colluder=cfg.colluder, seed=cfg.seed, max_iter=cfg.max_iter,
                           tol=cfg.tol, test_fraction=cfg.test_fraction,
                           validation_fraction=cfg.validation_fraction,
                           utility=False)  # the sweep scores Z with cfg.model itself
    shared = rng_shared.bytes(32)
    fed = Federation(sim, [data.x[r] for r in rows], [data.y[r] for r in rows],
                     [tags[r] for r in rows], projection, projection_seed, shared,
                     [0] * p)  # participant seeds are set per draw by the sweep

    auditor = fit_auditor(data.x[public], cfg.auditor_components)
    targets = np.concatenate([r for i, r in enumerate(rows) if i != cfg.colluder])
    in_bank = ~public  # distractors are clean participant-side records, never public ones
    labels_for_gallery = np.where(in_bank, data.y, -1)
    exact = exact_source_galleries(labels_for_gallery, targets, rng_gal, episodes=cfg.episodes)
    identity = None
    if data.ids is not None and reference.any():
        identity = identity_galleries(data.ids, reference, targets, rng_gal,
                                      episodes=cfg.episodes)
    grid = np.asarray([targets[data.y[targets] == label][0]
                       for label in np.unique(data.y[targets])[:10]])
    return Bench(cfg, data, fed, data.x, rows, public, auditor, auditor.embed(data.x), exact,
                 identity, grid)
