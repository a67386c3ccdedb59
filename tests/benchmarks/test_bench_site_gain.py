"""The site-gain benchmark runs whole demos without a colluder on every shipped template's
protocol and records, per site, the model alone, the federation's and the centralised one on
records the site never uploaded, with the site's and the analyst's per-site files copied whole;
its ``poisoned`` section scales one site's column and screens it under every policy, and is
written beside the sections already measured."""

import json

import pytest

from benchmarks import bench_site_gain

# A templates run starts the analyst and the sites as processes (~20 s quiet, ~60 s loaded).


def test_every_template_has_its_protocol_and_no_default_projection():
    for template in bench_site_gain.TEMPLATES:
        protocol, model = bench_site_gain.template_protocol(template)
        assert protocol["method"] == "aa-igdp-an" and model == "logistic"
        assert "dim" not in protocol  # no public projection on these small tables


@pytest.mark.e2e
@pytest.mark.slow
def test_quick_run_records_every_site_and_the_summary(tmp_path):
    out = tmp_path / "site_gain.json"
    assert bench_site_gain.main(["--section", "templates", "--sites", "2", "--seeds", "1",
                                 "--template",
                                 "federation-local.toml", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = report["sections"]["templates"]
    assert {"loadavg_start", "loadavg_end", "held_back"} <= set(section["meta"])
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


def poisoned(dataset: str, factor: float, named: bool, difference: float | None,
             accuracy: float) -> dict:
    """A compact poisoned run as :func:`bench_site_gain.run_poisoned_case` keeps it."""
    return {"template": "t", "dataset": dataset, "participants": 3, "seed": 1,
            "variant": {"factor": factor},
            "named_before_alignment": {"refuse": named, "exclude": named, "accept": True},
            "checks": ["box"] if named else [], "refuse_aligned_nothing": named,
            "exclude_max_difference": difference,
            "others_mean": {"honest": accuracy, "accepted": accuracy - 0.5,
                            "excluded": accuracy, "without": accuracy}}


def test_poisoned_summary_counts_named_runs_and_keeps_the_largest_exclude_difference():
    runs = [poisoned("digits", 1e4, True, 0.0, 0.9), poisoned("digits", 1e4, False, None, 0.7),
            poisoned("digits", 1e-3, True, 2e-12, 0.8)]
    big, slip = bench_site_gain.summarise_poisoned(runs)
    assert (big["factor"], big["runs"], slip["factor"], slip["runs"]) == (1e4, 2, 1e-3, 1)
    assert big["named_before_alignment"] == {"refuse": 1, "exclude": 1, "accept": 2}
    assert big["refuse_aligned_nothing"] == 1 and big["checks"] == ["box"]
    assert big["exclude_max_difference"] == 0.0 and slip["exclude_max_difference"] == 2e-12
    assert big["others_honest_balanced_accuracy"] == pytest.approx(0.8)
    assert big["others_accepted_balanced_accuracy"] == pytest.approx(0.3)


@pytest.mark.slow
def test_poisoned_section_is_merged_beside_the_sections_already_measured(tmp_path):
    out = tmp_path / "site_gain.json"
    measured = {"meta": {"seeds_asked": 10}, "summary": [{"template": "x"}],
                "runs": [{"seed": 1}]}
    out.write_text(json.dumps({"meta": measured["meta"], "sections": {
        "templates": {k: v for k, v in measured.items() if k != "meta"}}}))
    assert bench_site_gain.main(["--section", "poisoned", "--sites", "3", "--seeds", "1",
                                 "--template", "federation-breast-cancer.toml",
                                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["sections"]["templates"] == measured  # kept, with the file's meta
    section = report["sections"]["poisoned"]
    assert section["meta"]["runs"] == 2 and section["meta"]["seeds_asked"] == 1
    assert [(r["dataset"], r["participants"], r["factor"]) for r in section["summary"]] == [
        ("breast-cancer", 3, 1e4), ("breast-cancer", 3, 1e-3)]
    for row in section["summary"]:
        assert row["named_before_alignment"] == {"refuse": 1, "exclude": 1, "accept": 1}
        assert row["refuse_aligned_nothing"] == 1 and row["exclude_max_difference"] <= 1e-9
        assert row["others_excluded_balanced_accuracy"] == pytest.approx(
            row["others_without_balanced_accuracy"], abs=1e-9)
    assert all(set(r["others_mean"]) == {"honest", "accepted", "excluded", "without"}
               for r in section["runs"])
    png = tmp_path / "site_gain_poisoned.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not out.with_suffix(".png").exists()  # the templates' figure is not redrawn
