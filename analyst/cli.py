"""Subcommands of the analyst role: ``analyst serve`` and ``attack``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: Top-level commands of this role and their one-line help (see :mod:`noisyanchor.cli`).
COMMANDS = {"analyst": "the analyst: collect uploads, align, relay",
            "attack": "run the colluder attacks from an analyst store"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add this role's subcommands to the top-level parser."""
    from noisyanchor.common.cliargs import int_at_least

    group = sub.add_parser("analyst", help=COMMANDS["analyst"])
    inner = group.add_subparsers(dest="analyst_command", required=True, metavar="ACTION")
    serve = inner.add_parser("serve", help="serve the federation over mutual TLS until "
                             "SIGTERM/SIGINT")
    serve.add_argument("--config", type=Path, required=True, help="analyst TOML file")
    serve.add_argument("--port", type=int_at_least(0), default=None, help="override [server] port")
    serve.add_argument("--port-file", type=Path, default=None,
                       help="override [server] port_file (the bound port is written there)")
    serve.add_argument("--output-dir", type=Path, default=None,
                       help="override [server] output_dir")
    serve.set_defaults(handler=_serve)

    attack = sub.add_parser("attack", help=COMMANDS["attack"])
    attack.add_argument("--store", type=Path, required=True, help="the analyst's output_dir")
    attack.add_argument("--out", type=Path, default=None,
                        help="where to write reconstructions (default: STORE/attack)")
    attack.add_argument("--json", action="store_true", help="print the summary as JSON")
    attack.set_defaults(handler=_attack)


def _serve(args: argparse.Namespace) -> int:
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.analyst.server import serve

    config = load_analyst_config(args.config).with_overrides(
        port=args.port, port_file=args.port_file, output_dir=args.output_dir)
    serve(config)
    return 0


def _attack(args: argparse.Namespace) -> int:
    from noisyanchor.analyst.attack import attack_store

    summary = attack_store(args.store, args.out)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"attacks by colluder {summary['colluder']} on {summary['method']}: "
          f"{len(summary['targets'])} targets, reconstructions in {summary['out_dir']}")
    for name, files in summary["reconstructions"].items():
        print(f"  {name}: {len(files)} reconstructions")
    return 0
