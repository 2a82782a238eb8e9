"""Every key a graphkeep Redis script touches is declared in its KEYS, no script call
declares none, and no request carries more than 3,999 arguments — checked on the real
servers by what they ran (MONITOR, the keys of each command by COMMAND GETKEYS: see
tests/redis_scripts_audit.py), for the memory store (every path, the Query Engine's too),
the node cache and the effect ledger, sync and async, single node and Cluster."""

from __future__ import annotations

import asyncio
import hashlib
import operator
import os
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import PutOp

import graphkeep
from graphkeep.backends.redis.requests import MAX_ARGS
from graphkeep.backends.redis.store import RedisStore

from .conftest import REDIS_CLUSTER_URL, REDIS_STACK_URL, REDIS_URL, unique_prefix
from .redis_scripts_audit import ScriptAudit, parse_line
from .test_redis import CountingConnection, counting_client

pytestmark = pytest.mark.redis

DIMS = 8
URLS = [REDIS_URL, REDIS_CLUSTER_URL]


def embed(texts: list[str]) -> list[list[float]]:
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.lower().split():
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
        out.append(vector)
    return out


INDEX = {"dims": DIMS, "embed": embed, "fields": ["text", "title"]}


def _drop(url: str, prefix: str) -> None:
    if "+cluster://" in url:
        client: Any = redis.RedisCluster.from_url(url.replace("+cluster", ""))
        for node in client.get_primaries():
            keys = list(node.redis_connection.scan_iter(match=f"{prefix}*", count=1000))
            for key in keys:
                client.delete(key)
    else:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    client.close()


def _clean(audit: ScriptAudit, runs: int) -> None:
    assert audit.problems() == []
    assert len(audit.ours()) >= runs, "the audit saw fewer script calls than were made"
    assert audit.largest() <= MAX_ARGS


def test_the_audit_finds_what_it_is_for() -> None:
    """The checker itself: a key built inside a script, a call declaring none, a request
    over the limit are each reported (the rule fires)."""
    prefix = unique_prefix("audit")
    client = redis.Redis.from_url(REDIS_URL)
    with ScriptAudit(REDIS_URL, prefix) as audit:
        client.eval("return redis.call('SET', KEYS[1] .. ':x', 1)", 1, f"{prefix}:a")
        client.eval("return redis.call('GET', ARGV[1])", 0, f"{prefix}:b")
        client.eval("return 1", 1, f"{prefix}:c", *range(MAX_ARGS))
        client.eval("return redis.call('SET', KEYS[1], 1)", 1, f"{prefix}:d")
    client.delete(f"{prefix}:a:x", f"{prefix}:d")
    client.close()
    problems = audit.problems()
    assert any(f"{prefix}:a:x" in p for p in problems)
    assert any("declaring no key" in p for p in problems)
    assert any(f"of {MAX_ARGS + 4} arguments" in p for p in problems)
    assert len(problems) == 4  # the GET of an undeclared key too; the last call is clean


def test_monitor_lines_are_parsed_argument_by_argument() -> None:
    line = b'1.5 [0 127.0.0.1:6379] "SET" "a b" "\\x00q\\"\\\\" ""'
    assert parse_line(line) == ("127.0.0.1:6379", [b"SET", b"a b", b'\x00q"\\', b""])


