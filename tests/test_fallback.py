"""The live switch (``graphkeep.connect(url, fallback=SOURCE)``) on real servers: each thread
moved from the saver an app used before on its first use, under its lease, verified, then
served from graphkeep; deleted threads never come back; ``list(None)`` sees both sides; two
workers racing the first move make one copy; and 50 threads under traffic while the move and
``graphkeep copy --all`` run beside, every graphkeep backend, sync and async.

Sources: LangGraph's own MongoDBSaver on the MongoDB server (a rival: integer channel
versions, translated on the way in; tests/copy_savers.py) as an instance, and LangGraph's
SqliteSaver by ``sqlite://`` URL.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from pymongo import MongoClient

import graphkeep
from graphkeep.errors import ConfigurationError

from .cli_runs import gk
from .conftest import MONGODB_URI, postgres_saver, unique_prefix
from .copy_savers import chat_builder, mongodb_saver
from .test_cli import BACKEND_PARAMS

pytestmark = pytest.mark.mongodb

MODES = ["sync", "async"]
#: the live switch's size: the issue's 50 threads, a turn each before the switch
THREADS = 50
WORKERS = 6
TURNS_PER_THREAD = 1
#: the figures of each live-switch run (printed with -s; the report quotes them)
FIGURES: list[str] = []


def config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text, id=f"h-{text}")]}


def history(graph: Any, thread_id: str) -> list[Any]:
    return [
        (s.values, s.next, [i.value for t in s.tasks for i in t.interrupts], s.metadata)
        for s in graph.get_state_history(config(thread_id))
    ]


async def ahistory(graph: Any, thread_id: str) -> list[Any]:
    return [
        (s.values, s.next, [i.value for t in s.tasks for i in t.interrupts], s.metadata)
        async for s in graph.aget_state_history(config(thread_id))
    ]


@pytest.fixture(params=BACKEND_PARAMS)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def source_documents(mongo_url: str) -> dict[str, list[Any]]:
    """Every document of the MongoDBSaver's database (to prove the move never writes it)."""
    server, _, name = mongo_url.rpartition("/")
    client: MongoClient[Any] = MongoClient(server)
    try:
        db = client[name]
        return {c: sorted(map(repr, db[c].find())) for c in sorted(db.list_collection_names())}
    finally:
        client.close()


@contextmanager
def connected(url: str, prefix: str, fallback: Any) -> Iterator[Any]:
    with graphkeep.connect(url, key_prefix=prefix, fallback=fallback) as saver:
        yield saver


def run(mode: str, sync_body: Any, async_body: Any) -> Any:
    return sync_body() if mode == "sync" else asyncio.run(async_body())


def write_source(graph: Any) -> dict[str, list[Any]]:
    """A two-turn chat, an interrupted approval, and a third thread: their histories."""
    graph.invoke(ask("hello"), config("chat"))
    graph.invoke(ask("and again"), config("chat"))
    graph.invoke(ask("first"), config("approve"))
    graph.invoke(ask("please approve the budget"), config("approve"))
    graph.invoke(ask("other"), config("other"))
    return {t: history(graph, t) for t in ("chat", "approve", "other")}


