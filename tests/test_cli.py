"""The ``graphkeep`` command on real servers: every command on every backend set-up.

Backends come from the conformance matrix's set-ups: Redis and Redis Cluster
always; MongoDB and DynamoDB join automatically as soon as their URL scheme is
registered in ``graphkeep.connect.BACKENDS``. Every test works in its own key
prefix. Commands run in-process through ``main([...])``; a few run as
``python -m graphkeep.cli`` subprocesses.
"""

from __future__ import annotations

import io
import json
import operator
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, messages_from_dict
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.types import Command, Send, interrupt
from pydantic import BaseModel

import graphkeep
from conformance.setups import all_setups
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, element_blob_keys, is_manifest
from graphkeep.checkpoint.records import BlobRecord, ThreadDump, Typed
from graphkeep.cli import show_thread
from graphkeep.cli.console import Progress, parse_duration, parse_size, uuid6_time
from graphkeep.moving.items import WriteItem, task_batches

from .cli_runs import Result, gk
from .conftest import unique_prefix

ROOT = Path(__file__).resolve().parents[1]
AES_KEY = "0123456789abcdef0123456789abcdef"


def _backend_params() -> list[Any]:
    """Redis and Redis Cluster now; MongoDB / DynamoDB once their schemes are registered."""
    params = []
    for setup in all_setups():
        if setup.name == "reference":
            continue
        scheme = setup.url.split("://", 1)[0]
        if setup.name in ("redis", "redis-cluster") or scheme in graphkeep.BACKENDS:
            marks = [getattr(pytest.mark, setup.marker)] if setup.marker else []
            params.append(pytest.param(setup.url, id=setup.name, marks=marks))
    return params


BACKEND_PARAMS = _backend_params()


@dataclass
class Store:
    url: str
    prefix: str

    def argv(self, command: str, *rest: str) -> list[str]:
        return [command, self.url, *rest, "--key-prefix", self.prefix]

    @contextmanager
    def saver(self, **options: Any) -> Iterator[Any]:
        with graphkeep.connect(self.url, key_prefix=self.prefix, **options) as saver:
            yield saver


@pytest.fixture(params=BACKEND_PARAMS)
def store(request: pytest.FixtureRequest) -> Store:
    return Store(request.param, unique_prefix("cli"))


@pytest.fixture
def redis_store() -> Store:
    setup = next(s for s in all_setups() if s.name == "redis")
    return Store(setup.url, unique_prefix("cli"))


def gk_subprocess(*argv: str, env: dict[str, str] | None = None) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "graphkeep.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


# -- graphs ----------------------------------------------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list[Any], DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)]
    turns: int


def _bot(state: ChatState) -> dict[str, Any]:
    turn = state.get("turns", 0) + 1
    reply = AIMessage(content=f"answer {turn}", id=f"ai-{turn}")
    return {"messages": [reply], "turns": turn}


