"""``noisyanchor experiment sweep``: noise draws per method on a fixed deployment, measuring
honest-setting utility, every attack's linkage and error, and solver diagnostics.

Design:
* The deployment (data, pool, partition, ``F``, anchor, auditor, galleries) is fixed per ``p``
  (:mod:`experiments.bench`); each draw varies the participants' keys and noise only.
* ``replicates`` deployments, each seeded apart (:func:`experiments.bench.prepare_bench`), every
  one with its own draws; rows carry ``replicate``.
* Noise levels are drawn uniformly from a seeded stream: ``sigma`` in ``sigma_range`` for
  AA-I-GDP (private-data noise), ``v`` in ``v_range`` for AA-I-GDP (anchor noise). Every
  AA-I-GDP-pn draw is paired with the C-GDP-pn run coupled to it (SPEC.md section 2, Corollary
  3.3 of the paper): common key ``(O_s, Psi_s)`` and noise ``W'_i = W_i O_i^T O_s``.
* Noiseless controls (C-GDP, AA-I-GDP, I-GDP) are separate rows with ``control: true``; the
  C-GDP control is coupled to the AA-I-GDP control the same way (common key ``(O_s, Psi_s)`` of
  its reference ``s``), so the two collaboration matrices agree to rounding and any model scores
  them alike; the I-GDP control is repeated at every ``control_translation_scales`` value (only
  I-GDP's utility depends on the translations' scale, which the paper does not state).
* Every draw is scored by every configured downstream model (``utility_by_model``, with whether
  each fit converged) and its reconstructions by every auditor (``linkage_by_auditor``,
  ``identity_linkage_by_auditor``), built-in and plug-in attacks alike, the attacks without a
  colluder included (known records and the public pool from the bench). Linkage is also
  measured on held-out selection galleries (``selection_linkage_by_auditor``): ``strongest``
  names per auditor the attack that links most on those, with its linkage on the reported
  galleries, among the paper's attacks and per threat (:data:`experiments.linkage.ATTACK_SETS`).
* Membership inference (:mod:`experiments.membership`) against the returned model on the
  controls and every ``membership_every``-th draw, against ``Z`` with held-out records.
* Rows are appended to ``rows.jsonl`` as they finish, keyed by
  ``(p, method, draw, translation_scale, replicate)``: a killed sweep restarted with the same
  arguments skips the keys already written.
* Draws run in a process pool (default 2 workers, one BLAS thread each), or on a Dask cluster
  (``--scheduler local`` or ``tcp://HOST:PORT``, :mod:`experiments.executors`): the same tasks,
  results and results folder whatever runs them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from noisyanchor.common.alignment import Alignment, align
from noisyanchor.common.attacks import (
    Attack,
    AttackerView,
    Disclosure,
    attack_all,
    available_attacks,
)
from noisyanchor.common.cliargs import int_at_least
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import GdpKey, gdp_map
from noisyanchor.common.methods import Method, make_upload
from noisyanchor.common.theory import phase_transition_v
from noisyanchor.experiments.bench import Bench, BenchConfig, prepare_bench
from noisyanchor.experiments.executors import POOL, check_scheduler, executor
from noisyanchor.experiments.linkage import ATTACK_SETS, linkage_accuracy, strongest_attack
from noisyanchor.experiments.simulate import Federation, SimulationResult, attack_errors, simulate

#: Controls run once per ``p`` and replicate without noise (each AA-I-GDP control also writes
#: the C-GDP control coupled to it).
CONTROLS = (Method.AA_IGDP, Method.I_GDP)
#: Methods whose runs write a coupled C-GDP row: the one with the same data noise.
COUPLED = {Method.AA_IGDP: Method.C_GDP, Method.AA_IGDP_PN: Method.C_GDP_PN}
#: Swept methods (C-GDP-pn rows come paired with AA-I-GDP-pn draws).
SWEPT = (Method.AA_IGDP_PN, Method.AA_IGDP_AN)
#: Stable stream codes per method (changing them changes every result).
_CODES = {m: k for k, m in enumerate(Method)}
#: Draw index of control rows.
CONTROL_DRAW = -1
ROWS_FILE, META_FILE, RUNS_FILE = "rows.jsonl", "meta.json", "runs.jsonl"


class Task(NamedTuple):
    """One unit of work: a draw of a swept method, or a noiseless control, in a replicate."""

    p: int
    method: str
    draw: int
    level: float
    translation_scale: float
    replicate: int = 0


def noise_levels(cfg: BenchConfig, p: int, method: Method, replicate: int = 0) -> np.ndarray:
    """The ``cfg.draws`` noise levels of ``method`` (uniform over its range, seeded; the same
    for every ``p`` in the nested participant design)."""
    lo, hi = cfg.v_range if method.anchor_noise else cfg.sigma_range
    rng = np.random.default_rng(np.random.SeedSequence(
        cfg.seed, spawn_key=cfg.spawn_key(3, p, _CODES[method], replicate=replicate)))
    return rng.uniform(lo, hi, cfg.draws)


def _participant_seeds(cfg: BenchConfig, p: int, method: Method, draw: int,
                       replicate: int = 0) -> list[int]:
    """Participants' seeds of one draw; in the nested design participant ``i`` gets the same
    seed for every ``p``."""
    seq = np.random.SeedSequence(cfg.seed, spawn_key=cfg.spawn_key(
        2, p, _CODES[method], draw + 1, replicate=replicate))
    count = max(cfg.participants) if cfg.nested else p
    return [int(s) for s in seq.generate_state(count, np.uint64)[:p]]


def tasks(cfg: BenchConfig) -> Iterator[Task]:
    """Every task in run order: replicate by replicate, controls first, then draws
    interleaved."""
    s = cfg.translation_scale
    for k in range(cfg.replicates):
        for p in cfg.participants:
            for m in CONTROLS:
                yield Task(p, m.value, CONTROL_DRAW, 0.0, s, k)
            for scale in cfg.control_translation_scales:
                if scale != s:
                    yield Task(p, Method.I_GDP.value, CONTROL_DRAW, 0.0, scale, k)
            levels = {m: noise_levels(cfg, p, m, k) for m in SWEPT}
            for draw in range(cfg.draws):
                for m in SWEPT:
                    yield Task(p, m.value, draw, float(levels[m][draw]), s, k)


#: A row's identity: ``(p, method, draw, translation_scale, replicate)``.
RowKey = tuple[int, str, int, float, int]


def row_key(row: dict[str, Any]) -> RowKey:
    """A row's key ``(p, method, draw, translation_scale, replicate)`` (rows of sweeps without
    replicates are replicate 0)."""
    return row["p"], row["method"], row["draw"], row["translation_scale"], row.get("replicate", 0)


def task_keys(task: Task) -> list[RowKey]:
    """Row keys one task writes (an AA-I-GDP(-pn) task also writes its coupled C-GDP(-pn)
    row)."""
    keys = [(task.p, task.method, task.draw, task.translation_scale, task.replicate)]
    coupled = COUPLED.get(Method(task.method))
    if coupled is not None:
        keys.append((task.p, coupled.value, task.draw, task.translation_scale, task.replicate))
    return keys


class _Replay:
    """A generator stand-in whose one normal draw is a given array: it hands the coupled noise
    ``W'_i`` to :func:`common.methods.make_upload` so the C-GDP-pn upload runs the engine's code.
    """

    def __init__(self, w: np.ndarray) -> None:
        self._w = w

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        if tuple(shape) != self._w.shape:
            raise InvalidInputError(f"coupled noise has shape {self._w.shape}, not {shape}")
        return self._w


class _Decoder:
    """Per-bench lookups: where each bank record sits, and ``F^+``."""

    def __init__(self, bench: Bench) -> None:
        n = len(bench.bank)
        self.owner = np.full(n, -1)
        self.position = np.full(n, -1)
        for i, rows in enumerate(bench.rows):
            self.owner[rows] = i
            self.position[rows] = np.arange(len(rows))
        f = bench.federation.projection
        self.f_pinv = None if f is None else np.linalg.pinv(f)

    def decode(self, x_hat: np.ndarray) -> np.ndarray:
        """Working-space estimate to input space: ``X^ F^+``."""
        return x_hat if self.f_pinv is None else x_hat @ self.f_pinv

    def gather(self, per_target: dict[int, np.ndarray], queries: np.ndarray) -> np.ndarray:
        """Decoded reconstructions of the bank records ``queries``."""
        rows = np.stack([per_target[int(self.owner[q])][self.position[q]] for q in queries])
        return self.decode(rows)


def _linkage_per_auditor(bench: Bench, galleries, queries: np.ndarray) -> dict[str, float]:
    """Linkage of decoded reconstructions ``queries`` under every auditor of the bench."""
    return {name: linkage_accuracy(np.asarray(fa.auditor.embed(queries), dtype=float),
                                   fa.bank_embeddings, galleries, fa.metric)
            for name, fa in bench.auditors.items()}


def _strongest(method: str, per_attack: dict[str, float], selection: dict[str, float],
               threats: dict[str, str]) -> dict[str, Any]:
    """The strongest attack of every attack set, chosen on the selection galleries, as
    ``{"attack", "linkage"}`` with its linkage on the reported ones."""
    out = {}
    for attack_set in ATTACK_SETS:
        best = strongest_attack(per_attack, method, attack_set, threats, selection=selection)
        out[attack_set] = None if best is None else {"attack": best[0], "linkage": best[1]}
    return out


def measure(
    bench: Bench, decoder: _Decoder, reconstructions: dict[str, dict[int, np.ndarray]],
    with_grid: bool, errors: dict[str, dict[str, Any]] | None = None, *, method: str = "",
    threats: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Linkage (exact-source and, with ids, identity) per auditor on the reported and on the
    selection galleries, the strongest attack per auditor and attack set, relative error and
    grid per attack.

    ``linkage`` / ``identity_linkage`` are the primary auditor's (``config.auditor``).
    ``errors`` are the reconstructions' :func:`experiments.simulate.attack_errors` when already
    computed (a simulation summary's ``attacks``); computed here otherwise. ``threats``: each
    attack's threat (default: the built-in and plug-in attacks')."""
    if errors is None:
        errors = attack_errors(bench.federation, reconstructions)
    threats = attack_threats() if threats is None else threats
    galleries = {"linkage": (bench.exact, bench.selection)}
    if bench.identity is not None:
        galleries["identity_linkage"] = (bench.identity, bench.identity_selection)
    by_auditor: dict[str, dict[str, dict[str, float]]] = {
        kind: {a: {} for a in bench.auditors} for kind in galleries}
    chosen: dict[str, dict[str, dict[str, float]]] = {
        kind: {a: {} for a in bench.auditors} for kind in galleries}
    out: dict[str, Any] = {"relative_error": {}, "relative_error_per_target": {},
                           "grid": {} if with_grid and reconstructions else None}
    for name, per_target in reconstructions.items():
        out["relative_error"][name] = errors[name]["relative_error"]
        out["relative_error_per_target"][name] = errors[name]["per_target"]
        for kind, (gal, sel) in galleries.items():
            for target, into in ((gal, by_auditor), (sel, chosen)):
                if target is None:
                    continue
                queries = decoder.gather(per_target, target.queries)
                for auditor, value in _linkage_per_auditor(bench, target, queries).items():
                    into[kind][auditor][name] = value
        if out["grid"] is not None:
            out["grid"][name] = np.round(decoder.gather(per_target, bench.grid), 4).tolist()
    primary = bench.config.auditor
    out["linkage"] = by_auditor["linkage"][primary]
    out["identity_linkage"] = by_auditor.get("identity_linkage", {}).get(primary)
    out["linkage_by_auditor"] = by_auditor["linkage"]
    out["identity_linkage_by_auditor"] = by_auditor.get("identity_linkage")
    out["selection_linkage_by_auditor"] = chosen["linkage"]
    out["selection_identity_linkage_by_auditor"] = chosen.get("identity_linkage")
    out["strongest"] = {kind: {a: _strongest(method, link, chosen[kind][a], threats)
                               for a, link in per.items()}
                        for kind, per in by_auditor.items()}
    return out


