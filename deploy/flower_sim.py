"""A whole federation on Flower's simulation engine in this process: the ServerApp over the
analyst's config and store, one virtual SuperNode per site running the ClientApp with that
site's kit (Ray actors on this host; nothing listens on the network).

References: issue 32, item 5.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisyanchor.common import flower_wire  # noqa: F401  (Flower's and Ray's telemetry off first)

# flower_wire first: it turns Flower's and Ray's telemetry off before Flower loads.
# isort: split
from flwr.app import Context
from flwr.clientapp import ClientApp

# isort: split

from noisyanchor.analyst.flower_server import server_app
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.participant.flower_client import client_app


def backend_config(cpus: int) -> dict[str, Any]:
    """The simulation backend: ``cpus`` Ray workers, one CPU per virtual site's ClientApp."""
    return {"init_args": {"num_cpus": cpus, "include_dashboard": False,
                          "log_to_driver": False, "configure_logging": False},
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}


@dataclass(frozen=True)
class KitOfNode:
    """The kit config of each virtual node: the ``partition-id`` the simulation gives it
    indexes ``kits`` (picklable, as Ray ships it to its workers)."""

    kits: tuple[Path, ...]

    def __call__(self, context: Context) -> Path:
        return self.kits[int(context.node_config["partition-id"])]


@dataclass(frozen=True)
class SimulationRun:
    """A federation run on the simulation engine: ``result.json``'s summary, the bytes of
    the messages' contents the ServerApp sent and received, and the wall time in seconds."""

    result: dict[str, Any]
    sent_bytes: int
    received_bytes: int
    seconds: float


def simulate(analyst_config: Path, kits: Sequence[Path], *, cpus: int = 2,
             reply_timeout: float = 300.0, client: ClientApp | None = None) -> SimulationRun:
    """Run the federation of ``analyst_config`` with one virtual site per kit (``kits`` in any
    order); a refusal is raised as the project error that ended the run. ``client`` replaces
    the ClientApp (tests of a misbehaving site)."""
    from flwr.simulation import run_simulation

    if not kits:
        raise InvalidInputError("a Flower simulation needs at least one site's kit")
    start = time.perf_counter()
    outcome: dict[str, Any] = {}
    server = server_app(Path(analyst_config), reply_timeout=reply_timeout, nodes_timeout=60.0,
                        outcome=outcome)
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(logging.WARNING)  # Flower's own progress lines; ours say what happens
    try:
        run_simulation(server, client or client_app(KitOfNode(tuple(Path(k) for k in kits))),
                       num_supernodes=len(kits), backend_config=backend_config(cpus))
    finally:
        flwr_log.setLevel(level)
    if "error" in outcome:
        raise outcome["error"]
    return SimulationRun(outcome["result"], outcome["sent_bytes"], outcome["received_bytes"],
                         time.perf_counter() - start)
