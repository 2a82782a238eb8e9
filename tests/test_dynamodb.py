"""DynamoDB backend on a real DynamoDB endpoint (moto_server over HTTP by default).

The endpoint comes from DYNAMODB_ENDPOINT_URL (default http://127.0.0.1:15000, started by
``./dev services up``); this module creates its own table and deletes it at the end. Only
the retry loops are unit-tested without a server (they are pure logic, fed fake responses).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
import socket
import string
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphkeep
from graphkeep.backends.dynamodb import (
    AsyncDynamoDBSaver,
    DynamoDBCheckpointPort,
    DynamoDBSaver,
    parse_url,
)
from graphkeep.backends.dynamodb import keys as dkeys
from graphkeep.backends.dynamodb.requests import (
    MAX_STALLS,
    Call,
    Guard,
    batch_get,
    batch_write,
    transact,
)
from graphkeep.errors import ConfigurationError, CorruptData, LeaseLost, StorageUnavailable
from graphkeep.port import Sleep

from .conftest import unique_prefix
from .killed import kill_at

pytestmark = pytest.mark.dynamodb

ENDPOINT = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
REGION = "us-east-1"
for _name, _value in (
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_DEFAULT_REGION", REGION),
):
    os.environ.setdefault(_name, _value)


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def table() -> Iterator[str]:
    """A fresh table per test, deleted afterwards.

    moto (5.2.5) deep-copies the whole table on every TransactWriteItems and keeps the copy
    (``Table.instances_tracked``), so transactions get slower and the server's memory grows
    with the table's size: small tables keep both in check.
    """
    if not reachable(ENDPOINT):
        pytest.fail(
            f"no DynamoDB endpoint answers at {ENDPOINT}; run ./dev services up"
            " (or point DYNAMODB_ENDPOINT_URL at one)"
        )
    name = f"gk_test_{uuid.uuid4().hex[:10]}"
    with DynamoDBSaver.from_table(name, REGION, ENDPOINT) as saver:  # creates it
        assert saver.client.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE"
        yield name
        saver.client.delete_table(TableName=name)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    made = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    yield made
    made.close()


def _url(table: str) -> str:
    return f"dynamodb://{table}?region={REGION}&endpoint_url={ENDPOINT}"


class Calls:
    """API calls counted with botocore's event hooks (one entry per request sent)."""

    def __init__(self, client: Any) -> None:
        self.names: list[str] = []
        client.meta.events.register("before-call.dynamodb.*", self._seen)

    def _seen(self, model: Any, **_: Any) -> None:
        self.names.append(model.name)

    @contextmanager
    def count(self) -> Iterator[list[str]]:
        start = len(self.names)
        made: list[str] = []
        yield made
        made += self.names[start:]


@pytest.fixture
def counted(table: str) -> Iterator[tuple[DynamoDBSaver, Calls]]:
    made = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    calls = Calls(made)
    yield DynamoDBSaver(made, table, key_prefix=unique_prefix("ddb")), calls
    made.close()


@pytest.fixture
def saver(table: str, client: Any) -> DynamoDBSaver:
    return DynamoDBSaver(client, table, key_prefix=unique_prefix("ddb"))