def test_first_read_moves_the_thread_and_the_interrupt_resumes_alike(
    url: str, mode: str, mongo_url: str
) -> None:
    prefix = unique_prefix("fb")
    with mongodb_saver(mongo_url) as old:
        on_old = chat_builder().compile(checkpointer=old)
        before = write_source(on_old)
        documents = source_documents(mongo_url)

        def sync_body() -> tuple[Any, Any, int]:
            with connected(url, prefix, old) as saver:
                graph = chat_builder().compile(checkpointer=saver)
                seen = {t: history(graph, t) for t in ("chat", "approve")}
                ended = graph.invoke(Command(resume="yes"), config("approve"))
                return seen, ended, saver.fallback.moved_checkpoints

        async def async_body() -> tuple[Any, Any, int]:
            async with graphkeep.aconnect(url, key_prefix=prefix, fallback=old) as saver:
                graph = chat_builder().compile(checkpointer=saver)
                seen = {t: await ahistory(graph, t) for t in ("chat", "approve")}
                ended = await graph.ainvoke(Command(resume="yes"), config("approve"))
                return seen, ended, saver.fallback.moved_checkpoints

        seen, ended, moved = run(mode, sync_body, async_body)
        assert seen == {t: before[t] for t in ("chat", "approve")}
        assert moved == len(before["chat"]) + len(before["approve"])  # "other" never read
        assert source_documents(mongo_url) == documents  # the fallback is only read
        assert ended == on_old.invoke(Command(resume="yes"), config("approve"))
        assert ended["approved"] == "yes after 4 message(s)"
        # the moved thread is served from graphkeep: continued there, not on the fallback
        with connected(url, prefix, None) as plain:
            graph = chat_builder().compile(checkpointer=plain)
            assert len(history(graph, "approve")) == len(before["approve"]) + 1
            assert plain.get_tuple(config("other")) is None  # never used: not moved


def test_a_deleted_thread_never_comes_back(url: str, mode: str, mongo_url: str) -> None:
    prefix = unique_prefix("fb")
    with mongodb_saver(mongo_url) as old:
        write_source(chat_builder().compile(checkpointer=old))

        def sync_body() -> None:
            with connected(url, prefix, old) as saver:
                assert saver.get_tuple(config("chat")) is not None  # moved
                saver.delete_thread("chat")  # a moved thread
                saver.delete_thread("approve")  # one never moved
                saver.prune(["other"], strategy="delete")
                assert saver.get_tuple(config("chat")) is None

        async def async_body() -> None:
            async with graphkeep.aconnect(url, key_prefix=prefix, fallback=old) as saver:
                assert await saver.aget_tuple(config("chat")) is not None
                await saver.adelete_thread("chat")
                await saver.adelete_thread("approve")
                await saver.aprune(["other"], strategy="delete")
                assert await saver.aget_tuple(config("chat")) is None

        run(mode, sync_body, async_body)
        host = MONGODB_URI.split("://", 1)[1].rstrip("/")
        copied = gk(
            "copy",
            f"langgraph-mongodb://{host}/{mongo_url.rpartition('/')[2]}",
            url,
            "--all",
            "--dst-key-prefix",
            prefix,
            "--json",
        )
        assert copied.code == 0, copied
        assert copied.out.count('"settled": true') == 3  # copy --all skips them too
        with connected(url, prefix, old) as again:  # a new process: nothing remembered
            for thread_id in ("chat", "approve", "other"):
                assert again.get_tuple(config(thread_id)) is None
                assert list(again.list(config(thread_id))) == []
            assert list(again.list(None)) == []


def test_list_none_shows_each_thread_once_from_whichever_side_holds_it(
    url: str, mode: str, mongo_url: str
) -> None:
    prefix = unique_prefix("fb")
    with mongodb_saver(mongo_url) as old:
        before = write_source(chat_builder().compile(checkpointer=old))

        def listed(items: list[Any]) -> dict[str, list[str]]:
            found: dict[str, list[str]] = {}
            for t in items:
                conf = t.config["configurable"]
                found.setdefault(conf["thread_id"], []).append(conf["checkpoint_id"])
            return found

        def sync_body() -> dict[str, list[str]]:
            with connected(url, prefix, old) as saver:
                saver.get_tuple(config("chat"))  # moved; the others only in the fallback
                return listed(list(saver.list(None)))

        async def async_body() -> dict[str, list[str]]:
            async with graphkeep.aconnect(url, key_prefix=prefix, fallback=old) as saver:
                await saver.aget_tuple(config("chat"))
                return listed([t async for t in saver.alist(None)])

        found = run(mode, sync_body, async_body)
        assert sorted(found) == ["approve", "chat", "other"]
        for thread_id, ids in found.items():
            assert len(ids) == len(set(ids)) == len(before[thread_id]), thread_id


