"""DynamoDB memory store (``BaseStore``) on a real DynamoDB endpoint (moto_server over HTTP).

One table for the module (created by the store's own ``setup``, deleted at the end); every
test works under its own ``key_prefix``, so partitions and the registry are private to it.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

import graphkeep
from graphkeep.backends.dynamodb import DynamoDBSaver
from graphkeep.backends.dynamodb.store import AsyncDynamoDBStore, DynamoDBStore
from graphkeep.errors import ConfigurationError, InvalidFilter, InvalidInput
from graphkeep.store import shells as memory
from graphkeep.store.filters import compile_filter, matches
from graphkeep.store.values import decode_value, encode_value

from .conftest import unique_prefix
from .test_dynamodb import ENDPOINT, REGION, Calls, reachable

pytestmark = pytest.mark.dynamodb


@pytest.fixture(scope="module")
def table() -> Iterator[str]:
    if not reachable(ENDPOINT):
        pytest.fail(f"no DynamoDB endpoint answers at {ENDPOINT}; run ./dev services up")
    name = f"gk_store_{uuid.uuid4().hex[:10]}"
    with DynamoDBStore.from_table(name, REGION, ENDPOINT) as store:  # creates the table
        yield name
        store.client.delete_table(TableName=name)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    made = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    yield made
    made.close()


@pytest.fixture
def store(table: str, client: Any) -> DynamoDBStore:
    return DynamoDBStore(client, table, key_prefix=unique_prefix("mem"))


def _url(table: str) -> str:
    return f"dynamodb://{table}?region={REGION}&endpoint_url={ENDPOINT}"


def _keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(i.namespace), i.key) for i in items]


def _embed(texts: list[str]) -> list[list[float]]:
    """A tiny deterministic embedding: how often a text says 'cat', 'dog' and 'fish'."""
    return [[t.count("cat") + 0.01, t.count("dog") + 0.01, t.count("fish") + 0.01] for t in texts]


def _partition_items(client: Any, table: str, store: DynamoDBStore) -> list[dict[str, Any]]:
    port = store.port
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items += [i for i in page["Items"] if i["pk"]["S"].startswith(port.prefix + "#m1")]  # type: ignore[attr-defined]
    return items


# --------------------------------------------------------------------------- round trips


def test_put_get_round_trip_keeps_created_at_and_moves_updated_at(store: DynamoDBStore) -> None:
    value = {"text": "héllo #1", "n": 1.5, "nested": {"ok": True, "list": [1, "a", None]}}
    store.put(("users", "u#1", "prefs"), "k:1 #", value)
    first = store.get(("users", "u#1", "prefs"), "k:1 #")
    assert first is not None and first.value == value
    assert tuple(first.namespace) == ("users", "u#1", "prefs")
    assert first.created_at == first.updated_at
    store.put(("users", "u#1", "prefs"), "k:1 #", {"text": "changed"})
    second = store.get(("users", "u#1", "prefs"), "k:1 #")
    assert second is not None and second.value == {"text": "changed"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.delete(("users", "u#1", "prefs"), "k:1 #")
    assert store.get(("users", "u#1", "prefs"), "k:1 #") is None
    store.put(("users", "u#1", "prefs"), "k:1 #", {"text": "again"})
    third = store.get(("users", "u#1", "prefs"), "k:1 #")
    assert third is not None and third.created_at > first.created_at
    assert store.get(("users",), "missing") is None


def test_batch_reads_see_the_store_before_the_batch_puts(store: DynamoDBStore) -> None:
    store.put(("a",), "x", {"v": 1})
    results = store.batch(
        [
            PutOp(("a",), "x", {"v": 2}),
            GetOp(("a",), "x"),
            SearchOp(("a",)),
            PutOp(("a", "b", "c"), "y", {"v": 3}),
        ]
    )
    assert results[1] is not None and results[1].value == {"v": 1}
    assert [i.value for i in results[2]] == [{"v": 1}]
    assert store.get(("a",), "x").value == {"v": 2}  # type: ignore[union-attr]
    assert store.get(("a", "b", "c"), "y") is not None


def test_bad_input_is_refused_before_anything_is_written(
    store: DynamoDBStore, client: Any, table: str
) -> None:
    deep = ("#",) * 400  # 799 bytes of namespace, 1.2 KB once escaped: too long for a sort key
    with pytest.raises(InvalidInput, match="too long"):
        store.put(deep, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("bad.label",), "k", {"v": 1})
    with pytest.raises(InvalidInput):
        store.put(("ok",), "k", "not a dict")  # type: ignore[arg-type]
    assert _partition_items(client, table, store) == []
    assert store.get(deep, "k") is None and store.search(deep) == []
    with pytest.raises(ConfigurationError):
        DynamoDBStore(client, table, shard_labels=0)


# --------------------------------------------------------------------------- search


def test_filters_with_operators(store: DynamoDBStore) -> None:
    ns = ("docs", "team")
    store.put(ns, "a", {"kind": "note", "score": 5, "meta": {"lang": "en"}, "tags": ["x"]})
    store.put(ns, "b", {"kind": "todo", "score": 9.5, "meta": {"lang": "fr"}})
    store.put(ns, "c", {"kind": "note", "score": "high", "flag": None})
    store.put(ns, "d", {"kind": "note", "score": True})

    def found(**filter: Any) -> set[str]:
        return {i.key for i in store.search(("docs",), filter=filter, limit=50)}

    assert found(kind="note") == {"a", "c", "d"}
    assert found(kind={"$ne": "note"}) == {"b"}
    assert found(score={"$gt": 5}) == {"b"}
    assert found(score={"$gte": 5}) == {"a", "b"}
    assert found(score={"$lt": 9.5}) == {"a"}
    assert found(score={"$lte": "high"}) == {"c"}
    assert found(score={"$eq": 1}) == set()  # True is not 1
    assert found(meta={"lang": "fr"}) == {"b"}
    assert found(**{"meta.lang": "en"}) == {"a"}
    assert found(flag=None) == {"a", "b", "c", "d"}  # missing or null
    assert found(tags=["x"]) == {"a"}
    assert found(kind="note", score={"$gte": 5}) == {"a"}


class _Level(int, enum.Enum):  # its text is "_Level.ONE", its JSON 1
    ONE = 1


#: values whose top-level scalars DynamoDB can and cannot compare exactly as the client does
FILTER_VALUES: dict[str, dict[Any, Any]] = {
    "int": {"n": 1},
    "float": {"n": 1.0},
    "bool": {"n": True},
    "text": {"n": "1"},
    "past53": {"n": 2**53 + 1},
    "past64": {"n": 2**64 + 1},
    "tiny": {"n": 1e-300},
    "huge": {"n": 1e200},
    "negative": {"n": -5},
    "zero": {"n": -0.0},
    "tenth": {"n": 0.1},
    "float53": {"n": 2.0**53},
    "null": {"n": None},
    "absent": {"t": "b"},
    "list": {"n": [1]},
    "object": {"n": {"a": 1}},
    "long": {"n": "x" * 300, "t": "b"},
    "accent": {"n": "é"},
    "z": {"n": "z"},
    "emoji": {"n": "\U0001f600"},
    "empty": {"n": ""},
    "intkey": {1: "a", "n": 2},
    "budget": {**{f"k{i}": "y" * 200 for i in range(20)}, "n": 3},
    "dotted": {"a.b": 1, "a": {"b": 2}},
    "old": {"n": 7},
    "enum": {"n": _Level.ONE},
    "longkey": {"k" * 2000: 1, "n": 5},
}
FILTER_OPERANDS: list[Any] = [
    1, 1.0, 0, -0.0, True, False, "1", "", "é", "y", "z", 2**53, 2**53 + 1, 2**64, 1e-300,
    0.1, 1e200, 7, -5, None, [1], {"a": 1}, "x" * 300, float("nan"), float("inf"),
]  # fmt: skip


def test_server_filter_returns_exactly_what_the_client_check_accepts(
    store: DynamoDBStore, client: Any, table: str
) -> None:
    """Top-level scalars are filtered by DynamoDB (``fa``), and every search still returns
    exactly the items the client's JSON check accepts, for every type and operator: numbers
    DynamoDB cannot compare exactly, long strings, keys past the budget, non-string keys and
    items written before ``fa`` (here: an item whose ``fa`` was removed) all pass the server."""
    ns = ("filters", "one")
    for name, value in FILTER_VALUES.items():
        store.put(ns, name, value)
    old = store.port.address(ns, "old")
    old_key = {"pk": {"S": old.pk}, "sk": {"S": old.sk}}
    client.update_item(TableName=table, Key=old_key, UpdateExpression="REMOVE fa")
    stored = {name: decode_value(encode_value(value)) for name, value in FILTER_VALUES.items()}
    returned: list[int] = []
    client.meta.events.register(
        "after-call.dynamodb.Query", lambda parsed, **_: returned.append(parsed["Count"])
    )
    checked = 0
    for path in ("n", "t", "k3", "k15", "a.b", "missing"):
        for op in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
            for operand in FILTER_OPERANDS:
                filter = {path: {op: operand}}
                try:
                    conditions = compile_filter(filter)
                except InvalidFilter:
                    continue
                want = {k for k, v in stored.items() if matches(v, conditions)}
                got = {i.key for i in store.search(ns, filter=filter, limit=100)}
                assert got == want, (filter, got ^ want)
                checked += 1
    assert checked > 400
    for filter in (  # several conditions: each clause on the server, all of them in the client
        {"n": {"$gte": 0, "$lt": 3}},
        {"n": {"$gt": "a", "$ne": "z"}},
        {"n": 1, "t": "b"},
        {"t": "b", "n": {"$ne": None}},
        {"n": {"$lte": 7}, "a.b": 1, "k3": "y" * 200},
        {"k" * 2000: 1},
        {"k" * 2000: {"$gt": 0}, "n": 5},
    ):
        want = {k for k, v in stored.items() if matches(v, compile_filter(filter))}
        assert {i.key for i in store.search(ns, filter=filter, limit=100)} == want, filter
    # the server left items out: an equality on a short text returns what may match only
    returned.clear()
    assert [i.key for i in store.search(ns, filter={"n": "z"}, limit=100)] == ["z"]
    # z, three without ``fa`` (intkey: a key that is not a string; longkey: a key over 1 KB;
    # old) and five whose "n" is left out of ``fa`` (past53, past64, tiny, huge: numbers
    # DynamoDB cannot compare exactly; long: a text over 256 bytes)
    assert returned == [9]
    returned.clear()
    assert {i.key for i in store.search(ns, filter={"n": {"$gt": 1}}, limit=100)} == {
        "past53", "past64", "huge", "float53", "intkey", "budget", "old", "longkey"
    }  # fmt: skip
    assert returned == [10]  # those 8, and tiny and long (left out), refused by the client
    items = _partition_items(client, table, store)
    native = next(i for i in items if i["sk"]["S"].endswith("#int"))
    assert native["fa"] == {"M": {"n": {"N": "1"}}}
    long = next(i for i in items if i["sk"]["S"].endswith("#long"))
    assert long["fa"] == {"M": {"n": {"B": b""}, "t": {"S": "b"}}}  # "n" left out


def test_prefix_search_within_one_partition_and_across_partitions(store: DynamoDBStore) -> None:
    store.put(("users", "u1"), "top", {"i": 1})
    store.put(("users", "u1", "mem"), "a", {"i": 2})
    store.put(("users", "u1", "mem", "deep"), "b", {"i": 3})
    store.put(("users", "u10", "mem"), "c", {"i": 4})
    store.put(("users",), "root", {"i": 5})
    store.put(("usersx", "u1"), "other", {"i": 6})
    # within one partition (prefix has >= shard_labels labels): label boundaries hold
    assert _keys(store.search(("users", "u1"))) == [
        (("users", "u1", "mem", "deep"), "b"),
        (("users", "u1", "mem"), "a"),
        (("users", "u1"), "top"),
    ]
    assert _keys(store.search(("users", "u1", "mem"))) == [
        (("users", "u1", "mem", "deep"), "b"),
        (("users", "u1", "mem"), "a"),
    ]
    assert _keys(store.search(("users", "u1", "me"))) == []
    # across partitions (registry path), newest first, paged
    everything = store.search(("users",), limit=10)
    assert [i.value["i"] for i in everything] == [5, 4, 3, 2, 1]
    assert [i.value["i"] for i in store.search(("users",), offset=1, limit=2)] == [4, 3]
    assert [i.value["i"] for i in store.search((), limit=3)] == [6, 5, 4]
    assert [i.value["i"] for i in store.search(("users",), filter={"i": {"$lt": 3}})] == [2, 1]


def test_prefix_search_with_one_shard_label(table: str, client: Any) -> None:
    store = DynamoDBStore(client, table, key_prefix=unique_prefix("s1"), shard_labels=1)
    store.put(("a", "b"), "k1", {"i": 1})
    store.put(("a",), "k2", {"i": 2})
    store.put(("ab",), "k3", {"i": 3})
    assert _keys(store.search(("a",))) == [(("a",), "k2"), (("a", "b"), "k1")]
    assert _keys(store.search(("a", "b"))) == [(("a", "b"), "k1")]
    assert len(store.search(())) == 3


def test_list_namespaces(store: DynamoDBStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "x"), ("z",), ("a", "b", "c")]:
        store.put(ns, "k", {"v": 1})
    store.put(("a", "x"), "k2", {"v": 2})
    assert store.list_namespaces() == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "x"), ("z",)]
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "x")]
    assert store.list_namespaces(suffix=("c",)) == [("a", "b", "c")]
    assert store.list_namespaces(prefix=("a", "*", "d")) == [("a", "b", "d", "e")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "x")]
    store.delete(("a", "x"), "k")
    store.delete(("a", "x"), "k2")
    assert ("a", "x") not in store.list_namespaces()


# --------------------------------------------------------------------------- TTL


class Clock:
    """The store's millisecond clock, moved forward by hand (moto is shared and its latency
    varies: real sub-second TTLs would make these tests flaky)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset_ms = 0
        real = memory.now_ms
        monkeypatch.setattr(memory, "now_ms", lambda: real() + self.offset_ms)

    def advance(self, seconds: float) -> None:
        self.offset_ms += int(seconds * 1000)


