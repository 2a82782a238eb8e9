"""DynamoDB live threads: ``saver.watch`` / ``awatch`` and the run event log, on a real
DynamoDB endpoint (moto_server over HTTP by default, ``DYNAMODB_ENDPOINT_URL``).

One table for the module (deleted at the end); every test works under its own key prefix,
so tests never see each other's threads or runs. moto is slow: loops stay small.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypedDict
from urllib.parse import urlsplit

import boto3
import pytest
from langgraph.graph import END, START, StateGraph

import graphkeep
from graphkeep.backends.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from graphkeep.backends.dynamodb.events import (
    AsyncDynamoDBEventLog,
    DynamoDBEventLog,
    DynamoDBEventsPort,
    event_sk,
)
from graphkeep.backends.dynamodb.items import EXP
from graphkeep.errors import (
    EventsTrimmed,
    InvalidInput,
    RunClosed,
    RunStale,
    UnknownRun,
)
from graphkeep.events.port import Batch
from graphkeep.port import drive

from .conftest import unique_prefix

pytestmark = pytest.mark.dynamodb

ENDPOINT = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
REGION = "us-east-1"
for _name, _value in (
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_DEFAULT_REGION", REGION),
):
    os.environ.setdefault(_name, _value)


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), 2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def table() -> Iterator[str]:
    if not _reachable(ENDPOINT):
        pytest.fail(f"no DynamoDB endpoint answers at {ENDPOINT}; run ./dev services up")
    name = f"gk_live_{uuid.uuid4().hex[:10]}"
    with DynamoDBSaver.from_table(name, REGION, ENDPOINT) as saver:  # creates it
        yield name
        saver.client.delete_table(TableName=name)


@pytest.fixture(scope="module")
def raw() -> Iterator[Any]:
    made = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    yield made
    made.close()


def _url(table: str) -> str:
    return f"dynamodb://{table}?region={REGION}&endpoint_url={ENDPOINT}"


class Calls:
    """API calls counted with botocore's event hooks (one entry per request sent)."""

    def __init__(self, client: Any) -> None:
        self.names: list[str] = []
        client.meta.events.register("before-call.dynamodb.*", self._seen)

    def _seen(self, model: Any, **_: Any) -> None:
        self.names.append(model.name)

    def since(self, start: int) -> list[str]:
        return self.names[start:]


# --------------------------------------------------------------------------- watch


class State(TypedDict):
    n: int


def _step(state: State) -> dict[str, int]:
    return {"n": state["n"] + 1}


def _graph(saver: Any, *, subgraph: bool = False) -> Any:
    builder = StateGraph(State)
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    if subgraph:
        inner = StateGraph(State)
        inner.add_node("inner", _step)
        inner.add_edge(START, "inner")
        inner.add_edge("inner", END)
        builder.add_node("child", inner.compile(checkpointer=True))
        builder.add_edge("step", "child")
        builder.add_edge("child", END)
    else:
        builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _ids(saver: Any, thread: str, ns: str | None = "") -> list[tuple[str, str]]:
    """Every stored (ns, id) of the thread, ascending by id."""
    found = [
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
        for t in saver.list(_config(thread))
    ]
    return sorted((c for c in found if ns is None or c[0] == ns), key=lambda c: (c[1], c[0]))


def _seen(tuples: list[Any]) -> list[tuple[str, str]]:
    return [
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
        for t in tuples
    ]


def _watch_in_thread(saver: Any, thread: str, **options: Any) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    started = threading.Event()

    def run() -> None:
        iterator = saver.watch(thread, **options)
        started.set()
        got.extend(iterator)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    started.wait(10)
    return worker, got


