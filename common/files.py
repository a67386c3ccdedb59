"""Atomic, durable file writes shared by the analyst's store and the participant's state, and
the one way their files are read.

Bytes go to a temporary file (mode 0600, from ``tempfile.mkstemp``) in the destination folder,
are fsynced, renamed over the final name with ``os.replace``, and the folder is fsynced: a crash
leaves either the old file or the new one, never a partial file.

Every file of the store or of a site's state folder is read through :func:`open_under` (or
:func:`read_under`): opened component by component from the folder's root with ``O_NOFOLLOW``,
so a symlink anywhere below the root, a path leaving it, or anything but a regular file (a FIFO,
a device) is refused, and nothing outside the folder is ever read or served through it.
:func:`refuse_links` checks a whole folder at start.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from noisyanchor.common.errors import IntegrityError, InvalidInputError

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


def narrow_private(folder: Path, *, recursive: bool = False) -> None:
    """Narrow a private folder (0700) and the files directly in it (every file and folder
    below it with ``recursive``) that others could read or write (0600 at most), with a warning
    for each: the project wrote them private, so a wider mode is a mistake (a copy, an archive
    restored, a umask) and is repaired rather than refused, which would leave the site unable
    to predict or the analyst unable to serve. Symlinks are left alone (never followed; the
    readers refuse them)."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return
    below = ([Path(at) / name for at, dirs, files in os.walk(folder) for name in (*dirs, *files)]
             if recursive else list(folder.iterdir()))
    for path in (folder, *below):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode) or not (stat.S_ISDIR(info.st_mode)
                                              or stat.S_ISREG(info.st_mode)):
            continue
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            narrowed = 0o700 if stat.S_ISDIR(info.st_mode) else mode & 0o600
            if info.st_uid != os.geteuid() and os.geteuid() != 0:
                # Another user's (a reader in the owner's group): only its owner can narrow it.
                log.warning("%s is open to others (mode %04o) and not this user's to narrow: "
                            "its owner should run `chmod %04o %s`", path, mode, narrowed, path)
                continue
            path.chmod(narrowed)
            log.warning("%s was open to others (mode %04o): narrowed to %04o; check who could "
                        "read it while it was", path, mode, narrowed)


def _refused(path: Path, root: Path, what: str) -> IntegrityError:
    return IntegrityError(f"{path}: {what}; refused: nothing under {root} is read through a "
                          "symlink or from outside it (remove the link and restore the file)")


def open_under(root: Path, path: Path) -> BinaryIO:
    """File ``path`` inside folder ``root`` opened for reading, following no symlink below
    ``root``: each folder on the way is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the
    last, the file with ``O_NOFOLLOW``, and it must be a regular file. (``root`` itself is the
    operator's choice and may be a link.)

    Raises
    ------
    IntegrityError
        ``path`` leaves ``root`` (``..``, another folder), passes a symlink, or is not a regular
        file; the message names the path.
    FileNotFoundError
        It does not exist (callers say what is missing).
    """
    root, path = Path(root), Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise _refused(path, root, "not inside the folder") from None
    if not parts or any(part in (".", "..") for part in parts):
        raise _refused(path, root, "not a file inside the folder")
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        # O_NONBLOCK: a FIFO planted under the name must not block the open.
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refused(path, root, "a symlink (or a file where a folder belongs) on the "
                           "way") from None
        raise
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refused(path, root, "not a regular file")
    return os.fdopen(fd, "rb")


def read_under(root: Path, path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path`` inside ``root`` (:func:`open_under`), refused (InvalidInputError
    naming the file and the limit) when it holds more than ``limit`` bytes."""
    with open_under(root, path) as fh:
        raw = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise InvalidInputError(f"{path} holds more than {limit} bytes, more than such a file "
                                "ever holds; not read")
    return raw


def refuse_links(root: Path) -> None:
    """Refuse (IntegrityError naming the first few) any symlink anywhere under folder ``root``:
    the store and the state folder hold none, so one was planted or restored from elsewhere,
    and any write through it would land outside the folder. Temporary names
    (:data:`TMP_PREFIX`) are never read and are swept, whatever their kind, by
    :func:`sweep_temporaries`: they are left to it."""
    links = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(TMP_PREFIX)]
        links += [Path(folder) / name for name in (*dirs, *files)
                  if not name.startswith(TMP_PREFIX) and os.path.islink(Path(folder) / name)]
    if links:
        raise IntegrityError(
            f"{root} holds {len(links)} symlink(s) ({', '.join(map(str, links[:3]))}); refused: "
            "nothing under it is read or written through a link (remove them and restore the "
            "files they stood for)")


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
