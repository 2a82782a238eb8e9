"""``graphkeep health`` and :mod:`graphkeep.checkpoint.health` on real servers: every backend
(``graphkeep_url``: Redis, Redis Cluster, MongoDB, DynamoDB) and LangGraph's SqliteSaver and
PostgresSaver (on ``./dev services up postgres``: ``GRAPHKEEP_POSTGRES_URL`` or
``POSTGRES_URL``, each test in a schema of its own).

Threads are made by real LangGraph graphs: one waiting on ``interrupt()``, one interrupted and
resumed, one runaway (many checkpoints), one calm, and one whose only checkpoint is two hours
old. The command runs in-process through ``main([...])``; ``--format prometheus`` is checked
with ``promtool check metrics`` (Debian's prometheus package, see test_prometheus_rules.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphkeep
from graphkeep.checkpoint.health import HealthWindow, afleet_health, fleet_health, id_at, id_time
from graphkeep.cli import main
from tests.conftest import postgres_saver

RUNAWAY_INVOKES = 8  # a one-node graph writes 3 checkpoints per invoke: 24
RUNAWAY_LIMIT = 20


class State(TypedDict):
    n: int


def _ask(state: State) -> State:
    answer = interrupt("approve?")
    return {"n": state["n"] + (1 if answer else 0)}


def _step(state: State) -> State:
    return {"n": state["n"] + 1}


def _graph(node: Any, saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=saver)


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


@dataclass
class Fleet:
    interrupted: str
    resumed: str
    runaway: str
    calm: str
    old: str
    runaway_checkpoints: int
    old_ts: float


def build_fleet(saver: BaseCheckpointSaver[Any]) -> Fleet:
    tag = uuid.uuid4().hex[:6]
    fleet = Fleet(
        f"waiting-{tag}", f"resumed-{tag}", f"loop-{tag}", f"calm-{tag}", f"old-{tag}", 0, 0.0
    )
    asking = _graph(_ask, saver)
    asking.invoke({"n": 0}, _config(fleet.interrupted))
    asking.invoke({"n": 0}, _config(fleet.resumed))
    asking.invoke(Command(resume=True), _config(fleet.resumed))
    stepping = _graph(_step, saver)
    for i in range(RUNAWAY_INVOKES):
        stepping.invoke({"n": i}, _config(fleet.runaway))
    stepping.invoke({"n": 0}, _config(fleet.calm))
    # LangGraph's own view of what waits on an interrupt: exactly the first thread
    assert asking.get_state(_config(fleet.interrupted)).interrupts
    assert not asking.get_state(_config(fleet.resumed)).interrupts
    fleet.runaway_checkpoints = len(list(saver.list(_config(fleet.runaway))))
    assert fleet.runaway_checkpoints == 3 * RUNAWAY_INVOKES
    # a checkpoint made two hours ago: a uuid6 id of that time (low bits random)
    fleet.old_ts = time.time() - 7200
    checkpoint = empty_checkpoint()
    checkpoint["id"] = id_at(fleet.old_ts)[:-12] + uuid.uuid4().hex[:12]
    saver.put(
        {"configurable": {"thread_id": fleet.old, "checkpoint_ns": ""}},
        checkpoint,
        {"source": "input", "step": -1, "parents": {}},
        {},
    )
    return fleet


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def health_json(url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli("health", url, "--json", "--runaway", f"{RUNAWAY_LIMIT}/10m", *extra)
    assert code in (0, 3), err
    report: dict[str, Any] = json.loads(out)
    return code, report


def check_report(report: dict[str, Any], fleet: Fleet, *, sized: bool = True) -> None:
    assert report["threads_stored"] == 5
    assert report["threads_active"] == 4  # all but the two-hour-old one
    assert report["threads_interrupted"] == 1
    assert report["interrupted"] == [fleet.interrupted]
    assert report["threads_runaway"] == 1
    assert report["runaway"] == [
        {"thread_id": fleet.runaway, "checkpoints": fleet.runaway_checkpoints}
    ]
    assert report["threads_untimed"] == 0
    if sized:
        assert report["storage_bytes"] > 0
    else:
        assert report["storage_bytes"] is None
    oldest = report["oldest_activity"]
    assert oldest is not None and oldest.startswith(
        time.strftime("%Y-%m-%dT%H", time.gmtime(fleet.old_ts))
    )
    assert report["newest_activity"] >= oldest
    assert report["scan"]["requests"] > 0


def sized_backend(url: str) -> bool:
    """Every backend but DynamoDB on moto reports its bytes: DynamoDB's are its table's
    ``TableSizeBytes``, which moto always reports as 0 (no figure yet, for a table of items)."""
    return not url.startswith("dynamodb")


@pytest.fixture
def fleet_url(graphkeep_url: str) -> Iterator[tuple[str, Fleet]]:
    with graphkeep.connect(graphkeep_url) as saver:
        fleet = build_fleet(saver)
    yield graphkeep_url, fleet


# -- every graphkeep backend -----------------------------------------------------------


def test_health_counts_active_interrupted_runaway_and_stored_threads(
    fleet_url: tuple[str, Fleet],
) -> None:
    url, fleet = fleet_url
    code, report = health_json(url)
    assert code == 0
    check_report(report, fleet, sized=sized_backend(url))
    assert report["window_seconds"] == 3600
    assert report["runaway_threshold"] == {"checkpoints": RUNAWAY_LIMIT, "period_seconds": 600}
    assert report["violations"] == []


def test_a_window_that_misses_every_checkpoint_counts_no_thread_active(
    fleet_url: tuple[str, Fleet],
) -> None:
    url, fleet = fleet_url
    code, out, err = cli("health", url, "--json", "--window", "3h", "--runaway", "1000/10m")
    assert code == 0, err
    report = json.loads(out)
    assert report["threads_active"] == 5  # the old thread is within 3 h
    assert report["threads_runaway"] == 0  # 24 checkpoints are not more than 1000


def check_thresholds(url: str) -> None:
    """The fleet's thresholds (1 runaway, 1 interrupted, 4 active): crossed, exit 3."""
    code, report = health_json(url, "--max-runaway", "0")
    assert code == 3
    assert report["violations"] == ["1 runaway thread(s) > 0"]
    code, report = health_json(url, "--max-interrupted", "1", "--max-runaway", "1")
    assert code == 0 and report["violations"] == []
    code, report = health_json(url, "--max-interrupted", "0", "--max-active", "3")
    assert code == 3
    assert report["violations"] == ["1 interrupted thread(s) > 0", "4 active thread(s) > 3"]


