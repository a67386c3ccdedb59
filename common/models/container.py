"""Files of named arrays with a JSON header, whose loading cannot run code: the downstream model,
a site's model and a site's kept key are written and read only through here.

Layout::

    MAGIC (8 bytes) | header length (8 bytes, little-endian) | header (UTF-8 JSON) | arrays

The header is ``{"format": NAME, "version": 1, "meta": {...}, "arrays": [{"name", "dtype",
"shape", "sha256"}, ...]}``; the arrays' raw little-endian bytes follow in header order with
nothing after them. Loading parses JSON and hands bytes to ``numpy.frombuffer``; nothing is ever
unpickled or imported.

Why not pickle, joblib or skops: a model travels from the analyst (a remote party) to every
site, and unpickling runs whatever the file names (``__reduce__``); skops could load only an
explicit list of trusted types but pulls in a dependency to read what here are a few float
arrays. Why not ``.npz``: a zip archive brings its own parser (compression, duplicate member
names) and the JSON header would have to live inside it as a byte array; here every array carries
its own SHA-256 and the header is checked entry by entry (unknown keys, dtypes, shapes, sizes,
non-finite values are refused with the name of the entry).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from noisyanchor.common.bundles import little_endian, raw_bytes, wire_dtype
from noisyanchor.common.errors import IntegrityError, InvalidInputError

#: First bytes of every arrays file (format version 1).
MAGIC = b"NAARRAY1"

#: Version of the layout above (the header's ``version``).
VERSION = 1

#: Largest header accepted (bytes): names, shapes and metadata, never array data.
MAX_HEADER_BYTES = 1 << 20

#: Largest number of dimensions of an array (every array of a model or key is 1-D or 2-D).
MAX_NDIM = 2

_HEADER_KEYS = {"format", "version", "meta", "arrays"}
_ENTRY_KEYS = {"name", "dtype", "shape", "sha256"}


@dataclass(frozen=True)
class ArraysFile:
    """A loaded arrays file.

    Attributes
    ----------
    format : str
        What the file holds (e.g. ``"noisyanchor.model"``).
    meta : dict
        The header's JSON metadata.
    arrays : dict of str to ndarray
        The arrays in file order (read-only views of the loaded bytes).
    """

    format: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]


def dump_arrays(fmt: str, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """The bytes of an arrays file holding ``meta`` and ``arrays`` (in mapping order).

    The same inputs always give the same bytes (keys sorted, no time stamps).
    """
    entries, blobs = [], []
    for name, array in arrays.items():
        arr = little_endian(array)
        wire_dtype(arr.dtype.str)  # numbers only: never objects or strings
        if arr.ndim > MAX_NDIM:
            raise InvalidInputError(f"array {name!r} has {arr.ndim} dimensions; at most "
                                    f"{MAX_NDIM} are allowed")
        data = raw_bytes(arr)
        entries.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape),
                        "sha256": hashlib.sha256(data).hexdigest()})
        blobs.append(bytes(data))
    header = json.dumps({"format": fmt, "version": VERSION, "meta": dict(meta),
                         "arrays": entries}, sort_keys=True, separators=(",", ":"),
                        allow_nan=False).encode()
    return b"".join([MAGIC, struct.pack("<Q", len(header)), header, *blobs])


def _what_it_is(raw: bytes) -> str:
    """A name for bytes that are not an arrays file (what a tampered file most often is)."""
    if raw[:1] == b"\x80" and raw[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a Python pickle, which is never loaded (unpickling can run code)"
    if raw[:4] == b"PK\x03\x04":
        return "a zip archive (an .npz or a joblib/skops file?)"
    if raw[:6] == b"\x93NUMPY":
        return "a bare .npy array"
    return "not a noisyanchor arrays file"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise InvalidInputError(f"repeated keys in the header: {sorted(keys)}")
    return dict(pairs)


def _refuse_constant(name: str) -> None:
    raise InvalidInputError(f"non-finite number {name} in the header")


def _entry(entry: Any, index: int) -> tuple[str, np.dtype, tuple[int, ...], str]:
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        raise InvalidInputError(f"array entry {index} of the header must have exactly the keys "
                                f"{sorted(_ENTRY_KEYS)}")
    name, dtype, shape, digest = entry["name"], entry["dtype"], entry["shape"], entry["sha256"]
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"array entry {index} has no name")
    if not isinstance(dtype, str):
        raise InvalidInputError(f"array {name!r}: dtype must be a string")
    dt = wire_dtype(dtype)
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                       for n in shape)):
        raise InvalidInputError(f"array {name!r}: shape must be a list of at most {MAX_NDIM} "
                                f"non-negative integers, got {shape!r}")
    if not isinstance(digest, str) or len(digest) != 64:
        raise InvalidInputError(f"array {name!r}: sha256 must be 64 hex digits")
    return name, dt, tuple(shape), digest


def load_arrays(raw: bytes, fmt: str, *, what: str = "the file",
                max_bytes: int | None = None) -> ArraysFile:
    """Parse and verify an arrays file of format ``fmt``.

    Parameters
    ----------
    raw : bytes
        The whole file.
    fmt : str
        The format it must hold.
    what : str
        How errors name the file (a path, "the site model from the analyst").
    max_bytes : int, optional
        Refuse larger files before parsing anything.

    Raises
    ------
    InvalidInputError
        Not an arrays file (a pickle, a zip, anything else), another format or version, a
        malformed header (unknown or missing keys, repeated names, dtypes other than
        little-endian numbers, shapes), non-finite values in a float array.
    IntegrityError
        Sizes or SHA-256 digests that do not match the header (truncated or altered).
    """
    raw = bytes(raw)
    if max_bytes is not None and len(raw) > max_bytes:
        raise InvalidInputError(f"{what} has {len(raw)} bytes, more than the limit of "
                                f"{max_bytes}")
    if raw[:len(MAGIC)] != MAGIC:
        raise InvalidInputError(f"{what} is refused: it is {_what_it_is(raw)}")
    if len(raw) < len(MAGIC) + 8:
        raise IntegrityError(f"{what} is truncated (no header length)")
    (size,) = struct.unpack("<Q", raw[len(MAGIC):len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if size > MAX_HEADER_BYTES or start + size > len(raw):
        raise IntegrityError(f"{what} declares a {size}-byte header; the file has "
                             f"{len(raw) - start} bytes after the length (limit "
                             f"{MAX_HEADER_BYTES})")
    try:
        header = json.loads(raw[start:start + size].decode(), object_pairs_hook=_no_duplicates,
                            parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidInputError(f"{what}: the header is not JSON: {err}") from None
    except RecursionError:  # nesting no header of ours has: a clear refusal, not a traceback
        raise InvalidInputError(f"{what}: the header nests deeper than Python's parser "
                                "allows; not a file this project wrote") from None
    except InvalidInputError as err:
        raise InvalidInputError(f"{what}: {err}") from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        got = sorted(header) if isinstance(header, dict) else type(header).__name__
        raise InvalidInputError(f"{what}: the header must have exactly the keys "
                                f"{sorted(_HEADER_KEYS)}, got {got}")
    if header["format"] != fmt:
        raise InvalidInputError(f"{what} holds {header['format']!r}, not {fmt!r}")
    if header["version"] != VERSION:
        raise InvalidInputError(f"{what} has layout version {header['version']!r}; this "
                                f"version reads {VERSION}")
    if not isinstance(header["meta"], dict) or not isinstance(header["arrays"], list):
        raise InvalidInputError(f"{what}: 'meta' must be an object and 'arrays' a list")
    try:
        entries = [_entry(e, i) for i, e in enumerate(header["arrays"])]
    except InvalidInputError as err:
        raise InvalidInputError(f"{what}: {err}") from None
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"{what}: array names repeat: {names}")
    offset = start + size
    expected = sum(math.prod(shape) * dt.itemsize for _, dt, shape, _ in entries)
    if len(raw) - offset != expected:
        raise IntegrityError(f"{what} carries {len(raw) - offset} bytes of arrays; its header "
                             f"declares {expected} (truncated or altered)")
    arrays: dict[str, np.ndarray] = {}
    for name, dt, shape, digest in entries:
        n = math.prod(shape) * dt.itemsize
        data = raw[offset:offset + n]
        offset += n
        if hashlib.sha256(data).hexdigest() != digest:
            raise IntegrityError(f"{what}: array {name!r} does not match its SHA-256 (altered "
                                 "or corrupt)")
        arr = np.frombuffer(data, dtype=dt).reshape(shape)
        if dt.kind == "f" and not np.isfinite(arr).all():
            raise InvalidInputError(f"{what}: array {name!r} holds NaN or Inf values")
        arrays[name] = arr
    return ArraysFile(fmt, header["meta"], arrays)
