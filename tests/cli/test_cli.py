"""The ``noisyanchor`` command line: fast top-level help, defaults in help, ``-v`` at any level,
exit status 2 for every usage error, and machine-readable status."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from noisyanchor.cli import ROLE_MODULES, build_parser, verbosity
from noisyanchor.participant.cli import status_summary
from noisyanchor.protos.v1 import analyst_pb2 as pb


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "noisyanchor", *argv], capture_output=True,
                          text=True, timeout=120)


def test_top_level_help_imports_no_numerical_or_network_library():
    # What makes `noisyanchor --help` slow is importing numpy/scipy/grpc; the listing needs none.
    code = ("import sys\nfrom noisyanchor.cli import build_parser\nbuild_parser(['--help'])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numpy', 'scipy', 'grpc', 'sklearn', 'cryptography', 'matplotlib'})\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == ""


def test_every_listed_command_is_registered_by_its_role():
    for name in ROLE_MODULES:
        role = importlib.import_module(name)
        for command in role.COMMANDS:
            parser = build_parser([command])
            sub = next(a for a in parser._actions if a.dest == "command")
            assert sub.choices[command].add_help, f"{command} was not registered in full"
            assert set(role.COMMANDS) <= set(sub.choices)


@pytest.mark.parametrize("argv", [
    ["demo", "--method", "foo"],
    ["simulate", "--method", "foo"],
    ["demo", "--participants", "1"],
    ["simulate", "--tol", "0"],
    ["simulate", "--stopping", "soon"],
    ["simulate", "--blas-threads", "-1"],
    ["analyst", "serve", "--config", "a.toml", "--blas-threads", "two"],
    ["simulate", "--v", "-0.1"],
    ["release", "gram", "--config", "x.toml", "--epsilon", "0", "--delta", "1e-5", "--out",
     "g.npy"],
    ["release", "gram", "--config", "x.toml", "--epsilon", "1", "--delta", "1.5", "--out",
     "g.npy"],
    ["analyst", "serve", "--config", "a.toml", "--port", "x"],
    ["no-such-command"],
    ["simulate", "--particip", "3"],  # abbreviations are refused
])
def test_usage_errors_exit_with_status_2_naming_the_option(argv):
    out = _run(*argv)
    assert out.returncode == 2, out.stderr
    assert "error:" in out.stderr


def test_verbose_is_accepted_before_and_after_the_subcommand():
    def count(*argv: str) -> int:
        return verbosity(build_parser(argv).parse_args(argv))

    assert count("-v", "participant", "status", "--config", "p.toml", "-v") == 2
    assert count("-vv", "participant", "-v", "status", "--config", "p.toml") == 3
    assert count("participant", "status", "--config", "p.toml") == 0
    argv = ["simulate", "--v", "0.1", "-v"]  # --v (anchor noise) and -v (verbosity) differ
    args = build_parser(argv).parse_args(argv)
    assert args.v == 0.1 and verbosity(args) == 1


def test_help_shows_defaults():
    out = _run("demo", "--help")
    assert out.returncode == 0
    assert "(default: 4)" in out.stdout and "(default: aa-igdp-an)" in out.stdout
    assert "(default: 0.0)" in out.stdout  # a zero default is still shown


def test_status_json_nests_the_result_instead_of_a_json_string():
    result = {"solver": {"name": "gopp", "certified": True}}
    reply = pb.StatusReply(federation_id="f", state="done", expected=["a", "b"],
                           committed=["a", "b"], result_json=json.dumps(result))
    status = status_summary(reply)
    assert status["result"] == result and "result_json" not in status
    assert status_summary(pb.StatusReply(state="collecting"))["result"] is None
