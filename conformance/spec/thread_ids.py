"""thread_ids: thread ids are str on the way in and out, unambiguous in every key, validated.

- int 7 and str "7" are one thread (contract s1: store `str(thread_id)`).
- (thread, namespace, checkpoint id) and (thread, namespace, channel, version) never share a key,
  whatever separators (`:`, `#`, `|`, `{`, `}`, space), unicode or length the ids contain
  (docs/contract.md s14); pairs below reuse one checkpoint id and one version so only the key
  encoding can keep them apart.
- invalid thread ids raise `InvalidThreadId` (a `GraphkeepError`) before anything is written.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from conformance.factory import Api, SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    config,
    expect_raises,
    metadata,
    must_get,
    new_checkpoint_id,
    new_thread,
    put_one,
    write_values,
)

SEPARATORS = [":", "#", "|", "{", "}", " ", "/", "$", "."]


def _ambiguous_keys(prefix: str) -> list[tuple[str, str]]:
    """(thread, namespace) pairs that naive key joining would map onto each other."""
    keys: list[tuple[str, str]] = []
    for sep in SEPARATORS:
        keys += [(f"{prefix}a{sep}b", ""), (f"{prefix}a", f"b{sep}")]
        keys += [(f"{prefix}a{sep}", "b"), (f"{prefix}a", f"{sep}b")]
        keys += [(f"{prefix}a{sep}b", "c"), (f"{prefix}a", f"b{sep}c")]
    keys += [(f"{prefix}a", "b"), (f"{prefix}{{a}}", ""), (f"{prefix}{{a}}b", "")]
    keys += [(f"{prefix}caf\u00e9", ""), (f"{prefix}cafe\u0301", "")]  # NFC vs NFD: two threads
    keys += [(f"{prefix}\u65e5\u672c-\U0001f680", "ns:\u00fc|x:1")]
    long_ascii = prefix + "x" * (1024 - len(prefix))
    keys += [(long_ascii, ""), (long_ascii[:-1] + "y", ""), (long_ascii[:-1], "x")]
    keys += [(prefix + "\u00e9" * ((1024 - len(prefix)) // 2), "")]  # about 1 KB of UTF-8
    return list(dict.fromkeys(keys))


def _put_all(api: Api, keys: list[tuple[str, str]], checkpoint_id: str) -> None:
    for i, (thread, ns) in enumerate(keys):
        stored = api.put(
            config(thread, ns),
            checkpoint({"v": i}, {"v": 1}, checkpoint_id=checkpoint_id),
            metadata(0, key=i),
            {"v": 1},
        )
        api.put_writes(stored, [("w", i)], "task-1", "~p")


@case("thread_ids")
def int_and_str_thread_ids_address_the_same_thread(factory: SaverFactory) -> None:
    number = 7  # the key prefix isolates this run, so a plain 7 is safe
    with factory.open() as api:
        stored = put_one(api, number, values={"x": 1})
        assert stored["configurable"]["thread_id"] == str(number)
        found = must_get(api, config(str(number)))
        assert found.config["configurable"]["thread_id"] == str(number)
        assert found.checkpoint["channel_values"] == {"x": 1}
        put_one(api, str(number), parent=stored, values={"x": 2}, version=2)
        assert must_get(api, config(number)).checkpoint["channel_values"] == {"x": 2}
        assert len(api.list(config(number))) == 2
        assert {t.config["configurable"]["thread_id"] for t in api.list(None)} == {str(number)}


@case("thread_ids")
def ambiguous_thread_and_namespace_pairs_do_not_collide(factory: SaverFactory) -> None:
    keys = _ambiguous_keys(new_thread("k") + "-")
    with factory.open() as api:
        _put_all(api, keys, new_checkpoint_id())
        for i, (thread, ns) in enumerate(keys):
            found = must_get(api, config(thread, ns))
            assert found.checkpoint["channel_values"] == {"v": i}, f"{thread!r}/{ns!r} collided"
            assert dict(found.metadata)["key"] == i
            assert write_values(found) == [("w", i)], f"writes of {thread!r}/{ns!r} collided"
            assert found.config["configurable"]["thread_id"] == thread
            assert found.config["configurable"]["checkpoint_ns"] == ns
        for thread in {t for t, _ in keys}:
            listed = api.list({"configurable": {"thread_id": thread}})
            expected_ns = sorted(ns for t, ns in keys if t == thread)
            assert sorted(t.config["configurable"]["checkpoint_ns"] for t in listed) == expected_ns
        assert {t.config["configurable"]["thread_id"] for t in api.list(None)} == {
            t for t, _ in keys
        }


@case("thread_ids")
def deleting_one_of_an_ambiguous_pair_keeps_the_other(factory: SaverFactory) -> None:
    prefix = new_thread("d") + "-"
    keys = [(f"{prefix}a:b", ""), (f"{prefix}a", "b"), (f"{prefix}a{{b}}", ""), (f"{prefix}a", "")]
    with factory.open() as api:
        _put_all(api, keys, new_checkpoint_id())
        api.delete_thread(f"{prefix}a:b")
        api.delete_thread(f"{prefix}a{{b}}")
        assert api.get_tuple(config(f"{prefix}a:b")) is None
        assert must_get(api, config(f"{prefix}a", "b")).checkpoint["channel_values"] == {"v": 1}
        assert must_get(api, config(f"{prefix}a")).checkpoint["channel_values"] == {"v": 3}


@case("thread_ids")
def namespace_and_channel_names_do_not_collide_in_blob_keys(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        version = api.next_version(None)
        first = api.put(
            config(thread, "n"),
            checkpoint({"c:d": "in-n"}, {"c:d": version}),
            metadata(0),
            {"c:d": version},
        )
        second = api.put(
            config(thread, "n:c"),
            checkpoint({"d": "in-n:c"}, {"d": version}),
            metadata(0),
            {"d": version},
        )
        third = api.put(
            config(thread, "n:c:d"),
            checkpoint({"": "empty-name"}, {"": version}),
            metadata(0),
            {"": version},
        )
        assert must_get(api, first).checkpoint["channel_values"] == {"c:d": "in-n"}
        assert must_get(api, second).checkpoint["channel_values"] == {"d": "in-n:c"}
        assert must_get(api, third).checkpoint["channel_values"] == {"": "empty-name"}


INVALID_THREAD_IDS: list[Any] = [None, "", "x" * 2000, "bad\x00id", {"a": 1}, ["a"]]


def _attempts(api: Api, thread_id: Any) -> dict[str, Any]:
    bad: RunnableConfig = config(thread_id)
    with_id: RunnableConfig = config(thread_id, "", new_checkpoint_id())
    return {
        "put": lambda: api.put(bad, checkpoint({"v": 1}, {"v": 1}), metadata(0), {"v": 1}),
        "get_tuple": lambda: api.get_tuple(bad),
        "put_writes": lambda: api.put_writes(with_id, [("ch", 1)], "task-1"),
        "list": lambda: api.list(bad),
    }


@case("thread_ids")
def invalid_thread_ids_are_rejected_before_anything_is_written(factory: SaverFactory) -> None:
    invalid_thread_id, base_error = factory.errors()
    assert issubclass(invalid_thread_id, base_error), "InvalidThreadId must be a GraphkeepError"
    with factory.open() as api:
        for thread_id in INVALID_THREAD_IDS:
            for operation, attempt in _attempts(api, thread_id).items():
                label = f"{operation} with thread_id {str(thread_id)[:20]!r}"
                expect_raises(invalid_thread_id, attempt, label)
        assert api.list(None) == [], "an invalid thread id left data behind"
