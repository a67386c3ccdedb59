"""Atomic commits of streamed bundles and the store's crash sweep."""

import hashlib
import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from noisyanchor.analyst import storage
from noisyanchor.analyst.core import store as core_store
from noisyanchor.analyst.storage import (
    FEDERATION_FILE,
    IDENTITY_FILE,
    MANIFEST,
    Store,
    npy_bytes,
    read_bundle,
    receive_bundle,
    verify_bundle,
)
from noisyanchor.common.errors import ConfigError, IntegrityError, InvalidInputError
from noisyanchor.common.files import atomic_write, sweep_stale_writes
from noisyanchor.common.wire import (
    PROTO_HEADERS,
    BundleStream,
    bundle_spec,
    iter_chunks,
    proto_receipt,
)


@pytest.fixture
def arrays(rng):
    return {"data": rng.standard_normal((40, 6)), "labels": np.arange(40, dtype="<i8")}


def test_received_bundle_reads_back_bit_for_bit(tmp_path, arrays):
    spec = bundle_spec("f", "i-gdp", arrays)
    receive_bundle(tmp_path / "a.bundle", BundleStream(spec, iter_chunks(arrays, chunk_size=97)))
    back_spec, back = read_bundle(tmp_path / "a.bundle", root=tmp_path)
    assert back_spec == spec
    for name, arr in arrays.items():
        np.testing.assert_array_equal(back[name], arr)  # exact: raw bytes, no conversion


@pytest.mark.parametrize("damage, error", [
    (lambda raw: raw[:-8], IntegrityError),
    (lambda raw: raw[:8] + bytes([raw[8] ^ 1]) + raw[9:], IntegrityError),
])
def test_damaged_stream_leaves_no_file_at_all(tmp_path, arrays, damage, error):
    spec = bundle_spec("f", "i-gdp", arrays)
    with pytest.raises(error):
        receive_bundle(tmp_path / "a.bundle",
                       BundleStream(spec, [damage(b"".join(iter_chunks(arrays)))]))
    assert list(tmp_path.iterdir()) == []


def test_non_finite_values_and_refused_content_commit_nothing(tmp_path, arrays):
    bad = arrays | {"data": np.full((40, 6), np.inf)}
    with pytest.raises(InvalidInputError, match="NaN or Inf"):
        receive_bundle(tmp_path / "a.bundle",
                       BundleStream(bundle_spec("f", "i-gdp", bad), iter_chunks(bad)))

    def refuse(got):
        raise InvalidInputError("no")

    with pytest.raises(InvalidInputError, match="no"):
        receive_bundle(tmp_path / "a.bundle",
                       BundleStream(bundle_spec("f", "i-gdp", arrays), iter_chunks(arrays)), refuse)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("chunk_size", [3, 8, 13, 1 << 20])
def test_nan_is_found_wherever_chunk_boundaries_split_the_elements(tmp_path, arrays, chunk_size):
    bad = arrays | {"data": arrays["data"].copy()}
    bad["data"][17, 4] = np.nan
    with pytest.raises(InvalidInputError, match="'data' contains NaN"):
        receive_bundle(tmp_path / "a.bundle", BundleStream(
            bundle_spec("f", "i-gdp", bad), iter_chunks(bad, chunk_size=chunk_size)))
    assert list(tmp_path.iterdir()) == []
    receive_bundle(tmp_path / "a.bundle", BundleStream(
        bundle_spec("f", "i-gdp", arrays), iter_chunks(arrays, chunk_size=chunk_size)))


def _trailer_stream(arrays, chunk_size=97, digests=None):
    """The stream of a sender that hashes while sending: no digests in the header."""
    spec = bundle_spec("f", "i-gdp", arrays)
    declared = [x.sha256 for x in spec.arrays] if digests is None else digests
    return spec, BundleStream(spec.without_digests(), iter_chunks(arrays, chunk_size=chunk_size),
                              declared)


@pytest.mark.parametrize("writeback", [16, 1 << 20])
def test_trailer_digests_are_verified_and_written_into_the_committed_header(
        tmp_path, arrays, monkeypatch, writeback):
    """The header is written first with placeholders, then rewritten with the verified digests
    (the disk writeback hand-over every ``writeback`` bytes changes nothing in the file)."""
    monkeypatch.setattr(core_store, "WRITEBACK_BYTES", writeback)
    spec, stream = _trailer_stream(arrays)
    assert receive_bundle(tmp_path / "a.bundle", stream) == spec
    back_spec, back = read_bundle(tmp_path / "a.bundle", root=tmp_path)
    assert back_spec == spec and proto_receipt(back_spec, "p0") == proto_receipt(spec, "p0")
    for name, arr in arrays.items():
        np.testing.assert_array_equal(back[name], arr)


