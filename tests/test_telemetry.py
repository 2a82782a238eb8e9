"""OpenTelemetry on every call (issue 22, item 1), with the real SDK on the real servers.

Each test hands graphkeep its own SDK providers (``telemetry={"tracer_provider": ...,
"meter_provider": ...}``: an ``InMemorySpanExporter`` and an ``InMemoryMetricReader``), so
tests never share a global provider; the default path (the global providers, no option) runs
in a subprocess, where installing a global SDK cannot leak into other tests.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import graphkeep
from graphkeep.connect import PRODUCTS, class_for
from graphkeep.errors import (
    ConfigurationError,
    CorruptData,
    LockNotAcquired,
    StorageUnavailable,
)
from graphkeep.telemetry import DURATION_BUCKETS
from graphkeep.testing import ferretdb_command
from tests.scenarios.backends import (
    DAMAGE,
    RESTARTABLE,
    Backend,
    dynamodb_client,
    mapped,
    mongodb_documents,
    redis_client,
)
from tests.scenarios.servers import FerretDBServer, MotoServer, RedisServer

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = {
    "redis": "redis",
    "redis-cluster": "redis",
    "mongodb": "mongodb",
    "dynamodb": "aws.dynamodb",
    "valkey": "redis",  # the Redis backend: the same client, the same telemetry
    "valkey-cluster": "redis",
}
MODES = ("sync", "async")
#: written into graph state, cached values and events: it must never show up in telemetry
SECRET = "s3cr3t-payload-7f3a"


# -- the SDK, in memory ----------------------------------------------------------------------


class Otel:
    """One test's SDK: spans and metrics in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def option(self, **extra: Any) -> dict[str, Any]:
        return {
            "tracer_provider": self.tracer_provider,
            "meter_provider": self.meter_provider,
            **extra,
        }

    def spans(self) -> list[ReadableSpan]:
        """graphkeep's spans (not the test's own ``run`` span)."""
        return [
            s
            for s in self.exporter.get_finished_spans()
            if s.instrumentation_scope is not None and s.instrumentation_scope.name == "graphkeep"
        ]

    def all_spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def operations(self) -> set[str]:
        return {str((s.attributes or {}).get("db.operation.name")) for s in self.spans()}

    def metrics(self) -> dict[str, Any]:
        data = self.reader.get_metrics_data()
        found: dict[str, Any] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str, **attributes: Any) -> list[Any]:
        metric = self.metrics().get(name)
        if metric is None:
            return []
        return [
            p
            for p in metric.data.data_points
            if all(p.attributes.get(k) == v for k, v in attributes.items())
        ]

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    sdk = Otel()
    yield sdk
    sdk.close()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def strings_in(otel: Otel) -> list[str]:
    """Every string telemetry recorded: span names, attribute keys and values, event
    attributes, metric names and data-point attributes."""
    found: list[str] = []
    for span in otel.spans():
        found.append(span.name)
        found.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        for event in span.events:
            found.append(event.name)
            found.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
        if span.status.description:
            found.append(span.status.description)
    for name, metric in otel.metrics().items():
        found.append(name)
        for point in metric.data.data_points:
            found.extend(f"{k}={v}" for k, v in point.attributes.items())
    return found


def check_call_spans(otel: Otel, backend: str) -> None:
    """Every span is a CLIENT span named ``{operation} {namespace}`` with the backend's
    attributes, and no span carries a thread id (not opted in)."""
    spans = otel.spans()
    assert spans
    for span in spans:
        attributes = dict(span.attributes or {})
        assert span.kind is SpanKind.CLIENT
        assert attributes["db.system.name"] == SYSTEMS[backend], span.name
        namespace = attributes["db.namespace"]
        assert isinstance(namespace, str) and namespace
        assert span.name == f"{attributes['db.operation.name']} {namespace}"
        assert isinstance(attributes["server.address"], str)
        assert "graphkeep.thread_id" not in attributes


# -- a real graph ------------------------------------------------------------------------------


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def two_nodes() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("ask", lambda state: {"log": ["asked"]})
    builder.add_node("answer", lambda state: {"log": [f"answered {len(state['log'])}"]})
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "answer")
    builder.add_edge("answer", END)
    return builder


