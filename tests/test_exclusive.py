"""Single-writer runs (``saver.exclusive``) on every backend set-up, with real processes.

langgraph#8796: two workers that start a run of one thread at once both read its head and
fork it; through ``exclusive`` the second waits and the history stays one chain with both
turns. A worker SIGSTOPped past its lease while another run commits gets ``LeaseLost`` on
its next write, and nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command, interrupt

import graphkeep
from graphkeep.checkpoint.check import findings_of
from graphkeep.errors import LockNotAcquired, ThreadBusy
from graphkeep.port import fence
from graphkeep.testing.isolation import isolated

from .conftest import unique_prefix
from .leases import forks, held_by_another_run
from .scenarios.backends import SETUPS, Store, reachable, thread_config
from .turn_worker import Chat, slow_chat

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=[b.param() for b in SETUPS])
def runs_store(request: Any) -> Iterator[Store]:
    store = Store(reachable(request.param), unique_prefix("excl"))
    yield store
    store.purge()


def _history(saver: Any, thread_id: str) -> list[Any]:
    return list(saver.list(thread_config(thread_id)))


def _check_kinds(saver: Any, thread_id: str) -> list[str]:
    """What ``graphkeep check`` finds on the thread (its kinds)."""
    inventory = saver.drive(saver.port.inventory(thread_id))
    return [f.kind for f in findings_of(thread_id, inventory).findings]


def _seed(saver: Any, thread_id: str) -> None:
    graph = slow_chat(think=0).compile(checkpointer=saver)
    graph.invoke({"log": ["user:seed"]}, thread_config(thread_id))


def _spawn(store: Store, thread_id: str, line: str, marker: Path, *extra: str) -> Any:
    """A worker process, starting up (its turn starts with :func:`_go`)."""
    args = [store.backend.url, store.prefix, thread_id, line, str(marker), *extra]
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.turn_worker", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return worker


def _go(*workers: Any) -> None:
    """Start the workers' turns together, once each is connected and ready."""
    for worker in workers:
        said = worker.stdout.readline().strip()
        assert said == "ready", said + worker.stderr.read()
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()


def _finish(worker: Any) -> tuple[int, str]:
    worker.stdin.close()
    out, err = worker.stdout.read(), worker.stderr.read()
    worker.wait(timeout=120)
    assert worker.returncode in (0, 2, 3), err
    return worker.returncode, out.strip()


def _two_at_once(store: Store, thread_id: str, tmp_path: Path, mode: str) -> list[tuple[int, str]]:
    """A turn of worker process ``w1`` and one of this process (``w2``, its own connection),
    started at once; what each said."""
    worker = _spawn(store, thread_id, "w1", tmp_path / "w1", mode)
    with graphkeep.connect(store.backend.url, key_prefix=store.prefix) as saver:
        graph = slow_chat().compile(checkpointer=saver)
        app = saver.exclusive(graph, timeout=60) if mode == "exclusive" else graph
        _go(worker)
        app.invoke({"log": ["user:w2"]}, thread_config(thread_id))
    return [_finish(worker), (0, "done")]


def test_two_workers_at_once_fork_a_thread_without_exclusive(
    runs_store: Store, thread_id: str, tmp_path: Path
) -> None:
    with graphkeep.connect(runs_store.backend.url, key_prefix=runs_store.prefix) as saver:
        _seed(saver, thread_id)
        assert _two_at_once(runs_store, thread_id, tmp_path, "plain") == [(0, "done")] * 2
        history = _history(saver, thread_id)
        assert forks(history), [(t.checkpoint["id"], t.parent_config) for t in history]
        assert _check_kinds(saver, thread_id) == ["concurrent_fork"]
        # the head holds one worker's reply: the other's is gone from the thread's state
        log = saver.get_tuple(thread_config(thread_id)).checkpoint["channel_values"]["log"]
        assert len([line for line in log if line.startswith("bot:")]) == 2, log


def test_two_workers_at_once_through_exclusive_make_one_chain_with_both_turns(
    runs_store: Store, thread_id: str, tmp_path: Path
) -> None:
    with graphkeep.connect(runs_store.backend.url, key_prefix=runs_store.prefix) as saver:
        _seed(saver, thread_id)
        assert _two_at_once(runs_store, thread_id, tmp_path, "exclusive") == [(0, "done")] * 2
        history = _history(saver, thread_id)
        assert forks(history) == {}
        assert _check_kinds(saver, thread_id) == []
        log = saver.get_tuple(thread_config(thread_id)).checkpoint["channel_values"]["log"]
        assert log[:2] == ["user:seed", "bot:1:user:seed"]
        first, second = ("w1", "w2") if log[2] == "user:w1" else ("w2", "w1")
        assert log[2:] == [
            f"user:{first}",
            f"bot:2:user:{first}",
            f"user:{second}",
            f"bot:3:user:{second}",
        ]


