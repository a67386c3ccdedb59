"""The scale benchmark measures the analyst from stored uploads to the result with the
baseline commit's code and this tree's, in processes that import the code they claim to."""

import json

import pytest

from benchmarks import bench_scale

# Four processes (a setup, two runs, git archive), each importing the analyst: ~20 s loaded.
pytestmark = pytest.mark.slow


def test_quick_run_measures_both_codes_on_the_same_uploads(tmp_path):
    out = tmp_path / "scale.json"
    bench_scale.main(["--in-process", "--sizes", "600", "--baseline", "HEAD", "--out", str(out)])
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (row,) = report["sizes"]
    assert row["records_per_site"] == 600 and row["uploaded_bytes"] > 600 * bench_scale.D * 8
    assert "/baseline/site/" in row["baseline"]["code"]
    assert "/baseline/" not in row["streamed"]["code"]
    for label in ("baseline", "streamed"):
        run = row[label]
        assert run["peak_rss"] >= run["rss_before_alignment"] > 0
        assert run["peak_rss_anon_sampled"] > 0
    assert row["same_result"] == {"balanced_accuracy_difference": 0.0,
                                  "contributions_equal_to_1e-12": True}


def test_the_fit_section_measures_both_modes_on_the_same_z(tmp_path):
    bench_scale.main(["--fit", "--fit-rows", "3000", "--out", str(tmp_path / "scale.json")])
    (report,) = json.loads((tmp_path / "scale_fit.json").read_text())["sizes"]
    assert report["rows"] == 3000 and report["z_bytes"] >= 3000 * bench_scale.D * 8
    runs = report["runs"]
    assert runs["in-memory"]["estimator"] == "LogisticRegression"
    assert runs["out-of-core"]["estimator"] == "SGDClassifier"
    for run in runs.values():
        assert run["peak_rss"] >= run["rss_before_fit"] > 0 and 0 < run["balanced_accuracy"] <= 1
