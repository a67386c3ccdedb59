"""``noisyanchor demo``: the whole system as separate OS processes on 127.0.0.1.

On the bundled digits data: make a PKI, write the analyst's and every participant's config and
data file, start the analyst and ``p`` participant processes (one of them the colluder), wait for
the alignment, run the colluder's disclosure and the attack, and compare the collaboration matrix
with what the in-process simulator computes from the same seeds.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.attacks import relative_error
from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.linalg import single_threaded_blas
from noisyanchor.deploy.certs import Pki, write_pki
from noisyanchor.deploy.launch import start, stop, wait_for_port, write_toml

#: Tolerance of ``z_matches_inprocess``: max absolute difference of the two ``Z`` relative to
#: ``max |Z|``. The reference runs with one BLAS thread like the child processes, so the two
#: are usually identical; without threadpoolctl (which pins it) sums may be reordered, and
#: differences of a few 1e-13 relative were seen.
Z_RTOL = 1e-12

#: Seconds any one demo process may take.
PROCESS_TIMEOUT = 300.0


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
                  anchors: int | None, dim: int | None, sigma: float, v: float,
                  accept_collusion: bool, max_iter: int = 500, tol: float = 1e-7,
                  data: dict[str, Path] | None = None,
                  extra_certificates: tuple[str, ...] = (),
                  stream_idle_timeout: float | None = None,
                  keep_ca_key: bool = False) -> FederationFiles:
    """Make the PKI and the analyst's config under ``root``.

    ``extra_certificates`` are client certificates from the same CA for ids outside the
    federation (tests of unknown clients); ``stream_idle_timeout`` None keeps the default;
    ``keep_ca_key`` writes the CA key (tests that issue hostile certificates).
    """
    root = Path(root)
    pki = write_pki(root / "pki", ids + tuple(extra_certificates), keep_ca_key=keep_ca_key)
    store, port_file = root / "store", root / "analyst.port"
    cfg = write_toml(root / "analyst.toml", {
        "federation": {"id": federation_id, "participants": list(ids), "method": method,
                       "anchors": anchors, "dim": dim, "sigma": sigma, "v": v,
                       "reference": ids[0], "accept_collusion": accept_collusion},
        "solver": {"max_iter": max_iter, "tol": tol},
        "server": {"host": "127.0.0.1", "port": 0, "port_file": port_file, "output_dir": store,
                   "stream_idle_timeout": stream_idle_timeout},
        "tls": {"ca": pki.ca, "cert": pki.server_cert, "key": pki.server_key}})
    return FederationFiles(root, pki, ids, cfg, store, port_file, dict(data or {}))


def write_participant(files: FederationFiles, pid: str, *, federation_id: str, address: str,
                      method: str, anchors: int | None, dim: int | None,
                      projection_seed: int | None, sigma: float, v: float,
                      seed: int | None = None, anchor_seed: bytes | None = None,
                      keep_secrets: bool = False, timeout: float = 120.0) -> Path:
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
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise PreconditionError(f"{what} exited with status {proc.returncode}: "
                                + " | ".join(tail))


def wait_for_result(store: Path, analyst: subprocess.Popen, timeout: float) -> dict[str, Any]:
    """The analyst's ``result.json`` once written (bounded wait)."""
    path = store / "result" / "result.json"
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if analyst.poll() is not None or time.monotonic() > deadline:
            raise PreconditionError("the analyst produced no result "
                                    f"(exit status {analyst.poll()})")
        time.sleep(0.05)
    return json.loads(path.read_text())


