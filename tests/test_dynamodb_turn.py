"""What one W50 turn (the bench's graph: a human message, an assistant node, a tool node)
costs on DynamoDB, request by request, sync and async (issue 48: at most 11 requests a
turn was asked; this records what the design without transactions reaches and keeps it
from growing back).

A turn is LangGraph's ``get_tuple``, four ``put`` (input, then after START, assistant and
tool) and three ``put_writes`` (one per task). Each ``put`` writes the values it names first
(BatchWriteItem: the new list element and the list's manifest) and its head last (PutItem),
so a reader never finds the head without them; each task's writes are one conditional
PutItem. The ``get_tuple`` is one Query for the newest head (with its writes) and nothing
else: the manifest comes in the head's copy of the small values its put wrote (``iv``), and
the list's elements are the ones this saver wrote (its element cache,
:class:`graphkeep.backends.dynamodb.elements.ElementCache`), so 12 requests at every length
of the thread (the second turn reads the first's list, a plain value, once). A saver that
did not write them reads them once (issue 48: the read of every
element at every turn made a turn grow with its thread).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from bench.workloads import MESSAGES_PER_TURN, human_message, workload
from graphkeep.backends.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver

from .conftest import unique_prefix
from .test_dynamodb import ENDPOINT, REGION, Calls, reachable

pytestmark = pytest.mark.dynamodb

TURNS = 6
#: a turn, by operation: get_tuple's Query (the elements of the list are the ones this
#: saver wrote: no read of them), the four puts' values and heads, the three tasks' writes
TURN = Counter({"Query": 1, "BatchWriteItem": 4, "PutItem": 4 + 3})
#: the first turn finds no checkpoint (its get_tuple is the Query alone): the same
FIRST_TURN = TURN
#: the second reads the list the first left, a plain value too large for the head's copy
SECOND_TURN = TURN + Counter({"BatchGetItem": 1})


@pytest.fixture(scope="module")
def table() -> Iterator[str]:
    """A fresh table for the module (small tables keep moto's answers quick)."""
    if not reachable(ENDPOINT):
        pytest.fail(f"no DynamoDB endpoint answers at {ENDPOINT}; run ./dev services up")
    name = f"gk_turn_{uuid.uuid4().hex[:10]}"
    with DynamoDBSaver.from_table(name, REGION, ENDPOINT) as saver:  # creates it
        yield name
        saver.client.delete_table(TableName=name)


def _heads(saver: DynamoDBSaver, table: str, thread: str) -> list[dict[str, Any]]:
    """The thread's checkpoint heads as stored (one Query page holds them here)."""
    pk, _ = saver.port.thread_key(thread)  # type: ignore[attr-defined]
    client = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    page = client.query(
        TableName=table,
        KeyConditionExpression="pk = :p AND begins_with(sk, :c)",
        ExpressionAttributeValues={":p": {"S": pk}, ":c": {"S": "c#"}},
        ConsistentRead=True,
    )
    assert "LastEvaluatedKey" not in page
    return [item for item in page["Items"] if "h" in item]


@pytest.fixture
def made(table: str) -> Iterator[tuple[DynamoDBSaver, Calls]]:
    with DynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=unique_prefix("turn"), setup=False
    ) as saver:
        yield saver, Calls(saver.client)


def _check(per_turn: list[Counter[str]], state: Any) -> None:
    assert per_turn[0] == FIRST_TURN, per_turn[0]
    assert per_turn[1] == SECOND_TURN, per_turn[1]
    for turn, ops in enumerate(per_turn[2:], start=3):
        assert ops == TURN, (turn, ops)
        assert sum(ops.values()) == 12
    messages = state["messages"]
    assert len(messages) == MESSAGES_PER_TURN * TURNS
    assert [m.content for m in messages if isinstance(m, HumanMessage)] == [
        human_message(n).content for n in range(1, TURNS + 1)
    ]


