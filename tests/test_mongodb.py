"""MongoDB backend on a real wire-protocol server (FerretDB locally, MongoDB via MONGODB_URI).

Round trips are counted with PyMongo command monitoring; documents are inspected with
PyMongo directly. Every test uses its own ``key_prefix`` inside one throw-away database.
A server that does not answer FAILS the tests (run ``./dev services up``); nothing skips.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any, TypedDict
from urllib.parse import urlsplit

import bson
import pymongo
import pytest
from langgraph.checkpoint.base import ERROR, INTERRUPT, empty_checkpoint
from langgraph.graph import END, START, StateGraph
from pymongo import monitoring

import graphkeep
from graphkeep.backends.mongodb import AsyncMongoDBSaver, MongoDBSaver
from graphkeep.backends.mongodb.documents import heading_of, parse_blob_ref, parse_write_sub
from graphkeep.backends.mongodb.migrate import upgrade_payload
from graphkeep.backends.mongodb.schema import collection_names
from graphkeep.checkpoint import lists
from graphkeep.checkpoint.records import Typed
from graphkeep.errors import (
    ConfigurationError,
    InvalidFilter,
    InvalidThreadId,
    LockNotAcquired,
    StorageUnavailable,
    mask_url,
)
from graphkeep.port import codec

from .conftest import unique_prefix

pytestmark = pytest.mark.mongodb

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
TEST_DB = f"gk_test_{uuid.uuid4().hex[:10]}"
MiB = 1024 * 1024


def url(db: str = TEST_DB, **options: str) -> str:
    """MONGODB_URI pointing at ``db``, its query options kept, ``options`` added."""
    parts = urlsplit(MONGODB_URI)
    query = "&".join([q for q in [parts.query] if q] + [f"{k}={v}" for k, v in options.items()])
    return parts._replace(path=f"/{db}", query=query).geturl()


class Recorder(monitoring.CommandListener):
    """Records every command the monitored clients start (name and body)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            self.commands.append((event.command_name, event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @contextmanager
    def count(self) -> Iterator[list[str]]:
        """Names of the commands started inside the block."""
        start = len(self.commands)
        names: list[str] = []
        yield names
        names.extend(name for name, _ in self.commands[start:])


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
    # default timeouts for the tests themselves: a busy test server may be slow to answer
    mongo: pymongo.MongoClient[Any] = pymongo.MongoClient(url(), event_listeners=[RECORDER])
    yield mongo
    mongo.drop_database(TEST_DB)
    mongo.close()


@pytest.fixture
def prefix() -> str:
    return unique_prefix("mg")


@pytest.fixture
def saver(client: pymongo.MongoClient[Any], prefix: str) -> MongoDBSaver:
    s = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix)
    s.setup()
    return s


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def _config(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


class Thread:
    """Puts a chain of checkpoints on one thread/namespace through a saver."""

    def __init__(self, saver: Any, thread_id: str, ns: str = "") -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.ns = ns
        self.config = _config(thread_id, ns=ns)
        self.versions: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self.ids: list[str] = []

    def put(
        self,
        changed: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        keep: tuple[str, ...] | None = None,
    ) -> Any:
        new_versions = {}
        for channel, value in changed.items():
            version = self.saver.get_next_version(self.versions.get(channel))
            self.versions[channel] = new_versions[channel] = version
            self.values[channel] = value
        values = {ch: v for ch, v in self.values.items() if keep is None or ch in keep}
        cp = _checkpoint({k: v for k, v in values.items() if v is not ...}, dict(self.versions))
        self.config = self.saver.put(
            self.config, cp, metadata or {"step": len(self.ids)}, new_versions
        )
        self.ids.append(self.config["configurable"]["checkpoint_id"])
        return self.config


def _view(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored document with what its compact fields hold spelled out, for assertions:
    checkpoints get ``versions``, ``present``, ``lists`` (as ``{c, v, e, lo, hi}``);
    payloads ``part`` ("" for a head), ``type``, ``data``, ``count``, ``gen``, and blobs
    ``channel``/``version``, writes ``task_id``/``idx``."""
    view = dict(doc)
    if doc["kind"] == "cp":
        h = heading_of(doc)
        view["versions"] = [{"c": c, "v": v} for c, v in h.versions.items()]
        view["present"] = h.present
        view["lists"] = [
            {"c": c, "v": v, "e": e, "lo": lo, "hi": hi}
            for c, (v, runs) in h.lists.items()
            for e, lo, hi in runs
        ]
        view["format"] = codec.unpackb(bytes(doc["s"]))[0]
        return view
    view.setdefault("part", "")
    view["data"] = view.pop("d", b"")  # renamed, not copied: sizes stay those stored
    if not view["part"]:
        view.update(type=doc["y"], count=doc.get("n", 1), gen=doc.get("g"))
    if doc["kind"] == "blob":
        view["channel"], view["version"] = parse_blob_ref(doc["ref"])
    if doc["kind"] == "write":
        view["task_id"], view["idx"] = parse_write_sub(doc["sub"])
    view.setdefault("sub", "")
    return view


def _docs(client: Any, prefix: str, thread_id: str | None = None) -> dict[str, list[Any]]:
    """The thread's documents (see :func:`_view`): ``checkpoints`` (kind "cp") and
    ``payloads`` (every other kind) of the one thread collection, and ``locks``; not the
    thread's fencing document (kind "fence"), which outlives its data by design."""
    query = {} if thread_id is None else {"thread_id": thread_id}
    db = client[TEST_DB]
    data, locks = collection_names(prefix)
    # small batches: some servers (FerretDB) do not cap a reply at 16 MiB as MongoDB does
    stored = list(db[data].find(query).batch_size(3))
    found = [_view(d) for d in stored if d["kind"] != "fence"]
    return {
        "checkpoints": [d for d in found if d["kind"] == "cp"],
        "payloads": [d for d in found if d["kind"] != "cp"],
        "locks": list(db[locks].find(query)),
    }


# -- the official suite and smoke tests ----------------------------------------------------------


async def test_official_conformance_suite_passes_8_of_8(client: Any) -> None:
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    @checkpointer_test(name="graphkeep-mongodb")
    async def factory() -> Any:
        async with graphkeep.aconnect(url(), key_prefix=unique_prefix("conf")) as s:
            assert isinstance(s, AsyncMongoDBSaver)
            yield s

    report = await validate(factory)
    results = report.results
    assert len(results) == 8
    failed = {name: r.failures for name, r in results.items() if not (r.detected and r.passed)}
    assert not failed, failed


class Counter(TypedDict):
    messages: Annotated[list[str], lambda a, b: a + b]
    turns: int


def _graph(checkpointer: Any) -> Any:
    def reply(state: Counter) -> dict[str, Any]:
        return {"messages": [f"echo {state['messages'][-1]}"], "turns": state["turns"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


def test_sync_smoke_through_connect(client: Any, prefix: str, thread_id: str) -> None:
    with graphkeep.connect(url(), key_prefix=prefix) as saver:
        assert isinstance(saver, MongoDBSaver)
        assert saver.db.name == TEST_DB
        graph = _graph(saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        graph.invoke({"messages": ["hi"], "turns": 0}, config)
        graph.invoke({"messages": ["again"]}, config)
        state = graph.get_state(config)
        assert state.values == {"messages": ["hi", "echo hi", "again", "echo again"], "turns": 2}
        history = list(graph.get_state_history(config))
        assert len(history) == 6  # per invoke: input, after __start__, after reply
        assert len(list(saver.list(config, filter={"source": "input"}))) == 2
        saver.delete_thread(thread_id)
        assert saver.get_tuple(config) is None
    names = set(client[TEST_DB].list_collection_names())
    assert {f"{prefix}_payloads", f"{prefix}_locks"} <= names
    assert f"{prefix}_checkpoints" not in names  # format 1's collection: gone
    assert all(not docs for docs in _docs(client, prefix, thread_id).values())


def test_database_from_url_path_and_query_options_reach_the_client(
    client: Any, prefix: str
) -> None:
    other = f"gk_other_{uuid.uuid4().hex[:6]}"
    with graphkeep.connect(url(other, appname="gk-test"), key_prefix=prefix, setup=False) as s:
        assert s.db.name == other
        assert s.client.options.pool_options.metadata["application"]["name"] == "gk-test"
        assert other not in s.client.list_database_names()  # setup=False created nothing
    bare = urlsplit(MONGODB_URI)._replace(path="", query="").geturl()
    with graphkeep.connect(bare, setup=False) as s:
        assert s.db.name == "graphkeep"
    with pytest.raises(ConfigurationError):
        with graphkeep.connect(url("bad.name"), setup=False):
            pass
    with pytest.raises(ConfigurationError, match="db_name|key_prefix"):
        with graphkeep.connect(url(), key_prefix="", setup=False):
            pass


# -- round trips -----------------------------------------------------------------------------------


def test_round_trips_per_call(saver: MongoDBSaver, thread_id: str) -> None:
    t = Thread(saver, thread_id)
    with RECORDER.count() as put:
        t.put({"messages": ["a"], "count": 1})
    assert put == ["update"]  # one ordered batch: blobs, then the checkpoint
    with RECORDER.count() as writes:
        saver.put_writes(t.config, [("messages", "b"), (ERROR, "boom"), ("count", 2)], "task-1")
    assert writes == ["update"]
    with RECORDER.count() as latest:
        got = saver.get_tuple(_config(thread_id))
    assert latest == ["find", "find"]
    assert got is not None and len(got.pending_writes) == 3
    with RECORDER.count() as exact:
        assert saver.get_tuple(_config(thread_id, t.ids[0])) is not None
    assert exact == ["find", "find"]
    for i in range(12):
        t.put({"count": i})
        saver.put_writes(t.config, [("count", i), ("messages", f"m{i}")], f"task-{i}")
    with RECORDER.count() as page:
        listed = list(saver.list(_config(thread_id), limit=10))
    assert page == ["find", "find"]  # one page: checkpoints, then all their writes and blobs
    assert [x.config["configurable"]["checkpoint_id"] for x in listed] == t.ids[::-1][:10]
    assert all(len(x.pending_writes) == 2 for x in listed)
    with RECORDER.count() as everything:
        assert len(list(saver.list(_config(thread_id)))) == 13
    assert everything == ["find", "find"]


def _upsert_filters(commands: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [u["q"] for name, body in commands if name == "update" for u in body["updates"]]


@pytest.mark.parametrize("sharded", [False, True])
def test_upserts_name_their_document_by_id_and_the_shard_key_when_sharded(
    client: Any, prefix: str, thread_id: str, sharded: bool
) -> None:
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, sharded=sharded)
    saver.setup()
    t = Thread(saver, thread_id)
    start = len(RECORDER.commands)
    t.put({"messages": ["a"], "count": 1})
    saver.put_writes(t.config, [("messages", "b"), (ERROR, "boom")], "task-1")
    filters = _upsert_filters(RECORDER.commands[start:])
    assert len(filters) == 5  # 2 blobs, the checkpoint, 2 writes
    expected = {"_id", "thread_id"} if sharded else {"_id"}
    assert all(set(f) == expected and isinstance(f["_id"], str) for f in filters), filters
    if sharded:
        assert {f["thread_id"] for f in filters} == {thread_id}
    # the _id is the document's identity: the same record is one document, found again
    ids = [f["_id"] for f in filters]
    assert len(set(ids)) == len(ids)
    docs = _docs(client, prefix, thread_id)
    assert sum(len(found) for found in docs.values()) == 5
    got = saver.get_tuple(_config(thread_id))
    assert got is not None and got.checkpoint["channel_values"] == {"messages": ["a"], "count": 1}
    assert {(w[1], w[2]) for w in got.pending_writes} == {("messages", "b"), (ERROR, "boom")}


def _delta_thread(saver: Any, thread_id: str, ancestors: int) -> tuple[Any, list[str]]:
    """A DeltaChannel-style chain: a seed value at the root, then ``ancestors`` checkpoints
    whose "d" value lives only in ancestor writes."""
    t = Thread(saver, thread_id)
    t.put({"d": ["seed"]}, {"step": 0})
    expected = []
    for i in range(1, ancestors + 1):
        saver.put_writes(t.config, [("d", f"w{i}"), ("other", i)], f"task-{i}")
        expected.append(f"w{i}")
        t.put(
            {"d": ...}, {"step": i, "counters_since_delta_snapshot": {"d": [i, i]}}, keep=("other",)
        )
    saver.put_writes(t.config, [("d", "pending")], "task-head")  # the head's own: excluded
    return t, expected


def test_delta_history_over_60_ancestors_is_two_commands(
    saver: MongoDBSaver, thread_id: str
) -> None:
    t, expected = _delta_thread(saver, thread_id, 60)
    with RECORDER.count() as commands:
        history = saver.get_delta_channel_history(config=t.config, channels=["d"])
    assert commands == ["find", "find"]
    assert history["d"]["seed"] == ["seed"]
    assert [value for _, _, value in history["d"]["writes"]] == expected
    with RECORDER.count() as latest:
        again = saver.get_delta_channel_history(config=_config(thread_id), channels=["d", "x"])
    assert len(latest) == 2
    assert again["d"] == history["d"] and again["x"] == {"writes": []}


async def test_async_saver_counts_and_serves_sync_calls_from_threads(
    client: Any, prefix: str, thread_id: str
) -> None:
    aclient: pymongo.AsyncMongoClient[Any] = pymongo.AsyncMongoClient(
        url(), event_listeners=[RECORDER]
    )
    try:
        saver = AsyncMongoDBSaver(aclient, db_name=TEST_DB, key_prefix=prefix)
        await saver.asetup()
        v = saver.get_next_version(None)
        with RECORDER.count() as put:
            config = await saver.aput(
                _config(thread_id), _checkpoint({"a": 1}, {"a": v}), {"step": 0}, {"a": v}
            )
        assert put == ["update"]
        with RECORDER.count() as writes:
            await saver.aput_writes(config, [("a", 2)], "task")
        assert writes == ["update"]
        with RECORDER.count() as get:
            got = await saver.aget_tuple(_config(thread_id))
        assert get == ["find", "find"]
        assert got is not None and got.checkpoint["channel_values"] == {"a": 1}
        from_thread = await asyncio.to_thread(saver.get_tuple, _config(thread_id))
        assert from_thread is not None and from_thread.pending_writes == [("task", "a", 2)]
        assert [x async for x in saver.alist(_config(thread_id))][0].config == got.config
    finally:
        await aclient.close()


# -- the 16 MB guard ------------------------------------------------------------------------------


class Big(TypedDict):
    blob: str
    n: int


def test_a_20_mb_value_in_graph_state_round_trips(
    client: Any, saver: MongoDBSaver, prefix: str, thread_id: str
) -> None:
    def step(state: Big) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    builder = StateGraph(Big)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=saver)
    big = os.urandom(10 * MiB).hex()  # 20 MiB of incompressible text
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"blob": big, "n": 0}, config)
    state = graph.get_state(config)
    assert state.values["n"] == 1 and state.values["blob"] == big
    docs = _docs(client, prefix, thread_id)
    sizes = [len(bson.encode(d)) for coll in docs.values() for d in coll]
    assert max(sizes) < 9 * MiB  # every document far below the 16 MiB limit
    heads = [d for d in docs["payloads"] if d["part"] == "" and d["count"] > 1]
    # 20 MiB of hex in 8 MiB chunks: 3, or 2 once compressed (hex text packs to ~11 MiB)
    assert heads and {d["count"] for d in heads} <= {2, 3}
    assert all(len(d["data"]) <= 8 * MiB for d in docs["payloads"])
    saver.delete_thread(thread_id)
    assert all(not coll for coll in _docs(client, prefix, thread_id).values())


def test_one_put_writes_of_200_writes_of_200_kb(saver: MongoDBSaver, thread_id: str) -> None:
    t = Thread(saver, thread_id)
    t.put({"a": 1})
    values = [os.urandom(200 * 1024) for _ in range(200)]
    saver.put_writes(t.config, [("items", v) for v in values], "task-big")
    got = saver.get_tuple(t.config)
    assert got is not None
    assert [w[2] for w in got.pending_writes] == values
    assert {w[1] for w in got.pending_writes} == {"items"}


def test_chunked_writes_blobs_and_checkpoints_reassemble(
    client: Any, prefix: str, thread_id: str
) -> None:
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, chunk_size=64 * 1024)
    saver.setup()
    t = Thread(saver, thread_id)
    blob = os.urandom(300 * 1024)
    meta = {"step": 0, "notes": os.urandom(100 * 1024).hex()}  # > chunk_size, compressed too
    t.put({"blob": blob, "small": 1}, meta)
    values = [os.urandom(150 * 1024) for _ in range(5)]
    saver.put_writes(t.config, [("w", v) for v in values], "task")
    saver.put_writes(t.config, [("w", b"changed")], "task")  # regular: insert-if-absent
    saver.put_writes(t.config, [(ERROR, os.urandom(100 * 1024))], "task")
    error = os.urandom(130 * 1024)
    saver.put_writes(t.config, [(ERROR, error)], "task")  # special: replaces, chunks too
    got = saver.get_tuple(t.config)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"blob": blob, "small": 1}
    assert got.metadata["notes"] == meta["notes"]
    assert [w[2] for w in got.pending_writes] == [error, *values]
    listed = list(saver.list(_config(thread_id), filter={"step": 0}))
    assert len(listed) == 1 and listed[0].metadata["notes"] == meta["notes"]
    kinds = {d["kind"] for d in _docs(client, prefix, thread_id)["payloads"] if d["part"]}
    assert kinds == {"blob", "write", "checkpoint"}  # all three were chunked
    target = f"{thread_id}-copy"
    saver.copy_thread(thread_id, target)
    copied = saver.get_tuple(_config(target))
    assert copied is not None and copied.checkpoint["channel_values"] == {"blob": blob, "small": 1}
    assert [w[2] for w in copied.pending_writes] == [error, *values]


# -- nothing orphaned ---------------------------------------------------------------------------


def _assert_no_orphans(
    client: Any, prefix: str, thread_id: str, early: frozenset[str] = frozenset()
) -> None:
    """Every payload belongs to a stored checkpoint (writes, chunks) or is referenced by
    one (blobs), and every chunk tail has a head of its generation. ``early``: ids of
    checkpoints whose writes legitimately came before the checkpoint."""
    docs = _docs(client, prefix, thread_id)
    checkpoints = docs["checkpoints"]
    ids = {(c["ns"], c["ref"]) for c in checkpoints}
    referenced = set()
    for c in checkpoints:
        versions = {e["c"]: e["v"] for e in c["versions"]}
        referenced |= {(c["ns"], ch, versions[ch]) for ch in c["present"]}
    heads = {
        (d["ns"], d["kind"], d["ref"], d["sub"]): d for d in docs["payloads"] if d["part"] == ""
    }
    for d in docs["payloads"]:  # list elements are referenced by the manifests referenced
        if d["kind"] == "blob" and d["part"] == "" and d["type"] == lists.MANIFEST_TAG:
            if (d["ns"], d["channel"], d["version"]) in referenced:
                manifest = Typed(d["type"], bytes(d["data"]))
                referenced |= set(lists.element_blob_keys(d["ns"], [manifest]))
    for d in docs["payloads"]:
        if d["kind"] == "blob":
            assert (d["ns"], d["channel"], d["version"]) in referenced, d["ref"]
        else:
            assert (d["ns"], d["ref"]) in ids or d["ref"] in early, (d["kind"], d["ref"])
        if d["part"]:
            head = heads.get((d["ns"], d["kind"], d["ref"], d["sub"]))
            assert head is not None and d["part"].startswith(head["gen"] + "/")


def test_nothing_orphaned_after_prune_delete_for_runs_and_delete_thread(
    client: Any, prefix: str, thread_id: str
) -> None:
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, chunk_size=32 * 1024)
    saver.setup()
    root, child = Thread(saver, thread_id), Thread(saver, thread_id, ns="child:1")
    for i in range(4):
        root.put({"big": os.urandom(100 * 1024), "n": i}, {"step": i, "run_id": f"run-{i}"})
        saver.put_writes(root.config, [("big", os.urandom(70 * 1024)), ("n", i)], f"t{i}")
        child.put({"big": os.urandom(40 * 1024)}, {"step": i})
        saver.put_writes(child.config, [(INTERRUPT, os.urandom(50 * 1024))], f"c{i}")
    other = Thread(saver, f"{thread_id}-other")
    other.put({"big": os.urandom(100 * 1024)})
    # writes may precede their checkpoint (contract s3): prune keeps them (a run in flight's)
    saver.put_writes(_config(thread_id, "never-put"), [("x", os.urandom(40 * 1024))], "t")
    _assert_no_orphans(client, prefix, thread_id, early=frozenset({"never-put"}))

    saver.delete_for_runs(["run-1"])
    assert saver.get_tuple(_config(thread_id, root.ids[1])) is None
    _assert_no_orphans(client, prefix, thread_id, early=frozenset({"never-put"}))

    saver.prune([thread_id], strategy="keep_latest")
    docs = _docs(client, prefix, thread_id)
    assert sorted(c["ref"] for c in docs["checkpoints"]) == sorted([root.ids[-1], child.ids[-1]])
    _assert_no_orphans(client, prefix, thread_id, early=frozenset({"never-put"}))
    assert any(d["kind"] == "write" and d["ref"] == "never-put" for d in docs["payloads"])
    head = saver.get_tuple(_config(thread_id))
    assert head is not None and head.checkpoint["channel_values"]["n"] == 3
    assert len(head.pending_writes) == 2

    saver.delete_thread(thread_id)
    assert all(not coll for coll in _docs(client, prefix, thread_id).values())
    remaining = _docs(client, prefix, f"{thread_id}-other")
    assert len(remaining["checkpoints"]) == 1  # other threads untouched
    assert saver.get_tuple(_config(f"{thread_id}-other")) is not None