def _store_workload(url: str, prefix: str) -> None:
    """put/get/search/delete/list_namespaces/TTL purge and sweep, by two stores (the second
    knows nothing of what the first wrote: its first calls learn the keys they need)."""
    with graphkeep.connect_store(url, key_prefix=prefix, index=INDEX) as first:
        first.put(("docs", "a"), "1", {"text": "apple pie", "title": "pie"})
        first.put(("docs", "a"), "2", {"text": "car engine"})
        first.put(("docs", "b"), "3", {"text": "apple orchard"})
        first.put(("docs",), "4", {"text": "banana apple"})
        for i in range(5):
            first.put(("docs", f"t{i}"), "gone", {"text": "soon gone"}, ttl=0.001)
        first.put(("docs", "a"), "1", {"text": "apple tart"})  # fewer vectors than before
        assert first.get(("docs", "a"), "1").value == {"text": "apple tart"}  # type: ignore[union-attr]
        assert [i.key for i in first.search(("docs", "a"))] == ["1", "2"]
    time.sleep(0.2)
    with graphkeep.connect_store(url, key_prefix=prefix, index=INDEX) as second:
        assert second.get(("docs", "t0"), "gone") is None
        assert {i.key for i in second.search(("docs",), query="apple")} == {"1", "2", "3", "4"}
        assert [i.key for i in second.search(("docs", "b"), query="apple")] == ["3"]
        assert {i.key for i in second.search(("docs",), filter={"text": "car engine"})} == {"2"}
        assert second.list_namespaces(prefix=("docs",)) == [("docs",), ("docs", "a"), ("docs", "b")]
        second.delete(("docs", "a"), "2")
        assert second.get(("docs", "a"), "2") is None
        assert second.sweep_ttl() == 0  # the listing's purge removed them already
    with graphkeep.connect_store(url, key_prefix=prefix, index=INDEX) as third:
        for i in range(3):
            third.put(("exp", f"n{i}"), "k", {"text": "brief"}, ttl=0.001)
    time.sleep(0.2)
    with graphkeep.connect_store(url, key_prefix=prefix, index=INDEX) as fourth:
        assert fourth.sweep_ttl() == 3  # none of their keys known beforehand


def _best(label: str, count: int, word: str, limit: int) -> list[tuple[str, ...]]:
    """The namespaces ``(label, n<i>)`` holding ``{"text": "w<i>"}`` a cosine search for
    ``word`` ranks first (ties by namespace, as the store breaks them)."""
    [query] = embed([word])
    tied = [i for i in range(count) if embed([f"w{i}"])[0] == query]
    return sorted((label, f"n{i}") for i in tied)[:limit]


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
def test_store_scripts_touch_only_declared_keys(url: str) -> None:
    prefix = unique_prefix("sk")
    try:
        with ScriptAudit(url, prefix) as audit:
            _store_workload(url, prefix)
        _clean(audit, 20)
    finally:
        _drop(url, prefix)


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
async def test_async_store_scripts_touch_only_declared_keys(url: str) -> None:
    prefix = unique_prefix("ska")
    try:
        with ScriptAudit(url, prefix) as audit:
            async with graphkeep.aconnect_store(url, key_prefix=prefix, index=INDEX) as store:
                await store.aput(("docs", "a"), "1", {"text": "apple pie", "title": "x"})
                await store.aput(("docs", "b"), "2", {"text": "apple tree"}, ttl=0.001)
                await store.aput(("docs", "b"), "3", {"text": "pear"})
                await asyncio.sleep(0.1)
            async with graphkeep.aconnect_store(url, key_prefix=prefix, index=INDEX) as store:
                found = await store.asearch(("docs",), query="apple")
                assert {i.key for i in found} == {"1", "3"}
                assert await store.aget(("docs", "b"), "2") is None
                assert await store.alist_namespaces() == [("docs", "a"), ("docs", "b")]
                await store.adelete(("docs", "a"), "1")
                assert await store.sweep_ttl() == 0
        _clean(audit, 6)
    finally:
        _drop(url, prefix)


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
def test_a_batch_of_1000_puts_is_split_under_3999_arguments(url: str) -> None:
    prefix = unique_prefix("sb")
    try:
        with ScriptAudit(url, prefix) as audit:
            with graphkeep.connect_store(url, key_prefix=prefix, index=INDEX) as store:
                store.batch([PutOp(("bulk",), str(i), {"n": i}, index=False) for i in range(1000)])
                # across many namespaces of one partition: 2 keys each besides 7 arguments
                store.batch([PutOp(("many", f"n{i}"), "k", {"text": f"w{i}"}) for i in range(1500)])
                assert len(store.search(("bulk",), limit=2000)) == 1000
                assert len(store.list_namespaces(prefix=("many",), limit=2000)) == 1500
                hits = store.search(("many",), query="w7", limit=3)
                assert [i.namespace for i in hits] == _best("many", 1500, "w7", 3)
                store.batch([PutOp(("bulk",), str(i), None) for i in range(1000)])
                assert store.search(("bulk",)) == []
        _clean(audit, 8)
        assert audit.largest() > 3000  # the batches were cut near the limit, not in tiny calls
    finally:
        _drop(url, prefix)


