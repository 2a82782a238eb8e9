"""Redis as the hot layer over MongoDB, DynamoDB and PostgreSQL (real servers), sync and async.

Every test reads through the layer and checks the answer against the durable store alone
(``get_tuple`` of the latest and of every checkpoint of the history, ``list``,
``get_state_history``), after each of these:

- a graph with two interrupts in one node (the interrupt write is replaced in place: the
  second question must show, never the cached first one), a fork from an older checkpoint;
- another writer of the durable store that never touches Redis (a process killed between
  its durable write and anything else, or one without the layer): new checkpoints and new
  pending writes on the checkpoint Redis holds;
- Redis flushed, Redis restored to an older copy of a thread (an older RDB snapshot), Redis
  down at start, killed mid-run and back, cut off by a proxy that stops answering (a
  partition between one process and Redis), Redis refusing Lua;
- 50 threads at once through one layer (threads on a sync layer, tasks on an async one);
- ``hot_ttl``: a thread leaves Redis that long after its last read and comes back on the next.
"""

from __future__ import annotations

import asyncio
import operator
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphkeep
from graphkeep.checkpoint.hot import PAUSE
from graphkeep.errors import ConfigurationError
from tests.conftest import unique_prefix
from tests.scenarios.servers import free_port

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")
REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001")
MONGODB_URL = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117/graphkeep_test")
DYNAMODB_URL = "dynamodb://graphkeep_test?region=us-east-1&endpoint_url=" + os.environ.get(
    "DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000"
)
DURABLES = [
    pytest.param("mongodb", marks=pytest.mark.mongodb),
    pytest.param("dynamodb", marks=pytest.mark.dynamodb),
    pytest.param("postgres"),
]


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def _first(state: State) -> dict[str, Any]:
    return {"items": ["first"]}


