"""Where a sweep's tasks run: this machine's process pool (the default) or a Dask cluster.

``--scheduler`` of ``noisyanchor experiment sweep`` chooses:

* ``pool`` (default): a ``multiprocessing`` pool of ``workers`` forked processes;
* ``local``: a ``dask.distributed.LocalCluster`` of ``workers`` worker processes (one thread
  each) on this machine;
* ``tcp://HOST:PORT``: the scheduler of a running Dask cluster (``dask scheduler`` on one host,
  ``dask worker tcp://HOST:PORT --nthreads 1`` on each host: see the README).

Every executor runs the same worker initialiser once per worker process (a Dask worker plugin,
so a worker that a cluster restarts after a crash is initialised again) and yields each task's
result once, in completion order. On a Dask cluster the scheduler reruns the tasks of a worker
that dies; the sweep writes each result when its task's future completes, so nothing is lost or
written twice, and a killed sweep resumes from its results folder as with the pool. Tasks must
be deterministic functions of their arguments (sweep tasks are seeded), so the results do not
depend on where they ran.

``dask.distributed`` is the optional extra ``cluster`` (``pip install -e ".[cluster]"``).

References: issue 24 (sweeps on a cluster).
"""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from noisyanchor.common.errors import InvalidInputError

try:  # the optional extra "cluster"; the plugin below needs its base class
    from distributed import WorkerPlugin as _PluginBase
except ImportError:  # pragma: no cover - without the extra only the pool runs
    _PluginBase = object

T = TypeVar("T")
U = TypeVar("U")

#: A function that maps a task function over tasks, yielding results as tasks complete.
Runner = Callable[[Callable[[T], U], Iterable[T]], Iterator[U]]

#: Names of the executors that are not a scheduler address.
POOL, LOCAL = "pool", "local"

_ADDRESS = re.compile(r"^(tcp|tls|ws|wss|inproc|ucx)://[^\s/]+(:\d+)?/?$")


def check_scheduler(value: str) -> str:
    """``value`` if it is ``pool``, ``local`` or a Dask scheduler address (``tcp://HOST:PORT``)."""
    if value in (POOL, LOCAL) or _ADDRESS.match(value):
        return value
    raise InvalidInputError(f"scheduler must be {POOL!r}, {LOCAL!r} or a Dask scheduler address "
                            f"such as tcp://HOST:8786, not {value!r}")


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as err:  # the optional extra
        raise InvalidInputError("a Dask scheduler needs dask.distributed: pip install "
                                "'noisyanchor[cluster]'") from err
    return distributed


@contextmanager
def executor(scheduler: str, workers: int, initializer: Callable[..., None],
             initargs: tuple = ()) -> Iterator[Runner]:
    """A :data:`Runner` on ``scheduler`` (:func:`check_scheduler`), open while the block runs.

    Parameters
    ----------
    scheduler : str
        ``pool``, ``local`` or a Dask scheduler address.
    workers : int
        Worker processes of ``pool`` and ``local`` (a cluster's are its own).
    initializer, initargs
        Run once in every worker process before its first task (module-level, picklable).
    """
    scheduler = check_scheduler(scheduler)
    if scheduler == POOL:
        ctx = multiprocessing.get_context("fork")  # workers inherit the imported modules
        with ctx.Pool(workers, initializer, initargs) as pool:
            yield lambda fn, tasks: pool.imap_unordered(fn, tasks)
        return
    distributed = _distributed()
    cluster = None
    if scheduler == LOCAL:
        # Worker processes (not threads), one thread each, no dashboard: the pool's layout.
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                           processes=True, dashboard_address=None)
        address = cluster.scheduler_address
    else:
        address = scheduler
    try:
        with distributed.Client(address) as client:
            client.register_plugin(_Initialiser(initializer, initargs), name="noisyanchor-init")
            yield lambda fn, tasks: _dask_map(client, distributed, fn, tasks)
    finally:
        if cluster is not None:
            cluster.close()


def _dask_map(client: Any, distributed: Any, fn: Callable[[T], U],
              tasks: Iterable[T]) -> Iterator[U]:
    """Submit every task, then yield results as their futures complete (each exactly once)."""
    futures = client.map(fn, list(tasks), pure=False)
    for future, result in distributed.as_completed(futures, with_results=True):
        future.release()
        yield result


class _Initialiser(_PluginBase):  # type: ignore[misc,valid-type]
    """Dask worker plugin running the sweep's worker initialiser on every (re)started worker."""

    def __init__(self, initializer: Callable[..., None], initargs: tuple) -> None:
        self.initializer = initializer
        self.initargs = initargs

    def setup(self, worker: Any) -> None:
        """Called by the worker when it starts (and when the plugin is registered)."""
        self.initializer(*self.initargs)
