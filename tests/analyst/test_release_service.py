"""The release service's geometry: collection rows and mapped queries are unit vectors whose
inner products are the working records' cosines; wire decoding, top-k and the [privacy] config."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from noisyanchor.analyst.config import DEFAULT_LEDGER_NAME, ReleaseLimits, load_analyst_config
from noisyanchor.analyst.release_service import (
    checked_identities,
    collection_rows,
    decode_record,
    query_direction,
    top_k,
    unit_rows,
)
from noisyanchor.common.alignment import align
from noisyanchor.common.errors import ConfigError, InvalidInputError, PreconditionError
from noisyanchor.common.gdp import gdp_map, make_anchor, sample_key
from noisyanchor.common.methods import make_upload
from noisyanchor.common.wire import ArraySpec, array_header
from noisyanchor.deploy.launch import write_toml

P, N, D, R = 3, 20, 5, 12


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Plain cosine matrix of the rows of ``a`` and ``b``."""
    return (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (
        b / np.linalg.norm(b, axis=1, keepdims=True)).T


def federation(rng, method: str, v: float = 0.0):
    """Records ``X_i``, keys, and the analyst's alignment of the uploads."""
    anchor = make_anchor(R, D, rng)
    xs = [rng.standard_normal((N, D)) + rng.standard_normal(D) for _ in range(P)]
    keys = [sample_key(D, rng) for _ in range(P)]
    ups = [make_upload(method, x, k, anchor=anchor, v=v, rng=rng)[0] for x, k in zip(xs, keys,
                                                                                     strict=True)]
    return xs, keys, align(method, [u.data for u in ups], [u.anchor for u in ups])


def test_scores_equal_cosines_of_the_working_records_with_noiseless_anchors(rng):
    xs, keys, al = federation(rng, "aa-igdp")
    e = collection_rows(al.z, al.shift)
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-12)
    x_all = np.vstack(xs)
    for i in range(P):
        query = rng.standard_normal((1, D))
        q = query_direction(gdp_map(query, keys[i])[0], al.rotations[i], al.means[i])
        assert abs(np.linalg.norm(q) - 1.0) <= 1e-12
        # Procrustes is exact without noise: Z - c = X O_s, N_i(t) - c = x O_s (rounding 1e-9)
        np.testing.assert_allclose(e @ q, cosines(x_all, query)[:, 0], atol=1e-9)


def test_scores_stay_close_to_the_record_cosines_under_small_anchor_noise(rng):
    xs, keys, al = federation(rng, "aa-igdp-an", v=1e-3)
    e = collection_rows(al.z, al.shift)
    query = rng.standard_normal((1, D))
    q = query_direction(gdp_map(query, keys[1])[0], al.rotations[1], al.means[1])
    err = np.abs(e @ q - cosines(np.vstack(xs), query)[:, 0]).max()
    assert err < 0.05  # GOPP's residual rotation/translation at v = 1e-3, r = 12: well below 0.05


def test_translation_dominates_cosines_if_the_shift_is_not_removed(rng):
    # Why the shift c matters: Z itself carries the secret translation Psi_s (scale 100).
    xs, _, al = federation(rng, "aa-igdp")
    raw = unit_rows(al.z, "Z")
    assert (raw @ raw.T).min() > 0.9  # every raw pair looks alike
    assert (cosines(np.vstack(xs), np.vstack(xs))).min() < 0.0  # the records do not


def test_unit_rows_refuses_a_row_on_the_origin():
    with pytest.raises(PreconditionError, match="1 row"):
        unit_rows(np.array([[1.0, 0.0], [0.0, 0.0]]), "E")


def _header(t: np.ndarray):
    return array_header(ArraySpec.of("record", t))


def test_decode_record_returns_the_row():
    t = np.arange(4.0)
    np.testing.assert_array_equal(decode_record(_header(t), t.tobytes(), 4), t)


