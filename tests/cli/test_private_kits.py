"""Kits and state private as ssh treats keys (issue 30, item 5), command by command: every command
that reads a private key refuses one others can read (not repaired: its owner decides), and every
command that reads a site's state folder or the analyst's store narrows one others could read or
write, with a warning, and refuses one holding a symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from noisyanchor import deploy
from noisyanchor.cli import main
from noisyanchor.deploy.provision import provision

TEMPLATE = Path(deploy.__file__).parent / "templates" / "federation-local.toml"


@pytest.fixture(scope="module")
def kits(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kits")
    (root / "federation.toml").write_text(TEMPLATE.read_text())
    done = provision(root / "federation.toml", root / "kits")
    site = done.kits["org-a"] / "org-a.toml"
    # No analyst runs here: a command that gets past its kit gives up at once.
    site.write_text(site.read_text().replace("[participant]\n", "[participant]\ntimeout = 0.2\n",
                                             1))
    return done.out


def _site(kits: Path) -> str:
    return str(kits / "org-a" / "org-a.toml")


def _analyst(kits: Path) -> str:
    return str(kits / "analyst" / "analyst.toml")


#: Every command that reads a site's kit (its TLS key, its state), with its arguments.
SITE_COMMANDS = [
    ["participant", "upload"], ["participant", "collude"], ["participant", "status"],
    ["participant", "predict", "--input", "new.csv", "--out", "p.csv"],
    ["release", "scores", "--epsilon", "1", "--delta", "1e-6", "--row-index", "0"],
    ["release", "row", "--epsilon", "1", "--delta", "1e-6", "--row", "0"],
    ["release", "gram", "--epsilon", "1", "--delta", "1e-6", "--out", "g.npy"],
    ["release", "budget"],
]
#: Every command that reads the analyst's kit.
ANALYST_COMMANDS = [["analyst", "serve"], ["analyst", "status"], ["analyst", "deadline"]]


def _argv(kits: Path, command: list[str]) -> list[str]:
    config = _analyst(kits) if command[0] == "analyst" else _site(kits)
    return [*command[:2], "--config", config, *command[2:]]


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("command", SITE_COMMANDS + ANALYST_COMMANDS,
                         ids=lambda c: " ".join(c[:2]))
def test_every_command_refuses_a_private_key_others_can_read(kits, command, capsys):
    key = (kits / "analyst" / "pki" / "analyst.key" if command[0] == "analyst"
           else kits / "org-a" / "pki" / "org-a.key")
    key.chmod(0o644)
    try:
        assert main(_argv(kits, command)) == 1
        err = capsys.readouterr().err
        assert f"{key}: [tls] key (a TLS private key) readable by others (mode 0644)" in err
        assert "chmod 600" in err
        assert _mode(key) == 0o644  # refused, not repaired
    finally:
        key.chmod(0o600)


@pytest.mark.parametrize("command", SITE_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_site_command_narrows_a_state_folder_open_to_others(kits, command, caplog):
    state = kits / "org-a" / "state"
    state.mkdir(exist_ok=True)
    (state / "gain.json").write_text("{}")
    state.chmod(0o777)
    (state / "gain.json").chmod(0o666)
    with caplog.at_level("WARNING", logger="noisyanchor.common.files"):
        main(_argv(kits, command))  # fails later (no analyst, no data): the kit came first
    assert (_mode(state), _mode(state / "gain.json")) == (0o700, 0o600)
    assert "mode 0777): narrowed to 0700" in caplog.text
    assert "mode 0666): narrowed to 0600" in caplog.text


@pytest.mark.parametrize("command", SITE_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_site_command_refuses_a_state_folder_holding_a_symlink(kits, command, capsys):
    state = kits / "org-a" / "state"
    state.mkdir(exist_ok=True)
    link = state / "site-model.bin"
    link.symlink_to(kits / "org-a" / "pki" / "org-a.key")
    try:
        assert main(_argv(kits, command)) == 1
        assert f"symlink(s) ({link})" in capsys.readouterr().err
    finally:
        link.unlink()


@pytest.mark.parametrize("command", [["analyst", "status"],
                                     ["analyst", "deadline", "--extend", "in 9 days"],
                                     ["attack"]], ids=lambda c: " ".join(c[:2]))
def test_every_command_reading_the_store_narrows_it_and_refuses_a_symlink(kits, command,
                                                                          caplog, capsys):
    store = kits / "analyst" / "store"
    argv = (["attack", "--store", str(store), "--alone"] if command == ["attack"]
            else _argv(kits, command))
    (store / "uploads").mkdir(exist_ok=True)
    store.chmod(0o777)
    (store / "uploads").chmod(0o755)
    with caplog.at_level("WARNING", logger="noisyanchor.common.files"):
        main(argv)
    assert (_mode(store), _mode(store / "uploads")) == (0o700, 0o700)
    assert "narrowed to 0700" in caplog.text
    link = store / "uploads" / "org-b.bundle"
    link.symlink_to(kits / "analyst" / "pki" / "analyst.key")
    try:
        capsys.readouterr()
        assert main(argv) == 1
        assert f"symlink(s) ({link})" in capsys.readouterr().err
    finally:
        link.unlink()


def test_serve_refuses_a_store_holding_a_symlink_before_it_listens(kits, caplog):
    store = kits / "analyst" / "store"
    store.mkdir(exist_ok=True)
    link = store / "federation.json"
    link.symlink_to(kits / "analyst" / "pki" / "analyst.key")
    try:
        assert main(_argv(kits, ["analyst", "serve"])) == 1
        assert f"not serving: {store} holds 1 symlink(s) ({link})" in caplog.text
    finally:
        link.unlink()
