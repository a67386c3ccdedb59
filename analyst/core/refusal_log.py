"""How often each distinct refusal was seen, so a peer repeating itself cannot fill the log:
the gRPC edge's refusals (:mod:`analyst.edge`) and the core's withdrawals use it alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Times one distinct refusal is logged per window, and the window (seconds).
REFUSALS_LOGGED, REFUSAL_WINDOW = 5, 60.0
#: Distinct refusals remembered before those of ended windows are forgotten.
_MAX_REMEMBERED = 4096


class RefusalLog:
    """How often each distinct refusal was seen in its current window (thread-safe).

    :meth:`admit` says whether to log one more, and how many of the same went unlogged in the
    window before (reported once, when the refusal recurs).
    """

    def __init__(self, limit: int = REFUSALS_LOGGED, window: float = REFUSAL_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, ...], tuple[float, int]] = {}  # key -> (window start, count)

    def admit(self, key: tuple[str, ...]) -> tuple[int, int]:
        """``(number of this refusal in its window, unlogged ones of the window before)``:
        log it when the number is at most ``limit``."""
        now = self.clock()
        with self._lock:
            start, count = self._seen.get(key, (now, 0))
            unlogged = 0
            if now - start >= self.window:
                unlogged, start, count = max(0, count - self.limit), now, 0
            self._seen[key] = (start, count + 1)
            if len(self._seen) > _MAX_REMEMBERED:  # forget refusals whose window ended
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window}
            return count + 1, unlogged
