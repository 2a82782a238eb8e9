"""The hot layer of a saver with ``encryption=`` (issue 47, item 1): each copy in Redis sealed
as its checkpoint (thread, namespace, checkpoint id, and the write count the layer trusts it
by), so nothing of a value is readable in the hot Redis, and a copy planted there or copied
from another thread is refused (read from the durable store), never served. Real servers:
MongoDB and DynamoDB durable (the graphkeep savers that take ``hot=``), Redis hot, sync and
async. Redis is read and written with redis-py.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import uuid
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langgraph.graph import END, START, StateGraph

from graphkeep.encryption import ENVELOPE_TAG
from graphkeep.port import codec
from tests.conftest import unique_prefix
from tests.test_encryption import MARKER, MODES, Api, checkpoint, config, opened, ring
from tests.test_hot import DYNAMODB_URL, MONGODB_URL, REDIS_URL

DURABLES = [
    pytest.param("mongodb", marks=pytest.mark.mongodb),
    pytest.param("dynamodb", marks=pytest.mark.dynamodb),
]
URLS = {"mongodb": MONGODB_URL, "dynamodb": DYNAMODB_URL}


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def graph(saver: Any) -> Any:
    def note(state: State) -> dict[str, Any]:
        return {"items": [f"{MARKER.decode()} noted"]}

    builder = StateGraph(State)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    return builder.compile(checkpointer=saver)


def run(api: Api, coro_or_value: Any) -> Any:
    if api.loop is None:
        return coro_or_value
    return asyncio.run_coroutine_threadsafe(coro_or_value, api.loop).result(60)


def page(api: Api, conf: Any) -> list[Any]:
    """A history page of ten through the layer (what it copies and serves from Redis)."""
    if api.loop is None:
        return list(api.saver.list(conf, limit=10))

    async def collect() -> list[Any]:
        return [t async for t in api.saver.alist(conf, limit=10)]

    return list(run(api, collect()))


def hot_entries(raw: redis.Redis, prefix: str) -> dict[tuple[str, bytes], bytes]:
    """Every field of the hot layer's thread hashes under ``prefix``: (key, field) -> value."""
    found: dict[tuple[str, bytes], bytes] = {}
    for key in raw.scan_iter(match=f"{prefix}:hot1:*"):
        if raw.type(key) == b"hash":
            for field, value in raw.hgetall(key).items():
                found[(key.decode(), field)] = value
    return found


def hot_key(prefix: str, thread: str) -> str:
    return f"{prefix}:hot1:{{{thread}}}"


def copy_field(ns: str, checkpoint_id: str) -> bytes:
    return b"c\x00" + ns.encode() + b"\x00" + checkpoint_id.encode()


@pytest.mark.parametrize("kind", DURABLES)
def test_the_hot_redis_holds_no_plaintext_of_a_value_written_through_a_graph(
    kind: str, mode: str
) -> None:
    prefix = unique_prefix("hotenc")
    thread = f"t-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(REDIS_URL)
    with opened(mode, URLS[kind], kind, ring("a"), key_prefix=prefix, hot=REDIS_URL) as api:
        layer = api.saver
        assert layer.encryption is layer.durable.encryption is not None
        app, conf = graph(layer), config(thread)
        if api.loop is None:
            app.invoke({"items": ["start"]}, conf)
        else:
            run(api, app.ainvoke({"items": ["start"]}, conf))
        for _ in range(3):
            state = app.get_state(conf) if api.loop is None else run(api, app.aget_state(conf))
            assert state.values["items"] == ["start", f"{MARKER.decode()} noted"]
        hits = layer.reads["hit"]
        for _ in range(2):  # a history page through the layer: copied, then served
            assert [t.config for t in page(api, conf)] == [t.config for t in api.list(conf)]
        assert layer.reads["hit"] > hits > 0
    entries = hot_entries(raw, prefix)
    copies = [v for (_, field), v in entries.items() if field[:2] in (b"c\x00", b"p\x00")]
    assert copies, entries.keys()
    assert all(codec.unpackb(v)[4] == ENVELOPE_TAG for v in copies)
    assert not any(MARKER in v or b"noted" in v for v in entries.values())
    raw.delete(*{key for key, _ in entries})
    raw.close()


@pytest.mark.parametrize("kind", DURABLES)
def test_a_copy_planted_or_copied_from_another_thread_is_refused_not_served(
    kind: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique_prefix("hotenc")
    mine, theirs = f"t-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(REDIS_URL)
    # a migration window's ring reads plaintext from the durable store, never from Redis
    keys = ring("a", allow_plaintext=True)
    with opened(mode, URLS[kind], kind, keys, key_prefix=prefix, hot=REDIS_URL) as api:
        layer = api.saver
        # two threads with the same checkpoint id and write count, other values
        for thread, value in ((mine, "mine"), (theirs, "theirs-secret")):
            api.put(config(thread), checkpoint(1, {"x": value}, {"x": 1}), {"x": 1})
        cid = checkpoint(1, {}, {})["id"]
        for thread in (mine, theirs):
            for _ in range(2):
                api.get_tuple(config(thread))
        assert layer.reads["hit"] >= 2
        expected = layer.durable.get_tuple(config(mine))
        assert expected.checkpoint["channel_values"] == {"x": "mine"}
        field = copy_field("", cid)

        def served() -> Any:
            hits = layer.reads["hit"]
            found = api.get_tuple(config(mine))
            return found, layer.reads["hit"] - hits

        # their sealed copy copied into my thread's hash: refused, the durable read answers
        theirs_copy = raw.hget(hot_key(prefix, theirs), field)
        assert theirs_copy is not None
        raw.hset(hot_key(prefix, mine), field, theirs_copy)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="graphkeep.hot"):
            found, hits = served()
        assert (found, hits) == (expected, 0)
        assert "refused (tampered" in caplog.text and "theirs-secret" not in caplog.text
        # and the copy is made again, sealed at my thread: the next read is a hit
        assert served() == (expected, 1)
        # a plaintext copy planted with the right id and write count (no key needed)
        fmt, schema, _, writes, _, _ = codec.unpackb(raw.hget(hot_key(prefix, mine), field))
        forged = [
            expected.config,
            {**expected.checkpoint, "channel_values": {"x": "planted"}},
            expected.metadata,
            expected.parent_config,
            [],
        ]
        tag, data = layer.serde.dumps_typed(forged)
        raw.hset(hot_key(prefix, mine), field, codec.packb([fmt, schema, cid, writes, tag, data]))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="graphkeep.hot"):
            assert served() == (expected, 0)
        assert "refused (plaintext" in caplog.text and keys.plaintext_reads == 0
        # a flipped byte in my own sealed copy
        sealed = codec.unpackb(raw.hget(hot_key(prefix, mine), field))
        assert sealed[4] == ENVELOPE_TAG
        sealed[5] = sealed[5][:-1] + bytes([sealed[5][-1] ^ 1])
        raw.hset(hot_key(prefix, mine), field, codec.packb(sealed))
        assert served() == (expected, 0)
        assert served() == (expected, 1)
    raw.delete(hot_key(prefix, mine), hot_key(prefix, theirs))
    raw.close()