@pytest.mark.parametrize("t, data, match", [
    (np.arange(3.0), None, r"shape \(4,\)"),
    (np.arange(4, dtype="<f4"), None, "'<f8'"),
    (np.arange(4.0), np.arange(4.0)[::-1].tobytes(), "SHA-256"),
    (np.arange(4.0), np.arange(4.0).tobytes()[:-8], "carries 24 bytes, its header declares 32"),
    (np.array([0.0, np.nan, 1.0, 2.0]), None, "NaN"),
])
def test_decode_record_refuses_malformed_queries(t, data, match):
    with pytest.raises(InvalidInputError, match=match):
        decode_record(_header(t), t.tobytes() if data is None else data, 4)


def test_decode_record_refuses_a_header_whose_digest_was_altered():
    t = np.ones(4)
    header = _header(t)
    header.sha256 = hashlib.sha256(b"other").digest()
    with pytest.raises(InvalidInputError, match="SHA-256"):
        decode_record(header, t.tobytes(), 4)


def test_top_k_returns_the_highest_noisy_scores_first():
    noisy = np.array([0.2, 1.7, -3.0, 1.2, 0.9])
    np.testing.assert_array_equal(top_k(noisy, 3), [1, 3, 4])
    released = np.clip(noisy, -1, 1)[top_k(noisy, 5)]
    assert np.all(np.diff(released) <= 0)  # non-increasing after the clip too


def _analyst_toml(tmp_path, privacy: dict | None, release: dict | None = None):
    from noisyanchor.deploy.certs import write_pki

    pki = write_pki(tmp_path / "pki", ["a", "b"])
    tables = {"federation": {"id": "f", "participants": ["a", "b"], "method": "aa-igdp"},
              "server": {"output_dir": tmp_path / "store"},
              "tls": {"ca": pki.ca, "cert": pki.server_cert, "key": pki.server_key}}
    if privacy is not None:
        tables["privacy"] = privacy
    if release is not None:
        tables["release"] = release
    return write_toml(tmp_path / "analyst.toml", tables)


def test_privacy_table_is_optional_and_the_ledger_defaults_under_the_store(tmp_path):
    cfg = load_analyst_config(_analyst_toml(tmp_path, None))
    assert cfg.privacy is None
    cfg = load_analyst_config(_analyst_toml(tmp_path, {"epsilon_budget": 3,
                                                       "delta_budget": 1e-6}))
    assert (cfg.privacy.epsilon_budget, cfg.privacy.delta_budget) == (3.0, 1e-6)
    assert cfg.ledger_path == (tmp_path / "store").resolve() / DEFAULT_LEDGER_NAME
    moved = cfg.with_overrides(output_dir=tmp_path / "elsewhere")
    assert moved.ledger_path == tmp_path / "elsewhere" / DEFAULT_LEDGER_NAME


@pytest.mark.parametrize("privacy, match", [
    ({"epsilon_budget": 0, "delta_budget": 1e-5}, r"\[privacy\] epsilon_budget"),
    ({"epsilon_budget": 1, "delta_budget": 1.0}, r"\[privacy\] delta_budget"),
    ({"delta_budget": 1e-5}, r"\[privacy\] epsilon_budget is required"),
    ({"epsilon_budget": 1, "delta_budget": 1e-5, "budget": 2}, r"unknown key\(s\) budget"),
])
def test_privacy_config_errors_name_the_key(tmp_path, privacy, match):
    with pytest.raises(ConfigError, match=match):
        load_analyst_config(_analyst_toml(tmp_path, privacy))


def test_release_limits_default_and_read_from_the_release_table(tmp_path):
    budget = {"epsilon_budget": 3, "delta_budget": 1e-6, "participant_epsilon_budget": 2,
              "participant_max_releases": 50}
    cfg = load_analyst_config(_analyst_toml(tmp_path, budget))
    assert cfg.release == ReleaseLimits()
    assert (cfg.privacy.participant_epsilon_budget, cfg.privacy.participant_max_releases) == (
        2.0, 50)
    limits = {"min_epsilon": 0.5, "send_timeout": 2, "max_concurrent": 2,
              "max_queued_per_participant": 1, "max_memory_bytes": 1 << 30,
              "max_kept_bytes_per_participant": 1 << 25}
    cfg = load_analyst_config(_analyst_toml(tmp_path, budget, limits))
    assert cfg.release == ReleaseLimits(0.5, 2.0, 2, 1, 1 << 30, 1 << 25)


