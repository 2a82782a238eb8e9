"""graphkeep's own AG-UI translation (:mod:`graphkeep.agui.translate`, ``AGUIRuns(...,
translation="graphkeep")``)
holds exactly the events ``ag-ui-langgraph`` makes, on every backend: the same conversations
run through both (``translation="graphkeep"`` and ``translation="ag-ui-langgraph"``, each with
a saver and a log of its own, the same thread and run ids) leave the same events in the log,
keys in the same order — ids the graph makes at random (model runs, stored messages,
interrupts) compared by where they first appear. And a run the translation does not cover goes
through ``ag-ui-langgraph``, decided before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph

import graphkeep
from conformance.setups import ENABLED, Setup
from conformance.testing import marks_for
from graphkeep.agui import AGUIRuns, agent_input
from graphkeep.agui.translate import supported
from graphkeep.errors import InvalidInput
from tests.agui.graph import build_graph
from tests.agui.shapes import build_failing, build_shapes
from tests.conftest import unique_prefix

SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in ENABLED]
TOKEN_DELAY = 0.005
#: ids a run makes at random: LangChain's model run ids, uuids (stored messages without an
#: id, checkpoints), 32 hex digits (interrupt ids)
RANDOM_IDS = re.compile(
    r"lc_run--[0-9a-f-]{36}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\b[0-9a-f]{32}\b"
)


def placed(events: list[dict[str, Any]]) -> str:
    """``events`` as JSON (keys in order), each random id named by where it first appears."""
    seen: dict[str, str] = {}
    return RANDOM_IDS.sub(
        lambda m: seen.setdefault(m.group(0), f"<id {len(seen)}>"), json.dumps(events)
    )


@contextlib.asynccontextmanager
async def served(
    setup: Setup, build: Callable[[Any], Any], translation: str
) -> AsyncIterator[AGUIRuns]:
    prefix = unique_prefix("aguitr")
    async with graphkeep.aconnect(setup.url, key_prefix=prefix) as saver:
        async with graphkeep.aconnect_events(setup.url, key_prefix=prefix) as log:
            runs = AGUIRuns(build(saver), log, translation=translation)
            try:
                yield runs
            finally:
                await runs.aclose()


def body(thread: str, run: str, text: str | None = None, **fields: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": f"{run}-user", "role": "user", "content": text}]
    return {"threadId": thread, "runId": run, "messages": messages, **fields}


async def conversation(
    setup: Setup, build: Callable[[Any], Any], translation: str, turns: list[Any]
) -> list[dict[str, Any]]:
    """The log's events of ``turns`` (request bodies; a callable makes one from the events
    so far: a resume) run one after another on one thread."""
    stored: list[dict[str, Any]] = []
    async with served(setup, build, translation) as runs:
        for turn in turns:
            request = agent_input(turn(stored) if callable(turn) else turn)
            assert supported(runs.agent.clone(), request)  # translated when asked to
            await runs.start(request)
            await asyncio.gather(*runs.tasks)
            run = [e async for _, e in runs.events.read(request.run_id, follow=False)]
            assert run[-1]["type"] == "close"
            stored.extend(run[:-1])
    return stored


def resume(stored: list[dict[str, Any]]) -> dict[str, Any]:
    pending = stored[-1]["outcome"]["interrupts"][0]["id"]
    answer = [{"interruptId": pending, "status": "resolved", "payload": True}]
    return body("t", "r-resume", resume=answer)


#: a frontend tool the client offers (it lands in the state's ``tools``)
TOOL = {"name": "highlight", "description": "Highlight a city", "parameters": {}}
#: the first message, edited (same id, new text)
EDITED = "what is the weather in Lyon"

CONVERSATIONS = {
    # tests/agui/graph.py: a tool call streamed by the model, steps over agent -> tools ->
    # agent, an interrupt and its resume, a turn with input state and tools, and a turn
    # that edits the first message (ag-ui-langgraph's regenerate)
    "agent": (
        lambda saver: build_graph(saver, token_delay=TOKEN_DELAY),
        [
            body("t", "r-weather", "what is the weather in Paris"),
            body("t", "r-refund", "I want a refund"),
            resume,
            body("t", "r-talk", "tell me something", state={"approved": False}, tools=[TOOL]),
            {
                "threadId": "t",
                "runId": "r-edit",
                "messages": [{"id": "r-weather-user", "role": "user", "content": EDITED}],
            },
        ],
    ),
    # tests/agui/shapes.py: text then two tool calls streamed in pieces one after the other
    # (with token usage), tool results, two model calls in one node, a model call with
    # emit-messages off, a tool call made without a model by a node returning a Command,
    # manual message / state and a custom event from a node returning None, reasoning
    # content (signed, redacted); twice (the second turn's state differs)
    "shapes": (
        lambda saver: build_shapes(saver, delay=TOKEN_DELAY),
        [body("t", "r-one", "hello"), body("t", "r-two", "again")],
    ),
    # a node that fails after streaming: RUN_ERROR
    "failing": (build_failing, [body("t", "r-fail", "hello")]),
}


@pytest.mark.parametrize("shape", list(CONVERSATIONS))
@pytest.mark.parametrize("setup", SETUPS)
async def test_graphkeeps_translation_logs_exactly_the_events_ag_ui_langgraph_emits(
    setup: Setup, shape: str
) -> None:
    build, turns = CONVERSATIONS[shape]
    theirs = await conversation(setup, build, "ag-ui-langgraph", turns)
    ours = await conversation(setup, build, "graphkeep", turns)
    kinds = {e["type"] for e in ours}
    assert {"RUN_STARTED", "STEP_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"} <= kinds or (
        shape == "failing" and "RUN_ERROR" in kinds
    )
    assert placed(ours) == placed(theirs)
    if shape == "shapes":
        assert {"TOOL_CALL_ARGS", "TOOL_CALL_RESULT", "CUSTOM", "TEXT_MESSAGE_CONTENT"} <= kinds
        assert {"REASONING_MESSAGE_CONTENT", "REASONING_ENCRYPTED_VALUE"} <= kinds
        assert sum(e["type"] == "TOOL_CALL_ARGS" for e in ours) >= 12  # pieces, 2 turns
        assert any("usage" in e for e in ours if e["type"] == "RUN_FINISHED")
    if shape == "agent":
        assert any("outcome" in e for e in ours if e["type"] == "RUN_FINISHED")


def _with_subgraph(saver: Any) -> Any:
    inner = build_graph(None)
    builder = StateGraph(MessagesState)
    builder.add_node("inner", inner)
    builder.add_edge(START, "inner")
    builder.add_edge("inner", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("setup", SETUPS)
async def test_runs_the_translation_does_not_cover_go_through_ag_ui_langgraph(
    setup: Setup,
) -> None:
    # decided before the run: forwardedProps, subagent messages, a graph with subgraphs,
    # other agent options (another agent class: tests/test_agui.py's Recorded)
    ask = agent_input(body("t", "r", "hi"))
    async with served(setup, build_graph, "graphkeep") as plain:
        assert supported(plain.agent.clone(), ask)
        empty = agent_input(body("t", "r", "hi", forwardedProps={}))
        assert supported(plain.agent.clone(), empty)
        forwarded = agent_input(body("t", "r", "hi", forwardedProps={"node_name": "agent"}))
        assert not supported(plain.agent.clone(), forwarded)
        sub = {"id": "s", "role": "assistant", "content": "x", "subagentRunId": "lane"}
        lanes = agent_input({**body("t", "r", "hi"), "messages": [sub]})
        assert getattr(lanes.messages[0], "subagent_run_id", None) == "lane"
        assert not supported(plain.agent.clone(), lanes)
        raw = AGUIRuns(plain.graph, plain.events, emit_raw_events=True)
        assert not supported(raw.agent.clone(), ask)
        # the default is ag-ui-langgraph's: graphs invoked inside a node would lose their
        # streamed tokens through the translation (it cannot see them before the run)
        assert AGUIRuns(plain.graph, plain.events).translation == "ag-ui-langgraph"
        with pytest.raises(InvalidInput, match="translation must be"):
            AGUIRuns(plain.graph, plain.events, translation="fast")
    async with served(setup, _with_subgraph, "graphkeep") as nested:
        assert not supported(nested.agent.clone(), ask)
