"""prefix_search: search scopes by whole namespace labels, literally, newest first."""

from __future__ import annotations

from conformance.store._registry import case
from conformance.store.api import StoreApi, StoreFactory
from conformance.store.fixtures import keys, namespaces


def _put_all(api: StoreApi, spaces: list[tuple[str, ...]]) -> None:
    for ns in spaces:
        api.put(ns, "k", {"v": 1})


def _under(api: StoreApi, prefix: tuple[str, ...] | list[str]) -> set[tuple[str, ...]]:
    return namespaces(api.search(prefix, limit=100))


@case("prefix_search")
def prefix_stops_at_label_boundaries(factory: StoreFactory) -> None:
    with factory.open() as api:
        _put_all(
            api,
            [
                ("foo",),
                ("foo", "child"),
                ("foo", "child", "deep"),
                ("foobar",),
                ("foobar", "baz"),
                ("foo2",),
                ("a", "b"),
                ("a", "bc"),
            ],
        )
        assert _under(api, ("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
        assert _under(api, ("foobar",)) == {("foobar",), ("foobar", "baz")}
        assert _under(api, ("foo", "child")) == {("foo", "child"), ("foo", "child", "deep")}
        assert _under(api, ("foo2",)) == {("foo2",)}
        assert _under(api, ("fo",)) == set()
        assert _under(api, ("a", "b")) == {("a", "b")}
        assert _under(api, ["a", "b"]) == {("a", "b")}, "a list prefix works like a tuple"


@case("prefix_search")
def empty_prefix_is_everything(factory: StoreFactory) -> None:
    with factory.open() as api:
        _put_all(api, [("a",), ("b", "c"), ("d", "e", "f")])
        assert _under(api, ()) == {("a",), ("b", "c"), ("d", "e", "f")}


@case("prefix_search")
def wildcard_characters_in_labels_are_literal(factory: StoreFactory) -> None:
    with factory.open() as api:
        _put_all(
            api,
            [
                ("user_1",),
                ("user_1", "child"),
                ("userX1",),
                ("a%b",),
                ("axxb",),
                ("star*",),
                ("starX",),
                ("q?m",),
                ("qXm",),
                ("br[ack]et",),
                ("brXet",),
                ("x\\y",),
                ("x",),
                ("^re$+",),
                ("reee",),
            ],
        )
        assert _under(api, ("user_1",)) == {("user_1",), ("user_1", "child")}
        assert _under(api, ("a%b",)) == {("a%b",)}
        assert _under(api, ("star*",)) == {("star*",)}
        assert _under(api, ("q?m",)) == {("q?m",)}
        assert _under(api, ("br[ack]et",)) == {("br[ack]et",)}
        assert _under(api, ("x\\y",)) == {("x\\y",)}
        assert _under(api, ("^re$+",)) == {("^re$+",)}
        assert _under(api, ("*",)) == set(), "'*' is a wildcard only in list_namespaces"


@case("prefix_search")
def labels_are_case_sensitive(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("Foo",), "k", {"v": "upper"})
        api.put(("foo",), "k", {"v": "lower"})
        assert _under(api, ("foo",)) == {("foo",)}
        assert _under(api, ("Foo",)) == {("Foo",)}
        assert api.get(("FOO",), "k") is None


@case("prefix_search")
def non_ascii_and_newline_labels(factory: StoreFactory) -> None:
    with factory.open() as api:
        _put_all(api, [("users", "alice"), ("users", "alice\n"), ("用户", "记忆"), ("ü",), ("u",)])
        assert _under(api, ("users", "alice")) == {("users", "alice")}
        assert _under(api, ("users", "alice\n")) == {("users", "alice\n")}
        assert _under(api, ("用户",)) == {("用户", "记忆")}
        assert _under(api, ("ü",)) == {("ü",)}


@case("prefix_search")
def without_query_newest_update_first(factory: StoreFactory) -> None:
    with factory.open() as api:
        for key in ("a", "b", "c", "d"):
            api.put(("ns",), key, {"key": key})
        api.put(("ns",), "b", {"key": "b2"})
        assert keys(api.search(("ns",))) == ["b", "d", "c", "a"]
        assert keys(api.search(("ns",), query="ignored without an index")) == ["b", "d", "c", "a"]


@case("prefix_search")
def limit_and_offset_page_through_results(factory: StoreFactory) -> None:
    with factory.open() as api:
        for i in range(7):
            api.put(("ns", f"sub{i % 3}"), f"k{i}", {"i": i})
        assert keys(api.search(("ns",), limit=3)) == ["k6", "k5", "k4"]
        assert keys(api.search(("ns",), limit=3, offset=3)) == ["k3", "k2", "k1"]
        assert keys(api.search(("ns",), limit=3, offset=6)) == ["k0"]
        assert api.search(("ns",), limit=3, offset=7) == []
        assert len(api.search(("ns",))) == 7, "default limit is 10"
        assert api.search(("ns",), limit=0) == []
