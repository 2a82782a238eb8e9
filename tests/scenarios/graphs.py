"""The graphs the scenarios run: deterministic nodes, no LLM; shared with the worker process.

Nodes that a scenario must count record each run in a :class:`RunLog` (a file, so that runs in
another process count too). State types used by rich-state scenarios live here at module level
so that the serializer can rebuild them in any process.
"""

from __future__ import annotations

import operator
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import UUID

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel

from conformance.spec.delta_prune_copy import DeltaState


class RunLog:
    """Counts node runs in a file (appends are atomic for short lines)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def record(self, name: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(name + "\n")

    def counts(self) -> Counter[str]:
        if not self.path.exists():
            return Counter()
        return Counter(self.path.read_text(encoding="utf-8").split())

    def count(self, name: str) -> int:
        return self.counts()[name]


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


#: a node function (StateGraph.add_node's overloads cannot infer a TypedDict input from it)
Node = Any


def _linear(nodes: Sequence[tuple[str, Any]]) -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(LogState)
    previous = START
    for name, fn in nodes:
        builder.add_node(name, fn)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def _step(runs: RunLog, name: str) -> Node:
    def node(state: LogState) -> dict[str, list[str]]:
        runs.record(name)
        return {"log": [name]}

    return node


# -- conversation: the reply depends on the whole history (memory) -------------------------


def reply_to(log: list[str]) -> str:
    said = [entry for entry in log if entry.startswith("user:")]
    return f"bot:{len(said)}:{said[-1].removeprefix('user:') if said else ''}"


def chat_graph() -> StateGraph[Any]:
    def reply(state: LogState) -> dict[str, list[str]]:
        return {"log": [reply_to(state["log"])]}

    return _linear([("reply", reply)])


def chat_transcript(thread: str, turns: int) -> list[str]:
    """The log after ``turns`` turns of :func:`chat_graph` with :func:`user_line` inputs."""
    log: list[str] = []
    for turn in range(1, turns + 1):
        log.append(user_line(thread, turn))
        log.append(reply_to(log))
    return log


def user_line(thread: str, turn: int) -> str:
    return f"user:{thread}/{turn}"


# -- interrupt / resume ----------------------------------------------------------------------


def interview_graph(runs: RunLog) -> StateGraph[Any]:
    """prepare -> ask (interrupts for an answer) -> finish."""

    def ask(state: LogState) -> dict[str, list[str]]:
        runs.record("ask")
        answer = interrupt({"question": "name?"})
        return {"log": [f"answer:{answer}"]}

    return _linear(
        [("prepare", _step(runs, "prepare")), ("ask", ask), ("finish", _step(runs, "finish"))]
    )


def chain_graph(runs: RunLog) -> StateGraph[Any]:
    """a -> b -> c, each appending its name."""
    return _linear([(name, _step(runs, name)) for name in ("a", "b", "c")])


def flaky_chain_graph(runs: RunLog, failure: str) -> StateGraph[Any]:
    """a -> b -> c where b, on its first run only, interrupts or raises (``failure``)."""

    def b(state: LogState) -> dict[str, list[str]]:
        runs.record("b")
        if failure == "interrupt":
            return {"log": [f"b:{interrupt('go on?')}"]}
        if runs.count("b") == 1:
            raise FlakyError("b fails on its first run")
        return {"log": ["b"]}

    return _linear([("a", _step(runs, "a")), ("b", b), ("c", _step(runs, "c"))])


class FlakyError(RuntimeError):
    """Raised by a node on purpose."""


# -- subgraphs -------------------------------------------------------------------------------


def nested_graph(runs: RunLog) -> StateGraph[Any]:
    """prep -> sub (inner_work -> inner_ask, which interrupts) -> after."""

    def inner_ask(state: LogState) -> dict[str, list[str]]:
        runs.record("inner_ask")
        return {"log": [f"inner_answer:{interrupt('inner?')}"]}

    inner = _linear([("inner_work", _step(runs, "inner_work")), ("inner_ask", inner_ask)])
    return _linear(
        [("prep", _step(runs, "prep")), ("sub", inner.compile()), ("after", _step(runs, "after"))]
    )


# -- parallel branches -----------------------------------------------------------------------


def fan_out_graph(
    runs: RunLog, branches: Sequence[str], hook: Callable[[], None] | None = None
) -> StateGraph[Any]:
    """START -> every branch in parallel -> join; the last branch runs ``hook`` (which may
    wait, hang or raise) after recording its run and before returning its write."""
    builder: StateGraph[Any] = StateGraph(LogState)
    for name in branches:
        step = _step(runs, name)
        if hook is not None and name == branches[-1]:
            step = _hooked_step(runs, name, hook)
        builder.add_node(name, step)
        builder.add_edge(START, name)
    builder.add_node("join", _step(runs, "join"))
    builder.add_edge(list(branches), "join")
    builder.add_edge("join", END)
    return builder


def _hooked_step(runs: RunLog, name: str, hook: Callable[[], None]) -> Node:
    def node(state: LogState) -> dict[str, list[str]]:
        runs.record(name)
        hook()
        return {"log": [name]}

    return node


def hang_if(flag: Path, started: Path) -> Callable[[], None]:
    """Touch ``started``; while ``flag`` exists, sleep (the parent kills us meanwhile)."""

    def slow() -> None:
        started.touch()
        deadline = time.monotonic() + 120
        while flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    return slow


# -- DeltaChannel ----------------------------------------------------------------------------


def delta_graph() -> StateGraph[Any]:
    """START -> reply -> END on the matrix's DeltaState (a list, snapshot_frequency=4)."""

    def reply(state: DeltaState) -> dict[str, list[str]]:
        return {"items": [f"r{len(state['items'])}"]}

    builder = StateGraph(DeltaState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def delta_items(turns: int, start: int = 1, before: Sequence[str] = ()) -> list[str]:
    """Items after ``turns`` turns of :func:`delta_graph` with inputs ``in<n>``."""
    items = list(before)
    for n in range(start, start + turns):
        items.append(f"in{n}")
        items.append(f"r{len(items)}")
    return items


# -- rich state ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    x: int
    y: float


class Profile(BaseModel):
    name: str
    tags: list[str]
    born: datetime
    manager: Profile | None = None


class RichState(TypedDict, total=False):
    when: datetime
    uid: UUID
    raw: bytes
    labels: set[str]
    profile: Profile
    point: Point
    nested: dict[str, Any]
    span: timedelta


def rich_values() -> dict[str, Any]:
    born = datetime(1990, 5, 17, 8, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    return {
        "when": datetime(2026, 11, 30, 12, 0, 0, 654321, tzinfo=timezone.utc),
        "uid": UUID("12345678-1234-5678-1234-567812345678"),
        "raw": bytes(range(256)) + b"\x00tail",
        "labels": {"alpha", "βeta", ""},
        "profile": Profile(
            name="Ada", tags=["x", "y"], born=born, manager=Profile(name="Bo", tags=[], born=born)
        ),
        "point": Point(3, -1.5),
        "nested": {
            "list": [1, 2.5, None, True, "s", {"deep": {"deeper": [b"bin", "ünï"]}}],
            "empty": {},
            "int": 2**53 + 1,
            "neg": -7,
        },
        "span": timedelta(days=1, microseconds=5),
    }


def rich_graph() -> StateGraph[Any]:
    def produce(state: RichState) -> dict[str, Any]:
        return rich_values()

    builder = StateGraph(RichState)
    builder.add_node("produce", produce)
    builder.add_edge(START, "produce")
    builder.add_edge("produce", END)
    return builder


# -- unserializable values -------------------------------------------------------------------


class AnyState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    thing: Any


def unserializable_graph(value: Callable[[], Any]) -> StateGraph[Any]:
    """ok -> poison, which puts ``value()`` into channel "thing"."""

    def ok(state: AnyState) -> dict[str, Any]:
        return {"log": ["ok"]}

    def poison(state: AnyState) -> dict[str, Any]:
        return {"thing": value()}

    builder = StateGraph(AnyState)
    builder.add_node("ok", ok)
    builder.add_node("poison", poison)
    builder.add_edge(START, "ok")
    builder.add_edge("ok", "poison")
    builder.add_edge("poison", END)
    return builder


# -- parallel chat (concurrent put_writes) ---------------------------------------------------


def fan_chat_graph() -> StateGraph[Any]:
    """START -> (left || right) -> END; each branch echoes the last user line."""

    def echo(side: str) -> Node:
        def node(state: LogState) -> dict[str, list[str]]:
            said = [entry for entry in state["log"] if entry.startswith("user:")]
            return {"log": [f"{side}:{len(said)}:{said[-1]}"]}

        return node

    builder: StateGraph[Any] = StateGraph(LogState)
    for side in ("left", "right"):
        builder.add_node(side, echo(side))
        builder.add_edge(START, side)
        builder.add_edge(side, END)
    return builder


def fan_chat_transcript(thread: str, turns: int) -> list[str]:
    log: list[str] = []
    for turn in range(1, turns + 1):
        line = user_line(thread, turn)
        log += [line, f"left:{turn}:{line}", f"right:{turn}:{line}"]
    return log
