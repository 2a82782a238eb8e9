"""Every product's representative requests, sync and async, on one URL and key prefix:
what tests/test_least_privilege.py runs under a restricted Redis ACL user or IAM policy."""

from __future__ import annotations

import operator
import os
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import graphkeep
from graphkeep.encryption import KeyRing

PRODUCTS = ("saver", "store", "cache", "events", "effects")


class Chat(TypedDict):
    turns: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", lambda state: {"turns": [f"reply {len(state['turns'])}"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def _rings() -> tuple[KeyRing, KeyRing]:
    """A cache entry's ring, and the ring ``graphkeep rekey`` reseals it under."""
    old, new = os.urandom(32), os.urandom(32)
    return KeyRing({"k1": old}, current="k1"), KeyRing({"k2": new, "k1": old}, current="k2")


def run_sync(product: str, url: str, prefix: str, *, setup: bool = True) -> None:
    """``product``'s representative calls through the sync API (``setup``: the products'
    own, off where an administrator ran ``graphkeep setup`` instead)."""
    tag = uuid.uuid4().hex[:8]
    if product == "saver":
        with graphkeep.connect(url, key_prefix=prefix, setup=setup) as saver:
            graph = _graph(saver)
            config = {"configurable": {"thread_id": f"t-{tag}"}}
            graph.invoke({"turns": ["hi"]}, config)
            graph.invoke({"turns": ["again"]}, config)
            assert len(graph.get_state(config).values["turns"]) == 4
            assert len(list(graph.get_state_history(config))) >= 2
            with saver.lock(f"t-{tag}"):
                pass
            exclusive = saver.exclusive(graph)
            exclusive.invoke({"turns": ["once more"]}, config)
            saver.delete_thread(f"t-{tag}")
    elif product == "store":
        with graphkeep.connect_store(url, key_prefix=prefix, setup=setup) as store:
            store.put(("docs", tag), "a", {"text": "hello"})
            assert store.get(("docs", tag), "a") is not None
            assert len(store.search(("docs", tag))) == 1
            assert ("docs", tag) in store.list_namespaces(prefix=("docs",))
            store.delete(("docs", tag), "a")
    elif product == "cache":
        with graphkeep.connect_cache(url, key_prefix=prefix, setup=setup) as cache:
            cache.set({(("n", tag), "k"): ({"v": 1}, 60)})
            assert cache.get([(("n", tag), "k")])
            cache.clear([("n", tag)])
        # rekey's reseal of an entry in place (graphkeep rekey --all)
        first, second = _rings()
        with graphkeep.connect_cache(url, key_prefix=prefix, setup=setup, encryption=first) as c:
            c.set({(("r", tag), "k"): ({"v": 2}, 60)})
        with graphkeep.connect_cache(url, key_prefix=prefix, setup=setup, encryption=second) as c:
            assert c.rekey()["rewritten"] == 1
            assert c.get([(("r", tag), "k")])
            c.clear([("r", tag)])
    elif product == "events":
        with graphkeep.connect_events(url, key_prefix=prefix, setup=setup) as log:
            run = f"r-{tag}"
            log.append(run, {"type": "start"})
            log.heartbeat(run)
            log.close(run, "success")
            assert [e for _, e in log.read(run)][0] == {"type": "start"}
    elif product == "effects":
        with graphkeep.connect_effects(url, key_prefix=prefix, setup=setup) as ledger:
            calls: list[int] = []
            for _ in range(2):
                ledger.run(f"e-{tag}", lambda: calls.append(1) or len(calls))
            assert calls == [1]
    else:
        raise AssertionError(product)


async def run_async(product: str, url: str, prefix: str, *, setup: bool = True) -> None:
    """``product``'s representative calls through the async API."""
    tag = uuid.uuid4().hex[:8]
    if product == "saver":
        async with graphkeep.aconnect(url, key_prefix=prefix, setup=setup) as saver:
            graph = _graph(saver)
            config = {"configurable": {"thread_id": f"t-{tag}"}}
            await graph.ainvoke({"turns": ["hi"]}, config)
            await graph.ainvoke({"turns": ["again"]}, config)
            assert len((await graph.aget_state(config)).values["turns"]) == 4
            assert len([s async for s in graph.aget_state_history(config)]) >= 2
            async with saver.lock(f"t-{tag}"):
                pass
            exclusive = saver.exclusive(graph)
            await exclusive.ainvoke({"turns": ["once more"]}, config)
            await saver.adelete_thread(f"t-{tag}")
    elif product == "store":
        async with graphkeep.aconnect_store(url, key_prefix=prefix, setup=setup) as store:
            await store.aput(("docs", tag), "a", {"text": "hello"})
            assert await store.aget(("docs", tag), "a") is not None
            assert len(await store.asearch(("docs", tag))) == 1
            assert ("docs", tag) in await store.alist_namespaces(prefix=("docs",))
            await store.adelete(("docs", tag), "a")
    elif product == "cache":
        async with graphkeep.aconnect_cache(url, key_prefix=prefix, setup=setup) as cache:
            await cache.aset({(("n", tag), "k"): ({"v": 1}, 60)})
            assert await cache.aget([(("n", tag), "k")])
            await cache.aclear([("n", tag)])
        first, second = _rings()
        async with graphkeep.aconnect_cache(
            url, key_prefix=prefix, setup=setup, encryption=first
        ) as c:
            await c.aset({(("r", tag), "k"): ({"v": 2}, 60)})
        async with graphkeep.aconnect_cache(
            url, key_prefix=prefix, setup=setup, encryption=second
        ) as c:
            assert (await c.arekey())["rewritten"] == 1
            assert await c.aget([(("r", tag), "k")])
            await c.aclear([("r", tag)])
    elif product == "events":
        async with graphkeep.aconnect_events(url, key_prefix=prefix, setup=setup) as log:
            run = f"r-{tag}"
            await log.append(run, {"type": "start"})
            await log.heartbeat(run)
            await log.close(run, "success")
            assert [e async for _, e in log.read(run)][0] == {"type": "start"}
    elif product == "effects":
        async with graphkeep.aconnect_effects(url, key_prefix=prefix, setup=setup) as ledger:
            calls: list[int] = []

            async def effect() -> int:
                calls.append(1)
                return len(calls)

            for _ in range(2):
                await ledger.arun(f"e-{tag}", effect)
            assert calls == [1]
    else:
        raise AssertionError(product)