def _ask(state: State) -> dict[str, Any]:
    one = interrupt("question 1")
    two = interrupt("question 2")
    return {"items": [one, two]}


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("first", _first)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "first")
    builder.add_edge("first", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def _plain_graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("first", _first)
    builder.add_edge(START, "first")
    builder.add_edge("first", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


# -- the durable savers, with and without the layer ------------------------------------


@contextmanager
def _durable(kind: str, request: pytest.FixtureRequest) -> Iterator[tuple[Any, str | None]]:
    """A sync durable saver and the key prefix it uses (None: LangGraph's Postgres)."""
    if kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(request.getfixturevalue("postgres_url")) as pg:
            pg.setup()
            yield pg, None
        return
    prefix = unique_prefix("hot")
    url = MONGODB_URL if kind == "mongodb" else DYNAMODB_URL
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        yield saver, prefix


@asynccontextmanager
async def _adurable(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if kind == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        url = request.getfixturevalue("postgres_url")
        async with AsyncPostgresSaver.from_conn_string(url) as pg:
            await pg.setup()
            yield pg
        return
    url = MONGODB_URL if kind == "mongodb" else DYNAMODB_URL
    async with graphkeep.aconnect(url, key_prefix=unique_prefix("hot")) as saver:
        yield saver


def _pages(history: list[Any]) -> list[dict[str, Any]]:
    """``list`` calls a UI makes: the newest page (short and long), and an older one."""
    pages: list[dict[str, Any]] = [{"limit": 3}, {"limit": 10}]
    if len(history) > 2:
        pages.append({"before": history[1].config, "limit": 2})
    return pages


def _same(layer: Any, durable: Any, thread: str) -> None:
    """The layer answers as the durable store alone: latest, every checkpoint, lists."""
    assert layer.get_tuple(_config(thread)) == durable.get_tuple(_config(thread))
    history = list(durable.list(_config(thread)))
    assert list(layer.list(_config(thread))) == history
    for item in history:
        assert layer.get_tuple(item.config) == durable.get_tuple(item.config)
        assert layer.get_tuple(item.config) == item  # twice: the second from Redis
    for page in _pages(history):  # history pages, twice: the second from Redis
        expected = list(durable.list(_config(thread), **page))
        for _ in range(2):
            assert list(layer.list(_config(thread), **page)) == expected


async def _asame(layer: Any, durable: Any, thread: str) -> None:
    assert await layer.aget_tuple(_config(thread)) == await durable.aget_tuple(_config(thread))
    history = [item async for item in durable.alist(_config(thread))]
    assert [item async for item in layer.alist(_config(thread))] == history
    for item in history:
        assert await layer.aget_tuple(item.config) == await durable.aget_tuple(item.config)
        assert await layer.aget_tuple(item.config) == item
    for page in _pages(history):
        expected = [item async for item in durable.alist(_config(thread), **page)]
        for _ in range(2):
            assert [item async for item in layer.alist(_config(thread), **page)] == expected


def _hot_key(prefix: str | None, thread: str) -> str:
    return f"{prefix or 'graphkeep'}:hot1:{{{thread}}}"


# -- a Redis of the test's own, to kill, restart and cut off --------------------------


class PrivateRedis:
    """A ``redis-server`` on a free loopback port, stopped with SIGKILL and started again."""

    def __init__(self, *extra: str) -> None:
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = shutil.which("redis-server") or "/usr/bin/redis-server"
        args = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self.proc = subprocess.Popen(
            [*args, "--appendonly", "no", *self.extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    try:
        yield server
    finally:
        server.kill()


class Blackhole:
    """A loopback TCP proxy to Redis that can stop forwarding without closing anything:
    to the client, a partition (its requests get no answer)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.cut = threading.Event()
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.stopped.is_set():
                data = src.recv(65536)
                if not data:
                    break
                while self.cut.is_set() and not self.stopped.is_set():
                    time.sleep(0.01)  # hold the bytes: nothing arrives, nothing closes
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


# -- reads equal the durable store's ---------------------------------------------------


@pytest.mark.parametrize("kind", DURABLES)
def test_reads_through_the_layer_equal_the_durable_store_sync(
    kind: str, request: pytest.FixtureRequest
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with _durable(kind, request) as (durable, prefix):
        with graphkeep.hot_layer(durable, REDIS_URL) as layer:
            app = _graph(layer)
            config = _config(thread)
            app.invoke({"items": ["start"]}, config)
            _same(layer, durable, thread)
            assert app.get_state(config).tasks[0].interrupts[0].value == "question 1"
            app.invoke(Command(resume="answer 1"), config)
            # the interrupt write of the same task was replaced: never the cached first one
            for _ in range(2):
                assert app.get_state(config).tasks[0].interrupts[0].value == "question 2"
            _same(layer, durable, thread)
            app.invoke(Command(resume="answer 2"), config)
            for _ in range(3):
                state = app.get_state(config)
            assert state.values["items"] == ["start", "first", "answer 1", "answer 2"]
            _same(layer, durable, thread)
            # a fork from an older checkpoint: the newest is the fork's
            history = list(app.get_state_history(config))
            assert history == list(_graph(durable).get_state_history(config))
            older = history[-2].config
            app.update_state(older, {"items": ["forked"]})
            assert app.get_state(config).values["items"] == ["start", "forked"]
            _same(layer, durable, thread)
            assert layer.reads["hit"] > 0
            assert layer.reads["special"] > 0  # interrupted checkpoints came from the store


@pytest.mark.parametrize("kind", DURABLES)
async def test_reads_through_the_layer_equal_the_durable_store_async(
    kind: str, request: pytest.FixtureRequest
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    async with _adurable(kind, request) as durable:
        async with graphkeep.hot_layer(durable, REDIS_URL) as layer:
            app = _graph(layer)
            config = _config(thread)
            await app.ainvoke({"items": ["start"]}, config)
            await app.ainvoke(Command(resume="answer 1"), config)
            for _ in range(2):
                state = await app.aget_state(config)
                assert state.tasks[0].interrupts[0].value == "question 2"
            await _asame(layer, durable, thread)
            await app.ainvoke(Command(resume="answer 2"), config)
            for _ in range(3):
                state = await app.aget_state(config)
            assert state.values["items"] == ["start", "first", "answer 1", "answer 2"]
            await _asame(layer, durable, thread)
            assert layer.reads["hit"] > 0
            # a sync read from another thread hops onto the layer's loop
            found = await asyncio.to_thread(layer.get_tuple, config)
            assert found == await durable.aget_tuple(config)


# -- the durable store moved on without Redis; Redis went back, or away -----------------


@pytest.mark.parametrize("kind", DURABLES)
def test_a_read_is_never_stale_whatever_redis_holds(
    kind: str, request: pytest.FixtureRequest
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(REDIS_URL)
    with _durable(kind, request) as (durable, prefix):
        key = _hot_key(prefix, thread)
        with graphkeep.hot_layer(durable, REDIS_URL, hot_ttl=600) as layer:
            app, other = _plain_graph(layer), _plain_graph(durable)
            config = _config(thread)
            app.invoke({"items": ["one"]}, config)
            app.get_state(config)
            assert layer.get_tuple(config) == durable.get_tuple(config)
            snapshot = raw.dump(key)
            assert snapshot is not None
            hits = layer.reads["hit"]
            # another writer (without the layer, or killed right after its durable write)
            other.invoke({"items": ["two"]}, config)
            assert app.get_state(config).values["items"] == ["one", "first", "two", "first"]
            _same(layer, durable, thread)
            # a pending write added by that writer to the checkpoint Redis holds
            head = durable.get_tuple(config)
            durable.put_writes(head.config, [("items", ["pending"])], "task-elsewhere")
            found = layer.get_tuple(config)
            assert found == durable.get_tuple(config)
            assert ("task-elsewhere", "items", ["pending"]) in found.pending_writes
            # Redis restarted from an older snapshot: the old head is back in Redis
            raw.restore(key, 0, snapshot, replace=True)
            assert layer.get_tuple(config) == durable.get_tuple(config)
            _same(layer, durable, thread)
            # flushed
            raw.delete(key)
            assert layer.get_tuple(config) == durable.get_tuple(config)
            assert layer.get_tuple(config) == durable.get_tuple(config)
            assert layer.reads["hit"] > hits
            # deleted through the layer: gone from both
            layer.delete_thread(thread)
            assert raw.exists(key) == 0
            assert layer.get_tuple(config) is None
    raw.close()


@pytest.mark.parametrize("kind", DURABLES)
def test_redis_down_at_start_killed_and_back(
    kind: str, request: pytest.FixtureRequest, private_redis: PrivateRedis
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with _durable(kind, request) as (durable, _):
        # down at start: the layer is made, reads go to the durable store
        with graphkeep.hot_layer(durable, private_redis.url) as layer:
            app = _graph(layer)
            config = _config(thread)
            assert layer.get_tuple(config) is None
            assert layer.reads == {"error": 1}  # one read, counted once
            app.invoke({"items": ["start"]}, config)
            assert app.get_state(config).tasks[0].interrupts[0].value == "question 1"
            assert layer.reads["error"] >= 1
            _same(layer, durable, thread)
            private_redis.start()
            time.sleep(PAUSE + 0.1)
            app.invoke(Command(resume="answer 1"), config)
            app.invoke(Command(resume="answer 2"), config)
            done = app.get_state(config).config
            hits = layer.reads["hit"]
            app.get_state(config)
            assert layer.reads["hit"] == hits + 1
            # killed mid-run: nothing fails, nothing is stale
            private_redis.kill()
            errors = layer.reads["error"]
            app.invoke({"items": ["again"]}, config)
            state = app.get_state(config)
            assert state.values["items"][-2:] == ["again", "first"]
            assert state.tasks[0].interrupts[0].value == "question 1"
            assert layer.reads["error"] > errors
            _same(layer, durable, thread)
            # back (empty, as after a restart without persistence): hits again
            private_redis.start()
            time.sleep(PAUSE + 0.1)
            layer.get_tuple(done)
            hits = layer.reads["hit"]
            assert layer.get_tuple(done) == durable.get_tuple(done)
            assert layer.reads["hit"] == hits + 1


@pytest.mark.parametrize("kind", DURABLES)
def test_a_partition_to_redis_only_degrades_to_durable_reads(
    kind: str, request: pytest.FixtureRequest, private_redis: PrivateRedis
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    private_redis.start()
    proxy = Blackhole(private_redis.port)
    try:
        with _durable(kind, request) as (durable, _):
            url = f"redis://127.0.0.1:{proxy.port}/0"
            with graphkeep.hot_layer(durable, url) as layer:
                app = _plain_graph(layer)
                config = _config(thread)
                app.invoke({"items": ["one"]}, config)
                app.get_state(config)
                proxy.cut.set()
                started = time.monotonic()
                _plain_graph(durable).invoke({"items": ["two"]}, config)  # the store moves on
                assert app.get_state(config) == _plain_graph(durable).get_state(config)
                app.invoke({"items": ["three"]}, config)
                took = time.monotonic() - started
                assert layer.reads["error"] >= 1
                assert took < 10  # one timed-out request, then durable-only for a while
                proxy.cut.clear()
                time.sleep(PAUSE + 0.1)
                _same(layer, durable, thread)
    finally:
        proxy.close()


# -- bounds, many threads, bad input -----------------------------------------------------


@pytest.mark.parametrize("kind", DURABLES)
def test_a_thread_leaves_redis_hot_ttl_after_its_last_read(
    kind: str, request: pytest.FixtureRequest
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(REDIS_URL)
    with _durable(kind, request) as (durable, prefix):
        key = _hot_key(prefix, thread)
        with graphkeep.hot_layer(durable, REDIS_URL, hot_ttl=1.5) as layer:
            app = _plain_graph(layer)
            config = _config(thread)
            app.invoke({"items": ["one"]}, config)
            app.get_state(config)
            assert 0 < raw.pttl(key) <= 1500
            assert layer.footprint(thread) > 0
            time.sleep(0.8)
            app.get_state(config)  # a read slides the expiry
            assert raw.pttl(key) > 1000
            deadline = time.monotonic() + 10
            while raw.exists(key) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert raw.exists(key) == 0
            assert layer.footprint(thread) == 0
            assert app.get_state(config) == _plain_graph(durable).get_state(config)
            assert raw.exists(key) == 1  # back on the next read
    raw.close()


@pytest.mark.parametrize("kind", DURABLES)
def test_50_threads_at_once_sync(kind: str, request: pytest.FixtureRequest) -> None:
    threads = [f"t-{uuid.uuid4().hex[:8]}-{i}" for i in range(50)]
    with _durable(kind, request) as (durable, _):
        with graphkeep.hot_layer(durable, REDIS_URL) as layer:
            app = _plain_graph(layer)

            def run(thread: str) -> None:
                config = _config(thread)
                app.invoke({"items": [thread]}, config)
                app.get_state(config)
                app.invoke({"items": ["more"]}, config)
                app.get_state(config)

            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(run, threads))
            for thread in threads:
                state = app.get_state(_config(thread))
                assert state.values["items"] == [thread, "first", "more", "first"]
                assert layer.get_tuple(_config(thread)) == durable.get_tuple(_config(thread))
            assert layer.reads["hit"] >= 50


@pytest.mark.parametrize("kind", DURABLES)
async def test_50_threads_at_once_async(kind: str, request: pytest.FixtureRequest) -> None:
    threads = [f"t-{uuid.uuid4().hex[:8]}-{i}" for i in range(50)]
    async with _adurable(kind, request) as durable:
        async with graphkeep.hot_layer(durable, REDIS_URL) as layer:
            app = _plain_graph(layer)

            async def run(thread: str) -> None:
                config = _config(thread)
                await app.ainvoke({"items": [thread]}, config)
                await app.aget_state(config)
                await app.ainvoke({"items": ["more"]}, config)
                await app.aget_state(config)

            await asyncio.gather(*(run(t) for t in threads))
            for thread in threads:
                state = await app.aget_state(_config(thread))
                assert state.values["items"] == [thread, "first", "more", "first"]
                found = await layer.aget_tuple(_config(thread))
                assert found == await durable.aget_tuple(_config(thread))
            assert layer.reads["hit"] >= 50


def test_connect_with_hot_and_redis_cluster() -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    prefix = unique_prefix("hot")
    with graphkeep.connect(DYNAMODB_URL, key_prefix=prefix, hot=REDIS_CLUSTER_URL) as saver:
        app = _plain_graph(saver)
        app.invoke({"items": ["one"]}, _config(thread))
        for _ in range(3):
            state = app.get_state(_config(thread))
        assert state.values["items"] == ["one", "first"]
        assert saver.reads["hit"] == 2
        assert saver.hit_rate() == pytest.approx(2 / 4)


@pytest.mark.mongodb
def test_bad_input_is_a_configuration_error(private_redis: PrivateRedis) -> None:
    prefix = unique_prefix("hot")
    with pytest.raises(ConfigurationError, match="Redis URL"):
        with graphkeep.connect(MONGODB_URL, key_prefix=prefix, hot=MONGODB_URL):
            pass
    for bad in (0, -1, float("inf"), "60", True):
        with pytest.raises(ConfigurationError, match="hot_ttl"):
            with graphkeep.connect(MONGODB_URL, key_prefix=prefix, hot=REDIS_URL, hot_ttl=bad):
                pass
    with pytest.raises(ConfigurationError, match="hot_ttl is an option of the hot layer"):
        with graphkeep.connect(MONGODB_URL, key_prefix=prefix, hot_ttl=60):
            pass
    with graphkeep.connect(MONGODB_URL, key_prefix=prefix) as saver:
        with pytest.raises(ConfigurationError, match="key_prefix"):
            graphkeep.hot_layer(saver, f"{REDIS_URL}?key_prefix=other")
        with pytest.raises(ConfigurationError, match="key_prefix"):
            graphkeep.hot_layer(saver, REDIS_URL, key_prefix="other")
        # a Redis that refuses Lua scripts
        private_redis.extra = ("--rename-command", "SCRIPT", "", "--rename-command", "EVALSHA", "")
        private_redis.start()
        with pytest.raises(ConfigurationError, match="refused"):
            graphkeep.hot_layer(saver, private_redis.url)
        with graphkeep.hot_layer(saver, REDIS_URL) as layer:
            with pytest.raises(ConfigurationError, match="already has a hot layer"):
                graphkeep.hot_layer(layer, REDIS_URL)
    with graphkeep.connect(REDIS_URL, key_prefix=prefix) as redis_saver:
        with pytest.raises(ConfigurationError, match="in Redis already"):
            graphkeep.hot_layer(redis_saver, REDIS_URL)


async def test_the_official_suite_on_postgres_behind_the_layer_as_without_it() -> None:
    """LangGraph's own conformance suite against AsyncPostgresSaver behind the layer and
    alone, each capability on a fresh PostgreSQL schema: the layer passes every test the
    saver passes (the MongoDB and DynamoDB rows are in the conformance matrix: mongodb+hot
    and dynamodb+hot, 8/8 and the spec)."""
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import sql

    from conformance.factory import Connector
    from conformance.official import arun_official
    from conformance.setups import Setup
    from tests.conftest import POSTGRES_URL

    @asynccontextmanager
    async def aconnect(url: str, *, key_prefix: str, hot: str = "") -> AsyncIterator[Any]:
        schema = f"gk_official_{uuid.uuid4().hex[:10]}"
        admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
        await admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            joiner = "&" if "?" in url else "?"
            scoped = f"{url}{joiner}options=-csearch_path%3D{schema}"
            async with AsyncPostgresSaver.from_conn_string(scoped) as pg:
                await pg.setup()
                if not hot:
                    yield pg
                    return
                async with graphkeep.hot_layer(pg, hot, key_prefix=key_prefix) as layer:
                    yield layer
        finally:
            await admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            await admin.close()

    def errors() -> tuple[type[Exception], type[Exception]]:
        return graphkeep.errors.InvalidThreadId, graphkeep.errors.GraphkeepError

    def lease_errors() -> tuple[type[Exception], type[Exception]]:
        return graphkeep.errors.LeaseLost, graphkeep.errors.LockNotAcquired

    connector = Connector(
        connect=None,  # type: ignore[arg-type]
        aconnect=aconnect,
        errors=errors,
        lease_errors=lease_errors,
    )
    hot = await arun_official(Setup("postgres+hot", POSTGRES_URL, None, REDIS_URL), connector)
    alone = await arun_official(Setup("postgres", POSTGRES_URL, None), connector)
    assert {n: (o.passed, o.failed, o.not_implemented) for n, o in hot.items()} == {
        n: (o.passed, o.failed, o.not_implemented) for n, o in alone.items()
    }
    for name in ("put", "put_writes", "get_tuple", "list", "delete_thread"):
        assert hot[name].ok, hot[name].failures


@pytest.mark.parametrize("kind", [p for p in DURABLES if p.values[0] != "postgres"])
def test_two_processes_on_the_same_threads_under_the_lease(kind: str) -> None:
    """Two processes, each with its own layer on the same Redis and durable store, take
    turns on the same six threads (the durable saver's lease orders them): every read each
    one makes through its layer equals the durable store's, and no item is lost."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    url = MONGODB_URL if kind == "mongodb" else DYNAMODB_URL
    prefix = unique_prefix("hot")
    threads = [f"t-{uuid.uuid4().hex[:6]}-{i}" for i in range(6)]
    turns = 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.hot_worker", url, prefix, REDIS_URL, label, str(turns)]
            + threads,
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for label in ("one", "two")
    ]
    outputs = [w.communicate(timeout=600) for w in workers]
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, out + err[-3000:]
        assert "DONE" in out
    with graphkeep.connect(url, key_prefix=prefix, hot=REDIS_URL) as layer:
        for thread in threads:
            items = _plain_graph(layer).get_state(_config(thread)).values["items"]
            assert sorted(items) == sorted(f"{w}-{t}" for w in ("one", "two") for t in range(turns))
            _same(layer, layer.durable, thread)


@pytest.mark.dynamodb
def test_reads_are_counted_by_outcome_in_graphkeep_hot_reads() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    telemetry = {"meter_provider": MeterProvider(metric_readers=[reader])}
    thread = f"t-{uuid.uuid4().hex[:8]}"
    prefix = unique_prefix("hot")
    with graphkeep.connect(
        DYNAMODB_URL, key_prefix=prefix, hot=REDIS_URL, telemetry=telemetry
    ) as saver:
        app = _graph(saver)
        app.invoke({"items": ["start"]}, _config(thread))  # interrupted: special reads
        app.get_state(_config(thread))
        done = saver.get_tuple(_config(thread))
        assert done is not None
        parent = done.parent_config
        assert parent is not None
        for _ in range(3):
            saver.get_tuple(parent)  # a miss, then hits
        expected = dict(saver.reads)
    data: Any = reader.get_metrics_data()
    counted: dict[str, int] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "graphkeep.hot.reads":
                    points: Any = metric.data.data_points
                    for point in points:
                        outcome = str(point.attributes["graphkeep.hot.outcome"])
                        counted[outcome] = counted.get(outcome, 0) + int(point.value)
    assert counted == expected
    assert counted["hit"] == 2 and counted["special"] >= 2


@pytest.mark.parametrize("kind", [p for p in DURABLES if p.values[0] != "postgres"])
def test_the_durable_savers_own_methods_through_the_layer(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """watch, copy_thread and prune of a graphkeep saver (made with its own options, a
    ``ttl`` here), called on the layer."""
    source, target = (f"t-{uuid.uuid4().hex[:8]}" for _ in range(2))
    url = MONGODB_URL if kind == "mongodb" else DYNAMODB_URL
    with graphkeep.connect(url, key_prefix=unique_prefix("hot"), hot=REDIS_URL, ttl=3600) as layer:
        app = _plain_graph(layer)
        app.invoke({"items": ["one"]}, _config(source))
        first = app.get_state(_config(source))
        seen: list[Any] = []
        watcher = threading.Thread(
            target=lambda: seen.extend(
                layer.watch(source, after=first.config["configurable"]["checkpoint_id"], timeout=5)
            )
        )
        watcher.start()
        app.invoke({"items": ["two"]}, _config(source))
        watcher.join()
        assert seen and seen[-1] == layer.durable.get_tuple(_config(source))
        layer.copy_thread(source, target)
        assert app.get_state(_config(target)).values == app.get_state(_config(source)).values
        _same(layer, layer.durable, target)
        layer.prune([source], strategy="keep_latest")
        assert len(list(layer.list(_config(source)))) == 1
        _same(layer, layer.durable, source)
        assert app.get_state(_config(source)).values["items"] == ["one", "first", "two", "first"]


def _saver_classes(kind: str) -> tuple[Any, Any]:
    if kind == "mongodb":
        from graphkeep.backends.mongodb import AsyncMongoDBSaver, MongoDBSaver

        return MongoDBSaver, AsyncMongoDBSaver
    from graphkeep.backends.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver

    return DynamoDBSaver, AsyncDynamoDBSaver


@pytest.mark.parametrize("kind", [p for p in DURABLES if p.values[0] != "postgres"])
async def test_the_saver_classes_take_hot_and_hot_ttl(kind: str) -> None:
    """``from_url(url, hot=…, hot_ttl=…)`` of the saver classes, sync and async: the layer
    (a reload served from Redis, Redis expiring the thread after hot_ttl); bad ``hot=`` /
    ``hot_ttl`` are ConfigurationErrors before any connection."""
    sync_class, async_class = _saver_classes(kind)
    url = MONGODB_URL if kind == "mongodb" else DYNAMODB_URL
    prefix = unique_prefix("hot")
    thread, athread = (f"t-{uuid.uuid4().hex[:8]}" for _ in range(2))
    client = redis.Redis.from_url(REDIS_URL)
    with sync_class.from_url(url, key_prefix=prefix, hot=REDIS_URL, hot_ttl=120) as saver:
        assert type(saver).__name__ == "HotLayer"
        _plain_graph(saver).invoke({"items": ["one"]}, _config(thread))
        for _ in range(2):
            saver.get_tuple(_config(thread))
        assert saver.reads["hit"] == 1
        assert 0 < client.ttl(_hot_key(prefix, thread)) <= 120
    async with async_class.from_url(url, key_prefix=prefix, hot=REDIS_URL) as asaver:
        assert type(asaver).__name__ == "AsyncHotLayer"
        await _plain_graph(asaver).ainvoke({"items": ["one"]}, _config(athread))
        for _ in range(2):
            await asaver.aget_tuple(_config(athread))
        assert asaver.reads["hit"] == 1
        async with async_class.from_url(url, key_prefix=prefix) as plain:
            await _asame(asaver, plain, athread)
    client.close()
    for bad in ({"hot_ttl": 0}, {"hot": MONGODB_URL}, {"hot": REDIS_URL, "hot_ttl": -1}):
        with pytest.raises(ConfigurationError), sync_class.from_url(url, **bad):
            pass
        with pytest.raises(ConfigurationError):
            async with async_class.from_url(url, **bad):
                pass


@pytest.mark.dynamodb
def test_a_redis_cluster_down_at_start_is_durable_reads_not_a_failure() -> None:
    """redis-py's RedisCluster connects when it is made: the layer makes it on first use,
    so a cluster that does not answer yet costs durable reads (counted), never the layer."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    nowhere = f"redis+cluster://127.0.0.1:{free_port()}"
    with graphkeep.connect(DYNAMODB_URL, key_prefix=unique_prefix("hot"), hot=nowhere) as saver:
        app = _plain_graph(saver)
        app.invoke({"items": ["one"]}, _config(thread))
        assert app.get_state(_config(thread)).values == {"items": ["one", "first"]}
        assert saver.reads["error"] >= 1 and saver.reads["hit"] == 0
        _same(saver, saver.durable, thread)


@pytest.mark.dynamodb
async def test_agent_server_checkpointer_takes_hot_from_graphkeep_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``graphkeep.server:checkpointer`` (langgraph.json) with GRAPHKEEP_OPTIONS naming hot and
    hot_ttl: Agent Server's checkpointer is the layer."""
    from graphkeep import server

    prefix = unique_prefix("hot")
    thread = f"t-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GRAPHKEEP_URL", DYNAMODB_URL)
    monkeypatch.setenv("GRAPHKEEP_KEY_PREFIX", prefix)
    monkeypatch.setenv("GRAPHKEEP_OPTIONS", f'{{"hot": "{REDIS_URL}", "hot_ttl": 60}}')
    async with server.checkpointer() as saver:
        assert type(saver).__name__ == "AsyncHotLayer"
        await _plain_graph(saver).ainvoke({"items": ["one"]}, _config(thread))
        for _ in range(2):
            await saver.aget_tuple(_config(thread))
        assert saver.reads["hit"] == 1
    client = redis.Redis.from_url(REDIS_URL)
    assert 0 < client.ttl(_hot_key(prefix, thread)) <= 60
    client.close()
    monkeypatch.setenv("GRAPHKEEP_URL", REDIS_URL)  # a hot layer over Redis: no such option
    with pytest.raises(ConfigurationError, match="hot"):
        server.checkpointer_settings(os.environ)


class _CountingProber:
    """The layer's prober, counting its key-only reads of the durable store."""

    def __init__(self, prober: Any) -> None:
        self.prober = prober
        self.calls = 0

    def keys(self, *args: Any) -> Any:
        self.calls += 1
        return self.prober.keys(*args)

    async def akeys(self, *args: Any) -> Any:
        self.calls += 1
        return await self.prober.akeys(*args)


@pytest.mark.parametrize("kind", DURABLES)
def test_the_head_read_after_a_write_is_one_durable_read_not_two(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A checkpoint written through the layer makes Redis forget the namespace's newest copy
    and newest pages, and a miss fills from what the durable read itself shows: the first
    get_state and history page after a turn cost the durable store what they cost without
    the layer (no key-only read), the next ones one key-only read each (hits)."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = _config(thread)
    with _durable(kind, request) as (durable, _), graphkeep.hot_layer(durable, REDIS_URL) as layer:
        counting = _CountingProber(layer.prober)
        layer.prober = counting
        app = _plain_graph(layer)
        for turn in range(3):
            app.invoke({"items": [f"turn {turn}"]}, config)
            before, hits = counting.calls, layer.reads["hit"]
            app.get_state(config)
            history = list(app.get_state_history(config, limit=10))
            assert counting.calls == before  # misses: the durable reads only
            assert layer.reads["hit"] == hits
            app.get_state(config)
            assert list(app.get_state_history(config, limit=10)) == history
            assert counting.calls == before + 2  # hits: one key-only read each
            assert layer.reads["hit"] == hits + 2
            _same(layer, durable, thread)