def config_of(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def run_sync(saver: Any, thread_id: str, otel: Otel) -> None:
    graph = two_nodes().compile(checkpointer=saver)
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("run"):
        out = graph.invoke({"log": [SECRET]}, config_of(thread_id))
        assert out["log"] == [SECRET, "asked", "answered 2"]
        assert graph.get_state(config_of(thread_id)).values == out
        assert len(list(graph.get_state_history(config_of(thread_id)))) == 4
    other = f"{thread_id}-copy"
    saver.copy_thread(thread_id, other)
    saver.prune([other])
    saver.get_delta_channel_history(config=config_of(thread_id), channels=["log"])
    saver.delete_for_runs(["no-such-run"])
    with saver.lock(thread_id, ttl=5):
        pass
    saver.delete_thread(other)


async def run_async(saver: Any, thread_id: str, otel: Otel) -> None:
    graph = two_nodes().compile(checkpointer=saver)
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("run"):
        out = await graph.ainvoke({"log": [SECRET]}, config_of(thread_id))
        assert out["log"] == [SECRET, "asked", "answered 2"]
        assert (await graph.aget_state(config_of(thread_id))).values == out
        assert len([s async for s in graph.aget_state_history(config_of(thread_id))]) == 4
    other = f"{thread_id}-copy"
    await saver.acopy_thread(thread_id, other)
    await saver.aprune([other])
    await saver.aget_delta_channel_history(config=config_of(thread_id), channels=["log"])
    await saver.adelete_for_runs(["no-such-run"])
    async with saver.lock(thread_id, ttl=5):
        pass
    await saver.adelete_thread(other)


def run_graph(url: str, mode: str, otel: Otel, thread_id: str, **options: Any) -> None:
    if mode == "sync":
        with graphkeep.connect(url, **options) as saver:
            run_sync(saver, thread_id, otel)
        return

    async def main() -> None:
        async with graphkeep.aconnect(url, **options) as saver:
            await run_async(saver, thread_id, otel)

    asyncio.run(main())


SAVER_CALLS = {
    "checkpoint.setup",
    "checkpoint.get_tuple",
    "checkpoint.put",
    "checkpoint.put_writes",
    "checkpoint.list",
    "checkpoint.copy_thread",
    "checkpoint.prune",
    "checkpoint.get_delta_channel_history",
    "checkpoint.delete_for_runs",
    "checkpoint.delete_thread",
    "checkpoint.lock.acquire",
    "checkpoint.lock.release",
}


def calls_attributes(otel: Otel, operation: str) -> dict[str, Any]:
    """The duration histogram's attributes of ``operation`` (its successful calls)."""
    (point,) = otel.points("db.client.operation.duration", **{"db.operation.name": operation})
    return dict(point.attributes)


def test_a_graph_run_records_one_client_span_and_the_metrics_per_saver_call(
    graphkeep_backend: str, graphkeep_url: str, mode: str, otel: Otel, thread_id: str
) -> None:
    run_graph(graphkeep_url, mode, otel, thread_id, telemetry=otel.option())

    assert SAVER_CALLS <= otel.operations()
    check_call_spans(otel, graphkeep_backend)
    assert all(s.status.status_code is StatusCode.UNSET for s in otel.spans())
    puts = [s for s in otel.spans() if s.attributes["db.operation.name"] == "checkpoint.put"]
    assert len(puts) == 4  # the input, then one checkpoint per super-step (input, ask, answer)

    # the database conventions' duration histogram, per operation, with their buckets
    system = SYSTEMS[graphkeep_backend]
    for operation in SAVER_CALLS:
        (point,) = otel.points("db.client.operation.duration", **{"db.operation.name": operation})
        assert point.attributes["db.system.name"] == system
        assert point.attributes["db.namespace"] == puts[0].attributes["db.namespace"]
        assert "error.type" not in point.attributes
        assert point.count >= 1 and point.sum > 0
        assert tuple(point.explicit_bounds) == DURATION_BUCKETS
    assert otel.metrics()["db.client.operation.duration"].unit == "s"

    # requests sent (a counter, per operation): what the executor was handed within the
    # calls; per call, over the duration's count
    calls = {
        p.attributes["db.operation.name"]: p.count
        for p in otel.points("db.client.operation.duration")
    }
    for operation in ("checkpoint.put", "checkpoint.get_tuple", "checkpoint.put_writes"):
        (sent,) = otel.points("graphkeep.call.requests", **{"db.operation.name": operation})
        assert sent.attributes == dict(calls_attributes(otel, operation))
        assert sent.value >= calls[operation]  # at least one request per call
        assert sent.value <= 8 * calls[operation]
    assert otel.metrics()["graphkeep.call.requests"].data.is_monotonic
    # bytes written by puts and by put_writes (a counter)
    (written,) = otel.points("graphkeep.put.bytes", **{"db.operation.name": "checkpoint.put"})
    assert written.value > len(SECRET)
    (writes,) = otel.points("graphkeep.put.bytes", **{"db.operation.name": "checkpoint.put_writes"})
    assert writes.value > 0
    assert otel.metrics()["graphkeep.put.bytes"].unit == "By"

    # never a payload: the state's secret is in no span, attribute or metric
    assert not [s for s in strings_in(otel) if SECRET in s]
    assert not [s for s in strings_in(otel) if thread_id in s]  # no thread id unless asked


def test_saver_spans_nest_under_the_span_current_at_the_call(
    graphkeep_backend: str, graphkeep_url: str, mode: str, otel: Otel, thread_id: str
) -> None:
    run_graph(graphkeep_url, mode, otel, thread_id, telemetry=otel.option())
    (run,) = [s for s in otel.all_spans() if s.name == "run"]
    inside = [
        s for s in otel.spans() if s.start_time >= run.start_time and s.end_time <= run.end_time
    ]
    assert {"checkpoint.get_tuple", "checkpoint.put", "checkpoint.list"} <= {
        s.attributes["db.operation.name"] for s in inside
    }
    for span in inside:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id


def test_thread_ids_are_recorded_on_spans_only_when_opted_in(
    graphkeep_backend: str, graphkeep_url: str, otel: Otel, thread_id: str
) -> None:
    run_graph(graphkeep_url, "sync", otel, thread_id, telemetry=otel.option(thread_ids=True))
    by_operation = {s.attributes["db.operation.name"]: s for s in otel.spans()}
    for operation in ("checkpoint.put", "checkpoint.get_tuple", "checkpoint.lock.acquire"):
        assert by_operation[operation].attributes["graphkeep.thread_id"] == thread_id
    # metrics never carry it (one series per thread would be unbounded)
    for metric in otel.metrics().values():
        for point in metric.data.data_points:
            assert "graphkeep.thread_id" not in point.attributes


# -- store, cache, event log -------------------------------------------------------------------

PRODUCT_CALLS = {
    "effects.begin",
    "effects.finish",
    "effects.clear",
    "store.put",
    "store.get",
    "store.search",
    "store.list_namespaces",
    "store.delete",
    "cache.set",
    "cache.get",
    "cache.clear",
    "events.append",
    "events.close",
    "events.read",
    "events.state",
    "events.delete",
}


@pytest.mark.dynamodb
@pytest.mark.parametrize("mode", MODES)
def test_a_search_reading_partitions_at_once_counts_each_request(otel: Otel, mode: str) -> None:
    """The DynamoDB store's cross-partition search sends its Queries as one ``Parallel``:
    the call's requests are still counted one by one (the registry + one per partition)."""
    from .test_dynamodb import ENDPOINT, REGION

    url = f"dynamodb://graphkeep_test?region={REGION}&endpoint_url={ENDPOINT}"
    prefix = f"par-{uuid.uuid4().hex[:8]}"
    name = {"db.operation.name": "store.search"}
    if mode == "sync":
        with graphkeep.connect_store(url, key_prefix=prefix, telemetry=otel.option()) as store:
            for user in range(5):
                store.put(("users", f"u{user}"), "k", {"user": user})
            assert len(store.search(("users",))) == 5
    else:

        async def main() -> None:
            async with graphkeep.aconnect_store(
                url, key_prefix=prefix, telemetry=otel.option()
            ) as store:
                for user in range(5):
                    await store.aput(("users", f"u{user}"), "k", {"user": user})
                assert len(await store.asearch(("users",))) == 5

        asyncio.run(main())
    (sent,) = otel.points("graphkeep.call.requests", **name)
    assert sent.value == 6
    (search,) = [s for s in otel.spans() if s.attributes["db.operation.name"] == "store.search"]
    assert search.status.is_ok


def products_sync(url: str, option: dict[str, Any], run: str) -> None:
    with graphkeep.connect_store(url, telemetry=option) as store:
        store.put(("users", "ada"), "note", {"text": SECRET})
        assert store.get(("users", "ada"), "note").value == {"text": SECRET}
        assert len(store.search(("users",))) == 1
        assert store.list_namespaces(prefix=("users",)) == [("users", "ada")]
        store.delete(("users", "ada"), "note")
    with graphkeep.connect_cache(url, telemetry=option) as cache:
        cache.set({(("node",), "key"): ({"value": SECRET}, None)})
        assert cache.get([(("node",), "key")]) == {(("node",), "key"): {"value": SECRET}}
        cache.clear()
    with graphkeep.connect_events(url, telemetry=option) as events:
        events.append(run, {"type": "token", "text": SECRET})
        events.append_many(run, [{"type": "token", "text": str(i)} for i in range(3)])
        events.close(run, "success")
        assert len(list(events.read(run, follow=False))) == 5
        assert events.state(run) is not None
        events.delete(run)
    with graphkeep.connect_effects(url, telemetry=option) as ledger:
        assert ledger.run(f"fx-{run}", lambda: {"r": SECRET}) == {"r": SECRET}
        assert ledger.run(f"fx-{run}", lambda: None) == {"r": SECRET}  # replayed
        ledger.clear("")


async def products_async(url: str, option: dict[str, Any], run: str) -> None:
    async with graphkeep.aconnect_store(url, telemetry=option) as store:
        await store.aput(("users", "ada"), "note", {"text": SECRET})
        item = await store.aget(("users", "ada"), "note")
        assert item is not None and item.value == {"text": SECRET}
        assert len(await store.asearch(("users",))) == 1
        assert await store.alist_namespaces(prefix=("users",)) == [("users", "ada")]
        await store.adelete(("users", "ada"), "note")
    async with graphkeep.aconnect_cache(url, telemetry=option) as cache:
        await cache.aset({(("node",), "key"): ({"value": SECRET}, None)})
        assert await cache.aget([(("node",), "key")]) == {(("node",), "key"): {"value": SECRET}}
        await cache.aclear()
    async with graphkeep.aconnect_events(url, telemetry=option) as events:
        await events.append(run, {"type": "token", "text": SECRET})
        await events.append_many(run, [{"type": "token", "text": str(i)} for i in range(3)])
        await events.close(run, "success")
        assert len([e async for e in events.read(run, follow=False)]) == 5
        assert await events.state(run) is not None
        await events.delete(run)
    async with graphkeep.aconnect_effects(url, telemetry=option) as ledger:
        assert await ledger.arun(f"fx-{run}", lambda: {"r": SECRET}) == {"r": SECRET}
        assert await ledger.arun(f"fx-{run}", lambda: None) == {"r": SECRET}  # replayed
        await ledger.aclear("")


def test_store_cache_event_log_and_ledger_calls_record_one_client_span_each(
    graphkeep_backend: str, graphkeep_url: str, mode: str, otel: Otel, thread_id: str
) -> None:
    run = f"run-{thread_id}"
    if mode == "sync":
        products_sync(graphkeep_url, otel.option(), run)
    else:
        asyncio.run(products_async(graphkeep_url, otel.option(), run))

    assert PRODUCT_CALLS <= otel.operations()
    check_call_spans(otel, graphkeep_backend)
    assert all(s.status.status_code is StatusCode.UNSET for s in otel.spans())
    for operation in PRODUCT_CALLS:
        assert otel.points("db.client.operation.duration", **{"db.operation.name": operation})
    (batches,) = otel.points("graphkeep.events.append.batch_size")
    assert (batches.count, batches.sum) == (3, 5)  # one event, three, the close event
    assert not [s for s in strings_in(otel) if SECRET in s or run in s]


# -- a corrupted payload -------------------------------------------------------------------------

#: written into the state, then overwritten on the server with bytes no serializer reads
MARKER = "corrupt-me-4e1d"
GARBAGE = b"\xc1" * 16  # 0xc1 is never used by msgpack


@contextmanager
def redis_keys(url: str) -> Iterator[tuple[Any, set[bytes]]]:
    """A plain client on the test URL's server and every key under its ``key_prefix``."""
    prefix = parse_qs(url.partition("?")[2])["key_prefix"][0]
    client = redis_client(url)
    try:
        yield (
            client,
            set(client.scan_iter(match=f"{prefix}*"))
            | set(client.scan_iter(match=f"*{{{prefix}*")),
        )
    finally:
        client.close()


def corrupt(backend: str, url: str, marker: bytes) -> int:
    """Every stored byte string holding ``marker`` replaced by ``GARBAGE``: how many."""
    return DAMAGE[backend](url, lambda data: GARBAGE if marker in data else None)


def holds(value: Any, marker: bytes) -> bool:
    """Does a document or item hold ``marker`` in one of its byte strings?"""
    return mapped(value, lambda data: data if marker in data else None)[1] > 0


def test_a_corrupted_payload_counts_one_resume_failure_and_fails_the_read_span(
    graphkeep_backend: str, graphkeep_url: str, mode: str, otel: Otel, thread_id: str
) -> None:
    # DynamoDB compresses every item by default: the marker must stay findable on the server
    options: dict[str, Any] = {"compress": False} if graphkeep_backend == "dynamodb" else {}
    config = config_of(thread_id)
    graph_input = {"log": [MARKER]}

    def read_back(saver: Any) -> None:
        assert saver.get_tuple(config) is not None
        assert corrupt(graphkeep_backend, graphkeep_url, MARKER.encode()) >= 1
        with pytest.raises(Exception) as raised:
            saver.get_tuple(config)
        assert not isinstance(raised.value, StorageUnavailable)

    if mode == "sync":
        with graphkeep.connect(graphkeep_url, telemetry=otel.option(), **options) as saver:
            two_nodes().compile(checkpointer=saver).invoke(graph_input, config)
            read_back(saver)
    else:

        async def main() -> None:
            async with graphkeep.aconnect(
                graphkeep_url, telemetry=otel.option(), **options
            ) as saver:
                await two_nodes().compile(checkpointer=saver).ainvoke(graph_input, config)
                assert await saver.aget_tuple(config) is not None
                assert corrupt(graphkeep_backend, graphkeep_url, MARKER.encode()) >= 1
                with pytest.raises(Exception) as raised:
                    await saver.aget_tuple(config)
                assert not isinstance(raised.value, StorageUnavailable)

        asyncio.run(main())

    (failure,) = otel.points("graphkeep.resume.failures")
    assert failure.value == 1
    assert failure.attributes["db.system.name"] == SYSTEMS[graphkeep_backend]
    assert failure.attributes["db.operation.name"] == "checkpoint.get_tuple"
    assert failure.attributes["graphkeep.reason"] in ("corrupt_data", "undecodable")
    (failed,) = [s for s in otel.spans() if s.status.status_code is StatusCode.ERROR]
    assert failed.attributes["db.operation.name"] == "checkpoint.get_tuple"
    assert failed.attributes["error.type"] == failure.attributes["error.type"]
    assert not [s for s in strings_in(otel) if MARKER in s]


# -- a server that goes away ---------------------------------------------------------------------


class FerretDB(FerretDBServer):
    """The private FerretDB of the restart tests, from the binary the session's servers use
    (a git worktree has no ``.services/bin`` of its own)."""

    def command(self) -> list[str]:
        program = os.environ.get("GRAPHKEEP_MONGODB_SERVER", "")
        if not program or "ferretdb" not in program:
            return super().command()
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        return ferretdb_command(program, data, self.port)


PRIVATE = {"redis": RedisServer, "mongodb": FerretDB, "dynamodb": MotoServer}


@pytest.mark.parametrize("kind", [b.param() for b in RESTARTABLE])
def test_a_server_stopped_under_a_run_fails_the_span_with_error_type(
    kind: Backend, mode: str, otel: Otel, thread_id: str, tmp_path: Path
) -> None:
    config = config_of(thread_id)
    with PRIVATE[kind.name](tmp_path / "server") as server:
        # SIGKILL where the server keeps what it acknowledged (Redis fsyncs every write here)
        stop = signal.SIGKILL if kind.name == "redis" else signal.SIGTERM
        prefix = f"gk-otel-{uuid.uuid4().hex[:8]}"
        if mode == "sync":
            with graphkeep.connect(server.url, key_prefix=prefix, telemetry=otel.option()) as saver:
                graph = two_nodes().compile(checkpointer=saver)
                graph.invoke({"log": ["hi"]}, config)
                server.stop(stop)
                with pytest.raises(StorageUnavailable):
                    graph.invoke({"log": ["again"]}, config)
                server.start()
        else:

            async def main() -> None:
                async with graphkeep.aconnect(
                    server.url, key_prefix=prefix, telemetry=otel.option()
                ) as saver:
                    graph = two_nodes().compile(checkpointer=saver)
                    await graph.ainvoke({"log": ["hi"]}, config)
                    server.stop(stop)
                    with pytest.raises(StorageUnavailable):
                        await graph.ainvoke({"log": ["again"]}, config)
                    server.start()

            asyncio.run(main())

    failed = [s for s in otel.spans() if s.status.status_code is StatusCode.ERROR]
    assert failed
    for span in failed:
        assert span.attributes["error.type"] == "graphkeep.errors.StorageUnavailable"
        assert span.status.description == "graphkeep.errors.StorageUnavailable"
    failures = otel.points(
        "db.client.operation.duration", **{"error.type": "graphkeep.errors.StorageUnavailable"}
    )
    assert sum(p.count for p in failures) == len(failed)
    # the retries were inside the one span: it lasted at least the backend's pauses
    assert max(s.end_time - s.start_time for s in failed) > 0.1 * 1e9
    assert otel.points("graphkeep.resume.failures") == []  # unreachable is not corrupt


# -- the default (global providers), telemetry=False ---------------------------------------------

GLOBAL_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, operator, sys
    from typing import Annotated, TypedDict

    from langgraph.graph import END, START, StateGraph
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import graphkeep

    url, thread = sys.argv[1], sys.argv[2]

    class State(TypedDict):
        log: Annotated[list[str], operator.add]

    builder = StateGraph(State)
    builder.add_node("ask", lambda state: {"log": ["asked"]})
    builder.add_node("answer", lambda state: {"log": ["answered"]})
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "answer")
    builder.add_edge("answer", END)

    def run(tag, **options):
        config = {"configurable": {"thread_id": f"{thread}-{tag}"}}
        with graphkeep.connect(url, **options) as saver:
            active = saver.telemetry.active()
            builder.compile(checkpointer=saver).invoke({"log": ["hi"]}, config)
        async def arun():
            async with graphkeep.aconnect(url, **options) as saver:
                await builder.compile(checkpointer=saver).ainvoke({"log": ["hi"]}, config)
        asyncio.run(arun())
        return active

    out = {"before_sdk_active": run("before")}
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    def points():
        data = reader.get_metrics_data()
        return sum(
            len(m.data.data_points)
            for r in (data.resource_metrics if data else [])
            for s in r.scope_metrics
            for m in s.metrics
        )

    out["off_active"] = run("off", telemetry=False)
    out["off_spans"] = len(exporter.get_finished_spans())
    out["off_points"] = points()
    out["on_active"] = run("on")
    out["on_operations"] = sorted(
        {s.attributes["db.operation.name"] for s in exporter.get_finished_spans()}
    )
    out["on_points"] = points()
    print(json.dumps(out))
    """
)


def test_telemetry_is_on_by_default_through_the_global_providers_and_off_with_false(
    graphkeep_url: str, thread_id: str
) -> None:
    # a subprocess: a global SDK, once installed, cannot be removed from this one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_SCRIPT, graphkeep_url, thread_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before_sdk_active"] is False  # no SDK installed: calls skip telemetry
    assert out["off_active"] is False
    assert (out["off_spans"], out["off_points"]) == (0, 0)
    assert out["on_active"] is True
    assert {"checkpoint.put", "checkpoint.put_writes", "checkpoint.get_tuple"} <= set(
        out["on_operations"]
    )
    assert out["on_points"] > 0


# -- bad options ----------------------------------------------------------------------------------

BAD_OPTIONS = [
    pytest.param({"thread_id": True}, id="unknown-key"),
    pytest.param({"thread_ids": "yes"}, id="thread_ids-not-bool"),
    pytest.param({"tracer_provider": object()}, id="not-a-tracer-provider"),
    pytest.param({"meter_provider": "prometheus"}, id="not-a-meter-provider"),
    pytest.param("on", id="a-string"),
    pytest.param(1, id="a-number"),
]
CONNECTS = [
    graphkeep.connect,
    graphkeep.connect_store,
    graphkeep.connect_cache,
    graphkeep.connect_events,
]
ACONNECTS = [
    graphkeep.aconnect,
    graphkeep.aconnect_store,
    graphkeep.aconnect_cache,
    graphkeep.aconnect_events,
]


@pytest.mark.parametrize("option", BAD_OPTIONS)
def test_a_bad_telemetry_option_raises_configuration_error_everywhere(
    graphkeep_backend: str, graphkeep_url: str, option: Any
) -> None:
    # a class's from_url takes key_prefix as an option (connect* read it from the URL)
    parts = urlsplit(graphkeep_url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "key_prefix"]
    plain = urlunsplit(parts._replace(query=urlencode(query)))
    prefix = "gk-bad-options"
    for connect in CONNECTS:
        with pytest.raises(ConfigurationError, match="telemetry"):
            with connect(graphkeep_url, telemetry=option):
                pass

    async def aconnects() -> None:
        for aconnect in ACONNECTS:
            with pytest.raises(ConfigurationError, match="telemetry"):
                async with aconnect(graphkeep_url, telemetry=option):
                    pass
        for product in PRODUCTS:
            cls = class_for(graphkeep_url, product, is_async=True)
            with pytest.raises(ConfigurationError, match="telemetry"):
                async with cls.from_url(plain, key_prefix=prefix, telemetry=option):
                    pass

    asyncio.run(aconnects())
    # the classes check it themselves (their from_url builds with their constructor)
    for product in PRODUCTS:
        cls = class_for(graphkeep_url, product)
        with pytest.raises(ConfigurationError, match="telemetry"):
            with cls.from_url(plain, key_prefix=prefix, telemetry=option):
                pass


# -- an SDK that raises ---------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


class RaisingProcessor(SpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise Boom("on_start")

    def on_end(self, span: Any) -> None:
        raise Boom("on_end")


class RaisingSpanExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        raise Boom("export")


class RaisingMetricExporter(MetricExporter):
    def __init__(self) -> None:
        super().__init__(preferred_temporality={}, preferred_aggregation={})
        self.calls = 0

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        self.calls += 1
        raise Boom("export")

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        raise Boom("flush")

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


class Broken:
    """A provider whose every tracer, span, meter and instrument raises."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def anything(*args: Any, **kwargs: Any) -> Any:
            if name in ("get_tracer", "get_meter") or name.startswith("create_"):
                return Broken()
            raise Boom(name)

        return anything


