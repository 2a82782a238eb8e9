"""The mover's lease of ``fallback=`` (a thread read from a slow fallback), on real servers,
every graphkeep backend, sync and async.

A move that lasts several lease lengths (a fallback whose reads sleep) keeps its lease
renewed: another worker's ``lock()`` is refused throughout, and the moved thread verifies; a
move under a lease that lapsed has its first write refused by the fence, nothing stored. The
fallback is a SqliteSaver wrapped to read slowly: no rival server, so this file runs in a
shared chunk of ``./dev test`` (tools/lane_queue.py); the rivals' URLs:
tests/test_fallback_rivals.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

import graphkeep
from graphkeep.errors import LeaseLost, LockNotAcquired

from .conftest import unique_prefix
from .copy_savers import chat_builder
from .test_fallback import (
    ask,
    config,
    history,
    mode,  # noqa: F401 - the fixture: sync and async
    url,  # noqa: F401 - the fixture: every graphkeep backend (tests/test_cli.py)
)

# -- the mover's lease -------------------------------------------------------------------

#: the lease of the moves below, and how long their fallback takes to read a thread
LEASE = 3.0
SLOW_READ = 3.5 * LEASE


class SlowSaver(BaseCheckpointSaver[str]):
    """A fallback whose ``list`` sleeps: a big thread on a slow store, read in ``delay`` (or,
    given ``until``, as soon as that event is set: the read lasts until what the test waits
    for has happened, never longer)."""

    def __init__(self, inner: Any, delay: float, until: threading.Event | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.delay = delay
        self.until = until
        self.started = threading.Event()
        self.finished = threading.Event()

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        found = list(self.inner.list(config, **kwargs))
        self.started.set()
        if self.until is None:
            time.sleep(self.delay)
        else:
            self.until.wait(self.delay)
        self.finished.set()
        yield from found

    def get_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)


def slow_source(path: Path) -> tuple[Any, list[Any]]:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    inner = SqliteSaver(conn)
    graph = chat_builder().compile(checkpointer=inner)
    graph.invoke(ask("hello"), config("long"))
    graph.invoke(ask("and again"), config("long"))
    return inner, history(graph, "long")


def in_thread(target: Any) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(target())
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    return worker, outcome


def test_a_slow_move_renews_its_lease_and_no_other_worker_takes_the_thread(
    url: str,  # noqa: F811 - the fixture
    mode: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    inner, before = slow_source(tmp_path / "old.db")
    slow = SlowSaver(inner, SLOW_READ)
    prefix = unique_prefix("fbl")

    def sync_move() -> Any:
        with graphkeep.connect(url, key_prefix=prefix, fallback=slow) as saver:
            saver.fallback.lease_ttl = LEASE
            return saver.get_tuple(config("long"))

    async def async_move() -> Any:
        async with graphkeep.aconnect(url, key_prefix=prefix, fallback=slow) as saver:
            saver.fallback.lease_ttl = LEASE
            return await saver.aget_tuple(config("long"))

    with graphkeep.connect(url, key_prefix=prefix) as other:  # another worker, no fallback
        started = time.monotonic()
        worker, outcome = in_thread(
            sync_move if mode == "sync" else lambda: asyncio.run(async_move())
        )
        assert slow.started.wait(30)
        refused = 0
        while not slow.finished.is_set():  # the fallback's read: several lease lengths
            try:
                other.lock("long", ttl=LEASE, blocking=False).acquire()
            except LockNotAcquired:
                refused += 1
            else:
                at = time.monotonic() - started
                worker.join()
                pytest.fail(f"another worker took the thread {at:.1f}s in (the move: {outcome})")
            time.sleep(0.2)
        took = time.monotonic() - started
        worker.join()
        # the move's writes came after the read, fenced: a lease lost meanwhile refuses them
        assert not isinstance(outcome[0], BaseException), outcome
        assert outcome[0] is not None
        assert took > 3 * LEASE and refused >= 10, (took, refused)
        with other.lock("long", ttl=LEASE, blocking=False):  # let go once moved
            pass
        graph = chat_builder().compile(checkpointer=other)
        assert history(graph, "long") == before
    inner.conn.close()


def test_a_move_under_a_lease_that_lapsed_is_refused_by_the_fence(
    url: str,  # noqa: F811 - the fixture
    mode: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """The caller holds the thread's lease (``saver.lock``) and lets it lapse while the move
    reads: the move's writes carry the caller's fencing token (async: the context variable
    carried into the op), so the first is refused once another worker holds the thread."""
    inner, before = slow_source(tmp_path / "old.db")
    taken_over = threading.Event()  # the read ends once another worker holds the thread
    slow = SlowSaver(inner, SLOW_READ, until=taken_over)
    prefix = unique_prefix("fbf")
    tid = "long"

    def sync_move() -> Any:
        with graphkeep.connect(url, key_prefix=prefix, fallback=slow) as saver:
            with saver.lock(tid, ttl=LEASE):
                return saver.get_tuple(config(tid))

    async def async_move() -> Any:
        async with graphkeep.aconnect(url, key_prefix=prefix, fallback=slow) as saver:
            async with saver.lock(tid, ttl=LEASE):
                return await saver.aget_tuple(config(tid))

    with graphkeep.connect(url, key_prefix=prefix) as other:
        worker, outcome = in_thread(
            sync_move if mode == "sync" else lambda: asyncio.run(async_move())
        )
        assert slow.started.wait(30)
        taken = other.lock(tid, ttl=4 * LEASE, timeout=3 * LEASE)
        taken.acquire()  # once the caller's lease lapsed
        taken_over.set()
        worker.join()
        assert isinstance(outcome[0], LeaseLost), outcome
        assert other.get_tuple(config(tid)) is None  # nothing of the move stored
        taken.release()
        slow.delay, slow.until = 0, None
        with graphkeep.connect(url, key_prefix=prefix, fallback=slow) as saver:
            graph = chat_builder().compile(checkpointer=saver)
            assert history(graph, tid) == before
    inner.conn.close()
