"""Attack claims (SPEC.md section 3): exact recovery without noise, leakage with it."""

import numpy as np
import pytest

from noisyanchor.common.alignment import align
from noisyanchor.common.attacks import (
    ATTACK_NAMES,
    Disclosure,
    known_anchor_attack,
    known_secret_attack,
    relative_error,
    run_attacks,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.methods import Method, make_upload


def _aa_run(rng, method="aa-igdp", v=0.0, p=4, d=5, r=20, n=15):
    anchor = make_anchor(r, d, rng)
    keys = [sample_key(d, rng) for _ in range(p)]
    xs = [rng.standard_normal((n, d)) for _ in range(p)]
    pairs = [make_upload(method, x, k, anchor=anchor, v=v, rng=rng)
             for x, k in zip(xs, keys, strict=True)]
    ups = [u for u, _ in pairs]
    res = align(method, [u.data for u in ups], [u.anchor for u in ups])
    disclosure = Disclosure(0, xs[0], keys[0], anchor)
    return xs, ups, res, disclosure


def test_known_anchor_attack_is_exact_without_noise(rng):
    """Proposition 3.1: exact recovery to 1e-9 relative, with noiseless anchors."""
    xs, ups, _, disclosure = _aa_run(rng)
    for i in range(1, 4):
        x_hat = known_anchor_attack(ups[i].data, ups[i].anchor, disclosure.anchor)
        assert relative_error(x_hat, xs[i]) < 1e-9


def test_every_anchor_attack_is_exact_without_noise_and_skips_the_colluder(rng):
    xs, ups, res, disclosure = _aa_run(rng)
    out = run_attacks("aa-igdp", disclosure, [u.data for u in ups], [u.anchor for u in ups],
                      res.rotations)
    assert set(out) == {"known_anchor", "mp", "op", "am"}
    for per_target in out.values():
        assert set(per_target) == {1, 2, 3}
        for i, x_hat in per_target.items():
            assert relative_error(x_hat, xs[i]) < 1e-9


def test_anchor_noise_degrades_every_attack(rng):
    xs, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.2)
    out = run_attacks("aa-igdp-an", disclosure, [u.data for u in ups],
                      [u.anchor for u in ups], res.rotations)
    for name, per_target in out.items():
        errors = [relative_error(x_hat, xs[i]) for i, x_hat in per_target.items()]
        assert min(errors) > 1e-3, name  # noise leaves a visible error


def test_known_secret_inverts_c_gdp_exactly(rng):
    key = sample_key(4, rng)
    x = rng.standard_normal((6, 4))
    y = make_upload("c-gdp", x, key)[0].data
    assert relative_error(known_secret_attack(y, key), x) < 1e-12


def test_attack_names_per_method_are_the_pinned_ones():
    assert ATTACK_NAMES == ("known_secret", "known_anchor", "mp", "op", "am")
    assert Method.I_GDP.attacks == ()
    assert Method.C_GDP_PN.attacks == ("known_secret",)
    assert Method.AA_IGDP_AN.attacks == ("known_anchor", "mp", "op", "am")


def test_attacks_reject_bad_input(rng):
    anchor = make_anchor(10, 3, rng)
    with pytest.raises(InvalidInputError, match="rows"):
        known_anchor_attack(np.ones((4, 3)), np.ones((9, 3)), anchor)
    with pytest.raises(InvalidInputError, match="NaN"):
        known_anchor_attack(np.full((4, 3), np.inf), anchor, anchor)
    with pytest.raises(InvalidInputError, match="colluder index"):
        run_attacks("c-gdp", Disclosure(5, np.ones((2, 3)), sample_key(3, rng)),
                    [np.ones((2, 3))] * 2)
    with pytest.raises(InvalidInputError, match="shape"):
        relative_error(np.ones((2, 2)), np.ones((2, 3)))
