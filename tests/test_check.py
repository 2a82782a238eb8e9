"""``graphkeep check`` and :mod:`graphkeep.checkpoint.check` on real servers: every backend
(``graphkeep_url``: Redis, Redis Cluster, MongoDB, DynamoDB).

Threads are written by real LangGraph graphs (a DeltaChannel chat, a subgraph over a shared
list, an interrupt, a pruned DeltaChannel chat); the store is then damaged with the backend's
own client (redis-py, pymongo, boto3): a checkpoint record or a value removed, as a crash, a
bug or an operator would. The command runs in-process through ``main([...])``.
"""

from __future__ import annotations

import io
import json
import operator
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import graphkeep
import graphkeep.checkpoint.check as check_module
import graphkeep.checkpoint.maintenance as maintenance_module
from graphkeep.checkpoint.check import Finding, findings_of
from graphkeep.checkpoint.ids import id_at
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL
from graphkeep.checkpoint.records import (
    BlobRecord,
    Inventory,
    Summary,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.cli import main
from graphkeep.errors import CorruptData, UnsafePrune
from tests.conftest import REDIS_FAMILY
from tests.scenarios.backends import dynamodb_client, redis_client

# -- graphs ----------------------------------------------------------------------------


def _append(state: list[Any] | None, batches: Any) -> list[Any]:
    result = list(state or [])
    for batch in batches:
        result.extend(batch)
    return result


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_append, snapshot_frequency=3)]
    turns: int


def _bot(state: ChatState) -> dict[str, Any]:
    turn = state.get("turns", 0) + 1
    return {"messages": [AIMessage(content=f"answer {turn}", id=f"ai-{turn}")], "turns": turn}