def chat_graph(saver: Any) -> Any:
    builder = StateGraph(ChatState)
    builder.add_node("bot", _bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder.compile(checkpointer=saver)


def chat(graph: Any, thread_id: str, turns: int, start: int = 1) -> None:
    for n in range(start, start + turns):
        message = HumanMessage(content=f"question {n}", id=f"human-{n}")
        graph.invoke({"messages": [message]}, config(thread_id))


def append_batches(state: list[str] | None, batches: Sequence[list[str]]) -> list[str]:
    result = list(state or [])
    for batch in batches:
        result.extend(batch)
    return result


class FanState(TypedDict):
    items: Annotated[list[str], DeltaChannel(append_batches, snapshot_frequency=4)]


def _fan_node(label: str) -> Any:
    def node(state: FanState) -> dict[str, list[str]]:
        rounds = sum(1 for item in state["items"] if item.startswith("in"))
        return {"items": [f"{label}{rounds}"]}

    return node


def fan_graph(saver: Any) -> Any:
    """START -> a -> (b || c): parallel writes must replay in task-path order (b, c)."""
    builder = StateGraph(FanState)
    for label in ("a", "b", "c"):
        builder.add_node(label, _fan_node(label))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("a", "c")
    builder.add_edge("b", END)
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


def fan_items(rounds: int) -> list[str]:
    return [i for n in range(1, rounds + 1) for i in (f"in{n}", f"a{n}", f"b{n}", f"c{n}")]


def fan(graph: Any, thread_id: str, rounds: range) -> None:
    for n in rounds:
        graph.invoke({"items": [f"in{n}"]}, config(thread_id))


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def _inner(state: LogState) -> dict[str, list[str]]:
    return {"log": ["inner"]}


def subgraph_graph(saver: Any) -> Any:
    """A node that runs a subgraph: its checkpoints live in namespace ``outer:<task>``."""
    inner = StateGraph(LogState)
    inner.add_node("inner", _inner)
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    outer = StateGraph(LogState)
    outer.add_node("outer", inner.compile())
    outer.add_edge(START, "outer")
    outer.add_edge("outer", END)
    return outer.compile(checkpointer=saver)


def all_ids(saver: Any, thread_id: str) -> list[tuple[str, str]]:
    return [
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    ]


def ids(saver: Any, thread_id: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(config(thread_id))]


def to_messages(value: Any) -> list[Any]:
    items = value if isinstance(value, list) else [value]
    return messages_from_dict([{"type": m["type"], "data": m} for m in items])


def recover_messages(entry: dict[str, Any]) -> list[Any]:
    """The recovery recipe of docs/cli.md: seed, then the reducer over the writes in order."""
    seed = to_messages(entry["seed"]) if entry["seed"] is not None else []
    return _messages_delta_reducer(seed, [to_messages(w["value"]) for w in entry["writes"]])


# -- threads / history -----------------------------------------------------------------


def test_threads_lists_every_thread_with_counts_size_and_last_time(store: Store) -> None:
    with store.saver() as saver:
        graph = chat_graph(saver)
        chat(graph, "t-one", 2)
        chat(graph, "t-two", 3)
        expected = {t: len(ids(saver, t)) for t in ("t-one", "t-two")}
    result = gk(*store.argv("threads", "--json"))
    assert result.code == 0, result.err
    listed = {t["thread_id"]: t for t in result.json()["threads"]}
    assert set(listed) == {"t-one", "t-two"}
    for thread_id, count in expected.items():
        info = listed[thread_id]
        assert info["checkpoints"] == count
        assert info["namespaces"] == [""]
        assert info["writes"] > 0 and info["bytes"] > 0
        last = datetime.fromisoformat(info["last_checkpoint_ts"])
        assert abs((datetime.now(timezone.utc) - last).total_seconds()) < 600
    text = gk(*store.argv("threads"))
    assert text.code == 0 and "t-one" in text.out and "2 thread(s)" in text.out
    quick = {
        t["thread_id"]: t for t in gk(*store.argv("threads", "--quick", "--json")).json()["threads"]
    }
    assert {t: quick[t]["checkpoints"] for t in quick} == expected
    assert all(t["bytes"] is None and t["last_checkpoint_ts"] for t in quick.values())
    limited = gk(*store.argv("threads", "--limit", "1", "--json")).json()
    assert limited["count"] == 1 and limited["truncated"] is True


def test_history_is_newest_first_with_steps_parents_writes_and_changes(store: Store) -> None:
    with store.saver() as saver:
        chat(chat_graph(saver), "t-hist", 2)
        tuples = list(saver.list(config("t-hist")))
    result = gk(*store.argv("history", "t-hist", "--json"))
    assert result.code == 0, result.err
    rows = result.json()["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == [
        t.config["configurable"]["checkpoint_id"] for t in tuples
    ]
    for row, tup in zip(rows, tuples, strict=True):
        assert row["step"] == tup.metadata["step"]
        assert row["source"] == tup.metadata["source"]
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        assert row["parent_checkpoint_id"] == parent
        assert row["pending_writes"] == len(tup.pending_writes)
    assert "turns" in rows[0]["channels_changed"]
    assert rows[-1]["parent_checkpoint_id"] is None and rows[-1]["source"] == "input"
    assert (
        len(gk(*store.argv("history", "t-hist", "--limit", "2", "--json")).json()["checkpoints"])
        == 2
    )
    text = gk(*store.argv("history", "t-hist"))
    assert text.code == 0 and rows[0]["checkpoint_id"] in text.out


def test_unknown_thread_exits_4_with_one_line(store: Store) -> None:
    with store.saver() as saver:
        chat(chat_graph(saver), "t-exists", 1)
    for argv in (
        store.argv("history", "no-such-thread"),
        store.argv("dump", "--thread-id", "no-such-thread", "--channel", "messages"),
        store.argv("prune", "--keep-latest", "--thread", "no-such-thread"),
        store.argv("copy", store.url, "--thread", "no-such-thread", "--dst-key-prefix", "x-gk"),
    ):
        result = gk(*argv)
        assert result.code == 4, (argv, result)
        assert "no-such-thread" in result.err and "not found" in result.err
        assert "Traceback" not in result.err
    missing_checkpoint = gk(
        *store.argv("dump", "--thread-id", "t-exists", "--checkpoint-id", "1f0-nope")
    )
    assert missing_checkpoint.code == 4 and "1f0-nope" in missing_checkpoint.err


# -- dump ------------------------------------------------------------------------------


def test_dump_recovers_delta_messages_by_seed_and_ordered_writes(store: Store) -> None:
    thread = "t-recover"
    with store.saver() as saver:
        graph = chat_graph(saver)
        chat(graph, thread, 5)
        tuples = list(saver.list(config(thread)))
        kinds = set()
        for tup in tuples:
            checkpoint_id = tup.config["configurable"]["checkpoint_id"]
            result = gk(
                *store.argv(
                    "dump",
                    "--thread-id",
                    thread,
                    "--channel",
                    "messages",
                    "--checkpoint-id",
                    checkpoint_id,
                )
            )
            assert result.code == 0, result.err
            document = result.json()
            assert document["thread_id"] == thread and document["checkpoint_ns"] == ""
            assert document["target_checkpoint_id"] == checkpoint_id
            parent = (
                tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
            )
            assert document["parent_checkpoint_id"] == parent
            entry = document["channels"]["messages"]
            kinds.add(entry["delta_kind"])
            assert set(entry) >= {"seed", "seed_checkpoint_id", "seed_version", "writes"}
            for write in entry["writes"]:
                assert set(write) >= {"checkpoint_id", "task_id", "idx", "value"}
            state = graph.get_state(config(thread, checkpoint_id)).values
            assert recover_messages(entry) == state.get("messages", []), checkpoint_id
        assert "snapshot" in kinds, "snapshot_frequency=3 should have stored snapshots"
        assert "no_seed" in kinds, "the first checkpoints have no stored value yet"
        # the head through a subprocess, the way an operator runs it
        head = gk_subprocess(
            *store.argv(
                "dump", "--thread-id", thread, "--channel", "messages", "--channel", "turns"
            )
        )
        assert head.code == 0, head.err
        channels = json.loads(head.out)["channels"]
        assert (
            recover_messages(channels["messages"])
            == graph.get_state(config(thread)).values["messages"]
        )
        assert channels["turns"]["delta_kind"] == "legacy_plain" and channels["turns"]["seed"] == 5


def interrupted_sibling_graph(saver: Any) -> Any:
    """``answer`` and ``ask`` run in one step: ``answer`` finishes, ``ask`` interrupts, so
    ``answer``'s message is a pending write of the step's checkpoint."""

    def answer(state: ChatState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="on it", id=f"ai-{len(state['messages'])}")]}

    def ask(state: ChatState) -> dict[str, Any]:
        interrupt("approve?")
        return {}

    builder = StateGraph(ChatState)
    builder.add_node("answer", answer)
    builder.add_node("ask", ask)
    builder.add_edge(START, "answer")
    builder.add_edge(START, "ask")
    builder.add_edge("answer", END)
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def recover_with_pending(entry: dict[str, Any]) -> list[Any]:
    """The recipe, then every pending write: what ``get_state`` (live) shows of the head."""
    pending = [to_messages(w["value"]) for w in entry["pending_writes"]]
    return _messages_delta_reducer(recover_messages(entry), pending)


