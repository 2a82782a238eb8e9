"""Redis ``saver.watch`` / ``awatch`` on the thread's feed (a Stream the put script appends to).

Real single node and real 3-node Cluster, sync and async savers: every checkpoint of a
LangGraph run reaches a live watcher once and in commit order; ``after=`` catch-up;
subgraph namespaces; ``timeout``; no leaked connections; put stays one round trip; the
feed is trimmed, expires and is deleted with its thread; a watcher further behind than
the trimming still loses nothing. The latency test prints p50/p95 from ``put`` return
to receipt (``pytest -s`` shows them).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypedDict

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph

import graphkeep
from graphkeep.backends.redis import AsyncRedisSaver, RedisSaver
from graphkeep.backends.redis.checkpoint_scripts import FEED_MAXLEN
from graphkeep.backends.redis.requests import Script, XRead
from graphkeep.checkpoint.watch import MAX_BLOCK_MS

from .conftest import REDIS_CLUSTER_URL, REDIS_URL, unique_prefix

pytestmark = pytest.mark.redis

URLS = {"redis": REDIS_URL, "cluster": REDIS_CLUSTER_URL}
WHERE = pytest.mark.parametrize("where", ["redis", "cluster"])
#: seconds after which a watcher that never ends fails the test instead of hanging it
SAFETY = 30.0


# -- helpers ---------------------------------------------------------------------------


class Spy:
    """Wraps a sync saver's executor: counts requests; ``reads`` counts feed reads sent."""

    def __init__(self, inner: Callable[[Any], Any]) -> None:
        self.inner = inner
        self.requests: list[Any] = []
        self.reads = 0
        self.lock = threading.Condition()

    def __call__(self, request: Any) -> Any:
        with self.lock:
            self.requests.append(request)
            if isinstance(request, XRead):
                self.reads += 1
                self.lock.notify_all()
        return self.inner(request)

    def wait_reads(self, count: int) -> None:
        """Until ``count`` feed reads have been sent (the watchers are live)."""
        with self.lock:
            assert self.lock.wait_for(lambda: self.reads >= count, SAFETY), "watcher never read"


class AsyncSpy:
    def __init__(self, inner: Callable[[Any], Awaitable[Any]]) -> None:
        self.inner = inner
        self.requests: list[Any] = []
        self.reads = 0

    async def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        if isinstance(request, XRead):
            self.reads += 1
        return await self.inner(request)

    async def wait_reads(self, count: int) -> None:
        deadline = time.monotonic() + SAFETY
        while self.reads < count:
            assert time.monotonic() < deadline, "watcher never read"
            await asyncio.sleep(0.005)


def _spy(saver: RedisSaver) -> Spy:
    spy = Spy(saver._execute)
    saver._execute = spy
    return spy


def _aspy(saver: AsyncRedisSaver) -> AsyncSpy:
    spy = AsyncSpy(saver._aexecute)
    saver._aexecute = spy
    return spy


class _Count(TypedDict):
    n: int


def _counter(saver: Any) -> Any:
    """A 1-node graph: three checkpoints per invoke (input, start, after ``inc``)."""
    builder = StateGraph(_Count)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    return builder.compile(checkpointer=saver)


def _nested(saver: Any) -> Any:
    """A graph whose first node is a subgraph: its checkpoints go to ``sub:<task>``."""
    inner = StateGraph(_Count)
    inner.add_node("deep", lambda s: {"n": s["n"] * 2})
    inner.add_edge(START, "deep")
    outer = StateGraph(_Count)
    outer.add_node("sub", inner.compile())
    outer.add_node("inc", lambda s: {"n": s["n"] + 1})
    outer.add_edge(START, "sub")
    outer.add_edge("sub", "inc")
    return outer.compile(checkpointer=saver)


def _config(thread_id: str, **more: Any) -> Any:
    return {"configurable": {"thread_id": thread_id, **more}}


def _key(found: Any) -> tuple[str, str]:
    conf = found.config["configurable"]
    return conf["checkpoint_ns"], conf["checkpoint_id"]


