"""Bad input on every backend set-up (issue #5 s4): a clear error before any write.

Each test stores something real first (so the raw scan of the prefix is known to see data),
takes a raw snapshot with the backend's own client, feeds the bad input through the sync and
the async savers, and checks that the error is the documented one and the snapshot unchanged.

Decided behaviour, the same on every backend:
- thread ids must be non-empty str (or int), without NUL, at most ``max_id_bytes`` (1024) UTF-8
  bytes: anything else raises ``InvalidThreadId``. Through a graph, LangGraph itself turns
  non-str ids into ``str(id)`` before the saver sees them (storage contract s1), so only the
  saver API can hand us the raw dict/list/bool/float/bytes.
- namespaces may contain any separator characters: they work, round-trip and never collide.
- filter keys are plain top-level metadata keys compared for (deep) equality: a key starting
  with "$" raises ``InvalidFilter``; a dotted key matches a top-level key of that exact name
  (never a nested path); an operator-looking value is a literal value; huge filters work.
- unserializable values raise ``SerializationError`` naming the channel.
- a value over a store's item limit is chunked transparently; with chunking switched off (an
  option named ``chunking``, where a backend offers one) it raises ``PayloadTooLarge``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig

from conformance.factory import Api
from conformance.spec.fixtures import checkpoint, config, expect_raises, metadata, put_one
from graphkeep.connect import accepted_options, class_for
from graphkeep.errors import (
    InvalidFilter,
    InvalidThreadId,
    PayloadTooLarge,
    SerializationError,
)
from tests.scenarios.backends import MODES, Backend, Graph, Store, thread_config
from tests.scenarios.graphs import chat_graph, unserializable_graph, user_line


def _seed(api: Api, thread_id: str) -> RunnableConfig:
    """One checkpoint with a pending write: something the raw scan must see and keep."""
    stored = put_one(api, thread_id, values={"v": "seed"}, meta=metadata(0, source="input"))
    api.put_writes(stored, [("v", "pending")], "seed-task", "seed-path")
    return stored


def _snapshot(store: Store) -> dict[str, bytes]:
    raw = store.scan()
    assert raw, f"the raw scan finds nothing under {store.prefix}: teach backends.py its layout"
    return raw


# -- thread ids ------------------------------------------------------------------------------

BAD_THREAD_IDS = [
    pytest.param(None, id="none"),
    pytest.param("", id="empty"),
    pytest.param("x" * 2048, id="2kb"),
    pytest.param("a\x00b", id="nul"),
    pytest.param({"$gt": ""}, id="dict-operator"),
    pytest.param(["a", {"$ne": None}], id="list"),
    pytest.param(True, id="bool"),
    pytest.param(1.5, id="float"),
    pytest.param(b"thread", id="bytes"),
]


def _thread_id_calls(api: Api, bad: Any, good: RunnableConfig) -> dict[str, Callable[[], object]]:
    saver: Any = api.saver
    good_thread = good["configurable"]["thread_id"]
    stored_id = good["configurable"]["checkpoint_id"]
    cp = checkpoint({"v": "bad"}, {"v": 9})
    return {
        "put": lambda: api.put(config(bad), cp, metadata(), {"v": 9}),
        "put_writes": lambda: api.put_writes(config(bad, "", stored_id), [("v", 1)], "t"),
        "get_tuple": lambda: api.get_tuple(config(bad)),
        "list": lambda: api.list(config(bad)),
        "delete_thread": lambda: api.delete_thread(bad),
        "copy_thread from": lambda: api.copy_thread(bad, good_thread),
        "copy_thread to": lambda: api.copy_thread(good_thread, bad),
        "prune": lambda: api.prune([good_thread, bad]),
        "get_delta_channel_history": lambda: api.history(config(bad), ["v"]),
        "lock": lambda: saver.lock(bad),
    }


@pytest.mark.parametrize("bad", BAD_THREAD_IDS)
def test_bad_thread_id_is_refused_before_any_write(store: Store, thread_id: str, bad: Any) -> None:
    with store.open("sync") as api:
        good = _seed(api, thread_id)
    before = _snapshot(store)
    for mode in MODES:
        with store.open(mode) as api:
            for name, call in _thread_id_calls(api, bad, good).items():
                expect_raises(InvalidThreadId, call, f"{mode} {name} with thread_id={bad!r:.40}")
            if bad is None or isinstance(bad, str):  # what LangGraph hands over unchanged
                invoke = partial(
                    Graph(api, chat_graph()).invoke,
                    {"log": [user_line("x", 1)]},
                    thread_config(bad),
                )
                expect_raises(InvalidThreadId, invoke, f"{mode} graph.invoke")
    assert store.scan() == before


# -- namespaces and ids full of separators ---------------------------------------------------

SEPARATOR_NAMESPACES = [
    "", ":", "|", "::", "||", ":|", "a", "a:", ":a", "a:b", "a|b", "a:b|c:d", "sub:1|inner:2",
    "#", "a#b", "##", "%", "%7B", "%25", "{", "}", "{a}", "}{", "/", "a/b", "\\", "\\\\",
    ".", "a.b", "$", "$gt", "$where", " ", "a b", "\t", "\n", "\x01", "a\x01", "\x7f", "*", "?",
    "[a]", "ü", "🙂", "x" * 1000,
]  # fmt: skip
#: (thread suffix, namespace) pairs that a naive join of thread and namespace would confuse
LOOK_ALIKES = [
    ("a:b", "c"), ("a", "b:c"), ("a:b:c", ""), ("a|b", "c"), ("a", "b|c"), ("a#b", "c"),
    ("a", "b#c"), ("a/b", "c"), ("a", "b/c"), ("a{b}", ""), ("a", "{b}"), ("a}", ""),
    ("a%7D", ""), ("a\x01", ""), ("a", "\x01"), ("a.b", "c"), ("a", "b.c"), ("a$", "b"),
]  # fmt: skip


def test_namespaces_and_thread_ids_full_of_separators_round_trip_without_colliding(
    store: Store, thread_id: str
) -> None:
    pairs = [(thread_id, ns) for ns in SEPARATOR_NAMESPACES]
    pairs += [(f"{thread_id}{suffix}", ns) for suffix, ns in LOOK_ALIKES]
    with store.open("sync") as api:
        stored: dict[tuple[str, str], RunnableConfig] = {}
        for thread, ns in pairs:
            label = f"{thread!r}/{ns!r}"
            stored[(thread, ns)] = conf = put_one(api, thread, ns=ns, values={"who": label})
            api.put_writes(conf, [("who", f"write {label}")], "task", ns)
        for (thread, ns), conf in stored.items():
            label = f"{thread!r}/{ns!r}"
            assert conf["configurable"]["checkpoint_ns"] == ns
            found = api.get_tuple(config(thread, ns))
            assert found is not None, f"{label} not found"
            assert found.config == conf
            assert found.checkpoint["channel_values"] == {"who": label}
            assert found.pending_writes == [("task", "who", f"write {label}")]
            assert [t.config for t in api.list(config(thread, ns))] == [conf]
        namespaces: dict[str, list[str]] = {}
        for thread, ns in pairs:
            namespaces.setdefault(thread, []).append(ns)
        for thread, expected in namespaces.items():
            listed = api.list({"configurable": {"thread_id": thread}})
            assert sorted(t.config["configurable"]["checkpoint_ns"] for t in listed) == sorted(
                expected
            ), thread
        # deleting one thread leaves every look-alike intact
        api.delete_thread(f"{thread_id}a")
        for thread, expected in namespaces.items():
            listed = api.list({"configurable": {"thread_id": thread}})
            assert len(listed) == (0 if thread == f"{thread_id}a" else len(expected)), thread


# -- metadata filters ------------------------------------------------------------------------


def _filter_fixture(api: Api, thread_id: str) -> list[RunnableConfig]:
    first = put_one(
        api, thread_id, values={"n": 0}, version=1,
        meta=metadata(0, source="input", **{"a.b": 1, "a": {"b": 2}, "$dollar": 3}),
    )  # fmt: skip
    second = put_one(
        api, thread_id, parent=first, values={"n": 1}, version=2,
        meta=metadata(1, source="loop", a={"b": 1}),
    )  # fmt: skip
    return [first, second]


def _matches(api: Api, thread_id: str, filter: dict[str, Any]) -> list[str]:
    listed = api.list({"configurable": {"thread_id": thread_id}}, filter=filter)
    return [t.config["configurable"]["checkpoint_id"] for t in listed]


OPERATOR_FILTERS: list[dict[str, Any]] = [
    {"$where": "true"},
    {"$or": [{"source": "input"}, {"source": "loop"}]},
    {"$gt": ""},
    {"source": "loop", "$comment": "x"},
    {"$": 1},
]


def test_filter_keys_starting_with_dollar_are_refused_and_operator_values_are_literal(
    store: Store, thread_id: str
) -> None:
    with store.open("sync") as api:
        _filter_fixture(api, thread_id)
    before = _snapshot(store)
    for mode in MODES:
        with store.open(mode) as api:
            for bad in OPERATOR_FILTERS:
                for scope in (thread_config(thread_id), None):
                    listing = partial(api.list, scope, filter=bad)
                    expect_raises(InvalidFilter, listing, f"{mode} list({scope}, filter={bad})")
            # values that look like operators are compared literally: they match nothing
            for literal in ({"$ne": "x"}, {"$exists": True}, {"$gte": 0}, {"$in": ["loop"]}):
                assert _matches(api, thread_id, {"source": literal}) == [], literal
                assert _matches(api, thread_id, {"step": literal}) == [], literal
    assert store.scan() == before


def test_dotted_filter_keys_are_plain_top_level_keys(store: Store, thread_id: str) -> None:
    with store.open("sync") as api:
        first, second = (
            c["configurable"]["checkpoint_id"] for c in _filter_fixture(api, thread_id)
        )
    for mode in MODES:
        with store.open(mode) as api:
            found = api.get_tuple(config(thread_id, "", first))
            assert found is not None
            stored: dict[str, Any] = dict(found.metadata)
            assert {k: stored[k] for k in ("a.b", "a", "$dollar")} == {
                "a.b": 1, "a": {"b": 2}, "$dollar": 3,
            }  # fmt: skip
            assert _matches(api, thread_id, {"a.b": 1}) == [first]
            assert _matches(api, thread_id, {"a.b": 2}) == []  # not the nested path a -> b
            assert _matches(api, thread_id, {"a": {"b": 1}}) == [second]
            assert _matches(api, thread_id, {"a": {"b": 2}}) == [first]
            assert _matches(api, thread_id, {"a": {"b": 2}, "a.b": 1, "source": "input"}) == [first]


def test_huge_filters_work(store: Store, thread_id: str) -> None:
    wide = {f"key{i:04d}": f"value-{i}" for i in range(300)}
    with store.open("sync") as api:
        target = put_one(api, thread_id, values={"n": 1}, meta=metadata(0, **wide))
        put_one(api, thread_id, parent=target, values={"n": 2}, version=2, meta=metadata(1))
    target_id = target["configurable"]["checkpoint_id"]
    for mode in MODES:
        with store.open(mode) as api:
            assert _matches(api, thread_id, wide) == [target_id]
            many = {**wide, **{f"other{i:05d}": i for i in range(10_000)}}
            assert _matches(api, thread_id, many) == []
            assert _matches(api, thread_id, {"key0000": "v" * (1024 * 1024)}) == []
            assert _matches(api, thread_id, {**wide, "key0299": ["x"] * 50_000}) == []


# -- values that cannot be serialized --------------------------------------------------------

UNSERIALIZABLE = [
    pytest.param(object, id="object"),
    pytest.param(lambda: lambda: 0, id="lambda"),
]


@pytest.mark.parametrize("make", UNSERIALIZABLE)
def test_unserializable_values_are_refused_naming_the_channel(
    store: Store, thread_id: str, make: Callable[[], Any]
) -> None:
    with store.open("sync") as api:
        good = _seed(api, thread_id)
    before = _snapshot(store)
    for mode in MODES:
        with store.open(mode) as api:
            cp = checkpoint({"fine": 1, "poison": make()}, {"fine": 5, "poison": 5})
            with pytest.raises(SerializationError, match="'poison'"):
                api.put(good, cp, metadata(1), {"fine": 5, "poison": 5})
            with pytest.raises(SerializationError, match="'poison'"):
                api.put_writes(good, [("fine", 1), ("poison", make())], "task-x")
            with pytest.raises(SerializationError, match="metadata"):
                api.put(good, checkpoint({"fine": 1}, {"fine": 6}), metadata(1, bad=make()), {})
    assert store.scan() == before

    # through a graph: the failing step stores nothing, and the thread stays readable
    config_ = thread_config(f"{thread_id}-graph")
    with store.open("sync") as api:
        graph = Graph(api, unserializable_graph(make))
        with pytest.raises(SerializationError, match="'thing'"):
            graph.invoke({"log": ["in"]}, config_)
        paused = graph.state(config_)
        assert paused.values == {"log": ["in", "ok"]} and paused.next == ("poison",)
        head = api.get_tuple(config_)
        assert head is not None and head.pending_writes == []


# -- oversize values -------------------------------------------------------------------------


def _chunking_off(backend: Backend) -> dict[str, Any] | None:
    """The option that switches chunking off, where the backend offers one."""
    options = accepted_options(class_for(f"{backend.scheme}://x"))
    return {"chunking": False} if "chunking" in options else None


def test_oversize_values_are_chunked_or_refused_when_chunking_is_off(
    store: Store, thread_id: str
) -> None:
    limit = store.backend.item_limit
    if limit is None:
        pytest.skip("Redis has no per-item limit to chunk around (a string holds 512 MB)")
    big = os.urandom(limit + 64 * 1024)  # incompressible
    off = _chunking_off(store.backend)
    if off is not None:
        with store.open("sync", **off) as api:
            good = _seed(api, thread_id)
            before = _snapshot(store)
            cp = checkpoint({"big": big}, {"big": 7})
            for name, call in {
                "put": lambda: api.put(good, cp, metadata(1), {"big": 7}),
                "put_writes": lambda: api.put_writes(good, [("big", big)], "task-big"),
            }.items():
                expect_raises(PayloadTooLarge, call, f"{name} with chunking off")
            assert store.scan() == before
    with store.open("sync") as api:
        stored = put_one(api, f"{thread_id}-big", values={"big": big}, version=1)
        api.put_writes(stored, [("big", big)], "task-big")
    with store.open("async") as api:
        found = api.get_tuple(stored)
        assert found is not None
        assert found.checkpoint["channel_values"]["big"] == big
        assert found.pending_writes == [("task-big", "big", big)]
