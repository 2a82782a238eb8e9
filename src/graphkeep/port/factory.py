"""One way to build a saver, store, cache or event log from a URL: ``from_url`` everywhere.

A backend's ``from_url`` (and ``from_table``) is ``opened(client, build, setup)`` (sync) or
``aopened(...)`` (async): the client context (closed on exit), a function that builds the
object on that client — naming the server for errors with ``where``, never patching an
executor afterwards — and whether to create the schema first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, Protocol, TypeVar

C = TypeVar("C")


class SyncSetup(Protocol):
    def setup(self) -> Any: ...


class AsyncSetup(Protocol):
    async def asetup(self) -> Any: ...


S = TypeVar("S", bound=SyncSetup)
A = TypeVar("A", bound=AsyncSetup)


@contextmanager
def opened(client: AbstractContextManager[C], build: Callable[[C], S], setup: bool) -> Iterator[S]:
    """``build(client)`` on an open client, its schema created when ``setup``; the client
    is closed when the block ends."""
    with client as connected:
        built = build(connected)
        if setup:
            built.setup()
        yield built


@asynccontextmanager
async def aopened(
    client: AbstractAsyncContextManager[C], build: Callable[[C], A], setup: bool
) -> AsyncIterator[A]:
    """The async :func:`opened`: ``await asetup()`` when ``setup``."""
    async with client as connected:
        built = build(connected)
        if setup:
            await built.asetup()
        yield built
