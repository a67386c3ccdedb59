"""Keys and state are private, as ssh treats its keys (issue 30, item 5): a private key others
can read is refused by every command that loads it, a state folder or file others can read is
narrowed with a warning (common.files)."""

import logging
import os
import stat

import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import check_private_key, narrow_private
from noisyanchor.common.tomlconfig import Table, TlsFiles


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_key_others_can_read_is_refused_naming_the_file_mode_and_fix(tmp_path):
    key = tmp_path / "site.key"
    key.write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o600)
    assert check_private_key(key) == key
    for mode in (0o644, 0o640, 0o604):
        key.chmod(mode)
        with pytest.raises(InvalidInputError, match=rf"mode {mode:04o}\); refused.*chmod 600"):
            check_private_key(key)
    assert _mode(key) == 0o604  # not repaired: its owner decides


def test_every_config_with_a_tls_table_refuses_an_unprotected_key(tmp_path):
    for name in ("ca.pem", "site.pem", "site.key"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "site.key").chmod(0o644)
    doc = {"tls": {"ca": "ca.pem", "cert": "site.pem", "key": "site.key"}}
    with pytest.raises(InvalidInputError, match=r"\[tls\] key \(a TLS private key\)"):
        TlsFiles.read(Table(doc, "tls", tmp_path / "site.toml"))


def test_a_state_folder_open_to_others_is_narrowed_with_a_warning(tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    (state / "site-key.bin").write_bytes(b"k")
    (state / "gain.json").write_bytes(b"{}")
    (tmp_path / "elsewhere").write_bytes(b"e")
    (tmp_path / "elsewhere").chmod(0o644)
    (state / "link").symlink_to(tmp_path / "elsewhere")
    state.chmod(0o777)
    (state / "site-key.bin").chmod(0o644)
    (state / "gain.json").chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="noisyanchor.common.files"):
        narrow_private(state)
    assert _mode(state) == 0o700 and _mode(state / "site-key.bin") == 0o600
    assert _mode(state / "gain.json") == 0o600
    assert _mode(tmp_path / "elsewhere") == 0o644  # a symlink is never followed
    assert len(caplog.records) == 2 and "mode 0644): narrowed to 0600" in caplog.text
    narrow_private(tmp_path / "missing")  # nothing to do