def test_a_failing_exporter_or_sdk_never_fails_a_call(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(RaisingProcessor())
    tracer_provider.add_span_processor(SimpleSpanProcessor(RaisingSpanExporter()))
    exporter = RaisingMetricExporter()
    reader = InMemoryMetricReader()  # beside the failing exporter: the calls were measured
    meter_provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=50), reader]
    )
    sdk = Otel()  # the test's own "run" span comes from a working tracer
    try:
        option = {"tracer_provider": tracer_provider, "meter_provider": meter_provider}
        run_graph(graphkeep_url, mode, sdk, thread_id, telemetry=option)
        broken = {"tracer_provider": Broken(), "meter_provider": Broken()}
        run_graph(graphkeep_url, mode, sdk, f"{thread_id}-broken", telemetry=broken)
        if mode == "sync":
            products_sync(graphkeep_url, option, f"run-{thread_id}")
        else:
            asyncio.run(products_async(graphkeep_url, option, f"run-{thread_id}"))
        data = reader.get_metrics_data()
        measured = {
            p.attributes["db.operation.name"]
            for r in data.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
            if m.name == "db.client.operation.duration"
            for p in m.data.data_points
        }
        assert {"checkpoint.put", "store.put", "cache.get", "events.append"} <= measured
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        sdk.close()
    assert exporter.calls >= 1  # the metrics did reach the failing exporter


