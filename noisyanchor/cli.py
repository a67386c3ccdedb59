"""The single ``noisyanchor`` command: subcommands grouped by role.

Each role package owns a ``cli`` module with ``register(subparsers)``; handlers import their heavy
dependencies lazily so ``noisyanchor --help`` stays fast.

Exit codes: 0 success; 1 a refused or failed operation (the message names the problem);
2 a command-line usage error (argparse); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from noisyanchor import __version__
from noisyanchor.common.errors import NoisyAnchorError

#: Role modules that contribute subcommands, in the order they appear in ``--help``.
ROLE_MODULES = ("noisyanchor.experiments.cli", "noisyanchor.analyst.cli",
                "noisyanchor.participant.cli", "noisyanchor.deploy.cli")


def build_parser() -> argparse.ArgumentParser:
    """Assemble the parser from every role module's ``register`` function."""
    parser = argparse.ArgumentParser(
        prog="noisyanchor",
        allow_abbrev=False,  # "simulate --v" must not read as --verbose or --version
        description="Noisy-anchor GDP: participants, analyst, attacks, experiments, DP release.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in ROLE_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen handler, map project errors to exit status 1."""
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return int(args.handler(args) or 0)
    except NoisyAnchorError as err:
        print(f"noisyanchor {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
