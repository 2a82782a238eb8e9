"""The lean request path of the Redis backend (graphkeep.backends.redis.wire) keeps every
guarantee of the full one, on real servers: a connection the server drops under a running
call is sent again (never a reply read from a half-used socket, never a lost write), and the
client never opens more connections than its bound. Every Redis-family set-up, sync and
async; the server drops graphkeep's connections with ``CLIENT KILL ID`` while graphs run.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import graphkeep
from bench.concurrency_workload import established, socket_inodes
from conformance.setups import ENABLED, Setup
from conformance.testing import marks_for
from graphkeep.backends.redis import wire
from graphkeep.backends.redis.client import async_client, sync_client
from graphkeep.port.pools import PoolOptions
from tests.conftest import unique_prefix

FAMILY = ("redis", "redis-cluster", "valkey", "valkey-cluster")
SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in ENABLED if s.name in FAMILY]
#: graphkeep's bound in these tests: fewer connections than concurrent graphs
MAX_CONNECTIONS = 4
GRAPHS = 12
TURNS = 12


class State(TypedDict):
    n: int
    log: list[str]


def counting_graph(saver: Any) -> Any:
    """Two nodes per turn; ``log`` grows by two entries a turn (a shared list once long)."""
    builder = StateGraph(State)
    builder.add_node("a", lambda s: {"n": s["n"] + 1, "log": [*s["log"], f"a{s['n']:04d}" * 40]})
    builder.add_node("b", lambda s: {"n": s["n"] + 10, "log": [*s["log"], f"b{s['n']:04d}" * 40]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver)


def nodes(setup: Setup) -> list[tuple[str, int]]:
    """The (host, port) of every server of the set-up (each node of a cluster)."""
    base = urlsplit(setup.url.replace("+cluster://", "://"))
    if "+cluster://" not in setup.url:
        return [(base.hostname or "127.0.0.1", base.port or 6379)]
    client = redis.RedisCluster(host=base.hostname, port=base.port)
    try:
        return [(node.host, node.port) for node in client.get_nodes()]
    finally:
        client.close()


def named(url: str, name: str) -> str:
    """``url`` whose connections carry ``CLIENT SETNAME name`` (what the killer looks for)."""
    return f"{url}{'&' if '?' in url else '?'}client_name={name}"


class Background:
    """``step()`` on a thread of its own every ``pause()`` seconds while ``running()`` is
    entered; ``done()`` once it has stopped."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def pause(self) -> float:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def done(self) -> None:
        pass

    def run(self) -> None:
        while not self.stop.wait(self.pause()):
            self.step()

    @contextmanager
    def running(self) -> Iterator[Any]:
        self.thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            self.thread.join()
            self.done()


class Killer(Background):
    """Kills one of the connections named ``name`` on a random node every 30-80 ms, until
    stopped: calls in flight on it fail mid-request, idle ones fail at their next use."""

    def __init__(self, servers: list[tuple[str, int]], name: str) -> None:
        super().__init__()
        self.admins = [redis.Redis(host=h, port=p, socket_timeout=5) for h, p in servers]
        self.name = name
        self.killed = 0

    def pause(self) -> float:
        return random.uniform(0.03, 0.08)

    def step(self) -> None:
        admin = random.choice(self.admins)
        ours = [c["id"] for c in admin.client_list() if c.get("name") == self.name]
        if ours:
            admin.client_kill_filter(_id=random.choice(ours))
            self.killed += 1

    def done(self) -> None:
        for admin in self.admins:
            admin.close()


class Peak(Background):
    """The most sockets of this process to each server port, sampled every 10 ms (only
    sockets opened after it was made: the client under test's)."""

    def __init__(self, servers: list[tuple[str, int]]) -> None:
        super().__init__()
        self.ports = frozenset(p for _, p in servers)
        self.before = frozenset(socket_inodes())
        self.most = 0

    def pause(self) -> float:
        return 0.01

    def step(self) -> None:
        for port in self.ports:
            self.most = max(self.most, established(frozenset({port}), self.before))

    def done(self) -> None:
        self.step()


