"""Bounded connection use: requests queue for a connection instead of failing under load.

A client's :class:`Pool` lets at most ``max_connections`` of graphkeep's requests hold a
connection at once; a request beyond that waits for one to free. It fails only when no
request at all has finished for ``pool_timeout`` seconds while it waited — the pool is
stuck, not merely busy — with :class:`~graphkeep.errors.PoolExhausted` naming the pool and
both options. Each backend sizes its driver's own pool from the same options, so the
driver never refuses a request the gate let through.

Requests that may wait at the server (a Redis ``XREAD BLOCK`` of a watcher or an event-log
follower) take slots of their own, a fifth of the connections: watchers never starve
writers. When those are all taken, a blocking read waits a little for one and is otherwise
sent as a plain, non-blocking read on an ordinary slot (its caller polls again), so any
number of watchers share the pool.

One :class:`Pool` belongs to one client (:func:`register` / :func:`pool_for`): a saver,
store, cache and event log built on the same client share its connections and its bound.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from graphkeep.errors import ConfigurationError, PoolExhausted

#: connections a client opens at most unless told otherwise (per node on a Redis Cluster)
DEFAULT_MAX_CONNECTIONS = 50
#: seconds a request may wait while no other request finishes before PoolExhausted
DEFAULT_POOL_TIMEOUT = 20.0
#: how long a blocking read waits for a blocking slot before it is sent without blocking
BLOCKING_SLOT_WAIT = 0.25
#: the options every from_url / connect* function takes for its client's pool
POOL_OPTIONS = ("max_connections", "pool_timeout")


@dataclass(frozen=True)
class PoolOptions:
    """``max_connections`` and ``pool_timeout`` as a client factory takes them."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    pool_timeout: float = DEFAULT_POOL_TIMEOUT

    @property
    def blocking(self) -> int:
        """The slots kept for requests that may wait at the server (0 below two)."""
        return max(1, self.max_connections // 5) if self.max_connections >= 2 else 0

    @property
    def ordinary(self) -> int:
        """The slots of every other request."""
        return self.max_connections - self.blocking


def pool_options(options: dict[str, Any]) -> PoolOptions:
    """Take ``max_connections`` / ``pool_timeout`` out of ``options``, checked."""
    size = options.pop("max_connections", DEFAULT_MAX_CONNECTIONS)
    timeout = options.pop("pool_timeout", DEFAULT_POOL_TIMEOUT)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigurationError(f"max_connections must be a positive integer, got {size!r}")
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout < math.inf
    ):
        raise ConfigurationError(
            f"pool_timeout must be a positive number of seconds, got {timeout!r}"
        )
    return PoolOptions(size, float(timeout))


class _Slots:
    """``size`` slots taken one at a time: by threads (:meth:`take` / :meth:`give`) or by
    the tasks of one event loop (:meth:`atake` / :meth:`agive`), never both. A slot given
    back goes to the longest waiter first."""

    def __init__(self, size: int) -> None:
        self.free = size
        #: when a slot was last given back: a waiter's timeout counts from then
        self.released = time.monotonic()
        self._cond = threading.Condition()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _remaining(self, started: float, timeout: float) -> float:
        return timeout - (time.monotonic() - max(started, self.released))

    def take(self, timeout: float) -> bool:
        """A slot, waiting while slots are given back; False after ``timeout`` without one."""
        started = time.monotonic()
        with self._cond:
            while self.free == 0:
                left = self._remaining(started, timeout)
                if left <= 0:
                    return False
                self._cond.wait(left)
            self.free -= 1
            return True

    def give(self) -> None:
        with self._cond:
            self.free += 1
            self.released = time.monotonic()
            self._cond.notify()

    async def atake(self, timeout: float) -> bool:
        """The async :meth:`take`: a slot given back is handed to the first waiter."""
        if self.grab():
            return True
        started = time.monotonic()
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(handed)
        try:
            while not handed.done():
                left = self._remaining(started, timeout)
                if left <= 0:
                    return False
                await asyncio.wait((handed,), timeout=left)
            return True
        except BaseException:
            if handed.done() and not handed.cancelled():
                self.agive()  # cancelled after the slot was handed over: pass it on
            raise
        finally:
            if not handed.done():
                self._waiters.remove(handed)
                handed.cancel()

    def grab(self) -> bool:
        """A slot if one is free and nobody waits for it (async side; never waits)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    def agive(self) -> None:
        self.released = time.monotonic()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class Pool:
    """The gate of one client (see the module docstring).

    ``name`` is how errors name the pool (``"Redis at redis://h:6379/0"``); ``blocks(r)``
    says whether request ``r`` may wait at the server and ``unblocked(r)`` is the same
    request sent without waiting (both only where the backend has such requests).
    """

    def __init__(
        self,
        name: str,
        options: PoolOptions,
        *,
        blocks: Callable[[Any], bool] | None = None,
        unblocked: Callable[[Any], Any] | None = None,
    ) -> None:
        self.name = name
        self.options = options
        self.blocks = blocks if blocks is not None and options.blocking else None
        self.unblocked = unblocked
        self._ordinary = _Slots(options.ordinary if self.blocks else options.max_connections)
        self._blocking = _Slots(options.blocking)

    def _exhausted(self) -> PoolExhausted:
        o = self.options
        return PoolExhausted(
            f"the connection pool of {self.name} is exhausted: {o.max_connections} requests"
            f" held its connections and none finished for {o.pool_timeout:g} s"
            " (options max_connections and pool_timeout)"
        )

    def _degraded(self, request: Any) -> Any:
        assert self.unblocked is not None
        return self.unblocked(request)

    @contextmanager
    def hold(self, request: Any) -> Iterator[Any]:
        """A slot for ``request`` while the block runs; yields the request to send."""
        if self.blocks is not None and self.blocks(request):
            if self._blocking.take(BLOCKING_SLOT_WAIT):
                try:
                    yield request
                finally:
                    self._blocking.give()
                return
            request = self._degraded(request)
        if not self._ordinary.take(self.options.pool_timeout):
            raise self._exhausted()
        try:
            yield request
        finally:
            self._ordinary.give()

    @asynccontextmanager
    async def ahold(self, request: Any) -> AsyncIterator[Any]:
        """The async :meth:`hold`."""
        if self.blocks is not None and self.blocks(request):
            if await self._blocking.atake(BLOCKING_SLOT_WAIT):
                try:
                    yield request
                finally:
                    self._blocking.agive()
                return
            request = self._degraded(request)
        if not await self._ordinary.atake(self.options.pool_timeout):
            raise self._exhausted()
        try:
            yield request
        finally:
            self._ordinary.agive()

    def extra(self) -> bool:
        """One more ordinary slot if one is free now, never waiting (async side): for a
        request that fans out (a Redis Cluster pipeline, one call per slot) and runs wider
        when it can; each one taken goes back with :meth:`give_extra`."""
        return self._ordinary.grab()

    def give_extra(self) -> None:
        self._ordinary.agive()


_POOLS: weakref.WeakKeyDictionary[Any, Pool] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def register(client: Any, pool: Pool) -> Any:
    """Make ``pool`` the gate of ``client`` (returned, for chaining)."""
    with _POOLS_LOCK:
        _POOLS[client] = pool
    return client


def pool_for(client: Any, default: Callable[[], Pool]) -> Pool:
    """The gate of ``client``: the registered one (clients graphkeep made from a URL), or
    ``default()`` made once (a client the application built, sized from its own pool)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(client)
        if pool is None:
            pool = _POOLS[client] = default()
        return pool