@pytest.mark.parametrize("privacy, release, match", [
    ({"participant_epsilon_budget": 5}, None, r"\[privacy\] participant_epsilon_budget: must "
     r"be <= epsilon_budget"),
    ({"participant_epsilon_budget": 0}, None, r"\[privacy\] participant_epsilon_budget"),
    ({"participant_max_releases": 0}, None, r"\[privacy\] participant_max_releases"),
    ({}, {"min_epsilon": 0}, r"\[release\] min_epsilon"),
    ({}, {"min_epsilon": 4}, r"\[release\] min_epsilon = 4 exceeds \[privacy\] epsilon_budget"),
    ({}, {"send_timeout": -1}, r"\[release\] send_timeout"),
    ({}, {"max_concurrent": 0}, r"\[release\] max_concurrent"),
    ({}, {"max_queued_per_participant": 0}, r"\[release\] max_queued_per_participant"),
    ({}, {"max_memory_bytes": 10}, r"\[release\] max_memory_bytes"),
    ({}, {"max_kept_bytes_per_participant": "big"}, r"\[release\] max_kept_bytes_per_participant"),
    ({}, {"timeout": 3}, r"\[release\] has unknown key\(s\) timeout"),
])
def test_release_config_errors_name_the_key(tmp_path, privacy, release, match):
    budget = {"epsilon_budget": 3, "delta_budget": 1e-6, **privacy}
    with pytest.raises(ConfigError, match=match):
        load_analyst_config(_analyst_toml(tmp_path, budget, release))


# --- the identity column of identity-level releases (issue 26) --------------------------------

def test_identity_column_needs_its_public_bound(tmp_path):
    budget = {"epsilon_budget": 3, "delta_budget": 1e-6}
    with pytest.raises(ConfigError, match=r"\[release\] max_records_per_identity: identity-"):
        load_analyst_config(_analyst_toml(tmp_path, budget, {"identities": "ids.txt"}))
    with pytest.raises(ConfigError, match=r"\[release\] identities: identity-level"):
        load_analyst_config(_analyst_toml(tmp_path, budget, {"max_records_per_identity": 2}))
    cfg = load_analyst_config(_analyst_toml(tmp_path, budget, {
        "identities": "ids.txt", "max_records_per_identity": 2}))
    assert cfg.release.identities == (tmp_path / "ids.txt").resolve()
    assert cfg.release.max_records_per_identity == 2


@pytest.mark.parametrize("suffix", [".txt", ".npy"])
def test_identity_column_is_checked_against_n_and_its_bound(tmp_path, suffix):
    labels = np.array(["ann", "ann", "bob", "cy", "cy", "cy"])
    path = tmp_path / f"ids{suffix}"
    if suffix == ".npy":
        np.save(path, labels)
    else:
        path.write_text("\n".join(labels) + "\n")
    ok = ReleaseLimits(identities=path, max_records_per_identity=3)
    got, why = checked_identities(ok, 6)
    assert why == "" and got.tolist() == labels.tolist()
    got, why = checked_identities(ok, 7)
    assert got is None and "6 labels for the 7 records" in why
    got, why = checked_identities(ReleaseLimits(identities=path, max_records_per_identity=2), 6)
    assert got is None and "'cy' has 3 records, above the public bound" in why
    missing = ReleaseLimits(identities=tmp_path / "none.txt", max_records_per_identity=2)
    assert checked_identities(missing, 6)[0] is None
    assert checked_identities(ReleaseLimits(), 6) == (None, "")