def _id(found: Any) -> str:
    return str(found.config["configurable"]["checkpoint_id"])


def _stored(saver: RedisSaver, thread_id: str, ns: str | None = "") -> list[str]:
    """The thread's checkpoint ids, oldest first (one writer: the commit order)."""
    config = _config(thread_id) if ns is None else _config(thread_id, checkpoint_ns=ns)
    return [_id(t) for t in saver.list(config)][::-1]


async def _astored(saver: AsyncRedisSaver, thread_id: str) -> list[str]:
    config = _config(thread_id, checkpoint_ns="")
    return [_id(t) async for t in saver.alist(config)][::-1]


def _watch_in_threads(
    saver: RedisSaver,
    spy: Spy,
    thread_id: str,
    write: Callable[[], None],
    stop: Callable[[list[Any]], bool],
    *watchers: dict[str, Any],
) -> list[list[Any]]:
    """Start one watcher thread per option dict, wait until each blocks on the feed,
    run ``write`` and return what each saw (each stops once ``stop(seen)``)."""
    seen: list[list[Any]] = [[] for _ in watchers]
    errors: list[BaseException] = []

    def run(options: dict[str, Any], got: list[Any]) -> None:
        try:
            for found in saver.watch(thread_id, timeout=SAFETY, **options):
                got.append(found)
                if stop(got):
                    break
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    reads = spy.reads
    threads = [
        threading.Thread(target=run, args=(options, got), daemon=True)
        for options, got in zip(watchers, seen, strict=True)
    ]
    for thread in threads:
        thread.start()
    spy.wait_reads(reads + len(threads))
    write()
    for thread in threads:
        thread.join(SAFETY + 5)
        assert not thread.is_alive(), "a watcher did not finish"
    assert not errors, errors
    return seen


async def _watch_in_task(
    saver: AsyncRedisSaver,
    spy: AsyncSpy,
    thread_id: str,
    write: Callable[[], Awaitable[None]],
    stop: Callable[[list[Any]], bool],
    **options: Any,
) -> list[Any]:
    got: list[Any] = []

    async def run() -> None:
        async with aclosing(saver.awatch(thread_id, timeout=SAFETY, **options)) as stream:
            async for found in stream:
                got.append(found)
                if stop(got):
                    break

    reads = spy.reads
    task = asyncio.create_task(run())
    await spy.wait_reads(reads + 1)
    await write()
    await asyncio.wait_for(task, SAFETY + 5)
    return got


def _put(saver: RedisSaver, parent: Any, **metadata: Any) -> Any:
    return saver.put(parent, empty_checkpoint(), metadata, {})


def _cluster_admin() -> Any:
    return redis.RedisCluster.from_url(REDIS_CLUSTER_URL.replace("redis+cluster", "redis"))


def _sync_client(where: str, **kwargs: Any) -> Any:
    if where == "cluster":
        url = REDIS_CLUSTER_URL.replace("redis+cluster", "redis")
        return redis.RedisCluster.from_url(url, **kwargs)
    return redis.Redis.from_url(REDIS_URL, **kwargs)


def _async_client(where: str, **kwargs: Any) -> Any:
    if where == "cluster":
        url = REDIS_CLUSTER_URL.replace("redis+cluster", "redis")
        return aredis.RedisCluster.from_url(url, **kwargs)
    return aredis.Redis.from_url(REDIS_URL, **kwargs)


def _connections(where: str, name: str) -> int:
    """Server-side connections named ``name`` (on every primary of the cluster)."""
    admin = _cluster_admin() if where == "cluster" else redis.Redis.from_url(REDIS_URL)
    try:
        if where == "cluster":
            listed = admin.client_list(target_nodes=admin.get_primaries())
            parts = listed.values() if isinstance(listed, dict) else [listed]
            clients = [c for part in parts for c in part]
        else:
            clients = admin.client_list()
        return sum(1 for c in clients if c.get("name") == name)
    finally:
        admin.close()


# -- every checkpoint of a run, once, in commit order -----------------------------------