def allowed(setup: Setup) -> int:
    """A cluster node's own pool is twice the gate (redis-py's slot-map reads)."""
    return 2 * MAX_CONNECTIONS if "+cluster://" in setup.url else MAX_CONNECTIONS


def expected(turns: int) -> tuple[int, int]:
    """``n`` and the length of ``log`` after ``turns`` turns from ``{"n": 0, "log": []}``."""
    n = 0
    for _ in range(turns):
        n += 11
    return n, 2 * turns


@pytest.mark.parametrize("setup", SETUPS)
def test_dropped_connections_are_sent_again_within_the_bound(setup: Setup) -> None:
    name = f"gk-lean-{uuid.uuid4().hex[:8]}"
    servers = nodes(setup)
    peak = Peak(servers)
    url = named(setup.url, name)
    with graphkeep.connect(
        url, key_prefix=unique_prefix("lean"), max_connections=MAX_CONNECTIONS
    ) as saver:
        graph = counting_graph(saver)

        def run(i: int) -> tuple[int, int]:
            config = {"configurable": {"thread_id": f"lean-{i}"}}
            graph.invoke({"n": 0, "log": []}, config)
            for _ in range(TURNS - 1):
                graph.invoke({"n": graph.get_state(config).values["n"]}, config)
            values = saver.get_tuple(config).checkpoint["channel_values"]
            return values["n"], len(values["log"])

        with peak.running(), Killer(servers, name).running() as killer:
            with ThreadPoolExecutor(GRAPHS) as pool:
                results = list(pool.map(run, range(GRAPHS)))
    assert killer.killed > 0
    assert results == [expected(TURNS)] * GRAPHS
    assert 0 < peak.most <= allowed(setup), peak.most


@pytest.mark.parametrize("setup", SETUPS)
async def test_async_dropped_connections_are_sent_again_within_the_bound(setup: Setup) -> None:
    name = f"gk-lean-{uuid.uuid4().hex[:8]}"
    servers = nodes(setup)
    peak = Peak(servers)
    url = named(setup.url, name)
    async with graphkeep.aconnect(
        url, key_prefix=unique_prefix("lean"), max_connections=MAX_CONNECTIONS
    ) as saver:
        graph = counting_graph(saver)

        async def run(i: int) -> tuple[int, int]:
            config = {"configurable": {"thread_id": f"lean-{i}"}}
            await graph.ainvoke({"n": 0, "log": []}, config)
            for _ in range(TURNS - 1):
                state = await graph.aget_state(config)
                await graph.ainvoke({"n": state.values["n"]}, config)
            found = await saver.aget_tuple(config)
            assert found is not None
            values = found.checkpoint["channel_values"]
            return values["n"], len(values["log"])

        with peak.running(), Killer(servers, name).running() as killer:
            results = await asyncio.gather(*(run(i) for i in range(GRAPHS)))
    assert killer.killed > 0
    assert results == [expected(TURNS)] * GRAPHS
    assert 0 < peak.most <= allowed(setup), peak.most


#: answers its argument, or a script's own error reply (as the fence and the event log's
#: scripts answer a refusal) when told "no"
ERRING = (
    "if ARGV[1] == 'no' then return redis.error_reply('GK_LEANTEST refused') end return ARGV[1]"
)


def connection_ids(servers: list[tuple[str, int]], name: str) -> set[int]:
    """The server-side ids of the connections named ``name`` on every node."""
    ids: set[int] = set()
    for host, port in servers:
        with redis.Redis(host=host, port=port, socket_timeout=5) as admin:
            ids |= {int(c["id"]) for c in admin.client_list() if c.get("name") == name}
    return ids


