"""delta_history: `get_delta_channel_history` / `aget_delta_channel_history` (contract s8, s11).

The eight repo-HEAD conformance cases the PyPI suite lacks (int versions, ts=""), plus missing
targets, latest resolution, forks, task-path order and namespace isolation. Every case runs once
through the sync and once through the async method.
"""

from __future__ import annotations

from uuid import uuid4

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from conformance.factory import Api, SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    config,
    delta_chain,
    history_values,
    metadata,
    new_checkpoint_id,
    new_thread,
)


def _seed_value(api: Api, conf: RunnableConfig, channel: str) -> object:
    entry = api.history(conf, [channel])[channel]
    assert "seed" in entry, f"expected a seed for {channel!r}, got {entry}"
    return entry["seed"]


@case("delta_history")
def history_returns_writes_oldest_first(factory: SaverFactory) -> None:
    with factory.open() as api:
        head = delta_chain(api, new_thread(), snapshots=[0], steps=5)[-1]
        got = history_values(api.history(head, ["ch"]), "ch")
        assert got == [1, 2, 3], got


@case("delta_history")
def history_seed_is_the_nearest_snapshot_returned_as_stored(factory: SaverFactory) -> None:
    with factory.open() as api:
        head = delta_chain(api, new_thread(), snapshots=[0, 3], steps=6)[-1]
        seed = _seed_value(api, head, "ch")
        assert isinstance(seed, _DeltaSnapshot), f"seed must stay a _DeltaSnapshot: {seed!r}"
        assert seed.value == 3
        got = history_values(api.history(head, ["ch"]), "ch")
        assert got == [4], got


@case("delta_history")
def history_excludes_the_targets_own_pending_writes(factory: SaverFactory) -> None:
    with factory.open() as api:
        head = delta_chain(api, new_thread(), snapshots=[0], steps=3)[-1]
        api.put_writes(head, [("ch", "extra")], str(uuid4()))
        got = history_values(api.history(head, ["ch"]), "ch")
        assert got == [1], got


@case("delta_history")
def history_stops_each_channel_at_its_own_seed(factory: SaverFactory) -> None:
    thread = new_thread()
    snapshot_at = {1: "a", 3: "b"}
    with factory.open() as api:
        parent: RunnableConfig | None = None
        for step in range(5):
            values, versions = {}, {}
            if step in snapshot_at:
                values[snapshot_at[step]] = _DeltaSnapshot(f"snap_{snapshot_at[step]}")
                versions[snapshot_at[step]] = step + 1
            parent_id = parent["configurable"]["checkpoint_id"] if parent else None
            cp = checkpoint(values, versions, ts="")
            parent = api.put(config(thread, "", parent_id), cp, metadata(step), dict(versions))
            api.put_writes(parent, [("a", step), ("b", step)], str(uuid4()))
        assert parent is not None
        history = api.history(parent, ["a", "b"])
        got = history_values(history, "a")
        assert got == [1, 2, 3], got
        got = history_values(history, "b")
        assert got == [3], got
        assert history["a"]["seed"] == _DeltaSnapshot("snap_a")
        assert history["b"]["seed"] == _DeltaSnapshot("snap_b")


@case("delta_history")
def history_for_no_channels_is_an_empty_mapping(factory: SaverFactory) -> None:
    with factory.open() as api:
        head = delta_chain(api, new_thread(), snapshots=[0], steps=3)[-1]
        assert dict(api.history(head, [])) == {}


@case("delta_history")
def history_reaching_the_root_without_a_value_has_no_seed(factory: SaverFactory) -> None:
    with factory.open() as api:
        head = delta_chain(api, new_thread(), snapshots=[], steps=4)[-1]
        entry = api.history(head, ["ch"])["ch"]
        assert "seed" not in entry, entry
        assert [value for _, _, value in entry["writes"]] == [0, 1, 2]


def _plain_value_chain(
    api: Api, thread: str, values_by_step: dict[int, list[int]], writes_by_step: dict[int, str]
) -> RunnableConfig:
    parent: RunnableConfig | None = None
    for step in range(4):
        values, versions = {}, {}
        if step in values_by_step:
            values["ch"] = values_by_step[step]
            versions["ch"] = step + 1
        parent_id = parent["configurable"]["checkpoint_id"] if parent else None
        cp = checkpoint(values, versions, ts="")
        parent = api.put(config(thread, "", parent_id), cp, metadata(step), dict(versions))
        if step in writes_by_step:
            api.put_writes(parent, [("ch", writes_by_step[step])], str(uuid4()))
    assert parent is not None
    return parent