def test_ttl_hides_refreshes_and_sweeps(
    table: str, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    store = DynamoDBStore(
        client, table, key_prefix=unique_prefix("ttl"), ttl={"refresh_on_read": False}
    )
    store.put(("t", "x"), "short", {"v": 1}, ttl=1)
    store.put(("t", "x"), "kept", {"v": 2}, ttl=1)
    store.put(("t", "y"), "forever", {"v": 3})
    store.put(("t", "y"), "big", {"v": base64.b64encode(os.urandom(450_000)).decode()}, ttl=1)
    raw = {i["sk"]["S"]: i for i in _partition_items(client, table, store)}
    short = next(i for sk, i in raw.items() if sk.endswith("#short"))
    assert int(short["exp"]["N"]) == -(-int(short["xm"]["N"]) // 1000)  # native TTL attribute
    clock.advance(30)
    assert store.get(("t", "x"), "kept", refresh_ttl=True) is not None  # re-armed for 60 s
    clock.advance(40)
    assert store.get(("t", "x"), "short") is None  # expired, not yet reaped
    assert store.get(("t", "x"), "kept") is not None
    assert _keys(store.search(("t",))) == [(("t", "y"), "forever"), (("t", "x"), "kept")]
    assert ("t", "x") in store.list_namespaces()
    # a put over an expired item starts a new life: created_at is reset
    before = time.time()
    store.put(("t", "x"), "short", {"v": 4})
    renewed = store.get(("t", "x"), "short")
    assert renewed is not None and renewed.created_at.timestamp() >= before - 0.01
    clock.advance(30)
    assert store.sweep_ttl() == 2  # "kept" and "big" (with its chunks)
    left = [i["sk"]["S"] for i in _partition_items(client, table, store)]
    assert not [sk for sk in left if sk.startswith("k#")]
    assert sorted(sk.rsplit("#", 1)[-1] for sk in left if sk.startswith("i#")) == [
        "forever",
        "short",
    ]


def test_default_ttl_and_refresh_on_search(
    table: str, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    store = DynamoDBStore(client, table, key_prefix=unique_prefix("ttl2"), ttl={"default_ttl": 1})
    store.put(("n",), "a", {"v": 1})
    clock.advance(40)
    assert len(store.search(("n",))) == 1  # refresh_on_read defaults to True
    clock.advance(40)
    assert store.get(("n",), "a", refresh_ttl=False) is not None
    clock.advance(30)
    assert store.get(("n",), "a") is None


# --------------------------------------------------------------------------- semantic search


def test_semantic_search_ranks_by_best_vector(table: str, client: Any) -> None:
    index = {"dims": 3, "embed": _embed, "fields": ["text", "extra"]}
    prefix = unique_prefix("vec")
    store = DynamoDBStore(client, table, key_prefix=prefix, index=index)
    store.put(("pets", "a"), "c", {"text": "cat cat cat"})
    store.put(("pets", "b"), "d", {"text": "dog", "extra": "fish fish"})
    store.put(("pets", "b"), "f", {"text": "fish"})
    store.put(("pets", "b"), "plain", {"text": "dog dog"}, index=False)
    found = store.search(("pets",), query="fish")
    assert [i.key for i in found] == ["f", "d", "c"]  # "plain" has no embedding
    assert found[0].score is not None and found[0].score > 0.99
    assert [i.key for i in store.search(("pets",), query="cat", limit=1)] == ["c"]
    assert [i.key for i in store.search(("pets", "b"), query="dog", filter={"text": "dog"})] == [
        "d"
    ]
    # the stored vectors come back with the item: an unchanged text is not embedded again
    seen: list[str] = []

    def counting(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return _embed(texts)

    again = DynamoDBStore(client, table, key_prefix=prefix, index={**index, "embed": counting})
    again.put(("pets", "a"), "c", {"text": "cat cat cat", "extra": "dog"})
    assert seen == ["dog"]


# --------------------------------------------------------------------------- large values


def test_value_over_400_kb_is_chunked_updated_and_deleted(
    store: DynamoDBStore, client: Any, table: str
) -> None:
    big = {"blob": base64.b64encode(os.urandom(450_000)).decode()}  # 600 KB, 450 KB zipped
    store.put(("files",), "big", big)
    assert store.get(("files",), "big").value == big  # type: ignore[union-attr]
    assert store.search(("files",))[0].value == big
    assert store.search(("files",), filter={"blob": big["blob"]})[0].key == "big"
    chunks = [i for i in _partition_items(client, table, store) if i["sk"]["S"].startswith("k#")]
    assert len(chunks) == 2
    store.put(("files",), "big", {"small": True})  # old chunks go
    assert store.get(("files",), "big").value == {"small": True}  # type: ignore[union-attr]
    assert not [i for i in _partition_items(client, table, store) if i["sk"]["S"][0] == "k"]
    store.put(("files",), "big", big)
    store.delete(("files",), "big")
    left = sorted(i["sk"]["S"][:2] for i in _partition_items(client, table, store))
    assert left == ["n#", "p#"]  # the namespace list's entry and the partition's registry item


# --------------------------------------------------------------------------- costs


def test_api_calls_per_operation(table: str) -> None:
    made_client = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    calls = Calls(made_client)
    store = DynamoDBStore(made_client, table, key_prefix=unique_prefix("cost"))
    store.setup()
    with calls.count() as made:  # new namespace: the item, its partition and list entries
        store.put(("u", "1", "m"), "a", {"v": 1})
    assert made == ["TransactWriteItems"]
    with calls.count() as made:  # namespace known to this process: one UpdateItem
        store.put(("u", "1", "m"), "b", {"v": 2})
    assert made == ["UpdateItem"]
    with calls.count() as made:
        store.get(("u", "1", "m"), "a")
    assert made == ["GetItem"]
    with calls.count() as made:  # 150 puts in two partitions: two transactions of <= 100
        store.batch([PutOp(("u", str(i % 2), "m"), f"k{i}", {"v": i}) for i in range(150)])
    assert made == ["TransactWriteItems", "TransactWriteItems"]
    with calls.count() as made:  # one partition: one Query
        assert len(store.search(("u", "1"), limit=5)) == 5
    assert made == ["Query"]
    with calls.count() as made:  # shorter prefix: the registry, then each partition
        store.search(("u",))
    assert made == ["Query", "Query", "Query"]
    with calls.count() as made:  # the namespace list; a batch split over two transactions
        # marked both entries, so each namespace is checked for a live item
        assert store.list_namespaces(prefix=("u",)) == [("u", "0", "m"), ("u", "1", "m")]
    assert made == ["Query", "Query", "Query"]
    with calls.count() as made:  # entry already marked: the delete alone
        store.delete(("u", "1", "m"), "a")
    assert made == ["DeleteItem"]
    with calls.count() as made:  # a namespace written by plain puts only: one Query for all
        for user in range(5):
            store.put(("v", str(user), "m"), "a", {"v": user})
        assert len(store.list_namespaces(prefix=("v",))) == 5
    assert made == ["TransactWriteItems"] * 5 + ["Query"]
    with calls.count() as made:  # the first delete there marks the entry, in one transaction
        store.delete(("v", "0", "m"), "a")
        assert store.list_namespaces(prefix=("v",)) == [("v", str(u), "m") for u in range(1, 5)]
    assert made == ["TransactWriteItems", "Query", "Query"]
    made_client.close()


def test_namespace_list_is_exact_across_processes_and_long_namespaces(
    table: str, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    prefix = unique_prefix("nsl")
    one = DynamoDBStore(client, table, key_prefix=prefix)
    one.setup()
    other = DynamoDBStore(client, table, key_prefix=prefix)  # another process: its own cache
    one.put(("x", "1"), "k", {"v": 1})
    one.put(("x", "2"), "k", {"v": 2})
    other.delete(("x", "1"), "k")  # the last item of ("x", "1"), by a writer `one` never sees
    other.put(("x", "2"), "t", {"v": 3}, ttl=1)
    other.delete(("x", "2"), "k")  # ("x", "2") now holds an item with a TTL only
    assert one.list_namespaces() == [("x", "2")]
    clock.advance(61)
    assert one.list_namespaces() == []  # expired, not yet swept
    # labels too long for one sort key: the entry keeps the leading labels and a digest
    long = tuple(f"{label}{'L' * 185}" for label in "abcde")
    one.put(long, "k", {"v": 4})
    one.put((*long[:4], "short"), "k", {"v": 5})
    names_pk = one.port.names_pk  # type: ignore[attr-defined]
    entries = [
        i["sk"]["S"] for i in _partition_items(client, table, one) if i["pk"]["S"] == names_pk
    ]
    assert len([sk for sk in entries if "$~" in sk]) == 1
    assert one.list_namespaces(prefix=long[:1]) == [long, (*long[:4], "short")]
    assert one.list_namespaces(prefix=long) == [long]  # past the kept labels: the partitions
    assert one.list_namespaces(prefix=long[:2], max_depth=3) == [long[:3]]


def test_setup_lists_the_namespaces_of_a_table_written_before_the_list(
    table: str, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    prefix = unique_prefix("old")
    writer = DynamoDBStore(client, table, key_prefix=prefix)
    writer.put(("a", "b", "c"), "k", {"v": 1})
    writer.put(("a", "x"), "k", {"v": 2})
    writer.put(("z",), "gone", {"v": 3}, ttl=1)
    # what an earlier graphkeep left: items and partitions, no namespace list
    names_pk = writer.port.names_pk  # type: ignore[attr-defined]
    for item in _partition_items(client, table, writer):
        if item["pk"]["S"] == names_pk:
            client.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})
    clock.advance(61)
    before = DynamoDBStore(client, table, key_prefix=prefix)  # not set up: the partitions
    assert before.list_namespaces() == [("a", "b", "c"), ("a", "x")]
    after = DynamoDBStore(client, table, key_prefix=prefix)
    after.setup()
    entries = [i for i in _partition_items(client, table, after) if i["pk"]["S"] == names_pk]
    assert sorted(i["sk"]["S"] for i in entries) == ["n#a#b#c#", "n#a#x#", "n#z#", "v#1"]
    assert all(i["vf"] == {"BOOL": True} for i in entries if i["sk"]["S"] != "v#1")
    calls = Calls(client)
    with calls.count() as made:
        assert after.list_namespaces() == [("a", "b", "c"), ("a", "x")]
    assert made == ["Query", "Query", "Query", "Query"]  # the list, then each marked entry
    again = DynamoDBStore(client, table, key_prefix=prefix)
    again.setup()  # already complete: nothing is rewritten
    assert again.list_namespaces(prefix=("a",)) == [("a", "b", "c"), ("a", "x")]


def test_saver_and_store_on_one_table_do_not_see_each_other(table: str) -> None:
    prefix = unique_prefix("both")
    url = _url(table)
    with graphkeep.connect(url, key_prefix=prefix, setup=False) as saver:
        assert isinstance(saver, DynamoDBSaver)
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        with graphkeep.connect_store(url, key_prefix=prefix, shard_labels=1) as store:
            store.put(("t1",), "k", {"v": 1})
            store.put(("c",), "k", {"v": 2})  # labels that look like saver sort keys
            assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["t1"]
            assert len(list(saver.list({"configurable": {"thread_id": "t1"}}))) == 1
            saver.delete_thread("t1")
            assert {i.key for i in store.search(())} == {"k"} and len(store.search(())) == 2
            assert store.list_namespaces() == [("c",), ("t1",)]
            assert store.sweep_ttl() == 0
    with pytest.raises(ConfigurationError, match="unknown option"):
        with graphkeep.connect_store(url, run_index=True):
            pass


# --------------------------------------------------------------------------- async


async def test_async_store_round_trip_search_and_calls(table: str) -> None:
    async with AsyncDynamoDBStore.from_url(
        _url(table), key_prefix=unique_prefix("async"), setup=False
    ) as store:
        calls = Calls(store.client)
        with calls.count() as made:
            await store.aput(("a", "b"), "k", {"v": 1})
            item = await store.aget(("a", "b"), "k")
            found = await store.asearch(("a",))
        assert made == ["TransactWriteItems", "GetItem", "Query", "Query"], made
        assert item is not None and item.value == {"v": 1}
        assert _keys(found) == [(("a", "b"), "k")]
        await store.aput(("a", "b"), "k", {"v": 2})
        assert (await store.aget(("a", "b"), "k")).value == {"v": 2}  # type: ignore[union-attr]
        assert await store.alist_namespaces() == [("a", "b")]
        # sync calls from another thread hop onto the store's loop
        other = await asyncio.to_thread(store.get, ("a", "b"), "k")
        assert other is not None and other.value == {"v": 2}
        await store.adelete(("a", "b"), "k")
        assert await store.asearch(()) == []
        assert await store.sweep_ttl() == 0


class InFlight:
    """The most Queries a client had sent and not yet had answered, at any moment."""

    def __init__(self, client: Any) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()
        client.meta.events.register("before-send.dynamodb.Query", self._sent)
        client.meta.events.register("after-call.dynamodb.Query", self._answered)

    def _sent(self, **_: Any) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def _answered(self, **_: Any) -> None:
        with self._lock:
            self.now -= 1


def test_a_search_across_partitions_reads_them_at_once(table: str) -> None:
    made = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    store = DynamoDBStore(made, table, key_prefix=unique_prefix("par"))
    for user in range(12):
        store.put(("users", f"u{user}"), "k", {"user": user})
    flight, calls = InFlight(made), Calls(made)
    with calls.count() as names:
        found = store.search(("users",), limit=20)
    assert names == ["Query"] * 13  # the registry, then the 12 partitions
    assert sorted(item.value["user"] for item in found) == list(range(12))
    assert 1 < flight.most <= 8, flight.most  # in flight together, at most 8 at a time
    made.close()


async def test_an_async_search_across_partitions_reads_them_at_once(table: str) -> None:
    async with AsyncDynamoDBStore.from_url(
        _url(table), key_prefix=unique_prefix("apar"), setup=False
    ) as store:
        for user in range(12):
            await store.aput(("users", f"u{user}"), "k", {"user": user})
        flight, calls = InFlight(store.client), Calls(store.client)
        with calls.count() as names:
            found = await store.asearch(("users",), limit=20)
        assert names == ["Query"] * 13
        assert sorted(item.value["user"] for item in found) == list(range(12))
        assert 1 < flight.most <= 8, flight.most


async def test_aconnect_store_builds_the_async_store(table: str) -> None:
    async with graphkeep.aconnect_store(
        _url(table), key_prefix=unique_prefix("ac"), setup=False
    ) as store:
        assert isinstance(store, AsyncDynamoDBStore)
        await store.aput(("x",), "k", {"v": 1}, ttl=5)
        assert (await store.aget(("x",), "k")) is not None
