"""``fallback=`` with the rivals' URLs, one set of openers, and the mover's lease, on real servers.

Threads written by real graphs through each rival saver (RedisSaver 0.5.2 on Redis Stack,
plainredis on Redis, MongoDBSaver on the MongoDB server, DynamoDBSaver on the DynamoDB
endpoint: tests/test_copy_rivals.py) are read through graphkeep with ``fallback=<rival URL>``
on every graphkeep backend, sync and async: each checkpoint reads as the source's, the chat
goes on, the interrupt resumes with ``Command(resume=…)`` as on the source, the source is left
as it was. A rival whose package is missing, a source that cannot be opened: one line, the URL
masked. The mover's lease: tests/test_fallback_lease.py (no rival there: it runs in a shared
chunk of ``./dev test``, tools/lane_queue.py, away from Redis Stack's RedisSaver tests here).
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

import graphkeep
from graphkeep.errors import ConfigurationError, StorageUnavailable

from .conftest import REDIS_URL, unique_prefix
from .test_cli import BACKEND_PARAMS
from .test_copy_rivals import (
    Rival,
    approval_graph,
    chat_graph,
    config,
    fan_out_graph,
    rival,  # noqa: F401 - the fixture
    rival_url,
    snapshot,
)

MODES = ["sync", "async"]


@pytest.fixture(params=BACKEND_PARAMS)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


GRAPHS = {"chat": chat_graph, "approval": approval_graph, "fan": fan_out_graph}


def write_rival_threads(saver: Any, tag: str) -> dict[str, str]:
    """A two-turn chat, an approval waiting on its interrupt, a ``Send`` fan-out."""
    threads = {name: f"{name}-{tag}" for name in GRAPHS}
    chat = chat_graph(saver)
    for n in (1, 2):
        chat.invoke(
            {"messages": [HumanMessage(content=f"hi {n}", id=f"h-{n}")]}, config(threads["chat"])
        )
    approval_graph(saver).invoke({"n": 0, "log": []}, config(threads["approval"]))
    fan_out_graph(saver).invoke({"items": ["a", "b"], "results": []}, config(threads["fan"]))
    return threads


def root_ids(source: Any, graph: Any, thread_id: str) -> list[str]:
    """The source's checkpoint ids of the root namespace, newest first (RedisSaver's history
    also lists its subgraphs': those ``get_tuple`` finds in the root namespace)."""
    return [
        s.config["configurable"]["checkpoint_id"]
        for s in graph.get_state_history(config(thread_id))
        if source.get_tuple({"configurable": {**s.config["configurable"], "checkpoint_ns": ""}})
    ]


def assert_moved_alike(source: Any, here: Any, threads: dict[str, str], kind: str) -> None:
    """Every source checkpoint is in graphkeep and reads alike by id (each side read by id:
    RedisSaver's history returns messages as dicts; RedisSaver may drop a head's pending
    writes, so its interrupts are not compared: tests/test_copy_rivals.py)."""
    for name, thread_id in threads.items():
        there_graph, here_graph = GRAPHS[name](source), GRAPHS[name](here)
        ids = root_ids(source, there_graph, thread_id)
        here_ids = [
            s.config["configurable"]["checkpoint_id"]
            for s in here_graph.get_state_history(config(thread_id))
        ]
        assert ids and set(ids) <= set(here_ids), name
        for checkpoint_id in ids:
            want = snapshot(there_graph.get_state(config(thread_id, checkpoint_id)))
            got = snapshot(here_graph.get_state(config(thread_id, checkpoint_id)))
            if kind == "redis":
                for side in (want, got):
                    side["tasks"] = [t[:3] for t in side["tasks"]]
                    side.pop("interrupts")
            assert got == want, f"{name} at {checkpoint_id}"


def use_sync(url: str, prefix: str, source: str, threads: dict[str, str]) -> dict[str, Any]:
    with graphkeep.connect(url, key_prefix=prefix, fallback=source) as saver:
        asked = approval_graph(saver).get_state(config(threads["approval"]))
        fan = fan_out_graph(saver).get_state(config(threads["fan"])).values
        turn = {"messages": [HumanMessage(content="hi 3", id="h-3")]}
        chat = chat_graph(saver).invoke(turn, config(threads["chat"]))
        ended = approval_graph(saver).invoke(Command(resume="yes"), config(threads["approval"]))
        return {
            "interrupts": [i.value for i in asked.interrupts],
            "fan": fan,
            "chat": [m.id for m in chat["messages"]],
            "ended": ended,
            "moved": saver.fallback.moved_threads,
        }


async def use_async(url: str, prefix: str, source: str, threads: dict[str, str]) -> dict[str, Any]:
    async with graphkeep.aconnect(url, key_prefix=prefix, fallback=source) as saver:
        asked = await approval_graph(saver).aget_state(config(threads["approval"]))
        fan = (await fan_out_graph(saver).aget_state(config(threads["fan"]))).values
        turn = {"messages": [HumanMessage(content="hi 3", id="h-3")]}
        chat = await chat_graph(saver).ainvoke(turn, config(threads["chat"]))
        resume = Command(resume="yes")
        ended = await approval_graph(saver).ainvoke(resume, config(threads["approval"]))
        return {
            "interrupts": [i.value for i in asked.interrupts],
            "fan": fan,
            "chat": [m.id for m in chat["messages"]],
            "ended": ended,
            "moved": saver.fallback.moved_threads,
        }


