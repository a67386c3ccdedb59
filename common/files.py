"""Atomic, durable file writes shared by the analyst's store and the participant's state.

Bytes go to a temporary file (mode 0600, from ``tempfile.mkstemp``) in the destination folder,
are fsynced, renamed over the final name with ``os.replace``, and the folder is fsynced: a crash
leaves either the old file or the new one, never a partial file.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from noisyanchor.common.errors import InvalidInputError

log = logging.getLogger(__name__)

#: Prefix of temporary files and folders (stale ones are swept by their owners at start-up).
TMP_PREFIX = ".tmp-"


def fsync_path(path: Path) -> None:
    """Flush a file's bytes, or a folder's entries (a rename is durable only once its folder
    is synced), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The name the folder callers use: a folder's entries are flushed the same way.
fsync_dir = fsync_path


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably; the file is readable by its owner
    only (mode 0600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=stale_prefix(path), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def private_dir(path: Path) -> Path:
    """Create folder ``path`` (and its parents) readable by its owner only (mode 0700), or
    narrow an existing one to 0700: it holds secrets (a site's key) or private results."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def check_private_key(path: Path, what: str = "private key") -> Path:
    """``path`` if no one but its owner can read it; refused otherwise, as ssh refuses an
    unprotected key: a key others could read may have been copied, which only its owner can
    judge (chmod, or a new key and certificate), so it is not quietly repaired. Raises
    InvalidInputError naming the file, its mode and the fix."""
    path = Path(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise InvalidInputError(
            f"{path}: {what} readable by others (mode {mode:04o}); refused, as ssh refuses an "
            f"unprotected key: run `chmod 600 {path}` (and have a new key issued if someone "
            "else may have read it)")
    return path


def narrow_private(folder: Path) -> None:
    """Narrow a private folder (0700) and the files directly in it (0600 at most) that others
    could read or write, with a warning for each: the project wrote them private, so a wider
    mode is a mistake (a copy, an archive restored, a umask) and is repaired rather than refused,
    which would leave the site unable to predict. Symlinks are left alone (never followed)."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return
    for path in (folder, *folder.iterdir()):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode) or not (stat.S_ISDIR(info.st_mode)
                                              or stat.S_ISREG(info.st_mode)):
            continue
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            narrowed = 0o700 if stat.S_ISDIR(info.st_mode) else mode & 0o600
            path.chmod(narrowed)
            log.warning("%s was open to others (mode %04o): narrowed to %04o; check who could "
                        "read it while it was", path, mode, narrowed)


def stale_prefix(path: Path) -> str:
    """Prefix of the temporary names :func:`atomic_write` uses for ``path``
    (``.tmp-<name>.``), so the leftovers of one file can be found in a shared folder."""
    return f"{TMP_PREFIX}{Path(path).name}."


def _remove(path: Path) -> None:
    """Remove one leftover of any kind: a folder tree, or a file, symlink, FIFO or socket (a
    symlink is removed itself, never followed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def sweep_temporaries(root: Path) -> list[Path]:
    """Remove every temporary file or folder (name starting with :data:`TMP_PREFIX`) anywhere
    under ``root``, whatever its kind, as a crash may leave them; returns what was removed.

    Only temporary names are touched: committed files, and everything inside folders that are
    not temporary, stay. Symlinked folders are not followed.
    """
    removed: list[Path] = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            if name.startswith(TMP_PREFIX):
                _remove(Path(folder) / name)
                removed.append(Path(folder) / name)
        dirs[:] = [d for d in dirs if not d.startswith(TMP_PREFIX)]
    if removed:
        log.info("removed %d temporary file(s) or folder(s) left by a crash under %s",
                 len(removed), root)
    return removed


def sweep_stale_writes(path: Path) -> list[Path]:
    """Remove the leftovers of interrupted :func:`atomic_write` calls for ``path`` (and only
    those: the folder may be shared); returns what was removed."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    removed = sorted(path.parent.glob(glob.escape(stale_prefix(path)) + "*"))
    for stale in removed:
        _remove(stale)
    return removed
