"""Send timeout of server streams: a stream whose client stops taking messages is cancelled.

gRPC's sync server writes one message of a response stream at a time and pulls the next from
the handler's iterator only once the previous write completed; a client that stops reading
therefore parks the handler (and whatever its iterator holds) until HTTP/2 flow control gives
way, which a live but idle peer never does. One reaper thread per server watches every
registered stream's time since it last pulled a message, and cancels the RPC once that exceeds
the timeout; the handler's thread is released and the iterator closed.

One thread for all streams rather than one per stream, so a flood of stalled readers costs
entries in a dict, not threads.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc

log = logging.getLogger(__name__)


class SendTimeouts:
    """Cancels watched RPCs that have not pulled a message for ``timeout`` seconds.

    Parameters
    ----------
    timeout : float
        Seconds a stream may wait for its client to take the next message.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._streams: dict[int, tuple[grpc.ServicerContext, str, list[float]]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, context: grpc.ServicerContext, what: str) -> Iterator[Callable[[], None]]:
        """Register ``context`` for the duration of the block; the yielded ``touch()`` is to be
        called each time the stream is about to produce its next message."""
        clock = [time.monotonic()]
        key = next(self._ids)
        with self._lock:
            self._streams[key] = (context, what, clock)
            if self._thread is None:
                self._thread = threading.Thread(target=self._reap, name="send-timeouts",
                                                 daemon=True)
                self._thread.start()

        def touch() -> None:
            clock[0] = time.monotonic()

        try:
            yield touch
        finally:
            with self._lock:
                self._streams.pop(key, None)

    @property
    def watched(self) -> int:
        """Streams currently registered."""
        with self._lock:
            return len(self._streams)

    def _reap(self) -> None:
        period = max(0.05, min(1.0, self.timeout / 4))
        while True:
            time.sleep(period)
            now = time.monotonic()
            with self._lock:
                stalled = [(k, ctx, what) for k, (ctx, what, clock) in self._streams.items()
                           if now - clock[0] >= self.timeout]
                for k, _, _ in stalled:
                    del self._streams[k]
            for _, ctx, what in stalled:
                log.warning("%s: the client took no message for %g s: cancelled", what,
                            self.timeout)
                ctx.cancel()
