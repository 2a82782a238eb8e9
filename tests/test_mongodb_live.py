"""MongoDB: ``saver.watch`` / ``awatch`` (polling ``MongoDBCheckpointPort.commits``) and the run
event log (:mod:`graphkeep.backends.mongodb.events`), on a real wire-protocol server (FerretDB
locally, MongoDB via MONGODB_URI).

Round trips are counted with PyMongo command monitoring; documents are inspected with PyMongo
directly. Every test uses its own ``key_prefix`` inside one throw-away database. A server that
does not answer FAILS the tests (run ``./dev services up``); nothing skips.
"""

from __future__ import annotations

import asyncio
import operator
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, TypedDict, cast
from urllib.parse import urlsplit

import pymongo
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from pymongo import monitoring

import graphkeep
from graphkeep.backends.mongodb import AsyncMongoDBSaver, MongoDBSaver
from graphkeep.backends.mongodb.events import (
    AsyncMongoDBEventLog,
    MongoDBEventLog,
    MongoDBEventsPort,
)
from graphkeep.errors import EventsTrimmed, InvalidInput, RunClosed, RunStale, UnknownRun, mask_url
from graphkeep.port import drive

from .conftest import unique_prefix

pytestmark = pytest.mark.mongodb

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
TEST_DB = f"gk_live_{uuid.uuid4().hex[:10]}"
#: a short poll keeps the watch tests quick (the default is 0.2 s)
POLL = 0.02


def url(db: str = TEST_DB) -> str:
    parts = urlsplit(MONGODB_URI)
    return parts._replace(path=f"/{db}").geturl()