def test_thresholds_on_the_command_line_exit_3_when_crossed(fleet_url: tuple[str, Fleet]) -> None:
    url, fleet = fleet_url
    check_thresholds(url)
    code, out, err = cli("health", url, "--runaway", f"{RUNAWAY_LIMIT}/10m", "--max-threads", "4")
    assert code == 3
    assert f"RUNAWAY {fleet.runaway}: {fleet.runaway_checkpoints} checkpoints in 10m" in out
    assert "THRESHOLD 5 threads thread(s) > 4" in out


def test_prometheus_format_passes_promtool_and_carries_the_numbers(
    fleet_url: tuple[str, Fleet],
) -> None:
    url, fleet = fleet_url
    code, out, err = cli(
        "health", url, "--format", "prometheus", "--runaway", f"{RUNAWAY_LIMIT}/10m",
        "--capacity", "1GiB", "--max-runaway", "0",
    )  # fmt: skip
    assert code == 3
    assert "threshold crossed: 1 runaway thread(s) > 0" in err
    promtool_check(out)
    backend = url.split("://", 1)[0]
    values = samples(out)
    assert values[f'graphkeep_threads_stored{{backend="{backend}"}}'] == 5
    assert values[f'graphkeep_threads_active{{backend="{backend}"}}'] == 4
    assert values[f'graphkeep_threads_interrupted{{backend="{backend}"}}'] == 1
    assert values[f'graphkeep_threads_runaway{{backend="{backend}"}}'] == 1
    assert values[f'graphkeep_storage_capacity_bytes{{backend="{backend}"}}'] == 2**30
    runaway = (
        f'graphkeep_runaway_thread_checkpoints{{backend="{backend}",thread_id="{fleet.runaway}"}}'
    )
    assert values[runaway] == fleet.runaway_checkpoints
    if sized_backend(url):
        assert values[f'graphkeep_storage_bytes{{backend="{backend}"}}'] > 0
    else:
        assert not any(k.startswith("graphkeep_storage_bytes") for k in values)
    for name in ("graphkeep_threads_active", "graphkeep_threads_runaway"):
        assert f"# HELP {name} " in out and f"# TYPE {name} gauge" in out