# -- TTL -----------------------------------------------------------------------------------------


def _expiry(docs: list[Any], **match: Any) -> list[datetime]:
    return [d["expires_at"] for d in docs if all(d.get(k) == v for k, v in match.items())]


def test_ttl_index_exists_and_expiry_is_set_and_refreshed(
    client: Any, prefix: str, thread_id: str
) -> None:
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, ttl=3600)
    saver.setup()
    data, locks = collection_names(prefix)
    checkpoints, payloads = "checkpoints", "payloads"
    for name in (data, locks):
        indexes = {ix["name"]: ix for ix in client[TEST_DB][name].list_indexes()}
        if saver.port.ttl_index:
            assert indexes["gk_expires_at"]["expireAfterSeconds"] == 0
        else:  # a server without TTL indexes (FerretDB 1.x): plain index, purge_expired()
            assert "gk_expires_at_plain" in indexes
    t = Thread(saver, thread_id)
    t.put({"a": "unchanged", "b": 1})
    saver.put_writes(t.config, [("b", 2)], "task")
    docs = _docs(client, prefix, thread_id)
    assert all("expires_at" in d for coll in docs.values() for d in coll)
    first = docs[payloads]
    (a_before,) = _expiry(first, kind="blob", channel="a")
    time.sleep(0.05)
    with RECORDER.count() as put:
        t.put({"b": 3})  # "a" unchanged: its blob must live as long as the new head
    assert len(put) == 1
    later = _docs(client, prefix, thread_id)
    (a_after,) = _expiry(later[payloads], kind="blob", channel="a")
    assert a_after > a_before
    (cp1_after,) = _expiry(later[checkpoints], ref=t.ids[0])
    (cp1_before,) = _expiry(docs[checkpoints], ref=t.ids[0])
    assert cp1_after == cp1_before  # not needed by the head: not refreshed


