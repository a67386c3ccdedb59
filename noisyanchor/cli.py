"""The single ``noisyanchor`` command: subcommands grouped by role.

Each role package owns a ``cli`` module with ``COMMANDS`` (top-level command name -> one-line
help) and ``register(subparsers)``. Those modules import nothing heavy at module level, and only
the role of the command being run registers its full parser: ``noisyanchor --help`` lists every
command without importing numpy, scipy or grpc (tests/test_cli.py checks).

Every parser shows defaults in its help, accepts ``-v`` (more logging, repeatable) before or after
the subcommand, and refuses abbreviated options.

Exit codes: 0 success; 1 a refused or failed operation (the message names the problem);
2 a command-line usage error (argparse, including bad option values); 130 interrupted; 141 the
reader of stdout went away (:data:`common.json_vocabulary.EXIT_CODES`). With ``--json``, a
refused command (1) or a usage error (2) also prints one JSON object on stdout
(:func:`common.json_vocabulary.error_object`); the text stays on stderr. Every ``--json``
output speaks one vocabulary (:mod:`common.json_vocabulary`, docs/json.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence

from noisyanchor import __version__
from noisyanchor.common.errors import NoisyAnchorError
from noisyanchor.common.json_vocabulary import error_object

#: Role modules that contribute subcommands, in the order they appear in ``--help``.
ROLE_MODULES = ("noisyanchor.experiments.cli", "noisyanchor.analyst.cli",
                "noisyanchor.participant.cli", "noisyanchor.deploy.cli",
                "noisyanchor.deploy.data_cli")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, except where there is none to show or the text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        shown = action.default is not None and action.default is not False
        if not shown or action.default is argparse.SUPPRESS or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class UsageError(SystemExit):
    """A command-line usage error (exit status 2), keeping argparse's message for ``--json``."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(2)
        self.message, self.command = message, command


class Parser(argparse.ArgumentParser):
    """Every parser of the command (subparsers inherit the class): defaults shown in help, no
    abbreviated options, and ``-v`` accepted at every level (the counts add up)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        if self.add_help:  # placeholders of commands not being run have no options
            # argparse copies a subcommand's namespace over its parent's, so each level counts
            # under its own name and verbosity() adds them up.
            self.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                              dest=f"{VERBOSE}{self.prog}", help="more logging (-vv: debug)")


    def error(self, message: str):  # type: ignore[override]
        """argparse's usage error (usage and message on stderr, status 2), raised as a
        :class:`UsageError` that keeps the message."""
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise UsageError(message, self.prog)


#: Prefix of the per-parser ``-v`` counts in a parsed namespace.
VERBOSE = "verbose:"


def verbosity(args: argparse.Namespace) -> int:
    """How many ``-v`` were given, at every level of the command line together."""
    return sum(n for key, n in vars(args).items() if key.startswith(VERBOSE))


def _command(argv: Sequence[str]) -> str | None:
    """The top-level command in ``argv``: its first token that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser for ``argv``: every command listed, the one ``argv`` runs registered in full."""
    parser = Parser(prog="noisyanchor", description="Noisy-anchor GDP: participants, analyst, "
                    "attacks, experiments, DP release.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _command(argv)
    for name in ROLE_MODULES:
        role = importlib.import_module(name)
        if chosen in role.COMMANDS:
            role.register(sub)
        else:
            for command, text in role.COMMANDS.items():
                sub.add_parser(command, help=text, add_help=False)
    return parser


def _chosen_parser(parser: argparse.ArgumentParser,
                   args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command parser ``args`` went through (``simulate``, ``release
    gram``, ...): the one whose usage an unknown option should be answered with."""
    while True:
        sub = next((a for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)), None)
        name = None if sub is None else getattr(args, sub.dest, None)
        if sub is None or name not in sub.choices:
            return parser
        parser = sub.choices[name]


def _unknown(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The usage error for unrecognised arguments, with the closest options of the command."""
    import difflib

    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = {e: difflib.get_close_matches(e.split("=")[0], options, n=1, cutoff=0.6)
             for e in extras if e.startswith("-")}
    near = "; ".join(f"{e}: did you mean {m[0]}?" for e, m in hints.items() if m)
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({near})" if near else "")


def _print_error_object(command: str, message: str, code: str, exit_code: int) -> None:
    print(json.dumps(error_object(command, message, code, exit_code)), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen handler, map project errors and failed file operations
    to exit status 1."""
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in argv
    parser = build_parser(argv)
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # answered with the subcommand's usage, not the top level's
            chosen = _chosen_parser(parser, args)
            chosen.error(_unknown(chosen, extras))
    except UsageError as err:
        if as_json:
            _print_error_object(err.command, err.message, "USAGE", 2)
        raise
    level = logging.WARNING - 10 * min(verbosity(args), 2)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    command = _chosen_parser(parser, args).prog
    try:
        return int(args.handler(args) or 0)
    except NoisyAnchorError as err:
        return _refused(args, command, str(err), err.grpc_code, as_json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`... | head`): stop quietly, as a shell tool does.
        # Python flushes stdout again at exit; pointing it at /dev/null keeps that flush from
        # raising a second BrokenPipeError (the recipe of the signal module's documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except OSError as err:  # a file the command could not read or write: named, no traceback
        logging.getLogger(__name__).debug("%s failed", command, exc_info=True)  # with -vv
        return _refused(args, command, str(err), _OS_CODES.get(type(err), "UNKNOWN"), as_json)


#: The error object's ``code`` of a failed file operation (gRPC status names, as the
#: project's errors use).
_OS_CODES = {FileNotFoundError: "NOT_FOUND", FileExistsError: "ALREADY_EXISTS",
             PermissionError: "PERMISSION_DENIED", IsADirectoryError: "INVALID_ARGUMENT",
             NotADirectoryError: "INVALID_ARGUMENT"}


def _refused(args: argparse.Namespace, command: str, message: str, code: str,
             as_json: bool) -> int:
    """Exit status 1: the message on stderr (after the top-level command, as sites' logs are
    read), and with ``--json`` the error object naming the whole ``command`` on stdout."""
    print(f"noisyanchor {args.command}: error: {message}", file=sys.stderr)
    if as_json:
        _print_error_object(command, message, code, 1)
    return 1
