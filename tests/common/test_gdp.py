import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import (
    anchor_from_seed,
    decode,
    gaussian_projection,
    gdp_map,
    haar_orthogonal,
    key_from_seed,
    make_anchor,
    pool_projection,
    sample_key,
)


def test_haar_orthogonal_is_orthogonal_and_varies_in_sign(rng):
    dets = []
    for _ in range(40):
        o = haar_orthogonal(6, rng)
        np.testing.assert_allclose(o.T @ o, np.eye(6), atol=1e-12)  # O^T O = I to 1e-12
        dets.append(np.sign(np.linalg.det(o)))
    # Haar on O(d), not SO(d): both determinants occur (P[all 40 equal] = 2^-39).
    assert set(dets) == {-1.0, 1.0}


def test_anchor_is_centered_with_orthonormal_columns(rng):
    a = make_anchor(30, 7, rng)
    np.testing.assert_allclose(a.sum(axis=0), 0.0, atol=1e-12)  # 1^T A = 0
    np.testing.assert_allclose(a.T @ a, np.eye(7), atol=1e-12)  # A^T A = I_d


def test_anchor_requires_r_at_least_d_plus_one(rng):
    with pytest.raises(InvalidInputError, match="r >= d \\+ 1"):
        make_anchor(7, 7, rng)


def test_seeded_anchor_and_common_key_are_deterministic_and_distinct_streams():
    seed = bytes(range(32))
    np.testing.assert_array_equal(anchor_from_seed(seed, 12, 3), anchor_from_seed(seed, 12, 3))
    assert not np.allclose(anchor_from_seed(seed, 12, 3), anchor_from_seed(seed[::-1], 12, 3))
    k1, k2 = key_from_seed(seed, 3), key_from_seed(seed, 3)
    np.testing.assert_array_equal(k1.rotation, k2.rotation)
    with pytest.raises(InvalidInputError, match="16 bytes"):
        anchor_from_seed(b"short", 12, 3)


def test_gdp_map_is_rotation_plus_translation(rng):
    key = sample_key(4, rng)
    s = rng.standard_normal((5, 4))
    np.testing.assert_allclose(gdp_map(s, key), s @ key.rotation + key.translation)
    with pytest.raises(InvalidInputError, match="columns"):
        gdp_map(rng.standard_normal((5, 3)), key)
    with pytest.raises(InvalidInputError, match="NaN"):
        gdp_map(np.full((2, 4), np.nan), key)


def test_pool_projection_has_orthonormal_columns_and_decodes_onto_its_span(rng):
    pool = rng.standard_normal((50, 12))
    f = pool_projection(pool, 5)
    np.testing.assert_allclose(f.T @ f, np.eye(5), atol=1e-12)  # F^T F = I_h
    x = rng.standard_normal((3, 12))
    # Projection-only floor: decode(X F) = X F F^+ is the orthogonal projection onto span(F).
    np.testing.assert_allclose(decode(x @ f, f), x @ f @ f.T, atol=1e-12)
    assert gaussian_projection(12, 5, rng).shape == (12, 5)
    with pytest.raises(InvalidInputError, match="exceeds"):
        pool_projection(pool, 13)
