"""Admission of calls to the analyst's RPC workers: who may queue, how much, and in what order.

gRPC's synchronous server hands every call it has matched to its thread pool at once, from its
one polling thread, and a FIFO pool then runs them in arrival order. A flood of calls (HTTP/2
streams opened and reset at once, or a participant's burst) would queue ahead of an honest
Status, and each would take a worker before the caller check in
:class:`~analyst.caller_limits.CallerGate` could refuse it. This pool decides at submission, on
the polling thread, before any worker is involved:

1. **Who calls.** The client certificate of the call's connection is authenticated with the
   federation's one rule (:func:`common.identity.authenticate`: issued directly by the CA,
   naming one participant), and ``admit(id)`` must accept the id. A refused call is answered
   there and then (PERMISSION_DENIED / UNAUTHENTICATED with the reason; the refusal log of
   :mod:`analyst.edge` bounds what it writes) and never reaches a worker, and its connection
   is closed (:mod:`analyst.connection_front`); an admitted call claims its connection for the
   caller, within the caller's share of connections.
2. **How much.** Each participant may hold at most ``max_calls_per_caller`` calls admitted at
   once (waiting or running: a call is held until gRPC's future of it completes), of which at
   most ``max_queued_per_caller`` wait for a worker; one more is refused at arrival
   (RESOURCE_EXHAUSTED, naming the limit), again without a worker. gRPC's own global limit
   (``maximum_concurrent_rpcs``, which counts exactly these futures) is set to
   :func:`global_limit`, every participant's full share plus the calls completing at that
   moment, so it is never the limit that refuses: whatever one peer (or several) sends, every
   other participant keeps its own ``max_calls_per_caller`` slots.
3. **In what order.** Workers take the callers' queues in turn (round robin), so an honest
   participant's call waits for at most one call of every other caller, whatever their
   backlogs.
4. **Cancelled calls cost nothing.** A call whose client cancelled it while it waited is
   dropped when its turn comes: gRPC has already closed it, no worker runs its handler, and its
   future completes then and there (a dropped call left pending would keep its slot in gRPC's
   count for good).

Steps 1, 2 and 4 read the call from what gRPC hands its pool (the handler function and its
arguments: the call event and the call's state). That is gRPC's internal calling convention
(grpcio's ``_server`` module), checked once at start by :func:`supported`; a version that
changes it gets a warning and a plain fair pool (everything then goes through the caller gate
on a worker, as before), and ``tests/analyst/test_admission.py`` fails on it.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from noisyanchor.analyst.connection_front import ConnectionFront
from noisyanchor.analyst.edge import log_refusal, remote_text
from noisyanchor.common.errors import (
    NoisyAnchorError,
    TooManyStreamsError,
    UnauthenticatedError,
)
from noisyanchor.common.identity import authenticate

log = logging.getLogger(__name__)

try:  # gRPC internals this module relies on (see the module docstring)
    from grpc import _server as _grpc_server
    from grpc._common import STATUS_CODE_TO_CYGRPC_STATUS_CODE as _CODES
    from grpc._cython import cygrpc as _cygrpc

    _HANDLERS = (_grpc_server._unary_response_in_pool, _grpc_server._stream_response_in_pool)
    _ABORT = _grpc_server._abort
    _CANCELLED = _grpc_server._CANCELLED
except (ImportError, AttributeError):  # pragma: no cover - a gRPC that changed them
    _HANDLERS, _ABORT, _CANCELLED, _CODES = (), None, None, {}


def supported() -> bool:
    """Whether this grpcio hands its pool calls in the form :class:`AdmissionPool` reads."""
    return bool(_HANDLERS) and _ABORT is not None and _CANCELLED is not None


@dataclass(frozen=True)
class _Call:
    """What the pool reads of one call: gRPC's call event and per-call state."""

    event: Any
    state: Any

    @classmethod
    def of(cls, fn: Callable, args: tuple) -> _Call | None:
        """The call a submission carries, or None when it is not one in gRPC's known form
        (``context.run(handler, event, state, ...)``)."""
        if len(args) >= 3 and args[0] in _HANDLERS and getattr(fn, "__name__", "") == "run":
            return cls(args[1], args[2])
        return None

    def certificate(self) -> bytes | None:
        """The verified client certificate of the call's connection (PEM), if exactly one."""
        auth = _cygrpc.auth_context(self.event.call) or {}
        pems = auth.get(b"x509_pem_cert") or auth.get("x509_pem_cert") or []
        return pems[0] if len(pems) == 1 else None

    def peer(self) -> str:
        """The call's connection as gRPC names it (``ipv4:127.0.0.1:<port>``)."""
        raw = self.event.call.peer()
        return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)

    def method(self) -> str:
        """The RPC's short name (for the refusal log)."""
        raw = self.event.call_details.method
        name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        return name.rsplit("/", 1)[-1]

    def cancelled(self) -> bool:
        """The client cancelled the call (gRPC saw its RST_STREAM or deadline)."""
        return self.state.client is _CANCELLED

    def refuse(self, err: NoisyAnchorError, caller: str | None) -> None:
        """Answer the call of ``caller`` (None: not known) with ``err``'s status and message
        from here (no handler runs)."""
        code = getattr(grpc.StatusCode, err.grpc_code)
        log_refusal(self.method(), code, err, caller)
        with self.state.condition:
            _ABORT(self.state, self.event.call, _CODES[code], remote_text(err).encode())


