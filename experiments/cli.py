"""Subcommands of the evaluation bench: ``simulate`` and
``experiment {sweep,report,audit-rows,scores,laws,certificate,dp-baseline,membership,
wider-threats}``.

Each ``experiment`` subcommand lives in its own module with ``register(sub)``, listed in
``EXPERIMENT_MODULES``; this keeps the modules independent of one another.
"""

from __future__ import annotations

import argparse
import importlib

#: Modules contributing ``noisyanchor experiment <name>`` subcommands.
EXPERIMENT_MODULES: tuple[str, ...] = ("noisyanchor.experiments.sweep",
                                       "noisyanchor.experiments.report",
                                       "noisyanchor.experiments.audit_rows",
                                       "noisyanchor.experiments.score_release",
                                       "noisyanchor.experiments.laws",
                                       "noisyanchor.experiments.certificate",
                                       "noisyanchor.experiments.dp_baseline",
                                       "noisyanchor.experiments.membership_study",
                                       "noisyanchor.experiments.wider_threats")


#: Top-level commands of this role and their one-line help (see :mod:`noisyanchor.cli`).
COMMANDS = {"simulate": "run participants, analyst, colluder and attacker in one process",
            "experiment": "sweeps, reports and evaluations"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``simulate`` and the ``experiment`` group to the top-level parser."""
    importlib.import_module("noisyanchor.experiments.simulate_cli").register(sub)
    if EXPERIMENT_MODULES:
        group = sub.add_parser("experiment", help=COMMANDS["experiment"])
        inner = group.add_subparsers(dest="experiment_command", required=True, metavar="EXPERIMENT")
        for name in EXPERIMENT_MODULES:
            importlib.import_module(name).register(inner)