def test_watch_sees_every_checkpoint_of_ten_invokes_in_order_exactly_once(table: str) -> None:
    with DynamoDBSaver.from_url(_url(table), key_prefix=unique_prefix("watch")) as saver:
        graph = _graph(saver)
        graph.invoke({"n": 0}, _config("t"))  # history before the watch: not yielded
        before = _ids(saver, "t")
        calls = Calls(saver.client)
        watcher, got = _watch_in_thread(saver, "t", timeout=3, poll_interval=0.05)
        deadline = time.monotonic() + 20
        while "Query" not in calls.names and time.monotonic() < deadline:
            time.sleep(0.01)  # the watcher has taken its starting point (newest_commit)
        for i in range(10):
            graph.invoke({"n": i}, _config("t"))
        watcher.join(60)
        assert not watcher.is_alive()
        expected = [c for c in _ids(saver, "t") if c not in before]
        assert len(expected) == 30  # input, loop, step per invoke
        assert _seen(got) == expected
        assert got[-1].checkpoint["channel_values"]["n"] == 10
        # after=: every later checkpoint at once, then live (here: until the timeout)
        middle = expected[14][1]
        resumed = list(saver.watch("t", after=middle, timeout=0.3))
        assert _seen(resumed) == expected[15:]


def test_watch_every_namespace_sees_subgraph_checkpoints_once_each_in_order(table: str) -> None:
    with DynamoDBSaver.from_url(_url(table), key_prefix=unique_prefix("watchns")) as saver:
        graph = _graph(saver, subgraph=True)
        # an empty thread: the watcher starts before the first checkpoint, whenever it runs
        watcher, got = _watch_in_thread(
            saver, "t", checkpoint_ns=None, timeout=3, poll_interval=0.05
        )
        for i in range(3):
            graph.invoke({"n": i}, _config("t"))
        watcher.join(60)
        everything = _ids(saver, "t", ns=None)
        assert {ns for ns, _ in everything} == {"", "child"}
        # every checkpoint once, each namespace's in id order; across namespaces in commit
        # order, which is not id order: LangGraph puts a subgraph's checkpoint and its
        # parent's on different threads, so a child's (higher id) can commit first
        seen = _seen(got)
        assert sorted(seen, key=lambda c: c[1]) == everything and len(set(seen)) == len(seen)
        for ns in ("", "child"):
            assert [c for c in seen if c[0] == ns] == [c for c in everything if c[0] == ns]
        # one namespace only sees its own
        root = list(saver.watch("t", after=everything[0][1], timeout=0.3))
        assert _seen(root) == [c for c in everything[1:] if c[0] == ""]
        # ns=None paging: pages of the store's commits stay ascending and complete
        pages: list[tuple[str, str]] = []
        above = None
        while True:
            page = drive(saver.port.commits("t", None, above, 4), saver._execute)
            pages += page
            if len(page) < 4:
                break
            above = page[-1][1]
        assert pages == everything


def test_watch_timeout_ends_and_an_idle_poll_is_one_query(table: str) -> None:
    with DynamoDBSaver.from_url(_url(table), key_prefix=unique_prefix("idle")) as saver:
        _graph(saver).invoke({"n": 0}, _config("t"))
        calls = Calls(saver.client)
        start = time.monotonic()
        assert list(saver.watch("t", timeout=1.0, poll_interval=0.1)) == []
        elapsed = time.monotonic() - start
        made = calls.since(0)
        assert 0.9 <= elapsed < 10
        # newest_commit once, then one Query per poll and nothing else
        assert set(made) == {"Query"}
        assert 3 <= len(made) <= 1 + elapsed / 0.1 + 1
        # the unknown thread: no checkpoints, no error, ends on time
        assert list(saver.watch("nobody", timeout=0.2)) == []


async def test_awatch_sees_every_checkpoint_and_releases_on_break(table: str) -> None:
    url = _url(table)
    async with AsyncDynamoDBSaver.from_url(url, key_prefix=unique_prefix("awatch")) as saver:
        graph = _graph(saver)
        got: list[Any] = []
        ready = asyncio.Event()

        async def watch() -> None:
            stream = saver.awatch("t", timeout=3, poll_interval=0.05)
            ready.set()
            async for item in stream:
                got.append(item)

        # an empty thread: the watcher's first read (its floor) is answered before the first
        # checkpoint is written; a busy machine may otherwise run it after (then the watcher
        # rightly starts from there, and ``after=`` is how a client misses nothing)
        floor_read = asyncio.Event()
        saver.client.meta.events.register("after-call.dynamodb.Query", lambda **_: floor_read.set())
        task = asyncio.create_task(watch())
        await ready.wait()
        await asyncio.wait_for(floor_read.wait(), 30)
        for i in range(10):
            await graph.ainvoke({"n": i}, _config("t"))
        await asyncio.wait_for(task, 60)
        expected = _ids_async(await _alist(saver, "t"))
        assert len(expected) == 30
        assert _seen(got) == expected
        # leaving the loop early: the generator closes, nothing keeps polling
        stream = saver.awatch("t", after=expected[0][1])
        async for _first in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]