def test_ttl_keeps_the_delta_chain_of_the_head_alive_without_touching_the_thread(
    client: Any, prefix: str, thread_id: str
) -> None:
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, ttl=3600)
    saver.setup()
    checkpoints, payloads = "checkpoints", "payloads"
    t = Thread(saver, thread_id)
    t.put({"x": 1}, {"step": -1})  # old root: not needed by the delta chain
    saver.put_writes(t.config, [("x", 2)], "old")
    t.put({"d": ["seed"]}, {"step": 0})  # the seed of "d"
    for i in range(1, 5):
        saver.put_writes(t.config, [("d", f"w{i}")], f"task-{i}")
        t.put({"d": ...}, {"step": i, "counters_since_delta_snapshot": {"d": [i, i]}}, keep=("x",))
    before = _docs(client, prefix, thread_id)
    time.sleep(0.05)
    fresh = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, ttl=3600)
    t.saver = fresh
    saver.put_writes(t.config, [("d", "w5")], "task-5")
    with RECORDER.count() as cold:  # new instance: reads the parent's bookkeeping once
        t.put({"d": ...}, {"step": 5, "counters_since_delta_snapshot": {"d": [5, 5]}}, keep=("x",))
    assert cold == ["find", "update"]
    with RECORDER.count() as warm:
        saver.put_writes(t.config, [("d", "w6")], "task-6")
        t.put({"d": ...}, {"step": 6, "counters_since_delta_snapshot": {"d": [6, 6]}}, keep=("x",))
    assert warm == ["update", "update"]  # put_writes 1 + put 1
    after = _docs(client, prefix, thread_id)
    old, chain = t.ids[0], t.ids[1:-1]
    for cid in chain:
        assert _expiry(after[checkpoints], ref=cid) > _expiry(before[checkpoints], ref=cid)
    chain_writes = [d for d in after[payloads] if d["kind"] == "write" and d["ref"] in chain]
    assert chain_writes and all(
        d["expires_at"] > before[checkpoints][0]["expires_at"] for d in chain_writes
    )
    (seed_before,) = _expiry(before[payloads], kind="blob", channel="d")
    (seed_after,) = _expiry(after[payloads], kind="blob", channel="d")
    assert seed_after > seed_before
    assert _expiry(after[checkpoints], ref=old) == _expiry(before[checkpoints], ref=old)
    assert _expiry(after[payloads], kind="write", ref=old) == _expiry(
        before[payloads], kind="write", ref=old
    )
    history = fresh.get_delta_channel_history(config=t.config, channels=["d"])
    assert history["d"]["seed"] == ["seed"]
    assert [w[2] for w in history["d"]["writes"]] == [f"w{i}" for i in range(1, 7)]


