"""Bridges between sync and async callers: an async object's sync calls, and streams across.

Sync calls on an async saver, store, cache or event log hop onto the loop that owns its
client (:func:`on_loop`); endless streams cross between a blocking iterator and an async
one a step at a time (:func:`stream_in_thread`, :func:`stream_on_loop`); an answer already
read is handed to async callers as an iterator (:func:`aiter_of`). A task whose answer to
a cancellation is only to end is stopped by :func:`cancel_until_done`, not by one ``cancel()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


#: seconds between cancellations of a task that has not ended (:func:`cancel_until_done`)
RECANCEL_S = 0.1


async def cancel_until_done(tasks: Any, timeout: float | None = None) -> bool:
    """Cancel ``tasks`` (an iterable of tasks) until each has ended; True when they all did
    within ``timeout`` seconds (None: wait as long as it takes).

    One ``cancel()`` is not enough on Python < 3.12: ``asyncio.wait_for`` — redis-py sends
    every command through it — drops a cancellation that lands just as the call it awaits
    completes, and the task goes on (a sweeper keeps sweeping, a batch loop keeps waiting, a
    renewer keeps renewing). Cancelled again every :data:`RECANCEL_S` until it ends — so not
    for a task that answers its cancellation with work of its own (an AG-UI run writing its
    ``RUN_ERROR``): a second cancellation would cut that short. Waiting here never raises what
    the tasks raised; a cancellation of the caller propagates."""
    pending = {task for task in tasks if not task.done()}
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while pending:
        for task in pending:
            task.cancel()
        wait = RECANCEL_S if deadline is None else min(RECANCEL_S, deadline - loop.time())
        if wait <= 0:
            return False
        _, pending = await asyncio.wait(pending, timeout=wait)
    return True


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop an async saver, store or cache is created on (None outside one)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def on_loop(loop: asyncio.AbstractEventLoop | None, coro: Any, what: str, instead: str) -> Any:
    """Run ``coro`` on ``loop`` from another thread and wait for its result.

    Sync calls on an async saver, store or cache (``what``) land here: from a worker thread
    (LangGraph's sync ``invoke``) they hop onto the owner's loop; on that loop itself they
    would deadlock, and without a loop they cannot run, so both raise, saying what to use
    ``instead``.
    """
    if loop is None or loop.is_closed():
        coro.close()
        raise RuntimeError(f"this async {what} has no running event loop; use {instead}")
    if running_loop() is loop:
        coro.close()
        raise asyncio.InvalidStateError(
            f"synchronous calls on an async {what} from its own event loop would deadlock;"
            f" use {instead}"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


_DONE = object()


async def stream_in_thread(iterator: Iterator[T]) -> AsyncIterator[T]:
    """An async iterator pulling a blocking iterator one item at a time in a worker thread.

    For endless streams (``watch``, ``read(follow=True)``) on a sync client: unlike
    collecting a list first, each item reaches the caller as soon as it exists.
    """
    try:
        while True:
            item = await asyncio.to_thread(next, iterator, _DONE)
            if item is _DONE:
                return
            yield item  # type: ignore[misc]
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


def stream_on_loop(iterator: AsyncIterator[T], run: Callable[[Any], Any]) -> Iterator[T]:
    """A blocking iterator over an async one, each step run by ``run`` (``on_loop``)."""

    async def step() -> Any:
        try:
            return await iterator.__anext__()
        except StopAsyncIteration:
            return _DONE

    async def close() -> None:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()

    try:
        while True:
            item = run(step())
            if item is _DONE:
                return
            yield item
    finally:
        run(close())


async def aiter_of(item: T | None) -> AsyncIterator[T]:
    """An async iterator of ``item`` alone (of nothing when it is None)."""
    if item is not None:
        yield item