def test_fleet_health_from_a_saver_matches_the_command(fleet_url: tuple[str, Fleet]) -> None:
    url, fleet = fleet_url
    _, report = health_json(url)
    with graphkeep.connect(url) as saver:
        health = fleet_health(saver, HealthWindow(3600, RUNAWAY_LIMIT, 600))
    assert health.threads_active == report["threads_active"] == 4
    assert health.interrupted_ids == [fleet.interrupted]
    assert [(r.thread_id, r.checkpoints) for r in health.runaway] == [
        (fleet.runaway, fleet.runaway_checkpoints)
    ]
    assert health.oldest_activity == pytest.approx(fleet.old_ts, abs=1)


def test_the_async_scan_reports_the_same(fleet_url: tuple[str, Fleet]) -> None:
    url, fleet = fleet_url

    async def scan() -> Any:
        async with graphkeep.aconnect(url) as saver:
            return await afleet_health(saver, HealthWindow(3600, RUNAWAY_LIMIT, 600))

    health = asyncio.run(scan())
    assert (health.threads_stored, health.threads_active, health.threads_interrupted) == (5, 4, 1)
    assert health.threads_runaway == 1


def test_an_interrupt_inside_a_subgraph_counts_its_thread_interrupted(graphkeep_url: str) -> None:
    """LangGraph records a subgraph's interrupt on the parent's task too: the root namespace's
    latest checkpoint has the pending interrupt, as ``get_state`` reports it."""
    child = StateGraph(State)
    child.add_node("ask", _ask)
    child.add_edge(START, "ask")
    child.add_edge("ask", END)
    with graphkeep.connect(graphkeep_url) as saver:
        graph = _graph(child.compile(), saver)
        graph.invoke({"n": 0}, _config("parent"))
        assert graph.get_state(_config("parent")).interrupts
        namespaces = {
            t.config["configurable"]["checkpoint_ns"] for t in saver.list(_config("parent"))
        }
        assert len(namespaces) == 2 and "" in namespaces  # the root's and the subgraph's
        health = fleet_health(saver)
        assert health.interrupted_ids == ["parent"]
        graph.invoke(Command(resume=True), _config("parent"))
        assert not graph.get_state(_config("parent")).interrupts
        assert fleet_health(saver).interrupted_ids == []


def test_the_scan_sends_a_fixed_number_of_requests_per_thread(graphkeep_url: str) -> None:
    """The cost is linear in threads and does not grow with checkpoints: a thread of 24
    checkpoints costs what a thread of 3 does. Redis pipelines one script per thread and
    MongoDB reads a batch of threads in at most four requests: one more thread adds none;
    DynamoDB reads an active thread with two Queries."""
    with graphkeep.connect(graphkeep_url) as saver:
        stepping = _graph(_step, saver)
        stepping.invoke({"n": 0}, _config("one"))
        first = fleet_health(saver)
        stepping.invoke({"n": 0}, _config("two"))
        second = fleet_health(saver)
        for i in range(RUNAWAY_INVOKES):
            stepping.invoke({"n": i}, _config("two"))
        third = fleet_health(saver)
    per_thread = second.requests - first.requests
    if graphkeep_url.startswith("dynamodb"):
        assert per_thread == 2  # an active thread: its commits, its root's write indexes
    else:
        assert per_thread == 0  # one more thread in the same batch
    assert third.requests == second.requests