def assert_dump_has_the_pending_writes(url_argv: list[str], graph: Any, thread: str) -> None:
    state = graph.get_state(config(thread))
    assert state.interrupts and len(state.values["messages"]) == 4
    result = gk(*url_argv)
    assert result.code == 0, result.err
    entry = result.json()["channels"]["messages"]
    assert [w["idx"] for w in entry["pending_writes"]] == [0]
    assert set(entry["pending_writes"][0]) == {"task_id", "task_path", "idx", "value", "applied_in"}
    assert recover_messages(entry) != state.values["messages"]  # the sibling's is pending
    assert recover_with_pending(entry) == state.values["messages"]


def test_dump_includes_the_pending_writes_of_an_interrupted_step(
    store: Store, tmp_path: Path
) -> None:
    thread = "t-pending"
    with store.saver() as saver:
        graph = interrupted_sibling_graph(saver)
        graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config(thread))
        graph.invoke(Command(resume="yes"), config(thread))
        graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config(thread))
        argv = store.argv("dump", "--thread-id", thread, "--channel", "messages")
        assert_dump_has_the_pending_writes(argv, graph, thread)
    db = tmp_path / "pending.db"
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:
        graph = interrupted_sibling_graph(sqlite_saver)
        graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config(thread))
        graph.invoke(Command(resume="yes"), config(thread))
        graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config(thread))
        argv = ["dump", f"sqlite:///{db}", "--thread-id", thread, "--channel", "messages"]
        assert_dump_has_the_pending_writes(argv, graph, thread)


def test_dump_of_a_channel_the_checkpoint_does_not_have_warns_and_exits_4(store: Store) -> None:
    with store.saver() as saver:
        chat(chat_graph(saver), "t-typo", 2)
    result = gk(
        *store.argv("dump", "--thread-id", "t-typo", "--channel", "mesages", "--channel", "turns")
    )
    assert result.code == 4
    assert "no channel 'mesages'" in result.err and "messages" in result.err
    document = result.json()
    assert document["unknown_channels"] == ["mesages"]
    assert document["channels"]["mesages"]["delta_kind"] == "unknown_channel"
    assert document["channels"]["turns"]["seed"] == 2
    assert gk(*store.argv("dump", "--thread-id", "t-typo")).code == 0


class Ticket(BaseModel):
    title: str
    priority: int


def test_dump_decodes_extension_types_to_plain_json(store: Store, tmp_path: Path) -> None:
    import numpy as np

    ticket_id = uuid.uuid4()
    values = {
        "ticket_id": ticket_id,
        "send": Send("worker", {"n": 1}),
        "model": Ticket(title="refund", priority=2),
        "array": np.arange(6, dtype="<i4").reshape(2, 3),
        "raw": b"\x00\x01binary",
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        "tags": {"a"},
        "messages": [HumanMessage(content="hello", id="m-1")],
    }
    with store.saver() as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = {ch: saver.get_next_version(None) for ch in values}
        saver.put(
            {"configurable": {"thread_id": "t-ext", "checkpoint_ns": ""}},
            checkpoint,
            {"source": "input", "step": -1},
            checkpoint["channel_versions"],
        )
    out_file = tmp_path / "dump.json"
    # a subprocess that has never imported this module's classes
    result = gk_subprocess(*store.argv("dump", "--thread-id", "t-ext", "--output", str(out_file)))
    assert result.code == 0, result.err
    channels = json.loads(out_file.read_text())["channels"]
    seeds = {ch: entry["seed"] for ch, entry in channels.items()}
    assert all(entry["delta_kind"] == "legacy_plain" for entry in channels.values())
    assert seeds["ticket_id"] == str(ticket_id)
    assert seeds["send"] == {"__send__": {"node": "worker", "arg": {"n": 1}}}
    assert seeds["model"] == {"title": "refund", "priority": 2}
    array = seeds["array"]["__numpy_array__"]
    assert array["dtype"] == "<i4" and array["shape"] == [2, 3]
    decoded = np.frombuffer(__import__("base64").b64decode(array["data_b64"]), dtype="<i4")
    assert decoded.tolist() == list(range(6))
    assert seeds["raw"] == {"__bytes__": "AAFiaW5hcnk="}
    assert seeds["when"] == "2026-01-02T03:04:05+00:00"
    assert seeds["tags"] == ["a"]
    assert seeds["messages"][0]["type"] == "human" and seeds["messages"][0]["content"] == "hello"