# -- the lease and watch ---------------------------------------------------------------------


def test_lock_wait_contention_and_watch_lag_are_measured(
    graphkeep_backend: str, graphkeep_url: str, otel: Otel, thread_id: str
) -> None:
    config = config_of(thread_id)
    with graphkeep.connect(graphkeep_url, telemetry=otel.option()) as saver:
        graph = two_nodes().compile(checkpointer=saver)
        graph.invoke({"log": ["hi"]}, config)
        held = saver.lock(thread_id, ttl=10)
        held.acquire()
        with pytest.raises(LockNotAcquired):
            saver.lock(thread_id, ttl=10, timeout=0.3).acquire()
        held.release()
        first = list(saver.list(config))[-1].config["configurable"]["checkpoint_id"]
        seen = list(itertools.islice(saver.watch(thread_id, after=first, timeout=10), 3))
        assert len(seen) == 3

    (contention,) = otel.points("graphkeep.lock.contention")
    assert contention.value >= 2  # the blocking acquire polled more than once
    (gave_up,) = otel.points("graphkeep.lock.wait", **{"graphkeep.lock.acquired": False})
    assert gave_up.count == 1 and gave_up.sum >= 0.3
    (took,) = otel.points("graphkeep.lock.wait", **{"graphkeep.lock.acquired": True})
    assert took.count == 1
    (failed,) = [s for s in otel.spans() if s.status.status_code is StatusCode.ERROR]
    assert failed.attributes["db.operation.name"] == "checkpoint.lock.acquire"
    assert failed.attributes["error.type"] == "graphkeep.errors.LockNotAcquired"
    (lag,) = otel.points("graphkeep.watch.lag")
    assert lag.count == 3 and lag.min >= 0
    (watch,) = [s for s in otel.spans() if s.attributes["db.operation.name"] == "checkpoint.watch"]
    assert watch.status.status_code is StatusCode.UNSET  # closed early by the caller: no error


