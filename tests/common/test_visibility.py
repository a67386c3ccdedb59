"""What one site may see (common.visibility): its own entries and the federation's, at every
depth, whatever the per-site key is called."""

from hypothesis import given
from hypothesis import strategies as st

from noisyanchor.common.visibility import visible_json, visible_to

SITES = ("org-a", "org-b", "org-c")

RESULT = {
    "federation_id": "f", "participants": list(SITES), "records": 90,
    "row_ranges": {"org-a": [0, 30], "org-b": [30, 60], "org-c": [60, 90]},
    "site_models": {s: {"file": f"{s}.npz", "sha256": "x"} for s in SITES},
    "model": {"balanced_accuracy": 0.9, "sites": {s: {"n_test": 3} for s in SITES}},
    # Keys added later by other work: filtered without a change to the rule.
    "contributions": {s: {t: 0.1 for t in SITES} for s in SITES},
    "screening": {"flagged": "org-c", "reason": "one column repeated"},
}


def test_a_site_keeps_the_federation_fields_and_its_own_entries_only():
    seen = visible_to(RESULT, "org-b", SITES)
    assert seen["row_ranges"] == {"org-b": [30, 60]}
    assert list(seen["site_models"]) == ["org-b"]
    assert seen["model"] == {"balanced_accuracy": 0.9, "sites": {"org-b": {"n_test": 3}}}
    assert seen["contributions"] == {"org-b": {"org-b": 0.1}}
    # Federation-wide fields and values that name a site (the roster, a screening verdict).
    assert seen["participants"] == list(SITES) and seen["records"] == 90
    assert seen["screening"] == RESULT["screening"]
    assert visible_json("", "org-b", SITES) == ""


@given(st.recursive(st.none() | st.integers() | st.sampled_from(SITES),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from((*SITES, "x", "y")), inner, max_size=4)))
def test_no_other_site_key_survives_at_any_depth(value):
    def keys(v):
        if isinstance(v, dict):
            yield from v
            for item in v.values():
                yield from keys(item)
        elif isinstance(v, list):
            for item in v:
                yield from keys(item)

    assert not set(keys(visible_to(value, "org-a", SITES))) & {"org-b", "org-c"}
