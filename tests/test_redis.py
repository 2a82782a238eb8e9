"""Redis backend on a real server: round trips, TTL, key layout, errors, clients."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any, TypedDict

import pytest
import redis
import redis.asyncio as aredis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

import graphkeep
from graphkeep.backends.redis import AsyncRedisSaver, RedisSaver
from graphkeep.backends.redis.checkpoint_scripts import ELEMENT_INFIX
from graphkeep.checkpoint import lists
from graphkeep.errors import ConfigurationError, CorruptData, InvalidThreadId, StorageUnavailable

from .conftest import REDIS_CLUSTER_URL, REDIS_URL, unique_prefix

pytestmark = pytest.mark.redis


class CountingConnection(redis.Connection):
    """Counts network writes: one script call or one pipeline is one request."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        super().send_packed_command(command, check_health)


class AsyncCountingConnection(aredis.Connection):
    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        await super().send_packed_command(command, check_health)


def counting_client(connection_class: Any = CountingConnection, module: Any = redis) -> Any:
    kwargs = redis.connection.parse_url(REDIS_URL)
    pool = module.ConnectionPool(connection_class=connection_class, **kwargs)
    return module.Redis(connection_pool=pool)


@pytest.fixture
def counted() -> Any:
    client = counting_client()
    try:
        client.ping()
    except redis.ConnectionError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at {REDIS_URL} is not answering ({exc}); run ./dev services up")
    saver = RedisSaver(client, key_prefix=unique_prefix("rt"))
    saver.setup()
    yield saver
    client.close()


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def _requests(fn: Any) -> int:
    before = CountingConnection.sent
    fn()
    return CountingConnection.sent - before


def test_each_saver_call_is_one_round_trip(counted: RedisSaver, thread_id: str) -> None:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    v1 = counted.get_next_version(None, None)
    cp1 = _checkpoint({"messages": ["a"], "count": 1}, {"messages": v1, "count": v1})
    holder: dict[str, Any] = {}
    assert (
        _requests(
            lambda: holder.update(c=counted.put(config, cp1, {"step": 0}, cp1["channel_versions"]))
        )
        == 1
    )
    first = holder["c"]
    writes = [("messages", f"w{i}") for i in range(15)]
    assert _requests(lambda: counted.put_writes(first, writes, "task-1", "path")) == 1
    assert _requests(lambda: holder.update(t=counted.get_tuple(config))) == 1
    assert holder["t"].checkpoint["channel_values"] == {"messages": ["a"], "count": 1}
    parent = first
    for step in range(1, 130):
        version = f"{step + 1:032}.0"
        cp = _checkpoint({"count": step}, {"messages": v1, "count": version})
        parent = counted.put(parent, cp, {"step": step}, {"count": version})
    # one request per page of 100 checkpoints, with values and writes included
    assert _requests(lambda: holder.update(l=list(counted.list(config, limit=100)))) == 1
    assert len(holder["l"]) == 100
    assert _requests(lambda: holder.update(l=list(counted.list(config)))) == 2
    assert len(holder["l"]) == 130
    assert holder["l"][-1].pending_writes[0][2] == "w0"
    assert (
        _requests(
            lambda: holder.update(
                h=counted.get_delta_channel_history(config=config, channels=["messages"])
            )
        )
        == 1
    )
    history = holder["h"]["messages"]
    assert history["seed"] == ["a"]
    assert [w[2] for w in history["writes"]] == [f"w{i}" for i in range(15)]


def test_bad_thread_id_raises_before_any_request(counted: RedisSaver) -> None:
    for bad in (None, "", "x" * 2000, "a\x00b", {"$gt": ""}, ["a"], True, 1.5, b"b"):
        config: Any = {"configurable": {"thread_id": bad, "checkpoint_ns": ""}}
        before = CountingConnection.sent
        with pytest.raises(InvalidThreadId):
            counted.put(config, empty_checkpoint(), {}, {})
        with pytest.raises(InvalidThreadId):
            counted.get_tuple(config)
        with pytest.raises(InvalidThreadId):
            counted.put_writes(
                {**config, "configurable": {**config["configurable"], "checkpoint_id": "x"}},
                [("a", 1)],
                "t",
            )
        with pytest.raises(InvalidThreadId):
            list(counted.list(config))
        assert CountingConnection.sent == before


