"""writes_order: pending writes come back in `writes_sort_key` order (contract s3, invariants 4-6).

Order = (task_path, task_id, idx) in plain code-point order, idx numeric (special writes have
negative idx, so they come first within their task).
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED

from conformance.factory import SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    checkpoint_id_of,
    config,
    metadata,
    must_get,
    new_checkpoint_id,
    new_thread,
    put_one,
    write_values,
)

MID_TASK = "55555555-5555-5555-5555-555555555555"
HIGH_TASK = "ffffffff-ffff-ffff-ffff-ffffffffffff"


@case("writes_order")
def more_than_ten_writes_of_a_task_come_back_in_numeric_idx_order(factory: SaverFactory) -> None:
    with factory.open() as api:
        stored = put_one(api, new_thread())
        writes = [(f"ch{i}", f"w{i}") for i in range(12)]  # "10" < "2" as strings
        api.put_writes(stored, writes, MID_TASK, "~__pregel_pull, n")
        got = write_values(must_get(api, stored))
        assert got == writes, got


def _task(digit: str) -> str:
    return "-".join(digit * n for n in (8, 4, 4, 4, 12))


# (task_id, task_path, writes) in the order they are put: task ids are unique per task (as in
# the runtime) and their order disagrees with the path order, so only the right key passes.
PARALLEL: list[tuple[str, str, list[tuple[str, Any]]]] = [
    (_task("f"), "~__pregel_pull, b", [("ch", "b-high-0"), ("ch", "b-high-1")]),
    (_task("1"), "~__pregel_pull, b", [("ch", "b-low")]),
    (_task("e"), "~__pregel_pull, a", [("ch", "a")]),
    (_task("0"), "~~0000000002~__pregel_pull, b", [("ch", "exit-mode")]),
    (_task("d"), "~__pregel_pull, B", [("ch", "upper-B")]),  # "B" < "a" in code points
    (_task("c"), "", [("ch", "no-path")]),
    (_task("2"), "~__pregel_push, 0000000001", [("ch", "push")]),
]


def _expected_parallel_order() -> list[tuple[str, Any]]:
    keyed = [
        (writes_sort_key(path, task_id, WRITES_IDX_MAP.get(ch, idx)), (ch, value))
        for task_id, path, writes in PARALLEL
        for idx, (ch, value) in enumerate(writes)
    ]
    return [write for _, write in sorted(keyed, key=lambda item: item[0])]


@case("writes_order")
def parallel_task_writes_are_ordered_by_task_path_then_task_id_then_idx(
    factory: SaverFactory,
) -> None:
    expected = _expected_parallel_order()
    assert [v for _, v in expected][:3] == ["no-path", "upper-B", "a"]  # sanity of the fixture
    with factory.open() as api:
        stored = put_one(api, new_thread())
        for task_id, path, writes in PARALLEL:
            api.put_writes(stored, writes, task_id, path)
        got = write_values(must_get(api, stored))
        assert got == expected, got


@case("writes_order")
def special_writes_come_first_within_their_task(factory: SaverFactory) -> None:
    with factory.open() as api:
        stored = put_one(api, new_thread())
        api.put_writes(stored, [("ch", "r0"), (ERROR, "err"), ("ch2", "r2")], MID_TASK, "~p")
        api.put_writes(stored, [(INTERRUPT, "int")], MID_TASK, "~p")
        api.put_writes(stored, [(SCHEDULED, "sch")], MID_TASK, "~p")
        api.put_writes(stored, [(RESUME, "res")], MID_TASK, "~p")
        api.put_writes(stored, [("ch", "other-task")], HIGH_TASK, "~p")
        got = write_values(must_get(api, stored))
        assert got == [
            (RESUME, "res"),
            (INTERRUPT, "int"),
            (SCHEDULED, "sch"),
            (ERROR, "err"),
            ("ch", "r0"),
            ("ch2", "r2"),
            ("ch", "other-task"),
        ], got


@case("writes_order")
def writes_put_before_their_checkpoint_are_visible_after_it(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        parent = put_one(api, thread)
        early_id = new_checkpoint_id()
        api.put_writes(config(thread, "", early_id), [("ch", "early")], MID_TASK, "~p")
        stored = api.put(
            config(thread, "", checkpoint_id_of(parent)),
            checkpoint(checkpoint_id=early_id),
            metadata(1),
            {},
        )
        assert checkpoint_id_of(stored) == early_id
        got = write_values(must_get(api, stored))
        assert got == [("ch", "early")], got
        got = write_values(must_get(api, config(thread)))
        assert got == [("ch", "early")], got


@case("writes_order")
def a_new_checkpoint_starts_without_pending_writes(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        first = put_one(api, thread)
        api.put_writes(first, [("ch", "w"), (ERROR, "e")], MID_TASK, "~p")
        second = put_one(api, thread, parent=first)
        assert must_get(api, second).pending_writes == []
        assert must_get(api, config(thread)).pending_writes == []
        assert len(must_get(api, first).pending_writes or []) == 2
