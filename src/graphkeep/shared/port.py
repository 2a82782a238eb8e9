"""The storage port a backend implements, and the loop that runs it sync or async.

Every port method is a generator: it *yields* requests in the store's own terms
(a Redis script call, a MongoDB command, a DynamoDB API call) and receives each
request's result back, finally *returning* its answer. The store never performs
I/O itself; an executor does. One generator therefore serves the sync and the
async saver alike — the same logic, two tiny executors:

    result = drive(store.load(...), executor.execute)            # sync
    result = await adrive(store.load(...), executor.aexecute)    # async

The saver's contract logic in :mod:`graphkeep.shared.saver` is written the same
way (``yield from store.…``), so sync and async share one source.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from graphkeep.shared.records import (
    BlobRecord,
    Chain,
    CheckpointRecord,
    Inventory,
    ListQuery,
    Loaded,
    ThreadDump,
    Typed,
    WriteRecord,
)

T = TypeVar("T")
#: A unit of store logic: yields requests, receives their results, returns T.
Op = Generator[Any, Any, T]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Yielded by ops that wait (lock polling): ``time.sleep`` or ``asyncio.sleep``."""

    seconds: float


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


@dataclass(frozen=True, slots=True)
class Emit:
    """Yielded by streaming ops (``list``): a value for the caller, not a request."""

    value: Any


class Store(Protocol):
    """What a backend maps onto its store. Thread ids and names arrive validated.

    Semantics every implementation must keep (see storage-contract.md):
    - ``put_checkpoint`` stores ``blobs`` and then the record so that no reader
      ever sees the record without its blobs; upsert on (thread, ns, id).
    - ``put_writes``: regular writes (idx >= 0) are insert-if-absent per
      (thread, ns, checkpoint_id, task_id, idx); special writes replace.
    - ``load`` returns the exact checkpoint, or the max id in (thread, ns).
    - ``list_page`` returns newest-first pages; it may pre-filter on metadata.
    - TTL: every write refreshes the expiry of all the thread needs, including
      the list elements its manifests name (``lists.ELEMENT_CHANNEL`` blobs).
    """

    def setup(self) -> Op[None]: ...

    def put_checkpoint(self, record: CheckpointRecord, blobs: list[BlobRecord]) -> Op[None]: ...

    def put_writes(
        self, thread_id: str, ns: str, checkpoint_id: str, writes: list[WriteRecord]
    ) -> Op[None]: ...

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]: ...

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]: ...

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]: ...

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        """Blobs by ``(ns, channel, version)``; absent keys are left out.

        Used for list elements (channel ``lists.ELEMENT_CHANNEL``, whose keys are
        sorted and mostly contiguous: a store may read them as ranges) and for
        the manifests a prune must look into. One request where the store allows.
        """
        ...

    def delete_thread(self, thread_id: str) -> Op[None]: ...

    def inventory(self, thread_id: str) -> Op[Inventory]: ...

    def delete_records(
        self,
        thread_id: str,
        checkpoints: list[tuple[str, str]],
        blobs: list[tuple[str, str, str]],
    ) -> Op[None]: ...

    def find_runs(self, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]: ...

    def export_thread(self, thread_id: str) -> Op[ThreadDump]: ...

    def import_thread(self, thread_id: str, dump: ThreadDump) -> Op[None]: ...

    def list_threads(self, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]: ...

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        """``(ns, checkpoint_id)`` of the thread's checkpoints with an id above ``above``.

        Ascending by checkpoint id (then namespace), at most ``limit``; ``above=None``
        starts at the first; ``ns=None`` means every namespace. Served by an index
        (never a scan of the thread's values): ``watch`` polls and catches up with it.
        """
        ...

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        """The thread's highest checkpoint id (in ``ns``, or any when None); None if none."""
        ...

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        """Take the thread's lease if free (or expired); True when taken."""
        ...

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        """Free the lease only if ``token`` still holds it; True when released."""
        ...

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        """Push the lease's expiry out if ``token`` still holds it."""
        ...


class Feed(Protocol):
    """A store with a native commit feed (``store.feed`` is True): ``watch`` blocks on it.

    ``put_checkpoint`` appends ``(ns, checkpoint_id)`` to the thread's feed in the
    same atomic step as the record, so the feed's order is the commit order.
    """

    feed: bool

    def feed_end(self, thread_id: str) -> Op[Any]:
        """The position of the newest entry of the thread's feed (one before any when empty)."""
        ...

    def feed_read(
        self, thread_id: str, position: Any, wait_ms: int
    ) -> Op[tuple[list[tuple[str, str]], Any]]:
        """Entries after ``position`` in commit order and the new position; when there
        are none, wait up to ``wait_ms`` for one (0: do not wait)."""
        ...


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


def drive(op: Op[T], execute: Callable[[Any], Any]) -> T:
    """Run ``op`` to completion, executing each request synchronously."""
    try:
        request = next(op)
        while True:
            try:
                if isinstance(request, Sleep):
                    time.sleep(request.seconds)
                    result = None
                else:
                    result = execute(request)
            except BaseException as exc:  # the op may handle store errors
                request = op.throw(exc)
            else:
                request = op.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def adrive(op: Op[T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Run ``op`` to completion, awaiting each request."""
    try:
        request = next(op)
        while True:
            try:
                if isinstance(request, Sleep):
                    await asyncio.sleep(request.seconds)
                    result = None
                else:
                    result = await execute(request)
            except BaseException as exc:
                request = op.throw(exc)
            else:
                request = op.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def drive_iter(op: Op[None], execute: Callable[[Any], Any]) -> Iterator[Any]:
    """Run a streaming op; ``Emit`` values are handed to the caller as they come.

    Closing the iterator (``break`` in the caller's loop) closes the op between
    requests: nothing is in flight, so nothing is left behind.
    """
    request = next(op, None)
    while request is not None:
        if isinstance(request, Emit):
            yield request.value
            request = next(op, None)
            continue
        try:
            if isinstance(request, Sleep):
                time.sleep(request.seconds)
                result = None
            else:
                result = execute(request)
        except BaseException as exc:
            request = _throw(op, exc)
        else:
            request = _send(op, result)


async def adrive_iter(op: Op[None], execute: Callable[[Any], Awaitable[Any]]) -> AsyncIterator[Any]:
    request = next(op, None)
    while request is not None:
        if isinstance(request, Emit):
            yield request.value
            request = next(op, None)
            continue
        try:
            if isinstance(request, Sleep):
                await asyncio.sleep(request.seconds)
                result = None
            else:
                result = await execute(request)
        except BaseException as exc:
            request = _throw(op, exc)
        else:
            request = _send(op, result)


def _send(op: Op[None], value: Any) -> Any:
    try:
        return op.send(value)
    except StopIteration:
        return None


def _throw(op: Op[None], exc: BaseException) -> Any:
    try:
        return op.throw(exc)
    except StopIteration:
        return None


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
