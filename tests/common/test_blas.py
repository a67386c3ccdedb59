"""BLAS threads per operation (common/blas.py, issue 14): one thread by default, more only for
large problems on idle CPUs, an override for everything, a process-wide count that concurrent
and nested blocks share without oversubscribing, and GOPP workers that fit beside BLAS."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from noisyanchor.common import blas
from noisyanchor.common import gopp as gopp_module
from noisyanchor.common.blas import (
    EIGH_CROSSOVER,
    GEMM_CROSSOVER_FLOPS,
    blas_threads,
    configure_blas,
    eigh_threads,
    gemm_threads,
    idle_cpus,
    with_blas_threads,
    worker_budget,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gopp import solve_gopp


def _counts() -> set[int]:
    """Thread counts of every loaded BLAS (numpy's and scipy's)."""
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.fixture
def four_cpus(monkeypatch):
    """A process with 4 CPUs, all idle, and no thread pin in the environment; the test suite's
    one-thread pin is restored afterwards."""
    for name in blas.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(blas, "available_cpus", lambda: 4)
    monkeypatch.setattr(blas, "idle_cpus", lambda: 4)  # all idle
    configure_blas(announce=False)
    yield
    monkeypatch.undo()
    configure_blas(announce=False)  # back to the environment's pin (tests/conftest.py)
    assert _counts() == {1}


def test_default_is_one_thread_and_large_problems_get_the_idle_cpus(four_cpus):
    configure_blas(announce=False)
    assert _counts() == {1}
    assert eigh_threads(EIGH_CROSSOVER - 1) == 1 and eigh_threads(EIGH_CROSSOVER) == 4
    assert gemm_threads(GEMM_CROSSOVER_FLOPS / 2) == 1 and gemm_threads(GEMM_CROSSOVER_FLOPS) == 4
    with blas_threads(eigh_threads(2 * EIGH_CROSSOVER)) as held:
        assert held == 4 and _counts() == {4}
    assert _counts() == {1}


class _FakeTimes:
    """A load source: ``CpuTimes`` before and after the window, from the idle CPUs of the window
    (of 4) and the CPU seconds this process's native threads used in it (10 ms ticks, 50 ms
    window: 20 ticks in all)."""

    def __init__(self, idle: float, own_native: float = 0.0) -> None:
        window = blas.IDLE_WINDOW * 100  # ticks per CPU
        self.samples = iter([blas.CpuTimes(1000.0, 5000.0, 7.0),
                             blas.CpuTimes(1000.0 + idle * window, 5000.0 + 4 * window,
                                           7.0 + own_native * window)])
        self.waited: list[float] = []

    def read(self) -> blas.CpuTimes:
        return next(self.samples)

    def wait(self, seconds: float) -> None:
        self.waited.append(seconds)


@pytest.mark.parametrize(("idle", "own_native", "threads"), [
    (4.0, 0.0, 4),  # idle machine (this thread slept through the window)
    (3.0, 0.0, 3),  # one busy neighbour: no thread on its CPU
    (1.0, 0.0, 1),  # three busy: this thread alone
    (1.2, 0.0, 1),  # a neighbour that paused for a tick is still a neighbour
    (1.74, 0.0, 1), (1.75, 0.0, 2),  # the rule: a CPU at least 3/4 idle counts
    (0.0, 0.0, 1),  # never fewer than one
    (2.0, 2.0, 4),  # this process's own spinning BLAS workers are not a neighbour
])
def test_threads_follow_the_cpus_idle_over_the_window(monkeypatch, idle, own_native, threads):
    monkeypatch.setattr(blas, "available_cpus", lambda: 4)
    fake = _FakeTimes(idle, own_native)
    assert idle_cpus(fake.read, fake.wait) == threads
    assert fake.waited == [blas.IDLE_WINDOW]


def test_the_decision_rule_is_floor_of_idle_plus_a_quarter():
    assert blas.IDLE_CPU_FRACTION == 0.75
    assert [blas.threads_for_idle(x, 2) for x in (0.0, 1.0, 1.2, 1.74, 1.75, 2.0, 9.0)] == [
        1, 1, 1, 1, 2, 2, 2]


def test_unreadable_or_empty_windows(monkeypatch):
    monkeypatch.setattr(blas, "available_cpus", lambda: 4)
    assert idle_cpus(lambda: None, lambda _: None) == 4  # not Linux: every CPU, as before
    same = blas.CpuTimes(1.0, 2.0, 0.0)
    assert idle_cpus(lambda: same, lambda _: None) == 1  # no tick seen: one thread


def test_one_measure_per_solve_and_none_for_small_ones(four_cpus, monkeypatch):
    calls = []

    def measure() -> int:
        calls.append(1)
        return 2

    monkeypatch.setattr(blas, "idle_cpus", measure)
    idle = blas.once()
    assert eigh_threads(EIGH_CROSSOVER - 1, idle) == 1 and not calls  # small: not measured
    assert eigh_threads(EIGH_CROSSOVER, idle) == 2 and gemm_threads(1e12, idle) == 2
    assert len(calls) == 1  # held for the solve
    assert gemm_threads(1e12, blas.once()) == 2 and len(calls) == 2  # the next solve re-measures
    assert eigh_threads(EIGH_CROSSOVER) == 2 and len(calls) == 3  # no solve: measured now


def test_solve_gopp_measures_the_idle_cpus_once(four_cpus, monkeypatch):
    calls = []
    monkeypatch.setattr(blas, "idle_cpus", lambda: calls.append(1) or 1)
    monkeypatch.setattr(blas, "GEMM_CROSSOVER_FLOPS", 0.0)  # every operation asks
    monkeypatch.setattr(blas, "EIGH_CROSSOVER", 0)
    b = [np.random.default_rng(i).standard_normal((30, 6)) for i in range(3)]
    solve_gopp(b, max_iter=3)
    solve_gopp(b, max_iter=3)
    assert len(calls) == 2


def test_the_window_reads_this_machine(monkeypatch):
    times = blas._cpu_times()
    if times is None:
        pytest.skip("needs /proc/stat")
    assert times.total >= times.idle >= 0 and times.own_native >= 0
    assert 1 <= idle_cpus() <= blas.available_cpus()


def test_thread_stats_see_a_blas_worker_that_python_did_not_start():
    if not blas._thread_stats() or blas.available_cpus() < 2:
        pytest.skip("needs /proc/self/task and two CPUs")
    assert threading.get_native_id() in blas._thread_stats()  # this one
    stop = threading.Event()
    a = np.random.default_rng(0).standard_normal((600, 600))

    def multiply() -> None:  # two BLAS threads: the pool's worker is not a Python thread
        with threadpool_limits(2):
            while not stop.is_set():
                a @ a

    worker = threading.Thread(target=multiply)
    worker.start()
    try:
        deadline, seen = time.monotonic() + 10.0, 0
        while seen == 0 and time.monotonic() < deadline:
            python = {t.native_id for t in threading.enumerate()}
            seen = sum(1 for tid in blas._thread_stats() if tid not in python)
    finally:
        stop.set()
        worker.join(10.0)
    assert seen >= 1


def test_an_outer_block_caps_inner_ones_and_concurrent_blocks_share_the_smallest(four_cpus):
    configure_blas(announce=False)
    with blas_threads(2):
        assert _counts() == {2}
        with blas_threads(4) as held:
            assert held == 2 and _counts() == {2}  # capped by the outer block
        entered, leave = threading.Event(), threading.Event()

        def other() -> None:
            with blas_threads(1):
                entered.set()
                leave.wait(10)

        worker = threading.Thread(target=other)
        worker.start()
        assert entered.wait(10)
        assert _counts() == {1}  # another thread's smaller request holds for the process
        leave.set()
        worker.join()
        assert _counts() == {2}
    assert _counts() == {1}


def test_override_fixes_every_operation_and_workers_fit_beside_it(four_cpus):
    configure_blas(3, announce=False)
    assert eigh_threads(10) == gemm_threads(1.0) == 3
    with blas_threads(1) as held:
        assert held == 3 and _counts() == {3}
    assert worker_budget(4) == (1, 3)  # 1 worker x 3 BLAS threads <= 4 CPUs
    configure_blas(0, announce=False)  # 0: chosen per operation again
    assert worker_budget(4) == (4, 1) and worker_budget(2) == (2, 1)


def test_an_environment_pin_is_an_override(four_cpus, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    pol = configure_blas(announce=False)
    assert (pol.override, pol.source) == (2, "OMP_NUM_THREADS")
    assert eigh_threads(1) == 2 and _counts() == {2}
    assert configure_blas(1, announce=False).source == "setting"  # an explicit setting wins


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(InvalidInputError, match="blas_threads"):
        configure_blas(bad, announce=False)


def test_the_choice_is_logged_once(four_cpus, caplog):
    blas._policy = None  # a fresh process
    with caplog.at_level(logging.INFO, logger="noisyanchor.common.blas"):
        configure_blas()
        configure_blas()
    lines = [r.getMessage() for r in caplog.records if "BLAS threads" in r.getMessage()]
    assert len(lines) == 1 and "4 CPUs available" in lines[0] and "openblas" in lines[0]


def test_decorated_functions_run_at_the_chosen_count(four_cpus):
    configure_blas(announce=False)

    @with_blas_threads(lambda n: eigh_threads(n))
    def inside(n: int) -> set[int]:
        return _counts()

    assert inside(10) == {1} and inside(EIGH_CROSSOVER) == {4} and _counts() == {1}


def test_gopp_workers_and_blas_threads_never_oversubscribe(four_cpus, monkeypatch):
    monkeypatch.setattr(gopp_module, "available_cpus", lambda: 4)
    monkeypatch.setattr(gopp_module, "PARALLEL_MIN_FLOPS", 0.0)
    rng = np.random.default_rng(0)
    b = [rng.standard_normal((30, 6)) for _ in range(5)]
    for override, expected in ((0, (4, 1)), (2, (2, 2)), (4, (1, 4))):
        configure_blas(override, announce=False)
        threads = solve_gopp(b, max_iter=3).blas_threads
        assert (threads["workers"], threads["steps"]) == expected
        assert threads["workers"] * threads["steps"] <= 4
    assert _counts() == {4}  # the override of 4 is the default between operations


def test_scipy_s_blas_loaded_after_the_policy_gets_its_count():
    # The analyst sets its policy without importing scipy (it listens first, issue 22) and
    # loads scipy's own OpenBLAS afterwards: that library must get the same count. Fresh
    # process: scipy is already imported here. No thread pin: OpenBLAS would start at it.
    code = ("import os, sys\n"
            "for v in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):\n"
            "    os.environ.pop(v, None)\n"
            "from threadpoolctl import threadpool_info\n"
            "from noisyanchor.common.blas import configure_blas, load_scipy_blas\n"
            "configure_blas(announce=False, load_scipy=False)\n"
            "assert 'scipy' not in sys.modules\n"
            "load_scipy_blas()\n"
            "print(sorted((i['filepath'], i['num_threads']) for i in threadpool_info()\n"
            "             if i['user_api'] == 'blas'))\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, check=True).stdout
    libraries = ast.literal_eval(out)
    assert any("scipy" in path for path, _ in libraries), libraries  # scipy's own was loaded
    assert {n for _, n in libraries} == {1}, libraries
