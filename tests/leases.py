"""What the lease tests share: a thread's history checked for forks, and a lease held by
another run (a thread of its own, so its fencing token is not the test's)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def forks(history: list[Any]) -> dict[str, list[str]]:
    """Checkpoints with more than one child: ``{parent id: [child ids]}``."""
    children: dict[str, list[str]] = {}
    for t in history:
        if t.parent_config:
            parent = t.parent_config["configurable"]["checkpoint_id"]
            children.setdefault(parent, []).append(t.checkpoint["id"])
    return {p: c for p, c in children.items() if len(c) > 1}


@contextmanager
def held_by_another_run(
    saver: Any, thread_id: str, ttl: float = 30, release_after: float | None = None
) -> Iterator[None]:
    """The thread's lease held by another run (its own thread and context) meanwhile, or
    for ``release_after`` seconds from the start."""
    held, done = threading.Event(), threading.Event()

    def run() -> None:
        with saver.lock(thread_id, ttl=ttl):
            held.set()
            done.wait(ttl if release_after is None else release_after)

    other = threading.Thread(target=run)
    other.start()
    try:
        assert held.wait(10), "the other run never took the lease"
        yield
    finally:
        done.set()
        other.join()