def _config(thread: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(
    saver: Any,
    thread: str,
    values: dict[str, Any],
    versions: dict[str, Any],
    *,
    parent: Any = None,
    new: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    ns: str = "",
) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    config = parent or _config(thread, ns)
    meta = metadata if metadata is not None else {"source": "loop", "step": 0}
    return saver.put(config, cp, meta, new if new is not None else versions)


def _items(client: Any, table: str, pk_starts: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items += [i for i in page["Items"] if i["pk"]["S"].startswith(pk_starts)]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _thread_items(saver: Any, client: Any, table: str, thread: str) -> list[dict[str, Any]]:
    """The thread's items but its lease (``l#``: its fencing token outlives its data)."""
    pk, _ = saver.port.thread_key(thread)
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": pk}},
        "ConsistentRead": True,
    }
    while True:
        page = client.query(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return [i for i in items if i["sk"]["S"] != dkeys.LOCK_SK]
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _noise(size: int, seed: int = 0) -> str:
    """Text that compresses poorly (random letters), ``size`` characters."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size))


# --------------------------------------------------------------------------- conformance


async def test_official_conformance_suite_passes_all_eight_capabilities(table: str) -> None:
    @checkpointer_test(name="graphkeep-dynamodb")
    async def factory() -> Any:
        async with graphkeep.aconnect(_url(table), key_prefix=unique_prefix("conf")) as saver:
            yield saver

    report = await validate(factory)
    summary = {
        name: (r.passed, r.tests_passed, r.tests_failed, [f for f in r.failures][:2])
        for name, r in report.results.items()
    }
    assert len(report.results) == 8, summary
    assert all(r.detected and r.passed and not r.tests_failed for r in report.results.values()), (
        summary
    )


def test_sync_connect_round_trips_writes_list_and_delete(table: str) -> None:
    with graphkeep.connect(_url(table), key_prefix=unique_prefix("sync")) as saver:
        assert isinstance(saver, DynamoDBSaver)
        v1 = saver.get_next_version(None, None)
        first = _put(saver, "t", {"a": "x", "n": 1}, {"a": v1, "n": v1})
        saver.put_writes(first, [("a", "w"), ("__interrupt__", "stop")], "task-1", "~p")
        v2 = saver.get_next_version(v1, None)
        second = _put(
            saver, "t", {"a": "y", "n": 1}, {"a": v2, "n": v1}, parent=first, new={"a": v2}
        )
        latest = saver.get_tuple(_config("t"))
        assert latest is not None
        assert (
            latest.config["configurable"]["checkpoint_id"]
            == second["configurable"]["checkpoint_id"]
        )
        assert latest.checkpoint["channel_values"] == {"a": "y", "n": 1}
        assert latest.parent_config == first
        old = saver.get_tuple(first)
        assert old is not None
        assert old.pending_writes == [("task-1", "__interrupt__", "stop"), ("task-1", "a", "w")]
        assert [t.config for t in saver.list(_config("t"))] == [second, first]
        assert len(list(saver.list(None))) == 2
        saver.delete_thread("t")
        assert saver.get_tuple(_config("t")) is None
        assert list(saver.list(None)) == []


async def test_async_saver_from_table_round_trips_and_serves_sync_calls(table: str) -> None:
    async with AsyncDynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=unique_prefix("async"), setup=False
    ) as saver:
        cp = empty_checkpoint()
        cp["channel_values"] = {"a": [1, 2]}
        cp["channel_versions"] = {"a": 1}
        calls = Calls(saver.client)
        with calls.count() as made:
            stored = await saver.aput(_config("t"), cp, {"source": "input", "step": -1}, {"a": 1})
            await saver.aput_writes(stored, [("a", 3)], "task", "")
            await saver.aget_tuple(_config("t"))
        # the value, then the head; the write: one conditional PutItem
        assert made == ["BatchWriteItem", "PutItem", "PutItem", "Query", "BatchGetItem"], made
        found = await saver.aget_tuple(_config("t"))
        assert found is not None and found.checkpoint["channel_values"] == {"a": [1, 2]}
        assert [t.config async for t in saver.alist(None)] == [stored]
        # sync methods from another thread hop onto the saver's loop
        other = await asyncio.to_thread(saver.get_tuple, _config("t"))
        assert other is not None and other.pending_writes == [("task", "a", 3)]
        with pytest.raises(asyncio.InvalidStateError):
            saver.get_tuple(_config("t"))


# --------------------------------------------------------------------------- API calls


def _ops(names: list[str]) -> Counter[str]:
    return Counter(names)


def test_api_calls_per_operation(counted: tuple[DynamoDBSaver, Calls]) -> None:
    saver, calls = counted
    v1 = saver.get_next_version(None, None)
    with calls.count() as made:
        first = _put(
            saver, "t", {"a": "x" * 5000, "b": [1, 2], "c": 3}, {"a": v1, "b": v1, "c": v1}
        )
    assert made == ["BatchWriteItem", "PutItem"], made  # the values, then the head

    with calls.count() as made:  # only the head changes: one PutItem
        second = _put(
            saver,
            "t",
            {"a": "x" * 5000, "b": [1, 2], "c": 3},
            {"a": v1, "b": v1, "c": v1},
            parent=first,
            new={},
        )
    assert made == ["PutItem"], made
    with calls.count() as made:
        saver.put_writes(second, [("a", i) for i in range(3)], "task-1", "p")
    assert made == ["PutItem"], made  # the task's writes: one item, written if absent
    with calls.count() as made:  # the newest checkpoint with up to 15 writes: two calls
        latest = saver.get_tuple(_config("t"))
    assert made == ["Query", "BatchGetItem"], made
    assert latest is not None and len(latest.pending_writes) == 3
    with calls.count() as made:
        saver.put_writes(second, [("b", i) for i in range(60)], "task-2", "p")
    assert made == ["PutItem"], made
    with calls.count() as made:
        saver.put_writes(second, [("__error__", "boom")], "task-3", "p")
    assert made == ["PutItem"], made
    with calls.count() as made:  # by id: one Query whatever the number of writes
        exact = saver.get_tuple(second)
    assert made == ["Query", "BatchGetItem"], made
    assert exact is not None and len(exact.pending_writes) == 64
    with calls.count() as made:  # newest with 64 writes: three items (a task's are one)
        latest = saver.get_tuple(_config("t"))
    assert made == ["Query", "BatchGetItem"], made
    assert latest is not None and len(latest.pending_writes) == 64
    with calls.count() as made:
        exact = saver.get_tuple(first)
    assert made == ["Query", "BatchGetItem"], made
    assert exact is not None and exact.checkpoint["channel_values"]["b"] == [1, 2]
    with calls.count() as made:
        assert len(list(saver.list(_config("t")))) == 2
    assert _ops(made) == Counter({"Query": 1, "BatchGetItem": 1}), made


def _delta_chain(saver: Any, thread: str, length: int) -> Any:
    """A DeltaChannel-like chain: a seed value at the root, one write per ancestor."""
    version = 1
    root = _put(
        saver, thread, {"d": ["seed"]}, {"d": version}, metadata={"source": "loop", "step": 0}
    )
    saver.put_writes(root, [("d", "w0")], "task", "")
    parent = root
    for step in range(1, length + 1):
        version += 1
        parent = _put(
            saver,
            thread,
            {},
            {"d": version},
            parent=parent,
            new={"d": version},
            metadata={
                "source": "loop",
                "step": step,
                "counters_since_delta_snapshot": {"d": [step, step]},
            },
        )
        saver.put_writes(parent, [("d", f"w{step}")], "task", "")
    return parent


@pytest.mark.parametrize("ancestors", [100, 150])
def test_delta_history_costs_two_calls_per_hundred_ancestors(
    counted: tuple[DynamoDBSaver, Calls], ancestors: int
) -> None:
    saver, calls = counted
    head = _delta_chain(saver, "delta", ancestors)
    with calls.count() as made:
        history = saver.get_delta_channel_history(config=head, channels=["d"])
    assert len(made) <= 2 * -(-ancestors // 100), made
    assert history["d"]["seed"] == ["seed"]
    # the walk starts at the parent: the head's own write is excluded
    assert [w[2] for w in history["d"]["writes"]] == [f"w{i}" for i in range(ancestors)]


# --------------------------------------------------------------------------- paging


def test_more_than_one_megabyte_of_history_is_paged_everywhere(
    counted: tuple[DynamoDBSaver, Calls],
) -> None:
    saver, calls = counted
    thread, count = "big", 220
    parent = None
    ids = []
    for i in range(count):  # ~30 KB per checkpoint, incompressible: > 6 MB per thread
        version = i + 1
        stored = _put(
            saver,
            thread,
            {"v": os.urandom(10_000)},
            {"v": version},
            parent=parent,
            metadata={"source": "loop", "step": i, "pad": _noise(10_000, i)},
        )
        saver.put_writes(stored, [("v", _noise(10_000, -i))], "task", "")
        ids.append(stored["configurable"]["checkpoint_id"])
        parent = stored
    with calls.count() as made:
        listed = list(saver.list(_config(thread)))
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == ids[::-1]
    assert all(len(t.pending_writes) == 1 for t in listed)
    assert made.count("Query") > 3, made  # 1 MB pages followed through LastEvaluatedKey
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == count  # no ns
    assert len(list(saver.list(None))) == count  # Scan
    before = list(saver.list(_config(thread), before=_config(thread, "", ids[150]), limit=120))
    assert [t.config["configurable"]["checkpoint_id"] for t in before] == ids[:150][::-1][:120]
    saver.copy_thread(thread, "copy")
    assert len(list(saver.list(_config("copy")))) == count
    saver.prune(["copy"])
    assert len(list(saver.list(_config("copy")))) == 1
    saver.delete_thread(thread)
    assert saver.get_tuple(_config(thread)) is None
    assert list(saver.list(_config(thread))) == []


# --------------------------------------------------------------------------- retry loops


def _run(op: Any, responses: list[Any]) -> tuple[Any, list[Any]]:
    """Drive a sans-IO op by hand: each Call gets the next canned response (or exception)."""
    sent: list[Any] = []
    try:
        request = next(op)
        while True:
            sent.append(request)
            if isinstance(request, Sleep):
                request = op.send(None)
                continue
            answer = responses.pop(0)
            request = op.throw(answer) if isinstance(answer, BaseException) else op.send(answer)
    except StopIteration as stop:
        return stop.value, sent


def _put_req(i: int) -> dict[str, Any]:
    return {"PutRequest": {"Item": {"pk": {"S": "p"}, "sk": {"S": f"s{i}"}}}}


def test_batch_write_resends_unprocessed_items_with_backoff() -> None:
    requests = [_put_req(i) for i in range(30)]
    responses = [
        {"UnprocessedItems": {"t": requests[20:25]}},  # progress: re-sent at once
        {"UnprocessedItems": {"t": requests[20:25]}},  # no progress: back off
        {"UnprocessedItems": {}},
        {"UnprocessedItems": {"t": requests[25:]}},  # second group: no progress
        {},
    ]
    _, sent = _run(batch_write("t", requests), responses)
    calls = [r for r in sent if isinstance(r, Call)]
    sleeps = [r for r in sent if isinstance(r, Sleep)]
    assert [len(c.params["RequestItems"]["t"]) for c in calls] == [25, 5, 5, 5, 5]
    assert calls[1].params["RequestItems"]["t"] == requests[20:25]
    assert calls[4].params["RequestItems"]["t"] == requests[25:]
    assert len(sleeps) == 2 and all(0 < s.seconds <= 5 for s in sleeps)
    assert sent.index(sleeps[0]) == 2  # no sleep after a response that made progress


def test_batch_write_gives_up_after_repeated_throttling() -> None:
    requests = [_put_req(i) for i in range(3)]
    stuck = {"UnprocessedItems": {"t": requests}}
    with pytest.raises(StorageUnavailable, match="unprocessed"):
        _run(batch_write("t", requests), [stuck] * (MAX_STALLS + 1))


def test_batch_get_resends_unprocessed_keys_and_collects_everything() -> None:
    keys = [{"pk": {"S": "p"}, "sk": {"S": f"s{i}"}} for i in range(150)]
    responses = [
        {"Responses": {"t": keys[:60]}, "UnprocessedKeys": {"t": {"Keys": keys[60:100]}}},
        {"Responses": {"t": []}, "UnprocessedKeys": {"t": {"Keys": keys[60:100]}}},
        {"Responses": {"t": keys[60:100]}},
        {"Responses": {"t": keys[100:]}},
    ]
    found, sent = _run(batch_get("t", keys), responses)
    calls = [r for r in sent if isinstance(r, Call)]
    assert found == keys
    assert [len(c.params["RequestItems"]["t"]["Keys"]) for c in calls] == [100, 40, 40, 50]
    assert all(c.params["RequestItems"]["t"]["ConsistentRead"] for c in calls)
    assert sum(isinstance(r, Sleep) for r in sent) == 1


def _cancelled(codes: list[str], item: Any = None) -> ClientError:
    reasons = [
        {"Code": c, **({"Item": item} if c == "ConditionalCheckFailed" else {})} for c in codes
    ]
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": reasons,
        },
        "TransactWriteItems",
    )


def test_transact_drops_groups_whose_condition_failed_and_retries_conflicts() -> None:
    actions = [{"Put": {"TableName": "t", "Item": {"sk": {"S": str(i)}}}} for i in range(4)]
    owners = [0, 0, 1, 2]  # a chunk + its write, then two writes
    old = {"sk": {"S": "2"}}
    responses = [
        _cancelled(["None", "None", "ConditionalCheckFailed", "None"], old),
        _cancelled(["None", "TransactionConflict", "None"]),
        {},
    ]
    failed, sent = _run(transact(actions, owners), responses)
    calls = [r for r in sent if isinstance(r, Call)]
    assert failed == {1: old}
    assert [len(c.params["TransactItems"]) for c in calls] == [4, 3, 3]
    assert calls[1].params["TransactItems"] == [actions[0], actions[1], actions[3]]
    assert sum(isinstance(r, Sleep) for r in sent) == 1  # backoff only for the conflict


def test_transact_of_one_action_is_a_plain_conditional_put() -> None:
    action = {"Put": {"TableName": "t", "Item": {}, "ConditionExpression": "x"}}
    error = ClientError(
        {"Error": {"Code": "ConditionalCheckFailedException"}, "Item": {"a": 1}}, "PutItem"
    )
    failed, sent = _run(transact([action], [7]), [error])
    assert [c.operation for c in sent] == ["put_item"] and failed == {7: {"a": 1}}


# --------------------------------------------------------------------------- 400 KB guard


@pytest.mark.parametrize("size", [500_000, 5_000_000, 20_000_000])
def test_values_over_the_item_limit_are_chunked_and_reassembled(
    saver: DynamoDBSaver, client: Any, table: str, size: int
) -> None:
    value = os.urandom(size)  # incompressible: really stored as chunks
    thread = f"chunk-{size}"
    stored = _put(saver, thread, {"big": value, "small": 1}, {"big": 1, "small": 1})
    saver.put_writes(stored, [("big", value), ("__interrupt__", value[:600_000])], "task", "")
    found = saver.get_tuple(_config(thread))
    assert found is not None
    assert found.checkpoint["channel_values"]["big"] == value
    assert found.pending_writes == [
        ("task", "__interrupt__", value[:600_000]),
        ("task", "big", value),
    ]
    items = _thread_items(saver, client, table, thread)
    chunks = [i for i in items if i["sk"]["S"].startswith("k#")]
    assert len(chunks) >= 2 * (size // 350_000)
    assert max(len(i["v"]["B"]) for i in items if "v" in i) <= 350_000
    history = list(saver.list(_config(thread)))
    assert history[0].checkpoint["channel_values"]["big"] == value
    saver.copy_thread(thread, thread + "-copy")
    copied = saver.get_tuple(_config(thread + "-copy"))
    assert copied is not None and copied.checkpoint["channel_values"]["big"] == value
    saver.delete_thread(thread)
    saver.delete_thread(thread + "-copy")
    assert _thread_items(saver, client, table, thread) == []


def test_large_compressible_values_are_compressed_before_chunking(
    saver: DynamoDBSaver, client: Any, table: str
) -> None:
    text = ("the quick brown fox jumps over the lazy dog; " * 50_000)[:2_000_000]
    _put(saver, "zip", {"text": text}, {"text": 1})
    items = _thread_items(saver, client, table, "zip")
    blob = next(i for i in items if i["sk"]["S"].startswith("b#"))
    assert blob.get("z") == {"S": "zlib"} and "v" in blob  # 2 MB of text fits one item
    found = saver.get_tuple(_config("zip"))
    assert found is not None and found.checkpoint["channel_values"]["text"] == text
    plain = DynamoDBSaver(client, table, key_prefix=saver.port.key_prefix, compress=False)
    _put(plain, "raw", {"text": text}, {"text": 1})
    raw_items = _thread_items(plain, client, table, "raw")
    assert sum(i["sk"]["S"].startswith("k#") for i in raw_items) == 6
    assert plain.get_tuple(_config("raw")).checkpoint["channel_values"]["text"] == text  # type: ignore[union-attr]


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


@pytest.mark.parametrize("share", [True, False])
def test_a_chat_growing_past_400_kb_over_thirty_turns(client: Any, table: str, share: bool) -> None:
    saver = DynamoDBSaver(client, table, key_prefix=unique_prefix("ddb"), share_lists=share)

    def reply(state: Chat) -> dict[str, Any]:
        turn = len(state["messages"])
        return {"messages": [AIMessage(_noise(20_000, turn), id=f"ai-{turn}")]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}}
    for turn in range(30):
        graph.invoke({"messages": [HumanMessage(_noise(20_000, -turn), id=f"h-{turn}")]}, config)
    state = graph.get_state(config)
    messages = state.values["messages"]
    assert len(messages) == 60
    assert messages[-1].content == _noise(20_000, 59) and messages[0].content == _noise(20_000, 0)
    assert sum(len(m.content) for m in messages) == 1_200_000
    items = _thread_items(saver, client, table, "chat")
    if share:  # one item per message, none over the limit
        assert len(_elements(items)) == 60
        assert not any(i["sk"]["S"].startswith("k#") for i in items)
    else:
        assert any(i["sk"]["S"].startswith("k#") for i in items), "the blob was not chunked"
    history = list(graph.get_state_history(config))
    assert len(history) == 90 and len(history[0].values["messages"]) == 60


def test_writes_without_their_checkpoint_do_not_hide_the_newest_one(
    counted: tuple[DynamoDBSaver, Calls],
) -> None:
    saver, calls = counted
    stored = _put(saver, "t", {"a": 1}, {"a": 1})
    saver.put_writes(stored, [("a", "mine")], "task", "")
    # writes for a newer checkpoint whose put has not landed (more than one Query page)
    pending = _config("t", "", "1ffffffff-not-yet-put")
    saver.put_writes(pending, [(f"c{i}", i) for i in range(40)], "task", "")
    with calls.count() as made:
        found = saver.get_tuple(_config("t"))
    assert found is not None and found.config == stored
    assert found.pending_writes == [("task", "a", "mine")]
    assert made.count("Query") <= 3, made


def test_checkpoint_payloads_over_the_limit_are_chunked_too(
    saver: DynamoDBSaver, client: Any, table: str
) -> None:
    meta = {"source": "loop", "step": 0, "notes": _noise(700_000, 3)}
    stored = _put(saver, "meta", {"a": 1}, {"a": 1}, metadata=meta)
    found = saver.get_tuple(_config("meta"))
    assert found is not None and found.metadata["notes"] == meta["notes"]
    items = _thread_items(saver, client, table, "meta")
    assert any(i["sk"]["S"].startswith("k#c#") for i in items)
    assert [t.metadata["notes"] for t in saver.list(None)] == [meta["notes"]]
    saver.copy_thread("meta", "meta2")
    copied = saver.get_tuple(_config("meta2"))
    assert (
        copied is not None
        and copied.config["configurable"]["checkpoint_id"]
        == (stored["configurable"]["checkpoint_id"])
    )


def test_puts_and_writes_beyond_one_transaction(counted: tuple[DynamoDBSaver, Calls]) -> None:
    saver, calls = counted
    values = {f"ch{i}": i for i in range(130)}
    with calls.count() as made:  # 131 items: values first, the head last
        stored = _put(saver, "wide", values, {ch: 1 for ch in values})
    assert made[-1] == "PutItem" and "TransactWriteItems" not in made, made
    assert made.count("BatchWriteItem") == 6, made
    with calls.count() as made:
        saver.put_writes(stored, [(f"ch{i}", i) for i in range(130)], "task", "")
    assert made == ["PutItem"], made  # one task's writes: one item
    found = saver.get_tuple(_config("wide"))
    assert found is not None
    assert found.checkpoint["channel_values"] == values
    assert [w[2] for w in found.pending_writes] == list(range(130))


#: a process writing one put shape, SIGKILLed by the test between the values (BatchWriteItem)
#: and what names them (the head's PutItem; for put_writes the task's write item): that last
#: request is held, not faked
_CRASH_WORKER = """
import os, sys, time
from langgraph.checkpoint.base import empty_checkpoint
from graphkeep.backends.dynamodb import DynamoDBSaver

table, region, endpoint, prefix, parent_id, shape = sys.argv[1:7]
with DynamoDBSaver.from_table(table, region, endpoint, key_prefix=prefix, setup=False) as saver:
    def hold_the_last(model, **_):
        print("values written, head next", flush=True)
        time.sleep(600)

    saver.client.meta.events.register("before-call.dynamodb.PutItem", hold_the_last)
    conf = {"thread_id": "crash", "checkpoint_ns": "", "checkpoint_id": parent_id}
    parent = {"configurable": conf}
    if shape == "writes":
        big = os.urandom(640_000)  # incompressible: chunk items first
        saver.put_writes(parent, [("ch0", big), ("ch1", "small")], "task", "")
    else:
        values = {"wide": {f"ch{i}": i for i in range(130)}, "values": {"ch0": "second", "ch1": 1},
                  "chunks": {"ch0": os.urandom(640_000)}, "head": {}}[shape]
        versions = {"ch0": 1} if shape == "head" else {ch: 2 for ch in values}
        cp = empty_checkpoint()
        cp["channel_values"] = {"ch0": "first"} if shape == "head" else values
        cp["channel_versions"] = versions
        saver.put(parent, cp, {"source": "loop", "step": 1}, {} if shape == "head" else versions)
"""

#: the values of each put shape, as the test puts them again after the crash
_CRASH_VALUES: dict[str, dict[str, Any]] = {
    "wide": {f"ch{i}": i for i in range(130)},
    "values": {"ch0": "second", "ch1": 1},
    "chunks": {"ch0": os.urandom(640_000)},
    "head": {},
}


@pytest.mark.parametrize("shape", ["head", "values", "chunks", "wide", "writes"])
def test_a_process_killed_between_the_values_and_the_head_leaves_the_last_checkpoint(
    table: str, client: Any, shape: str
) -> None:
    """kill -9 after a write's values went out (plain batch writes, no transaction) and
    before what names them (the head; for put_writes the task's write item), for every put
    shape: the head alone, head + values, head + chunks over 400 KB, more values than one
    transaction holds, and put_writes with chunks. No reader sees the new checkpoint (or
    the task's writes) with values missing; the thread reads as before, the values left
    behind are orphans ``graphkeep check --repair`` removes, the write completes when made
    again, and delete_thread leaves nothing behind."""
    prefix = unique_prefix("crash")
    saver = DynamoDBSaver(client, table, key_prefix=prefix)
    first = _put(saver, "crash", {"ch0": "first"}, {"ch0": 1})
    before = _thread_items(saver, client, table, "crash")
    parent_id = first["configurable"]["checkpoint_id"]
    kill_at(
        _CRASH_WORKER,
        [table, REGION, ENDPOINT, prefix, parent_id, shape],
        "values written, head next",
    )
    after = _thread_items(saver, client, table, "crash")
    if shape == "head":  # nothing to write first: nothing was
        assert after == before
    else:  # the values went out, what names them did not
        assert len(after) > len(before)
        assert {i["sk"]["S"] for i in after if i["sk"]["S"].startswith(("c#", "w#"))} == {
            i["sk"]["S"] for i in before if i["sk"]["S"].startswith(("c#", "w#"))
        }

    reader = DynamoDBSaver(client, table, key_prefix=prefix)
    found = reader.get_tuple(_config("crash"))
    assert found is not None
    assert found.config["configurable"]["checkpoint_id"] == parent_id
    assert found.checkpoint["channel_values"] == {"ch0": "first"}
    assert found.pending_writes == []
    assert [t.config["configurable"]["checkpoint_id"] for t in reader.list(_config("crash"))] == [
        parent_id
    ]
    if shape in ("values", "wide"):  # values no head names: orphans a repair deletes
        from tests.test_check import check_json

        url = f"{_url(table)}&key_prefix={prefix}"
        code, report = check_json(url, "--thread", "crash", "--repair", "--yes", "--grace", "0")
        assert code == 0, report
        assert report["repair"]["values_deleted"] == len(_CRASH_VALUES[shape])
        assert len(_thread_items(reader, client, table, "crash")) == len(before)

    if shape == "writes":
        big = os.urandom(640_000)
        reader.put_writes(first, [("ch0", big), ("ch1", "small")], "task", "")
        found = reader.get_tuple(first)
        assert found is not None
        assert found.pending_writes == [("task", "ch0", big), ("task", "ch1", "small")]
    else:
        values = _CRASH_VALUES[shape] or {"ch0": "first"}
        versions = {ch: 2 for ch in values} if _CRASH_VALUES[shape] else {"ch0": 1}
        new = versions if _CRASH_VALUES[shape] else {}
        again = _put(reader, "crash", values, versions, parent=first, new=new)
        found = reader.get_tuple(_config("crash"))
        assert found is not None
        assert (
            found.config["configurable"]["checkpoint_id"]
            == (again["configurable"]["checkpoint_id"])
        )
        assert found.checkpoint["channel_values"] == values
    reader.delete_thread("crash")
    assert _thread_items(reader, client, table, "crash") == []


# --------------------------------------------------------------------------- types


def test_versions_steps_and_indexes_come_back_with_their_python_types(
    saver: DynamoDBSaver, client: Any, table: str
) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"a": 1.5, "b": {"n": 10**18}}
    cp["channel_versions"] = {"a": 7, "b": "00000000000000000000000000000003.0.5"}
    cp["versions_seen"] = {"node": {"a": 6}}
    meta: Any = {"source": "loop", "step": 12, "score": 0.25, "big": 10**18, "flag": True}
    stored = saver.put(_config("types"), cp, meta, {"a": 7, "b": cp["channel_versions"]["b"]})
    saver.put_writes(stored, [(f"c{i}", i) for i in range(12)], "task", "")
    found = saver.get_tuple(_config("types"))
    assert found is not None
    versions = found.checkpoint["channel_versions"]
    assert versions == {"a": 7, "b": "00000000000000000000000000000003.0.5"}
    assert (
        type(versions["a"]) is int and type(found.checkpoint["versions_seen"]["node"]["a"]) is int
    )
    assert found.metadata == meta
    assert type(found.metadata["step"]) is int and type(found.metadata["score"]) is float
    assert found.checkpoint["channel_values"] == {"a": 1.5, "b": {"n": 10**18}}
    # more than ten writes of a task come back ordered by idx as a number (2 < 10)
    assert [w[1] for w in found.pending_writes] == [f"c{i}" for i in range(12)]
    assert [type(w[2]) for w in found.pending_writes] == [int] * 12
    for item in _thread_items(saver, client, table, "types"):
        for value in item.values():
            assert set(value) <= {"S", "B", "N"}


def test_a_task_s_writes_are_one_item_written_once(
    counted: tuple[DynamoDBSaver, Calls], client: Any, table: str
) -> None:
    """A task's regular writes are one item (its write group, ``wg`` naming the others'
    idx), sent as one conditional PutItem; a second call of the task keeps the first, the
    health probe's indexes and copy_thread see every write of the group."""
    saver, calls = counted
    stored = _put(saver, "g", {"a": 1}, {"a": 1})
    with calls.count() as made:
        saver.put_writes(stored, [("a", 1), ("b", 2), ("c", 3)], "task", "")
    assert made == ["PutItem"], made
    writes = [i for i in _thread_items(saver, client, table, "g") if "#w#" in i["sk"]["S"]]
    assert len(writes) == 1 and "wg" in writes[0], writes
    with calls.count() as made:  # the same task again, other values: the first are kept
        saver.put_writes(stored, [("a", 9), ("b", 9), ("c", 9)], "task", "")
    assert made == ["PutItem"], made
    saver.put_writes(stored, [("__error__", "e"), ("x", "y")], "other", "")
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("other", "__error__", "e"),
        ("other", "x", "y"),
        ("task", "a", 1),
        ("task", "b", 2),
        ("task", "c", 3),
    ]
    cid = stored["configurable"]["checkpoint_id"]
    indexes = saver._call(saver.port.write_indexes("g", "", cid))
    assert sorted(indexes) == sorted([0, 1, 2, -1, 1])
    saver.copy_thread("g", "g2")
    copied = saver.get_tuple(_config("g2", "", cid))
    assert copied is not None and copied.pending_writes == found.pending_writes


async def test_a_task_s_writes_are_one_item_async(table: str) -> None:
    async with AsyncDynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=unique_prefix("agroup"), setup=False
    ) as saver:
        cp = empty_checkpoint()
        stored = await saver.aput(_config("g"), cp, {"source": "input", "step": -1}, {})
        calls = Calls(saver.client)
        with calls.count() as made:
            await saver.aput_writes(stored, [("a", 1), ("b", 2)], "task", "")
            await saver.aput_writes(stored, [("a", 8), ("b", 9)], "task", "")
        assert made == ["PutItem", "PutItem"], made
        found = await saver.aget_tuple(stored)
        assert found is not None
        assert found.pending_writes == [("task", "a", 1), ("task", "b", 2)]


def test_regular_writes_insert_once_and_special_writes_replace(saver: DynamoDBSaver) -> None:
    stored = _put(saver, "w", {"a": 1}, {"a": 1})
    saver.put_writes(stored, [("a", "first"), ("__error__", "e1")], "task", "")
    saver.put_writes(stored, [("a", "second"), ("__error__", "e2")], "task", "")
    big1, big2 = os.urandom(3_000_000), os.urandom(3_000_000)  # chunks written ahead
    saver.put_writes(stored, [("a", "x"), ("b", big1)], "task2", "")
    saver.put_writes(stored, [("a", "y"), ("b", big2)], "task2", "")
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("task", "__error__", "e2"),
        ("task", "a", "first"),
        ("task2", "a", "x"),
        ("task2", "b", big1),
    ]
    items = _thread_items(saver, saver.client, saver.table_name, "w")
    chunk_bytes = sum(len(i["v"]["B"]) for i in items if i["sk"]["S"].startswith("k#"))
    assert chunk_bytes < 3_100_000, "chunks of the rejected re-send were left behind"


