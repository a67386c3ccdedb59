import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.methods import Method, make_upload


@pytest.mark.parametrize("method", list(Method))
def test_upload_has_the_shapes_and_noise_of_table_1(method, rng):
    d, r, n = 4, 9, 6
    key = sample_key(d, rng)
    anchor = make_anchor(r, d, rng)
    x = rng.standard_normal((n, d))
    up, state = make_upload(method, x, key, anchor=anchor,
                            sigma=0.5 if method.data_noise else 0.0,
                            v=0.5 if method.anchor_noise else 0.0, rng=rng)
    clean = x @ key.rotation + key.translation
    assert up.data.shape == (n, d)
    if method.data_noise:
        np.testing.assert_allclose(up.data, clean + state.data_noise, atol=1e-12)
        assert np.abs(state.data_noise).max() > 0
    else:
        np.testing.assert_allclose(up.data, clean, atol=1e-12)
        assert state.data_noise is None
    if method.uses_anchor:
        anchor_clean = anchor @ key.rotation + key.translation
        noise = state.anchor_noise if method.anchor_noise else 0.0
        np.testing.assert_allclose(up.anchor, anchor_clean + noise, atol=1e-12)
    else:
        assert up.anchor is None


def test_make_upload_rejects_bad_input(rng):
    key = sample_key(3, rng)
    x = rng.standard_normal((5, 3))
    with pytest.raises(InvalidInputError, match="unknown method"):
        make_upload("x-gdp", x, key)
    with pytest.raises(InvalidInputError, match="needs the shared anchor"):
        make_upload("aa-igdp", x, key)
    with pytest.raises(InvalidInputError, match="r >= d \\+ 1"):
        make_upload("aa-igdp", x, key, anchor=rng.standard_normal((3, 3)))
    with pytest.raises(InvalidInputError, match="columns"):
        make_upload("c-gdp", rng.standard_normal((5, 2)), key)
    with pytest.raises(InvalidInputError, match="NaN"):
        make_upload("c-gdp", np.full((5, 3), np.nan), key)
    with pytest.raises(InvalidInputError, match="sigma"):
        make_upload("c-gdp-pn", x, key, sigma=-1.0)
    with pytest.raises(InvalidInputError, match="v > 0"):
        make_upload("aa-igdp", x, key, anchor=rng.standard_normal((5, 3)), v=0.1)
