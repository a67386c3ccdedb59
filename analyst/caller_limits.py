"""The gate every RPC on the analyst's mutual-TLS port passes first (a gRPC server interceptor).

1. Who calls: the participant id of the verified client certificate (:func:`analyst.edge.
   caller_id`), refused unless it is one of the federation's participants, before a handler
   runs and before one message of a stream is read: a CA-signed certificate that names no
   participant cannot hold a worker with a silent stream.
2. Streams (any RPC with a client or server stream, releases included): at most
   ``[server] max_streams_per_caller`` open at once per caller (RESOURCE_EXHAUSTED beyond), each
   under the pace limits of :mod:`analyst.stream_watchdog` (idle window, minimum data rate,
   absolute deadline).

With every stream capped per caller, the server's worker pool is sized so that all
participants' streams together leave room for everyone's short calls
(:func:`worker_count`): a hostile participant can stall its own streams, not an honest
participant's Status.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from noisyanchor.analyst.connection_front import ConnectionFront
from noisyanchor.analyst.edge import abort, bound_request, caller_id, serving
from noisyanchor.analyst.stream_watchdog import PacedRequests, PaceRule, Reaper, SendWatch
from noisyanchor.common.errors import NoisyAnchorError, TooManyStreamsError

log = logging.getLogger(__name__)

#: Workers kept for short (unary) calls beyond every participant's full share of streams.
UNARY_WORKERS = 16


@dataclass(frozen=True)
class StreamLimits:
    """Per-caller stream limits (``[server]`` keys of the analyst config).

    Attributes
    ----------
    max_streams_per_caller : int
    rule : PaceRule
    """

    max_streams_per_caller: int
    rule: PaceRule

    @classmethod
    def of(cls, config: Any) -> StreamLimits:
        """The limits an :class:`~analyst.config.AnalystConfig` sets."""
        return cls(config.max_streams_per_caller,
                   PaceRule(config.stream_idle_timeout, config.stream_min_rate,
                            config.stream_deadline))


def worker_count(participants: int, limits: StreamLimits) -> int:
    """Worker threads for the server: every participant's full share of streams, plus
    :data:`UNARY_WORKERS` that streams can never take."""
    return participants * limits.max_streams_per_caller + UNARY_WORKERS


class CallerGate(grpc.ServerInterceptor):
    """Authenticates every call and holds streams to :class:`StreamLimits`.

    Parameters
    ----------
    limits : StreamLimits
    admit : callable
        ``admit(participant_id)`` raises a project error (PERMISSION_DENIED) for a caller that
        is not a participant of the federation.
    ca_pems : sequence of bytes
        The federation's CA certificates (:func:`analyst.edge.caller_id`).
    connections : ConnectionFront, optional
        Told whose each call's connection is, as by :class:`analyst.admission.AdmissionPool`
        (again here for a gRPC whose calls the pool cannot read at arrival).
    """

    def __init__(self, limits: StreamLimits, admit: Callable[[str], None],
                 ca_pems: Sequence[bytes], connections: ConnectionFront | None = None) -> None:
        self.limits = limits
        self._connections = connections
        self._admit = admit
        self._ca_pems = tuple(ca_pems)
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()
        self._reaper = Reaper(limits.rule.window / 4)

    def open_streams(self, pid: str) -> int:
        """Streams ``pid`` holds open now."""
        with self._lock:
            return self._open.get(pid, 0)

    def _take_slot(self, pid: str, what: str) -> Callable[[], None]:
        """Count one more open stream of ``pid``; returns its (idempotent) release."""
        cap = self.limits.max_streams_per_caller
        with self._lock:
            held = self._open.get(pid, 0)
            if held >= cap:
                raise TooManyStreamsError(
                    f"{what} refused: {pid!r} already holds {held} open streams, the limit "
                    f"([server] max_streams_per_caller = {cap}); finish or cancel one first")
            self._open[pid] = held + 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if not released.is_set():
                    released.set()
                    self._open[pid] -= 1
                    if not self._open[pid]:
                        del self._open[pid]

        return release

    def intercept_service(self, continuation, handler_call_details):
        # Runs on gRPC's polling thread for every call: the guarded handler of each method is
        # made once.
        method = handler_call_details.method
        guarded = self._handlers.get(method)
        if guarded is not None:
            return guarded
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        streams_in, streams_out = handler.request_streaming, handler.response_streaming
        kind = f"{'stream' if streams_in else 'unary'}_{'stream' if streams_out else 'unary'}"
        name = method.rsplit("/", 1)[-1]
        make = getattr(grpc, f"{kind}_rpc_method_handler")
        guarded = make(self._guarded(getattr(handler, kind), name, streams_in, streams_out),
                       request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)
        self._handlers[method] = guarded
        return guarded

    def _guarded(self, behavior: Callable, name: str, streams_in: bool,
                 streams_out: bool) -> Callable:
        rule = self.limits.rule

        def guarded(request, context):
            pid = None
            serving(None)
            try:
                pid, _ = caller_id(context, self._ca_pems)
                self._admit(pid)
            except NoisyAnchorError as err:
                if self._connections is not None:
                    self._connections.reject(context.peer())
                abort(context, name, err, pid)
            serving(pid)
            try:
                if self._connections is not None:
                    self._connections.claim(context.peer(), pid)
                if not streams_in:  # streamed requests are raw bundle bytes (common.wire)
                    bound_request(request)
            except NoisyAnchorError as err:
                abort(context, name, err, pid)
            if not (streams_in or streams_out):
                return behavior(request, context)
            what = f"{name} stream of {pid!r}"
            try:
                release = self._take_slot(pid, what)
            except NoisyAnchorError as err:
                abort(context, name, err)
            paced = PacedRequests(request, rule, what) if streams_in else None
            watch = SendWatch(rule, what, context.cancel) if streams_out else None

            def finished() -> None:  # the RPC ended, however it ended
                release()
                if watch is not None:
                    watch.done = True
                    if paced is not None:  # a bidirectional stream: no more reading either
                        paced.close()

            if not context.add_callback(finished):
                finished()  # already over
            if paced is None or watch is not None:
                result = behavior(paced or request, context)
            else:
                try:
                    result = behavior(paced, context)
                finally:  # the handler reads no more (closing earlier would hide the end of
                    paced.close()  # a cancelled stream from it); a retry may come at once
                    release()
            if watch is None:
                return result
            self._reaper.add(watch)
            return watch.watch(result)

        return guarded
