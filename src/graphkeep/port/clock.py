"""The clocks every product reads: the wall clock in epoch milliseconds, epoch-microsecond
stamps strictly increasing within the process, and their conversion to datetimes.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone


def now_ms() -> int:
    """The wall clock, in epoch milliseconds (expiries, run activity, TTL arithmetic)."""
    return time.time_ns() // 1_000_000


class IncreasingClock:
    """Epoch microseconds, strictly increasing within the process: two stamps taken one
    after the other never tie, even within one microsecond (the store's ``updated_at``
    order depends on it)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def now_us(self) -> int:
        with self._lock:
            now = max(time.time_ns() // 1000, self._last + 1)
            self._last = now
            return now


def datetime_of_us(us: int) -> datetime:
    """An epoch-microsecond stamp as an aware UTC datetime."""
    return datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc)
