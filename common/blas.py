"""BLAS threads chosen per operation, so that linear algebra keeps its speed on a shared host.

OpenBLAS (the BLAS of numpy's and scipy's wheels) runs a pool of threads that busy-wait for
work. When another process occupies a core, a multithreaded call keeps waiting for a thread that
is not scheduled, and collapses: ``eigh`` of a 400 x 400 matrix took 1.5 s with two threads
beside one busy process against 0.044 s with one (issue 14). Hence:

* A process that does linear algebra runs its BLAS with **one thread** by default
  (:func:`configure_blas`, called at the start of the analyst server, ``simulate`` and the
  demo, and on the first use of :func:`blas_threads` by a library caller).
* An operation asks for threads by its size (:func:`eigh_threads`, :func:`gemm_threads`): more
  than one only above the measured size where a second thread pays on an idle machine
  (:data:`EIGH_CROSSOVER`, :data:`GEMM_CROSSOVER_FLOPS`), never more than the CPUs this
  process may run on (``os.sched_getaffinity``), and only as many as were idle over the last
  :data:`IDLE_WINDOW` (``/proc/stat``, :func:`idle_cpus`, :func:`threads_for_idle`), measured
  once per solve (:func:`once`), so that a busy neighbour never meets a busy-waiting pool.
* An explicit override (the analyst's ``[server] blas_threads``, ``--blas-threads`` on the
  command line, else ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` in the
  environment) fixes the count for every operation.
* Worker threads of ours (the GOPP block workers) and BLAS threads never oversubscribe the cores
  together: ``workers * blas threads <= CPUs`` (:func:`worker_budget`).

OpenBLAS's thread count is process-wide, so :func:`blas_threads` holds one count for all threads
of the process: the smallest of the requests of every :func:`blas_threads` block in progress
(an outer block caps the inner ones, and concurrent operations never oversubscribe), else the
default of one thread. Counts are set
with threadpoolctl, which reaches every BLAS loaded in the process (numpy and scipy each load
their own OpenBLAS).

References: issues 14 and 31; ``benchmarks/bench_shared_host.py`` measures the policy.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: Smallest matrix order ``n`` at which ``eigh`` gains from a second BLAS thread on an idle
#: machine (2-core development machine, numpy/scipy OpenBLAS 0.3.30-0.3.31: ``benchmarks/
#: bench_shared_host.py --crossover`` measures it; below, one thread is as fast or faster).
EIGH_CROSSOVER = 1400

#: Smallest flop count of a matrix product at which a second BLAS thread pays on an idle
#: machine (same measurement: a 400 x 400 product, 1.3e8 flops, runs 1.9x faster on two).
GEMM_CROSSOVER_FLOPS = 1e8

#: Seconds over which :func:`idle_cpus` measures the CPUs' idle time (``/proc/stat``): long
#: enough for a few scheduler ticks per CPU (5 at the usual 100 Hz of its counters), short
#: beside the solves that ask (operations above the crossovers take 0.1 s and more).
IDLE_WINDOW = 0.05

#: A CPU counts as idle when at least this fraction of it was idle over the window: the counters
#: move by whole ticks, so over :data:`IDLE_WINDOW` one CPU busy beside one idle reads between
#: about 0.8 and 1.2 idle CPUs, and an idle pair (less a little background) 1.8 to 2.
IDLE_CPU_FRACTION = 0.75


def available_cpus() -> int:
    """Number of CPUs this process may run on (its affinity mask)."""
    return len(_affinity())


def _affinity() -> set[int]:
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # not every platform has sched_getaffinity
        return set(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU times (clock ticks) read by :func:`idle_cpus`.

    Attributes
    ----------
    idle : float
        Idle and I/O-wait time of the CPUs this process may run on (``/proc/stat``).
    total : float
        All time of those CPUs.
    own_native : float
        CPU time of this process's threads that Python did not start (BLAS workers, which
        busy-wait for a while after an operation ends: not a neighbour's work).
    """

    idle: float
    total: float
    own_native: float


