"""The participant's test of the anchor's distribution (issue 33, item 5): a crafted anchor is
refused naming the failed test; the protocol's own anchors pass."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from noisyanchor.common.anchor_distribution import (
    FALSE_REFUSAL_RATE,
    check_protocol_anchor,
    leverage_bound,
    run_anchor_tests,
)
from noisyanchor.common.errors import IntegrityError
from noisyanchor.common.gdp import make_anchor
from noisyanchor.participant.compute import compute_upload

R, D = 64, 16


def test_protocol_anchors_pass_on_200_seeds():
    """No false refusal on 200 seeds; the bound on the rate is 1e-6 per anchor, so 200 draws
    fail with probability at most 2e-4."""
    for seed in range(200):
        for r, d in ((R, D), (17, 16), (40, 3)):
            res = run_anchor_tests(make_anchor(r, d, np.random.default_rng(seed)))
            assert res.passed, (seed, r, d, res.reason)


def test_leverage_bound_holds_the_stated_false_refusal_rate():
    t = leverage_bound(R, D)
    beta_sf = stats.beta.sf(t * R / (R - 1), D / 2, (R - 1 - D) / 2)
    assert R * beta_sf == pytest.approx(FALSE_REFUSAL_RATE, rel=1e-6)


def test_row_leverage_of_the_protocols_anchor_has_the_stated_beta_law():
    """The mean of ``||A_k||^2`` is ``d / r`` exactly (trace of ``A^T A``), and the Beta law's
    KS statistic over 2,000 pooled rows (of anchors from different seeds: rows of one anchor are
    dependent) stays below 0.05 (the 1% critical value at that size is 0.036)."""
    rows = np.array([np.sum(make_anchor(R, D, np.random.default_rng(s))[0] ** 2)
                     for s in range(2000)])
    law = stats.beta(D / 2, (R - 1 - D) / 2, scale=(R - 1) / R)
    assert stats.kstest(rows, law.cdf).statistic < 0.05
    assert rows.mean() == pytest.approx(D / R, rel=0.05)


@pytest.mark.parametrize("crafted, test", [
    ("scaled", "structure"), ("raw records", "structure"), ("low rank", "structure"),
    ("coordinate", "leverage")])
def test_a_crafted_anchor_is_refused_naming_the_test(crafted, test):
    rng = np.random.default_rng(1)
    a = make_anchor(R, D, rng)
    if crafted == "scaled":
        a = 10.0 * a
    elif crafted == "raw records":
        a = rng.normal(size=(R, D)) * 4.0
    elif crafted == "low rank":
        a[:, D // 2:] = 0.0
    else:  # orthonormal and centred, but on d + 1 rows only (leverage d / (d + 1) there)
        a = np.zeros((R, D))
        a[:D + 1] = make_anchor(D + 1, D, rng)
    res = run_anchor_tests(a)
    assert not res.passed and res.failed_test == test
    with pytest.raises(IntegrityError, match=f"anchor refused by the {test} test"):
        check_protocol_anchor(a)


def test_participant_refuses_to_upload_with_a_crafted_anchor():
    x = np.random.default_rng(2).normal(size=(30, D))
    crafted = 10.0 * make_anchor(R, D, np.random.default_rng(3))
    with pytest.raises(IntegrityError, match="structure test"):
        compute_upload("aa-igdp-an", x, np.random.default_rng(4), shared_seed=bytes(32),
                       anchors=R, v=0.1, anchor=crafted)
    upload, _ = compute_upload("aa-igdp-an", x, np.random.default_rng(4), shared_seed=bytes(32),
                               anchors=R, v=0.1)
    assert upload.anchor.shape == (R, D)