@case("delta_history")
def history_uses_a_pre_delta_plain_value_as_seed(factory: SaverFactory) -> None:
    with factory.open() as api:
        head = _plain_value_chain(api, new_thread(), {1: [10, 20, 30]}, {0: "w0", 2: "w2"})
        assert _seed_value(api, head, "ch") == [10, 20, 30]
        got = history_values(api.history(head, ["ch"]), "ch")
        assert got == ["w2"], got


@case("delta_history")
def history_replays_the_seed_ancestors_own_writes(factory: SaverFactory) -> None:
    writes = {0: "older-than-seed", 1: "at-seed", 2: "after-seed", 3: "pending-at-head"}
    with factory.open() as api:
        head = _plain_value_chain(api, new_thread(), {0: [10], 1: [10, 20]}, writes)
        assert _seed_value(api, head, "ch") == [10, 20]
        got = history_values(api.history(head, ["ch"]), "ch")
        assert got == ["at-seed", "after-seed"], got


@case("delta_history")
def history_of_a_missing_target_is_empty_without_seed(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        delta_chain(api, thread, snapshots=[0], steps=3)
        missing = config(thread, "", new_checkpoint_id())
        assert dict(api.history(missing, ["ch"])) == {"ch": {"writes": []}}
        unknown_thread = config(new_thread("unknown"))
        assert dict(api.history(unknown_thread, ["ch"])) == {"ch": {"writes": []}}


@case("delta_history")
def history_without_checkpoint_id_starts_at_the_latest(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        head = delta_chain(api, thread, snapshots=[0], steps=5)[-1]
        expected = api.history(head, ["ch"])
        assert api.history(config(thread), ["ch"]) == expected
        explicit_none: RunnableConfig = {
            "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": None}
        }
        assert api.history(explicit_none, ["ch"]) == expected


def _child(api: Api, thread: str, parent: RunnableConfig, write: str | None) -> RunnableConfig:
    parent_id = parent["configurable"]["checkpoint_id"]
    stored = api.put(config(thread, "", parent_id), checkpoint(ts=""), metadata(), {})
    if write is not None:
        api.put_writes(stored, [("ch", write)], str(uuid4()))
    return stored


@case("delta_history")
def history_follows_parent_links_across_forks(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        snap = api.put(
            config(thread),
            checkpoint({"ch": _DeltaSnapshot("s")}, {"ch": 1}, ts=""),
            metadata(0),
            {"ch": 1},
        )
        api.put_writes(snap, [("ch", "w0")], str(uuid4()))
        fork_point = _child(api, thread, snap, "w1")
        head_a = _child(api, thread, _child(api, thread, fork_point, "a2"), None)
        head_b = _child(api, thread, _child(api, thread, fork_point, "b2"), None)  # newer ids
        got = history_values(api.history(head_a, ["ch"]), "ch")
        assert got == ["w0", "w1", "a2"], got
        got = history_values(api.history(head_b, ["ch"]), "ch")
        assert got == ["w0", "w1", "b2"], got


@case("delta_history")
def history_orders_parallel_writes_by_task_path_not_task_id(factory: SaverFactory) -> None:
    with factory.open() as api:
        chain = delta_chain(api, new_thread(), snapshots=[0], steps=3)
        step_1, head = chain[1], chain[2]
        api.put_writes(step_1, [("ch", "second")], "00000000-0000-0000-0000-000000000000", "~p, 02")
        api.put_writes(step_1, [("ch", "first")], "ffffffff-ffff-ffff-ffff-ffffffffffff", "~p, 01")
        # the chain's own write at step 1 has no task path, so it replays first
        got = history_values(api.history(head, ["ch"]), "ch")
        assert got == [1, "first", "second"], got


@case("delta_history")
def history_stays_within_the_target_namespace(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        root = delta_chain(api, thread, snapshots=[0], steps=4)
        child = delta_chain(api, thread, snapshots=[0], steps=4, ns="child:1")
        api.put_writes(child[1], [("ch", "child-only")], str(uuid4()), "~p")
        got = history_values(api.history(root[-1], ["ch"]), "ch")
        assert got == [1, 2], got
        got = history_values(api.history(child[-1], ["ch"]), "ch")
        assert got == [1, "child-only", 2], got
