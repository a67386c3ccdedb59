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

from noisyanchor.common.attacks import SideKnowledge
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import DEFAULT_TRANSLATION_SCALE, gaussian_projection, pool_projection
from noisyanchor.common.splits import split_tags
from noisyanchor.common.tomlconfig import read_toml
from noisyanchor.experiments.auditors import (
    AuditorData,
    FittedAuditor,
    available_auditors,
    fit_auditors,
)
from noisyanchor.experiments.datasets import (
    TABLE_DATASETS,
    Dataset,
    load_array_file,
    load_dataset,
    load_digits,
    load_mnist_idx,
    make_synthetic,
)
from noisyanchor.experiments.linkage import (
    Galleries,
    exact_source_galleries,
    identity_galleries,
)
from noisyanchor.experiments.partition import (
    fixed_budget,
    identity_disjoint,
    label_skewed,
    stratified_iid,
)
from noisyanchor.experiments.simulate import Federation, SimulationConfig

DATA_KINDS = ("digits", "synthetic", "mnist-idx", "file", *TABLE_DATASETS)
PARTITIONS = ("stratified", "label-skew")
SPLITS = ("stratified", "identity")
PROJECTIONS = ("gaussian", "svd", "none")


@dataclass(frozen=True)
class BenchConfig:
    """One experiment (``experiments/configs/*.toml``; keys are these field names).

    Attributes
    ----------
    dataset : {"digits", "synthetic", "mnist-idx", "file", "breast-cancer", "fair", ...}
        ``breast-cancer`` and ``fair`` (and their ``-unscaled`` forms) are bundled typed tables
        encoded as their pilot template declares (:func:`experiments.datasets.load_tabular`).
    path, labels_path : str or None
        User files: an ``.npz``/``.npy``/``.csv`` (``file``) or IDX images and labels
        (``mnist-idx``). Relative paths are taken from the config file's folder.
    participants : list of int
        ``p`` values (one sweep per value; several for the participant-count study).
    records_per_participant, identities_per_participant : int or None
        The paper's participant-count design: every participant holds this many records (or
        all uploaded records of this many identities), dealt once for ``max(participants)``
        participants; a run with ``p`` uses the first ``p`` (nested prefixes), so the total
        grows with ``p``, and the deployment (pool, split, ``F``, anchor), the noise levels and
        the participants' seeds are the same for every ``p`` (paired by draw index). None (both):
        the uploaded records are split among ``p`` participants (the total is fixed).
    model, models : str, list of str
        Downstream models (names from :data:`common.downstream.BENCH_MODELS`), each selected on
        validation and scored on every draw; ``model`` is the one the figures use.
    auditor, auditors : str, list of str
        Linkage auditors (:mod:`experiments.auditors`, plug-ins included); ``auditor`` is the one
        the figures and the ``linkage`` key of every row use.
    dim : int or None
        Width ``h`` of ``F``; the anchor has ``r = anchors_per_dim * h`` rows (paper: 4).
    sigma_range, v_range : (low, high)
        Private-data noise ``sigma`` and anchor noise ``v`` are drawn uniformly over these.
    stopping : {"absolute", "relative", "objective"}
        GPM stopping rule (:data:`common.gopp.STOPPING_RULES`); the bench reproduces the paper, so
        its default is the paper's ``||R^(t+1) - R^(t)||_F <= tol`` ("absolute"), on which the
        convergence counts of Fig. 9 depend.
    translation_scale : float
        ``s`` of the secret translations ``Psi_i ~ N(0, s^2 I)``. The paper does not state the
        distribution of its translations; only I-GDP's utility depends on it (every other
        method removes or shares the translations), so the I-GDP control is also run at each
        of ``control_translation_scales``.
    replicates : int
        Replicated deployments: each has its own seeded public pool, split, partition, ``F``,
        anchor, galleries, known records, noise levels and keys (replicate 0 keeps the streams
        of a sweep without replicates); every claim is judged in each.
    known_records : list of int
        ``m`` of the known-input attacks (one attack ``known_input_<m>`` each; the attacker
        knows ``m`` records of every target, drawn once per replicate). Empty: none.
    known_sample : bool
        Run the known-sample attacks against the public pool (in the working space).
    holdout_fraction : float
        Records held out of every upload and never public: the non-members of membership
        inference against ``Z``. 0: no membership inference against ``Z``.
    membership_every : int or None
        Membership inference against the returned model on the controls and every
        ``membership_every``-th draw (the shadow models cost fits); None: never.
    shadow_models : int
        Shadow models of that attack (each trained on half of the public pool).
    min_draws : int
        Fewest draws of each compared method for a claim to be judged ("not enough draws").
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
    synthetic_records: int = 2000
    participants: list[int] = field(default_factory=lambda: [10])
    records_per_participant: int | None = None
    identities_per_participant: int | None = None
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
    auditor: str = "pca"
    auditors: list[str] = field(default_factory=lambda: ["pca"])
    colluder: int = 0
    model: str = "logistic"
    models: list[str] = field(default_factory=lambda: ["logistic"])
    translation_scale: float = DEFAULT_TRANSLATION_SCALE
    control_translation_scales: list[float] = field(default_factory=list)
    max_iter: int = 500
    tol: float = 1e-7
    stopping: str = "absolute"
    seed: int = 2026
    workers: int = 2
    grid_every: int = 10
    bootstrap: int = 500
    replicates: int = 1
    known_records: list[int] = field(default_factory=list)
    known_sample: bool = False
    holdout_fraction: float = 0.0
    membership_every: int | None = None
    shadow_models: int = 2
    min_draws: int = 50

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
        from noisyanchor.common.downstream import BENCH_MODELS as MODELS

        auditors = available_auditors()
        for one, many, known in (("model", "models", MODELS), ("auditor", "auditors", auditors)):
            for key, names in ((one, [getattr(self, one)]), (many, getattr(self, many))):
                bad = [n for n in names if n not in known]
                if bad:
                    raise InvalidInputError(f"config key {key!r}: {bad[0]!r} is not one of "
                                            f"{', '.join(known)}")
            if getattr(self, one) not in getattr(self, many):
                raise InvalidInputError(f"config key {one!r}: {getattr(self, one)!r} is not in "
                                        f"{many!r}")
        for key in ("records_per_participant", "identities_per_participant"):
            value = getattr(self, key)
            if value is not None and value < 2:
                raise InvalidInputError(f"config key {key!r} must be >= 2")
        if self.records_per_participant and self.identities_per_participant:
            raise InvalidInputError("config keys 'records_per_participant' and "
                                    "'identities_per_participant' exclude each other")
        if not all(s > 0 for s in (self.translation_scale, *self.control_translation_scales)):
            raise InvalidInputError("config keys 'translation_scale' and "
                                    "'control_translation_scales' need values > 0")
        from noisyanchor.common.gopp import STOPPING_RULES

        if self.stopping not in STOPPING_RULES:
            raise InvalidInputError(f"config key 'stopping': {self.stopping!r} is not one of "
                                    f"{', '.join(STOPPING_RULES)}")
        if self.synthetic_records < 10:
            raise InvalidInputError("config key 'synthetic_records' must be >= 10")
        if self.draws < 1 or self.episodes < 1 or self.workers < 1:
            raise InvalidInputError("config keys 'draws', 'episodes', 'workers' must be >= 1")
        if not 0 < self.public_fraction < 1:
            raise InvalidInputError("config key 'public_fraction' must be in (0, 1)")
        if not 0 <= self.holdout_fraction < 1 - self.public_fraction:
            raise InvalidInputError("config key 'holdout_fraction' must be in [0, 1 - "
                                    "public_fraction)")
        if self.replicates < 1 or self.min_draws < 1 or self.shadow_models < 1:
            raise InvalidInputError("config keys 'replicates', 'min_draws', 'shadow_models' "
                                    "must be >= 1")
        if any(m < 2 for m in self.known_records):
            raise InvalidInputError("config key 'known_records': the known-input attack needs "
                                    "m >= 2 known records")
        if self.membership_every is not None and self.membership_every < 1:
            raise InvalidInputError("config key 'membership_every' must be >= 1")

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
        # ``model``/``auditor`` alone mean a one-element list; a list alone leads with its first.
        for one, many in (("model", "models"), ("auditor", "auditors")):
            if one in raw and many not in raw:
                raw[many] = [raw[one]]
            elif many in raw and one not in raw and raw[many]:
                raw[one] = raw[many][0]
        return cls(**raw)

    @property
    def nested(self) -> bool:
        """The paper's participant-count design (fixed records or identities per participant)."""
        return bool(self.records_per_participant or self.identities_per_participant)

    def stream(self, p: int) -> int:
        """The ``p`` that keys the random streams: 0 in the nested design (the same deployment,
        noise levels and seeds for every ``p``), else ``p``."""
        return 0 if self.nested else p

    def spawn_key(self, purpose: int, p: int, *rest: int, replicate: int = 0) -> tuple[int, ...]:
        """Spawn key of a random stream: ``(purpose, stream(p), *rest)``, then the replicate
        index unless it is 0 (replicate 0 keeps the streams of a sweep without replicates)."""
        return (purpose, self.stream(p), *rest) + ((replicate,) if replicate else ())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written beside the sweep's rows)."""
        return dataclasses.asdict(self)


