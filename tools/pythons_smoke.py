"""Every product through a real LangGraph graph, sync and async, on each backend's server: the
smoke run tools/pythons.py gives each supported Python besides the main one.

Run by pytest with graphkeep's plugin (``--graphkeep-servers=env``: the servers of
``.services/env``); each test gets a private URL from ``graphkeep_url``, once per backend.
"""

from __future__ import annotations

import operator
import sys
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import CachePolicy, Command, interrupt

import graphkeep
from graphkeep.errors import EffectKeyRequired
from graphkeep.streaming import jsonable, stream_run


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def _linear(*nodes: tuple[str, Any, dict[str, Any]]) -> StateGraph[Any]:
    """START -> each node in turn -> END, over a ``Log`` state."""
    builder: StateGraph[Any] = StateGraph(Log)
    previous = START
    for name, node, options in nodes:
        builder.add_node(name, node, **options)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def _approval(state: Log) -> dict[str, list[str]]:
    return {"log": ["asked", str(interrupt("approve?"))]}


def _thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


# -- checkpoint saver -----------------------------------------------------------------------


def test_saver_keeps_a_thread_across_an_interrupt(graphkeep_url: str) -> None:
    with graphkeep.connect(graphkeep_url) as saver:
        graph = _linear(("ask", _approval, {})).compile(checkpointer=saver)
        config = _thread()
        graph.invoke({"log": ["start"]}, config)
        assert graph.get_state(config).next == ("ask",)
        assert graph.invoke(Command(resume="yes"), config) == {"log": ["start", "asked", "yes"]}
        assert len(list(graph.get_state_history(config))) >= 3
        saver.delete_thread(config["configurable"]["thread_id"])
        assert saver.get_tuple(config) is None


async def test_async_saver_keeps_a_thread_across_an_interrupt(graphkeep_url: str) -> None:
    async def ask(state: Log) -> dict[str, list[str]]:
        return {"log": ["asked"]}

    async with graphkeep.aconnect(graphkeep_url) as saver:
        # interrupt_before: LangGraph's interrupt() needs 3.11 in async nodes (no task context)
        builder = _linear(("ask", ask, {}))
        graph = builder.compile(checkpointer=saver, interrupt_before=["ask"])
        config = _thread()
        await graph.ainvoke({"log": ["start"]}, config)
        assert (await graph.aget_state(config)).next == ("ask",)
        await graph.aupdate_state(config, {"log": ["approved"]})
        assert await graph.ainvoke(None, config) == {"log": ["start", "approved", "asked"]}
        assert len([s async for s in graph.aget_state_history(config)]) >= 4
        await saver.adelete_thread(config["configurable"]["thread_id"])
        assert await saver.aget_tuple(config) is None


# -- store ----------------------------------------------------------------------------------


def _remember(state: Log, runtime: Runtime[Any]) -> dict[str, list[str]]:
    assert runtime.store is not None
    runtime.store.put(("memories", "ada"), state["log"][0], {"text": state["log"][0]})
    found = runtime.store.search(("memories",), filter={"text": state["log"][0]})
    return {"log": [item.key for item in found]}


async def _aremember(state: Log, runtime: Runtime[Any]) -> dict[str, list[str]]:
    assert runtime.store is not None
    await runtime.store.aput(("memories", "ada"), state["log"][0], {"text": state["log"][0]})
    found = await runtime.store.asearch(("memories",), filter={"text": state["log"][0]})
    return {"log": [item.key for item in found]}


def test_store_serves_a_graph_node(graphkeep_url: str) -> None:
    with graphkeep.connect_store(graphkeep_url) as store:
        graph = _linear(("remember", _remember, {})).compile(store=store)
        assert graph.invoke({"log": ["tea"]}) == {"log": ["tea", "tea"]}
        item = store.get(("memories", "ada"), "tea")
        assert item is not None and item.value == {"text": "tea"}


async def test_async_store_serves_a_graph_node(graphkeep_url: str) -> None:
    async with graphkeep.aconnect_store(graphkeep_url) as store:
        graph = _linear(("remember", _aremember, {})).compile(store=store)
        assert await graph.ainvoke({"log": ["tea"]}) == {"log": ["tea", "tea"]}
        item = await store.aget(("memories", "ada"), "tea")
        assert item is not None and item.value == {"text": "tea"}


# -- node cache -----------------------------------------------------------------------------


def _counting(calls: list[str]) -> Any:
    def lookup(state: Log) -> dict[str, list[str]]:
        calls.append(state["log"][0])
        return {"log": ["looked up"]}

    return lookup


def test_cache_runs_a_node_once_per_input(graphkeep_url: str) -> None:
    calls: list[str] = []
    with graphkeep.connect_cache(graphkeep_url) as cache:
        node = ("lookup", _counting(calls), {"cache_policy": CachePolicy(ttl=60)})
        graph = _linear(node).compile(cache=cache)
        for _ in range(2):
            assert graph.invoke({"log": ["q"]}) == {"log": ["q", "looked up"]}
        graph.invoke({"log": ["other"]})
        assert calls == ["q", "other"]


