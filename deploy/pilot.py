"""A new operator's pilot, scripted: the README's quick start as separate processes on one
machine (the end-to-end test and ``benchmarks/bench_pilot.py`` run it).

``provision`` from a project file, ``data split`` into the kits, the analyst from its kit, three
sites started at different times (the last one ``late`` seconds after the others), each on its
share of the data as a CSV file (digits, or the breast cancer data with typed columns), and the
analyst's ``result.json`` with the downstream model's metrics.
"""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


#: Project templates of the pilot's data sets: digits is declared here (plain schema), the
#: typed tables take their [federation], [schema], [model] and sites from their template.
TEMPLATES = {"breast-cancer": "federation-breast-cancer.toml"}


def pilot_sites(dataset: str = "digits") -> tuple[str, ...]:
    """The sites of the scripted pilot on ``dataset`` (its template's, for a typed table)."""
    if dataset not in TEMPLATES:
        return SITES
    return tuple(s["name"] for s in _template(dataset)["site"])


def _template(dataset: str) -> dict[str, Any]:
    return tomllib.loads((Path(__file__).parent / "templates" / TEMPLATES[dataset]).read_text())


def write_project(root: Path, port: int, *, deadline_minutes: float = 30.0,
                  dataset: str = "digits") -> Path:
    """A project file for three sites on this host (analyst on 127.0.0.1:``port``): digits
    with a plain 64-feature schema, or a typed table's template with this port and deadline."""
    deadline = f"in {deadline_minutes:g} minutes"
    tables: dict[str, dict[str, Any]] = {
        "project": {"name": "pilot", "validity_days": 30},
        "analyst": {"names": ["localhost"], "addresses": ["127.0.0.1"], "bind": "127.0.0.1",
                    "port": port}}
    if dataset in TEMPLATES:
        template = _template(dataset)
        tables |= {"federation": template["federation"] | {"deadline": deadline},
                   "schema": template["schema"], "model": template["model"]}
    else:
        tables |= {
            # As federation-local.toml: no public projection (on 64 columns it would cost
            # every site more than joining gains it), the anchor at its default 4 d rows.
            "federation": {"method": "aa-igdp-an", "v": 0.02, "dealer": SITES[0],
                           "deadline": deadline},
            "schema": {"features": 64, "dtype": "float64",
                       "feature_names": [f"f{j}" for j in range(64)]},
            "model": {"name": "logistic"}}
    path = write_toml(root / "federation.toml", tables)
    with path.open("a") as fh:  # [[site]] array of tables
        for site in pilot_sites(dataset):
            fh.write(f'\n[[site]]\nname = "{site}"\ndata = "data/{site}.csv"\n')
    return path


def write_site_data(kits: Path, seed: int = 0, *, dataset: str = "digits") -> None:
    """Each site's share of ``dataset`` as ``<kit>/data/<site>.csv``, what a site would export
    from its own systems: ``noisyanchor data split`` (:mod:`deploy.datasplit`) into the kits."""
    from noisyanchor.deploy.datasplit import read_source, split_table

    split_table(read_source(dataset), pilot_sites(dataset), str(Path(kits) / "{site}" / "data"),
                seed=seed)


def run_pilot(root: Path, port: int, *, stagger: float = 3.0, late: float = 60.0,
              timeout: float = 600.0, dataset: str = "digits") -> PilotRun:
    """Run the scripted pilot under ``root`` (see the module docstring) on ``dataset``
    (``digits`` or ``breast-cancer``, split by ``noisyanchor data split``); every process is
    stopped at the end."""
    root = Path(root)
    logs = root / "logs"
    sites = pilot_sites(dataset)
    project = write_project(root, port, dataset=dataset)
    begin = time.monotonic()
    procs: dict[str, subprocess.Popen] = {}
    run = PilotRun(root, {})
    try:
        procs["provision"] = start(["provision", "--project", project], logs / "provision.log")
        if procs["provision"].wait(120) != 0:
            raise RuntimeError(f"provision failed: {(logs / 'provision.log').read_text()}")
        kits = root / "kits"
        procs["split"] = start(["data", "split", "--dataset", dataset, "--sites",
                                ",".join(sites), "--out", kits / "{site}" / "data"],
                               logs / "split.log")
        if procs["split"].wait(120) != 0:
            raise RuntimeError(f"data split failed: {(logs / 'split.log').read_text()}")
        procs["analyst"] = start(["analyst", "serve", "--config", kits / "analyst" /
                                  "analyst.toml"], logs / "analyst.log")
        run.seconds["analyst_started"] = time.monotonic() - begin
        for i, site in enumerate(sites):
            if i:
                time.sleep(late if i == len(sites) - 1 else stagger)
            procs[site] = start(["participant", "upload", "--config",
                                 kits / site / f"{site}.toml"], logs / f"{site}.log")
            run.seconds[f"{site}_started"] = time.monotonic() - begin
        for site in sites:
            run.exit_codes[site] = procs[site].wait(timeout)
        result = kits / "analyst" / "store" / "result" / "result.json"
        deadline = time.monotonic() + timeout
        while not result.is_file() and time.monotonic() < deadline \
                and procs["analyst"].poll() is None:
            time.sleep(0.1)
        run.seconds["result"] = time.monotonic() - begin
        if result.is_file():
            run.result = json.loads(result.read_text())
            # result.json is committed just before the analyst logs the end of the alignment:
            # wait (bounded) for that line before stopping it, so its log is complete.
            analyst_log = logs / "analyst.log"
            while "alignment done" not in analyst_log.read_text(errors="replace") \
                    and time.monotonic() < deadline and procs["analyst"].poll() is None:
                time.sleep(0.1)
    finally:
        for proc in procs.values():
            stop(proc)
    return run
