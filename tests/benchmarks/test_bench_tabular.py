"""The tabular benchmark runs both scalings on both bundled tables in one run and records
utility, the colluder's errors, the reader's cost, the load and a chart."""

import json

import pytest

from benchmarks import bench_tabular

pytestmark = pytest.mark.slow


def test_quick_run_records_both_scalings_the_reader_and_the_load(tmp_path):
    out = tmp_path / "tabular.json"
    assert bench_tabular.main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for section in ("scaling", "reader"):
        assert {"loadavg_start", "loadavg_end", "blas", "v"} <= set(report["meta"][section])
    for name in bench_tabular.TABLES:
        summary = report["scaling"][name]["summary"]
        for label in ("declared", "unscaled"):
            for metric in bench_tabular.METRICS:
                s = summary[label][metric]
                assert s["ci95"][0] <= s["mean"] <= s["ci95"][1]
        run = report["scaling"][name]["runs"]["declared"][0]
        assert len(run["column_errors"]) == report["scaling"][name]["d_in"]
        assert run["relative_error"] == min(run["attacks"].values())
    methods = report["reader"]["methods"]
    assert set(methods) == {"read_table", "numpy_loadtxt", "replaced_loader"}
    assert all(m["seconds"] > 0 and m["peak_over_matrix"] > 0 for m in methods.values())
    # One part again keeps the other's figures.
    assert bench_tabular.main(["--quick", "--sections", "reader", "--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["scaling"] == report["scaling"] and again["reader"] != report["reader"]
