"""Attacks without a colluder (SPEC.md section 3, "Without a colluder"): the known-input attack
(exact key from d + 1 known records at zero noise, exact on the known span below that, located
by distances under private-data noise) and the known-sample attack (principal axes, skewness
signs, Wasserstein-Procrustes), on every method, I-GDP included."""

import numpy as np
import pytest

from noisyanchor.common.alignment import align
from noisyanchor.common.analyst_attacks import (
    known_input_attack,
    known_sample_attack,
    locate_known_records,
)
from noisyanchor.common.attacks import (
    ATTACK_NAMES,
    AttackerView,
    Disclosure,
    SideKnowledge,
    attack_all,
    available_attacks,
    known_input,
    relative_error,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import haar_orthogonal, make_anchor, sample_key
from noisyanchor.common.likelihood import ML_STARTS
from noisyanchor.common.methods import Method, make_upload


def _skewed(rng, n, rot):
    """Anisotropic, skewed records of one population (its axes ``rot``: distinct eigenvalues,
    non-zero third moments, what principal axes and skewness signs need)."""
    d = len(rot)
    return (rng.exponential(1.0, (n, d)) - 1.0) * np.linspace(3.0, 0.5, d) @ rot + 2.0


def _federation(rng, method, *, p=3, n=60, d=5, r=20, v=0.0, sigma=0.0, records=None):
    method = Method(method)
    anchor = make_anchor(r, d, rng)
    common = sample_key(d, rng)
    rot = haar_orthogonal(d, rng)
    xs = records if records is not None else [_skewed(rng, n, rot) for _ in range(p)]
    pairs = [make_upload(method, x, common if method.shared_key else sample_key(d, rng),
                         anchor=anchor, v=v, sigma=sigma, rng=rng) for x in xs]
    ups = [u for u, _ in pairs]
    res = align(method, [u.data for u in ups],
                [u.anchor for u in ups] if method.uses_anchor else None)
    return xs, ups, [s for _, s in pairs], res, anchor, rot


@pytest.mark.parametrize("method", [m.value for m in Method if not m.data_noise])
def test_known_input_recovers_the_key_exactly_from_d_plus_1_records(rng, method):
    """Without data noise (anchor noise leaves Y_i noiseless) d + 1 known records in general
    position, given in shuffled order, give O_i and Psi_i to 1e-9."""
    d = 5
    xs, ups, states, _, _, _ = _federation(rng, method, d=d, v=0.3 if "an" in method else 0.0)
    for i in (1, 2):
        rows = rng.permutation(len(xs[i]))[:d + 1]
        res = known_input_attack(ups[i].data, xs[i][rows])
        np.testing.assert_array_equal(res.location.rows, rows)
        assert res.rank == d
        np.testing.assert_allclose(res.rotation, states[i].key.rotation, atol=1e-9)
        np.testing.assert_allclose(res.translation, states[i].key.translation, atol=1e-8)
        assert relative_error(res.reconstruction, xs[i]) < 1e-9


@pytest.mark.parametrize("m", [3, 5])
def test_known_input_below_d_plus_1_is_exact_on_the_span_of_the_known_records(rng, m):
    """With m <= d records only the m - 1 directions they span are determined: the error of
    every record is orthogonal to that span (to 1e-9) and the rest sits at the known mean. (Two
    records are one distance: which is which is undecidable, so m = 2 is exact up to that
    sign.)"""
    d = 6
    xs, ups, _, _, _, _ = _federation(rng, "i-gdp", d=d, n=50)
    x, y = xs[1], ups[1].data
    rows = rng.permutation(len(x))[:m]
    res = known_input_attack(y, x[rows])
    assert res.rank == m - 1 and res.rotation is None
    kc = x[rows] - x[rows].mean(axis=0)
    basis = np.linalg.svd(kc, full_matrices=False)[2][:m - 1]  # span of Kc's rows
    err = res.reconstruction - x
    assert np.abs(err @ basis.T).max() < 1e-9 * np.abs(x).max()
    pair = rows[:2]
    assert set(known_input_attack(y, x[pair]).location.rows) == set(pair)
    more = known_input_attack(y, x[rng.permutation(len(x))[:d + 1]])
    assert relative_error(more.reconstruction, x) < 1e-9 < relative_error(res.reconstruction, x)


def test_known_input_locates_records_under_private_data_noise(rng):
    """At sigma = 1% of the records' spread the distance likelihood still finds every row, and
    Procrustes over 4 d located pairs gives O to within a few sigma / spread."""
    d, n = 5, 80
    x = _skewed(rng, n, haar_orthogonal(d, rng))
    key = sample_key(d, rng)
    sigma = 0.01 * float(np.sqrt(np.mean((x - x.mean(0)) ** 2)))
    up, _ = make_upload("c-gdp-pn", x, key, sigma=sigma, rng=rng)
    rows = rng.permutation(n)[:4 * d]
    loc = locate_known_records(up.data, x[rows], data_noise=sigma)
    np.testing.assert_array_equal(loc.rows, rows)
    assert loc.runner_up is None or loc.runner_up > loc.score
    res = known_input_attack(up.data, x[rows], data_noise=sigma)
    assert np.linalg.norm(res.rotation - key.rotation) < 0.05


def test_known_input_refuses_what_it_cannot_use(rng):
    with pytest.raises(InvalidInputError, match="at least 2"):
        known_input_attack(np.ones((5, 3)), np.ones((1, 3)))
    with pytest.raises(InvalidInputError, match="cannot sit among"):
        known_input_attack(rng.standard_normal((3, 2)), rng.standard_normal((4, 2)))
    with pytest.raises(InvalidInputError, match="m >= 2"):
        known_input(1)


def test_known_sample_is_exact_when_the_sample_is_the_population_itself(rng):
    """The sample holding exactly the target's records (shuffled): axes, skewness signs and the
    optimal assignment all match, so the decoder is O^T and the reconstruction exact (1e-8)."""
    d = 5
    xs, ups, states, _, _, _ = _federation(rng, "i-gdp", d=d, n=120)
    x, y = xs[1], ups[1].data
    res = known_sample_attack(y, x[rng.permutation(len(x))])
    np.testing.assert_allclose(res.decoder, states[1].key.rotation.T, atol=1e-8)
    assert relative_error(res.decode(y), x) < 1e-8
    assert res.cost == pytest.approx(0.0, abs=1e-12)


def test_known_sample_from_a_disjoint_sample_beats_a_random_decoder(rng):
    """A disjoint public sample of the same skewed population: the decoder is much nearer O^T
    than a Haar-random one (whose expected ||Q - O^T||_F^2 is 2 d), and refinement never ends
    above principal axes alone."""
    d = 5
    _, ups, states, _, _, rot = _federation(rng, "i-gdp", d=d, n=400)
    res = known_sample_attack(ups[1].data, _skewed(rng, 2000, rot))
    gap = np.linalg.norm(res.decoder - states[1].key.rotation.T) ** 2
    assert gap < 0.2 * 2 * d
    assert res.cost <= res.pca_cost + 1e-12
    assert res.starts == 4 and 0 <= res.chosen_start < 4


@pytest.mark.parametrize("method", [m.value for m in Method])
def test_attacks_without_a_colluder_give_every_method_a_reconstruction(rng, method):
    """Known-input, known-sample and ICA read only the data uploads: they run on every method,
    I-GDP included; the pooled known-sample needs a common frame, which I-GDP lacks. With the
    analyst alone (no disclosure) the colluder's attacks are skipped with a reason and every
    participant is a target."""
    m = Method(method)
    d = 4
    xs, ups, _, res, _, rot = _federation(rng, method, d=d, n=40,
                                          v=0.1 if m.anchor_noise else 0.0,
                                          sigma=0.05 if m.data_noise else 0.0)
    labels = {i: np.arange(len(x)) % 3 for i, x in enumerate(xs)}
    pool = np.vstack([x[d + 1:d + 5] for x in xs])  # 4 more records of every participant
    side = SideKnowledge({i: x[:d + 1] for i, x in enumerate(xs)}, _skewed(rng, 100, rot),
                         0.05 if m.data_noise else 0.0, labels,
                         {i: lab[:d + 1] for i, lab in labels.items()}, pool,
                         np.concatenate([lab[d + 1:d + 5] for lab in labels.values()]))
    view = AttackerView(m, None, [u.data for u in ups],
                        [u.anchor for u in ups] if m.uses_anchor else None, res.rotations,
                        side=side)
    run = attack_all(view, available_attacks(plugins=False, known_records=(2, d + 1),
                                             uploads=True))
    expect = {"known_input_2", f"known_input_{d + 1}", "known_input_label_2",
              f"known_input_label_{d + 1}", "known_input_label_spectral_2",
              f"known_input_label_spectral_{d + 1}", "distance_match_2", f"distance_match_{d + 1}",
              "known_sample", "ica"}
    if m is not Method.I_GDP:
        expect.add("known_sample_pooled")
    assert set(run.reconstructions) == expect
    assert all(set(t) == {0, 1, 2} for t in run.reconstructions.values())
    assert set(m.attacks) <= set(run.skipped) <= set(ATTACK_NAMES)
    assert all("colluder" in why for why in run.skipped.values())
    assert set(run.diagnostics[f"known_input_{d + 1}"][0]) >= {"rank", "location_score"}
    if not m.data_noise:
        for i in range(3):
            assert relative_error(run.reconstructions[f"known_input_{d + 1}"][i], xs[i]) < 1e-9
            # 2 known records and 4 placed candidates: d + 2 records, the exact key
            assert relative_error(run.reconstructions["distance_match_2"][i], xs[i]) < 1e-9
            assert run.diagnostics["distance_match_2"][i]["placed"] == 4


def test_attacks_without_side_knowledge_are_skipped_with_a_reason(rng):
    xs, ups, states, res, anchor, _ = _federation(rng, "aa-igdp-an", v=0.2)
    view = AttackerView("aa-igdp-an", Disclosure(0, xs[0], states[0].key, anchor, 0.2),
                        [u.data for u in ups], [u.anchor for u in ups], res.rotations)
    run = attack_all(view, available_attacks(plugins=False))
    assert "known records of participant 1" in run.skipped["known_input_17"]
    assert "public sample" in run.skipped["known_sample"]
    assert set(Method.AA_IGDP_AN.attacks) <= set(run.reconstructions)


def test_the_maximum_likelihood_attack_reports_its_starts_and_convergence(rng):
    """Every target's ML estimate reports its starts, how many converged and which won; the
    winner's objective is the best of the starts and at least OP's (start 0)."""
    d = 5
    xs, ups, states, res, anchor, _ = _federation(rng, "aa-igdp-an", d=d, n=80, v=0.3)
    view = AttackerView("aa-igdp-an", Disclosure(0, xs[0], states[0].key, anchor, 0.3),
                        [u.data for u in ups], [u.anchor for u in ups], res.rotations)
    run = attack_all(view, {"ml": available_attacks(plugins=False)["ml"]})
    for i in (1, 2):
        facts = run.diagnostics["ml"][i]
        assert facts["starts"] == len(facts["start_objectives"]) == ML_STARTS
        assert 0 <= facts["converged_starts"] <= ML_STARTS and facts["converged"]
        assert facts["objective"] == max(facts["start_objectives"])
        assert facts["start_objectives"][facts["best_start"]] == facts["objective"]