async def _alist(saver: Any, thread: str) -> list[Any]:
    return [t async for t in saver.alist(_config(thread))]


def _ids_async(tuples: list[Any]) -> list[tuple[str, str]]:
    return sorted(_seen(tuples), key=lambda c: (c[1], c[0]))


# --------------------------------------------------------------------------- event log


@pytest.fixture
def events(table: str) -> Iterator[DynamoDBEventLog]:
    with graphkeep.connect_events(_url(table), key_prefix=unique_prefix("ev")) as log:
        assert isinstance(log, DynamoDBEventLog)
        yield log


def test_append_ids_increase_and_a_batch_of_100_is_one_request(
    events: DynamoDBEventLog,
) -> None:
    calls = Calls(events.client)
    first = events.append("run", {"type": "token", "text": "a"})
    assert first == "1"
    assert calls.since(0) == ["TransactWriteItems"]  # a new run: one request
    mark = len(calls.names)
    ids = events.append_many("run", [{"type": "token", "i": i} for i in range(100)])
    assert calls.since(mark) == ["TransactWriteItems"]
    assert ids == [str(i) for i in range(2, 102)]
    assert [int(i) for i in ids] == sorted(int(i) for i in ids)
    mark = len(calls.names)
    read = list(events.read("run", follow=False))
    assert calls.since(mark) == ["GetItem", "Query"]
    assert [e[0] for e in read] == [str(i) for i in range(1, 102)]
    assert [e[1]["i"] for e in read[1:]] == list(range(100))
    # resuming inside a packed item yields exactly what follows
    assert [e[0] for e in events.read("run", after="57", follow=False)] == [
        str(i) for i in range(58, 102)
    ]
    assert list(events.read("run", after="101", follow=False)) == []


def test_two_concurrent_writers_never_leave_a_gap_or_a_duplicate(table: str) -> None:
    prefix = unique_prefix("race")
    results: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            # each writer its own client and port: nothing shared but the table
            with graphkeep.connect_events(_url(table), key_prefix=prefix, setup=False) as log:
                mine: list[str] = []
                for i in range(8):
                    batch = [{"w": name, "i": i * 3 + k} for k in range(3)]
                    mine += (
                        log.append_many("run", batch) if i % 2 else [log.append("run", batch[0])]
                    )
                results[name] = mine
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(w,)) for w in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors
    every = results["a"] + results["b"]
    assert len(every) == len(set(every)) == 32
    assert sorted(int(i) for i in every) == list(range(1, 33))
    for ids in results.values():
        assert [int(i) for i in ids] == sorted(int(i) for i in ids)
    with graphkeep.connect_events(_url(table), key_prefix=prefix, setup=False) as log:
        read = list(log.read("run", follow=False))
    assert [e[0] for e in read] == [str(i) for i in range(1, 33)]
    for name in ("a", "b"):  # each writer's events in its own order
        own = [e[1]["i"] for e in read if e[1]["w"] == name]
        assert own == sorted(own)


def test_close_ends_readers_and_later_appends_raise_run_closed(
    events: DynamoDBEventLog,
) -> None:
    events.append_many("run", [{"n": 1}, {"n": 2}])
    got: list[tuple[str, dict[str, Any]]] = []
    reader = threading.Thread(target=lambda: got.extend(events.read("run", after="1")))
    reader.start()
    time.sleep(0.2)
    events.append("run", {"n": 3})
    close_id = events.close("run", "interrupted")
    reader.join(10)
    assert not reader.is_alive()
    assert [e[0] for e in got] == ["2", "3", close_id]
    assert got[-1][1] == {"type": "close", "status": "interrupted"}
    state = events.state("run")
    assert state is not None and state.closed == "interrupted"
    with pytest.raises(RunClosed):
        events.append("run", {"n": 4})
    with pytest.raises(RunClosed):
        events.close("run", "success")
    # a fresh log object (no memory of the run) is refused the same way
    with graphkeep.connect_events(
        _url(events.table_name), key_prefix=events.port.key_prefix, setup=False
    ) as other:
        with pytest.raises(RunClosed):
            other.append_many("run", [{"n": 5}, {"n": 6}])
    assert [e[0] for e in events.read("run", follow=False)][-1] == close_id


