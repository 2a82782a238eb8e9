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
import collections
import contextlib
import heapq
import itertools
import math
import os
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
    hundred queued runs cost one poller, not a hundred, and they are served in order.

    A thread's entry is ``[lock, runs]``: its lock and how many runs of it are here (holding
    or waiting), so a run that finds itself alone takes the lock without a wait's machinery."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._sync: dict[str, list[Any]] = {}
        self._async: dict[tuple[int, str], list[Any]] = {}

    def enter(self, thread_id: str, timeout: float | None) -> list[Any] | None:
        """This run's turn, come within ``timeout`` (None: waits), for :meth:`leave`; None
        when it did not come."""
        with self._guard:
            entry = self._sync.get(thread_id)
            if entry is None:
                entry = self._sync[thread_id] = [threading.Lock(), 1]
            else:
                entry[1] += 1
        try:
            if entry[0].acquire(timeout=-1 if timeout is None else timeout):
                return entry
        except BaseException:
            self._gone(thread_id, entry)
            raise
        self._gone(thread_id, entry)
        return None

    def leave(self, thread_id: str, entry: list[Any]) -> None:
        entry[0].release()
        self._gone(thread_id, entry)

    def _gone(self, thread_id: str, entry: list[Any]) -> None:
        with self._guard:
            entry[1] -= 1
            if not entry[1]:
                del self._sync[thread_id]

    async def aenter(self, thread_id: str, timeout: float | None) -> list[Any] | None:
        """:meth:`enter` for the runs of one event loop (FIFO); :meth:`aleave` gives it back."""
        key = (id(asyncio.get_running_loop()), thread_id)
        entry = self._async.get(key)
        if entry is None:
            entry = self._async[key] = [asyncio.Lock(), 1, key]
        else:
            entry[1] += 1
        lock = entry[0]
        try:
            if entry[1] == 1 or (timeout == 0 and not lock.locked()):
                await lock.acquire()  # free: taken at once
                return entry
            if timeout != 0:
                try:
                    await asyncio.wait_for(lock.acquire(), timeout)
                    return entry
                except asyncio.TimeoutError:
                    pass
        except BaseException:
            self._agone(entry)
            raise
        self._agone(entry)
        return None

    def aleave(self, entry: list[Any]) -> None:
        entry[0].release()
        self._agone(entry)

    def _agone(self, entry: list[Any]) -> None:
        entry[1] -= 1
        if not entry[1]:
            del self._async[entry[2]]


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


class Renewal:
    """One lease renewed every ``period`` seconds by the process's renewer until
    :meth:`_Renewer.remove` (which only marks it)."""

    __slots__ = ("lock", "period", "due", "live")

    def __init__(self, lock: ThreadLock, period: float) -> None:
        self.lock = lock
        self.period = period
        self.due = time.monotonic() + period
        self.live = True


#: the renewals added since the renewer last looked, at most: then an add wakes it to take
#: them (dead ones dropped), so a long period never lets them pile up
_INCOMING_MAX = 1024