def idle_cpus(read: Callable[[], CpuTimes | None] | None = None,
              wait: Callable[[float], None] = time.sleep) -> int:
    """CPUs of this process idle now: the threads a large operation may use (at least 1).

    Idle time of the CPUs this process may run on, over :data:`IDLE_WINDOW` while this thread
    sleeps (so its own CPU reads idle), counting this process's native threads' time as idle
    (:class:`CpuTimes`); then :func:`threads_for_idle`. Why ``/proc/stat`` over a window and not
    ``os.getloadavg``: the load average is a one-minute moving average of runnable tasks, so it
    lags a neighbour that started or stopped by a minute and counts this process's own threads
    of the previous solve; the count of runnable tasks (the policy before issue 31, the smallest
    of three reads 1 ms apart) is a sample of instants, not of time spent busy, and issue 31
    saw it grant a second thread beside a busy process, which then ran 2-5x slower. Python
    threads of this process that compute still count as busy: they compete for the same cores.
    Where the times cannot be read (not Linux), every CPU counts as idle; where the window saw
    no tick, one thread.

    Parameters
    ----------
    read : callable, optional
        Source of :class:`CpuTimes` (tests pass a fake); default ``/proc``.
    wait : callable
        Sleeps for the window (tests pass a no-op).
    """
    cpus = available_cpus()
    read = read or _cpu_times
    before = read()
    if before is None:
        return cpus
    wait(IDLE_WINDOW)
    after = read()
    if after is None:
        return cpus
    total = after.total - before.total
    if total <= 0:
        return 1
    idle = after.idle - before.idle + after.own_native - before.own_native
    return threads_for_idle(cpus * idle / total, cpus)


def threads_for_idle(idle: float, cpus: int) -> int:
    """BLAS threads for ``idle`` idle CPUs (a measured, fractional count) of ``cpus``: one per
    CPU at least :data:`IDLE_CPU_FRACTION` idle, i.e. ``floor(idle + 1 - IDLE_CPU_FRACTION)``,
    between 1 and ``cpus``. The thread that asks counts among the idle (it slept while
    measuring), so a second thread needs a second idle CPU."""
    return max(1, min(cpus, math.floor(idle + 1.0 - IDLE_CPU_FRACTION)))


def _cpu_times() -> CpuTimes | None:
    """:class:`CpuTimes` now, from ``/proc/stat`` and ``/proc/self/task``; None where unreadable."""
    try:
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
        allowed = {f"cpu{i}" for i in _affinity()}
        idle = total = 0.0
        for line in lines:
            name, *fields = line.split()
            if name in allowed:
                ticks = [float(x) for x in fields]
                idle += ticks[3] + ticks[4]  # idle, iowait
                total += sum(ticks[:8])  # guest time is already in user and nice
    except (OSError, IndexError, ValueError):
        return None
    python_threads = {t.native_id for t in threading.enumerate()}
    native = sum(utime + stime for tid, (_, utime, stime) in _thread_stats().items()
                 if tid not in python_threads)
    return CpuTimes(idle, total, float(native))


