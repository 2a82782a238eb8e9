"""Every Redis request graphkeep sends, as it goes on the wire: none carries more than 3,999
arguments (ElastiCache Serverless's limit), none names keys of two hash slots (Azure Managed
Redis's OSS policy answers CROSSSLOT, on a single node too), and a call too large for one
request keeps its atomicity (staged arguments, one committing script; a writer SIGKILLed in
between leaves the thread as it was)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
import redis
import redis.asyncio.connection as aconnection
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from redis.crc import key_slot

import graphkeep
from graphkeep.backends.redis import AsyncRedisEventLog, RedisEventLog, RedisSaver
from graphkeep.backends.redis.checkpoint_scripts import SCRIPTS
from graphkeep.backends.redis.client import connected, sync_executor
from graphkeep.backends.redis.hot import HOT_SCRIPTS, RedisHotPort
from graphkeep.backends.redis.requests import MAX_ARGS
from graphkeep.checkpoint.put import put_op
from graphkeep.checkpoint.records import ListQuery
from graphkeep.port.ops import drive

from .conftest import REDIS_CLUSTER_URL, REDIS_URL, unique_prefix
from .killed import kill_at

pytestmark = pytest.mark.redis

WHERE = pytest.mark.parametrize("url", [REDIS_URL, REDIS_CLUSTER_URL], ids=["single", "cluster"])
#: commands whose every argument after the name is a key
ALL_KEYS = {"DEL", "UNLINK", "EXISTS", "MGET", "TOUCH", "WATCH"}
#: messages of the imported chat: ~2 arguments each in one put before the split
IMPORTED = 5000


def _text(arg: Any) -> str:
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def _argv(args: tuple[Any, ...]) -> list[Any]:
    """The arguments as the server receives them (redis-py splits ``"SCRIPT LOAD"``)."""
    first = _text(args[0]).split()
    return [*first, *args[1:]]


def _keys(argv: list[Any]) -> list[Any]:
    name = _text(argv[0]).upper()
    if name in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"):
        return list(argv[3 : 3 + int(argv[2])])
    if name in ALL_KEYS:
        return list(argv[1:])
    if name == "MSET":
        return list(argv[1::2])
    return []


def _slot(key: Any) -> int:
    return key_slot(key if isinstance(key, bytes) else str(key).encode())


class Wire:
    """What the test's process packs for the server: every command's argv."""

    def __init__(self) -> None:
        self.sent: list[list[Any]] = []

    def add(self, args: tuple[Any, ...]) -> None:
        self.sent.append(_argv(args))

    def named(self, name: str) -> list[list[Any]]:
        return [argv for argv in self.sent if _text(argv[0]).upper() == name]

    def check(self) -> None:
        """No request over MAX_ARGS, none naming keys of two slots, every script a key."""
        assert self.sent
        for argv in self.sent:
            name = _text(argv[0]).upper()
            assert len(argv) <= MAX_ARGS, f"{name} of {len(argv)} arguments"
            keys = _keys(argv)
            assert len({_slot(k) for k in keys}) <= 1, f"{name} on keys of several slots {keys}"
            if name.startswith(("EVAL", "FCALL")):
                assert keys, f"{name} declares no key"


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[Wire]:
    seen = Wire()
    for packer in (redis.connection.PythonRespSerializer, redis.connection.HiredisRespSerializer):
        original = packer.pack

        def pack(self: Any, *args: Any, _original: Any = original) -> Any:
            seen.add(args)
            return _original(self, *args)

        monkeypatch.setattr(packer, "pack", pack)
    apack = aconnection.AbstractConnection.pack_command

    def apack_command(self: Any, *args: Any) -> Any:
        seen.add(args)
        return apack(self, *args)

    monkeypatch.setattr(aconnection.AbstractConnection, "pack_command", apack_command)
    yield seen


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: _Chat) -> dict[str, Any]:
    return {"messages": [AIMessage(f"reply {len(state['messages'])}", id="ai-last")]}


def _graph(saver: Any) -> Any:
    builder = StateGraph(_Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def _imported() -> list[AnyMessage]:
    return [
        HumanMessage(f"message {i}: " + "m" * 40, id=f"m-{i}")
        if i % 2 == 0
        else AIMessage(f"message {i}: " + "a" * 40, id=f"m-{i}")
        for i in range(IMPORTED)
    ]


def _state(tuple_: Any) -> list[Any]:
    return list(tuple_.checkpoint["channel_values"]["messages"])


def _assert_chat(history: list[Any], latest: Any, imported: list[AnyMessage]) -> None:
    """The imported thread as written: the import, then one reply."""
    assert _state(latest) == [*imported, AIMessage("reply 5000", id="ai-last")]
    # history intact, newest first: the reply's step, the import, the input, the empty start
    assert [len(t.checkpoint["channel_values"].get("messages", [])) for t in history][:2] == [
        IMPORTED + 1,
        IMPORTED,
    ]
    assert _state(history[1]) == imported


@WHERE
def test_an_imported_5000_message_chat_and_its_copy_stay_within_the_argument_limit(
    url: str, thread_id: str, wire: Wire
) -> None:
    imported = _imported()
    with graphkeep.connect(url, key_prefix=unique_prefix("split")) as saver:
        graph = _graph(saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        graph.update_state(config, {"messages": imported})
        graph.invoke(None, config)
        saver.copy_thread(thread_id, thread_id + "-copy")
        wire.check()
        # the import went out in several requests: staged, then one committing script
        stage_sha = hashlib.sha1(SCRIPTS["stage"].encode()).hexdigest()
        staged = [a for a in wire.named("EVALSHA") if _text(a[1]) == stage_sha]
        assert len(staged) >= 4, "the put and the copy were not split"
        assert max(len(a) for a in wire.sent) > MAX_ARGS - 100  # requests are filled

        with graphkeep.connect(url, key_prefix=saver.port.prefix, setup=False) as reader:
            for tid in (thread_id, thread_id + "-copy"):
                conf: Any = {"configurable": {"thread_id": tid}}
                _assert_chat(list(reader.list(conf)), reader.get_tuple(conf), imported)
                assert graph.get_state(conf).values["messages"][:IMPORTED] == imported
        wire.check()
        for tid in (thread_id, thread_id + "-copy"):
            saver.delete_thread(tid)
        assert list(saver.client.scan_iter(match=f"{saver.port.prefix}*")) == []


@WHERE
async def test_async_imported_chat_and_copy_stay_within_the_argument_limit(
    url: str, thread_id: str, wire: Wire
) -> None:
    imported = _imported()
    async with graphkeep.aconnect(url, key_prefix=unique_prefix("asplit")) as saver:
        graph = _graph(saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        await graph.aupdate_state(config, {"messages": imported})
        await graph.ainvoke(None, config)
        await saver.acopy_thread(thread_id, thread_id + "-copy")
        async with graphkeep.aconnect(url, key_prefix=saver.port.prefix, setup=False) as reader:
            for tid in (thread_id, thread_id + "-copy"):
                conf: Any = {"configurable": {"thread_id": tid}}
                history = [t async for t in reader.alist(conf)]
                _assert_chat(history, await reader.aget_tuple(conf), imported)
        wire.check()
        assert len(wire.named("EVALSHA")) > 6
        for tid in (thread_id, thread_id + "-copy"):
            await saver.adelete_thread(tid)


def _config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _big_put(saver: Any, thread_id: str, parent: Any, tag: str = "") -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [f"{tag}element {i} " + "e" * 30 for i in range(IMPORTED)]}
    cp["channel_versions"] = {"messages": 2}
    return saver.put(parent, cp, {"source": "update", "step": 1}, {"messages": 2})


def _first_put(saver: Any, thread_id: str) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": ["first"]}
    cp["channel_versions"] = {"messages": 1}
    return saver.put(_config(thread_id), cp, {"source": "input", "step": 0}, {"messages": 1})


def _thread_keys(client: Any, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{prefix}*", count=1000))


@WHERE
def test_more_writes_than_one_request_holds_are_stored_at_once(
    url: str, thread_id: str, wire: Wire
) -> None:
    """put_writes of 3,000 writes (4 arguments each) and a prune deleting 2,500 checkpoints."""
    with graphkeep.connect(url, key_prefix=unique_prefix("wsplit")) as saver:
        first = _first_put(saver, thread_id)
        writes = [("messages", f"w{i}") for i in range(3000)]
        saver.put_writes(first, writes, "task-1", "path")
        found = saver.get_tuple(_config(thread_id))
        assert [w[2] for w in found.pending_writes] == [f"w{i}" for i in range(3000)]
        parent = first
        for step in range(1, 2500):
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": [f"s{step}"]}
            cp["channel_versions"] = {"messages": step + 1}
            parent = saver.put(parent, cp, {"step": step}, {"messages": step + 1})
        wire.sent.clear()
        saver.prune([thread_id], strategy="keep_latest")
        wire.check()
        assert [t.checkpoint["channel_values"] for t in saver.list(_config(thread_id))] == [
            {"messages": ["s2499"]}
        ]
        saver.delete_thread(thread_id)


def test_a_lost_commit_reply_applies_once_and_a_lost_stage_is_sent_again(
    thread_id: str, wire: Wire
) -> None:
    """The committing script resent (a reply lost after it ran) announces the checkpoint
    once; a staging hash deleted between the stage calls and the commit (delete_thread at the
    same time) is staged again, and the put lands whole."""
    with RedisSaver.from_url(REDIS_URL, key_prefix=unique_prefix("lost")) as saver:
        first = _first_put(saver, thread_id)
        commits = [0]

        def resend_commit(request: Any) -> Any:
            reply = saver._execute(request)
            if getattr(request, "name", "").endswith("/staged"):
                commits[0] += 1
                assert saver._execute(request) == reply
            return reply

        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": [f"element {i} " + "e" * 30 for i in range(IMPORTED)]}
        cp["channel_versions"] = {"messages": 2}
        op = put_op(saver, first, cp, {"step": 1}, {"messages": 2})
        drive(op, resend_commit)
        assert commits[0] == 1
        assert saver.client.xlen(saver.port.feed_key(thread_id)) == 2
        assert _state(saver.get_tuple(_config(thread_id))) == cp["channel_values"]["messages"]

        other = thread_id + "-b"
        base = _first_put(saver, other)
        dropped = [0]

        def drop_stage_once(request: Any) -> Any:
            if getattr(request, "name", "").endswith("/staged") and not dropped[0]:
                dropped[0] = saver.client.delete(saver.port.stage_key(other))
            return saver._execute(request)

        cp = empty_checkpoint()  # newer than base's
        cp["channel_values"] = {"messages": [f"b {i} " + "e" * 30 for i in range(IMPORTED)]}
        cp["channel_versions"] = {"messages": 2}
        drive(put_op(saver, base, cp, {"step": 1}, {"messages": 2}), drop_stage_once)
        assert dropped[0] == 1
        assert _state(saver.get_tuple(_config(other))) == cp["channel_values"]["messages"]
        wire.check()


#: a process putting an imported 5,000-element list, SIGKILLed by the test between the
#: staged arguments and the committing script: the commit's request is held, not faked
_CRASH_WORKER = """
import hashlib, sys, time
import redis
from langgraph.checkpoint.base import empty_checkpoint
from graphkeep.backends.redis import RedisSaver
from graphkeep.backends.redis.checkpoint_scripts import SCRIPTS
from graphkeep.backends.redis.client import connected, sync_executor
from graphkeep.backends.redis.hot import HOT_SCRIPTS, RedisHotPort

