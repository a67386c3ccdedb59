"""The certificate ``lambda_min(Lambda - G)`` (SPEC.md section 2, issue 24): the matrix-free
secular path (LOBPCG on products with ``K`` and ``K^T``) and the dense-step secular path give
the dense ``pd x pd`` answer, certified or not and the eigenvalue to ``1e-9 ||G||``, on random
draws below and above ``v_PT``, at points that are not stationary (indefinite multipliers, the
Lanczos fallback), on noiseless anchors (an eigenvalue 0 of multiplicity ``d`` and the rest in
one cluster), on tiny noise (near-zero eigenvalues) and at stationary points above ``v_PT``,
where the start block spans the eigenvalue-1 subspace and a negative eigenvalue lies elsewhere.
"""

import numpy as np
import pytest

from benchmarks import bench_gopp
from noisyanchor.common import gopp as gopp_module
from noisyanchor.common import gopp_certificate as certificate_module
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.gopp import CERTIFICATE_RTOL, solve_gopp
from noisyanchor.common.gopp_certificate import certificate_path, certify
from noisyanchor.common.linalg import polar_factor


def _factor(b: np.ndarray) -> np.ndarray:
    return gopp_module._GramOperator(b - b.mean(axis=1, keepdims=True)).k


def _compare(k: np.ndarray, rot: np.ndarray, paths=("secular", "secular-matrix-free")):
    """Each path against the dense one at ``R = rot``; returns the certificates."""
    p, d, _ = rot.shape
    g_norm = float(np.linalg.eigvalsh(k @ k.T)[-1])
    tol = CERTIFICATE_RTOL * max(g_norm, 1.0)
    gr = (k.T @ (k @ rot.reshape(p * d, d))).reshape(p, d, d)
    dense = certify(k, rot, gr, path="dense")
    out = {"dense": dense}
    for path in paths:
        cert = certify(k, rot, gr, path=path)
        assert abs(cert.min_eig - dense.min_eig) <= 1e-9 * max(g_norm, 1.0), (path, cert, dense)
        assert (cert.min_eig >= -tol) == (dense.min_eig >= -tol), (path, cert, dense)
        out[path] = cert
    return out


@pytest.mark.parametrize(("seed", "p", "d", "r", "factor"), [
    (0, 6, 10, 40, 0.3), (1, 4, 20, 50, 0.8), (2, 8, 8, 200, 0.5), (3, 6, 10, 40, 1.5),
    (4, 4, 20, 50, 3.0), (5, 10, 6, 30, 2.0), (6, 3, 30, 120, 0.5),
])
def test_matrix_free_certificate_equals_the_dense_one_on_random_draws(seed, p, d, r, factor):
    b = bench_gopp.make_anchors(p, d, r, factor, seed)
    res = solve_gopp(list(b), max_iter=300, certify=False)
    certs = _compare(_factor(b), res.rotations)
    free = certs["secular-matrix-free"]
    assert free.path in ("secular-matrix-free", "lanczos") and free.products > 0
    if factor < 1:  # below v_PT the converged solutions certify
        assert certs["dense"].min_eig >= -CERTIFICATE_RTOL * 1e3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_certificate_paths_agree_away_from_stationary_points(seed):
    """Random orthogonal ``R``: ``Lambda - G`` is indefinite, its blocks may be too (then the
    secular start is off the domain and Lanczos on the complement of ``span(R)`` answers)."""
    rng = np.random.default_rng(seed)
    b = bench_gopp.make_anchors(5, 12, 60, 0.7, seed)
    rot = polar_factor(rng.standard_normal((5, 12, 12)))
    certs = _compare(_factor(b), rot)
    assert certs["dense"].min_eig < 0


def test_noiseless_anchors_zero_eigenvalue_of_multiplicity_d_and_a_cluster():
    """``v = 0``: at the true rotations ``Lambda - G = (p I - 1 1^T) (x) A^T A`` in the aligned
    frame: eigenvalue 0 (``d``-fold) and ``p`` times the eigenvalues of ``A^T A``."""
    rng = np.random.default_rng(4)
    p, d, r = 6, 8, 60
    anchor = make_anchor(r, d, rng)
    keys = [sample_key(d, rng, translation_scale=3.0) for _ in range(p)]
    b = np.stack([anchor @ key.rotation + key.translation for key in keys])
    k = _factor(b)
    rot = np.stack([key.rotation.T for key in keys])  # R_i = O_i^T aligns every block
    certs = _compare(k, rot)
    ac = anchor - anchor.mean(axis=0)
    expected = min(0.0, p * float(np.linalg.eigvalsh(ac.T @ ac)[0]))
    assert abs(certs["dense"].min_eig - expected) <= 1e-9 * float(np.linalg.norm(k, 2)) ** 2


@pytest.mark.parametrize("factor", [1e-6, 1e-3])
def test_tiny_noise_near_zero_eigenvalues(factor):
    b = bench_gopp.make_anchors(5, 10, 50, factor, seed=7)
    res = solve_gopp(list(b), certify=False)
    certs = _compare(_factor(b), res.rotations)
    assert all(c.min_eig >= -1e-6 for c in certs.values())


@pytest.mark.parametrize(("seed", "factor"), [(3, 2.0), (0, 3.0)])
def test_stationary_points_above_v_pt_are_refused_though_the_start_block_spans_the_null_space(
        seed, factor):
    """Converged GPM above ``v_PT``: ``K R`` spans ``M(0)``'s eigenvalue-1 subspace exactly,
    and the matrix-free path must still find the negative eigenvalue elsewhere."""
    b = bench_gopp.make_anchors(6, 10, 40, factor, seed)
    res = solve_gopp(list(b), max_iter=5000, stopping="absolute", method="gpm", certify=False)
    assert res.converged
    certs = _compare(_factor(b), res.rotations)
    assert certs["dense"].min_eig < -1.0
    assert certs["secular-matrix-free"].path == "secular-matrix-free"


def test_a_matrix_free_step_that_does_not_converge_is_taken_densely(monkeypatch):
    monkeypatch.setattr(certificate_module, "LOBPCG_MAX_ITER", 1)
    monkeypatch.setattr(certificate_module, "LOBPCG_ACCEPT", 0.0)
    b = bench_gopp.make_anchors(6, 10, 40, 0.5, seed=1)
    res = solve_gopp(list(b), certify=False)
    certs = _compare(_factor(b), res.rotations, paths=("secular-matrix-free",))
    assert certs["secular-matrix-free"].dense_steps == certs["secular-matrix-free"].newton_steps


@pytest.mark.parametrize(("p", "d", "r", "path"), [
    (10, 20, 80, "secular"),  # m = 80 < pd = 200: the m x m problems are cheaper
    (30, 20, 80, "secular"),
    (10, 20, 400, "dense"),  # r > pd: K is the 200 x 200 QR triangle, nothing is cheaper
    (10, 400, 1600, "secular-matrix-free"),  # the CelebA size: never forms a 1600 x 1600
    (50, 100, 400, "secular"),
    (5, 400, 4000, "secular-matrix-free"),  # a 2000 x 2000 triangle
])
def test_the_cheapest_exact_path_is_chosen(p, d, r, path):
    assert certificate_path(p, d, min(r, p * d)) == path


def test_solve_gopp_reports_the_certificate_path():
    res = solve_gopp(list(bench_gopp.make_anchors(10, 20, 80, 0.5, seed=1)))
    assert res.certified and res.certificate_path == "secular"