def test_expired_documents_are_hidden_and_purged(client: Any, prefix: str, thread_id: str) -> None:
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, ttl=1)
    saver.setup()
    t = Thread(saver, thread_id)
    t.put({"a": 1})
    saver.put_writes(t.config, [("a", 2)], "task")
    assert saver.get_tuple(_config(thread_id)) is not None
    time.sleep(1.3)
    assert saver.get_tuple(_config(thread_id)) is None
    assert list(saver.list(_config(thread_id))) == []
    assert saver.get_delta_channel_history(config=t.config, channels=["a"]) == {"a": {"writes": []}}
    saver.purge_expired()
    assert all(not coll for coll in _docs(client, prefix, thread_id).values())


def test_refresh_ttl_on_read_keeps_a_read_thread_alive(
    client: Any, prefix: str, thread_id: str
) -> None:
    reader = MongoDBSaver(
        client, db_name=TEST_DB, key_prefix=prefix, ttl=2, refresh_ttl_on_read=True
    )
    reader.setup()
    t = Thread(reader, thread_id)
    t.put({"a": 1, "b": 2})
    t.put({"b": 3})
    reader.put_writes(t.config, [("a", 9)], "task")
    time.sleep(1.2)
    with RECORDER.count() as read:
        assert reader.get_tuple(_config(thread_id)) is not None
    assert read == ["find", "find", "update"]  # the read, then the refresh
    time.sleep(1.2)  # 2.4 s after the writes, 1.2 s after the read
    got = reader.get_tuple(_config(thread_id))
    assert got is not None and got.checkpoint["channel_values"] == {"a": 1, "b": 3}
    assert got.pending_writes == [("task", "a", 9)]


