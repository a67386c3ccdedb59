"""Alignment claims of the paper checked against their formulas (SPEC.md section 2)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noisyanchor.common.alignment import align
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.gopp import rotational_error, solve_gopp
from noisyanchor.common.methods import make_upload
from noisyanchor.common.procrustes import align_to_reference
from noisyanchor.common.theory import phase_transition_v, residual_translation_variance


def _federation(rng, p, d, r, n=12, scale=10.0):
    anchor = make_anchor(r, d, rng)
    keys = [sample_key(d, rng, translation_scale=scale) for _ in range(p)]
    xs = [rng.standard_normal((n, d)) for _ in range(p)]
    return anchor, keys, xs


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 6), d=st.integers(1, 8), extra=st.integers(1, 20),
       seed=st.integers(0, 2**32 - 1), reference=st.integers(0, 5))
def test_noiseless_aa_igdp_alignment_is_exact(p, d, extra, seed, reference):
    """Proposition 2.12: N_i(M_i(X_i)) = X_i O_s + 1 Psi_s^T, to 1e-9 relative."""
    rng = np.random.default_rng(seed)
    anchor, keys, xs = _federation(rng, p, d, d + extra)
    s = reference % p
    ups = [make_upload("aa-igdp", x, k, anchor=anchor)[0] for x, k in zip(xs, keys, strict=True)]
    res = align("aa-igdp", [u.data for u in ups], [u.anchor for u in ups], reference=s)
    expected = np.vstack([x @ keys[s].rotation + keys[s].translation for x in xs])
    assert _rel(res.z, expected) < 1e-9


@settings(max_examples=15, deadline=None)
@given(p=st.integers(2, 5), d=st.integers(1, 6), extra=st.integers(1, 12),
       seed=st.integers(0, 2**32 - 1))
def test_gopp_at_zero_noise_recovers_a_common_frame_exactly(p, d, extra, seed):
    rng = np.random.default_rng(seed)
    anchor, keys, _ = _federation(rng, p, d, d + extra)
    res = solve_gopp([anchor @ k.rotation + k.translation for k in keys])
    o = np.stack([k.rotation for k in keys])
    assert rotational_error(o, res.rotations) < 1e-9  # O_i R_i = Q for all i, to 1e-9
    assert res.certified


def test_private_data_noise_methods_are_pathwise_equal_under_the_coupling(rng):
    """Corollary 3.3: AA-I-GDP (pn) aligned to s equals C-GDP (pn) with (O, Psi) = (O_s, Psi_s)
    and noise W'_i = W_i O_i^T O_s, to 1e-12 relative."""
    p, d, r, sigma, s = 4, 5, 20, 0.7, 1
    anchor, keys, xs = _federation(rng, p, d, r)
    aa = [make_upload("aa-igdp-pn", x, k, anchor=anchor, sigma=sigma, rng=rng)
          for x, k in zip(xs, keys, strict=True)]
    z_aa = align("aa-igdp-pn", [u.data for u, _ in aa], [u.anchor for u, _ in aa],
                 reference=s).z
    o_s = keys[s].rotation
    common = keys[s]
    c_blocks = []
    for x, k, (_, state) in zip(xs, keys, aa, strict=True):
        w = state.data_noise @ k.rotation.T @ o_s / sigma  # coupled standard noise W'_i

        class _Fixed:  # a generator whose next draw is the coupled noise
            def standard_normal(self, shape, _w=w):
                assert shape == _w.shape
                return _w

        c_blocks.append(make_upload("c-gdp-pn", x, common, sigma=sigma, rng=_Fixed())[0].data)
    z_c = align("c-gdp-pn", c_blocks).z
    assert _rel(z_aa, z_c) < 1e-12


def test_residual_translation_of_gopp_alignment_matches_proposition_4_5():
    """E||R_i^T eta_i - R_j^T eta_j||^2 = 2 d v^2 / r for the translation left in N_i(Y_i)."""
    rng = np.random.default_rng(7)
    p, d, r, runs = 4, 12, 60, 150
    v = 0.3 * phase_transition_v(p, d, r)
    sq = []
    for _ in range(runs):
        anchor, keys, xs = _federation(rng, p, d, r, n=3)
        ups = [make_upload("aa-igdp-an", x, k, anchor=anchor, v=v, rng=rng)[0]
               for x, k in zip(xs, keys, strict=True)]
        res = align("aa-igdp-an", [u.data for u in ups], [u.anchor for u in ups], certify=False)
        # Row offset left after alignment: N_i(Y_i) - X_i O_i R_i = -(eta_i)^T R_i.
        offsets = [(res.map_rows(i, u.data) - xs[i] @ keys[i].rotation @ res.rotations[i])[0]
                   for i, u in enumerate(ups)]
        sq += [np.sum((offsets[i] - offsets[j]) ** 2) for i in range(p) for j in range(i + 1, p)]
    expected = residual_translation_variance(d, v, r)
    # 900 correlated chi^2_12 terms: relative sd of the mean ~1.5%; 5% is the bound.
    assert np.mean(sq) == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("factor", [0.3, 0.6])
