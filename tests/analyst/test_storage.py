"""Atomic commits of streamed bundles and the store's crash sweep."""

import numpy as np
import pytest

from noisyanchor.analyst.storage import Store, read_bundle, receive_bundle
from noisyanchor.common.errors import IntegrityError, InvalidInputError
from noisyanchor.common.files import atomic_write, sweep_stale_writes
from noisyanchor.common.wire import bundle_spec, iter_chunks


@pytest.fixture
def arrays(rng):
    return {"data": rng.standard_normal((40, 6)), "labels": np.arange(40, dtype="<i8")}


def test_received_bundle_reads_back_bit_for_bit(tmp_path, arrays):
    spec = bundle_spec("f", "i-gdp", arrays)
    receive_bundle(tmp_path / "a.bundle", spec, iter_chunks(arrays, chunk_size=97))
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
        receive_bundle(tmp_path / "a.bundle", spec, [damage(b"".join(iter_chunks(arrays)))])
    assert list(tmp_path.iterdir()) == []


def test_non_finite_values_and_refused_content_commit_nothing(tmp_path, arrays):
    bad = arrays | {"data": np.full((40, 6), np.inf)}
    with pytest.raises(InvalidInputError, match="NaN or Inf"):
        receive_bundle(tmp_path / "a.bundle", bundle_spec("f", "i-gdp", bad), iter_chunks(bad))

    def refuse(got):
        raise InvalidInputError("no")

    with pytest.raises(InvalidInputError, match="no"):
        receive_bundle(tmp_path / "a.bundle", bundle_spec("f", "i-gdp", arrays),
                       iter_chunks(arrays), refuse)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("chunk_size", [3, 8, 13, 1 << 20])
def test_nan_is_found_wherever_chunk_boundaries_split_the_elements(tmp_path, arrays, chunk_size):
    bad = arrays | {"data": arrays["data"].copy()}
    bad["data"][17, 4] = np.nan
    with pytest.raises(InvalidInputError, match="'data' contains NaN"):
        receive_bundle(tmp_path / "a.bundle", bundle_spec("f", "i-gdp", bad),
                       iter_chunks(bad, chunk_size=chunk_size))
    assert list(tmp_path.iterdir()) == []
    receive_bundle(tmp_path / "a.bundle", bundle_spec("f", "i-gdp", arrays),
                   iter_chunks(arrays, chunk_size=chunk_size))


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