# --------------------------------------------------------------------------- TTL


def _at(saver: DynamoDBSaver, offset: float) -> DynamoDBSaver:
    """The same saver seen from ``offset`` seconds in the future (real server, shifted clock)."""
    shifted = DynamoDBSaver(
        saver.client, saver.table_name, key_prefix=saver.port.key_prefix, ttl=60
    )
    shifted.port.clock = lambda: time.time() + offset  # type: ignore[attr-defined]
    return shifted


def test_ttl_attribute_on_every_item_and_expired_items_hidden(client: Any, table: str) -> None:
    assert client.describe_time_to_live(TableName=table)["TimeToLiveDescription"] == {
        "TimeToLiveStatus": "ENABLED",
        "AttributeName": "exp",
    }
    saver = DynamoDBSaver(client, table, key_prefix=unique_prefix("ttl"), ttl=60)
    now = time.time()
    stored = _put(saver, "t", {"a": "x", "big": os.urandom(500_000)}, {"a": 1, "big": 1})
    saver.put_writes(stored, [("a", "w")], "task", "")
    items = _thread_items(saver, client, table, "t")
    assert len(items) >= 6  # head, two blobs, a write, chunks
    for item in items:
        assert "N" in item["exp"]
        assert now + 90 <= int(item["exp"]["N"]) <= time.time() + 92  # ttl + slack
    head = next(i for i in items if i["sk"]["S"].startswith("c#") and "h" in i)
    assert now + 60 <= int(head["vis"]["N"]) <= time.time() + 62
    assert _at(saver, 50).get_tuple(_config("t")) is not None
    later = _at(saver, 61)  # past the head's expiry, before DynamoDB deletes anything
    assert later.get_tuple(_config("t")) is None
    assert later.get_tuple(stored) is None
    assert list(later.list(_config("t"))) == [] and list(later.list(None)) == []
    assert len(_thread_items(saver, client, table, "t")) == len(items)


