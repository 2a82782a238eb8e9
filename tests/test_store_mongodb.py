"""MongoDB long-term memory store on a real wire-protocol server (FerretDB locally).

Every test uses its own ``key_prefix`` (one ``<prefix>_store`` collection, dropped
afterwards) in one throw-away database. Commands are counted with PyMongo command
monitoring; documents are inspected with PyMongo directly. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pymongo
import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from pymongo import monitoring

import graphkeep
from graphkeep.backends.mongodb.store import (
    AsyncMongoDBStore,
    MongoDBStore,
    escape_key,
)
from graphkeep.connect import accepted_options
from graphkeep.errors import (
    ConfigurationError,
    InvalidFilter,
    InvalidInput,
    PayloadTooLarge,
    StorageUnavailable,
    mask_url,
)
from graphkeep.store.filters import compile_filter, matches

from .conftest import unique_prefix

pytestmark = pytest.mark.mongodb

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
TEST_DB = f"gk_store_{uuid.uuid4().hex[:10]}"
DIMS = 16
#: 60 ms, in minutes: long enough to write and read back, short enough to wait out
SHORT_TTL = 0.001


def url(db: str = TEST_DB) -> str:
    parts = urlsplit(MONGODB_URI)
    return parts._replace(path=f"/{db}").geturl()


class Recorder(monitoring.CommandListener):
    """Names of the commands the monitored client starts."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @contextmanager
    def count(self) -> Iterator[list[str]]:
        start = len(self.names)
        names: list[str] = []
        yield names
        names.extend(self.names[start:])


