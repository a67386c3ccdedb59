"""Attacks that use what every upload leaks in the clear: the known-input locator restricted by
label, and distance matching of a candidate pool under anchor noise (exact distances)."""

import numpy as np
import pytest

from noisyanchor.common.analyst_attacks import distance_match_attack, locate_known_records
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import haar_orthogonal, sample_key
from noisyanchor.common.methods import make_upload


def _decoy(known: np.ndarray, offset: float, rng: np.random.Generator) -> np.ndarray:
    """Points whose squared distances are exactly ``D_K + offset`` off the diagonal (classical
    MDS of that matrix; adding a constant off the diagonal keeps it Euclidean)."""
    m, d = known.shape
    sq = np.sum(known**2, axis=1)
    dk = sq[:, None] + sq[None, :] - 2 * known @ known.T + offset * (1 - np.eye(m))
    j = np.eye(m) - 1 / m
    w, v = np.linalg.eigh(-0.5 * j @ dk @ j)
    pts = v * np.sqrt(np.clip(w, 0, None))  # (m, m), rank <= m - 1
    out = np.zeros((m, d))
    out[:, :m - 1] = pts[:, 1:]  # the smallest eigenvalue is 0 (the centring direction)
    return out @ haar_orthogonal(d, rng) + rng.standard_normal(d)


def test_label_restriction_finds_the_rows_a_decoy_of_another_label_fools(rng):
    """Under private-data noise, rows of another label whose distances fit the known records'
    exactly (the expected offset 2 d sigma^2 included) outscore the true, noisy rows: the
    unrestricted locator takes the decoy, the restricted one the true rows."""
    d, n, m, sigma = 6, 40, 4, 0.3
    x = rng.standard_normal((n, d)) * 3
    labels = np.repeat([0, 1], n // 2)
    up, _ = make_upload("c-gdp-pn", x, sample_key(d, rng), sigma=sigma, rng=rng)
    y = up.data.copy()
    known_rows = np.array([3, 11, 7, 0])  # label 0
    y[n // 2:n // 2 + m] = _decoy(x[known_rows], 2 * d * sigma**2, rng)  # label 1
    plain = locate_known_records(y, x[known_rows], data_noise=sigma)
    np.testing.assert_array_equal(plain.rows, np.arange(n // 2, n // 2 + m))
    by_label = locate_known_records(y, x[known_rows], data_noise=sigma, labels=labels,
                                    known_labels=np.zeros(m, dtype=int))
    np.testing.assert_array_equal(by_label.rows, known_rows)


def test_label_restriction_needs_both_label_lists_of_the_right_length(rng):
    y, k = rng.standard_normal((6, 2)), rng.standard_normal((2, 2))
    with pytest.raises(InvalidInputError, match="both"):
        locate_known_records(y, k, labels=np.zeros(6))
    with pytest.raises(InvalidInputError, match="for 6 upload rows"):
        locate_known_records(y, k, labels=np.zeros(5), known_labels=np.zeros(2))


def test_distance_matching_places_every_member_and_no_outsider_then_gives_the_exact_key(rng):
    """Anchor noise leaves the data upload noiseless: with only 2 known records (d = 6), a pool
    of 12 of the target's other records and 12 outsiders is split exactly by distances alone
    (members at their rows, outsiders unplaced, scores apart by many orders), and the 14 placed
    records give O and Psi to 1e-8."""
    d, n = 6, 40
    x = rng.standard_normal((n, d)) * 2
    outsiders = rng.standard_normal((12, d)) * 2
    key = sample_key(d, rng)
    up, _ = make_upload("c-gdp", x, key, rng=rng)
    members = rng.permutation(np.arange(2, n))[:12]
    pool = np.vstack([x[members], outsiders])
    res = distance_match_attack(up.data, x[:2], pool)
    np.testing.assert_array_equal(res.known.rows, [0, 1])
    np.testing.assert_array_equal(res.rows, np.concatenate([members, np.full(12, -1)]))
    assert res.scores[:12].max() < 1e-6 * res.threshold < res.threshold < res.scores[12:].min()
    assert res.decoded.rank == d
    np.testing.assert_allclose(res.decoded.rotation, key.rotation, atol=1e-8)
    np.testing.assert_allclose(res.decoded.translation, key.translation, atol=1e-6)
    np.testing.assert_allclose(res.decoded.reconstruction, x, atol=1e-6)


def test_distance_matching_keeps_to_labels_when_given(rng):
    """A member whose label is withheld from its row (given another label) is not placed."""
    d, n = 4, 20
    x = rng.standard_normal((n, d))
    up, _ = make_upload("c-gdp", x, sample_key(d, rng), rng=rng)
    labels = np.arange(n) % 2
    pool = x[[5, 6]]
    res = distance_match_attack(up.data, x[:3], pool, labels=labels, known_labels=labels[:3],
                                candidate_labels=np.array([labels[5], 1 - labels[6]]))
    np.testing.assert_array_equal(res.rows, [5, -1])


def test_spectral_filter_changes_nothing_without_noise_and_removes_noise_off_the_records_span(
        rng):
    """sigma = 0: Y~ = Y. Records on a 2-dimensional subspace of d = 10 with private-data noise:
    the filter keeps the 2 directions and leaves about 2/10 of the noise's energy (bound 0.3)."""
    from noisyanchor.common.analyst_attacks import spectral_filter

    d, n, sigma = 10, 400, 0.5
    full = rng.standard_normal((n, d)) * 3
    assert spectral_filter(full, 0.0).kept == d
    np.testing.assert_allclose(spectral_filter(full, 0.0).filtered, full, atol=1e-10)
    x = rng.standard_normal((n, 2)) @ rng.standard_normal((2, d)) * 3
    key = sample_key(d, rng)
    clean = x @ key.rotation + key.translation
    up, _ = make_upload("c-gdp-pn", x, key, sigma=sigma, rng=rng)
    filt = spectral_filter(up.data, sigma)
    assert filt.kept == 2
    raw = np.sum((up.data - clean) ** 2)
    assert np.sum((filt.filtered - clean) ** 2) < 0.3 * raw


def test_ica_decodes_independent_skewed_attributes_from_the_upload_alone(rng):
    """Independent exponential attributes of decreasing spread (the conventions the attack
    assumes), rotated and translated: FastICA gives the centred records back from Y alone, to
    the unmixing's estimation error (bound 0.1 relative at n = 4000), with unit directions
    close to the rows of O."""
    from noisyanchor.common.analyst_attacks import ica_attack

    d, n = 5, 4000
    x = rng.exponential(1.0, (n, d)) * np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    key = sample_key(d, rng)
    up, _ = make_upload("c-gdp", x, key, rng=rng)
    res = ica_attack(up.data, rng)
    xc = x - x.mean(axis=0)
    assert res.kept == d
    assert np.linalg.norm(res.reconstruction - xc) / np.linalg.norm(xc) < 0.1
    np.testing.assert_allclose(res.directions, key.rotation, atol=0.1)  # u_j = O^T e_j