def test_a_rival_thread_is_read_through_its_url_goes_on_and_its_interrupt_resumes_alike(
    rival: Rival,  # noqa: F811 - the fixture
    url: str,
    mode: str,
) -> None:
    with rival.saver() as source:
        threads = write_rival_threads(source, rival.tag)
    before = rival.fingerprint()
    prefix = unique_prefix("fbr")
    if mode == "sync":
        seen = use_sync(url, prefix, rival.url, threads)
    else:
        seen = asyncio.run(use_async(url, prefix, rival.url, threads))
    assert rival.fingerprint() == before, "the move changed its source"
    assert seen["moved"] == 3
    assert seen["interrupts"] == [{"question": "approve?", "n": 1}]
    assert seen["fan"] == {"items": ["a", "b"], "results": ["A", "B"]}
    assert seen["chat"] == ["h-1", "ai-1", "h-2", "ai-3", "h-3", "ai-5"]
    assert seen["ended"] == {"n": 1, "log": ["proposed", "answer=yes"]}
    with rival.saver() as source, graphkeep.connect(url, key_prefix=prefix) as here:
        assert_moved_alike(source, here, threads, rival.kind)
        # the same turn and the same answer on the source end alike
        turn = {"messages": [HumanMessage(content="hi 3", id="h-3")]}
        there = chat_graph(source).invoke(turn, config(threads["chat"]))
        assert [m.id for m in there["messages"]] == seen["chat"]
        if rival.kind != "redis":  # RedisSaver may not see its own interrupt (see above)
            resume = Command(resume="yes")
            assert (
                approval_graph(source).invoke(resume, config(threads["approval"]))
                == (seen["ended"])
            )


@pytest.mark.redis
def test_agent_servers_graphkeep_fallback_url_takes_a_rival_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``GRAPHKEEP_FALLBACK_URL=langgraph-plainredis://…``: graphkeep.server's checkpointer
    moves a plainredis thread on first use and resumes its interrupt."""
    from graphkeep.server import checkpointer

    tag = uuid.uuid4().hex[:10]
    made = Rival("plainredis", rival_url("plainredis", tag), tag)
    try:
        with made.saver() as source:
            approval_graph(source).invoke({"n": 0, "log": []}, config("srv"))
        prefix = unique_prefix("fbrs")
        monkeypatch.setenv("GRAPHKEEP_URL", REDIS_URL)
        monkeypatch.setenv("GRAPHKEEP_KEY_PREFIX", prefix)
        monkeypatch.setenv("GRAPHKEEP_FALLBACK_URL", made.url)

        async def body() -> Any:
            async with checkpointer() as saver:
                graph = approval_graph(saver)
                return await graph.ainvoke(Command(resume="ok"), config("srv"))

        assert asyncio.run(body()) == {"n": 1, "log": ["proposed", "answer=ok"]}
    finally:
        made.drop()


@pytest.mark.redis
def test_a_rival_url_without_its_package_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph_checkpoint_plainredis", None)
    source = f"langgraph-plainredis://{REDIS_URL.split('://', 1)[1]}"
    with pytest.raises(ConfigurationError) as raised:
        with graphkeep.connect(REDIS_URL, key_prefix=unique_prefix("fbr"), fallback=source):
            pass
    assert str(raised.value) == (
        "langgraph-plainredis:// URLs need langgraph-checkpoint-plainredis:"
        " pip install 'graphkeep[migrate]' (or langgraph-checkpoint-plainredis)"
    )


@pytest.mark.redis
def test_a_fallback_that_cannot_be_opened_is_one_line_with_the_url_masked(
    tmp_path: Path,
) -> None:
    prefix = unique_prefix("fbr")
    cases = [
        ("postgresql://app:s3cret@127.0.0.1:1/db", StorageUnavailable),
        ("langgraph-redis://:s3cret@127.0.0.1:1/0", StorageUnavailable),
        (f"sqlite:///{tmp_path}/missing.db", ConfigurationError),
        ("langgraph-plainredis://127.0.0.1:1/0?prefx=x", ConfigurationError),
    ]
    for source, error in cases:
        with pytest.raises(error) as raised:
            with graphkeep.connect(REDIS_URL, key_prefix=prefix, fallback=source):
                pass
        text = str(raised.value)
        assert "s3cret" not in text and "\n" not in text, text
    assert not (tmp_path / "missing.db").exists()  # a reader never creates the file
    # a server that goes away after the open (MongoClient connects lazily): the move's read
    away = "langgraph-mongodb://app:s3cret@127.0.0.1:1/db?serverSelectionTimeoutMS=300"
    with graphkeep.connect(REDIS_URL, key_prefix=prefix, fallback=away) as saver:
        with pytest.raises(StorageUnavailable, match="the fallback .* is unavailable") as lost:
            saver.get_tuple(config("t"))
        assert "s3cret" not in str(lost.value) and "\n" not in str(lost.value)
        with saver.lock("t", ttl=5, blocking=False):  # the move let its lease go
            pass
