"""The scale benchmark times the real system (analyst and sites as processes over mutual TLS)
and measures its analyst; in process, it measures the analyst from stored uploads to the result
with the baseline commit's code and this tree's, in processes that import the code they claim
to."""

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


@pytest.mark.e2e
def test_the_real_system_is_timed_and_its_analyst_measured(tmp_path):
    out = tmp_path / "scale_system.json"
    bench_scale.main(["--grid", "2:400:6", "3:400:6", "--out", str(out)])
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for row, p in zip(report["sizes"], (2, 3), strict=True):
        assert (row["p"], row["records_per_site"], row["d"]) == (p, 400, 6)
        assert 0 < row["seconds_to_last_upload"] <= row["seconds_to_result"] \
            <= row["seconds_to_every_prediction"]
        assert row["analyst_peak_rss"] >= row["analyst_peak_sampled"]["rssanon"] > 0
        assert row["uploaded_bytes"] > p * 400 * 6 * 8 and row["model_fit"] == "in-memory"
    (over_p,) = report["exponents"].values()
    assert over_p["p"] == [2, 3] and set(over_p) >= {"seconds_to_result", "analyst_peak_rss"}


def test_growth_exponents_are_fitted_per_family():
    from benchmarks.scale_system import exponents

    rows = [{"p": 3, "records_per_site": n, "d": 50, "seconds_to_result": n ** 1.5,
             "seconds_to_every_prediction": 2.0 * n, "analyst_peak_rss": 7.0} for n in (10, 100)]
    (family,) = exponents(rows).values()
    assert family["seconds_to_result"] == pytest.approx(1.5)
    assert family["seconds_to_every_prediction"] == pytest.approx(1.0)
    assert family["analyst_peak_rss"] == pytest.approx(0.0, abs=1e-12)
