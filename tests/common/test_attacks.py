"""Attack claims (SPEC.md section 3): exact recovery without noise, leakage with it, and the
corrected estimators' formulas."""

import numpy as np
import pytest

from noisyanchor.common.alignment import align
from noisyanchor.common.attacks import (
    ATTACK_NAMES,
    PAPER_ANCHOR_ATTACKS,
    AttackerView,
    Disclosure,
    attack_all,
    available_attacks,
    known_anchor_attack,
    known_secret_attack,
    relative_error,
    run_attacks,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.likelihood import RecordPrior, ml_transform
from noisyanchor.common.linalg import center_rows, polar_factor
from noisyanchor.common.methods import Method, make_upload
from noisyanchor.common.theory import polar_shrinkage

NEW_ATTACKS = ("op_scaled", "known_anchor_recentered", "ml")


def _aa_run(rng, method="aa-igdp", v=0.0, p=4, d=5, r=20, n=15, disclosed_v=True, xs=None):
    anchor = make_anchor(r, d, rng)
    keys = [sample_key(d, rng) for _ in range(p)]
    xs = [rng.standard_normal((n, d)) for _ in range(p)] if xs is None else xs
    pairs = [make_upload(method, x, k, anchor=anchor, v=v, rng=rng)
             for x, k in zip(xs, keys, strict=True)]
    ups = [u for u, _ in pairs]
    res = align(method, [u.data for u in ups], [u.anchor for u in ups])
    disclosure = Disclosure(0, xs[0], keys[0], anchor, v if disclosed_v else None)
    return xs, ups, res, disclosure


def _view(ups, res, disclosure, method="aa-igdp-an"):
    return AttackerView(method, disclosure, [u.data for u in ups], [u.anchor for u in ups],
                        res.rotations)


def test_known_anchor_attack_is_exact_without_noise(rng):
    """Proposition 3.1: exact recovery to 1e-9 relative, with noiseless anchors."""
    xs, ups, _, disclosure = _aa_run(rng)
    for i in range(1, 4):
        x_hat = known_anchor_attack(ups[i].data, ups[i].anchor, disclosure.anchor)
        assert relative_error(x_hat, xs[i]) < 1e-9


@pytest.mark.parametrize("disclosed_v", [True, False])
@pytest.mark.parametrize("method", ["aa-igdp", "aa-igdp-an"])
def test_every_anchor_attack_is_exact_without_noise_and_skips_the_colluder(rng, method,
                                                                           disclosed_v):
    """Every built-in anchor attack, the corrected ones included, recovers X_i to 1e-9 at
    v = 0, whether v is disclosed or estimated from the anchor residuals."""
    xs, ups, res, disclosure = _aa_run(rng, method=method, disclosed_v=disclosed_v)
    out = run_attacks(method, disclosure, [u.data for u in ups], [u.anchor for u in ups],
                      res.rotations)
    assert set(out) == set(Method(method).attacks) >= {"known_anchor", *PAPER_ANCHOR_ATTACKS,
                                                       *NEW_ATTACKS}
    for name, per_target in out.items():
        assert set(per_target) == {1, 2, 3}
        for i, x_hat in per_target.items():
            assert relative_error(x_hat, xs[i]) < 1e-9, name


def test_anchor_noise_degrades_every_attack(rng):
    xs, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.2)
    out = run_attacks("aa-igdp-an", disclosure, [u.data for u in ups],
                      [u.anchor for u in ups], res.rotations)
    for name, per_target in out.items():
        errors = [relative_error(x_hat, xs[i]) for i, x_hat in per_target.items()]
        assert min(errors) > 1e-3, name  # noise leaves a visible error


def test_scale_corrected_op_is_op_divided_by_the_polar_shrinkage(rng):
    _, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.3, d=6, r=30)
    out = attack_all(_view(ups, res, disclosure)).reconstructions
    alpha = polar_shrinkage(6, 0.3)
    assert 0.5 < alpha < 1
    for i in (1, 2, 3):
        np.testing.assert_allclose(out["op_scaled"][i], out["op"][i] / alpha, rtol=1e-12)


