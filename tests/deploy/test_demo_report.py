"""The demo's report says what a reconstruction error means and writes its files."""

from __future__ import annotations

import json

import pytest

from noisyanchor.deploy.demo_report import (
    AttackRow,
    error_meaning,
    summary_markdown,
    write_report,
)


@pytest.mark.parametrize("error, guess, words", [
    (0.05, 0.5, "came back almost exactly (each record is off by about 5%"),
    (0.2, 0.5, "came back recognisably"),
    (0.4, 0.5, "only roughly"),
    (0.7, 0.5, "did not come back: no closer than guessing"),
])
def test_an_error_is_said_in_words(error, guess, words):
    assert words in error_meaning(error, guess)


def _summary(sites):
    return {"method": "aa-igdp-an", "participants": 2, "colluder": "p0", "pids": {"a": 1},
            "dim": 64, "anchors": 256, "v": 0.02, "sigma": 0.0, "seed": 1, "seconds": 1.0,
            "z_matches_inprocess": True, "solver": {"name": "gopp"},
            "utility": {"balanced_accuracy": 0.9}, "sites": sites,
            "attacks": {"op": {"relative_error": 0.1, "meaning": error_meaning(0.1, 0.5)}}}


def test_the_report_writes_the_summary_beside_its_figures(tmp_path, rng):
    site = {"test_rows": 10, "held_back": 5, "gain": 0.05, "gain_interval": [-0.01, 0.12],
            "local_only": {"test_balanced_accuracy": 0.8, "held_back_accuracy": 0.6},
            "federation": {"test_balanced_accuracy": 0.85, "held_back_accuracy": 0.8},
            "centralised": {"test_balanced_accuracy": 0.9, "held_back_accuracy": None}}
    summary = _summary({"p0": site, "p1": site})
    originals = rng.random((8, 64))
    files = write_report(tmp_path, summary, originals,
                         [AttackRow("op", 0.1, 0.5, originals + 0.01)], "p1")
    assert set(files.values()) == {"summary.json", "summary.md", "fig_sites.png",
                                   "fig_attacks.png"}
    for name in files.values():
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["sites"]["p0"] == site
    text = (tmp_path / "summary.md").read_text()
    assert ("| p0 | 10 | 0.800 | 0.850 | 0.900 | +0.050, 95% interval [-0.010, +0.120] | 5 | "
            "0.600 / 0.800 / n/a |") in text
    assert "**op**: error 0.100: the records came back" in text


def test_records_that_are_not_square_are_drawn_as_strips(tmp_path, rng):
    originals = rng.random((3, 30))  # e.g. 30 breast-cancer columns
    write_report(tmp_path, _summary({}), originals,
                 [AttackRow("op", 0.2, 0.5, originals)], "p1")
    assert (tmp_path / "fig_attacks.png").is_file()
    assert "## What each site gained" in summary_markdown(_summary({}))


def test_the_summary_says_every_symbol_in_words_claims_no_ceiling_and_says_what_to_change():
    text = summary_markdown(_summary({}))
    assert "ceiling" not in text and "it is not a bound" in text
    for words in ("d = 64 columns as the sites align them", "anchor A has r = 256 rows",
                  "v = 0.02 is the standard deviation of the Gaussian noise",
                  "sigma = 0.0 that of the noise added to the records themselves",
                  "The collaboration matrix Z (", "`X` holds a target's records, `X^` the "
                  "attack's reconstruction"):
        assert words in text, words
    # After the attacks: where the threats are measured, and what a site can change.
    change = text.index("## What a site can change")
    assert text.index("## What the colluder") < change < text.index("## Files")
    assert "`THREAT_MODEL.md`" in text[change:]
    for lever in ("**anchor noise** `v`", "**private-data noise** `sigma`",
                  "**a public projection** `F`", "**the downstream model**"):
        assert lever in text[change:], lever
