"""``graphkeep dump`` says which view of a checkpoint each pending write belongs to.

LangGraph shows a checkpoint two ways: ``get_state`` without a checkpoint id (the head, live)
applies the step's input (null task) writes and then the output of the tasks that finished;
``get_state_history`` and ``get_state`` with a checkpoint id apply only the input. The recipe
of docs/cli.md — the seed, the writes, then the pending writes of the chosen view, reduced with
the graph's own reducers — must give exactly what each view shows: the head live, and every
checkpoint of the history. Threads are written by real graphs (a Send fan-out of parallel tool
calls, an approval that interrupts twice, the second time after a ``Command(update=…)``), on
every backend, sync and async, and on LangGraph's SQLite saver.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from langgraph.types import Command, Send, interrupt

import graphkeep

from .cli_runs import gk
from .conftest import unique_prefix
from .test_cli import BACKEND_PARAMS, Store, config, to_messages

CHANNELS = ("messages", "done")
#: the tools each question calls in parallel; ``approve`` asks twice before it answers
PLANS = {"q1": ["search", "lookup"], "q2": ["search", "approve", "lookup"], "q3": ["lookup"]}


MESSAGES = DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], MESSAGES]
    done: Annotated[list[str], operator.add]


class ToolCall(TypedDict):
    call: dict[str, Any]


def _agent(state: AgentState) -> dict[str, Any]:
    last = state["messages"][-1]
    turn = sum(1 for m in state["messages"] if m.id in PLANS)
    if isinstance(last, HumanMessage) and last.id in PLANS:
        calls = [
            {"name": name, "args": {"turn": turn}, "id": f"call-{last.id}-{name}"}
            for name in PLANS[last.id]
        ]
        return {"messages": [AIMessage("", tool_calls=calls, id=f"plan-{last.id}")]}
    return {"messages": [AIMessage(f"answer {turn}", id=f"answer-{turn}")], "done": ["answer"]}


def _route(state: AgentState) -> Any:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return [Send("tool", {"call": call}) for call in last.tool_calls]
    return END


def _tool(arg: ToolCall) -> dict[str, Any]:
    call = arg["call"]
    content = f"{call['name']} result"
    if call["name"] == "approve":
        content = f"approved: {interrupt('refund?')}, {interrupt('really?')}"
    message = ToolMessage(content, tool_call_id=call["id"], id=f"tool-{call['id']}")
    return {"messages": [message], "done": [call["name"]]}


def agent_graph(saver: Any) -> Any:
    """agent -> Send(tool) per tool call, in parallel -> agent -> END."""
    builder = StateGraph(AgentState)
    builder.add_node("agent", _agent)
    builder.add_node("tool", _tool)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", _route, ["tool", END])
    builder.add_edge("tool", "agent")
    return builder.compile(checkpointer=saver)


def recover(graph: Any, channel: str, entry: dict[str, Any], view: str | None) -> Any:
    """docs/cli.md's recipe with the graph's own reducer: the seed, the writes, then the
    pending writes the view applies (``None``: all of them, the recipe before views)."""
    spec = graph.channels[channel]
    decode: Callable[[Any], Any] = to_messages if channel == "messages" else list
    seed = decode(entry["seed"]) if entry["seed"] is not None else []
    writes = [decode(w["value"]) for w in entry["writes"]]
    pending = [
        decode(w["value"])
        for w in entry["pending_writes"]
        if view is None or view in w["applied_in"]
    ]
    if isinstance(spec, DeltaChannel):
        return spec.reducer(spec.reducer(seed, writes), pending)
    value = seed
    for batch in writes + pending:
        value = spec.operator(value, batch)
    return value


def values(graph: Any, document: dict[str, Any], view: str | None) -> dict[str, Any]:
    return shown({ch: recover(graph, ch, document["channels"][ch], view) for ch in CHANNELS})


def shown(state: dict[str, Any]) -> dict[str, Any]:
    """The channels with a value (``done`` shows as ``[]`` once the graph has channels)."""
    return {ch: value for ch, value in state.items() if value}


def dump(argv: list[str], thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    rest = ["--checkpoint-id", checkpoint_id] if checkpoint_id else []
    channels = [arg for ch in CHANNELS for arg in ("--channel", ch)]
    result = gk(argv[0], argv[1], "--thread-id", thread, *channels, *rest, *argv[2:])
    document: dict[str, Any] = result.json()
    # before the first tool ran, ``done`` is not a channel of the checkpoint yet: exit 4
    assert result.code == (4 if document["unknown_channels"] else 0), result.err
    assert document["unknown_channels"] in ([], ["done"])
    return document


def assert_head_views(argv: list[str], graph: Any, thread: str) -> dict[str, Any]:
    """The head's dump, reduced by view: live is ``get_state``, history is the head's
    ``get_state`` by id (and its entry in ``get_state_history``)."""
    live = graph.get_state(config(thread))
    head_id = live.config["configurable"]["checkpoint_id"]
    history = graph.get_state(config(thread, head_id))
    document = dump(argv, thread)
    assert document["target_checkpoint_id"] == head_id and document["is_head"] is True
    assert values(graph, document, "live") == shown(live.values)
    assert values(graph, document, "history") == shown(history.values)
    return document


def assert_history_views(argv: list[str], graph: Any, thread: str) -> int:
    """Every checkpoint of ``get_state_history`` from its own dump, history view; returns at
    how many checkpoints the recipe before views (every pending write) was wrong."""
    snapshots = list(graph.get_state_history(config(thread)))
    assert len(snapshots) > 10
    wrong_before = 0
    for n, snapshot in enumerate(snapshots):
        checkpoint_id = snapshot.config["configurable"]["checkpoint_id"]
        document = dump(argv, thread, checkpoint_id)
        assert document["target_checkpoint_id"] == checkpoint_id
        assert document["is_head"] is (n == 0)
        assert values(graph, document, "history") == shown(snapshot.values), checkpoint_id
        wrong_before += values(graph, document, None) != shown(snapshot.values)
    return wrong_before


def applied(document: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [
        (ch, w["applied_in"]) for ch in CHANNELS for w in document["channels"][ch]["pending_writes"]
    ]


def run_and_check(argv: list[str], graph: Any, thread: str, run: Callable[..., Any]) -> None:
    run({"messages": [HumanMessage("what is up?", id="q1")]})
    run({"messages": [HumanMessage("refund me", id="q2")]})
    # search and lookup finished beside approve's interrupt: only the live view shows them
    document = assert_head_views(argv, graph, thread)
    assert sorted(applied(document)) == [("done", ["live"])] * 2 + [("messages", ["live"])] * 2
    run(Command(resume="yes", update={"messages": [HumanMessage("note", id="n1")]}))
    # the update is the step's input: both views apply it, at the head and once it is past
    document = assert_head_views(argv, graph, thread)
    assert ("messages", ["live", "history"]) in applied(document)
    assert values(graph, document, "live") != values(graph, document, "history")
    run(Command(resume="sure"))
    run({"messages": [HumanMessage("and now?", id="q3")]})
    assert_head_views(argv, graph, thread)
    # the thread ended as the graph says
    final = graph.get_state(config(thread)).values
    turns = [["search", "lookup"], ["search", "approve", "lookup"], ["lookup"]]
    assert final["done"] == [name for tools in turns for name in [*tools, "answer"]]
    assert [m.id for m in final["messages"]][-3:] == ["plan-q3", "tool-call-q3-lookup", "answer-3"]
    assert "n1" in [m.id for m in final["messages"]]
    wrong_before = assert_history_views(argv, graph, thread)
    # the recipe before views reduced every pending write: too many messages in the past
    assert wrong_before > 0


@contextmanager
def async_graph(store: Store) -> Iterator[tuple[Any, Callable[..., Any]]]:
    """A graph on the async saver, driven from this synchronous test through one loop."""
    loop = asyncio.new_event_loop()
    manager = graphkeep.aconnect(store.url, key_prefix=store.prefix)
    saver = loop.run_until_complete(manager.__aenter__())
    try:
        yield agent_graph(saver), loop.run_until_complete
    finally:
        loop.run_until_complete(manager.__aexit__(None, None, None))
        loop.close()


class _AsyncViews:
    """The graph's reads through its async API (``aget_state``, ``aget_state_history``)."""

    def __init__(self, graph: Any, run: Callable[..., Any]) -> None:
        self.graph, self.channels, self.run = graph, graph.channels, run

    def get_state(self, conf: Any) -> Any:
        return self.run(self.graph.aget_state(conf))

    def get_state_history(self, conf: Any) -> list[Any]:
        async def collect() -> list[Any]:
            return [s async for s in self.graph.aget_state_history(conf)]

        return list(self.run(collect()))


@pytest.fixture(params=BACKEND_PARAMS)
def store(request: pytest.FixtureRequest) -> Store:
    return Store(request.param, unique_prefix("view"))


def test_dump_pending_writes_reduce_to_the_live_head_and_every_history_checkpoint(
    store: Store,
) -> None:
    thread = "t-views"
    with store.saver() as saver:
        graph = agent_graph(saver)
        run_and_check(store.argv("dump"), graph, thread, lambda i: graph.invoke(i, config(thread)))


def test_dump_views_of_a_thread_written_through_the_async_saver(store: Store) -> None:
    thread = "t-views-async"
    with async_graph(store) as (graph, loop_run):
        views = _AsyncViews(graph, loop_run)
        run_and_check(
            store.argv("dump"), views, thread, lambda i: loop_run(graph.ainvoke(i, config(thread)))
        )


def test_dump_views_on_langgraph_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "views.db"
    thread = "t-views-sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = agent_graph(saver)
        run_and_check(
            ["dump", f"sqlite:///{db}"], graph, thread, lambda i: graph.invoke(i, config(thread))
        )
