"""``graphkeep check`` on LangGraph's own savers: ``SqliteSaver`` (a temp file) and
``PostgresSaver`` (``./dev services up postgres``, each test in a schema of its own).

Threads are written by real LangGraph graphs through LangGraph's savers (a DeltaChannel chat, a
subgraph, an interrupt); the saver's tables are then damaged with plain SQL, as an operator, a
crash or a bug would: a checkpoint row deleted, a blob row deleted, a write under a checkpoint
that does not exist, a payload overwritten. The command runs in-process through ``main([...])``.
"""

from __future__ import annotations

import hashlib
import operator
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from graphkeep.checkpoint.check import findings_of
from graphkeep.checkpoint.ids import id_at
from graphkeep.checkpoint.records import Inventory
from graphkeep.cli.foreign_check import SaverRows, open_saver_source, postgres_inventory
from tests.conftest import postgres_saver
from tests.test_check import (
    CountState,
    assert_seed_lost,
    chat,
    chat_graph,
    check_json,
    cli,
    config,
    count_graph,
    kinds,
    subgraph_graph,
)


def approve(state: CountState) -> CountState:
    """A node that waits on ``interrupt()``: its thread keeps a pending interrupt write."""
    return {"n": state["n"] + (1 if interrupt("approve?") else 0)}


@dataclass
class Saver:
    """One of LangGraph's savers under test: its URL, how to open it, and plain SQL on its
    tables (``%s`` placeholders; SQLite gets ``?``)."""

    kind: str
    url: str
    #: LangGraph's saver (with this serializer)
    open: Callable[..., AbstractContextManager[Any]]
    run_sql: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]

    @property
    def writes(self) -> str:
        return "writes" if self.kind == "sqlite" else "checkpoint_writes"

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        return self.run_sql(statement, params)

    def inventory(self, thread_id: str) -> Inventory:
        """What the check reads of the thread (its own queries)."""
        with open_saver_source(self.url, None) as source:
            found, _, _, _ = source.read_thread(thread_id, False)
        return found


