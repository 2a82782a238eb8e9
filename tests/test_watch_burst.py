"""``watch`` under a burst: a backlog is read in ``list`` pages, not one ``get_tuple`` each.

Every backend, a real graph: 15 turns of a 2-node graph written back to back are seen by a
watcher exactly once, in commit order, each checkpoint equal to what ``get_tuple`` returns —
and catching up with them (``after=``) takes a few requests per page, not one or more per
checkpoint (issue 28 item 6).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import graphkeep
from conformance.setups import ENABLED, Setup
from conformance.testing import marks_for
from tests.conftest import unique_prefix

SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in ENABLED]
TURNS = 15


class State(TypedDict):
    n: int
    log: list[str]


def two_nodes(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("a", lambda s: {"n": s["n"] + 1, "log": [*s["log"], "a"]})
    builder.add_node("b", lambda s: {"n": s["n"] + 1, "log": [*s["log"], "b"]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver)


def burst(saver: Any, thread: str) -> None:
    graph = two_nodes(saver)
    config = {"configurable": {"thread_id": thread}}
    for turn in range(TURNS):
        state = graph.get_state(config).values if turn else {"n": 0, "log": []}
        graph.invoke({"n": state["n"], "log": state["log"]}, config)


def committed(saver: Any, thread: str) -> list[str]:
    """The thread's checkpoint ids, oldest first."""
    tuples = saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    return sorted(t.config["configurable"]["checkpoint_id"] for t in tuples)


class Counted:
    """Counts the requests ``saver`` sends (its executor's one-attempt function)."""

    def __init__(self, saver: Any) -> None:
        self.executor = saver._execute
        self.original = self.executor.send
        self.sent = 0

    def __enter__(self) -> Counted:
        def send(request: Any) -> Any:
            self.sent += 1
            return self.original(request)

        self.executor.send = send
        return self

    def __exit__(self, *exc: object) -> None:
        self.executor.send = self.original


@pytest.fixture(params=SETUPS)
def saver(request: pytest.FixtureRequest) -> Iterator[Any]:
    setup: Setup = request.param
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("burst")) as opened:
        yield opened


def same_as_get_tuple(saver: Any, seen: Any, writes: bool = True) -> None:
    """``seen`` is the checkpoint ``get_tuple`` reads now (its pending writes too, unless
    it was seen live: the writes of a step land after its checkpoint)."""
    again = saver.get_tuple(seen.config)
    assert again is not None
    assert seen.checkpoint == again.checkpoint
    assert seen.metadata == again.metadata
    assert seen.parent_config == again.parent_config
    if writes:
        assert seen.pending_writes == again.pending_writes


def test_catching_up_with_a_burst_reads_pages_not_one_checkpoint_at_a_time(saver: Any) -> None:
    burst(saver, "t")
    ids = committed(saver, "t")
    assert len(ids) >= 3 * TURNS
    with Counted(saver) as counted:
        seen = list(saver.watch("t", after=ids[0], timeout=0.3, poll_interval=0.05))
    got = [s.config["configurable"]["checkpoint_id"] for s in seen]
    assert got == ids[1:]  # each once, in commit order
    for one in seen[:: max(1, len(seen) // 6)]:
        same_as_get_tuple(saver, one)
    assert seen[-1].checkpoint["channel_values"]["n"] == 2 * TURNS
    # one get_tuple per checkpoint sent at least one request each
    assert counted.sent < len(ids) // 2, (counted.sent, len(ids))


def test_a_live_watcher_sees_a_burst_whole_in_order(saver: Any) -> None:
    seen: list[Any] = []
    ready = threading.Event()

    def watcher() -> None:
        ready.set()
        seen.extend(saver.watch("live", timeout=3, poll_interval=0.05))

    thread = threading.Thread(target=watcher)
    thread.start()
    ready.wait()
    time.sleep(0.5)  # the watcher has read where the thread ends
    burst(saver, "live")
    thread.join(60)
    got = [s.config["configurable"]["checkpoint_id"] for s in seen]
    assert got == committed(saver, "live")
    for one in seen[:: max(1, len(seen) // 6)]:
        same_as_get_tuple(saver, one, writes=False)


def test_a_backlog_longer_than_a_page_is_read_whole(saver: Any, monkeypatch: Any) -> None:
    from graphkeep.checkpoint import watch

    monkeypatch.setattr(watch, "PAGE", 7)  # pages end mid-burst, and at a full page
    burst(saver, "paged")
    ids = committed(saver, "paged")
    seen = list(saver.watch("paged", after=ids[0], timeout=0.3, poll_interval=0.05))
    assert [s.config["configurable"]["checkpoint_id"] for s in seen] == ids[1:]
    for one in seen:
        same_as_get_tuple(saver, one)


@pytest.fixture(params=SETUPS)
async def asaver(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    setup: Setup = request.param
    async with graphkeep.aconnect(setup.url, key_prefix=unique_prefix("burst")) as opened:
        yield opened


def test_a_watcher_starts_at_its_call_not_at_its_first_read(saver: Any) -> None:
    """``watch`` reads where the thread ends when iteration starts; a turn written between
    the call and then is still seen, and what was there before the call is not."""
    graph = two_nodes(saver)
    config = {"configurable": {"thread_id": "late"}}
    graph.invoke({"n": 0, "log": []}, config)
    before = committed(saver, "late")
    watcher = saver.watch("late", timeout=0.5, poll_interval=0.05)
    graph.invoke({"n": 10, "log": []}, config)
    made_after = committed(saver, "late")[len(before) :]
    assert len(made_after) >= 3
    seen = [s.config["configurable"]["checkpoint_id"] for s in watcher]
    assert seen == made_after
    # an empty thread: everything of its first turn, run between the call and the first read
    fresh = saver.watch("empty", timeout=0.5, poll_interval=0.05)
    graph.invoke({"n": 0, "log": []}, {"configurable": {"thread_id": "empty"}})
    got = [s.config["configurable"]["checkpoint_id"] for s in fresh]
    assert got == committed(saver, "empty")


async def test_an_async_watcher_starts_at_its_call_not_when_its_task_first_runs(
    asaver: Any,
) -> None:
    graph = two_nodes(asaver)
    config = {"configurable": {"thread_id": "late"}}
    await graph.ainvoke({"n": 0, "log": []}, config)
    before = {t.config["configurable"]["checkpoint_id"] async for t in asaver.alist(config)}
    seen: list[str] = []
    started = asyncio.Event()

    async def follow(stream: AsyncIterator[Any]) -> None:
        await started.wait()  # a busy loop runs the task late: here, after the turn below
        async for item in stream:
            seen.append(item.config["configurable"]["checkpoint_id"])

    task = asyncio.create_task(follow(asaver.awatch("late", timeout=0.5, poll_interval=0.05)))
    await graph.ainvoke({"n": 10, "log": []}, config)
    started.set()
    await asyncio.wait_for(task, 60)
    ids = sorted([t.config["configurable"]["checkpoint_id"] async for t in asaver.alist(config)])
    assert seen == [i for i in ids if i not in before]
    assert len(seen) >= 3
