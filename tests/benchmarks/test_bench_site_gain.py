"""The site-gain benchmark runs whole demos without a colluder and records, per site, the
model alone, the federation's and the centralised one on records the site never uploaded."""

import json

import pytest

from benchmarks import bench_site_gain

# Every run starts the analyst and the sites as processes (one run: ~15 s quiet, ~45 s loaded).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_quick_run_records_every_site_and_the_summary(tmp_path):
    out = tmp_path / "site_gain.json"
    assert bench_site_gain.main(["--sites", "2", "--noise", "0.02", "--seeds", "1", "--out",
                                 str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"loadavg_start", "loadavg_end", "held_back"} <= set(report["meta"])
    assert [(r["participants"], r["v"]) for r in report["summary"]] == [(2, 0.02)]
    runs = report["runs"]
    assert len(runs) == 1 and runs[0]["z_matches_inprocess"]
    for run in runs:
        for site in run["sites"].values():
            assert site["held_back"] > 0
            for model in bench_site_gain.MODELS:
                assert 0 <= site[model]["held_back_balanced_accuracy"] <= 1
    row = report["summary"][0]
    assert row["sites_gaining"] + row["sites_losing"] <= row["sites"] == 2
