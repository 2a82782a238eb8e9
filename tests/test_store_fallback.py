"""The store's live switch (``graphkeep.connect_store(url, fallback=SOURCE)``) on real servers:
a ``get`` of an item graphkeep does not hold reads it through from the store the app used
before, copies it (value, times, remaining TTL) and serves it from graphkeep; writes go to
graphkeep only; a put or a delete racing a read-through always wins (the copy is the port's
``adopt``: atomic insert-if-absent-and-not-tombstoned in the store); searches answer from
graphkeep and ``fallback_done()`` turns True once ``graphkeep store copy SOURCE URL --all``
has finished. Every graphkeep backend, sync and async.

Sources: LangGraph's ``InMemoryStore`` (an instance) and a graphkeep store on the same server
under another key prefix (by URL: its expiry is carried over).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import pytest
from langgraph.store.base import GetOp, Item, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import graphkeep
from graphkeep.errors import ConfigurationError
from graphkeep.server import store_settings

from .cli_runs import gk
from .conftest import unique_prefix
from .store_switch import OLD, switch_finished_by_copy_all
from .test_cli import BACKEND_PARAMS

MODES = ["sync", "async"]
NS = ("users", "u1")
#: keys of the races: each raced by readers and one acknowledged write
RACED_KEYS = 12
READERS = 6


@pytest.fixture(params=BACKEND_PARAMS)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def with_prefix(url: str, prefix: str) -> str:
    return f"{url}{'&' if urlsplit(url).query else '?'}key_prefix={prefix}"


def old_store(items: dict[str, dict[str, Any]]) -> InMemoryStore:
    store = InMemoryStore()
    for key, value in items.items():
        store.put(NS, key, value)
    return store


class Gated:
    """A fallback store whose reads wait at a gate: a read-through held between its read of
    the fallback and its copy, so a test can write in between."""

    def __init__(self, inner: InMemoryStore) -> None:
        self.inner = inner
        self.reading = threading.Event()
        self.gate = threading.Event()

    def batch(self, ops: Any) -> Any:
        found = self.inner.batch(ops)
        self.reading.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return found


@contextmanager
def gated_store(url: str, prefix: str, gated: Gated) -> Iterator[Any]:
    # Gated is no BaseStore: attach it as the store's fallback directly (what fallback=
    # does with a BaseStore instance, through StoreSource)
    from graphkeep.moving.store_sources import StoreSource

    with graphkeep.connect_store(url, key_prefix=prefix) as store:
        store.fallback = StoreSource(gated, "gated")
        yield store


@asynccontextmanager
async def agated_store(url: str, prefix: str, gated: Gated) -> AsyncIterator[Any]:
    from graphkeep.moving.store_sources import StoreSource

    async with graphkeep.aconnect_store(url, key_prefix=prefix) as store:
        store.fallback = StoreSource(gated, "gated")
        yield store


def writer_store(url: str, prefix: str) -> Any:
    """Another worker's store on the same keys, itself reading through (its deletes leave
    tombstones)."""
    return graphkeep.aconnect_store(url, key_prefix=prefix, fallback=InMemoryStore())


def run(mode: str, sync_body: Any, async_body: Any) -> Any:
    return sync_body() if mode == "sync" else asyncio.run(async_body())


def test_a_miss_is_read_through_copied_and_then_served_from_graphkeep(url: str, mode: str) -> None:
    prefix = unique_prefix("sfb")
    source = old_store({"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}})
    before = {k: source.get(NS, k) for k in "abc"}

    def sync_body() -> tuple[Any, Any, Any]:
        with graphkeep.connect_store(url, key_prefix=prefix, fallback=source) as store:
            one = store.get(NS, "a")
            several = store.batch([GetOp(NS, "b"), GetOp(NS, "c"), GetOp(NS, "none")])
            return one, several, store.search(NS)

    async def async_body() -> tuple[Any, Any, Any]:
        async with graphkeep.aconnect_store(url, key_prefix=prefix, fallback=source) as store:
            one = await store.aget(NS, "a")
            several = await store.abatch([GetOp(NS, "b"), GetOp(NS, "c"), GetOp(NS, "none")])
            return one, several, await store.asearch(NS)

    one, several, searched = run(mode, sync_body, async_body)
    assert one.value == {"n": 1}
    assert [i.value if i else None for i in several] == [{"n": 2}, {"n": 3}, None]
    assert sorted(i.key for i in searched) == ["a", "b", "c"]  # copied: graphkeep's own now
    # the copies are graphkeep's, times as the fallback had them, without the fallback
    with graphkeep.connect_store(url, key_prefix=prefix) as plain:
        for key in "abc":
            copy = plain.get(NS, key, refresh_ttl=False)
            assert isinstance(copy, Item)
            assert copy.value == before[key].value  # type: ignore[union-attr]
            assert copy.created_at == before[key].created_at  # type: ignore[union-attr]
            assert copy.updated_at == before[key].updated_at  # type: ignore[union-attr]
        assert plain.get(NS, "none") is None
    assert [source.get(NS, k) for k in "abc"] == [before[k] for k in "abc"]  # never written


def test_a_graphkeep_source_by_url_carries_the_remaining_ttl(url: str, mode: str) -> None:
    old, new = unique_prefix("sfo"), unique_prefix("sfn")
    with graphkeep.connect_store(url, key_prefix=old) as source:
        source.put(NS, "ttl", {"v": 1}, ttl=30)
        source.put(NS, "forever", {"v": 2})
        (stored_ttl, stored_forever) = source.stored_items([(NS, "ttl"), (NS, "forever")])
    assert stored_ttl is not None and stored_ttl.expires_ms is not None

    def sync_body() -> None:
        with graphkeep.connect_store(url, key_prefix=new, fallback=with_prefix(url, old)) as s:
            assert s.get(NS, "ttl", refresh_ttl=False).value == {"v": 1}
            assert s.get(NS, "forever").value == {"v": 2}

    async def async_body() -> None:
        fallback = with_prefix(url, old)
        async with graphkeep.aconnect_store(url, key_prefix=new, fallback=fallback) as s:
            assert (await s.aget(NS, "ttl", refresh_ttl=False)).value == {"v": 1}
            assert (await s.aget(NS, "forever")).value == {"v": 2}

    run(mode, sync_body, async_body)
    with graphkeep.connect_store(url, key_prefix=new) as plain:
        copy_ttl, copy_forever = plain.stored_items([(NS, "ttl"), (NS, "forever")])
    assert copy_ttl is not None and copy_forever is not None
    assert copy_ttl.expires_ms == stored_ttl.expires_ms  # the life it had left
    assert copy_ttl.ttl_minutes == 30
    assert copy_forever.expires_ms is None
    assert stored_forever is not None and copy_forever.created_us == stored_forever.created_us


def test_a_put_racing_a_read_through_wins(url: str, mode: str) -> None:
    prefix = unique_prefix("sfp")
    gated = Gated(old_store({"k": {"v": "old"}}))

    def sync_body() -> Any:
        with gated_store(url, prefix, gated) as store:
            got: list[Any] = []
            reader = threading.Thread(target=lambda: got.append(store.get(NS, "k")))
            reader.start()
            assert gated.reading.wait(30)
            store.put(NS, "k", {"v": "new"})  # acknowledged while the read-through waits
            gated.gate.set()
            reader.join(30)
            return got[0], store.get(NS, "k")

    async def async_body() -> Any:
        # an async store runs its calls one batch at a time: the racing put comes from
        # another worker's store on the same keys
        async with agated_store(url, prefix, gated) as store, writer_store(url, prefix) as other:
            reader = asyncio.create_task(store.aget(NS, "k"))
            assert await asyncio.to_thread(gated.reading.wait, 30)
            await other.aput(NS, "k", {"v": "new"})
            gated.gate.set()
            return await reader, await store.aget(NS, "k")

    raced, after = run(mode, sync_body, async_body)
    assert raced.value == {"v": "new"}  # what graphkeep holds once the copy was refused
    assert after.value == {"v": "new"}


def test_a_delete_racing_a_read_through_stays_deleted(url: str, mode: str) -> None:
    prefix = unique_prefix("sfd")
    gated = Gated(old_store({"k": {"v": "old"}}))

    def sync_body() -> Any:
        with gated_store(url, prefix, gated) as store:
            store.put(NS, "k", {"v": "mine"})
            got: list[Any] = []
            store.delete(NS, "k")
            reader = threading.Thread(target=lambda: got.append(store.get(NS, "k")))
            reader.start()
            assert gated.reading.wait(30)
            store.delete(NS, "k")  # again, while the read-through holds the fallback's copy
            gated.gate.set()
            reader.join(30)
            return got[0], store.get(NS, "k"), store.search(NS)

    async def async_body() -> Any:
        async with agated_store(url, prefix, gated) as store, writer_store(url, prefix) as other:
            reader = asyncio.create_task(store.aget(NS, "k"))
            assert await asyncio.to_thread(gated.reading.wait, 30)
            await other.adelete(NS, "k")  # never held here: the tombstone alone refuses it
            gated.gate.set()
            return await reader, await store.aget(NS, "k"), await store.asearch(NS)

    raced, after, searched = run(mode, sync_body, async_body)
    assert raced is None and after is None and searched == []
    # and with the fallback attached again by a new process: still deleted
    with graphkeep.connect_store(url, key_prefix=prefix, fallback=gated.inner) as store:
        assert store.get(NS, "k") is None
        assert store.batch([GetOp(NS, "k")]) == [None]


def test_a_deleted_item_never_comes_back(url: str, mode: str) -> None:
    prefix = unique_prefix("sfg")
    source = old_store({"k": {"v": "old"}, "j": {"v": "other"}})

    def sync_body() -> list[Any]:
        with graphkeep.connect_store(url, key_prefix=prefix, fallback=source) as store:
            assert store.get(NS, "k").value == {"v": "old"}  # copied
            store.delete(NS, "k")
            store.delete(NS, "j")  # never read: deleted before its first read
            return [store.get(NS, "k"), store.get(NS, "j"), store.search(NS)]

    async def async_body() -> list[Any]:
        async with graphkeep.aconnect_store(url, key_prefix=prefix, fallback=source) as store:
            assert (await store.aget(NS, "k")).value == {"v": "old"}
            await store.adelete(NS, "k")
            await store.adelete(NS, "j")
            return [await store.aget(NS, "k"), await store.aget(NS, "j"), await store.asearch(NS)]

    assert run(mode, sync_body, async_body) == [None, None, []]
    # a put after the delete is served, and its created_at starts anew
    with graphkeep.connect_store(url, key_prefix=prefix, fallback=source) as store:
        started = datetime.now(timezone.utc)
        store.put(NS, "j", {"v": "again"})
        item = store.get(NS, "j")
        assert item.value == {"v": "again"}
        assert item.created_at >= started.replace(microsecond=0)
        assert store.list_namespaces() == [NS]
        store.delete(NS, "j")
        assert store.get(NS, "j") is None
        assert store.list_namespaces() == []  # a tombstone is no namespace's item
        assert store.sweep_ttl() == 0  # nor an expired item the sweeper counts
        assert store.get(NS, "j") is None


def test_many_readers_and_writers_at_once_end_as_the_writes_said(url: str, mode: str) -> None:
    """Readers read every key through while one writer per key puts or deletes it at a
    random moment: each key ends as its acknowledged write left it, on every backend."""
    prefix = unique_prefix("sfm")
    keys = [f"k{i}" for i in range(RACED_KEYS)]
    source = old_store({k: {"v": f"old-{k}"} for k in keys})
    rng = random.Random(7)
    writes = {k: ({"v": f"new-{k}"} if rng.random() < 0.5 else None) for k in keys}
    delays = {k: rng.uniform(0, 0.3) for k in keys}

    def sync_body() -> dict[str, Any]:
        with graphkeep.connect_store(url, key_prefix=prefix, fallback=source) as store:
            stop = threading.Event()

            failures: list[BaseException] = []

            def reader() -> None:
                try:
                    while not stop.is_set():
                        store.batch([GetOp(NS, k) for k in rng.sample(keys, 4)])
                except BaseException as exc:  # a failed read fails the test
                    failures.append(exc)
                    raise

            def writer(key: str) -> None:
                time.sleep(delays[key])
                try:
                    store.batch([PutOp(NS, key, writes[key])])
                except BaseException as exc:  # a failed write fails the test
                    failures.append(exc)
                    raise

            readers = [threading.Thread(target=reader) for _ in range(READERS)]
            writers = [threading.Thread(target=writer, args=(k,)) for k in keys]
            for t in readers + writers:
                t.start()
            for t in writers:
                t.join(60)
            time.sleep(0.2)
            stop.set()
            for t in readers:
                t.join(60)
            assert not failures, failures
            return {k: store.get(NS, k) for k in keys}

    async def async_body() -> dict[str, Any]:
        async with (
            graphkeep.aconnect_store(url, key_prefix=prefix, fallback=source) as store,
            graphkeep.aconnect_store(url, key_prefix=prefix, fallback=source) as other,
        ):
            stop = asyncio.Event()

            async def reader() -> None:
                while not stop.is_set():
                    await asyncio.gather(*(store.aget(NS, k) for k in rng.sample(keys, 4)))

            async def writer(key: str) -> None:
                await asyncio.sleep(delays[key])
                value = writes[key]
                if value is None:
                    await other.adelete(NS, key)
                else:
                    await other.aput(NS, key, value)

            readers = [asyncio.create_task(reader()) for _ in range(READERS)]
            await asyncio.gather(*(writer(k) for k in keys))
            await asyncio.sleep(0.2)
            stop.set()
            await asyncio.gather(*readers)
            return {k: await store.aget(NS, k) for k in keys}

    final = run(mode, sync_body, async_body)
    assert {k: (v.value if v else None) for k, v in final.items()} == writes


def test_searches_answer_from_graphkeep_until_store_copy_all_has_finished(
    url: str, mode: str
) -> None:
    old, new = unique_prefix("sfo"), unique_prefix("sfn")
    with graphkeep.connect_store(url, key_prefix=old) as source:
        for key, value in OLD.items():
            source.put(NS, key, value)
    copy_all = ["store", "copy", url, url, "--all"]
    copy_all += ["--src-key-prefix", old, "--dst-key-prefix", new]
    options = {"key_prefix": new, "fallback": with_prefix(url, old)}
    switch_finished_by_copy_all(url, options, copy_all, mode)


def test_fallback_naming_the_same_store_is_refused_before_anything_is_written(url: str) -> None:
    prefix = unique_prefix("sfs")
    same = with_prefix(url, prefix)
    with pytest.raises(ConfigurationError, match="names the store itself"):
        with graphkeep.connect_store(same, fallback=same):
            pass
    with graphkeep.connect_store(url, key_prefix=prefix) as store:
        with pytest.raises(ConfigurationError, match="names the store itself"):
            with graphkeep.connect_store(url, key_prefix=prefix, fallback=store):
                pass
        assert store.search(()) == []
    with pytest.raises(ConfigurationError, match="BaseStore"):
        with graphkeep.connect_store(url, key_prefix=prefix, fallback=42):
            pass


def test_agent_servers_store_reads_graphkeep_store_fallback_url(url: str) -> None:
    old, new = unique_prefix("sfo"), unique_prefix("sfn")
    with graphkeep.connect_store(url, key_prefix=old) as source:
        source.put(NS, "k", {"v": 1})
    environ = {
        "GRAPHKEEP_URL": url,
        "GRAPHKEEP_KEY_PREFIX": new,
        "GRAPHKEEP_STORE_FALLBACK_URL": with_prefix(url, old),
    }
    store_url, options = store_settings(environ)
    assert options["fallback"] == with_prefix(url, old)

    async def body() -> Any:
        async with graphkeep.aconnect_store(store_url, **options) as store:
            return await store.aget(NS, "k")

    assert asyncio.run(body()).value == {"v": 1}
    with pytest.raises(ConfigurationError, match="GRAPHKEEP_STORE_FALLBACK_URL"):
        store_settings({**environ, "GRAPHKEEP_STORE_FALLBACK_URL": "not-a-url"})


def test_search_op_type_is_untouched_by_the_fallback(url: str) -> None:
    """A search never reads the fallback (its items are not graphkeep's until copied)."""
    prefix = unique_prefix("sfq")
    source = old_store({"k": {"v": 1}})
    with graphkeep.connect_store(url, key_prefix=prefix, fallback=source) as store:
        assert store.batch([SearchOp(NS)]) == [[]]
        assert store.list_namespaces() == []


def test_store_copy_all_is_refused_with_prefix_or_overwrite(url: str) -> None:
    prefix = unique_prefix("sfu")
    for extra in (["--prefix", "users"], ["--overwrite"]):
        result = gk("store", "copy", url, url, "--all", "--dst-key-prefix", prefix, *extra)
        assert result.code == 2 and "--all copies every item" in result.err, result.err