def test_a_wrong_or_missing_trailer_commits_nothing(tmp_path, arrays):
    digests = [a.sha256 for a in bundle_spec("f", "i-gdp", arrays).arrays]
    wrong = [bytes(32), *digests[1:]]
    with pytest.raises(IntegrityError, match="'data'"):
        receive_bundle(tmp_path / "a.bundle", _trailer_stream(arrays, digests=wrong)[1])
    spec = bundle_spec("f", "i-gdp", arrays).without_digests()
    with pytest.raises(IntegrityError, match="without the trailer"):
        receive_bundle(tmp_path / "a.bundle", BundleStream(spec, iter_chunks(arrays)))
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_found_by_the_background_stages_stops_the_stream_early(tmp_path, rng):
    """NaN in the first chunk: the receiving thread stops within a few chunks of it."""
    data = rng.standard_normal((4096, 64))
    data[0, 0] = np.nan
    arrays = {"data": data}
    pulled = []

    def chunks():
        for chunk in iter_chunks(arrays, chunk_size=4096):
            pulled.append(len(chunk))
            yield chunk

    with pytest.raises(InvalidInputError, match="NaN"):
        receive_bundle(tmp_path / "a.bundle",
                       BundleStream(bundle_spec("f", "i-gdp", arrays), chunks()))
    assert len(pulled) <= core_store._AHEAD + 2 < data.nbytes // 4096
    assert list(tmp_path.iterdir()) == []


def test_open_sweeps_temporary_files_and_keeps_committed_ones(tmp_path):
    store = Store(tmp_path).open()
    atomic_write(store.uploads / "p0.bundle", b"x")
    (store.uploads / ".tmp-abc").write_bytes(b"partial")
    (tmp_path / ".tmp-result").mkdir()
    Store(tmp_path).open()
    assert [p.name for p in store.uploads.iterdir()] == ["p0.bundle"]
    assert not (tmp_path / ".tmp-result").exists()


def test_leftovers_of_one_file_are_swept_from_a_shared_folder_and_nothing_else(tmp_path):
    """A ledger outside the store: only its own interrupted writes are removed."""
    ledger = tmp_path / "ledger[1].json"  # glob characters in the name are taken literally
    atomic_write(ledger, b"{}")
    mine = [tmp_path / ".tmp-ledger[1].json.abc", tmp_path / ".tmp-ledger[1].json.dir"]
    mine[0].write_bytes(b"cut short")
    mine[1].mkdir()
    others = [tmp_path / ".tmp-other.json.abc", tmp_path / ".tmp-ledger1.json.x"]
    for p in others:
        p.write_bytes(b"not ours")
    assert sorted(sweep_stale_writes(ledger)) == sorted(mine)
    assert ledger.read_bytes() == b"{}" and all(p.exists() for p in others)


def test_result_folder_is_committed_whole(tmp_path):
    store = Store(tmp_path).open()
    store.commit_result({"a.json": b"{}", "z.npy": b"0"})
    assert sorted(p.name for p in store.result.iterdir()) == ["a.json", MANIFEST, "z.npy"]
    with pytest.raises(InvalidInputError, match="not allowed"):
        Store(tmp_path / "other").open().commit_result({"../x": b""})
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "other").iterdir())


def test_result_files_are_private_and_verified_against_their_manifest(tmp_path):
    """Issue 22: every result file (whoever adds one) is 0600 in a 0700 folder, and read back
    only when it matches the SHA-256 recorded at commit; a flipped byte names the file."""
    store = Store(tmp_path).open()
    z = np.arange(6.0).reshape(2, 3)
    store.commit_result({"z.npy": npy_bytes(z), "site-a.model": b"model"})
    assert stat.S_IMODE(store.result.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in store.result.iterdir()} == {0o600}
    np.testing.assert_array_equal(store.result_array("z.npy"), z)
    store.verify()
    raw = bytearray((store.result / "site-a.model").read_bytes())
    raw[0] ^= 1
    (store.result / "site-a.model").write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=r"result/site-a\.model does not match the SHA-256"):
        store.verify()
    (store.result / MANIFEST).unlink()
    with pytest.raises(IntegrityError, match=r"manifest\.json is missing"):
        store.read_result("z.npy")