class _Renewer:
    """One daemon thread that renews every lease the sync runs of this process hold, each
    every ``period`` seconds while its run lasts: a run costs an entry on a queue, not a
    thread of its own (a thread started and joined per run cost more than its lease's
    requests), and no lock either: :meth:`add` appends to the queue and wakes the thread only
    when the renewal is due before the thread's next wake-up (the first run, a shorter
    period); :meth:`remove` marks the renewal dead, dropped when the thread comes to it."""

    def __init__(self) -> None:
        self._incoming: collections.deque[Renewal] = collections.deque()
        self._changed = threading.Condition(threading.Lock())
        #: when the thread looks next: +inf while no thread waits (the next add wakes one),
        #: -inf while it is awake (it looks at the queue before it waits again)
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def add(self, lock: ThreadLock, period: float) -> Renewal:
        """Renew ``lock`` every ``period`` seconds from now until :meth:`remove`."""
        renewal = Renewal(lock, period)
        self._incoming.append(renewal)
        if renewal.due < self._wake_at or len(self._incoming) > _INCOMING_MAX:
            with self._changed:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="graphkeep-lease", daemon=True
                    )
                    self._thread.start()
                self._changed.notify()
        return renewal

    def remove(self, renewal: Renewal) -> None:
        renewal.live = False

    def forked(self) -> None:
        """In a forked child: no thread renews here yet, nothing is queued for it."""
        self.__init__()  # type: ignore[misc]

    def _run(self) -> None:
        due: list[tuple[float, int, Renewal]] = []  # a heap, by when due
        order = itertools.count()
        while True:
            with self._changed:
                while True:
                    self._wake_at = -math.inf  # awake: an add needs no wake-up
                    while self._incoming:
                        renewal = self._incoming.popleft()
                        if renewal.live:
                            heapq.heappush(due, (renewal.due, next(order), renewal))
                    while due and not due[0][2].live:
                        heapq.heappop(due)
                    if len(due) > 2 * _INCOMING_MAX:  # mostly dead: keep the live ones
                        due = [entry for entry in due if entry[2].live]
                        heapq.heapify(due)
                    now = time.monotonic()
                    if due and due[0][0] <= now:
                        break
                    self._wake_at = due[0][0] if due else math.inf
                    if self._incoming:  # added meanwhile, not woken: look again
                        continue
                    self._changed.wait(None if not due else due[0][0] - now)
                _, _, renewal = heapq.heappop(due)
            lock = renewal.lock
            try:
                kept = lock.extend() if lock.held else True  # not taken yet: its first read
            except Exception:  # noqa: BLE001 - the store is away: retried next period
                kept = True
            if kept and renewal.live:  # lost: the run's next write is refused (LeaseLost)
                renewal.due = time.monotonic() + renewal.period
                with self._changed:
                    heapq.heappush(due, (renewal.due, next(order), renewal))


_RENEWER = _Renewer()
os.register_at_fork(after_in_child=_RENEWER.forked)


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


