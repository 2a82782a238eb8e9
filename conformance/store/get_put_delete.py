"""get_put_delete: items round-trip with LangGraph's Item fields and timestamps."""

from __future__ import annotations

from datetime import datetime, timezone

from langgraph.store.base import Item, SearchItem

from conformance.store._registry import case
from conformance.store.api import StoreFactory
from conformance.store.fixtures import keys

VALUE = {
    "text": "hello",
    "count": 3,
    "ratio": 0.25,
    "flag": True,
    "nothing": None,
    "tags": ["a", "b", {"c": [1, 2]}],
    "nested": {"deep": {"deeper": "yes"}},
    "unicode": "héllo 世界 🚀",
}


@case("get_put_delete")
def get_returns_an_item_with_every_field(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("docs", "user-1"), "doc", VALUE)
        item = api.get(("docs", "user-1"), "doc")
        assert isinstance(item, Item) and not isinstance(item, SearchItem)
        assert item.namespace == ("docs", "user-1")
        assert item.key == "doc"
        assert item.value == VALUE
        for stamp in (item.created_at, item.updated_at):
            assert isinstance(stamp, datetime) and stamp.tzinfo is not None
            assert abs((datetime.now(timezone.utc) - stamp).total_seconds()) < 120
        assert item.created_at == item.updated_at
        assert item.dict()["namespace"] == ["docs", "user-1"]


@case("get_put_delete")
def search_returns_search_items_without_score(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("docs",), "doc", VALUE)
        found = api.search(("docs",))
        assert len(found) == 1
        item = found[0]
        assert isinstance(item, SearchItem)
        assert (item.namespace, item.key, item.value) == (("docs",), "doc", VALUE)
        assert item.score is None
        assert item.created_at == api.get(("docs",), "doc").created_at


@case("get_put_delete")
def update_keeps_created_at_and_moves_updated_at_forward(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("docs",), "doc", {"v": 1, "old": True})
        first = api.get(("docs",), "doc")
        api.put(("docs",), "doc", {"v": 2})
        second = api.get(("docs",), "doc")
        assert second.value == {"v": 2}, "a put replaces the whole value"
        assert second.created_at == first.created_at
        assert second.updated_at > first.updated_at


@case("get_put_delete")
def a_put_after_delete_starts_a_new_created_at(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("docs",), "doc", {"v": 1})
        first = api.get(("docs",), "doc")
        api.delete(("docs",), "doc")
        api.put(("docs",), "doc", {"v": 2})
        assert api.get(("docs",), "doc").created_at > first.created_at


@case("get_put_delete")
def delete_removes_the_item_everywhere(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("docs",), "gone", {"v": 1})
        api.put(("docs",), "kept", {"v": 2})
        api.delete(("docs",), "gone")
        assert api.get(("docs",), "gone") is None
        assert keys(api.search(("docs",))) == ["kept"]
        api.delete(("docs",), "never-existed")  # deleting a missing key is not an error
        api.delete(("docs",), "kept")
        assert api.list_namespaces() == []


@case("get_put_delete")
def get_is_exact_on_namespace_and_key(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("a", "b"), "k", {"v": 1})
        assert api.get(("a",), "k") is None
        assert api.get(("a", "b", "c"), "k") is None
        assert api.get(("a", "bc"), "k") is None
        assert api.get(("a", "b"), "K") is None
        assert api.get(("a", "b"), "k").value == {"v": 1}


@case("get_put_delete")
def namespace_may_be_a_list_or_a_tuple(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(["users", "alice"], "k", {"v": 1})
        item = api.get(("users", "alice"), "k")
        assert item is not None and item.namespace == ("users", "alice")
        assert api.get(["users", "alice"], "k") == item
        assert namespaces_of(api.search(["users"])) == {("users", "alice")}


def namespaces_of(items: list[Item]) -> set[tuple[str, ...]]:
    return {i.namespace for i in items}


@case("get_put_delete")
def non_ascii_and_punctuation_round_trip(factory: StoreFactory) -> None:
    labels = [("用户", "mémoire"), ("a:b", "c#d", "e|f", "{g}", "h i"), ("users", "alice\n")]
    with factory.open() as api:
        for ns in labels:
            api.put(ns, "clé/💾 :#|{}", {"text": "これは日本語です", "ns": list(ns)})
        for ns in labels:
            item = api.get(ns, "clé/💾 :#|{}")
            assert item is not None and item.namespace == ns
            assert item.value == {"text": "これは日本語です", "ns": list(ns)}
        assert set(api.list_namespaces()) == set(labels)


@case("get_put_delete")
def long_keys_and_namespaces_round_trip(factory: StoreFactory) -> None:
    ns = tuple(f"label{i:03d}" + "x" * 40 for i in range(10))  # ~480 bytes
    key = "k" * 500
    with factory.open() as api:
        api.put(ns, key, {"v": 1})
        assert api.get(ns, key).value == {"v": 1}
        assert api.list_namespaces() == [ns]