def test_int_and_str_thread_ids_are_the_same_thread(counted: RedisSaver) -> None:
    cp = _checkpoint({"x": 1}, {"x": "1"})
    counted.put({"configurable": {"thread_id": 4242, "checkpoint_ns": ""}}, cp, {}, {"x": "1"})
    found = counted.get_tuple({"configurable": {"thread_id": "4242"}})
    assert found is not None and found.checkpoint["channel_values"] == {"x": 1}
    assert found.config["configurable"]["thread_id"] == "4242"


def test_ttl_slides_over_every_key_of_the_thread(thread_id: str) -> None:
    with graphkeep.connect(REDIS_URL, key_prefix=unique_prefix("ttl"), ttl=100) as saver:
        client = saver.client
        keys = saver.port.thread_keys(thread_id)
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        cp1 = _checkpoint({"big": "unchanged", "n": 1}, {"big": "1", "n": "1"})
        stored = saver.put(config, cp1, {}, {"big": "1", "n": "1"})
        saver.put_writes(stored, [("n", 2)], "task")
        assert all(90_000 < client.pttl(k) <= 100_000 for k in keys)
        for k in keys:
            client.pexpire(k, 5_000)
        cp2 = _checkpoint({"big": "unchanged", "n": 2}, {"big": "1", "n": "2"})
        saver.put(stored, cp2, {}, {"n": "2"})
        # the blob of the unchanged channel is refreshed with the rest of the thread
        assert all(90_000 < client.pttl(k) <= 100_000 for k in keys)
        assert saver.get_tuple(config).checkpoint["channel_values"]["big"] == "unchanged"


def test_ttl_expires_an_idle_thread_and_read_refresh_keeps_it(thread_id: str) -> None:
    prefix = unique_prefix("ttl2")
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cp = _checkpoint({"n": 1}, {"n": "1"})
    with graphkeep.connect(
        REDIS_URL, key_prefix=prefix, ttl=1.0, refresh_ttl_on_read=True
    ) as saver:
        saver.put(config, cp, {}, {"n": "1"})
        for _ in range(4):  # reads keep it alive past its first expiry
            time.sleep(0.4)
            assert saver.get_tuple(config) is not None
    with graphkeep.connect(REDIS_URL, key_prefix=prefix, ttl=1.0) as saver:
        time.sleep(1.3)
        assert saver.get_tuple(config) is None
        assert not any(saver.client.exists(k) for k in saver.port.thread_keys(thread_id))


@pytest.mark.parametrize(
    "thread_id",
    ["a:b", "a{b}c", "}{", "%7B", "with space", "ünï|cødé#", "x" * 1024, "{x}" * 300],
)
def test_all_keys_of_a_thread_share_one_cluster_slot(thread_id: str) -> None:
    from redis.crc import key_slot

    with graphkeep.connect(REDIS_URL, key_prefix="slot-check", setup=False) as saver:
        slots = {key_slot(k.encode()) for k in saver.port.thread_keys(thread_id)}
    assert len(slots) == 1


def test_key_prefixes_isolate_apps_sharing_one_server(thread_id: str) -> None:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with (
        graphkeep.connect(REDIS_URL, key_prefix=unique_prefix("app1")) as one,
        graphkeep.connect(REDIS_URL, key_prefix=unique_prefix("app2")) as two,
    ):
        one.put(config, _checkpoint({"v": 1}, {"v": "1"}), {}, {"v": "1"})
        assert two.get_tuple(config) is None
        assert list(two.list(None)) == []
        assert len(list(one.list(None))) == 1


