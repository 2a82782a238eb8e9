"""``connect_store(url, fallback=SOURCE)``: the store a live switch reads through to, from a URL
or an instance (the store's side is :mod:`graphkeep.store.fallback`).

SOURCE is a LangGraph ``BaseStore`` the app has open (``InMemoryStore``, ``PostgresStore``, a
rival's store object: read through ``batch`` with ``refresh_ttl=False``; their ``Item`` carries
no expiry, so an item copied from one has none), a graphkeep store (read as stored: its expiry
and TTL carried over), or a URL: graphkeep's own (``redis://``, ``mongodb://``,
``dynamodb://``…, opened without ``setup``: a fallback is never written) or LangGraph's
Postgres store (``postgresql://…``). The rivals' URLs (``langgraph-redis://`` …) are read by
``graphkeep store copy`` from their storage (:mod:`graphkeep.cli.rival_stores`, which sits in
the command's layer) and are not taken here: pass the rival's store object, and finish with
``graphkeep store copy SOURCE URL --all``. A SOURCE naming the store itself is refused
(:class:`~graphkeep.errors.ConfigurationError`) before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item

from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.moving.openers import POSTGRES_SCHEMES, open_postgres_store
from graphkeep.moving.rivals import RIVAL_SCHEMES
from graphkeep.store.fallback import register_opener
from graphkeep.store.port import ItemKey, StoredItem
from graphkeep.store.shells import AsyncStore, StoreBase, SyncStore

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: ``open_url(url)``: a context manager yielding a sync graphkeep store
#: (``graphkeep.connect_store``, which registers it: this layer sits below it)
_OPEN_URL: list[Callable[[str], AbstractContextManager[Any]]] = []


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

    def read(self, keys: list[ItemKey], now_ms: int) -> list[StoredItem | None]:
        if isinstance(self.store, (SyncStore, AsyncStore)):
            return self.store.stored_items(keys)
        found = self.store.batch([GetOp(ns, key, refresh_ttl=False) for ns, key in keys])
        return [_stored(item) if isinstance(item, Item) else None for item in found]


def _stored(item: Item) -> StoredItem:
    return StoredItem(
        namespace=tuple(item.namespace),
        key=item.key,
        value=dict(item.value),
        created_us=epoch_us(item.created_at),
        updated_us=epoch_us(item.updated_at),
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


def _opened(url: str, stack: ExitStack) -> Any:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in POSTGRES_SCHEMES:
        return stack.enter_context(open_postgres_store(url))
    if scheme in RIVAL_SCHEMES:
        raise ConfigurationError(
            f"a store fallback={scheme}:// is not taken: pass the rival's store object"
            f" (fallback=store), or copy the items with `graphkeep store copy {mask_url(url)}"
            " URL --all`"
        )
    if not _OPEN_URL:
        raise ConfigurationError("fallback= URLs need graphkeep.connect (import graphkeep)")
    return stack.enter_context(_OPEN_URL[0](url))


@contextmanager
def read_through(store: Any, source: Any) -> Iterator[None]:
    """``store`` reading each missing item through from ``source``, for the block."""
    if not isinstance(store, StoreBase):
        raise ConfigurationError(f"fallback= needs a graphkeep store, got {type(store).__name__}")
    if store.fallback is not None:
        raise ConfigurationError("this store reads through to a fallback already")
    with ExitStack() as stack:
        if isinstance(source, str):
            opened, label = _opened(source, stack), mask_url(source)
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


def register(open_url: Callable[[str], AbstractContextManager[Any]]) -> None:
    """Make ``fallback=`` open graphkeep store URLs with ``open_url`` (``connect_store``)."""
    _OPEN_URL[:] = [open_url]


register_opener(read_through)