def test_encrypted_values_are_reported_or_decoded_with_the_key(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY.encode())
    with store.saver(serde=serde) as saver:
        chat(chat_graph(saver), "t-secret", 2)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    locked = gk(*store.argv("dump", "--thread-id", "t-secret", "--channel", "turns"))
    assert locked.code == 0, locked.err
    assert locked.json()["channels"]["turns"]["seed"] == {"__encrypted__": "msgpack+aes"}
    history = gk(*store.argv("history", "t-secret", "--json"))
    assert history.code == 0 and history.json()["checkpoints"][0]["metadata_encrypted"] is True
    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    opened = gk(*store.argv("dump", "--thread-id", "t-secret", "--channel", "turns"))
    assert opened.json()["channels"]["turns"]["seed"] == 2
    assert gk(*store.argv("history", "t-secret", "--json")).json()["checkpoints"][0]["step"] >= 1


# -- prune -----------------------------------------------------------------------------


def test_prune_dry_run_removes_nothing_then_keep_latest_keeps_delta_state(store: Store) -> None:
    with store.saver() as saver:
        graph = chat_graph(saver)
        chat(graph, "t-prune", 4)
        before_ids = ids(saver, "t-prune")
        before_state = graph.get_state(config("t-prune")).values
        dry = gk(
            *store.argv("prune", "--keep-latest", "--thread", "t-prune", "--dry-run", "--json")
        )
        assert dry.code == 0, dry.err
        plan = dry.json()["threads"][0]
        assert plan["checkpoints_removed"] > 0
        assert plan["checkpoints_before"] == len(before_ids)
        assert ids(saver, "t-prune") == before_ids, "--dry-run removed something"
        text = gk(*store.argv("prune", "--keep-latest", "--thread", "t-prune", "--dry-run"))
        assert "would remove" in text.out and "nothing was removed" in text.out
        assert ids(saver, "t-prune") == before_ids

        done = gk(*store.argv("prune", "--keep-latest", "--thread", "t-prune", "--json"))
        assert done.code == 0, done.err
        after_ids = ids(saver, "t-prune")
        assert len(after_ids) == plan["checkpoints_kept"] < len(before_ids)
        assert sorted(set(before_ids) - set(after_ids)) == sorted(
            e["checkpoint_id"] for e in plan["removed_checkpoint_ids"]
        )
        assert graph.get_state(config("t-prune")).values == before_state
        chat(graph, "t-prune", 1, start=5)
        assert len(graph.get_state(config("t-prune")).values["messages"]) == 10


def test_prune_older_than_selects_idle_threads_and_delete_removes_them(store: Store) -> None:
    with store.saver() as saver:
        chat(chat_graph(saver), "t-idle", 1)
        recent = gk(*store.argv("prune", "--delete", "--older-than", "1d", "--dry-run", "--json"))
        assert recent.code == 0 and recent.json()["threads"] == []
        time.sleep(1.2)
        idle = gk(*store.argv("prune", "--delete", "--older-than", "1s", "--dry-run", "--json"))
        assert [t["thread_id"] for t in idle.json()["threads"]] == ["t-idle"]
        assert ids(saver, "t-idle"), "--dry-run removed something"
        gone = gk(*store.argv("prune", "--delete", "--older-than", "1s"))
        assert gone.code == 0, gone.err
        assert ids(saver, "t-idle") == []


# -- copy ------------------------------------------------------------------------------


def test_copy_between_graphkeep_stores_is_idempotent_resumable_and_verified(store: Store) -> None:
    target = Store(store.url, unique_prefix("cli-dst"))
    with store.saver() as src:
        graph = chat_graph(src)
        chat(graph, "t-copy", 4)
        source_ids = ids(src, "t-copy")
        source_state = graph.get_state(config("t-copy")).values
    argv = [
        "copy",
        store.url,
        target.url,
        "--thread",
        "t-copy",
        "--src-key-prefix",
        store.prefix,
        "--dst-key-prefix",
        target.prefix,
        "--json",
    ]
    first = gk(*argv)
    assert first.code == 0, first.err
    report = first.json()["threads"][0]
    assert report["verified"] is True and report["checkpoints_copied"] == len(source_ids)
    again = gk(*argv).json()["threads"][0]
    assert again["checkpoints_copied"] == 0 and again["verified"] is True
    with target.saver() as dst:
        assert ids(dst, "t-copy") == source_ids
        assert chat_graph(dst).get_state(config("t-copy")).values == source_state
        # an interrupted copy: the destination holds only part of the thread
        dst.prune(["t-copy"], strategy="keep_latest")
        partial = len(ids(dst, "t-copy"))
        resumed = gk(*argv).json()["threads"][0]
        assert resumed["checkpoints_copied"] == len(source_ids) - partial
        assert resumed["checkpoints_already_present"] == partial
        assert ids(dst, "t-copy") == source_ids
        copied_graph = chat_graph(dst)
        assert copied_graph.get_state(config("t-copy")).values == source_state
        chat(copied_graph, "t-copy", 1, start=5)
        assert len(copied_graph.get_state(config("t-copy")).values["messages"]) == 10