# -- a missing value ------------------------------------------------------------------------------


def remove_redis(url: str, marker: bytes) -> int:
    count = 0
    with redis_keys(url) as (client, keys):
        for key in keys:
            kind = client.type(key)
            if kind == b"string" and marker in (client.get(key) or b""):
                count += client.delete(key)
            elif kind == b"hash":
                doomed = [f for f, v in client.hgetall(key).items() if marker in v]
                if doomed:
                    count += client.hdel(key, *doomed)
    return int(count)


def remove_mongodb(url: str, marker: bytes) -> int:
    count = 0
    for collection, doc in mongodb_documents(url):
        if holds(doc, marker):
            count += collection.delete_one({"_id": doc["_id"]}).deleted_count
    return count


def remove_dynamodb(url: str, marker: bytes) -> int:
    client, table = dynamodb_client(url)
    keys = [
        k["AttributeName"] for k in client.describe_table(TableName=table)["Table"]["KeySchema"]
    ]
    count = 0
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            if holds(item, marker):
                client.delete_item(TableName=table, Key={k: item[k] for k in keys})
                count += 1
    return count


REMOVE = {
    "redis": remove_redis,
    "redis-cluster": remove_redis,
    "mongodb": remove_mongodb,
    "dynamodb": remove_dynamodb,
    "valkey": remove_redis,
    "valkey-cluster": remove_redis,
}


