"""A new operator's pilot, scripted: the README's quick start as separate processes on one
machine (the end-to-end test and ``benchmarks/bench_pilot.py`` run it).

``provision`` from a project file, the analyst from its kit, three sites started at different
times (the last one ``late`` seconds after the others), each on its share of the digits data as
a CSV file, and the analyst's ``result.json`` with the downstream model's metrics.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.deploy.launch import start, stop, write_toml

#: The three sites of the scripted pilot.
SITES = ("org-a", "org-b", "org-c")


@dataclass
class PilotRun:
    """Outcome of :func:`run_pilot`: timings (seconds from ``provision``), the result, logs."""

    root: Path
    result: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)

    def log(self, name: str) -> str:
        """The text one process wrote (``analyst`` or a site name)."""
        return (self.root / "logs" / f"{name}.log").read_text(errors="replace")


def write_project(root: Path, port: int, *, deadline_minutes: float = 30.0) -> Path:
    """A project file for three sites on this host (analyst on 127.0.0.1:``port``)."""
    names = [f"f{j}" for j in range(64)]
    tables: dict[str, dict[str, Any]] = {
        "project": {"name": "pilot", "validity_days": 30},
        "analyst": {"names": ["localhost"], "addresses": ["127.0.0.1"], "bind": "127.0.0.1",
                    "port": port},
        "federation": {"method": "aa-igdp-an", "anchors": 64, "dim": 16,
                       "projection_seed": 20261129, "v": 0.02, "dealer": SITES[0],
                       "deadline": f"in {deadline_minutes:g} minutes"},
        "schema": {"features": 64, "dtype": "float64", "feature_names": names},
        "model": {"name": "logistic"},
    }
    path = write_toml(root / "federation.toml", tables)
    with path.open("a") as fh:  # [[site]] array of tables (write_toml writes plain tables)
        for site in SITES:
            fh.write(f'\n[[site]]\nname = "{site}"\ndata = "data/{site}.csv"\n')
    return path


def write_site_data(kits: Path, seed: int = 0) -> None:
    """Each site's share of the digits data as ``<kit>/data/<site>.csv`` (header f0..f63,
    label): what a site would export from its own systems."""
    from noisyanchor.experiments.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.x))
    for site, rows in zip(SITES, np.array_split(order, len(SITES)), strict=True):
        path = kits / site / "data" / f"{site}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = ",".join([*(f"f{j}" for j in range(64)), "label"])
        table = np.column_stack([digits.x[rows], digits.y[rows]])
        np.savetxt(path, table, delimiter=",", header=header, comments="",
                   fmt=["%.6g"] * 64 + ["%d"])


def run_pilot(root: Path, port: int, *, stagger: float = 3.0, late: float = 60.0,
              timeout: float = 600.0) -> PilotRun:
    """Run the scripted pilot under ``root`` (see the module docstring); every process is
    stopped at the end."""
    root = Path(root)
    logs = root / "logs"
    project = write_project(root, port)
    begin = time.monotonic()
    procs: dict[str, subprocess.Popen] = {}
    run = PilotRun(root, {})
    try:
        procs["provision"] = start(["provision", "--project", project], logs / "provision.log")
        if procs["provision"].wait(120) != 0:
            raise RuntimeError(f"provision failed: {(logs / 'provision.log').read_text()}")
        kits = root / "kits"
        write_site_data(kits)
        procs["analyst"] = start(["analyst", "serve", "--config", kits / "analyst" /
                                  "analyst.toml"], logs / "analyst.log")
        run.seconds["analyst_started"] = time.monotonic() - begin
        for i, site in enumerate(SITES):
            if i:
                time.sleep(late if i == len(SITES) - 1 else stagger)
            procs[site] = start(["participant", "upload", "--config",
                                 kits / site / f"{site}.toml"], logs / f"{site}.log")
            run.seconds[f"{site}_started"] = time.monotonic() - begin
        for site in SITES:
            run.exit_codes[site] = procs[site].wait(timeout)
        result = kits / "analyst" / "store" / "result" / "result.json"
        deadline = time.monotonic() + timeout
        while not result.is_file() and time.monotonic() < deadline \
                and procs["analyst"].poll() is None:
            time.sleep(0.1)
        run.seconds["result"] = time.monotonic() - begin
        if result.is_file():
            run.result = json.loads(result.read_text())
    finally:
        for proc in procs.values():
            stop(proc)
    return run