def test_two_workers_racing_the_first_move_make_one_copy(
    url: str, mode: str, mongo_url: str
) -> None:
    prefix = unique_prefix("fb")
    threads = ["chat", "approve", "other"]
    with mongodb_saver(mongo_url) as old:
        before = write_source(chat_builder().compile(checkpointer=old))

        def sync_body() -> list[int]:
            with connected(url, prefix, old) as one, connected(url, prefix, old) as two:
                barrier = threading.Barrier(2)

                def worker(saver: Any) -> None:
                    barrier.wait()
                    for thread_id in threads:
                        assert saver.get_tuple(config(thread_id)) is not None

                workers = [threading.Thread(target=worker, args=(s,)) for s in (one, two)]
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()
                return [one.fallback.moved_checkpoints, two.fallback.moved_checkpoints]

        async def async_body() -> list[int]:
            async with AsyncExitStack() as stack:
                savers = [
                    await stack.enter_async_context(
                        graphkeep.aconnect(url, key_prefix=prefix, fallback=old)
                    )
                    for _ in range(2)
                ]

                async def worker(saver: Any) -> None:
                    for thread_id in threads:
                        assert await saver.aget_tuple(config(thread_id)) is not None

                await asyncio.gather(*(worker(s) for s in savers))
                return [s.fallback.moved_checkpoints for s in savers]

        moved = run(mode, sync_body, async_body)
        # every checkpoint written once, by one worker or the other: no twin, no fork
        assert sum(moved) == sum(len(h) for h in before.values())
        with connected(url, prefix, None) as plain:
            graph = chat_builder().compile(checkpointer=plain)
            for thread_id in threads:
                assert history(graph, thread_id) == before[thread_id]
        assert gk("check", url, "--key-prefix", prefix, "--all").code == 0


def test_a_write_before_any_read_moves_the_thread_first(url: str, mongo_url: str) -> None:
    prefix = unique_prefix("fb")
    with mongodb_saver(mongo_url) as old:
        before = write_source(chat_builder().compile(checkpointer=old))
        head = old.get_tuple(config("other"))
        assert head is not None
        with connected(url, prefix, old) as saver:
            # a newer id, as LangGraph makes them (time-ordered; a uuid4 may sort first)
            body = {**head.checkpoint, "id": str(uuid6())}
            body["channel_versions"] = {}
            saver.put(head.config, body, {"source": "update", "step": 9}, {})
        with connected(url, prefix, None) as plain:
            ids = [t.config["configurable"]["checkpoint_id"] for t in plain.list(config("other"))]
            assert len(ids) == len(before["other"]) + 1  # one chain: the history came first
            assert ids[0] == body["id"]


def test_fallback_naming_the_same_store_is_refused(url: str) -> None:
    prefix = unique_prefix("fb")
    with pytest.raises(ConfigurationError, match="fallback= names the store"):
        with graphkeep.connect(url, fallback=url):  # refused before connecting: nothing set up
            pass
    with graphkeep.connect(url, key_prefix=prefix) as same:
        with pytest.raises(ConfigurationError, match="fallback= names the store"):
            with graphkeep.connect(url, key_prefix=prefix, fallback=same):
                pass
    with pytest.raises(ConfigurationError, match="fallback= takes a URL or a BaseCheckpointSaver"):
        with graphkeep.connect(url, key_prefix=prefix, fallback=42):
            pass


# -- the live switch under traffic ------------------------------------------------------


