"""Many runs at once on every backend set-up (issue #5 s2): no leakage, no lost write.

- 50 conversations x 5 turns interleaved on one event loop through the async API;
- 8 OS threads sharing one sync saver, each with its own conversation (parallel branches, so
  put_writes also runs concurrently inside each run);
- 8 OS threads taking turns on ONE conversation under ``saver.lock``: every turn survives.
The lease lock itself is tested in tests/test_lock.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import uuid4

from conformance.factory import AsyncApi
from tests.scenarios.backends import Graph, Store, thread_config
from tests.scenarios.graphs import (
    chat_graph,
    chat_transcript,
    fan_chat_graph,
    fan_chat_transcript,
    reply_to,
    user_line,
)

CONVERSATIONS = 50
TURNS = 5
OS_THREADS = 8
LOCKED_TURNS = 2


def _threads(count: int) -> list[str]:
    run = uuid4().hex[:6]
    return [f"conv-{run}-{i:02d}" for i in range(count)]


def _assert_isolated(graph: Graph, threads: list[str], transcript: Any, per_turn: int) -> None:
    """Each thread holds exactly its own turns, and list(None) sees nothing else."""
    for thread in threads:
        config = thread_config(thread)
        assert graph.state(config).values == {"log": transcript(thread, TURNS)}
        listed = graph.api.list(config)
        assert len(listed) == TURNS * per_turn
        assert {t.config["configurable"]["thread_id"] for t in listed} == {thread}
    everything = Counter(t.config["configurable"]["thread_id"] for t in graph.api.list(None))
    assert everything == dict.fromkeys(threads, TURNS * per_turn)


def test_50_conversations_at_once_through_the_async_api(store: Store) -> None:
    threads = _threads(CONVERSATIONS)
    with store.open("async") as api:
        assert isinstance(api, AsyncApi)
        graph = Graph(api, chat_graph())

        async def converse(thread: str) -> None:
            for turn in range(1, TURNS + 1):
                await graph.compiled.ainvoke(
                    {"log": [user_line(thread, turn)]}, thread_config(thread)
                )

        async def everyone() -> None:
            await asyncio.gather(*(converse(thread) for thread in threads))

        api.run(everyone())
        _assert_isolated(graph, threads, chat_transcript, per_turn=3)


def test_8_os_threads_share_one_sync_saver(store: Store) -> None:
    threads = _threads(OS_THREADS)
    with store.open("sync") as api:
        graph = Graph(api, fan_chat_graph())

        def converse(thread: str) -> None:
            for turn in range(1, TURNS + 1):
                graph.invoke({"log": [user_line(thread, turn)]}, thread_config(thread))

        with ThreadPoolExecutor(OS_THREADS) as pool:
            list(pool.map(converse, threads))
        _assert_isolated(graph, threads, fan_chat_transcript, per_turn=3)


def test_turns_of_one_conversation_from_8_os_threads_under_its_lock_all_survive(
    store: Store, thread_id: str
) -> None:
    config = thread_config(thread_id)
    with store.open("sync") as api:
        graph = Graph(api, chat_graph())
        saver: Any = api.saver

        def take_turns(worker: int) -> None:
            for turn in range(LOCKED_TURNS):
                with saver.lock(thread_id, ttl=30, timeout=60):
                    graph.invoke({"log": [user_line(f"w{worker}", turn)]}, config)

        with ThreadPoolExecutor(OS_THREADS) as pool:
            list(pool.map(take_turns, range(OS_THREADS)))
        log = graph.state(config).values["log"]
        said = [entry for entry in log if entry.startswith("user:")]
        assert sorted(said) == sorted(
            user_line(f"w{w}", turn) for w in range(OS_THREADS) for turn in range(LOCKED_TURNS)
        )
        # strictly alternating: each turn saw every turn before it (no fork, no lost update)
        assert log == [
            entry for i in range(len(said)) for entry in (said[i], reply_to(log[: 2 * i + 1]))
        ]
