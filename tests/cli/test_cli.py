"""The ``noisyanchor`` command line: fast top-level help, defaults in help, ``-v`` at any level,
exit status 2 for every usage error, and machine-readable status."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from noisyanchor.cli import ROLE_MODULES, build_parser, main, verbosity


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


def _every_parser():
    """Every (sub)command parser of every role, with its command path."""
    import argparse

    def walk(parser, path):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])

    for name in ROLE_MODULES:
        for command in importlib.import_module(name).COMMANDS:
            top = next(a for a in build_parser([command])._actions if a.dest == "command")
            yield from walk(top.choices[command], [command])


def test_every_option_of_every_command_has_help_text():
    import argparse

    missing = [(" ".join(path), action.option_strings or action.dest)
               for path, parser in _every_parser() for action in parser._actions
               if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
               and not action.dest.startswith("verbose:") and not action.help]
    assert missing == []


@pytest.mark.parametrize(("argv", "usage", "hint"), [
    (["simulate", "--meth", "c-gdp"], "usage: noisyanchor simulate", "did you mean --method?"),
    (["experiment", "sweep", "--config", "x.toml", "--out", "o", "--drawz", "3"],
     "usage: noisyanchor experiment sweep", "did you mean --draws?"),
    (["participant", "status", "--config", "p.toml", "--bogus"],
     "usage: noisyanchor participant status", "unrecognized arguments: --bogus"),
])
def test_an_unknown_option_is_answered_with_its_own_commands_usage(argv, usage, hint):
    """Regression (issue 23): `simulate --meth c-gdp` answered with the top-level usage."""
    out = _run(*argv)
    assert out.returncode == 2
    assert out.stderr.startswith(usage) and hint in out.stderr


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


def test_experiment_scores_never_overwrites_results_by_default(tmp_path):
    """Regression (issue 23): `experiment scores` wrote to experiments/results/scores under the
    working directory, overwriting the committed results when run from the repository root.
    Its default is now runs/scores there, and a folder that holds results is refused."""
    from noisyanchor.experiments.score_release import ScoresConfig

    assert ScoresConfig().out == "runs/scores"
    (tmp_path / "summary.json").write_text("{}")
    out = _run("experiment", "scores", "--out", str(tmp_path), "--n", "50")
    assert out.returncode == 1 and "--overwrite" in out.stderr
    assert (tmp_path / "summary.json").read_text() == "{}"


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    # `noisyanchor data split ... --json | head`: the reader has gone before the JSON is written.
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run([sys.executable, "-m", "noisyanchor", "data", "split", "--dataset",
                           "digits", "--sites", "a,b", "--out", str(tmp_path / "data"), "--json"],
                          stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


@pytest.mark.parametrize("argv, command", [
    (["schema", "check", "--schema", "{tmp}/none.toml", "--data", "x.csv"], "schema check"),
    (["data", "split", "--dataset", "mnist", "--sites", "a,b", "--out", "{tmp}/o"], "data split"),
    (["provision", "--project", "{tmp}/none.toml"], "provision"),
    (["participant", "status", "--config", "{tmp}/none.toml"], "participant status"),
])
def test_a_refused_command_prints_one_json_error_object_with_json(tmp_path, capsys, argv,
                                                                  command):
    """Regression (issue 34): --json printed nothing on stdout when a command was refused.
    Every command answers in one shape; the text stays on stderr, the exit status is 1."""
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--json"]) == 1
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error == {"command": f"noisyanchor {command}", "message": error["message"],
                     "code": "INVALID_ARGUMENT", "exit_code": 1}
    assert f"error: {error['message']}" in err
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 1
    assert capsys.readouterr().out == ""  # text mode: stdout stays empty


def test_a_usage_error_with_json_prints_the_error_object_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["schema", "check", "--schema", "x.toml", "--json", "--bogus"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error == {"command": "noisyanchor schema check", "message": error["message"],
                     "code": "USAGE", "exit_code": 2}
    assert error["message"].startswith("unrecognized arguments: --bogus")
    assert "usage: noisyanchor schema check" in err