@pytest.mark.dynamodb
def test_dynamodb_bytes_are_the_tables_size_and_unknown_before_its_first_figure() -> None:
    """One ``DescribeTable`` per scan: an empty table holds 0 bytes; a table of items whose
    ``TableSizeBytes`` is still 0 (DynamoDB's first six hours; moto, always) is unknown, never
    reported as empty. (Only a real DynamoDB shows a figure above 0.)"""
    import boto3

    endpoint = os.environ["DYNAMODB_ENDPOINT_URL"]
    table = f"gk-health-{uuid.uuid4().hex[:8]}"
    url = f"dynamodb://{table}?region=us-east-1&endpoint_url={endpoint}"
    try:
        with graphkeep.connect(url) as saver:
            empty = fleet_health(saver)
            _graph(_step, saver).invoke({"n": 0}, _config("one"))
            written = fleet_health(saver)
        assert (empty.threads_stored, empty.storage_bytes) == (0, 0)
        assert (written.threads_stored, written.storage_bytes) == (1, None)
        assert written.requests == empty.requests + 2  # the thread's two Queries, no more
    finally:
        client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
        client.delete_table(TableName=table)
        client.close()


# -- LangGraph's SqliteSaver -----------------------------------------------------------


@pytest.fixture
def sqlite_fleet(tmp_path: Path) -> Iterator[tuple[str, Fleet]]:
    path = tmp_path / "checkpoints.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        fleet = build_fleet(SqliteSaver(conn))
    finally:
        conn.close()
    yield f"sqlite:///{path}", fleet


def test_health_on_langgraphs_sqlite_saver(sqlite_fleet: tuple[str, Fleet]) -> None:
    url, fleet = sqlite_fleet
    code, report = health_json(url)
    assert code == 0
    check_report(report, fleet)
    assert report["scan"]["requests"] == 5
    code, out, _ = cli("health", url, "--format", "prometheus", "--runaway", "20/10m")
    assert code == 0
    promtool_check(out)
    assert samples(out)['graphkeep_threads_interrupted{backend="sqlite"}'] == 1
    code, report = health_json(url, "--max-runaway", "0")
    assert code == 3


