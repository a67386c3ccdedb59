"""The site-gain benchmark runs whole demos without a colluder on every shipped template's
protocol and records, per site, the model alone, the federation's and the centralised one on
records the site never uploaded, with the site's and the analyst's per-site files copied whole."""

import json

import pytest

from benchmarks import bench_site_gain

# Every run starts the analyst and the sites as processes (one run: ~20 s quiet, ~60 s loaded).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_every_template_has_its_protocol_and_no_default_projection():
    for template in bench_site_gain.TEMPLATES:
        protocol, model = bench_site_gain.template_protocol(template)
        assert protocol["method"] == "aa-igdp-an" and model == "logistic"
        assert "dim" not in protocol  # no public projection on these small tables


def test_quick_run_records_every_site_and_the_summary(tmp_path):
    out = tmp_path / "site_gain.json"
    assert bench_site_gain.main(["--sites", "2", "--seeds", "1", "--template",
                                 "federation-local.toml", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"loadavg_start", "loadavg_end", "held_back"} <= set(report["meta"])
    section = report["sections"]["templates"]
    assert [(r["template"], r["participants"]) for r in section["summary"]] == [
        ("federation-local.toml", 2)]
    runs = section["runs"]
    assert len(runs) == 1 and runs[0]["z_matches_inprocess"]
    for pid, site in runs[0]["sites"].items():
        assert site["held_back"] > 0
        for model in bench_site_gain.MODELS:
            assert 0 <= site[model]["held_back_balanced_accuracy"] <= 1
        # Copied whole: the site's gain.json and the analyst's per-site metrics.
        assert site["gain_json"]["participant"] == pid
        assert site["gain_json"]["gain"] == site["gain"]
        assert site["analyst"]["model.sites"]["n_test"] == site["test_rows"]
    row = section["summary"][0]
    assert row["held_back_site_runs_gaining"] + row["held_back_site_runs_losing"] <= 2
    assert set(row["site_mean_gain"]) == set(runs[0]["sites"])
