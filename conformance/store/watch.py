"""watch: ``saver.watch`` / ``saver.awatch`` — a thread's checkpoints as they are committed.

A case runs a small graph on a saver while a watcher drains ``watch`` in the background (a
thread in sync mode, a task in async mode; see :class:`~conformance.store.api.Collector`),
then compares what the watcher got with what ``list`` says the thread holds: every
checkpoint committed after the watch began, each once, in commit order. A watcher stops at
the run's closing ``update_state`` checkpoint (metadata source ``"update"``), so no case
waits for an idle timeout. Runs whose checkpoints land in one namespace are compared in
exact id order (LangGraph chains a loop's puts, so commit order is id order there); with
subgraphs, each namespace's own order is checked (a subgraph's put may land after its
parent's next one).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, TypedDict
from uuid import uuid4

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph import END, START, StateGraph

from conformance.store._registry import case
from conformance.store.api import Collector, SaverApi, StoreFactory, checkpoint_id, commit_of
from graphkeep.errors import InvalidInput

#: checkpoints a turn of the chat graph writes: input, loop step 0, loop step 1
PER_TURN = 3
#: a short poll keeps polled stores quick in cases (the default is 0.2 s)
POLL = 0.05


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def _step(name: str) -> Any:
    def node(state: LogState) -> dict[str, list[str]]:
        return {"log": [f"{name}:{len(state['log'])}"]}

    return node


def _linear(names: list[str], nodes: dict[str, Any] | None = None) -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(LogState)
    previous = START
    for name in names:
        builder.add_node(name, (nodes or {}).get(name, _step(name)))
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def chat_graph() -> StateGraph[Any]:
    """START -> reply -> END: three checkpoints a turn, all in the root namespace."""
    return _linear(["reply"])


def nested_graph() -> StateGraph[Any]:
    """prep -> sub (inner_a -> inner_b): checkpoints in "" and in the subgraph's namespace."""
    inner = _linear(["inner_a", "inner_b"]).compile()
    return _linear(["prep", "sub"], {"sub": inner})


def new_thread(tag: str = "w") -> str:
    return f"{tag}-{uuid4().hex[:10]}"


def turn(n: int) -> dict[str, list[str]]:
    return {"log": [f"user:{n}"]}


def is_marker(item: CheckpointTuple) -> bool:
    """The closing checkpoint of a case's run: its ``update_state``."""
    return item.metadata.get("source") == "update" and commit_of(item)[0] == ""


def ids(items: list[CheckpointTuple]) -> list[str]:
    return [checkpoint_id(t) for t in items]


def _once(items: list[CheckpointTuple]) -> None:
    commits = [commit_of(t) for t in items]
    twice = sorted({c for c in commits if commits.count(c) > 1})
    assert not twice, f"the watcher yielded checkpoints more than once: {twice}"


def _arm(api: SaverApi, graph: Any, thread: str, watcher: Collector[CheckpointTuple]) -> int:
    """Probe turns until a watch started with ``after=None`` has seen a checkpoint (it has
    then certainly started); returns how many checkpoints the thread held at that point."""
    for n in range(10):
        api.invoke(graph, turn(-n), thread)
        if watcher.wait_for(1, within=3.0):
            return len(api.commits(thread))
    raise AssertionError(f"a watcher saw none of 10 probe turns ({watcher.error!r})")


def _finish(api: SaverApi, graph: Any, thread: str) -> str:
    return api.update(graph, thread, {"log": ["end"]})


@case("watch")
def a_watcher_sees_every_new_checkpoint_once_in_commit_order(factory: StoreFactory) -> None:
    with factory.open_saver() as api:
        graph = api.compile(chat_graph())
        thread = new_thread()
        watcher = api.watch(thread, until=is_marker, poll_interval=POLL)
        armed_at = _arm(api, graph, thread, watcher)
        for n in range(1, 4):
            api.invoke(graph, turn(n), thread)
        last = _finish(api, graph, thread)
        seen = watcher.result()
        _once(seen)
        everything = [c[1] for c in api.commits(thread)]
        assert everything[-1] == last
        assert ids(seen) == everything[len(everything) - len(seen) :], (
            "the watcher's checkpoints are not the thread's newest ones in commit order"
        )
        assert len(seen) >= len(everything) - armed_at, (
            f"the watcher missed checkpoints: {len(seen)} seen, "
            f"{len(everything) - armed_at} committed after it had started"
        )
        assert {t.config["configurable"]["thread_id"] for t in seen} == {thread}
        assert seen[-1].checkpoint["channel_values"]["log"][-1] == "end", "values not loaded"


@case("watch")
def after_replays_every_later_checkpoint_then_goes_live(factory: StoreFactory) -> None:
    with factory.open_saver() as api:
        graph = api.compile(chat_graph())
        thread = new_thread()
        for n in range(2):
            api.invoke(graph, turn(n), thread)
        before = [c[1] for c in api.commits(thread)]
        start = before[2]
        backlog = before[3:]
        watcher = api.watch(thread, after=start, until=is_marker, poll_interval=POLL)
        caught_up = watcher.wait_for(len(backlog), within=20)
        assert ids(caught_up) == backlog, "after= did not replay the later checkpoints in order"
        newest = api.watch(thread, after=before[-1], until=is_marker, poll_interval=POLL)
        api.invoke(graph, turn(2), thread)
        _finish(api, graph, thread)
        everything = [c[1] for c in api.commits(thread)]
        seen = watcher.result()
        _once(seen)
        assert ids(seen) == everything[3:]
        assert ids(newest.result()) == everything[len(before) :]