def test_a_result_is_checked_as_strictly_as_the_wire(tmp_path):
    """Issue 30, item 4: at start, a manifest that is empty or lists fewer files than the
    result holds is refused, a symlink is never followed (files outside the store are not
    served), and a manifest nested past the parser's depth is a refusal, not a traceback."""
    store = Store(tmp_path / "s").open()
    store.commit_result({"z.npy": b"0", "a.json": b"{}"})
    store.verify()
    (store.result / "extra.bin").write_bytes(b"x")
    with pytest.raises(IntegrityError, match=r"lists 2 file\(s\) where the result holds 3"):
        store.verify()
    (store.result / "extra.bin").unlink()
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"0")
    (store.result / "z.npy").unlink()
    (store.result / "z.npy").symlink_to(outside)
    with pytest.raises(IntegrityError, match="symlink or not a regular file"):
        store.read_result("z.npy")
    with pytest.raises(IntegrityError):
        store.verify()
    manifest = store.result / MANIFEST
    for text in ('{"sha256": {}}', "[" * 100_000 + "]" * 100_000, ""):
        manifest.write_text(text)
        with pytest.raises(IntegrityError, match="manifest"):
            store.verify()


def test_a_flipped_byte_in_a_committed_bundle_is_named(tmp_path, rng):
    arrays = {"data": rng.standard_normal((5, 3)), "labels": np.arange(5, dtype="<i8")}
    spec = bundle_spec("f", "i-gdp", arrays, digests=True)
    path = tmp_path / "p0.bundle"
    receive_bundle(path, BundleStream(spec, iter([b"".join(
        np.ascontiguousarray(a).tobytes() for a in arrays.values())])))
    assert verify_bundle(path, root=path.parent) == spec
    raw = bytearray(path.read_bytes())
    raw[-45] ^= 0x10  # inside 'data'
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=r"p0\.bundle: array 'data' does not match"):
        read_bundle(path, root=path.parent)
    path.write_bytes(bytes(raw) + b"x")
    with pytest.raises(IntegrityError, match=r"p0\.bundle"):
        verify_bundle(path, root=path.parent)


PUBLIC = {"federation_id": "fed-1", "participants": ["a", "b"], "method": "aa-igdp",
          "deadline": "2030-01-01T00:00:00+00:00"}


def test_a_store_refuses_another_federation_or_protocol_and_keeps_its_own(tmp_path):
    Store(tmp_path / "s").open(PUBLIC)
    assert json.loads((tmp_path / "s" / IDENTITY_FILE).read_text())["federation_id"] == "fed-1"
    # The deadline may move (an operator extends it and restarts); nothing else may.
    Store(tmp_path / "s").open(PUBLIC | {"deadline": "2031-01-01T00:00:00+00:00"})
    with pytest.raises(ConfigError, match="belongs to another federation: federation 'fed-1'"):
        Store(tmp_path / "s").open(PUBLIC | {"federation_id": "fed-2"})
    with pytest.raises(ConfigError, match="another protocol configuration"):
        Store(tmp_path / "s").open(PUBLIC | {"participants": ["a", "b", "c"]})


def test_a_store_without_identity_is_adopted_only_from_its_matching_description(tmp_path):
    old = Store(tmp_path / "old").open()
    atomic_write(old.uploads / "a.bundle", b"x")
    with pytest.raises(ConfigError, match=r"no store\.json"):
        Store(tmp_path / "old").open(PUBLIC)
    (tmp_path / "old" / FEDERATION_FILE).write_text(json.dumps(PUBLIC | {"method": "i-gdp"}))
    with pytest.raises(ConfigError, match="another protocol configuration"):
        Store(tmp_path / "old").open(PUBLIC)
    (tmp_path / "old" / FEDERATION_FILE).write_text(json.dumps(PUBLIC))
    Store(tmp_path / "old").open(PUBLIC)
    assert (tmp_path / "old" / IDENTITY_FILE).is_file()


