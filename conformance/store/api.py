"""How store cases get stores: connectors, the one call shape, per-case factories.

A `StoreConnector` wraps `graphkeep.connect_store`/`aconnect_store` (or the reference store's
for a `memory://` URL). A `StoreFactory` binds it to one set-up, one mode and a fresh
`key_prefix`; `factory.open(**options)` yields a `StoreApi` whose methods are the store's sync
methods in "sync" mode and its `a*` methods, run on a private event loop, in "async" mode. So a
case is written once. `factory.purge()` removes whatever a case left behind.

The same holds for the node cache (`open_cache`), for a checkpoint saver's ``watch`` /
``awatch`` (`open_saver`, a `SaverApi`) and for the run event log (`open_events`, an
`EventsApi`). Endless iterators (a watch, a followed read) run in the background — a thread in
"sync" mode, a task on the private loop in "async" mode — as a `Collector`, so a case can write
while it listens. Threads a `SaverApi` touched and runs an `EventsApi` touched are deleted when
its block ends.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from uuid import uuid4

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.store.base import PutOp

from conformance.cleanup import made
from conformance.factory import BackendNotReady, EventLoop, Mode, import_graphkeep
from conformance.setups import Setup

T = TypeVar("T")
Opener = Callable[..., Any]


class CapabilityMissing(BackendNotReady):
    """The backend exists but not this capability's module yet (e.g. no node cache)."""


class NotOffered(CapabilityMissing):
    """The set-up does not offer the capability at all, by design (the reference set-up has
    no checkpoint saver with ``watch`` and no run event log): not a gap to close."""


