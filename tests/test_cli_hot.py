"""``--hot`` and ``graphkeep hot warm|evict`` on real servers (DynamoDB mostly; MongoDB once).

Each test writes a thread through ``graphkeep.connect(url, key_prefix=…, hot=REDIS_URL)``
under a prefix of its own, then checks the CLI against Redis itself (EXISTS, HGETALL of the
shared totals, MEMORY USAGE) and against the durable store read without the layer.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

import graphkeep
from tests.cli_runs import gk
from tests.conftest import unique_prefix

pytestmark = pytest.mark.redis

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")
MONGODB_URL = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117/graphkeep_test")
DYNAMODB_URL = "dynamodb://graphkeep_test?region=us-east-1&endpoint_url=" + os.environ.get(
    "DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000"
)


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    items: Annotated[list[str], operator.add]


class Inner(TypedDict):
    items: Annotated[list[str], operator.add]


def _reply(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content="hi back")], "items": ["replied"]}


def _inner(state: Inner) -> dict[str, Any]:
    return {"items": ["inner"]}


def _ask(state: State) -> dict[str, Any]:
    return {"items": [interrupt("which one?")]}


def _graph(saver: Any, *, subgraph: bool = False, ask: bool = False) -> Any:
    builder = StateGraph(State)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    last = "reply"
    if subgraph:
        inner = StateGraph(Inner)
        inner.add_node("inner", _inner)
        inner.add_edge(START, "inner")
        inner.add_edge("inner", END)
        builder.add_node("sub", inner.compile())
        builder.add_edge(last, "sub")
        last = "sub"
    if ask:
        builder.add_node("ask", _ask)
        builder.add_edge(last, "ask")
        last = "ask"
    builder.add_edge(last, END)
    return builder.compile(checkpointer=saver)


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _write(url: str, prefix: str, thread: str, **shape: bool) -> None:
    with graphkeep.connect(url, key_prefix=prefix, hot=REDIS_URL, setup=True) as saver:
        graph = _graph(saver, **shape)
        graph.invoke({"messages": [HumanMessage(content="hello")], "items": ["a"]}, _config(thread))


def _durable_latest(url: str, prefix: str, thread: str, ns: str = "") -> Any:
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        return saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def prefix(r: redis.Redis) -> Iterator[str]:
    name = unique_prefix("hotcli")
    yield name
    for key in r.scan_iter(match=f"{name}:*"):
        r.unlink(key)


def _key(prefix: str, thread: str) -> str:
    return f"{prefix}:hot1:{{{thread}}}"


def _base(url: str, prefix: str) -> list[str]:
    return [url, "--key-prefix", prefix, "--hot", REDIS_URL]


# -- hot warm ------------------------------------------------------------------------------


@pytest.mark.dynamodb
def test_warm_puts_every_namespace_in_redis_and_the_app_reads_that_copy(
    prefix: str, r: redis.Redis
) -> None:
    _write(DYNAMODB_URL, prefix, "t1", subgraph=True)
    r.unlink(_key(prefix, "t1"))  # what the writer's own reads cached
    assert not r.exists(_key(prefix, "t1"))

    result = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "t1", "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["not_found"] == []
    assert (report["url"], report["hot"], report["key_prefix"]) == (DYNAMODB_URL, REDIS_URL, prefix)
    [thread] = report["threads"]
    namespaces = thread["namespaces"]
    assert [n["checkpoint_ns"] for n in namespaces][0] == ""
    assert len(namespaces) == 2 and namespaces[1]["checkpoint_ns"].startswith("sub:")
    for n in namespaces:
        durable = _durable_latest(DYNAMODB_URL, prefix, "t1", n["checkpoint_ns"])
        assert n["checkpoint_id"] == durable.config["configurable"]["checkpoint_id"]
        assert n["read"] == "miss" and n["cached"] is True
    assert r.exists(_key(prefix, "t1")) == 1
    assert thread["bytes"] == r.memory_usage(_key(prefix, "t1"), samples=0)

    # the app's layer is served the CLI's copy, and it is the durable store's checkpoint
    durable = _durable_latest(DYNAMODB_URL, prefix, "t1")
    with graphkeep.connect(DYNAMODB_URL, key_prefix=prefix, hot=REDIS_URL) as saver:
        found = saver.get_tuple(_config("t1"))
        assert dict(saver.reads) == {"hit": 1}
        assert found.checkpoint == durable.checkpoint
        assert found.metadata == durable.metadata
        values = _graph(saver, subgraph=True).get_state(_config("t1")).values
    with graphkeep.connect(DYNAMODB_URL, key_prefix=prefix) as plain:
        expected = _graph(plain, subgraph=True).get_state(_config("t1")).values
    assert [m.content for m in values["messages"]] == ["hello", "hi back"]
    assert isinstance(values["messages"][0], HumanMessage)
    assert values == expected and "inner" in values["items"]

    again = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "t1")
    assert again.code == 0, again.err
    assert "hit" in again.out and "in Redis" in again.out


@pytest.mark.dynamodb
def test_warm_leaves_an_interrupted_head_to_the_durable_store_and_reports_unknown_threads(
    prefix: str, r: redis.Redis
) -> None:
    _write(DYNAMODB_URL, prefix, "asking", ask=True)
    result = gk(
        "hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "asking", "ghost", "--json"
    )
    assert result.code == 4
    report = result.json()
    assert report["not_found"] == ["ghost"]
    [head] = report["threads"][0]["namespaces"]
    assert head["read"] == "special" and head["cached"] is False
    text = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "asking")
    assert "no (special write)" in text.out


AES_KEY = "0123456789abcdef0123456789abcdef"


@pytest.mark.dynamodb
def test_warm_keeps_an_encrypted_thread_encrypted_in_redis(
    prefix: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY.encode())
    options = {"key_prefix": prefix, "serde": serde}
    with graphkeep.connect(DYNAMODB_URL, setup=True, **options) as saver:
        _graph(saver).invoke({"messages": [HumanMessage(content="secret words")]}, _config("s1"))

    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    locked = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "s1")
    assert locked.code == 1 and "LANGGRAPH_AES_KEY" in locked.err
    assert not r.exists(_key(prefix, "s1"))  # nothing half-readable was cached

    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    warm = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "s1", "--json")
    assert warm.code == 0, warm.err
    assert warm.json()["threads"][0]["namespaces"][0]["cached"] is True
    stored = b"".join(r.hgetall(_key(prefix, "s1")).values())
    assert stored and b"secret words" not in stored
    with graphkeep.connect(DYNAMODB_URL, hot=REDIS_URL, **options) as saver:
        values = _graph(saver).get_state(_config("s1")).values
        assert dict(saver.reads) == {"hit": 1}
    assert [m.content for m in values["messages"]] == ["secret words", "hi back"]


# -- hot evict -----------------------------------------------------------------------------


@pytest.mark.dynamodb
def test_evict_drops_the_copies_and_leaves_the_durable_thread(prefix: str, r: redis.Redis) -> None:
    for thread in ("t1", "t2", "t3"):
        _write(DYNAMODB_URL, prefix, thread)
    warmed = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "t1", "t2", "t3")
    assert warmed.code == 0, warmed.err
    assert r.exists(_key(prefix, "t1"), _key(prefix, "t2"), _key(prefix, "t3")) == 3
    size = r.memory_usage(_key(prefix, "t1"), samples=0)
    before = _durable_latest(DYNAMODB_URL, prefix, "t1")

    result = gk("hot", "evict", *_base(DYNAMODB_URL, prefix), "--thread", "t1", "--json")
    assert result.code == 0, result.err
    assert result.json()["threads"] == [{"thread_id": "t1", "dropped": True, "bytes": size}]
    assert not r.exists(_key(prefix, "t1"))
    assert r.exists(_key(prefix, "t2")) == 1
    after = _durable_latest(DYNAMODB_URL, prefix, "t1")
    assert after.checkpoint == before.checkpoint and after.metadata == before.metadata
    history = gk("history", DYNAMODB_URL, "t1", "--key-prefix", prefix, "--json")
    assert len(history.json()["checkpoints"]) == 3

    text = gk("hot", "evict", *_base(DYNAMODB_URL, prefix), "--thread", "t1")
    assert text.code == 0 and "t1: nothing in Redis" in text.out

    everything = gk("hot", "evict", *_base(DYNAMODB_URL, prefix), "--all", "--json")
    assert everything.code == 0, everything.err
    assert everything.json()["threads_dropped"] == 2
    assert not r.exists(_key(prefix, "t2"), _key(prefix, "t3"))
    assert r.exists(f"{prefix}:hot1:stats") == 1  # the shared totals are not a thread


# -- stats / health --hot --------------------------------------------------------------------


def _one_read(url: str, prefix: str, thread: str) -> dict[str, int]:
    """One read through a new layer: its count is shared at once (the first of a layer)."""
    with graphkeep.connect(url, key_prefix=prefix, hot=REDIS_URL) as saver:
        assert saver.get_tuple(_config(thread)) is not None
        return dict(saver.reads)


@pytest.mark.dynamodb
def test_stats_and_health_show_the_hit_rate_every_process_shares(
    prefix: str, r: redis.Redis
) -> None:
    _write(DYNAMODB_URL, prefix, "t1")
    r.unlink(_key(prefix, "t1"), f"{prefix}:hot1:stats")
    assert _one_read(DYNAMODB_URL, prefix, "t1") == {"miss": 1}
    assert _one_read(DYNAMODB_URL, prefix, "t1") == {"hit": 1}
    assert _one_read(DYNAMODB_URL, prefix, "t1") == {"hit": 1}
    assert r.hgetall(f"{prefix}:hot1:stats") == {b"miss": b"1", b"hit": b"2"}
    size = r.memory_usage(_key(prefix, "t1"), samples=0)

    stats = gk("stats", *_base(DYNAMODB_URL, prefix), "--json")
    assert stats.code == 0, stats.err
    hot = stats.json()["hot"]
    assert hot["hit_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert hot["reads"] == {"hit": 2, "miss": 1, "special": 0, "error": 0}
    assert hot["reads_total"] == 3
    assert hot["threads"] == 1 and hot["bytes"] == size and hot["bytes_estimated"] is False
    assert hot["key_prefix"] == prefix
    assert stats.json()["threads"] == 1  # the durable report is still there

    text = gk("stats", *_base(DYNAMODB_URL, prefix))
    assert "hit rate 66.7% of 3 read(s)" in text.out
    assert "2 hit, 1 miss, 0 special, 0 error" in text.out
    assert "1 thread(s)" in text.out

    health = gk("health", *_base(DYNAMODB_URL, prefix), "--json")
    assert health.code == 0, health.err
    assert health.json()["hot"]["reads"] == hot["reads"]
    assert health.json()["threads_stored"] == 1
    prom = gk("health", *_base(DYNAMODB_URL, prefix), "--format", "prometheus")
    assert 'graphkeep_hot_hit_ratio{backend="dynamodb"} 0.6667' in prom.out
    assert 'graphkeep_hot_reads_total{backend="dynamodb",outcome="miss"} 1' in prom.out
    assert 'graphkeep_hot_threads{backend="dynamodb"} 1' in prom.out
    plain = gk("health", *_base(DYNAMODB_URL, prefix))
    assert "hit rate 66.7%" in plain.out


@pytest.mark.dynamodb
def test_threads_shows_what_redis_holds_and_the_commands_reads_stay_out_of_the_hit_rate(
    prefix: str, r: redis.Redis
) -> None:
    for thread in ("t1", "t2"):
        _write(DYNAMODB_URL, prefix, thread)
    r.unlink(_key(prefix, "t1"), _key(prefix, "t2"), f"{prefix}:hot1:stats")
    warmed = gk("hot", "warm", *_base(DYNAMODB_URL, prefix), "--thread", "t1")
    assert warmed.code == 0, warmed.err
    read = gk("history", DYNAMODB_URL, "t1", "--key-prefix", prefix, "--hot", REDIS_URL, "--json")
    assert read.json()["hot"]["read"] == "hit"
    size = r.memory_usage(_key(prefix, "t1"), samples=0)

    listed = gk("threads", *_base(DYNAMODB_URL, prefix), "--json")
    assert listed.code == 0, listed.err
    assert listed.json()["hot"] == REDIS_URL
    by_thread = {t["thread_id"]: t for t in listed.json()["threads"]}
    assert by_thread["t1"]["hot_bytes"] == size > 0
    assert by_thread["t2"]["hot_bytes"] is None
    assert by_thread["t1"]["checkpoints"] == 3  # the durable columns are still there

    text = gk("threads", *_base(DYNAMODB_URL, prefix))
    assert text.code == 0, text.err
    assert "HOT" in text.out.splitlines()[0]
    assert "2 thread(s) at" in text.out and "; 1 in Redis (" in text.out
    plain = gk("threads", DYNAMODB_URL, "--key-prefix", prefix, "--json")
    assert "hot" not in plain.json() and "hot_bytes" not in plain.json()["threads"][0]

    # warm's miss, history's hit: the commands' reads, not the app's
    assert not r.exists(f"{prefix}:hot1:stats")
    assert _one_read(DYNAMODB_URL, prefix, "t1") == {"hit": 1}
    assert r.hgetall(f"{prefix}:hot1:stats") == {b"hit": b"1"}


@pytest.mark.dynamodb
def test_history_and_dump_read_the_head_through_the_layer(prefix: str, r: redis.Redis) -> None:
    _write(DYNAMODB_URL, prefix, "t1")
    r.unlink(_key(prefix, "t1"))
    latest = _durable_latest(DYNAMODB_URL, prefix, "t1").config["configurable"]["checkpoint_id"]

    first = gk("history", DYNAMODB_URL, "t1", "--key-prefix", prefix, "--hot", REDIS_URL, "--json")
    assert first.code == 0, first.err
    hot = first.json()["hot"]
    assert (hot["read"], hot["cached"], hot["checkpoint_id"]) == ("miss", True, latest)
    assert hot["bytes"] == r.memory_usage(_key(prefix, "t1"), samples=0) > 0
    assert len(first.json()["checkpoints"]) == 3

    second = gk("history", DYNAMODB_URL, "t1", "--key-prefix", prefix, "--hot", REDIS_URL)
    assert f"{latest} served from Redis, in Redis" in second.out

    dump = gk("dump", DYNAMODB_URL, "--thread-id", "t1", "--key-prefix", prefix, "--hot", REDIS_URL)
    assert dump.code == 0, dump.err
    assert dump.json()["hot"]["read"] == "hit"
    assert dump.json()["target_checkpoint_id"] == latest


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.dynamodb
def test_a_hot_url_that_is_not_redis_or_missing_is_a_usage_error(prefix: str) -> None:
    bad = gk("stats", DYNAMODB_URL, "--key-prefix", prefix, "--hot", "mongodb://x/db")
    assert bad.code == 2
    assert "hot= must be a Redis URL" in bad.err and bad.out == ""
    for argv in (["health"], ["history"], ["hot", "warm"]):
        extra = ["t1"] if argv == ["history"] else []
        if argv == ["hot", "warm"]:
            extra = ["--thread", "t1"]
        found = gk(*argv, DYNAMODB_URL, *extra, "--hot", "postgresql://u@h/db")
        assert found.code == 2 and "hot= must be a Redis URL" in found.err, argv
    missing = gk("hot", "warm", DYNAMODB_URL, "--thread", "t1")
    assert missing.code == 2 and "--hot" in missing.err
    missing = gk("hot", "evict", DYNAMODB_URL, "--all")
    assert missing.code == 2 and "--hot" in missing.err
    neither = gk("hot", "evict", DYNAMODB_URL, "--hot", REDIS_URL)
    assert neither.code == 2 and "--thread" in neither.err


@pytest.mark.dynamodb
def test_a_hot_redis_that_does_not_answer_is_one_line(prefix: str) -> None:
    down = "redis://:pw123@127.0.0.1:1/0"
    stats = gk("stats", DYNAMODB_URL, "--key-prefix", prefix, "--hot", down)
    assert stats.code == 1 and stats.out == ""
    assert "the hot layer's Redis at redis://:***@127.0.0.1:1/0 does not answer" in stats.err
    assert "pw123" not in stats.err
    health = gk("health", DYNAMODB_URL, "--key-prefix", prefix, "--hot", down)
    assert health.code == 2 and "does not answer" in health.err
    warm = gk("hot", "warm", DYNAMODB_URL, "--key-prefix", prefix, "--hot", down, "--thread", "x")
    assert warm.code == 1 and "does not answer" in warm.err


def test_a_hot_layer_over_redis_or_sqlite_is_a_usage_error(tmp_path: Any) -> None:
    over_redis = gk("stats", REDIS_URL, "--key-prefix", unique_prefix(), "--hot", REDIS_URL)
    assert over_redis.code == 2 and "keeps its checkpoints in Redis already" in over_redis.err
    db = tmp_path / "c.db"
    gk("setup", f"sqlite:///{db}")
    over_sqlite = gk("stats", f"sqlite:///{db}", "--hot", REDIS_URL)
    assert over_sqlite.code == 2 and "no hot layer for SqliteSaver" in over_sqlite.err


# -- MongoDB ---------------------------------------------------------------------------------


@pytest.mark.mongodb
def test_warm_stats_and_evict_on_mongodb(prefix: str, r: redis.Redis) -> None:
    _write(MONGODB_URL, prefix, "m1")
    r.unlink(_key(prefix, "m1"), f"{prefix}:hot1:stats")
    warm = gk("hot", "warm", *_base(MONGODB_URL, prefix), "--thread", "m1", "--json")
    assert warm.code == 0, warm.err
    [head] = warm.json()["threads"][0]["namespaces"]
    latest = _durable_latest(MONGODB_URL, prefix, "m1").config["configurable"]["checkpoint_id"]
    assert (head["checkpoint_id"], head["read"], head["cached"]) == (latest, "miss", True)
    assert r.exists(_key(prefix, "m1")) == 1

    assert _one_read(MONGODB_URL, prefix, "m1") == {"hit": 1}  # the app reads warm's copy
    stats = gk("stats", *_base(MONGODB_URL, prefix), "--json")
    assert stats.code == 0, stats.err
    hot = stats.json()["hot"]  # warm's own miss is not in the app's hit rate
    assert hot["reads"]["hit"] == 1 and hot["reads_total"] == 1 and hot["hit_rate"] == 1.0
    assert hot["threads"] == 1

    evict = gk("hot", "evict", *_base(MONGODB_URL, prefix), "--thread", "m1")
    assert evict.code == 0 and "m1: dropped" in evict.out
    assert not r.exists(_key(prefix, "m1"))
    assert _durable_latest(MONGODB_URL, prefix, "m1").config["configurable"]["checkpoint_id"] == (
        latest
    )