@WHERE
def test_watch_sees_every_checkpoint_of_a_run_once_in_commit_order(
    where: str, thread_id: str
) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("w")) as saver:
        spy = _spy(saver)
        graph = _counter(saver)

        def write() -> None:
            for turn in range(10):
                graph.invoke({"n": turn}, _config(thread_id))

        [got] = _watch_in_threads(saver, spy, thread_id, write, lambda g: len(g) == 30, {})
        assert [_id(t) for t in got] == _stored(saver, thread_id)
        assert got[-1].checkpoint["channel_values"] == {"n": 10}
        assert [t.metadata["step"] for t in got] == list(range(-1, 29))
        # nothing else was committed: a watcher after the last one sees nothing
        assert list(saver.watch(thread_id, after=_id(got[-1]), timeout=0.3)) == []


@WHERE
async def test_awatch_sees_every_checkpoint_of_a_run_once_in_commit_order(
    where: str, thread_id: str
) -> None:
    async with graphkeep.aconnect(URLS[where], key_prefix=unique_prefix("aw")) as saver:
        spy = _aspy(saver)
        graph = _counter(saver)

        async def write() -> None:
            for turn in range(10):
                await graph.ainvoke({"n": turn}, _config(thread_id))

        got = await _watch_in_task(saver, spy, thread_id, write, lambda g: len(g) == 30)
        assert [_id(t) for t in got] == await _astored(saver, thread_id)
        assert got[-1].checkpoint["channel_values"] == {"n": 10}
        rest = [t async for t in saver.awatch(thread_id, after=_id(got[-1]), timeout=0.3)]
        assert rest == []


# -- after= catch-up, then live ---------------------------------------------------------


@WHERE
def test_after_yields_the_backlog_then_goes_on_live(where: str, thread_id: str) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wa")) as saver:
        spy = _spy(saver)
        graph = _counter(saver)
        for turn in range(4):
            graph.invoke({"n": turn}, _config(thread_id))
        before = _stored(saver, thread_id)
        assert len(before) == 12

        def write() -> None:
            for turn in range(3):
                graph.invoke({"n": turn}, _config(thread_id))

        [got] = _watch_in_threads(
            saver, spy, thread_id, write, lambda g: len(g) == 6 + 9, {"after": before[5]}
        )
        everything = _stored(saver, thread_id)
        assert [_id(t) for t in got] == everything[6:]
        # a watcher restarted from the last id it saw misses nothing and repeats nothing
        resumed = list(saver.watch(thread_id, after=_id(got[9]), timeout=0.3))
        assert [_id(t) for t in resumed] == everything[16:]


@WHERE
async def test_aafter_yields_the_backlog_then_goes_on_live(where: str, thread_id: str) -> None:
    async with graphkeep.aconnect(URLS[where], key_prefix=unique_prefix("awa")) as saver:
        spy = _aspy(saver)
        graph = _counter(saver)
        for turn in range(4):
            await graph.ainvoke({"n": turn}, _config(thread_id))
        before = await _astored(saver, thread_id)

        async def write() -> None:
            for turn in range(3):
                await graph.ainvoke({"n": turn}, _config(thread_id))

        got = await _watch_in_task(
            saver, spy, thread_id, write, lambda g: len(g) == 6 + 9, after=before[5]
        )
        assert [_id(t) for t in got] == (await _astored(saver, thread_id))[6:]


# -- namespaces -------------------------------------------------------------------------


