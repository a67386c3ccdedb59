"""The screening checks of :mod:`common.scale_check`: honest uploads pass, a site with a column
in another scale or unit is named, with the check, the measured value and its bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noisyanchor.common import scale_check as sc
from noisyanchor.common.gdp import haar_orthogonal, make_anchor, sample_key
from noisyanchor.common.methods import Method, make_upload
from noisyanchor.common.tabular import TabularSchema
from noisyanchor.experiments.datasets import load_dataset, table_schema
from noisyanchor.experiments.partition import label_skewed

#: Two ranged numbers, a centred one, a category of three, a boolean: encoded width 7.
SCHEMA = TabularSchema.from_toml({"column": [
    {"name": "a", "min": 0.0, "max": 10.0}, {"name": "b", "min": -1.0, "max": 1.0},
    {"name": "c", "center": 5.0, "scale": 2.0},
    {"name": "k", "type": "categorical", "categories": ["x", "y", "z"]},
    {"name": "t", "type": "boolean"}]}, "test.toml")


def _honest_records(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` encoded records anywhere in :data:`SCHEMA`'s box (its widened ranges)."""
    ranged = rng.uniform(-1.0, 2.0, (n, 2))
    centred = rng.uniform(-sc.FAR_SCALES, sc.FAR_SCALES, (n, 1))
    onehot = np.eye(3)[rng.integers(0, 3, n)]
    return np.hstack([ranged, centred, onehot, rng.integers(0, 2, (n, 1))])


def test_box_diameter_adds_each_columns_widest_gap():
    diameter, why = sc.box_diameter(SCHEMA)
    assert why == ""
    assert diameter == pytest.approx(np.sqrt(9 + 9 + 400 + 2 + 1), rel=1e-15)


def test_an_unscaled_column_has_no_box():
    schema = TabularSchema.from_toml({"column": [{"name": "raw"}]}, "test.toml")
    assert sc.box_diameter(schema) == (None, "column 'raw' has no public range (min/max or "
                                             "center/scale)")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 60), sigma=st.sampled_from([0.0, 0.3]))
def test_the_box_check_holds_for_every_honest_record_under_any_orthogonal_map(seed, n, sigma):
    """Records at the box's corners included, under a Haar map, a translation and the
    private-data noise the bound allows for."""
    rng = np.random.default_rng(seed)
    x = _honest_records(rng, n)
    x[0], x[-1] = [-1, -1, -10, 1, 0, 0, 0], [2, 2, 10, 0, 1, 0, 1]  # opposite corners
    diameter, _ = sc.box_diameter(SCHEMA)
    y = x @ haar_orthogonal(x.shape[1], rng) + rng.normal(0, 1e3, x.shape[1]) \
        + sigma * rng.standard_normal(x.shape)
    assert sc.box_check(["s"], [y], diameter, sigma=sigma) == []


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), factor=st.sampled_from([1e3, 1e4]))
def test_the_box_check_names_the_site_with_one_record_outside(seed, factor):
    rng = np.random.default_rng(seed)
    diameter, _ = sc.box_diameter(SCHEMA)
    xs = [_honest_records(rng, 40) for _ in range(3)]
    # One value of column 'a' (range [-1, 2]) in another unit, and certainly outside: a value of
    # 0 stays 0 times anything, and -1 times factor plus factor is 0 again (seed 1777).
    xs[2][17, 0] = factor * (2 + abs(xs[2][17, 0]))
    ys = [x @ haar_orthogonal(7, rng) + rng.normal(0, 1e3, 7) for x in xs]
    [finding] = sc.box_check(["s0", "s1", "s2"], ys, diameter)
    assert (finding.site, finding.check) == ("s2", "box")
    assert finding.measured > finding.bound == pytest.approx(diameter, rel=1e-8)
    assert "another unit or scale" in finding.reason


