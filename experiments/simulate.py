"""The whole protocol in one process: participants, analyst, colluder and attacker.

Seeds: one root seed (OS entropy when omitted) drives everything through :class:`SeedPlan`, which
names a separate stream per purpose. The multi-process demo derives every participant's seed and
the dealer's shared seed from the same plan, so its collaboration matrix can be checked against
this simulator's.

References: SPEC.md sections 1-3.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from noisyanchor.common.alignment import Alignment, align
from noisyanchor.common.attacks import (
    Attack,
    AttackerView,
    Disclosure,
    SideKnowledge,
    attack_all,
    relative_error,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import (
    DEFAULT_TRANSLATION_SCALE,
    anchor_from_seed,
    gaussian_projection,
)
from noisyanchor.common.gopp import rotational_error
from noisyanchor.common.methods import DEFAULT_ANCHOR_NOISE, Method, SecretState, Upload
from noisyanchor.common.splits import split_tags
from noisyanchor.common.theory import phase_transition_v
from noisyanchor.common.validation import check_count, check_nonnegative
from noisyanchor.experiments.datasets import load_dataset
from noisyanchor.experiments.partition import stratified_iid
from noisyanchor.participant.compute import compute_upload

#: Stream identifiers of :class:`SeedPlan` (stable: changing them changes every result).
_PURPOSES = {"data": 0, "partition": 1, "projection": 2, "shared": 3, "participant": 4,
             "split": 5}


class SeedPlan:
    """Independent named random streams derived from one root seed."""

    def __init__(self, seed: int | None) -> None:
        self.root = np.random.SeedSequence(seed)

    def _child(self, purpose: str, index: int = 0) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.root.entropy, spawn_key=(_PURPOSES[purpose], index))

    def rng(self, purpose: str, index: int = 0) -> np.random.Generator:
        """Generator for ``purpose`` (and ``index``, e.g. a participant)."""
        return np.random.default_rng(self._child(purpose, index))

    def int_seed(self, purpose: str, index: int = 0) -> int:
        """A 64-bit integer seed for ``purpose``, for handing to another process's config."""
        return int(self._child(purpose, index).generate_state(1, np.uint64)[0])

    def shared_seed(self) -> bytes:
        """The 256-bit seed the dealer shares (anchor and common C-GDP key derive from it)."""
        return self._child("shared").generate_state(8, np.uint32).astype("<u4").tobytes()


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of one in-process run (``noisyanchor simulate``).

    ``v`` None: :data:`common.methods.DEFAULT_ANCHOR_NOISE` for AA-I-GDP (anchor noise), 0
    for the other methods (which have no anchor noise). ``colluders``: how many participants
    collude, ``colluder`` and the next ``k - 1`` indices (mod ``p``); their disclosures are used
    jointly (:class:`common.attacks.AttackerView`).
    """

    dataset: str = "digits"
    method: str = "aa-igdp-an"
    participants: int = 10
    anchors: int | None = None
    dim: int | None = None
    sigma: float = 0.0
    v: float | None = None
    colluder: int | None = 0
    colluders: int = 1
    seed: int | None = None
    max_iter: int = 500
    tol: float = 1e-7
    precision: str = "auto"
    stopping: str = "objective"
    gopp_method: str = "auto"
    test_fraction: float = 0.2
    validation_fraction: float = 0.0
    translation_scale: float = DEFAULT_TRANSLATION_SCALE
    utility: bool = True

    def __post_init__(self) -> None:
        if self.v is None:  # one default for every command: DEFAULT_ANCHOR_NOISE
            anchor_noise = Method.parse(self.method).anchor_noise
            object.__setattr__(self, "v", DEFAULT_ANCHOR_NOISE if anchor_noise else 0.0)


@dataclass(frozen=True)
class Federation:
    """The prepared inputs of a run: each participant's records, labels, tags and seeds.

    Attributes
    ----------
    x : list of (n_i, d_in) ndarrays
        Participants' records in input space.
    labels, tags : lists of (n_i,) ndarrays
    projection : (d_in, h) ndarray or None
        Public ``F``.
    projection_seed : int
        Public seed that generated ``F``.
    shared_seed : bytes
        Dealer's 256-bit seed (anchor, common key).
    participant_seeds : list of int
        Each participant's secret seed (keys and noise).
    """

    config: SimulationConfig
    x: list[np.ndarray]
    labels: list[np.ndarray]
    tags: list[np.ndarray]
    projection: np.ndarray | None
    projection_seed: int
    shared_seed: bytes
    participant_seeds: list[int]

    @property
    def d(self) -> int:
        """Working dimension ``d`` (``h`` with a projection)."""
        return self.x[0].shape[1] if self.projection is None else self.projection.shape[1]

    @property
    def r(self) -> int:
        """Anchor rows ``r`` (default ``4 d``, the paper's ratio)."""
        return self.config.anchors or 4 * self.d

    @property
    def owners(self) -> np.ndarray:
        """Participant index of every row, in the row order of ``Z``."""
        return np.concatenate([np.full(len(y), i) for i, y in enumerate(self.labels)])

    @cached_property
    def _working(self) -> list[np.ndarray]:
        """Every participant's ``X_i F``, computed once per federation (read-only arrays)."""
        if self.projection is None:
            return self.x
        blocks = [x @ self.projection for x in self.x]
        for block in blocks:
            block.flags.writeable = False  # shared by every caller of working()
        return blocks

    def working(self, i: int) -> np.ndarray:
        """``X_i F`` (``X_i`` without a projection); the same array on every call."""
        return self._working[i]


def prepare(config: SimulationConfig) -> Federation:
    """Load the data set, partition it and derive every seed of the run."""
    method = Method.parse(config.method)
    p = check_count(config.participants, "participants", minimum=2)
    check_nonnegative(config.sigma, "sigma")
    check_nonnegative(config.v, "v")
    if config.colluder is not None and not 0 <= config.colluder < p:
        raise InvalidInputError(f"colluder must be a participant index in [0, {p})")
    if not 1 <= config.colluders < p:
        raise InvalidInputError(f"colluders k must be in [1, {p - 1}] (at least one target), "
                                f"got {config.colluders}")
    plan = SeedPlan(config.seed)
    data = load_dataset(config.dataset, plan.rng("data"))
    projection_seed = plan.int_seed("projection")
    projection = None
    if config.dim is not None:
        h = check_count(config.dim, "dim", minimum=1)
        projection = gaussian_projection(data.x.shape[1], h,
                                         np.random.default_rng(projection_seed))
    parts = stratified_iid(data.y, p, plan.rng("partition"))
    tags = split_tags(data.y, plan.rng("split"), test_fraction=config.test_fraction,
                      validation_fraction=config.validation_fraction)
    fed = Federation(config, [data.x[ix] for ix in parts], [data.y[ix] for ix in parts],
                     [tags[ix] for ix in parts], projection, projection_seed, plan.shared_seed(),
                     [plan.int_seed("participant", i) for i in range(p)])
    if method.uses_anchor and fed.r < fed.d + 1:
        raise InvalidInputError(f"anchors r={fed.r} must be >= d + 1 = {fed.d + 1}")
    return fed


def colluder_indices(config: SimulationConfig) -> list[int]:
    """The ``k`` colluders: ``colluder`` and the next ``k - 1`` indices mod ``p`` (none
    without a colluder)."""
    if config.colluder is None:
        return []
    return [(config.colluder + j) % config.participants for j in range(config.colluders)]


def participant_upload(fed: Federation, i: int) -> tuple[Upload, SecretState]:
    """Participant ``i``'s side of the protocol: keys from its own seed, then its one upload.

    The participant process calls the same :func:`participant.compute.compute_upload`, so both
    paths produce identical bytes.
    """
    cfg = fed.config
    return compute_upload(cfg.method, fed.working(i),
                          np.random.default_rng(fed.participant_seeds[i]),
                          shared_seed=fed.shared_seed, anchors=fed.r, sigma=cfg.sigma, v=cfg.v,
                          translation_scale=cfg.translation_scale)


def attack_errors(
    fed: Federation, reconstructions: dict[str, dict[int, np.ndarray]]
) -> dict[str, dict[str, Any]]:
    """Per attack: ``relative_error`` (mean over targets) and ``per_target`` (keyed by ``str(i)``)
    of each reconstruction against the target's working data ``X_i F``."""
    out: dict[str, dict[str, Any]] = {}
    for name, per_target in reconstructions.items():
        errors = {i: relative_error(x_hat, fed.working(i)) for i, x_hat in per_target.items()}
        out[name] = {"relative_error": float(np.mean(list(errors.values()))),
                     "per_target": {str(i): e for i, e in errors.items()}}
    return out


def _strongest_by_error(method: Method, errors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The attack with the smallest mean relative error, among all and among the paper's (the
    sweep ranks by linkage instead, which needs an auditor)."""
    from noisyanchor.experiments.linkage import PAPER_ATTACKS

    paper = PAPER_ATTACKS.get(method.value, ())
    out: dict[str, Any] = {}
    for attack_set, names in (("all", list(errors)), ("paper", [a for a in errors if a in paper])):
        best = min(names, key=lambda a: errors[a]["relative_error"], default=None)
        out[attack_set] = None if best is None else {
            "attack": best, "relative_error": errors[best]["relative_error"]}
    return out


@dataclass
class SimulationResult:
    """Everything a run produced; :meth:`summary` gives the JSON of ``simulate --json``."""

    federation: Federation
    uploads: list[Upload]
    states: list[SecretState]
    alignment: Alignment
    reconstructions: dict[str, dict[int, np.ndarray]]
    summary_data: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (keys pinned by the issue)."""
        return self.summary_data


def simulate(config: SimulationConfig, federation: Federation | None = None, *,
             attacks: dict[str, Attack] | None = None,
             side: SideKnowledge | None = None) -> SimulationResult:
    """Run the whole protocol in-process and measure alignment, leakage and utility.

    ``federation`` runs on already prepared inputs (the sweep's public-pool-held-out split);
    its own ``config`` is then used and ``config`` must be that same object. ``attacks``: the
    attacks to run (default: every built-in and plug-in attack). The colluder discloses ``v``
    (a public protocol parameter); the summary also reports ``v`` estimated from the anchor
    residuals (``anchor_noise_estimate``). ``side``: what the attacks without a colluder know
    (known records of the targets, a public sample); without it they are skipped.
    """
    start = time.perf_counter()
    if federation is not None and federation.config is not config:
        raise InvalidInputError("simulate(config, federation) needs config is federation.config")
    method = Method.parse(config.method)
    fed = prepare(config) if federation is None else federation
    p, d, r = config.participants, fed.d, fed.r
    pairs = [participant_upload(fed, i) for i in range(p)]
    uploads = [u for u, _ in pairs]
    states = [s for _, s in pairs]
    alignment = align(method, [u.data for u in uploads],
                      [u.anchor for u in uploads] if method.uses_anchor else None,
                      max_iter=config.max_iter, tol=config.tol, precision=config.precision,
                      stopping=config.stopping, gopp_method=config.gopp_method)

    solver = {"iterations": 0, "converged": True, "certified": None, "certificate_min_eig": None,
              "seconds": 0.0, **alignment.solver}
    solver["rotational_error"] = rotational_error(
        np.stack([s.key.rotation for s in states]), alignment.rotations)

    reconstructions: dict[str, dict[int, np.ndarray]] = {}
    errors: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    diagnostics: dict[str, dict[str, Any]] = {}
    noise_estimate = None
    colluders = colluder_indices(config)
    if colluders:
        anchor = anchor_from_seed(fed.shared_seed, r, d) if method.uses_anchor else None
        disclosures = [Disclosure(c, fed.working(c), states[c].key, anchor, config.v)
                       for c in colluders]
        run = attack_all(AttackerView(method, disclosures, [u.data for u in uploads],
                                      [u.anchor for u in uploads], alignment.rotations,
                                      side=side), attacks)
        reconstructions, skipped = run.reconstructions, run.skipped
        diagnostics = {a: {str(i): facts for i, facts in per.items()}
                       for a, per in run.diagnostics.items()}
        noise_estimate = run.estimated_noise_level
        errors = attack_errors(fed, reconstructions)

    utility: dict[str, Any] | None = None
    if config.utility:
        from noisyanchor.common.downstream import evaluate_utility

        util = evaluate_utility(alignment.z, np.concatenate(fed.labels), np.concatenate(fed.tags),
                                participants=fed.owners)
        utility = asdict(util)

    summary = {
        "method": method.value,
        "dataset": config.dataset,
        "participants": p,
        "records": int(sum(len(x) for x in fed.x)),
        "dim": d,
        "projected": fed.projection is not None,
        "anchors": r if method.uses_anchor else None,
        "sigma": config.sigma,
        "v": config.v,
        "v_pt": phase_transition_v(p, d, r) if method.uses_anchor else None,
        "colluder": config.colluder,
        "colluders": colluders,
        "seed": config.seed,
        "solver": solver,
        "attacks": errors,
        "strongest_attack": _strongest_by_error(method, errors),
        "attacks_skipped": skipped,
        "attack_diagnostics": diagnostics,
        "anchor_noise_estimate": noise_estimate,
        "utility": utility,
        "seconds": time.perf_counter() - start,
    }
    return SimulationResult(fed, uploads, states, alignment, reconstructions, summary)