def test_undisclosed_v_is_estimated_from_the_anchor_residuals(rng):
    """``v^2 = sum_j ||Q B_j||^2 / (p (r - d - 1) d)``: with p (r - d - 1) d = 4 * 54 * 5 = 1080
    residual entries, the relative sd of v^ is about 1/sqrt(2 * 1080) = 2%; 8% is four of them."""
    _, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.3, r=60, disclosed_v=False)
    run = attack_all(_view(ups, res, disclosure))
    assert run.estimated_noise_level == pytest.approx(0.3, rel=0.08)
    assert run.noise_level == run.estimated_noise_level
    disclosed = Disclosure(0, disclosure.data, disclosure.key, disclosure.anchor, 0.3)
    assert attack_all(_view(ups, res, disclosed)).noise_level == 0.3


def test_attacks_needing_v_are_skipped_with_a_reason_when_it_cannot_be_estimated(rng):
    """r = d + 1 leaves no anchor residual: without a disclosed v, the corrected attacks report
    why they did not run and the others still do."""
    _, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.1, d=5, r=6,
                                      disclosed_v=False)
    run = attack_all(_view(ups, res, disclosure), available_attacks(known_records=()))
    without_side = {"known_sample", "known_sample_pooled"}  # no public sample given either
    assert set(run.skipped) == set(NEW_ATTACKS) | without_side
    assert all("r = d + 1" in why for a, why in run.skipped.items() if a not in without_side)
    assert all("public sample" in run.skipped[a] for a in without_side)
    assert {"known_anchor", "mp", "op", "am"} <= set(run.reconstructions)
    assert run.noise_level is None


def _anisotropic_records(rng, p, n, d):
    mu = 3 * rng.standard_normal(d)
    scale = rng.standard_normal((d, d)) * np.linspace(2.0, 0.2, d)
    return [mu + rng.standard_normal((n, d)) @ scale for _ in range(p)]


def test_maximum_likelihood_beats_op_when_the_record_model_holds(rng):
    """With Gaussian records (the ML model holds) the data upload carries most of the key: ML's
    mean relative error is below half of OP's (measured: 0.1-0.5 vs 0.6-0.9 at v = 0.5)."""
    xs = _anisotropic_records(rng, 4, 200, 6)
    _, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.5, d=6, r=24, xs=xs)
    out = attack_all(_view(ups, res, disclosure)).reconstructions
    err = {k: np.mean([relative_error(x, xs[i]) for i, x in out[k].items()]) for k in ("op", "ml")}
    assert err["ml"] < 0.5 * err["op"]


def test_maximum_likelihood_ascends_from_op_and_is_op_at_zero_noise(rng):
    xs = _anisotropic_records(rng, 2, 100, 5)
    anchor = make_anchor(20, 5, rng)
    key = sample_key(5, rng)
    up, _ = make_upload("aa-igdp-an", xs[1], key, anchor=anchor, v=0.4, rng=rng)
    prior = RecordPrior.from_records(xs[0])
    est = ml_transform(up.data, up.anchor, anchor, 0.4, prior)
    start = ml_transform(up.data, up.anchor, anchor, 0.4, prior, max_iter=0)
    assert est.converged and est.objective > start.objective
    assert np.allclose(est.rotation.T @ est.rotation, np.eye(5), atol=1e-10)
    _, bc = center_rows(up.anchor)
    a_c = center_rows(anchor)[1]
    np.testing.assert_allclose(start.rotation, polar_factor(a_c.T @ bc), atol=1e-12)
    exact, _ = make_upload("aa-igdp", xs[1], key, anchor=anchor)
    zero = ml_transform(exact.data, exact.anchor, anchor, 0.0, prior)
    np.testing.assert_allclose(zero.rotation, key.rotation, atol=1e-10)
    np.testing.assert_allclose(zero.translation, key.translation, atol=1e-8)