def test_health_on_a_missing_sqlite_file_is_not_found(tmp_path: Path) -> None:
    code, _, err = cli("health", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 4
    assert "no SQLite database" in err


# -- LangGraph's PostgresSaver ---------------------------------------------------------


@pytest.fixture
def postgres_fleet(postgres_url: str) -> tuple[str, Fleet]:
    with postgres_saver(postgres_url) as saver:
        saver.setup()
        fleet = build_fleet(saver)
    return postgres_url, fleet


def postgres_tables_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size('checkpoints') + pg_total_relation_size"
            "('checkpoint_blobs') + pg_total_relation_size('checkpoint_writes')"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_health_on_langgraphs_postgres_saver(postgres_fleet: tuple[str, Fleet]) -> None:
    url, fleet = postgres_fleet
    code, report = health_json(url)
    assert code == 0
    check_report(report, fleet)
    assert report["scan"]["requests"] == 4  # whatever the number of threads
    assert report["storage_bytes"] == postgres_tables_bytes(url)
    assert report["violations"] == []
    assert "graphkeep:graphkeep@" not in report["url"]  # the password is masked


def test_postgres_health_as_prometheus_text_and_text(postgres_fleet: tuple[str, Fleet]) -> None:
    url, fleet = postgres_fleet
    code, out, err = cli(
        "health", url, "--format", "prometheus", "--runaway", f"{RUNAWAY_LIMIT}/10m",
        "--capacity", "1GiB",
    )  # fmt: skip
    assert code == 0, err
    promtool_check(out)
    values = samples(out)
    assert values['graphkeep_threads_stored{backend="postgresql"}'] == 5
    assert values['graphkeep_threads_active{backend="postgresql"}'] == 4
    assert values['graphkeep_threads_interrupted{backend="postgresql"}'] == 1
    assert values['graphkeep_threads_runaway{backend="postgresql"}'] == 1
    assert values['graphkeep_storage_bytes{backend="postgresql"}'] > 0
    assert values['graphkeep_storage_capacity_bytes{backend="postgresql"}'] == 2**30
    assert values['graphkeep_health_scan_requests{backend="postgresql"}'] == 4
    runaway = (
        f'graphkeep_runaway_thread_checkpoints{{backend="postgresql",thread_id="{fleet.runaway}"}}'
    )
    assert values[runaway] == fleet.runaway_checkpoints
    code, out, err = cli("health", url, "--runaway", f"{RUNAWAY_LIMIT}/10m")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        f"threads: 5 stored, 4 active in the last 1h, 1 interrupted, 1 runaway"
        f" (> {RUNAWAY_LIMIT} checkpoints in 10m)"
    )
    assert lines[1].startswith("stored: ") and lines[1] != "stored: unknown"
    assert lines[3].startswith("scan: 4 request(s), ")
    assert f"RUNAWAY {fleet.runaway}: {fleet.runaway_checkpoints} checkpoints in 10m" in lines
    assert f"interrupted: {fleet.interrupted}" in lines


def test_postgres_thresholds_exit_3_when_crossed(postgres_fleet: tuple[str, Fleet]) -> None:
    url, fleet = postgres_fleet
    check_thresholds(url)
    code, out, err = cli(
        "health", url, "--format", "prometheus", "--runaway", f"{RUNAWAY_LIMIT}/10m",
        "--max-bytes", "1",
    )  # fmt: skip
    assert code == 3
    assert "graphkeep: threshold crossed: " in err and "stored > 1 B" in err
    code, report = health_json(url, "--window", "3h", "--max-active", "4")
    assert code == 3 and report["threads_active"] == 5  # the old thread is within 3 h


def test_postgres_health_counts_an_interrupt_inside_a_subgraph(postgres_url: str) -> None:
    child = StateGraph(State)
    child.add_node("ask", _ask)
    child.add_edge(START, "ask")
    child.add_edge("ask", END)
    with postgres_saver(postgres_url) as saver:
        saver.setup()
        graph = _graph(child.compile(), saver)
        graph.invoke({"n": 0}, _config("parent"))
        assert graph.get_state(_config("parent")).interrupts
        _, report = health_json(postgres_url)
        assert report["interrupted"] == ["parent"] and report["threads_stored"] == 1
        graph.invoke(Command(resume=True), _config("parent"))
        _, report = health_json(postgres_url)
        assert report["interrupted"] == []


def test_postgres_health_reads_no_payload_column(postgres_fleet: tuple[str, Fleet]) -> None:
    """PostgreSQL's own plan of each query (``EXPLAIN VERBOSE``): no node outputs or filters
    on a ``checkpoint``, ``metadata``, ``blob`` or ``type`` column, so no payload is fetched
    or de-TOASTed, and no plan reads another table than the saver's three."""
    import psycopg

    from graphkeep.cli.health import POSTGRES_QUERIES, POSTGRES_TABLES

    url, _ = postgres_fleet
    params = {"above": id_at(time.time() - 3600), "limit": 10_000, "interrupt": -3}
    payload = re.compile(r"\b\w+\.(checkpoint|metadata|blob|type)\b")
    with psycopg.connect(url) as conn:
        for name, query in POSTGRES_QUERIES.items():
            row = conn.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {query}", params).fetchone()
            assert row is not None
            nodes = [row[0][0]["Plan"]]
            relations = set()
            while nodes:
                node = nodes.pop()
                nodes.extend(node.get("Plans", []))
                if "Relation Name" in node:
                    relations.add(node["Relation Name"])
                # every expression of the node (output, filters, join and sort keys ...)
                text = json.dumps({k: v for k, v in node.items() if k != "Plans"})
                assert not payload.search(text), (name, text)
            assert relations <= set(POSTGRES_TABLES), (name, relations)


