"""The GOPP benchmark's early-exit section (issue 31) times the default solve, the same solve with
the full certificate and the paper's capped GPM on one CPU, and records each ratio, the objective
difference, the verdicts and the floor."""

import json
import os

import pytest

from benchmarks import bench_gopp


def test_quick_early_exit_section_records_ratios_and_verdicts(tmp_path):
    cpus = os.sched_getaffinity(0)
    out = tmp_path / "exit.json"
    assert bench_gopp.main(["--quick", "--sections", "early-exit", "--out", str(out)]) == 0
    assert os.sched_getaffinity(0) == cpus  # the CPUs are given back
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert set(runs) == {"paper-gpm", "ours", "ours-full-certificate"}
    assert runs["paper-gpm"]["iterations"] == 100  # the quick cap
    for name in ("ours", "ours-full-certificate"):
        assert runs[name]["ratio_to_paper_gpm"] == pytest.approx(
            runs[name]["seconds"] / runs["paper-gpm"]["seconds"])
        assert runs[name]["cpu_ratio_to_paper_gpm"] == pytest.approx(
            runs[name]["cpu_seconds"] / runs["paper-gpm"]["cpu_seconds"])
        assert runs[name]["stopped_by"] and len(runs[name]["loadavg"]) == 3
    assert runs["ours-full-certificate"]["certificate_early_exit"] == ""
    assert report["same_verdict"] and report["objective_rel_diff_early_vs_full"] <= 1e-12
    assert report["floor"] == bench_gopp.EXIT_FLOOR
    assert report["floor_met"] == (runs["ours"]["ratio_to_paper_gpm"] <= bench_gopp.EXIT_FLOOR)
    assert report["cpu_floor_met"] == (
        runs["ours"]["cpu_ratio_to_paper_gpm"] <= bench_gopp.EXIT_FLOOR)
    assert {"loadavg_start", "loadavg_end", "blas"} <= set(report["meta"])
