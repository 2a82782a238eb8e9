"""The store port: the :class:`StorePort` protocol a backend implements and the records it
exchanges with the contract (items, vectors, queries, filter conditions, embedding requests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from graphkeep.port import Op

Namespace = tuple[str, ...]
ItemKey = tuple[Namespace, str]


@dataclass(frozen=True, slots=True)
class Vector:
    """One embedded text of an item: the field path, a digest of the text, float32 bytes."""

    path: str
    digest: str
    data: bytes


@dataclass(slots=True)
class StoredItem:
    """An item as a backend stores it. Times: ``created_us``/``updated_us`` in epoch
    microseconds, ``expires_ms`` in epoch milliseconds (None = never), ``ttl_minutes`` is
    what a refresh re-arms. ``filterable=False`` (a sealed item's: its value is ciphertext)
    tells a backend to keep no filter copy of the value (MongoDB's ``doc``, DynamoDB's
    ``fa``)."""

    namespace: Namespace
    key: str
    value: dict[str, Any]
    created_us: int
    updated_us: int
    expires_ms: int | None = None
    ttl_minutes: float | None = None
    vectors: list[Vector] = field(default_factory=list)
    score: float | None = None
    filterable: bool = True

    def live(self, now_ms: int) -> bool:
        return self.expires_ms is None or self.expires_ms > now_ms


@dataclass(frozen=True, slots=True)
class Condition:
    """One filter test: the value at ``path`` (nested keys) compared with ``value``."""

    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A validated ``SearchOp``. ``vector`` is the query embedding for a semantic search."""

    prefix: Namespace
    conditions: tuple[Condition, ...]
    limit: int
    offset: int
    refresh: bool
    now_ms: int
    vector: tuple[float, ...] | None = None
    distance: str = "cosine"


@dataclass(frozen=True, slots=True)
class Embed:
    """Yielded by the store logic: embed ``texts`` (documents, or one search query)."""

    texts: tuple[str, ...]
    query: bool = False


class StorePort(Protocol):
    """What a backend maps onto its store. Input arrives validated.

    - ``get``: the live items for ``keys`` (None where missing or expired), in order; items
      whose ``refresh`` flag is set and that have a ``ttl_minutes`` get their expiry moved to
      ``now + ttl`` (returned with the new expiry). ``vectors=True`` returns their vectors.
    - ``put``: upserts ``items`` (keeping the stored ``created_us`` of a live item with the
      same key; everything else, vectors included, is replaced; a tombstone at the key is
      replaced too, ``created_us`` starting anew) and removes ``deletes``; with
      ``tombstones`` (a store reading through to a fallback) each delete leaves a tombstone
      at its key: no read, search or listing sees it, ``sweep`` keeps it, and ``adopt``
      never writes over it.
    - ``adopt``: each of ``items`` written only where the key holds nothing — no item (live
      or expired but not yet removed) and no tombstone — decided and written atomically per
      item in the store (one script, one conditional upsert, one conditional put), so a
      ``put`` or a delete racing it always wins: the read-through copy of an item from a
      fallback (:mod:`graphkeep.store.fallback`).
    - ``switch_done``: whether the store's fallback copy has finished (a marker ``graphkeep
      store copy --all`` writes); ``mark=True`` writes the marker first.
    - ``search``: the page of live items under ``query.prefix`` (label-wise prefix; ``()``
      is everything) matching every condition, ordered and sliced as
      :func:`~graphkeep.store.ranking.rank` does; refreshes the TTL of returned items when
      ``query.refresh``.
    - ``namespaces``: every distinct namespace holding a live item, starting with ``prefix``.
    - ``sweep``: removes expired items, returns how many.
    """

    def setup(self) -> Op[None]: ...

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]: ...

    def put(
        self,
        items: list[StoredItem],
        deletes: list[ItemKey],
        now_ms: int,
        tombstones: bool = False,
    ) -> Op[None]: ...

    def adopt(self, items: list[StoredItem], now_ms: int) -> Op[None]: ...

    def switch_done(self, mark: bool = False) -> Op[bool]: ...

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]: ...

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]: ...

    def sweep(self, now_ms: int) -> Op[int]: ...