def test_health_on_a_postgres_database_without_langgraphs_tables_is_not_found(
    postgres_url: str,
) -> None:
    code, out, err = cli("health", postgres_url, "--json")
    assert code == 4
    assert out == ""
    assert err.count("\n") == 1 and "no LangGraph checkpoint tables" in err


# -- faults and bad input --------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0",
        "mongodb://127.0.0.1:1/app?serverSelectionTimeoutMS=500",
        "dynamodb://app?region=us-east-1&endpoint_url=http://127.0.0.1:1",
        "postgresql://graphkeep:graphkeep@127.0.0.1:1/graphkeep?connect_timeout=5",
    ],
    ids=["redis", "mongodb", "dynamodb", "postgres"],
)
def test_an_unreachable_server_is_one_line_and_exit_2(url: str) -> None:
    code, out, err = cli("health", url, "--json")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("graphkeep: error: ")
    assert "unavailable" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--window", "soon"],
        ["--window", "0h"],
        ["--runaway", "1000"],
        ["--runaway", "many/10m"],
        ["--runaway", "10/forever"],
        ["--json", "--format", "prometheus"],
        ["--format", "xml"],
        ["--max-runaway", "-1"],
    ],
)
def test_bad_options_are_usage_errors(args: list[str]) -> None:
    code, out, err = cli("health", "redis://127.0.0.1:1/0", *args)
    assert code == 2
    assert out == ""
    assert "usage" in err or "exclude each other" in err


def test_id_at_is_a_lower_bound_of_the_ids_langgraph_makes_from_then_on() -> None:
    from langgraph.checkpoint.base.id import uuid6

    before = time.time()
    made = str(uuid6())
    assert id_at(before - 0.001) < made < id_at(time.time() + 0.001)
    assert id_time(made) == pytest.approx(before, abs=1)
    assert id_time(id_at(1_800_000_000.5)) == pytest.approx(1_800_000_000.5, abs=1e-6)
    assert id_time("not-a-uuid") is None


# -- helpers ---------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\}) (\S+)$")


def samples(text: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def promtool_check(text: str) -> None:
    promtool = shutil.which(os.environ.get("GRAPHKEEP_PROMTOOL") or "promtool")
    if promtool is None:
        pytest.fail("promtool not found: `./dev test` installs Debian's prometheus", pytrace=False)
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr


def test_the_fleet_gauges_carry_the_names_the_otel_prometheus_exporter_gives_them() -> None:
    """An in-process observer publishing FLEET_GAUGES through the OpenTelemetry Prometheus
    exporter and ``--format prometheus`` write the same names (the exporter turns dots into
    underscores and appends ``_bytes`` for ``By`` and ``_seconds`` for ``s``; ``{thread}``
    adds nothing), so one set of rules serves both."""
    from graphkeep.checkpoint.health import FLEET_GAUGES, FleetHealth
    from graphkeep.cli.health import GAUGES

    names = {g.name: g.prometheus_name for g in FLEET_GAUGES}
    assert names["graphkeep.threads.active"] == "graphkeep_threads_active"
    assert names["graphkeep.storage"] == "graphkeep_storage_bytes"
    assert names["graphkeep.health.scan.duration"] == "graphkeep_health_scan_duration_seconds"
    assert [n for n, _, _ in GAUGES] == [
        *list(names.values())[:6],
        "graphkeep_storage_capacity_bytes",
        *list(names.values())[6:],
    ]
    health = FleetHealth(1.0, HealthWindow(), 2, 1, 0, [], None, None, None)
    assert {g.field: g.value(health) for g in FLEET_GAUGES}["window_seconds"] == 3600.0
