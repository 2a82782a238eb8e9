"""``prune(strategy="keep_latest")`` racing a live ``durability="async"`` run loses nothing
the run wrote, on every backend set-up, sync and async.

Under ``durability="async"`` LangGraph stores a step's checkpoint and its tasks' writes in the
background, independently, so a step's writes can reach the store before its checkpoint,
and a prune that runs meanwhile sees writes of a checkpoint that is not stored yet. Here
every checkpoint of one thread reaches the store late, with a prune of the thread landing
just before it (the window, hit every time instead of by chance): the run goes on through
a list channel growing a step at a time and a fan-out whose one branch asks for approval
while the other's write waits as a pending write, then the resume. A second thread runs the
same graph with no prune. The pruned thread ends with the same state, every node ran as
often as on the other (a pending write lost would run its node again on resume), and a last
prune leaves one checkpoint that still gives that state.
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphkeep

from .conftest import unique_prefix
from .scenarios.backends import SETUPS, Store, reachable

STEPS = 12
#: how late a checkpoint of the pruned thread reaches the store (its step's writes go first)
LATE = 0.05


class Work(TypedDict):
    log: Annotated[list[str], operator.add]
    count: int


@pytest.fixture(params=[b.param() for b in SETUPS])
def live_store(request: Any) -> Iterator[Store]:
    store = Store(reachable(request.param), unique_prefix("prune-live"))
    yield store
    store.purge()


def _graph(saver: Any, calls: dict[str, list[str]]) -> Any:
    def called(name: str, config: RunnableConfig) -> None:
        calls.setdefault(config["configurable"]["thread_id"], []).append(name)

    def step(state: Work, config: RunnableConfig) -> dict[str, Any]:
        called(f"step {state['count']}", config)
        return {"log": [f"step {state['count']}"], "count": state["count"] + 1}

    def side(state: Work, config: RunnableConfig) -> dict[str, Any]:
        called("side", config)
        return {"log": ["side"]}

    def ask(state: Work, config: RunnableConfig) -> dict[str, Any]:
        called("ask", config)
        return {"log": [f"approved: {interrupt('go on?')}"]}

    def route(state: Work) -> Any:
        if state["count"] == STEPS // 2 and not any(e.startswith("approved") for e in state["log"]):
            return ["ask", "side"]
        return END if state["count"] >= STEPS else "step"

    builder = StateGraph(Work)
    builder.add_node("step", step)
    builder.add_node("side", side)
    builder.add_node("ask", ask)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route, ["ask", "side", "step", END])
    builder.add_edge(["ask", "side"], "step")
    return builder.compile(checkpointer=saver)


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _pruned_first(saver: Any, prunes: list[int]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``put`` and ``aput`` that store a checkpoint of the thread "pruned" late, a prune of
    it landing first: they run in LangGraph's background writer, beside the step."""
    put, aput = saver.put, saver.aput

    def late_put(config: Any, *args: Any) -> Any:
        if config["configurable"]["thread_id"] == "pruned":
            time.sleep(LATE)
            prunes.append(saver.prune(["pruned"], strategy="keep_latest") or 1)
        return put(config, *args)

    async def late_aput(config: Any, *args: Any) -> Any:
        if config["configurable"]["thread_id"] == "pruned":
            await asyncio.sleep(LATE)
            prunes.append(await saver.aprune(["pruned"], strategy="keep_latest") or 1)
        return await aput(config, *args)

    return late_put, late_aput


def _check(saver: Any, calls: dict[str, list[str]], prunes: list[int]) -> None:
    graph = _graph(saver, {})
    pruned, plain = graph.get_state(_config("pruned")), graph.get_state(_config("plain"))
    assert pruned.values == plain.values and pruned.values["count"] == STEPS
    assert sorted(calls["pruned"]) == sorted(calls["plain"])
    assert calls["plain"].count("side") == 1 and calls["plain"].count("ask") == 2
    assert len(prunes) > STEPS  # a prune before each checkpoint of the pruned thread
    saver.prune(["pruned"], strategy="keep_latest")
    assert len(list(saver.list(_config("pruned")))) == 1
    assert graph.get_state(_config("pruned")).values == plain.values


def test_a_prune_racing_a_live_async_durability_run_loses_nothing(live_store: Store) -> None:
    url, prefix = live_store.backend.url, live_store.prefix
    calls: dict[str, list[str]] = {}
    prunes: list[int] = []
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        saver.put, _ = _pruned_first(saver, prunes)
        graph = _graph(saver, calls)
        for thread in ("plain", "pruned"):
            out = graph.invoke({"log": [], "count": 0}, _config(thread), durability="async")
            assert "__interrupt__" in out
            graph.invoke(Command(resume="yes"), _config(thread), durability="async")
        _check(saver, calls, prunes)


def test_a_prune_racing_a_live_async_durability_async_run_loses_nothing(
    live_store: Store,
) -> None:
    url, prefix = live_store.backend.url, live_store.prefix
    calls: dict[str, list[str]] = {}
    prunes: list[int] = []

    async def scenario() -> None:
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            _, saver.aput = _pruned_first(saver, prunes)
            graph = _graph(saver, calls)
            for thread in ("plain", "pruned"):
                config = _config(thread)
                await graph.ainvoke({"log": [], "count": 0}, config, durability="async")
                await graph.ainvoke(Command(resume="yes"), config, durability="async")

    asyncio.run(scenario())
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        _check(saver, calls, prunes)
