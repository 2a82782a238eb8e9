"""``graphkeep.agui`` on every backend: an AG-UI run is kept in the event log before it is
served; rejoining after any event gives the rest exactly once (what was open re-sent first); a
page load gets the checkpoint's snapshot and joins the live run without a gap or a doubled
token; interrupts end a run with the protocol's interrupt outcome and a resume continues it;
bad input is refused before anything is written; oversized events still fit the log.

The official client (``@ag-ui/client``'s ``HttpAgent``) drives the same endpoint over HTTP in
tests/test_agui_client.py; here the runs are driven in-process (real stores) and over HTTP for
the status codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from typing import Any

import pytest
import uvicorn
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph

import graphkeep
from conformance.setups import ENABLED, Setup
from conformance.testing import marks_for
from graphkeep.agui import AGUIRuns, Conflict, agent_input
from graphkeep.agui.dump import plain_dump, pydantic_dump
from graphkeep.agui.runs import fit
from graphkeep.errors import EventsTrimmed, InvalidInput, UnknownRun
from graphkeep.events.port import MAX_EVENT_BYTES, Encoded, encode
from tests.agui.graph import StreamingFake, build_graph, create_app, reply_to, weather_reply
from tests.conftest import unique_prefix
from tests.scenarios.servers import free_port

SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in ENABLED]
TOKEN_DELAY = 0.01
#: the graph served as it is on every set-up, and through ``saver.exclusive`` (the thread's
#: lease per run) on one set-up per backend (the lease itself is the conformance matrix's
#: write_ownership on every row)
SERVED = pytest.mark.parametrize(
    ("setup", "wrapped"),
    [pytest.param(s, False, id=f"{s.name}-plain", marks=marks_for(s)) for s in ENABLED]
    + [
        pytest.param(s, True, id=f"{s.name}-exclusive", marks=marks_for(s))
        for s in ENABLED
        if s.name in ("redis", "mongodb", "dynamodb")
    ],
)


@contextlib.asynccontextmanager
async def served(
    setup: Setup,
    build: Callable[[Any], Any] | None = None,
    *,
    wrapped: bool = False,
    **log_options: Any,
) -> AsyncIterator[AGUIRuns]:
    """AGUIRuns over a saver and an event log of their own on ``setup``: the graph is
    ``build(saver)`` (default tests/agui/graph.py's; ``wrapped``: through
    ``saver.exclusive``), runs stopped on the way out."""
    prefix = unique_prefix("agui")
    async with graphkeep.aconnect(setup.url, key_prefix=prefix) as saver:
        async with graphkeep.aconnect_events(setup.url, key_prefix=prefix, **log_options) as log:
            graph = build(saver) if build else build_graph(saver, token_delay=TOKEN_DELAY)
            if wrapped:
                graph = saver.exclusive(graph)
            runs = AGUIRuns(graph, log)
            try:
                yield runs
            finally:
                await runs.aclose()


def request(thread: str, text: str | None = None, **fields: Any) -> Any:
    messages = [] if text is None else [{"id": uuid.uuid4().hex, "role": "user", "content": text}]
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages, **fields}
    return agent_input(body)


async def collect(items: AsyncIterator[Any], limit: int | None = None) -> list[Any]:
    out = []
    async for item in items:
        out.append(item)
        if limit is not None and len(out) >= limit:
            break
    return out


class Transcript:
    """What a client holds after applying AG-UI events (the protocol's rules, checked)."""

    def __init__(self) -> None:
        self.messages: dict[str, dict[str, Any]] = {}
        self.open: set[tuple[str, str]] = set()
        self.started = False
        self.outcome: dict[str, Any] | None = None

    def apply(self, events: list[dict[str, Any]]) -> Transcript:
        for event in events:
            kind = event["type"]
            if not self.started:
                assert kind == "RUN_STARTED", f"first event is {kind}"
                self.started = True
                continue
            assert kind != "RUN_STARTED", "RUN_STARTED twice in one stream"
            if kind == "MESSAGES_SNAPSHOT":
                self.messages = {
                    m["id"]: {"role": m["role"], "content": m.get("content") or ""}
                    for m in event["messages"]
                }
            elif kind == "TEXT_MESSAGE_START":
                assert ("text", event["messageId"]) not in self.open, event
                self.open.add(("text", event["messageId"]))
                self.messages.setdefault(event["messageId"], {"role": "assistant", "content": ""})
            elif kind == "TEXT_MESSAGE_CONTENT":
                assert ("text", event["messageId"]) in self.open, event
                self.messages[event["messageId"]]["content"] += event["delta"]
            elif kind == "TEXT_MESSAGE_END":
                self.open.remove(("text", event["messageId"]))
            elif kind == "TOOL_CALL_START":
                assert ("tool", event["toolCallId"]) not in self.open, event
                self.open.add(("tool", event["toolCallId"]))
            elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
                assert ("tool", event["toolCallId"]) in self.open, event
                if kind == "TOOL_CALL_END":
                    self.open.remove(("tool", event["toolCallId"]))
            elif kind == "TOOL_CALL_RESULT":
                self.messages[event["messageId"]] = {"role": "tool", "content": event["content"]}
            elif kind == "STEP_STARTED":
                self.open.add(("step", event["stepName"]))
            elif kind == "STEP_FINISHED":
                self.open.remove(("step", event["stepName"]))
            elif kind in ("RUN_FINISHED", "RUN_ERROR"):
                self.outcome = event
        return self

    def reconnect(self) -> None:
        """A new connection: the protocol's stream rules start over, the messages stay."""
        self.started = False
        self.open = set()

    def texts(self, role: str = "assistant") -> list[str]:
        return [m["content"] for m in self.messages.values() if m["role"] == role]


def events_of(items: list[Any]) -> list[dict[str, Any]]:
    """The events of served items (a page load's id-only items left out)."""
    return [event for _id, event in items if event is not None]


def last_id(items: list[Any]) -> str:
    """The last event id a client saw (id-only items move it too, as in SSE)."""
    return str([event_id for event_id, _ in items if event_id is not None][-1])


@SERVED
async def test_a_run_is_served_from_the_log_and_rejoining_after_any_event_gives_the_rest_once(
    setup: Setup, wrapped: bool
) -> None:
    async with served(setup, wrapped=wrapped) as runs:
        ask = request("t-weather", "what is the weather in Paris")
        await runs.start(ask)
        full = await collect(runs.serve("t-weather", ask.run_id))
        stored = [pair async for pair in runs.events.read(ask.run_id, follow=False)]
        assert [i for i, _ in full] == [i for i, _ in stored[:-1]]  # all but the close event
        assert stored[-1][1] == {"type": "close", "status": "success"}
        whole = Transcript().apply(events_of(full))
        forecast = "sunny and 15 degrees"
        assert whole.texts() == ["Let me look that up.", weather_reply("Paris", forecast)]
        assert whole.texts("tool") == [forecast]
        assert whole.outcome == {
            "type": "RUN_FINISHED",
            "threadId": "t-weather",
            "runId": ask.run_id,
        }
        # rejoin after every event: the replay re-opens what was open, the rest comes once
        for cut in range(len(full) - 1):
            after = full[cut][0]
            assert after is not None
            rejoined = await collect(runs.serve("t-weather", ask.run_id, after=after))
            replayed = [event for event_id, event in rejoined if event_id is None]
            rest = [pair for pair in rejoined if pair[0] is not None]
            assert rest == full[cut + 1 :], cut
            client = Transcript().apply(events_of(full[: cut + 1]))
            client.reconnect()
            client.apply(replayed + events_of(rest))
            assert client.messages == whole.messages, cut
            assert client.outcome == whole.outcome


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_connection_cut_mid_run_is_resumed_while_the_run_goes_on(setup: Setup) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    gate = asyncio.Event()  # the run streams 20 words, then waits until the client is gone
    build = partial(talk_graph, text=words, delay=0.01, gate=gate, gate_after=20)
    async with served(setup, build) as runs:
        ask = request("t-cut", "tell me something long please")
        await runs.start(ask)
        first = await collect(runs.serve("t-cut", ask.run_id), limit=8)  # then the client is gone
        client = Transcript().apply(events_of(first))
        assert runs.tasks, "the run goes on without its connection"
        gate.set()
        rest = await collect(runs.serve("t-cut", ask.run_id, after=first[-1][0]))
        client.reconnect()
        client.apply(events_of(rest))
        assert client.texts() == [words]
        assert client.outcome is not None and client.outcome["type"] == "RUN_FINISHED"


@SERVED
async def test_a_page_load_gets_the_snapshot_then_joins_the_live_run_without_a_gap(
    setup: Setup, wrapped: bool
) -> None:
    # the reply waits at its 8th word until the page has loaded: the page loads mid-run
    # however slow the machine (a loaded CI once finished the run before the page load)
    gate = asyncio.Event()
    build = partial(build_graph, token_delay=TOKEN_DELAY, gate=gate, gate_after=8)
    async with served(setup, build, wrapped=wrapped) as runs:
        first = request("t-page", "what is the weather in Paris")
        await runs.start(first)
        await collect(runs.serve("t-page", first.run_id))
        second = request("t-page", "and now a long answer please")
        await runs.start(second)
        # wait until the reply streams, then load the page
        seen = await collect(runs.serve("t-page", second.run_id), limit=6)
        assert any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events_of(seen))
        # a page that loads and loses its connection at once rejoins after the last id it
        # saw, ids of events the load left out included: nothing comes twice
        page: list[Any] = []

        async def load_page() -> None:
            async for item in runs.connect("t-page", uuid.uuid4().hex):
                page.append(item)
                if len(page) == 3:  # the snapshot is in: let the run go on
                    gate.set()

        loading = asyncio.create_task(load_page())
        try:
            early = await collect(runs.connect("t-page", uuid.uuid4().hex), limit=6)
            await loading
        finally:
            gate.set()
            loading.cancel()
        assert [e["type"] for e in events_of(page)[:3]] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
        ]
        assert events_of(page)[0]["runId"] == second.run_id
        view = Transcript().apply(events_of(page))
        again = Transcript().apply(events_of(early))
        again.reconnect()
        again.apply(events_of(await collect(runs.serve("t-page", second.run_id, last_id(early)))))
        assert again.messages == view.messages
        state = await runs.graph.aget_state({"configurable": {"thread_id": "t-page"}})
        expected = {m.id: m.text for m in state.values["messages"]}
        assert {k: v["content"] for k, v in view.messages.items()} == expected
        assert view.texts()[-1] == reply_to("and now a long answer please")
        # a page load on the thread at rest: the snapshot as a finished run
        idle = await collect(runs.connect("t-page", "load-2"))
        assert [e["type"] for e in events_of(idle)] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert all(event_id is None for event_id, _ in idle)
        assert "outcome" not in events_of(idle)[-1]


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_page_load_after_a_tool_answered_shows_its_result_once(setup: Setup) -> None:
    # ToolNode's own tool messages: no id until the reducer gives them a random one
    plain = partial(build_graph, token_delay=0.03, tool_message_ids=False)
    async with served(setup, plain) as runs:
        ask = request("t-tool", "what is the weather in Paris")
        await runs.start(ask)
        async for _id, event in runs.serve("t-tool", ask.run_id):
            if event and event["type"] == "TEXT_MESSAGE_CONTENT" and "weather" in event["delta"]:
                break  # the final reply streams: the tool has answered
        loaded = events_of(await collect(runs.connect("t-tool", "load")))
    # the snapshot holds the tool's answer: its TOOL_CALL_RESULT (under another message id)
    # is not sent again, which would show it twice until the run's closing snapshot
    assert [e for e in loaded if e["type"] == "TOOL_CALL_RESULT"] == []
    page = Transcript().apply(loaded)
    assert page.texts("tool") == ["sunny and 15 degrees"]
    assert page.texts()[-1] == weather_reply("Paris", "sunny and 15 degrees")