def run_demo(*, participants: int = 4, method: str = "aa-igdp-an", v: float = 0.02,
             sigma: float = 0.0, dim: int | None = None, anchors: int | None = None,
             colluder: int | None = 0, seed: int | None = None,
             workdir: Path | None = None) -> dict[str, Any]:
    """Run the demo and return its summary (keys pinned by issue 3)."""
    from noisyanchor.common.downstream import evaluate_utility
    from noisyanchor.common.methods import Method
    from noisyanchor.experiments.simulate import SimulationConfig, prepare, simulate

    start_time = time.perf_counter()
    seed = secrets.randbits(32) if seed is None else seed
    config = SimulationConfig(dataset="digits", method=method, participants=participants,
                              anchors=anchors, dim=dim, sigma=sigma, v=v, colluder=colluder,
                              seed=seed, utility=False)
    fed = prepare(config)
    ids = participant_ids(participants)
    m = Method.parse(method)
    attack_runs = colluder is not None and bool(m.attacks)
    with tempfile.TemporaryDirectory(prefix="noisyanchor-demo-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        if workdir is not None and root.exists() and any(root.iterdir()):
            raise InvalidInputError(f"workdir {root} is not empty")
        data = {}
        for i, pid in enumerate(ids):
            data[pid] = root / "data" / f"{pid}.npz"
            data[pid].parent.mkdir(parents=True, exist_ok=True)
            np.savez(data[pid], x=fed.x[i], labels=fed.labels[i], tags=fed.tags[i])
        files = write_analyst(root, ids, federation_id="demo", method=method,
                              anchors=anchors, dim=dim, sigma=sigma, v=v,
                              accept_collusion=colluder is not None, data=data)
        logs = root / "logs"
        analyst = start(["analyst", "serve", "--config", files.analyst_config],
                        logs / "analyst.log")
        pids = {"analyst": analyst.pid}
        try:
            port = wait_for_port(files.port_file, analyst)
            procs = {}
            for i, pid in enumerate(ids):
                cfg = write_participant(
                    files, pid, federation_id="demo", address=f"127.0.0.1:{port}",
                    method=method, anchors=anchors, dim=dim, projection_seed=fed.projection_seed,
                    sigma=sigma, v=v, seed=fed.participant_seeds[i],
                    anchor_seed=fed.shared_seed if i == 0 else None,
                    keep_secrets=(i == colluder))
                procs[pid] = (start(["participant", "upload", "--config", cfg],
                                    logs / f"{pid}.log"), cfg)
                pids[pid] = procs[pid][0].pid
            for pid, (proc, _) in procs.items():
                _finish(proc, logs / f"{pid}.log", f"participant {pid}", PROCESS_TIMEOUT)
            result = wait_for_result(files.store, analyst, PROCESS_TIMEOUT)
            attacks: dict[str, Any] = {}
            if attack_runs:
                c = ids[colluder]
                proc = start(["participant", "collude", "--config", procs[c][1]],
                             logs / f"{c}-collude.log")
                pids[f"{c}-collude"] = proc.pid
                _finish(proc, logs / f"{c}-collude.log", "the colluder", PROCESS_TIMEOUT)
                proc = start(["attack", "--store", files.store, "--json"], logs / "attack.log")
                pids["attack"] = proc.pid
                _finish(proc, logs / "attack.log", "the attack", PROCESS_TIMEOUT)
                summary = json.loads((files.store / "attack" / "summary.json").read_text())
                for name, per_target in summary["reconstructions"].items():
                    errs = {t: relative_error(np.load(path), fed.working(ids.index(t)))
                            for t, path in per_target.items()}
                    attacks[name] = {"relative_error": float(np.mean(list(errs.values()))),
                                     "per_target": errs}
            z = np.load(files.store / "result" / "z.npy")
            labels = np.load(files.store / "result" / "labels.npy")
            tags = np.load(files.store / "result" / "tags.npy")
        finally:
            stop(analyst)
        with single_threaded_blas():  # the same BLAS thread count as the child processes
            z_ref = simulate(config).alignment.z  # prepare() is deterministic in the seed
        diff = float(np.max(np.abs(z - z_ref))) if z.shape == z_ref.shape else float("inf")
        rel = diff / max(float(np.max(np.abs(z_ref))), np.finfo(float).tiny)
        utility = asdict(evaluate_utility(z, labels, tags))
    return {
        "participants": participants, "method": method, "v": v, "sigma": sigma,
        "dim": fed.d, "anchors": result["anchors"], "seed": seed,
        "colluder": ids[colluder] if colluder is not None else None,
        "tls": {"mutual": True, "ca": "demo CA (ECDSA P-256)", "server_name": "localhost",
                "client_certificates": participants},
        "pids": pids,
        "z_matches_inprocess": rel <= Z_RTOL, "z_max_abs_diff": diff, "z_max_rel_diff": rel,
        "solver": result["solver"], "attacks": attacks, "utility": utility,
        "seconds": time.perf_counter() - start_time,
    }