def sqlite_saver(tmp_path: Path) -> Saver:
    path = tmp_path / "checkpoints.db"

    @contextmanager
    def opened(serde: Any = None) -> Iterator[Any]:
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            saver = SqliteSaver(conn, serde=serde)
            saver.setup()
            yield saver
        finally:
            conn.close()

    def run_sql(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path)
        try:
            with conn:
                return conn.execute(statement.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()

    with opened():
        pass  # the tables
    return Saver("sqlite", f"sqlite:///{path}", opened, run_sql)


def pg_saver(url: str) -> Saver:
    import psycopg

    @contextmanager
    def opened(serde: Any = None) -> Iterator[Any]:
        with postgres_saver(url) as saver:
            saver.setup()
            if serde is not None:
                saver.serde = serde
            yield saver

    def run_sql(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    with opened():
        pass
    return Saver("postgres", url, opened, run_sql)


@pytest.fixture(params=["sqlite", "postgres"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Saver:
    if request.param == "sqlite":
        return sqlite_saver(tmp_path)
    return pg_saver(request.getfixturevalue("postgres_url"))


@pytest.fixture
def postgres(postgres_url: str) -> Saver:
    return pg_saver(postgres_url)


def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# -- a clean saver ---------------------------------------------------------------------


def test_a_saver_written_by_real_graphs_is_clean(saver: Saver) -> None:
    tag = uuid.uuid4().hex[:6]
    threads = {name: f"{name}-{tag}" for name in ("chat", "sub", "wait")}
    with saver.open() as lg:
        chat(lg, threads["chat"], 5)
        sub = subgraph_graph(lg)
        sub.invoke({"log": ["x"]}, config(threads["sub"]))
        sub.invoke({"log": ["y"]}, config(threads["sub"]))
        count_graph(lg, approve).invoke({"n": 0}, config(threads["wait"]))
    # what the graphs wrote is what the check sees: namespaces, DeltaChannel history and seeds
    sub_inventory = saver.inventory(threads["sub"])
    chat_inventory = saver.inventory(threads["chat"])
    assert len({s.ns for s in sub_inventory.checkpoints}) >= 2
    assert any("messages" in s.needs_history for s in chat_inventory.checkpoints)
    assert any("messages" in s.present for s in chat_inventory.checkpoints)
    if saver.kind == "postgres":
        assert sub_inventory.blob_keys and any(
            "log" in s.present for s in sub_inventory.checkpoints
        )
    before = file_digest(saver.url[len("sqlite:///") :]) if saver.kind == "sqlite" else None
    queries = 2 if saver.kind == "sqlite" else 3
    code, report = check_json(saver.url, "--all")
    assert report["findings"] == []
    assert (code, report["errors"], report["warnings"]) == (0, 0, 0)
    assert (report["threads"], report["last_thread"]) == (3, max(threads.values()))
    assert report["checkpoints"] == sum(
        len(saver.inventory(t).checkpoints) for t in threads.values()
    )
    # a fixed number of queries per thread, one per page of threads
    assert report["scan"]["thread_requests_max"] == queries
    assert report["scan"]["requests"] == 3 * queries + 1
    code, report = check_json(saver.url, "--all", "--deep")
    assert (code, report["findings"]) == (0, [])
    assert report["scan"]["thread_requests_max"] == queries  # the same queries, with payloads
    code, out, err = cli("check", saver.url, "--thread", threads["chat"], threads["wait"])
    assert code == 0, err
    assert out.startswith("checked 2 thread(s)") and " 0 error(s), 0 warning(s);" in out
    if before is not None:  # mode=ro: the file is as it was
        assert file_digest(saver.url[len("sqlite:///") :]) == before
    else:  # a session where every transaction is read-only reads the same
        read_only = f"{saver.url}%20-cdefault_transaction_read_only%3Don"
        code, report = check_json(read_only, "--all", "--deep")
        assert (code, report["threads"], report["findings"]) == (0, 3, [])


class MapState(TypedDict):
    items: list[str]
    results: Annotated[list[str], operator.add]
    done: bool


def _fan_out(state: MapState) -> list[Send]:
    return [Send("work", {"item": item}) for item in state["items"]]


def _work(state: dict[str, str]) -> dict[str, list[str]]:
    return {"results": [state["item"].upper()]}


def _finish(state: MapState) -> dict[str, bool]:
    return {"done": True}


def map_reduce(lg: Any) -> Any:
    builder = StateGraph(MapState)
    builder.add_node("work", _work)
    builder.add_node("finish", _finish)
    builder.add_conditional_edges(START, _fan_out, ["work"])
    builder.add_edge("work", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=lg)


@task
def _double(x: int) -> int:
    return x * 2


def test_more_graph_shapes_are_clean(saver: Saver) -> None:
    """What LangGraph writes in other ways is no finding either: Send fan-outs, a
    ``durability="exit"`` run, ``update_state`` and a fork from an older checkpoint, a
    functional-API workflow interrupted and resumed, a DeltaChannel chat forked."""
    tag = uuid.uuid4().hex[:6]
    with saver.open() as lg:
        graph = map_reduce(lg)
        start = {"items": ["a", "b", "c"], "results": [], "done": False}
        graph.invoke(start, config(f"map-{tag}"))
        graph.invoke(start, config(f"exit-{tag}"), durability="exit")
        graph.invoke(start, config(f"async-{tag}"), durability="async")
        older = list(graph.get_state_history(config(f"map-{tag}")))[-2].config
        graph.update_state(older, {"results": ["forked"]}, as_node="work")
        graph.invoke(None, config(f"map-{tag}"))

        @entrypoint(checkpointer=lg)
        def workflow(x: int) -> dict[str, Any]:
            return {"y": _double(x).result(), "ok": interrupt("ok?")}

        workflow.invoke(3, config(f"func-{tag}"))
        workflow.invoke(Command(resume=True), config(f"func-{tag}"))
        chat(lg, f"chat-{tag}", 6)
        talk = chat_graph(lg)
        fork = list(talk.get_state_history(config(f"chat-{tag}")))[5].config
        talk.update_state(fork, {"turns": 0})
        talk.invoke(
            {"messages": [HumanMessage(content="again", id="again")]}, config(f"chat-{tag}")
        )
    code, report = check_json(saver.url, "--all")
    assert (code, report["threads"], report["findings"]) == (0, 5, [])
    code, report = check_json(saver.url, "--all", "--deep")
    assert (code, report["findings"]) == (0, [])


def test_all_pages_through_threads_in_id_order_and_resumes_after_one(saver: Saver) -> None:
    with saver.open() as lg:
        for name in ("a", "b", "c"):
            count_graph(lg).invoke({"n": 0}, config(f"resume-{name}"))
    code, report = check_json(saver.url, "--all", "--page-size", "2")
    assert (code, report["threads"], report["last_thread"]) == (0, 3, "resume-c")
    queries = 2 if saver.kind == "sqlite" else 3
    assert report["scan"]["requests"] == 3 * queries + 2
    _, report = check_json(saver.url, "--all", "--after", "resume-a")
    assert (report["threads"], report["last_thread"]) == (2, "resume-c")
    _, report = check_json(saver.url, "--all", "--after", "resume-c")
    assert (report["threads"], report["last_thread"]) == (0, None)


# -- each invariant, damaged with SQL ---------------------------------------------------


def test_a_deleted_middle_checkpoint_row_is_a_hole_in_the_history(saver: Saver) -> None:
    thread_id = f"hole-{uuid.uuid4().hex[:6]}"
    with saver.open() as lg:
        graph = count_graph(lg)
        for i in range(3):
            graph.invoke({"n": i}, config(thread_id))
    rows = saver.sql(
        "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints WHERE thread_id = %s"
        " AND checkpoint_ns = ''",
        thread_id,
    )
    with_writes = {
        r[0]
        for r in saver.sql(
            f"SELECT checkpoint_id FROM {saver.writes} WHERE thread_id = %s", thread_id
        )
    }
    children = {parent: cid for cid, parent in rows if parent}
    parents = dict(rows)
    # a middle checkpoint without writes: its loss leaves nothing orphaned, only the hole
    victim = next(
        cid
        for cid in sorted(parents)
        if cid in children and parents[cid] and cid not in with_writes
    )
    saver.sql(
        "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id = %s", thread_id, victim
    )
    code, report = check_json(saver.url, "--thread", thread_id)
    assert kinds(report) == [("missing_parent", "warning", children[victim], None)]
    assert victim in report["findings"][0]["detail"]
    assert code == 3
    code, report = check_json(saver.url, "--thread", thread_id, "--checkpoint-ns", "elsewhere")
    assert (code, report["checkpoints"], report["findings"]) == (0, 0, [])


def test_a_deleted_delta_channel_seed_leaves_its_walk_without_a_seed(saver: Saver) -> None:
    thread_id = f"seed-{uuid.uuid4().hex[:6]}"
    with saver.open() as lg:
        chat(lg, thread_id, 5)
    inv = saver.inventory(thread_id)
    by_id = {s.checkpoint_id: s for s in inv.checkpoints}
    head = max(
        (
            s
            for s in inv.checkpoints
            if "messages" in s.needs_history and "messages" not in s.present
        ),
        key=lambda s: s.checkpoint_id,
    )
    seed = by_id[head.parent_id or ""]
    while "messages" not in seed.present:
        seed = by_id[seed.parent_id or ""]
    assert seed.parent_id is not None, "the seed should not be the root"
    saver.sql(
        "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id = %s",
        thread_id,
        seed.checkpoint_id,
    )
    code, report = check_json(saver.url, "--thread", thread_id)
    assert_seed_lost(code, report, head.checkpoint_id, seed.checkpoint_id)


def test_a_write_under_a_checkpoint_that_does_not_exist_is_an_orphan(saver: Saver) -> None:
    thread_id = f"orphan-{uuid.uuid4().hex[:6]}"
    with saver.open() as lg:
        count_graph(lg).invoke({"n": 0}, config(thread_id))
    missing = id_at(time.time() - 7200)[:-12] + uuid.uuid4().hex[:12]
    value = "value" if saver.kind == "sqlite" else "blob"
    insert = (
        f"INSERT INTO {saver.writes} (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,"
        f" idx, channel, type, {value}) VALUES (%s, '', %s, 'task-1', '', 0, 'n', 'msgpack', %s)"
    )
    saver.sql(insert, thread_id, missing, b"\x29")
    # and a thread that has nothing but such a write: --all lists it too
    lonely = f"lonely-{uuid.uuid4().hex[:6]}"
    saver.sql(insert, lonely, missing, b"\x29")
    code, report = check_json(saver.url, "--thread", thread_id)
    assert kinds(report) == [("orphan_writes", "warning", missing, None)]
    assert code == 3
    code, report = check_json(saver.url, "--all")
    assert code == 3 and report["threads"] == 2
    assert sorted((f["thread_id"], f["kind"]) for f in report["findings"]) == sorted(
        [(thread_id, "orphan_writes"), (lonely, "orphan_writes")]
    )
    # --repair does not write to LangGraph's savers: a usage error, nothing deleted
    code, out, err = cli("check", saver.url, "--thread", thread_id, "--repair", "--yes")
    assert (code, out) == (2, "")
    assert "--repair does not write to LangGraph's SQLite or Postgres savers" in err
    assert saver.inventory(thread_id).write_keys >= {("", missing)}


def test_deep_reports_a_payload_the_serializer_cannot_decode(saver: Saver) -> None:
    thread_id = f"deep-{uuid.uuid4().hex[:6]}"
    with saver.open() as lg:
        sub = subgraph_graph(lg)
        sub.invoke({"log": ["x"]}, config(thread_id))
        sub.invoke({"log": ["y"]}, config(thread_id))
    if saver.kind == "sqlite":
        # the newest root checkpoint's payload: 0xc1 is a byte msgpack never uses
        ((victim,),) = saver.sql(
            "SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = %s"
            " AND checkpoint_ns = ''",
            thread_id,
        )
        saver.sql(
            "UPDATE checkpoints SET checkpoint = %s WHERE thread_id = %s AND checkpoint_id = %s",
            b"\xc1",
            thread_id,
            victim,
        )
        # and the oldest one's metadata, which SqliteSaver reads with json.loads
        ((first,),) = saver.sql(
            "SELECT MIN(checkpoint_id) FROM checkpoints WHERE thread_id = %s", thread_id
        )
        saver.sql(
            "UPDATE checkpoints SET metadata = %s WHERE thread_id = %s AND checkpoint_id = %s",
            b"{not json",
            thread_id,
            first,
        )
        expected = sorted(
            [("undecodable", "error", victim, None), ("undecodable", "error", first, None)]
        )
    else:
        # a value of the root namespace's newest log version, and the newest checkpoint naming it
        ((version, victim),) = saver.sql(
            "SELECT checkpoint -> 'channel_versions' ->> 'log', checkpoint_id FROM checkpoints"
            " WHERE thread_id = %s AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
            thread_id,
        )
        saver.sql(
            "UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = %s AND checkpoint_ns = ''"
            " AND channel = 'log' AND version = %s",
            b"\xc1",
            thread_id,
            version,
        )
        expected = [("undecodable", "error", victim, "log")]
    code, report = check_json(saver.url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])  # without --deep no payload is read
    code, report = check_json(saver.url, "--thread", thread_id, "--deep")
    assert kinds(report) == expected
    assert code == 1


def test_deep_reports_plaintext_in_an_encrypted_deployment(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``LANGGRAPH_AES_KEY`` every payload the serializer wrote must be encrypted; what
    LangGraph's savers keep as JSON (the metadata, Postgres' checkpoint JSONB with its inline
    primitives) is not the serializer's and is not reported."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef0123456789abcdef")
    tag = uuid.uuid4().hex[:6]
    sealed, plain = f"sealed-{tag}", f"plain-{tag}"
    with saver.open(EncryptedSerializer.from_pycryptodome_aes()) as lg:
        chat(lg, sealed, 4)
        subgraph_graph(lg).invoke({"log": ["x"]}, config(sealed))
    with saver.open() as lg:  # a process without the key
        count_graph(lg).invoke({"n": 0}, config(plain))
    code, report = check_json(saver.url, "--thread", sealed, plain, "--deep")
    assert {(f["thread_id"], f["kind"]) for f in report["findings"]} == {(plain, "plaintext")}
    assert code == 1
    # without the key the sealed thread cannot be decoded: said, not hidden
    monkeypatch.delenv("LANGGRAPH_AES_KEY")
    code, report = check_json(saver.url, "--thread", sealed, "--deep")
    assert code == 1 and {f["kind"] for f in report["findings"]} == {"undecodable"}


# -- PostgresSaver's values ------------------------------------------------------------


def test_a_deleted_blob_row_is_missing_at_every_checkpoint_naming_it(postgres: Saver) -> None:
    thread_id = f"blob-{uuid.uuid4().hex[:6]}"
    with postgres.open() as lg:
        sub = subgraph_graph(lg)
        sub.invoke({"log": ["x"]}, config(thread_id))
        sub.invoke({"log": ["y"]}, config(thread_id))
    ((version,),) = postgres.sql(
        "SELECT checkpoint -> 'channel_versions' ->> 'log' FROM checkpoints"
        " WHERE thread_id = %s AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
        thread_id,
    )
    naming = [
        r[0]
        for r in postgres.sql(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''"
            " AND checkpoint -> 'channel_versions' ->> 'log' = %s",
            thread_id,
            version,
        )
    ]
    assert naming
    postgres.sql(
        "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = ''"
        " AND channel = 'log' AND version = %s",
        thread_id,
        version,
    )
    # LangGraph reads the state without the value and says nothing
    with postgres.open() as lg:
        state = lg.get_tuple(config(thread_id))
    assert state is not None and "log" not in state.checkpoint["channel_values"]
    code, report = check_json(postgres.url, "--thread", thread_id)
    assert kinds(report) == sorted(("missing_value", "error", cid, "log") for cid in naming)
    assert code == 1
    # a blob row no checkpoint names is an orphan value
    postgres.sql(
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
        " VALUES (%s, '', 'log', '99.5', 'msgpack', %s)",
        thread_id,
        b"\x90",
    )
    code, report = check_json(postgres.url, "--thread", thread_id)
    assert ("orphan_values", "warning", None, "log") in kinds(report)
    assert code == 1


def test_postgres_rows_an_inline_value_seeds_a_delta_walk_and_a_lost_snapshot_is_missing() -> None:
    """The mapping of PostgresSaver's rows, on rows as LangGraph writes them: an inline
    primitive stops a DeltaChannel's walk as it stops LangGraph's (``inline is not None``),
    and is never a missing value; a snapshot's inline ``true`` needs its blob."""
    rows = [
        SaverRows("", "1", None, {"m": "1"}, ["m"], {}, ["m"]),
        # a hole below "3", whose inline (migrated, plain) value is the walk's seed
        SaverRows("", "3", "2", {"m": "3"}, ["m"], {"m": "value"}, []),
        SaverRows("", "4", "3", {"m": "4"}, ["m"], {}, ["m"]),
        # a snapshot marker whose blob row is gone
        SaverRows("", "5", "4", {"m": "5"}, ["m"], {"m": "marker"}, []),
        SaverRows("", "6", "5", {"m": "6"}, ["m"], {}, ["m"]),
    ]
    found = findings_of("t", postgres_inventory(rows, set(), set()))
    assert sorted((f.kind, f.checkpoint_id, f.channel) for f in found.findings) == [
        ("missing_parent", "3", None),
        ("missing_value", "5", "m"),
    ]
    assert found.orphan_values == []


def test_every_blob_row_of_a_run_deleted_alone_is_a_missing_value(postgres: Saver) -> None:
    """Without a value-presence flag in PostgresSaver's rows, the check infers which blobs must
    exist (``updated_channels``, the input, snapshot markers): on threads of ordinary runs
    (a DeltaChannel chat, a subgraph, a one-node graph), each blob row deleted alone is
    found, and restoring it makes the thread clean again."""
    tag = uuid.uuid4().hex[:6]
    threads = [f"chat-{tag}", f"sub-{tag}", f"count-{tag}"]
    with postgres.open() as lg:
        chat(lg, threads[0], 4)
        subgraph_graph(lg).invoke({"log": ["x"]}, config(threads[1]))
        count_graph(lg).invoke({"n": 1}, config(threads[2]))
    rows = postgres.sql(
        "SELECT thread_id, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs"
        " WHERE thread_id = ANY(%s)",
        threads,
    )
    assert {r[2] for r in rows} >= {"__start__", "messages", "log"}
    for thread_id, ns, channel, version, type_, blob in rows:
        key = (thread_id, ns, channel, version)
        postgres.sql(
            "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s"
            " AND channel = %s AND version = %s",
            *key,
        )
        code, report = check_json(postgres.url, "--thread", thread_id)
        found = [(f["kind"], f["ns"], f["channel"]) for f in report["findings"]]
        assert code == 1 and ("missing_value", ns, channel) in found, key
        assert {f["kind"] for f in report["findings"]} == {"missing_value"}, key
        postgres.sql(
            "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            *key,
            type_,
            blob,
        )
    code, report = check_json(postgres.url, "--all")
    assert (code, report["threads"], report["findings"]) == (0, 3, [])


def test_postgres_queries_fetch_no_payload_without_deep(postgres: Saver) -> None:
    """PostgreSQL's own plan of each query (``EXPLAIN VERBOSE``): the writes and blobs queries
    output no ``blob`` or ``type`` column, and the checkpoints query no whole ``checkpoint`` or
    ``metadata`` column (only what is computed from them in the server); each thread's rows
    carry no value."""
    import json

    from graphkeep.cli.foreign_check import POSTGRES_THREAD_QUERIES

    thread_id = f"plan-{uuid.uuid4().hex[:6]}"
    with postgres.open() as lg:
        chat(lg, thread_id, 2)
    whole = re.compile(r"^(\w+\.)?(checkpoint|metadata|blob|type)$")
    for name, named in POSTGRES_THREAD_QUERIES.items():
        query = named.replace("%(thread)s", "%s")
        ((plan,),) = postgres.sql(f"EXPLAIN (VERBOSE, FORMAT JSON) {query}", thread_id)
        outputs = plan[0]["Plan"].get("Output", [])
        assert outputs and not [o for o in outputs if whole.match(o)], (name, outputs)
        if name != "checkpoints":
            assert not re.search(r"\.(blob|type)\b", json.dumps(plan)), name
    rows = postgres.sql(
        POSTGRES_THREAD_QUERIES["checkpoints"].replace("%(thread)s", "%s"), thread_id
    )
    text = json.dumps(rows, default=str)
    assert "question 1" not in text and "answer 1" not in text  # the chat's messages


# -- usage -----------------------------------------------------------------------------


def test_a_missing_sqlite_file_or_tables_are_not_found(tmp_path: Path, postgres_url: str) -> None:
    code, out, err = cli("check", f"sqlite:///{tmp_path / 'none.db'}", "--all")
    assert (code, out) == (4, "") and "no SQLite database" in err
    assert not (tmp_path / "none.db").exists()
    sqlite3.connect(tmp_path / "empty.db").close()
    code, out, err = cli("check", f"sqlite:///{tmp_path / 'empty.db'}", "--all")
    assert (code, out) == (4, "") and "no LangGraph checkpoint tables" in err
    code, out, err = cli("check", postgres_url, "--all")
    assert (code, out) == (4, "") and "no LangGraph checkpoint tables" in err


def test_an_unreachable_postgres_server_is_one_line_and_exit_2() -> None:
    code, out, err = cli("check", "postgresql://graphkeep:secret@127.0.0.1:1/none", "--all")
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and "secret" not in err
