"""A Flower deployment on this host (issue 32): a SuperLink over TLS with SuperNode
authentication, three SuperNodes whose keys the analyst registered, each running the ClientApp
with its site's kit, and the ServerApp started with ``flwr run deploy/flower_app``; a node whose
key was not registered is refused at start. Every process is real, on 127.0.0.1 only, and
stopped at the end (with the ServerApp and ClientApp processes they spawned)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from noisyanchor.common.blas import blas_threads
from noisyanchor.deploy.demo import Z_RTOL
from noisyanchor.deploy.flower_demo import flower_kits
from noisyanchor.experiments.simulate import SimulationConfig, prepare, simulate
from noisyanchor.participant.predict import predict

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SITES = ("p0", "p1", "p2")

#: Seconds the whole federation may take: every message starts a ClientApp process per node.
RUN_TIMEOUT = 900.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_key(folder: Path, name: str) -> tuple[Path, Path]:
    """A SuperNode's P-384 key pair in OpenSSH format (what Flower reads): private, public."""
    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH))
    return private, public


class _Processes:
    """Every process this test starts, each in its own session (so the ServerApp and ClientApp
    processes Flower spawns below it are stopped with it)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.procs = env, logs, {}

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([str(BIN / args[0]), *args[1:]], stdout=log,
                                                stderr=subprocess.STDOUT, env=self.env,
                                                start_new_session=True)
        return self.procs[name]

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait(what: str, ready, timeout: float, procs: _Processes) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for name, proc in procs.procs.items():
            if name != "rogue" and proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode} while waiting for {what}: "
                            f"{procs.log(name)[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:g} s")
        time.sleep(0.5)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_superlink_and_three_registered_supernodes_over_tls_run_the_federation(tmp_path):
    config = SimulationConfig(dataset="digits", method="aa-igdp-an", participants=len(SITES),
                              colluder=None, seed=5, utility=False)
    fed = prepare(config)
    analyst, kits = flower_kits(tmp_path / "fed", config, fed)
    pki = tmp_path / "fed" / "pki"
    home, logs = tmp_path / "flwr-home", tmp_path / "logs"
    home.mkdir()
    logs.mkdir()
    env = dict(os.environ, FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0",
               RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    port = _free_port()
    # The analyst's CLI reaches its SuperLink's control API over TLS, trusting the federation CA.
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\n'
        f'root-certificates = "{pki / "ca.pem"}"\n')
    procs = _Processes(env, logs)
    try:
        procs.start("superlink", [
            "flower-superlink", "--ssl-ca-certfile", str(pki / "ca.pem"),
            "--ssl-certfile", str(pki / "analyst.pem"), "--ssl-keyfile", str(pki / "analyst.key"),
            "--enable-supernode-auth", "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(port)])
        _wait("SuperLink", lambda: _listening(port), 120, procs)
        for i, pid in enumerate((*SITES, "rogue")):
            private, public = _node_key(tmp_path, f"node-{pid}")
            if pid != "rogue":  # the analyst registers each site's node key
                subprocess.run([str(BIN / "flwr"), "supernode", "register", str(public), "local",
                                "--format", "json"], env=env, check=True, timeout=120,
                               capture_output=True)
            kit = kits[pid] if pid != "rogue" else kits[SITES[i % len(SITES)]]
            procs.start(pid, [
                "flower-supernode", "--root-certificates", str(pki / "ca.pem"),
                "--superlink", f"127.0.0.1:{port}", "--auth-supernode-private-key", str(private),
                "--node-config", f'noisyanchor-config="{kit}"', "--host", "127.0.0.1",
                "--port", str(_free_port()), "--max-retries", "2"])
        # An unregistered node (holding a real kit) is refused when it starts.
        assert procs.procs["rogue"].wait(120) != 0
        assert "Failed to activate SuperNode" in procs.log("rogue")
        started = subprocess.run(
            [str(BIN / "flwr"), "run", str(ROOT / "deploy" / "flower_app"), "local",
             "--run-config", f'analyst-config="{analyst}" reply-timeout=300.0',
             "--format", "json"], env=env, check=True, timeout=300, capture_output=True,
            text=True)
        assert json.loads(started.stdout[started.stdout.index("{"):])["success"]
        states = [tmp_path / "fed" / "state" / pid for pid in SITES]
        _wait("site model at every site",
              lambda: all((s / "site-model.bin").is_file() for s in states), RUN_TIMEOUT, procs)
    finally:
        procs.stop_all()
    z = np.load(tmp_path / "fed" / "store" / "result" / "z.npy")
    with blas_threads(1):
        z_ref = simulate(config, fed).alignment.z
    assert z.shape == z_ref.shape
    assert np.max(np.abs(z - z_ref)) <= Z_RTOL * np.max(np.abs(z_ref))
    for i, pid in enumerate(SITES):  # offline: nothing runs any more
        predicted = predict(kits[pid], fed.x[i][:20])
        assert np.mean(predicted.labels == fed.labels[i][:20]) > 0.5