@SERVED
async def test_an_interrupt_ends_the_run_with_its_outcome_and_a_resume_continues_it(
    setup: Setup, wrapped: bool
) -> None:
    async with served(setup, wrapped=wrapped) as runs:
        ask = request("t-refund", "I want a refund")
        await runs.start(ask)
        events = events_of(await collect(runs.serve("t-refund", ask.run_id)))
        outcome = events[-1]["outcome"]
        assert outcome["type"] == "interrupt"
        (pending,) = outcome["interrupts"]
        assert pending["metadata"]["langgraph"]["raw"]["question"] == "Approve the refund?"
        state = await runs.events.state(ask.run_id)
        assert state is not None and state.closed == "interrupted"
        # a page load sees the same pending interrupt
        idle = events_of(await collect(runs.connect("t-refund", "load")))
        assert idle[-1]["outcome"]["interrupts"][0]["id"] == pending["id"]
        with pytest.raises(Conflict, match="waits for interrupt"):
            await runs.start(request("t-refund", "hello again"))
        wrong = [{"interruptId": "nope", "status": "resolved", "payload": True}]
        with pytest.raises(Conflict, match="does not wait for interrupt"):
            await runs.start(request("t-refund", resume=wrong))
        answer = [{"interruptId": pending["id"], "status": "resolved", "payload": True}]
        resumed = request("t-refund", resume=answer)
        await runs.start(resumed)
        after = Transcript().apply(events_of(await collect(runs.serve("t-refund", resumed.run_id))))
        assert after.texts()[-1] == reply_to("", True)
        assert after.outcome is not None and "outcome" not in after.outcome