@dataclass(frozen=True)
class StoreConnector:
    connect_store: Opener
    aconnect_store: Opener
    connect_cache: Opener | None = None
    aconnect_cache: Opener | None = None
    #: checkpoint savers (``graphkeep.connect``), for ``watch``; None: the set-up has none
    connect_saver: Opener | None = None
    aconnect_saver: Opener | None = None
    #: run event logs (``graphkeep.connect_events``); None: no ``events`` module yet
    connect_events: Opener | None = None
    aconnect_events: Opener | None = None
    #: effect ledgers (``graphkeep.connect_effects``); None: no ``effects`` module yet
    connect_effects: Opener | None = None
    aconnect_effects: Opener | None = None


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
    module = import_graphkeep()
    if not hasattr(module, "connect_store"):
        raise BackendNotReady("graphkeep has no connect_store yet")
    if _backend_module(scheme, "store") is None:
        raise BackendNotReady(f"graphkeep has no {scheme}:// store module (store.py) yet")
    has_cache = _backend_module(scheme, "cache") is not None
    has_events = _backend_module(scheme, "events") is not None and hasattr(module, "connect_events")
    has_effects = _backend_module(scheme, "effects") is not None and hasattr(
        module, "connect_effects"
    )
    return StoreConnector(
        module.connect_store,
        module.aconnect_store,
        module.connect_cache if has_cache else None,
        module.aconnect_cache if has_cache else None,
        module.connect,
        module.aconnect,
        module.connect_events if has_events else None,
        module.aconnect_events if has_events else None,
        module.connect_effects if has_effects else None,
        module.aconnect_effects if has_effects else None,
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


#: idle seconds after which a background watch ends when the case set no ``timeout``
WATCH_BACKSTOP_S = 10.0


async def _spawn(coro: Awaitable[None]) -> asyncio.Task[None]:
    async def run() -> None:
        await coro

    return asyncio.get_running_loop().create_task(run())


class Collector(Generic[T]):
    """An iterator drained in the background: a thread ("sync") or a task on the API's loop
    ("async"), which runs whenever the case drives that loop (every async call does).

    Items land in ``items`` as they come; the drain stops at the iterator's end, at an
    error (kept in ``error``) or after the first item for which ``until(item)`` is true, and
    then closes the iterator (``close`` / ``aclose``), like a caller breaking out of its loop.
    """

    def __init__(
        self,
        source: Iterator[T] | AsyncIterator[T],
        mode: Mode,
        loop: EventLoop | None,
        until: Callable[[T], bool] | None = None,
    ) -> None:
        self.items: list[T] = []
        self.error: BaseException | None = None
        self.until = until
        self.mode = mode
        self.loop = loop
        self.started = time.monotonic()
        self.ended: float | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        if mode == "sync":
            assert isinstance(source, Iterator)
            self._thread = threading.Thread(target=self._drain, args=(source,), daemon=True)
            self._thread.start()
        else:
            assert loop is not None and isinstance(source, AsyncIterator)
            self._task = loop.run(_spawn(self._adrain(source)))

    def _keep(self, item: T) -> bool:
        """Record an item; True when the drain should stop."""
        self.items.append(item)
        return self.until is not None and self.until(item)

    def _drain(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                if self._keep(item):
                    break
        except BaseException as exc:  # handed to the case by result()
            self.error = exc
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
            self.ended = time.monotonic()

    async def _adrain(self, source: AsyncIterator[T]) -> None:
        try:
            async for item in source:
                if self._keep(item):
                    break
        except BaseException as exc:  # includes the cancellation of stop()
            self.error = exc
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()
            self.ended = time.monotonic()

    @property
    def done(self) -> bool:
        return self.ended is not None

    @property
    def elapsed(self) -> float:
        """Seconds from start to the end of the drain (so far, while it runs)."""
        return (self.ended or time.monotonic()) - self.started

    def pause(self, seconds: float) -> None:
        """Let time pass; in "async" mode the loop runs meanwhile (so the drain does)."""
        if self.mode == "sync":
            time.sleep(seconds)
        else:
            assert self.loop is not None
            self.loop.run(asyncio.sleep(seconds))

    def wait_for(self, count: int, within: float) -> list[T]:
        """Wait until ``count`` items arrived (or the drain ended); the items so far."""
        deadline = time.monotonic() + within
        while len(self.items) < count and not self.done and time.monotonic() < deadline:
            self.pause(0.02)
        return list(self.items)

    def result(self, within: float = 30.0) -> list[T]:
        """The items once the drain ended by itself; AssertionError if it runs on."""
        if self._thread is not None:
            self._thread.join(within)
            running = self._thread.is_alive()
        else:
            assert self.loop is not None and self._task is not None
            task = self._task
            self.loop.run(asyncio.wait([task], timeout=within))
            running = not task.done()
        if running:
            raise AssertionError(
                f"the background iterator was still running after {within} s"
                f" ({len(self.items)} items so far)"
            )
        if self.error is not None:
            raise self.error
        return list(self.items)

    def stop(self) -> None:
        """Cleanup: cancel an async drain; give a thread its idle timeout to end."""
        if self._task is not None and not self._task.done():
            assert self.loop is not None
            self._task.cancel()
            self.loop.run(asyncio.wait([self._task]))
        if self._thread is not None:
            self._thread.join(WATCH_BACKSTOP_S + 5)


class _Background:
    """What the saver and event log APIs share: the mode, the loop, the collectors."""

    def __init__(self, mode: Mode, loop: EventLoop | None) -> None:
        self.mode = mode
        self.loop = loop
        self.collectors: list[Collector[Any]] = []

    def run(self, awaitable: Awaitable[T]) -> T:
        assert self.loop is not None
        return self.loop.run(awaitable)

    def _collect(
        self, source: Iterator[T] | AsyncIterator[T], until: Callable[[T], bool] | None
    ) -> Collector[T]:
        collector = Collector(source, self.mode, self.loop, until)
        self.collectors.append(collector)
        return collector

    def _stop_all(self) -> None:
        for collector in self.collectors:
            collector.stop()


def thread_config(thread_id: str, **configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **configurable}}


def checkpoint_id(item: CheckpointTuple) -> str:
    return str(item.config["configurable"]["checkpoint_id"])


def commit_of(item: CheckpointTuple) -> tuple[str, str]:
    """``(checkpoint_ns, checkpoint_id)`` of a tuple."""
    conf = item.config["configurable"]
    return str(conf.get("checkpoint_ns", "")), str(conf["checkpoint_id"])


class SaverApi(_Background):
    """A checkpoint saver for ``watch`` cases: graphs run with ``invoke`` / ``ainvoke``, the
    watch is ``saver.watch`` or ``saver.awatch`` drained in the background."""

    def __init__(self, saver: Any, mode: Mode, loop: EventLoop | None = None) -> None:
        super().__init__(mode, loop)
        self.saver = saver
        self.threads: set[str] = set()

    def compile(self, builder: Any) -> Any:
        return builder.compile(checkpointer=self.saver)

    def invoke(self, graph: Any, input: Any, thread: str) -> Any:
        self.threads.add(thread)
        config = thread_config(thread)
        if self.mode == "sync":
            return graph.invoke(input, config)
        return self.run(graph.ainvoke(input, config))

    def update(self, graph: Any, thread: str, values: Any) -> str:
        """``update_state``: one more checkpoint (source "update"); returns its id."""
        self.threads.add(thread)
        config = thread_config(thread)
        if self.mode == "sync":
            written = graph.update_state(config, values)
        else:
            written = self.run(graph.aupdate_state(config, values))
        return str(written["configurable"]["checkpoint_id"])

    def commits(self, thread: str, checkpoint_ns: str | None = None) -> list[tuple[str, str]]:
        """``(ns, id)`` of the thread's checkpoints (every namespace when None), by id."""
        config = thread_config(thread)
        if checkpoint_ns is not None:
            config["configurable"]["checkpoint_ns"] = checkpoint_ns
        if self.mode == "sync":
            found = list(self.saver.list(config))
        else:

            async def collect() -> list[CheckpointTuple]:
                return [t async for t in self.saver.alist(config)]

            found = self.run(collect())
        return sorted((commit_of(t) for t in found), key=lambda c: (c[1], c[0]))

    def _source(self, thread: str, kwargs: dict[str, Any]) -> Any:
        if self.mode == "sync":
            return self.saver.watch(thread, **kwargs)
        return self.saver.awatch(thread, **kwargs)

    def watch(
        self, thread: str, *, until: Callable[[CheckpointTuple], bool] | None = None, **kwargs: Any
    ) -> Collector[CheckpointTuple]:
        """``watch(thread, **kwargs)`` drained in the background until ``until(tuple)``;
        without a ``timeout`` it ends after :data:`WATCH_BACKSTOP_S` idle seconds."""
        kwargs.setdefault("timeout", WATCH_BACKSTOP_S)
        self.threads.add(thread)
        return self._collect(self._source(thread, kwargs), until)

    def watch_call(self, thread: Any, **kwargs: Any) -> None:
        """Only call ``watch`` / ``awatch`` (argument checks happen there) and drop it."""
        source = self._source(thread, kwargs)
        if self.mode == "sync":
            source.close()
        else:
            self.run(source.aclose())

    def cleanup(self) -> None:
        self._stop_all()
        for thread in sorted(self.threads):
            if self.mode == "sync":
                self.saver.delete_thread(thread)
            else:
                self.run(self.saver.adelete_thread(thread))


Event = dict[str, Any]


class EventsApi(_Background):
    """A run event log with one synchronous call shape; ``follow`` drains ``read(...)`` in
    the background. Runs it wrote to are deleted by ``cleanup``."""

    def __init__(self, log: Any, mode: Mode, loop: EventLoop | None = None) -> None:
        super().__init__(mode, loop)
        self.log = log
        self.runs: set[str] = set()

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.log, name)(*args, **kwargs)
        return result if self.mode == "sync" else self.run(result)

    def _wrote(self, run_id: Any) -> None:
        if isinstance(run_id, str):
            self.runs.add(run_id)

    def append(self, run_id: Any, event: Any) -> str:
        event_id = str(self._call("append", run_id, event))
        self._wrote(run_id)
        return event_id

    def append_many(self, run_id: Any, events: Any) -> list[str]:
        ids = [str(i) for i in self._call("append_many", run_id, events)]
        self._wrote(run_id)
        return ids

    def close(self, run_id: Any, status: Any, *, error: Any = None) -> str:
        event_id = str(self._call("close", run_id, status, error=error))
        self._wrote(run_id)
        return event_id

    def heartbeat(self, run_id: Any) -> None:
        self._call("heartbeat", run_id)
        self._wrote(run_id)

    def state(self, run_id: Any) -> Any:
        return self._call("state", run_id)

    def delete(self, run_ids: Any) -> None:
        self._call("delete", run_ids)

    def read(self, run_id: Any, *, after: Any = None, follow: bool = False) -> list[Any]:
        """Every ``(event_id, event)`` ``read`` yields (``follow=False`` by default here)."""
        source = self.log.read(run_id, after=after, follow=follow)
        if self.mode == "sync":
            with closing(source):
                return list(source)

        async def collect() -> list[Any]:
            return [pair async for pair in source]

        return self.run(collect())

    def read_call(self, run_id: Any, **kwargs: Any) -> None:
        """Only call ``read`` (argument checks happen there) and drop the iterator."""
        source = self.log.read(run_id, **kwargs)
        if self.mode == "sync":
            source.close()
        else:
            self.run(source.aclose())

    def follow(
        self,
        run_id: str,
        *,
        after: str | None = None,
        until: Callable[[tuple[str, Event]], bool] | None = None,
    ) -> Collector[tuple[str, Event]]:
        """``read(run_id, after=after, follow=True)`` drained in the background."""
        return self._collect(self.log.read(run_id, after=after, follow=True), until)

    def id_key(self, event_id: str) -> tuple[int, ...]:
        """The store's order of event ids (its port's ``id_key``)."""
        return tuple(self.log.port.id_key(event_id))

    def cleanup(self) -> None:
        self._stop_all()
        if self.runs:
            self._call("delete", sorted(self.runs))


