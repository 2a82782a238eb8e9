"""Single-writer runs: ``saver.exclusive(graph)``, a graph whose every run of a thread holds the
thread's fenced lease.

LangGraph does not serialise runs of a thread: two workers that start one at once both read
the head and write children of it, and one turn vanishes from the history. Wrapped, ::

    app = saver.exclusive(graph)               # timeout=30.0, on_busy="wait"
    app.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})

each run takes the thread's lease (:mod:`.lock`) before its first read — with it, in the
same request, where the store can (Redis) — and lets it go after its last write — on return,
error, interrupt and cancellation — renewing it while it runs (every third of ``ttl``).
Every write of the run carries the lease's fencing token (:mod:`graphkeep.port.fence`): a
run that stalled past its lease while another took the thread over is refused
(:class:`~graphkeep.errors.LeaseLost`), never written over the other's turn. A second run of
a busy thread waits up to ``timeout`` seconds for it, then raises
:class:`~graphkeep.errors.ThreadBusy`; ``on_busy="reject"`` raises at once.

The runs are ``invoke``/``ainvoke``, ``stream``/``astream``/``astream_events``,
``batch``/``abatch`` and the state writes ``update_state``/``aupdate_state``/
``bulk_update_state``/``abulk_update_state``; every other attribute (``get_state``,
``get_state_history``, ``get_graph``…) is the graph's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import TYPE_CHECKING, Any

from graphkeep.errors import ConfigurationError, LockNotAcquired, ThreadBusy
from graphkeep.port.fence import drop

if TYPE_CHECKING:
    from graphkeep.checkpoint.lock import ThreadLock
    from graphkeep.checkpoint.saver import SaverBase

ON_BUSY = ("wait", "reject")
#: the lease's default ttl: renewed every third of it while the run lasts
DEFAULT_TTL = 30.0


class _LocalTurns:
    """Runs of one thread in this process take turns here before they ask the store for its
    lease (FIFO for async runs): only the run at the head of the line polls the store, so a
    hundred queued runs cost one poller, not a hundred, and they are served in order."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._sync: dict[str, tuple[threading.Lock, int]] = {}
        self._async: dict[tuple[int, str], tuple[asyncio.Lock, int]] = {}

    @contextlib.contextmanager
    def turn(self, thread_id: str, timeout: float | None) -> Iterator[bool]:
        """Yields whether this run's turn came within ``timeout`` (None: waits)."""
        with self._guard:
            lock, users = self._sync.get(thread_id) or (threading.Lock(), 0)
            self._sync[thread_id] = (lock, users + 1)
        try:
            got = lock.acquire(timeout=-1 if timeout is None else timeout)
            try:
                yield got
            finally:
                if got:
                    lock.release()
        finally:
            with self._guard:
                lock, users = self._sync[thread_id]
                if users == 1:
                    del self._sync[thread_id]
                else:
                    self._sync[thread_id] = (lock, users - 1)

    @contextlib.asynccontextmanager
    async def aturn(self, thread_id: str, timeout: float | None) -> AsyncIterator[bool]:
        key = (id(asyncio.get_running_loop()), thread_id)
        lock, users = self._async.get(key) or (asyncio.Lock(), 0)
        self._async[key] = (lock, users + 1)
        try:
            got = True
            if timeout == 0:
                got = not lock.locked()
                if got:
                    await lock.acquire()
            else:
                try:
                    await asyncio.wait_for(lock.acquire(), timeout)
                except asyncio.TimeoutError:
                    got = False
            try:
                yield got
            finally:
                if got:
                    lock.release()
        finally:
            lock, users = self._async[key]
            if users == 1:
                del self._async[key]
            else:
                self._async[key] = (lock, users - 1)


#: each saver's local turns, shared by every ``exclusive`` wrapper of it in this process
_TURNS: weakref.WeakKeyDictionary[Any, _LocalTurns] = weakref.WeakKeyDictionary()
_TURNS_GUARD = threading.Lock()