class Recorder(monitoring.CommandListener):
    """Records every command the monitored clients start: (name, collection, body)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, Any, Any]] = []
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            name = event.command_name
            self.commands.append((name, event.command.get(name), event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @contextmanager
    def count(self, collection: str) -> Iterator[list[tuple[str, Any]]]:
        """(name, body) of the commands on ``collection`` started inside the block."""
        start = len(self.commands)
        found: list[tuple[str, Any]] = []
        yield found
        found.extend((n, body) for n, coll, body in self.commands[start:] if coll == collection)


RECORDER = Recorder()


@pytest.fixture(scope="module")
def client() -> Iterator[pymongo.MongoClient[Any]]:
    probe: pymongo.MongoClient[Any] = pymongo.MongoClient(url(), serverSelectionTimeoutMS=5000)
    try:
        probe.admin.command("ping")
    except pymongo.errors.PyMongoError as exc:
        pytest.fail(
            f"MongoDB at {mask_url(MONGODB_URI)} is not answering ({exc});"
            " run ./dev services up (or point MONGODB_URI at a server)"
        )
    finally:
        probe.close()
    mongo: pymongo.MongoClient[Any] = pymongo.MongoClient(url(), event_listeners=[RECORDER])
    yield mongo
    mongo.drop_database(TEST_DB)
    mongo.close()


@pytest.fixture
async def aclient(
    client: pymongo.MongoClient[Any],
) -> AsyncIterator[pymongo.AsyncMongoClient[Any]]:
    mongo: pymongo.AsyncMongoClient[Any] = pymongo.AsyncMongoClient(
        url(), event_listeners=[RECORDER]
    )
    yield mongo
    await mongo.close()


@pytest.fixture
def prefix() -> str:
    return unique_prefix("live")


@pytest.fixture
def saver(client: pymongo.MongoClient[Any], prefix: str) -> MongoDBSaver:
    s = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix)
    s.setup()
    return s


@pytest.fixture
def events(client: pymongo.MongoClient[Any], prefix: str) -> MongoDBEventLog:
    log = MongoDBEventLog(client, TEST_DB, key_prefix=prefix)
    log.setup()
    return log


def new_run(tag: str = "run") -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


# -- watch -------------------------------------------------------------------------------------


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def _reply(state: LogState) -> dict[str, list[str]]:
    return {"log": [f"reply:{len(state['log'])}"]}


def chat_graph() -> StateGraph[Any]:
    """START -> reply -> END: three checkpoints a turn, all in the root namespace."""
    builder: StateGraph[Any] = StateGraph(LogState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def nested_graph() -> StateGraph[Any]:
    """START -> child (a subgraph: START -> inner -> END) -> END: checkpoints in two namespaces."""
    inner: StateGraph[Any] = StateGraph(LogState)
    inner.add_node("inner", _reply)
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    builder: StateGraph[Any] = StateGraph(LogState)
    builder.add_node("child", inner.compile())
    builder.add_edge(START, "child")
    builder.add_edge("child", END)
    return builder


def _turn(n: int) -> dict[str, list[str]]:
    return {"log": [f"user:{n}"]}


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def _ids(items: list[Any]) -> list[str]:
    return [item.config["configurable"]["checkpoint_id"] for item in items]


def _stored(client: Any, prefix: str, thread: str) -> list[tuple[str, str]]:
    """(ns, checkpoint id) of every checkpoint document of the thread, ascending by id."""
    docs = client[TEST_DB][f"{prefix}_payloads"].find({"thread_id": thread, "kind": "cp"})
    return sorted(((d["ns"], d["ref"]) for d in docs), key=lambda c: (c[1], c[0]))


class Watcher:
    """Drains a blocking watch iterator in a thread until it ends (its ``timeout``)."""

    def __init__(self, source: Iterator[Any]) -> None:
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, args=(source,), daemon=True)
        self._thread.start()

    def _drain(self, source: Iterator[Any]) -> None:
        try:
            for item in source:
                self.items.append(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the test by result()
            self.error = exc

    def wait_for(self, count: int, within: float) -> bool:
        deadline = time.monotonic() + within
        while len(self.items) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.items) >= count

    def result(self, within: float = 60.0) -> list[Any]:
        self._thread.join(within)
        assert not self._thread.is_alive(), "the watch did not end after its timeout"
        if self.error is not None:
            raise self.error
        return self.items


def test_watch_yields_every_checkpoint_of_a_graph_once_in_commit_order(
    client: Any, saver: MongoDBSaver, prefix: str, thread_id: str
) -> None:
    graph = chat_graph().compile(checkpointer=saver)
    watcher = Watcher(saver.watch(thread_id, timeout=2.0, poll_interval=POLL))
    # after=None starts at the commits after the watch began: probe until it has
    for probe in range(10):
        graph.invoke(_turn(-probe), _config(thread_id))
        if watcher.wait_for(1, within=3.0):
            break
    assert watcher.items, f"the watcher saw none of the probe turns ({watcher.error!r})"
    for n in range(10):
        graph.invoke(_turn(n), _config(thread_id))
    seen = _ids(watcher.result())
    stored = [ref for _, ref in _stored(client, prefix, thread_id)]
    assert len(seen) == len(set(seen)), "a checkpoint was yielded twice"
    assert seen == stored[stored.index(seen[0]) :], "missed or out-of-order checkpoints"
    assert len(seen) >= 10 * 3, f"10 turns write 30 checkpoints, the watcher saw {len(seen)}"
    assert [item.checkpoint["id"] for item in watcher.items] == seen


async def test_awatch_after_replays_the_later_checkpoints_then_goes_live(
    aclient: Any, client: Any, prefix: str, thread_id: str
) -> None:
    saver = AsyncMongoDBSaver(aclient, db_name=TEST_DB, key_prefix=prefix)
    await saver.asetup()
    graph = chat_graph().compile(checkpointer=saver)
    for n in range(3):
        await graph.ainvoke(_turn(n), _config(thread_id))
    before = [ref for _, ref in _stored(client, prefix, thread_id)]
    start = before[2]

    async def drain() -> list[Any]:
        return [item async for item in saver.awatch(thread_id, after=start, timeout=1.5)]

    task = asyncio.create_task(drain())
    for n in range(3, 7):
        await graph.ainvoke(_turn(n), _config(thread_id))
    seen = _ids(await asyncio.wait_for(task, 60))
    after = [ref for _, ref in _stored(client, prefix, thread_id)]
    assert seen == after[3:], "after= must yield exactly the checkpoints above it, in order"
    assert len(after) == 7 * 3

    # breaking out early releases the iterator (no task or cursor left behind)
    watch = saver.awatch(thread_id, after=start)
    first = await watch.__anext__()
    assert _ids([first]) == after[3:4]
    await watch.aclose()  # type: ignore[attr-defined]


def test_watch_every_namespace_with_checkpoint_ns_none(
    client: Any, saver: MongoDBSaver, prefix: str, thread_id: str
) -> None:
    graph = nested_graph().compile(checkpointer=saver)
    graph.invoke(_turn(0), _config(thread_id))
    start = _stored(client, prefix, thread_id)[-1][1]
    every_ns = Watcher(saver.watch(thread_id, after=start, checkpoint_ns=None, timeout=1.5))
    root_only = Watcher(saver.watch(thread_id, after=start, timeout=1.5))
    for n in range(1, 4):
        graph.invoke(_turn(n), _config(thread_id))
    stored = [c for c in _stored(client, prefix, thread_id) if c[1] > start]
    assert {ns for ns, _ in stored} - {""}, "the subgraph wrote no checkpoint of its own"
    seen = [
        (item.config["configurable"]["checkpoint_ns"], item.config["configurable"]["checkpoint_id"])
        for item in every_ns.result()
    ]
    assert sorted(seen, key=lambda c: (c[1], c[0])) == stored
    assert len(set(seen)) == len(seen)
    assert _ids(root_only.result()) == [ref for ns, ref in stored if ns == ""]


def test_watch_timeout_ends_an_idle_watch(saver: MongoDBSaver, thread_id: str) -> None:
    started = time.monotonic()
    assert list(saver.watch(thread_id, timeout=0.5, poll_interval=POLL)) == []
    took = time.monotonic() - started
    assert 0.45 <= took < 30, f"timeout=0.5 ended the watch after {took:.2f} s"


def test_a_poll_is_one_find_on_the_thread_index_returning_ids_only(
    client: Any, saver: MongoDBSaver, prefix: str, thread_id: str
) -> None:
    graph = chat_graph().compile(checkpointer=saver)
    graph.invoke(_turn(0), _config(thread_id))
    stored = _stored(client, prefix, thread_id)
    payloads = f"{prefix}_payloads"
    store, execute = saver.port, saver._execute
    for ns, sort in (("", {"ref": 1}), (None, {"ref": 1, "ns": 1})):
        with RECORDER.count(payloads) as commands:
            page = drive(store.commits(thread_id, ns, stored[0][1], 200), execute)
        assert page == stored[1:]
        assert [name for name, _ in commands] == ["find"], commands
        body = commands[0][1]
        assert dict(body["projection"]) == {"_id": 0, "ns": 1, "ref": 1}
        assert dict(body["sort"]) == sort
        assert body["limit"] == 200
        # equality on a prefix of the unique index, then the range (and sort) on ``ref``
        index = ["thread_id", "ns", "kind", "ref"] if ns is not None else ["thread_id", "kind"]
        assert list(body["filter"])[: len(index)] == index[: len(body["filter"])]
        assert body["filter"]["ref"] == {"$gt": stored[0][1]}
        with RECORDER.count(payloads) as commands:
            newest = drive(store.newest_commit(thread_id, ns), execute)
        assert newest == stored[-1][1]
        assert [name for name, _ in commands] == ["find"]
    assert drive(store.commits(thread_id, "", stored[-1][1], 200), execute) == []
    assert drive(store.newest_commit(f"{thread_id}-none", None), execute) is None
    assert drive(store.commits(thread_id, "", None, 2), execute) == stored[:2]

    # an idle watch: one find to start (the newest id), then ONE find per poll, nothing else
    with RECORDER.count(payloads) as commands:
        assert list(saver.watch(thread_id, timeout=0.6, poll_interval=0.05)) == []
    assert {name for name, _ in commands} == {"find"}
    assert 3 <= len(commands) <= 0.6 / 0.05 + 3, f"{len(commands)} finds in 0.6 s"


# -- event log ---------------------------------------------------------------------------------


def _collection(client: Any, prefix: str) -> Any:
    return client[TEST_DB][f"{prefix}_events"]


def _event_docs(client: Any, prefix: str, run: str) -> list[dict[str, Any]]:
    return list(_collection(client, prefix).find({"run": run, "seq": {"$gt": 0}}).sort("seq", 1))


def test_event_ids_increase_and_a_steady_append_many_is_one_insert(
    client: Any, events: MongoDBEventLog, prefix: str
) -> None:
    run = new_run()
    collection = f"{prefix}_events"
    with RECORDER.count(collection) as commands:
        assert events.append(run, {"type": "token", "text": "Hel"}) == "1"
    # a new run: the meta document and the event in one insert
    assert [name for name, _ in commands] == ["insert"]
    assert [d["_id"] for d in commands[0][1]["documents"]][:1] == [MongoDBEventsPort.key(run, 0)]
    ids = events.append_many(run, [{"i": i} for i in range(20)])
    assert ids == [str(n) for n in range(2, 22)]
    with RECORDER.count(collection) as commands:
        more = events.append_many(run, [{"i": i} for i in range(20, 40)])
    assert [name for name, _ in commands] == ["insert"], commands
    assert len(commands[0][1]["documents"]) == 20
    assert more == [str(n) for n in range(22, 42)]
    keys = [events.port.id_key(i) for i in ["1", *ids, *more]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    got = list(events.read(run, follow=False))
    assert got == [("1", {"type": "token", "text": "Hel"})] + [
        (str(n + 2), {"i": n}) for n in range(40)
    ]
    assert list(events.read(run, after="30", follow=False)) == got[30:]
    doc = _event_docs(client, prefix, run)[0]
    assert set(doc) == {"_id", "run", "seq", "d", "at", "w", "expires_at"}
    assert bytes(doc["d"]) == b'{"type":"token","text":"Hel"}'


def test_a_second_log_object_continues_the_run_and_then_appends_in_one_insert(
    client: Any, events: MongoDBEventLog, prefix: str
) -> None:
    run = new_run()
    events.append_many(run, [{"i": i} for i in range(5)])
    other = MongoDBEventLog(client, TEST_DB, key_prefix=prefix)
    assert other.append_many(run, [{"i": 5}, {"i": 6}]) == ["6", "7"]
    assert events.append(run, {"i": 7}) == "8"  # its remembered position was taken: re-read
    with RECORDER.count(f"{prefix}_events") as commands:
        assert other.append(run, {"i": 8}) == "9"  # so was its own
    # the taken position, its own token (a lost reply?), the newest, the insert again
    assert [name for name, _ in commands] == ["insert", "find", "find", "insert"]
    with RECORDER.count(f"{prefix}_events") as commands:
        assert other.append(run, {"i": 9}) == "10"
    assert [name for name, _ in commands] == ["insert"]
    assert [e for _, e in events.read(run, follow=False)] == [{"i": i} for i in range(10)]


def test_a_re_sent_insert_whose_reply_was_lost_writes_each_event_once(
    client: Any, events: MongoDBEventLog, prefix: str
) -> None:
    run = new_run()
    events.append(run, {"i": 0})
    real = events._execute
    sent: list[str] = []

    def resend_inserts(request: Any) -> Any:
        """Runs every insert twice, as the executor does after a lost reply."""
        if request.method == "insert_many" and not sent:
            sent.append(request.method)
            real(request)
        return real(request)

    events._execute = resend_inserts
    assert events.append_many(run, [{"i": 1}, {"i": 2}, {"i": 3}]) == ["2", "3", "4"]
    assert sent, "the insert was not re-sent"
    events._execute = real
    assert events.append(run, {"i": 4}) == "5"
    assert [e for _, e in events.read(run, follow=False)] == [{"i": i} for i in range(5)]


def test_two_writers_on_one_run_never_leave_a_gap_or_a_duplicate(client: Any, prefix: str) -> None:
    run = new_run()
    writers = [MongoDBEventLog(client, TEST_DB, key_prefix=prefix) for _ in range(2)]
    writers[0].setup()
    returned: dict[int, list[tuple[str, dict[str, Any]]]] = {0: [], 1: []}
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    def write(k: int) -> None:
        try:
            go.wait()
            for j in range(25):
                batch = [{"w": k, "j": j, "n": n} for n in range(3)]
                ids = writers[k].append_many(run, batch)
                returned[k] += list(zip(ids, batch, strict=True))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    stored = list(writers[0].read(run, follow=False))
    assert [int(i) for i, _ in stored] == list(range(1, 151)), "a gap or a duplicate id"
    assert sorted(returned[0] + returned[1], key=lambda p: int(p[0])) == stored
    for k in range(2):  # each writer's events in the order it wrote them
        mine = [e for _, e in stored if e["w"] == k]
        assert mine == [{"w": k, "j": j, "n": n} for j in range(25) for n in range(3)]


def test_close_ends_the_run_and_later_appends_raise_run_closed(
    client: Any, events: MongoDBEventLog, prefix: str
) -> None:
    run = new_run()
    events.append(run, {"i": 0})
    close_id = events.close(run, "error", error="boom")
    assert close_id == "2"
    other = MongoDBEventLog(client, TEST_DB, key_prefix=prefix)
    for log in (events, other):
        with pytest.raises(RunClosed):
            log.append(run, {"late": 1})
        with pytest.raises(RunClosed):
            log.append_many(run, [{"late": 1}, {"late": 2}])
        with pytest.raises(RunClosed):
            log.close(run, "success")
    assert list(events.read(run)) == [
        ("1", {"i": 0}),
        ("2", {"type": "close", "status": "error", "error": "boom"}),
    ]
    assert len(_event_docs(client, prefix, run)) == 2, "a refused append wrote something"
    state = events.state(run)
    assert state is not None and state.closed == "error" and state.trimmed_through is None
    meta = _collection(client, prefix).find_one({"run": run, "seq": 0})
    assert meta is not None and meta["close"] == "error"


def test_a_silent_run_raises_run_stale_and_heartbeats_keep_it_followed(
    events: MongoDBEventLog, client: Any, prefix: str
) -> None:
    log = MongoDBEventLog(client, TEST_DB, key_prefix=prefix, stale_after=0.5, poll_interval=0.02)
    run = new_run()
    log.append(run, {"i": 0})
    seen: list[Any] = []
    started = time.monotonic()
    with pytest.raises(RunStale):
        for item in log.read(run):
            seen.append(item)
    assert seen == [("1", {"i": 0})]
    assert time.monotonic() - started < 30

    quiet = new_run("quiet")
    log.heartbeat(quiet)  # a heartbeat alone creates the run
    state = log.state(quiet)
    assert state is not None and state.closed is None and state.trimmed_through is None
    follower = Watcher(log.read(quiet))
    for _ in range(5):  # 1.5 s without an event, never 0.5 s without a heartbeat
        time.sleep(0.3)
        log.heartbeat(quiet)
    assert follower.error is None and follower._thread.is_alive()
    last = log.append(quiet, {"at": "last"})
    log.close(quiet, "interrupted")
    assert follower.result() == [
        (last, {"at": "last"}),
        (str(int(last) + 1), {"type": "close", "status": "interrupted"}),
    ]
    assert last == "1"


def test_unknown_runs_raise_unknown_run(events: MongoDBEventLog) -> None:
    run = new_run("never")
    assert events.state(run) is None
    with pytest.raises(UnknownRun):
        list(events.read(run, follow=False))
    with pytest.raises(UnknownRun):
        list(events.read(run))
    kept = new_run("kept")
    events.append(kept, {"i": 0})
    events.append(run, {"i": 0})
    events.delete([run, new_run("other")])
    assert events.state(run) is None
    with pytest.raises(UnknownRun):
        list(events.read(run))
    assert list(events.read(kept, follow=False)) == [("1", {"i": 0})]
    # a deleted run written again by the same log object starts over
    assert events.append(run, {"again": 1}) == "1"


def test_bad_input_raises_invalid_input_and_writes_nothing(
    client: Any, events: MongoDBEventLog, prefix: str
) -> None:
    run = new_run()
    events.append(run, {"i": 0})
    before = list(_collection(client, prefix).find({"run": run}))
    for after in ("0", "01", "abc", "1-0", "-1", "9" * 20, " 1", "1.0", ""):
        with pytest.raises(InvalidInput):
            events.read(run, after=after, follow=False)
    for bad in ({"value": object()}, {"value": float("nan")}, {"text": "y" * (300 * 1024)}):
        with pytest.raises(InvalidInput):
            events.append(run, bad)
        with pytest.raises(InvalidInput):
            events.append_many(run, [{"ok": 1}, bad])
    with pytest.raises(InvalidInput):
        events.append_many(run, cast(Any, {"i": 1}))
    with pytest.raises(InvalidInput):
        events.close(run, "done")
    with pytest.raises(InvalidInput):
        events.append("", {"i": 1})
    assert list(_collection(client, prefix).find({"run": run})) == before
    assert events.append(run, {"i": 1}) == "2"


def test_max_events_trims_the_oldest_amortized_and_an_older_resume_point_raises(
    client: Any, prefix: str
) -> None:
    log = MongoDBEventLog(client, TEST_DB, key_prefix=prefix, max_events=50)
    log.setup()
    run = new_run()
    collection = f"{prefix}_events"
    counts = []
    with RECORDER.count(collection) as commands:
        for i in range(120):
            log.append(run, {"i": i})
            counts.append(len(_event_docs(client, prefix, run)))
    assert max(counts) <= 50, "more than max_events events were kept"
    deletes = [body for name, body in commands if name == "delete"]
    inserts = [body for name, body in commands if name == "insert"]
    assert len(inserts) == 120
    # trimmed every max_events // 10 = 5 events, not at every append
    assert 10 <= len(deletes) <= 120 // 5 + 1, f"{len(deletes)} trims for 120 appends"
    kept = list(log.read(run, follow=False))
    assert 45 <= len(kept) <= 50
    assert kept == [(str(i + 1), {"i": i}) for i in range(120 - len(kept), 120)]
    state = log.state(run)
    assert state is not None and state.trimmed_through == str(int(kept[0][0]) - 1)
    with pytest.raises(EventsTrimmed):
        list(log.read(run, after="1", follow=False))
    assert list(log.read(run, after=state.trimmed_through, follow=False)) == kept
    assert list(log.read(run, after=kept[-2][0], follow=False)) == kept[-1:]
    # a big batch trims at once, and the close event (the newest) is kept
    log.append_many(run, [{"j": j} for j in range(80)])
    close_id = log.close(run, "success")
    kept = list(log.read(run, follow=False))
    assert 45 <= len(kept) <= 50 and kept[-1][0] == close_id


def test_ttl_sets_expiries_an_index_removes_them_and_appends_slide_them(
    client: Any, prefix: str
) -> None:
    log = MongoDBEventLog(client, TEST_DB, key_prefix=prefix, ttl=60)
    log.setup()
    indexes = {ix["name"]: ix for ix in _collection(client, prefix).list_indexes()}
    assert dict(indexes["gk_run_seq"]["key"]) == {"run": 1, "seq": 1}
    assert indexes["gk_run_seq"].get("unique") is True
    if log.port.ttl_index:
        assert indexes["gk_expires_at"]["expireAfterSeconds"] == 0
    else:  # FerretDB 1.x: no TTL indexes; expired documents are hidden and purged
        assert "gk_expires_at_plain" in indexes
    run = new_run()
    now = datetime.now(timezone.utc)
    log.append_many(run, [{"i": 0}, {"i": 1}])
    for doc in _event_docs(client, prefix, run):
        expires = doc["expires_at"].replace(tzinfo=timezone.utc)
        assert now + timedelta(seconds=55) < expires < now + timedelta(seconds=120)
    meta = _collection(client, prefix).find_one({"run": run, "seq": 0})
    assert meta is not None
    assert meta["expires_at"].replace(tzinfo=timezone.utc) > now + timedelta(seconds=85)

    # ttl=2: an append after ttl/2 slides every document of the run (one update_many)
    sliding = MongoDBEventLog(client, TEST_DB, key_prefix=prefix, ttl=2)
    run = new_run("slide")
    sliding.append(run, {"i": 0})
    first = _event_docs(client, prefix, run)[0]["expires_at"]
    with RECORDER.count(f"{prefix}_events") as commands:
        sliding.append(run, {"i": 1})
    assert [name for name, _ in commands] == ["insert"], "slid before ttl/2"
    time.sleep(1.1)
    with RECORDER.count(f"{prefix}_events") as commands:
        sliding.append(run, {"i": 2})
    assert [name for name, _ in commands] == ["insert", "update"], commands
    assert _event_docs(client, prefix, run)[0]["expires_at"] > first

    # expired runs are gone for readers (the TTL monitor, or purge_expired, deletes them)
    short = MongoDBEventLog(client, TEST_DB, key_prefix=prefix, ttl=0.3)
    run = new_run("short")
    short.append(run, {"i": 0})
    time.sleep(1.0)
    assert short.state(run) is None
    with pytest.raises(UnknownRun):
        list(short.read(run))
    short.purge_expired()
    assert list(_collection(client, prefix).find({"run": run})) == []


async def test_async_log_follows_a_run_to_its_close(aclient: Any, client: Any, prefix: str) -> None:
    log = AsyncMongoDBEventLog(aclient, TEST_DB, key_prefix=prefix, poll_interval=0.02)
    await log.setup()
    run = new_run()
    first = await log.append(run, {"i": 0})

    async def follow(after: str | None) -> list[Any]:
        return [item async for item in log.read(run, after=after)]

    everything = asyncio.create_task(follow(None))
    from_first = asyncio.create_task(follow(first))
    more = await log.append_many(run, [{"i": 1}, {"i": 2}])
    await log.heartbeat(run)
    close_id = await log.close(run, "success")
    expected: list[tuple[str, dict[str, Any]]] = [
        (first, {"i": 0}),
        (more[0], {"i": 1}),
        (more[1], {"i": 2}),
        (close_id, {"type": "close", "status": "success"}),
    ]
    assert await asyncio.wait_for(everything, 60) == expected
    assert await asyncio.wait_for(from_first, 60) == expected[1:]
    assert [first, *more, close_id] == ["1", "2", "3", "4"]
    with pytest.raises(RunClosed):
        await log.append(run, {"late": 1})
    state = await log.state(run)
    assert state is not None and state.closed == "success"
    with pytest.raises(UnknownRun):
        await log.read(new_run("never")).__anext__()
    await log.delete(run)
    assert await log.state(run) is None
    assert await log.purge_expired() == 0


def test_connect_events_opens_the_mongodb_log(client: Any, prefix: str) -> None:
    with graphkeep.connect_events(url(), key_prefix=prefix, max_events=5) as log:
        assert isinstance(log, MongoDBEventLog)
        run = new_run()
        assert log.append_many(run, [{"i": i} for i in range(8)])[-1] == "8"
        assert [e["i"] for _, e in log.read(run, follow=False)] == [3, 4, 5, 6, 7]


async def test_aconnect_events_opens_the_async_mongodb_log(prefix: str) -> None:
    async with graphkeep.aconnect_events(url(), key_prefix=prefix) as log:
        assert isinstance(log, AsyncMongoDBEventLog)
        run = new_run()
        assert await log.append(run, {"i": 0}) == "1"
