"""The per-thread lease lock (``saver.lock``) on every backend set-up."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import graphkeep
from graphkeep.backends.redis import AsyncRedisSaver, RedisSaver
from graphkeep.errors import LockNotAcquired

from .conftest import REDIS_URL, unique_prefix
from .scenarios.backends import SETUPS, Store, reachable

# every backend set-up: Redis ones always, MongoDB and DynamoDB once registered in BACKENDS
LOCK_URLS = [b.param() for b in SETUPS]


@pytest.fixture(params=LOCK_URLS)
def lock_store(request: Any) -> Iterator[Store]:
    """A fresh key prefix on one set-up, purged afterwards."""
    store = Store(reachable(request.param), unique_prefix("lock"))
    yield store
    store.purge()


@pytest.fixture
def saver(lock_store: Store) -> Any:
    with graphkeep.connect(lock_store.backend.url, key_prefix=lock_store.prefix) as s:
        yield s


def test_two_runs_of_one_thread_under_the_lock_are_serialised(saver: Any, thread_id: str) -> None:
    inside = 0
    peak = 0
    guard = threading.Lock()

    def run() -> None:
        nonlocal inside, peak
        with saver.lock(thread_id, ttl=10, timeout=10):
            with guard:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.15)
            with guard:
                inside -= 1

    workers = [threading.Thread(target=run) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert peak == 1


def test_locks_of_different_threads_do_not_block_each_other(saver: Any, thread_id: str) -> None:
    with saver.lock(thread_id, ttl=5):
        with saver.lock(thread_id + "-other", ttl=5, blocking=False):
            pass


def test_a_held_lease_refuses_a_non_blocking_second_holder(saver: Any, thread_id: str) -> None:
    with saver.lock(thread_id, ttl=5):
        with pytest.raises(LockNotAcquired):
            saver.lock(thread_id, blocking=False).acquire()
        with pytest.raises(LockNotAcquired):
            saver.lock(thread_id, timeout=0.2).acquire()


def test_a_crashed_holders_lease_expires(saver: Any, thread_id: str) -> None:
    crashed = saver.lock(thread_id, ttl=0.4)
    crashed.acquire()  # never released, as if the process died
    started = time.monotonic()
    with saver.lock(thread_id, ttl=5, timeout=5):
        waited = time.monotonic() - started
    assert waited < 5


def test_releasing_someone_elses_lease_is_impossible(saver: Any, thread_id: str) -> None:
    first = saver.lock(thread_id, ttl=0.3)
    first.acquire()
    time.sleep(0.5)  # first's lease expired
    second = saver.lock(thread_id, ttl=10)
    second.acquire()
    assert first.release() is False
    assert first.extend() is False
    with pytest.raises(LockNotAcquired):
        saver.lock(thread_id, blocking=False).acquire()
    assert second.extend(20) is True
    assert second.release() is True
    saver.lock(thread_id, blocking=False).acquire()


async def test_async_lock_serialises_coroutines(lock_store: Store, thread_id: str) -> None:
    url, prefix = lock_store.backend.url, lock_store.prefix
    async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
        inside = 0
        peak = 0

        async def run() -> None:
            nonlocal inside, peak
            async with saver.lock(thread_id, ttl=10, timeout=10):
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0.05)
                inside -= 1

        await asyncio.gather(*(run() for _ in range(5)))
        assert peak == 1
        held = saver.lock(thread_id, ttl=5)
        await held.aacquire()
        with pytest.raises(LockNotAcquired):
            await saver.lock(thread_id, blocking=False).aacquire()
        assert await held.arelease() is True


# -- the release: sent at once, the full way after a failed first attempt (Redis) -----------

#: how long the test keeps the client's only connection: past the release's first attempt
#: (its pool's 0.1 s wait) and the first full one, within the retry policy's pauses
HOLD_SECONDS = 0.3


def _one_connection_pool(module: Any) -> Any:
    kwargs = redis.connection.parse_url(REDIS_URL)
    return module.BlockingConnectionPool(max_connections=1, timeout=0.1, **kwargs)


def test_a_release_that_finds_no_connection_free_at_once_is_sent_the_full_way(
    thread_id: str,
) -> None:
    """``lock.release`` sends its request at once (no slot of graphkeep's gate, no retry
    loop); when that finds the client's only connection taken (here by the test, for
    ``HOLD_SECONDS``), the release goes the full way — slot, retry policy — and lets the lease
    go, never failing for it. (Without the fallback the release raised redis-py's "No
    connection available.")"""
    prefix = unique_prefix("lock-once")
    pool = _one_connection_pool(redis)
    client = redis.Redis(connection_pool=pool)
    try:
        saver = RedisSaver(client, key_prefix=prefix)
        lock = saver.lock(thread_id, ttl=30)
        lock.acquire()
        taken = pool.get_connection()
        outcome: list[Any] = []
        releasing = threading.Thread(target=lambda: outcome.append(lock.release()))
        releasing.start()
        time.sleep(HOLD_SECONDS)
        pool.release(taken)
        releasing.join(timeout=10)
        assert outcome == [True]
        with saver.lock(thread_id, blocking=False):  # free
            pass
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


def test_an_async_release_that_finds_no_connection_free_at_once_is_sent_the_full_way(
    thread_id: str,
) -> None:
    """The async twin of the test above (``arelease``)."""
    prefix = unique_prefix("lock-once")

    async def scenario() -> None:
        pool = _one_connection_pool(aredis)
        client = aredis.Redis(connection_pool=pool)
        try:
            saver = AsyncRedisSaver(client, key_prefix=prefix)
            lock = saver.lock(thread_id, ttl=30)
            await lock.aacquire()
            taken = await pool.get_connection()
            releasing = asyncio.create_task(lock.arelease())
            await asyncio.sleep(HOLD_SECONDS)
            await pool.release(taken)
            assert await asyncio.wait_for(releasing, 10) is True
            async with saver.lock(thread_id, blocking=False):  # free
                pass
        finally:
            async for key in client.scan_iter(match=f"{prefix}*"):
                await client.delete(key)
            await client.aclose()

    asyncio.run(scenario())