def sqlite_source(path: Path) -> dict[str, int]:
    """50 threads, one turn each, through LangGraph's SqliteSaver: checkpoints per thread."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        graph = chat_builder().compile(checkpointer=saver)
        counts = {}
        for n in range(THREADS):
            thread_id = f"t{n:02d}"
            graph.invoke(ask(f"start {thread_id}"), config(thread_id))
            counts[thread_id] = len(list(saver.list(config(thread_id))))
        return counts
    finally:
        conn.close()


def test_live_switch_under_traffic(url: str, mode: str, tmp_path: Path) -> None:
    prefix = unique_prefix("fbl")
    path = tmp_path / "old.db"
    counts = sqlite_source(path)
    source = f"sqlite:///{path}"
    # the workers take the threads from t49 down while copy --all goes from t00 up: they meet
    # (and race on the same threads) in the middle; further rounds in a random order
    again = [f"t{n:02d}" for n in range(THREADS)]
    random.Random(7).shuffle(again)
    turns = again * (TURNS_PER_THREAD - 1) + [f"t{n:02d}" for n in range(THREADS)]
    started = time.monotonic()

    def copy_all() -> Any:
        return gk("copy", source, url, "--all", "--dst-key-prefix", prefix, "--json")

    def sync_body() -> tuple[Any, int]:
        with connected(url, prefix, source) as saver:
            graph = chat_builder().compile(checkpointer=saver)
            queue = list(turns)
            lock = threading.Lock()
            errors: list[BaseException] = []

            def worker() -> None:
                while True:
                    with lock:
                        if not queue:
                            return
                        thread_id = queue.pop()
                    try:
                        with saver.lock(thread_id, ttl=60):
                            graph.invoke(ask(f"turn {uuid.uuid4().hex[:6]}"), config(thread_id))
                    except BaseException as exc:  # reported below
                        errors.append(exc)

            copier: list[Any] = []
            beside = threading.Thread(target=lambda: copier.append(copy_all()))
            beside.start()
            pool = [threading.Thread(target=worker) for _ in range(WORKERS)]
            for w in pool:
                w.start()
            for w in pool:
                w.join()
            beside.join()
            assert not errors, errors[:3]
            return copier[0], saver.fallback.moved_threads

    async def async_body() -> tuple[Any, int]:
        async with graphkeep.aconnect(url, key_prefix=prefix, fallback=source) as saver:
            graph = chat_builder().compile(checkpointer=saver)
            queue = list(turns)

            async def worker() -> None:
                while queue:
                    thread_id = queue.pop()
                    async with saver.lock(thread_id, ttl=60):
                        await graph.ainvoke(ask(f"turn {uuid.uuid4().hex[:6]}"), config(thread_id))

            copied, *_ = await asyncio.gather(
                asyncio.to_thread(copy_all), *(worker() for _ in range(WORKERS))
            )
            return copied, saver.fallback.moved_threads

    copied, moved_by_app = run(mode, sync_body, async_body)
    seconds = time.monotonic() - started
    assert copied.code == 0, copied
    moved_by_copy = copied.out.count('"verified": true')
    skipped = copied.out.count('"settled": true')
    # each thread copied once: by its first use or by copy --all, never both
    assert moved_by_app + moved_by_copy == THREADS
    assert skipped == THREADS - moved_by_copy
    with ExitStack() as stack:
        plain = stack.enter_context(connected(url, prefix, None))
        graph = chat_builder().compile(checkpointer=plain)
        checkpoints = 0
        for thread_id, before in counts.items():
            tuples = list(plain.list(config(thread_id)))
            ids = [t.config["configurable"]["checkpoint_id"] for t in tuples]
            assert len(ids) == len(set(ids)), thread_id  # no checkpoint twice
            parents = [
                (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
                for t in tuples
                if t.config["configurable"].get("checkpoint_ns", "") == ""
            ]
            forks = {p for p in parents if p is not None and parents.count(p) > 1}
            assert not forks, (thread_id, forks)  # one chain
            state = graph.get_state(config(thread_id))
            humans = [m for m in state.values["messages"] if m.type == "human"]
            assert len(humans) == 1 + TURNS_PER_THREAD, thread_id  # no turn lost
            assert len(ids) > before
            checkpoints += len(ids)
        assert plain.fallback is None
    checked = gk("check", url, "--key-prefix", prefix, "--all")
    assert checked.code == 0, checked
    health = gk("health", url, "--key-prefix", prefix, "--fallback", source, "--json")
    assert health.code == 0, health
    assert '"unmoved": 0' in health.out
    FIGURES.append(
        f"{url.split('://')[0]} {mode}: {THREADS} threads, {len(turns)} turns by {WORKERS}"
        f" workers, copied by first use {moved_by_app}, by copy --all {moved_by_copy}"
        f" (skipped as moved {skipped}), {checkpoints} checkpoints, {seconds:.1f}s; check clean"
    )
    print(FIGURES[-1])


def test_health_counts_the_threads_still_only_in_the_fallback(url: str, tmp_path: Path) -> None:
    prefix = unique_prefix("fbh")
    path = tmp_path / "old.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        graph = chat_builder().compile(checkpointer=SqliteSaver(conn))
        for thread_id in ("a", "b", "c"):
            graph.invoke(ask(f"hi {thread_id}"), config(thread_id))
    finally:
        conn.close()
    source = f"sqlite:///{path}"
    with connected(url, prefix, source) as saver:
        saver.get_tuple(config("a"))
        saver.delete_thread("b")
    health = gk("health", url, "--key-prefix", prefix, "--fallback", source)
    assert health.code == 0, health
    assert "fallback: 1 of 3 thread(s)" in health.out and "unmoved: c" in health.out


def test_agent_servers_checkpointer_reads_through_graphkeep_fallback_url(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GRAPHKEEP_FALLBACK_URL``: graphkeep.server's checkpointer moves a thread on first use."""
    from graphkeep.server import checkpointer

    path = tmp_path / "old.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        graph = chat_builder().compile(checkpointer=SqliteSaver(conn))
        graph.invoke(ask("hello"), config("t"))
        before = history(graph, "t")
    finally:
        conn.close()
    prefix = unique_prefix("fbs")
    monkeypatch.setenv("GRAPHKEEP_URL", url)
    monkeypatch.setenv("GRAPHKEEP_KEY_PREFIX", prefix)
    monkeypatch.setenv("GRAPHKEEP_FALLBACK_URL", f"sqlite:///{path}")

    async def body() -> list[Any]:
        async with checkpointer() as saver:
            return await ahistory(chat_builder().compile(checkpointer=saver), "t")

    assert asyncio.run(body()) == before
    with connected(url, prefix, None) as plain:
        assert len(list(plain.list(config("t")))) == len(before)