class Recorded:
    """The endpoint's agent, recording every event ``ag-ui-langgraph`` yields, as pydantic
    dumps it (``model_dump(mode="json", by_alias=True, exclude_none=True)``: what the
    endpoint wrote before it read the plain events field by field)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.emitted: list[dict[str, Any]] = []
        self.fields: Counter[str] = Counter()

    def clone(self) -> Recorded:
        return self

    async def run(self, request: Any) -> AsyncIterator[Any]:
        async for event in self.agent.clone().run(request):
            self.emitted.append(pydantic_dump(event))
            if plain_dump(event) is not None:
                self.fields[self.emitted[-1]["type"]] += 1
            yield event


@pytest.mark.parametrize("setup", SETUPS)
async def test_the_log_holds_exactly_the_events_ag_ui_langgraph_emits(setup: Setup) -> None:
    # a tool call, streamed messages, state and message snapshots, steps, an interrupt and
    # its resume: every event in the log is what ag-ui-langgraph yielded, dumped by pydantic
    # (fails when dump() reads a field otherwise: an enum not written as its value, an
    # empty field kept, an extra field or a nested model lost)
    async with served(setup) as runs:
        recorded = Recorded(runs.agent)
        runs.agent = recorded
        asks = [
            request("t-same", "what is the weather in Paris"),
            request("t-same", "tell me something"),
            request("t-same", "I want a refund"),
        ]
        stored: list[dict[str, Any]] = []
        for ask in [*asks, None]:
            if ask is None:  # the refund's interrupt, answered
                pending = stored[-1]["outcome"]["interrupts"][0]["id"]
                answer = [{"interruptId": pending, "status": "resolved", "payload": True}]
                ask = request("t-same", resume=answer)
            await runs.start(ask)
            await asyncio.gather(*runs.tasks)
            run = [e async for _, e in runs.events.read(ask.run_id, follow=False)]
            assert run[-1]["type"] == "close"
            stored.extend(run[:-1])
        emitted = recorded.emitted
        kinds = {e["type"] for e in emitted}
        assert {"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"} <= kinds
        assert {"TEXT_MESSAGE_CONTENT", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"} <= kinds
        assert any("outcome" in e for e in emitted if e["type"] == "RUN_FINISHED")
        # RUN_STARTED is the endpoint's own, written before the worker starts
        started = [e for e in emitted if e["type"] == "RUN_STARTED"]
        assert [e for e in stored if e["type"] == "RUN_STARTED"] == [
            {"type": "RUN_STARTED", "threadId": e["threadId"], "runId": e["runId"]} for e in started
        ]
        stored = [e for e in stored if e["type"] != "RUN_STARTED"]
        emitted = [e for e in emitted if e["type"] != "RUN_STARTED"]
        assert stored == emitted
        assert [json.dumps(e) for e in stored] == [json.dumps(e) for e in emitted]  # key order
        # the hot kinds were read field by field, the snapshots through pydantic
        assert recorded.fields["TEXT_MESSAGE_CONTENT"] > 10
        assert recorded.fields["TOOL_CALL_ARGS"] >= 1
        assert "STATE_SNAPSHOT" not in recorded.fields


def test_the_schema_keys_of_a_compiled_graph_are_ag_ui_langgraphs() -> None:
    from ag_ui_langgraph import LangGraphAgent

    from graphkeep.agui.agent import Agent

    graph = build_graph(None)
    config = {"configurable": {"thread_id": "t"}}
    expected = LangGraphAgent(name="a", graph=graph).get_schema_keys(config)
    agent = Agent(name="a", graph=graph)
    first = agent.get_schema_keys(config)
    first["input"].append("changed by a caller")
    assert agent.clone().get_schema_keys(config) == expected == first | {"input": expected["input"]}


@pytest.mark.parametrize("setup", SETUPS)
async def test_bad_input_and_unknown_runs_are_refused_before_anything_is_written(
    setup: Setup,
) -> None:
    with pytest.raises(InvalidInput, match="runId"):
        agent_input({"threadId": "t", "messages": []})
    with pytest.raises(InvalidInput, match="threadId"):
        agent_input({"threadId": "a\x00b", "runId": "r", "messages": []})
    async with served(setup) as runs:
        with pytest.raises(UnknownRun):
            await collect(runs.serve("t-x", "never-started"))
        with pytest.raises(UnknownRun, match="no checkpoint"):
            answer = [{"interruptId": "i", "status": "resolved", "payload": 1}]
            await runs.start(request("t-empty", resume=answer))
        assert await runs.events.state("t-empty") is None
        ask = request("t-busy", "a long answer please")
        await runs.start(ask)
        with pytest.raises(Conflict, match="is running"):
            await runs.start(request("t-busy", "me too"))
        assert runs.locks == {}  # a thread's start lock lives only while a start needs it
        # another thread cannot read the run, even naming its id
        with pytest.raises(UnknownRun):
            await collect(runs.serve("t-other", ask.run_id))
        await collect(runs.serve("t-busy", ask.run_id))


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_resume_point_the_log_no_longer_keeps_is_an_error_never_a_gap(
    setup: Setup,
) -> None:
    words = " ".join(f"w{i}" for i in range(400))  # Redis trims whole stream nodes (~100)
    async with served(setup, partial(talk_graph, text=words), max_events=20) as runs:
        ask = request("t-trim", "hi")
        await runs.start(ask)  # RUN_STARTED is stored; the worker has not run yet
        read = runs.events.read(ask.run_id, follow=False)
        ((first_id, started),) = await collect(read, limit=1)
        assert started["type"] == "RUN_STARTED"
        while runs.tasks:
            await asyncio.sleep(0.05)
        with pytest.raises(EventsTrimmed):
            await collect(runs.serve("t-trim", ask.run_id, after=first_id))
        with pytest.raises(EventsTrimmed):  # from the start: RUN_STARTED is gone too
            await collect(runs.serve("t-trim", ask.run_id))


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_page_load_joins_a_live_run_whose_first_events_were_trimmed(setup: Setup) -> None:
    # 20 tokens a second, 20 kept: a token stays readable for about a second (a follower
    # polling the log, on a loaded machine too, keeps up)
    words = " ".join(f"w{i}" for i in range(100))
    slow = partial(talk_graph, text=words, delay=0.05)
    async with served(setup, slow, max_events=20) as runs:
        ask = request("t-long", "hi")
        await runs.start(ask)
        while True:  # wait until the run's start is dropped by retention
            state = await runs.events.state(ask.run_id)
            if state is not None and state.trimmed_through is not None:
                break
            await asyncio.sleep(0.05)
        assert runs.tasks, "the run is still live"
        read_checkpoint = runs.graph.aget_state

        async def slow_read(*args: Any, **kwargs: Any) -> Any:
            # a checkpoint read slower than retention keeps the run's events (1.5 s: ~30
            # tokens, max_events=20): what the join reads of the log meanwhile is not dropped
            await asyncio.sleep(1.5)
            return await read_checkpoint(*args, **kwargs)

        runs.graph.aget_state = slow_read
        page = await collect(runs.connect("t-long", "load"))
    view = Transcript().apply(events_of(page))  # the protocol's rules hold
    assert events_of(page)[0]["runId"] == ask.run_id
    assert view.texts() == [words]
    assert view.outcome is not None and view.outcome["type"] == "RUN_FINISHED"


@SERVED
async def test_a_stopped_server_ends_its_runs_with_run_error(setup: Setup, wrapped: bool) -> None:
    async with served(setup, wrapped=wrapped) as runs:
        ask = request("t-stop", "a long answer please")
        await runs.start(ask)
        await collect(runs.serve("t-stop", ask.run_id), limit=5)
        await runs.aclose()
        events = events_of(await collect(runs.serve("t-stop", ask.run_id)))
        assert events[-1]["type"] == "RUN_ERROR"
        assert "stopped" in events[-1]["message"]
        state = await runs.events.state(ask.run_id)
        assert state is not None and state.closed == "error"
        if wrapped:  # the stopped run let the thread's lease go
            async with runs.graph.saver.lock("t-stop", blocking=False):
                pass


def talk_graph(
    checkpointer: Any,
    text: str,
    delay: float = 0,
    gate: asyncio.Event | None = None,
    gate_after: int = 0,
) -> Any:
    """One node streaming ``text`` word by word (a word with no space: one delta); with a
    ``gate``, word number ``gate_after`` waits until it is set."""

    async def talk(state: MessagesState) -> dict[str, Any]:
        model = StreamingFake(
            messages=iter([AIMessage(content=text)]),
            token_delay=delay,
            gate=gate,
            gate_after=gate_after,
        )
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("talk", talk)
    builder.add_edge(START, "talk")
    builder.add_edge("talk", END)
    return builder.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("setup", SETUPS)
async def test_events_over_the_log_limit_are_cut_or_replaced_and_the_run_ends(
    setup: Setup,
) -> None:
    text = "é" * (MAX_EVENT_BYTES // 2 + 1000)  # > the limit as UTF-8
    async with served(setup, partial(talk_graph, text=text)) as runs:
        ask = request("t-big", "hi")
        await runs.start(ask)
        events = events_of(await collect(runs.serve("t-big", ask.run_id)))
    deltas = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) > 1 and "".join(deltas) == text
    assert events[-1]["type"] == "RUN_FINISHED"
    omitted = [e for e in events if e["type"] == "CUSTOM"]
    assert omitted and all(e["name"] == "graphkeep:event_omitted" for e in omitted)


def decoded(parts: list[Encoded]) -> list[dict[str, Any]]:
    return [json.loads(part.data) for part in parts]


def test_fit_keeps_small_events_and_strips_messages_from_a_large_state_snapshot() -> None:
    small = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"}
    assert decoded(fit(small)) == [small]
    snapshot = {
        "type": "STATE_SNAPSHOT",
        "snapshot": {"messages": ["x" * MAX_EVENT_BYTES], "step": 3},
    }
    assert decoded(fit(snapshot)) == [{"type": "STATE_SNAPSHOT", "snapshot": {"step": 3}}]
    args = {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "\n" * MAX_EVENT_BYTES}
    pieces = fit(args)
    assert "".join(p["delta"] for p in decoded(pieces)) == args["delta"]
    assert all(len(p.data) <= MAX_EVENT_BYTES for p in pieces)


class Counted(dict[str, Any]):
    """An event that counts how often it is walked: encoding one (its keys checked, then
    ``json.dumps``) asks for its items twice."""

    walks = 0

    def items(self) -> Any:
        Counted.walks += 1
        return super().items()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("setup", SETUPS)
async def test_an_event_fitted_to_the_log_is_encoded_once_on_its_way_in(
    setup: Setup, mode: str
) -> None:
    # fails when fit sizes one encoding and the append makes another (3 walks, not 2)
    Counted.walks = 0
    encode(Counted(type="TEXT_MESSAGE_CONTENT", messageId="m", delta="hi"))
    once = Counted.walks
    assert once == 2
    event = Counted(type="TEXT_MESSAGE_CONTENT", messageId="m", delta="héllo")
    run = f"enc-{uuid.uuid4().hex}"
    prefix = unique_prefix("agui-enc")
    Counted.walks = 0
    if mode == "sync":
        with graphkeep.connect_events(setup.url, key_prefix=prefix) as log:
            log.append_many(run, fit(event))
            stored = [e for _, e in log.read(run, follow=False)]
            log.delete(run)
    else:
        async with graphkeep.aconnect_events(setup.url, key_prefix=prefix) as alog:
            await alog.append_many(run, fit(event))
            stored = [e async for _, e in alog.read(run, follow=False)]
            await alog.delete(run)
    assert Counted.walks == once
    assert stored == [dict(event)]


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_pre_encoded_event_over_the_limit_is_refused_before_anything_is_written(
    setup: Setup,
) -> None:
    prefix = unique_prefix("agui-enc")
    run = f"enc-{uuid.uuid4().hex}"
    async with graphkeep.aconnect_events(setup.url, key_prefix=prefix) as log:
        big = encode({"type": "CUSTOM", "value": "x" * MAX_EVENT_BYTES})
        with pytest.raises(InvalidInput, match="limit"):
            await log.append_many(run, [encode({"type": "ok"}), big])
        with pytest.raises(InvalidInput, match="must be a dict"):
            await log.append_many(run, [Encoded("not bytes")])  # type: ignore[arg-type]
        assert await log.state(run) is None


# -- over HTTP ------------------------------------------------------------------------


@contextlib.contextmanager
def http_server(setup: Setup, on_busy: str | None = None) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(
        create_app(setup.url, key_prefix=unique_prefix("agui"), on_busy=on_busy),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/agent"
    finally:
        server.should_exit = True
        thread.join(30)


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def sse(text: str) -> list[tuple[str | None, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        ids = [line[4:] for line in lines if line.startswith("id: ")]
        data = [line[6:] for line in lines if line.startswith("data: ")]
        if data:
            out.append((ids[0] if ids else None, json.loads("\n".join(data))))
    return out


@SERVED
def test_over_http_events_carry_their_log_ids_and_errors_are_statuses(
    setup: Setup, wrapped: bool
) -> None:
    with http_server(setup, "wait" if wrapped else None) as url:
        run = {
            "threadId": "h1",
            "runId": "run-1",
            "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        }
        status, body = post(url, run)
        assert status == 200
        events = sse(body)
        assert events[0][1]["type"] == "RUN_STARTED" and events[-1][1]["type"] == "RUN_FINISHED"
        assert all(event_id is not None for event_id, _ in events)
        # the same request again (a retry) joins the run instead of starting another
        assert sse(post(url, run)[1]) == events
        status, body = post(url, run, {"Last-Event-ID": events[3][0] or ""})
        assert status == 200 and [p for p in sse(body) if p[0] is not None] == events[4:]
        assert post(url, b"not json")[0] == 422
        status, body = post(url, {"threadId": "h1"})
        assert status == 422 and "runId" in json.loads(body)["detail"]
        missing = {**run, "runId": "nope"}
        assert post(url, missing, {"Last-Event-ID": events[1][0] or ""})[0] == 404
        assert post(url, {**run, "threadId": "h2"}, {"Last-Event-ID": events[1][0] or ""})[0] == 404
        refund = {
            **run,
            "runId": "run-2",
            "messages": [{"id": "u2", "role": "user", "content": "a refund"}],
        }
        post(url, refund)
        assert post(url, {**refund, "runId": "run-3"})[0] == 409
        status, body = post(f"{url}/connect", {"threadId": "h1", "runId": "c", "messages": []})
        assert status == 200
        assert [e["type"] for _, e in sse(body)][-1] == "RUN_FINISHED"
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert json.loads(response.read()) == {"ok": True}
