"""sync_api: the official-suite-style cases through the SYNC methods (the runtime's invoke,
stream and get_state use only those), plus thread safety of one saver used from OS threads.

Cases whose behaviour the official suite does not check at all (special-write overwrite,
list without namespace, list(None), `before` without thread id) also run through the async API.
"""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from conformance.factory import BOTH, SYNC, Api, SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    checkpoint_id_of,
    config,
    ids,
    metadata,
    must_get,
    new_thread,
    put_chain,
    put_one,
    write_values,
)

VALUES: dict[str, Any] = {
    "text": "hello",
    "number": 42,
    "ratio": 0.5,
    "items": [1, "two", {"three": 3}],
    "mapping": {"a": {"b": [None, True]}},
    "nothing": None,
    "raw": b"\x00\xff binary",
}


def _assert_round_trip(api: Api, versions: dict[str, Any]) -> None:
    thread = new_thread()
    cp = checkpoint(
        VALUES,
        versions,
        versions_seen={"node": dict(versions), "__snapshot_bumps__": {"a|b:c": 1}},
    )
    cp["updated_channels"] = ["text", "number"]
    cp["pending_sends"] = []  # type: ignore[typeddict-unknown-key]  # legacy key must survive
    stored = api.put(config(thread), cp, metadata(-1, "input"), versions)
    assert stored["configurable"] == {
        "thread_id": thread,
        "checkpoint_ns": "",
        "checkpoint_id": cp["id"],
    }
    got = must_get(api, stored)
    assert got.checkpoint["channel_values"] == VALUES, got.checkpoint["channel_values"]
    assert "absent" not in got.checkpoint["channel_values"], "versioned-but-absent channel read"
    assert got.checkpoint["channel_versions"] == versions
    for channel, version in got.checkpoint["channel_versions"].items():
        assert type(version) is type(versions[channel]), f"{channel}: {version!r} changed type"
    for key in ("v", "id", "ts", "versions_seen", "updated_channels", "pending_sends"):
        assert got.checkpoint.get(key) == cp.get(key), f"checkpoint[{key!r}] did not round-trip"
    assert got.parent_config is None
    assert got.pending_writes == []


@case("sync_api", modes=SYNC)
def put_then_get_tuple_round_trips_values_and_int_versions(factory: SaverFactory) -> None:
    with factory.open() as api:
        versions: dict[str, Any] = {channel: i + 1 for i, channel in enumerate(VALUES)}
        versions["absent"] = 99  # versioned, no value: must come back absent, not None
        _assert_round_trip(api, versions)


@case("sync_api", modes=SYNC)
def put_then_get_tuple_round_trips_values_and_str_versions(factory: SaverFactory) -> None:
    with factory.open() as api:
        versions = {channel: api.next_version(None) for channel in [*VALUES, "absent"]}
        _assert_round_trip(api, versions)


@case("sync_api", modes=SYNC)
def put_writes_ignores_a_repeated_regular_write(factory: SaverFactory) -> None:
    with factory.open() as api:
        stored = put_one(api, new_thread())
        api.put_writes(stored, [("a", 1), ("b", 2)], "task-1", "~__pregel_pull, n")
        api.put_writes(stored, [("a", 10), ("b", 20)], "task-1", "~__pregel_pull, n")
        assert must_get(api, stored).pending_writes == [("task-1", "a", 1), ("task-1", "b", 2)]


@case("sync_api", modes=BOTH)
def special_writes_overwrite_per_write_like_in_memory_saver(factory: SaverFactory) -> None:
    with factory.open() as api:
        stored = put_one(api, new_thread())
        api.put_writes(stored, [("ch", "v1"), (ERROR, "e1")], "task-1")
        api.put_writes(stored, [("ch", "v2"), (ERROR, "e2")], "task-1")
        api.put_writes(stored, [(INTERRUPT, "i1")], "task-1")
        api.put_writes(stored, [(INTERRUPT, "i2")], "task-1")
        writes = sorted(write_values(must_get(api, stored)))
        assert writes == sorted([("ch", "v1"), (ERROR, "e2"), (INTERRUPT, "i2")]), writes


def _list_fixture(api: Api, thread: str) -> list[str]:
    sources = ["input", "loop", "loop", "update"]
    stored = put_chain(
        api,
        thread,
        4,
        meta_for=lambda i: metadata(i - 1, sources[i], **({"score": 7} if i else {})),
    )
    api.put_writes(stored[1], [("ch", "w")], "task-1")
    return ids(stored)


