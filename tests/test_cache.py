"""The node cache (LangGraph ``BaseCache``) on every backend, sync and async, real servers."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy

import graphkeep
from conformance.setups import all_setups
from graphkeep.cache.port import escaped_key, escaped_namespace
from graphkeep.errors import ConfigurationError, InvalidInput

from .conftest import unique_prefix

SETUPS = [
    pytest.param(s.url, id=s.name, marks=[getattr(pytest.mark, s.marker)])
    for s in all_setups()
    if s.marker
]

ODD_NAMESPACES: list[tuple[str, ...]] = [
    (),
    ("",),
    ("a",),
    ("a", ""),
    ("a", "b"),
    ("a/b",),
    ("/",),
    ("%2F",),
    ("{tag}", "x}{"),
    ("c:d.e", "#1#", "$d"),
    ("ünï", "🙂"),
    ("nul\x00inside",),
]
ODD_KEYS = ["k", "", "{", "}", "k:1.2#x", "%", "/", "\x00", "ключ🙂", "x" * 2000]


class Cache:
    """One test body for both shells: awaits the async methods or calls the sync ones."""

    def __init__(self, cache: Any, is_async: bool) -> None:
        self.cache = cache
        self.is_async = is_async

    async def get(self, keys: Sequence[Any]) -> dict[Any, Any]:
        if self.is_async:
            return await self.cache.aget(keys)  # type: ignore[no-any-return]
        return self.cache.get(keys)  # type: ignore[no-any-return]

    async def set(self, pairs: Mapping[Any, tuple[Any, int | None]]) -> None:
        if self.is_async:
            await self.cache.aset(pairs)
        else:
            self.cache.set(pairs)

    async def clear(self, namespaces: Sequence[Any] | None = None) -> None:
        if self.is_async:
            await self.cache.aclear(namespaces)
        else:
            self.cache.clear(namespaces)


async def _open(url: str, is_async: bool, prefix: str, stack: Any) -> Cache:
    if is_async:
        cache = await stack.enter_async_context(graphkeep.aconnect_cache(url, key_prefix=prefix))
    else:
        cache = stack.enter_context(graphkeep.connect_cache(url, key_prefix=prefix))
    return Cache(cache, is_async)


@pytest.fixture(params=SETUPS)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["sync", "async"])
async def cache(url: str, request: pytest.FixtureRequest) -> AsyncIterator[Cache]:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        opened = await _open(url, request.param, unique_prefix("cache"), stack)
        try:
            yield opened
        finally:
            await opened.clear()


# --------------------------------------------------------------------------- contract


async def test_set_then_get_round_trips_values_and_misses_are_absent(cache: Cache) -> None:
    value = {"messages": ["hi", {"n": 1}], "f": 1.5, "b": b"\x00raw"}
    await cache.set({(("node", "a"), "k1"): (value, None), (("node", "b"), "k2"): ([1, 2], 60)})
    got = await cache.get([(("node", "a"), "k1"), (("node", "b"), "k2"), (("node", "a"), "nope")])
    assert got == {(("node", "a"), "k1"): value, (("node", "b"), "k2"): [1, 2]}
    assert await cache.get([]) == {}


async def test_set_replaces_value_and_ttl(cache: Cache) -> None:
    address = (("node",), "k")
    await cache.set({address: ("old", 1)})
    await cache.set({address: ("new", None)})
    await asyncio.sleep(1.3)
    assert await cache.get([address]) == {address: "new"}


async def test_entries_expire_after_their_ttl_while_none_ttl_stays(cache: Cache) -> None:
    short, forever = (("node",), "short"), (("node",), "forever")
    await cache.set({short: ("s", 1), forever: ("f", None)})
    assert await cache.get([short, forever]) == {short: "s", forever: "f"}
    await asyncio.sleep(1.3)
    assert await cache.get([short, forever]) == {forever: "f"}


async def test_zero_ttl_is_never_returned(cache: Cache) -> None:
    address = (("node",), "zero")
    await cache.set({address: ("v", 0)})
    assert await cache.get([address]) == {}


async def test_clear_namespaces_leaves_other_namespaces(cache: Cache) -> None:
    a, ab, b = (("a",), "k"), (("a", "b"), "k"), (("b",), "k")
    await cache.set({a: (1, None), ab: (2, None), b: (3, 60)})
    await cache.clear([("a",), ("missing",)])
    assert await cache.get([a, ab, b]) == {ab: 2, b: 3}
    await cache.clear([("b",)])
    assert await cache.get([a, ab, b]) == {ab: 2}


async def test_clear_none_clears_every_namespace(cache: Cache) -> None:
    pairs = {((f"ns{i}",), f"k{i}"): (i, None if i % 2 else 60) for i in range(12)}
    await cache.set(pairs)
    assert len(await cache.get(list(pairs))) == 12
    await cache.clear()
    assert await cache.get(list(pairs)) == {}
    await cache.set(pairs)  # still usable after a full clear
    assert len(await cache.get(list(pairs))) == 12


async def test_key_prefix_isolates_caches(url: str) -> None:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        one = await _open(url, False, unique_prefix("one"), stack)
        two = await _open(url, True, unique_prefix("two"), stack)
        address = (("node",), "k")
        await one.set({address: ("one", None)})
        assert await two.get([address]) == {}
        await two.set({address: ("two", None)})
        await two.clear()
        assert await one.get([address]) == {address: "one"}
        await one.clear([("node",)])
        assert await one.get([address]) == {}


async def test_odd_namespaces_and_keys_never_collide(cache: Cache) -> None:
    pairs = {
        (ns, key): (f"{i}:{j}", None)
        for i, ns in enumerate(ODD_NAMESPACES)
        for j, key in enumerate(ODD_KEYS)
    }
    await cache.set(pairs)
    got = await cache.get(list(pairs))
    assert got == {address: value for address, (value, _) in pairs.items()}
    await cache.clear([("a",), ("{tag}", "x}{"), ()])
    gone = {("a",), ("{tag}", "x}{"), ()}
    got = await cache.get(list(pairs))
    assert set(got) == {address for address in pairs if address[0] not in gone}


def test_namespace_text_is_unambiguous() -> None:
    texts = {escaped_namespace(ns) + escaped_key(k) for ns in ODD_NAMESPACES for k in ODD_KEYS}
    assert len(texts) == len(ODD_NAMESPACES) * len(ODD_KEYS)
    for text in texts:
        assert not {"{", "}", "#", "\x00"} & set(text)


async def test_bad_input_raises_before_anything_is_written(cache: Cache) -> None:
    good = (("node",), "good")
    for pairs in (
        {good: (1, None), ("node", "k"): (1, None)},
        {good: (1, None), (("node",), 3): (1, None)},
        {good: (1, None), (("node", 1), "k"): (1, None)},
        {good: (1, None), (("node",), "k"): (1, -1)},
        {good: (1, None), (("node",), "k"): (1, "soon")},
    ):
        with pytest.raises(InvalidInput):
            await cache.set(pairs)  # type: ignore[arg-type]
    assert await cache.get([good]) == {}
    with pytest.raises(InvalidInput):
        await cache.get([("node", "k")])
    with pytest.raises(InvalidInput):
        await cache.clear("node")


async def test_async_cache_serves_sync_callers_from_other_threads(url: str) -> None:
    async with graphkeep.aconnect_cache(url, key_prefix=unique_prefix("hop")) as cache:
        address = (("node",), "k")
        await asyncio.to_thread(cache.set, {address: ("v", None)})
        assert await asyncio.to_thread(cache.get, [address]) == {address: "v"}
        with pytest.raises(asyncio.InvalidStateError):
            cache.get([address])
        await asyncio.to_thread(cache.clear)
        assert await cache.aget([address]) == {}


async def test_values_past_the_item_limit_are_dropped_never_raised(cache: Cache) -> None:
    big = (("node",), "big")
    await cache.set({big: ("small", None)})
    payload = os.urandom(500_000)  # incompressible, over DynamoDB's 400 KB item limit
    await cache.set({big: (payload, None)})
    dynamodb = type(cache.cache).__name__.endswith("DynamoDBCache")
    assert await cache.get([big]) == ({} if dynamodb else {big: payload})


def test_connect_cache_rejects_unknown_options(url: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown option"):
        with graphkeep.connect_cache(url, ttl=5):
            pass


# --------------------------------------------------------------------------- LangGraph


class State(TypedDict, total=False):
    x: int
    y: int


def _graph(cache: Any, calls: list[int]) -> Any:
    def double(state: State) -> State:
        calls.append(state["x"])
        return {"y": state["x"] * 2}

    builder = StateGraph(State)
    builder.add_node("double", double, cache_policy=CachePolicy(ttl=1))
    builder.add_edge(START, "double")
    builder.add_edge("double", END)
    return builder.compile(cache=cache)


def test_graph_node_runs_once_per_input_until_ttl_or_clear_sync(url: str) -> None:
    calls: list[int] = []
    with graphkeep.connect_cache(url, key_prefix=unique_prefix("graph")) as cache:
        graph = _graph(cache, calls)
        assert graph.invoke({"x": 1}) == {"x": 1, "y": 2}
        assert graph.invoke({"x": 1}) == {"x": 1, "y": 2}
        assert calls == [1]
        graph.invoke({"x": 2})
        assert calls == [1, 2]
        time.sleep(1.3)
        graph.invoke({"x": 1})
        assert calls == [1, 2, 1]
        graph.invoke({"x": 1})
        assert calls == [1, 2, 1]
        graph.clear_cache()
        assert graph.invoke({"x": 1}) == {"x": 1, "y": 2}
        assert calls == [1, 2, 1, 1]
        cache.clear()


async def test_graph_node_runs_once_per_input_until_ttl_or_clear_async(url: str) -> None:
    calls: list[int] = []
    async with graphkeep.aconnect_cache(url, key_prefix=unique_prefix("agraph")) as cache:
        graph = _graph(cache, calls)
        assert await graph.ainvoke({"x": 1}) == {"x": 1, "y": 2}
        assert await graph.ainvoke({"x": 1}) == {"x": 1, "y": 2}
        assert calls == [1]
        await graph.ainvoke({"x": 2})
        assert calls == [1, 2]
        await asyncio.sleep(1.3)
        await graph.ainvoke({"x": 1})
        assert calls == [1, 2, 1]
        await graph.ainvoke({"x": 1})
        assert calls == [1, 2, 1]
        await graph.aclear_cache()
        assert await graph.ainvoke({"x": 1}) == {"x": 1, "y": 2}
        assert calls == [1, 2, 1, 1]
        await cache.aclear()
