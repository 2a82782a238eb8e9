"""The store's side of a read-through fallback (``connect_store(url, fallback=SOURCE)``): what
the shells ask of the store an app used before, and the option that attaches it.

The store's batch (:meth:`~graphkeep.store.shells.StoreBase._batch`) reads every ``get`` from
graphkeep first; the keys graphkeep does not hold are read from the fallback
(:meth:`StoreFallback.read`, blocking: in a worker thread for an async store), each item found
is *adopted* — written by the port's ``adopt``, atomically only where the key holds no item
and no tombstone — and the keys are read from graphkeep again, so what the caller gets is
always graphkeep's. Writes go to graphkeep only; with a fallback a delete leaves a tombstone
(``put(..., tombstones=True)``), so the fallback's copy of a deleted item is never adopted.
Searches and listings answer from graphkeep alone; ``store.fallback_done()`` says when
``graphkeep store copy SOURCE URL --all`` has finished (the port's ``switch_done`` marker),
after which a miss is not read from the fallback any more.

What opens SOURCE (a graphkeep URL, a ``BaseStore``) lives above the products
(:mod:`graphkeep.moving.store_sources`) and registers here, as the saver's fallback does in
:mod:`graphkeep.checkpoint.fallback`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol

from graphkeep.errors import ConfigurationError
from graphkeep.store.port import ItemKey, StoredItem

#: seconds a store trusts its last look at the finished marker before it looks again
DONE_RECHECK_S = 5.0


class StoreFallback(Protocol):
    """What a store's ``fallback`` is (:class:`graphkeep.moving.store_sources.StoreSource`)."""

    label: str

    def read(self, keys: list[ItemKey], now_ms: int) -> list[StoredItem | None]:
        """The fallback's live items at ``keys`` (None where it has none), with their times
        and, where the fallback keeps them, their expiry and TTL; never refreshes a TTL and
        never writes the fallback. Blocking."""
        ...


#: what attaches a fallback SOURCE to a store (``graphkeep.moving`` registers it):
#: ``opener(store, source)`` is a context manager attaching it for the block
_OPENER: list[Callable[..., Any]] = []


def register_opener(opener: Callable[..., Any]) -> None:
    _OPENER[:] = [opener]


def fallback_option(options: dict[str, Any]) -> Any:
    """``fallback`` taken out of a store's ``options`` (None when not given)."""
    source = options.pop("fallback", None)
    if source is not None and not _OPENER:
        raise ConfigurationError("fallback= needs graphkeep.moving (import graphkeep first)")
    return source


@contextmanager
def with_fallback(store: Any, source: Any) -> Iterator[Any]:
    """``store`` reading through to ``source`` for the block (``source`` None: as it is)."""
    if source is None:
        yield store
        return
    with _OPENER[0](store, source):
        yield store


@asynccontextmanager
async def awith_fallback(store: Any, source: Any) -> AsyncIterator[Any]:
    """:func:`with_fallback` for an async store (the source is read in worker threads)."""
    with with_fallback(store, source) as done:
        yield done