async def test_async_cache_runs_a_node_once_per_input(graphkeep_url: str) -> None:
    calls: list[str] = []
    async with graphkeep.aconnect_cache(graphkeep_url) as cache:
        node = ("lookup", _counting(calls), {"cache_policy": CachePolicy(ttl=60)})
        graph = _linear(node).compile(cache=cache)
        for _ in range(2):
            assert await graph.ainvoke({"log": ["q"]}) == {"log": ["q", "looked up"]}
        await graph.ainvoke({"log": ["other"]})
        assert calls == ["q", "other"]


# -- run event log --------------------------------------------------------------------------


def _steps() -> StateGraph[Any]:
    return _linear(
        ("one", lambda state: {"log": ["one"]}, {}), ("two", lambda state: {"log": ["two"]}, {})
    )


def test_event_log_keeps_a_graph_stream(graphkeep_url: str) -> None:
    run_id = f"run-{uuid.uuid4().hex}"
    with graphkeep.connect_events(graphkeep_url) as events:
        chunks = [jsonable(c) for c in _steps().compile().stream({"log": []})]
        events.append_many(run_id, [{"mode": "updates", "data": c} for c in chunks])
        events.close(run_id, "success")
        stored = [event for _, event in events.read(run_id, follow=False)]
    assert (
        [e["data"] for e in stored[:-1]]
        == chunks
        == [{"one": {"log": ["one"]}}, {"two": {"log": ["two"]}}]
    )
    assert stored[-1] == {"type": "close", "status": "success"}


async def test_async_event_log_keeps_a_stream_run(graphkeep_url: str) -> None:
    async with graphkeep.aconnect_events(graphkeep_url) as events:
        run = stream_run(_steps().compile(), {"log": []}, None, events)
        chunks = [jsonable(c) async for c in run]
        stored = [event async for _, event in events.read(run.run_id)]  # follows to the close
    assert [e["data"] for e in stored[:-1]] == chunks
    assert len(chunks) == 2 and stored[-1] == {"type": "close", "status": "success"}


# -- effect ledger --------------------------------------------------------------------------


def test_effect_runs_once_across_resumes(graphkeep_url: str) -> None:
    sent: list[str] = []
    with (
        graphkeep.connect(graphkeep_url) as saver,
        graphkeep.connect_effects(graphkeep_url) as ledger,
    ):

        @ledger.once
        def send_mail(to: str, idempotency_key: str) -> str:
            sent.append(idempotency_key)
            return f"mail to {to}"

        def ask(state: Log) -> dict[str, list[str]]:
            return {"log": [send_mail("bob"), str(interrupt("approve?"))]}

        graph = _linear(("ask", ask, {})).compile(checkpointer=saver)
        config = _thread()
        graph.invoke({"log": []}, config)
        graph.invoke(None, config)  # re-runs the node up to interrupt(): the mail is not re-sent
        assert graph.invoke(Command(resume="ok"), config) == {"log": ["mail to bob", "ok"]}
        assert len(sent) == 1 and sent[0].startswith("auto:")
        [record] = ledger.records(config["configurable"]["thread_id"])
        assert record.state == "done"


async def test_async_effect_runs_once_per_key(graphkeep_url: str) -> None:
    sent: list[str] = []
    async with graphkeep.aconnect_effects(graphkeep_url) as ledger:

        @ledger.once(key=lambda to: f"mail-{to}")
        async def send_mail(to: str, idempotency_key: str) -> str:
            sent.append(idempotency_key)
            return f"mail to {to}"

        async def mail(state: Log) -> dict[str, list[str]]:
            return {"log": [await send_mail("bob")]}

        graph = _linear(("mail", mail, {})).compile()
        for _ in range(2):
            assert await graph.ainvoke({"log": []}) == {"log": ["mail to bob"]}
        assert sent == ["mail-bob"]
        assert [r.state for r in await ledger.arecords() if r.key == "mail-bob"] == ["done"]


async def test_async_effect_default_key_comes_from_the_task(graphkeep_url: str) -> None:
    """The task (thread, task id) is LangGraph's ``get_config()``, which async code has only
    on Python 3.11 and later: on 3.10 an async effect needs a key (docs/effects.md)."""
    sent: list[str] = []
    async with (
        graphkeep.aconnect(graphkeep_url) as saver,
        graphkeep.aconnect_effects(graphkeep_url) as ledger,
    ):

        @ledger.once
        async def send_mail(to: str, idempotency_key: str) -> str:
            sent.append(idempotency_key)
            return f"mail to {to}"

        async def mail(state: Log) -> dict[str, list[str]]:
            return {"log": [await send_mail("bob")]}

        graph = _linear(("mail", mail, {})).compile(checkpointer=saver)
        config = _thread()
        if sys.version_info < (3, 11):
            with pytest.raises(EffectKeyRequired, match="Python 3.10"):
                await graph.ainvoke({"log": []}, config)
            assert sent == []
            return
        assert await graph.ainvoke({"log": []}, config) == {"log": ["mail to bob"]}
        assert len(sent) == 1 and sent[0].startswith("auto:")
        [record] = await ledger.arecords(config["configurable"]["thread_id"])
        assert record.state == "done"