def _uploads(dataset: str, p: int, seed: int, poison: float | None = None, *,
             v: float = 0.02) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Label-skewed sites of ``dataset`` (Dirichlet 0.5) uploading AA-I-GDP with anchor noise;
    with ``poison`` site s1's upper-quartile-variance column multiplied by it."""
    rng = np.random.default_rng(seed)
    data = load_dataset(dataset, rng)
    parts = label_skewed(data.y, p, rng, alpha=0.5, min_records=3 * data.x.shape[1])
    xs = [data.x[ix].copy() for ix in parts]
    if poison is not None:
        var = data.x.var(axis=0)
        xs[1][:, int(np.argsort(var)[3 * len(var) // 4])] *= poison
    d = data.x.shape[1]
    anchor = make_anchor(4 * d, d, rng)
    ups = [make_upload(Method.AA_IGDP_AN, x, sample_key(d, rng), anchor=anchor, v=v,
                       rng=rng)[0] for x in xs]
    return [f"s{i}" for i in range(p)], [u.data for u in ups], [u.anchor for u in ups]


@pytest.mark.parametrize("dataset", ["digits", "breast-cancer"])
@pytest.mark.parametrize("seed", [0, 1])
def test_honest_non_iid_sites_pass_every_check(dataset, seed):
    sites, data, anchors = _uploads(dataset, 3, seed)
    diameter = sc.box_diameter(table_schema(dataset))[0] if dataset != "digits" else None
    found = sc.screen(sites, data, anchors, method="aa-igdp-an", diameter=diameter, v=0.02)
    assert found.findings == ()
    assert set(found.ran) == ({"box", "anchor", "direction"} if diameter else
                              {"spread", "anchor", "direction"})


@pytest.mark.parametrize("dataset", ["digits", "breast-cancer"])
@pytest.mark.parametrize("poison, words", [(1e-3, "less"), (1e4, "more")])
def test_the_direction_check_names_a_site_with_one_column_in_another_unit(dataset, poison,
                                                                         words):
    sites, data, anchors = _uploads(dataset, 3, 0, poison)
    findings = sc.direction_check(sites, sc.common_frame(data, anchors))
    assert [f.site for f in findings] == ["s1"]
    assert findings[0].measured > sc.DIRECTION_RATIO
    assert f"vary {findings[0].measured:.3g} times {words}" in findings[0].reason


def test_a_column_ten_thousand_times_too_large_fails_the_box_and_the_spread():
    sites, data, _ = _uploads("breast-cancer", 3, 0, 1e4)
    diameter, _ = sc.box_diameter(table_schema("breast-cancer"))
    assert [(f.site, f.check) for f in sc.box_check(sites, data, diameter)] == [("s1", "box")]
    sites, data, _ = _uploads("digits", 3, 0, 1e4)
    [finding] = sc.spread_check(sites, data)
    assert (finding.site, finding.check) == ("s1", "spread")


def test_a_scaled_or_other_anchor_is_named_and_an_undeclared_noise_skips_its_check():
    sites, data, anchors = _uploads("breast-cancer", 3, 0)
    anchors[2] = anchors[2] * 3.0
    assert [(f.site, f.check) for f in sc.anchor_check(sites, anchors, 0.02)] == \
        [("s2", "anchor")]
    found = sc.screen(sites, data, anchors, method="aa-igdp-an", diameter=None, v=None)
    assert found.skipped["anchor"] == ("the method adds anchor noise but the federation "
                                       "declares no v")
    assert "anchor" not in found.ran


def test_without_anchor_or_common_key_the_direction_check_is_skipped_and_said_so():
    sites, data, _ = _uploads("digits", 3, 0)
    found = sc.screen(sites, data, None, method="i-gdp", diameter=None)
    assert found.skipped["direction"].startswith("method i-gdp has neither an anchor")
    assert found.to_json()["checks"] == ["spread"]


def test_a_site_with_few_records_is_not_judged_and_said_so():
    sites, data, anchors = _uploads("digits", 4, 0)
    data[3] = data[3][:5]
    found = sc.screen(sites, data, anchors, method="aa-igdp-an", diameter=None, v=0.02)
    assert found.findings == () and set(found.ran) == {"spread", "anchor", "direction"}
    assert found.skipped["spread"] == "not judged: s3 (fewer than 10 records)"
    assert found.skipped["direction"] == "not judged: s3 (fewer than 96 records)"


def test_sites_that_all_differ_are_not_named_there_is_no_majority():
    """Five sites each holding two digits of their own (strongly non-iid): no majority to
    compare with, so nobody is named and the check says why."""
    rng = np.random.default_rng(0)
    data = load_dataset("digits", rng)
    xs = [data.x[(data.y == 2 * k) | (data.y == 2 * k + 1)] for k in range(5)]
    anchor = make_anchor(4 * 64, 64, rng)
    ups = [make_upload(Method.AA_IGDP_AN, x, sample_key(64, rng), anchor=anchor, v=0.02,
                       rng=rng)[0] for x in xs]
    found = sc.screen([f"s{k}" for k in range(5)], [u.data for u in ups],
                      [u.anchor for u in ups], method="aa-igdp-an", diameter=None, v=0.02)
    assert found.findings == ()
    assert "sites differ from the others: no majority" in found.skipped["direction"]


def test_the_frame_moments_in_chunks_are_the_covariances_of_the_rotated_records(monkeypatch):
    """Issue 31: the direction check's covariances, summed a chunk at a time from the uploads
    (no copy of them), are those of the centered records rotated into the common frame."""
    import noisyanchor.common.chunks as chunks
    from noisyanchor.common.linalg import polar_factor

    _, data, anchors = _uploads("digits", 3, 0)
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 17)
    bc = [b - b.mean(axis=0) for b in anchors]
    rotations = polar_factor(np.stack([b.T @ bc[0] for b in bc]))
    for y, r, moments in zip(data, rotations, sc.common_frame(data, anchors), strict=True):
        z = (y - y.mean(axis=0)) @ r
        expected = z.T @ z / len(z)
        assert moments.n == len(y)
        np.testing.assert_allclose(moments.covariance, expected, rtol=0,
                                   atol=1e-12 * np.abs(expected).max())
