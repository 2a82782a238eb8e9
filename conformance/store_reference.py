"""Reference store for validating the store suite and the shared logic (test-only).

`ReferencePort` is the simplest correct `StorePort`: dicts in this process, every search a
pass of `rank` over the items under the prefix. `ReferenceStore` / `AsyncReferenceStore` are
the two shells around it, like a backend's `<X>Store` / `Async<X>Store`; the "requests" they
yield are plain callables the executors call.

`connect_store("memory://", key_prefix=...)` hands out stores that share one dict per key
prefix, so a second store on the same prefix sees the same items, like a server.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any, TypeVar, cast

from graphkeep.port import Op
from graphkeep.store.port import ItemKey, Namespace, SearchQuery, StoredItem
from graphkeep.store.ranking import in_prefix, rank
from graphkeep.store.shells import AsyncStore, SyncStore

T = TypeVar("T")
Items = dict[ItemKey, StoredItem]
_SPACES: dict[str, Items] = {}
_LOCK = threading.Lock()


def _space(key_prefix: str) -> Items:
    with _LOCK:
        return _SPACES.setdefault(key_prefix, {})


def _refreshed(item: StoredItem, now_ms: int) -> StoredItem:
    if item.ttl_minutes is not None:
        item.expires_ms = now_ms + int(item.ttl_minutes * 60_000)
    return item


def _copy(item: StoredItem, vectors: bool = True) -> StoredItem:
    """What a store hands back: never the stored object itself."""
    return replace(item, value=dict(item.value), vectors=list(item.vectors) if vectors else [])


class ReferencePort:
    """`StorePort` on a dict; each request is a zero-argument callable run under a lock."""

    def __init__(self, items: Items) -> None:
        self.items = items
        self.lock = threading.Lock()
        #: keys deleted while the store read through to a fallback (never adopted again)
        self.gone: set[ItemKey] = set()
        self.done = False

    def _run(self, work: Callable[[], T]) -> Op[T]:
        return cast(T, (yield work))

    def setup(self) -> Op[None]:
        yield from self._run(lambda: None)

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]:
        def work() -> list[StoredItem | None]:
            found: list[StoredItem | None] = []
            for key, again in zip(keys, refresh, strict=True):
                item = self.items.get(key)
                if item is None or not item.live(now_ms):
                    found.append(None)
                    continue
                found.append(_copy(_refreshed(item, now_ms) if again else item, vectors))
            return found

        return (yield from self._run(work))

    def put(
        self,
        items: list[StoredItem],
        deletes: list[ItemKey],
        now_ms: int,
        tombstones: bool = False,
    ) -> Op[None]:
        def work() -> None:
            for key in deletes:
                self.items.pop(key, None)
                if tombstones:
                    self.gone.add(key)
            for item in items:
                key = (item.namespace, item.key)
                old = self.items.get(key)
                stored = _copy(item)
                if old is not None and old.live(now_ms):
                    stored.created_us = old.created_us
                self.items[key] = stored

        yield from self._run(work)

    def adopt(self, items: list[StoredItem], now_ms: int) -> Op[None]:
        def work() -> None:
            for item in items:
                key = (item.namespace, item.key)
                if key not in self.items and key not in self.gone:
                    self.items[key] = _copy(item)

        yield from self._run(work)

    def switch_done(self, mark: bool = False) -> Op[bool]:
        def work() -> bool:
            self.done = self.done or mark
            return self.done

        return (yield from self._run(work))

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        def work() -> list[StoredItem]:
            candidates = [
                _copy(item)
                for item in self.items.values()
                if in_prefix(item.namespace, query.prefix)
            ]
            page = rank(candidates, query)
            if query.refresh:
                for item in page:
                    stored = self.items[(item.namespace, item.key)]
                    item.expires_ms = _refreshed(stored, query.now_ms).expires_ms
            for item in page:
                item.vectors = []
            return page

        return (yield from self._run(work))

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]:
        def work() -> list[Namespace]:
            return sorted(
                {
                    item.namespace
                    for item in self.items.values()
                    if item.live(now_ms) and in_prefix(item.namespace, prefix)
                }
            )

        return (yield from self._run(work))

    def sweep(self, now_ms: int) -> Op[int]:
        def work() -> int:
            expired = [k for k, item in self.items.items() if not item.live(now_ms)]
            for key in expired:
                del self.items[key]
            return len(expired)

        return (yield from self._run(work))

    def execute(self, work: Callable[[], Any]) -> Any:
        with self.lock:
            return work()

    async def aexecute(self, work: Callable[[], Any]) -> Any:
        return self.execute(work)


class ReferenceStore(SyncStore):
    """The reference store behind the sync shell."""

    def __init__(self, items: Items | None = None, **options: Any) -> None:
        port = ReferencePort({} if items is None else items)
        super().__init__(port, port.execute, **options)

    @classmethod
    @contextmanager
    def from_url(
        cls, url: str, *, key_prefix: str = "graphkeep", setup: bool = True, **options: Any
    ) -> Iterator[ReferenceStore]:
        store = cls(_space(key_prefix), **options)
        if setup:
            store.setup()
        yield store


class AsyncReferenceStore(AsyncStore):
    """The reference store behind the async shell."""

    def __init__(self, items: Items | None = None, **options: Any) -> None:
        port = ReferencePort({} if items is None else items)
        super().__init__(port, port.aexecute, **options)

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, key_prefix: str = "graphkeep", setup: bool = True, **options: Any
    ) -> AsyncIterator[AsyncReferenceStore]:
        store = cls(_space(key_prefix), **options)
        if setup:
            await store.setup()
        try:
            yield store
        finally:
            await store.aclose()


def connect_store(url: str, **options: Any) -> Any:
    """`graphkeep.connect_store` for `memory://` URLs."""
    return ReferenceStore.from_url(url, **options)


def aconnect_store(url: str, **options: Any) -> Any:
    """`graphkeep.aconnect_store` for `memory://` URLs."""
    return AsyncReferenceStore.from_url(url, **options)


def forget(key_prefix: str) -> None:
    """Drop the shared dict of one key prefix (cleanup after a case)."""
    with _LOCK:
        _SPACES.pop(key_prefix, None)