def attack_threats(attacks: dict[str, Attack] | None = None,
                   cfg: BenchConfig | None = None) -> dict[str, str]:
    """Each attack's threat by name (:data:`common.attacks.THREATS`)."""
    if attacks is None:
        attacks = available_attacks(known_records=() if cfg is None else cfg.known_records,
                                    uploads=True)
    return {name: a.threat for name, a in attacks.items()}


def _solver(diag: dict[str, Any]) -> dict[str, Any]:
    keys = ("name", "iterations", "converged", "certified", "certificate_min_eig",
            "fixed_point_residual", "gopp_residual", "seconds", "rotational_error")
    return {k: diag.get(k) for k in keys}


def draw_federation(bench: Bench, method: Method, draw: int, level: float,
                    translation_scale: float | None = None) -> Federation:
    """The bench's deployment with this draw's method, noise level, participant seeds and
    (for the extra I-GDP controls) translation scale."""
    fed0 = bench.federation
    scale = fed0.config.translation_scale if translation_scale is None else translation_scale
    sim = dataclasses.replace(fed0.config, method=method.value,
                              sigma=level if method.data_noise else 0.0,
                              v=level if method.anchor_noise else 0.0,
                              translation_scale=scale)
    seeds = _participant_seeds(bench.config, len(fed0.x), method, draw, bench.replicate)
    return dataclasses.replace(fed0, config=sim, participant_seeds=seeds)