def test_an_exclusive_runs_first_read_moves_the_thread_under_the_runs_lease(
    url: str, mode: str, mongo_url: str
) -> None:
    """``saver.exclusive(graph)``: the move runs under the lease the run takes with its first
    read (no second lease, no wait on itself), and the run goes on under it."""
    prefix = unique_prefix("fbx")
    with mongodb_saver(mongo_url) as old:
        before = write_source(chat_builder().compile(checkpointer=old))

        def sync_body() -> Any:
            with connected(url, prefix, old) as saver:
                graph = saver.exclusive(chat_builder().compile(checkpointer=saver), timeout=20)
                return graph.invoke(Command(resume="ok"), config("approve"))

        async def async_body() -> Any:
            async with graphkeep.aconnect(url, key_prefix=prefix, fallback=old) as saver:
                graph = saver.exclusive(chat_builder().compile(checkpointer=saver), timeout=20)
                return await graph.ainvoke(Command(resume="ok"), config("approve"))

        ended = run(mode, sync_body, async_body)
        assert ended["approved"] == "ok after 4 message(s)"
        with connected(url, prefix, None) as plain:
            assert len(list(plain.list(config("approve")))) == len(before["approve"]) + 1


def test_a_postgresql_url_fallback_moves_the_thread(url: str, postgres_url: str) -> None:
    """``fallback="postgresql://…"``: LangGraph's PostgresSaver, opened by graphkeep, read only."""
    with postgres_saver(postgres_url) as old:
        old.setup()
        graph = chat_builder().compile(checkpointer=old)
        graph.invoke(ask("hello"), config("pg"))
        graph.invoke(ask("please approve it"), config("pg"))
        before = history(graph, "pg")
    prefix = unique_prefix("fbp")
    with connected(url, prefix, postgres_url) as saver:
        assert history(chat_builder().compile(checkpointer=saver), "pg") == before
        assert saver.fallback.moved_checkpoints == len(before)
