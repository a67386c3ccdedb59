"""Files of the store and the state folder are read under their root: no symlink followed,
no path leaving it, regular files only (common.files.open_under, read_under, refuse_links)."""

from __future__ import annotations

import os

import pytest

from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.files import open_under, read_under, refuse_links


@pytest.fixture
def root(tmp_path):
    (tmp_path / "root" / "uploads").mkdir(parents=True)
    (tmp_path / "root" / "uploads" / "p0.bundle").write_bytes(b"inside")
    (tmp_path / "secret").write_bytes(b"outside")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "p1.bundle").write_bytes(b"outside")
    return tmp_path / "root"


def test_a_file_inside_is_read(root):
    with open_under(root, root / "uploads" / "p0.bundle") as fh:
        assert fh.read() == b"inside"
    assert read_under(root, root / "uploads" / "p0.bundle", 6) == b"inside"
    with pytest.raises(InvalidInputError, match="more than 5 bytes"):
        read_under(root, root / "uploads" / "p0.bundle", 5)
    with pytest.raises(FileNotFoundError):
        read_under(root, root / "uploads" / "p9.bundle")


def test_a_symlinked_file_or_folder_inside_the_root_is_refused(root):
    (root / "uploads" / "p1.bundle").symlink_to(root.parent / "secret")
    (root / "result").symlink_to(root.parent / "elsewhere", target_is_directory=True)
    for path in (root / "uploads" / "p1.bundle", root / "result" / "p1.bundle"):
        with pytest.raises(IntegrityError, match="symlink") as refused:
            read_under(root, path)
        assert str(path) in str(refused.value)
    with pytest.raises(IntegrityError, match=r"2 symlink\(s\)"):
        refuse_links(root)


@pytest.mark.parametrize("path", ["../secret", "uploads/../../secret", "/etc/passwd", "."])
def test_a_path_leaving_the_root_is_refused(root, path):
    with pytest.raises(IntegrityError, match="refused"):
        read_under(root, root / path if not path.startswith("/") else path)


def test_a_fifo_or_a_folder_is_not_a_regular_file_and_does_not_block(root):
    os.mkfifo(root / "uploads" / "p2.bundle")
    with pytest.raises(IntegrityError, match="not a regular file"):
        read_under(root, root / "uploads" / "p2.bundle")
    with pytest.raises(IntegrityError, match="not a regular file"):
        read_under(root, root / "uploads")


def test_the_root_itself_may_be_a_link_the_operator_chose(root, tmp_path):
    (tmp_path / "link").symlink_to(root, target_is_directory=True)
    assert read_under(tmp_path / "link", tmp_path / "link" / "uploads" / "p0.bundle") == b"inside"
    refuse_links(tmp_path / "link")  # what is below it holds no link


def test_a_temporary_left_by_a_crash_is_left_to_the_sweep_whatever_its_kind(root):
    from noisyanchor.common.files import TMP_PREFIX, sweep_temporaries

    (root / f"{TMP_PREFIX}link").symlink_to(root.parent / "secret")
    refuse_links(root)  # never read; swept at start
    assert sweep_temporaries(root) == [root / f"{TMP_PREFIX}link"]
    assert (root.parent / "secret").read_bytes() == b"outside"
