"""``noisyanchor demo``: the whole system as separate OS processes on 127.0.0.1.

On the bundled digits data: make a PKI, write the analyst's and every participant's config and
data file (each site holding back a tenth of its records), start the analyst and ``p``
participant processes (one of them the colluder), wait for the alignment, let every site
predict its held-back records with ``participant predict``, run the colluder's disclosure and
the attack, and compare the collaboration matrix with what the in-process simulator computes
from the same seeds. Everything stays in one folder, with ``summary.md``, ``summary.json`` and
the figures (:mod:`deploy.demo_report`).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.analyst.config import DEFAULT_MAX_CONNECTIONS_PER_CALLER, one_host_connections
from noisyanchor.analyst.federation import FAILED_FILE
from noisyanchor.common.attacks import relative_error
from noisyanchor.common.blas import blas_threads
from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.methods import DEFAULT_ANCHOR_NOISE
from noisyanchor.deploy.certs import Pki, write_pki
from noisyanchor.deploy.demo_report import SHOWN_RECORDS, AttackRow, error_meaning, write_report
from noisyanchor.deploy.launch import start, stop, wait_for_port, write_toml

#: Tolerance of ``z_matches_inprocess``: max absolute difference of the two ``Z`` relative to
#: ``max |Z|``. The reference runs with one BLAS thread like the child processes, so the two
#: are usually identical; with other thread counts sums may be reordered, and differences of a
#: few 1e-13 relative were seen.
Z_RTOL = 1e-12

#: Seconds any one demo process may take.
PROCESS_TIMEOUT = 300.0

#: How the demo's sites reach the analyst (``noisyanchor demo --transport``).
TRANSPORTS = ("grpc", "flower")

#: Share of each site's records held back from its upload and predicted afterwards.
HELD_BACK = 0.1


@dataclass(frozen=True)
class FederationFiles:
    """Paths of a written federation: PKI, analyst config, store, port file, data files."""

    root: Path
    pki: Pki
    participants: tuple[str, ...]
    analyst_config: Path
    store: Path
    port_file: Path
    data: dict[str, Path]


def participant_ids(p: int) -> tuple[str, ...]:
    """Ids ``p0 .. p{p-1}`` (certificate common names)."""
    return tuple(f"p{i}" for i in range(p))


def write_analyst(root: Path, ids: tuple[str, ...], *, federation_id: str, method: str,
                  anchors: int | None, dim: int | None, sigma: float | None, v: float | None,
                  accept_collusion: bool, max_iter: int = 500, tol: float = 1e-7,
                  data: dict[str, Path] | None = None,
                  extra_certificates: tuple[str, ...] = (),
                  stream_idle_timeout: float | None = None,
                  keep_ca_key: bool = False,
                  extra: Mapping[str, Mapping[str, Any]] | None = None) -> FederationFiles:
    """Make the PKI and the analyst's config under ``root``.

    ``extra_certificates`` are client certificates from the same CA for ids outside the
    federation (tests of unknown clients); ``stream_idle_timeout`` None keeps the default;
    ``keep_ca_key`` writes the CA key (tests that issue hostile certificates).
    ``extra`` adds keys to tables (or whole tables) of the config, e.g. ``{"schema": {...}}``.
    """
    root = Path(root)
    per_caller = int((extra or {}).get("server", {}).get("max_connections_per_caller",
                                                        DEFAULT_MAX_CONNECTIONS_PER_CALLER))
    pki = write_pki(root / "pki", ids + tuple(extra_certificates), keep_ca_key=keep_ca_key)
    store, port_file = root / "store", root / "analyst.port"
    tables: dict[str, dict[str, Any]] = {
        "federation": {"id": federation_id, "participants": list(ids), "method": method,
                       "anchors": anchors, "dim": dim, "sigma": sigma, "v": v,
                       "reference": ids[0], "dealer": ids[0],
                       "accept_collusion": accept_collusion},
        "solver": {"max_iter": max_iter, "tol": tol},
        "server": {"host": "127.0.0.1", "port": 0, "port_file": port_file, "output_dir": store,
                   "stream_idle_timeout": stream_idle_timeout,
                   # every site connects from 127.0.0.1
                   "max_connections_per_address": one_host_connections(len(ids), per_caller)},
        "tls": {"ca": pki.ca, "cert": pki.server_cert, "key": pki.server_key}}
    for name, keys in (extra or {}).items():
        tables.setdefault(name, {}).update(keys)
    cfg = write_toml(root / "analyst.toml", tables)
    return FederationFiles(root, pki, ids, cfg, store, port_file, dict(data or {}))


def write_participant(files: FederationFiles, pid: str, *, federation_id: str, address: str,
                      method: str, anchors: int | None, dim: int | None,
                      projection_seed: int | None, sigma: float, v: float,
                      seed: int | None = None, anchor_seed: bytes | None = None,
                      keep_secrets: bool = False, timeout: float | None = 120.0) -> Path:
    """Write participant ``pid``'s config (dealer: the first participant)."""
    cert, key = files.pki.clients[pid]
    return write_toml(files.root / f"{pid}.toml", {
        "participant": {"id": pid, "federation_id": federation_id, "analyst": address,
                        "data": files.data[pid], "state_dir": files.root / "state" / pid,
                        "keep_secrets": keep_secrets, "seed": seed, "timeout": timeout},
        "protocol": {"method": method, "anchors": anchors, "dim": dim,
                     "projection_seed": projection_seed if dim is not None else None,
                     "sigma": sigma, "v": v, "dealer": files.participants[0],
                     "anchor_seed": anchor_seed.hex() if anchor_seed is not None else None},
        "tls": {"ca": files.pki.ca, "cert": cert, "key": key}})