def test_a_second_process_cannot_open_a_held_store_and_is_told_the_holders_pid(tmp_path):
    Store(tmp_path).open(PUBLIC)
    Store(tmp_path).open(PUBLIC)  # this process again: allowed
    code = ("import sys; from noisyanchor.analyst.storage import Store\n"
            "try:\n    Store(sys.argv[1]).open()\nexcept Exception as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=60).stdout
    assert f"in use by another analyst (PID {os.getpid()} holds" in out


def test_a_result_file_given_as_a_path_is_moved_in_and_verified(tmp_path):
    """Issue 31: Z is written into a scratch file of the store and moved into the result
    (hashed in chunks, never read whole); it is then verified like every other result file."""
    store = Store(tmp_path).open()
    z = np.arange(12.0).reshape(4, 3)
    scratch = store.scratch_file("z.npy")
    assert scratch.parent == store.root and scratch.name.startswith(".tmp-z.npy.")
    with open(scratch, "wb") as fh:  # np.save would add a suffix to the name
        np.save(fh, z)
    store.commit_result({"z.npy": scratch, "a.json": b"{}"})
    assert not scratch.exists()
    assert stat.S_IMODE((store.result / "z.npy").stat().st_mode) == 0o600
    np.testing.assert_array_equal(store.result_array("z.npy"), z)
    store.verify()


def _rewrite_with_digests(path, arrays):
    """``path`` (a committed bundle) holding ``arrays`` instead, its header's digests
    recomputed: what someone who can write the store could do."""
    spec, offset = storage.read_bundle_spec(path, root=path.parent)
    blobs = [np.ascontiguousarray(a).tobytes() for a in arrays.values()]
    digests = [hashlib.sha256(blob).digest() for blob in blobs]
    body = b"".join(blobs)
    header = PROTO_HEADERS.header_bytes(spec.with_digests(digests))
    raw = path.read_bytes()
    path.write_bytes(raw[:len(storage.MAGIC) + 8] + header + body)
    assert len(header) == offset - len(storage.MAGIC) - 8


def test_nan_written_into_a_stored_upload_with_its_digests_is_refused_at_start(tmp_path, arrays):
    store = Store(tmp_path / "s").open()
    spec = bundle_spec("f", "i-gdp", arrays)
    receive_bundle(store.upload_path("p0"), BundleStream(spec, iter_chunks(arrays)))
    bad = arrays | {"data": arrays["data"].copy()}
    bad["data"][39, 5] = np.nan
    _rewrite_with_digests(store.upload_path("p0"), bad)
    with pytest.raises(IntegrityError, match=r"p0\.bundle: array 'data' contains NaN or Inf"):
        store.verify()
    with pytest.raises(IntegrityError, match="NaN or Inf"):
        read_bundle(store.upload_path("p0"), root=store.root)


def test_nan_in_a_result_array_is_refused_naming_it(tmp_path):
    store = Store(tmp_path / "s").open()
    store.commit_result({"rotations.npy": npy_bytes(np.full((2, 3, 3), np.inf))})
    with pytest.raises(InvalidInputError, match=r"rotations\.npy holds NaN or Inf"):
        store.result_array("rotations.npy")


def test_a_symlink_anywhere_in_the_store_pointing_outside_is_refused(tmp_path, arrays):
    store = Store(tmp_path / "s").open()
    spec = bundle_spec("f", "i-gdp", arrays)
    receive_bundle(tmp_path / "outside.bundle", BundleStream(spec, iter_chunks(arrays)))
    store.upload_path("p0").symlink_to(tmp_path / "outside.bundle")
    with pytest.raises(IntegrityError, match=r"symlink.*p0\.bundle"):
        Store(tmp_path / "s").open()
    with pytest.raises(IntegrityError, match="symlink"):
        read_bundle(store.upload_path("p0"), root=store.root)
    with pytest.raises(IntegrityError, match="symlink"):
        store.check_private()  # status, deadline and attack check the store too
    store.upload_path("p0").unlink()
    (store.root / "relay" / "keys").rmdir()
    (store.root / "relay" / "keys").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(IntegrityError, match="symlink"):
        store.read(store.keys / "outside.bundle")
    (store.root / "relay" / "keys").unlink()


def test_a_store_open_to_others_is_narrowed_with_a_warning_at_every_command(tmp_path, caplog):
    store = Store(tmp_path / "s").open()
    store.commit_result({"a.npy": npy_bytes(np.zeros(2))})
    (store.root).chmod(0o777)
    store.uploads.chmod(0o777)
    (store.result / "a.npy").chmod(0o644)
    with caplog.at_level("WARNING"):
        store.check_private()
    modes = [stat.S_IMODE(p.stat().st_mode) for p in (store.root, store.uploads,
                                                      store.result / "a.npy")]
    assert modes == [0o700, 0o700, 0o600]
    assert caplog.text.count("narrowed to") == 3
