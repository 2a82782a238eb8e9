"""How store cases get stores: connectors, the one call shape, per-case factories.

A `StoreConnector` wraps `graphkeep.connect_store`/`aconnect_store` (or the reference store's
for a `memory://` URL). A `StoreFactory` binds it to one set-up, one mode and a fresh
`key_prefix`; `factory.open(**options)` yields a `StoreApi` whose methods are the store's sync
methods in "sync" mode and its `a*` methods, run on a private event loop, in "async" mode. So a
case is written once. `factory.purge()` removes whatever a case left behind.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import uuid4

from langgraph.store.base import PutOp

from conformance.factory import BackendNotReady, EventLoop, Mode, _import_graphkeep
from conformance.setups import Setup

T = TypeVar("T")
Opener = Callable[..., Any]


class CapabilityMissing(BackendNotReady):
    """The backend exists but not this capability's module yet (e.g. no node cache)."""


@dataclass(frozen=True)
class StoreConnector:
    connect_store: Opener
    aconnect_store: Opener
    connect_cache: Opener | None = None
    aconnect_cache: Opener | None = None


def _reference_cache() -> Any:
    @contextmanager
    def open_cache(_url: str, **_options: Any) -> Iterator[Any]:
        from langgraph.cache.memory import InMemoryCache

        yield InMemoryCache()

    return open_cache


class _AsyncWrap:
    """An async context manager around a value (the reference cache for async mode)."""

    def __init__(self, manager: AbstractContextManager[Any]) -> None:
        self.manager = manager

    async def __aenter__(self) -> Any:
        return self.manager.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.manager.__exit__(*exc)


def _reference_connector() -> StoreConnector:
    from conformance import store_reference

    cache = _reference_cache()
    return StoreConnector(
        store_reference.connect_store,
        store_reference.aconnect_store,
        cache,
        lambda url, **options: _AsyncWrap(cache(url, **options)),
    )


def _backend_module(scheme: str, suffix: str) -> str | None:
    connect = importlib.import_module("graphkeep.connect")
    entry = connect.BACKENDS.get(scheme)
    if entry is None:
        raise BackendNotReady(f"graphkeep has no {scheme}:// backend")
    name = f"{entry[0]}.{suffix}"
    return name if importlib.util.find_spec(name) is not None else None


def store_connector_for(setup: Setup) -> StoreConnector:
    """The connector of a set-up; BackendNotReady while its backend has no store module."""
    scheme = setup.url.split("://", 1)[0]
    if scheme == "memory":
        return _reference_connector()
    module = _import_graphkeep()
    if not hasattr(module, "connect_store"):
        raise BackendNotReady("graphkeep has no connect_store yet")
    if _backend_module(scheme, "memory") is None:
        raise BackendNotReady(f"graphkeep has no {scheme}:// store module (memory.py) yet")
    has_cache = _backend_module(scheme, "cache") is not None
    return StoreConnector(
        module.connect_store,
        module.aconnect_store,
        module.connect_cache if has_cache else None,
        module.aconnect_cache if has_cache else None,
    )


class StoreApi:
    """A store's operations with one synchronous call shape, served sync or async."""

    def __init__(self, store: Any, mode: Mode, loop: EventLoop | None = None) -> None:
        self.store = store
        self.mode = mode
        self.loop = loop

    def run(self, awaitable: Awaitable[T]) -> T:
        assert self.loop is not None
        return self.loop.run(awaitable)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "sync":
            return getattr(self.store, name)(*args, **kwargs)
        return self.run(getattr(self.store, f"a{name}")(*args, **kwargs))

    def put(self, namespace: Any, key: Any, value: Any, **kwargs: Any) -> None:
        self._call("put", namespace, key, value, **kwargs)

    def get(self, namespace: Any, key: Any, **kwargs: Any) -> Any:
        return self._call("get", namespace, key, **kwargs)

    def delete(self, namespace: Any, key: Any) -> None:
        self._call("delete", namespace, key)

    def search(self, prefix: Any, **kwargs: Any) -> list[Any]:
        return list(self._call("search", prefix, **kwargs))

    def list_namespaces(self, **kwargs: Any) -> list[tuple[str, ...]]:
        kwargs.setdefault("limit", 1000)
        return list(self._call("list_namespaces", **kwargs))

    def batch(self, ops: list[Any]) -> list[Any]:
        return list(self._call("batch", ops))

    def sweep_ttl(self) -> int:
        """`sweep_ttl()` (a coroutine on an async store)."""
        result = self.store.sweep_ttl()
        return int(self.run(result) if self.mode == "async" else result)

    def start_ttl_sweeper(self, minutes: float | None = None) -> Any:
        result = self.store.start_ttl_sweeper(minutes)
        return self.run(result) if self.mode == "async" else result

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        result = self.store.stop_ttl_sweeper(timeout)
        return bool(self.run(result) if self.mode == "async" else result)