def test_a_worker_stopped_past_its_lease_gets_lease_lost_and_stores_nothing(
    runs_store: Store, thread_id: str, tmp_path: Path
) -> None:
    marker = tmp_path / "thinking"
    with graphkeep.connect(runs_store.backend.url, key_prefix=runs_store.prefix) as saver:
        _seed(saver, thread_id)
        worker = _spawn(runs_store, thread_id, "late", marker, "exclusive", "1.0")
        _go(worker)
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert worker.poll() is None and time.monotonic() < deadline, worker.stderr
                time.sleep(0.02)
            os.kill(worker.pid, signal.SIGSTOP)  # mid-node, its lease (1 s) running out
            time.sleep(1.6)
            other = saver.exclusive(slow_chat(think=0).compile(checkpointer=saver), timeout=5)
            other.invoke({"log": ["user:other"]}, thread_config(thread_id))
            committed = saver.get_tuple(thread_config(thread_id))
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        code, said = _finish(worker)
        assert code == 3 and said.startswith("lease-lost "), said
        token, newer = (int(x) for x in said.split()[1:])
        assert newer > token
        # the other run's turn is the head, whole; nothing the stopped worker wrote late is
        head = saver.get_tuple(thread_config(thread_id))
        assert head.checkpoint["id"] == committed.checkpoint["id"]
        log = head.checkpoint["channel_values"]["log"]
        assert log[-2] == "user:other" and log[-1].endswith(":user:other"), log
        for t in _history(saver, thread_id):
            assert not any(
                line.startswith("bot:") and "late" in line
                for line in t.checkpoint["channel_values"].get("log", [])
            )
            late = [
                w for w in t.pending_writes or [] if "bot:" in str(w[2]) and "late" in str(w[2])
            ]
            assert late == []


def test_200_async_runs_over_10_threads_through_exclusive(runs_store: Store) -> None:
    threads = [f"busy-{i}" for i in range(10)]
    url, drop = runs_store.backend.url, None
    if runs_store.backend.name == "mongodb":  # FerretDB: each collection of a database slows
        url, drop = isolated("mongodb", url, uuid.uuid4().hex[:12])  # every request in it

    async def scenario() -> None:
        async with graphkeep.aconnect(url, key_prefix=runs_store.prefix) as saver:
            # a thread's 20 runs queue: the last waits for 19 turns (minutes on a busy FerretDB)
            graph = saver.exclusive(slow_chat(think=0).compile(checkpointer=saver), timeout=600)
            turns = [(t, n) for n in range(20) for t in threads]
            await asyncio.gather(
                *(graph.ainvoke({"log": [f"user:{t}/{n}"]}, thread_config(t)) for t, n in turns)
            )
            for t in threads:
                history = [x async for x in saver.alist(thread_config(t))]
                assert forks(history) == {}
                sources = Counter(x.metadata["source"] for x in history)
                assert sources == {"input": 20, "loop": 40}
                head = await saver.aget_tuple(thread_config(t))
                log = head.checkpoint["channel_values"]["log"]
                said = [line for line in log if line.startswith("user:")]
                assert sorted(said) == sorted(f"user:{t}/{n}" for n in range(20))
                assert len(log) == 40

    try:
        asyncio.run(scenario())
    finally:
        if drop is not None:
            drop()


def test_a_busy_thread_waits_then_raises_thread_busy_or_rejects_at_once(
    runs_store: Store, thread_id: str
) -> None:
    with graphkeep.connect(runs_store.backend.url, key_prefix=runs_store.prefix) as saver:
        graph = slow_chat(think=0).compile(checkpointer=saver)
        with held_by_another_run(saver, thread_id):
            started = time.monotonic()
            with pytest.raises(ThreadBusy):
                saver.exclusive(graph, on_busy="reject").invoke(
                    {"log": ["user:x"]}, thread_config(thread_id)
                )
            assert time.monotonic() - started < 0.5
            started = time.monotonic()
            with pytest.raises(ThreadBusy):
                saver.exclusive(graph, timeout=0.6).invoke(
                    {"log": ["user:x"]}, thread_config(thread_id)
                )
            assert time.monotonic() - started >= 0.6
        assert saver.get_tuple(thread_config(thread_id)) is None
        # free again: a waiting run goes ahead
        saver.exclusive(graph, on_busy="reject").invoke(
            {"log": ["user:y"]}, thread_config(thread_id)
        )


