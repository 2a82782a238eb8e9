"""How pollers pace themselves: short pauses while there is news, longer ones in quiet."""

from __future__ import annotations

import time

#: seconds of quiet after which a :class:`Backoff` starts lengthening its pauses
IDLE_AFTER = 5.0


class Backoff:
    """A poller's pauses: ``interval`` while there is news; once nothing has come for
    ``idle_after`` seconds, each pause is 1.5 times the last, up to ``longest``."""

    def __init__(self, interval: float, longest: float, idle_after: float = IDLE_AFTER) -> None:
        self.interval = interval
        self.longest = longest
        self.idle_after = idle_after
        self.delay = interval
        self.quiet_since = time.monotonic()

    def news(self) -> None:
        """Something came: pauses are ``interval`` again, and quiet counts from now."""
        self.delay = self.interval
        self.quiet_since = time.monotonic()

    @property
    def quiet(self) -> float:
        """Seconds since the last news (or since the start)."""
        return time.monotonic() - self.quiet_since

    def pause(self) -> float:
        """The next pause."""
        if self.quiet >= self.idle_after:
            self.delay = min(self.longest, self.delay * 1.5)
        return self.delay