def global_limit(participants: int, max_calls_per_caller: int, workers: int) -> int:
    """gRPC's ``maximum_concurrent_rpcs`` for :class:`AdmissionPool`: every participant's
    ``max_calls_per_caller`` at once, plus one per worker thread for a call whose slot the pool
    has just given back while gRPC has not yet counted it done (the pool's done callback runs
    before gRPC's, on the worker completing the call)."""
    return participants * max_calls_per_caller + workers


class AdmissionPool(futures.Executor):
    """The server's worker threads behind per-caller queues (see the module docstring).

    Parameters
    ----------
    workers : int
        Worker threads.
    admit : callable
        ``admit(participant_id)`` raises a project error for a caller that may not call.
    ca_pems : callable
        The federation CA certificates (PEM) every client certificate must be issued by.
    max_queued_per_caller : int
        Calls one caller may have waiting for a worker at once.
    max_calls_per_caller : int
        Calls one caller may have admitted at once, waiting or running (None: no more than
        ``max_queued_per_caller`` plus every worker, i.e. no limit of its own).
    connections : ConnectionFront, optional
        Told whose each call's connection is (:meth:`~analyst.connection_front.ConnectionFront.
        claim`), and which connection's caller was refused for who it is (closed).
    """

    def __init__(self, workers: int, admit: Callable[[str], None],
                 ca_pems: Callable[[], tuple[bytes, ...]], max_queued_per_caller: int,
                 max_calls_per_caller: int | None = None,
                 connections: ConnectionFront | None = None) -> None:
        self.workers = workers
        self._connections = connections
        self._admit = admit
        self._ca_pems = ca_pems
        self.max_queued_per_caller = max_queued_per_caller
        self.max_calls_per_caller = (max_queued_per_caller + workers
                                     if max_calls_per_caller is None else max_calls_per_caller)
        self._held: dict[str, int] = {}  # admitted calls per caller whose future is pending
        self._inspect = supported()
        if not self._inspect:
            log.warning("this grpcio hands calls to its pool in an unknown form: callers are "
                        "checked on a worker, not at arrival (analyst.admission)")
        self._lock = threading.Condition()
        self._lanes: dict[str, collections.deque] = {}
        self._turns: collections.deque[str] = collections.deque()  # callers with work, in turn
        self._running = 0
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"rpc-{k}", daemon=True)
                         for k in range(workers)]
        for t in self._threads:
            t.start()

    @property
    def running(self) -> int:
        """Handlers executing now."""
        return self._running

    def queued(self, caller: str) -> int:
        """Calls of ``caller`` waiting for a worker."""
        with self._lock:
            return len(self._lanes.get(caller, ()))

    def held(self, caller: str) -> int:
        """Calls of ``caller`` admitted and not yet completed (waiting or running)."""
        with self._lock:
            return self._held.get(caller, 0)

    def _release(self, caller: str) -> None:
        """One call of ``caller`` completed (its future's first done callback)."""
        with self._lock:
            left = self._held[caller] - 1
            if left:
                self._held[caller] = left
            else:
                del self._held[caller]

    def _caller(self, call: _Call) -> tuple[str | None, NoisyAnchorError | None]:
        """The participant id of ``call`` (None when its certificate names none), and why it
        is refused (None: admitted)."""
        pid = None
        try:
            pem = call.certificate()
            if pem is None:
                raise UnauthenticatedError("no verified client certificate on this connection")
            pid = authenticate(pem, self._ca_pems())
            self._admit(pid)
        except NoisyAnchorError as err:
            if self._connections is not None:  # nothing this connection sends will be served
                self._connections.reject(call.peer())
            return pid, err
        if self._connections is not None:
            try:
                self._connections.claim(call.peer(), pid)
            except NoisyAnchorError as err:
                return pid, err
        return pid, None

    def submit(self, fn, /, *args, **kwargs) -> futures.Future:
        future: futures.Future = futures.Future()
        call = _Call.of(fn, args) if self._inspect else None
        lane = ""
        if call is not None:
            pid, refusal = self._caller(call)
            if refusal is not None:
                call.refuse(refusal, pid)
                future.set_result(None)
                return future
            lane = pid or ""
        with self._lock:
            if self._stopped:
                raise RuntimeError("cannot schedule new calls after shutdown")
            queue = self._lanes.get(lane)
            if queue is None:
                queue = self._lanes[lane] = collections.deque()
            if call is not None:
                over = self._over_limit(lane, queue, call)
                if over is not None:
                    call.refuse(over, lane)
                    future.set_result(None)
                    return future
                self._held[lane] = self._held.get(lane, 0) + 1
                # Registered before gRPC's own callback, so the slot is given back first.
                future.add_done_callback(lambda _f, lane=lane: self._release(lane))
            if not queue:
                self._turns.append(lane)
            queue.append((future, fn, (args, kwargs), call))
            self._lock.notify()
        return future

    def _over_limit(self, lane: str, queue: collections.deque,
                    call: _Call) -> TooManyStreamsError | None:
        """The refusal of one more call of ``lane`` (None: admitted); with the lock held."""
        full = (len(queue) >= self.max_queued_per_caller
                or self._held.get(lane, 0) >= self.max_calls_per_caller)
        if full:
            # Calls cancelled while they waited do not count against the caller. Completing
            # their futures here is safe: this is gRPC's polling thread, which holds the
            # server lock their callbacks take.
            for waiting in [item for item in queue if item[3].cancelled()]:
                queue.remove(waiting)
                waiting[0].set_result(None)
        held = self._held.get(lane, 0)
        if held >= self.max_calls_per_caller:
            return TooManyStreamsError(
                f"{call.method()} refused: {lane!r} already has {held} calls in progress at "
                f"the analyst ([server] max_calls_per_caller = {self.max_calls_per_caller}); "
                "retry when they are answered")
        if len(queue) >= self.max_queued_per_caller:
            return TooManyStreamsError(
                f"{call.method()} refused: {lane!r} already has {len(queue)} calls "
                "waiting for the analyst ([server] max_queued_calls_per_caller = "
                f"{self.max_queued_per_caller}); retry when they are answered")
        return None

    def _next(self) -> tuple | None:
        """The next waiting call, callers in turn (None once shut down)."""
        with self._lock:
            while not self._turns and not self._stopped:
                self._lock.wait()
            if not self._turns:
                return None
            lane = self._turns.popleft()
            queue = self._lanes[lane]
            item = queue.popleft()
            if queue:
                self._turns.append(lane)
            else:
                del self._lanes[lane]
            return item

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            # Futures are completed outside the lock: their callbacks take gRPC's server lock,
            # which the polling thread holds while it submits (and waits for this lock).
            future, fn, (args, kwargs), call = item
            if call is not None and call.cancelled():
                future.set_result(None)  # gRPC closed it already: nothing to run
                continue
            if not future.set_running_or_notify_cancel():
                continue
            with self._lock:
                self._running += 1
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:  # delivered to whoever waits on the future
                future.set_exception(err)
            finally:
                with self._lock:
                    self._running -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        cancelled: list[futures.Future] = []
        with self._lock:
            self._stopped = True
            if cancel_futures:
                cancelled = [future for queue in self._lanes.values() for future, *_ in queue]
                self._lanes.clear()
                self._turns.clear()
            self._lock.notify_all()
        for future in cancelled:  # outside the lock, as in _work
            future.cancel()
        if wait:
            for t in self._threads:
                t.join()