@pytest.mark.parametrize("setup", SETUPS)
def test_a_script_error_reply_gives_its_connection_back_as_it_is(setup: Setup) -> None:
    """A script's error reply (a fence refusal, a closed run) was read whole: the connection
    goes back to the pool, not closed — a refusal costs no reconnection. (The first lean path
    dropped it: a new connection after every refusal.)"""
    name = f"gk-lean-{uuid.uuid4().hex[:8]}"
    servers, key = nodes(setup), f"{{{name}}}:k"
    client = sync_client(named(setup.url, name), PoolOptions(max_connections=MAX_CONNECTIONS))
    try:
        sha = client.script_load(ERRING)
        pool, cluster = wire.route(client, [key]), isinstance(client, redis.RedisCluster)
        assert wire.call(pool, ("EVALSHA", sha, 1, key, "first"), cluster) == b"first"
        before = connection_ids(servers, name)
        for i in range(10):
            with pytest.raises(redis.ResponseError, match="GK_LEANTEST refused"):
                wire.call(pool, ("EVALSHA", sha, 1, key, "no"), cluster)
            assert wire.call(pool, ("EVALSHA", sha, 1, key, f"v{i}"), cluster) == f"v{i}".encode()
        assert connection_ids(servers, name) == before
    finally:
        client.close()


@pytest.mark.parametrize("setup", SETUPS)
async def test_async_a_script_error_reply_gives_its_connection_back_as_it_is(
    setup: Setup,
) -> None:
    name = f"gk-lean-{uuid.uuid4().hex[:8]}"
    servers, key = nodes(setup), f"{{{name}}}:k"
    client = async_client(named(setup.url, name), PoolOptions(max_connections=MAX_CONNECTIONS))
    try:
        sha = await client.script_load(ERRING)
        where = wire.aroute(client, [key])
        assert await wire.acall(where, ("EVALSHA", sha, 1, key, "first")) == b"first"
        before = connection_ids(servers, name)
        for i in range(10):
            with pytest.raises(redis.ResponseError, match="GK_LEANTEST refused"):
                await wire.acall(where, ("EVALSHA", sha, 1, key, "no"))
            assert await wire.acall(where, ("EVALSHA", sha, 1, key, f"v{i}")) == f"v{i}".encode()
        assert connection_ids(servers, name) == before
    finally:
        await client.aclose()


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_call_cancelled_at_any_point_gives_its_connection_back(setup: Setup) -> None:
    """Calls cancelled at every step of the loop (checkout, write, read, give-back), some
    cancelled again a step later (a caller that cancels until its task ends): each answers
    its own reply or is cancelled, and afterwards every connection is back — as many calls
    at once as the pool holds all answer at once, each with its own reply."""
    name = f"gk-lean-{uuid.uuid4().hex[:8]}"
    size, key = 2, f"{{{name}}}:k"
    client = async_client(named(setup.url, name), PoolOptions(size, pool_timeout=5))
    try:
        sha = await client.script_load(ERRING)
        where = wire.aroute(client, [key])
        await wire.acall(where, ("EVALSHA", sha, 1, key, "first"))  # connected
        outcomes: set[str] = set()
        for i in range(400):
            task = asyncio.create_task(wire.acall(where, ("EVALSHA", sha, 1, key, f"c{i}")))
            for _ in range(i % 9):
                await asyncio.sleep(0)
            task.cancel()
            if i % 2:
                await asyncio.sleep(0)
                task.cancel()
            try:
                assert await task == f"c{i}".encode()
                outcomes.add("answered")
            except asyncio.CancelledError:
                outcomes.add("cancelled")
        assert outcomes == {"answered", "cancelled"}

        async def one(j: int) -> bytes:
            return await wire.acall(where, ("EVALSHA", sha, 1, key, f"after{j}"))  # type: ignore[no-any-return]

        answers = await asyncio.wait_for(asyncio.gather(*(one(j) for j in range(size))), 15)
        assert answers == [f"after{j}".encode() for j in range(size)]
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()
