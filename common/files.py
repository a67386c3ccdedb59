"""Atomic, durable file writes shared by the analyst's store and the participant's state.

Bytes go to a temporary file (mode 0600, from ``tempfile.mkstemp``) in the destination folder,
are fsynced, renamed over the final name with ``os.replace``, and the folder is fsynced: a crash
leaves either the old file or the new one, never a partial file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Prefix of temporary files and folders (stale ones are swept by their owners at start-up).
TMP_PREFIX = ".tmp-"


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename is durable only once its folder is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably; the file is readable by its owner
    only (mode 0600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
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
