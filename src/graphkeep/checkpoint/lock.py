"""A per-thread lease lock, so two runs of one thread cannot interleave.

LangGraph does not serialise runs of the same thread: two workers that invoke
one thread at once both read the same head and write forks of it. Wrap the run
in the thread's lease::

    with saver.lock(thread_id, ttl=60):
        graph.invoke(inputs, config)

    async with saver.lock(thread_id, ttl=60):
        await graph.ainvoke(inputs, config)

The lease expires by itself after ``ttl`` seconds (a crashed holder never
blocks the thread for longer) and is released only by the token that took it.
A holder whose run may outlast ``ttl`` calls :meth:`ThreadLock.extend`.

The lease is fenced: each grant carries a fencing token (:attr:`ThreadLock.fence`) that only
grows per thread — the larger of the last one plus one and the granting clock's
milliseconds, so it keeps growing even after the store forgot the last one — and every write
made on the thread while the lease is held carries it (:mod:`graphkeep.port.fence`). A
holder that stalled past ``ttl`` while another run took the thread over finds its next
write refused with :class:`~graphkeep.errors.LeaseLost`, nothing of it stored.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from graphkeep.errors import ConfigurationError, LockNotAcquired
from graphkeep.port import Op, Sleep
from graphkeep.port.fence import drop, fence_of, hold

if TYPE_CHECKING:
    from graphkeep.checkpoint.records import Loaded
    from graphkeep.checkpoint.saver import SaverBase

#: the longest a waiter sleeps between looks at a busy lease (from ``poll``, doubling): short,
#: so a waiter is not starved by a holder that takes the thread again at once (a worker's next
#: turn); each look is one small request
MAX_POLL_SECONDS = 0.25


#: thread id -> the lease a run takes with its first read of the thread (see
#: :meth:`ThreadLock.with_first_read`)
_NO_FIRST_READS: Mapping[str, ThreadLock] = MappingProxyType({})
_FIRST_READ: ContextVar[Mapping[str, ThreadLock]] = ContextVar(
    "graphkeep_leases_with_first_read", default=_NO_FIRST_READS
)


#: a lease's token: this process's random 128 bits (drawn again in a forked child) and a count,
#: as unique as a random UUID and cheaper to make for every run of ``saver.exclusive``
_TOKENS = itertools.count()
_PROCESS = [os.urandom(16).hex()]


def _forked() -> None:
    _PROCESS[0] = os.urandom(16).hex()


os.register_at_fork(after_in_child=_forked)


def new_token() -> str:
    """A token no other lease of any process holds."""
    return f"{_PROCESS[0]}{next(_TOKENS):x}"


def taken_with_read(saver: SaverBase, thread_id: str) -> ThreadLock | None:
    """The lease this context takes with its next read of ``thread_id`` through ``saver``."""
    lock = _FIRST_READ.get().get(thread_id)
    if lock is None or not lock.awaiting_read or lock.saver is not saver:
        return None
    return lock


def write_fence(saver: SaverBase, thread_id: str) -> Op[int | None]:
    """The fencing token a write of this context to ``thread_id`` carries (None: no lease).
    A run that writes the thread before it reads it takes its lease first, with a request
    of its own (:meth:`ThreadLock.with_first_read`: LangGraph's runs read first)."""
    lease = taken_with_read(saver, thread_id)
    if lease is not None:
        yield from lease.take_op()
    return fence_of(thread_id)


class ThreadLock:
    """A lease on one thread; a sync and an async context manager."""

    def __init__(
        self,
        saver: SaverBase,
        thread_id: Any,
        *,
        ttl: float = 30.0,
        blocking: bool = True,
        timeout: float | None = None,
        poll: float = 0.05,
    ) -> None:
        if ttl <= 0:
            raise ConfigurationError(f"lock ttl must be positive, got {ttl!r}")
        self.saver = saver
        self.thread_id = saver.check_thread_id(thread_id)
        self.ttl_ms = max(1, int(ttl * 1000))
        self.blocking = blocking
        self.timeout = timeout
        self.poll = poll
        self.token = new_token()
        self.held = False
        #: the fencing token of the grant (None until taken)
        self.fence: int | None = None
        #: to be taken with the context's next read of the thread (:meth:`with_first_read`)
        self.awaiting_read = False

    def acquire_op(self) -> Op[int]:
        """The op taking the lease (waiting as the lock says): the grant's fencing token, or
        :class:`~graphkeep.errors.LockNotAcquired`; carries nothing (see :meth:`acquire`)."""
        started = time.monotonic()
        deadline = None if self.timeout is None else started + self.timeout
        delay = self.poll
        store = self.saver.port
        telemetry = self.saver.telemetry
        while not (
            fence := (yield from store.acquire_lock(self.thread_id, self.token, self.ttl_ms))
        ):
            telemetry.lock_contended()
            now = time.monotonic()
            if not self.blocking or (deadline is not None and now >= deadline):
                telemetry.lock_waited(now - started, acquired=False)
                raise LockNotAcquired(
                    f"thread {self.thread_id!r} is locked by another run"
                    + ("" if not self.blocking else f" (waited {self.timeout}s)")
                )
            wait = delay if deadline is None else min(delay, max(0.0, deadline - now))
            yield Sleep(wait)
            delay = min(delay * 2, MAX_POLL_SECONDS)
        telemetry.lock_waited(time.monotonic() - started, acquired=True)
        return int(fence)

    def with_first_read(self) -> None:
        """Take the lease with this context's next read of the thread instead of a request
        of its own (``saver.exclusive``'s runs: LangGraph reads the thread first): the read
        (``get_tuple``) takes it in the same request where the store can
        (:meth:`~graphkeep.checkpoint.port.CheckpointPort.load_leased`), waiting for a busy
        lease as :meth:`acquire` does, and raising what it raises. :meth:`not_read` ends it."""
        self.awaiting_read = True
        current = _FIRST_READ.get()
        mine = {**current, self.thread_id: self} if current else {self.thread_id: self}
        _FIRST_READ.set(MappingProxyType(mine))

    def not_read(self) -> None:
        """No read takes this lease any more (the run ended; taken or not)."""
        self.awaiting_read = False
        current = _FIRST_READ.get()
        if current.get(self.thread_id) is self:
            _FIRST_READ.set(
                MappingProxyType({k: v for k, v in current.items() if k != self.thread_id})
                if len(current) > 1
                else _NO_FIRST_READS
            )

    def load_op(self, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        """The op of the read that takes the lease (see :meth:`with_first_read`): the thread's
        checkpoint, read under the lease; carries the grant's token in this context."""
        self.awaiting_read = False
        started = time.monotonic()
        store = self.saver.port
        fence, loaded = yield from store.load_leased(
            self.thread_id, ns, checkpoint_id, self.token, self.ttl_ms
        )
        if not fence:  # busy: wait as acquire does, then read
            yield from self.take_op()
            return (yield from store.load(self.thread_id, ns, checkpoint_id))
        self.saver.telemetry.lock_waited(time.monotonic() - started, acquired=True)
        self._granted(int(fence))
        return loaded

    def take_op(self) -> Op[int]:
        """The op taking a lease that awaited its first read with a request of its own (a
        busy read, a write first): held from then on, as :meth:`acquire` holds it."""
        self.awaiting_read = False
        fence = int((yield from self.acquire_op()))
        self._granted(fence)
        return fence

    def release_op(self) -> Op[bool]:
        """The op letting the lease go if still ours (see :meth:`release`)."""
        released = yield from self.saver.port.release_lock(self.thread_id, self.token)
        return bool(released)

    def _extend(self, ttl: float | None) -> Op[bool]:
        ttl_ms = self.ttl_ms if ttl is None else max(1, int(ttl * 1000))
        extended = yield from self.saver.port.extend_lock(self.thread_id, self.token, ttl_ms)
        return bool(extended)

    def _observed(self, name: str, op: Op[Any]) -> Op[Any]:
        return self.saver.observed(f"lock.{name}", op, self.thread_id)

    def _granted(self, fence: int) -> bool:
        """Hold the grant: this context's writes to the thread carry its fencing token."""
        self.fence = fence
        self.held = True
        hold(self.thread_id, fence)
        return True

    def carry(self) -> None:
        """Carry this lease's fencing token with the writes of the current context too.

        ``with``/``acquire`` carry it in the context that took the lease, and LangGraph's
        threads and tasks inherit it; a context that does not (a ``threading.Thread`` started
        by hand, a task of another event loop) calls this first, or its writes go unfenced.
        """
        if self.fence is None:
            raise LockNotAcquired(f"the lease on thread {self.thread_id!r} was never taken")
        hold(self.thread_id, self.fence)

    def extend_op(self, ttl: float | None = None) -> Op[bool]:
        """The op renewing the lease (see :meth:`extend`)."""
        return (yield from self._extend(ttl))

    def let_go(self) -> None:
        """Stop carrying the lease's token (after :meth:`release_op` run by an op of its own)."""
        self._let_go()

    def _let_go(self) -> None:
        self.held = False
        drop(self.thread_id)

    def acquire(self) -> bool:
        return self._granted(int(self.saver.drive(self._observed("acquire", self.acquire_op()))))

    def release(self) -> bool:
        """Release if still ours; False when the lease had expired (or was taken over).
        One request, sent at once on the happy path (no wait for a slot of the pool, no
        retry loop): the caller waits on it before it may say the thread is free."""
        try:
            return bool(self.saver.drive_once(self._observed("release", self.release_op())))
        finally:
            self._let_go()

    def extend(self, ttl: float | None = None) -> bool:
        """Renew the lease; False when it was lost in the meantime."""
        return bool(self.saver.drive(self._observed("extend", self._extend(ttl))))

    async def aacquire(self) -> bool:
        fence = await self.saver.adrive(self._observed("acquire", self.acquire_op()))
        return self._granted(int(fence))

    async def arelease(self) -> bool:
        try:
            op = self._observed("release", self.release_op())
            return bool(await self.saver.adrive_once(op))
        finally:
            self._let_go()

    async def aextend(self, ttl: float | None = None) -> bool:
        return bool(await self.saver.adrive(self._observed("extend", self._extend(ttl))))

    def __enter__(self) -> ThreadLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    async def __aenter__(self) -> ThreadLock:
        await self.aacquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.arelease()
