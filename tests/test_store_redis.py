"""The memory store on real Redis (single node and Cluster): round trips, key layout, TTL
purge, semantic scoring in Lua, and bad input that writes nothing."""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

import pytest
import redis
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import graphkeep
from graphkeep.backends.redis.store import AsyncRedisStore, RedisStore
from graphkeep.errors import ConfigurationError, InvalidFilter, InvalidInput, SerializationError
from graphkeep.testing.rules import unchecked

from .conftest import REDIS_CLUSTER_URL, REDIS_STACK_URL, REDIS_URL, unique_prefix
from .test_redis import CountingConnection, counting_client

pytestmark = pytest.mark.redis

DIMS = 16


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic hashing bag-of-words (no model)."""
    vectors = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.lower().split():
            h = int(hashlib.sha256(word.encode()).hexdigest(), 16)
            vector[h % DIMS] += 1.0 + (h >> 8) % 3
        vectors.append(vector)
    return vectors


INDEX = {"dims": DIMS, "embed": embed, "fields": ["text"]}
DOCS = [
    (("docs", "a"), "1", {"text": "apple pie recipe", "n": 1, "tag": "x"}),
    (("docs", "a"), "2", {"text": "car engine repair", "n": 5, "tag": "y"}),
    (("docs", "b"), "3", {"text": "apple orchard trip", "n": 3, "tag": "x"}),
    (("docs",), "4", {"text": "banana bread and apple", "n": 7}),
    (("other",), "5", {"text": "apple", "n": 9}),
]


@pytest.fixture
def counted() -> Any:
    client = counting_client()
    store = RedisStore(client, key_prefix=unique_prefix("ms"), index=INDEX)
    store.setup()
    yield store
    _drop(client, store)
    client.close()


def _drop(client: Any, store: RedisStore) -> None:
    # the test's clean-up: one DEL of every key, outside the managed services' rules
    with unchecked():
        keys = list(client.scan_iter(match=f"{store.port.prefix}:*", count=1000))  # type: ignore[attr-defined]
        if keys:
            client.delete(*keys)


def _requests(fn: Any) -> int:
    before = CountingConnection.sent
    fn()
    return CountingConnection.sent - before


def test_each_store_call_is_one_round_trip(counted: RedisStore) -> None:
    for ns, key, value in DOCS:
        counted.put(ns, key, value)
    # an indexed put first reads the stored text digests (so unchanged texts are not sent to
    # the embedding model again), then writes: two round trips; without text to embed, one
    assert _requests(lambda: counted.put(("docs", "a"), "6", {"text": "plum", "n": 2})) == 2
    assert _requests(lambda: counted.put(("docs", "a"), "6", {"n": 2}, index=False)) == 1
    assert _requests(lambda: counted.put(("docs", "a"), "7", {"n": 2})) == 1
    assert _requests(lambda: counted.get(("docs", "a"), "1")) == 1
    assert _requests(lambda: counted.delete(("docs", "a"), "6")) == 1
    gets = [GetOp(("docs", "a"), str(i)) for i in range(100)]
    gets += [GetOp(("other",), "5")]  # another partition: same pipeline
    assert _requests(lambda: counted.batch(gets)) == 1
    assert _requests(lambda: counted.search(("docs",), filter={"n": {"$gt": 2}})) == 1
    assert _requests(lambda: counted.search(("docs", "a"), filter={"tag": "x"}, limit=1)) == 1
    # a semantic search embeds the query locally, then one script scores next to the data
    assert _requests(lambda: counted.search(("docs",), query="apple")) == 1
    assert _requests(lambda: counted.list_namespaces(prefix=("docs",))) == 1


def test_unchanged_texts_are_not_embedded_again() -> None:
    calls: list[list[str]] = []

    def counting(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return embed(texts)

    index = {"dims": DIMS, "embed": counting, "fields": ["text", "title"]}
    with graphkeep.connect_store(REDIS_URL, key_prefix=unique_prefix("ms"), index=index) as s:
        s.put(("n",), "k", {"text": "apple pie", "title": "dessert"})
        assert sorted(calls[-1]) == ["apple pie", "dessert"]
        s.put(("n",), "k", {"text": "apple pie", "title": "sweet dessert"})
        assert calls[-1] == ["sweet dessert"]
        before = len(calls)
        s.put(("n",), "k", {"text": "apple pie", "title": "sweet dessert", "other": 1})
        assert len(calls) == before  # nothing changed that is indexed: no embedding call
        [hit] = s.search(("n",), query="dessert")
        assert hit.key == "k" and hit.score is not None


@pytest.mark.parametrize("distance", ["cosine", "l2", "inner_product"])
def test_lua_scores_follow_postgres_conventions(distance: str) -> None:
    index = {**INDEX, "distance_type": distance}
    with graphkeep.connect_store(REDIS_URL, key_prefix=unique_prefix("ms"), index=index) as s:
        for ns, key, value in DOCS:
            s.put(ns, key, value)
        hits = s.search(("docs",), query="apple trip", limit=10)
    [q] = embed(["apple trip"])
    expected = {}
    for _ns, key, value in DOCS[:4]:
        [v] = embed([value["text"]])
        dot = sum(a * b for a, b in zip(q, v, strict=True))
        if distance == "inner_product":
            expected[key] = dot
        elif distance == "l2":
            expected[key] = -math.sqrt(sum((a - b) ** 2 for a, b in zip(q, v, strict=True)))
        else:
            expected[key] = dot / (math.hypot(*q) * math.hypot(*v))
    assert [h.key for h in hits] == sorted(expected, key=lambda k: (-expected[k], k))
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.key], rel=1e-5, abs=1e-6)


def test_semantic_top_ten_equals_in_memory_store() -> None:
    words = "apple pear plum engine wheel road river lake sun rain snow wind bread milk tea".split()
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    with graphkeep.connect_store(REDIS_URL, key_prefix=unique_prefix("ms"), index=INDEX) as s:
        for i in range(120):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(1 + i % 4))
            value = {"text": f"{text} w{i}"}
            s.put(("corpus", f"p{i % 3}"), f"k{i}", value)
            ref.put(("corpus", f"p{i % 3}"), f"k{i}", value)
        for query in ["apple pie", "river lake", "snow wind rain", "tea"]:
            ours = s.search(("corpus",), query=query, limit=10)
            theirs = ref.search(("corpus",), query=query, limit=10)
            assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)
            assert {(tuple(h.namespace), h.key) for h in ours if h.score != ours[-1].score} <= {
                (tuple(h.namespace), h.key) for h in theirs
            }


def test_expired_items_are_purged_by_the_next_script(counted: RedisStore) -> None:
    counted.put(("t",), "gone", {"v": 1}, ttl=0.001)
    counted.put(("t",), "kept", {"v": 2})
    time.sleep(0.1)
    assert counted.get(("t",), "gone") is None
    assert [i.key for i in counted.search(("t",))] == ["kept"]
    client = counted.client
    [items_key] = [k for k in client.scan_iter(match=f"{counted.port.prefix}:*:i")]  # type: ignore[attr-defined]
    assert client.hkeys(items_key) == [b"t\x00kept"]  # removed, not just hidden
    assert counted.sweep_ttl() == 0


def test_refresh_on_read_moves_the_expiry(counted: RedisStore) -> None:
    counted.put(("t",), "k", {"v": 1}, ttl=1 / 60)  # one second
    time.sleep(0.6)
    assert counted.get(("t",), "k", refresh_ttl=True) is not None
    time.sleep(0.6)
    assert counted.get(("t",), "k", refresh_ttl=False) is not None  # refreshed above
    time.sleep(0.6)
    assert counted.get(("t",), "k") is None


def test_cluster_partitions_by_leading_labels() -> None:
    url = REDIS_CLUSTER_URL
    prefix = unique_prefix("ms")
    with graphkeep.connect_store(url, key_prefix=prefix, shard_labels=2) as s:
        s.put(("mem", "u1"), "k", {"a": 1})
        s.put(("mem", "u2"), "k", {"a": 2})
        s.put(("mem",), "k", {"a": 0})
        assert [i.value["a"] for i in s.search(("mem", "u1"))] == [1]
        assert sorted(i.value["a"] for i in s.search(("mem",))) == [0, 1, 2]
        assert s.list_namespaces(prefix=("mem",)) == [("mem",), ("mem", "u1"), ("mem", "u2")]
        slots = {s.client.keyslot(k) for k in s.client.scan_iter(match=f"{prefix}:m1:{{*")}
        assert len(slots) == 3  # one slot per partition
        for ns in [("mem", "u1"), ("mem", "u2"), ("mem",)]:
            s.delete(ns, "k")
        assert s.list_namespaces() == []


async def test_async_store_on_the_cluster() -> None:
    async with graphkeep.aconnect_store(
        REDIS_CLUSTER_URL, key_prefix=unique_prefix("ms"), index=INDEX
    ) as s:
        assert isinstance(s, AsyncRedisStore)
        for ns, key, value in DOCS:
            await s.aput(ns, key, value)
        results = await s.abatch(
            [
                GetOp(("docs", "a"), "1"),
                SearchOp(("docs",), {"tag": "x"}, 10, 0, None),
                PutOp(("docs", "a"), "1", None),
            ]
        )
        assert results[0].value["n"] == 1  # type: ignore[union-attr]
        assert {i.key for i in results[1]} == {"1", "3"}  # type: ignore[union-attr]
        assert await s.aget(("docs", "a"), "1") is None
        hits = await s.asearch((), query="apple", limit=3)
        assert hits[0].key in {"5", "3"} and hits[0].score is not None


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda s: s.put((), "k", {"v": 1}), InvalidNamespaceError),
        (lambda s: s.put(("a.b",), "k", {"v": 1}), InvalidNamespaceError),
        (lambda s: s.put(("langgraph",), "k", {"v": 1}), InvalidNamespaceError),
        (lambda s: s.put(("a", 1), "k", {"v": 1}), InvalidNamespaceError),
        (lambda s: s.batch([PutOp(("a",), 1, {"v": 1})]), InvalidInput),
        (lambda s: s.put(("a",), "k", ["not", "a", "dict"]), InvalidInput),
        (lambda s: s.put(("a",), "k", {"v": object()}), SerializationError),
        (lambda s: s.put(("a",), "k", {"text": "x"}, index=["missing"]), InvalidInput),
        (lambda s: s.search(("a",), filter={"$where": "1"}), InvalidFilter),
        (lambda s: s.search(("a",), filter={"v": {"$regex": "."}}), InvalidFilter),
        (
            lambda s: s.batch(
                [PutOp(("a",), "ok", {"v": 1}), PutOp(("a",), "bad", {"v": 1}, ttl=-1)]
            ),
            InvalidInput,
        ),
    ],
)
def test_bad_input_fails_before_anything_is_written(call: Any, error: type) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    store = RedisStore(client, key_prefix=unique_prefix("bad"), index=INDEX)
    store.setup()
    with pytest.raises(error):
        call(store)
    assert list(client.scan_iter(match=f"{store.port.prefix}:*")) == []  # type: ignore[attr-defined]
    client.close()


def test_wrong_embedding_dimension_writes_nothing() -> None:
    index = {"dims": DIMS + 1, "embed": embed, "fields": ["text"]}
    client = redis.Redis.from_url(REDIS_URL)
    store = RedisStore(client, key_prefix=unique_prefix("bad"), index=index)
    with pytest.raises(InvalidInput, match="dimensions"):
        store.put(("a",), "k", {"text": "hello"})
    assert list(client.scan_iter(match=f"{store.port.prefix}:*")) == []  # type: ignore[attr-defined]
    client.close()


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="colour"):
        with graphkeep.connect_store(REDIS_URL, colour="red"):
            pass
    with pytest.raises(ConfigurationError, match="shard_labels"):
        with graphkeep.connect_store(REDIS_URL, shard_labels=0):
            pass


# -- the Query Engine vector index (vector_index=True, on a Redis with RediSearch) ----------


def _corpus() -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    words = [f"w{i}" for i in range(40)]
    docs = []
    for i in range(240):
        text = " ".join(words[(i * 7 + j * 5) % len(words)] for j in range(1 + i % 5))
        title = " ".join(words[(i * 3 + j) % len(words)] for j in range(2))
        docs.append((("users", f"u{i % 4}", "m"), f"k{i}", {"text": text, "title": title, "n": i}))
    return docs


@pytest.mark.parametrize("distance", ["cosine", "l2", "inner_product"])
def test_vector_index_answers_exactly_as_the_scan(distance: str) -> None:
    index = {"dims": DIMS, "embed": embed, "fields": ["text", "title"], "distance_type": distance}
    prefix = unique_prefix("vi")
    docs = _corpus()
    client = redis.Redis.from_url(REDIS_STACK_URL)
    # written without the index first: setup() with vector_index=True indexes what is there
    with graphkeep.connect_store(REDIS_STACK_URL, key_prefix=prefix, index=index) as plain:
        plain.batch([PutOp(*d) for d in docs[:200]])
    with graphkeep.connect_store(
        REDIS_STACK_URL, key_prefix=prefix, index=index, vector_index=True
    ) as indexed:
        indexed.batch([PutOp(*d) for d in docs[200:]])  # and what is written after
        indexed.delete(("users", "u0", "m"), "k0")
        indexed.put(("users", "u1", "m"), "k1", {"text": "w3 w4 w5", "n": 1})
        indexed.put(("users", "u2", "m"), "k2", {"text": "w6", "n": 2}, index=False)
        name = indexed.port.index_name  # type: ignore[attr-defined]
        assert name and int(client.ft(name).info()["num_docs"]) > 0
        for query, options in [
            ("w1 w2", {"limit": 10}),
            ("w3 w4 w5", {"limit": 7, "offset": 5}),
            ("w9", {"limit": 10, "filter": {"n": {"$gt": 120}}}),
            ("w10 w11", {"limit": 3, "filter": {"n": {"$lt": 5}}}),
        ]:
            for ns in [("users",), ("users", "u1")]:
                fast = indexed.search(ns, query=query, **options)
                with graphkeep.connect_store(
                    REDIS_STACK_URL, key_prefix=prefix, index=index
                ) as plain:
                    exact = plain.search(ns, query=query, **options)
                assert [h.key for h in fast] == [h.key for h in exact]
                assert [h.score for h in fast] == pytest.approx([h.score for h in exact], abs=1e-5)
        assert all(h.key != "k2" for h in indexed.search(("users",), query="w6", limit=300))
        indexed.batch([PutOp(ns, key, None) for ns, key, _ in docs])
        assert int(client.ft(name).info()["num_docs"]) == 0  # entries go with their items
        client.ft(name).dropindex()
    client.close()


def test_vector_index_is_refused_where_it_cannot_work() -> None:
    index = {"dims": DIMS, "embed": embed}
    with pytest.raises(ConfigurationError, match="Query Engine"):
        with graphkeep.connect_store(REDIS_URL, index=index, vector_index=True):
            pass
    with pytest.raises(ConfigurationError, match="single Redis server"):
        with graphkeep.connect_store(REDIS_CLUSTER_URL, index=index, vector_index=True):
            pass
    with pytest.raises(ConfigurationError, match="needs an index"):
        with graphkeep.connect_store(REDIS_STACK_URL, vector_index=True):
            pass


def test_a_search_of_one_namespace_reads_only_its_items(counted: RedisStore) -> None:
    # 300 items of other namespaces share the partition ("users"); the searched one has 3
    counted.batch(
        [PutOp(("users", f"u{i % 30}", "m"), f"k{i}", {"n": i}, index=False) for i in range(300)]
    )
    counted.batch([PutOp(("users", "ada", "m"), f"a{i}", {"n": i}, index=False) for i in range(3)])
    client = counted.client
    keys = counted.port.keys(("users",))  # type: ignore[attr-defined]
    stem = keys[0][:-1]
    assert client.zcard(stem + "o:users.ada.m") == 3  # the namespace's own order index
    assert client.zcard(keys[1]) == 303  # the partition's
    # without the partition's index, the namespace's search still answers: it reads its own
    client.delete(keys[1])
    with unchecked():  # the test's own counter reset (no managed service offers it)
        client.config_resetstat()
    found = counted.search(("users", "ada", "m"), filter={"n": {"$gte": 0}}, limit=10)
    assert [i.key for i in found] == ["a2", "a1", "a0"]
    assert client.info("commandstats")["cmdstat_hget"]["calls"] <= 6  # 3 records, not 303
    assert counted.list_namespaces(prefix=("users", "ada")) == [("users", "ada", "m")]