def _asking() -> Any:
    from langgraph.graph import END, START, StateGraph

    def ask(state: Chat) -> dict[str, list[str]]:
        if "boom" in state["log"][-1]:
            raise RuntimeError("the node failed")
        answer = interrupt("name?")
        return {"log": [f"bot:hello {answer}"]}

    builder = StateGraph(Chat)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


def test_the_lease_is_let_go_on_return_error_interrupt_and_cancellation(
    runs_store: Store, thread_id: str
) -> None:
    url, prefix = runs_store.backend.url, runs_store.prefix
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        app = saver.exclusive(_asking().compile(checkpointer=saver), on_busy="reject")
        config = thread_config(thread_id)
        with pytest.raises(RuntimeError):
            app.invoke({"log": ["user:boom"]}, config)
        out = app.invoke({"log": ["user:hi"]}, config)  # not busy: the error let it go
        assert "__interrupt__" in out
        out = app.invoke(Command(resume="ada"), config)  # nor the interrupt
        assert out["log"][-1] == "bot:hello ada"
        chunks = list(app.stream({"log": ["user:again"]}, config))
        assert chunks and "__interrupt__" in chunks[-1]
        assert app.get_state(config).next == ("ask",)
        app.update_state(config, {"log": ["user:edited"]})

    async def cancelled() -> None:
        async with graphkeep.aconnect(url, key_prefix=prefix) as asaver:
            slow = asaver.exclusive(
                slow_chat(think=5).compile(checkpointer=asaver), on_busy="reject"
            )
            run = asyncio.create_task(
                slow.ainvoke({"log": ["user:slow"]}, thread_config("c-" + thread_id))
            )
            await asyncio.sleep(1.0)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            quick = asaver.exclusive(
                slow_chat(think=0).compile(checkpointer=asaver), on_busy="reject"
            )
            await quick.ainvoke({"log": ["user:next"]}, thread_config("c-" + thread_id))

    asyncio.run(cancelled())


def test_an_async_run_through_exclusive_leaves_no_token_on_its_callers_later_writes(
    runs_store: Store, thread_id: str
) -> None:
    async def scenario() -> None:
        url, prefix = runs_store.backend.url, runs_store.prefix
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            graph = slow_chat(think=0).compile(checkpointer=saver)
            app = saver.exclusive(graph)
            config = thread_config(thread_id)
            await app.ainvoke({"log": ["user:a"]}, config)
            async for _event in app.astream_events({"log": ["user:b"]}, config, version="v2"):
                pass

            async def another_holder() -> None:  # a newer lease, taken in its own context
                async with saver.lock(thread_id):
                    pass

            await asyncio.create_task(another_holder())
            # a plain write of the caller's, outside any lease: not checked, so stored
            await graph.aupdate_state(config, {"log": ["user:edited"]})
            state = await graph.aget_state(config)
            assert state.values["log"][-1] == "user:edited"

    asyncio.run(scenario())