def test_copy_rename_to_within_one_store_and_across_backends(
    store: Store, redis_store: Store
) -> None:
    with store.saver() as saver:
        graph = chat_graph(saver)
        chat(graph, "t-orig", 2)
        state = graph.get_state(config("t-orig")).values
        subgraph_graph(saver).invoke({"log": ["x"]}, config("t-sub"))
        sub_ids = all_ids(saver, "t-sub")
        renamed = gk(*store.argv("copy", store.url, "--thread", "t-orig", "--rename-to", "t-new"))
        assert renamed.code == 0, renamed.err
        assert graph.get_state(config("t-new")).values == state
        assert ids(saver, "t-new") == ids(saver, "t-orig")
    same = gk(*store.argv("copy", store.url, "--thread", "t-orig"))
    assert same.code == 2 and "same store" in same.err
    # this backend -> plain Redis and back again under a new name
    out = gk(
        "copy",
        store.url,
        redis_store.url,
        "--thread",
        "t-orig",
        "t-sub",
        "--src-key-prefix",
        store.prefix,
        "--dst-key-prefix",
        redis_store.prefix,
    )
    assert out.code == 0, out.err
    back = gk(
        "copy",
        redis_store.url,
        store.url,
        "--thread",
        "t-orig",
        "--rename-to",
        "t-back",
        "--src-key-prefix",
        redis_store.prefix,
        "--dst-key-prefix",
        store.prefix,
    )
    assert back.code == 0, back.err
    with store.saver() as saver:
        assert chat_graph(saver).get_state(config("t-back")).values == state
    with redis_store.saver() as other:
        assert all_ids(other, "t-sub") == sub_ids
        assert len({ns for ns, _ in sub_ids}) == 2


