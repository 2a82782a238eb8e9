"""``graphkeep store copy`` from and to the official stores of other packages, on real servers:
``RedisStore`` (langgraph-checkpoint-redis, Redis Stack), ``MongoDBStore``
(langgraph-store-mongodb) and ``DynamoDBStore`` (langgraph-checkpoint-aws).

Items are put through each rival's own API, copied into every graphkeep backend and back into
a fresh store of the same rival; ``get``, ``search`` and ``list_namespaces`` read the same on
every side. Each test works in its own key prefix, collection, index prefix or table.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

import graphkeep
from conformance.setups import all_setups
from graphkeep.cli.endpoints import open_store
from graphkeep.moving.rival_items import plain
from graphkeep.moving.rival_stores import holds_store
from graphkeep.port.clock import datetime_of_us

from .conftest import unique_prefix
from .rival_stores import (
    ITEMS,
    RIVALS,
    Key,
    Rival,
    graphkeep_backends,
    open_rival,
    redis_stack_url,
    seed,
    times,
)
from .test_cli_store import fake_embed, gk

#: over DynamoDB's 400 KB item limit (graphkeep's DynamoDB backend stores it; DynamoDBStore
#: cannot, so its source has none)
BIG = (("blobs",), "big", {"text": "é" * 250_000})


@pytest.fixture(params=RIVALS)
def rival(request: pytest.FixtureRequest) -> Iterator[Rival]:
    with open_rival(request.param) as made:
        yield made


@pytest.fixture
def twin(rival: Rival) -> Iterator[Rival]:
    """A second, empty store of the same rival: where a copy comes back to."""
    with open_rival(rival.name) as made:
        yield made


@pytest.fixture(params=graphkeep_backends())
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(URL, key prefix) of an empty graphkeep store on one backend."""
    return request.param, unique_prefix("rivalcopy")


def views(store: BaseStore, items: list[Any]) -> dict[str, Any]:
    """What LangGraph reads from ``store``: each item by ``get``, each namespace's items by
    ``search`` (those in the namespace itself: DynamoDBStore matches it exactly, the others
    by prefix) and every namespace by ``list_namespaces``. RedisStore 0.5.2's ``get`` finds
    nothing in a namespace of two or more labels on Redis Stack: its items come from
    ``search`` there."""
    got: dict[Key, Any] = {}
    searched: dict[tuple[str, ...], dict[str, Any]] = {}
    kind = type(store).__name__
    for ns, key, _ in items:
        # MongoDBStore's prefix match is an $expr FerretDB does not run: it searches all
        hits = store.search(() if kind == "MongoDBStore" else ns, limit=1000, refresh_ttl=False)
        searched[ns] = {h.key: plain(h.value) for h in hits if tuple(h.namespace) == ns}
        if kind == "RedisStore":  # its get misses namespaces of 2+ labels
            got[(ns, key)] = searched[ns].get(key)
            continue
        found = store.get(ns, key, refresh_ttl=False)
        got[(ns, key)] = None if found is None else plain(found.value)
    if kind == "MongoDBStore":  # its $group of namespaces comes back as "$_id" on FerretDB
        everything = store.search((), limit=1000, refresh_ttl=False)
        namespaces = sorted({tuple(i.namespace) for i in everything})
    else:
        namespaces = sorted(tuple(ns) for ns in store.list_namespaces(limit=1000))
    return {"get": got, "search": searched, "namespaces": namespaces}


def expected(items: list[Any]) -> dict[str, Any]:
    searched: dict[tuple[str, ...], dict[str, Any]] = {}
    for ns, key, value in items:
        searched.setdefault(ns, {})[key] = value
    return {
        "get": {(ns, key): value for ns, key, value in items},
        "search": searched,
        "namespaces": sorted({ns for ns, _, _ in items}),
    }


# -- rival -> graphkeep -> rival ------------------------------------------------------------