# -- bad input -----------------------------------------------------------------------------------


def test_operator_lookalikes_are_plain_strings(
    saver: MongoDBSaver, client: Any, prefix: str
) -> None:
    evil = '{"$gt": ""}'
    victim = Thread(saver, f"victim-{uuid.uuid4().hex[:6]}")
    victim.put({"secret": "s"}, {"source": "input", "step": 0})
    attacker = Thread(saver, evil, ns='{"$ne": null}')
    attacker.put(
        {"$weird.channel": {"$set": 1}, "a.b": 2},
        {"step": 0, "a.b": 1, "$where": "1", "nested": {"$gt": 1, "k.k": 2}},
    )
    got = saver.get_tuple(_config(evil, ns='{"$ne": null}'))
    assert got is not None
    assert got.checkpoint["channel_values"] == {"$weird.channel": {"$set": 1}, "a.b": 2}
    assert got.metadata["nested"] == {"$gt": 1, "k.k": 2} and got.metadata["$where"] == "1"
    mine = list(saver.list({"configurable": {"thread_id": evil}}))  # every namespace
    assert [x.config["configurable"]["thread_id"] for x in mine] == [evil]
    assert saver.get_tuple(_config(evil)) is None  # ns "" is not '{"$ne": null}'
    assert len(list(saver.list({"configurable": {"thread_id": evil}}, filter={"a.b": 1}))) == 1
    assert list(saver.list(None, filter={"source": {"$ne": "x"}})) == []  # equality, no operator
    assert len(list(saver.list(None, filter={"nested": {"$gt": 1, "k.k": 2}}))) == 1
    with pytest.raises(InvalidFilter):
        list(saver.list(None, filter={"$where": "sleep(1000)"}))
    with pytest.raises(InvalidThreadId):
        saver.get_tuple({"configurable": {"thread_id": {"$gt": ""}}})
    docs = client[TEST_DB][f"{prefix}_payloads"].find_one({"thread_id": evil, "kind": "cp"})
    assert docs is not None and "a.b" not in docs["metadata_doc"]  # unsafe keys stay out


def test_metadata_filters_run_on_the_server_and_opaque_values_still_match(
    saver: MongoDBSaver, thread_id: str
) -> None:
    t = Thread(saver, thread_id)
    for i in range(30):
        t.put({"n": i}, {"step": i, "score": i, "source": "loop" if i % 2 else "input"})
    t.put({"n": 99}, {"step": 30, "huge": 2**63 + 5, "grid": [[1, 2], [3]], "nan": float("nan")})
    start = len(RECORDER.commands)
    found = list(saver.list(_config(thread_id), filter={"score": 7, "source": "loop"}))
    assert [x.metadata["score"] for x in found] == [7]
    find = next(body for name, body in RECORDER.commands[start:] if name == "find")
    assert "metadata_doc.score" in str(find["filter"])
    assert len(list(saver.list(_config(thread_id), filter={"huge": 2**63 + 5}))) == 1
    assert len(list(saver.list(_config(thread_id), filter={"grid": [[1, 2], [3]]}))) == 1
    assert len(list(saver.list(_config(thread_id), filter={"step": 3.0}))) == 1
    assert len(list(saver.list(_config(thread_id), filter={"missing": None}))) == 31


# -- schema, errors, clients -----------------------------------------------------------------------


def test_setup_is_idempotent_and_schema_lists_the_indexes(
    client: Any, saver: MongoDBSaver, prefix: str
) -> None:
    saver.setup()
    saver.setup()
    specs = saver.schema()
    assert specs == MongoDBSaver.schema(key_prefix=prefix)
    assert {s["collection"] for s in specs} == set(collection_names(prefix))
    for spec in specs:
        names = {ix["name"] for ix in client[TEST_DB][spec["collection"]].list_indexes()}
        assert spec["name"] in names or f"{spec['name']}_plain" in names
        assert spec["key"][0][0] in ("thread_id", "run_id", "expires_at")
    unique = [s for s in specs if s.get("unique")]
    assert unique and all(s["key"][0] == ["thread_id", 1] for s in unique)
    conflicting = unique_prefix("conflict")
    client[TEST_DB][f"{conflicting}_payloads"].create_index(
        [("thread_id", 1)], name="gk_thread_ns_kind_ref"
    )
    with pytest.raises(ConfigurationError, match="gk_thread_ns_kind_ref"):
        MongoDBSaver(client, db_name=TEST_DB, key_prefix=conflicting).setup()


def test_unreachable_server_raises_storage_unavailable_without_the_password() -> None:
    dead = "mongodb://alice:s3cret@127.0.0.1:1/db?serverSelectionTimeoutMS=300"
    with pytest.raises(StorageUnavailable) as err:
        with graphkeep.connect(dead):
            pass
    message = str(err.value)
    assert "s3cret" not in message and "127.0.0.1:1" in message
    assert "./dev services up" in message


async def test_wrong_clients_and_options_are_rejected(client: Any) -> None:
    aclient: pymongo.AsyncMongoClient[Any] = pymongo.AsyncMongoClient(url(), connect=False)
    with pytest.raises(ConfigurationError, match="AsyncMongoDBSaver"):
        MongoDBSaver(aclient)
    await aclient.close()
    with pytest.raises(ConfigurationError, match="MongoDBSaver"):
        AsyncMongoDBSaver(client)
    with pytest.raises(ConfigurationError, match="unknown option"):
        with graphkeep.connect(url(), nope=1):
            pass
    with pytest.raises(ConfigurationError):
        MongoDBSaver(client, key_prefix="bad$prefix")


