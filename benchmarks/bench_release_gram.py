"""End to end: ``noisyanchor release gram`` on the bundled digits (n = 1,797) at its defaults
(issue 11), timed from the command's start to its exit.

Separate processes over mutual TLS on loopback, as an operator runs them: an analyst
(``aa-igdp``, h = 64, r = 256 anchor rows, a dataset budget of epsilon 10), four participants
each uploading a quarter of the digits (``participant upload``), then one participant's
``noisyanchor release gram --epsilon 1 --delta 1e-5 --out gram.npy --json`` with nothing else
(Newton projector, the analyst's iteration cap, the default polling); the analyst runs without
a BLAS thread pin in its environment, under its own policy (:mod:`common.blas`). Recorded: the
command's wall seconds (submit, poll, fetch, write the ``.npy``), its JSON summary (the
analyst's compute seconds, eigendecompositions, residual), the ledger's charges (must be one),
the released matrix's size and unit diagonal, the load average before and after, and the
analyst's BLAS policy line.

Run: ``flock -x /work/cpu.lock python -m benchmarks.bench_release_gram`` (writes
``benchmarks/results/release_gram.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from noisyanchor.common.blas import THREAD_VARIABLES, available_cpus
from noisyanchor.deploy.demo import wait_for_result, write_analyst, write_participant
from noisyanchor.deploy.launch import child_env, start, stop, wait_for_port

RESULTS = Path(__file__).resolve().parent / "results" / "release_gram.json"
IDS = ("p0", "p1", "p2", "p3")
FEDERATION = "bench"
EPSILON, DELTA = 1.0, 1e-5


def _federation(root: Path, timeout: float) -> tuple[subprocess.Popen, dict[str, Path], Path]:
    """An aligned analyst over the digits split among :data:`IDS`: (process, configs, store)."""
    from noisyanchor.experiments.datasets import load_digits

    x = load_digits().x
    data = {}
    for pid, part in zip(IDS, np.array_split(x, len(IDS)), strict=True):
        data[pid] = root / "data" / f"{pid}.npz"
        data[pid].parent.mkdir(parents=True, exist_ok=True)
        np.savez(data[pid], x=part, labels=np.arange(len(part)) % 2,
                 tags=np.zeros(len(part), dtype="i1"))
    files = write_analyst(root, IDS, federation_id=FEDERATION, method="aa-igdp", anchors=256,
                          dim=64, sigma=0.0, v=0.0, accept_collusion=False, data=data)
    with open(files.analyst_config, "a") as fh:
        fh.write(f"[privacy]\nepsilon_budget = 10.0\ndelta_budget = {DELTA}\n")
    # The analyst as an operator starts it: no BLAS pin in its environment (the demo's children
    # get one), so its own policy (common.blas) chooses the threads.
    env = {k: v for k, v in child_env().items() if k not in THREAD_VARIABLES}
    with open(root / "analyst.log", "wb") as log:
        analyst = subprocess.Popen([sys.executable, "-m", "noisyanchor", "analyst", "serve",
                                    "--config", str(files.analyst_config)],
                                   stdout=log, stderr=subprocess.STDOUT, env=env)
    port = wait_for_port(files.port_file, analyst)
    configs = {pid: write_participant(
        files, pid, federation_id=FEDERATION, address=f"127.0.0.1:{port}", method="aa-igdp",
        anchors=256, dim=None, projection_seed=None, sigma=0.0, v=0.0, timeout=timeout)
        for pid in IDS}
    uploads = [start(["participant", "upload", "--config", configs[pid]], root / f"{pid}.log")
               for pid in IDS]
    for proc in uploads:
        if proc.wait(timeout) != 0:
            raise SystemExit(f"an upload failed (logs in {root})")
    wait_for_result(files.store, analyst, timeout)
    return analyst, configs, files.store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="participants' timeout (seconds), also the release's wait")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-release-") as tmp:
        root = Path(tmp)
        analyst, configs, store = _federation(root, args.timeout)
        try:
            gram_path = root / "gram.npy"
            command = ["release", "gram", "--config", str(configs["p0"]), "--epsilon",
                       str(EPSILON), "--delta", str(DELTA), "--out", str(gram_path), "--json"]
            load_before = os.getloadavg()
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "noisyanchor", *command],
                                  env=child_env(), capture_output=True, text=True,
                                  timeout=args.timeout + 60)
            seconds = time.perf_counter() - began
            load_after = os.getloadavg()
            if done.returncode != 0:
                raise SystemExit(f"release gram failed ({done.returncode}): {done.stderr}")
            summary = json.loads(done.stdout)
            gram = np.load(gram_path)
            ledger = json.loads((store / "privacy_ledger.json").read_text())
            charges = sum(len(v) for v in ledger["datasets"].values())
            policy = [line.split("BLAS threads:", 1)[1].strip()
                      for line in (root / "analyst.log").read_text().splitlines()
                      if "BLAS threads:" in line]
        finally:
            stop(analyst)
    report = {
        "benchmark": "noisyanchor release gram on the bundled digits at its defaults, "
                     "end to end (separate processes, mutual TLS on loopback)",
        "command": " ".join(["noisyanchor", *command[:3], "p0.toml", *command[4:8], "--out",
                             "gram.npy", "--json"]),
        "n": int(gram.shape[0]), "participants": len(IDS), "epsilon": EPSILON, "delta": DELTA,
        "wall_seconds": seconds, "summary": summary, "ledger_charges": charges,
        "max_abs_diagonal_error": float(np.abs(np.diag(gram) - 1.0).max()),
        "machine": {"cpus": available_cpus(), "load_average_1_5_15_before": load_before,
                    "load_average_1_5_15_after": load_after,
                    "analyst_blas_policy": policy[0] if policy else None,
                    "thread_env": {k: os.environ.get(k) for k in THREAD_VARIABLES},
                    "python": platform.python_version(), "numpy": np.__version__,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if charges == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