def _thread_stats() -> dict[int, tuple[str, int, int]]:
    """``(state, utime, stime)`` of each thread of this process (``/proc/self/task/*/stat``;
    times in clock ticks); empty where that cannot be read."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # the thread ended meanwhile
            continue
        # the fields follow the command name, which is in parentheses and may hold any byte
        fields = stat[stat.rfind(b")") + 2:].split()
        out[int(tid)] = (fields[0].decode(), int(fields[11]), int(fields[12]))
    return out


def once(measure: Callable[[], int] | None = None) -> Callable[[], int]:
    """``measure`` (default :func:`idle_cpus`) taken at the first call and then held: one
    decision per solve, re-measured by the next solve, and none when no operation of the solve
    is large enough to ask."""
    return functools.cache(measure or (lambda: idle_cpus()))


@dataclass(frozen=True)
class BlasPolicy:
    """How many BLAS threads operations get.

    Attributes
    ----------
    override : int or None
        Threads for every operation (``blas_threads`` setting or the environment), or None to
        choose by size.
    source : str
        Where the override comes from (``"setting"``, an environment variable), or ``"auto"``.
    cpus : int
        CPUs this process may run on.
    """

    override: int | None
    cpus: int
    source: str = "auto"

    def describe(self) -> str:
        """One line for the log."""
        libs = ", ".join(f"{i['internal_api']} {i['version']} ({i.get('threading_layer')})"
                         for i in _blas_info()) or "none found"
        if self.override is not None:
            how = f"{self.override} per operation ({self.source})"
        else:
            how = (f"1 per operation; up to {self.cpus} idle CPUs for eigh n >= "
                   f"{EIGH_CROSSOVER} and products >= {GEMM_CROSSOVER_FLOPS:.0e} flops")
        return f"BLAS threads: {how}; {self.cpus} CPUs available; libraries: {libs}"


_lock = threading.Lock()
_policy: BlasPolicy | None = None
_requests: list[int] = []  # counts requested by the blocks in progress, in every thread


def _blas_info() -> list[dict]:
    from threadpoolctl import threadpool_info

    return [i for i in threadpool_info() if i["user_api"] == "blas"]


#: The BLAS libraries' controllers (threadpoolctl), and how many modules were loaded when they
#: were found: a scan reads the process's memory map (about 2 ms), so it is repeated only after
#: new modules were imported (a BLAS arrives with an extension module, as scipy's does).
_controllers: list = []
_scanned_modules = -1


def _blas_controllers() -> list:
    """Controllers of every loaded BLAS, rescanned only when ``sys.modules`` grew (caller holds
    ``_lock``)."""
    global _controllers, _scanned_modules
    if len(sys.modules) != _scanned_modules:
        from threadpoolctl import ThreadpoolController

        _controllers = ThreadpoolController().select(user_api="blas").lib_controllers
        _scanned_modules = len(sys.modules)
    return _controllers


def _apply(threads: int) -> None:
    """Set every loaded BLAS to ``threads`` (caller holds ``_lock``).

    A library already at ``threads`` is left alone: asking its count is one call into it, while
    a change (and threadpoolctl's scan for libraries) cost milliseconds, which used to dominate
    small GOPP solves (8 changes per solve, issue 24). Counts that other code changed meanwhile
    are seen and set again."""
    import threadpoolctl

    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None),
                    "clear_controlling_thread", None)
    for lib in _blas_controllers():
        if lib.num_threads == threads:
            continue
        # threadpoolctl lets only the first thread that set a pthreads OpenBLAS set it again (the
        # others silently do nothing); every change here is serialised by _lock, so any thread of
        # ours may make the next one.
        if clear is not None:  # threadpoolctl >= 3.6
            clear(force=True)
        lib.set_num_threads(threads)
    if clear is not None:
        clear(force=True)


#: Environment variables a user may pin BLAS threads with, in the order OpenBLAS reads them.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def check_blas_threads(value: int) -> int:
    """``value`` if it is an integer >= 0 (0: chosen per operation)."""
    from noisyanchor.common.validation import check_count

    return check_count(value, "blas_threads", minimum=0)


def _environment_threads() -> tuple[int | None, str]:
    for name in THREAD_VARIABLES:
        try:
            value = int(os.environ.get(name, ""))
        except ValueError:
            continue
        if value >= 1:
            return value, name
    return None, "auto"


def configure_blas(override: int | None = None, *, announce: bool = True,
                   load_scipy: bool = True) -> BlasPolicy:
    """Set this process's BLAS policy and its default of one thread; logs the choice once.

    Parameters
    ----------
    override : int, optional
        Threads for every operation (>= 1); None or 0 (default): the environment's pin
        (:data:`THREAD_VARIABLES`) if any, else chosen per operation.
    announce : bool
        Log the policy (INFO), once per process (and again when an override changes it).
    load_scipy : bool
        Import ``scipy.linalg`` first, which loads scipy's own OpenBLAS, so that the limit
        reaches it too. False: only the BLAS already loaded (numpy's, the only one the log line
        then names); the caller then calls :func:`load_scipy_blas` before any scipy work (the
        analyst listens first: scipy costs its start half a second).
    """
    if load_scipy:
        import scipy.linalg  # noqa: F401

    global _policy
    override = check_blas_threads(0 if override is None else override) or None
    source = "setting"
    if override is None:
        override, source = _environment_threads()
    with _lock:
        first = _policy is None
        _policy = BlasPolicy(override, available_cpus(), source)
        _apply(_effective())
    if announce and (first or override is not None):
        log.info("%s", _policy.describe())
    return _policy


def load_scipy_blas() -> None:
    """Import ``scipy.linalg`` (scipy's own OpenBLAS) and give it the count of every other BLAS
    of the process: the rest of :func:`configure_blas` ``(load_scipy=False)``."""
    import scipy.linalg  # noqa: F401

    policy()
    with _lock:
        _apply(_effective())


def policy() -> BlasPolicy:
    """The process's policy (:func:`configure_blas` with defaults on first use)."""
    return _policy if _policy is not None else configure_blas(announce=False)


def _effective() -> int:
    if _requests:
        return min(_requests)
    return (_policy.override or 1) if _policy is not None else 1


def _chosen(threads: int) -> int:
    pol = policy()
    return pol.override if pol.override is not None else max(1, min(threads, pol.cpus))


def eigh_threads(n: int, idle: Callable[[], int] | None = None) -> int:
    """Threads for a symmetric eigensolve of order ``n`` (one below :data:`EIGH_CROSSOVER`);
    ``idle`` gives the idle CPUs (default :func:`idle_cpus` now; a solve passes :func:`once`)."""
    if policy().override is not None:
        return _chosen(1)
    return _chosen((idle or idle_cpus)() if n >= EIGH_CROSSOVER else 1)


def gemm_threads(flops: float, idle: Callable[[], int] | None = None) -> int:
    """Threads for a matrix product of ``flops`` (one below :data:`GEMM_CROSSOVER_FLOPS`);
    ``idle`` as in :func:`eigh_threads`."""
    if policy().override is not None:
        return _chosen(1)
    return _chosen((idle or idle_cpus)() if flops >= GEMM_CROSSOVER_FLOPS else 1)


def worker_budget(workers: int) -> tuple[int, int]:
    """``(worker threads, BLAS threads each)`` for ``workers`` wanted: their product never
    exceeds the CPUs (with an override of ``k`` threads, at most ``CPUs // k`` workers)."""
    pol = policy()
    blas = pol.override or 1
    return max(1, min(workers, pol.cpus // blas)), blas


@contextmanager
def blas_threads(threads: int) -> Iterator[int]:
    """Hold BLAS at ``threads`` (an override replaces it) while the block runs; yields the count
    in force, which is smaller inside an outer block of fewer threads or while another thread of
    the process holds fewer."""
    threads = _chosen(threads)
    with _lock:
        _requests.append(threads)
        _apply(_effective())
        current = _effective()
    try:
        yield current
    finally:
        with _lock:
            _requests.remove(threads)
            _apply(_effective())


def with_blas_threads(choose: Callable[P, int]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: run the function inside ``blas_threads(choose(*args, **kwargs))``.

    Example: ``@with_blas_threads(lambda matrix, **_: eigh_threads(len(matrix)))`` on a function
    whose cost is a few eigensolves of ``matrix``.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with blas_threads(choose(*args, **kwargs)):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def blas_settings() -> dict:
    """The policy and the libraries' current thread counts (for benchmark and result JSON)."""
    pol = policy()
    return {"override": pol.override, "cpus": pol.cpus, "eigh_crossover": EIGH_CROSSOVER,
            "gemm_crossover_flops": GEMM_CROSSOVER_FLOPS,
            "libraries": [{k: i.get(k) for k in ("internal_api", "version", "num_threads",
                                                 "threading_layer")} for i in _blas_info()]}