def test_cluster_saver_from_existing_client(thread_id: str) -> None:
    client = redis.RedisCluster.from_url(REDIS_CLUSTER_URL.replace("redis+cluster", "redis"))
    saver = RedisSaver(client, key_prefix=unique_prefix("cl"))
    saver.setup()
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stored = saver.put(config, _checkpoint({"v": [1]}, {"v": "1"}), {"source": "input"}, {"v": "1"})
    saver.put_writes(stored, [("v", 2)], "t1")
    got = saver.get_tuple(config)
    assert got is not None and got.pending_writes == [("t1", "v", 2)]
    saver.copy_thread(thread_id, thread_id + "-copy")
    assert saver.get_tuple({"configurable": {"thread_id": thread_id + "-copy"}}) is not None
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {
        thread_id,
        thread_id + "-copy",
    }
    client.close()


def test_refused_connection_names_the_url_without_password() -> None:
    url = "redis://admin:hunter2@127.0.0.1:1/0"
    with pytest.raises(StorageUnavailable) as info:
        with graphkeep.connect(url):
            pass
    assert "127.0.0.1:1" in str(info.value) and "hunter2" not in str(info.value)


def test_unknown_options_and_schemes_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="unknown option"):
        with graphkeep.connect(REDIS_URL, tll=5):
            pass
    with pytest.raises(ConfigurationError, match="scheme"):
        with graphkeep.connect("memcached://localhost"):
            pass
    with pytest.raises(ConfigurationError, match="key_prefix"):
        with graphkeep.connect(REDIS_URL, key_prefix="a{b}"):
            pass


def test_a_urls_key_prefix_query_is_the_key_prefix_option(thread_id: str) -> None:
    prefix = unique_prefix("urlq")
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with graphkeep.connect(f"{REDIS_URL}?key_prefix={prefix}") as by_url:
        by_url.put(config, _checkpoint({"v": 1}, {"v": "1"}), {}, {"v": "1"})
    with graphkeep.connect(REDIS_URL, key_prefix=prefix) as by_option:
        assert by_option.get_tuple(config) is not None
    with graphkeep.connect(REDIS_URL) as default_prefix:
        assert default_prefix.get_tuple(config) is None
    client = redis.Redis.from_url(REDIS_URL)
    assert any(client.scan_iter(match=f"{prefix}:*"))
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    with pytest.raises(ConfigurationError, match="both in the URL"):
        with graphkeep.connect(f"{REDIS_URL}?key_prefix=a", key_prefix="b"):
            pass
    with pytest.raises(ConfigurationError, match="empty key_prefix"):
        with graphkeep.connect_store(f"{REDIS_URL}?key_prefix="):
            pass


def test_decode_responses_client_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="decode_responses"):
        RedisSaver(redis.Redis.from_url(REDIS_URL, decode_responses=True))


async def test_async_saver_round_trips_and_serves_sync_calls_from_other_threads(
    thread_id: str,
) -> None:
    client = counting_client(AsyncCountingConnection, aredis)
    saver = AsyncRedisSaver(client, key_prefix=unique_prefix("as"))
    await saver.asetup()
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    before = AsyncCountingConnection.sent
    stored = await saver.aput(config, _checkpoint({"v": 1}, {"v": "1"}), {}, {"v": "1"})
    await saver.aput_writes(stored, [("v", 2)], "t")
    assert (await saver.aget_tuple(config)) is not None
    assert AsyncCountingConnection.sent - before == 3
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(t=saver.get_tuple(config)))
    worker.start()
    while worker.is_alive():
        await asyncio.sleep(0.01)
    assert result["t"].checkpoint["channel_values"] == {"v": 1}
    with pytest.raises(asyncio.InvalidStateError):
        saver.get_tuple(config)
    await client.aclose()


# -- list sharing (issue 13): a growing list is stored as element records + manifests --


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: _Chat) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(f"reply {n}: " + "x" * 200, id=f"ai-{n}")]}


def _chat_graph(saver: Any) -> Any:
    builder = StateGraph(_Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def _human(turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"question {turn}: " + "q" * 120, id=f"h-{turn}")]}