class _Renewing:
    """An async run's lease renewed every ``period`` seconds by a timer of its event loop: a
    task exists only while a renewal is under way, none for a run shorter than the period (a
    renewer task per run, started and cancelled, cost more than the lease's requests)."""

    __slots__ = ("lock", "period", "loop", "handle", "task", "ended")

    def __init__(self, lock: ThreadLock, period: float) -> None:
        self.lock = lock
        self.period = period
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[None] | None = None
        self.ended = False
        self.handle = self.loop.call_later(period, self._due)

    def _due(self) -> None:
        if self.ended:
            return
        if not self.lock.held:  # not taken yet: its first read takes it
            self.handle = self.loop.call_later(self.period, self._due)
            return
        self.task = self.loop.create_task(self._renew())

    async def _renew(self) -> None:
        kept = True
        try:
            kept = await self.lock.aextend()
        except Exception:  # noqa: BLE001 - retried next period
            pass
        finally:
            self.task = None
        if kept and not self.ended:  # lost: the run's next write is refused (LeaseLost)
            self.handle = self.loop.call_later(self.period, self._due)

    async def stop(self) -> None:
        """No renewal from now on; one under way is cancelled and awaited. Its end does not
        hang on the cancel: on Python < 3.12 ``asyncio.wait_for`` drops a cancellation that
        lands just as the call it awaits completes, and redis-py writes every command through
        it (its ``socket_timeout``, 5 s by default) — such a renewal completes, and having
        ended, schedules none after it (a renewer that looped until cancelled renewed on,
        every period, and the run's end waited for it forever)."""
        self.ended = True
        self.handle.cancel()
        task = self.task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Hold:
    """One run's hold on its thread's lease (:meth:`Exclusive.held` / :meth:`Exclusive.aheld`):
    a plain context manager, where generator-based ones nested per run cost more than the
    lease's own bookkeeping."""

    __slots__ = (
        "app",
        "config",
        "with_first_read",
        "thread",
        "turn",
        "lock",
        "renewal",
        "renewing",
    )

    def __init__(self, app: Exclusive, config: Any, with_first_read: bool) -> None:
        self.app = app
        self.config = config
        self.with_first_read = with_first_read
        self.lock: ThreadLock | None = None

    def _lease(self, started: float, thread_id: Any) -> ThreadLock:
        """The run's lease, awaiting its first read (``with_first_read``) or to be taken."""
        lock = self.app._lock(thread_id, started)
        if self.with_first_read:
            lock.with_first_read()
        return lock

    def _ending(self, exc: BaseException | None) -> tuple[ThreadLock, bool] | None:
        """The run's lease (None when the run had none) and whether ``exc`` is its refusal
        (its first read may have found it busy), to raise as :class:`ThreadBusy`."""
        lock = self.lock
        if lock is None:
            return None
        self.lock = None
        return lock, _refusal(lock, exc) is not None

    def _start(self) -> tuple[Any, str, float] | None:
        """The run's thread id as given and as checked, and when its wait began; None when
        the run names no thread (the graph raises, or runs without a checkpointer)."""
        thread_id = _thread_of(self.config)
        if thread_id is None:
            return None
        return thread_id, self.app.saver.check_thread_id(thread_id), time.monotonic()

    def __enter__(self) -> None:
        if (start := self._start()) is None:
            return
        (thread_id, thread, started), app = start, self.app
        turn = app._turns.enter(thread, app._local_wait())
        if turn is None:
            raise app._busy(thread_id)
        try:
            lock = self._lease(started, thread_id)
            if not self.with_first_read:
                with app.refused_as_busy(lock):
                    lock.acquire()
        except BaseException:
            app._turns.leave(thread, turn)
            raise
        self.thread, self.turn, self.lock = thread, turn, lock
        self.renewal = _RENEWER.add(lock, app.ttl / 3)

    def __exit__(self, *exc_info: Any) -> None:
        ending = self._ending(exc_info[1])
        if ending is None:
            return
        lock, refused = ending
        try:
            _RENEWER.remove(self.renewal)
            lock.not_read()
            if lock.held:
                lock.release()
        finally:
            self.app._turns.leave(self.thread, self.turn)
        if refused:
            raise self.app._busy(lock.thread_id) from None

    async def __aenter__(self) -> None:
        if (start := self._start()) is None:
            return
        (thread_id, thread, started), app = start, self.app
        turn = await app._turns.aenter(thread, app._local_wait())
        if turn is None:
            raise app._busy(thread_id)
        try:
            lock = self._lease(started, thread_id)
            if not self.with_first_read:
                with app.refused_as_busy(lock):
                    await lock.aacquire()
            self.renewing = _Renewing(lock, app.ttl / 3)
        except BaseException:
            app._turns.aleave(turn)
            raise
        self.turn, self.lock = turn, lock

    async def __aexit__(self, *exc_info: Any) -> None:
        ending = self._ending(exc_info[1])
        if ending is None:
            return
        lock, refused = ending
        try:
            await self.renewing.stop()
            lock.not_read()
            if lock.held:
                try:
                    await asyncio.shield(lock.arelease())
                finally:
                    # the shielded release ran in a copy of this context: stop carrying the
                    # token here too (an async generator's lease was taken in its caller's)
                    drop(lock.thread_id)
        finally:
            self.app._turns.aleave(self.turn)
        if refused:
            raise self.app._busy(lock.thread_id) from None


def _refusal(lock: ThreadLock, exc: BaseException | None) -> LockNotAcquired | None:
    """``exc`` when it is the refusal of a lease ``lock`` never held (taken before the run, or
    by its first read), which the run raises as :class:`ThreadBusy`; None for anything else
    (a lease lost once held stays what it is)."""
    if isinstance(exc, LockNotAcquired) and not lock.held and not isinstance(exc, ThreadBusy):
        return exc
    return None


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

    def _busy(self, thread_id: Any) -> ThreadBusy:
        waited = f"waited {self.timeout}s" if self.on_busy == "wait" else 'on_busy="reject"'
        return ThreadBusy(f"thread {thread_id!r} is busy: another run holds its lease ({waited})")

    @contextlib.contextmanager
    def refused_as_busy(self, lock: ThreadLock) -> Iterator[None]:
        """A lease ``lock`` could not take (before the run) raised as :class:`ThreadBusy`."""
        try:
            yield
        except LockNotAcquired as exc:
            if _refusal(lock, exc) is None:
                raise
            raise self._busy(lock.thread_id) from None

    def held(self, config: Any, *, with_first_read: bool = False) -> _Hold:
        """The thread's lease held (and renewed) around a run with ``config`` (``with``):
        taken on entry, or (``with_first_read``) by the run's first read of the thread."""
        return _Hold(self, config, with_first_read)

    def aheld(self, config: Any, *, with_first_read: bool = False) -> _Hold:
        """:meth:`held` for async runs (``async with``; renewed by a timer of the loop)."""
        return _Hold(self, config, with_first_read)

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
