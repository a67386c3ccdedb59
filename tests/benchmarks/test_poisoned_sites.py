"""The poisoned-site benchmark on the smallest federation: the site is named before alignment
under every policy, nothing is aligned under refuse, and under exclude the others get exactly
the federation without it."""

from __future__ import annotations

import pytest

from benchmarks.poisoned_sites import poisoned_run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("factor, check", [(1e4, "box"), (1e-3, "direction")])
def test_a_poisoned_site_is_named_under_every_policy_and_exclude_is_exact(tmp_path, factor,
                                                                          check):
    out = poisoned_run("breast-cancer", 3, 0, factor=factor, workdir=tmp_path)
    assert out["named_before_alignment"] == {"refuse": True, "exclude": True, "accept": True}
    assert check in {f["check"] for f in out["findings"] if f["site"] == "org-1"}
    assert out["refuse_aligned_nothing"] and out["refuse_told"].startswith(
        "its upload was refused by the analyst's screening before alignment")
    assert out["exclude_max_difference"] < 1e-9  # the same federation without the site
    assert set(out["others_balanced_accuracy"]["excluded"]) == {"org-0", "org-2"}