def test_concurrent_writers_from_threads(saver: MongoDBSaver, thread_id: str) -> None:
    t = Thread(saver, thread_id)
    t.put({"a": 0})
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(5):
                saver.put_writes(t.config, [("a", n * 10 + i)], f"task-{n}-{i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    got = saver.get_tuple(t.config)
    assert got is not None and len(got.pending_writes) == 30


def test_lease_is_exclusive_token_checked_and_expires(saver: MongoDBSaver, thread_id: str) -> None:
    # a 2 s lease: with 0.5 s, a loaded FerretDB's acquire and refusal outlasted it before
    # the extend (run F of dd6f9f8: extend() found the lease gone)
    first = saver.lock(thread_id, ttl=2.0)
    assert first.acquire()
    with pytest.raises(LockNotAcquired):
        saver.lock(thread_id, blocking=False).acquire()
    assert first.extend(2.0)
    time.sleep(2.2)
    second = saver.lock(thread_id, ttl=5)
    assert second.acquire()  # the first lease expired
    assert not first.release()  # ...and is no longer the first holder's to release
    assert second.release()
    saver.delete_thread(thread_id)  # leases live apart from the thread's data


def test_list_pages_through_more_than_a_page_across_namespaces(
    saver: MongoDBSaver, thread_id: str
) -> None:
    root, child = Thread(saver, thread_id), Thread(saver, thread_id, ns="child:1")
    for i in range(60):
        root.put({"n": i})
        child.put({"n": i})
    everything = list(saver.list({"configurable": {"thread_id": thread_id}}))
    ids = [x.config["configurable"]["checkpoint_id"] for x in everything]
    assert len(everything) == 120 and ids == sorted(ids, reverse=True)
    assert len(list(saver.list(_config(thread_id, ns="child:1")))) == 60
    before = root.ids[10]
    older = list(saver.list(_config(thread_id), before=_config(thread_id, before)))
    assert [x.config["configurable"]["checkpoint_id"] for x in older] == root.ids[:10][::-1]
    assert len(list(saver.list(None, limit=5))) == 5


# -- pure document builders (no server) -----------------------------------------------------------


def test_metadata_copy_keeps_what_every_server_can_store() -> None:
    from graphkeep.backends.mongodb.documents import OPAQUE, metadata_fields

    doc, opaque = metadata_fields(
        {
            "source": "loop",
            "step": 3,
            "parents": {"": "id-1", "child:1": "id-2"},
            "a.b": 1,  # unsafe key: left out, never pushed down
            "$x": 1,
            "big": 2**63 + 5,  # beyond int64
            "nan": float("nan"),
            "grid": [[1, 2]],  # array directly in an array
            "nested": {"k.k": 1},  # unsafe nested key
            "copied": OPAQUE,  # re-stored from an export
        }
    )
    assert doc == {"source": "loop", "step": 3, "parents": {"": "id-1", "child:1": "id-2"}}
    assert opaque == ["big", "nan", "grid", "nested", "copied"]


def test_filters_never_turn_user_data_into_operators() -> None:
    from graphkeep.backends.mongodb.documents import metadata_filter

    clauses = metadata_filter(
        {"source": "input", "a.b": 1, "x$": 2, "n": {"$gt": 1}, "big": 2**63, "ok": None}
    )
    assert clauses == [
        {
            "$or": [
                {"metadata_doc.source": {"$eq": "input"}},
                {"metadata_opaque": {"$eq": "source"}},
            ]
        },
        {"$or": [{"metadata_doc.ok": {"$eq": None}}, {"metadata_opaque": {"$eq": "ok"}}]},
    ]


def test_chunks_reassemble_only_within_one_generation() -> None:
    from graphkeep.backends.mongodb.documents import assemble, identity, payload_docs

    ident = identity("t", "", "blob", "1:a:1")
    data = os.urandom(10_000)
    docs = payload_docs(ident, {"channel": "a"}, "bytes", data, 3000)
    assert [d.head for d in docs] == [False, False, False, True]  # tails first, head last
    stored = [d.doc for d in docs]
    assert assemble(stored) == (stored[-1], data)
    assert assemble(stored[1:]) is None  # a missing tail: not visible yet
    other = payload_docs(ident, {"channel": "a"}, "bytes", os.urandom(10_000), 3000)
    mixed = [other[0].doc, *stored[1:]]  # a tail of another generation does not count
    assert assemble(mixed) is None
    small = payload_docs(ident, {}, "null", b"", 3000)
    assert len(small) == 1 and assemble([small[0].doc]) == (small[0].doc, b"")


def test_busy_servers_and_upsert_races_are_retried_other_failures_are_not() -> None:
    from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

    from graphkeep.backends.mongodb.client import retryable as _retryable
    from graphkeep.backends.mongodb.requests import Command

    upsert = Command("c", "bulk_write")
    answer = Command("c", "update_one", retry_conflicts=False)  # a conflict is the answer
    sqlite_busy = "[db.go:134 fsql.(*DB).InTransaction] database is locked (5) (SQLITE_BUSY)"
    busy = OperationFailure(sqlite_busy, code=1)
    conflict = OperationFailure("WriteConflict", code=112)
    labelled = OperationFailure(
        "not primary", code=10107, details={"errorLabels": ["RetryableWriteError"]}
    )
    invalid = OperationFailure("$set is empty", code=9)
    for exc in (busy, conflict, labelled):
        assert _retryable(exc, upsert, 0.0) and _retryable(exc, answer, 0.0)
    assert not _retryable(invalid, upsert, 0.0)
    assert _retryable(DuplicateKeyError("E11000", 11000), upsert, 0.0)
    assert not _retryable(DuplicateKeyError("E11000", 11000), answer, 0.0)

    def bulk(*codes: int) -> BulkWriteError:
        errors = [{"code": c, "errmsg": sqlite_busy if c == 1 else "x"} for c in codes]
        return BulkWriteError({"writeErrors": errors})

    assert _retryable(bulk(11000, 1), upsert, 0.0)
    assert not _retryable(bulk(11000, 1), answer, 0.0)
    assert _retryable(bulk(1, 1), answer, 0.0)
    assert not _retryable(bulk(1, 9), upsert, 0.0)
    assert not _retryable(bulk(), upsert, 0.0)


# -- list sharing (issue 13) ----------------------------------------------------------------------

ELEMENT = lists.ELEMENT_CHANNEL


def _messages(n: int, start: int = 0) -> list[str]:
    """Chat-sized strings: a list of 10 or more is stored as elements (>= 1 KiB)."""
    return [
        f"message {i}: " + "the order shipped and the tracking says so. " * 3
        for i in range(start, start + n)
    ]


def _elements(docs: dict[str, list[Any]]) -> list[Any]:
    return [d for d in docs["payloads"] if d["kind"] == "blob" and d["channel"] == ELEMENT]


def test_a_growing_list_is_one_update_per_put_two_finds_per_read_and_each_element_once(
    client: Any, saver: MongoDBSaver, prefix: str, thread_id: str
) -> None:
    t = Thread(saver, thread_id)
    messages = _messages(12)
    for turn in range(6):
        messages = messages + _messages(3, start=100 + 3 * turn)
        with RECORDER.count() as put:
            t.put({"messages": messages, "n": turn})
        assert put == ["update"]  # elements, manifest, checkpoint: one ordered batch
    docs = _docs(client, prefix, thread_id)
    stored = _elements(docs)
    assert len(stored) == len(messages) == 30  # each element once, however many versions
    assert len({d["version"] for d in stored}) == 30
    manifests = [d for d in docs["payloads"] if d["type"] == lists.MANIFEST_TAG]
    assert len(manifests) == 6 and max(len(d["data"]) for d in manifests) < 64  # O(1) each
    with RECORDER.count() as read:
        got = saver.get_tuple(_config(thread_id))
    assert read == ["find", "find"]  # the elements come with the blobs and writes
    assert got is not None and got.checkpoint["channel_values"]["messages"] == messages
    # another process, no cache: the checkpoint document names its element runs
    cold = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix)
    with RECORDER.count() as cold_read:
        again = cold.get_tuple(_config(thread_id, t.ids[2]))
    assert cold_read == ["find", "find"]
    assert again is not None and again.checkpoint["channel_values"]["messages"] == messages[:21]
    plain = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, share_lists=False)
    history = list(plain.list(_config(thread_id)))
    assert [len(h.checkpoint["channel_values"]["messages"]) for h in history] == [
        30,
        27,
        24,
        21,
        18,
        15,
    ]
    # a list channel the writing process did not know (cold cache, channel unchanged): the
    # checkpoint cannot name its elements, so reading it costs one more find, same list
    cold_writer = Thread(cold, thread_id)
    cold_writer.config, cold_writer.versions = t.config, dict(t.versions)
    cold_writer.values = {"messages": messages, "n": 5}
    cold_writer.put({"n": 6})
    with RECORDER.count() as extra:
        latest = saver.get_tuple(_config(thread_id))
    assert extra == ["find", "find", "find"]
    assert latest is not None and latest.checkpoint["channel_values"]["messages"] == messages
    saver.copy_thread(thread_id, f"{thread_id}-copy")  # the copy names its element runs too
    with RECORDER.count() as copy_read:
        copied = cold.get_tuple(_config(f"{thread_id}-copy", t.ids[-1]))
    assert copy_read == ["find", "find"]
    assert copied is not None and copied.checkpoint["channel_values"]["messages"] == messages
    assert len(_elements(_docs(client, prefix, f"{thread_id}-copy"))) == 30


