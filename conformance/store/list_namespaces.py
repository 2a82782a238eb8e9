"""list_namespaces: prefix/suffix conditions by whole labels, '*' wildcards, depth, paging."""

from __future__ import annotations

from langgraph.store.base import ListNamespacesOp, MatchCondition, PutOp

from conformance.store._registry import case
from conformance.store.api import StoreApi, StoreFactory

SPACES = [
    ("test", "documents", "public"),
    ("test", "documents", "private"),
    ("test", "images", "public"),
    ("test", "images", "private"),
    ("prod", "documents", "public"),
    ("prod", "documents", "private"),
    ("users", "123"),
    ("users", "456"),
    ("users", "789", "settings"),
    ("admin", "users", "789"),
    ("guests", "456", "preferences"),
]


def _fill(api: StoreApi) -> None:
    api.batch([_put(ns) for ns in SPACES])


def _put(ns: tuple[str, ...]) -> PutOp:
    return PutOp(ns, "dummy", {"content": "dummy"})


@case("list_namespaces")
def lists_every_namespace_sorted(factory: StoreFactory) -> None:
    with factory.open() as api:
        _fill(api)
        api.put(SPACES[0], "second", {"v": 2})  # one namespace, two items: listed once
        assert api.list_namespaces() == sorted(SPACES)


@case("list_namespaces")
def prefix_and_suffix_match_whole_labels(factory: StoreFactory) -> None:
    with factory.open() as api:
        _fill(api)
        api.put(("uid", "users", "malice"), "k", {"v": 1})
        api.put(("uid", "users", "alice"), "k", {"v": 1})
        api.put(("tes",), "k", {"v": 1})
        test = api.list_namespaces(prefix=("test",))
        assert test == sorted(ns for ns in SPACES if ns[0] == "test")
        assert api.list_namespaces(prefix=["test", "images"]) == [
            ("test", "images", "private"),
            ("test", "images", "public"),
        ]
        public = api.list_namespaces(suffix=("public",))
        assert public == sorted(ns for ns in SPACES if ns[-1] == "public")
        assert api.list_namespaces(suffix=["alice"]) == [("uid", "users", "alice")]
        both = api.list_namespaces(prefix=("test",), suffix=("private",))
        assert both == [("test", "documents", "private"), ("test", "images", "private")]
        assert api.list_namespaces(prefix=("nothing",)) == []


@case("list_namespaces")
def star_matches_exactly_one_label(factory: StoreFactory) -> None:
    with factory.open() as api:
        _fill(api)
        assert api.list_namespaces(prefix=("users", "*")) == [
            ("users", "123"),
            ("users", "456"),
            ("users", "789", "settings"),
        ]
        assert api.list_namespaces(suffix=("*", "preferences")) == [
            ("guests", "456", "preferences")
        ]
        assert api.list_namespaces(prefix=("*", "users")) == [("admin", "users", "789")]
        assert api.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
        assert api.list_namespaces(prefix=("test", "*", "public")) == [
            ("test", "documents", "public"),
            ("test", "images", "public"),
        ]


@case("list_namespaces")
def max_depth_truncates_and_deduplicates(factory: StoreFactory) -> None:
    with factory.open() as api:
        _fill(api)
        assert api.list_namespaces(max_depth=1) == [
            ("admin",),
            ("guests",),
            ("prod",),
            ("test",),
            ("users",),
        ]
        assert api.list_namespaces(prefix=("test",), max_depth=2) == [
            ("test", "documents"),
            ("test", "images"),
        ]
        assert api.list_namespaces(prefix=("users",), max_depth=2) == [
            ("users", "123"),
            ("users", "456"),
            ("users", "789"),
        ]


@case("list_namespaces")
def limit_and_offset_page_in_sorted_order(factory: StoreFactory) -> None:
    with factory.open() as api:
        _fill(api)
        ordered = sorted(SPACES)
        assert api.list_namespaces(limit=3) == ordered[:3]
        assert api.list_namespaces(limit=3, offset=3) == ordered[3:6]
        assert api.list_namespaces(limit=100, offset=10) == ordered[10:]
        assert api.list_namespaces(limit=5, offset=len(SPACES)) == []
        assert api.list_namespaces(max_depth=1, limit=2, offset=1) == [("guests",), ("prod",)]


@case("list_namespaces")
def metacharacters_and_newlines_are_literal(factory: StoreFactory) -> None:
    pairs = [
        ("star*", "starX"),
        ("q?m", "qXm"),
        ("br[ack]et", "brXacXket"),
        ("user_1", "userX1"),
        ("a%b", "axxb"),
        ("plus+", "plusX"),
        ("back\\slash", "backXslash"),
    ]
    with factory.open() as api:
        for label, decoy in pairs:
            api.put((label,), "k", {"v": 1})
            api.put((decoy,), "k", {"v": 1})
            api.put((label, "child"), "k", {"v": 1})
        api.put(("users", "alice"), "k", {"v": 1})
        api.put(("users", "alice\n"), "k", {"v": 2})
        for label, _decoy in pairs:
            assert api.list_namespaces(prefix=[label]) == [(label,), (label, "child")]
            assert api.list_namespaces(prefix=[label, "child"]) == [(label, "child")]
            assert api.list_namespaces(suffix=[label]) == [(label,)]
        assert api.list_namespaces(suffix=["alice"]) == [("users", "alice")]
        assert api.list_namespaces(prefix=["users", "alice"]) == [("users", "alice")]
        assert api.list_namespaces(prefix=["users", "alice\n"]) == [("users", "alice\n")]


@case("list_namespaces")
def list_namespaces_op_in_a_batch(factory: StoreFactory) -> None:
    with factory.open() as api:
        _fill(api)
        results = api.batch(
            [
                ListNamespacesOp(match_conditions=None, max_depth=None, limit=100, offset=0),
                ListNamespacesOp(max_depth=2, limit=100),
                ListNamespacesOp((MatchCondition("suffix", ("public",)),), limit=100),
            ]
        )
        assert results[0] == sorted(SPACES)
        assert all(len(ns) <= 2 for ns in results[1])
        assert results[2] == sorted(ns for ns in SPACES if ns[-1] == "public")