def load_bench_data(cfg: BenchConfig) -> Dataset:
    """The configured data set, optionally cut to ``max_records`` (a label-stratified subset)."""
    rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(0,)))
    if cfg.dataset == "digits":
        data = load_digits()
    elif cfg.dataset == "synthetic":
        data = make_synthetic(rng, n=cfg.synthetic_records, identities=cfg.synthetic_identities)
    elif cfg.dataset in TABLE_DATASETS:
        data = load_dataset(cfg.dataset, rng)
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
    auditors : dict of FittedAuditor
        Every configured auditor that applies, fitted on the public pool and frozen, with the
        bank's embeddings.
    exact : Galleries
        Exact-source episodes (queries are records of non-colluding participants).
    identity : Galleries or None
        Cross-record identity episodes (data sets with identity ids only).
    grid : (g,) int ndarray
        Bank indices of the records drawn in reconstruction grids (one per label, at most 10).
    replicate : int
    selection : Galleries
        Exact-source episodes held out from ``exact``: the strongest attack of a draw is chosen
        on these and its linkage reported on ``exact``.
    identity_selection : Galleries or None
        The same for identity linkage.
    known : dict of int to (m, d_in) ndarray
        Bank indices of the records of each target the known-input attacker knows (``m`` the
        largest of ``known_records``), drawn once per replicate.
    holdout : (h,) int ndarray
        Bank indices of records never uploaded nor public (membership non-members for ``Z``).
    """

    config: BenchConfig
    data: Dataset
    federation: Federation
    bank: np.ndarray
    rows: list[np.ndarray]
    public: np.ndarray
    auditors: dict[str, FittedAuditor]
    exact: Galleries
    identity: Galleries | None
    grid: np.ndarray
    replicate: int = 0
    selection: Galleries | None = None
    identity_selection: Galleries | None = None
    known: dict[int, np.ndarray] = field(default_factory=dict)
    holdout: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def auditor(self) -> FittedAuditor:
        """The configured primary auditor."""
        return self.auditors[self.config.auditor]

    def working(self, rows: np.ndarray) -> np.ndarray:
        """Bank records ``rows`` in the working space (``X F``)."""
        f = self.federation.projection
        x = self.bank[rows]
        return x if f is None else x @ f

    def side_knowledge(self, data_noise: float = 0.0) -> SideKnowledge:
        """What the attacks without a colluder know: each target's known records and the
        public pool, in the working space, the draw's ``sigma``, the labels (of every
        upload's rows, sent in the clear, and of the known records), and a candidate pool
        with its labels."""
        known = {i: self.working(rows) for i, rows in self.known.items()}
        public = self.working(np.flatnonzero(self.public)) if self.config.known_sample else None
        y = self.data.y
        # The candidate pool of distance matching: every target's known records (for target
        # i with m known, the rest of its own are members, the others' are not) and the
        # held-out records (no one's).
        pool = np.concatenate([*self.known.values(), self.holdout]).astype(np.int64)
        return SideKnowledge(known, public, data_noise,
                             labels={i: y[rows] for i, rows in enumerate(self.rows)},
                             known_labels={i: y[rows] for i, rows in self.known.items()},
                             candidates=self.working(pool) if len(pool) else None,
                             candidate_labels=y[pool] if len(pool) else None)


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


def _partition(cfg: BenchConfig, data: Dataset, uploaded: np.ndarray, p: int,
               rng: np.random.Generator) -> list[np.ndarray]:
    """Bank indices of each participant's records: the uploaded records split among ``p``, or
    in the nested design the first ``p`` of ``max(participants)`` fixed budgets."""
    y = data.y[uploaded]
    if cfg.nested:
        per = cfg.records_per_participant or cfg.identities_per_participant
        if cfg.identities_per_participant and data.ids is None:
            raise InvalidInputError("config key 'identities_per_participant' needs a data set "
                                    "with identity ids")
        ids = data.ids[uploaded] if cfg.identities_per_participant else None
        parts = fixed_budget(y, max(cfg.participants), per, rng, ids)[:p]
    elif cfg.partition == "stratified":
        parts = stratified_iid(y, p, rng)
    else:
        parts = label_skewed(y, p, rng, alpha=cfg.alpha)
    return [uploaded[ix] for ix in parts]


def _projection(cfg: BenchConfig, data: Dataset, public: np.ndarray,
                seed: int) -> np.ndarray | None:
    """The public ``F``: Gaussian, the pool's top right singular vectors, or none."""
    if cfg.projection == "none" or cfg.dim is None:
        return None
    if cfg.projection == "gaussian":
        return gaussian_projection(data.x.shape[1], cfg.dim, np.random.default_rng(seed))
    return pool_projection(data.x[public], cfg.dim)


