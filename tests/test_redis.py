"""Redis backend on a real server: round trips, TTL, key layout, errors, clients."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.base import empty_checkpoint

import graphkeep
from graphkeep.backends.redis import AsyncRedisSaver, RedisSaver
from graphkeep.errors import ConfigurationError, InvalidThreadId, StorageUnavailable

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


def _client(connection_class: Any = CountingConnection, module: Any = redis) -> Any:
    kwargs = redis.connection.parse_url(REDIS_URL)
    pool = module.ConnectionPool(connection_class=connection_class, **kwargs)
    return module.Redis(connection_pool=pool)


@pytest.fixture
def counted() -> Any:
    client = _client()
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
        keys = saver.store.thread_keys(thread_id)
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
        assert not any(saver.client.exists(k) for k in saver.store.thread_keys(thread_id))


@pytest.mark.parametrize(
    "thread_id",
    ["a:b", "a{b}c", "}{", "%7B", "with space", "ünï|cødé#", "x" * 1024, "{x}" * 300],
)
def test_all_keys_of_a_thread_share_one_cluster_slot(thread_id: str) -> None:
    from redis.crc import key_slot

    with graphkeep.connect(REDIS_URL, key_prefix="slot-check", setup=False) as saver:
        slots = {key_slot(k.encode()) for k in saver.store.thread_keys(thread_id)}
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


def test_decode_responses_client_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="decode_responses"):
        RedisSaver(redis.Redis.from_url(REDIS_URL, decode_responses=True))


async def test_async_saver_round_trips_and_serves_sync_calls_from_other_threads(
    thread_id: str,
) -> None:
    client = _client(AsyncCountingConnection, aredis)
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