@case("sync_api", modes=SYNC)
def list_applies_filter_before_and_limit_newest_first(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        cid = _list_fixture(api, thread)
        assert ids(api.list(config(thread))) == cid[::-1]
        assert ids(api.list(config(thread), filter={"source": "loop"})) == [cid[2], cid[1]]
        assert ids(api.list(config(thread), filter={"source": "loop", "step": 1})) == [cid[2]]
        assert ids(api.list(config(thread), filter={"score": 7, "source": "input"})) == []
        assert ids(api.list(config(thread), before=config(thread, "", cid[2]))) == cid[1::-1]
        assert ids(api.list(config(thread), limit=2)) == [cid[3], cid[2]]
        assert ids(api.list(config(thread), before=config(thread, "", cid[3]), limit=1)) == [cid[2]]
        assert ids(api.list(config(thread, "", cid[1]))) == [cid[1]]
        listed = {checkpoint_id_of(t): t for t in api.list(config(thread))}
        for checkpoint_id in cid:
            expected = must_get(api, config(thread, "", checkpoint_id))
            assert listed[checkpoint_id].pending_writes == expected.pending_writes
            assert listed[checkpoint_id].parent_config == expected.parent_config


@case("sync_api", modes=BOTH)
def list_without_namespace_lists_every_namespace(factory: SaverFactory) -> None:
    thread = new_thread()
    namespaces = ["", "child:1", "mid:2|inner:3"]
    with factory.open() as api:
        for ns in namespaces:
            put_one(api, thread, ns=ns)
        no_ns = api.list({"configurable": {"thread_id": thread}})
        assert sorted(t.config["configurable"]["checkpoint_ns"] for t in no_ns) == sorted(
            namespaces
        )
        none_ns = api.list({"configurable": {"thread_id": thread, "checkpoint_ns": None}})
        assert len(none_ns) == 3, "checkpoint_ns None must mean all namespaces"
        root_only = api.list(config(thread, ""))
        assert [t.config["configurable"]["checkpoint_ns"] for t in root_only] == [""]


@case("sync_api", modes=BOTH)
def list_of_none_spans_threads_and_honours_before(factory: SaverFactory) -> None:
    threads = [new_thread("a"), new_thread("b")]
    with factory.open() as api:
        stored = [
            put_one(api, thread, ns=ns, meta=metadata(0, tenant=thread))
            for thread in threads
            for ns in ("", "child:1")
        ]
        everything = api.list(None)
        assert sorted(ids(everything)) == sorted(ids(stored))
        assert {t.config["configurable"]["thread_id"] for t in everything} == set(threads)
        pivot = sorted(ids(stored))[2]
        before: RunnableConfig = {"configurable": {"checkpoint_id": pivot}}  # as on replay
        assert sorted(ids(api.list(None, before=before))) == sorted(ids(stored))[:2]
        assert len(api.list(None, filter={"tenant": threads[1]})) == 2


@case("sync_api", modes=SYNC)
def delete_thread_removes_every_namespace_and_write(factory: SaverFactory) -> None:
    thread, other = new_thread(), new_thread()
    with factory.open() as api:
        root = put_one(api, thread, values={"x": 1})
        put_one(api, thread, ns="child:1", values={"x": 2})
        api.put_writes(root, [("ch", "w")], "task-1")
        kept = put_one(api, other, values={"x": 3})
        api.delete_thread(thread)
        assert api.get_tuple(config(thread)) is None
        assert api.get_tuple(config(thread, "child:1")) is None
        assert api.list({"configurable": {"thread_id": thread}}) == []
        again = api.put(config(thread), checkpoint(checkpoint_id=checkpoint_id_of(root)), {}, {})
        assert must_get(api, again).pending_writes == [], "writes survived delete_thread"
        assert must_get(api, kept).checkpoint["channel_values"] == {"x": 3}
        api.delete_thread(new_thread("unknown"))


@case("sync_api", modes=SYNC)
def delete_for_runs_removes_only_matching_checkpoints(factory: SaverFactory) -> None:
    thread, other = new_thread(), new_thread()
    with factory.open() as api:
        first = put_one(api, thread, meta=metadata(0, run_id="r1"))
        api.put_writes(first, [("ch", "w")], "task-1")
        second = put_one(api, thread, parent=first, meta=metadata(1, run_id="r2"))
        child = put_one(api, thread, ns="child:1", meta=metadata(0, run_id="r1"))
        unrelated = put_one(api, other, meta=metadata(0, run_id="r3"))
        api.delete_for_runs([])
        api.delete_for_runs(["no-such-run"])
        assert len(api.list(None)) == 4
        api.delete_for_runs(["r1"])
        assert api.get_tuple(first) is None and api.get_tuple(child) is None
        assert must_get(api, second).metadata["run_id"] == "r2"
        assert must_get(api, unrelated).metadata["run_id"] == "r3"
        api.delete_for_runs(["r2", "r3"])
        assert api.list(None) == []


def _snapshot(api: Api, thread: str) -> dict[tuple[str, str], Any]:
    """Everything a thread holds, keyed by (ns, checkpoint id), thread id stripped."""
    result: dict[tuple[str, str], Any] = {}
    for found in api.list({"configurable": {"thread_id": thread}}):
        conf = found.config["configurable"]
        parent = (
            found.parent_config["configurable"]["checkpoint_id"] if found.parent_config else None
        )
        result[(conf["checkpoint_ns"], conf["checkpoint_id"])] = (
            found.checkpoint["channel_values"],
            found.metadata,
            parent,
            found.pending_writes,
        )
    return result


@case("sync_api", modes=SYNC)
def copy_thread_copies_checkpoints_writes_and_namespaces(factory: SaverFactory) -> None:
    source, target = new_thread("src"), new_thread("dst")
    with factory.open() as api:
        chain = put_chain(api, source, 3, meta_for=lambda i: metadata(i, run_id=f"r{i}", k=[i]))
        api.put_writes(chain[1], [("ch", "w1"), (ERROR, "boom")], "task-1", "~p")
        put_one(api, source, ns="child:1", values={"deep": {"x": [1]}})
        before = _snapshot(api, source)
        api.copy_thread(source, target)
        assert _snapshot(api, target) == before
        assert _snapshot(api, source) == before, "copy_thread changed the source"
        assert ids(api.list(config(target))) == ids(chain)[::-1]
        assert must_get(api, config(target)).config["configurable"]["thread_id"] == target
        empty = new_thread("empty")
        try:
            api.copy_thread(new_thread("missing"), empty)
        except Exception:  # the contract allows raising for an unknown source
            pass
        assert api.list({"configurable": {"thread_id": empty}}) == []


@case("sync_api", modes=SYNC)
def prune_keep_latest_keeps_each_namespace_head_with_its_values(factory: SaverFactory) -> None:
    thread, other = new_thread(), new_thread()
    with factory.open() as api:
        first = api.put(
            config(thread),
            checkpoint({"a": "a1", "b": "b1"}, {"a": 1, "b": 1}),
            metadata(0),
            {"a": 1, "b": 1},
        )
        second = api.put(
            config(thread, "", checkpoint_id_of(first)),
            checkpoint({"a": "a2", "b": "b1"}, {"a": 2, "b": 1}),
            metadata(1),
            {"a": 2},
        )
        head = api.put(
            config(thread, "", checkpoint_id_of(second)),
            checkpoint({"a": "a2", "b": "b3"}, {"a": 2, "b": 3}),
            metadata(2),
            {"b": 3},
        )
        api.put_writes(head, [("ch", "pending")], "task-1")
        child = put_chain(api, thread, 2, ns="child:1")
        untouched = put_chain(api, other, 2)
        api.prune([])
        api.prune([new_thread("unknown")])
        api.prune([thread], strategy="keep_latest")
        assert ids(api.list(config(thread))) == [checkpoint_id_of(head)]
        assert ids(api.list(config(thread, "child:1"))) == [checkpoint_id_of(child[-1])]
        kept = must_get(api, config(thread))
        assert kept.checkpoint["channel_values"] == {"a": "a2", "b": "b3"}, "head lost a blob"
        assert write_values(kept) == [("ch", "pending")]
        assert ids(api.list(config(other))) == ids(untouched)[::-1]


@case("sync_api", modes=SYNC)
def prune_delete_removes_every_checkpoint_of_the_thread(factory: SaverFactory) -> None:
    thread, other = new_thread(), new_thread()
    with factory.open() as api:
        put_chain(api, thread, 3)
        put_chain(api, thread, 1, ns="child:1")
        untouched = put_chain(api, other, 2)
        api.prune([thread], strategy="delete")
        assert api.list({"configurable": {"thread_id": thread}}) == []
        assert ids(api.list(config(other))) == ids(untouched)[::-1]


def _thread_worker(api: Api, thread: str, rounds: int, barrier: threading.Barrier) -> None:
    barrier.wait()
    parent = None
    for step in range(rounds):
        values = {"owner": thread, "step": step}
        parent = put_one(api, thread, parent=parent, values=values, version=step + 1)
        api.put_writes(parent, [("a", step), ("b", thread)], f"task-{step}", "~p")
        found = must_get(api, config(thread))
        assert found.checkpoint["channel_values"] == {"owner": thread, "step": step}
        assert write_values(found) == [("a", step), ("b", thread)]


@case("sync_api", modes=SYNC)
def one_saver_serves_eight_os_threads_concurrently(factory: SaverFactory) -> None:
    threads, rounds = [new_thread(f"w{i}") for i in range(8)], 10
    barrier = threading.Barrier(len(threads))
    errors: list[BaseException] = []

    def work(api: Api, thread: str) -> None:
        try:
            _thread_worker(api, thread, rounds, barrier)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    with factory.open() as api:
        workers = [threading.Thread(target=work, args=(api, t)) for t in threads]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        if errors:
            raise errors[0]
        assert not any(w.is_alive() for w in workers), "a worker thread hung"
        for thread in threads:
            assert len(api.list(config(thread))) == rounds
