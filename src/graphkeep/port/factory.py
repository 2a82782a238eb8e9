"""One way to build a saver, store, cache or event log from a URL: ``from_url`` everywhere.

A backend's ``from_url`` (and ``from_table``) is ``opened(client, build, setup)`` (sync) or
``aopened(...)`` (async): the client context (closed on exit), a function that builds the
object on that client — naming the server for errors with ``where``, never patching an
executor afterwards — whether to create the schema first, and, for objects that hold
resources of their own (a store's TTL sweeper), how to close them before the client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, Protocol, TypeVar, runtime_checkable

C = TypeVar("C")


class SyncSetup(Protocol):
    def setup(self) -> Any: ...


@runtime_checkable
class AsyncSetup(Protocol):
    """An async saver: ``setup()`` is the blocking one, ``asetup()`` the awaitable one."""

    async def asetup(self) -> Any: ...


class AsyncReady(Protocol):
    """An async store, cache or event log: ``setup()`` itself is awaitable."""

    def setup(self) -> Awaitable[Any]: ...


S = TypeVar("S", bound=SyncSetup)
A = TypeVar("A", bound=AsyncSetup | AsyncReady)


@contextmanager
def opened(
    client: AbstractContextManager[C],
    build: Callable[[C], S],
    setup: bool,
    *,
    close: Callable[[S], object] | None = None,
) -> Iterator[S]:
    """``build(client)`` on an open client, its schema created when ``setup``; ``close``
    (if given) closes it when the block ends, or when ``setup`` fails, then the client is
    closed."""
    with client as connected:
        built = build(connected)
        try:
            if setup:
                built.setup()
            yield built
        finally:
            if close is not None:
                close(built)


@asynccontextmanager
async def aopened(
    client: AbstractAsyncContextManager[C],
    build: Callable[[C], A],
    setup: bool,
    *,
    close: Callable[[A], Awaitable[object]] | None = None,
) -> AsyncIterator[A]:
    """The async :func:`opened`: ``await asetup()`` (savers) or ``await setup()`` when
    ``setup``, ``await close(built)`` at the end."""
    async with client as connected:
        built = build(connected)
        try:
            if setup:
                if isinstance(built, AsyncSetup):
                    await built.asetup()
                else:
                    await built.setup()
            yield built
        finally:
            if close is not None:
                await close(built)
