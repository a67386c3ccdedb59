"""Idle timeout of a client stream: a stream whose sender goes silent for ``timeout`` seconds
while the server waits for its next message is cancelled, so a stalled or vanished participant
cannot hold its upload slot (and its partial file) until the connection dies.

gRPC's sync server has no per-message read timeout (only the client's deadline, and HTTP/2
keepalive, which a live but silent peer passes), hence this small watchdog thread per stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TypeVar

import grpc

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Largest interval between two checks of the idle clock (seconds).
MAX_POLL_SECONDS = 1.0


class IdleWatchdog:
    """Cancels the RPC of ``context`` once the server has waited ``timeout`` seconds for a
    message of :meth:`watch`'s stream. Time the server spends elsewhere (hashing, writing,
    waiting for a lock) does not count.

    Use as a context manager around the handler; ``expired`` tells the handler afterwards why
    its stream ended.
    """

    def __init__(self, context: grpc.ServicerContext, timeout: float, what: str) -> None:
        self._context = context
        self._timeout = float(timeout)
        self._what = what
        self._waiting_since: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-watchdog", daemon=True)
        self.expired = False

    def __enter__(self) -> IdleWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def watch(self, messages: Iterator[T]) -> Iterator[T]:
        """The same messages, timing each wait for the next one; stops watching at the end."""
        messages = iter(messages)
        while True:
            self._waiting_since = time.monotonic()
            try:
                message = next(messages)
            except StopIteration:
                break
            finally:
                self._waiting_since = None
            yield message
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(min(MAX_POLL_SECONDS, self._timeout / 4)):
            since = self._waiting_since
            if since is not None and time.monotonic() - since >= self._timeout:
                self.expired = True
                log.warning("%s sent nothing for %g s: cancelled", self._what, self._timeout)
                self._context.cancel()
                return
