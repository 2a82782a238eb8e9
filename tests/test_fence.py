"""Fenced leases on every backend set-up: a holder that stalled past its lease while another
run took the thread over writes nothing more (``LeaseLost``), and tokens only grow.

The stall here is a sleep in one process (the same store requests as a paused one); the
SIGSTOPped process and the runs of two processes are in tests/test_exclusive.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph

import graphkeep
from graphkeep.checkpoint import maintenance
from graphkeep.effects.port import STARTED, EffectRecord
from graphkeep.errors import LeaseLost, ThreadBusy
from graphkeep.port import fence

from .conftest import unique_prefix
from .leases import held_by_another_run
from .scenarios.backends import SETUPS, Store, reachable

LEASE = 0.4


@pytest.fixture(params=[b.param() for b in SETUPS])
def fence_store(request: Any) -> Iterator[Store]:
    store = Store(reachable(request.param), unique_prefix("fence"))
    yield store
    store.purge()


def _config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _put(saver: Any, thread_id: str, step: int, parent: str | None = None) -> str:
    checkpoint = _checkpoint(step)
    metadata = {"source": "loop", "step": step, "run_id": f"run-{step}"}
    saver.put(_config(thread_id, parent), checkpoint, metadata, checkpoint["channel_versions"])
    return str(checkpoint["id"])


def _stored(saver: Any, thread_id: str) -> list[str]:
    return [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": thread_id}})]


def test_a_superseded_holder_writes_nothing_more(fence_store: Store, thread_id: str) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        old = saver.lock(thread_id, ttl=LEASE)
        old.acquire()
        first = _put(saver, thread_id, 0)  # under the live lease: stored
        time.sleep(LEASE + 0.3)  # the holder stalls past its lease
        fence.drop(thread_id)  # another worker (its own context) takes the thread over
        with saver.lock(thread_id, ttl=10) as new:
            assert new.fence is not None and old.fence is not None
            assert new.fence > old.fence
            second = _put(saver, thread_id, 1, first)
        before = sorted(_stored(saver, thread_id))
        fence.hold(thread_id, old.fence)  # the stalled holder wakes up and writes on
        refused = [
            lambda: _put(saver, thread_id, 2, second),
            lambda: saver.put_writes(_config(thread_id, second), [("turn", 9)], "task-late"),
            lambda: saver.delete_thread(thread_id),
            lambda: saver.prune([thread_id], strategy="keep_latest"),
            lambda: saver.delete_for_runs(["run-0"]),
            lambda: saver.prune([thread_id], strategy="delete"),
        ]
        for write in refused:
            with pytest.raises(LeaseLost) as lost:
                write()
            assert lost.value.thread_id == thread_id
            assert lost.value.token == old.fence and lost.value.newer == new.fence
        assert old.release() is False  # the lease is not the stalled holder's any more
        assert sorted(_stored(saver, thread_id)) == before == sorted([first, second])
        got = saver.get_tuple(_config(thread_id, second))
        assert got is not None and got.pending_writes == []
        assert got.checkpoint["channel_values"] == {"turn": 1}


def test_copy_thread_onto_a_thread_taken_over_is_refused(fence_store: Store) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix
    source, target = "fence-src", "fence-dst"
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        _put(saver, source, 0)
        stalled = saver.lock(target, ttl=LEASE)
        stalled.acquire()
        time.sleep(LEASE + 0.3)
        fence.drop(target)
        with saver.lock(target, ttl=10):
            pass
        fence.hold(target, stalled.fence or 0)
        with pytest.raises(LeaseLost):
            saver.copy_thread(source, target)
        fence.drop(target)
        assert _stored(saver, target) == []


def test_fencing_tokens_only_grow_per_thread(fence_store: Store, thread_id: str) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        tokens = []
        for _ in range(3):
            with saver.lock(thread_id, ttl=5) as held:
                tokens.append(held.fence)
                _put(saver, thread_id, len(tokens))
        saver.delete_thread(thread_id)  # the thread's data goes, its fencing token stays
        with saver.lock(thread_id, ttl=5) as held:
            tokens.append(held.fence)
        assert tokens == sorted(set(tokens)) and len(tokens) == 4
        # outside any lease a write carries no token and is not checked
        _put(saver, thread_id, 9)
        assert len(_stored(saver, thread_id)) == 1


def test_an_async_holder_superseded_writes_nothing_more(fence_store: Store, thread_id: str) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix

    async def scenario() -> None:
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            old = saver.lock(thread_id, ttl=LEASE)

            async def stalled_holder(taken: asyncio.Event, done: asyncio.Event) -> None:
                async with old:  # the context's writes carry its token
                    await _aput(saver, thread_id, 0)
                    taken.set()
                    await done.wait()
                    with pytest.raises(LeaseLost) as lost:
                        await _aput(saver, thread_id, 5)
                    assert lost.value.token == old.fence

            async def other_run(taken: asyncio.Event, done: asyncio.Event) -> None:
                await taken.wait()
                await asyncio.sleep(LEASE + 0.3)
                async with saver.lock(thread_id, ttl=10):  # its own task: its own context
                    await _aput(saver, thread_id, 1)
                done.set()

            taken, done = asyncio.Event(), asyncio.Event()
            await asyncio.gather(stalled_holder(taken, done), other_run(taken, done))
            steps = [t.metadata["step"] async for t in saver.alist(_config(thread_id))]
            assert steps == [1, 0]

    asyncio.run(scenario())


def _checkpoint(turn: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"turn": turn}
    checkpoint["channel_versions"] = {"turn": f"{turn + 2:032}"}
    return checkpoint


async def _aput(saver: Any, thread_id: str, step: int) -> None:
    checkpoint = _checkpoint(step)
    versions = checkpoint["channel_versions"]
    await saver.aput(_config(thread_id), checkpoint, {"step": step}, versions)


def test_prune_and_delete_for_runs_wait_for_a_thread_another_run_holds_then_refuse(
    fence_store: Store, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix
    monkeypatch.setattr(maintenance, "MAINTENANCE_WAIT_SECONDS", 0.5)
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        first = _put(saver, thread_id, 0)
        _put(saver, thread_id, 1, first)
        with held_by_another_run(saver, thread_id):
            for maintain in (
                lambda: saver.prune([thread_id], strategy="keep_latest"),
                lambda: saver.prune(["another-thread", thread_id], strategy="delete"),
                lambda: saver.delete_for_runs(["run-0"]),
            ):
                started = time.monotonic()
                with pytest.raises(ThreadBusy):
                    maintain()
                assert time.monotonic() - started >= 0.5
                assert len(_stored(saver, thread_id)) == 2
        # the caller's own lease: prune goes ahead under it (its deletes carry its token)
        with saver.lock(thread_id, ttl=10):
            saver.prune([thread_id], strategy="keep_latest")
        assert len(_stored(saver, thread_id)) == 1
        # a lease let go while the call waits: it goes ahead (two deletes of one run at once)
        monkeypatch.setattr(maintenance, "MAINTENANCE_WAIT_SECONDS", 10.0)
        with held_by_another_run(saver, thread_id, release_after=0.4):
            saver.delete_for_runs(["run-1"])
        assert _stored(saver, thread_id) == []
        with saver.lock(thread_id, ttl=1, blocking=False):  # and let it go after
            pass


class Turn(TypedDict):
    to: str
    receipt: str


def _mail_graph(saver: Any, sent: list[str], *, asynchronous: bool = False) -> Any:
    """One node that sends a mail through the saver's effect ledger (sync and async)."""

    @saver.effects.once
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    @saver.effects.once
    async def asend(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    def mail(state: Turn) -> dict[str, Any]:
        return {"receipt": send(state["to"])}

    async def amail(state: Turn) -> dict[str, Any]:
        return {"receipt": await asend(state["to"])}

    builder = StateGraph(Turn)
    builder.add_node("mail", amail if asynchronous else mail)
    builder.add_edge(START, "mail")
    return builder.compile(checkpointer=saver)


def _effect(thread_id: str, token: str, lease_until_ms: int) -> EffectRecord:
    now = int(time.time() * 1000)
    return EffectRecord(thread_id, "mail-1", STARTED, token, lease_until_ms, now + 60_000, None,
                        "send", now, now)  # fmt: skip


def test_a_superseded_holder_starts_no_effect(fence_store: Store, thread_id: str) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix
    sent: list[str] = []
    config = _config(thread_id)
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        graph, ledger = _mail_graph(saver, sent), saver.effects
        old = saver.lock(thread_id, ttl=LEASE)
        old.acquire()
        assert graph.invoke({"to": "ann"}, config)["receipt"] == "sent to ann"
        time.sleep(LEASE + 0.3)
        fence.drop(thread_id)
        with saver.lock(thread_id, ttl=10) as new:
            pass
        fence.hold(thread_id, old.fence or 0)  # the stalled holder goes on with a new turn
        with pytest.raises(LeaseLost) as lost:
            graph.invoke({"to": "bob"}, config)
        assert (lost.value.token, lost.value.newer) == (old.fence, new.fence)
        assert sent == ["ann"]  # the effect did not run, and its record was not stored
        assert len(ledger.records(thread_id)) == 1
        fence.drop(thread_id)
        # the port's two starting transitions, claim and take_over, under either token
        now = int(time.time() * 1000)
        dead = _effect(thread_id, "dead-holder", now - 1)
        with pytest.raises(LeaseLost):
            ledger.drive(ledger.port.claim(dead, now, old.fence))
        assert ledger.drive(ledger.port.get(thread_id, "mail-1")) is None
        assert ledger.drive(ledger.port.claim(dead, now, new.fence)) is None
        heir = _effect(thread_id, "heir", now + 60_000)
        with pytest.raises(LeaseLost):
            ledger.drive(ledger.port.take_over(heir, "dead-holder", now, old.fence))
        assert ledger.drive(ledger.port.get(thread_id, "mail-1")).token == "dead-holder"
        assert ledger.drive(ledger.port.take_over(heir, "dead-holder", now, new.fence)) is True
        # the current holder's turn runs its effect
        with saver.lock(thread_id, ttl=10):
            assert graph.invoke({"to": "cy"}, config)["receipt"] == "sent to cy"
        assert sent == ["ann", "cy"]


def test_a_superseded_async_holder_starts_no_effect(fence_store: Store, thread_id: str) -> None:
    url, prefix = fence_store.backend.url, fence_store.prefix
    sent: list[str] = []
    config = _config(thread_id)

    async def scenario() -> None:
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            graph = _mail_graph(saver, sent, asynchronous=True)
            old = saver.lock(thread_id, ttl=LEASE)
            await old.aacquire()
            await graph.ainvoke({"to": "ann"}, config)
            await asyncio.sleep(LEASE + 0.3)
            fence.drop(thread_id)
            async with saver.lock(thread_id, ttl=10) as new:
                pass
            fence.hold(thread_id, old.fence or 0)
            with pytest.raises(LeaseLost) as lost:
                await graph.ainvoke({"to": "bob"}, config)
            assert lost.value.newer == new.fence
            assert len(await saver.effects.arecords(thread_id)) == 1

    asyncio.run(scenario())
    assert sent == ["ann"]