def _diagnostics(diag: dict[str, dict[Any, dict[str, Any]]]) -> dict[str, Any]:
    """Per attack, its per-target facts keyed by ``str(i)`` (JSON)."""
    return {a: {str(i): f for i, f in per.items()} for a, per in diag.items()}


def run_task(bench: Bench, decoder: _Decoder, task: tuple,
             attacks: dict[str, Attack] | None = None) -> list[dict]:
    """Run one draw (or control) and return its row(s). ``task``: a :class:`Task`, or
    ``(p, method, draw, level)`` at the configured translation scale in the bench's replicate;
    ``attacks`` default to every built-in and plug-in attack (known-input sizes from the
    config)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    cfg = bench.config
    if len(task) == 4:
        task = Task(*task, cfg.translation_scale, bench.replicate)
    task = Task(*task)
    if task.replicate != bench.replicate:
        raise InvalidInputError(f"task of replicate {task.replicate} on the bench of replicate "
                                f"{bench.replicate}")
    attacks = (available_attacks(known_records=cfg.known_records, uploads=True)
               if attacks is None else attacks)
    threats = attack_threats(attacks)
    method = Method.parse(task.method)
    fed = draw_federation(bench, method, task.draw, task.level, task.translation_scale)
    sim = fed.config
    res = simulate(sim, federation=fed, attacks=attacks,
                   side=bench.side_knowledge(sim.sigma))
    summary = res.summary()
    with_grid = task.draw == CONTROL_DRAW or task.draw % cfg.grid_every == 0
    base = {"p": task.p, "replicate": task.replicate, "draw": task.draw,
            "control": task.draw == CONTROL_DRAW, "sigma": sim.sigma, "v": sim.v,
            "noise": task.level, "d": fed.d, "r": fed.r, "v_pt": summary["v_pt"],
            "translation_scale": task.translation_scale}
    fitted = _fitted_models(fed, res.alignment.z, cfg)
    row = {**base, "method": method.value, **_utilities(fed, fitted, cfg),
           "solver": _solver(summary["solver"]), "v_hat": summary["anchor_noise_estimate"],
           "attack_diagnostics": summary["attack_diagnostics"],
           **measure(bench, decoder, res.reconstructions, with_grid, summary["attacks"],
                     method=method.value, threats=threats)}
    row["membership"] = _membership(bench, task, fed, res.alignment, res.states[sim.colluder].key,
                                    fitted, res.reconstructions, row["strongest"])
    if task.draw == CONTROL_DRAW:
        row.update(_test_predictions(fed, fitted, res.alignment.z))
    rows = [row]
    coupled = COUPLED.get(method)
    if coupled is not None:
        rows.append({**base, "method": coupled.value,
                     **_coupled_c_gdp(bench, decoder, res, coupled, with_grid, attacks, task)})
        row["pair_z_rel_diff"] = rows[1]["pair_z_rel_diff"]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    for r in rows:
        r["seconds"], r["cpu_seconds"] = seconds, cpu
    return rows


def _fitted_models(fed: Federation, z: np.ndarray, cfg: BenchConfig) -> dict[str, Any]:
    """Every configured model fitted on the aligned training rows of ``Z`` (selected on
    validation), by name."""
    from noisyanchor.common.downstream import fit_downstream

    labels, tags = np.concatenate(fed.labels), np.concatenate(fed.tags)
    return {m: fit_downstream(z, labels, tags, model=m) for m in cfg.models}


def _utilities(fed: Federation, fitted: dict[str, Any], cfg: BenchConfig) -> dict[str, Any]:
    """Honest-setting utility: every configured model on the aligned training rows of ``Z``
    (``utility`` is the primary model's, which also gets the participant-index reference), and
    whether each chosen fit converged."""
    from noisyanchor.common.downstream import participant_only_accuracy

    by_model = {}
    for model in cfg.models:
        util = fitted[model].utility
        by_model[model] = {"utility": util.balanced_accuracy,
                           "validation_utility": util.validation_balanced_accuracy,
                           "param": util.c, "converged": util.converged,
                           "fits_not_converged": util.fits_not_converged}
    main = by_model[cfg.model]
    alone = participant_only_accuracy(np.concatenate(fed.labels), np.concatenate(fed.tags),
                                      fed.owners, model=cfg.model, c=main["param"])
    return {"utility": main["utility"], "validation_utility": main["validation_utility"],
            "participant_only_utility": alone, "utility_by_model": by_model}


def _membership(bench: Bench, task: Task, fed: Federation, alignment: Alignment, site_key: GdpKey,
                fitted: dict[str, Any], reconstructions: dict[str, dict[int, np.ndarray]],
                strongest: dict[str, Any]) -> dict[str, Any] | None:
    """Membership inference (:mod:`experiments.membership`): against every returned model, by
    the colluder's site (its own key and map) on the controls and every ``membership_every``-th
    draw; against ``Z`` with the strongest reconstruction of each threat (primary auditor), the
    known-input attacker's known records left out of the members for every threat (one member
    set for all); without a projection (a table's columns) also attribute inference from the
    same reconstructions (:func:`experiments.membership.attribute_inference`)."""
    from noisyanchor.common.splits import TEST, TRAIN
    from noisyanchor.experiments.membership import (
        attribute_inference,
        model_membership,
        unknown_rows,
        z_membership,
    )

    cfg = bench.config
    every = cfg.membership_every
    if every is None or (task.draw != CONTROL_DRAW and task.draw % every):
        return None
    c = cfg.colluder

    def site_frame(x_working: np.ndarray) -> np.ndarray:
        return alignment.map_rows(c, gdp_map(x_working, site_key))

    targets = [i for i in range(len(fed.x)) if i != c]
    cand = {kind: (np.vstack([site_frame(fed.working(i))[fed.tags[i] == tag] for i in targets]),
                   np.concatenate([fed.labels[i][fed.tags[i] == tag] for i in targets]))
            for kind, tag in (("members", TRAIN), ("non_members", TEST))}
    pool = np.flatnonzero(bench.public)
    shadow = (site_frame(bench.working(pool)), bench.data.y[pool])
    rng = np.random.default_rng(np.random.SeedSequence(
        cfg.seed, spawn_key=cfg.spawn_key(6, task.p, _CODES[Method(fed.config.method)],
                                          task.draw + 1, replicate=task.replicate)))
    out: dict[str, Any] = {"model": {
        m: model_membership(fitted[m], m, cand["members"], cand["non_members"], shadow, rng,
                            cfg.shadow_models) for m in cfg.models}}
    if len(bench.holdout) and reconstructions:
        held = bench.working(bench.holdout)
        # the known-input attacker's own records of each target prove nothing: not scored
        members = np.vstack([fed.working(i)[unknown_rows(bench.rows[i], bench.known.get(i))]
                             for i in targets])
        best = strongest["linkage"][cfg.auditor]
        recon = {aset: np.vstack([reconstructions[pick["attack"]][i] for i in targets])
                 for aset, pick in best.items() if pick is not None}
        out["z"] = {aset: {"attack": best[aset]["attack"], **z_membership(x, members, held)}
                    for aset, x in recon.items()}
        if fed.projection is None:  # a table's columns: one inferred from the others via Z
            public = bench.working(np.flatnonzero(bench.public))
            out["attribute"] = {aset: {"attack": best[aset]["attack"],
                                       **attribute_inference(x, members, public)}
                                for aset, x in recon.items()}
    return out


def _coupled_c_gdp(
    bench: Bench, decoder: _Decoder, aa: SimulationResult, method: Method, with_grid: bool,
    attacks: dict[str, Attack], task: Task,
) -> dict[str, Any]:
    """C-GDP (``method``: with or without private-data noise) coupled to an AA-I-GDP run of the
    same noise: ``(O, Psi) = (O_s, Psi_s)`` of its alignment's reference ``s``,
    ``W'_i = W_i O_i^T O_s`` (SPEC.md section 2); returns its row fields and
    ``||Z_aa - Z_c||_F / ||Z_aa||_F``."""
    fed = aa.federation
    sigma = fed.config.sigma
    s = int(aa.alignment.solver.get("reference", 0))
    common = aa.states[s].key
    blocks = []
    for i, state in enumerate(aa.states):
        w = None
        if state.data_noise is not None:
            w = (state.data_noise @ state.key.rotation.T @ common.rotation / sigma if sigma
                 else np.zeros_like(state.data_noise))
        up, _ = make_upload(method, fed.working(i), common, sigma=sigma,
                            rng=None if w is None else _Replay(w))
        blocks.append(up.data)
    t0 = time.perf_counter()
    alignment = align(method, blocks)
    c = fed.config.colluder
    run = attack_all(AttackerView(method, Disclosure(c, fed.working(c), common), blocks,
                                  side=bench.side_knowledge(sigma)), attacks)
    recon = run.reconstructions
    z_aa = aa.alignment.z
    fitted = _fitted_models(fed, alignment.z, bench.config)
    out = {**_utilities(fed, fitted, bench.config),
           "solver": {**_solver(alignment.solver), "seconds": time.perf_counter() - t0},
           "pair_z_rel_diff": float(np.linalg.norm(z_aa - alignment.z) / np.linalg.norm(z_aa)),
           "v_hat": None, "attack_diagnostics": _diagnostics(run.diagnostics),
           **measure(bench, decoder, recon, with_grid, method=method.value,
                     threats=attack_threats(attacks))}
    out["membership"] = _membership(bench, task, fed, alignment, common, fitted, recon,
                                    out["strongest"])
    if task.draw == CONTROL_DRAW:
        out.update(_test_predictions(fed, fitted, alignment.z))
    return out


def _test_predictions(fed: Federation, fitted: dict[str, Any], z: np.ndarray) -> dict[str, Any]:
    """Every model's predictions on the test rows, and their labels (the controls' utility
    claims are judged by resampling these records)."""
    from noisyanchor.common.splits import TEST

    test = np.concatenate(fed.tags) == TEST
    return {"test_labels": np.concatenate(fed.labels)[test].tolist(),
            "test_predictions_by_model": {
                m: f.estimator.predict((z[test] - f.center) / f.scale).tolist()
                for m, f in fitted.items()}}


# Worker state: one prepared bench per p, built once per process from the config.
_WORKER: dict[str, Any] = {}


def _init_worker(cfg_dict: dict[str, Any]) -> None:
    from noisyanchor.common.blas import configure_blas

    configure_blas(1, announce=False)  # one BLAS thread per worker: both cores, no oversubscription
    import sklearn.neighbors  # noqa: F401  (loads scikit-learn's OpenMP runtime)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="openmp")  # k-NN distance reductions: one thread too
    cfg = BenchConfig.from_dict(cfg_dict)
    _WORKER["cfg"] = cfg
    _WORKER["benches"] = {}
    # built-ins and plug-ins, resolved once
    _WORKER["attacks"] = available_attacks(known_records=cfg.known_records, uploads=True)


def _worker_run(task: Task) -> list[dict]:
    benches = _WORKER["benches"]
    key = (task.p, task.replicate)
    if key not in benches:  # a few MB per deployment: kept for the worker's life
        bench = prepare_bench(_WORKER["cfg"], task.p, replicate=task.replicate)
        benches[key] = (bench, _Decoder(bench))
    return run_task(*benches[key], task, _WORKER["attacks"])


def done_keys(path: Path) -> set[RowKey]:
    """Keys of the rows already in ``rows.jsonl`` (a torn last line is ignored)."""
    keys = set()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            keys.add(row_key(row))
    return keys


def _drop_torn_line(path: Path) -> None:
    """Cut a last line left half-written by a killed sweep, so appended rows start clean."""
    if not path.exists():
        return
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        path.write_bytes(raw[: raw.rfind(b"\n") + 1])


def bench_meta(bench: Bench) -> dict[str, Any]:
    """Per-``p`` facts the report needs without reloading data: sizes, ``v_PT``, grid originals
    and their projection-only control ``X F F^+``."""
    fed = bench.federation
    d, r, p = fed.d, fed.r, len(fed.x)
    grid = bench.bank[bench.grid]
    f = fed.projection
    floor = grid if f is None else grid @ f @ np.linalg.pinv(f)
    return {"p": p, "d": d, "r": r, "v_pt": phase_transition_v(p, d, r),
            "translation_scale": bench.config.translation_scale,
            "records": int(sum(len(x) for x in fed.x)), "public_records": int(bench.public.sum()),
            "input_dim": int(bench.bank.shape[1]), "image_shape": bench.data.image_shape,
            "classes": len(np.unique(bench.data.y)),
            "has_identities": bench.identity is not None,
            "grid_labels": bench.data.y[bench.grid].tolist(),
            "grid_original": np.round(grid, 4).tolist(),
            "grid_projection_floor": np.round(floor, 4).tolist(),
            "auditors": list(bench.auditors), "models": list(bench.config.models),
            "attacks": list(available_attacks(known_records=bench.config.known_records,
                                              uploads=True)),
            "attack_threats": attack_threats(cfg=bench.config),
            "replicate": bench.replicate, "known_records": {
                str(i): len(rows) for i, rows in bench.known.items()},
            "holdout_records": len(bench.holdout)}


def run_sweep(cfg: BenchConfig, out: Path, *, progress: bool = True,
              scheduler: str = POOL) -> dict[str, Any]:
    """Run (or resume) the sweep into ``out/rows.jsonl`` on ``scheduler``
    (:func:`experiments.executors.executor`); returns counts and wall time."""
    scheduler = check_scheduler(scheduler)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / ROWS_FILE
    meta_path = out / META_FILE
    replicas = {str(p): [bench_meta(prepare_bench(cfg, p, replicate=k))
                         for k in range(cfg.replicates)] for p in cfg.participants}
    meta = {"config": cfg.to_dict(), "benches": {p: per[0] for p, per in replicas.items()},
            "replicate_benches": replicas}
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if old["config"] != json.loads(json.dumps(meta["config"])):
            raise InvalidInputError(f"{out} holds a sweep with another config; use a new --out")
    meta_path.write_text(json.dumps(meta))
    _drop_torn_line(rows_path)
    done = done_keys(rows_path)
    todo = [t for t in tasks(cfg) if not all(k in done for k in task_keys(t))]
    total = sum(1 for _ in tasks(cfg))
    start = time.perf_counter()
    load_start = os.getloadavg()
    from tqdm import tqdm

    bar = tqdm(total=total, initial=total - len(todo), unit="draw", disable=not progress,
               desc="sweep")
    written = 0
    cpu = 0.0
    with open(rows_path, "a") as fh, executor(scheduler, cfg.workers, _init_worker,
                                              (cfg.to_dict(),)) as run_all:
        for rows in run_all(_worker_run, todo):
            for row in rows:
                if row_key(row) not in done:
                    fh.write(json.dumps(row) + "\n")
                    done.add(row_key(row))  # a task's result is written once, however often run
                    written += 1
            cpu += rows[0]["cpu_seconds"]  # the task's (its rows share it)
            fh.flush()
            bar.update(1)
    bar.close()
    now = datetime.datetime.now(datetime.UTC)
    run = {"finished_utc": now.isoformat(timespec="seconds"),
           "tasks": total, "ran": len(todo), "rows_written": written,
           "seconds": time.perf_counter() - start, "task_cpu_seconds": cpu,
           "workers": cfg.workers, "scheduler": scheduler,
           "cpu_count": os.cpu_count(), "load_average_start": load_start,
           "load_average_end": os.getloadavg()}
    with open(out / RUNS_FILE, "a") as fh:  # the measured conditions, quoted by the report
        fh.write(json.dumps(run) + "\n")
    return {"out": str(out), **run}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment sweep``."""
    ps = sub.add_parser("sweep", help="noise draws per method: utility, leakage, solver "
                        "diagnostics (resumable)")
    ps.add_argument("--config", required=True, help="experiment TOML (experiments/configs/)")
    ps.add_argument("--out", required=True, help="results folder (rows.jsonl, meta.json)")
    ps.add_argument("--draws", type=int_at_least(1), default=None, help="override draws per method")
    ps.add_argument("--workers", type=int_at_least(1), default=None,
                    help="override worker processes")
    ps.add_argument("--seed", type=int_at_least(0), default=None, help="override the root seed")
    ps.add_argument("--data", default=None,
                    help="override the config's data file (IDX images, .npz, .npy or .csv)")
    ps.add_argument("--labels", default=None, help="override the config's IDX labels file")
    ps.add_argument("--scheduler", type=check_scheduler, default=POOL,
                    help="where tasks run: this machine's process pool (pool), a Dask LocalCluster "
                         "of --workers processes (local), or a Dask scheduler tcp://HOST:8786 "
                         "(needs noisyanchor[cluster])")
    ps.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ps.add_argument("--json", action="store_true", help="print the run summary as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = BenchConfig.from_toml(args.config, draws=args.draws, workers=args.workers,
                                seed=args.seed, path=args.data, labels_path=args.labels)
    result = run_sweep(cfg, Path(args.out), progress=not args.no_progress,
                       scheduler=args.scheduler)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"sweep {cfg.name}: {result['ran']} of {result['tasks']} tasks run, "
              f"{result['rows_written']} rows written to {result['out']}/{ROWS_FILE} in "
              f"{result['seconds']:.1f} s on {result['workers']} workers")
    return 0
