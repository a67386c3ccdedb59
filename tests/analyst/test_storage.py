"""Atomic commits of streamed bundles and the store's crash sweep."""

import numpy as np
import pytest

from noisyanchor.analyst import storage
from noisyanchor.analyst.storage import Store, read_bundle, receive_bundle
from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.files import atomic_write, sweep_stale_writes
from noisyanchor.common.wire import BundleStream, bundle_spec, iter_chunks


@pytest.fixture
def arrays(rng):
    return {"data": rng.standard_normal((40, 6)), "labels": np.arange(40, dtype="<i8")}


def test_received_bundle_reads_back_bit_for_bit(tmp_path, arrays):
    spec = bundle_spec("f", "i-gdp", arrays)
    receive_bundle(tmp_path / "a.bundle", BundleStream(spec, iter_chunks(arrays, chunk_size=97)))
    back_spec, back = read_bundle(tmp_path / "a.bundle")
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
    monkeypatch.setattr(storage, "WRITEBACK_BYTES", writeback)
    spec, stream = _trailer_stream(arrays)
    assert receive_bundle(tmp_path / "a.bundle", stream) == spec
    back_spec, back = read_bundle(tmp_path / "a.bundle")
    assert back_spec == spec and back_spec.receipt("p0") == spec.receipt("p0")
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
    assert len(pulled) <= storage._AHEAD + 2 < data.nbytes // 4096
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
    assert sorted(p.name for p in store.result.iterdir()) == ["a.json", "z.npy"]
    with pytest.raises(InvalidInputError, match="separator"):
        Store(tmp_path / "other").open().commit_result({"../x": b""})
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "other").iterdir())