def test_an_exact_scan_of_more_namespaces_than_a_request_declares() -> None:
    """A semantic search of a prefix with 4,100 namespaces (each one's embeddings a key) is
    scanned in parts, merged as partitions are: the same answer as a scan of all."""
    prefix = unique_prefix("sx")
    try:
        with graphkeep.connect_store(REDIS_URL, key_prefix=prefix, index=INDEX) as store:
            store.batch([PutOp(("wide", f"n{i}"), "k", {"text": f"w{i}"}) for i in range(4100)])
        with ScriptAudit(REDIS_URL, prefix) as audit:
            with graphkeep.connect_store(REDIS_URL, key_prefix=prefix, index=INDEX) as store:
                hits = store.search(("wide",), query="w4099", limit=2, offset=0)
        assert [i.namespace for i in hits] == _best("wide", 4100, "w4099", 2)
        _clean(audit, 3)
    finally:
        _drop(REDIS_URL, prefix)


def test_vector_index_scripts_touch_only_declared_keys() -> None:
    prefix = unique_prefix("sv")
    try:
        with ScriptAudit(REDIS_STACK_URL, prefix) as audit:
            # written before the index exists: setup() indexes them (the reindex path)
            with graphkeep.connect_store(REDIS_STACK_URL, key_prefix=prefix, index=INDEX) as s:
                s.put(("docs", "a"), "1", {"text": "apple pie", "title": "pie"})
                s.put(("docs", "b"), "2", {"text": "apple tree"})
            options: dict[str, Any] = {"key_prefix": prefix, "index": INDEX, "vector_index": True}
            with graphkeep.connect_store(REDIS_STACK_URL, **options) as store:
                assert [i.key for i in store.search(("docs",), query="apple pie")][0] == "1"
                store.put(("docs", "a"), "1", {"text": "apple pie"})  # two vectors to one
                store.put(("docs", "c"), "3", {"text": "short", "title": "t"}, ttl=0.001)
                store.put(("docs", "a"), "4", {"text": "apple crumble", "title": "c"})
            time.sleep(0.2)
            with graphkeep.connect_store(REDIS_STACK_URL, **options) as store:
                # a fresh store: it learns the old item's two entries, the expired one's keys
                store.put(("docs", "a"), "4", {"text": "apple"})
                assert {i.key for i in store.search(("docs",), query="apple")} == {"1", "2", "4"}
                store.delete(("docs", "a"), "1")
                assert store.list_namespaces() == [("docs", "a"), ("docs", "b")]
                assert store.sweep_ttl() == 0
        _clean(audit, 10)
        client = redis.Redis.from_url(REDIS_STACK_URL)
        entries = list(client.scan_iter(match=f"{prefix}:m1:vectors:*", count=1000))
        client.close()
        assert len(entries) == 2  # "2" and "4": one vector each, nothing left behind
    finally:
        _drop(REDIS_STACK_URL, prefix)
        client = redis.Redis.from_url(REDIS_STACK_URL)
        for name in client.execute_command("FT._LIST"):
            if (name.decode() if isinstance(name, bytes) else name).startswith(prefix):
                client.execute_command("FT.DROPINDEX", name)
        client.close()


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
def test_cache_scripts_touch_only_declared_keys(url: str) -> None:
    prefix = unique_prefix("ck")
    try:
        with ScriptAudit(url, prefix) as audit:
            with graphkeep.connect_cache(url, key_prefix=prefix) as cache:
                cache.set({(("n",), str(i)): ({"v": i}, None) for i in range(1500)})
                cache.set({(("m",), "a"): ("x", 60), (("o",), "b"): ("y", None)})
                assert len(cache.get([(("n",), str(i)) for i in range(1500)])) == 1500
                cache.clear([("n",)])
                assert cache.get([(("n",), "1")]) == {}
                cache.clear()
                assert cache.get([(("m",), "a"), (("o",), "b")]) == {}
        _clean(audit, 5)
    finally:
        _drop(url, prefix)


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
async def test_async_cache_scripts_touch_only_declared_keys(url: str) -> None:
    prefix = unique_prefix("cka")
    try:
        with ScriptAudit(url, prefix) as audit:
            async with graphkeep.aconnect_cache(url, key_prefix=prefix) as cache:
                await cache.aset({(("n",), str(i)): ({"v": i}, None) for i in range(1200)})
                assert len(await cache.aget([(("n",), "5")])) == 1
                await cache.aclear([("n",)])
                assert await cache.aget([(("n",), "5")]) == {}
        _clean(audit, 3)
    finally:
        _drop(url, prefix)


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
def test_effect_ledger_scripts_touch_only_declared_keys(url: str) -> None:
    prefix = unique_prefix("fk")
    try:
        with ScriptAudit(url, prefix) as audit:
            with graphkeep.connect_effects(url, key_prefix=prefix) as ledger:
                for n in range(3):
                    assert ledger.run(f"charge-{n}", lambda n=n: n) == n
                assert len(ledger.records()) == 3
                assert ledger.clear() == 3
                assert ledger.records() == []
        _clean(audit, 6)
    finally:
        _drop(url, prefix)