def test_put_refreshes_what_the_new_checkpoint_needs(client: Any, table: str) -> None:
    saver = DynamoDBSaver(client, table, key_prefix=unique_prefix("ttl"), ttl=60)
    calls = Calls(client)
    first = _put(saver, "t", {"a": "keep", "b": os.urandom(400_000)}, {"a": 1, "b": 1})

    def exps() -> dict[str, int]:
        found = _thread_items(saver, client, table, "t")
        return {i["sk"]["S"]: int(i["exp"]["N"]) for i in found}

    before = exps()
    soon = _at(saver, 5)
    soon.port.known = saver.port.known  # type: ignore[attr-defined]
    soon.port.manifests = saver.port.manifests  # type: ignore[attr-defined]
    with calls.count() as made:  # nothing is due for a refresh yet: one call
        second = _put(soon, "t", {"a": "keep", "b": b""}, {"a": 1, "b": 1}, parent=first, new={})
    assert made == ["PutItem"]
    late = _at(saver, 40)  # a fresh process: it looks the unchanged values up first
    with calls.count() as made:
        third = _put(late, "t", {"a": "keep", "b": b""}, {"a": 1, "b": 1}, parent=second, new={})
    # the refreshes (conditional updates: a transaction), then the head
    assert made == ["BatchGetItem", "TransactWriteItems", "PutItem"], made
    after = exps()
    blob_keys = [k for k in before if k.startswith("b#") or k.startswith("k#b#")]
    assert len(blob_keys) >= 3
    assert all(after[k] >= before[k] + 39 for k in blob_keys)  # values and their chunks
    assert after[first_head(first)] == before[first_head(first)]  # old history is not kept
    assert _at(saver, 95).get_tuple(_config("t")) is not None  # alive 60 s after the last put
    found = _at(saver, 95).get_tuple(third)
    assert found is not None and found.checkpoint["channel_values"]["a"] == "keep"


def first_head(config: Any) -> str:
    conf = config["configurable"]
    return dkeys.head_sk(dkeys.part(conf["checkpoint_ns"])[0], dkeys.part(conf["checkpoint_id"])[0])


def test_delta_ancestors_stay_alive_as_long_as_their_head(client: Any, table: str) -> None:
    saver = DynamoDBSaver(client, table, key_prefix=unique_prefix("ttl"), ttl=60)
    head = _delta_chain(saver, "d", 5)
    later = _at(saver, 45)
    later.port.known = saver.port.known  # type: ignore[attr-defined]
    later.port.manifests = saver.port.manifests  # type: ignore[attr-defined]
    newest = _put(
        later,
        "d",
        {},
        {"d": 7},
        parent=head,
        new={"d": 7},
        metadata={"source": "loop", "step": 6, "counters_since_delta_snapshot": {"d": [6, 6]}},
    )
    view = _at(saver, 100)  # the first checkpoints were written 100 s ago
    history = view.get_delta_channel_history(config=newest, channels=["d"])
    assert history["d"]["seed"] == ["seed"]
    assert [w[2] for w in history["d"]["writes"]] == [f"w{i}" for i in range(6)]


def test_refresh_ttl_on_read_keeps_a_read_only_thread_alive(client: Any, table: str) -> None:
    prefix = unique_prefix("ttl")
    saver = DynamoDBSaver(client, table, key_prefix=prefix, ttl=60)
    _put(saver, "t", {"a": "x"}, {"a": 1})
    reader = DynamoDBSaver(client, table, key_prefix=prefix, ttl=60, refresh_ttl_on_read=True)
    reader.port.clock = lambda: time.time() + 45  # type: ignore[attr-defined]
    assert reader.get_tuple(_config("t")) is not None
    assert _at(saver, 100).get_tuple(_config("t")) is not None
    assert _at(saver, 100).get_tuple(_config("t")).checkpoint["channel_values"] == {"a": "x"}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- keys


def test_key_encoding_keeps_order_and_never_contains_the_separator() -> None:
    rng = random.Random(7)
    alphabet = '#$!"% :|{}abcAB\u00e9\u65e5\U0001f680\x01\x1f-_.'
    words = {"".join(rng.choices(alphabet, k=rng.randint(0, 6))) for _ in range(3000)}
    for word in words:
        encoded, short = dkeys.part(word)
        assert "#" not in encoded and not short and dkeys.decode(encoded) == word
    ordered = sorted(words)
    assert sorted(words, key=lambda w: dkeys.head_sk("", dkeys.part(w)[0])) == ordered
    # a checkpoint and all its writes sort together, below the next id
    for a, b in zip(ordered, ordered[1:], strict=False):
        wa = dkeys.write_sk("", dkeys.part(a)[0], "t", 3)
        hb = dkeys.head_sk("", dkeys.part(b)[0])
        assert wa < hb
        assert dkeys.before_bound("", dkeys.part(b)[0]) > wa
    assert dkeys.write_sk("", "x", "t", -4) < dkeys.write_sk("", "x", "t", -1)
    assert dkeys.write_sk("", "x", "t", 2) < dkeys.write_sk("", "x", "t", 10)


