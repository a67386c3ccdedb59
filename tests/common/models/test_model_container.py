"""The arrays-file format: what it writes reads back exactly, and nothing else loads: a pickle
payload is refused without being run, as are zips, altered bytes and malformed headers."""

import hashlib
import json
import os
import pickle
import struct

import numpy as np
import pytest

from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.models.container import MAGIC, dump_arrays, load_arrays

FMT = "noisyanchor.test"


def _raw(rng) -> bytes:
    return dump_arrays(FMT, {"note": "x", "n": 3}, {
        "a": rng.standard_normal((3, 2)), "b": np.arange(4, dtype="<i8"),
        "empty": np.zeros((0, 2))})


def _rebuild(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(text)) + text + data


def _split(raw: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", raw[8:16])
    return json.loads(raw[16:16 + n]), raw[16 + n:]


def test_arrays_round_trip_exactly_and_deterministically(rng):
    raw = _raw(rng)
    loaded = load_arrays(raw, FMT)
    assert loaded.meta == {"note": "x", "n": 3}
    assert list(loaded.arrays) == ["a", "b", "empty"]
    assert loaded.arrays["b"].dtype == np.dtype("<i8") and loaded.arrays["empty"].shape == (0, 2)
    again = dump_arrays(FMT, loaded.meta, loaded.arrays)
    assert again == raw  # same content, same bytes


class _Payload:
    """Unpickling this runs ``os.system``; the test checks it never runs."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_is_refused_without_running(tmp_path, rng):
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Payload(marker))
    with pytest.raises(InvalidInputError, match="a Python pickle, which is never loaded"):
        load_arrays(payload, FMT, what="model.bin")
    # The same payload disguised as an object array inside a well-formed file.
    header, data = _split(_raw(rng))
    header["arrays"].append({"name": "evil", "dtype": "|O", "shape": [1],
                             "sha256": hashlib.sha256(payload).hexdigest()})
    with pytest.raises(InvalidInputError, match="not a little-endian numeric dtype"):
        load_arrays(_rebuild(header, data + payload), FMT)
    assert not marker.exists()


def test_zip_npy_and_other_bytes_are_named(rng):
    import io

    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(2))
    with pytest.raises(InvalidInputError, match="zip archive"):
        load_arrays(buf.getvalue(), FMT)
    buf = io.BytesIO()
    np.save(buf, np.zeros(2))
    with pytest.raises(InvalidInputError, match=r"bare \.npy"):
        load_arrays(buf.getvalue(), FMT)
    with pytest.raises(InvalidInputError, match="not a noisyanchor arrays file"):
        load_arrays(b"hello world, not a model", FMT)


def test_altered_or_truncated_bytes_are_refused(rng):
    raw = bytearray(_raw(rng))
    with pytest.raises(IntegrityError, match="truncated or altered"):
        load_arrays(bytes(raw[:-8]), FMT)
    with pytest.raises(IntegrityError, match="truncated or altered"):
        load_arrays(bytes(raw) + b"\0", FMT)
    raw[-40] ^= 1
    with pytest.raises(IntegrityError, match="does not match its SHA-256"):
        load_arrays(bytes(raw), FMT)


@pytest.mark.parametrize(("change", "message"), [
    (lambda h: h.update(extra=1), "exactly the keys"),
    (lambda h: h.update(format="noisyanchor.other"), "holds 'noisyanchor.other'"),
    (lambda h: h.update(version=2), "layout version 2"),
    (lambda h: h["arrays"][0].update(dtype=">f8"), "not a little-endian numeric dtype"),
    (lambda h: h["arrays"][0].update(shape=[1, 2, 3]), "at most 2"),
    (lambda h: h["arrays"][0].update(shape=[-3, 2]), "non-negative integers"),
    (lambda h: h["arrays"][0].update(code="x"), "exactly the keys"),
    (lambda h: h["arrays"][1].update(name="a"), "names repeat"),
])
def test_malformed_headers_are_refused(rng, change, message):
    header, data = _split(_raw(rng))
    change(header)
    with pytest.raises(InvalidInputError, match=message):
        load_arrays(_rebuild(header, data), FMT)


def test_duplicate_keys_non_finite_json_and_values_are_refused(rng):
    header, data = _split(_raw(rng))
    text = json.dumps(header).replace('"meta": {', '"meta": {"n": 1, ', 1).encode()
    with pytest.raises(InvalidInputError, match="repeated keys"):
        load_arrays(MAGIC + struct.pack("<Q", len(text)) + text + data, FMT)
    text = json.dumps(header).replace('"n": 3', '"n": NaN').encode()
    with pytest.raises(InvalidInputError, match="non-finite number NaN"):
        load_arrays(MAGIC + struct.pack("<Q", len(text)) + text + data, FMT)
    raw = dump_arrays(FMT, {}, {"a": np.array([1.0, np.inf])})
    with pytest.raises(InvalidInputError, match="'a' holds NaN or Inf"):
        load_arrays(raw, FMT)


def test_size_limit_and_objects_at_write(rng):
    with pytest.raises(InvalidInputError, match="more than the limit"):
        load_arrays(_raw(rng), FMT, max_bytes=10)
    with pytest.raises(InvalidInputError, match="numeric dtype"):
        dump_arrays(FMT, {}, {"o": np.array([object()])})