def test_get_blobs_is_one_find_by_ranges_and_leaves_absent_keys_out(
    saver: MongoDBSaver, thread_id: str
) -> None:
    t = Thread(saver, thread_id)
    t.put({"messages": _messages(12), "other": "x"})
    got_tuple = saver.get_tuple(t.config)
    assert got_tuple is not None
    docs_keys = [k for k, _, _ in saver.lists._cache[(thread_id, "", "messages")].known.values()]
    epoch = docs_keys[0][:16]
    keys = [("", ELEMENT, k) for k in docs_keys]
    keys += [("", ELEMENT, lists.element_key(epoch, 999)), ("", "other", t.versions["other"])]
    keys += [("elsewhere", ELEMENT, docs_keys[0])]
    start = len(RECORDER.commands)
    got = saver._call(saver.port.get_blobs(thread_id, keys))
    commands = RECORDER.commands[start:]
    assert [name for name, _ in commands] == ["find"]
    assert "$gte" in str(commands[0][1]["filter"])  # the 12 elements as one index range
    assert set(got) == {k for k in keys[:12]} | {("", "other", t.versions["other"])}


def test_prune_and_delete_leave_no_orphan_elements(
    client: Any, saver: MongoDBSaver, prefix: str, thread_id: str
) -> None:
    t = Thread(saver, thread_id)
    first = _messages(12)
    t.put({"messages": first})
    t.put({"messages": first + _messages(2, start=50)})
    replaced = _messages(11, start=200)  # a summary replaced the conversation
    t.put({"messages": replaced})
    _assert_no_orphans(client, prefix, thread_id)
    assert len(_elements(_docs(client, prefix, thread_id))) == 25
    saver.prune([thread_id], strategy="keep_latest")
    docs = _docs(client, prefix, thread_id)
    assert [c["ref"] for c in docs["checkpoints"]] == [t.ids[-1]]
    assert len(_elements(docs)) == 11  # the elements only old versions named are gone
    _assert_no_orphans(client, prefix, thread_id)
    got = saver.get_tuple(_config(thread_id))
    assert got is not None and got.checkpoint["channel_values"]["messages"] == replaced
    t.put({"messages": replaced + _messages(1, start=300)})  # the saver forgot, still correct
    again = saver.get_tuple(_config(thread_id))
    assert (
        again is not None
        and again.checkpoint["channel_values"]["messages"][-1] == _messages(1, 300)[0]
    )
    saver.delete_thread(thread_id)
    assert all(not coll for coll in _docs(client, prefix, thread_id).values())


def _assert_elements_outlive(docs: dict[str, list[Any]], head_id: str) -> None:
    (head,) = [c for c in docs["checkpoints"] if c["ref"] == head_id]
    named = {f"{e['e']}{e['lo']:08x}" for e in head["lists"]}
    assert named  # the head names its element runs
    runs = {(e["e"], e["lo"], e["hi"]) for e in head["lists"]}
    for d in _elements(docs):
        epoch, seq = lists.split_key(d["version"])
        if any(epoch == e and lo <= seq <= hi for e, lo, hi in runs):
            assert d["expires_at"] >= head["expires_at"], d["version"]


def test_elements_live_as_long_as_the_checkpoints_that_name_them(
    client: Any, prefix: str, thread_id: str
) -> None:
    ttl = 2  # seconds
    saver = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, ttl=ttl)
    saver.setup()
    t = Thread(saver, thread_id)
    messages = _messages(12)
    t.put({"messages": messages, "n": 0})
    time.sleep(1.1)
    messages += _messages(2, start=40)
    with RECORDER.count() as put:
        t.put({"messages": messages, "n": 1})  # old elements refreshed in the same command
    second_put = time.monotonic()
    assert put == ["update"]
    _assert_elements_outlive(_docs(client, prefix, thread_id), t.ids[-1])
    time.sleep(1.8)
    # a new process (cold cache) puts with the list unchanged: it refreshes every element
    cold = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix, ttl=ttl)
    t.saver = cold
    t.put({"n": 2})
    docs = _docs(client, prefix, thread_id)
    head_expiry = max(c["expires_at"] for c in docs["checkpoints"])
    assert all(d["expires_at"] >= head_expiry for d in _elements(docs))
    # the first two checkpoints are past their expiry, the head (put 1.8 s after the
    # second, however slow the server) is not
    time.sleep(max(0.0, second_put + ttl + 0.1 - time.monotonic()))
    cold.purge_expired()
    docs = _docs(client, prefix, thread_id)
    assert [c["ref"] for c in docs["checkpoints"]] == [t.ids[-1]]
    got = cold.get_tuple(_config(thread_id))
    assert got is not None and got.checkpoint["channel_values"]["messages"] == messages