def test_very_long_ids_are_shortened_but_round_trip(saver: DynamoDBSaver) -> None:
    thread = " " * 1024  # escapes to 2 KB: the partition key keeps a digest
    ns = "n#" * 300
    stored = _put(saver, thread, {"c" * 300: 1}, {"c" * 300: "v" * 300}, ns=ns)
    saver.put_writes(stored, [("c" * 300, 2)], "t" * 400, "")
    found = saver.get_tuple(_config(thread, ns))
    assert found is not None
    assert found.config == stored
    assert found.pending_writes == [("t" * 400, "c" * 300, 2)]
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {thread}
    saver.delete_thread(thread)
    assert list(saver.list(None)) == []


# --------------------------------------------------------------------------- runs, locks


def test_delete_for_runs_queries_the_run_index(counted: tuple[DynamoDBSaver, Calls]) -> None:
    saver, calls = counted
    a = _put(
        saver, "t1", {"x": 1}, {"x": 1}, metadata={"source": "loop", "step": 0, "run_id": "r1"}
    )
    _put(
        saver,
        "t1",
        {"x": 2},
        {"x": 2},
        parent=a,
        metadata={"source": "loop", "step": 1, "run_id": "r2"},
    )
    _put(saver, "t2", {"x": 1}, {"x": 1}, metadata={"source": "loop", "step": 0, "run_id": "r1"})
    with calls.count() as made:
        saver.delete_for_runs(["r1"])
    assert "Scan" not in made and made.count("Query") >= 1, made
    assert [t.metadata["run_id"] for t in saver.list(None)] == ["r2"]


def test_delete_for_runs_without_the_index_scans(client: Any) -> None:
    name = f"gk_test_noindex_{uuid.uuid4().hex[:8]}"
    with DynamoDBSaver.from_table(
        name, REGION, ENDPOINT, key_prefix=unique_prefix("ni"), run_index=False
    ) as saver:
        try:
            _put(
                saver,
                "t",
                {"x": 1},
                {"x": 1},
                metadata={"source": "loop", "step": 0, "run_id": "r1"},
            )
            saver.delete_for_runs(["r1"])
            assert list(saver.list(None)) == []
        finally:
            saver.client.delete_table(TableName=name)


def test_thread_lease_is_exclusive_and_survives_delete_thread(saver: DynamoDBSaver) -> None:
    with saver.lock("t", ttl=5) as held:
        with pytest.raises(graphkeep.errors.LockNotAcquired):
            saver.lock("t", blocking=False).acquire()
        saver.delete_thread("t")
        with pytest.raises(graphkeep.errors.LockNotAcquired):
            saver.lock("t", blocking=False).acquire()
        assert held.extend(5)
    assert saver.lock("t", blocking=False).acquire()


# --------------------------------------------------------------------------- fenced leases


def test_transact_with_a_guard_fails_the_whole_write_when_its_check_fails() -> None:
    actions = [{"Put": {"TableName": "t", "Item": {"sk": {"S": str(i)}}}} for i in range(2)]
    check = {"ConditionCheck": {"TableName": "t", "Key": {}}}
    guard = Guard(check, lambda old: LeaseLost("t", 1, int(old["fence"]["N"]) if old else None))
    stored = {"sk": {"S": "1"}}
    newer = {"fence": {"N": "9"}}
    responses = [
        # the second write was already stored: dropped, the rest re-sent with the check
        ClientError(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                "CancellationReasons": [
                    {"Code": "None"},
                    {"Code": "ConditionalCheckFailed", "Item": stored},
                    {"Code": "None"},
                ],
            },
            "TransactWriteItems",
        ),
        ClientError(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                "CancellationReasons": [
                    {"Code": "None"},
                    {"Code": "ConditionalCheckFailed", "Item": newer},
                ],
            },
            "TransactWriteItems",
        ),
    ]
    with pytest.raises(LeaseLost) as lost:
        _run(transact(actions, [0, 1], guard), responses)
    assert lost.value.newer == 9 and not responses
    # a single write left is still a transaction: the check needs one
    _, sent = _run(transact(actions[:1], [0], guard), [{}])
    assert [c.operation for c in sent] == ["transact_write_items"]
    assert sent[0].params["TransactItems"] == [actions[0], check]
    # every group dropped: nothing left to write, nothing sent
    already = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [{"Code": "ConditionalCheckFailed"}, {"Code": "None"}],
        },
        "TransactWriteItems",
    )
    failed, sent = _run(transact(actions[:1], [0], guard), [already])
    assert failed == {0: None} and len(sent) == 1


def test_lease_requests_are_re_sent_while_a_fenced_write_holds_the_lease_item() -> None:
    """Fenced writes' transactions check the lease item, and DynamoDB refuses a single-item
    write to an item of a transaction under way (moto never does: fed by hand)."""
    port = DynamoDBCheckpointPort("t")
    conflict = ClientError(
        {"Error": {"Code": "TransactionConflictException", "Message": "conflict"}}, "UpdateItem"
    )
    fence, sent = _run(port.acquire_lock("thread", "me", 5000), [conflict, {}])
    calls = [r for r in sent if isinstance(r, Call)]
    assert len(calls) == 2 and isinstance(sent[1], Sleep) and calls[0] == calls[1]
    assert fence == int(calls[0].params["ExpressionAttributeValues"][":f"]["N"])
    released, sent = _run(port.release_lock("thread", "me"), [conflict, conflict, {}])
    assert released and sum(isinstance(r, Call) for r in sent) == 3


class Transactions:
    """The TransactWriteItems a client sends, as sent (before-parameter-build hook)."""

    def __init__(self, client: Any) -> None:
        self.sent: list[list[dict[str, Any]]] = []
        client.meta.events.register(
            "before-parameter-build.dynamodb.TransactWriteItems", self._seen
        )

    def _seen(self, params: dict[str, Any], **_: Any) -> None:
        self.sent.append(list(params["TransactItems"]))

    def checked(self) -> list[bool]:
        """Per transaction: whether it ends with the lease's check."""
        return [
            "ConditionCheck" in items[-1] and items[-1]["ConditionCheck"]["Key"]["sk"]["S"] == "l#"
            for items in self.sent
        ]


class Takeover:
    """A holder of ``thread``'s lease stalled past its ``ttl`` while another run took the
    thread over: each one's context (its writes there carry its fencing token)."""

    def __init__(self, saver: DynamoDBSaver, thread: str) -> None:
        self.stale = contextvars.copy_context()
        assert self.stale.run(saver.lock(thread, ttl=0.2).acquire)
        time.sleep(0.3)
        self.lock = saver.lock(thread, ttl=30)
        self.holder = contextvars.copy_context()
        assert self.holder.run(self.lock.acquire)


def test_fencing_tokens_grow_and_re_arming_a_held_lease_keeps_its_token(
    saver: DynamoDBSaver, table: str
) -> None:
    held = saver.lock("t", ttl=5)
    assert held.acquire()
    first = held.fence
    assert first is not None and first >= int(time.time() * 1000) - 5_000
    assert held.acquire() and held.fence == first  # ours already: re-armed, same token
    held.release()
    # a grant from a clock an hour ahead; the next grant, by the real clock, still grows
    ahead = _at(saver, 3600).lock("t", ttl=0.05)
    assert ahead.acquire()
    assert ahead.fence is not None and ahead.fence > first + 3_000_000
    ahead.release()
    after = saver.lock("t", ttl=5)
    assert after.acquire() and after.fence == ahead.fence + 1
    after.release()
    # released: the lease item keeps the thread's token, holder and expiry gone
    pk, _ = saver.port.thread_key("t")
    lease = saver.client.get_item(
        TableName=table, Key={"pk": {"S": pk}, "sk": {"S": "l#"}}, ConsistentRead=True
    )["Item"]
    assert lease["fence"] == {"N": str(after.fence)} and "tok" not in lease


def test_a_stalled_holder_is_refused_after_its_successor_released(saver: DynamoDBSaver) -> None:
    """The successor's release keeps the thread's fencing token (deleting the lease item
    would let the stalled holder write again)."""
    first = _put(saver, "t", {"a": 1}, {"a": 1})
    takeover = Takeover(saver, "t")
    takeover.holder.run(takeover.lock.release)
    with pytest.raises(LeaseLost) as lost:
        takeover.stale.run(_put, saver, "t", {"a": 2}, {"a": 2}, parent=first)
    assert lost.value.newer == takeover.lock.fence
    found = saver.get_tuple(_config("t"))
    assert found is not None and found.config == first


async def test_async_a_stalled_holders_writes_are_refused(table: str) -> None:
    async with graphkeep.aconnect(_url(table), key_prefix=unique_prefix("fa")) as saver:
        config = _config("t")
        took_over = asyncio.Event()

        async def stalled() -> None:
            await saver.lock("t", ttl=0.2).aacquire()
            cp = empty_checkpoint()
            stored = await saver.aput(config, cp, {"source": "input", "step": -1}, {})
            await took_over.wait()
            with pytest.raises(LeaseLost):
                await saver.aput_writes(stored, [("x", 1)], "task")
            with pytest.raises(LeaseLost):
                await saver.adelete_thread("t")

        async def successor() -> None:
            await asyncio.sleep(0.3)
            lock = saver.lock("t", ttl=30)
            await lock.aacquire()
            await lock.arelease()
            took_over.set()

        await asyncio.gather(stalled(), successor())
        found = await saver.aget_tuple(config)
        assert found is not None and found.pending_writes == []


def test_a_fenced_put_of_the_head_alone_is_one_transaction_with_the_lease_check(
    counted: tuple[DynamoDBSaver, Calls],
) -> None:
    saver, calls = counted
    stored = _put(saver, "t", {"a": 1}, {"a": 1})
    sent = Transactions(saver.client)
    with calls.count() as made, saver.lock("t", ttl=30):
        _put(saver, "t", {"a": 1}, {"a": 1}, parent=stored, new={})
    assert made == ["UpdateItem", "TransactWriteItems", "UpdateItem"], made  # lock, put, unlock
    assert [len(items) for items in sent.sent] == [2] and sent.checked() == [True]