@WHERE
def test_checkpoint_ns_none_sees_subgraph_checkpoints(where: str, thread_id: str) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wn")) as saver:
        spy = _spy(saver)
        graph = _nested(saver)

        def write() -> None:
            for turn in range(3):
                graph.invoke({"n": turn}, _config(thread_id))
            # a last root checkpoint tells both watchers the run is over
            _put(saver, _config(thread_id, checkpoint_ns=""), last=True)

        def last(got: list[Any]) -> bool:
            return bool(got[-1].metadata.get("last"))

        every, root = _watch_in_threads(
            saver, spy, thread_id, write, last, {"checkpoint_ns": None}, {}
        )
        stored = {(_key(t)) for t in saver.list(_config(thread_id))}
        assert {ns for ns, _ in stored} - {""}, "the subgraph stored nothing"
        assert len(every) == len(stored) and set(map(_key, every)) == stored
        assert [_id(t) for t in root] == _stored(saver, thread_id, "")
        assert [_id(t) for t in every if _key(t)[0] == ""] == [_id(t) for t in root]
        # each namespace in its own commit (= id, one writer) order
        for ns in {ns for ns, _ in stored}:
            mine = [_id(t) for t in every if _key(t)[0] == ns]
            assert mine == sorted(mine)
        # catch-up across namespaces: the store's index answers in id order
        first = _id(every[0])
        caught = list(saver.watch(thread_id, after=first, checkpoint_ns=None, timeout=0.3))
        assert [_id(t) for t in caught] == sorted(cid for _, cid in stored if cid > first)


# -- timeout and leaving ----------------------------------------------------------------


@WHERE
def test_timeout_ends_an_idle_watch(where: str, thread_id: str) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wt")) as saver:
        started = time.monotonic()
        assert list(saver.watch(thread_id, timeout=0.3)) == []
        assert time.monotonic() - started < 5


@WHERE
async def test_timeout_ends_an_idle_awatch(where: str, thread_id: str) -> None:
    async with graphkeep.aconnect(URLS[where], key_prefix=unique_prefix("awt")) as saver:
        started = time.monotonic()
        assert [t async for t in saver.awatch(thread_id, timeout=0.3)] == []
        assert time.monotonic() - started < 5


@WHERE
def test_leaving_a_watch_leaves_no_connection_behind(where: str, thread_id: str) -> None:
    name = f"gk-watch-{uuid.uuid4().hex[:8]}"
    client = _sync_client(where, client_name=name)
    try:
        saver = RedisSaver(client, key_prefix=unique_prefix("wl"))
        saver.setup()
        spy = _spy(saver)
        parent = _put(saver, _config(thread_id, checkpoint_ns=""))
        before = _connections(where, name)
        for _ in range(10):  # break after one live checkpoint
            holder: dict[str, Any] = {}

            def write(holder: dict[str, Any] = holder) -> None:
                holder["c"] = _put(saver, parent)

            [got] = _watch_in_threads(saver, spy, thread_id, write, lambda g: True, {})
            assert [_id(t) for t in got] == [holder["c"]["configurable"]["checkpoint_id"]]
        for _ in range(3):  # end by timeout
            assert list(saver.watch(thread_id, timeout=0.05)) == []
        # the pool keeps at most what ran at once (watcher + writer), not one per watch
        assert _connections(where, name) <= before + 2
    finally:
        client.close()


@WHERE
async def test_leaving_an_awatch_leaves_no_connection_behind(where: str, thread_id: str) -> None:
    name = f"gk-awatch-{uuid.uuid4().hex[:8]}"
    client = _async_client(where, client_name=name)
    try:
        saver = AsyncRedisSaver(client, key_prefix=unique_prefix("awl"))
        await saver.asetup()
        spy = _aspy(saver)
        parent = await saver.aput(_config(thread_id, checkpoint_ns=""), empty_checkpoint(), {}, {})
        before = await asyncio.to_thread(_connections, where, name)
        for _ in range(10):  # break after one live checkpoint

            async def write() -> None:
                await saver.aput(parent, empty_checkpoint(), {}, {})

            got = await _watch_in_task(saver, spy, thread_id, write, lambda g: True)
            assert len(got) == 1
        for _ in range(5):  # cancelled while blocked in XREAD (a client that went away)
            reads = spy.reads
            task = asyncio.create_task(anext(aiter(saver.awatch(thread_id))))
            await spy.wait_reads(reads + 1)
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        after = await asyncio.to_thread(_connections, where, name)
        assert after <= before + 2
    finally:
        await client.aclose()