async def test_async_list_sharing_one_update_per_put_and_two_finds_per_read(
    client: Any, prefix: str, thread_id: str
) -> None:
    aclient: pymongo.AsyncMongoClient[Any] = pymongo.AsyncMongoClient(
        url(), event_listeners=[RECORDER]
    )
    try:
        saver = AsyncMongoDBSaver(aclient, db_name=TEST_DB, key_prefix=prefix, ttl=60)
        await saver.asetup()
        config = _config(thread_id)
        versions: dict[str, Any] = {}
        messages: list[str] = []
        for turn in range(4):
            messages = messages + _messages(5, start=10 * turn)
            versions["messages"] = saver.get_next_version(versions.get("messages"))
            cp = _checkpoint({"messages": messages}, dict(versions))
            with RECORDER.count() as put:
                config = await saver.aput(
                    config, cp, {"step": turn}, {"messages": versions["messages"]}
                )
            assert put == ["update"]
        with RECORDER.count() as get:
            got = await saver.aget_tuple(_config(thread_id))
        assert get == ["find", "find"]
        assert got is not None and got.checkpoint["channel_values"]["messages"] == messages
        assert len(_elements(_docs(client, prefix, thread_id))) == 20
        await saver.aprune([thread_id], strategy="keep_latest")
        _assert_no_orphans(client, prefix, thread_id)
        await saver.adelete_thread(thread_id)
        assert all(not coll for coll in _docs(client, prefix, thread_id).values())
    finally:
        await aclient.close()


def _format_1_id(*parts: str) -> str:
    """``_id`` as graphkeep 0.1.x spelled it (the identity, length-prefixed)."""
    return "".join(f"{len(part)}:{part}" for part in parts)


def _as_format_1(doc: dict[str, Any]) -> dict[str, Any]:
    """A format-2 document (its :func:`_view`) as graphkeep 0.1.x wrote it."""
    base: dict[str, Any] = {k: doc[k] for k in ("thread_id", "ns")}
    if "expires_at" in doc:
        base["expires_at"] = doc["expires_at"]
    if doc["kind"] == "cp":
        h = heading_of(doc)
        old = {
            **base,
            "_id": _format_1_id("c", doc["thread_id"], doc["ns"], doc["ref"]),
            "checkpoint_id": doc["ref"],
            "parent_id": h.parent_id,
            "format": 1,
            "versions": [{"c": c, "v": v} for c, v in h.versions.items()],
            "present": h.present,
            "needs_history": h.needs_history,
            "metadata_doc": doc["metadata_doc"],
        }
        if "run_id" in doc:
            old["run_id"] = doc["run_id"]
        if h.chunked:
            old["chunked"] = True
        else:
            ctag, cdata, mtag, mdata = codec.unpackb(bytes(doc["d"]))
            old.update(checkpoint=cdata, checkpoint_type=ctag, metadata=mdata, metadata_type=mtag)
        return old
    part = doc["part"].replace("/", ":")
    key = (doc["thread_id"], doc["ns"], doc["kind"], doc["ref"], doc["sub"], part)
    old = {**base, "_id": _format_1_id("p", *key), "kind": doc["kind"], "ref": doc["ref"]}
    old.update(sub=doc["sub"], part=part, data=doc["data"])
    if not part:
        old.update(type=doc["type"], count=doc["count"])
        if doc["count"] > 1:
            old["gen"] = doc["gen"]
    if doc["kind"] == "blob":
        old.update(channel=doc["channel"], version=doc["version"])
    if doc["kind"] == "write":
        old.update(task_id=doc["task_id"], idx=doc["idx"], channel=doc["channel"])
        old["task_path"] = doc.get("p", "")
    return old


def test_setup_rewrites_format_1_documents_in_format_2(
    client: Any, prefix: str, thread_id: str
) -> None:
    # 0.1.x had no list sharing; small chunks so a blob, a write and a checkpoint are chunked
    saver = MongoDBSaver(
        client, db_name=TEST_DB, key_prefix=prefix, share_lists=False, chunk_size=32 * 1024
    )
    saver.setup()
    t = Thread(saver, thread_id)
    big = os.urandom(50 * 1024)
    for i in range(3):
        meta = {"step": i, "run_id": f"run-{i}", "notes": os.urandom(20 * 1024).hex()}
        t.put({"n": i, "messages": _messages(12 + i), "big": big}, meta)
    saver.put_writes(t.config, [("n", 9), ("big", os.urandom(40 * 1024))], "task")
    db = client[TEST_DB]
    data, _locks = collection_names(prefix)
    legacy = f"{prefix}_checkpoints"
    stored = _docs(client, prefix, thread_id)
    assert any(d["part"] for d in stored["payloads"])  # chunked payloads are covered
    db[data].delete_many({"thread_id": thread_id})
    db[legacy].insert_many([_as_format_1(d) for d in stored["checkpoints"]])
    old_payloads = [_as_format_1(d) for d in stored["payloads"]]
    db[data].insert_many(old_payloads)
    # a rewrite interrupted after its upsert: the format-2 copy exists, the old one too
    db[data].insert_one(upgrade_payload(old_payloads[0]))
    upgraded = MongoDBSaver(client, db_name=TEST_DB, key_prefix=prefix)
    assert upgraded.get_tuple(_config(thread_id)) is None  # checkpoints not moved yet
    upgraded.setup()
    assert legacy not in db.list_collection_names()
    raw = list(db[data].find({"thread_id": thread_id}))
    assert not [d for d in raw if "data" in d or "checkpoint_id" in d]  # all rewritten
    assert len(raw) == sum(len(v) for v in stored.values())
    got = upgraded.get_tuple(_config(thread_id))
    assert got is not None and got.checkpoint["channel_values"]["messages"] == _messages(14)
    assert got.checkpoint["channel_values"]["big"] == big
    assert sorted(w[1] for w in got.pending_writes) == ["big", "n"]
    assert len(list(upgraded.list(_config(thread_id), filter={"step": 1}))) == 1
    upgraded.delete_for_runs(["run-0"])
    assert [c["ref"] for c in _docs(client, prefix, thread_id)["checkpoints"]] == t.ids[1:]
    assert all(c["format"] == 2 for c in _docs(client, prefix, thread_id)["checkpoints"])
    _assert_no_orphans(client, prefix, thread_id)
    upgraded.setup()  # idempotent