class CacheApi:
    """A node cache's operations with one synchronous call shape."""

    def __init__(self, cache: Any, mode: Mode, loop: EventLoop | None = None) -> None:
        self.cache = cache
        self.mode = mode
        self.loop = loop

    def _call(self, name: str, *args: Any) -> Any:
        if self.mode == "sync":
            return getattr(self.cache, name)(*args)
        assert self.loop is not None
        return self.loop.run(getattr(self.cache, f"a{name}")(*args))

    def get(self, keys: list[Any]) -> dict[Any, Any]:
        return dict(self._call("get", keys))

    def set(self, mapping: dict[Any, Any]) -> None:
        self._call("set", mapping)

    def clear(self, namespaces: Any = None) -> None:
        self._call("clear", namespaces)


def new_key_prefix() -> str:
    return f"gks-{uuid4().hex[:10]}"


@dataclass
class StoreFactory:
    """Stores for one case run: one set-up, one mode, one fresh key prefix."""

    setup: Setup
    connector: StoreConnector
    mode: Mode
    key_prefix: str = field(default_factory=new_key_prefix)

    @property
    def reference(self) -> bool:
        return self.setup.url.startswith("memory://")

    def _manager(self, opener: Opener, aopener: Opener, options: dict[str, Any]) -> Any:
        chosen = opener if self.mode == "sync" else aopener
        return chosen(self.setup.url, key_prefix=self.key_prefix, **options)

    @contextmanager
    def open(self, **options: Any) -> Iterator[StoreApi]:
        """A new store (same URL and prefix) behind the `StoreApi` of this mode."""
        manager = self._manager(
            self.connector.connect_store, self.connector.aconnect_store, options
        )
        if self.mode == "sync":
            with manager as store:
                yield StoreApi(store, "sync")
            return
        loop = EventLoop()
        try:
            with loop.enter(manager) as store:
                yield StoreApi(store, "async", loop)
        finally:
            loop.close()

    @contextmanager
    def open_cache(self, **options: Any) -> Iterator[CacheApi]:
        if self.connector.connect_cache is None or self.connector.aconnect_cache is None:
            raise CapabilityMissing(f"{self.setup.name}: no node cache module (cache.py) yet")
        manager = self._manager(
            self.connector.connect_cache, self.connector.aconnect_cache, options
        )
        if self.mode == "sync":
            with manager as cache:
                yield CacheApi(cache, "sync")
            return
        loop = EventLoop()
        try:
            with loop.enter(manager) as cache:
                yield CacheApi(cache, "async", loop)
        finally:
            loop.close()

    def purge(self) -> None:
        """Delete every item under this factory's prefix (expired ones by a sweep)."""
        if self.reference:
            from conformance import store_reference

            store_reference.forget(self.key_prefix)
            return
        with self.open() as api:
            api.sweep_ttl()
            for namespace in api.list_namespaces(limit=10_000):
                for _ in range(100):  # bounded: a store that ignores deletes must not hang
                    page = api.search(namespace, limit=500, refresh_ttl=False)
                    if not page:
                        break
                    api.batch([PutOp(item.namespace, item.key, None) for item in page])
