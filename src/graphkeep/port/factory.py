"""One way to build a saver, store, cache or event log from a URL: ``from_url`` everywhere.

A backend's ``from_url`` (and ``from_table``) is ``opened(client, build, setup)`` (sync) or
``aopened(...)`` (async): the client context (closed on exit), a function that builds the
object on that client — naming the server for errors with ``where``, never patching an
executor afterwards — and whether to create the schema first. ``close`` is what to run on
the built object when the block ends, before the client closes (a store's TTL sweeper);
``prepare`` says how an async object creates its schema when that is not ``asetup()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, Protocol, TypeVar, cast

C = TypeVar("C")


class SyncSetup(Protocol):
    def setup(self) -> Any: ...


class AsyncSetup(Protocol):
    async def asetup(self) -> Any: ...


S = TypeVar("S", bound=SyncSetup)
A = TypeVar("A")


@contextmanager
def opened(
    client: AbstractContextManager[C],
    build: Callable[[C], S],
    setup: bool,
    *,
    close: Callable[[S], object] | None = None,
) -> Iterator[S]:
    """``build(client)`` on an open client, its schema created when ``setup``; ``close``
    (if given) runs on it when the block ends, then the client is closed."""
    with client as connected:
        built = build(connected)
        try:
            if setup:
                built.setup()
            yield built
        finally:
            if close is not None:
                close(built)


async def _asetup(built: Any) -> object:
    """An async saver's ``asetup()``; an async store's, cache's or event log's ``setup()``
    (awaitable itself)."""
    if hasattr(built, "asetup"):
        return await cast(AsyncSetup, built).asetup()
    return await built.setup()


@asynccontextmanager
async def aopened(
    client: AbstractAsyncContextManager[C],
    build: Callable[[C], A],
    setup: bool,
    *,
    prepare: Callable[[A], Awaitable[object]] = _asetup,
    close: Callable[[A], Awaitable[object]] | None = None,
) -> AsyncIterator[A]:
    """The async :func:`opened`: ``await prepare(built)`` when ``setup`` (by default
    ``asetup()`` of a saver, ``setup()`` of the others); ``await close(built)`` (if given)
    when the block ends, or when the set-up fails."""
    async with client as connected:
        built = build(connected)
        try:
            if setup:
                await prepare(built)
            yield built
        finally:
            if close is not None:
                await close(built)