def test_a_refused_put_over_the_transaction_limits_leaves_nothing_a_reader_sees(
    counted: tuple[DynamoDBSaver, Calls], client: Any, table: str
) -> None:
    saver, calls = counted
    first = _put(saver, "wide", {"ch0": "first"}, {"ch0": 1})
    before = {i["sk"]["S"] for i in _thread_items(saver, client, table, "wide")}
    # 130 values and one of 5 MB (chunk items): over one transaction's 100 items and 4 MB
    values: dict[str, Any] = {f"ch{i}": i for i in range(130)} | {"big": os.urandom(5_000_000)}
    versions = {ch: 2 for ch in values}
    takeover = Takeover(saver, "wide")
    with calls.count() as made:
        with pytest.raises(LeaseLost):
            takeover.stale.run(_put, saver, "wide", values, versions, parent=first)
    assert made[-1] == "TransactWriteItems" and "PutItem" not in made, made
    added = {i["sk"]["S"] for i in _thread_items(saver, client, table, "wide")} - before - {"l#"}
    assert added and all(sk.startswith("k#") for sk in added)  # only chunks no owner names
    found = saver.get_tuple(_config("wide"))
    assert found is not None and found.config == first
    assert found.checkpoint["channel_values"] == {"ch0": "first"}
    # the lease's holder puts the same checkpoint: values in fenced transactions, head last
    sent = Transactions(saver.client)
    with calls.count() as made:
        stored = takeover.holder.run(_put, saver, "wide", values, versions, parent=first)
    assert "PutItem" not in made and made.count("TransactWriteItems") == 2, made
    assert sent.checked() == [True, True]
    found = saver.get_tuple(_config("wide"))
    assert found is not None and found.config == stored
    assert found.checkpoint["channel_values"] == values


def test_fenced_put_writes_of_a_task_are_one_item_refused_whole(
    saver: DynamoDBSaver, client: Any
) -> None:
    """130 writes of one task are one item (the task's write group): one fenced transaction
    of the group and the lease's check. A lease lost before it refuses it whole: none of
    the stalled run's writes is stored."""
    stored = _put(saver, "t", {"a": 1}, {"a": 1})
    writes = [(f"ch{i}", i) for i in range(130)]
    sent = Transactions(saver.client)
    with saver.lock("t", ttl=30):
        saver.put_writes(stored, writes, "done", "")
    assert [len(items) for items in sent.sent] == [2] and sent.checked() == [True]

    other = DynamoDBSaver(
        boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT),
        saver.table_name,
        key_prefix=saver.port.key_prefix,
    )

    def take_over_first(**_: Any) -> None:
        if len(sent.sent) == 2:  # the refused write's transaction is about to go out
            time.sleep(0.3)  # past the stalled holder's ttl
            lock = other.lock("t", ttl=30)
            assert contextvars.copy_context().run(lock.acquire)

    client_events = saver.client.meta.events
    client_events.register("before-call.dynamodb.TransactWriteItems", take_over_first)
    stalled = contextvars.copy_context()
    assert stalled.run(saver.lock("t", ttl=0.2).acquire)
    try:
        with pytest.raises(LeaseLost):
            stalled.run(saver.put_writes, stored, writes, "stalled", "")
    finally:
        client_events.unregister("before-call.dynamodb.TransactWriteItems", take_over_first)
        other.client.close()
    assert len(sent.sent) == 2 and sent.checked() == [True, True]
    found = saver.get_tuple(stored)
    assert found is not None
    by_task = Counter(task for task, _, _ in found.pending_writes)
    assert by_task == {"done": 130}, by_task


def test_fenced_deletes_and_copies_are_refused_whole_after_a_takeover(
    saver: DynamoDBSaver, client: Any, table: str
) -> None:
    """delete_thread and copy_thread onto a thread of more than one transaction's items:
    the stalled holder's are refused before anything changed, the holder's go through."""
    values = {f"ch{i}": i for i in range(130)}
    stored = _put(saver, "t", values, {ch: 1 for ch in values})
    _put(saver, "src", values, {ch: 1 for ch in values})
    items = _thread_items(saver, client, table, "t")
    takeover = Takeover(saver, "t")
    sent = Transactions(saver.client)
    with pytest.raises(LeaseLost):
        takeover.stale.run(saver.delete_thread, "t")
    with pytest.raises(LeaseLost):
        takeover.stale.run(saver.copy_thread, "src", "t")
    assert sent.checked() == [True, True]  # each refused at its first transaction
    assert len(_thread_items(saver, client, table, "t")) == len(items)
    found = saver.get_tuple(_config("t"))
    assert found is not None and found.config == stored

    takeover.holder.run(saver.delete_thread, "t")
    assert _thread_items(saver, client, table, "t") == []
    pk, _ = saver.port.thread_key("t")  # the lease item stays: its fencing token outlives it
    lease = client.get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": dkeys.LOCK_SK}})
    assert "fence" in lease["Item"]
    takeover.holder.run(saver.copy_thread, "src", "t")
    found = saver.get_tuple(_config("t"))
    assert found is not None and found.checkpoint["channel_values"] == values
    assert all(sent.checked()) and len(sent.sent) == 6  # 2 refused, 2 deletes, 2 copies


# --------------------------------------------------------------------------- setup, errors


def test_setup_is_idempotent_and_the_definition_is_exported(table: str, client: Any) -> None:
    with DynamoDBSaver.from_table(table, REGION, ENDPOINT) as saver:
        saver.setup()
    definition = DynamoDBSaver.table_definition(table)
    described = client.describe_table(TableName=table)["Table"]
    assert described["KeySchema"] == definition["KeySchema"]
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert [i["IndexName"] for i in described["GlobalSecondaryIndexes"]] == ["run_id"]
    resource = DynamoDBSaver.table_definition("x", format="cloudformation")
    assert resource["Type"] == "AWS::DynamoDB::Table"
    assert resource["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "exp",
        "Enabled": True,
    }


def test_a_table_with_another_key_schema_is_refused(client: Any) -> None:
    name = f"gk_test_foreign_{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        with pytest.raises(ConfigurationError, match="key schema"):
            with DynamoDBSaver.from_table(name, REGION, ENDPOINT):
                pass
    finally:
        client.delete_table(TableName=name)


def test_unreachable_endpoint_raises_storage_unavailable_with_masked_url() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:secret@127.0.0.1:{port}"
    with pytest.raises(StorageUnavailable) as raised:
        with DynamoDBSaver.from_table("t", REGION, url):
            pass
    assert "secret" not in str(raised.value) and "./dev services up" in str(raised.value)


def test_urls_and_options_are_validated() -> None:
    assert parse_url("dynamodb://tbl?region=eu-west-1&endpoint_url=http://h:1") == (
        "tbl",
        {"region_name": "eu-west-1", "endpoint_url": "http://h:1"},
    )
    with pytest.raises(ConfigurationError):
        parse_url("dynamodb://tbl?color=red")
    with pytest.raises(ConfigurationError):
        parse_url("dynamodb:///")
    with pytest.raises(ConfigurationError, match="unknown option"):
        with graphkeep.connect("dynamodb://tbl?region=us-east-1", bogus=1):
            pass
    with pytest.raises(ConfigurationError):
        DynamoDBSaver(None, "tbl", compress=42)


def test_sync_saver_is_safe_across_threads(saver: DynamoDBSaver) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            parent = None
            for step in range(5):
                parent = _put(saver, f"w{n}", {"s": step}, {"s": step + 1}, parent=parent)
                saver.put_writes(parent, [("s", step)], f"task{n}", "")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(len(list(saver.list(_config(f"w{n}")))) == 5 for n in range(8))


def test_the_test_server_answers_concurrent_transactions_without_spurious_errors(
    table: str,
) -> None:
    """moto's transaction deep copy races concurrent writes (HTTP 500) unless its server runs
    one request at a time, as tools/moto_server.py makes it; DynamoDB itself never does
    this, and retries of such errors would inflate the request counts of every test."""
    errors: list[str] = []
    client = boto3.client("dynamodb", endpoint_url=ENDPOINT, region_name=REGION)

    def seen(response: Any = None, **_: Any) -> None:  # every attempt, before any retry
        if response is not None and response[0].status_code >= 500:
            errors.append(f"{response[0].status_code}: {response[1].get('Error')}")

    client.meta.events.register("needs-retry.dynamodb", seen)

    def writer(n: int) -> None:
        for i in range(15):
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": table,
                            "Item": {
                                "pk": {"S": f"race-{n}"},
                                "sk": {"S": f"{i}-{j}"},
                                "v": {"B": os.urandom(2000)},
                            },
                        }
                    }
                    for j in range(4)
                ]
            )

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    count = client.scan(TableName=table, Select="COUNT", ConsistentRead=True)["Count"]
    assert count == 8 * 15 * 4


def test_the_test_servers_cheap_transaction_backup_still_rolls_a_failed_transaction_back(
    table: str, client: Any
) -> None:
    """tools/moto_server.py backs a table up for a transaction by deep-copying only the items
    it touches, and answers base-table Queries from the partition alone: a cancelled
    transaction must still undo its earlier actions, and Queries must still see exactly
    the partition (DynamoDB's own behaviour, which these shortcuts must not change)."""

    def item(pk: str, sk: str, v: str) -> dict[str, Any]:
        return {"pk": {"S": pk}, "sk": {"S": sk}, "v": {"S": v}}

    for n in range(30):
        client.put_item(TableName=table, Item=item(f"rb-{n % 3}", f"{n:02d}", "old"))
    update = {
        "TableName": table,
        "Key": {"pk": {"S": "rb-0"}, "sk": {"S": "00"}},
        "UpdateExpression": "SET v = :v",
        "ExpressionAttributeValues": {":v": {"S": "changed"}},
    }
    cancelled = {
        "TableName": table,
        "Item": item("rb-1", "01", "clash"),
        "ConditionExpression": "attribute_not_exists(pk)",
    }
    added = {"TableName": table, "Item": item("rb-2", "99", "added")}
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[{"Update": update}, {"Put": added}, {"Put": cancelled}]
        )

    def partition(pk: str, **extra: Any) -> list[tuple[str, str]]:
        got = client.query(
            TableName=table,
            KeyConditionExpression="pk = :p" + extra.pop("and_", ""),
            ExpressionAttributeValues={":p": {"S": pk}, **extra},
            ConsistentRead=True,
        )["Items"]
        return [(i["sk"]["S"], i["v"]["S"]) for i in got]

    assert partition("rb-0") == [(f"{n:02d}", "old") for n in range(0, 30, 3)]
    assert partition("rb-2") == [(f"{n:02d}", "old") for n in range(2, 30, 3)]
    assert partition("rb-1", and_=" AND sk > :s", **{":s": {"S": "20"}}) == [
        ("22", "old"),
        ("25", "old"),
        ("28", "old"),
    ]
    assert partition("rb-none") == []
    client.transact_write_items(TransactItems=[{"Update": update}, {"Put": added}])
    assert ("00", "changed") in partition("rb-0") and ("99", "added") in partition("rb-2")


