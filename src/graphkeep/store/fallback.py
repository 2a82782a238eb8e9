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

from typing import Protocol

from graphkeep.port.attach import Attachable
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
FALLBACK = Attachable("fallback", "graphkeep.moving")
register_opener = FALLBACK.register
#: ``fallback`` taken out of a store's ``options`` (None when not given)
fallback_option = FALLBACK.option
#: ``store`` reading through to ``source`` for the block (``source`` None: as it is)
with_fallback = FALLBACK.attached
#: :func:`with_fallback` for an async store (the source is read in worker threads)
awith_fallback = FALLBACK.aattached
