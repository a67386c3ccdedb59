"""Pace limits of one stream: a client that stops sending, sends too slowly, stops reading, or
keeps a stream open too long loses it, so no caller can hold a worker thread (and what the
handler holds in memory) by stalling.

Two sides, both measured only while the server waits for the peer (time the server spends
hashing, writing, computing or waiting for a lock never counts against a client):

* Client streams (:class:`PacedRequests`): the messages are read ahead by a helper thread into
  a one-message queue, and the handler takes them from the queue with a timeout, so it can
  refuse a stalled stream itself, with a status code and a message the client sees (a
  cancellation from another thread would reach the client as a bare CANCELLED). The pace rule:
  in every ``window`` seconds of waiting, at least ``max(1, min_rate * window)`` bytes must
  arrive. A silent stream therefore ends after ``window`` seconds, and so does one that sends
  zero-byte (or nearly empty) messages to look alive: only bytes count, not messages.
* Server streams (:class:`SendWatch`): a message gRPC could not hand to the client within
  ``window`` seconds means the client stopped reading; :class:`Reaper` cancels that RPC (a
  handler blocked in gRPC's send cannot refuse it itself), as it does any stream past its
  absolute deadline.

gRPC's sync server has no per-message read or send timeout (only the client's deadline, and
HTTP/2 keepalive, which a live but stalled peer passes), hence these small helpers.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from noisyanchor.common.errors import StreamIdleError

log = logging.getLogger(__name__)

#: Largest interval between two checks of the reaper (seconds).
MAX_POLL_SECONDS = 1.0

#: Seconds the read-ahead thread waits at a time to hand on a message (it rechecks whether the
#: handler is gone in between).
_HANDOFF_POLL = 0.5

_END = object()


def past_deadline(what: str, deadline: float) -> str:
    """Why a stream that outlived ``[server] stream_deadline`` ends (both sides)."""
    return (f"{what} is still open after {deadline:g} s, the limit for one stream "
            "([server] stream_deadline)")


@dataclass(frozen=True)
class PaceRule:
    """How fast a stream's peer must keep up.

    Attributes
    ----------
    window : float
        Seconds of waiting over which the rate is judged (``[server] stream_idle_timeout``).
    min_rate : float
        Bytes per second at least (``[server] stream_min_rate``); with 0 only silence counts.
    deadline : float
        Seconds a stream may stay open at most (``[server] stream_deadline``).
    """

    window: float
    min_rate: float
    deadline: float

    @property
    def min_bytes(self) -> int:
        """Bytes due in every window: ``max(1, ceil(min_rate * window))``."""
        return max(1, math.ceil(self.min_rate * self.window))


def message_bytes(message: Any) -> int:
    """Wire size of a request message (raw bytes or a protobuf message)."""
    return len(message) if isinstance(message, bytes | bytearray | memoryview) \
        else message.ByteSize()


class PacedRequests(Iterator[Any]):
    """The messages of a client stream, handed on while the sender keeps :class:`PaceRule`.

    Raises :class:`~common.errors.StreamIdleError` (DEADLINE_EXCEEDED, naming the rule and the
    config key) from ``next()`` once the stream broke the rule or its deadline passed; call
    :meth:`close` when the handler is done (the read-ahead thread then ends with the RPC).

    Parameters
    ----------
    messages : iterator
        gRPC's request iterator.
    rule : PaceRule
    what : str
        The stream in messages, e.g. ``"Upload stream of 'p1'"``.
    """

    def __init__(self, messages: Iterator[Any], rule: PaceRule, what: str) -> None:
        self._rule, self._what = rule, what
        self._deadline = time.monotonic() + rule.deadline
        self._queue: queue.Queue = queue.Queue(maxsize=1)  # backpressure: one message ahead
        self._closed = threading.Event()
        self._waited = 0.0  # seconds spent waiting for the client so far
        self._arrivals: deque[tuple[float, int]] = deque()  # (wait clock, bytes) in the window
        self._window_bytes = 0  # their sum, kept as they come and go (checked per message)
        self._reader = threading.Thread(target=self._read, args=(messages,), daemon=True,
                                        name="stream-reader")
        self._reader.start()

    def _read(self, messages: Iterator[Any]) -> None:
        item: tuple[Any, BaseException | None]
        try:
            for message in messages:
                if not self._hand_on((message, None)):
                    return
            item = (_END, None)
        except BaseException as err:  # the RPC ended (cancelled, connection lost): hand it on
            item = (_END, err)
        self._hand_on(item)

    def _hand_on(self, item: tuple[Any, BaseException | None]) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=_HANDOFF_POLL)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """The handler is done: the read-ahead thread stops handing messages on."""
        self._closed.set()

    def _in_window(self) -> int:
        """Drop arrivals older than the window; the bytes of the rest."""
        while self._arrivals and self._arrivals[0][0] <= self._waited - self._rule.window:
            self._window_bytes -= self._arrivals.popleft()[1]
        return self._window_bytes

    def _allowance(self) -> float:
        """Seconds the server may still wait before the pace rule breaks if nothing arrives.

        The rule holds at wait clock ``w >= window`` when the arrivals in ``(w - window, w]``
        bring ``min_bytes``; waiting longer only lets the oldest arrivals fall out, so it breaks
        when the newest arrival whose suffix of arrivals still brings ``min_bytes`` falls out
        (found from the newest end: usually one chunk, whatever the window holds).
        """
        window, need = self._rule.window, self._rule.min_bytes
        breaks_at = max(self._waited, window)  # before one whole window nothing is judged
        if self._in_window() >= need:
            newest = 0
            for at, n in reversed(self._arrivals):
                newest += n
                if newest >= need:
                    breaks_at = max(breaks_at, at + window)
                    break
        return breaks_at - self._waited

    def _refusal(self) -> StreamIdleError:
        rule = self._rule
        received = self._in_window()
        if received == 0:
            return StreamIdleError(f"{self._what} sent nothing for {rule.window:g} s "
                                   "([server] stream_idle_timeout); nothing of it was kept")
        return StreamIdleError(f"{self._what} sent {received} bytes in the last {rule.window:g} "
                               f"s, below the minimum of {rule.min_bytes} ({rule.min_rate:g} "
                               "bytes/s, [server] stream_min_rate); nothing of it was kept")

    def _past_deadline(self) -> StreamIdleError:
        return StreamIdleError(f"{past_deadline(self._what, self._rule.deadline)}; nothing of "
                               "it was kept")

    def __next__(self) -> Any:
        now = time.monotonic()
        left = self._deadline - now
        if left <= 0:
            raise self._past_deadline()
        allowance = self._allowance()
        try:
            message, error = self._queue.get(timeout=max(0.0, min(allowance, left)))
        except queue.Empty:
            self._waited += time.monotonic() - now
            raise (self._refusal() if allowance <= left else self._past_deadline()) from None
        self._waited += time.monotonic() - now
        if message is _END:
            self.close()
            if error is not None:
                raise error
            raise StopIteration
        size = message_bytes(message)
        self._arrivals.append((self._waited, size))
        self._window_bytes += size
        return message


class SendWatch:
    """One server stream as :class:`Reaper` sees it: when it must end, and whether gRPC has
    been sending one of its messages for too long."""

    def __init__(self, rule: PaceRule, what: str, cancel: Callable[[], None]) -> None:
        self.rule, self.what, self._cancel = rule, what, cancel
        self.deadline = time.monotonic() + rule.deadline
        self.sending_since: float | None = None
        self.done = False

    def watch(self, responses: Iterator[Any]) -> Iterator[Any]:
        """The same responses; while one is being sent (the generator is suspended at its
        ``yield``), the send clock runs."""
        try:
            for response in responses:
                self.sending_since = time.monotonic()
                yield response
                self.sending_since = None
        finally:
            self.done = True

    def overdue(self, now: float) -> str | None:
        """Why the stream must end now, or None."""
        since = self.sending_since
        if since is not None and now - since >= self.rule.window:
            return (f"{self.what} stopped reading: a message waited {now - since:.0f} s to be "
                    f"sent ([server] stream_idle_timeout = {self.rule.window:g})")
        if now >= self.deadline:
            return past_deadline(self.what, self.rule.deadline)
        return None

    def cancel(self, reason: str) -> None:
        log.warning("%s: cancelled", reason)
        self.done = True
        self._cancel()


class Reaper:
    """One daemon thread that cancels the server streams of :class:`SendWatch` once they are
    overdue (polling every ``min(MAX_POLL_SECONDS, window / 4)``)."""

    def __init__(self, poll: float) -> None:
        self._poll = min(MAX_POLL_SECONDS, poll)
        self._watches: list[SendWatch] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, watch: SendWatch) -> None:
        """Watch ``watch`` until it is done."""
        with self._lock:
            self._watches.append(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stream-reaper",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self._poll)
            now = time.monotonic()
            with self._lock:
                self._watches = [w for w in self._watches if not w.done]
                due = [(w, why) for w in self._watches if (why := w.overdue(now))]
            for watch, why in due:
                watch.cancel(why)
