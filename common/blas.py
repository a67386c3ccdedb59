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
  process may run on (``os.sched_getaffinity``), and only as many as are idle right now (the
  kernel's count of runnable tasks, :func:`idle_cpus`), so that a busy neighbour never meets a
  busy-waiting pool.
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

References: issue 14; ``benchmarks/bench_shared_host.py`` measures the policy.
"""

from __future__ import annotations

import functools
import logging
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

#: Samples of the runnable-task count taken by :func:`idle_cpus` (the smallest is kept, so a
#: task that runs for a moment does not hide an idle core, and a busy one is always seen).
RUNNABLE_SAMPLES = 3


def available_cpus() -> int:
    """Number of CPUs this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not every platform has sched_getaffinity
        return os.cpu_count() or 1


def idle_cpus() -> int:
    """CPUs of this process not taken by other runnable tasks right now.

    From the kernel's count of runnable tasks in ``/proc/loadavg``, less this thread and less
    the runnable threads of this process that Python did not start (:func:`_native_runnable`):
    the workers of a BLAS operation that just ended busy-wait for tens of milliseconds, and
    counted as a neighbour's work they made the next operation take one thread on an idle
    machine. Python threads of this process that compute (the analyst's other requests) still
    count, as they compete for the same cores. The smallest of :data:`RUNNABLE_SAMPLES` reads
    1 ms apart is kept; where the kernel's count cannot be read, every CPU counts as idle.
    """
    cpus = available_cpus()
    others = []
    for i in range(RUNNABLE_SAMPLES):
        if i:
            time.sleep(0.001)
        total = _runnable_tasks()
        if total is None:
            return cpus
        others.append(max(0, total - 1 - _native_runnable()))
    return max(1, cpus - min(others))


def _runnable_tasks() -> int | None:
    """Tasks the kernel counts as runnable now (4th field of ``/proc/loadavg``), or None."""
    try:
        with open("/proc/loadavg") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def _native_runnable() -> int:
    """Threads of this process in state R now that Python did not start (BLAS workers, for
    one); 0 where that cannot be read."""
    python_threads = {t.native_id for t in threading.enumerate()}
    return len(_runnable_threads() - python_threads)


def _runnable_threads() -> set[int]:
    """Ids of this process's threads in state R now (``/proc/self/task/*/stat``); empty where
    that cannot be read."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return set()
    running = set()
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # the thread ended meanwhile
            continue
        # the state follows the command name, which is in parentheses and may hold any byte
        end = stat.rfind(b")")
        if stat[end + 2:end + 3] == b"R":
            running.add(int(tid))
    return running


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


def eigh_threads(n: int) -> int:
    """Threads for a symmetric eigensolve of order ``n`` (one below :data:`EIGH_CROSSOVER`)."""
    if policy().override is not None:
        return _chosen(1)
    return _chosen(idle_cpus() if n >= EIGH_CROSSOVER else 1)


def gemm_threads(flops: float) -> int:
    """Threads for a matrix product of ``flops`` (one below :data:`GEMM_CROSSOVER_FLOPS`)."""
    if policy().override is not None:
        return _chosen(1)
    return _chosen(idle_cpus() if flops >= GEMM_CROSSOVER_FLOPS else 1)


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