def _requests(fn: Any) -> int:
    before = CountingConnection.sent
    fn()
    return CountingConnection.sent - before


def test_request_counts_of_the_common_case() -> None:
    """Declaring every key costs no round trip in the common case: a get, a put, a delete, a
    search of one namespace or of a prefix, a listing are each one request, as before; a
    batch of 1,000 puts is several calls in one pipeline. Only a semantic search of a prefix
    whose namespaces this process never wrote nor searched asks twice, once."""
    client = counting_client()
    prefix = unique_prefix("sc")
    try:
        writer = RedisStore(client, key_prefix=prefix, index=INDEX)
        writer.setup()
        writer.put(("docs", "a"), "1", {"text": "apple pie"})
        writer.put(("docs", "b"), "2", {"text": "apple tree"})
        writer.put(("docs",), "3", {"text": "pear"})
        assert _requests(lambda: writer.search(("docs",), query="apple")) == 1
        reader = RedisStore(client, key_prefix=prefix, index=INDEX)
        assert _requests(lambda: reader.get(("docs", "a"), "1")) == 1
        assert _requests(lambda: reader.search(("docs", "a"))) == 1
        assert _requests(lambda: reader.search(("docs", "a"), query="apple")) == 1
        assert _requests(lambda: reader.search(("docs",), filter={"text": "pear"})) == 1
        assert _requests(lambda: reader.search(("docs",), query="apple")) == 2  # learns
        assert _requests(lambda: reader.search(("docs",), query="apple")) == 1
        assert _requests(lambda: reader.list_namespaces(prefix=("docs",))) == 1
        assert _requests(lambda: writer.put(("docs", "a"), "4", {"n": 1}, index=False)) == 1
        assert _requests(lambda: reader.delete(("docs", "a"), "4")) == 1
        puts = [PutOp(("docs", "a"), str(i), {"n": i}, index=False) for i in range(1000)]
        assert _requests(lambda: writer.batch(puts)) == 1  # one pipeline of 3 calls
    finally:
        _drop(REDIS_URL, prefix)
        client.close()


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
def test_event_log_scripts_touch_only_declared_keys(url: str) -> None:
    """Found clean by the audit (two keys declared per run, payloads cut at 2,000 a call):
    a batch of 2,500 events stays under 3,999 arguments."""
    prefix = unique_prefix("ek")
    try:
        with ScriptAudit(url, prefix) as audit:
            with graphkeep.connect_events(url, key_prefix=prefix, max_events=5000) as log:
                ids = log.append_many("run-1", ({"type": "token", "n": n} for n in range(2500)))
                assert len(ids) == 2500
                log.heartbeat("run-1")
                log.close("run-1", "success")
                assert log.state("run-1") is not None
                log.delete("run-1")
        _clean(audit, 4)
    finally:
        _drop(url, prefix)


