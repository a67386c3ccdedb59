"""Exact polar-factor routes (issue 31 item 4): Newton-Schulz in batched float64 matrix products
equals the SVD's polar factor ``Pi(M) = U V^T`` (SPEC.md notation) to 1e-12, falls back to the
SVD on near-singular blocks, and the GPM gives the same answer by either route."""

import json

import numpy as np
import pytest
import scipy.linalg

from benchmarks import bench_gopp
from noisyanchor.common import gopp as gopp_module
from noisyanchor.common import linalg
from noisyanchor.common.gopp import solve_gopp
from noisyanchor.common.linalg import (
    NEWTON_SCHULZ_MAX_STEPS,
    POLAR_ROUTES,
    polar_factor,
    polar_factor_newton_schulz,
    polar_route,
)


def _stack(rng, p, d, kappa, scale=1.0):
    """``p`` blocks ``U diag(s) V^T`` with singular values spread over ``[scale, kappa scale]``."""
    u, v = polar_factor(rng.standard_normal((2, p, d, d)))
    return scale * (u * np.geomspace(1.0, kappa, d) @ v)


@pytest.mark.parametrize("d", [1, 3, 20, 64])
@pytest.mark.parametrize("kappa", [1.0, 10.0, 1e3, 1e4])
def test_newton_schulz_equals_the_svd_and_scipy_polar_factor(rng, d, kappa):
    m = _stack(rng, 4, d, kappa, scale=rng.uniform(1e-3, 1e3))
    ns = polar_factor_newton_schulz(m)
    assert np.abs(ns - polar_factor(m)).max() < 1e-12
    scipy_polar = np.stack([scipy.linalg.polar(b)[0] for b in m])
    assert np.abs(ns - scipy_polar).max() < 1e-12
    assert np.abs(np.swapaxes(ns, 1, 2) @ ns - np.eye(d)).max() < 1e-13


def test_newton_schulz_on_gaussian_blocks(rng):
    m = rng.standard_normal((10, 30, 30))  # condition numbers ~ 10-1000
    assert np.abs(polar_factor_newton_schulz(m) - polar_factor(m)).max() < 1e-12


def test_near_singular_blocks_take_the_svd(rng):
    m = _stack(rng, 5, 8, 10.0)
    m[1] = np.outer(rng.standard_normal(8), rng.standard_normal(8))  # rank 1
    m[3] = 0.0
    m[4, :, 0] = 1e-13 * m[4, :, 1]  # sigma_min / sigma_max ~ 1e-13
    ns, svd = polar_factor_newton_schulz(m), polar_factor(m)
    np.testing.assert_array_equal(ns[[1, 3, 4]], svd[[1, 3, 4]])  # the SVD itself
    assert np.abs(ns[[0, 2]] - svd[[0, 2]]).max() < 1e-12


def test_a_condition_beyond_the_assumed_bound_still_converges_within_the_step_budget(rng):
    # sigma_min / sigma_max = 1e-5, 100x below NEWTON_SCHULZ_LOWER: slower, still Newton-Schulz.
    m = _stack(rng, 2, 12, 1e5)
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(linalg, "polar_factor", lambda x: calls.append(x) or polar_factor(x))
        ns = polar_factor_newton_schulz(m)
    assert not calls and NEWTON_SCHULZ_MAX_STEPS == 30
    assert np.abs(ns - polar_factor(m)).max() < 1e-10


def test_polar_route_is_measured_once_per_order_and_names_a_route():
    route = polar_route(7)
    assert route in POLAR_ROUTES
    assert linalg._ROUTES[(7, 1)] == route and polar_route(7) == route


@pytest.mark.parametrize(("factor", "seed"), [(0.5, 0), (1.5, 1)])
def test_the_gpm_gives_the_same_answer_by_either_route(monkeypatch, factor, seed):
    b = list(bench_gopp.make_anchors(6, 12, 48, factor, seed))
    runs = {}
    for route in POLAR_ROUTES:
        monkeypatch.setattr(gopp_module, "polar_route", lambda d, threads, r=route: r)
        runs[route] = solve_gopp(b, max_iter=300)
        assert runs[route].polar_route == route
    eigh, ns = runs["eigh"], runs["newton-schulz"]
    assert eigh.iterations == ns.iterations and eigh.certified == ns.certified
    assert ns.objective == pytest.approx(eigh.objective, rel=1e-10)
    assert np.abs(ns.rotations - eigh.rotations).max() < 1e-6


def test_quick_polar_section_records_each_route_and_its_ratio(tmp_path):
    out = tmp_path / "polar.json"
    assert bench_gopp.main(["--quick", "--sections", "polar", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["d"] for r in report["rows"]] == [10, 10, 30, 30]
    for row in report["rows"]:
        assert row["newton_schulz_over_eigh"] == pytest.approx(
            row["newton-schulz_cpu_seconds"] / row["eigh_cpu_seconds"])
        assert row["newton_schulz_over_eigh_wall"] == pytest.approx(
            row["newton-schulz_seconds"] / row["eigh_seconds"])
        assert row["newton-schulz_max_error"] < 1e-12 and row["chosen"] in POLAR_ROUTES
        assert len(row["loadavg"]) == 3