def test_record_prior_is_the_ledoit_wolf_estimate(rng):
    from sklearn.covariance import ledoit_wolf

    x = rng.standard_normal((40, 6)) * np.arange(1, 7)
    prior = RecordPrior.from_records(x)
    np.testing.assert_allclose(prior.covariance, ledoit_wolf(x)[0], rtol=1e-10)
    np.testing.assert_allclose(prior.precision @ prior.covariance, np.eye(6), atol=1e-10)
    with pytest.raises(InvalidInputError, match="at least 2"):
        RecordPrior.from_records(x[:1])


def test_recentering_leaves_a_target_unlike_the_colluder_almost_unchanged(rng):
    """James-Stein shrinks the mean towards the colluder's only as far as the noise explains the
    gap: a target whose records sit far from the colluder's (label skew) keeps its own mean."""
    d, n = 6, 100
    xs = [rng.standard_normal((n, d)), 20.0 + rng.standard_normal((n, d))]
    xs += [rng.standard_normal((n, d)) for _ in range(2)]
    _, ups, res, disclosure = _aa_run(rng, method="aa-igdp-an", v=0.1, d=d, r=24, n=n, xs=xs)
    out = attack_all(_view(ups, res, disclosure)).reconstructions
    far_ka, far_rc = out["known_anchor"][1], out["known_anchor_recentered"][1]
    shift = np.linalg.norm(far_rc.mean(0) - far_ka.mean(0))
    assert shift < 0.05 * np.linalg.norm(far_ka.mean(0) - xs[0].mean(0))
    near_ka, near_rc = out["known_anchor"][2], out["known_anchor_recentered"][2]
    assert np.linalg.norm(near_rc.mean(0) - xs[0].mean(0)) < np.linalg.norm(
        near_ka.mean(0) - xs[0].mean(0))  # like the colluder: pulled towards its mean


def test_known_secret_inverts_c_gdp_exactly(rng):
    key = sample_key(4, rng)
    x = rng.standard_normal((6, 4))
    y = make_upload("c-gdp", x, key)[0].data
    assert relative_error(known_secret_attack(y, key), x) < 1e-12


def test_attack_names_per_method_are_the_pinned_ones():
    assert ATTACK_NAMES == ("known_secret", "known_anchor", "mp", "op", "am", *NEW_ATTACKS)
    assert PAPER_ANCHOR_ATTACKS == ("mp", "op", "am")
    assert [a.name for a in available_attacks(plugins=False).values() if a.paper] == [
        "mp", "op", "am"]
    assert Method.I_GDP.attacks == ()
    assert Method.C_GDP_PN.attacks == ("known_secret",)
    assert Method.AA_IGDP_AN.attacks == ("known_anchor", "mp", "op", "am", *NEW_ATTACKS)


def test_attacks_reject_bad_input(rng):
    anchor = make_anchor(10, 3, rng)
    with pytest.raises(InvalidInputError, match="rows"):
        known_anchor_attack(np.ones((4, 3)), np.ones((9, 3)), anchor)
    with pytest.raises(InvalidInputError, match="NaN"):
        known_anchor_attack(np.full((4, 3), np.inf), anchor, anchor)
    with pytest.raises(InvalidInputError, match="colluder index"):
        run_attacks("c-gdp", Disclosure(5, np.ones((2, 3)), sample_key(3, rng)),
                    [np.ones((2, 3))] * 2)
    with pytest.raises(InvalidInputError, match="disclosed anchor"):
        run_attacks("aa-igdp", Disclosure(0, np.ones((2, 3)), sample_key(3, rng)),
                    [np.ones((2, 3))] * 2, [anchor, anchor])
    with pytest.raises(InvalidInputError, match="shape"):
        relative_error(np.ones((2, 2)), np.ones((2, 3)))