# --------------------------------------------------------------------------- shared lists

ELEMENT = "__graphkeep.element__"


def _elements(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Element items (chunk items excluded) of a partition."""
    return [i for i in items if i["sk"]["S"].startswith("b#") and ELEMENT in i["sk"]["S"]]


def _message_pair(turn: int, size: int = 300) -> list[Any]:
    return [
        HumanMessage(_noise(size, 2 * turn), id=f"h-{turn}"),
        AIMessage(_noise(size, 2 * turn + 1), id=f"a-{turn}"),
    ]


def _grow(saver: Any, thread: str, turns: int, *, size: int = 300) -> tuple[Any, list[Any]]:
    """A list channel growing by two messages per checkpoint (direct saver puts)."""
    config: Any = None
    messages: list[Any] = []
    version: Any = None
    for turn in range(turns):
        messages = messages + _message_pair(turn, size)
        version = saver.get_next_version(version, None)
        config = _put(saver, thread, {"messages": messages}, {"messages": version}, parent=config)
    return config, messages


def _version(saver: Any, config: Any) -> Any:
    found = saver.get_tuple(config)
    assert found is not None
    return found.checkpoint["channel_versions"]["messages"]


def test_the_test_servers_plain_json_answers_round_trip_every_attribute_type(
    table: str, client: Any
) -> None:
    """tools/moto_server.py writes the answers of the item operations as DynamoDB's JSON
    directly instead of through moto's shape serializer: every attribute type must come back
    exactly as it was written, through every operation that returns items, and errors must
    still be DynamoDB's errors."""
    blob = bytes(range(256))
    item = {
        "pk": {"S": "json-types"},
        "sk": {"S": "a"},
        "s": {"S": "text é ✓"},
        "n": {"N": "-12.5"},
        "b": {"B": blob},
        "t": {"BOOL": True},
        "z": {"NULL": True},
        "m": {"M": {"inner": {"B": b"\x00\xff"}, "l": {"L": [{"N": "1"}, {"S": "x"}]}}},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"\x01", b"\x02"]},
    }
    key = {"pk": item["pk"], "sk": item["sk"]}

    def same(got: dict[str, Any]) -> None:
        normal = {
            k: {t: sorted(v) if t in ("SS", "NS", "BS") else v for t, v in a.items()}
            for k, a in got.items()
        }
        expected = {
            k: {t: sorted(v) if t in ("SS", "NS", "BS") else v for t, v in a.items()}
            for k, a in item.items()
        }
        assert normal == expected

    client.put_item(TableName=table, Item=item)
    client.put_item(TableName=table, Item={"pk": item["pk"], "sk": {"S": "b"}})
    same(client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"])
    page = client.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": item["pk"]},
        ConsistentRead=True,
        Limit=1,
        ReturnConsumedCapacity="TOTAL",
    )
    assert page["Count"] == 1 and page["LastEvaluatedKey"] == key
    assert page["ConsumedCapacity"]["TableName"] == table
    same(page["Items"][0])
    same(client.batch_get_item(RequestItems={table: {"Keys": [key]}})["Responses"][table][0])
    same(
        client.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": key}}])[
            "Responses"
        ][0]["Item"]
    )
    updated = client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET s = :s",
        ExpressionAttributeValues={":s": item["s"]},
        ReturnValues="ALL_NEW",
    )
    same(updated["Attributes"])
    same(client.delete_item(TableName=table, Key=key, ReturnValues="ALL_OLD")["Attributes"])
    assert "Item" not in client.get_item(TableName=table, Key=key, ConsistentRead=True)
    with pytest.raises(ClientError) as failed:
        client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET s = :s",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":s": item["s"]},
        )
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"


def test_the_test_servers_projections_return_exactly_the_projected_attributes(
    table: str, client: Any
) -> None:
    """tools/moto_server.py answers a projection on top-level attribute names by copying those
    attributes (moto rebuilt the whole item once per name): GetItem, Query, Scan and
    BatchGetItem must still return exactly the projected attributes, as written, a name the
    item lacks left out; nested paths and list elements as before; the stored item intact."""
    item = {
        "pk": {"S": "proj"},
        "sk": {"S": "a"},
        "s": {"S": "text"},
        "n": {"N": "-12.50"},
        "b": {"B": bytes(range(64))},
        "m": {"M": {"inner": {"B": b"\x00\xff"}, "other": {"S": "x"}}},
        "l": {"L": [{"N": "1"}, {"S": "second"}]},
        "ss": {"SS": ["x", "y"]},
    }
    key = {"pk": item["pk"], "sk": item["sk"]}
    client.put_item(TableName=table, Item=item)
    client.put_item(TableName=table, Item={**item, "sk": {"S": "b"}, "s": {"S": "other"}})

    def pick(*names: str, sk: str = "a") -> dict[str, Any]:
        return {name: ({"S": sk} if name == "sk" else item[name]) for name in names}

    def normal(got: dict[str, Any]) -> dict[str, Any]:
        return {k: {t: sorted(v) if t == "SS" else v for t, v in a.items()} for k, a in got.items()}

    names = {"#n": "n", "#s": "s"}
    got = client.get_item(
        TableName=table,
        Key=key,
        ProjectionExpression="#s, #n, b, ss, absent",
        ExpressionAttributeNames=names,
        ConsistentRead=True,
    )["Item"]
    assert normal(got) == normal(pick("s", "n", "b", "ss"))
    got = client.get_item(
        TableName=table, Key=key, ProjectionExpression="m.inner, l[1], sk", ConsistentRead=True
    )["Item"]
    assert got == {
        "m": {"M": {"inner": item["m"]["M"]["inner"]}},
        "l": {"L": [{"S": "second"}]},
        **pick("sk"),
    }
    page = client.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": item["pk"]},
        ProjectionExpression="sk, #s",
        ExpressionAttributeNames={"#s": "s"},
        ConsistentRead=True,
    )["Items"]
    assert page == [pick("sk", "s"), {"sk": {"S": "b"}, "s": {"S": "other"}}]
    scanned = client.scan(TableName=table, ProjectionExpression="pk, l", ConsistentRead=True)
    assert scanned["Items"] == [pick("pk", "l"), pick("pk", "l")]
    batch = client.batch_get_item(
        RequestItems={table: {"Keys": [key], "ProjectionExpression": "b, m"}}
    )["Responses"][table]
    assert batch == [pick("b", "m")]
    stored = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert normal(stored) == normal(item)


def test_dynamodb_clients_share_one_loader_of_botocores_models() -> None:
    """Every client graphkeep makes reads botocore's service model and endpoint rules through
    one loader, so a process parses those JSON files once, not once per client."""
    from graphkeep.backends.dynamodb.client import async_client, sync_client

    with sync_client(REGION, ENDPOINT) as one, sync_client(REGION, ENDPOINT) as two:
        assert one._loader is two._loader
        assert one.describe_limits()["AccountMaxReadCapacityUnits"] > 0

    async def made() -> Any:
        async with async_client(REGION, ENDPOINT) as three:
            return three._loader

    assert asyncio.run(made()) is one._loader


def test_element_sort_keys_are_ranges_per_epoch() -> None:
    from graphkeep.backends.dynamodb.elements import ELEMENT_GAP, element_runs, is_element_sk
    from graphkeep.checkpoint.lists import element_key

    def sk(ns: str, key: str) -> str:
        return dkeys.blob_sk(dkeys.part(ns)[0], dkeys.part(ELEMENT)[0], dkeys.part(key)[0])

    epoch, other = "0123456789abcdef", "fedcba9876543210"
    run = [sk("", element_key(epoch, i)) for i in range(300)]
    assert all(is_element_sk(k) for k in run) and sorted(run) == run
    assert not is_element_sk(sk("", "00000000000000000000000000000003.0.5"))
    assert not is_element_sk(dkeys.blob_sk("", "messages", element_key(epoch, 1)))
    long_ns = "n" * 400  # shortened with a digest: still one prefix per namespace
    shortened = [sk(long_ns, element_key(epoch, i)) for i in range(3)]
    assert all(is_element_sk(k) for k in shortened) and sorted(shortened) == shortened
    assert element_runs(run[::-1]) == [run]  # an append-only list: one Query
    far = sk("", element_key(epoch, 299 + ELEMENT_GAP + 1))
    near = sk("", element_key(epoch, 299 + ELEMENT_GAP))
    two = [sk("", element_key(other, 0)), sk("", element_key(other, 1))]
    assert sorted(element_runs([*run, far, *two])) == sorted([run, [far], two])
    assert element_runs([*run, near]) == [[*run, near]]