def test_rival_items_copy_into_graphkeep_and_back_reading_the_same_everywhere(
    rival: Rival, twin: Rival, backend: tuple[str, str]
) -> None:
    url, prefix = backend
    items = ITEMS if rival.name == "dynamodb" else [*ITEMS, BIG]
    with rival.open() as store:
        seed(store, items)
        source_view = views(store, items)
        source_times = times(store, items)
    assert source_view == expected(items) and len(source_times) == len(items)

    first = gk("store", "copy", rival.url, url, "--dst-key-prefix", prefix, "--json")
    assert first.code == 0, first.err + first.out
    report = first.json()
    assert (report["copied"], report["verified"], report["ok"]) == (len(items), len(items), True)
    with open_store(url, key_prefix=prefix) as copied:
        assert views(copied, items) == source_view
        assert times(copied, items) == source_times  # graphkeep keeps the source's times

    again = gk("store", "copy", rival.url, url, "--dst-key-prefix", prefix, "--json")
    assert again.code == 0, again.err
    assert (again.json()["copied"], again.json()["unchanged"]) == (0, len(items))

    back = gk("store", "copy", url, twin.url, "--src-key-prefix", prefix, "--json")
    assert back.code == 0, back.err + back.out
    assert back.json()["copied"] == len(items) and back.json()["ok"] is True
    with twin.open() as returned:
        assert views(returned, items) == source_view
    rerun = gk("store", "copy", url, twin.url, "--src-key-prefix", prefix, "--json")
    assert (rerun.json()["copied"], rerun.json()["unchanged"]) == (0, len(items))


@pytest.mark.mongodb
def test_copying_from_mongodbstore_leaves_its_documents_and_updated_at_unchanged() -> None:
    from pymongo import MongoClient

    with open_rival("mongodb") as rival:
        with rival.open() as store:
            seed(store, ITEMS)
        collection_name = rival.url.rsplit("collection_name=", 1)[1]
        with MongoClient(os.environ.get("MONGODB_URI")) as client:
            collection = client["gk_rivals"][collection_name]
            before = sorted(collection.find({}), key=lambda d: str(d["_id"]))
            indexes = [i["name"] for i in collection.list_indexes()]
            time.sleep(0.01)  # a rewritten updated_at would differ
            prefix = unique_prefix("rivalcopy")
            redis_url = next(s.url for s in all_setups() if s.name == "redis")
            copied = gk("store", "copy", rival.url, redis_url, "--dst-key-prefix", prefix)
            assert copied.code == 0, copied.err + copied.out
            after = sorted(collection.find({}), key=lambda d: str(d["_id"]))
            assert [i["name"] for i in collection.list_indexes()] == indexes
    assert after == before
    assert [d["updated_at"] for d in after] == [d["updated_at"] for d in before]


@pytest.mark.mongodb
def test_a_mongodb_source_lists_every_namespace_beyond_list_namespaces_limit() -> None:
    many = [(("ns", f"n{i:03d}"), "k", {"i": i}) for i in range(120)]
    with open_rival("mongodb") as rival:
        with rival.open() as store:
            seed(store, many)  # its list_namespaces would stop at 100 (limit before $group)
        prefix = unique_prefix("rivalcopy")
        redis_url = next(s.url for s in all_setups() if s.name == "redis")
        result = gk("store", "copy", rival.url, redis_url, "--dst-key-prefix", prefix, "--json")
        assert result.code == 0, result.err
        assert result.json()["copied"] == 120
        with open_store(redis_url, key_prefix=prefix) as copied:
            assert len(copied.list_namespaces(limit=1000)) == 120


def test_a_dry_run_into_a_rival_that_holds_no_store_yet_creates_nothing(rival: Rival) -> None:
    source = seed_sqlite_file()
    result = gk("store", "copy", source, rival.url, "--dry-run", "--json")
    assert result.code == 0, result.err + result.out
    assert result.json()["copied"] == len(ITEMS) and result.json()["dry_run"] is True
    assert not holds_store(rival.url)  # no table, collection or search index made
    with rival.open() as store:  # and once it exists, a dry run reads it
        seed(store, ITEMS[:1])
    assert holds_store(rival.url)
    planned = gk("store", "copy", source, rival.url, "--dry-run", "--json")
    assert (planned.json()["copied"], planned.json()["unchanged"]) == (len(ITEMS) - 1, 1)


def seed_sqlite_file() -> str:
    from langgraph.store.sqlite import SqliteStore

    with SqliteStore.from_conn_string("source.db") as store:
        store.setup()
        seed(store, ITEMS)
    return "sqlite:///source.db"


# -- refusals, TTLs, embeddings -------------------------------------------------------------