def _turns_of(saver: Any) -> _LocalTurns:
    with _TURNS_GUARD:
        turns = _TURNS.get(saver)
        if turns is None:
            turns = _TURNS[saver] = _LocalTurns()
        return turns


def _thread_of(config: Any) -> Any:
    configurable = (config or {}).get("configurable") or {}
    return configurable.get("thread_id")


class _Renewer:
    """One daemon thread that renews every lease the sync runs of this process hold, each
    every ``period`` seconds while its run lasts: a run costs a heap entry, not a thread of
    its own (a thread started and joined per run cost more than its lease's requests)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, ThreadLock, float]] = []  # a heap, by when due
        self._live: set[int] = set()
        self._count = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, lock: ThreadLock, period: float) -> int:
        """Renew ``lock`` every ``period`` seconds from now until :meth:`remove`."""
        renewal = next(self._count)
        with self._changed:
            heapq.heappush(self._due, (time.monotonic() + period, renewal, lock, period))
            self._live.add(renewal)
            if self._thread is None or not self._thread.is_alive():  # first, or forked
                self._thread = threading.Thread(
                    target=self._run, name="graphkeep-lease", daemon=True
                )
                self._thread.start()
            elif self._due[0][1] == renewal:
                self._changed.notify()  # due before the one the thread waits for
        return renewal

    def remove(self, renewal: int) -> None:
        with self._changed:
            self._live.discard(renewal)
            # a removed renewal's entry stays until due (then skipped): once most entries are
            # such, drop them, so finished runs do not wake the thread one by one
            if len(self._due) > 2 * len(self._live) + 8:
                self._due = [entry for entry in self._due if entry[1] in self._live]
                heapq.heapify(self._due)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._changed.wait(wait)
                _, renewal, lock, period = heapq.heappop(self._due)
                if renewal not in self._live:
                    continue
            try:
                kept = lock.extend() if lock.held else True  # not taken yet: its first read
            except Exception:  # noqa: BLE001 - the store is away: retried next period
                kept = True
            with self._changed:
                if not kept:  # lost: the run's next write is refused (LeaseLost)
                    self._live.discard(renewal)
                elif renewal in self._live:
                    heapq.heappush(self._due, (time.monotonic() + period, renewal, lock, period))


_RENEWER = _Renewer()


@contextlib.contextmanager
def renewed(lock: ThreadLock, period: float) -> Iterator[None]:
    """``lock`` renewed every ``period`` seconds for the block by the thread that renews the
    sync runs' leases (a fallback's move while it reads a slow fallback:
    :mod:`graphkeep.moving.fallback`); a lease lost meanwhile is not renewed again, and the
    holder's next fenced write is refused."""
    renewal = _RENEWER.add(lock, period)
    try:
        yield
    finally:
        _RENEWER.remove(renewal)


