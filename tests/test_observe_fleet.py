"""``graphkeep.telemetry.observe_fleet``: ``graphkeep health``'s numbers as OpenTelemetry
observable gauges from a running process, read with the real SDK on every backend, sync and
async savers alike."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from typing_extensions import TypedDict

import graphkeep
from conformance.setups import ENABLED, Setup
from conformance.testing import marks_for
from graphkeep.checkpoint.health import FLEET_GAUGES
from graphkeep.errors import ConfigurationError
from graphkeep.telemetry import HealthWindow, observe_fleet
from graphkeep.testing.isolation import isolated

SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in ENABLED]


class State(TypedDict):
    n: int


def graph(saver: Any) -> Any:
    def step(state: State) -> dict[str, Any]:
        if state["n"] < 0:
            interrupt("approve?")
        return {"n": state["n"] + 1}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture(params=SETUPS)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    setup: Setup = request.param
    private, drop = isolated(setup.name, setup.url, uuid.uuid4().hex[:12])
    yield private
    drop()


def gauges(reader: InMemoryMetricReader) -> dict[str, float]:
    found: dict[str, float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found[metric.name] = float(point.value)
    return found


def test_observe_fleet_publishes_the_health_numbers_as_gauges(url: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    with graphkeep.connect(url) as saver:
        app = graph(saver)
        for i in range(3):
            app.invoke({"n": i}, {"configurable": {"thread_id": f"ok-{i}"}})
        app.invoke({"n": -1}, {"configurable": {"thread_id": "waiting"}})
        with observe_fleet(saver, every=0.2, meter_provider=provider) as observer:
            assert observer.wait(60), observer.error
            assert observer.error is None
            seen = gauges(reader)
        assert observer.latest is not None
    assert seen["graphkeep.threads.stored"] == 4
    assert seen["graphkeep.threads.active"] == 4
    assert seen["graphkeep.threads.interrupted"] == 1
    assert seen["graphkeep.threads.runaway"] == 0
    assert seen["graphkeep.health.window"] == HealthWindow().window
    # every gauge the rules read is registered under the name the CLI writes too
    assert {g.name for g in FLEET_GAUGES if g.value(observer.latest) is not None} <= set(seen)
    after = gauges(reader)
    assert "graphkeep.threads.stored" not in after  # a closed observer reports nothing


async def test_observe_fleet_runs_on_an_async_saver(url: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    async with graphkeep.aconnect(url) as saver:
        app = graph(saver)
        await app.ainvoke({"n": -1}, {"configurable": {"thread_id": "waiting"}})
        await app.ainvoke({"n": 1}, {"configurable": {"thread_id": "done"}})
        observer = observe_fleet(saver, every=0.2, meter_provider=provider)
        try:
            assert await asyncio.to_thread(observer.wait, 60), observer.error
            seen = gauges(reader)
        finally:
            await asyncio.to_thread(observer.close)
    assert observer.error is None
    assert seen["graphkeep.threads.stored"] == 2
    assert seen["graphkeep.threads.interrupted"] == 1


def test_observe_fleet_refuses_what_it_cannot_use() -> None:
    with pytest.raises(ConfigurationError, match="graphkeep saver"):
        observe_fleet(object())
    with graphkeep.connect("redis://127.0.0.1:1/0", setup=False) as saver:
        for every in (0, -1, "often", float("inf")):
            with pytest.raises(ConfigurationError, match="every"):
                observe_fleet(saver, every=every)
        with pytest.raises(ConfigurationError, match="HealthWindow"):
            observe_fleet(saver, window=3600)  # type: ignore[arg-type]


def test_a_failing_scan_keeps_the_last_numbers_and_the_error() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    with graphkeep.connect("redis://127.0.0.1:1/0", setup=False) as saver:
        with observe_fleet(saver, every=0.2, meter_provider=provider) as observer:
            assert observer.wait(60)
            assert observer.error is not None  # the server is not there: said, not raised
            assert observer.latest is None
            assert "graphkeep.threads.stored" not in gauges(reader)