def test_copy_from_langgraph_sqlite_and_resume_the_graph_here(store: Store, tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:
        sqlite_graph = fan_graph(sqlite_saver)
        fan(sqlite_graph, "t-sql", range(1, 8))
        fan(sqlite_graph, "t-sql-2", range(1, 3))
        subgraph_graph(sqlite_saver).invoke({"log": ["x"]}, config("t-sub"))
        sub_ids = all_ids(sqlite_saver, "t-sub")
        sqlite_ids = ids(sqlite_saver, "t-sql")
        sqlite_state = sqlite_graph.get_state(config("t-sql")).values
    assert sqlite_state == {"items": fan_items(7)}
    sqlite_url = f"sqlite:///{db}"
    listed = gk("threads", sqlite_url, "--json")
    assert {t["thread_id"] for t in listed.json()["threads"]} == {"t-sql", "t-sql-2", "t-sub"}
    assert len({ns for ns, _ in sub_ids}) == 2, "the subgraph should have its own namespace"
    assert (
        gk("history", sqlite_url, "t-sql", "--json").json()["checkpoints"][0]["checkpoint_id"]
        == sqlite_ids[0]
    )

    result = gk("copy", sqlite_url, store.url, "--all", "--dst-key-prefix", store.prefix, "--json")
    assert result.code == 0, result.err
    assert all(t["verified"] for t in result.json()["threads"])
    rerun = gk("copy", sqlite_url, store.url, "--all", "--dst-key-prefix", store.prefix, "--json")
    assert all(t["checkpoints_copied"] == 0 for t in rerun.json()["threads"])
    with store.saver() as saver:
        assert ids(saver, "t-sql") == sqlite_ids
        assert all_ids(saver, "t-sub") == sub_ids
        sub_history = gk(*store.argv("history", "t-sub", "--all-ns", "--json")).json()
        assert len({r["checkpoint_ns"] for r in sub_history["checkpoints"]}) == 2
        graph = fan_graph(saver)
        assert graph.get_state(config("t-sql")).values == sqlite_state
        fan(graph, "t-sql", range(8, 9))
        assert graph.get_state(config("t-sql")).values == {"items": fan_items(8)}
        state_here = graph.get_state(config("t-sql")).values
    # and back into a fresh SQLite file: the public put/put_writes path the other way
    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    back = gk("copy", store.url, back_url, "--thread", "t-sql", "--src-key-prefix", store.prefix)
    assert back.code == 0, back.err
    with SqliteSaver.from_conn_string(str(tmp_path / "back.db")) as again:
        assert fan_graph(again).get_state(config("t-sql")).values == state_here


# -- stats / setup ---------------------------------------------------------------------


def test_stats_reports_growth_and_exits_3_when_a_threshold_is_crossed(store: Store) -> None:
    with store.saver() as saver:
        chat(chat_graph(saver), "t-big", 4)
        chat(chat_graph(saver), "t-small", 1)
        big = len(ids(saver, "t-big"))
    ok = gk(
        *store.argv(
            "stats",
            "--json",
            "--max-checkpoints-per-thread",
            str(big),
            "--max-bytes-per-thread",
            "10MB",
        )
    )
    assert ok.code == 0, ok.err
    report = ok.json()
    assert report["threads"] == 2 and report["violations"] == []
    assert report["top"][0]["thread_id"] == "t-big" and report["bytes"] > 0
    crossed = gk(*store.argv("stats", "--json", "--max-checkpoints-per-thread", str(big - 1)))
    assert crossed.code == 3
    assert [v["thread_id"] for v in crossed.json()["violations"]] == ["t-big"]
    by_size = gk(*store.argv("stats", "--max-bytes-per-thread", "1KB", "--top", "1"))
    assert by_size.code == 3 and "THRESHOLD t-big" in by_size.out
    bad = gk(*store.argv("stats", "--max-bytes-per-thread", "ten"))
    assert bad.code == 2


def test_setup_creates_the_schema_or_prints_it(store: Store) -> None:
    created = gk(*store.argv("setup", "--json"))
    assert created.code == 0, created.err
    assert created.json()["setup"] == "done"
    printed = gk(*store.argv("setup", "--print"))
    assert printed.code == 0, printed.err
    described = printed.json()
    assert described["backend"].startswith("graphkeep.backends.")
    if described["backend"] == "graphkeep.backends.redis":
        assert any(k.startswith(f"{store.prefix}:") for k in described["keys_per_thread"])
    else:
        assert any(k in described for k in ("schema", "table_definition", "index_specs"))


# -- errors, help, demo hook -----------------------------------------------------------


UNREACHABLE = {
    "redis": "redis://admin:s3cretpw@127.0.0.1:1/0",
    "redis-cluster": "redis+cluster://:s3cretpw@127.0.0.1:1",
    "mongodb": "mongodb://admin:s3cretpw@127.0.0.1:1/x?serverSelectionTimeoutMS=1000",
    "dynamodb": "dynamodb://t?region=us-east-1&endpoint_url=http://127.0.0.1:1",
    # Valkey's spellings of the Redis URLs, masked the same
    "valkey": "valkey://admin:s3cretpw@127.0.0.1:1/0",
    "valkey-cluster": "valkey+cluster://:s3cretpw@127.0.0.1:1",
}


@pytest.mark.parametrize("name", [p.id for p in BACKEND_PARAMS])
def test_unreachable_server_is_one_masked_line_and_exit_1(name: str) -> None:
    result = gk_subprocess("threads", UNREACHABLE[name])
    assert result.code == 1, result
    assert "s3cretpw" not in result.out + result.err
    assert "Traceback" not in result.err and "unavailable" in result.err
    assert result.err.startswith("graphkeep: error:") and result.err.count("\n") == 1
    if "s3cretpw" in UNREACHABLE[name]:
        assert "***" in result.err


def test_traceback_flag_shows_the_traceback_still_masked() -> None:
    traced = gk("history", "redis://:s3cretpw@127.0.0.1:1/0", "t", "--traceback")
    assert traced.code == 1 and "Traceback" in traced.err and "s3cretpw" not in traced.err


def test_a_password_one_command_saw_does_not_mask_the_next_commands_words() -> None:
    """In one process (an app or a test calling the CLI twice), a command masks the passwords
    of its own URLs only: one whose password is a common word ("mongodb") hides nothing of the
    next command's output."""
    first = gk("history", "redis://:mongodb@127.0.0.1:1/0", "t")
    assert first.code == 1 and ":mongodb@" not in first.err
    second = gk("history", "nosuch://host/x", "t")
    assert second.code == 2 and "mongodb://" in second.err and "***" not in second.err, second.err


def test_bad_urls_are_usage_errors() -> None:
    for argv in (
        ["threads", "nosuch://host/x"],
        ["threads", "not-a-url"],
        ["history", "sqlite:relative.db", "t"],
        [
            "copy",
            "redis://127.0.0.1:1/0",
            "redis://127.0.0.1:1/0",
            "--thread",
            "a",
            "--rename-to",
            "b",
            "--all",
        ],
    ):
        result = gk(*argv)
        assert result.code == 2, (argv, result)
        assert "Traceback" not in result.err
    missing = gk("threads", "sqlite:////nonexistent/dir/app.db")
    assert missing.code == 4 and "no SQLite database" in missing.err


def test_every_command_has_help_with_examples() -> None:
    for command in ("threads", "history", "dump", "prune", "copy", "stats", "setup"):
        result = gk(command, "--help")
        assert result.code == 0
        assert "examples:" in result.out and f"graphkeep {command}" in result.out
    top = gk("--help")
    assert top.code == 0 and "exit codes" in top.out


@pytest.mark.redis
def test_show_thread_prints_history_and_dump_for_the_demo(redis_store: Store) -> None:
    with redis_store.saver() as saver:
        chat(chat_graph(saver), "t-demo", 2)
    out = io.StringIO()
    code = show_thread(redis_store.url, "t-demo", key_prefix=redis_store.prefix, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "$ graphkeep history" in text and "$ graphkeep dump" in text
    dumped = json.loads(text[text.index("{") :])
    assert set(dumped["channels"]) == {"messages", "turns"}
    out = io.StringIO()
    assert show_thread(redis_store.url, "t-none", key_prefix=redis_store.prefix, out=out) == 4


# -- small pieces ----------------------------------------------------------------------


def test_sizes_durations_and_uuid6_times_parse() -> None:
    assert parse_size("10MB") == 10_000_000 and parse_size("1KiB") == 1024
    assert parse_size("2048") == 2048 and parse_size("1.5k") == 1500
    assert parse_duration("30d") == 30 * 86400 and parse_duration("12h") == 43200
    for bad in ("ten", "10 parsecs"):
        with pytest.raises(ValueError):
            parse_size(bad)
    from langgraph.checkpoint.base.id import uuid6

    assert abs(uuid6_time(str(uuid6(clock_seq=3))) - time.time()) < 5  # type: ignore[operator]
    assert uuid6_time(str(uuid.uuid4())) is None


class Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_bars_draw_only_on_a_terminal() -> None:
    for tty in (True, False):
        stream = Terminal(tty)
        with Progress("copy", 3, stream=stream) as progress:
            for n in range(3):
                progress.advance(detail=f"thread-{n}")
        assert ("[" in stream.getvalue()) is tty
    quiet = Terminal(True)
    with Progress("copy", 3, stream=quiet, enabled=False) as progress:
        progress.advance()
    assert quiet.getvalue() == ""


def test_task_batches_rebuild_original_write_indexes() -> None:
    def w(channel: str, idx: int | None) -> WriteItem:
        return WriteItem("task", channel, idx, "", channel)

    resume = task_batches([w("__resume__", -4), w("a", 1), w("b", 2)])
    assert resume == [[("__resume__", "__resume__"), ("a", "a"), ("b", "b")]]
    plain = task_batches([w("a", 0), w("b", 1)])
    assert plain == [[("a", "a"), ("b", "b")]]
    unknown = task_batches([w("__error__", None), w("a", None)])
    assert unknown == [[("__error__", "__error__")], [("a", "a")]]


# -- shared lists (issue #13): a plain add_messages list stored as elements + manifest ---


class PlainChat(TypedDict):
    messages: Annotated[list[Any], add_messages]


def _plain_bot(state: PlainChat) -> dict[str, Any]:
    turn = len(state["messages"]) // 2 + 1
    return {"messages": [AIMessage(content=f"answer {turn} " + "a" * 200, id=f"ai-{turn}")]}


def plain_chat_graph(saver: Any) -> Any:
    """No DeltaChannel: each version of ``messages`` is a new, longer list (graphkeep shares it)."""
    builder = StateGraph(PlainChat)
    builder.add_node("bot", _plain_bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder.compile(checkpointer=saver)


def plain_chat(graph: Any, thread_id: str, turns: int, start: int = 1) -> None:
    for n in range(start, start + turns):
        message = HumanMessage(content=f"question {n} " + "q" * 200, id=f"human-{n}")
        graph.invoke({"messages": [message]}, config(thread_id))


def element_keys(saver: Any, thread_id: str) -> set[tuple[str, str, str]]:
    inventory = saver._call(saver.port.inventory(thread_id))
    return {key for key in inventory.blob_keys if key[1] == ELEMENT_CHANNEL}


def assert_no_orphans(saver: Any, thread_id: str) -> None:
    """Every element record is named by a kept checkpoint's manifest, and every named one exists."""
    inventory = saver._call(saver.port.inventory(thread_id))
    named = {
        (s.ns, ch, s.versions[ch]) for s in inventory.checkpoints for ch in s.present
    } & inventory.blob_keys
    blobs = saver._call(saver.port.get_blobs(thread_id, sorted(named)))
    manifests = [(key[0], blob) for key, blob in blobs.items() if is_manifest(blob)]
    assert manifests, "the thread should hold a shared list"
    wanted = {k for ns, blob in manifests for k in element_blob_keys(ns, [blob])}
    stored = {key for key in inventory.blob_keys if key[1] == ELEMENT_CHANNEL}
    assert stored == wanted, (
        f"orphans {sorted(stored - wanted)[:3]}, missing {sorted(wanted - stored)[:3]}"
    )


def test_shared_lists_dump_inspect_and_stats_show_the_whole_list(store: Store) -> None:
    with store.saver() as saver:
        graph = plain_chat_graph(saver)
        plain_chat(graph, "t-shared", 5)
        state = graph.get_state(config("t-shared")).values
        first_id = ids(saver, "t-shared")[4]  # two turns back: a shorter shared list
        first = saver.get_tuple(config("t-shared", first_id)).checkpoint
        elements = element_keys(saver, "t-shared")
        inventory = saver._call(saver.port.inventory("t-shared"))
        channel_blobs = len(inventory.blob_keys) - len(elements)
    assert len(state["messages"]) == 10
    assert len(elements) == 10, "the messages list should be stored as shared elements"

    dumped = gk(*store.argv("dump", "--thread-id", "t-shared", "--channel", "messages"))
    assert dumped.code == 0, dumped.err
    entry = dumped.json()["channels"]["messages"]
    assert entry["delta_kind"] == "legacy_plain" and entry["writes"] == []
    assert to_messages(entry["seed"]) == state["messages"]
    older = gk(
        *store.argv(
            "dump", "--thread-id", "t-shared", "--channel", "messages", "--checkpoint-id", first_id
        )
    )
    assert (
        to_messages(older.json()["channels"]["messages"]["seed"])
        == (first["channel_values"]["messages"])
    )
    assert len(first["channel_values"]["messages"]) == 7
    out = io.StringIO()
    assert show_thread(store.url, "t-shared", key_prefix=store.prefix, out=out) == 0
    assert "graphkeep.list" not in out.getvalue() and f"answer 5 {'a' * 200}" in out.getvalue()

    threads = gk(*store.argv("threads", "--json")).json()["threads"]
    quick = gk(*store.argv("threads", "--quick", "--json")).json()["threads"]
    stats = gk(*store.argv("stats", "--json")).json()
    for info in (threads[0], quick[0], stats["top"][0]):
        assert info["list_elements"] == 10
        assert info["blobs"] == channel_blobs, "elements are not counted as channel blobs"
    assert stats["list_elements"] == 10
    assert stats["top"][0]["bytes_by_kind"]["list_elements"] > 0  # stored (compressed) bytes
    assert "LIST ELEMENTS" in gk(*store.argv("stats")).out

    # a manifest whose elements are gone is an error naming the thread, never a short list
    with store.saver() as saver:
        victim = sorted(elements)[3]
        saver._call(saver.port.delete_records("t-shared", [], [victim]))
    broken = gk(*store.argv("dump", "--thread-id", "t-shared", "--channel", "messages"))
    assert broken.code == 1 and "t-shared" in broken.err and "missing" in broken.err
    assert broken.out == ""


def test_shared_lists_copy_to_graphkeep_and_langgraph_sqlite_and_back(
    store: Store, redis_store: Store, tmp_path: Path
) -> None:
    with store.saver() as saver:
        graph = plain_chat_graph(saver)
        plain_chat(graph, "t-list", 4)
        state = graph.get_state(config("t-list")).values
        history = [t.checkpoint["channel_values"] for t in saver.list(config("t-list"))]
        source_ids = ids(saver, "t-list")
        elements = len(element_keys(saver, "t-list"))
    assert elements == 8
    target = Store(store.url, unique_prefix("cli-dst"))
    for dst in (target, redis_store):  # another prefix, and (from Cluster/Mongo/...) Redis
        copied = gk(
            "copy",
            store.url,
            dst.url,
            "--thread",
            "t-list",
            "--src-key-prefix",
            store.prefix,
            "--dst-key-prefix",
            dst.prefix,
            "--json",
        )
        assert copied.code == 0, copied.err
        report = copied.json()["threads"][0]
        assert report["verified"] is True and report["problems"] == []
        assert report["list_elements"] == elements
        with dst.saver() as other:
            assert ids(other, "t-list") == source_ids
            assert plain_chat_graph(other).get_state(config("t-list")).values == state
            assert [t.checkpoint["channel_values"] for t in other.list(config("t-list"))] == history
            assert_no_orphans(other, "t-list")

    # graphkeep -> LangGraph's SqliteSaver: the lists arrive whole
    db = tmp_path / "lists.db"
    out = gk(
        "copy",
        store.url,
        f"sqlite:///{db}",
        "--thread",
        "t-list",
        "--src-key-prefix",
        store.prefix,
        "--json",
    )
    assert out.code == 0, out.err
    assert out.json()["threads"][0]["verified"] is True
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:
        assert plain_chat_graph(sqlite_saver).get_state(config("t-list")).values == state
        assert [
            t.checkpoint["channel_values"] for t in sqlite_saver.list(config("t-list"))
        ] == history
    # ... and back into graphkeep under a new prefix: shared again, identical state
    back = Store(store.url, unique_prefix("cli-back"))
    again = gk(
        "copy",
        f"sqlite:///{db}",
        store.url,
        "--thread",
        "t-list",
        "--dst-key-prefix",
        back.prefix,
        "--json",
    )
    assert again.code == 0, again.err
    with back.saver() as saver:
        graph = plain_chat_graph(saver)
        assert graph.get_state(config("t-list")).values == state
        assert [t.checkpoint["channel_values"] for t in saver.list(config("t-list"))] == history
        assert len(element_keys(saver, "t-list")) == elements, "each message stored once"
        plain_chat(graph, "t-list", 1, start=5)
        assert len(graph.get_state(config("t-list")).values["messages"]) == 10


def test_shared_lists_prune_keeps_named_elements_and_removes_orphans(store: Store) -> None:
    with store.saver() as saver:
        graph = plain_chat_graph(saver)
        plain_chat(graph, "t-lp", 4)
        state = graph.get_state(config("t-lp")).values
        ns = ""
        orphan = (ns, ELEMENT_CHANNEL, "ffffffffffffffff00000000")
        # what a crash between writing the elements and the manifest leaves behind
        saver._call(
            saver.port.import_thread(
                "t-lp",
                ThreadDump(
                    [],
                    [],
                    [(ns, BlobRecord(ELEMENT_CHANNEL, orphan[2], Typed("msgpack", b"\xa1x")))],
                ),
            )
        )
        assert orphan in element_keys(saver, "t-lp")
    dry = gk(*store.argv("prune", "--keep-latest", "--thread", "t-lp", "--dry-run", "--json"))
    assert dry.code == 0, dry.err
    plan = dry.json()["threads"][0]
    assert plan["list_elements_removed"] == 1, "only the orphan: the head's manifest names the rest"
    assert plan["checkpoints_removed"] > 0
    text = gk(*store.argv("prune", "--keep-latest", "--thread", "t-lp"))
    assert text.code == 0, text.err
    assert "1 list element(s)" in text.out
    with store.saver() as saver:
        assert orphan not in element_keys(saver, "t-lp")
        assert len(element_keys(saver, "t-lp")) == 8
        assert_no_orphans(saver, "t-lp")
        graph = plain_chat_graph(saver)
        assert graph.get_state(config("t-lp")).values == state
        plain_chat(graph, "t-lp", 1, start=5)
        assert len(graph.get_state(config("t-lp")).values["messages"]) == 10
        assert_no_orphans(saver, "t-lp")
    again = gk(*store.argv("prune", "--keep-latest", "--thread", "t-lp", "--json"))
    assert again.json()["threads"][0]["list_elements_removed"] == 0
    gone = gk(*store.argv("prune", "--delete", "--thread", "t-lp"))
    assert gone.code == 0, gone.err
    with store.saver() as saver:
        inventory = saver._call(saver.port.inventory("t-lp"))
        assert not inventory.blob_keys and not inventory.checkpoints


def test_shared_lists_encrypted_elements_dump_and_copy_with_the_key(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY.encode())
    with store.saver(serde=serde) as saver:
        graph = plain_chat_graph(saver)
        plain_chat(graph, "t-enc", 3)
        state = graph.get_state(config("t-enc")).values
        assert len(element_keys(saver, "t-enc")) == 6
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    locked = gk(*store.argv("dump", "--thread-id", "t-enc", "--channel", "messages"))
    assert locked.code == 0, locked.err
    assert locked.json()["channels"]["messages"]["seed"] == [{"__encrypted__": "msgpack+aes"}] * 6
    db = tmp_path / "enc.db"
    argv = ["copy", store.url, f"sqlite:///{db}", "--thread", "t-enc", "--src-key-prefix"]
    refused = gk(*argv, store.prefix)
    assert refused.code == 1 and "LANGGRAPH_AES_KEY" in refused.err
    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    opened = gk(*store.argv("dump", "--thread-id", "t-enc", "--channel", "messages"))
    assert to_messages(opened.json()["channels"]["messages"]["seed"]) == state["messages"]
    copied = gk(*argv, store.prefix)
    assert copied.code == 0, copied.err
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:
        assert plain_chat_graph(sqlite_saver).get_state(config("t-enc")).values == state
