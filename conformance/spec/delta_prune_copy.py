"""delta_prune_copy: DeltaChannel state end to end with a real graph (contract s8, s13).

A graph START -> a -> (b || c) appends to a `DeltaChannel` list with snapshot_frequency=4, so
most checkpoints store no value for it and state lives in ancestor writes. After 15 invokes the
state must read back identically from a new saver instance, from a `copy_thread` target and
after `prune(keep_latest)` -- and the graph must continue correctly afterwards. Runs through
invoke/get_state (sync) and ainvoke/aget_state (async).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph

from conformance.factory import Api, AsyncApi, SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import config, new_thread

INVOKES = 15


def append_batches(state: list[str] | None, batches: Sequence[list[str]]) -> list[str]:
    """Batch reducer: concatenation is deterministic and batching-invariant."""
    result = list(state or [])
    for batch in batches:
        result.extend(batch)
    return result


class DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(append_batches, snapshot_frequency=4)]


def _round(state: DeltaState) -> int:
    return sum(1 for item in state["items"] if item.startswith("in"))


def _node(label: str) -> Any:
    def node(state: DeltaState) -> dict[str, list[str]]:
        return {"items": [f"{label}{_round(state)}"]}

    return node


def _build_graph(api: Api) -> Any:
    builder = StateGraph(DeltaState)
    for label in ("a", "b", "c"):
        builder.add_node(label, _node(label))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("a", "c")
    builder.add_edge("b", END)
    builder.add_edge("c", END)
    return builder.compile(checkpointer=api.saver)


def expected_items(invokes: int) -> list[str]:
    # parallel b and c apply in task-path order: b before c
    return [item for n in range(1, invokes + 1) for item in (f"in{n}", f"a{n}", f"b{n}", f"c{n}")]


class GraphDriver:
    """Runs the graph through the sync or async API, matching the Api's mode."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.graph = _build_graph(api)

    def invoke(self, thread: str, round_number: int) -> None:
        payload = {"items": [f"in{round_number}"]}
        conf: RunnableConfig = {"configurable": {"thread_id": thread}}
        if isinstance(self.api, AsyncApi):
            self.api.run(self.graph.ainvoke(payload, conf))
        else:
            self.graph.invoke(payload, conf)

    def values(self, thread: str) -> dict[str, Any]:
        conf: RunnableConfig = {"configurable": {"thread_id": thread}}
        if isinstance(self.api, AsyncApi):
            return dict(self.api.run(self.graph.aget_state(conf)).values)
        return dict(self.graph.get_state(conf).values)


def _run_thread(api: Api, thread: str) -> dict[str, Any]:
    driver = GraphDriver(api)
    for round_number in range(1, INVOKES + 1):
        driver.invoke(thread, round_number)
    values = driver.values(thread)
    assert values == {"items": expected_items(INVOKES)}, f"graph state is wrong: {values}"
    _assert_delta_storage_was_used(api, thread)
    return values


def _assert_delta_storage_was_used(api: Api, thread: str) -> None:
    stored = [t.checkpoint["channel_values"].get("items") for t in api.list(config(thread))]
    assert any(isinstance(v, _DeltaSnapshot) for v in stored), "no _DeltaSnapshot came back"
    assert any(v is None for v in stored), "every checkpoint stores the value: not a delta test"


@case("delta_prune_copy")
def delta_state_reads_back_from_a_new_saver_instance(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        values = _run_thread(api, thread)
    with factory.open() as fresh:
        driver = GraphDriver(fresh)
        assert driver.values(thread) == values
        driver.invoke(thread, INVOKES + 1)
        assert driver.values(thread) == {"items": expected_items(INVOKES + 1)}


@case("delta_prune_copy")
def delta_state_survives_copy_thread(factory: SaverFactory) -> None:
    source, target = new_thread("src"), new_thread("dst")
    with factory.open() as api:
        values = _run_thread(api, source)
        api.copy_thread(source, target)
        driver = GraphDriver(api)
        assert driver.values(target) == values
        driver.invoke(target, INVOKES + 1)
        assert driver.values(target) == {"items": expected_items(INVOKES + 1)}
        assert driver.values(source) == values, "continuing the copy changed the source"


@case("delta_prune_copy")
def delta_state_survives_prune_keep_latest_and_the_graph_continues(
    factory: SaverFactory,
) -> None:
    thread = new_thread()
    with factory.open() as api:
        values = _run_thread(api, thread)
        before = api.list(config(thread))
        api.prune([thread], strategy="keep_latest")
        after = api.list(config(thread))
        assert after and after[0].config == before[0].config, "prune dropped the head"
        assert len(after) <= len(before)
        driver = GraphDriver(api)
        assert driver.values(thread) == values, "prune lost DeltaChannel state"
        driver.invoke(thread, INVOKES + 1)
        assert driver.values(thread) == {"items": expected_items(INVOKES + 1)}