class Exclusive:
    """``graph`` whose runs of a thread are single-writer (see the module docstring)."""

    def __init__(
        self,
        saver: SaverBase,
        graph: Any,
        *,
        timeout: float = 30.0,
        on_busy: str = "wait",
        ttl: float = DEFAULT_TTL,
    ) -> None:
        if on_busy not in ON_BUSY:
            raise ConfigurationError(f"on_busy must be one of {ON_BUSY}, got {on_busy!r}")
        if timeout < 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, got {timeout!r}")
        if ttl <= 0:
            raise ConfigurationError(f"ttl must be positive, got {ttl!r}")
        self.saver = saver
        self.graph = graph
        self.timeout = timeout
        self.on_busy = on_busy
        self.ttl = ttl
        self._turns = _turns_of(saver)
        #: the runs take their lease with their first read (one request for both) when the
        #: graph reads this saver, whose get_tuple takes it, on a store that can do both in
        #: one request; else with a request of its own before the run
        self._with_read = (
            getattr(graph, "checkpointer", None) is saver and saver.port.leases_with_read
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.graph, name)

    def __repr__(self) -> str:
        return f"Exclusive({self.graph!r}, timeout={self.timeout}, on_busy={self.on_busy!r})"

    # -- the lease ---------------------------------------------------------------------

    def _lock(self, thread_id: Any, started: float) -> ThreadLock:
        """The thread's lease, waiting what is left of ``timeout`` since ``started``."""
        waits = self.on_busy == "wait"
        left = max(0.0, self.timeout - (time.monotonic() - started))
        return self.saver.lock(thread_id, ttl=self.ttl, blocking=waits, timeout=left)

    def _local_wait(self) -> float:
        return self.timeout if self.on_busy == "wait" else 0.0

    def _busy(self, thread_id: Any, exc: LockNotAcquired | None = None) -> ThreadBusy:
        waited = f"waited {self.timeout}s" if self.on_busy == "wait" else 'on_busy="reject"'
        return ThreadBusy(f"thread {thread_id!r} is busy: another run holds its lease ({waited})")

    @contextlib.contextmanager
    def _busy_when_refused(self, lock: ThreadLock) -> Iterator[None]:
        """A lease ``lock`` could not take (taken before the run, or by its first read)
        raised as :class:`ThreadBusy`; a lease lost once held stays what it is."""
        try:
            yield
        except LockNotAcquired as exc:
            if lock.held or isinstance(exc, ThreadBusy):
                raise
            raise self._busy(lock.thread_id, exc) from None

    @contextlib.contextmanager
    def held(self, config: Any, *, with_first_read: bool = False) -> Iterator[None]:
        """The thread's lease held (and renewed) around a run with ``config``: taken before
        this yields, or (``with_first_read``) by the run's first read of the thread."""
        thread_id = _thread_of(config)
        if thread_id is None:  # no thread: the graph raises (or runs without a checkpointer)
            yield
            return
        started = time.monotonic()
        thread = self.saver.check_thread_id(thread_id)
        with self._turns.turn(thread, self._local_wait()) as ours:
            if not ours:
                raise self._busy(thread_id)
            with self._leased(thread_id, started, with_first_read):
                yield

    @contextlib.contextmanager
    def _leased(self, thread_id: Any, started: float, with_first_read: bool) -> Iterator[None]:
        lock = self._lock(thread_id, started)
        if with_first_read:
            lock.with_first_read()
        else:
            with self._busy_when_refused(lock):
                lock.acquire()
        renewal = _RENEWER.add(lock, self.ttl / 3)
        try:
            with self._busy_when_refused(lock):  # its first read may find it busy
                yield
        finally:
            _RENEWER.remove(renewal)
            lock.not_read()
            if lock.held:
                lock.release()

    @contextlib.asynccontextmanager
    async def aheld(self, config: Any, *, with_first_read: bool = False) -> AsyncIterator[None]:
        """:meth:`held` for async runs (renewed by a task)."""
        thread_id = _thread_of(config)
        if thread_id is None:
            yield
            return
        started = time.monotonic()
        thread = self.saver.check_thread_id(thread_id)
        async with self._turns.aturn(thread, self._local_wait()) as ours:
            if not ours:
                raise self._busy(thread_id)
            async with self._aleased(thread_id, started, with_first_read):
                yield

    @contextlib.asynccontextmanager
    async def _aleased(
        self, thread_id: Any, started: float, with_first_read: bool
    ) -> AsyncIterator[None]:
        lock = self._lock(thread_id, started)
        if with_first_read:
            lock.with_first_read()
        else:
            with self._busy_when_refused(lock):
                await lock.aacquire()
        ending = asyncio.Event()
        renewer = asyncio.create_task(self._arenew(lock, ending))
        try:
            with self._busy_when_refused(lock):  # its first read may find it busy
                yield
        finally:
            ending.set()  # before the cancel, which a renewal under way may drop (_arenew)
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            lock.not_read()
            if lock.held:
                try:
                    await asyncio.shield(lock.arelease())
                finally:
                    # the shielded release ran in a copy of this context: stop carrying the
                    # token here too (an async generator's lease was taken in its caller's)
                    drop(lock.thread_id)

    async def _arenew(self, lock: ThreadLock, ending: asyncio.Event) -> None:
        """Renew ``lock`` every third of the ttl until ``ending`` is set. Not cancelled
        only: on Python < 3.12 ``asyncio.wait_for`` drops a cancellation that lands just as
        the call it awaits completes, and redis-py writes every command through it (its
        ``socket_timeout``, 5 s by default) — a renewal under way when the run ended
        renewed on, every period, and the run's end waited for it forever."""
        while not ending.is_set():
            await asyncio.sleep(self.ttl / 3)
            if ending.is_set() or not lock.held:  # not taken yet: its first read takes it
                continue
            try:
                if not await lock.aextend():
                    return
            except Exception:  # noqa: BLE001 - retried next period
                continue

    # -- runs --------------------------------------------------------------------------

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        with self.held(config, with_first_read=self._with_read):
            return self.graph.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        async with self.aheld(config, with_first_read=self._with_read):
            return await self.graph.ainvoke(input, config, **kwargs)

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
        with self.held(config, with_first_read=self._with_read):
            yield from self.graph.stream(input, config, **kwargs)

    async def astream(self, input: Any, config: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        async with self.aheld(config, with_first_read=self._with_read):
            async for chunk in self.graph.astream(input, config, **kwargs):
                yield chunk

    async def astream_events(
        self, input: Any, config: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async with self.aheld(config, with_first_read=self._with_read):
            async for event in self.graph.astream_events(input, config, **kwargs):
                yield event

    def batch(
        self,
        inputs: Sequence[Any],
        config: Any = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        configs = _configs(config, len(inputs))

        def one(pair: tuple[Any, Any]) -> Any:
            try:
                return self.invoke(pair[0], pair[1], **kwargs)
            except Exception as exc:
                if return_exceptions:
                    return exc
                raise

        if len(inputs) <= 1:
            return [one(pair) for pair in zip(inputs, configs, strict=True)]
        workers = _max_concurrency(configs) or len(inputs)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(copy_context().run, one, pair)
                for pair in zip(inputs, configs, strict=True)
            ]
            return [f.result() for f in futures]

    async def abatch(
        self,
        inputs: Sequence[Any],
        config: Any = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        configs = _configs(config, len(inputs))
        limit = asyncio.Semaphore(_max_concurrency(configs) or max(1, len(inputs)))

        async def one(input: Any, conf: Any) -> Any:
            async with limit:
                return await self.ainvoke(input, conf, **kwargs)

        runs = (one(i, c) for i, c in zip(inputs, configs, strict=True))
        return list(await asyncio.gather(*runs, return_exceptions=return_exceptions))

    # -- state writes --------------------------------------------------------------------

    def update_state(self, config: Any, values: Any, as_node: Any = None, **kw: Any) -> Any:
        with self.held(config, with_first_read=self._with_read):
            return self.graph.update_state(config, values, as_node, **kw)

    async def aupdate_state(self, config: Any, values: Any, as_node: Any = None, **kw: Any) -> Any:
        async with self.aheld(config, with_first_read=self._with_read):
            return await self.graph.aupdate_state(config, values, as_node, **kw)

    def bulk_update_state(self, config: Any, supersteps: Any) -> Any:
        with self.held(config, with_first_read=self._with_read):
            return self.graph.bulk_update_state(config, supersteps)

    async def abulk_update_state(self, config: Any, supersteps: Any) -> Any:
        async with self.aheld(config, with_first_read=self._with_read):
            return await self.graph.abulk_update_state(config, supersteps)


def _configs(config: Any, count: int) -> list[Any]:
    if isinstance(config, list):
        if len(config) != count:
            raise ConfigurationError(f"batch got {len(config)} configs for {count} inputs")
        return list(config)
    return [config] * count


def _max_concurrency(configs: list[Any]) -> int | None:
    for config in configs:
        if config and config.get("max_concurrency"):
            return int(config["max_concurrency"])
    return None