def test_a_w50_turn_is_twelve_requests(made: tuple[DynamoDBSaver, Calls], table: str) -> None:
    saver, calls = made
    app = workload("W50").build(saver)
    config: Any = {"configurable": {"thread_id": f"w50-{uuid.uuid4().hex[:8]}"}}
    per_turn: list[Counter[str]] = []
    for turn in range(1, TURNS + 1):
        with calls.count() as sent:
            app.invoke({"messages": [human_message(turn)]}, config)
        per_turn.append(Counter(sent))
    _check(per_turn, app.get_state(config).values)
    thread = config["configurable"]["thread_id"]
    heads = _heads(saver, table, thread)
    assert len(heads) == 4 * TURNS
    # from the second turn on the list is shared (its manifest small) and every put writes
    # a small value; in the first the list is a plain value of over 512 bytes by its end
    later = sorted(heads, key=lambda head: head["sk"]["S"])[4:]
    assert all("iv" in head for head in later), "every put of W50 writes a small value"


async def test_a_w50_turn_is_twelve_requests_async(table: str) -> None:
    async with AsyncDynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=unique_prefix("aturn"), setup=False
    ) as saver:
        calls = Calls(saver.client)
        app = workload("W50").build(saver)
        config: Any = {"configurable": {"thread_id": f"w50-{uuid.uuid4().hex[:8]}"}}
        per_turn: list[Counter[str]] = []
        for turn in range(1, TURNS + 1):
            with calls.count() as sent:
                await app.ainvoke({"messages": [human_message(turn)]}, config)
            per_turn.append(Counter(sent))
        _check(per_turn, (await app.aget_state(config)).values)


def test_a_version_the_caller_reuses_reads_its_last_value_from_every_checkpoint(
    made: tuple[DynamoDBSaver, Calls], table: str
) -> None:
    """LangGraph's semantics (its conformance suite stores several values under version 1):
    the value stored last under a (channel, version) is the value of every checkpoint naming
    it, so a head keeps no copy of it; a version ``get_next_version`` made is unique to its put,
    so its head does."""
    saver, _ = made
    thread = f"reuse-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    stored = []
    for step in range(3):
        cp = empty_checkpoint()
        cp["channel_values"] = {"step": step}
        cp["channel_versions"] = {"step": 1}
        config = saver.put(config, cp, {"source": "loop", "step": step}, {"step": 1})
        stored.append(config)
    assert [saver.get_tuple(c).checkpoint["channel_values"] for c in stored] == [  # type: ignore[union-attr]
        {"step": 2}
    ] * 3
    version = saver.get_next_version(None, None)
    cp = empty_checkpoint()
    cp["channel_values"] = {"step": 9}
    cp["channel_versions"] = {"step": version}
    made_config = saver.put(config, cp, {"source": "loop", "step": 3}, {"step": version})
    heads = {h["sk"]["S"]: h for h in _heads(saver, table, thread)}
    assert len(heads) == 4
    with_copy = [sk for sk, h in heads.items() if "iv" in h]
    assert with_copy == [max(heads)], with_copy  # only the newest: its version is its own
    found = saver.get_tuple(made_config)
    assert found is not None and found.checkpoint["channel_values"] == {"step": 9}


def _messages(state: Any) -> list[Any]:
    return [(type(m).__name__, m.content) for m in state["messages"]]


def test_a_saver_that_did_not_write_the_list_reads_its_elements_once(table: str) -> None:
    """Another saver (another process) holds none of the thread's elements: its first read
    fetches them all, in one request beside the head's Query, and returns the whole list;
    its own turns then cost what the writer's do (its read taught it the elements)."""
    prefix = unique_prefix("other")
    config: Any = {"configurable": {"thread_id": f"w50-{uuid.uuid4().hex[:8]}"}}
    with DynamoDBSaver.from_table(table, REGION, ENDPOINT, key_prefix=prefix, setup=False) as a:
        writer = workload("W50").build(a)
        for turn in range(1, 4):
            writer.invoke({"messages": [human_message(turn)]}, config)
        written = _messages(writer.get_state(config).values)
    with DynamoDBSaver.from_table(table, REGION, ENDPOINT, key_prefix=prefix, setup=False) as b:
        calls = Calls(b.client)
        reader = workload("W50").build(b)
        with calls.count() as sent:
            state = reader.get_state(config).values
        assert _messages(state) == written
        assert Counter(sent) == Counter({"Query": 1, "BatchGetItem": 1}), sent
        with calls.count() as sent:
            state = reader.get_state(config).values
        assert _messages(state) == written
        assert Counter(sent) == Counter({"Query": 1}), sent
        with calls.count() as sent:
            reader.invoke({"messages": [human_message(4)]}, config)
        assert Counter(sent) == TURN, sent
        assert len(reader.get_state(config).values["messages"]) == MESSAGES_PER_TURN * 4