def test_a_missing_value_counts_one_resume_failure_as_missing_value(
    graphkeep_backend: str, graphkeep_url: str, otel: Otel, thread_id: str
) -> None:
    options: dict[str, Any] = {"compress": False} if graphkeep_backend == "dynamodb" else {}
    config = config_of(thread_id)
    with graphkeep.connect(graphkeep_url, telemetry=otel.option(), **options) as saver:
        # a list of 1 KB and more keeps its elements as records of their own (shared lists,
        # each element small enough to be stored uncompressed): the marker's goes missing
        filler = [f"line-{i:03d}-{uuid.uuid4().hex}" for i in range(40)]
        two_nodes().compile(checkpointer=saver).invoke({"log": [MARKER, *filler]}, config)
    assert REMOVE[graphkeep_backend](graphkeep_url, MARKER.encode()) >= 1
    # another saver reads it (DynamoDB's port keeps the elements it wrote: the writer would
    # not read them again)
    with graphkeep.connect(graphkeep_url, telemetry=otel.option(), **options) as saver:
        with pytest.raises(CorruptData):
            saver.get_tuple(config)

    (failure,) = otel.points("graphkeep.resume.failures")
    assert failure.value == 1
    # CorruptData carries its kind: a list element that is not stored is a missing value
    assert failure.attributes["graphkeep.reason"] == "missing_value"
    assert failure.attributes["error.type"] == "graphkeep.errors.CorruptData"
    assert failure.attributes["db.system.name"] == SYSTEMS[graphkeep_backend]