def test_a_growing_chat_shares_its_messages(counted: tuple[DynamoDBSaver, Calls]) -> None:
    saver, calls = counted

    def reply(state: Chat) -> dict[str, Any]:
        turn = len(state["messages"]) // 2
        return {"messages": [AIMessage(_noise(300, 2 * turn + 1), id=f"a-{turn}")]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "chat"}}
    for turn in range(40):
        human = HumanMessage(_noise(300, 2 * turn), id=f"h-{turn}")
        graph.invoke({"messages": [human]}, config)
    expected = [m for turn in range(40) for m in _message_pair(turn)]
    assert graph.get_state(config).values["messages"] == expected
    items = _thread_items(saver, saver.client, saver.table_name, "chat")
    elements = _elements(items)
    assert len(elements) == 80  # each message stored once
    stored = sum(len(i["v"]["B"]) for i in items if "v" in i)
    assert stored < 80 * 300 * 6, stored  # linear (a whole list per version: ~40x more)
    with calls.count() as made:
        latest = saver.get_tuple(config)
    # the head (with its copy of the list's manifest); the elements are the ones it wrote
    assert made == ["Query"], made
    assert latest is not None and latest.checkpoint["channel_values"]["messages"] == expected
    prefix = saver.port.key_prefix  # type: ignore[attr-defined]
    other = DynamoDBSaver(saver.client, saver.table_name, key_prefix=prefix)
    with calls.count() as made:
        latest = other.get_tuple(config)
    # another saver: the head, then the 80 elements (one run of keys): one Query
    assert made == ["Query", "Query"], made
    assert latest is not None and latest.checkpoint["channel_values"]["messages"] == expected
    history = list(graph.get_state_history(config))
    assert len(history) == 120
    assert [len(h.values.get("messages", [])) for h in history[:3]] == [80, 79, 78]
    with calls.count() as made:
        listed = list(saver.list(config, limit=100))
    assert len(listed) == 100 and made.count("Query") <= 3, made


def test_shared_get_tuple_costs_what_unshared_costs(
    table: str, client: Any, counted: tuple[DynamoDBSaver, Calls]
) -> None:
    """Unshared: the head, then the list's value (BatchGetItem). Shared, read by another
    saver: the head, with a copy of the list's manifest (``iv``), then the elements
    (BatchGetItem): no request more; by the saver that wrote them: the head alone."""
    saver, calls = counted
    prefix = saver.port.key_prefix  # type: ignore[attr-defined]
    plain = DynamoDBSaver(saver.client, table, key_prefix=prefix, share_lists=False)
    _grow(plain, "plain", 3)
    _grow(saver, "shared", 3)
    other = DynamoDBSaver(saver.client, table, key_prefix=prefix)
    with calls.count() as plain_calls:
        a = plain.get_tuple(_config("plain"))
    with calls.count() as shared_calls:
        b = other.get_tuple(_config("shared"))
    with calls.count() as writer_calls:
        c = saver.get_tuple(_config("shared"))
    assert a is not None and b is not None and c is not None
    assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    assert c.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    assert plain_calls == shared_calls == ["Query", "BatchGetItem"], (plain_calls, shared_calls)
    assert writer_calls == ["Query"], writer_calls
    assert _elements(_thread_items(plain, client, table, "plain")) == []


def test_prune_and_delete_leave_no_orphan_elements(
    saver: DynamoDBSaver, client: Any, table: str
) -> None:
    config, messages = _grow(saver, "p", 5)
    # an edit: message 3 replaced (its old element is no longer named by the newest list)
    edited = [*messages[:3], AIMessage("changed " + _noise(300, 99), id=messages[3].id)]
    edited += messages[4:]
    version = saver.get_next_version(_version(saver, config), None)
    newest = _put(saver, "p", {"messages": edited}, {"messages": version}, parent=config)
    assert len(_elements(_thread_items(saver, client, table, "p"))) == 11
    saver.copy_thread("p", "p-copy")
    copied = saver.get_tuple(_config("p-copy"))
    assert copied is not None and copied.checkpoint["channel_values"]["messages"] == edited
    saver.prune(["p"])
    items = _thread_items(saver, client, table, "p")
    assert len([i for i in items if i["sk"]["S"].startswith("c#")]) == 1
    assert len(_elements(items)) == 10  # the replaced message's element is gone
    assert len([i for i in items if i["sk"]["S"].startswith("b#")]) == 11  # + one manifest
    found = saver.get_tuple(_config("p"))
    assert found is not None and found.config == newest
    assert found.checkpoint["channel_values"]["messages"] == edited
    saver.delete_thread("p")
    saver.delete_thread("p-copy")
    assert _thread_items(saver, client, table, "p") == []
    assert _thread_items(saver, client, table, "p-copy") == []


def test_elements_over_the_item_limit_are_chunked(
    saver: DynamoDBSaver, client: Any, table: str
) -> None:
    big = os.urandom(500_000)
    values = [big, "small " * 200, {"n": 1}]
    first = _put(saver, "big", {"items": values}, {"items": 1})
    found = saver.get_tuple(_config("big"))
    assert found is not None and found.checkpoint["channel_values"]["items"] == values
    items = _thread_items(saver, client, table, "big")
    assert len(_elements(items)) == 3
    chunks = [i for i in items if i["sk"]["S"].startswith("k#b#") and ELEMENT in i["sk"]["S"]]
    assert len(chunks) == 2
    _put(saver, "big", {"items": values[1:]}, {"items": 2}, parent=first)  # big one dropped
    assert [len(t.checkpoint["channel_values"]["items"]) for t in saver.list(None)] == [2, 3]
    saver.prune(["big"])
    items = _thread_items(saver, client, table, "big")
    assert len(_elements(items)) == 2
    assert not [i for i in items if i["sk"]["S"].startswith("k#")]  # its chunks went too
    found = saver.get_tuple(_config("big"))
    assert found is not None and found.checkpoint["channel_values"]["items"] == values[1:]
    saver.delete_thread("big")
    assert _thread_items(saver, client, table, "big") == []


def test_ttl_keeps_elements_alive_with_the_checkpoints_naming_them(client: Any, table: str) -> None:
    saver = DynamoDBSaver(client, table, key_prefix=unique_prefix("ttl"), ttl=60)
    calls = Calls(client)
    config, messages = _grow(saver, "t", 3)
    items = _thread_items(saver, client, table, "t")
    assert all("exp" in i for i in items) and len(_elements(items)) == 6
    # 40 s later the list grows: the new manifest names the six older elements too
    later = _at(saver, 40)
    later.port.known = saver.port.known  # type: ignore[attr-defined]
    later.port.manifests = saver.port.manifests  # type: ignore[attr-defined]
    later.lists = saver.lists
    grown = [*messages, *_message_pair(3)]
    version = saver.get_next_version(_version(saver, config), None)
    with calls.count() as made:
        newest = _put(later, "t", {"messages": grown}, {"messages": version}, parent=config)
    # the new values, the elements' refreshes (conditional updates), the head last
    assert made == ["BatchWriteItem", "TransactWriteItems", "PutItem"], made
    assert len(_elements(_thread_items(saver, client, table, "t"))) == 8
    view = _at(saver, 95)  # the first elements were written 95 s ago (exp: ttl * 1.5)
    found = view.get_tuple(_config("t"))
    assert found is not None and found.checkpoint["channel_values"]["messages"] == grown
    # a fresh process, 80 s later: only the head changes; it learns the manifest's elements
    fresh = _at(saver, 80)
    with calls.count() as made:
        _put(fresh, "t", {"messages": grown}, {"messages": version}, parent=newest, new={})
    # the manifest's marker, the manifest, its 8 elements (by key: a short run)
    assert made == [
        "BatchGetItem",
        "BatchGetItem",
        "BatchGetItem",
        "TransactWriteItems",
        "PutItem",
    ], made
    found = _at(saver, 135).get_tuple(_config("t"))
    assert found is not None and found.checkpoint["channel_values"]["messages"] == grown
    # an element missing from the store: an error naming the checkpoint, never a shorter list
    element = _elements(_thread_items(saver, client, table, "t"))[0]
    client.delete_item(TableName=table, Key={"pk": element["pk"], "sk": element["sk"]})
    with pytest.raises(CorruptData, match="checkpoint"):
        saver.get_tuple(_config("t"))


def test_refresh_ttl_on_read_keeps_the_elements_alive(client: Any, table: str) -> None:
    prefix = unique_prefix("ttl")
    saver = DynamoDBSaver(client, table, key_prefix=prefix, ttl=60)
    _, messages = _grow(saver, "t", 30)  # 60 elements: read back with a range Query
    reader = DynamoDBSaver(client, table, key_prefix=prefix, ttl=60, refresh_ttl_on_read=True)
    reader.port.clock = lambda: time.time() + 45  # type: ignore[attr-defined]
    found = reader.get_tuple(_config("t"))
    assert found is not None and found.checkpoint["channel_values"]["messages"] == messages
    later = _at(saver, 100)  # written 100 s ago (exp: ttl * 1.5 = 90 s), read 55 s ago
    found = later.get_tuple(_config("t"))
    assert found is not None and found.checkpoint["channel_values"]["messages"] == messages


async def test_async_saver_shares_lists(table: str) -> None:
    async with AsyncDynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=unique_prefix("async"), setup=False
    ) as saver:
        calls = Calls(saver.client)
        config: Any = None
        messages: list[Any] = []
        for turn in range(30):
            messages = messages + _message_pair(turn)
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": messages}
            cp["channel_versions"] = {"messages": turn + 1}
            config = await saver.aput(
                config or _config("t"), cp, {"source": "loop", "step": turn}, {"messages": turn + 1}
            )
        with calls.count() as made:
            found = await saver.aget_tuple(_config("t"))
        # versions of the caller's (1, 2 ...): no copy of the manifest in the head; the
        # elements are the ones this saver wrote
        assert made == ["Query", "BatchGetItem"], made
        assert found is not None and found.checkpoint["channel_values"]["messages"] == messages
        prefix = saver.port.key_prefix  # type: ignore[attr-defined]
        other = AsyncDynamoDBSaver(saver.client, table, key_prefix=prefix)
        with calls.count() as made:
            found = await other.aget_tuple(_config("t"))
        # another saver: the elements too, one Query of their run
        assert made == ["Query", "BatchGetItem", "Query"], made
        assert found is not None and found.checkpoint["channel_values"]["messages"] == messages
        listed = [t async for t in saver.alist(_config("t"))]
        assert [len(t.checkpoint["channel_values"]["messages"]) for t in listed] == list(
            range(60, 0, -2)
        )
        pk, _ = saver.port.thread_key("t")  # type: ignore[attr-defined]
        page = await asyncio.to_thread(
            boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT).query,
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": pk}},
            ConsistentRead=True,
        )
        assert len(_elements(page["Items"])) == 60
        await saver.aprune(["t"])
        await saver.adelete_thread("t")
        assert await saver.aget_tuple(_config("t")) is None