async def test_a_saver_that_did_not_write_the_list_reads_its_elements_once_async(
    table: str,
) -> None:
    prefix = unique_prefix("aother")
    config: Any = {"configurable": {"thread_id": f"w50-{uuid.uuid4().hex[:8]}"}}
    async with AsyncDynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=prefix, setup=False
    ) as a:
        writer = workload("W50").build(a)
        for turn in range(1, 4):
            await writer.ainvoke({"messages": [human_message(turn)]}, config)
        written = _messages((await writer.aget_state(config)).values)
    async with AsyncDynamoDBSaver.from_table(
        table, REGION, ENDPOINT, key_prefix=prefix, setup=False
    ) as b:
        calls = Calls(b.client)
        reader = workload("W50").build(b)
        with calls.count() as sent:
            state = (await reader.aget_state(config)).values
        assert _messages(state) == written
        assert Counter(sent) == Counter({"Query": 1, "BatchGetItem": 1}), sent
        with calls.count() as sent:
            await reader.ainvoke({"messages": [human_message(4)]}, config)
        assert Counter(sent) == TURN, sent


def test_a_thread_deleted_and_written_again_elsewhere_reads_as_written_there(
    table: str,
) -> None:
    """The elements a saver holds never stand in for what another process wrote since: after
    the thread is deleted and written again there (other elements, other keys), the first
    saver reads the new list, whole, and nothing of the old one."""
    prefix = unique_prefix("again")
    config: Any = {"configurable": {"thread_id": f"w50-{uuid.uuid4().hex[:8]}"}}
    with (
        DynamoDBSaver.from_table(table, REGION, ENDPOINT, key_prefix=prefix, setup=False) as a,
        DynamoDBSaver.from_table(table, REGION, ENDPOINT, key_prefix=prefix, setup=False) as b,
    ):
        first = workload("W50").build(a)
        for turn in range(1, 4):
            first.invoke({"messages": [human_message(turn)]}, config)
        other = workload("W50").build(b)
        b.delete_thread(config["configurable"]["thread_id"])
        for turn in range(10, 12):
            other.invoke({"messages": [human_message(turn)]}, config)
        expected = _messages(other.get_state(config).values)
        assert [c for kind, c in expected if kind == "HumanMessage"] == [
            human_message(n).content for n in (10, 11)
        ]
        assert _messages(first.get_state(config).values) == expected


@pytest.mark.parametrize("budget", [0, 3000])
def test_elements_past_the_cache_budget_are_read_from_the_store(table: str, budget: int) -> None:
    """The element cache is bounded (bytes): what it let go is read again, and the list is
    whole; with no room at all every read fetches every element (the turn's element read)."""
    prefix = unique_prefix("budget")
    config: Any = {"configurable": {"thread_id": f"w50-{uuid.uuid4().hex[:8]}"}}
    with DynamoDBSaver.from_table(table, REGION, ENDPOINT, key_prefix=prefix, setup=False) as a:
        cache = a.port.element_cache  # type: ignore[attr-defined]
        cache.budget = budget
        calls = Calls(a.client)
        app = workload("W50").build(a)
        per_turn = []
        for turn in range(1, TURNS + 1):
            with calls.count() as sent:
                app.invoke({"messages": [human_message(turn)]}, config)
            per_turn.append(Counter(sent))
            assert cache.used <= budget
        assert all(ops["BatchGetItem"] == 1 for ops in per_turn[2:]), per_turn
        state = app.get_state(config).values
        assert len(state["messages"]) == MESSAGES_PER_TURN * TURNS
        assert [m.content for m in state["messages"] if isinstance(m, HumanMessage)] == [
            human_message(n).content for n in range(1, TURNS + 1)
        ]