class EffectsApi:
    """An effect ledger with one synchronous call shape: in "async" mode an effect is an
    ``async def`` around the case's function, called on the private loop. Every record under
    the ledger's prefix is cleared by ``cleanup``."""

    def __init__(self, ledger: Any, mode: Mode, loop: EventLoop | None = None) -> None:
        self.ledger = ledger
        self.mode = mode
        self.loop = loop

    def _run(self, value: Any) -> Any:
        if self.mode == "sync":
            return value
        assert self.loop is not None
        return self.loop.run(value)

    def once(self, fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """``fn`` as an effect of the ledger (``ledger.once(fn, **options)``), called in
        this mode."""
        if self.mode == "sync":
            return self.ledger.once(fn, **options)  # type: ignore[no-any-return]

        async def effect(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        effect.__name__ = effect.__qualname__ = getattr(fn, "__name__", "effect")
        effect.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        wrapped = self.ledger.once(effect, **options)
        return lambda *args, **kwargs: self.loop.run(wrapped(*args, **kwargs))  # type: ignore[union-attr]

    def run(self, key: Any, fn: Callable[..., Any], *args: Any) -> Any:
        if self.mode == "sync":
            return self.ledger.run(key, fn, *args)
        return self._run(self.ledger.arun(key, fn, *args))

    def records(self, thread_id: Any = None) -> list[Any]:
        if self.mode == "sync":
            return list(self.ledger.records(thread_id))
        return list(self._run(self.ledger.arecords(thread_id)))

    def clear(self, thread_id: Any = None) -> int:
        if self.mode == "sync":
            return int(self.ledger.clear(thread_id))
        return int(self._run(self.ledger.aclear(thread_id)))

    def drive(self, op: Any) -> Any:
        """One of the port's ops, run on the ledger's client (a dead holder's claim)."""
        if self.mode == "sync":
            return self.ledger.drive(op)
        return self._run(self.ledger.adrive(op))

    def cleanup(self) -> None:
        self.clear(None)


def new_key_prefix() -> str:
    return made(f"gks-{uuid4().hex[:10]}")


@dataclass
class StoreFactory:
    """Stores for one case run: one set-up, one mode, one fresh key prefix."""

    setup: Setup
    connector: StoreConnector
    mode: Mode
    key_prefix: str = field(default_factory=new_key_prefix)
    #: whether a case opened the store (only then does purge() sweep it)
    used_store: bool = False

    def sibling(self, tag: str) -> StoreFactory:
        """The same set-up and mode under another key prefix (isolation cases)."""
        return StoreFactory(self.setup, self.connector, self.mode, f"{self.key_prefix}-{tag}")

    @property
    def reference(self) -> bool:
        return self.setup.url.startswith("memory://")

    def _manager(self, opener: Opener, aopener: Opener, options: dict[str, Any]) -> Any:
        chosen = opener if self.mode == "sync" else aopener
        return chosen(self.setup.url, key_prefix=self.key_prefix, **options)

    @contextmanager
    def open(self, **options: Any) -> Iterator[StoreApi]:
        """A new store (same URL and prefix) behind the `StoreApi` of this mode."""
        self.used_store = True
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

    @contextmanager
    def _opened(self, manager: Any) -> Iterator[tuple[Any, EventLoop | None]]:
        """Enter a sync or async context manager; yields the value and the private loop."""
        if self.mode == "sync":
            with manager as value:
                yield value, None
            return
        loop = EventLoop()
        try:
            with loop.enter(manager) as value:
                yield value, loop
        finally:
            loop.close()

    @contextmanager
    def open_saver(self, **options: Any) -> Iterator[SaverApi]:
        """A checkpoint saver (``graphkeep.connect`` / ``aconnect``) for ``watch`` cases;
        the threads it touched are deleted when the block ends."""
        if self.connector.connect_saver is None or self.connector.aconnect_saver is None:
            raise NotOffered("the reference set-up has no checkpoint saver with watch()")
        manager = self._manager(
            self.connector.connect_saver, self.connector.aconnect_saver, options
        )
        with self._opened(manager) as (saver, loop):
            if not callable(getattr(getattr(saver, "port", None), "commits", None)):
                raise CapabilityMissing(
                    f"{self.setup.name}: the backend's checkpoint port has no commits() (watch)"
                )
            api = SaverApi(saver, self.mode, loop)
            try:
                yield api
            finally:
                api.cleanup()

    @contextmanager
    def open_events(self, **options: Any) -> Iterator[EventsApi]:
        """A run event log (``graphkeep.connect_events`` / ``aconnect_events``); the runs
        it wrote are deleted when the block ends."""
        if self.connector.connect_events is None or self.connector.aconnect_events is None:
            if self.reference:
                raise NotOffered("the reference set-up has no run event log")
            raise CapabilityMissing(f"{self.setup.name}: no run event log module (events.py) yet")
        manager = self._manager(
            self.connector.connect_events, self.connector.aconnect_events, options
        )
        with self._opened(manager) as (log, loop):
            api = EventsApi(log, self.mode, loop)
            try:
                yield api
            finally:
                api.cleanup()

    @contextmanager
    def open_effects(self, **options: Any) -> Iterator[EffectsApi]:
        """An effect ledger (``graphkeep.connect_effects`` / ``aconnect_effects``); its
        records are cleared when the block ends."""
        if self.connector.connect_effects is None or self.connector.aconnect_effects is None:
            if self.reference:
                raise NotOffered("the reference set-up has no effect ledger")
            raise CapabilityMissing(f"{self.setup.name}: no effect ledger module (effects.py) yet")
        manager = self._manager(
            self.connector.connect_effects, self.connector.aconnect_effects, options
        )
        with self._opened(manager) as (ledger, loop):
            api = EffectsApi(ledger, self.mode, loop)
            try:
                yield api
            finally:
                api.cleanup()

    def purge(self) -> None:
        """Delete every item under this factory's prefix (expired ones by a sweep)."""
        if not self.used_store:
            return  # cache, watch and event log cases clean up after themselves
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