@case("watch")
def checkpoint_ns_none_also_yields_subgraph_checkpoints(factory: StoreFactory) -> None:
    with factory.open_saver() as api:
        graph = api.compile(nested_graph())
        thread = new_thread()
        api.invoke(graph, turn(0), thread)
        start = api.commits(thread)[-1][1]
        every_ns = api.watch(
            thread, after=start, checkpoint_ns=None, until=is_marker, poll_interval=POLL
        )
        root_only = api.watch(thread, after=start, until=is_marker, poll_interval=POLL)
        api.invoke(graph, turn(1), thread)
        _finish(api, graph, thread)
        expected = [c for c in api.commits(thread) if c[1] > start]
        assert {ns for ns, _ in expected} != {""}, "the subgraph wrote no checkpoint of its own"
        seen = every_ns.result()
        _once(seen)
        got = [commit_of(t) for t in seen]
        assert sorted(got, key=lambda c: (c[1], c[0])) == expected, (
            "checkpoint_ns=None must yield every namespace's new checkpoints"
        )
        for ns in {ns for ns, _ in expected}:
            mine = [c for c in got if c[0] == ns]
            assert mine == [c for c in expected if c[0] == ns], f"{ns!r} out of commit order"
        assert [commit_of(t) for t in root_only.result()] == [c for c in expected if c[0] == ""]


@case("watch")
def timeout_ends_the_watch_after_that_long_without_a_checkpoint(factory: StoreFactory) -> None:
    with factory.open_saver() as api:
        graph = api.compile(chat_graph())
        thread = new_thread()
        idle = api.watch(thread, timeout=0.5, poll_interval=POLL)
        assert idle.result(within=20) == []
        assert idle.elapsed >= 0.45, f"timeout=0.5 ended the watch after {idle.elapsed:.2f} s"
        api.invoke(graph, turn(0), thread)
        start = api.commits(thread)[-1][1]
        # three checkpoints 0.5 s apart: more than `timeout` in total, never that long silent
        watcher = api.watch(thread, after=start, timeout=1.5, poll_interval=POLL)
        written = []
        for n in range(3):
            watcher.pause(0.5)
            written.append(api.update(graph, thread, {"log": [f"u{n}"]}))
        assert ids(watcher.result(within=20)) == written


@case("watch")
def watchers_never_see_other_threads_or_other_prefixes(factory: StoreFactory) -> None:
    with factory.open_saver() as api, factory.sibling("other").open_saver() as other:
        graph, other_graph = api.compile(chat_graph()), other.compile(chat_graph())
        a, b = new_thread("a"), new_thread("b")
        lanes: list[tuple[SaverApi, Any, str]] = [(api, graph, a), (api, graph, b)]
        lanes.append((other, other_graph, a))  # the same thread id under another prefix
        watchers = []
        for lane_api, lane_graph, thread in lanes:
            lane_api.invoke(lane_graph, turn(0), thread)
            start = lane_api.commits(thread)[-1][1]
            watchers.append(
                (start, lane_api.watch(thread, after=start, until=is_marker, poll_interval=POLL))
            )
        for n in range(1, 3):
            for lane_api, lane_graph, thread in lanes:
                lane_api.invoke(lane_graph, turn(n), thread)
        for lane_api, lane_graph, thread in lanes:
            _finish(lane_api, lane_graph, thread)
        for (lane_api, _, thread), (start, watcher) in zip(lanes, watchers, strict=True):
            seen = watcher.result()
            expected = [c[1] for c in lane_api.commits(thread) if c[1] > start]
            assert ids(seen) == expected, f"thread {thread}: got another lane's checkpoints"
            assert {t.config["configurable"]["thread_id"] for t in seen} == {thread}


BAD_WATCH_ARGUMENTS: list[dict[str, Any]] = [
    {"timeout": 0},
    {"timeout": -1},
    {"timeout": "1"},
    {"timeout": math.nan},
    {"timeout": True},
    {"poll_interval": 0},
    {"poll_interval": None},
    {"max_poll_interval": -2},
    {"after": 17},
    {"after": "id\x00"},
    {"after": "x" * 5000},
    {"checkpoint_ns": "ns\x00"},
    {"checkpoint_ns": 3},
]


def _rejected(call: Callable[[], Any], what: str) -> None:
    try:
        call()
    except InvalidInput:
        return
    raise AssertionError(f"watch accepted {what}")


@case("watch")
def bad_arguments_raise_at_the_call_and_write_nothing(factory: StoreFactory) -> None:
    with factory.open_saver() as api:
        thread = new_thread()
        for bad_thread in ("", "t\x00", "x" * 5000, None, 3.5):
            _rejected(partial(api.watch_call, bad_thread), f"thread id {bad_thread!r:.30}")
        for kwargs in BAD_WATCH_ARGUMENTS:
            _rejected(partial(api.watch_call, thread, **kwargs), f"{kwargs!r:.60}")
        assert api.commits(thread) == []