def test_gpm_below_phase_transition_converges_and_is_certified(factor):
    rng = np.random.default_rng(11)
    p, d, r = 6, 10, 40
    anchor, keys, _ = _federation(rng, p, d, r)
    v = factor * phase_transition_v(p, d, r)
    b = [anchor @ k.rotation + k.translation + v * rng.standard_normal((r, d)) for k in keys]
    res = solve_gopp(b)
    paper = solve_gopp(b, stopping="absolute")
    assert paper.converged and paper.fixed_point_residual <= 1e-7
    # The default rule stops no later, at the same objective (1e-10 relative).
    assert res.converged and res.iterations <= paper.iterations
    assert res.objective == pytest.approx(paper.objective, rel=1e-10)
    assert res.certified and res.certificate_min_eig >= -res.certificate_tol
    # The objective never decreases from the spectral start (relative slack 1e-12).
    assert np.all(np.diff(res.objective_trace) >= -1e-12 * abs(res.objective))


def test_gpm_far_above_phase_transition_fails_the_certificate():
    rng = np.random.default_rng(12)
    p, d, r = 6, 10, 40
    anchor, keys, _ = _federation(rng, p, d, r)
    v = 4 * phase_transition_v(p, d, r)
    res = solve_gopp([anchor @ k.rotation + k.translation + v * rng.standard_normal((r, d))
                      for k in keys], max_iter=200)
    assert not res.certified
    assert res.certificate_min_eig < -100 * res.certificate_tol  # clearly negative
    assert np.all(np.diff(res.objective_trace) >= -1e-12 * abs(res.objective))


def test_tall_anchor_factor_is_compressed_without_changing_the_solution(rng):
    p, d, r = 2, 3, 40  # r > p d: the factor K is replaced by its QR triangle
    anchor, keys, _ = _federation(rng, p, d, r)
    b = [anchor @ k.rotation + 0.01 * rng.standard_normal((r, d)) for k in keys]
    res = solve_gopp(b)
    bc = [x - x.mean(axis=0) for x in b]
    g = np.block([[bi.T @ bj for bj in bc] for bi in bc])
    stacked = res.rotations.reshape(p * d, d)
    assert res.objective == pytest.approx(np.trace(stacked.T @ g @ stacked), rel=1e-12)


@pytest.mark.parametrize(
    ("anchors", "message"),
    [([np.ones((5, 2))], "p >= 2"),
     ([np.ones((2, 2)), np.ones((2, 2))], "r >= d \\+ 1"),
     ([np.ones((5, 2)), np.ones((4, 2))], "shape"),
     ([np.ones((5, 2)), np.full((5, 2), np.nan)], "NaN"),
     ([np.ones(5), np.ones(5)], "2-D")],
)
def test_solvers_reject_bad_anchors(anchors, message):
    with pytest.raises(InvalidInputError, match=message):
        solve_gopp(anchors)
    with pytest.raises(InvalidInputError, match=message):
        align_to_reference(anchors)


def test_align_rejects_inconsistent_uploads(rng):
    with pytest.raises(InvalidInputError, match="at least 2"):
        align("c-gdp", [rng.standard_normal((3, 2))])
    with pytest.raises(InvalidInputError, match="columns"):
        align("i-gdp", [rng.standard_normal((3, 2)), rng.standard_normal((3, 3))])
    with pytest.raises(InvalidInputError, match="anchor upload per participant"):
        align("aa-igdp", [rng.standard_normal((3, 2))] * 2)
    with pytest.raises(InvalidInputError, match="reference"):
        align_to_reference([rng.standard_normal((5, 2))] * 2, reference=2)
    with pytest.raises(InvalidInputError, match="max_iter"):
        solve_gopp([rng.standard_normal((5, 2))] * 2, max_iter=-1)


@pytest.mark.parametrize("method", ["aa-igdp", "aa-igdp-an", "i-gdp"])
def test_z_written_to_its_file_equals_the_stacked_blocks_in_memory(tmp_path, rng, method,
                                                                   monkeypatch):
    """Issue 31: Z filled chunk by chunk (from memory maps, into one preallocated .npy) is the
    in-memory stacked Z to 1e-12, and the file is that Z."""
    import noisyanchor.common.chunks as chunks

    anchor, keys, xs = _federation(rng, 3, 4, 12, n=23)
    v = 0.01 if method == "aa-igdp-an" else 0.0
    ups = [make_upload(method, x, k, anchor=anchor if method != "i-gdp" else None, v=v,
                       rng=rng)[0]
           for x, k in zip(xs, keys, strict=True)]
    anchors = [u.anchor for u in ups] if ups[0].anchor is not None else None
    maps = []
    for i, u in enumerate(ups):
        np.save(tmp_path / f"y{i}.npy", u.data)
        maps.append(np.load(tmp_path / f"y{i}.npy", mmap_mode="r"))
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 5)  # chunks that straddle no block boundary
    on_disk = align(method, maps, anchors, z_file=tmp_path / "z.npy")
    in_memory = align(method, [u.data for u in ups], anchors)
    stacked = np.vstack([in_memory.map_rows(i, u.data) for i, u in enumerate(ups)])
    assert isinstance(on_disk.z, np.memmap) and not isinstance(in_memory.z, np.memmap)
    np.testing.assert_allclose(on_disk.z, stacked, rtol=0, atol=1e-12)
    np.testing.assert_allclose(in_memory.z, stacked, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), on_disk.z)