def test_a_silent_writer_makes_followers_raise_run_stale(table: str) -> None:
    url = _url(table)
    with graphkeep.connect_events(url, key_prefix=unique_prefix("stale"), stale_after=0.5) as log:
        log.append("run", {"n": 1})
        start = time.monotonic()
        got: list[Any] = []
        with pytest.raises(RunStale):
            for pair in log.read("run"):
                got.append(pair)
        assert got == [("1", {"n": 1})]
        assert time.monotonic() - start < 15
        log.heartbeat("run")  # a live writer keeps the run fresh
        state = log.state("run")
        assert state is not None and time.time() * 1000 - state.active_ms < 5000


def test_unknown_runs_and_bad_input_raise_before_anything_is_written(
    events: DynamoDBEventLog, raw: Any
) -> None:
    with pytest.raises(UnknownRun):
        list(events.read("nobody"))
    assert events.state("nobody") is None
    bad: list[Any] = [
        {"x": object()},
        {"x": float("nan")},
        "not a dict",
        {"big": "x" * (256 * 1024)},
    ]
    for event in bad:
        with pytest.raises(InvalidInput):
            events.append("run", event)
    with pytest.raises(InvalidInput):
        events.append_many("run", [{"ok": 1}, {"x": {1, 2}}])  # the good one is not written
    for run_id in ("", "a\x00b", 42, "r" * 600):
        with pytest.raises(InvalidInput):
            events.append(run_id, {"ok": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        events.close("run", "done")
    port = events.port
    assert isinstance(port, DynamoDBEventsPort)
    partition = port.partition("run")
    stored = raw.query(
        TableName=events.table_name,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": partition}},
    )
    assert stored["Items"] == []
    events.append("run", {"ok": 1})
    for after in ("abc", "-1", "1.5", " 1", "1" * 20, "٣"):
        with pytest.raises(InvalidInput):
            list(events.read("run", after=after, follow=False))


def test_max_events_trims_old_items_and_an_old_resume_point_is_refused(
    table: str,
) -> None:
    url = _url(table)
    with graphkeep.connect_events(url, key_prefix=unique_prefix("trim"), max_events=10) as log:
        log.append_many("run", [{"i": i} for i in range(30)])
        for i in range(30, 36):
            log.append("run", {"i": i})
        kept = list(log.read("run", follow=False))
        assert 10 <= len(kept) <= 13  # at most max_events plus a fifth
        assert kept[-1] == ("36", {"i": 35})
        assert [int(e[0]) for e in kept] == list(range(37 - len(kept), 37))
        state = log.state("run")
        assert state is not None and state.trimmed_through == str(36 - len(kept))
        with pytest.raises(EventsTrimmed):
            list(log.read("run", after="3", follow=False))
        # resuming at the trim point itself misses nothing
        assert list(log.read("run", after=state.trimmed_through, follow=False)) == kept


def _items(raw: Any, log: Any, run: str) -> dict[str, dict[str, Any]]:
    found = raw.query(
        TableName=log.table_name,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": log.port.partition(run)}},
        ConsistentRead=True,
    )
    return {i["sk"]["S"]: i for i in found["Items"]}


def test_ttl_attribute_is_set_and_slides_with_appends_and_heartbeats(table: str, raw: Any) -> None:
    url = _url(table)
    with graphkeep.connect_events(url, key_prefix=unique_prefix("ttl"), ttl=60) as log:
        now = time.time()
        log.append("run", {"i": 0})
        log.append_many("run", [{"i": 1}, {"i": 2}])
        items = _items(raw, log, "run")
        first = int(items[event_sk(1)][EXP]["N"])
        assert now + 60 <= first <= now + 95  # ttl plus half a ttl of slack
        meta = items["m#"]
        assert int(meta[EXP]["N"]) >= first
        # half a ttl later (the port told so), a heartbeat slides every item's expiry
        later = int((now + 40) * 1000)
        drive(log.port.heartbeat("run", later, log.retention), log._execute)
        items = _items(raw, log, "run")
        slid = {sk: int(i[EXP]["N"]) for sk, i in items.items() if sk != "m#"}
        assert slid and all(exp >= now + 40 + 60 for exp in slid.values())
        assert int(items["m#"][EXP]["N"]) >= max(slid.values())
        # an append just after does not refresh again (amortised)
        calls = Calls(log.client)
        drive(
            log.port.append("run", Batch([b'{"i":3}'], False, later + 1000, log.retention)),
            log._execute,
        )
        assert calls.since(0) == ["TransactWriteItems"]


def test_an_expired_run_restarts_without_its_old_events(table: str) -> None:
    with graphkeep.connect_events(_url(table), key_prefix=unique_prefix("exp"), ttl=1) as log:
        log.append_many("run", [{"i": 0}, {"i": 1}])
        log.close("run", "success")
        time.sleep(1.2)
        deadline = time.monotonic() + 5  # a loaded machine: the close may have been written late
        while log.state("run") is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert log.state("run") is None
        with pytest.raises(UnknownRun):
            list(log.read("run", follow=False))
        again = log.append("run", {"i": 2})
        assert int(again) > 3  # ids keep increasing for the run id
        assert list(log.read("run", follow=False)) == [(again, {"i": 2})]
        with pytest.raises(EventsTrimmed):
            list(log.read("run", after="1", follow=False))
        log.delete("run")
        assert log.state("run") is None


def test_runs_and_prefixes_never_see_each_other(table: str) -> None:
    url = _url(table)
    with (
        graphkeep.connect_events(url, key_prefix=unique_prefix("iso")) as one,
        graphkeep.connect_events(url, key_prefix=unique_prefix("iso")) as two,
    ):
        one.append("run", {"who": "one"})
        two.append("run", {"who": "two"})
        one.append("run#2", {"who": "one-2"})
        assert list(one.read("run", follow=False)) == [("1", {"who": "one"})]
        assert list(two.read("run", follow=False)) == [("1", {"who": "two"})]
        assert list(one.read("run#2", follow=False)) == [("1", {"who": "one-2"})]


# --------------------------------------------------------------------------- async


@pytest.fixture
async def aevents(table: str) -> AsyncIterator[AsyncDynamoDBEventLog]:
    url = _url(table)
    async with graphkeep.aconnect_events(url, key_prefix=unique_prefix("aev")) as log:
        assert isinstance(log, AsyncDynamoDBEventLog)
        yield log


async def test_async_log_appends_follows_and_closes(aevents: AsyncDynamoDBEventLog) -> None:
    log = aevents
    ids = await log.append_many("run", [{"i": i} for i in range(100)])
    assert ids == [str(i) for i in range(1, 101)]
    got: list[tuple[str, dict[str, Any]]] = []

    async def follow() -> None:
        async for pair in log.read("run", after="98"):
            got.append(pair)

    reader = asyncio.create_task(follow())
    await asyncio.sleep(0.2)
    await log.append("run", {"i": 100})
    close_id = await log.close("run", "error", error="boom")
    await asyncio.wait_for(reader, 10)
    assert [e[0] for e in got] == ["99", "100", "101", close_id]
    assert got[-1][1] == {"type": "close", "status": "error", "error": "boom"}
    with pytest.raises(RunClosed):
        await log.append("run", {"i": 101})
    with pytest.raises(UnknownRun):
        [pair async for pair in log.read("nobody")]
    with pytest.raises(InvalidInput):
        await log.append("run", {"x": b"bytes"})


async def test_async_concurrent_writers_and_sync_read_from_a_thread(
    aevents: AsyncDynamoDBEventLog, table: str
) -> None:
    log = aevents
    async with graphkeep.aconnect_events(
        _url(table), key_prefix=log.port.key_prefix, setup=False
    ) as other:

        async def write(target: Any, name: str) -> list[str]:
            ids: list[str] = []
            for i in range(6):
                ids += await target.append_many("run", [{"w": name, "i": i}, {"w": name}])
            return ids

        a, b = await asyncio.gather(write(log, "a"), write(other, "b"))
    assert sorted(int(i) for i in a + b) == list(range(1, 25))
    pairs = await asyncio.to_thread(lambda: list(log.sync_read("run", follow=False)))
    assert [p[0] for p in pairs] == [str(i) for i in range(1, 25)]
