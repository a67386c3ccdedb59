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
    from noisyanchor.common.cliargs import int_at_least, nonnegative_float, positive_float

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
    serve.add_argument("--blas-threads", type=int_at_least(0), default=None,
                       help="override [server] blas_threads: BLAS threads of every operation "
                       "(0: one, more only for large problems when CPUs are idle)")
    serve.add_argument("--log-json", type=Path, default=None, metavar="FILE",
                       help="also append the log to FILE as JSON lines (override [server] "
                       "log_json)")
    serve.set_defaults(handler=_serve)

    check = inner.add_parser("health", help="ask an analyst's health service whether it is "
                             "SERVING (exit 0) or not (exit 1)")
    check.add_argument("--port", type=int_at_least(1), required=True,
                       help="the analyst's [server] health_port (plaintext, on 127.0.0.1)")
    check.add_argument("--service", default="",
                       help="service name (default: the server as a whole)")
    check.add_argument("--timeout", type=positive_float, default=5.0, help="seconds to wait")
    check.set_defaults(handler=_health)

    attack = sub.add_parser("attack", help=COMMANDS["attack"])
    attack.add_argument("--store", type=Path, required=True, help="the analyst's output_dir")
    attack.add_argument("--out", type=Path, default=None,
                        help="where to write reconstructions (default: STORE/attack)")
    attack.add_argument("--colluder", default=None, metavar="ID",
                        help="participant whose disclosure to use (default: the only one)")
    attack.add_argument("--v", type=nonnegative_float, default=None,
                        help="anchor-noise level v for the corrected attacks (default: from the "
                             "colluder's disclosed anchor noise, else estimated from the anchor "
                             "residuals)")
    attack.add_argument("--json", action="store_true", help="print the summary as JSON")
    attack.set_defaults(handler=_attack)


def _serve(args: argparse.Namespace) -> int:
    from noisyanchor.common.logs import configure_logging, quiet_grpc_core

    quiet_grpc_core()  # before grpc is first imported (by the server module)
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.analyst.server import serve
    from noisyanchor.common.blas import configure_blas

    config = load_analyst_config(args.config).with_overrides(
        port=args.port, port_file=args.port_file, output_dir=args.output_dir,
        log_json=args.log_json, blas_threads=args.blas_threads)
    configure_logging(config.log_json)
    configure_blas(config.blas_threads)  # logs the choice
    serve(config)
    return 0


def _health(args: argparse.Namespace) -> int:
    from noisyanchor.common.logs import quiet_grpc_core

    quiet_grpc_core()
    from noisyanchor.analyst.health import check_health

    status = check_health(f"127.0.0.1:{args.port}", args.service, args.timeout)
    print(status)
    return 0 if status == "SERVING" else 1


def _attack(args: argparse.Namespace) -> int:
    from noisyanchor.analyst.attack import attack_store

    summary = attack_store(args.store, args.out, colluder=args.colluder, v=args.v)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"attacks by colluder {summary['colluder']} on {summary['method']}: "
          f"{len(summary['targets'])} targets, reconstructions in {summary['out_dir']}")
    for name, files in summary["reconstructions"].items():
        print(f"  {name}: {len(files)} reconstructions")
    for name, why in summary["skipped"].items():
        print(f"  {name}: skipped ({why})")
    level = summary["noise_level"]
    if level["v"] is not None:
        print(f"  anchor-noise level v = {level['v']:.4g} ({level['source']})")
    return 0
