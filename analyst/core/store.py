"""The analyst's store on disk: committed array bundles, relay objects and the result.

Every write is atomic (:mod:`common.files`): bytes go to a temporary file in the destination
folder, are fsynced, renamed over the final name with ``os.replace``, and the folder is fsynced.
A crash leaves either the old state or the new one, never a partial file; stale temporary files
are swept at start-up.

A store knows itself and has one owner (issue 22): ``store.json`` records the federation id and
the SHA-256 of the protocol configuration it was created under, and :meth:`Store.open` refuses
another; ``analyst.lock`` is held (``flock``, exclusive) by the one analyst process using the
store, and a second one is refused with the PID of the first. Every stored array is verified
against its SHA-256 where it is used (a bundle's digests are in its header; the result files'
in ``result/manifest.json``), and a mismatch is an :class:`~common.errors.IntegrityError` naming
the file. Result files are mode 0600 in a 0700 folder, like uploads.

A bundle file holds ``MAGIC``, an 8-byte little-endian header length, the header as the
store's codec encodes it and the arrays' raw bytes in header order, so arrays are read back with
``numpy.memmap`` at known offsets (no pickle, no whole-file copy). The codec
(:class:`analyst.core.codec.StoreCodec`) is given by whoever opens the store; every store so
far holds protobuf headers and relay objects (:data:`common.wire_messages.PROTO_CODEC`, which
:mod:`analyst.storage` binds), so this module never imports the generated code.

Layout of a store::

    uploads/<participant>.bundle      one per participant (Y_i, B_i, labels, tags)
    disclosures/<participant>.bundle  colluder disclosures (threat-model testing)
    relay/keys/<participant>.pb       signed X25519 public keys
    relay/sealed/<recipient>.pb       the dealer's sealed share for each recipient
    relay/commitments/<participant>.bin
    result/                           Z, labels, tags, rotations, result.json, site models,
                                      manifest.json (the SHA-256 of every other file)
    store.json                        the store's federation and protocol digest
    analyst.lock                      held by the analyst using the store (its PID inside)
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import struct
import tempfile
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np

from noisyanchor.analyst.core.codec import StoreCodec
from noisyanchor.common.bundles import (
    DIGEST_SIZE,
    ArraySpec,
    BundleDigester,
    BundleSpec,
    BundleStream,
    HeaderCodec,
    HeaderDecodeError,
    wire_dtype,
)
from noisyanchor.common.errors import ConfigError, IntegrityError, InvalidInputError
from noisyanchor.common.files import (
    TMP_PREFIX,
    atomic_write,
    fsync_dir,
    fsync_path,
    narrow_private,
    open_under,
    read_under,
    refuse_links,
    stale_prefix,
    sweep_temporaries,
)
from noisyanchor.common.npy_files import load_npy

#: First bytes of every bundle file (format version 1).
MAGIC = b"NABUNDL1"

#: Public description of the federation (config without TLS paths), written at start-up.
FEDERATION_FILE = "federation.json"

#: The store's identity (federation id, protocol digest) and the owner's lock file.
IDENTITY_FILE, LOCK_FILE = "store.json", "analyst.lock"

#: The result folder's list of files with their SHA-256.
MANIFEST = "manifest.json"
#: Largest manifest read (bytes): a few hundred files' names and digests.
_MAX_MANIFEST_BYTES = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")

#: Largest relay object, job record or marker read from the store: a signed key with its
#: certificate, a sealed share, a commitment.
_MAX_RELAY_BYTES = 1 << 20

#: Bytes hashed per read when a stored file is verified.
_VERIFY_CHUNK = 8 << 20

#: Chunks in flight behind the receiving thread at most (bounds memory to a few MiB).
_AHEAD = 8

#: Bytes written between two hand-overs of the written range to the disk (:class:`_Stages`).
WRITEBACK_BYTES = 32 << 20


def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` in ``.npy`` format (no pickle)."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _data_offset(header_bytes: bytes) -> int:
    return len(MAGIC) + 8 + len(header_bytes)


def receive_bundle(
    path: Path, stream: BundleStream,
    check: Callable[[dict[str, np.ndarray]], None] | None = None, *, codec: HeaderCodec,
    verify: Callable[[BundleSpec], None] | None = None,
) -> BundleSpec:
    """Stream a bundle to a temporary file, verify it, then commit it at ``path``.

    The receiving thread only accounts for the bytes; two ordered background stages follow it
    at most ``_AHEAD`` chunks behind (so memory stays a few chunks): one hashes and checks
    finiteness, the other writes (SHA-256, numpy and file writes release the GIL, so receiving,
    hashing and writing overlap). Every ``WRITEBACK_BYTES`` the written range is handed to the
    disk, so the final fsync waits for the last range only. The header goes first with
    placeholder digests of the final size, and is rewritten with the declared digests once they
    are verified (the trailer of a stream whose header had none).

    Parameters
    ----------
    path : Path
        Final name; must not exist yet (the caller holds the participant's lock).
    stream : BundleStream
        The validated header, the chunk payloads in order, and the declared digests.
    check : callable, optional
        Content check on the received arrays (memory-mapped) before the commit.
    codec : HeaderCodec
        How the header is written (:data:`common.wire.PROTO_HEADERS` for every store so far).
    verify : callable, optional
        Check of the header with its verified digests (the sender's signature) before the
        commit; what it raises refuses the bundle.

    Returns
    -------
    BundleSpec
        The committed header: ``stream.spec`` with the verified digests.

    Raises
    ------
    IntegrityError
        Truncated, overlong or corrupt stream, or no trailer where the header announced one.
        Nothing is committed.
    InvalidInputError
        NaN/Inf in a float array, a malformed trailer, or ``check`` refused the content. Nothing
        is committed.
    """
    path = Path(path)
    spec = stream.spec
    placeholder = spec.with_digests([b"\0" * DIGEST_SIZE] * len(spec.arrays))
    header_size = len(codec.header_bytes(placeholder))
    digester = BundleDigester(spec)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb", buffering=0) as fh:
            _write_all(fd, MAGIC + struct.pack("<Q", header_size) + codec.header_bytes(placeholder))
            with _Stages(fd, len(MAGIC) + 8 + header_size) as stages:
                scan = _FiniteScan()
                for chunk in stream.chunks():
                    pieces = digester.split(chunk)  # an overlong stream stops here
                    stages.submit(chunk, lambda pieces=pieces: (
                        digester.update(pieces), scan.scan(spec, pieces)))
            digests = stream.digests()
            digester.finish(digests)
            final = spec.with_digests(digests)
            if verify is not None:
                verify(final)
            header = codec.header_bytes(final)
            if len(header) != header_size:  # fixed-size digests: cannot happen
                raise IntegrityError("the bundle header changed size with its digests")
            os.pwrite(fd, header, len(MAGIC) + 8)
            os.fsync(fh.fileno())
        if check is not None:
            arrays = _map_arrays(Path(tmp), final, len(MAGIC) + 8 + header_size)
            check(arrays)
            del arrays
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return final


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view):]


class _Stages:
    """The two ordered background stages of :func:`receive_bundle`: verification (the callable
    given with each chunk) and the disk write of the chunk at the next offset.

    ``submit`` waits for the oldest chunk once ``_AHEAD`` are in flight and re-raises its error,
    so a refused stream stops within a few chunks; leaving the block waits for the rest (or, on
    an error, cancels what has not started).
    """

    def __init__(self, fd: int, offset: int) -> None:
        self._fd = fd
        self._offset = self._flushed = offset
        self._verify = ThreadPoolExecutor(1, thread_name_prefix="bundle-verify")
        self._write = ThreadPoolExecutor(1, thread_name_prefix="bundle-writer")
        self._pending: deque[tuple[Future, Future]] = deque()

    def __enter__(self) -> _Stages:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        try:
            if exc_type is None:
                while self._pending:
                    self._wait_oldest()
        finally:
            for pool in (self._verify, self._write):
                pool.shutdown(wait=True, cancel_futures=exc_type is not None)

    def submit(self, chunk: bytes | memoryview, verify: Callable[[], object]) -> None:
        """Run ``verify`` (the checks of ``chunk``) and write ``chunk`` at the next offset."""
        offset = self._offset
        self._offset += len(chunk)
        self._pending.append((self._verify.submit(verify),
                              self._write.submit(self._write_at, chunk, offset)))
        if len(self._pending) > _AHEAD:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        for done in self._pending.popleft():
            done.result()

    def _write_at(self, chunk: bytes | memoryview, offset: int) -> None:
        _write_all(self._fd, chunk)
        end = offset + len(chunk)
        if end - self._flushed >= WRITEBACK_BYTES:
            # Start the disk write of what is written so far, without waiting for it: on Linux
            # POSIX_FADV_DONTNEED first hands dirty pages to writeback, then drops the clean
            # ones (an upload need not stay in the page cache). The final fsync then waits for
            # the last range only instead of the whole upload.
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self._fd, self._flushed, end - self._flushed,
                                 os.POSIX_FADV_DONTNEED)
            self._flushed = end


class _FiniteScan:
    """Refuses NaN/Inf in float arrays as their bytes stream by (no second read of the file).

    Pieces may split an element (a client chooses its chunk sizes): the split bytes are carried
    to the next piece of the same array.
    """

    def __init__(self) -> None:
        self._carry = b""

    def scan(self, spec: BundleSpec, pieces: Iterable[tuple[int, memoryview]]) -> None:
        """Check the pieces returned by :meth:`BundleDigester.split`, in stream order."""
        for index, piece in pieces:
            self._scan(spec.arrays[index], piece)

    def _scan(self, array: ArraySpec, piece: memoryview) -> None:
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
        # A finite sum proves every value finite (NaN and Inf propagate) at about twice the speed
        # of isfinite().all(); only a non-finite sum (or an overflow) needs the exact check.
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(values.sum()):
                return
        if not np.isfinite(values).all():
            raise InvalidInputError(f"array {array.name!r} contains NaN or Inf values")


def _map_arrays(file: Path | BinaryIO, spec: BundleSpec,
                offset: int) -> dict[str, np.ndarray]:
    """The arrays of a bundle at ``file`` (a path, or a file opened by :func:`open_under`),
    memory-mapped from ``offset``."""
    arrays: dict[str, np.ndarray] = {}
    for a in spec.arrays:
        if a.nbytes == 0:
            arrays[a.name] = np.zeros(a.shape, dtype=wire_dtype(a.dtype))
        else:
            arrays[a.name] = np.memmap(file, dtype=wire_dtype(a.dtype), mode="r", offset=offset,
                                       shape=a.shape)
        offset += a.nbytes
    return arrays


#: Largest bundle header read: a few arrays' names, dtypes, shapes and digests.
_MAX_BUNDLE_HEADER = 1 << 20


def read_bundle_spec(path: Path, *, root: Path, codec: HeaderCodec) -> tuple[BundleSpec, int]:
    """Header of a committed bundle and the byte offset of its first array (``path`` inside
    the store at ``root``, opened by :func:`open_under`: no symlink followed; the header
    decoded by ``codec``)."""
    with open_under(root, path) as fh:
        return _read_spec(fh, path, codec)


def _read_spec(fh: BinaryIO, path: Path, codec: HeaderCodec) -> tuple[BundleSpec, int]:
    head = fh.read(len(MAGIC) + 8)
    if len(head) != len(MAGIC) + 8 or head[:len(MAGIC)] != MAGIC:
        raise IntegrityError(f"{path} is not a noisyanchor bundle file")
    (n,) = struct.unpack("<Q", head[len(MAGIC):])
    if n > _MAX_BUNDLE_HEADER:
        raise IntegrityError(f"{path} declares a {n}-byte header, more than the "
                             f"{_MAX_BUNDLE_HEADER} a bundle's header holds; altered or corrupt")
    header = fh.read(n)
    try:
        spec = codec.header_of(header)
    except HeaderDecodeError:
        raise IntegrityError(f"{path}: the bundle header does not parse; altered or "
                             "corrupt") from None
    return spec, _data_offset(header)


def _sha256_of(fh, size: int, check: Callable[[bytes], None] | None = None) -> bytes:
    """SHA-256 of the next ``size`` bytes of ``fh`` (read in chunks, each handed to ``check``
    too); short reads count as a mismatch, not an error."""
    h = hashlib.sha256()
    while size > 0:
        chunk = fh.read(min(_VERIFY_CHUNK, size))
        if not chunk:
            break
        h.update(chunk)
        if check is not None:
            check(chunk)
        size -= len(chunk)
    return h.digest() if size == 0 else b""


def _finite_check(array: ArraySpec, path: Path) -> Callable[[bytes], None] | None:
    """A check of one float array's chunks for NaN/Inf as they are hashed (chunks of
    :data:`_VERIFY_CHUNK` bytes from the array's start hold whole elements): an upload was
    finite when committed, so a non-finite value read back was written since."""
    dt = wire_dtype(array.dtype)
    if dt.kind != "f":
        return None

    def check(chunk: bytes) -> None:
        try:
            _FiniteScan._check(array, np.frombuffer(chunk, dtype=dt,
                                                    count=len(chunk) // dt.itemsize))
        except InvalidInputError as err:
            raise IntegrityError(f"{path}: {err}; the store is altered or corrupt") from None
    return check


def _file_sha256(path: Path) -> str:
    """SHA-256 of the file at ``path`` in hex, read in chunks."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def verify_bundle(path: Path, *, root: Path, codec: HeaderCodec) -> BundleSpec:
    """The header of a committed bundle (``path`` inside the store at ``root``, no symlink
    followed) once every array matches the SHA-256 its header records and no float array holds
    NaN or Inf, and the file holds nothing after them.

    Raises
    ------
    IntegrityError
        Naming the file and the array that does not match (the store is altered or corrupt).
    """
    with open_under(root, path) as fh:
        return _verified_spec(fh, Path(path), codec)[0]


def _verified_spec(fh: BinaryIO, path: Path, codec: HeaderCodec) -> tuple[BundleSpec, int]:
    """:func:`read_bundle_spec` of the bundle open in ``fh`` once :func:`verify_bundle`
    accepts it."""
    spec, offset = _read_spec(fh, path, codec)
    fh.seek(offset)
    for a in spec.arrays:
        if _sha256_of(fh, a.nbytes, _finite_check(a, path)) != a.sha256:
            raise IntegrityError(
                f"{path}: array {a.name!r} does not match the SHA-256 recorded when it was "
                "committed; the store is altered or corrupt (restore the file from a backup "
                "or ask the participant to upload into a new store)")
    if fh.read(1):
        raise IntegrityError(f"{path} has bytes after its last array; the store is altered "
                             "or corrupt")
    return spec, offset


def read_bundle(path: Path, *, root: Path, codec: HeaderCodec,
                copy: bool = True) -> tuple[BundleSpec, dict[str, np.ndarray]]:
    """A committed bundle's header and arrays (copied into memory unless ``copy=False``), once
    :func:`verify_bundle` accepts it; the arrays are mapped from the file it verified."""
    path = Path(path)
    with open_under(root, path) as fh:
        spec, offset = _verified_spec(fh, path, codec)
        arrays = _map_arrays(fh, spec, offset)
    if copy:
        arrays = {k: np.array(v) for k, v in arrays.items()}
    return spec, arrays


#: Keys of the public description that may change over a store's life (the operator may extend
#: the deadline and restart); every other key is part of the protocol digest.
MUTABLE_KEYS = ("deadline",)


def store_identity(public: dict) -> dict[str, str]:
    """``{"federation_id", "protocol_sha256"}`` of a federation's public description (the
    ``federation.json`` the analyst writes): the SHA-256 of its canonical JSON, the keys of
    :data:`MUTABLE_KEYS` left out."""
    fixed = {k: v for k, v in public.items() if k not in MUTABLE_KEYS}
    canonical = json.dumps(fixed, sort_keys=True, separators=(",", ":")).encode()
    return {"federation_id": str(public["federation_id"]),
            "protocol_sha256": hashlib.sha256(canonical).hexdigest()}


class StoreInUseError(ConfigError):
    """Another analyst process holds the store."""


def _lock_holder(root: Path, path: Path) -> str:
    try:
        pid = read_under(root, path, 64).decode().strip()
    except (OSError, ValueError):  # IntegrityError and UnicodeDecodeError too
        return "unknown"
    return pid if pid.isdigit() else "unknown"


def serving_pid(root: Path) -> int | None:
    """The PID in the store's ``analyst.lock`` if that process is alive, else None (no analyst
    serves the store). Read, never locked: a probe taking the lock, even shared, would make an
    analyst starting at that instant refuse the store as in use. A PID reused by another
    process still counts as serving; the caller only waits longer."""
    holder = _lock_holder(Path(root), Path(root) / LOCK_FILE)
    if not holder.isdigit():
        return None
    try:
        os.kill(int(holder), 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, under another user
        pass
    return int(holder)


class Store:
    """Folders of one analyst store (see the module docstring)."""

    def __init__(self, root: Path, codec: StoreCodec) -> None:
        self.root = Path(root)
        self.codec = codec
        self.uploads = self.root / "uploads"
        self.disclosures = self.root / "disclosures"
        self.keys = self.root / "relay" / "keys"
        self.sealed = self.root / "relay" / "sealed"
        self.commitments = self.root / "relay" / "commitments"
        self.result = self.root / "result"
        self._lock_fd: int | None = None

    def open(self, identity: dict | None = None) -> Store:
        """Take the store for this process, check whose it is, create the folders and sweep
        the temporary files and folders a crash left anywhere in the store (partial uploads,
        relay objects, ledger or ``federation.json`` writes, a result folder), whatever their
        kind; committed files are never touched.

        Parameters
        ----------
        identity : dict, optional
            The public description of the federation opening it (``federation.json``):
            its :func:`store_identity` is recorded in a new store and compared with what an
            existing one recorded.

        Raises
        ------
        StoreInUseError
            Another process holds the store (its PID is named).
        ConfigError
            The store belongs to another federation or protocol configuration.
        """
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.lock()  # first: the sweep below must never touch another analyst's writes
        self.check_private()
        if identity is not None:
            self._check_identity(identity)
        # One level at a time: mkdir(parents=True) would make relay/ with the umask's mode.
        for d in (self.uploads, self.disclosures, self.keys.parent, self.keys, self.sealed,
                  self.commitments):
            d.mkdir(exist_ok=True, mode=0o700)
        sweep_temporaries(self.root)
        return self

    def check_private(self) -> Store:
        """Refuse a store holding a symlink anywhere (before anything is read, swept or written
        through one) and narrow folders and files others could read or write (0700 / 0600,
        with a warning each: :func:`common.files.narrow_private`); every command that reads
        the store calls it (serve, status, deadline, attack). Returns the store."""
        if self.root.is_dir():
            refuse_links(self.root)
            narrow_private(self.root, recursive=True)
        return self

    def lock(self) -> None:
        """Hold ``analyst.lock`` (exclusive ``flock``, released when the process ends, however
        it ends) with this process's PID in it. A second open in the same process is allowed."""
        if self._lock_fd is not None:
            return
        path = self.root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = _lock_holder(self.root, path)
            if holder == str(os.getpid()):
                return  # this process holds it already (a store opened twice)
            raise StoreInUseError(
                f"the store {self.root} is in use by another analyst (PID {holder} holds "
                f"{path}); stop that one first: two analysts on one store would split the "
                "federation") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _check_identity(self, public: dict) -> None:
        path = self.root / IDENTITY_FILE
        mine = store_identity(public)
        if path.is_file():
            try:
                recorded = json.loads(read_under(self.root, path, _MAX_MANIFEST_BYTES))
                theirs = {k: recorded[k] for k in mine}
            except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
                raise IntegrityError(f"{path} is unreadable ({err}); the store's federation is "
                                     "unknown, so it is not used") from None
        elif (self.root / FEDERATION_FILE).is_file():
            # A store of an earlier version: its description, on the keys it has, must agree.
            try:
                old = dict(json.loads(read_under(self.root, self.root / FEDERATION_FILE,
                                                 _MAX_MANIFEST_BYTES)))
            except (OSError, ValueError, TypeError, RecursionError) as err:
                raise IntegrityError(f"{self.root / FEDERATION_FILE} is unreadable ({err}); the "
                                     "store's federation is unknown, so it is not used") from None
            agrees = all(public.get(k) == v for k, v in old.items() if k not in MUTABLE_KEYS)
            theirs = mine if agrees else store_identity({"federation_id": None, **old})
        elif any(p.is_file() for d in ("uploads", "relay", "result", "disclosures")
                 for p in (self.root / d).rglob("*")):
            raise ConfigError(f"the store {self.root} holds uploads, relay objects or a result "
                              f"but no {IDENTITY_FILE}: whose it is cannot be told, so it is not "
                              "used; point [server] output_dir at a new folder")
        else:
            theirs = mine
        if theirs != mine:
            what = ("another federation" if theirs["federation_id"] != mine["federation_id"]
                    else "another protocol configuration")
            raise ConfigError(
                f"the store {self.root} belongs to {what}: federation "
                f"{theirs['federation_id']!r} with protocol digest "
                f"{theirs['protocol_sha256'][:16]}..., and this analyst serves federation "
                f"{mine['federation_id']!r} with protocol digest "
                f"{mine['protocol_sha256'][:16]}... ([federation] and [schema] of the config); "
                "point [server] output_dir at this federation's store, or at a new folder for a "
                "new federation")
        if not path.is_file():
            atomic_write(path, json.dumps(mine | {"created_utc": datetime.datetime.now(
                datetime.UTC).isoformat(timespec="seconds")}, indent=1).encode())

    def read(self, path: Path, limit: int | None = _MAX_RELAY_BYTES) -> bytes:
        """The bytes of store file ``path`` (:func:`common.files.read_under`: no symlink
        followed, nothing outside the store; at most ``limit`` bytes, a relay object's by
        default)."""
        return read_under(self.root, path, limit)

    def upload_path(self, pid: str) -> Path:
        """Committed upload of ``pid``."""
        return self.uploads / f"{pid}.bundle"

    def disclosure_path(self, pid: str) -> Path:
        """Committed disclosure of ``pid``."""
        return self.disclosures / f"{pid}.bundle"

    def committed(self, folder: Path) -> list[str]:
        """Participant ids with a committed bundle in ``folder``."""
        return sorted(p.name.removesuffix(".bundle") for p in folder.glob("*.bundle"))

    def verify(self) -> None:
        """Check every committed upload and disclosure against its digests, and the result
        files against the manifest (start-up); IntegrityError naming the first file that does
        not match."""
        for folder in (self.uploads, self.disclosures):
            for pid in self.committed(folder):
                verify_bundle(folder / f"{pid}.bundle", root=self.root, codec=self.codec)
        if self.result.is_dir():
            manifest = self._manifest()
            held = {p.name for p in self.result.iterdir()} - {MANIFEST}
            if not manifest or held != set(manifest):
                raise IntegrityError(
                    f"{self.result / MANIFEST} lists {len(manifest)} file(s) where the result "
                    f"holds {len(held)} (missing from it: {sorted(held - set(manifest))[:5]}, "
                    f"absent: {sorted(set(manifest) - held)[:5]}); the result is not used")
            for name, expected in manifest.items():
                try:
                    with self._open_result(name) as fh:  # streamed: bounded memory
                        actual = _sha256_of(fh, os.fstat(fh.fileno()).st_size).hex()
                except OSError as err:
                    raise self._unreadable(name, err) from None
                if actual != expected:
                    raise IntegrityError(f"{self.result / name} does not match the SHA-256 "
                                         "recorded when the result was written; the store is "
                                         "altered or corrupt")

    def scratch_file(self, name: str) -> Path:
        """A new empty file (0600) in the store, for a result file too large to hold in memory
        (``Z``): handed to :meth:`commit_result`, which moves it into the result; a temporary
        name, so a crash leaves nothing the next start does not sweep."""
        fd, tmp = tempfile.mkstemp(prefix=stale_prefix(self.root / name), dir=self.root)
        os.close(fd)
        return Path(tmp)

    def commit_result(self, files: dict[str, bytes | Path]) -> None:
        """Write the result folder atomically: a temporary folder (0700) renamed into place,
        every file 0600, with :data:`MANIFEST` listing each file's SHA-256. A file given as a
        path (:meth:`scratch_file`) is hashed in chunks and moved in, never read whole."""
        for name in files:
            if "/" in name or name in ("", ".", "..", MANIFEST):
                raise InvalidInputError(f"result file name {name!r} is not allowed")
        manifest = {name: _file_sha256(data) if isinstance(data, Path)
                    else hashlib.sha256(data).hexdigest() for name, data in files.items()}
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=self.root))  # mode 0700
        try:
            for name, data in {**files, MANIFEST: json.dumps(
                    {"sha256": manifest}, indent=1, sort_keys=True).encode()}.items():
                if isinstance(data, Path):
                    fsync_path(data)
                    os.replace(data, tmp / name)
                    continue
                fd = os.open(tmp / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            fsync_dir(tmp)
            os.replace(tmp, self.result)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self.root)

    def _manifest(self) -> dict[str, str]:
        path = self.result / MANIFEST
        try:
            with self._open_result(MANIFEST) as fh:
                manifest = dict(json.loads(fh.read(_MAX_MANIFEST_BYTES + 1))["sha256"])
            if not all(isinstance(v, str) and _HEX64.fullmatch(v) for v in manifest.values()):
                raise ValueError("a digest is not 64 hexadecimal digits")
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
            raise IntegrityError(f"{path} is missing or unreadable ({type(err).__name__}: "
                                 f"{str(err)[:200]}); the result's files cannot be verified, "
                                 "so they are not used") from None
        return manifest

    def _unreadable(self, name: str, err: OSError) -> IntegrityError:
        return IntegrityError(f"{self.result / name} is listed in the result but cannot be "
                              "read, or is a symlink or not a regular file "
                              f"({err.strerror or err})")

    def _open_result(self, name: str):
        """Result file ``name`` opened for reading, refused (OSError) when it is a symlink or
        not a regular file: nothing outside the store is ever read through it."""
        try:
            return open_under(self.root, self.result / name)
        except IntegrityError as err:  # callers name the result file
            raise OSError(str(err)) from None

    def read_result(self, name: str) -> bytes:
        """The bytes of result file ``name`` once they match the manifest's SHA-256."""
        return self._checked(name, self._manifest().get(name))

    def _checked(self, name: str, expected: str | None) -> bytes:
        """The bytes of result file ``name`` once they match ``expected`` (its manifest
        entry; None: not in the manifest)."""
        path = self.result / name
        if expected is None:
            raise IntegrityError(f"{path} is not in the result's manifest; it is not used")
        try:
            with self._open_result(name) as fh:
                raw = fh.read()
        except OSError as err:
            raise self._unreadable(name, err) from None
        if hashlib.sha256(raw).hexdigest() != expected:
            raise IntegrityError(f"{path} does not match the SHA-256 recorded when the result "
                                 "was written; the store is altered or corrupt")
        return raw

    def result_array(self, name: str) -> np.ndarray:
        """A verified ``.npy`` result file (:meth:`read_result`; no pickle, numbers, no NaN or
        Inf: :func:`common.npy_files.load_npy`)."""
        return load_npy(self.read_result(name), str(self.result / name))
