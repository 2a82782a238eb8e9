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
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
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


def counted(op: Op[T], tally: list[int]) -> Op[T]:
    """``op``, counting the requests it yields into ``tally[0]`` (a scan reports its cost)."""
    try:
        request = next(op)
        while True:
            tally[0] += 1
            try:
                result = yield request
            except BaseException as exc:  # the executor's error goes into the op
                request = op.throw(exc)
            else:
                request = op.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


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
