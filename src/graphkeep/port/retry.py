"""The one retry policy every executor follows, and the two executors that follow it.

A backend says, as data, what its requests' failures mean (:class:`Retry`): the pauses
between attempts, which failures are worth another attempt, and what the caller sees when
none is left (``StorageUnavailable`` naming the server, or the error itself). Each backend
hands :class:`SyncExecutor` / :class:`AsyncExecutor` a function that sends one request
once; the attempts, pauses and the final error are written here, once.

Every request a port yields is idempotent (upserts, insert-if-absent, deletes by key), so a
retried request never applies twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from graphkeep.port.ops import Sleep
from graphkeep.port.pools import Pool
from graphkeep.port.telemetry import Target

R = TypeVar("R")


@dataclass(frozen=True)
class Retry:
    """How one backend's failed requests are retried.

    ``delays``: the pause in seconds before each further attempt (so ``len(delays) + 1``
    attempts in all). ``retryable(exc, request, seconds)``: whether the failure of an
    attempt that took ``seconds`` is worth another one. ``failure(exc, where)``: the
    exception the caller gets once no attempt is left or the failure is not retryable
    (``exc`` itself for errors that are the caller's to see).
    """

    delays: tuple[float, ...]
    retryable: Callable[[BaseException, Any, float], bool]
    failure: Callable[[BaseException, str], BaseException]

    def pause(
        self, exc: BaseException, request: Any, took: float, delay: float | None, where: str
    ) -> float:
        """``delay`` when another attempt is due; else raise what the caller sees."""
        if delay is not None and self.retryable(exc, request, took):
            return delay
        error = self.failure(exc, where)
        if error is exc:
            raise exc
        raise error from exc


class Executor(Generic[R]):
    """Runs a request with ``send`` (one attempt), retried as ``retry`` says: what
    :class:`SyncExecutor` and :class:`AsyncExecutor` share.

    ``where`` names the server in errors (password masked), ``target`` in telemetry
    (:class:`~graphkeep.port.telemetry.Target`); ``Sleep`` requests pause. With a ``pool``,
    each attempt first waits for one of its slots (see :mod:`graphkeep.port.pools`); the
    pauses between attempts hold none.
    """

    def __init__(
        self,
        send: Callable[[Any], R],
        retry: Retry,
        where: str,
        target: Target | None = None,
        pool: Pool | None = None,
    ) -> None:
        self.send = send
        self.retry = retry
        self.where = where
        #: what the requests go to, for telemetry (``db.system.name``, ``db.namespace``…)
        self.target = target
        self.pool = pool


class SyncExecutor(Executor[Any]):
    """The blocking executor: ``send`` returns the request's result."""

    def __call__(self, request: Any) -> Any:
        if isinstance(request, Sleep):
            time.sleep(request.seconds)
            return None
        for delay in (*self.retry.delays, None):
            with nullcontext(request) if self.pool is None else self.pool.hold(request) as sent:
                started = time.monotonic()
                try:
                    return self.send(sent)
                except Exception as exc:  # the policy decides: retry, or raise what one sees
                    took = time.monotonic() - started
                    pause = self.retry.pause(exc, request, took, delay, self.where)
            time.sleep(pause)
        raise AssertionError("unreachable")

    def once(self, request: Any) -> Any:
        """``request`` sent as it is, without waiting for a slot or the retry loop, on the
        happy path: for a small request the caller waits on at the end of its work (a
        lease's release, which the caller must see done; never a blocking read). Anything
        but a result sends it the full way (:meth:`__call__`: a slot, the retry policy), as
        if it was never tried: every request is idempotent (a driver's pool with no
        connection free waits for one, or raises, as it does for any request)."""
        if isinstance(request, Sleep):
            return self(request)
        try:
            return self.send(request)
        except Exception:  # noqa: BLE001 - the full way decides what the caller sees
            return self(request)


class AsyncExecutor(Executor[Awaitable[Any]]):
    """The async twin of :class:`SyncExecutor`: ``send`` returns an awaitable."""

    async def __call__(self, request: Any) -> Any:
        if isinstance(request, Sleep):
            await asyncio.sleep(request.seconds)
            return None
        for delay in (*self.retry.delays, None):
            held = nullcontext(request) if self.pool is None else self.pool.ahold(request)
            async with held as sent:
                started = time.monotonic()
                try:
                    return await self.send(sent)
                except Exception as exc:  # the policy decides: retry, or raise what one sees
                    took = time.monotonic() - started
                    pause = self.retry.pause(exc, request, took, delay, self.where)
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def once(self, request: Any) -> Any:
        """The async :meth:`SyncExecutor.once`."""
        if isinstance(request, Sleep):
            return await self(request)
        try:
            return await self.send(request)
        except Exception:  # noqa: BLE001 - the full way decides what the caller sees
            return await self(request)