@pytest.mark.dynamodb
@pytest.mark.redis
def test_an_item_dynamodbstore_refuses_is_reported_and_the_others_are_copied() -> None:
    redis_url = next(s.url for s in all_setups() if s.name == "redis")
    prefix = unique_prefix("rivalcopy")
    with open_store(redis_url, key_prefix=prefix, setup=True) as source:
        seed(source, [*ITEMS, BIG])
    with open_rival("dynamodb") as rival:
        result = gk("store", "copy", redis_url, rival.url, "--src-key-prefix", prefix)
        assert result.code == 1, result.err + result.out
        assert "blobs big: the destination refused it" in result.out
        assert "1 refused" in result.out and "VERIFY FAILED" in result.out
        with rival.open() as store:
            seen = views(store, ITEMS)
        # moto leaves the refused item's bare key behind (real DynamoDB writes nothing): its
        # namespace is listed, but it holds no item
        assert {k: seen[k] for k in ("get", "search")} == {
            k: expected(ITEMS)[k] for k in ("get", "search")
        }
        back = gk("store", "copy", rival.url, "sqlite:///back.db", "--json")
        assert back.code == 0, back.err + back.out
        assert back.json()["copied"] == len(ITEMS)


@pytest.mark.redis
@pytest.mark.redis_stack
def test_a_source_document_that_is_no_item_is_reported_and_the_others_are_copied() -> None:
    from redis import Redis

    redis_url = next(s.url for s in all_setups() if s.name == "redis")
    prefix = unique_prefix("rivalcopy")
    with open_rival("redis") as rival:
        with rival.open() as store:
            seed(store, ITEMS)
        store_prefix = rival.url.split("store_prefix=", 1)[1].split("&", 1)[0]
        with Redis.from_url(redis_stack_url()) as client:  # a document with no value
            client.json().set(f"{store_prefix}:broken", "$", {"prefix": "users", "key": "x"})
        result = gk("store", "copy", rival.url, redis_url, "--dst-key-prefix", prefix)
        assert result.code == 1, result.err + result.out
        assert f"Redis key {store_prefix}:broken: unreadable in the source" in result.out
        assert "1 unreadable in the source" in result.out
        with open_store(redis_url, key_prefix=prefix) as copied:
            assert views(copied, ITEMS) == expected(ITEMS)


@pytest.mark.redis
@pytest.mark.parametrize(
    "name", [pytest.param("redis", marks=pytest.mark.redis_stack), pytest.param("dynamodb")]
)
def test_an_items_remaining_ttl_is_carried_into_graphkeep(name: str) -> None:
    if name == "dynamodb" and not os.environ.get("DYNAMODB_ENDPOINT_URL"):
        pytest.fail("no DynamoDB server (DYNAMODB_ENDPOINT_URL)")
    redis_url = next(s.url for s in all_setups() if s.name == "redis")
    prefix = unique_prefix("rivalcopy")
    with open_rival(name) as rival:
        with rival.open() as store:
            store.put(("t",), "short", {"v": 1}, ttl=0.05)  # 3 s
            store.put(("t",), "kept", {"v": 2})
        result = gk("store", "copy", rival.url, redis_url, "--dst-key-prefix", prefix, "--json")
        assert result.code == 0, result.err
        assert result.json()["with_ttl"] == 1
    with open_store(redis_url, key_prefix=prefix) as copied:
        assert {i.key for i in copied.search(("t",), refresh_ttl=False)} == {"short", "kept"}
        time.sleep(3.2)
        assert [i.key for i in copied.search(("t",), refresh_ttl=False)] == ["kept"]


DOCS = [
    (("docs",), "abc", {"text": "abcabc fed"}),
    (("docs",), "xyz", {"text": "xyz tuvw"}),
    (("docs",), "mid", {"text": "hello mop"}),
]
INDEX = {"dims": 4, "embed": fake_embed, "fields": ["text"]}
EMBED = ("--embed", f"{__name__}:fake_embed", "--dims", "4", "--field", "text")


def _ranked(store: BaseStore, query: str) -> list[str]:
    return [h.key for h in store.search(("docs",), query=query, limit=10, refresh_ttl=False)]


@pytest.mark.redis
@pytest.mark.redis_stack
@pytest.mark.parametrize("url", graphkeep_backends())
def test_items_redisstore_indexed_are_found_by_the_same_search_after_a_copy(url: str) -> None:
    prefix = unique_prefix("rivalcopy")
    with open_rival("redis") as rival, open_rival("redis") as twin:
        with rival.open(index=INDEX) as store:
            seed(store, DOCS)
            ranked = {q: _ranked(store, q) for q in ("zyx wut", "abc", "lmno")}
        assert ranked["zyx wut"][0] == "xyz" and ranked["abc"][0] == "abc"
        copied = gk("store", "copy", rival.url, url, "--dst-key-prefix", prefix, *EMBED, "--json")
        assert copied.code == 0, copied.err + copied.out
        assert copied.json()["embedded"] == copied.json()["source_indexed"] == len(DOCS)
        with open_store(url, key_prefix=prefix, index=INDEX) as dst:
            assert {q: _ranked(dst, q) for q in ranked} == ranked
        rerun = gk("store", "copy", rival.url, url, "--dst-key-prefix", prefix, *EMBED, "--json")
        assert (rerun.json()["embedded"], rerun.json()["unchanged"]) == (0, len(DOCS))
        back = gk("store", "copy", url, twin.url, "--src-key-prefix", prefix, *EMBED)
        assert back.code == 0, back.err + back.out
        with twin.open(index=INDEX) as returned:
            assert {q: _ranked(returned, q) for q in ranked} == ranked
        unindexed = gk("store", "copy", rival.url, "sqlite:///plain.db")
        assert unindexed.code == 0, unindexed.err
        assert "3 item(s) had embeddings in the source; pass --embed" in unindexed.out


