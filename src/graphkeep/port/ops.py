"""Ops and their drivers: store logic as generators, run sync or async.

An op is a generator: it *yields* requests in a store's own terms (a Redis script call,
a MongoDB command, a DynamoDB API call), receives each request's result back, and finally
*returns* its answer. An op never performs I/O itself; an executor does. One op therefore
serves the sync and the async API alike — the same logic, two drivers:

    result = drive(port.load(...), executor)            # sync
    result = await adrive(port.load(...), aexecutor)    # async

See docs/architecture.md ("The port") for a worked example.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
#: A unit of store logic: yields requests, receives their results, returns T.
Op = Generator[Any, Any, T]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Yielded by ops that wait (lock polling): ``time.sleep`` or ``asyncio.sleep``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Emit:
    """Yielded by streaming ops (``list``): a value for the caller, not a request."""

    value: Any


@dataclass(frozen=True, slots=True)
class Parallel:
    """Yielded by ops whose next requests do not depend on each other (a Query per
    partition): the driver runs the sub-``ops`` at once, at most ``limit`` at a time
    (threads in :func:`drive`, tasks in :func:`adrive`), and sends back their answers in
    order. When any fails, the first failure (in order) is raised into the op after all
    have ended, so none is left running."""

    ops: tuple[Op[Any], ...]
    limit: int = 8


@dataclass(frozen=True, slots=True)
class Call:
    """Yielded by ops that must call blocking code that is not a store request of their own
    executor (a fallback saver's reads): :func:`drive` calls ``fn()``, :func:`adrive` runs it
    in a worker thread (with the caller's context). The op's own writes stay requests, made
    in the driver's context (a lease's fencing token with them)."""

    fn: Callable[[], Any]


def _parallel(request: Parallel, execute: Callable[[Any], Any]) -> list[Any]:
    if len(request.ops) <= 1:
        return [drive(op, execute) for op in request.ops]
    with ThreadPoolExecutor(min(request.limit, len(request.ops))) as pool:
        # each thread carries the caller's context (the call's telemetry span, for one)
        futures = [
            pool.submit(contextvars.copy_context().run, drive, op, execute) for op in request.ops
        ]
        return [future.result() for future in futures]


async def _aparallel(request: Parallel, execute: Callable[[Any], Awaitable[Any]]) -> list[Any]:
    gate = asyncio.Semaphore(request.limit)

    async def one(op: Op[Any]) -> Any:
        async with gate:
            return await adrive(op, execute)

    results = await asyncio.gather(*(one(op) for op in request.ops), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _run(request: Any, execute: Callable[[Any], Any]) -> Any:
    if isinstance(request, Sleep):
        time.sleep(request.seconds)
        return None
    if isinstance(request, Parallel):
        return _parallel(request, execute)
    if isinstance(request, Call):
        return request.fn()
    return execute(request)


async def _arun(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
    if isinstance(request, Sleep):
        await asyncio.sleep(request.seconds)
        return None
    if isinstance(request, Parallel):
        return await _aparallel(request, execute)
    if isinstance(request, Call):
        return await asyncio.to_thread(request.fn)
    return await execute(request)


def drive(op: Op[T], execute: Callable[[Any], Any]) -> T:
    """Run ``op`` to completion, executing each request synchronously."""
    try:
        request = next(op)
        while True:
            try:
                result = _run(request, execute)
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
                result = await _arun(request, execute)
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
            result = _run(request, execute)
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
            result = await _arun(request, execute)
        except BaseException as exc:
            request = _throw(op, exc)
        else:
            request = _send(op, result)


def counted(op: Op[T], tally: list[int]) -> Op[T]:
    """``op``, counting the requests it yields into ``tally[0]`` (a scan reports its cost);
    the requests of a :class:`Parallel` are counted one by one."""
    try:
        request = next(op)
        while True:
            sent, tallies = each_counted(request)
            if tallies is None:
                tally[0] += 1
            try:
                result = yield sent
            except BaseException as exc:  # the executor's error goes into the op
                request = op.throw(exc)
            else:
                request = op.send(result)
            finally:
                tally[0] += sum(t[0] for t in tallies or ())
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def each_counted(request: Any) -> tuple[Any, list[list[int]] | None]:
    """A :class:`Parallel` whose sub-ops count their requests (one tally each, summed once
    they have all ended), with those tallies; any other request as it is, with None."""
    if not isinstance(request, Parallel):
        return request, None
    tallies = [[0] for _ in request.ops]
    ops = tuple(counted(op, t) for op, t in zip(request.ops, tallies, strict=True))
    return Parallel(ops, request.limit), tallies


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