def prepare_bench(cfg: BenchConfig, p: int, data: Dataset | None = None, *,
                  replicate: int = 0) -> Bench:
    """Fix the deployment for ``p`` participants: public pool, splits, partition, ``F``,
    auditors, galleries, known records and held-out records, all from ``cfg.seed`` and the
    replicate index (the same for every method and draw; in the nested design also for every
    ``p``)."""
    data = load_bench_data(cfg) if data is None else data
    if not 0 <= replicate < cfg.replicates:
        raise InvalidInputError(f"replicate {replicate} is not in [0, {cfg.replicates})")
    seq = np.random.SeedSequence(cfg.seed, spawn_key=cfg.spawn_key(1, p, replicate=replicate))
    # Children are fixed by their index: streams added after the sixth leave the first alone.
    rng_pool, rng_split, rng_part, rng_proj, rng_gal, rng_shared, rng_sel, rng_known = (
        np.random.default_rng(s) for s in seq.spawn(8))
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
    uploadable = np.flatnonzero(~public & ~reference)
    holdout = np.zeros(0, dtype=np.int64)
    if cfg.holdout_fraction:
        held = _public_pool(Dataset(data.name, data.x[uploadable], data.y[uploadable],
                                    None if data.ids is None else data.ids[uploadable],
                                    data.image_shape),
                            cfg.holdout_fraction / (1 - cfg.public_fraction), rng_known)
        holdout, uploadable = uploadable[held], uploadable[~held]
    rows = _partition(cfg, data, uploadable, p, rng_part)

    projection_seed = int(rng_proj.integers(2**63))
    projection = _projection(cfg, data, public, projection_seed)
    d = data.x.shape[1] if projection is None else projection.shape[1]
    sim = SimulationConfig(dataset=data.name, participants=p, anchors=cfg.anchors_per_dim * d,
                           dim=cfg.dim if projection is not None else None,
                           colluder=cfg.colluder, seed=cfg.seed, max_iter=cfg.max_iter,
                           tol=cfg.tol, stopping=cfg.stopping, gopp_method="gpm",
                           test_fraction=cfg.test_fraction,
                           validation_fraction=cfg.validation_fraction,
                           translation_scale=cfg.translation_scale,
                           utility=False)  # the sweep scores Z with every cfg.models itself
    shared = rng_shared.bytes(32)
    fed = Federation(sim, [data.x[r] for r in rows], [data.y[r] for r in rows],
                     [tags[r] for r in rows], projection, projection_seed, shared,
                     [0] * p)  # participant seeds are set per draw by the sweep

    pool = AuditorData(data.x[public], data.y[public],
                       None if data.ids is None else data.ids[public], cfg.auditor_components)
    auditors = fit_auditors(cfg.auditors, pool, data.x)
    if cfg.auditor not in auditors:
        raise InvalidInputError(f"the primary auditor {cfg.auditor!r} does not apply to this "
                                "data set (e.g. it needs identities)")
    targets = np.concatenate([r for i, r in enumerate(rows) if i != cfg.colluder])
    in_bank = ~public  # distractors are clean participant-side records, never public ones
    labels_for_gallery = np.where(in_bank, data.y, -1)
    exact = exact_source_galleries(labels_for_gallery, targets, rng_gal, episodes=cfg.episodes)
    identity = identity_selection = None
    if data.ids is not None and reference.any():
        identity = identity_galleries(data.ids, reference, targets, rng_gal,
                                      episodes=cfg.episodes)
        identity_selection = identity_galleries(data.ids, reference, targets, rng_sel,
                                                episodes=cfg.episodes)
    selection = exact_source_galleries(labels_for_gallery, targets, rng_sel,
                                       episodes=cfg.episodes)
    grid = np.asarray([targets[data.y[targets] == label][0]
                       for label in np.unique(data.y[targets])[:10]])
    most = max(cfg.known_records, default=0)
    known = {i: r[rng_known.permutation(len(r))[:min(most, len(r))]]
             for i, r in enumerate(rows) if i != cfg.colluder} if most else {}
    return Bench(cfg, data, fed, data.x, rows, public, auditors, exact, identity, grid,
                 replicate, selection, identity_selection, known, holdout)
