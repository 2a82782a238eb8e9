"""The store's live switch from the rivals' stores, by URL, on real servers:
``graphkeep.connect_store(url, fallback=RIVAL_URL)`` with ``RIVAL_URL`` one of
``langgraph-redis://HOST:PORT/DB`` (RedisStore, Redis Stack), ``langgraph-mongodb://HOST:PORT/DB``
(MongoDBStore), ``langgraph-dynamodb://TABLE?region=…&endpoint_url=…`` (DynamoDBStore) and
``postgresql://…`` (LangGraph's PostgresStore). Items are put through each rival's own API; a
``get`` through graphkeep adopts them (value and times as the source keeps them), a delete in
graphkeep does not come back, ``store copy --all`` finishes the move and sets the marker, and
items adopted into a store with an ``index`` are found by the same semantic search as on the
source. The source is read with the server's own client before and after: never changed.
Every graphkeep backend, sync and async.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

import graphkeep
from graphkeep.backends.redis.store import RedisStore
from graphkeep.errors import ConfigurationError, StorageUnavailable
from graphkeep.moving.rival_stores import StoreMissing
from graphkeep.server import store_settings

from .conftest import REDIS_URL, unique_prefix
from .rival_stores import (
    ITEMS,
    RIVALS,
    Rival,
    graphkeep_backends,
    open_rival,
    redis_stack_url,
    seed,
    times,
)
from .store_switch import NS, OLD, switch_finished_by_copy_all
from .test_cli_store import fake_embed

MODES = ["sync", "async"]
#: the rivals and LangGraph's own PostgresStore
SOURCES = [*RIVALS, pytest.param("postgres")]

DOCS = [
    (("docs",), "abc", {"text": "abcabc fed"}),
    (("docs",), "xyz", {"text": "xyz tuvw"}),
    (("docs",), "mid", {"text": "hello mop"}),
]
QUERIES = ("zyx wut", "abc", "lmno")
INDEX = {"dims": 4, "embed": fake_embed, "fields": ["text"]}


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> Iterator[Rival]:
    if request.param == "postgres":
        yield Rival("postgres", request.getfixturevalue("postgres_url"))
        return
    with open_rival(request.param) as made:
        yield made


@pytest.fixture(params=graphkeep_backends())
def url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(mode: str, sync_body: Any, async_body: Any) -> Any:
    return sync_body() if mode == "sync" else asyncio.run(async_body())


def stored(rival: Rival) -> Any:
    """Everything the source keeps, read with its server's own client (raw documents, keys
    with their remaining life, rows): what no read through graphkeep may change."""
    if rival.name == "redis":
        from redis import Redis

        tag = rival.url.split("store_prefix=", 1)[1].split("&", 1)[0]
        with Redis.from_url(redis_stack_url()) as client:
            keys = sorted(client.scan_iter(match=f"{tag}*", count=1000))
            return {k: (client.dump(k), client.pttl(k) > 0) for k in keys}
    if rival.name == "mongodb":
        from pymongo import MongoClient

        name = rival.url.split("collection_name=", 1)[1]
        with MongoClient(os.environ.get("MONGODB_URI")) as mongo:
            collection = mongo["gk_rivals"][name]
            docs = sorted(collection.find({}), key=lambda d: str(d["_id"]))
            return docs, sorted(i["name"] for i in collection.list_indexes())
    if rival.name == "dynamodb":
        import boto3

        table = rival.url.split("://", 1)[1].split("?", 1)[0]
        client = boto3.client(
            "dynamodb",
            region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            endpoint_url=os.environ.get("DYNAMODB_ENDPOINT_URL"),
        )
        items = client.scan(TableName=table, ConsistentRead=True)["Items"]
        return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))
    import psycopg

    with psycopg.connect(rival.url) as conn:
        return conn.execute(
            "SELECT prefix, key, value::text, created_at, updated_at, expires_at, ttl_minutes"
            " FROM store ORDER BY prefix, key"
        ).fetchall()


# -- read through, adopted, deleted, the source untouched ------------------------------------


def test_rival_items_are_adopted_on_get_and_the_source_is_left_unchanged(
    source: Rival, url: str, mode: str
) -> None:
    prefix = unique_prefix("sfr")
    with source.open() as store:
        seed(store, ITEMS)
        source_times = times(store, ITEMS)
    assert len(source_times) == len(ITEMS)
    before = stored(source)
    gone = ITEMS[1][:2]
    keys = [(ns, key) for ns, key, _ in ITEMS]

    def sync_body() -> tuple[Any, ...]:
        with graphkeep.connect_store(url, key_prefix=prefix, fallback=source.url) as store:
            got = {k: store.get(*k) for k in keys}
            missing = store.get(NS, "nobody")
            store.delete(*gone)
            return got, missing, store.get(*gone)

    async def async_body() -> tuple[Any, ...]:
        async with graphkeep.aconnect_store(url, key_prefix=prefix, fallback=source.url) as store:
            got = {k: await store.aget(*k) for k in keys}
            missing = await store.aget(NS, "nobody")
            await store.adelete(*gone)
            return got, missing, await store.aget(*gone)

    got, missing, deleted = run(mode, sync_body, async_body)
    assert {k: item.value for k, item in got.items()} == {(ns, k): v for ns, k, v in ITEMS}
    assert {k: (item.created_at, item.updated_at) for k, item in got.items()} == source_times
    assert missing is None and deleted is None
    # a new process, the fallback attached again: the delete stands, the rest is graphkeep's
    with graphkeep.connect_store(url, key_prefix=prefix, fallback=source.url) as store:
        assert store.get(*gone) is None
        held = sorted((tuple(i.namespace), i.key) for i in store.search((), limit=100))
    assert held == sorted(k for k in keys if k != gone)
    with graphkeep.connect_store(url, key_prefix=prefix) as plain_store:  # no fallback
        assert plain_store.get(*keys[0]) is not None and plain_store.get(*gone) is None
    assert stored(source) == before  # nothing written, no updated_at or TTL refreshed


def test_store_copy_all_from_a_rival_finishes_the_switch(
    source: Rival, url: str, mode: str
) -> None:
    prefix = unique_prefix("sfr")
    with source.open() as store:
        seed(store, [(NS, key, value) for key, value in OLD.items()])
    before = stored(source)
    copy_all = ["store", "copy", source.url, url, "--all", "--dst-key-prefix", prefix]
    options = {"key_prefix": prefix, "fallback": source.url}
    switch_finished_by_copy_all(url, options, copy_all, mode)
    assert stored(source) == before


# -- semantic search over adopted items ------------------------------------------------------


def ranked(store: BaseStore, query: str) -> list[str]:
    return [h.key for h in store.search(("docs",), query=query, limit=10, refresh_ttl=False)]


async def aranked(store: Any, query: str) -> list[str]:
    found = await store.asearch(("docs",), query=query, limit=10, refresh_ttl=False)
    return [h.key for h in found]


def test_items_adopted_from_a_rival_are_found_by_the_same_semantic_search(
    source: Rival, url: str, mode: str
) -> None:
    """With an ``index`` on graphkeep's store, each adopted item is embedded as it is copied:
    a semantic search ranks them as the source does (RedisStore searches on Redis Stack; the
    others' vector search needs Atlas, DynamoDB's vector index or pgvector, so the reference
    is LangGraph's InMemoryStore over the same embedding)."""
    reference = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    seed(reference, DOCS)
    expected = {q: ranked(reference, q) for q in QUERIES}
    assert expected["zyx wut"][0] == "xyz" and expected["abc"][0] == "abc"
    with source.open(index=INDEX if source.name == "redis" else None) as store:
        seed(store, DOCS)
        if source.name == "redis":
            assert {q: ranked(store, q) for q in QUERIES} == expected
    prefix = unique_prefix("sfr")
    options = {"key_prefix": prefix, "index": INDEX, "fallback": source.url}

    def sync_body() -> tuple[Any, Any]:
        with graphkeep.connect_store(url, **options) as store:
            before = store.search(("docs",), query="abc")
            for ns, key, _ in DOCS:
                store.get(ns, key)
            return before, {q: ranked(store, q) for q in QUERIES}

    async def async_body() -> tuple[Any, Any]:
        async with graphkeep.aconnect_store(url, **options) as store:
            before = await store.asearch(("docs",), query="abc")
            for ns, key, _ in DOCS:
                await store.aget(ns, key)
            return before, {q: await aranked(store, q) for q in QUERIES}

    before, after = run(mode, sync_body, async_body)
    assert before == []  # not graphkeep's until adopted
    assert after == expected


# -- Agent Server and the classes' from_url ----------------------------------------------------


@pytest.mark.mongodb
def test_agent_servers_store_and_from_url_read_through_to_a_rival(url: str) -> None:
    with open_rival("mongodb") as rival:
        with rival.open() as store:
            seed(store, ITEMS[:2])
        environ = {
            "GRAPHKEEP_URL": url,
            "GRAPHKEEP_KEY_PREFIX": unique_prefix("sfr"),
            "GRAPHKEEP_STORE_FALLBACK_URL": rival.url,
        }
        store_url, options = store_settings(environ)
        assert options["fallback"] == rival.url

        async def body() -> Any:
            async with graphkeep.aconnect_store(store_url, **options) as store:
                return await store.aget(*ITEMS[0][:2])

        assert asyncio.run(body()).value == ITEMS[0][2]
        if url.startswith("redis://"):
            prefix = unique_prefix("sfr")
            with RedisStore.from_url(url, key_prefix=prefix, fallback=rival.url) as store:
                assert store.get(*ITEMS[1][:2]).value == ITEMS[1][2]


# -- bad input: one line, before anything is read ----------------------------------------------


def _refused(fallback: str, error: type[Exception] = ConfigurationError) -> str:
    with pytest.raises(error) as caught:
        with graphkeep.connect_store(REDIS_URL, key_prefix=unique_prefix("sfr"), fallback=fallback):
            pass
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.redis
def test_a_rival_url_without_its_package_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.store.mongodb", None)
    text = _refused("langgraph-mongodb://127.0.0.1:1/db")
    assert "langgraph-store-mongodb" in text and "graphkeep[migrate]" in text


@pytest.mark.redis
def test_rival_urls_a_store_cannot_read_through_to_are_refused() -> None:
    assert "has no store" in _refused("langgraph-plainredis://127.0.0.1:1/0")
    text = _refused("langgraph-redis://127.0.0.1:1/0?nope=1")
    assert "store_prefix" in text and "'nope'" in text
    assert "unavailable" in _refused("langgraph-redis://127.0.0.1:1/0", StorageUnavailable)
    assert "no table" in _refused("langgraph-dynamodb://?region=us-east-1")


@pytest.mark.redis
@pytest.mark.mongodb
def test_a_rival_that_holds_no_store_there_is_refused() -> None:
    with open_rival("mongodb") as rival:  # never opened: no collection
        text = _refused(rival.url, StoreMissing)
    assert "no MongoDBStore collection" in text