class _Items(TypedDict):
    items: Annotated[list[str], operator.add]


DYNAMODB_URL = "dynamodb://graphkeep_test?region=us-east-1&endpoint_url=" + os.environ.get(
    "DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000"
)


@pytest.mark.parametrize("url", URLS, ids=["redis", "cluster"])
def test_hot_layer_scripts_touch_only_declared_keys(url: str) -> None:
    """Found clean by the audit: the hot layer's scripts touch fields of the one thread hash
    they declare (and its stats hash)."""
    prefix = unique_prefix("hk")
    config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
    builder = StateGraph(_Items)
    builder.add_node("step", lambda state: {"items": ["first"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    try:
        with ScriptAudit(url, prefix) as audit:
            with graphkeep.connect(DYNAMODB_URL, key_prefix=prefix, hot=url) as saver:
                app = builder.compile(checkpointer=saver)
                app.invoke({"items": ["one"]}, config)
                for _ in range(3):
                    assert app.get_state(config).values["items"] == ["one", "first"]
                for _ in range(2):
                    assert len(list(saver.list(config, limit=5))) == 3
                assert saver.reads["hit"] >= 2
        _clean(audit, 4)
    finally:
        _drop(url, prefix)


def test_a_batch_that_learns_more_keys_than_fit_is_split_again() -> None:
    """A fresh store re-puts 500 items that had six embeddings each with one: the old index
    entries it learns (five more keys an item) do not fit one request, so the calls are cut
    again — every write lands, every key declared, no request over the limit."""
    prefix = unique_prefix("sh")
    fields = ["a", "b", "c", "d", "e", "f"]
    index = {"dims": DIMS, "embed": embed, "fields": fields}
    options: dict[str, Any] = {"key_prefix": prefix, "index": index, "vector_index": True}
    try:
        with graphkeep.connect_store(REDIS_STACK_URL, **options) as store:
            six = [PutOp(("six",), str(i), {f: f"{f}{i}" for f in fields}) for i in range(500)]
            store.batch(six)
        with ScriptAudit(REDIS_STACK_URL, prefix) as audit:
            with graphkeep.connect_store(REDIS_STACK_URL, **options) as store:
                store.batch([PutOp(("six",), str(i), {"a": f"a{i}"}) for i in range(500)])
                assert store.get(("six",), "7").value == {"a": "a7"}  # type: ignore[union-attr]
        _clean(audit, 3)
        client = redis.Redis.from_url(REDIS_STACK_URL)
        entries = list(client.scan_iter(match=f"{prefix}:m1:vectors:*", count=1000))
        client.close()
        assert len(entries) == 500
    finally:
        _drop(REDIS_STACK_URL, prefix)
        client = redis.Redis.from_url(REDIS_STACK_URL)
        for name in client.execute_command("FT._LIST"):
            if (name.decode() if isinstance(name, bytes) else name).startswith(prefix):
                client.execute_command("FT.DROPINDEX", name)
        client.close()
