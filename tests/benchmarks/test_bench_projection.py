"""The projection benchmark at a toy size: every method to the same gap (or its cap), a JSON
with the load and BLAS settings of the run, rows merged across split runs, and its chart."""

import json

from benchmarks import bench_projection
from noisyanchor.common import blas


def test_quick_run_merges_split_runs_and_draws_the_chart(tmp_path):
    out = tmp_path / "projection.json"
    common = ["--epsilons", "1", "--min-cap", "0.5", "--max-cap", "1", "--out", str(out)]
    assert bench_projection.main(["--n", "40", *common]) == 0
    assert bench_projection.main(["--n", "60", "--merge", *common]) == 0
    blas.configure_blas(announce=False)  # the suite's one-thread pin again
    report = json.loads(out.read_text())
    assert [(row["n"], row["epsilon"]) for row in report["rows"]] == [(40, 1.0), (60, 1.0)]
    assert report["blas"] and report["cpus"] >= 1
    for row in report["rows"]:
        assert {"load_before", "load_after", "eigh_threads_now", "baseline_cap"} <= set(row)
        newton = row["methods"]["newton"]
        assert newton["reached_target"] and newton["relative_gap"] <= 1e-6
        assert newton["feasibility"] <= 1e-10
        assert set(row["methods"]) == {"newton", "dykstra", "aap", "statsmodels"}
        for name, run in row["methods"].items():  # a capped run is flagged as such
            assert run["capped"] == (not run["reached_target"]), name
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
