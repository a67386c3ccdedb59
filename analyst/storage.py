"""The analyst's store on disk: committed array bundles, relay objects and the result.

Every write is atomic (:mod:`common.files`): bytes go to a temporary file in the destination
folder, are fsynced, renamed over the final name with ``os.replace``, and the folder is fsynced.
A crash leaves either the old state or the new one, never a partial file; stale temporary files
are swept at start-up.

A bundle file holds ``MAGIC``, an 8-byte little-endian header length, the serialized
``BundleHeader`` and the arrays' raw bytes in header order, so arrays are read back with
``numpy.memmap`` at known offsets (no pickle, no whole-file copy).

Layout of a store::

    uploads/<participant>.bundle      one per participant (Y_i, B_i, labels, tags)
    disclosures/<participant>.bundle  colluder disclosures (threat-model testing)
    relay/keys/<participant>.pb       signed X25519 public keys
    relay/sealed/<recipient>.pb       the dealer's sealed share for each recipient
    relay/commitments/<participant>.bin
    result/                           Z, labels, tags, rotations, result.json
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import tempfile
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.files import TMP_PREFIX, fsync_dir, sweep_temporaries
from noisyanchor.common.wire import ArraySpec, BundleDigester, BundleSpec, wire_dtype
from noisyanchor.protos.v1 import analyst_pb2 as pb

#: First bytes of every bundle file (format version 1).
MAGIC = b"NABUNDL1"

#: Public description of the federation (config without TLS paths), written at start-up.
FEDERATION_FILE = "federation.json"

#: Chunks queued for the disk-writer thread at most (bounds memory to a few MiB).
_WRITE_AHEAD = 8


def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` in ``.npy`` format (no pickle)."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _data_offset(header_bytes: bytes) -> int:
    return len(MAGIC) + 8 + len(header_bytes)


def receive_bundle(
    path: Path, spec: BundleSpec, chunks: Iterable[bytes],
    check: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> None:
    """Stream a bundle to a temporary file, verify it, then commit it at ``path``.

    Parameters
    ----------
    path : Path
        Final name; must not exist yet (the caller holds the participant's lock).
    spec : BundleSpec
        The validated header.
    chunks : iterable of bytes
        The stream's chunk payloads in order.
    check : callable, optional
        Content check on the received arrays (memory-mapped) before the commit.

    Raises
    ------
    IntegrityError
        Truncated, overlong or corrupt stream. Nothing is committed.
    InvalidInputError
        NaN/Inf in a float array, or ``check`` refused the content. Nothing is committed.
    """
    path = Path(path)
    header = spec.to_proto().SerializeToString(deterministic=True)
    digester = BundleDigester(spec)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + struct.pack("<Q", len(header)) + header)
            # Disk writes run in one background thread (in order) while this thread receives,
            # hashes and NaN-scans the next chunks (all release the GIL); at most _WRITE_AHEAD
            # chunks wait for the disk.
            scan = _FiniteScan()
            with ThreadPoolExecutor(1, thread_name_prefix="bundle-writer") as writer:
                pending: deque = deque()
                for chunk in chunks:
                    for array, piece in digester.feed(chunk):
                        scan.scan(array, piece)
                    pending.append(writer.submit(fh.write, chunk))
                    if len(pending) > _WRITE_AHEAD:
                        pending.popleft().result()
                for write in pending:
                    write.result()
            digester.finish()
            fh.flush()
            os.fsync(fh.fileno())
        if check is not None:
            arrays = _map_arrays(Path(tmp), spec, _data_offset(header))
            check(arrays)
            del arrays
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


class _FiniteScan:
    """Refuses NaN/Inf in float arrays as their bytes stream by (no second read of the file).

    Pieces may split an element (a client chooses its chunk sizes): the split bytes are carried
    to the next piece of the same array.
    """

    def __init__(self) -> None:
        self._carry = b""

    def scan(self, array: ArraySpec, piece: memoryview) -> None:
        dt = wire_dtype(array.dtype)
        if dt.kind != "f":
            return
        if self._carry:
            need = dt.itemsize - len(self._carry)
            self._carry += bytes(piece[:need])
            piece = piece[need:]
            if len(self._carry) < dt.itemsize:
                return
            self._check(array, np.frombuffer(self._carry, dtype=dt))
            self._carry = b""
        whole = len(piece) - len(piece) % dt.itemsize
        self._check(array, np.frombuffer(piece[:whole], dtype=dt))
        self._carry = bytes(piece[whole:])

    @staticmethod
    def _check(array: ArraySpec, values: np.ndarray) -> None:
        if not np.isfinite(values).all():
            raise InvalidInputError(f"array {array.name!r} contains NaN or Inf values")


def _map_arrays(path: Path, spec: BundleSpec, offset: int) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for a in spec.arrays:
        if a.nbytes == 0:
            arrays[a.name] = np.zeros(a.shape, dtype=wire_dtype(a.dtype))
        else:
            arrays[a.name] = np.memmap(path, dtype=wire_dtype(a.dtype), mode="r", offset=offset,
                                       shape=a.shape)
        offset += a.nbytes
    return arrays


def read_bundle_spec(path: Path) -> tuple[BundleSpec, int]:
    """Header of a committed bundle and the byte offset of its first array."""
    with open(path, "rb") as fh:
        head = fh.read(len(MAGIC) + 8)
        if len(head) != len(MAGIC) + 8 or head[:len(MAGIC)] != MAGIC:
            raise IntegrityError(f"{path} is not a noisyanchor bundle file")
        (n,) = struct.unpack("<Q", head[len(MAGIC):])
        header = fh.read(n)
    msg = pb.BundleHeader()
    msg.ParseFromString(header)
    return BundleSpec.from_proto(msg), _data_offset(header)


def read_bundle(path: Path, *, copy: bool = True) -> tuple[BundleSpec, dict[str, np.ndarray]]:
    """A committed bundle's header and arrays (copied into memory unless ``copy=False``)."""
    spec, offset = read_bundle_spec(path)
    arrays = _map_arrays(Path(path), spec, offset)
    if copy:
        arrays = {k: np.array(v) for k, v in arrays.items()}
    return spec, arrays


class Store:
    """Folders of one analyst store (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.uploads = self.root / "uploads"
        self.disclosures = self.root / "disclosures"
        self.keys = self.root / "relay" / "keys"
        self.sealed = self.root / "relay" / "sealed"
        self.commitments = self.root / "relay" / "commitments"
        self.result = self.root / "result"

    def open(self) -> Store:
        """Create the folders and sweep the temporary files and folders a crash left anywhere
        in the store (partial uploads, relay objects, ledger or ``federation.json`` writes, a
        result folder), whatever their kind; committed files are never touched."""
        for d in (self.uploads, self.disclosures, self.keys, self.sealed, self.commitments):
            d.mkdir(parents=True, exist_ok=True)
        sweep_temporaries(self.root)
        return self

    def upload_path(self, pid: str) -> Path:
        """Committed upload of ``pid``."""
        return self.uploads / f"{pid}.bundle"

    def disclosure_path(self, pid: str) -> Path:
        """Committed disclosure of ``pid``."""
        return self.disclosures / f"{pid}.bundle"

    def committed(self, folder: Path) -> list[str]:
        """Participant ids with a committed bundle in ``folder``."""
        return sorted(p.name.removesuffix(".bundle") for p in folder.glob("*.bundle"))

    def commit_result(self, files: dict[str, bytes]) -> None:
        """Write the result folder atomically: a temporary folder renamed into place."""
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=self.root))
        try:
            for name, data in files.items():
                if "/" in name:
                    raise InvalidInputError(f"result file name {name!r} has a separator")
                with open(tmp / name, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            fsync_dir(tmp)
            os.replace(tmp, self.result)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self.root)