@WHERE
def test_a_blocked_watcher_does_not_hold_up_other_calls(where: str, thread_id: str) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wb")) as saver:
        spy = _spy(saver)
        config = _put(saver, _config(thread_id, checkpoint_ns=""))
        timings: list[float] = []

        def write() -> None:
            time.sleep(0.2)  # the watcher's XREAD is now blocked on the server
            started = time.monotonic()
            assert saver.get_tuple(config) is not None
            _put(saver, config)
            timings.append(time.monotonic() - started)

        _watch_in_threads(saver, spy, thread_id, write, lambda g: True, {})
        # sharing one connection would wait out the block (MAX_BLOCK_MS)
        assert timings[0] < MAX_BLOCK_MS / 1000 / 2


@WHERE
def test_blocking_reads_stay_within_a_short_socket_timeout(where: str, thread_id: str) -> None:
    # a client with socket_timeout=0.3 s: the watcher's blocks are cut to fit, not failed
    client = _sync_client(where, socket_timeout=0.3)
    try:
        saver = RedisSaver(client, key_prefix=unique_prefix("wst"))
        saver.setup()
        spy = _spy(saver)
        config = _config(thread_id, checkpoint_ns="")

        def write() -> None:
            time.sleep(1.0)  # several socket timeouts later
            _put(saver, config, late=True)

        [got] = _watch_in_threads(saver, spy, thread_id, write, lambda g: True, {})
        assert got[0].metadata["late"] is True
        blocks = [r.block_ms for r in spy.requests if isinstance(r, XRead)]
        assert len(blocks) >= 3 and all(b == MAX_BLOCK_MS for b in blocks)
    finally:
        client.close()


async def test_a_blocked_awatch_does_not_hold_up_other_calls(thread_id: str) -> None:
    async with graphkeep.aconnect(REDIS_URL, key_prefix=unique_prefix("awb")) as saver:
        spy = _aspy(saver)
        config = await saver.aput(_config(thread_id, checkpoint_ns=""), empty_checkpoint(), {}, {})
        timings: list[float] = []

        async def write() -> None:
            await asyncio.sleep(0.2)
            started = time.monotonic()
            assert await saver.aget_tuple(config) is not None
            await saver.aput(config, empty_checkpoint(), {}, {})
            timings.append(time.monotonic() - started)

        await _watch_in_task(saver, spy, thread_id, write, lambda g: True)
        assert timings[0] < MAX_BLOCK_MS / 1000 / 2


# -- the feed: one round trip, trimmed, TTL, deleted with the thread --------------------