def chat_graph(saver: Any) -> Any:
    builder = StateGraph(ChatState)
    builder.add_node("bot", _bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder.compile(checkpointer=saver)


def chat(saver: Any, thread_id: str, turns: int) -> None:
    graph = chat_graph(saver)
    for n in range(1, turns + 1):
        message = HumanMessage(content=f"question {n}", id=f"human-{n}")
        graph.invoke({"messages": [message]}, config(thread_id))


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def _inner(state: LogState) -> dict[str, list[str]]:
    # lines of 1 KiB and more in all: a shared list (element records and a manifest)
    return {"log": [f"inner-{i}-{uuid.uuid4().hex * 4}" for i in range(8)]}


def subgraph_graph(saver: Any) -> Any:
    """A node running a subgraph: its checkpoints live in namespace ``outer:<task>``."""
    inner = StateGraph(LogState)
    inner.add_node("inner", _inner)
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    outer = StateGraph(LogState)
    outer.add_node("outer", inner.compile())
    outer.add_edge(START, "outer")
    outer.add_edge("outer", END)
    return outer.compile(checkpointer=saver)


class CountState(TypedDict):
    n: int


def _ask(state: CountState) -> CountState:
    return {"n": state["n"] + (1 if interrupt("approve?") else 0)}


def _step(state: CountState) -> CountState:
    return {"n": state["n"] + 1}


def count_graph(saver: Any, node: Any = _step) -> Any:
    builder = StateGraph(CountState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=saver)


class NoteState(TypedDict):
    note: Any


class Corrupting(JsonPlusSerializer):
    """Writes undecodable bytes for one value (a bug, a disk, another program's write)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj == "CORRUPT-ME":
            return "msgpack", b"\xc1\xc1"  # 0xc1 is never used by msgpack
        return super().dumps_typed(obj)


def note_graph(saver: Any) -> Any:
    def write(state: NoteState) -> NoteState:
        return {"note": state["note"]}

    builder = StateGraph(NoteState)
    builder.add_node("write", write)
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    return builder.compile(checkpointer=saver)


def write_fleet(saver: Any, threads: dict[str, str]) -> None:
    """Threads written by real graphs: ``chat`` (a DeltaChannel chat of 5 turns), ``sub``
    (a subgraph over a shared list, twice), ``wait`` (an interrupt) and ``pruned`` (a chat of
    7 turns, for the caller to prune)."""
    chat(saver, threads["chat"], 5)
    sub = subgraph_graph(saver)
    sub.invoke({"log": ["x"]}, config(threads["sub"]))
    sub.invoke({"log": ["y"]}, config(threads["sub"]))
    count_graph(saver, _ask).invoke({"n": 0}, config(threads["wait"]))
    chat(saver, threads["pruned"], 7)


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def check_json(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli("check", url, "--json", *args)
    assert code in (0, 1, 3), err
    report: dict[str, Any] = json.loads(out)
    return code, report


def kinds(report: dict[str, Any]) -> list[tuple[str, str, str | None, str | None]]:
    return sorted(
        (f["kind"], f["severity"], f["checkpoint_id"], f["channel"]) for f in report["findings"]
    )


def assert_seed_lost(code: int, report: dict[str, Any], head_id: str, seed_id: str) -> None:
    """The report of a DeltaChannel chat whose seed checkpoint ``seed_id`` was deleted: one
    error (``delta_no_seed`` at or after ``head_id``), the hole and orphans as warnings."""
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert code == 1
    assert [(f["kind"], f["channel"]) for f in errors] == [("delta_no_seed", "messages")]
    assert errors[0]["checkpoint_id"] >= head_id
    assert seed_id in errors[0]["detail"]
    warnings = {f["kind"] for f in report["findings"] if f["severity"] == "warning"}
    assert "missing_parent" in warnings
    assert warnings <= {"missing_parent", "orphan_writes", "orphan_values"}


def inventory(saver: Any, thread_id: str) -> Inventory:
    found: Inventory = saver.drive(saver.port.inventory(thread_id))
    return found


# -- damage with the backend's own client ----------------------------------------------


class Damage:
    """Removes one record, or skews one record's expiry, the way an operator's client (or a
    half-done delete) would."""

    def __init__(self, backend: str, url: str, saver: Any) -> None:
        self.backend, self.url, self.saver = backend, url, saver

    @contextmanager
    def _redis(self) -> Iterator[Any]:
        client = redis_client(self.url)
        try:
            yield client
        finally:
            client.close()

    @contextmanager
    def _mongodb(self) -> Iterator[Any]:
        import pymongo

        client: Any = pymongo.MongoClient(self.url, serverSelectionTimeoutMS=5000)
        with client:
            yield client.get_default_database()[self.saver.port.payloads]

    @contextmanager
    def _dynamodb(self) -> Iterator[tuple[Any, str]]:
        yield dynamodb_client(self.url)

    def _dynamodb_items(self, client: Any, table: str, thread_id: str) -> Iterator[Any]:
        from graphkeep.backends.dynamodb import keys
        from graphkeep.backends.dynamodb.encoding import names_of

        pk = self.saver.port.thread_key(thread_id)[0]
        pages = client.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": pk}},
        )
        for page in pages:
            for item in page["Items"]:
                parsed = keys.parse_sk(item["sk"]["S"])
                if parsed.kind in ("c", "b", "w"):
                    yield parsed.kind, names_of(item, parsed), {"pk": item["pk"], "sk": item["sk"]}

    @staticmethod
    def _mongodb_value(thread_id: str, ns: str, channel: str, version: str) -> dict[str, Any]:
        from graphkeep.backends.mongodb.documents import blob_ref

        return {"thread_id": thread_id, "ns": ns, "kind": "blob", "ref": blob_ref(channel, version)}

    def _dynamodb_value(
        self, client: Any, table: str, thread_id: str, ns: str, channel: str, version: str
    ) -> Any:
        (found,) = [
            k
            for kind, names, k in self._dynamodb_items(client, table, thread_id)
            if kind == "b" and (names.ns, names.channel, names.version) == (ns, channel, version)
        ]
        return found

    def delete_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """The checkpoint's record only: its writes and values stay."""
        if self.backend.startswith(REDIS_FAMILY):
            h, p, x, a = self.saver.port.thread_keys(thread_id)[:4]
            field = f"{ns}\0{checkpoint_id}"
            with self._redis() as client:
                assert client.hdel(h, field) == 1
                client.hdel(p, field)
                client.zrem(x, field)
                client.zrem(a, f"{checkpoint_id}\0{ns}")
        elif self.backend == "mongodb":
            with self._mongodb() as docs:
                filter = {"thread_id": thread_id, "ns": ns, "kind": "cp", "ref": checkpoint_id}
                assert docs.delete_one(filter).deleted_count == 1
        else:
            with self._dynamodb() as (client, table):
                (found,) = [
                    k
                    for kind, names, k in self._dynamodb_items(client, table, thread_id)
                    if kind == "c" and (names.ns, names.checkpoint_id) == (ns, checkpoint_id)
                ]
                client.delete_item(TableName=table, Key=found)

    def delete_value(self, thread_id: str, ns: str, channel: str, version: str) -> None:
        if self.backend.startswith(REDIS_FAMILY):
            b = self.saver.port.thread_keys(thread_id)[6]
            with self._redis() as client:
                assert client.hdel(b, f"{ns}\0{channel}\0{version}") == 1
        elif self.backend == "mongodb":
            with self._mongodb() as docs:
                filter = self._mongodb_value(thread_id, ns, channel, version)
                assert docs.delete_one(filter).deleted_count == 1
        else:
            with self._dynamodb() as (client, table):
                found = self._dynamodb_value(client, table, thread_id, ns, channel, version)
                client.delete_item(TableName=table, Key=found)

    def delete_a_chunk(self, thread_id: str) -> bool:
        """One chunk of a channel value stored in chunks (not of a pending write: MongoDB
        chunk documents of kind ``blob``, DynamoDB ``k#b#`` items); False where values are
        never chunked (Redis)."""
        if self.backend.startswith(REDIS_FAMILY):
            return False
        if self.backend == "mongodb":
            with self._mongodb() as docs:
                found = docs.find_one(
                    {"thread_id": thread_id, "kind": "blob", "part": {"$nin": [None, ""]}}
                )
                assert found is not None, "no chunk document"
                return bool(docs.delete_one({"_id": found["_id"]}).deleted_count == 1)
        with self._dynamodb() as (client, table):
            pk = self.saver.port.thread_key(thread_id)[0]
            items = client.query(
                TableName=table,
                KeyConditionExpression="pk = :p AND begins_with(sk, :k)",
                ExpressionAttributeValues={":p": {"S": pk}, ":k": {"S": "k#b#"}},
            )["Items"]
            assert items, "no chunk item"
            client.delete_item(TableName=table, Key={"pk": items[-1]["pk"], "sk": items[-1]["sk"]})
            return True

    def set_value_expiry(
        self, thread_id: str, ns: str, channel: str, version: str, at: float | None
    ) -> None:
        """Move one value's expiry to ``at`` (None: never). On Redis the TTL is per key: the
        thread's values hash (every value of the thread) gets it."""
        if self.backend.startswith(REDIS_FAMILY):
            b = self.saver.port.thread_keys(thread_id)[6]
            with self._redis() as client:
                assert client.hexists(b, f"{ns}\0{channel}\0{version}")
                if at is None:
                    assert client.persist(b)
                else:
                    assert client.pexpireat(b, int(at * 1000))
        elif self.backend == "mongodb":
            from datetime import datetime, timezone

            with self._mongodb() as docs:
                filter = self._mongodb_value(thread_id, ns, channel, version)
                update = (
                    {"$unset": {"expires_at": ""}}
                    if at is None
                    else {"$set": {"expires_at": datetime.fromtimestamp(at, timezone.utc)}}
                )
                assert docs.update_one(filter, update).matched_count == 1
        else:
            with self._dynamodb() as (client, table):
                found = self._dynamodb_value(client, table, thread_id, ns, channel, version)
                expression: dict[str, Any] = (
                    {"UpdateExpression": "REMOVE #e"}
                    if at is None
                    else {
                        "UpdateExpression": "SET #e = :e",
                        "ExpressionAttributeValues": {":e": {"N": str(int(at))}},
                    }
                )
                client.update_item(
                    TableName=table,
                    Key=found,
                    ExpressionAttributeNames={"#e": "exp"},
                    **expression,
                )


@pytest.fixture
def damage(graphkeep_backend: str, graphkeep_url: str) -> Iterator[Damage]:
    with graphkeep.connect(graphkeep_url) as saver:
        yield Damage(graphkeep_backend, graphkeep_url, saver)


# -- a clean store ---------------------------------------------------------------------


#: threads in the clean store: a few written by real graphs, the rest copies of them
CLEAN_THREADS = 200
#: ... on FerretDB, whose every query for one thread reads the whole collection (it uses no
#: index but ``_id``'s), so that a check of n threads costs n² document reads: 200 threads
#: took 10 minutes here. A real MongoDB serves each thread from the ``thread_id`` index.
FERRETDB_CLEAN_THREADS = 40


def ferretdb(url: str) -> bool:
    import pymongo

    with pymongo.MongoClient(url, serverSelectionTimeoutMS=5000) as client:
        return "ferretdbVersion" in client.admin.command("buildInfo")


def test_a_store_of_200_threads_written_by_real_graphs_and_pruned_is_clean(
    graphkeep_backend: str, graphkeep_url: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    threads = {name: f"{name}-{tag}" for name in ("chat", "sub", "wait", "pruned", "big")}
    # MongoDB chunks payloads over chunk_size (8 MiB by default): small here, so that a value
    # of this test is chunked; DynamoDB chunks what passes its 400 KB item limit
    options = {"chunk_size": 65536} if graphkeep_backend == "mongodb" else {}
    big = os.urandom(450_000).hex()  # 900 KB, ~460 KB deflated: chunked
    count = CLEAN_THREADS
    if graphkeep_backend == "mongodb" and ferretdb(graphkeep_url):
        count = FERRETDB_CLEAN_THREADS
    with graphkeep.connect(graphkeep_url, **options) as saver:
        write_fleet(saver, threads)
        before = inventory(saver, threads["pruned"])
        saver.prune([threads["pruned"]])
        after = inventory(saver, threads["pruned"])
        note_graph(saver).invoke({"note": big}, config(threads["big"]))
        sub_inventory = inventory(saver, threads["sub"])
        chat_inventory = inventory(saver, threads["chat"])
        state = saver.get_tuple(config(threads["big"]))
        assert state is not None and state.checkpoint["channel_values"]["note"] == big
        # the copies: each template exported once, imported as a new thread (what copy_thread
        # does, one request a copy instead of two)
        # (not of the chunked one: FerretDB reads every document of a collection per query)
        templates = sorted(threads.values())
        dumps = [saver.drive(saver.port.export_thread(t)) for t in templates if t != threads["big"]]
        copies = [f"copy-{tag}-{n:03d}" for n in range(count - len(templates))]
        for n, copy in enumerate(copies):
            saver.drive(saver.port.import_thread(copy, dumps[n % len(dumps)]))
    # what the graphs wrote is what the check must see: namespaces, lists, seeds, a cut chain
    assert len({s.ns for s in sub_inventory.checkpoints}) >= 2
    assert any(k[1] == "__graphkeep.element__" for k in sub_inventory.blob_keys)
    assert any("messages" in s.needs_history for s in chat_inventory.checkpoints)
    assert 1 < len(after.checkpoints) < len(before.checkpoints)
    code, report = check_json(graphkeep_url, "--all")
    assert report["findings"] == []
    assert (code, report["errors"], report["warnings"]) == (0, 0, 0)
    assert report["threads"] == count
    assert report["last_thread"] == max(threads.values())
    # one inventory per thread: one request on Redis and MongoDB, one page on DynamoDB (plus
    # the list_threads pages: DynamoDB's scans a table other tests share)
    if graphkeep_backend != "dynamodb":
        assert report["scan"]["thread_requests_max"] == 1
        assert report["scan"]["requests"] == count + 1
    else:  # 1 Query per 1 MB page: the chunked thread's ~1.5 MB of items take a few
        assert report["scan"]["thread_requests_max"] <= 4
    # --deep: every payload decodes, every list element is there and named (the graphs'
    # threads and a copy of each: the other copies hold the same bytes)
    deep = [*templates, *copies[: len(dumps)]]
    code, report = check_json(graphkeep_url, "--thread", *deep, "--deep")
    assert (code, report["findings"], report["threads"]) == (0, [], len(deep))
    if graphkeep_backend != "dynamodb":  # an inventory and an export per thread
        assert report["scan"]["thread_requests_max"] == 2
    code, out, err = cli("check", graphkeep_url, "--thread", threads["chat"], threads["wait"])
    assert code == 0, err
    assert out.startswith("checked 2 thread(s)") and " 0 error(s), 0 warning(s);" in out


def test_all_resumes_after_a_thread_in_id_order(graphkeep_url: str) -> None:
    with graphkeep.connect(graphkeep_url) as saver:
        for name in ("a", "b", "c"):
            count_graph(saver).invoke({"n": 0}, config(f"resume-{name}"))
    _, report = check_json(graphkeep_url, "--all", "--after", "resume-a")
    assert (report["threads"], report["last_thread"]) == (2, "resume-c")
    _, report = check_json(graphkeep_url, "--all", "--after", "resume-c")
    assert (report["threads"], report["last_thread"]) == (0, None)


# -- each invariant, damaged -----------------------------------------------------------


def test_a_deleted_middle_checkpoint_is_a_hole_in_the_history(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    graph = count_graph(damage.saver)
    for i in range(3):
        graph.invoke({"n": i}, config(thread_id))
    inv = inventory(damage.saver, thread_id)
    by_id = {s.checkpoint_id: s for s in inv.checkpoints}
    children = {s.parent_id: s.checkpoint_id for s in inv.checkpoints if s.parent_id}
    named = {
        s.checkpoint_id: {(s.ns, ch, s.versions[ch]) for ch in s.present} for s in inv.checkpoints
    }

    def shared(cid: str) -> bool:
        return all(any(key in keys for o, keys in named.items() if o != cid) for key in named[cid])

    # a middle checkpoint without writes whose values later checkpoints name too: its loss
    # leaves nothing orphaned, only the hole
    victim = next(
        cid
        for cid in sorted(by_id)
        if cid in children
        and by_id[cid].parent_id
        and ("", cid) not in inv.write_keys
        and shared(cid)
    )
    damage.delete_checkpoint(thread_id, "", victim)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert kinds(report) == [("missing_parent", "warning", children[victim], None)]
    assert victim in report["findings"][0]["detail"]
    assert code == 3
    code, out, _ = cli("check", graphkeep_url, "--thread", thread_id)
    assert code == 3
    assert f"WARNING missing_parent: thread {thread_id} checkpoint {children[victim]}:" in out


def test_a_deleted_value_is_an_error_at_every_checkpoint_naming_it(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    graph = count_graph(damage.saver)
    graph.invoke({"n": 0}, config(thread_id))
    graph.invoke({"n": 5}, config(thread_id))
    inv = inventory(damage.saver, thread_id)
    head = max(inv.checkpoints, key=lambda s: s.checkpoint_id)
    version = head.versions["n"]
    naming = sorted(
        s.checkpoint_id for s in inv.checkpoints if "n" in s.present and s.versions["n"] == version
    )
    written = damage.saver.get_tuple(config(thread_id)).checkpoint["channel_values"]["n"]
    damage.delete_value(thread_id, "", "n", version)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert kinds(report) == [("missing_value", "error", cid, "n") for cid in naming]
    assert code == 1
    # LangGraph's own read of that state fails (graphkeep raises, never a silent gap)... or
    # the value is simply gone from the state: either way not as written. On DynamoDB the
    # newest head carries a copy of the small value its own put wrote (``iv``) and reads it
    # from there: the value as written, never another
    state = damage.saver.get_tuple(config(thread_id))
    values = {} if state is None else state.checkpoint["channel_values"]
    if damage.backend == "dynamodb" and "n" in values:
        assert values["n"] == written
        pk, _ = damage.saver.port.thread_key(thread_id)
        newest = damage.saver.client.get_item(
            TableName=damage.saver.table_name,
            Key={"pk": {"S": pk}, "sk": {"S": f"c##{head.checkpoint_id}#"}},
            ConsistentRead=True,
        )["Item"]
        assert "iv" in newest
    else:
        assert "n" not in values


def test_a_deleted_delta_channel_seed_leaves_its_walk_without_a_seed(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    chat(damage.saver, thread_id, 5)
    inv = inventory(damage.saver, thread_id)
    by_id = {s.checkpoint_id: s for s in inv.checkpoints}
    head = max(
        (s for s in inv.checkpoints if "messages" in s.needs_history),
        key=lambda s: s.checkpoint_id,
    )
    seed = by_id[head.parent_id or ""]
    while "messages" not in seed.present:
        seed = by_id[seed.parent_id or ""]
    assert seed.parent_id is not None, "the seed should not be the root"
    damage.delete_checkpoint(thread_id, "", seed.checkpoint_id)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert_seed_lost(code, report, head.checkpoint_id, seed.checkpoint_id)


def test_writes_under_a_missing_checkpoint_are_orphans_and_repair_deletes_them(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    count_graph(damage.saver).invoke({"n": 0}, config(thread_id))
    # a write whose checkpoint never landed (a crash between the two, two hours ago)
    missing = id_at(time.time() - 7200)[:-12] + uuid.uuid4().hex[:12]
    damage.saver.put_writes(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": missing}},
        [("n", 41)],
        "task-1",
    )
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert kinds(report) == [("orphan_writes", "warning", missing, None)]
    assert code == 3
    before = inventory(damage.saver, thread_id)
    # without a terminal, --repair prints its plan and refuses without --yes
    code, out, err = cli("check", graphkeep_url, "--thread", thread_id, "--repair")
    assert code == 2
    assert f"writes of {thread_id} ns '' checkpoint {missing}" in out
    assert "needs --yes" in err
    assert inventory(damage.saver, thread_id) == before
    code, out, err = cli("check", graphkeep_url, "--thread", thread_id, "--repair", "--yes")
    assert code == 0, err
    assert f"repaired {thread_id}: deleted writes of 1 checkpoint(s), 0 value(s), 0 chunk(s)" in out
    after = inventory(damage.saver, thread_id)
    assert after.write_keys == before.write_keys - {("", missing)}
    assert after.checkpoints == before.checkpoints and after.blob_keys == before.blob_keys
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])


def test_values_only_a_deleted_head_named_are_orphans_and_repair_deletes_them(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    count_graph(damage.saver).invoke({"n": 0}, config(thread_id))
    inv = inventory(damage.saver, thread_id)
    head = max(inv.checkpoints, key=lambda s: s.checkpoint_id)
    assert ("", head.checkpoint_id) not in inv.write_keys  # a finished run's head
    others = {
        (s.ns, ch, s.versions[ch]) for s in inv.checkpoints if s is not head for ch in s.present
    }
    only_head = sorted({("", ch, head.versions[ch]) for ch in head.present} - others)
    assert only_head
    damage.delete_checkpoint(thread_id, "", head.checkpoint_id)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert kinds(report) == sorted(
        {("orphan_values", "warning", None, ch) for _, ch, _ in only_head}
    )
    assert code == 3
    # the thread was just written: the default grace period keeps a repair off it
    code, out, err = cli("check", graphkeep_url, "--thread", thread_id, "--repair", "--yes")
    assert code == 3, err
    assert f"skipped {thread_id}: written within the grace period" in out
    code, body = check_json(
        graphkeep_url, "--thread", thread_id, "--repair", "--yes", "--grace", "0"
    )
    assert code == 0, body
    assert body["repair"]["values_deleted"] == len(only_head)
    assert body["findings"] == [] and body["repair"]["before"]["warnings"] >= 1
    assert inventory(damage.saver, thread_id).blob_keys == inv.blob_keys - set(only_head)
    # the state LangGraph reads is the parent's, whole
    assert damage.saver.get_tuple(config(thread_id)) is not None
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])


# -- expiry drift ----------------------------------------------------------------------

TTL = 3600


def test_a_store_written_with_ttl_by_real_graphs_and_pruned_has_no_expiry_drift(
    graphkeep_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = uuid.uuid4().hex[:6]
    threads = {name: f"ttl-{name}-{tag}" for name in ("chat", "sub", "wait", "pruned")}
    with graphkeep.connect(graphkeep_url, ttl=TTL) as saver:
        write_fleet(saver, threads)
        saver.prune([threads["pruned"]])
        # later turns must re-arm what the new checkpoints need, whatever was written before:
        # writes keep that to the second, so the check holds with a 1 s tolerance
        time.sleep(2.5)
        chat(saver, threads["chat"], 2)
        chat(saver, threads["pruned"], 2)
        subgraph_graph(saver).invoke({"log": ["z"]}, config(threads["sub"]))
        inv = inventory(saver, threads["chat"])
    monkeypatch.setattr(check_module, "EXPIRY_TOLERANCE", 1.0)
    code, report = check_json(graphkeep_url, "--thread", *threads.values())
    assert (code, report["findings"]) == (0, [])
    monkeypatch.undo()
    # reads that re-arm what they read, page by page (an older checkpoint's state included)
    with graphkeep.connect(graphkeep_url, ttl=TTL, refresh_ttl_on_read=True) as saver:
        graph = chat_graph(saver)
        history = list(graph.get_state_history(config(threads["chat"])))
        assert len(history) > 3
        graph.get_state(history[2].config)
    assert inv.expiries and all(u.at is not None for u in inv.expiries)
    code, report = check_json(graphkeep_url, "--thread", *threads.values())
    assert (code, report["findings"]) == (0, [])
    assert report["scan"]["thread_requests_max"] == 1


@pytest.mark.parametrize("skew", ["early", "never"])
def test_a_value_whose_expiry_drifted_is_a_warning_and_repair_rearms_it(
    graphkeep_url: str, damage: Damage, thread_id: str, skew: str
) -> None:
    kept, plain = f"{thread_id}-kept", f"{thread_id}-plain"
    with graphkeep.connect(graphkeep_url, ttl=TTL) as saver:
        for t in (thread_id, kept):
            graph = count_graph(saver)
            graph.invoke({"n": 0}, config(t))
            graph.invoke({"n": 5}, config(t))
    count_graph(damage.saver).invoke({"n": 0}, config(plain))  # saved without TTL
    inv = inventory(damage.saver, thread_id)
    head = max(inv.checkpoints, key=lambda s: s.checkpoint_id)
    # the newest checkpoint's value dies ten minutes from now, an hour before it (or never)
    at = None if skew == "never" else time.time() + 600
    damage.set_value_expiry(thread_id, "", "n", head.versions["n"], at)
    code, report = check_json(graphkeep_url, "--thread", thread_id, kept, plain)
    assert code == 3
    assert kinds(report) == [("expiry_drift", "warning", None, None)]
    (finding,) = report["findings"]
    assert finding["thread_id"] == thread_id
    assert ("1 never expire" if skew == "never" else "1 expire at ") in finding["detail"]
    assert report["scan"]["thread_requests_max"] == 1  # read with the inventory
    code, body = check_json(
        graphkeep_url, "--thread", thread_id, "--repair", "--yes", "--grace", "0"
    )
    assert code == 0, body
    assert body["findings"] == [] and body["repair"]["rearmed"] == 1
    assert body["repair"]["plan"][0]["rearm"][0]["units"] == 1
    code, report = check_json(graphkeep_url, "--thread", thread_id, kept, plain)
    assert (code, report["findings"]) == (0, [])
    # nothing deleted or rewritten: the same records, the state reads back
    after = inventory(damage.saver, thread_id)
    assert (after.checkpoints, after.write_keys, after.blob_keys) == (
        inv.checkpoints,
        inv.write_keys,
        inv.blob_keys,
    )
    state = damage.saver.get_tuple(config(thread_id))
    assert state is not None and state.checkpoint["channel_values"]["n"] == 6


def test_an_expiry_in_a_thread_saved_without_ttl_is_drift_and_repair_removes_it(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    count_graph(damage.saver).invoke({"n": 0}, config(thread_id))
    inv = inventory(damage.saver, thread_id)
    assert inv.expiries and all(u.at is None for u in inv.expiries)
    head = max(inv.checkpoints, key=lambda s: s.checkpoint_id)
    damage.set_value_expiry(thread_id, "", "n", head.versions["n"], time.time() + 600)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert code == 3
    assert kinds(report) == [("expiry_drift", "warning", None, None)]
    assert report["findings"][0]["detail"].endswith("expires never")
    # the default grace period keeps a repair off a thread just written
    code, out, err = cli("check", graphkeep_url, "--thread", thread_id, "--repair", "--yes")
    assert code == 3, err
    assert "the expiry of 1 unit(s)" in out
    code, out, err = cli(
        "check", graphkeep_url, "--thread", thread_id, "--repair", "--yes", "--grace", "0"
    )
    assert code == 0, err + out
    assert "re-armed the expiry of 1 unit(s)" in out
    assert all(u.at is None for u in inventory(damage.saver, thread_id).expiries)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])


# -- prune's pre-flight ----------------------------------------------------------------


def test_prune_refuses_a_plan_that_drops_a_delta_channel_seed_and_deletes_nothing(
    graphkeep_url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with graphkeep.connect(graphkeep_url) as saver:
        chat(saver, thread_id, 5)
        before = inventory(saver, thread_id)
        heads = {
            ns: max(s.checkpoint_id for s in before.checkpoints if s.ns == ns)
            for ns in {s.ns for s in before.checkpoints}
        }

        def heads_only(checkpoints: list[Summary]) -> set[tuple[str, str]]:
            # a plan built by hand: every head, none of the ancestors its DeltaChannel needs
            return set(heads.items())

        monkeypatch.setattr(maintenance_module, "keep_latest", heads_only)
        with pytest.raises(UnsafePrune, match="delta_no_seed") as raised:
            saver.prune([thread_id])
        assert thread_id in str(raised.value) and "nothing deleted" in str(raised.value)
        assert inventory(saver, thread_id) == before
        monkeypatch.undo()
        saver.prune([thread_id])  # the saver's own plan keeps the seed: accepted
        assert len(inventory(saver, thread_id).checkpoints) < len(before.checkpoints)
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])


def _heads_of(found: Inventory) -> set[tuple[str, str]]:
    namespaces = {s.ns for s in found.checkpoints}
    return {
        (ns, max(s.checkpoint_id for s in found.checkpoints if s.ns == ns)) for ns in namespaces
    }


def test_prune_refuses_a_whole_batch_before_deleting_from_any_thread(
    graphkeep_url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, delta = f"{thread_id}-plain", f"{thread_id}-delta"
    with graphkeep.connect(graphkeep_url) as saver:
        graph = count_graph(saver)
        for _ in range(3):
            graph.invoke({"n": 1}, config(plain))
        chat(saver, delta, 5)
        before = {t: inventory(saver, t) for t in (plain, delta)}
        # a plan built by hand: every head, none of the ancestors a DeltaChannel needs
        heads = _heads_of(before[plain]) | _heads_of(before[delta])
        monkeypatch.setattr(maintenance_module, "keep_latest", lambda _: heads)
        with pytest.raises(UnsafePrune, match="delta_no_seed"):
            saver.prune([plain, delta])  # the plain thread's plan alone is fine
        assert {t: inventory(saver, t) for t in (plain, delta)} == before
    monkeypatch.undo()


async def test_aprune_refuses_a_whole_batch_before_deleting_from_any_thread(
    graphkeep_url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, delta = f"{thread_id}-plain", f"{thread_id}-delta"
    with graphkeep.connect(graphkeep_url) as saver:
        graph = count_graph(saver)
        for _ in range(3):
            graph.invoke({"n": 1}, config(plain))
        chat(saver, delta, 5)
        before = {t: inventory(saver, t) for t in (plain, delta)}
    heads = _heads_of(before[plain]) | _heads_of(before[delta])
    monkeypatch.setattr(maintenance_module, "keep_latest", lambda _: heads)
    async with graphkeep.aconnect(graphkeep_url) as asaver:
        with pytest.raises(UnsafePrune, match="delta_no_seed"):
            await asaver.aprune([plain, delta])
    monkeypatch.undo()
    with graphkeep.connect(graphkeep_url) as saver:
        assert {t: inventory(saver, t) for t in (plain, delta)} == before


def test_check_knows_a_delta_channel_by_a_snapshot_at_an_ancestor_as_prune_does(
    graphkeep_url: str, thread_id: str
) -> None:
    """A head LangGraph wrote without ``counters_since_delta_snapshot``: the ``_DeltaSnapshot``
    stored at the root is the only evidence that its channel rebuilds from history."""
    with graphkeep.connect(graphkeep_url) as saver:
        parent: Any = None
        for step in range(3):
            values = {"items": _DeltaSnapshot(["seed"])} if step == 0 else {}
            conf = config(thread_id)
            if parent is not None:
                conf["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            cp = empty_checkpoint()
            cp["channel_values"], cp["channel_versions"] = values, {"items": step + 1}
            meta = {"source": "loop", "step": step, "parents": {}, "run_id": f"run-{step}"}
            parent = saver.put(conf, cp, meta, {"items": step + 1})
            saver.put_writes(parent, [("items", [f"w{step}"])], f"task-{step}")
        head = inventory(saver, thread_id)
        assert findings_of(thread_id, head).findings == []
        saver.prune([thread_id])  # keeps the chain back to the snapshot
        assert len(inventory(saver, thread_id).checkpoints) == 3
        saver.delete_for_runs(["run-1"])  # cuts it: the head's walk now stops at a hole
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    kinds = {(f["kind"], f["channel"]) for f in report["findings"]}
    assert ("delta_no_seed", "items") in kinds, report["findings"]


# -- --deep: every payload decoded ---------------------------------------------------


def test_deep_reports_a_value_the_serializer_cannot_decode_where_it_is(
    graphkeep_url: str, thread_id: str
) -> None:
    with graphkeep.connect(graphkeep_url, serde=Corrupting()) as saver:
        graph = note_graph(saver)
        graph.invoke({"note": "fine"}, config(thread_id))
        graph.invoke({"note": "CORRUPT-ME"}, config(thread_id))
        inv = inventory(saver, thread_id)
    naming = sorted(
        s.checkpoint_id
        for s in inv.checkpoints
        if "note" in s.present and s.checkpoint_id > min(c.checkpoint_id for c in inv.checkpoints)
    )
    # the check without --deep reads no payload: it cannot see this
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert code == 1
    undecodable = [f for f in report["findings"] if f["kind"] == "undecodable"]
    assert undecodable and all(f["channel"] == "note" for f in undecodable)
    assert {f["checkpoint_id"] for f in undecodable} <= set(naming)
    # the channel's value, and the writes that carried it (the input, the node's output)
    details = sorted(f["detail"].split(":")[0] for f in undecodable)
    assert any(d.startswith("the value at version") for d in details)
    assert any(d.startswith("the pending write of task") for d in details)
    assert "\\xc1" not in json.dumps(report)  # never a payload's bytes
    assert {f["kind"] for f in report["findings"]} == {"undecodable"}


def test_deep_reports_plaintext_in_an_encrypted_deployment(
    graphkeep_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef0123456789abcdef")
    tag = uuid.uuid4().hex[:6]
    sealed, plain = f"sealed-{tag}", f"plain-{tag}"
    with graphkeep.connect(graphkeep_url, serde=EncryptedSerializer.from_pycryptodome_aes()) as s:
        chat(s, sealed, 4)
        subgraph_graph(s).invoke({"log": ["x"]}, config(sealed))
    with graphkeep.connect(graphkeep_url) as saver:  # a process without the key
        count_graph(saver).invoke({"n": 0}, config(plain))
    code, report = check_json(graphkeep_url, "--thread", sealed, plain, "--deep")
    assert code == 1
    found = {(f["thread_id"], f["kind"]) for f in report["findings"]}
    assert found == {(plain, "plaintext")}
    (finding,) = report["findings"]  # one per thread and namespace, with the count
    assert finding["checkpoint_id"] and "payloads, e.g. " in finding["detail"]
    # without the key, the same deployment's sealed thread cannot be decoded: said, not hidden
    monkeypatch.delenv("LANGGRAPH_AES_KEY")
    code, report = check_json(graphkeep_url, "--thread", sealed, "--deep")
    assert code == 1 and {f["kind"] for f in report["findings"]} == {"undecodable"}


def test_deep_reports_a_class_this_process_cannot_import(
    graphkeep_url: str, thread_id: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import sys

    module = f"gk_lost_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass Box:\n    size: int\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    box = importlib.import_module(module).Box
    with graphkeep.connect(graphkeep_url) as saver:
        note_graph(saver).invoke({"note": box(3)}, config(thread_id))
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert (code, report["findings"]) == (0, [])  # importable here: read as written
    monkeypatch.undo()
    del sys.modules[module]
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert code == 1
    assert {f["kind"] for f in report["findings"]} == {"unknown_type"}
    assert "note" in {f["channel"] for f in report["findings"]}  # and the input that carried it
    assert all(f"{module}.Box" in f["detail"] for f in report["findings"])


def test_deep_reports_a_missing_list_element_and_repairs_an_orphan_one(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    sub = subgraph_graph(damage.saver)
    sub.invoke({"log": ["x"]}, config(thread_id))
    inv = inventory(damage.saver, thread_id)
    elements = sorted(k for k in inv.blob_keys if k[1] == ELEMENT_CHANNEL)
    assert elements
    # an element record a put wrote before it crashed (its manifest never landed)
    stray = (elements[0][0], ELEMENT_CHANNEL, "f" * 16 + "0" * 8)
    record = BlobRecord(ELEMENT_CHANNEL, stray[2], Typed("msgpack", ormsgpack.packb("stray")))
    damage.saver.drive(
        damage.saver.port.import_thread(thread_id, ThreadDump([], [], [(stray[0], record)]))
    )
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])  # elements are named by payloads
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert code == 3
    assert kinds(report) == [("orphan_elements", "warning", None, ELEMENT_CHANNEL)]
    code, out, err = cli(
        "check", graphkeep_url, "--thread", thread_id, "--deep", "--repair", "--yes",
        "--grace", "0",
    )  # fmt: skip
    assert code == 0, err + out
    assert inventory(damage.saver, thread_id).blob_keys == inv.blob_keys
    # a list element a checkpoint's list needs, deleted with the backend's own client
    victim = elements[-1]
    damage.delete_value(thread_id, victim[0], ELEMENT_CHANNEL, victim[2])
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert code == 1
    missing = [f for f in report["findings"] if f["kind"] == "missing_element"]
    assert missing and all(f["channel"] == "log" for f in missing)
    assert victim[2] in missing[0]["detail"]


def test_deep_reports_a_pending_write_langgraph_would_not_have_written(
    graphkeep_url: str, damage: Damage, thread_id: str
) -> None:
    count_graph(damage.saver).invoke({"n": 0}, config(thread_id))
    head = max(s.checkpoint_id for s in inventory(damage.saver, thread_id).checkpoints)
    value = Typed("msgpack", ormsgpack.packb(1))
    bad = [
        WriteRecord("task-a", -7, "n", "", value),  # a negative index on a plain channel
        WriteRecord("task-b", 0, "__interrupt__", "", value),  # a special one off its index
    ]
    # as a buggy writer would store them (the saver's put_writes never does)
    damage.saver.drive(damage.saver.port.put_writes(thread_id, "", head, bad))
    code, report = check_json(graphkeep_url, "--thread", thread_id)
    assert (code, report["findings"]) == (0, [])  # task ids and indexes are in payload reads
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert code == 1
    assert kinds(report) == [
        ("malformed_write", "error", head, "__interrupt__"),
        ("malformed_write", "error", head, "n"),
    ]
    details = " ".join(f["detail"] for f in report["findings"])
    assert "always written at index -3" in details and "negative index" in details


def test_a_value_missing_a_chunk_is_an_error_under_deep(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str
) -> None:
    options = {"chunk_size": 65536} if graphkeep_backend == "mongodb" else {}
    big = os.urandom(450_000).hex()  # ~460 KB deflated: chunked on MongoDB (here), DynamoDB
    with graphkeep.connect(graphkeep_url, **options) as saver:
        note_graph(saver).invoke({"note": big}, config(thread_id))
        damage = Damage(graphkeep_backend, graphkeep_url, saver)
        inv = inventory(saver, thread_id)
        if not damage.delete_a_chunk(thread_id):
            # Redis stores a value whole, as one record: losing it is losing the value
            head = max(inv.checkpoints, key=lambda s: s.checkpoint_id)
            damage.delete_value(thread_id, "", "note", head.versions["note"])
        else:  # the history's read says so (after reading again), never a part
            with pytest.raises(CorruptData) as raised:
                list(saver.list(config(thread_id)))
            assert raised.value.kind == "missing_value"
            # (MongoDB's reads left such a payload out, as one still being written: the
            # channel read as absent; its tails are written before its head, so none is)
    code, report = check_json(graphkeep_url, "--thread", thread_id, "--deep")
    assert code == 1
    errors = {f["kind"] for f in report["findings"] if f["severity"] == "error"}
    assert errors == (
        {"missing_value"} if graphkeep_backend.startswith(REDIS_FAMILY) else {"undecodable"}
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_check_draws_its_progress_on_a_terminal_and_nowhere_else(graphkeep_url: str) -> None:
    tag = uuid.uuid4().hex[:6]
    with graphkeep.connect(graphkeep_url) as saver:
        for name in ("a", "b"):
            count_graph(saver).invoke({"n": 0}, config(f"progress-{tag}-{name}"))
    threads = [f"progress-{tag}-a", f"progress-{tag}-b"]
    out, err = io.StringIO(), Terminal()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["check", graphkeep_url, "--thread", *threads])
    assert code == 0
    assert "check [" in err.getvalue() and "2/2" in err.getvalue()
    assert "\r" not in out.getvalue() and out.getvalue().startswith("checked 2 thread(s)")
    out, err = io.StringIO(), Terminal()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["check", graphkeep_url, "--thread", *threads, "--no-progress"]) == 0
    assert err.getvalue() == ""


# -- what no store makes: loops and second roots, from a hand-made inventory -----------


def _summary(cid: str, parent: str | None) -> Summary:
    return Summary("", cid, parent, {"n": "1"}, ["n"], [])


def test_parent_ids_that_loop_are_one_cycle_error() -> None:
    inv = Inventory(
        [_summary("1", None), _summary("3", "4"), _summary("4", "3"), _summary("5", "4")],
        set(),
        {("", "n", "1")},
    )
    (finding,) = findings_of("t", inv).findings
    assert (finding.kind, finding.severity, finding.checkpoint_id) == ("cycle", "error", "3")


def test_a_second_root_in_a_namespace_is_an_error_and_a_cut_history_is_not() -> None:
    two_roots = Inventory([_summary("1", None), _summary("2", None)], set(), {("", "n", "1")})
    assert findings_of("t", two_roots).findings == [
        Finding("t", "", "2", None, "extra_root", "a second root (the namespace's first is 1)")
    ]
    pruned = Inventory([_summary("5", "4"), _summary("6", "5")], set(), {("", "n", "1")})
    assert findings_of("t", pruned).findings == []


def test_expiry_drift_follows_what_each_backend_re_arms() -> None:
    from graphkeep.checkpoint.check import expiry_drift
    from graphkeep.checkpoint.records import Expiring

    hour = 3600.0
    inv = Inventory([_summary("1", None), _summary("2", "1")], set(), {("", "n", "1")})
    inv.checkpoints[1] = Summary("", "2", "1", {"n": "2"}, ["n"], [])
    inv.blob_keys.add(("", "n", "2"))

    def record(ref: str, at: float | None, holds: str, cid: str = "", v: str = "") -> Expiring:
        if holds == "value":
            return Expiring(ref, at, holds, "", channel="n", version=v)
        return Expiring(ref, at, holds, "", cid)

    # per record (MongoDB, DynamoDB): older history expires an hour earlier, by design, and
    # what outlives the newest checkpoint by a while (writes, list elements, a re-read) is fine
    inv.expiries = [
        record("c1", 10 * hour, "checkpoint", "1"),
        record("b1", 10 * hour, "value", v="1"),
        record("c2", 11 * hour, "checkpoint", "2"),
        record("w2", 11.5 * hour, "writes", "2"),
        record("b2", 11 * hour + 30, "value", v="2"),
    ]
    assert expiry_drift("t", inv) == ([], [])
    # the newest checkpoint's value dies first; an old value never does
    inv.expiries[4] = record("b2", 10.5 * hour, "value", v="2")
    inv.expiries[1] = record("b1", None, "value", v="1")
    (finding,), (drift,) = expiry_drift("t", inv)
    assert (finding.kind, finding.ns, drift.refs, drift.at) == (
        "expiry_drift",
        "",
        ("b1", "b2"),
        11 * hour,
    )
    assert "2 record(s) (value)" in finding.detail and "1 never expire" in finding.detail
    # per key (Redis): every key expires with the thread, later is drift too
    inv.expiries = [Expiring(i, 11 * hour, h) for i, h in enumerate(["checkpoint", "writes"])]
    assert expiry_drift("t", inv) == ([], [])
    inv.expiries.append(Expiring(7, 12 * hour, "value"))
    (finding,), (drift,) = expiry_drift("t", inv)
    assert (finding.ns, drift.ns, drift.refs, drift.at) == ("", None, (7,), 11 * hour)
    # a thread saved without TTL: a stray expiry is drift, re-armed to never
    inv.expiries = [Expiring(0, None, "checkpoint"), Expiring(7, 12 * hour, "value")]
    (finding,), (drift,) = expiry_drift("t", inv)
    assert (drift.refs, drift.at) == ((7,), None) and finding.detail.endswith("expires never")


# -- usage -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["redis://127.0.0.1:16379/0", "--all", "--serde", "m:x"], "add --deep"),
        (["redis://127.0.0.1:16379/0", "--all", "--deep", "--serde", "nomodule_gk:x"], "--serde"),
        (["redis://127.0.0.1:16379/0", "--all", "--deep", "--serde", "json"], "MODULE:ATTR"),
        (
            ["redis://127.0.0.1:16379/0", "--all", "--deep", "--serde", "json:JSONDecoder"],
            "no loads",
        ),
        (["sqlite:///nothing.db", "--all", "--repair"], "--repair does not write to LangGraph's"),
        (["sqlite:///nothing.db", "--all", "--key-prefix", "gk"], "--key-prefix applies to"),
        (["redis://127.0.0.1:16379/0", "--thread", "t", "--after", "s"], "--after resumes"),
        (["redis://127.0.0.1:16379/0", "--all", "--yes"], "--yes confirms --repair"),
    ],
)
def test_what_this_increment_does_not_do_is_a_usage_error(args: list[str], message: str) -> None:
    code, out, err = cli("check", *args)
    assert code == 2 and out == ""
    assert message in err


def test_an_unreachable_server_is_one_line_and_exit_2() -> None:
    code, out, err = cli("check", "redis://127.0.0.1:1/0", "--all")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
