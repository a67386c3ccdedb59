"""The shared-host benchmark runs each workload alone and beside a competitor it starts and
stops, and records the load, the BLAS settings and the threads chosen (issue 14), and the
policy before issue 31 beside the current one."""

import json

import pytest

from benchmarks import bench_shared_host
from noisyanchor.common import blas

pytestmark = pytest.mark.e2e  # starts the competing process


def test_quick_run_records_times_threads_and_load(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_shared_host, "COMPETITOR_WARMUP", 0.1)
    out = tmp_path / "shared_host.json"
    code = bench_shared_host.main(["--quick", "--repeat", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    blas.configure_blas(announce=False)  # the suite's one-thread pin again
    assert code in (0, 1) and report["floor"] == bench_shared_host.FLOOR
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = report["meta"]
    assert {"loadavg_start", "loadavg_end", "blas", "cpus", "env"} <= set(meta)
    assert meta["blas"]["libraries"]
    rows = {r["workload"]: r for r in report["shared_host"]}
    assert any(name.startswith("eigh") for name in rows)
    assert any(name.startswith("Gram release") for name in rows)
    # GOPP at two sizes, under the policy and under the one before issue 31; above v_PT with
    # the certificate's early exit and with the full certificate
    assert sum(name.startswith("GOPP") for name in rows) == 6
    assert sum("runnable count" in name for name in rows) == 2
    above = [r for name, r in rows.items() if "1.5 v_PT" in name]
    assert len(above) == 2 and sum("full certificate" in r["workload"] for r in above) == 1
    for r in above:
        assert r["alone"]["threads"]["certificate_early_exit"] == (
            "full certificate" not in r["workload"])
    for r in report["decisions"]:  # how often each policy granted a second thread
        for side in ("alone", "with_competitor"):
            assert 0.0 <= r[side]["granted_more_than_one"] <= 1.0
            assert len(r[side]["counts"]) == bench_shared_host.DECISIONS
    for r in rows.values():
        for side in ("alone", "with_competitor"):
            assert r[side]["seconds"] > 0 and r[side]["threads"]
        assert r["slowdown"] == pytest.approx(r["with_competitor"]["seconds"]
                                              / r["alone"]["seconds"])
    # Baseline rows run at the library's default count: every CPU.
    base = [r for r in rows.values() if r["baseline"]]
    assert base and all(r["alone"]["threads"]["blas"] == meta["cpus"] for r in base)
    assert report["floor_met"] == all(r["within_floor"] for r in rows.values()
                                      if not r["baseline"])


def test_merge_keeps_the_other_workloads_rows_in_their_places():
    def row(name, slowdown):
        return {"workload": name, "slowdown": slowdown, "baseline": False,
                "within_floor": slowdown <= bench_shared_host.FLOOR}

    old = {"meta": {"started_utc": "old"}, "shared_host": [row("a", 1.0), row("b", 4.0),
                                                          row("c", 1.5)]}
    new = {"meta": {"started_utc": "new"}, "shared_host": [row("b", 2.0), row("d", 1.2)]}
    report = bench_shared_host.merged(old, new)
    assert [(r["workload"], r["slowdown"]) for r in report["shared_host"]] == [
        ("a", 1.0), ("b", 2.0), ("c", 1.5), ("d", 1.2)]
    assert report["meta"]["merged_with"] == {"started_utc": "old"} and report["floor_met"]
