"""Plug-in attacks registered through the ``noisyanchor.attacks`` entry-point group."""

import numpy as np
import pytest

from noisyanchor.common.attacks import Disclosure, available_attacks, run_attacks
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.methods import make_upload


def _uploads(rng, method, p=3, n=8, d=4, r=12):
    anchor = make_anchor(r, d, rng)
    keys = [sample_key(d, rng) for _ in range(p)]
    xs = [rng.standard_normal((n, d)) for _ in range(p)]
    ups = [make_upload(method, x, keys[0] if method.startswith("c-") else k, anchor=anchor)[0]
           for x, k in zip(xs, keys, strict=True)]
    return Disclosure(0, xs[0], keys[0], anchor), ups


def test_a_registered_attack_runs_beside_the_built_in_ones(rng, toy_plugins):
    attacks = available_attacks()
    assert "toy_centred" in attacks and not attacks["toy_centred"].paper
    assert attacks["toy_centred"].description.startswith("The target's upload centred")
    disclosure, ups = _uploads(rng, "aa-igdp")
    out = run_attacks("aa-igdp", disclosure, [u.data for u in ups], [u.anchor for u in ups])
    assert set(out["toy_centred"]) == {1, 2}
    np.testing.assert_allclose(out["toy_centred"][1], ups[1].data - ups[1].data.mean(axis=0))
    disclosure, ups = _uploads(rng, "c-gdp")
    assert "toy_centred" not in run_attacks("c-gdp", disclosure, [u.data for u in ups])


@pytest.mark.parametrize(("line", "message"), [
    ("broken = no_such_module_here:attack", "cannot be loaded"),
    ("op = toy_noisyanchor_plugins:centred_upload", "already taken"),
    ("bad/name = toy_noisyanchor_plugins:centred_upload", "names must start"),
])
def test_a_bad_plug_in_is_refused_by_name(tmp_path, monkeypatch, write_plugin, line, message):
    write_plugin(tmp_path, f"[noisyanchor.attacks]\n{line}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidInputError, match=message):
        available_attacks()


def test_a_plug_in_returning_the_wrong_shape_is_refused(tmp_path, monkeypatch, rng,
                                                        write_plugin):
    module = "def wrong(view, target):\n    return view.data[target][:, :1]\n"
    write_plugin(tmp_path, "[noisyanchor.attacks]\nwrong = wrong_shape_plugin:wrong\n",
                         module=module, name="wrong_shape_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    disclosure, ups = _uploads(rng, "aa-igdp")
    with pytest.raises(InvalidInputError, match="attack 'wrong' returned shape"):
        run_attacks("aa-igdp", disclosure, [u.data for u in ups], [u.anchor for u in ups])
