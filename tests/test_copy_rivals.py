"""``graphkeep copy`` from and to the official savers of other projects, on real servers.

``RedisSaver`` (langgraph-checkpoint-redis 0.5.2) on Redis Stack, plainredis's ``RedisSaver``
on plain Redis, ``MongoDBSaver`` on the MongoDB wire server, ``DynamoDBSaver``
(langgraph-checkpoint-aws) on the DynamoDB endpoint, each in a key prefix / database / table of
its own. Threads are written by real graphs through the rival saver (a chat with
``add_messages``, an approval interrupt, a subgraph, a ``Send`` fan-out, a DeltaChannel chat),
copied with ``graphkeep copy URL URL --all`` in-process, and read back through LangGraph on
both sides: every checkpoint of the destination reads as the same checkpoint of the source
(values, next, tasks, interrupts; versions may differ in form), the interrupted thread resumes
on graphkeep as on the source, and a graphkeep thread copied into each rival continues there.
"""

from __future__ import annotations

import operator
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt

import graphkeep
from conformance.setups import all_setups

from .cli_runs import gk
from .conftest import MONGODB_URI, REDIS_STACK_URL, REDIS_URL, unique_prefix
from .test_check import chat_graph as delta_chat_graph
from .test_check import subgraph_graph

DYNAMODB_ENDPOINT_URL = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _hostport(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


# -- the rival savers ------------------------------------------------------------------


@dataclass
class Rival:
    kind: str
    url: str
    tag: str

    @contextmanager
    def saver(self) -> Iterator[Any]:
        """The rival saver as an application opens it (its setup done)."""
        if self.kind == "redis":
            from langgraph.checkpoint.redis import RedisSaver

            with RedisSaver.from_conn_string(
                REDIS_STACK_URL,
                checkpoint_prefix=f"cp-{self.tag}",
                checkpoint_write_prefix=f"cw-{self.tag}",
            ) as redis_saver:
                redis_saver.setup()
                yield redis_saver
        elif self.kind == "plainredis":
            from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver

            plain = PlainRedisSaver(url=REDIS_URL, prefix=f"lg-{self.tag}")
            try:
                yield plain
            finally:
                plain.close()
        elif self.kind == "mongodb":
            from langgraph.checkpoint.mongodb import MongoDBSaver

            with MongoDBSaver.from_conn_string(MONGODB_URI, f"db-{self.tag}") as mongo:
                yield mongo
        else:
            from langgraph_checkpoint_aws import DynamoDBSaver

            from graphkeep.moving.rivals import create_table

            dynamo = DynamoDBSaver(
                f"t-{self.tag}", region_name="us-east-1", endpoint_url=DYNAMODB_ENDPOINT_URL
            )
            create_table(dynamo.client, f"t-{self.tag}", None)
            yield dynamo

    def fingerprint(self) -> Any:
        """What the source holds, to prove a copy leaves it as it was."""
        if self.kind in ("redis", "plainredis"):
            import redis

            client = redis.Redis.from_url(REDIS_STACK_URL if self.kind == "redis" else REDIS_URL)
            patterns = [f"cp-{self.tag}*", f"cw-{self.tag}*"] if self.kind == "redis" else []
            patterns += [f"lg-{self.tag}:*"] if self.kind == "plainredis" else []
            keys = sorted(k for p in patterns for k in client.scan_iter(match=p, count=1000))
            dumped = [(k, client.dump(k), client.ttl(k)) for k in keys]
            listed = client.execute_command("FT._LIST") if self.kind == "redis" else []
            indexes = sorted(i for i in listed if self.tag in _text(i))
            client.close()
            return dumped, indexes
        if self.kind == "mongodb":
            from pymongo import MongoClient

            with MongoClient(MONGODB_URI) as client:
                db = client[f"db-{self.tag}"]
                return {
                    name: (
                        sorted(str(i["key"]) for i in db[name].list_indexes()),
                        sorted(str(d) for d in db[name].find({})),
                    )
                    for name in sorted(db.list_collection_names())
                }
        import boto3

        client = boto3.client(
            "dynamodb", region_name="us-east-1", endpoint_url=DYNAMODB_ENDPOINT_URL
        )
        items = client.scan(TableName=f"t-{self.tag}", ConsistentRead=True)["Items"]
        return sorted(str(sorted(i.items())) for i in items)

    def drop(self) -> None:
        if self.kind in ("redis", "plainredis"):
            import redis

            client = redis.Redis.from_url(REDIS_STACK_URL if self.kind == "redis" else REDIS_URL)
            if self.kind == "redis":
                for index in (f"cp-{self.tag}", f"cw-{self.tag}"):
                    try:
                        client.execute_command("FT.DROPINDEX", index)
                    except redis.ResponseError:
                        pass
            for pattern in (f"cp-{self.tag}*", f"cw-{self.tag}*", f"lg-{self.tag}:*"):
                for key in client.scan_iter(match=pattern, count=1000):
                    client.delete(key)
            client.close()
        elif self.kind == "mongodb":
            from pymongo import MongoClient

            with MongoClient(MONGODB_URI) as client:
                client.drop_database(f"db-{self.tag}")
        else:
            import boto3

            client = boto3.client(
                "dynamodb", region_name="us-east-1", endpoint_url=DYNAMODB_ENDPOINT_URL
            )
            try:
                client.delete_table(TableName=f"t-{self.tag}")
            except client.exceptions.ResourceNotFoundException:
                pass


def rival_url(kind: str, tag: str) -> str:
    if kind == "redis":
        return (
            f"langgraph-redis://{_hostport(REDIS_STACK_URL)}/0"
            f"?checkpoint_prefix=cp-{tag}&checkpoint_write_prefix=cw-{tag}"
        )
    if kind == "plainredis":
        return f"langgraph-plainredis://{_hostport(REDIS_URL)}/0?prefix=lg-{tag}"
    if kind == "mongodb":
        return f"langgraph-mongodb://{_hostport(MONGODB_URI)}/db-{tag}"
    return f"langgraph-dynamodb://t-{tag}?region=us-east-1&endpoint_url={DYNAMODB_ENDPOINT_URL}"


RIVALS = [
    pytest.param("redis", id="langgraph-redis", marks=[pytest.mark.redis, pytest.mark.redis_stack]),
    pytest.param("plainredis", id="langgraph-plainredis", marks=pytest.mark.redis),
    pytest.param("mongodb", id="langgraph-mongodb", marks=pytest.mark.mongodb),
    pytest.param("dynamodb", id="langgraph-dynamodb", marks=pytest.mark.dynamodb),
]


@pytest.fixture(params=RIVALS)
def rival(request: pytest.FixtureRequest) -> Iterator[Rival]:
    tag = uuid.uuid4().hex[:10]
    made = Rival(request.param, rival_url(request.param, tag), tag)
    try:
        yield made
    finally:
        made.drop()


def _destination_params() -> list[Any]:
    wanted = {"redis": "redis", "mongodb": "mongodb", "dynamodb": "dynamodb"}
    return [
        pytest.param(s.url, id=s.name, marks=getattr(pytest.mark, wanted[s.name]))
        for s in all_setups()
        if s.name in wanted
    ]


@dataclass
class Keep:
    """A graphkeep destination: its URL and a key prefix of its own."""

    url: str
    prefix: str

    @contextmanager
    def saver(self) -> Iterator[Any]:
        with graphkeep.connect(self.url, key_prefix=self.prefix) as saver:
            yield saver


@pytest.fixture(params=_destination_params())
def keep(request: pytest.FixtureRequest) -> Keep:
    return Keep(request.param, unique_prefix("rival"))


# -- graphs ------------------------------------------------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: ChatState) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"reply {n}", id=f"ai-{n}")]}


def chat_graph(saver: Any) -> Any:
    builder = StateGraph(ChatState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


class ApprovalState(TypedDict):
    n: int
    log: Annotated[list[str], operator.add]


def _propose(state: ApprovalState) -> dict[str, Any]:
    return {"n": state["n"] + 1, "log": ["proposed"]}


def _approve(state: ApprovalState) -> dict[str, Any]:
    answer = interrupt({"question": "approve?", "n": state["n"]})
    return {"log": [f"answer={answer}"]}


def approval_graph(saver: Any) -> Any:
    builder = StateGraph(ApprovalState)
    builder.add_node("propose", _propose)
    builder.add_node("approve", _approve)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=saver)


class MapState(TypedDict):
    items: list[str]
    results: Annotated[list[str], operator.add]


def _fan_out(state: MapState) -> list[Send]:
    return [Send("work", {"item": item}) for item in state["items"]]


def _work(state: dict[str, str]) -> dict[str, list[str]]:
    return {"results": [state["item"].upper()]}


def fan_out_graph(saver: Any) -> Any:
    builder = StateGraph(MapState)
    builder.add_node("work", _work)
    builder.add_conditional_edges(START, _fan_out, ["work"])
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


GRAPHS = {
    "chat": chat_graph,
    "approval": approval_graph,
    "sub": subgraph_graph,
    "fan": fan_out_graph,
    "delta": delta_chat_graph,
}


def _message_id(message: Any) -> Any:
    """A message's id (RedisSaver's history returns messages as constructor dicts)."""
    if isinstance(message, dict):
        return message.get("kwargs", {}).get("id")
    return message.id


def write_threads(saver: Any, tag: str) -> dict[str, str]:
    """One thread per graph, written through ``saver``: name -> thread id."""
    threads = {name: f"{name}-{tag}" for name in GRAPHS}
    chat = chat_graph(saver)
    for n in (1, 2):
        chat.invoke(
            {"messages": [HumanMessage(content=f"hi {n}", id=f"h-{n}")]}, config(threads["chat"])
        )
    # an update_state fork from the first turn, continued: the head's branch lacks turn 2
    first = next(
        s
        for s in chat.get_state_history(config(threads["chat"]))
        if [_message_id(m) for m in s.values.get("messages", [])] == ["h-1", "ai-1"] and not s.next
    )
    forked = chat.update_state(first.config, {"messages": [HumanMessage(content="f", id="f-1")]})
    chat.invoke({"messages": [HumanMessage(content="hi 3", id="h-3")]}, forked)
    approval_graph(saver).invoke({"n": 0, "log": []}, config(threads["approval"]))
    subgraph_graph(saver).invoke({"log": ["x"]}, config(threads["sub"]))
    fan_out_graph(saver).invoke({"items": ["a", "b"], "results": []}, config(threads["fan"]))
    delta = delta_chat_graph(saver)
    for n in (1, 2, 3, 4):
        message = HumanMessage(content=f"question {n}", id=f"human-{n}")
        delta.invoke({"messages": [message]}, config(threads["delta"]))
    return threads


def snapshot(state: Any) -> Any:
    """What a reader sees of one state (not its versions or timestamps)."""
    tasks = [(t.id, t.name, t.path, [i.value for i in t.interrupts]) for t in state.tasks]
    return {
        "checkpoint_id": state.config["configurable"].get("checkpoint_id"),
        "values": state.values,
        "next": state.next,
        "tasks": tasks,
        "interrupts": [i.value for i in state.interrupts],
        "parent": (state.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        "step": (state.metadata or {}).get("step"),
    }


def _subsequence(part: list[Any], whole: list[Any]) -> bool:
    rest = iter(whole)
    return all(any(x == y for y in rest) for x in part)


def assert_reads_alike(
    source: Any,
    destination: Any,
    threads: dict[str, str],
    *,
    own_delta_reads: bool = True,
    approval: bool = True,
) -> None:
    """Every checkpoint of each thread on the destination reads, through LangGraph, as the same
    checkpoint read by id from the source; the source's ids are all there. (Each side is read
    by id: RedisSaver's history, its ``list``, returns messages as plain dicts.)

    ``own_delta_reads=False``: the source does not read its own DeltaChannel thread back whole
    (RedisSaver 0.5.2 drops writes of ancestors as it rebuilds the chat: its own ``invoke``
    returns a chat without its first turns); the destination, which holds every write the
    source stored, shows at each checkpoint at least the messages the source shows there, in
    their order. RedisSaver 0.5.2 also returns a head without its pending writes now and then
    (its ``has_writes`` flag): its interrupts are then compared with what the graph asked, not
    with what the source shows."""
    for name, thread_id in threads.items():
        if name == "delta" and not own_delta_reads:
            graph, there = delta_chat_graph(destination), delta_chat_graph(source)
            for state in graph.get_state_history(config(thread_id)):
                at = config(thread_id, state.config["configurable"]["checkpoint_id"])
                shown = [m.id for m in there.get_state(at).values.get("messages", [])]
                assert _subsequence(shown, [m.id for m in state.values.get("messages", [])])
            continue
        build = GRAPHS[name]
        here, there = build(destination), build(source)
        history = list(here.get_state_history(config(thread_id)))
        # (RedisSaver's history of the root namespace also lists its subgraphs' checkpoints:
        # the root's are those get_tuple finds in the root namespace)
        source_ids = [
            s.config["configurable"]["checkpoint_id"]
            for s in there.get_state_history(config(thread_id))
            if source.get_tuple({"configurable": {**s.config["configurable"], "checkpoint_ns": ""}})
        ]
        assert [s.config["configurable"]["checkpoint_id"] for s in history] == source_ids, name
        for state in history:
            checkpoint_id = state.config["configurable"]["checkpoint_id"]
            want = snapshot(there.get_state(config(thread_id, checkpoint_id)))
            got = snapshot(here.get_state(config(thread_id, checkpoint_id)))  # by id: see above
            if not own_delta_reads:
                for side in (want, got):
                    side["tasks"] = [t[:3] for t in side["tasks"]]
                    side.pop("interrupts")
            assert got == want, f"{name} at {checkpoint_id}"
    if not approval:
        return
    asked = here_state = GRAPHS["approval"](destination).get_state(config(threads["approval"]))
    assert [i.value for i in here_state.interrupts] == [{"question": "approve?", "n": 1}], asked


def namespaces(saver: Any, thread_id: str) -> set[tuple[str, str]]:
    return {
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
        for t in saver.list(config(thread_id))
    }


# -- rival -> graphkeep --------------------------------------------------------------------


def test_copy_all_from_a_rival_reads_alike_on_graphkeep_and_the_interrupt_resumes_there(
    rival: Rival, keep: Keep
) -> None:
    with rival.saver() as source:
        threads = write_threads(source, rival.tag)
    before = rival.fingerprint()
    copied = gk("copy", rival.url, keep.url, "--all", "--dst-key-prefix", keep.prefix, "--json")
    assert copied.code == 0, copied.err + copied.out
    report = copied.json()
    assert {t["thread_id"] for t in report["threads"]} == set(threads.values())
    assert all(t["verified"] for t in report["threads"]), report
    assert rival.fingerprint() == before, "the copy changed its source"
    again = gk("copy", rival.url, keep.url, "--all", "--dst-key-prefix", keep.prefix, "--json")
    assert again.code == 0, again.err
    assert all(t["checkpoints_copied"] == 0 for t in again.json()["threads"])

    with rival.saver() as source, keep.saver() as destination:
        assert_reads_alike(source, destination, threads, own_delta_reads=rival.kind != "redis")
        sub = threads["sub"]
        assert len({ns for ns, _ in namespaces(destination, sub)}) == 2
        # a subgraph's checkpoints belong to their own namespace only
        root = list(destination.list({"configurable": {"thread_id": sub, "checkpoint_ns": ""}}))
        assert all(t.config["configurable"]["checkpoint_ns"] == "" for t in root)
        # the approval waits on its interrupt on both sides; resumed, both end alike
        approval = threads["approval"]
        resume = Command(resume="yes")
        ends_here = approval_graph(destination).invoke(resume, config(approval))
        assert ends_here == {"n": 1, "log": ["proposed", "answer=yes"]}
        if rival.kind != "redis":  # RedisSaver may not see its own interrupt (see above)
            assert approval_graph(source).invoke(resume, config(approval)) == ends_here
        chat_thread = config(threads["chat"])
        ids = [m.id for m in chat_graph(destination).get_state(chat_thread).values["messages"]]
        assert ids == ["h-1", "ai-1", "f-1", "h-3", "ai-4"]
        turn = {"messages": [HumanMessage(content="hi 4", id="h-4")]}
        here = chat_graph(destination).invoke(turn, chat_thread)
        assert here == chat_graph(source).invoke(turn, chat_thread)
        assert [m.id for m in here["messages"]] == [*ids, "h-4", "ai-6"]


def test_write_rows_carry_task_path_and_idx_where_the_rival_stores_them(rival: Rival) -> None:
    """Writes come out in LangGraph's ``writes_sort_key`` order with their stored ``idx`` and,
    where the saver keeps it (all but plainredis), their ``task_path``."""
    from graphkeep.cli.endpoints import open_endpoint
    from graphkeep.moving.items import foreign_items

    with rival.saver() as source:
        fan_out_graph(source).invoke({"items": ["a", "b"], "results": []}, config("w"))
        approval_graph(source).invoke({"n": 0, "log": []}, config("i"))
    with open_endpoint(rival.url) as endpoint:
        fan_writes = [w for item in foreign_items(endpoint, "w") for w in item.writes]
        asked = [w for item in foreign_items(endpoint, "i") for w in item.writes]
    assert fan_writes and all(w.idx is not None for w in fan_writes)
    paths = {w.task_path for w in fan_writes}
    if rival.kind == "plainredis":
        assert paths == {""}
    else:
        assert any(p.startswith("~__pregel_push") for p in paths), paths
    assert any(w.channel == "__interrupt__" and w.idx == -3 for w in asked)


def test_a_value_over_the_destinations_item_limit_is_copied_whole(keep: Keep) -> None:
    """A 600 KB message (over DynamoDB's 400 KB item limit), which plainredis holds in one
    string, reads back whole from every graphkeep backend."""
    tag = uuid.uuid4().hex[:10]
    source_rival = Rival("plainredis", rival_url("plainredis", tag), tag)
    big = "".join(uuid.uuid4().hex for _ in range(600 * 1024 // 32))
    try:
        with source_rival.saver() as source:
            chat_graph(source).invoke(
                {"messages": [HumanMessage(content=big, id="h-big")]}, config("big")
            )
        copied = gk("copy", source_rival.url, keep.url, "--all", "--dst-key-prefix", keep.prefix)
        assert copied.code == 0, copied.err + copied.out
        with source_rival.saver() as source, keep.saver() as destination:
            assert_reads_alike(source, destination, {"chat": "big"}, approval=False)
            here = chat_graph(destination).get_state(config("big")).values["messages"]
            assert here[0].content == big
    finally:
        source_rival.drop()


# -- graphkeep -> rival --------------------------------------------------------------------


@pytest.mark.redis
def test_copy_from_graphkeep_into_each_rival_continues_there(rival: Rival) -> None:
    tag = uuid.uuid4().hex[:8]
    keep = Keep(REDIS_URL, unique_prefix("rival-src"))
    chat_thread, approval_thread = f"chat-{tag}", f"approval-{tag}"
    with keep.saver() as saver:
        chat = chat_graph(saver)
        for n in (1, 2):
            chat.invoke(
                {"messages": [HumanMessage(content=f"hi {n}", id=f"h-{n}")]}, config(chat_thread)
            )
        approval_graph(saver).invoke({"n": 0, "log": []}, config(approval_thread))
    copied = gk("copy", keep.url, rival.url, "--all", "--src-key-prefix", keep.prefix, "--json")
    assert copied.code == 0, copied.err + copied.out
    assert all(t["verified"] for t in copied.json()["threads"]), copied.out
    with rival.saver() as there, keep.saver() as here:
        threads = {"chat": chat_thread, "approval": approval_thread}
        assert_reads_alike(here, there, threads)
        chat = chat_graph(there)
        chat.invoke({"messages": [HumanMessage(content="hi 3", id="h-3")]}, config(chat_thread))
        ids = [m.id for m in chat.get_state(config(chat_thread)).values["messages"]]
        assert ids == ["h-1", "ai-1", "h-2", "ai-3", "h-3", "ai-5"]
        ends = approval_graph(there).invoke(Command(resume="no"), config(approval_thread))
        assert ends == {"n": 1, "log": ["proposed", "answer=no"]}


# -- usage ---------------------------------------------------------------------------------


@pytest.mark.redis
def test_a_rival_scheme_without_its_package_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph_checkpoint_plainredis", None)
    result = gk("copy", f"langgraph-plainredis://{_hostport(REDIS_URL)}/0", REDIS_URL, "--all")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        "graphkeep: error: langgraph-plainredis:// URLs need langgraph-checkpoint-plainredis:"
        " pip install 'graphkeep[migrate]' (or langgraph-checkpoint-plainredis)"
    ]


@pytest.mark.redis
def test_an_unknown_rival_option_names_the_options_there_are() -> None:
    url = f"langgraph-plainredis://{_hostport(REDIS_URL)}/0?prefx=x"
    result = gk("copy", url, REDIS_URL, "--all", "--dst-key-prefix", unique_prefix("rival"))
    assert result.code == 2
    assert "unknown option 'prefx'" in result.err and "prefix" in result.err


def test_check_and_setup_print_refuse_a_rival_url_in_one_line() -> None:
    for argv in (
        ("check", f"langgraph-plainredis://{_hostport(REDIS_URL)}/0", "--all"),
        ("setup", f"langgraph-mongodb://{_hostport(MONGODB_URI)}/db", "--print"),
    ):
        result = gk(*argv)
        assert result.code == 2, result.err
        assert "does not read langgraph-" in result.err and "docs/migrate.md" in result.err