def _finish(proc: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise PreconditionError(f"{what} did not finish within {timeout:g} s (log: {log})") \
            from None
    if proc.returncode != 0:
        raise PreconditionError(f"{what} exited with status {proc.returncode}: {_tail(log)}")


def _tail(log: Path, lines: int = 3) -> str:
    """The last lines of a child's log, joined (what a failure message quotes)."""
    if not Path(log).is_file():
        return f"(no log at {log})"
    return " | ".join(Path(log).read_text(errors="replace").strip().splitlines()[-lines:])


def wait_for_result(store: Path, analyst: subprocess.Popen, timeout: float,
                    log: Path | None = None) -> dict[str, Any]:
    """The analyst's ``result.json`` once written (bounded wait).

    Raises
    ------
    PreconditionError
        The alignment failed (the analyst's error, from ``failed.json`` in the store), the
        analyst exited (its status and last log lines), or ``timeout`` seconds passed.
    """
    path, failed = store / "result" / "result.json", store / FAILED_FILE
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if failed.is_file():
            raise PreconditionError(f"the alignment failed: "
                                    f"{json.loads(failed.read_text())['error']}")
        if analyst.poll() is not None:
            raise PreconditionError(f"the analyst exited with status {analyst.returncode} "
                                    "before writing a result"
                                    + (f": {_tail(log)}" if log is not None else ""))
        if time.monotonic() > deadline:
            raise PreconditionError(f"no result from the analyst within {timeout:g} s"
                                    + (f" (log: {log})" if log is not None else ""))
        time.sleep(0.05)
    return json.loads(path.read_text())


def _write_data(root: Path, ids: tuple[str, ...], fed) -> dict[str, Path]:
    """Each participant's share of the prepared digits federation as ``data/<id>.npz``."""
    data = {}
    for i, pid in enumerate(ids):
        data[pid] = root / "data" / f"{pid}.npz"
        data[pid].parent.mkdir(parents=True, exist_ok=True)
        np.savez(data[pid], x=fed.x[i], labels=fed.labels[i], tags=fed.tags[i])
    return data


class _Children:
    """Every process the demo starts, by name, each stopped by :meth:`stop_all`."""

    def __init__(self, logs: Path) -> None:
        self.logs, self.procs = logs, {}

    def start(self, name: str, args: list) -> subprocess.Popen:
        self.procs[name] = start(args, self.logs / f"{name}.log")
        return self.procs[name]

    def finish(self, name: str, what: str) -> None:
        _finish(self.procs[name], self.logs / f"{name}.log", what, PROCESS_TIMEOUT)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            stop(proc)


def _attack_errors(files: FederationFiles, children: _Children, colluder: str, config: Path,
                   fed) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Run the colluder's disclosure and the attack as processes: every attack's mean relative
    error, what that error means, and its reconstructions (working space) by target."""
    children.start(f"{colluder}-collude", ["participant", "collude", "--config", config])
    children.finish(f"{colluder}-collude", "the colluder")
    children.start("attack", ["attack", "--store", files.store, "--json"])
    children.finish("attack", "the attack")
    summary = json.loads((files.store / "attack" / "summary.json").read_text())
    attacks, reconstructions = {}, {}
    ids = files.participants
    own = fed.working(ids.index(colluder)).mean(axis=0)  # the colluder's average record
    for name, per_target in summary["reconstructions"].items():
        reconstructions[name] = {t: np.load(path) for t, path in per_target.items()}
        errs = {t: relative_error(x_hat, fed.working(ids.index(t)))
                for t, x_hat in reconstructions[name].items()}
        guess = float(np.mean([relative_error(np.broadcast_to(own, fed.working(ids.index(t))
                                                              .shape), fed.working(ids.index(t)))
                               for t in per_target]))
        error = float(np.mean(list(errs.values())))
        attacks[name] = {"relative_error": error, "per_target": errs, "guess_error": guess,
                         "meaning": error_meaning(error, guess)}
    return attacks, reconstructions


@dataclass
class _Run:
    """What the processes of one demo produced."""

    result: dict[str, Any]
    attacks: dict[str, Any]
    reconstructions: dict[str, dict[str, np.ndarray]]
    predictions: dict[str, np.ndarray]
    gains: dict[str, dict[str, Any]]
    pids: dict[str, int]


def _predict_held_back(root: Path, children: _Children, configs: dict[str, Path],
                       held: dict[str, tuple[np.ndarray, np.ndarray]]
                       ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
    """Every site predicts the records it held back, as ``participant predict`` processes
    (their tables have no label column): predicted labels and each site's ``gain.json``."""
    outputs = {}
    for pid, config in configs.items():
        x = held[pid][0]
        table = root / "new" / f"{pid}.csv"
        table.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(table, x, delimiter=",", header=",".join(f"f{j}" for j in range(x.shape[1])),
                   comments="", fmt="%.17g")
        outputs[pid] = root / "predictions" / f"{pid}.csv"
        children.start(f"{pid}-predict", ["participant", "predict", "--config", config,
                                          "--input", table, "--out", outputs[pid]])
    predictions, gains = {}, {}
    for pid, out in outputs.items():
        children.finish(f"{pid}-predict", f"participant {pid}'s prediction")
        predictions[pid] = np.loadtxt(out, delimiter=",", skiprows=1, ndmin=2)[:, 2].astype(int)
        gains[pid] = json.loads((root / "state" / pid / "gain.json").read_text())
    return predictions, gains


def _run_processes(root: Path, config, fed, colluder: int | None, attack_runs: bool,
                   held: dict[str, tuple[np.ndarray, np.ndarray]]) -> _Run:
    """Analyst, participants, colluder, attack and every site's prediction as processes;
    every one stopped at the end."""
    ids = participant_ids(config.participants)
    files = write_analyst(root, ids, federation_id="demo", method=config.method,
                          anchors=config.anchors, dim=config.dim, sigma=config.sigma, v=config.v,
                          accept_collusion=colluder is not None,
                          data=_write_data(root, ids, fed))
    children = _Children(root / "logs")
    try:
        analyst = children.start("analyst", ["analyst", "serve", "--config",
                                             files.analyst_config])
        port = wait_for_port(files.port_file, analyst)
        configs = {}
        for i, pid in enumerate(ids):
            configs[pid] = write_participant(
                files, pid, federation_id="demo", address=f"127.0.0.1:{port}",
                method=config.method, anchors=config.anchors, dim=config.dim,
                projection_seed=fed.projection_seed, sigma=config.sigma, v=config.v,
                seed=fed.participant_seeds[i], anchor_seed=fed.shared_seed if i == 0 else None,
                keep_secrets=(i == colluder))
            children.start(pid, ["participant", "upload", "--config", configs[pid]])
        for pid in ids:
            children.finish(pid, f"participant {pid}")
        result = wait_for_result(files.store, analyst, PROCESS_TIMEOUT,
                                 root / "logs" / "analyst.log")
        predictions, gains = _predict_held_back(root, children, configs, held)
        attacks, reconstructions = (
            _attack_errors(files, children, ids[colluder], configs[ids[colluder]], fed)
            if attack_runs else ({}, {}))
    finally:
        children.stop_all()
    return _Run(result, attacks, reconstructions, predictions, gains,
                {name: proc.pid for name, proc in children.procs.items()})


def hold_back(fed, fraction: float, seed: int):
    """Each site's records split into those it uploads and those it holds back (a
    ``fraction`` of them, at least one) as its "next week's records": the federation to
    upload and ``{site: (x, labels)}`` held back. From a generator of its own, so the seeds of
    the upload are those of :func:`experiments.simulate.prepare`."""
    if not 0 < fraction < 1:
        raise InvalidInputError(f"the held-back fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng([seed, 20])
    keep, held = [], {}
    for pid, x, y in zip(participant_ids(len(fed.x)), fed.x, fed.labels, strict=True):
        order = rng.permutation(len(x))
        k = max(1, round(fraction * len(x)))
        keep.append(np.sort(order[k:]))
        held[pid] = (x[np.sort(order[:k])], y[np.sort(order[:k])])
    uploaded = replace(fed, x=[x[i] for x, i in zip(fed.x, keep, strict=True)],
                       labels=[y[i] for y, i in zip(fed.labels, keep, strict=True)],
                       tags=[t[i] for t, i in zip(fed.tags, keep, strict=True)])
    return uploaded, held


def _site_results(fed, held: dict[str, tuple[np.ndarray, np.ndarray]], run: _Run,
                  model: str) -> dict[str, dict[str, Any]]:
    """Per site: the model alone, the federation's and the centralised one (pooled raw
    records, what the protocol avoids), on its test rows and on its held-back records."""
    from noisyanchor.common.downstream import fit_downstream, held_out_metrics
    from noisyanchor.common.models import export_estimator
    from noisyanchor.common.splits import TEST

    def fit(x, y, tags):
        fitted = fit_downstream(x, y, tags, model=model)
        return export_estimator(fitted.estimator, fitted.center, fitted.scale)

    central = fit(np.vstack(fed.x), np.concatenate(fed.labels), np.concatenate(fed.tags))
    sites = {}
    for pid, x, y, tags in zip(participant_ids(len(fed.x)), fed.x, fed.labels, fed.tags,
                               strict=True):
        x_new, y_new = held[pid]
        gain, test = run.gains[pid], tags == TEST

        def held_back(predicted, y_new=y_new) -> dict[str, Any]:
            if predicted is None:
                return {"held_back_accuracy": None, "held_back_balanced_accuracy": None}
            m = held_out_metrics(y_new, predicted)
            return {"held_back_accuracy": m["accuracy"],
                    "held_back_balanced_accuracy": m["balanced_accuracy"]}

        try:
            alone = fit(x, y, tags).predict(x_new)
        except InvalidInputError:  # e.g. a single class among the site's training rows
            alone = None
        sites[pid] = {
            "test_rows": gain["test_rows"], "held_back": len(y_new), "gain": gain["gain"],
            "gain_interval": gain["gain_interval"], "gain_not_told": gain["gain_not_told"],
            "local_only": {"test_balanced_accuracy": gain["local_only_balanced_accuracy"],
                           **held_back(alone)},
            "federation": {"test_balanced_accuracy": gain["federation_balanced_accuracy"],
                           **held_back(run.predictions[pid])},
            "centralised": {"test_balanced_accuracy": held_out_metrics(
                y[test], central.predict(x[test]))["balanced_accuracy"],
                **held_back(central.predict(x_new))}}
    return sites


def default_workdir(now: float | None = None) -> Path:
    """A new folder under the working directory: ``noisyanchor-demo-<date>-<time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path = Path.cwd() / f"noisyanchor-demo-{stamp}"
    k = 1
    while path.exists():
        k += 1
        path = Path.cwd() / f"noisyanchor-demo-{stamp}-{k}"
    return path


def _attack_rows(fed, run: _Run, colluder: int) -> tuple[np.ndarray | None, list[AttackRow],
                                                           str | None]:
    """Records of the first target and every attack's reconstruction of them, in input space
    (decoded with ``F^+`` when there is a projection)."""
    from noisyanchor.common.gdp import decode

    targets = [i for i in range(len(fed.x)) if i != colluder]
    if not run.reconstructions or not targets:
        return None, [], None
    ids = participant_ids(len(fed.x))
    t, k = ids[targets[0]], SHOWN_RECORDS
    rows = [AttackRow(name, res["relative_error"], res["guess_error"],
                      decode(run.reconstructions[name][t][:k], fed.projection))
            for name, res in run.attacks.items() if t in run.reconstructions[name]]
    return fed.x[targets[0]][:k], rows, t


def run_demo(*, participants: int = 4, method: str = "aa-igdp-an",
             v: float = DEFAULT_ANCHOR_NOISE, sigma: float = 0.0, dim: int | None = None,
             anchors: int | None = None, colluder: int | None = 0, seed: int | None = None,
             workdir: Path | None = None, held_back: float = HELD_BACK,
             dataset: str = "digits", transport: str = "grpc") -> dict[str, Any]:
    """Run the demo, keep everything in ``workdir`` (default: a new folder under the working
    directory) with ``summary.json``, ``summary.md`` and the figures, and return the summary
    (keys of issue 3 kept; ``folder``, ``sites`` and ``files`` added). ``dataset``: ``digits``
    or ``breast-cancer`` (its 30 columns encoded with the public ranges its pilot template
    declares, by the encoder every site uses: :func:`experiments.datasets.load_tabular`).
    ``transport``: ``grpc`` (processes over mutual TLS) or ``flower`` (the Flower app on
    Flower's simulation engine, :mod:`deploy.flower_demo`; no colluder: it has no disclosure)."""
    from noisyanchor.common.methods import Method
    from noisyanchor.experiments.simulate import SimulationConfig, prepare, simulate

    if transport not in TRANSPORTS:
        raise InvalidInputError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    colluder = colluder if transport == "grpc" else None
    start_time = time.perf_counter()
    seed = secrets.randbits(32) if seed is None else seed
    config = SimulationConfig(dataset=dataset, method=method, participants=participants,
                              anchors=anchors, dim=dim, sigma=sigma, v=v, colluder=colluder,
                              seed=seed, utility=False)
    fed, held = hold_back(prepare(config), held_back, seed)
    attack_runs = colluder is not None and bool(Method.parse(method).attacks)
    root = Path(workdir) if workdir is not None else default_workdir()
    if root.exists() and any(root.iterdir()):
        raise InvalidInputError(f"workdir {root} is not empty")
    root.mkdir(parents=True, exist_ok=True)
    if transport == "grpc":
        run = _run_processes(root, config, fed, colluder, attack_runs, held)
    else:
        from noisyanchor.deploy.flower_demo import run_flower

        run = run_flower(root, config, fed, held)
    z = np.load(root / "store" / "result" / "z.npy")
    labels = np.load(root / "store" / "result" / "labels.npy")
    tags = np.load(root / "store" / "result" / "tags.npy")
    with blas_threads(1):  # the same BLAS thread count as the child processes
        z_ref = simulate(config, fed).alignment.z  # prepare() is deterministic in the seed
    diff = float(np.max(np.abs(z - z_ref))) if z.shape == z_ref.shape else float("inf")
    rel = diff / max(float(np.max(np.abs(z_ref))), np.finfo(float).tiny)
    model = (run.result.get("model") or {}).get("name", "logistic")
    summary = {
        "participants": participants, "dataset": dataset, "method": method, "v": v,
        "sigma": sigma, "dim": fed.d, "anchors": run.result["anchors"], "seed": seed,
        "colluder": participant_ids(participants)[colluder] if colluder is not None else None,
        "transport": transport,
        "tls": {"mutual": transport == "grpc", "ca": "demo CA (ECDSA P-256)",
                "server_name": "localhost" if transport == "grpc" else None,
                "client_certificates": participants},
        "pids": run.pids,
        "z_matches_inprocess": rel <= Z_RTOL, "z_max_abs_diff": diff, "z_max_rel_diff": rel,
        "solver": run.result["solver"], "attacks": run.attacks,
        "utility": _utility(run.result, z, labels, tags),
        "sites": _site_results(fed, held, run, "logistic" if model == "none" else model),
        "folder": str(root.resolve()),
    }
    originals, rows, target = _attack_rows(fed, run, colluder) if attack_runs else (None, [],
                                                                                     None)
    summary["seconds"] = time.perf_counter() - start_time
    write_report(root, summary, originals, rows, target)
    return summary


def _utility(result: dict[str, Any], z: np.ndarray, labels: np.ndarray,
             tags: np.ndarray) -> dict[str, Any]:
    """The analyst's own model metrics from ``result.json`` when it fitted one, else the same
    model fitted here."""
    from noisyanchor.common.downstream import Utility, evaluate_utility

    model = result.get("model") or {}
    if "balanced_accuracy" in model:
        return {f.name: model[f.name] for f in fields(Utility)}
    return asdict(evaluate_utility(z, labels, tags))