url, prefix, thread_id, parent_id, count = sys.argv[1:6]
commit = hashlib.sha1(SCRIPTS["put/staged"].encode()).hexdigest()
for packer in (redis.connection.PythonRespSerializer, redis.connection.HiredisRespSerializer):
    def pack(self, *args, _original=packer.pack):
        if len(args) > 1 and str(args[0]).upper() == "EVALSHA" and str(args[1]) == commit:
            print("staged, commit next", flush=True)
            time.sleep(600)
        return _original(self, *args)
    packer.pack = pack
with RedisSaver.from_url(url, key_prefix=prefix) as saver:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [f"element {i} " + "e" * 30 for i in range(int(count))]}
    cp["channel_versions"] = {"messages": 2}
    conf = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": parent_id}
    saver.put({"configurable": conf}, cp, {"source": "update", "step": 1}, {"messages": 2})
"""


@WHERE
def test_a_writer_killed_between_staging_and_commit_leaves_the_last_checkpoint(
    url: str, thread_id: str
) -> None:
    """kill -9 after a put's staged arguments went out and before its committing script: no
    reader sees the new checkpoint or any part of it; the thread reads as before the put,
    the next put of the same checkpoint completes, delete_thread leaves nothing behind."""
    prefix = unique_prefix("crash")
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        first = _first_put(saver, thread_id)
        parent_id = first["configurable"]["checkpoint_id"]
        before = {key: saver.client.dump(key) for key in _thread_keys(saver.client, prefix)}
        kill_at(
            _CRASH_WORKER, [url, prefix, thread_id, parent_id, str(IMPORTED)], "staged, commit next"
        )
        # the staged arguments went out (the staging hash holds them); nothing else changed
        stage = saver.port.stage_key(thread_id).encode()
        after = _thread_keys(saver.client, prefix)
        assert stage in after and saver.client.hlen(stage) > 2 * IMPORTED // 2
        assert {key: saver.client.dump(key) for key in after if key != stage} == before

        with graphkeep.connect(url, key_prefix=prefix, setup=False) as reader:
            found = reader.get_tuple(_config(thread_id))
            assert found.config["configurable"]["checkpoint_id"] == parent_id
            assert _state(found) == ["first"]
            assert [
                t.config["configurable"]["checkpoint_id"] for t in reader.list(_config(thread_id))
            ] == [parent_id]
            again = _big_put(reader, thread_id, first)
            found = reader.get_tuple(_config(thread_id))
            assert (
                found.config["configurable"]["checkpoint_id"]
                == again["configurable"]["checkpoint_id"]
            )
            assert _state(found) == [f"element {i} " + "e" * 30 for i in range(IMPORTED)]
            reader.delete_thread(thread_id)
            assert _thread_keys(saver.client, prefix) == []


@WHERE
def test_deleting_many_runs_sends_one_slot_per_del(url: str, wire: Wire) -> None:
    """The event log's delete of many runs on a single node was one DEL over every run's keys
    (CROSSSLOT under a Cluster policy): now one DEL per slot, pipelined (one round trip)."""
    with RedisEventLog.from_url(url, key_prefix=unique_prefix("evdel")) as log:
        runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(40)]
        for run in runs:
            log.append(run, {"type": "token", "text": "x"})
        wire.sent.clear()
        log.delete(runs)
        wire.check()
        dels = wire.named("DEL")
        assert len(dels) >= 40 // 2  # 40 runs, each its own slot (a few may share one)
        assert all(log.state(run) is None for run in runs)


@WHERE
def test_reads_of_more_than_one_request_go_in_parts(url: str, thread_id: str, wire: Wire) -> None:
    """get_blobs of 5,000 element keys, a cross-thread page of 2,100 checkpoints (fetch),
    find_runs of 4,500 run ids and a parent walk over 4,200 channels: each answered whole,
    in requests within the limit."""
    with graphkeep.connect(url, key_prefix=unique_prefix("rsplit")) as saver:
        port = saver.port
        first = _first_put(saver, thread_id)
        _big_put(saver, thread_id, first)
        keys = [(ns, ch, v) for ns, ch, v in port_blob_keys(saver, thread_id)]
        assert len(keys) == IMPORTED + 2
        got = saver._call(port.get_blobs(thread_id, keys))
        assert len(got) == len(keys)

        parent = first
        ids = []
        for step in range(2100):
            cp = empty_checkpoint()
            cp["channel_values"] = {"n": step}
            cp["channel_versions"] = {"n": step + 10}
            meta = {"step": step, "run_id": f"run-{step % 7}"}
            parent = saver.put(parent, cp, meta, {"n": step + 10})
            ids.append(parent["configurable"]["checkpoint_id"])
        query = ListQuery(None, None, None, None, {}, None)
        page, _ = saver._call(port.list_page(query, None, 2200))
        mine = [it.record.checkpoint_id for it in page if it.record.thread_id == thread_id]
        assert set(ids) <= set(mine)

        runs = [f"run-{i}" for i in range(4500)]
        found = saver._call(port.find_runs(runs))
        assert len(found[thread_id]) == 2100

        channels = ["n", *(f"c{i}" for i in range(4200))]
        chain = saver._call(port.chain(thread_id, "", None, channels))
        assert chain.target_id == ids[-1]
        assert chain.ancestors[0].checkpoint_id == ids[-2]  # "n" has a value at the parent
        # no other channel has one: the walk goes to the root (the steps' first parent is
        # the first checkpoint; the large put is a sibling)
        assert [a.checkpoint_id for a in chain.ancestors] == [
            *reversed(ids[:-1]),
            first["configurable"]["checkpoint_id"],
        ]
        assert [channel for channel, _ in chain.blobs] == ["n"]
        wire.check()
        saver.delete_thread(thread_id)


def port_blob_keys(saver: Any, thread_id: str) -> list[tuple[str, str, str]]:
    return sorted(saver._call(saver.port.inventory(thread_id)).blob_keys)


@WHERE
def test_a_hot_page_larger_than_one_request_is_filled_in_parts(url: str, wire: Wire) -> None:
    """The hot layer's list page of 2,100 checkpoints: entries in parts, its index with the
    last one; read back whole."""
    port = RedisHotPort(key_prefix=unique_prefix("hot"))
    with connected(url) as client:
        execute = sync_executor(client, HOT_SCRIPTS)
        drive(port.setup(), execute)
        entries = [(f"cp-{i:05}", f"entry {i}".encode()) for i in range(2100)]
        drive(port.fill_page("t", "", None, 2100, entries, 60_000), execute)
        got = drive(port.fetch_page("t", "", None, 2100, 60_000), execute)
        assert got == [entry for _, entry in entries]
        assert len(wire.named("EVALSHA")) >= 3
        wire.check()
        drive(port.evict("t"), execute)


@WHERE
async def test_async_deleting_many_runs_sends_one_slot_per_del(url: str, wire: Wire) -> None:
    async with AsyncRedisEventLog.from_url(url, key_prefix=unique_prefix("aevdel")) as log:
        runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(40)]
        for run in runs:
            await log.append(run, {"type": "token", "text": "x"})
        wire.sent.clear()
        await log.delete(runs)
        wire.check()
        assert len(wire.named("DEL")) >= 40 // 2
        assert [await log.state(run) for run in runs] == [None] * len(runs)
