"""The certificate's early exit (issue 31): given its tolerance ``tol``, the certificate stops,
not certified, once a proven upper bound of ``lambda_min(Lambda - G)`` is below
``-EARLY_EXIT_MARGIN * tol``. Below ``v_PT`` nothing changes (the same value, bit for bit);
above it the verdict is the full certificate's, the bound is at least the full ``lambda_min``,
fewer Newton steps are taken and the solve's objective is the same; the rule's threshold is
exactly ``-EARLY_EXIT_MARGIN * tol``; an unconverged LOBPCG still gives a valid bound.
"""

import numpy as np
import pytest

from benchmarks import bench_gopp
from noisyanchor.common import gopp as gopp_module
from noisyanchor.common import gopp_certificate as certificate_module
from noisyanchor.common.gopp import CERTIFICATE_RTOL, solve_gopp
from noisyanchor.common.gopp_certificate import EARLY_EXIT_MARGIN, certify

SECULAR_PATHS = ("secular", "secular-matrix-free")


def _problem(p: int, d: int, r: int, factor: float, seed: int):
    """``K``, a converged solution ``R``, ``G R`` and the solver's tolerance."""
    b = bench_gopp.make_anchors(p, d, r, factor, seed)
    k = gopp_module._GramOperator(b - b.mean(axis=1, keepdims=True)).k
    rot = solve_gopp(list(b), max_iter=500, certify=False).rotations
    gr = (k.T @ (k @ rot.reshape(p * d, d))).reshape(p, d, d)
    tol = CERTIFICATE_RTOL * max(float(np.linalg.eigvalsh(k @ k.T)[-1]), 1.0)
    return k, rot, gr, tol


@pytest.mark.parametrize(("seed", "p", "d", "r"), [(0, 6, 10, 40), (1, 4, 20, 50),
                                                    (6, 3, 30, 120)])
@pytest.mark.parametrize("path", SECULAR_PATHS)
def test_below_v_pt_the_certificate_is_unchanged_bit_for_bit(seed, p, d, r, path):
    k, rot, gr, tol = _problem(p, d, r, 0.5, seed)
    full = certify(k, rot, gr, path=path)
    early = certify(k, rot, gr, path=path, tol=tol)
    assert full.min_eig >= -tol  # certified
    assert early == full and early.early_exit == ""


@pytest.mark.parametrize(("seed", "p", "d", "r", "factor"), [
    (3, 6, 10, 40, 1.5), (4, 4, 20, 50, 3.0), (5, 10, 6, 30, 2.0), (2, 10, 20, 80, 1.5),
])
@pytest.mark.parametrize("path", SECULAR_PATHS)
def test_above_v_pt_it_stops_not_certified_with_a_proven_bound(seed, p, d, r, factor, path):
    k, rot, gr, tol = _problem(p, d, r, factor, seed)
    dense = certify(k, rot, gr, path="dense")  # the exact lambda_min
    full = certify(k, rot, gr, path=path)
    early = certify(k, rot, gr, path=path, tol=tol)
    assert full.min_eig < -EARLY_EXIT_MARGIN * tol  # not certified, by the full certificate
    assert early.early_exit.startswith("not certifiable:")
    assert early.min_eig < -EARLY_EXIT_MARGIN * tol
    # an upper bound of lambda_min (to the dense solver's rounding, 1e-9 ||G|| as elsewhere)
    assert early.min_eig >= dense.min_eig - 1e-9 * tol / CERTIFICATE_RTOL
    assert early.newton_steps <= full.newton_steps and early.products <= full.products


def test_the_rule_fires_exactly_below_the_margin_times_tol():
    k, rot, gr, _ = _problem(6, 10, 40, 1.5, 3)
    full = certify(k, rot, gr, path="secular")
    lam = -full.min_eig
    # -2 tol below lambda_min: no bound can reach it, the full value comes back
    assert certify(k, rot, gr, path="secular", tol=0.6 * lam) == full
    assert certify(k, rot, gr, path="secular", tol=0.4 * lam).early_exit


def test_an_unconverged_lobpcg_still_gives_an_upper_bound(monkeypatch):
    k, rot, gr, tol = _problem(10, 20, 80, 1.5, 2)
    dense = certify(k, rot, gr, path="dense")
    monkeypatch.setattr(certificate_module, "LOBPCG_MAX_ITER", 1)
    monkeypatch.setattr(certificate_module, "LOBPCG_ACCEPT", 0.0)  # never accepted
    early = certify(k, rot, gr, path="secular-matrix-free", tol=tol)
    assert early.early_exit and early.dense_steps == 0
    assert dense.min_eig - 1e-9 * tol / CERTIFICATE_RTOL <= early.min_eig < -2 * tol


@pytest.mark.parametrize(("factor", "certified"), [(0.5, True), (1.5, False)])
def test_solve_gopp_gives_the_same_objective_and_verdict_either_way(monkeypatch, factor,
                                                                    certified):
    monkeypatch.setattr(certificate_module, "MATRIX_FREE_MIN_ORDER", 0)  # the CelebA path
    b = list(bench_gopp.make_anchors(10, 20, 80, factor, 2))
    early = solve_gopp(b)
    full = solve_gopp(b, certificate_early_exit=False)
    assert early.certificate_path == full.certificate_path == "secular-matrix-free"
    assert early.objective == full.objective and early.certified == full.certified == certified
    assert bool(early.certificate_early_exit) == (not certified)
    assert full.certificate_early_exit == ""
    if certified:
        assert early.certificate_min_eig == full.certificate_min_eig
    else:
        assert full.certificate_min_eig <= early.certificate_min_eig < -early.certificate_tol