@pytest.mark.parametrize("kind", [b.param() for b in RESTARTABLE])
def test_a_server_killed_during_a_blocked_call_fails_that_calls_span(
    kind: Backend, otel: Otel, thread_id: str, tmp_path: Path
) -> None:
    # a watch waits for news (Redis blocks in XREAD on the thread's feed; MongoDB and DynamoDB
    # poll): the server dies while the call waits
    with PRIVATE[kind.name](tmp_path / "server") as server:
        prefix = f"gk-otel-{uuid.uuid4().hex[:8]}"
        with graphkeep.connect(server.url, key_prefix=prefix, telemetry=otel.option()) as saver:
            two_nodes().compile(checkpointer=saver).invoke({"log": ["hi"]}, config_of(thread_id))
            killer = threading.Timer(0.5, server.stop, args=(signal.SIGKILL,))
            killer.start()
            try:
                with pytest.raises(StorageUnavailable):
                    for _ in saver.watch(thread_id, timeout=30):
                        pass
            finally:
                killer.join()
            server.start()

    (watch,) = [s for s in otel.spans() if s.attributes["db.operation.name"] == "checkpoint.watch"]
    assert watch.status.status_code is StatusCode.ERROR
    assert watch.attributes["error.type"] == "graphkeep.errors.StorageUnavailable"
    assert watch.end_time - watch.start_time > 0.5 * 1e9  # it was killed mid-call
    (point,) = otel.points(
        "db.client.operation.duration",
        **{"db.operation.name": "checkpoint.watch", "error.type": watch.attributes["error.type"]},
    )
    assert point.count == 1