# -- any other store, errors ----------------------------------------------------------------

MEMORY: dict[str, InMemoryStore] = {}


@contextmanager
def memory_source() -> Iterator[BaseStore]:
    yield MEMORY["source"]


@contextmanager
def memory_destination() -> Iterator[BaseStore]:
    yield MEMORY["destination"]


@pytest.mark.redis
def test_any_store_a_callable_yields_is_a_source_and_a_destination() -> None:
    MEMORY["source"], MEMORY["destination"] = InMemoryStore(), InMemoryStore()
    seed(MEMORY["source"], ITEMS)
    redis_url = next(s.url for s in all_setups() if s.name == "redis")
    prefix = unique_prefix("rivalcopy")
    into = gk(
        "store", "copy", "memory", redis_url, "--source-store", f"{__name__}:memory_source",
        "--dst-key-prefix", prefix, "--json",
    )  # fmt: skip
    assert into.code == 0, into.err + into.out
    assert into.json()["copied"] == len(ITEMS)
    out = gk(
        "store", "copy", redis_url, "memory", "--dest-store", f"{__name__}:memory_destination",
        "--src-key-prefix", prefix, "--json",
    )  # fmt: skip
    assert out.code == 0, out.err + out.out
    assert views(MEMORY["destination"], ITEMS) == expected(ITEMS)


def test_a_rival_url_without_its_package_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.store.mongodb", None)
    result = gk("store", "copy", "langgraph-mongodb://127.0.0.1:1/db", "sqlite:///x.db")
    assert result.code == 2, result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert "graphkeep[migrate]" in result.err and "langgraph-store-mongodb" in result.err


def test_a_rival_option_it_does_not_take_is_a_usage_error() -> None:
    result = gk("store", "copy", "langgraph-redis://127.0.0.1:1/0?nope=1", "sqlite:///x.db")
    assert result.code == 2 and "store_prefix" in result.err and "'nope'" in result.err
    keyed = gk("store", "copy", "langgraph-redis://127.0.0.1:1/0", "sqlite:///x.db",
               "--src-key-prefix", "p")  # fmt: skip
    assert keyed.code == 2 and "graphkeep URLs only" in keyed.err


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    yield


# -- graphkeep's store keeps the times a copy carries ----------------------------------------

CREATED, UPDATED = 1_600_000_000_000_001, 1_700_000_000_000_002


def _times_of(item: Any) -> tuple[datetime, datetime]:
    return item.created_at, item.updated_at


@pytest.mark.parametrize("url", graphkeep_backends())
def test_stamped_puts_keep_the_given_times_sync_and_async(url: str) -> None:
    ns = ("a", "b")
    given = (datetime_of_us(CREATED), datetime_of_us(UPDATED))
    with graphkeep.connect_store(url, key_prefix=unique_prefix("stamped"), setup=True) as store:
        store.put_stamped([(PutOp(ns, "k", {"v": 1}), CREATED, UPDATED)])
        assert _times_of(store.get(ns, "k")) == given
        # a live item keeps its created_at (the port's rule); updated_at is the one given
        store.put_stamped([(PutOp(ns, "k", {"v": 2}), CREATED + 7, UPDATED + 7)])
        again = store.get(ns, "k")
        assert again is not None and again.value == {"v": 2}
        assert _times_of(again) == (given[0], datetime_of_us(UPDATED + 7))

    async def on_async() -> None:
        prefix = unique_prefix("stamped")
        async with graphkeep.aconnect_store(url, key_prefix=prefix, setup=True) as store:
            await store.aput_stamped([(PutOp(ns, "k", {"v": 1}), CREATED, UPDATED)])
            assert _times_of(await store.aget(ns, "k")) == given

    asyncio.run(on_async())