class CountingConnection(redis.Connection):
    """Counts network writes: one script call is one request."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        super().send_packed_command(command, check_health)


class AsyncCountingConnection(aredis.Connection):
    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        await super().send_packed_command(command, check_health)


def _feed(client: Any, saver: Any, thread_id: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return list(client.xrange(saver.port.feed_key(thread_id)))


def _feed_ids(client: Any, saver: Any, thread_id: str) -> list[tuple[str, str]]:
    """``(ns, checkpoint_id)`` of each feed entry: ids as text (``c``) or UUID bytes (``u``)."""
    return [
        (
            fields[b"n"].decode(),
            str(uuid.UUID(bytes=fields[b"u"])) if b"u" in fields else fields[b"c"].decode(),
        )
        for _, fields in _feed(client, saver, thread_id)
    ]


def test_put_is_one_round_trip_and_announces_a_new_checkpoint_once(thread_id: str) -> None:
    kwargs = redis.connection.parse_url(REDIS_URL)
    client = redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=CountingConnection, **kwargs)
    )
    try:
        saver = RedisSaver(client, key_prefix=unique_prefix("w1"))
        saver.setup()
        config = _config(thread_id, checkpoint_ns="")
        checkpoint = empty_checkpoint()
        before = CountingConnection.sent
        stored = saver.put(config, checkpoint, {"step": 0}, {})
        assert CountingConnection.sent - before == 1
        [(_, fields)] = _feed(client, saver, thread_id)
        # LangGraph's ids are UUIDs: the feed keeps their 16 bytes
        assert fields == {b"n": b"", b"u": uuid.UUID(checkpoint["id"]).bytes}
        # a retried put (same id) and writes add nothing to the feed
        saver.put(config, checkpoint, {"step": 0}, {})
        saver.put_writes(stored, [("n", 1)], "task")
        assert len(_feed(client, saver, thread_id)) == 1
        sub = saver.put(_config(thread_id, checkpoint_ns="child:1"), empty_checkpoint(), {}, {})
        assert _feed_ids(client, saver, thread_id)[-1] == (
            "child:1",
            sub["configurable"]["checkpoint_id"],
        )
        # any other id is kept as text (an upper-case UUID too: it must come back as it is)
        for odd in ("zz-custom-id", checkpoint["id"].upper()):
            saver.put(config, {**empty_checkpoint(), "id": odd}, {}, {})
            assert _feed(client, saver, thread_id)[-1][1] == {b"n": b"", b"c": odd.encode()}
        # both forms read back the same, through XREAD (blocking) and the feed script
        want = [
            ("", checkpoint["id"]),
            ("child:1", sub["configurable"]["checkpoint_id"]),
            ("", "zz-custom-id"),
            ("", checkpoint["id"].upper()),
        ]
        for wait_ms in (1, 0):
            found, _ = saver._call(saver.port.feed_read(thread_id, ("0-0", None), wait_ms))
            assert found == want
    finally:
        client.close()


@WHERE
def test_watch_on_a_resp3_client(where: str, thread_id: str) -> None:
    # redis-py shapes XREAD replies differently on RESP3: the feed reads both
    client = _sync_client(where, protocol=3)
    try:
        saver = RedisSaver(client, key_prefix=unique_prefix("w3"))
        saver.setup()
        spy = _spy(saver)
        config = _config(thread_id, checkpoint_ns="")
        written: list[str] = []

        def write() -> None:
            parent = config
            for odd in (None, "zz-text-id"):
                checkpoint = (
                    empty_checkpoint() if odd is None else {**empty_checkpoint(), "id": odd}
                )
                parent = saver.put(parent, checkpoint, {}, {})
                written.append(parent["configurable"]["checkpoint_id"])

        [got] = _watch_in_threads(saver, spy, thread_id, write, lambda g: len(g) == 2, {})
        assert [_id(t) for t in got] == written
    finally:
        client.close()


async def test_async_put_is_one_round_trip(thread_id: str) -> None:
    kwargs = redis.connection.parse_url(REDIS_URL)
    pool = aredis.ConnectionPool(connection_class=AsyncCountingConnection, **kwargs)
    client = aredis.Redis(connection_pool=pool)
    try:
        saver = AsyncRedisSaver(client, key_prefix=unique_prefix("aw1"))
        await saver.asetup()
        before = AsyncCountingConnection.sent
        await saver.aput(_config(thread_id, checkpoint_ns=""), empty_checkpoint(), {}, {})
        assert AsyncCountingConnection.sent - before == 1
        assert await client.xlen(saver.port.feed_key(thread_id)) == 1
    finally:
        await client.aclose()


def test_cluster_put_is_one_script_call_on_the_thread_slot(thread_id: str) -> None:
    from redis.crc import key_slot

    with graphkeep.connect(REDIS_CLUSTER_URL, key_prefix=unique_prefix("wc1")) as saver:
        spy = _spy(saver)
        saver.put(_config(thread_id, checkpoint_ns=""), empty_checkpoint(), {}, {})
        [request] = spy.requests
        assert isinstance(request, Script) and request.name == "put"
        assert saver.port.feed_key(thread_id) in request.keys
        assert len({key_slot(k.encode()) for k in request.keys}) == 1
        assert saver.client.xlen(saver.port.feed_key(thread_id)) == 1


@WHERE
def test_a_watcher_further_behind_than_the_trimming_loses_nothing(
    where: str, thread_id: str
) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wtr")) as saver:
        spy = _spy(saver)
        stream = saver.watch(thread_id, timeout=SAFETY)
        config = _config(thread_id, checkpoint_ns="")
        holder: dict[str, Any] = {}

        def write_one() -> None:
            spy.wait_reads(1)
            holder["c"] = _put(saver, config)

        writer = threading.Thread(target=write_one)
        writer.start()
        first = next(stream)  # the watcher is live, then stops reading for a while
        writer.join()
        assert _id(first) == holder["c"]["configurable"]["checkpoint_id"]
        parent = holder["c"]
        written = []
        for _ in range(FEED_MAXLEN + 300):
            parent = _put(saver, parent)
            written.append(parent["configurable"]["checkpoint_id"])
        # trimmed to about FEED_MAXLEN entries (whole stream nodes of 100 go at once)
        feed = _feed(saver.client, saver, thread_id)
        assert FEED_MAXLEN <= len(feed) <= FEED_MAXLEN + 200
        # what the watcher read last, and more after it, is gone from the feed
        kept = {cid for _, cid in _feed_ids(saver.client, saver, thread_id)}
        assert _id(first) not in kept and written[0] not in kept
        got = [_id(next(stream)) for _ in written]
        assert got == written
        stream.close()
        assert list(saver.watch(thread_id, after=written[-1], timeout=0.2)) == []


async def test_a_slow_awatcher_loses_nothing(thread_id: str) -> None:
    async with graphkeep.aconnect(REDIS_URL, key_prefix=unique_prefix("awtr")) as saver:
        spy = _aspy(saver)
        config = _config(thread_id, checkpoint_ns="")
        async with aclosing(saver.awatch(thread_id, timeout=SAFETY)) as stream:
            first = asyncio.create_task(anext(stream))
            await spy.wait_reads(1)
            parent = await saver.aput(config, empty_checkpoint(), {}, {})
            assert _id(await first) == parent["configurable"]["checkpoint_id"]
            written = []
            for _ in range(FEED_MAXLEN + 300):
                parent = await saver.aput(parent, empty_checkpoint(), {}, {})
                written.append(parent["configurable"]["checkpoint_id"])
            got = [_id(await anext(stream)) for _ in written]
        assert got == written


def test_the_feed_lives_and_expires_with_the_thread(thread_id: str) -> None:
    prefix = unique_prefix("wttl")
    config = _config(thread_id, checkpoint_ns="")
    with graphkeep.connect(REDIS_URL, key_prefix=prefix, ttl=100, refresh_ttl_on_read=True) as s:
        feed = s.port.feed_key(thread_id)
        stored = _put(s, config)
        assert 90_000 < s.client.pttl(feed) <= 100_000
        s.client.pexpire(feed, 5_000)
        assert s.get_tuple(config) is not None  # a refreshing read re-arms it too
        assert 90_000 < s.client.pttl(feed) <= 100_000
        s.client.pexpire(feed, 5_000)
        s.put_writes(stored, [("n", 1)], "task")
        assert 90_000 < s.client.pttl(feed) <= 100_000
    with graphkeep.connect(REDIS_URL, key_prefix=prefix, ttl=0.5) as s:
        _put(s, config)
        assert 0 < s.client.pttl(feed) <= 500
        time.sleep(1.0)
        assert not s.client.exists(feed)
        assert s.get_tuple(config) is None


@WHERE
def test_the_feed_goes_with_the_thread_and_copies_announce_new_checkpoints(
    where: str, thread_id: str
) -> None:
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wd")) as saver:
        client = saver.client
        graph = _counter(saver)
        runs = [str(uuid.uuid4()) for _ in range(2)]
        for turn, run in enumerate(runs):
            graph.invoke({"n": turn}, _config(thread_id, run_id=run))
        ids = _stored(saver, thread_id)
        assert [cid for _, cid in _feed_ids(client, saver, thread_id)] == ids
        # a copy announces each checkpoint new to the target once, oldest first
        copy = thread_id + "-copy"
        saver.copy_thread(thread_id, copy)
        saver.copy_thread(thread_id, copy)
        assert [cid for _, cid in _feed_ids(client, saver, copy)] == ids
        # pruning keeps the feed (a watcher skips what is gone)
        saver.prune([thread_id], strategy="keep_latest")
        assert len(_feed(client, saver, thread_id)) == len(ids)
        saver.delete_thread(thread_id)
        assert not client.exists(saver.port.feed_key(thread_id))
        assert not any(client.exists(k) for k in saver.port.thread_keys(thread_id))
        # deleting every checkpoint of a thread (by run) takes its feed too
        saver.delete_for_runs(runs)
        assert saver.get_tuple(_config(copy)) is None
        assert not client.exists(saver.port.feed_key(copy))


# -- latency ----------------------------------------------------------------------------


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


@WHERE
def test_watch_latency_from_put_return_to_receipt(where: str, thread_id: str) -> None:
    puts = 200
    with graphkeep.connect(URLS[where], key_prefix=unique_prefix("wlat")) as saver:
        spy = _spy(saver)
        returned: dict[str, float] = {}
        received: dict[str, float] = {}

        def stop(got: list[Any]) -> bool:
            received[_id(got[-1])] = time.perf_counter()
            return len(got) == puts

        def write() -> None:
            parent = _config(thread_id, checkpoint_ns="")
            for _ in range(puts):
                parent = _put(saver, parent)
                returned[parent["configurable"]["checkpoint_id"]] = time.perf_counter()
                time.sleep(0.002)

        _watch_in_threads(saver, spy, thread_id, write, stop, {})
        latencies = [(received[c] - returned[c]) * 1000 for c in returned]
        p50, p95 = _percentiles(latencies)
        print(f"\nwatch latency {where} sync, {puts} puts: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
        assert len(received) == puts
        assert p95 < 1000  # generous: only a watcher waiting out its block would miss it


async def test_awatch_latency_from_put_return_to_receipt(thread_id: str) -> None:
    puts = 200
    async with graphkeep.aconnect(REDIS_URL, key_prefix=unique_prefix("awlat")) as saver:
        spy = _aspy(saver)
        returned: dict[str, float] = {}
        received: dict[str, float] = {}

        def stop(got: list[Any]) -> bool:
            received[_id(got[-1])] = time.perf_counter()
            return len(got) == puts

        async def write() -> None:
            parent = _config(thread_id, checkpoint_ns="")
            for _ in range(puts):
                parent = await saver.aput(parent, empty_checkpoint(), {}, {})
                returned[parent["configurable"]["checkpoint_id"]] = time.perf_counter()
                await asyncio.sleep(0.002)

        await _watch_in_task(saver, spy, thread_id, write, stop)
        latencies = [(received[c] - returned[c]) * 1000 for c in returned]
        p50, p95 = _percentiles(latencies)
        print(f"\nwatch latency redis async, {puts} puts: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
        assert p95 < 1000


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_idle_watcher_and_follower_outlive_redis_pys_default_socket_timeout(
    mode: str, thread_id: str
) -> None:
    """redis-py's default 5 s socket timeout: blocking reads must end before it, quietly."""
    prefix = unique_prefix("idle")
    if mode == "sync":
        with (
            graphkeep.connect(REDIS_URL, key_prefix=prefix) as saver,
            graphkeep.connect_events(REDIS_URL, key_prefix=prefix, stale_after=30) as log,
        ):
            log.heartbeat("quiet")
            timer = threading.Timer(6.5, lambda: log.close("quiet", "success"))
            timer.start()
            outcome: list[Any] = []

            def watch() -> None:
                try:
                    outcome.append(list(saver.watch(thread_id, timeout=6.5)))
                except BaseException as exc:  # the assertion below reports it
                    outcome.append(exc)

            watcher = threading.Thread(target=watch)
            watcher.start()  # both idle at once: one 6.5 s wait, not two
            assert [e for _, e in log.read("quiet")] == [{"type": "close", "status": "success"}]
            watcher.join()
            assert outcome == [[]]
        return

    async def main() -> None:
        async with graphkeep.aconnect(REDIS_URL, key_prefix=prefix) as saver:
            assert [t async for t in saver.awatch(thread_id, timeout=6.5)] == []

    asyncio.run(main())
