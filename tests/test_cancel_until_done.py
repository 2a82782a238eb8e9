"""``graphkeep.port.loop.cancel_until_done``: what stops the store's sweeper and batch task and
the AG-UI runs and page-load reads. One ``cancel()`` can be lost on Python < 3.12 (an
``asyncio.wait_for`` — redis-py sends every command through it — drops a cancellation that
lands just as the call it awaits completes); a task that lost one is cancelled again until it
ends. The lost cancellation is made here as ``wait_for`` makes it: the task swallows it."""

from __future__ import annotations

import asyncio

from graphkeep.port.loop import cancel_until_done


async def _loses_cancels(lost: int, ended: list[str], done: asyncio.Event | None = None) -> None:
    """Sleeps on, as a task whose first ``lost`` cancellations were dropped would (until
    ``done`` is set)."""
    try:
        while done is None or not done.is_set():
            try:
                await asyncio.sleep(0.05 if done is not None else 3600)
            except asyncio.CancelledError:
                if lost == 0:
                    raise
                lost -= 1
    finally:
        ended.append("ended")


def test_a_task_that_lost_its_cancellations_is_cancelled_until_it_ends() -> None:
    async def body() -> None:
        ended: list[str] = []
        tasks = [asyncio.create_task(_loses_cancels(n, ended)) for n in (0, 1, 3)]
        await asyncio.sleep(0)
        assert await cancel_until_done(tasks, timeout=5) is True
        assert ended == ["ended"] * 3 and all(t.cancelled() for t in tasks)
        assert await cancel_until_done(tasks) is True  # ended ones: nothing to do

    asyncio.run(body())


def test_one_cancel_is_not_enough_for_such_a_task() -> None:
    """What the old ``task.cancel(); await task`` did: it waited for ever (here: 0.5 s)."""

    async def body() -> None:
        ended: list[str] = []
        task = asyncio.create_task(_loses_cancels(1, ended))
        await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=0.5)
        assert not done and ended == []
        assert await cancel_until_done([task]) is True and ended == ["ended"]

    asyncio.run(body())


def test_a_task_that_will_not_end_is_reported_after_the_timeout() -> None:
    async def body() -> None:
        ended: list[str] = []
        done = asyncio.Event()
        stubborn = asyncio.create_task(_loses_cancels(10**9, ended, done))
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await cancel_until_done([stubborn], timeout=0.3) is False
        assert 0.25 <= loop.time() - started < 5 and not stubborn.done()
        done.set()  # it ends by itself
        await stubborn
        assert ended == ["ended"]

    asyncio.run(body())
