"""Auditor linkage: chance on random reconstructions, certain on exact ones."""

import numpy as np

from noisyanchor.experiments.datasets import load_digits, make_synthetic
from noisyanchor.experiments.linkage import (
    attack_set_members,
    exact_source_galleries,
    fit_auditor,
    identity_galleries,
    linkage_accuracy,
    strongest_attack,
)
from noisyanchor.experiments.partition import identity_disjoint


def _digits_setup(rng, episodes):
    data = load_digits()
    pool = rng.random(len(data.y)) < 0.2
    auditor = fit_auditor(data.x[pool], 32)
    bank = auditor.embed(data.x)
    gal = exact_source_galleries(data.y, np.flatnonzero(~pool), rng, episodes=episodes)
    return data, auditor, bank, gal


def test_exact_reconstructions_are_always_linked_to_their_source(rng):
    data, auditor, bank, gal = _digits_setup(rng, 1000)
    acc = linkage_accuracy(auditor.embed(data.x[gal.queries]), bank, gal)
    assert acc == 1.0


def test_random_reconstructions_link_at_chance(rng):
    episodes = 4000
    _data, auditor, bank, gal = _digits_setup(rng, episodes)
    acc = linkage_accuracy(auditor.embed(rng.random((episodes, 64))), bank, gal)
    # Binomial(4000, 0.1): standard deviation 0.0047; 4 sigma tolerance.
    assert abs(acc - 0.1) < 0.019


def test_galleries_hold_distinct_same_label_candidates(rng):
    data, _, _, gal = _digits_setup(rng, 300)
    for q, cands, t in zip(gal.queries, gal.candidates, gal.truth, strict=True):
        assert cands[t] == q and len(set(cands.tolist())) == 10
        assert np.all(data.y[cands] == data.y[q])


def test_identity_linkage_finds_another_record_of_the_same_identity(rng):
    data = make_synthetic(rng, n=3000, d=16, classes=5, identities=150, identity_spread=1.0)
    _tags, reference = identity_disjoint(data.ids, rng)
    auditor = fit_auditor(data.x[:500], 16)
    bank = auditor.embed(data.x)
    queries = np.flatnonzero(~reference)
    gal = identity_galleries(data.ids, reference, queries, rng, episodes=2000)
    assert np.all(data.ids[gal.candidates[np.arange(2000), gal.truth]] == data.ids[gal.queries])
    assert not np.any(reference[gal.queries])  # queries are never the held-out reference
    exact = linkage_accuracy(auditor.embed(data.x[gal.queries]), bank, gal)
    rand = linkage_accuracy(auditor.embed(rng.standard_normal((2000, 16)) * 3), bank, gal)
    assert exact > 0.6  # same identity, different record: well above chance
    assert abs(rand - 0.1) < 0.027  # Binomial(2000, 0.1): sd 0.0067, 4 sigma


def test_an_attack_on_the_uploads_alone_competes_under_every_threat():
    """ICA needs nothing but the uploads, so every threat allows it: it joins each attack set
    (not the paper's), and where it links most it is the set's strongest."""
    threats = {"op": "colluder", "known_input_17": "analyst", "known_sample": "public",
               "ica": "uploads"}
    names = list(threats)
    assert attack_set_members(names, "aa-igdp-an", "all", threats) == ["op", "ica"]
    assert attack_set_members(names, "aa-igdp-an", "analyst", threats) == ["known_input_17",
                                                                            "ica"]
    assert attack_set_members(names, "aa-igdp-an", "public", threats) == ["known_sample", "ica"]
    assert attack_set_members(names, "aa-igdp-an", "paper", threats) == ["op"]
    link = {"op": 0.2, "known_input_17": 0.3, "known_sample": 0.1, "ica": 0.25}
    assert strongest_attack(link, "aa-igdp-an", "public", threats) == ("ica", 0.25)
    assert strongest_attack(link, "aa-igdp-an", "analyst", threats) == ("known_input_17", 0.3)