RECORDER = Recorder()


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic hashing bag-of-words in 16 dims (each word adds 1 to one slot)."""
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.lower().split():
            vector[hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % DIMS] += 1.0
        out.append(vector)
    return out


INDEX = {"dims": DIMS, "embed": embed, "fields": ["text"]}


@pytest.fixture(scope="module")
def client() -> Iterator[pymongo.MongoClient[Any]]:
    mongo: pymongo.MongoClient[Any] = pymongo.MongoClient(
        url(), event_listeners=[RECORDER], serverSelectionTimeoutMS=5000
    )
    try:
        mongo.admin.command("ping")
    except pymongo.errors.PyMongoError as exc:
        pytest.fail(
            f"MongoDB at {mask_url(MONGODB_URI)} is not answering ({exc}); run ./dev services up"
        )
    yield mongo
    mongo.drop_database(TEST_DB)
    mongo.close()


@pytest.fixture
def prefix(client: pymongo.MongoClient[Any]) -> Iterator[str]:
    name = unique_prefix("st")
    yield name
    client[TEST_DB].drop_collection(f"{name}_store")


def make(client: Any, prefix: str, **options: Any) -> MongoDBStore:
    store = MongoDBStore(client, db_name=TEST_DB, key_prefix=prefix, **options)
    store.setup()
    return store


def raw(client: Any, prefix: str) -> list[dict[str, Any]]:
    return list(client[TEST_DB][f"{prefix}_store"].find({}))


# -- round trip, created/updated ------------------------------------------------------------


def test_values_round_trip_exactly_whatever_their_keys(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    value = {
        "a.b": {"$gt": "", "%2E": 1, "": None},
        "$where": "sleep(1000)",
        "nested": {"list": [1, 2.5, {"x.y": True}, [None, "z"]], "ünï": "çødé ✓"},
        "big": 2**62,
        "neg": -0.5,
        "nul\x00key": "v",
    }
    store.put(("users", "u-1"), "key with . and $ and \x00", value)
    item = store.get(("users", "u-1"), "key with . and $ and \x00")
    assert item is not None
    assert item.value == value
    assert item.namespace == ("users", "u-1")
    assert store.get(("users", "u-1"), "other") is None
    # the queryable copy holds escaped keys only, never an operator or a dotted name
    (doc,) = raw(client, prefix)
    assert set(doc["doc"]) == {"a%2Eb", "%24where", "nested", "big", "neg", "nul%00key"}
    assert set(doc["doc"]["a%2Eb"]) == {"%24gt", "%252E", "%"}


def test_put_keeps_created_at_and_moves_updated_at(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    store.put(("docs",), "k", {"v": 1})
    first = store.get(("docs",), "k")
    store.put(("docs",), "k", {"v": 2})
    second = store.get(("docs",), "k")
    assert first is not None and second is not None
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    store.delete(("docs",), "k")
    assert store.get(("docs",), "k") is None
    store.put(("docs",), "k", {"v": 3})
    third = store.get(("docs",), "k")
    assert third is not None and third.created_at > first.created_at


def test_an_expired_item_keeps_created_at_until_it_is_swept(client: Any, prefix: str) -> None:
    # as PostgresStore: a put upserts by _id, so an expired item not yet removed (no TTL
    # monitor on FerretDB) keeps its created_at; once swept, a put starts a new one
    store = make(client, prefix)
    store.put(("docs",), "k", {"v": 1}, ttl=SHORT_TTL)
    before = raw(client, prefix)[0]["created_us"]
    time.sleep(0.15)
    assert store.get(("docs",), "k") is None
    store.put(("docs",), "k", {"v": 2})
    item = store.get(("docs",), "k")
    assert item is not None and item.value == {"v": 2}
    assert raw(client, prefix)[0]["created_us"] == before
    assert raw(client, prefix)[0]["expires_ms"] is None
    store.put(("docs",), "k", {"v": 3}, ttl=SHORT_TTL)
    time.sleep(0.15)
    assert store.sweep_ttl() == 1
    store.put(("docs",), "k", {"v": 4})
    assert raw(client, prefix)[0]["created_us"] > before


def test_bad_input_is_refused_before_anything_is_written(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    with pytest.raises(InvalidFilter):
        store.search(("docs",), filter={"$where": "sleep(1000)"})
    with pytest.raises(InvalidFilter):
        store.search(("docs",), filter={"a": {"$regex": ".*"}})
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidInput):
        store.put(("docs",), "", {"v": 1})
    with pytest.raises(PayloadTooLarge):
        store.batch(
            [
                PutOp(("docs",), "small", {"v": 1}),
                PutOp(("docs",), "huge", {"blob": "x" * (8 * 1024 * 1024)}),
            ]
        )
    assert raw(client, prefix) == []


# -- filters --------------------------------------------------------------------------------

ITEMS: dict[str, dict[str, Any]] = {
    "int": {"n": 3, "s": "b", "flag": True, "tags": ["x", "y"], "m": {"k": 1, "z": "q"}},
    "float": {"n": 3.0, "s": "a", "flag": False, "tags": ["y"], "m": {"k": 2}},
    "big": {"n": 10, "s": "é", "flag": None, "tags": [], "m": {"k": "1"}},
    "bool": {"n": True, "s": 3, "m": {"k": [1]}},
    "str": {"n": "3", "s": "", "m": {"z": "q", "k": 1}},
    "none": {"n": None, "m": None},
    "list": {"n": [3], "s": ["b"], "m": [{"k": 1}]},
    "nested": {"n": {"$gt": ""}, "m": {"k": {"deep": 1}}, "a.b": 1, "a": {"b": 2}},
    "empty": {},
}

FILTERS: list[dict[str, Any]] = [
    {"n": 3},
    {"n": 3.0},
    {"n": True},
    {"n": "3"},
    {"n": None},
    {"n": [3]},
    {"n": {"$eq": None}},
    {"n": {"$ne": None}},
    {"n": {"$ne": 3}},
    {"n": {"$gt": 2}},
    {"n": {"$gte": 3, "$lt": 10}},
    {"n": {"$lte": 3}},
    {"n": {"$gt": ""}},
    {"n": {"$eq": {"$gt": ""}}},
    {"s": {"$gt": "a"}},
    {"s": {"$lte": "b"}},
    {"s": {"$gte": ""}},
    {"flag": False},
    {"flag": {"$ne": True}},
    {"tags": ["x", "y"]},
    {"tags": "x"},
    {"tags": []},
    {"m": {"k": 1}},
    {"m.k": 1},
    {"m.k": {"$gt": 1}},
    {"m": {"$eq": {"k": 1, "z": "q"}}},
    {"m": {"$eq": {"z": "q", "k": 1.0}}},
    {"m.k.deep": 1},
    {"m.k": [1]},
    {"m.k": None},
    {"a.b": 1},
    {"a.b": 2},
    {"a": {"b": 2}},
    {"n": 3, "s": "b"},
    {"missing": None},
    {"missing": {"$ne": None}},
    {"n": 1},
    {"flag": 1},
    {"tags": {"$ne": ["y"]}},
    {"m": {"$ne": {"k": 2}}},
    {"m": {"$eq": {"k": [1.0]}}},
    {"s": {"$gt": "b"}},
    {"n": {"$lt": 2**63}},
    {"n": {"$gte": -0.0}},
]


@pytest.mark.parametrize("flt", FILTERS, ids=[repr(f) for f in FILTERS])
def test_filters_run_on_the_server_with_the_contract_semantics(
    client: Any, prefix: str, flt: dict[str, Any]
) -> None:
    store = make(client, prefix)
    store.batch([PutOp(("f",), key, value) for key, value in ITEMS.items()])
    conditions = compile_filter(flt)
    expected = {k for k, v in ITEMS.items() if matches(v, conditions)}
    with RECORDER.count() as names:
        found = store.search(("f",), filter=flt, limit=100)
    assert {item.key for item in found} == expected
    assert names == ["find"]  # on the server: one query, no client-side pass


def test_filter_operators_are_data_in_values(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    store.put(("f",), "trap", {"a": {"$gt": ""}, "$where": "1"})
    store.put(("f",), "plain", {"a": "text"})
    assert [i.key for i in store.search(("f",), filter={"a": {"$gt": ""}})] == ["plain"]
    assert [i.key for i in store.search(("f",), filter={"a": {"$eq": {"$gt": ""}}})] == ["trap"]
    with pytest.raises(InvalidFilter):
        store.search(("f",), filter={"$where": "1"})


def test_escaping_is_unambiguous() -> None:
    keys = ["", "%", "%25", ".", "%2E", "$", "%24", "a.b", "a%2Eb", "\x00", "%00", "$x", "x$"]
    assert len({escape_key(k) for k in keys}) == len(keys)
    assert not any("." in escape_key(k) or "$" in escape_key(k) for k in keys)


# -- search order, prefix, list_namespaces --------------------------------------------------


def test_search_without_query_pages_newest_first_on_the_server(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    for i in range(7):
        store.put(("docs", "p"), f"k{i}", {"i": i})
    store.put(("docs", "p"), "k2", {"i": 2, "again": True})  # now the newest
    keys = [i.key for i in store.search(("docs",), limit=100)]
    assert keys == ["k2", "k6", "k5", "k4", "k3", "k1", "k0"]
    with RECORDER.count() as names:
        page = store.search(("docs",), offset=2, limit=3)
    assert [i.key for i in page] == ["k5", "k4", "k3"]
    assert names == ["find"]
    assert store.search(("docs",), limit=0) == []


def test_prefix_search_is_label_wise(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("a", "bc"), ("ab",), ("b", "a")]:
        store.put(ns, "k", {"ns": list(ns)})
    found = {tuple(i.namespace) for i in store.search(("a", "b"), limit=100)}
    assert found == {("a", "b"), ("a", "b", "c")}
    found = {tuple(i.namespace) for i in store.search(("a",), limit=100)}
    assert found == {("a",), ("a", "b"), ("a", "b", "c"), ("a", "bc")}
    assert len(store.search((), limit=100)) == 6


def test_list_namespaces(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    for ns in [("users", "1", "memories"), ("users", "2", "memories"), ("users", "2", "prefs")]:
        store.put(ns, "k", {"v": 1})
    store.put(("teams", "x"), "k", {"v": 1})
    with RECORDER.count() as names:
        listed = store.list_namespaces(prefix=("users",))
    assert names == ["distinct"]
    assert listed == [
        ("users", "1", "memories"),
        ("users", "2", "memories"),
        ("users", "2", "prefs"),
    ]
    assert store.list_namespaces(suffix=("prefs",)) == [("users", "2", "prefs")]
    assert store.list_namespaces(prefix=("users", "*", "memories")) == [
        ("users", "1", "memories"),
        ("users", "2", "memories"),
    ]
    assert store.list_namespaces(max_depth=1) == [("teams",), ("users",)]
    assert store.list_namespaces(limit=2, offset=1) == [
        ("users", "1", "memories"),
        ("users", "2", "memories"),
    ]


# -- TTL ------------------------------------------------------------------------------------


def test_expired_items_are_hidden_before_any_sweep_and_sweep_counts(
    client: Any, prefix: str
) -> None:
    store = make(client, prefix)
    store.put(("t",), "short", {"v": 1}, ttl=SHORT_TTL)
    store.put(("t", "x"), "short2", {"v": 1}, ttl=SHORT_TTL)
    store.put(("t",), "long", {"v": 2}, ttl=60)
    store.put(("t",), "forever", {"v": 3})
    time.sleep(0.15)
    assert store.get(("t",), "short") is None
    assert {i.key for i in store.search(("t",))} == {"long", "forever"}
    assert store.list_namespaces() == [("t",)]
    assert len(raw(client, prefix)) == 4  # FerretDB keeps them: no TTL monitor
    assert store.sweep_ttl() == 2
    assert {d["key"] for d in raw(client, prefix)} == {"long", "forever"}
    assert store.sweep_ttl() == 0


def test_reads_refresh_the_ttl_of_items_that_have_one(client: Any, prefix: str) -> None:
    store = make(client, prefix, ttl={"default_ttl": 1})
    store.put(("t",), "a", {"v": 1})
    store.put(("t",), "b", {"v": 1}, ttl=None)
    expiry = {d["key"]: d["expires_ms"] for d in raw(client, prefix)}
    assert expiry["b"] is None and expiry["a"] is not None
    time.sleep(0.05)
    store.get(("t",), "a", refresh_ttl=False)
    assert {d["key"]: d["expires_ms"] for d in raw(client, prefix)} == expiry
    with RECORDER.count() as names:
        store.get(("t",), "a")
    assert names == ["find", "update"]
    refreshed = {d["key"]: d["expires_ms"] for d in raw(client, prefix)}
    assert refreshed["a"] > expiry["a"] and refreshed["b"] is None
    time.sleep(0.05)
    with RECORDER.count() as names:
        store.search(("t",))
    assert names == ["find", "update"]
    assert raw(client, prefix)[0]["expires_ms"] > refreshed["a"]
    expires_at = client[TEST_DB][f"{prefix}_store"].find_one({"key": "a"})["expires_at"]
    assert abs(expires_at.timestamp() * 1000 - raw(client, prefix)[0]["expires_ms"]) < 1


# -- semantic search ------------------------------------------------------------------------


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_semantic_search_ranks_by_best_vector_with_filters(client: Any, prefix: str) -> None:
    store = make(client, prefix, index=INDEX)
    texts = {
        "pizza": "I love pizza and pasta",
        "tennis": "tennis on sunday morning",
        "both": "pizza after tennis",
    }
    for key, text in texts.items():
        store.put(("m",), key, {"text": text, "kind": "sport" if key == "tennis" else "food"})
    store.put(("m",), "plain", {"text": "pizza pasta"}, index=False)
    query = embed(["pizza pasta"])[0]
    scores = {k: cosine(query, embed([t])[0]) for k, t in texts.items()}
    expected = sorted(texts, key=lambda k: -scores[k])
    with RECORDER.count() as names:
        found = store.search(("m",), query="pizza pasta")
    assert names == ["find"]
    assert [i.key for i in found] == expected  # "plain" is not embedded: no query match
    for item in found:
        assert item.score == pytest.approx(scores[item.key], rel=1e-5)
    sport = store.search(("m",), query="pizza", filter={"kind": "sport"})
    assert [i.key for i in sport] == ["tennis"]
    page = store.search(("m",), query="pizza pasta", offset=1, limit=1)
    assert [i.key for i in page] == expected[1:2]
    # without a query the unembedded item is listed as usual
    assert len(store.search(("m",))) == 4


def test_unchanged_texts_are_not_embedded_again(client: Any, prefix: str) -> None:
    calls: list[list[str]] = []

    def counting(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return embed(texts)

    store = make(client, prefix, index={**INDEX, "embed": counting})
    store.put(("m",), "k", {"text": "hello world", "n": 1})
    store.put(("m",), "k", {"text": "hello world", "n": 2})
    assert calls == [["hello world"]]
    assert store.search(("m",), query="hello")[0].value == {"text": "hello world", "n": 2}


# -- round trips ----------------------------------------------------------------------------


def test_a_put_is_one_command_and_every_operation_at_most_two(client: Any, prefix: str) -> None:
    store = make(client, prefix, ttl={"default_ttl": 5})
    puts = [PutOp(("c", str(i % 3)), f"k{i}", {"i": i, "text": f"t{i}"}, ttl=5) for i in range(30)]
    with RECORDER.count() as names:
        store.batch(puts)
    assert names == ["update"]
    with RECORDER.count() as names:
        store.put(("c", "0"), "k0", {"i": 0})
    assert names == ["update"]
    with RECORDER.count() as names:
        got = store.batch([GetOp(("c", str(i % 3)), f"k{i}") for i in range(30)])
    assert all(got) and names == ["find", "update"]
    with RECORDER.count() as names:
        store.batch([SearchOp(("c",), filter={"i": {"$gte": 10}}, limit=5)])
    assert names == ["find", "update"]
    with RECORDER.count() as names:
        store.list_namespaces(prefix=("c",))
    assert names == ["distinct"]
    with RECORDER.count() as names:
        store.batch([PutOp(("c", "0"), "k0", None), PutOp(("c", "1"), "k1", None)])
    assert names == ["delete"]
    with RECORDER.count() as names:
        assert store.sweep_ttl() == 0
    assert names == ["delete"]


# -- setup, connect, errors, async ----------------------------------------------------------


def test_setup_is_idempotent_and_creates_the_indexes(client: Any, prefix: str) -> None:
    store = make(client, prefix)
    store.setup()
    names = {ix["name"] for ix in client[TEST_DB][f"{prefix}_store"].list_indexes()}
    assert {"gk_ns_key", "gk_ns_updated"} <= names
    assert ("gk_expires_at" in names) or ("gk_expires_at_plain" in names)
    assert store.port.ttl_index is ("gk_expires_at" in names)
    assert [s["name"] for s in MongoDBStore.schema("x")] == [
        "gk_ns_key",
        "gk_ns_updated",
        "gk_expires_at",
    ]
    assert store.schema()[0]["collection"] == f"{prefix}_store"


def test_connect_store_picks_the_mongodb_store(client: Any, prefix: str) -> None:
    assert "db_name" in accepted_options(MongoDBStore, "store")
    with graphkeep.connect_store(url(), key_prefix=prefix) as store:
        assert isinstance(store, MongoDBStore)
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k") is not None
    with pytest.raises(ConfigurationError):
        with graphkeep.connect_store(url(), key_prefix=prefix, sharded=True):
            pass
    with pytest.raises(ConfigurationError):
        MongoDBStore(pymongo.AsyncMongoClient(url()), db_name=TEST_DB)


def test_an_unreachable_server_raises_storage_unavailable() -> None:
    with pytest.raises(StorageUnavailable):
        with MongoDBStore.from_url("mongodb://127.0.0.1:1/x?serverSelectionTimeoutMS=300") as store:
            store.get(("a",), "k")


async def test_async_store_on_the_native_async_client(client: Any, prefix: str) -> None:
    async with graphkeep.aconnect_store(url(), key_prefix=prefix, index=INDEX) as store:
        assert isinstance(store, AsyncMongoDBStore)
        await store.aput(("a", "b"), "k1", {"text": "pizza night", "n": 1})
        await store.aput(("a", "c"), "k2", {"text": "tennis match", "n": 2}, ttl=SHORT_TTL)
        item = await store.aget(("a", "b"), "k1")
        assert item is not None and item.value == {"text": "pizza night", "n": 1}
        assert [i.key for i in await store.asearch(("a",), filter={"n": {"$gte": 1}})] == [
            "k2",
            "k1",
        ]
        assert (await store.asearch(("a",), query="pizza"))[0].key == "k1"
        await asyncio.sleep(0.15)
        assert await store.alist_namespaces(prefix=("a",)) == [("a", "b")]
        assert await store.sweep_ttl() == 1
        await store.adelete(("a", "b"), "k1")
        assert await store.aget(("a", "b"), "k1") is None
    async with AsyncMongoDBStore.from_url(url(), key_prefix=prefix, setup=False) as store:
        assert await store.asearch(("a",)) == []
