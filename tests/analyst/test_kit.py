"""The analyst's kit on disk as an operator asks it (analyst/kit.py): progress from the store
with the analyst stopped, and a later deadline that is refused once the federation is done."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from noisyanchor import deploy
from noisyanchor.analyst import kit as kit_module
from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.analyst.kit import extend_deadline, store_progress, wait_for_outcome
from noisyanchor.analyst.storage import LOCK_FILE, serving_pid
from noisyanchor.cli import main
from noisyanchor.common.errors import AnalystUnavailableError, InvalidInputError, PreconditionError
from noisyanchor.common.progress import Pending
from noisyanchor.deploy.provision import provision

LOCAL = Path(deploy.__file__).parent / "templates" / "federation-local.toml"


@pytest.fixture
def kit(tmp_path) -> Path:
    shutil.copy(LOCAL, tmp_path / "federation.toml")
    return provision(tmp_path / "federation.toml").out / "analyst" / "analyst.toml"


def _touch(store: Path, *names: str) -> None:
    for name in names:
        (store / name).parent.mkdir(parents=True, exist_ok=True)
        (store / name).write_bytes(b"x")


def _result(store: Path) -> None:
    (store / "result").mkdir(parents=True, exist_ok=True)
    (store / "result" / "result.json").write_text(json.dumps({"model": None}))


def test_progress_is_read_from_the_store_step_by_step(kit):
    cfg = load_analyst_config(kit)
    store = cfg.output_dir
    assert store_progress(cfg).pending() == Pending(cfg.participants,
                                                    "publish their exchange keys")
    _touch(store, "relay/keys/org-a.pb", "relay/keys/org-c.pb")
    assert store_progress(cfg).pending() == Pending(("org-b",), "publish their exchange keys")
    _touch(store, "relay/keys/org-b.pb", "relay/commitments/org-a.bin",
           "relay/commitments/org-b.bin")
    assert store_progress(cfg).pending() == Pending(("org-c",), "commit to the anchor")
    _touch(store, "relay/commitments/org-c.bin", "uploads/org-b.bundle")
    progress = store_progress(cfg)
    assert progress.pending() == Pending(("org-a", "org-c"), "upload")
    assert progress.committed == ("org-b",) and progress.deadline == cfg.deadline
    _touch(store, "uploads/org-a.bundle", "uploads/org-c.bundle")
    assert store_progress(cfg).state == "aligning"
    (store / "failed.json").write_text(json.dumps({"state": "failed", "error": "boom"}))
    assert (store_progress(cfg).state, store_progress(cfg).error) == ("failed", "boom")
    (store / "result").mkdir()
    (store / "result" / "result.json").write_text(json.dumps({"model": None}))
    assert store_progress(cfg).state == "done" and store_progress(cfg).result == {"model": None}


def test_a_withdrawal_in_the_store_is_shown_with_its_reason(kit, capsys):
    cfg = load_analyst_config(kit)
    (cfg.output_dir / "withdrawn").mkdir(parents=True)
    (cfg.output_dir / "withdrawn" / "org-c.txt").write_text("60 columns, not 64")
    assert main(["analyst", "status", "--config", str(kit)]) == 0
    out = capsys.readouterr().out
    assert "  org-c withdrew: 60 columns, not 64" in out and "waiting for" not in out
    assert "analyst not running (nothing answers on its health port" in out


def test_the_deadline_moves_later_keeping_the_rest_of_the_config(kit):
    before = load_analyst_config(kit)
    kit.write_text(kit.read_text().replace("[federation]\n", "[federation]  # ours\n"))
    kit.chmod(0o644)
    text = kit.read_text()
    moved = extend_deadline(kit, "in 10 days")
    after = load_analyst_config(kit)
    assert (moved.before, moved.after) == (before.deadline, after.deadline)
    assert dt.timedelta(days=9, hours=23) < after.deadline - dt.datetime.now(dt.UTC) <= \
        dt.timedelta(days=10, seconds=1)  # to the next whole second
    changed = [(a, b) for a, b in zip(text.splitlines(), kit.read_text().splitlines(),
                                      strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1] == f"deadline = {after.deadline.isoformat()}"
    assert stat.S_IMODE(kit.stat().st_mode) == 0o644  # still readable by a container's user
    assert after == before.with_overrides(deadline=after.deadline)
    fixed = (dt.datetime.now(dt.UTC) + dt.timedelta(days=300)).replace(microsecond=0)
    assert extend_deadline(kit, fixed.isoformat()).after == fixed
    assert load_analyst_config(kit).deadline == fixed


@pytest.mark.parametrize("when, match", [
    ("in 1 hour", "not after the current one"),
    ("2020-01-01T00:00:00Z", "is not in the future"),
    ("tomorrow", "not a deadline"),
    ("9999-12-31T00:00:00Z", "more than 731 days away"),
    ("in 99999999999 days", "longer than 731 days"),
])
def test_a_deadline_that_is_not_later_is_refused_changing_nothing(kit, when, match):
    text = kit.read_text()
    with pytest.raises(InvalidInputError, match=match):
        extend_deadline(kit, when)
    assert kit.read_text() == text


def test_a_config_without_a_deadline_gets_one(kit):
    kit.write_text("".join(ln for ln in kit.read_text().splitlines(keepends=True)
                           if not ln.startswith("deadline")))
    assert load_analyst_config(kit).deadline is None
    assert extend_deadline(kit, "in 2 days").before is None
    assert load_analyst_config(kit).deadline is not None


def test_extending_a_done_federation_is_refused(kit, capsys):
    cfg = load_analyst_config(kit)
    (cfg.output_dir / "result").mkdir(parents=True)
    (cfg.output_dir / "result" / "result.json").write_text("{}")
    text = kit.read_text()
    with pytest.raises(PreconditionError, match=r"is done .*a new pilot needs a new federation"):
        extend_deadline(kit, "in 3 days")
    assert main(["analyst", "deadline", "--config", str(kit), "--extend", "in 3 days"]) == 1
    assert "is done" in capsys.readouterr().err
    assert kit.read_text() == text


def test_the_deadline_command_shows_and_moves_it(kit, capsys):
    assert main(["analyst", "deadline", "--config", str(kit)]) == 0
    assert capsys.readouterr().out.startswith("federation local-pilot: deadline 20")
    assert main(["analyst", "deadline", "--config", str(kit), "--extend", "in 8 days"]) == 0
    out = capsys.readouterr().out
    assert "(in 8 days)" in out and "applies it at once, without a restart" in out
    assert main(["analyst", "deadline", "--config", str(kit), "--extend", "in 9 days",
                 "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert dt.datetime.fromisoformat(moved["deadline"]) == load_analyst_config(kit).deadline


def test_waiting_for_the_outcome_ends_when_done_or_a_site_withdraws_or_at_the_bound(kit):
    cfg = load_analyst_config(kit)
    store = cfg.output_dir
    started = time.monotonic()
    assert wait_for_outcome(cfg, timeout=0.6).state == "collecting"
    assert 0.5 < time.monotonic() - started < 60  # the bound was kept (generous: shared cores)
    done = threading.Timer(0.4, lambda: _result(store))
    done.start()
    try:
        assert wait_for_outcome(cfg, timeout=30).state == "done"
    finally:
        done.cancel()
    (store / "result" / "result.json").unlink()
    _touch(store, "withdrawn/org-b.txt")
    assert wait_for_outcome(cfg, timeout=30).withdrawn == {"org-b": "x"}


def test_status_wait_exits_0_only_once_done(kit, capsys):
    assert main(["analyst", "status", "--config", str(kit), "--wait", "--timeout", "0.2"]) == 1
    assert "waiting for org-a, org-b, org-c" in capsys.readouterr().out
    _result(load_analyst_config(kit).output_dir)
    assert main(["analyst", "status", "--config", str(kit), "--wait"]) == 0
    assert main(["analyst", "status", "--config", str(kit), "--timeout", "1"]) == 1
    assert "--timeout is a bound of --wait" in capsys.readouterr().err


def test_waiting_ends_with_the_reason_when_no_analyst_serves_the_store(kit, monkeypatch, capsys):
    cfg = load_analyst_config(kit)
    monkeypatch.setattr(kit_module, "NO_ANALYST_WAIT", 0.3)
    with pytest.raises(AnalystUnavailableError, match="no analyst serves the store"):
        wait_for_outcome(cfg, timeout=30)
    assert main(["analyst", "status", "--config", str(kit), "--wait", "--timeout", "30"]) == 1
    assert "analyst serve --config" in capsys.readouterr().err
    # A live process holding the lock (this one stands in for the analyst) is waited for.
    (cfg.output_dir / LOCK_FILE).write_text(f"{os.getpid()}\n")
    assert wait_for_outcome(cfg, timeout=0.8).state == "collecting"
    # A dead one is not.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (cfg.output_dir / LOCK_FILE).write_text(f"{dead.pid}\n")
    assert serving_pid(cfg.output_dir) is None


def test_an_extension_reaches_the_store_of_a_running_analyst_and_status_shows_it(kit):
    """With a store (an analyst ran or runs), the new deadline is written there too: the
    running analyst reads it (analyst.live_deadline) and status shows the one it enforces; a
    broken deadline file is named."""
    from noisyanchor.analyst.live_deadline import DEADLINE_FILE, stored_deadline
    from noisyanchor.common.errors import ConfigError

    cfg = load_analyst_config(kit)
    assert cfg.output_dir.is_dir()  # provisioned with the kit
    moved = extend_deadline(kit, "in 9 days")
    assert stored_deadline(cfg.output_dir) == moved.after == store_progress(cfg).deadline
    # a config moved back by hand does not shorten what the running analyst enforces
    kit.write_text(kit.read_text().replace(moved.after.isoformat(), moved.before.isoformat()))
    assert store_progress(load_analyst_config(kit)).deadline == moved.after
    (cfg.output_dir / DEADLINE_FILE).write_text('{"deadline": "friday"}')
    with pytest.raises(ConfigError, match=f"{DEADLINE_FILE}: key 'deadline'"):
        store_progress(cfg)


def test_a_config_edited_by_hand_while_the_analyst_runs_is_shown_as_pending(kit, capsys):
    """The analyst started with one deadline (its federation.json); the config was edited by
    hand since: status shows the deadline in force and the pending one, until an extension
    applies at once."""
    cfg = load_analyst_config(kit)
    (cfg.output_dir / "federation.json").write_text(json.dumps(
        {"federation_id": cfg.federation_id, "deadline": cfg.deadline.isoformat()}))
    later = (cfg.deadline + dt.timedelta(days=2)).isoformat()
    kit.write_text(kit.read_text().replace(cfg.deadline.isoformat(), later))
    progress = store_progress(load_analyst_config(kit))
    assert progress.deadline == cfg.deadline
    assert progress.pending_deadline.isoformat() == later
    assert "from the analyst's next start" in progress.lines()[0]
    assert main(["analyst", "status", "--config", str(kit), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["deadline"], shown["pending_deadline"]) == (cfg.deadline.isoformat(), later)
    moved = extend_deadline(kit, "in 10 days")
    assert moved.before == cfg.deadline  # the one in force, not the hand-edited one
    progress = store_progress(load_analyst_config(kit))
    assert (progress.deadline, progress.pending_deadline) == (moved.after, None)
