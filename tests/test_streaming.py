"""``graphkeep.events.streaming.stream_run`` on every backend's event log: every chunk stored once,
in order, batched, the run closed with its outcome, heartbeats while the graph is quiet."""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import graphkeep
from conformance.setups import ENABLED, Setup
from conformance.testing import marks_for
from graphkeep.errors import InvalidInput
from graphkeep.events.streaming import jsonable, stream_run
from tests.conftest import unique_prefix

ANSWER = " ".join(f"word{i}" for i in range(40))
SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in ENABLED]


@asynccontextmanager
async def event_log(setup: Setup, **options: Any) -> AsyncIterator[Any]:
    async with graphkeep.aconnect_events(
        setup.url, key_prefix=unique_prefix("stream"), **options
    ) as log:
        yield log


def chat_graph() -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))

    async def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder.compile(checkpointer=InMemorySaver())


async def stored(log: Any, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [pair async for pair in log.read(run_id, follow=False)]


@pytest.mark.parametrize("setup", SETUPS)
async def test_every_token_chunk_is_stored_once_in_order_and_the_run_closes_success(
    setup: Setup,
) -> None:
    async with event_log(setup) as log:
        config = {"configurable": {"thread_id": "t1"}}
        run = stream_run(
            chat_graph(),
            {"messages": [HumanMessage("hi")]},
            config,
            log,
            run_id=f"run-{uuid.uuid4().hex}",
            stream_mode=["messages", "updates"],
        )
        chunks = [chunk async for chunk in run]
        events = await stored(log, run.run_id)
    tokens = [c[1][0].content for c in chunks if c[0] == "messages"]
    assert "".join(tokens) == ANSWER
    body, (_, close) = events[:-1], events[-1]
    assert close == {"type": "close", "status": "success"}
    assert len(body) == len(chunks)
    assert [e["mode"] for _, e in body] == [c[0] for c in chunks]
    assert "".join(e["data"][0]["content"] for _, e in body if e["mode"] == "messages") == ANSWER
    ids = [i for i, _ in events]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("setup", SETUPS[:1])
async def test_chunks_arriving_together_are_appended_in_few_requests(setup: Setup) -> None:
    async with event_log(setup) as log:
        calls: list[int] = []
        original = log.append_many

        async def counting(run_id: str, events: Any) -> list[str]:
            events = list(events)
            calls.append(len(events))
            return await original(run_id, events)

        log.append_many = counting  # type: ignore[method-assign]
        run = stream_run(
            chat_graph(),
            {"messages": [HumanMessage("hi")]},
            {"configurable": {"thread_id": "t"}},
            log,
            stream_mode="messages",
        )
        chunks = [c async for c in run]
        log.append_many = original  # type: ignore[method-assign]
        events = await stored(log, run.run_id)
    assert sum(calls) == len(chunks) == len(events) - 1
    assert len(calls) < len(chunks) / 4, calls  # the fake model streams without pausing


@pytest.mark.parametrize("setup", SETUPS[:1])
async def test_a_steady_stream_costs_one_append_per_window_not_one_per_round_trip(
    setup: Setup,
) -> None:
    """Chunks arriving while a window's append is in flight wait for the next window: a graph
    streaming a chunk every millisecond or so (as a chat model does) into a sync log (its
    appends run in a worker thread) costs at most one ``append_many`` per ``flush_ms``, not
    one per append round trip."""

    async def speak(state: dict[str, Any]) -> dict[str, Any]:
        from langgraph.config import get_stream_writer

        write = get_stream_writer()
        for i in range(200):
            write({"i": i})
            await asyncio.sleep(0.001)
        return {"n": [1]}

    builder = StateGraph(TypedDict("S", {"n": Annotated[list[int], operator.add]}))  # type: ignore[operator]
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    with graphkeep.connect_events(setup.url, key_prefix=unique_prefix("window")) as log:
        calls: list[int] = []
        original = log.append_many

        def counting(run_id: str, events: Any) -> list[str]:
            events = list(events)
            calls.append(len(events))
            return original(run_id, events)

        log.append_many = counting  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        started = loop.time()
        run = stream_run(builder.compile(), {"n": []}, None, log, stream_mode="custom")
        chunks = [c async for c in run]
        elapsed = loop.time() - started
        log.append_many = original  # type: ignore[method-assign]
        events = [e for _, e in log.read(run.run_id, follow=False)]
    assert [e["data"]["i"] for e in events[:-1]] == list(range(200)) and len(chunks) == 200
    assert sum(calls) == 200
    # every append but the final flush's follows a full 20 ms window
    assert len(calls) <= elapsed / 0.020 + 1, (len(calls), elapsed, calls)


def approval_graph() -> Any:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": interrupt({"question": "approve?"})}

    builder = StateGraph(TypedDict("S", {"answer": str}))  # type: ignore[operator]
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("setup", SETUPS)
async def test_an_interrupt_closes_the_run_interrupted_and_resuming_is_a_new_run(
    setup: Setup,
) -> None:
    graph, config = approval_graph(), {"configurable": {"thread_id": "t"}}
    async with event_log(setup) as log:
        first = stream_run(graph, {"answer": ""}, config, log, run_id="r1")
        chunks = [c async for c in first]
        assert any("__interrupt__" in c for c in chunks)
        second = stream_run(graph, Command(resume="yes"), config, log, run_id="r2")
        [c async for c in second]
        first_events, second_events = await stored(log, "r1"), await stored(log, "r2")
    assert first_events[-1][1] == {"type": "close", "status": "interrupted"}
    interrupt_event = first_events[0][1]["data"]["__interrupt__"][0]
    assert interrupt_event["value"] == {"question": "approve?"}
    assert second_events[-1][1] == {"type": "close", "status": "success"}
    assert second_events[0][1]["data"] == {"ask": {"answer": "yes"}}


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("setup", SETUPS)
async def test_an_exception_closes_the_run_error_and_is_re_raised(setup: Setup) -> None:
    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": [1]}

    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise Boom("the tool broke")

    builder = StateGraph(TypedDict("S", {"n": Annotated[list[int], operator.add]}))  # type: ignore[operator]
    builder.add_node("first", first)
    builder.add_node("fail", fail)
    builder.add_edge(START, "first")
    builder.add_edge("first", "fail")
    async with event_log(setup) as log:
        run = stream_run(builder.compile(), {"n": []}, None, log, run_id="boom")
        seen = []
        with pytest.raises(Boom):
            async for chunk in run:
                seen.append(chunk)
        events = await stored(log, "boom")
    assert [e for _, e in events[:-1]] == [{"mode": "updates", "data": {"first": {"n": [1]}}}]
    assert events[-1][1] == {
        "type": "close",
        "status": "error",
        "error": "Boom: the tool broke",
    }
    assert len(seen) == 1


@pytest.mark.parametrize("setup", SETUPS[:1])
async def test_a_caller_that_stops_early_still_closes_the_run(setup: Setup) -> None:
    async with event_log(setup) as log:
        run = stream_run(
            chat_graph(),
            {"messages": [HumanMessage("hi")]},
            {"configurable": {"thread_id": "t"}},
            log,
            stream_mode="messages",
            run_id="early",
        )
        iterator = aiter(run)
        await anext(iterator)
        await iterator.aclose()  # type: ignore[attr-defined]
        events = await stored(log, "early")
    assert events[-1][1]["status"] == "error"
    assert "closed before" in events[-1][1]["error"]


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_quiet_graph_heart_beats_so_followers_do_not_call_it_stale(setup: Setup) -> None:
    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(2.5)
        return {"n": [1]}

    builder = StateGraph(TypedDict("S", {"n": Annotated[list[int], operator.add]}))  # type: ignore[operator]
    builder.add_node("slow", slow)
    builder.add_edge(START, "slow")
    async with event_log(setup, stale_after=1.0, poll_interval=0.05) as log:
        await log.heartbeat("quiet")  # the run exists before its first chunk
        run = stream_run(builder.compile(), {"n": []}, None, log, run_id="quiet")

        async def follow() -> list[dict[str, Any]]:
            return [event async for _, event in log.read("quiet")]

        follower = asyncio.create_task(follow())
        [c async for c in run]
        events = await asyncio.wait_for(follower, 30)
    assert events[-1] == {"type": "close", "status": "success"}


async def test_stream_run_refuses_a_bad_run_id_before_running() -> None:
    with pytest.raises(InvalidInput):
        stream_run(approval_graph(), {}, None, object(), run_id="")


def test_jsonable_turns_langgraph_and_langchain_values_into_plain_json() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        tags: set[str]

    value = {
        "msg": AIMessageChunk(content="hi", id="m1"),
        "point": Point(1, {"a"}),
        "when": datetime(2026, 1, 2, tzinfo=timezone.utc),
        "nan": float("nan"),
        "raw": b"\x00\x01",
        "tuple": (1, "two"),
        3: "int key",
        "other": object,
    }
    out = jsonable(value)
    assert out["msg"]["content"] == "hi" and out["msg"]["type"] == "AIMessageChunk"
    assert out["point"] == {"x": 1, "tags": ["a"]}
    assert out["when"] == "2026-01-02T00:00:00+00:00"
    assert out["nan"] == "nan"
    assert out["raw"] == "AAE="
    assert out["tuple"] == [1, "two"]
    assert out["3"] == "int key"
    assert out["other"] == repr(object)


@pytest.mark.parametrize("setup", SETUPS)
async def test_the_last_chunks_are_never_lost_when_the_graph_ends_mid_flush(setup: Setup) -> None:
    """A run ending while a window's append is in flight (a sync log appends in a worker
    thread) still stores every chunk once, in order, before its close event."""

    async def speak(state: dict[str, Any]) -> dict[str, Any]:
        from langgraph.config import get_stream_writer

        write = get_stream_writer()
        for i in range(30):
            write({"i": i})
            if i % 7 == 6:
                await asyncio.sleep(0.019)  # ends windows just as they flush
        return {"n": [1]}

    builder = StateGraph(TypedDict("S", {"n": Annotated[list[int], operator.add]}))  # type: ignore[operator]
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    graph = builder.compile()
    with graphkeep.connect_events(setup.url, key_prefix=unique_prefix("flush")) as log:
        for attempt in range(5):
            run = f"r{attempt}"
            [
                c
                async for c in stream_run(
                    graph, {"n": []}, None, log, stream_mode="custom", run_id=run
                )
            ]
            events = [e for _, e in log.read(run, follow=False)]
            assert [e["data"]["i"] for e in events[:-1]] == list(range(30)), attempt
            assert events[-1] == {"type": "close", "status": "success"}
