"""Sweeps on a Dask cluster (issue 24): a LocalCluster of real worker processes gives the process
pool's rows, row for row; a worker killed mid-sweep has its tasks rerun, and no row is lost or
written twice; bad scheduler names are refused."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.experiments.bench import BenchConfig
from noisyanchor.experiments.executors import check_scheduler
from noisyanchor.experiments.sweep import ROWS_FILE, RUNS_FILE, row_key, run_sweep, tasks

distributed = pytest.importorskip("distributed")

TINY = {"name": "tiny-cluster", "dataset": "digits", "max_records": 500, "participants": [3],
        "dim": 8, "draws": 4, "sigma_range": [0.0, 10.0], "v_range": [0.0, 1.0],
        "episodes": 100, "workers": 2, "grid_every": 3, "bootstrap": 20, "seed": 5,
        "models": ["logistic"], "auditors": ["pca"]}

#: Fields that hold wall and CPU times (they differ from run to run, the rest must not).
TIMINGS = ("seconds", "cpu_seconds")


def _rows(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / ROWS_FILE).read_text().splitlines()]
    keyed = {row_key(r): r for r in rows}
    assert len(keyed) == len(rows), "a row was written twice"
    return keyed


def _comparable(row: dict) -> dict:
    out = {k: v for k, v in row.items() if k not in TIMINGS}
    out["solver"] = {k: v for k, v in row["solver"].items() if k not in TIMINGS}
    return out


def _same_rows(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert _comparable(a[key]) == _comparable(b[key]), key


@pytest.fixture(scope="module")
def pool_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("pool")
    run_sweep(BenchConfig.from_dict(TINY), out, progress=False)
    return _rows(out)


@pytest.mark.slow
@pytest.mark.extended  # a Dask cluster of worker processes
def test_a_local_cluster_gives_the_process_pool_rows(pool_rows, tmp_path):
    result = run_sweep(BenchConfig.from_dict(TINY), tmp_path, progress=False, scheduler="local")
    assert result["scheduler"] == "local" and result["ran"] == len(list(tasks(
        BenchConfig.from_dict(TINY))))
    _same_rows(_rows(tmp_path), pool_rows)
    run = json.loads((tmp_path / RUNS_FILE).read_text().splitlines()[-1])
    assert run["scheduler"] == "local"


@pytest.mark.slow
@pytest.mark.extended
def test_a_worker_killed_mid_sweep_loses_nothing_and_writes_nothing_twice(pool_rows, tmp_path):
    cfg = BenchConfig.from_dict(TINY)
    total = len(pool_rows)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    killed: dict = {}
    try:
        with distributed.Client(cluster) as client:
            pids = client.run(os.getpid)  # worker address -> pid of the worker process
        assert len(pids) == 2

        def kill_one_when_rows_appear() -> None:
            deadline = time.monotonic() + 120
            rows = tmp_path / ROWS_FILE
            while time.monotonic() < deadline:
                written = len(rows.read_text().splitlines()) if rows.exists() else 0
                if written >= 1:
                    pid = sorted(pids.values())[0]
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid, rows_before=written)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_one_when_rows_appear, daemon=True)
        killer.start()
        outcome: dict = {}

        def sweep() -> None:
            outcome["result"] = run_sweep(cfg, tmp_path, progress=False,
                                          scheduler=cluster.scheduler_address)

        runner = threading.Thread(target=sweep, daemon=True)
        runner.start()
        runner.join(240)
        killer.join(5)
        assert not runner.is_alive(), "the sweep did not finish within 240 s"
        assert "result" in outcome
    finally:
        cluster.close(timeout=30)
    assert killed and killed["rows_before"] < total  # the kill came mid-sweep
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)  # that worker process is gone
    _same_rows(_rows(tmp_path), pool_rows)  # every row once, equal to the pool's


@pytest.mark.parametrize("bad", ["tcp:/host:8786", "http://host:8786", "cluster", ""])
def test_bad_schedulers_are_refused(bad):
    with pytest.raises(InvalidInputError, match="scheduler must be"):
        check_scheduler(bad)


def test_scheduler_names_and_addresses_are_accepted():
    for good in ("pool", "local", "tcp://127.0.0.1:8786", "tcp://scheduler.example:8786"):
        assert check_scheduler(good) == good


def test_scheduler_benchmark_compares_rows_but_not_wall_times():
    from benchmarks.bench_sweep_scheduler import compare

    row = {"p": 3, "method": "c-gdp", "draw": -1, "translation_scale": 1.0, "utility": 0.5,
           "seconds": 1.0, "solver": {"iterations": 3, "seconds": 0.1}}
    slower = {**row, "seconds": 9.0, "solver": {"iterations": 3, "seconds": 0.9}}
    other = {**row, "utility": 0.6}
    key = row_key(row)
    assert compare({key: row}, {key: slower})["identical"]
    assert compare({key: row}, {key: other})["differ"] == [list(key)]
    assert not compare({key: row}, {})["identical"]
