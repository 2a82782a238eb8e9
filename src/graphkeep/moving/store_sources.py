"""``connect_store(url, fallback=SOURCE)``: the store a live switch reads through to, from a URL
or an instance (the store's side is :mod:`graphkeep.store.fallback`).

SOURCE is a LangGraph ``BaseStore`` the app has open (``InMemoryStore``, ``PostgresStore``, a
rival's store object: read through ``batch`` with ``refresh_ttl=False``, a ``RedisStore``'s
and a ``MongoDBStore``'s by key from their storage (:func:`.rival_stores.native_get`); their
``Item`` carries no expiry, so an item copied from one has none), a graphkeep store (read as
stored: its expiry and TTL carried over), or a URL: graphkeep's own (``redis://``,
``mongodb://``, ``dynamodb://``…, opened without ``setup``: a fallback is never written),
LangGraph's Postgres store (``postgresql://…``) or a rival's (``langgraph-redis://HOST:PORT/DB``,
``langgraph-mongodb://HOST:PORT/DB``, ``langgraph-dynamodb://TABLE?region=…&endpoint_url=…``),
read by key from what it stored by the readers ``graphkeep store copy`` uses
(:mod:`.rival_stores`): nothing on it is written or refreshed (``MongoDBStore``'s
``updated_at`` stays), each item's remaining life is carried over. The URLs are opened by one
dispatcher (:class:`~.openers.UrlOpeners`), as the savers' (:mod:`.sources`). A rival whose
package is not installed, a ``langgraph-plainredis://`` URL (that package has no store) or a
SOURCE naming the store itself is refused (:class:`~graphkeep.errors.ConfigurationError`)
before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item

from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.moving.openers import POSTGRES_SCHEMES, UrlOpeners, open_postgres_store, scheme_of
from graphkeep.moving.rival_items import plain
from graphkeep.moving.rival_stores import (
    RIVAL_STORE_SCHEMES,
    RivalSource,
    native_get,
    open_rival_source,
)
from graphkeep.moving.rivals import RIVAL_SCHEMES
from graphkeep.store.fallback import register_opener
from graphkeep.store.port import ItemKey, StoredItem
from graphkeep.store.shells import AsyncStore, StoreBase, SyncStore

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_us(moment: datetime) -> int:
    """``moment`` in epoch microseconds (a naive time is UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - EPOCH) // timedelta(microseconds=1)


@dataclass
class StoreSource:
    """The fallback of a store: ``store`` read, never written (a ``StoreFallback``)."""

    store: Any
    label: str

    def __post_init__(self) -> None:
        #: a rival store object's read by key from its storage (None: its ``batch``)
        self.native = None if isinstance(self.store, StoreBase) else native_get(self.store)

    def read(self, keys: list[ItemKey], now_ms: int) -> list[StoredItem | None]:
        if isinstance(self.store, (SyncStore, AsyncStore)):
            return self.store.stored_items(keys)
        if isinstance(self.store, RivalSource):
            records = self.store.get(keys)
            return [None if r is None else _stored(r.item, r.ttl, now_ms) for r in records]
        if self.native is not None:
            found = self.native(keys)
        else:
            found = self.store.batch([GetOp(ns, key, refresh_ttl=False) for ns, key in keys])
        return [_stored(item) if isinstance(item, Item) else None for item in found]


def _stored(item: Item, ttl: float | None = None, now_ms: int = 0) -> StoredItem:
    """``item`` as graphkeep stores it; ``ttl``: the minutes it has left at ``now_ms`` (what a
    refresh re-arms too, as ``store copy`` puts it)."""
    return StoredItem(
        namespace=tuple(item.namespace),
        key=item.key,
        value=plain(dict(item.value)),
        created_us=epoch_us(item.created_at),
        updated_us=epoch_us(item.updated_at),
        expires_ms=None if ttl is None else now_ms + int(ttl * 60_000),
        ttl_minutes=ttl,
    )


def same_store_refused(label: str) -> ConfigurationError:
    """The error of a ``fallback=`` that names the store itself."""
    return ConfigurationError(
        f"fallback= names the store itself ({label}): give the store the application used"
        " before (its URL or instance), not graphkeep's own"
    )


def same_store(a: Any, b: Any) -> bool:
    """Whether two graphkeep stores keep their items in one place (same server, database,
    collection or table, and key prefix)."""
    if a is b:
        return True
    if not isinstance(a, StoreBase) or not isinstance(b, StoreBase):
        return False
    return (
        type(a.port) is type(b.port)
        and a.telemetry.target == b.telemetry.target
        and getattr(a.port, "prefix", None) == getattr(b.port, "prefix", None)
        and getattr(a.port, "table", None) == getattr(b.port, "table", None)
    )


def _refused(url: str) -> AbstractContextManager[Any]:
    raise ConfigurationError(
        f"{scheme_of(url)}:// has no store (langgraph-checkpoint-plainredis keeps threads"
        " only): give the store the application used before"
    )


#: SOURCE URLs: LangGraph's Postgres store, the rivals', and graphkeep's (``connect_store``
#: registers its opener: this layer sits below it)
OPENERS = UrlOpeners[Any](
    {
        **dict.fromkeys(POSTGRES_SCHEMES, open_postgres_store),
        **dict.fromkeys(RIVAL_STORE_SCHEMES, open_rival_source),
        **dict.fromkeys(set(RIVAL_SCHEMES) - set(RIVAL_STORE_SCHEMES), _refused),
    },
    lambda store: store,
)


@contextmanager
def read_through(store: Any, source: Any) -> Iterator[None]:
    """``store`` reading each missing item through from ``source``, for the block."""
    if not isinstance(store, StoreBase):
        raise ConfigurationError(f"fallback= needs a graphkeep store, got {type(store).__name__}")
    if store.fallback is not None:
        raise ConfigurationError("this store reads through to a fallback already")
    with ExitStack() as stack:
        if isinstance(source, str):
            opened, label = OPENERS.opened(source, stack), mask_url(source)
        elif isinstance(source, BaseStore):
            opened, label = source, type(source).__name__
        else:
            raise ConfigurationError(
                f"fallback= takes a URL or a BaseStore, got {type(source).__name__}"
            )
        if same_store(opened, store):
            raise same_store_refused(label)
        store.fallback = StoreSource(opened, label)
        try:
            yield
        finally:
            store.fallback = None


#: make ``fallback=`` open graphkeep store URLs with ``open_url`` (``connect_store``)
register = OPENERS.register


register_opener(read_through)