def test_a_run_longer_than_its_lease_keeps_it_renewed(runs_store: Store, thread_id: str) -> None:
    """A run three times its lease's ``ttl`` long, sync and async: another holder is
    refused the thread all along, and the run's writes are stored (no ``LeaseLost``). (A ttl of
    two seconds: renewed every third of it, a renewal may take up to two thirds — a loaded
    FerretDB took longer than the 0.27 s a 0.4 s ttl left it, a loaded moto longer than the
    0.67 s of a 1 s ttl.) Proof of the renewal, whatever the load: a refusal asked more than
    ``ttl`` (+ 0.25 s for the servers' expiry resolution) after the first one ended — the lease
    was granted before the first refusal, so unrenewed it would be gone by then — not a count
    of tries, which a loaded server answers slowly (CI: 5 refusals in the run's 3 s), nor a
    wider margin, which a loaded moto's slow first refusal ate (CI: 2.61 s against 3.0)."""
    ttl, think = 2.0, 6.0
    renewed = ttl + 0.25
    url, prefix = runs_store.backend.url, runs_store.prefix

    def others_refused(saver: Any, thread: str, done: Any) -> float:
        """How long after the first refusal ended a later one was asked (seconds)."""
        first_ended: float | None = None
        spread = 0.0
        while not done():
            lock = saver.lock(thread, ttl=5, blocking=False)  # its own context: not the run's
            asked = time.monotonic()
            try:
                lock.acquire()
            except LockNotAcquired:
                if first_ended is None:
                    first_ended = time.monotonic()
                else:
                    spread = max(spread, asked - first_ended)
                time.sleep(0.1)
                continue
            # Granted: only as the run let its lease go, between its last write and its end
            # showing (``done()`` turns after the release). A lease lost before that would have
            # the run's next write refused (``LeaseLost``, the result asserted below) or the
            # run still thinking: either way it is not over at once.
            lock.release()
            deadline = time.monotonic() + 2.0
            while not done():
                assert time.monotonic() < deadline, "another holder got the lease mid-run"
                time.sleep(0.01)
        return spread

    with graphkeep.connect(url, key_prefix=prefix) as saver:
        app = saver.exclusive(slow_chat(think=think).compile(checkpointer=saver), ttl=ttl)
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(app.invoke, {"log": ["user:long"]}, thread_config(thread_id))
            time.sleep(ttl / 2)
            assert others_refused(saver, thread_id, run.done) > renewed
            assert run.result()["log"] == ["user:long", "bot:1:user:long"]

    async def scenario() -> None:
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            graph = slow_chat(think=think).compile(checkpointer=saver)
            app = saver.exclusive(graph, ttl=ttl)
            run = asyncio.create_task(app.ainvoke({"log": ["user:again"]}, config))
            await asyncio.sleep(ttl / 2)
            with graphkeep.connect(url, key_prefix=prefix) as other:
                spread = await asyncio.to_thread(others_refused, other, thread_id, run.done)
            assert spread > renewed
            assert (await run)["log"][-1] == "bot:2:user:again"

    config = thread_config(thread_id)
    asyncio.run(scenario())


def test_an_async_run_ending_as_its_lease_is_renewed_ends(runs_store: Store) -> None:
    """An async run whose end lands while its renewer sends a renewal ends, and lets its lease
    go. (Python < 3.12's ``asyncio.wait_for``, which redis-py writes every command through,
    drops a cancellation that lands just as the write completes: the renewer renewed on and
    the run's end waited for it forever — run E's hang of the renewal test above, Redis,
    async. Without the fix 17 of 100 such ends hung on Redis.) Each run ends a little later
    after its first renewal began (0 to 1 ms, 20 us apart), on a thread of its own."""
    ttl, runs, step, bound = 0.06, 50, 20e-6, 15.0
    url, prefix = runs_store.backend.url, runs_store.prefix

    async def scenario() -> list[int]:
        hung: list[int] = []
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            app = saver.exclusive(slow_chat(think=0).compile(checkpointer=saver), ttl=ttl)
            for i in range(runs):
                thread = f"end-{i}-{uuid.uuid4().hex[:6]}"

                async def run(config: Any, late: float) -> None:
                    async with app.aheld(config):
                        began = time.monotonic()  # the renewer's first sleep starts now too
                        await asyncio.sleep(ttl / 3 - 0.003)
                        while time.monotonic() < began + ttl / 3 + late:
                            await asyncio.sleep(0)  # end at that moment, to the loop's step

                task = asyncio.create_task(run(thread_config(thread), i * step))
                if not (await asyncio.wait([task], timeout=bound))[0]:
                    hung.append(i)
                    while not task.done():  # free the loop for the client's close
                        task.cancel()
                        await asyncio.wait([task], timeout=0.1)
                    break
                await task
                async with saver.lock(thread, blocking=False):
                    pass  # let go: free at once
        return hung

    assert asyncio.run(scenario()) == [], f"a run's end waited on its renewer for {bound} s"


def test_a_lease_awaiting_its_first_read_is_taken_by_a_write_that_comes_first(
    runs_store: Store, thread_id: str
) -> None:
    """A run through ``exclusive`` takes its lease with its first read of the thread (one
    request where the store folds them: Redis); one that writes first takes it then, and the
    write carries its fencing token."""
    url, prefix = runs_store.backend.url, runs_store.prefix
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        graph = slow_chat(think=0).compile(checkpointer=saver)
        app, config = saver.exclusive(graph), thread_config(thread_id)
        with app.held(config, with_first_read=True):
            with saver.lock(thread_id, blocking=False):  # not taken yet: free
                pass
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
            with pytest.raises(LockNotAcquired):  # the write took it
                saver.lock(thread_id, blocking=False).acquire()
            assert fence.fence_of(thread_id) is not None
        with app.held(config, with_first_read=True):
            assert saver.get_tuple(config) is not None  # the read took it
            with pytest.raises(LockNotAcquired):
                saver.lock(thread_id, blocking=False).acquire()
        assert fence.fence_of(thread_id) is None
        with saver.lock(thread_id, blocking=False):  # let go after each
            pass
