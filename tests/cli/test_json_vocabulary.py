"""Every ``--json`` output speaks one vocabulary (issue 34, items 2 and 4;
common.json_vocabulary, docs/json.md): each command that takes ``--json`` is found from the
parsers, refused once with its error object and exit status 1, once with a usage error (2),
and run for its output, in-process where it needs no analyst and over real processes (an
analyst and three sites) where it does; that federation also gets its deadline extended while
the analyst runs, and acts on it without a restart.

The heavier outputs are checked where their own tests already run them: ``demo``
(tests/e2e/test_e2e_runs.py), ``attack`` (tests/analyst/test_federation.py), ``release``
(tests/e2e/test_e2e_release.py), ``experiment sweep|report|scores``
(tests/experiments/test_sweep_report.py, tests/common/test_scoreshield_experiment.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noisyanchor import deploy
from noisyanchor.cli import ROLE_MODULES, build_parser, main
from noisyanchor.common.json_vocabulary import deadline_fields, error_object, problems

LOCAL = Path(deploy.__file__).parent / "templates" / "federation-local.toml"


def _json_commands() -> list[str]:
    """Every (sub)command whose parser takes ``--json``, as ``"participant status"``."""
    def leaves(parser: argparse.ArgumentParser, path: list[str]):
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                   None)
        if sub is None:
            if any("--json" in a.option_strings for a in parser._actions):
                yield " ".join(path)
            return
        for name, child in sub.choices.items():
            yield from leaves(child, [*path, name])

    found = []
    for module in ROLE_MODULES:
        for command in importlib.import_module(module).COMMANDS:
            top = next(a for a in build_parser([command])._actions
                       if isinstance(a, argparse._SubParsersAction))
            found += leaves(top.choices[command], [command])
    return found


#: One refused command line per --json command ({tmp}: a fresh folder holding a file "afile").
REFUSED = {
    "simulate": ["--participants", "3", "--colluder", "5"],
    "experiment sweep": ["--config", "{tmp}/none.toml", "--out", "{tmp}/o"],
    "experiment report": ["--results", "{tmp}/none"],
    "experiment scores": ["--render", "{tmp}/none.json"],
    "experiment laws": ["--out", "{tmp}/afile"],
    "experiment certificate": ["--out", "{tmp}/c", "--size", "1,2,3"],
    "experiment dp-baseline": ["--config", "{tmp}/none.toml", "--results", "{tmp}/none",
                               "--out", "{tmp}/o"],
    "experiment membership": ["--results", "{tmp}/none", "--out", "{tmp}/o"],
    "experiment wider-threats": ["--out", "{tmp}/w", "--v", "x"],
    "analyst status": ["--config", "{tmp}/none.toml"],
    "analyst deadline": ["--config", "{tmp}/none.toml"],
    "attack": ["--store", "{tmp}/none"],
    "participant upload": ["--config", "{tmp}/none.toml"],
    "participant collude": ["--config", "{tmp}/none.toml"],
    "participant status": ["--config", "{tmp}/none.toml"],
    "participant predict": ["--config", "{tmp}/none.toml", "--input", "x.csv", "--out", "p.csv"],
    "participant keygen": ["--id", "a b", "--out", "{tmp}/k"],
    "release scores": ["--config", "{tmp}/none.toml", "--epsilon", "1", "--delta", "1e-6",
                       "--row-index", "0"],
    "release row": ["--config", "{tmp}/none.toml", "--epsilon", "1", "--delta", "1e-6",
                    "--row", "0"],
    "release gram": ["--config", "{tmp}/none.toml", "--epsilon", "1", "--delta", "1e-6",
                     "--out", "{tmp}/g.npy"],
    "release budget": ["--config", "{tmp}/none.toml"],
    "certs": ["--out", "{tmp}/afile", "--participants", "a"],
    "demo": ["--participants", "3", "--colluder", "7", "--workdir", "{tmp}/d"],
    "provision": ["--project", "{tmp}/none.toml"],
    "schema check": ["--schema", "{tmp}/none.toml", "--data", "x.csv"],
    "data split": ["--dataset", "mnist", "--sites", "a,b", "--out", "{tmp}/o"],
}


def _argv(command: str, args: list[str], tmp: Path) -> list[str]:
    return [*command.split(), *(a.replace("{tmp}", str(tmp)) for a in args), "--json"]


def _output(capsys) -> dict:
    out = capsys.readouterr().out
    parsed = json.loads(out)
    assert not problems(parsed), (problems(parsed), out)
    return parsed


def test_every_command_with_json_is_checked_here():
    assert sorted(_json_commands()) == sorted(REFUSED)


@pytest.mark.parametrize("command", sorted(REFUSED))
def test_a_refused_command_prints_the_error_object_and_exits_1(command, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(_argv(command, REFUSED[command], tmp_path)) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1  # the error object alone, on one line
    refusal = json.loads(out)
    assert not problems(refusal), problems(refusal)
    error = refusal["error"]
    assert error["command"] == f"noisyanchor {command}" and error["exit_code"] == 1
    assert f"error: {error['message']}" in err


@pytest.mark.parametrize("command", sorted(REFUSED))
def test_a_usage_error_prints_the_error_object_and_exits_2(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--json", "--bogus"])
    assert exited.value.code == 2
    refusal = json.loads(capsys.readouterr().out)
    assert not problems(refusal) and refusal["error"]["code"] == "USAGE"
    assert refusal["error"]["command"] == f"noisyanchor {command}"


def test_the_vocabulary_refuses_the_names_two_commands_used_to_differ_on():
    when = dt.datetime(2027, 1, 31, 18, tzinfo=dt.UTC)
    assert not problems({"state": "collecting", "withdrawn": {"org-c": "60 columns"}}
                        | deadline_fields(when))
    assert problems({"deadline": "2027-01-31T18:00:00"})  # no offset, and no deadline_unix
    assert problems({"deadline": when.isoformat(), "deadline_unix": when.timestamp() + 60})
    assert problems({"withdrawn": [{"participant_id": "org-c", "reason": "60 columns"}]})
    assert problems({"error": "boom"})  # top-level error: the refusal object only
    assert problems(error_object("noisyanchor x", "no", "USAGE", 1))  # USAGE is exit 2
    assert problems(error_object("noisyanchor x", "no", "NOT_FOUND", 1) | {"state": "done"})
    assert problems({"steps": [{"step": "uploads", "done": ["a"]}]})
    assert problems({"sites": [{"site": "a"}]})


def test_the_operators_commands_speak_the_vocabulary(tmp_path, capsys):
    """provision, data split, schema check, analyst status and deadline, certs, keygen,
    simulate and an experiment, without an analyst running."""
    shutil.copy(LOCAL, tmp_path / "federation.toml")
    assert main(["provision", "--project", str(tmp_path / "federation.toml"), "--json"]) == 0
    provisioned = _output(capsys)
    kits = tmp_path / "kits"
    analyst = str(kits / "analyst" / "analyst.toml")
    runs = [["provision", "--project", str(tmp_path / "federation.toml"), "--expiry"],
            ["data", "split", "--dataset", "digits", "--sites", "org-a,org-b,org-c", "--out",
             str(kits / "{site}" / "data")],
            ["schema", "check", "--schema", str(tmp_path / "federation.toml"), "--data",
             str(kits / "org-a" / "data" / "org-a.csv")],
            ["analyst", "status", "--config", analyst],
            ["analyst", "deadline", "--config", analyst],
            ["certs", "--out", str(tmp_path / "pki"), "--participants", "a", "b"],
            ["participant", "keygen", "--id", "org-d", "--out", str(tmp_path / "org-d")],
            ["simulate", "--dataset", "synthetic", "--participants", "2", "--no-utility",
             "--seed", "0"],
            ["experiment", "certificate", "--out", str(tmp_path / "cert"), "--size", "2,4,8",
             "--ratios", "0.5", "--reps", "1", "--no-progress"]]
    outputs = {}
    for argv in runs:
        assert main([*argv, "--json"]) == 0, argv
        outputs[" ".join(argv[:2])] = _output(capsys)
    status = outputs["analyst status"]
    assert status["state"] == "collecting" and status["withdrawn"] == {}
    assert [s["step"] for s in status["steps"]] == ["exchange keys", "commitments", "uploads"]
    assert status["deadline"] == provisioned["deadline"] == outputs["analyst deadline"][
        "deadline"]
    assert list(outputs["data split"]["sites"]) == ["org-a", "org-b", "org-c"]
    assert main(["analyst", "deadline", "--config", analyst, "--extend", "in 9 days",
                 "--json"]) == 0
    moved = _output(capsys)
    assert moved["before"] == provisioned["deadline"] != moved["deadline"]


def _run(args: list, log: Path, timeout: float = 120) -> dict:
    """``noisyanchor ARGS --json`` in its own process: its JSON output, checked."""
    done = subprocess.run([sys.executable, "-m", "noisyanchor", *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=timeout)
    log.write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout)
    assert not problems(parsed), (problems(parsed), done.stdout)
    return parsed


def _start(args: list, folder: Path, name: str) -> subprocess.Popen:
    """``noisyanchor ARGS --json`` started: JSON to ``name.json``, log to ``name.log``."""
    from noisyanchor.deploy.launch import child_env

    with open(folder / f"{name}.json", "wb") as out, open(folder / f"{name}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "noisyanchor", *map(str, args),
                                 "--json"], stdout=out, stderr=log, env=child_env())


def _finished(proc: subprocess.Popen, folder: Path, name: str, code: int = 0) -> dict:
    assert proc.wait(300) == code, (folder / f"{name}.log").read_text()[-2000:]
    parsed = json.loads((folder / f"{name}.json").read_text())
    assert not problems(parsed), (problems(parsed), parsed)
    return parsed


@pytest.mark.e2e
@pytest.mark.slow
def test_a_federation_closed_at_its_deadline_reopens_when_extended_without_a_restart(tmp_path):
    """The analyst runs past its deadline: an upload is refused (the error object). The
    operator extends the deadline with the CLI; with no restart, `analyst status --json` and a
    site's `participant status --json` both show the new one, every site's upload is taken,
    and status, predict and the refusals speak the vocabulary."""
    from noisyanchor.deploy.demo import wait_for_result
    from noisyanchor.deploy.launch import start, stop
    from noisyanchor.deploy.pilot import SITES, write_site_data

    project = tmp_path / "federation.toml"
    project.write_text(LOCAL.read_text().replace('"in 7 days"', '"in 20 seconds"'))
    assert main(["provision", "--project", str(project), "--json"]) == 0
    kits, logs = tmp_path / "kits", tmp_path / "logs"
    logs.mkdir()
    write_site_data(kits)
    config = kits / "analyst" / "analyst.toml"
    site = {s: kits / s / f"{s}.toml" for s in SITES}
    first = _run(["analyst", "deadline", "--config", config], logs / "deadline.log")
    analyst = start(["analyst", "serve", "--config", config], logs / "analyst.log")
    try:
        time.sleep(max(0.0, first["deadline_unix"] - time.time()) + 1)  # closed now
        refused = _start(["participant", "upload", "--config", site["org-a"]], logs, "late")
        told = _finished(refused, logs, "late", code=1)["error"]
        assert "closed at its deadline" in told["message"], told
        moved = _run(["analyst", "deadline", "--config", config, "--extend", "in 1 day"],
                     logs / "extend.log")
        assert moved["before"] == first["deadline"]
        operator = _run(["analyst", "status", "--config", config], logs / "status.log")
        assert operator["analyst"] == "running (health SERVING)"
        assert operator["pending_deadline"] is None  # nothing waits for a restart
        seen = _run(["participant", "status", "--config", site["org-b"]], logs / "site.log")
        for view in (operator, seen):  # the same names, the same new deadline, both sides
            assert (view["deadline"], view["deadline_unix"]) == (moved["deadline"],
                                                                 moved["deadline_unix"])
            assert view["state"] == "collecting" and view["withdrawn"] == {}
            assert view["steps"] == operator["steps"]
        uploads = {s: _start(["participant", "upload", "--config", site[s]], logs, s)
                   for s in SITES}
        for s, proc in uploads.items():  # the same analyst process takes them
            assert _finished(proc, logs, s)["participant"] == s
        assert analyst.poll() is None
        wait_for_result(kits / "analyst" / "store", analyst, 120, logs / "analyst.log")
        done = _run(["analyst", "status", "--config", config], logs / "done.log")
        own = _run(["participant", "status", "--config", site["org-a"]], logs / "own.log")
        assert done["state"] == own["state"] == "done" and own["waiting_for"] is None
        assert done["result"]["model"]["n_test"] > 0 and "gain" in own["gain"]
        data = kits / "org-a" / "data"
        predicted = _run(["participant", "predict", "--config", site["org-a"], "--input",
                          data / "org-a.csv", "--out", tmp_path / "p.csv"], logs / "p.log")
        assert predicted["participant"] == "org-a" and predicted["records"] > 0
    finally:
        stop(analyst)