LIST_TURNS = 40


def _reference() -> tuple[Any, list[Any]]:
    """The same chat run on LangGraph's InMemorySaver: its latest messages and history."""
    memory = InMemorySaver()
    graph = _chat_graph(memory)
    config: Any = {"configurable": {"thread_id": "ref"}}
    for turn in range(LIST_TURNS):
        graph.invoke(_human(turn), config)
    history = [t.checkpoint["channel_values"].get("messages") for t in memory.list(config)]
    return graph.get_state(config).values["messages"], history


def _same(got: Any, want: Any) -> None:
    assert [type(m) for m in got] == [type(m) for m in want]
    assert got == want


def _element_fields(client: Any, saver: Any, thread_id: str) -> list[bytes]:
    blob_hash = saver.port.thread_keys(thread_id)[6]
    return [f for f in client.hkeys(blob_hash) if ELEMENT_INFIX in f]


def _blob_bytes(client: Any, saver: Any, thread_id: str) -> int:
    blob_hash = saver.port.thread_keys(thread_id)[6]
    return sum(len(k) + len(v) for k, v in client.hgetall(blob_hash).items())


def _referenced_elements(saver: Any, thread_id: str) -> set[tuple[str, str, str]]:
    """Element keys named by the manifests of the thread's stored checkpoints."""
    inventory = saver._call(saver.port.inventory(thread_id))
    wanted = sorted({(s.ns, ch, s.versions[ch]) for s in inventory.checkpoints for ch in s.present})
    blobs = saver._call(saver.port.get_blobs(thread_id, wanted))
    return set(lists.element_blob_keys("", [b for b in blobs.values() if lists.is_manifest(b)]))


def _count_sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sent = [0]
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return sent


@pytest.mark.parametrize("url", [REDIS_URL, REDIS_CLUSTER_URL], ids=["single", "cluster"])
def test_growing_list_is_stored_once_and_reads_back_whole(
    url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    want, want_history = _reference()
    with graphkeep.connect(url, key_prefix=unique_prefix("ls")) as saver:
        client = saver.client
        graph = _chat_graph(saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        sizes = {}
        for turn in range(LIST_TURNS):
            graph.invoke(_human(turn), config)
            if turn + 1 in (LIST_TURNS // 2, LIST_TURNS):
                sizes[turn + 1] = _blob_bytes(client, saver, thread_id)
        # each message is stored once, and the thread's values grow linearly
        assert len(_element_fields(client, saver, thread_id)) == 2 * LIST_TURNS
        assert sizes[LIST_TURNS] < 2.3 * sizes[LIST_TURNS // 2]

        sent = _count_sends(monkeypatch)
        fresh = graphkeep.connect  # a new saver remembers nothing: it reads every element
        with fresh(url, key_prefix=saver.port.prefix, setup=False) as reader:
            reader.get_tuple(config)  # the first call may load scripts / connect
            before = sent[0]
            latest = reader.get_tuple(config)
            assert sent[0] - before == 1
            _same(latest.checkpoint["channel_values"]["messages"], want)
            history = [t.checkpoint["channel_values"].get("messages") for t in reader.list(config)]
            assert len(history) == len(want_history)
            for got, expected in zip(history, want_history, strict=True):
                if expected is None:
                    assert got is None
                else:
                    _same(got, expected)
        monkeypatch.undo()

        # copy_thread: the target reads the same lists
        saver.copy_thread(thread_id, thread_id + "-copy")
        copied = saver.get_tuple({"configurable": {"thread_id": thread_id + "-copy"}})
        _same(copied.checkpoint["channel_values"]["messages"], want)

        # a removed message leaves an element only old checkpoints name: prune drops it
        extra = _human(LIST_TURNS)["messages"]
        graph.invoke({"messages": [RemoveMessage(id="h-0"), *extra]}, config)
        assert len(_element_fields(client, saver, thread_id)) == 2 * LIST_TURNS + 2
        want = [m for m in want if m.id != "h-0"] + extra
        want.append(_reply({"messages": want})["messages"][0])

        # prune keeps exactly the elements the surviving manifest names
        saver.prune([thread_id], strategy="keep_latest")
        stored = {
            (ns.decode(), ch.decode(), key.decode())
            for ns, ch, key in (
                f.split(b"\x00", 2) for f in _element_fields(client, saver, thread_id)
            )
        }
        assert stored == _referenced_elements(saver, thread_id)
        assert len(stored) == 2 * LIST_TURNS + 1
        _same(saver.get_tuple(config).checkpoint["channel_values"]["messages"], want)

        # delete_thread leaves nothing of the thread
        saver.delete_thread(thread_id)
        saver.delete_thread(thread_id + "-copy")
        for tid in (thread_id, thread_id + "-copy"):
            assert not any(client.exists(k) for k in saver.port.thread_keys(tid))


def test_missing_list_element_raises_corrupt_data(thread_id: str) -> None:
    with graphkeep.connect(REDIS_URL, key_prefix=unique_prefix("lc")) as saver:
        graph = _chat_graph(saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        for turn in range(6):
            graph.invoke(_human(turn), config)
        latest = saver.get_tuple(config)
        saver.client.hdel(
            saver.port.thread_keys(thread_id)[6],
            _element_fields(saver.client, saver, thread_id)[3],
        )
        with pytest.raises(CorruptData) as info:
            saver.get_tuple(config)
        assert thread_id in str(info.value)
        assert latest.config["configurable"]["checkpoint_id"] in str(info.value)
        with pytest.raises(CorruptData):
            list(saver.list(config))


async def test_async_growing_list_round_trips(thread_id: str) -> None:
    want, want_history = _reference()
    client = counting_client(AsyncCountingConnection, aredis)
    saver = AsyncRedisSaver(client, key_prefix=unique_prefix("als"))
    await saver.asetup()
    graph = _chat_graph(saver)
    config: Any = {"configurable": {"thread_id": thread_id}}
    for turn in range(LIST_TURNS):
        await graph.ainvoke(_human(turn), config)
    reader = AsyncRedisSaver(client, key_prefix=saver.port.prefix)
    before = AsyncCountingConnection.sent
    latest = await reader.aget_tuple(config)
    assert AsyncCountingConnection.sent - before == 1
    _same(latest.checkpoint["channel_values"]["messages"], want)
    history = [t.checkpoint["channel_values"].get("messages") async for t in reader.alist(config)]
    assert [h is None for h in history] == [h is None for h in want_history]
    for got, expected in zip(history, want_history, strict=True):
        if expected is not None:
            _same(got, expected)
    fields = await client.hkeys(saver.port.thread_keys(thread_id)[6])
    assert len([f for f in fields if ELEMENT_INFIX in f]) == 2 * LIST_TURNS
    await saver.acopy_thread(thread_id, thread_id + "-copy")
    copied = await saver.aget_tuple({"configurable": {"thread_id": thread_id + "-copy"}})
    _same(copied.checkpoint["channel_values"]["messages"], want)
    await saver.aprune([thread_id], strategy="keep_latest")
    fields = await client.hkeys(saver.port.thread_keys(thread_id)[6])
    assert len([f for f in fields if ELEMENT_INFIX in f]) == 2 * LIST_TURNS
    _same((await saver.aget_tuple(config)).checkpoint["channel_values"]["messages"], want)
    element = next(f for f in fields if ELEMENT_INFIX in f)
    await client.hdel(saver.port.thread_keys(thread_id)[6], element)
    with pytest.raises(CorruptData, match=thread_id) as info:
        await saver.aget_tuple(config)
    assert latest.config["configurable"]["checkpoint_id"] in str(info.value)
    for tid in (thread_id, thread_id + "-copy"):
        await saver.adelete_thread(tid)
        assert not await client.exists(*saver.port.thread_keys(tid))
    await client.aclose()
