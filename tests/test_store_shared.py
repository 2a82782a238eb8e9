"""Unit tests of graphkeep.store: filters, matching, ranking, namespace listing."""

from __future__ import annotations

import math
from typing import Any

import pytest
from langgraph.store.base import ListNamespacesOp, MatchCondition

from graphkeep.errors import InvalidFilter
from graphkeep.store.filters import compile_filter, matches, satisfies
from graphkeep.store.port import Condition, SearchQuery, StoredItem, Vector
from graphkeep.store.ranking import list_page, literal_prefix, namespace_matches, rank, score
from graphkeep.store.values import (
    dotted_namespace,
    namespace_from_dotted,
    pack_vector,
    unpack_vector,
)


def _item(
    key: str, value: dict[str, Any], updated: int, ns: tuple[str, ...] = ("ns",), **kw: Any
) -> StoredItem:
    return StoredItem(ns, key, value, created_us=updated, updated_us=updated, **kw)


def _query(**kw: Any) -> SearchQuery:
    base: dict[str, Any] = {
        "prefix": (),
        "conditions": (),
        "limit": 10,
        "offset": 0,
        "refresh": False,
    }
    return SearchQuery(**{**base, "now_ms": 1_000, **kw})


def test_compile_filter_flattens_nested_dicts_and_dotted_paths_alike() -> None:
    nested = compile_filter({"user": {"address": {"city": "Oslo"}}})
    dotted = compile_filter({"user.address.city": "Oslo"})
    mixed = compile_filter({"user.address": {"city": "Oslo"}})
    assert nested == dotted == mixed == (Condition(("user", "address", "city"), "$eq", "Oslo"),)


def test_compile_filter_reads_operators_and_keeps_several_per_key() -> None:
    conditions = compile_filter({"score": {"$gt": 3, "$lte": 9}, "tags": ("a", "b")})
    assert conditions == (
        Condition(("score",), "$gt", 3),
        Condition(("score",), "$lte", 9),
        Condition(("tags",), "$eq", ["a", "b"]),
    )
    assert compile_filter(None) == () and compile_filter({}) == ()


@pytest.mark.parametrize(
    "bad",
    [
        {"$eq": 1},
        {"a": {"$regex": "x"}},
        {"a": {"$gt": None}},
        {"a": {"$gt": [1]}},
        {"a..b": 1},
        {"": 1},
        {"a": object()},
        [("a", 1)],
    ],
)
def test_compile_filter_rejects_what_it_cannot_answer(bad: object) -> None:
    # (NaN and infinities are answered: NaN matches nothing, infinity bounds every number)
    with pytest.raises(InvalidFilter):
        compile_filter(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "operand", "value", "expected"),
    [
        ("$eq", 1, 1.0, True),
        ("$eq", True, 1, False),
        ("$eq", 1, True, False),
        ("$eq", None, None, True),
        ("$eq", ["a", "b"], ["a", "b"], True),
        ("$eq", ["a", "b"], ["b", "a"], False),
        ("$eq", "a", ["a"], False),
        ("$ne", "x", "y", True),
        ("$ne", "x", "x", False),
        ("$ne", 1, True, True),
        ("$gt", 9, 10, True),
        ("$gt", 10, 9, False),  # numbers, not text: "9" > "10" as text
        ("$gte", 10, 10.0, True),
        ("$lt", "b", "a", True),
        ("$lt", "b", "B", True),
        ("$lte", "a", "a", True),
        ("$gt", 1, "2", False),  # a string never compares with a number
        ("$gt", "1", 2, False),
        ("$gt", 0, True, False),  # booleans are not numbers
    ],
)
def test_satisfies_compares_like_json(
    op: str, operand: object, value: object, expected: bool
) -> None:
    assert satisfies(Condition(("k",), op, operand), {"k": value}) is expected


def test_missing_keys_match_only_eq_none() -> None:
    value = {"other": 1}
    assert satisfies(Condition(("k",), "$eq", None), value)
    for op, operand in [("$eq", 1), ("$ne", 1), ("$gt", 0), ("$lt", "z")]:
        assert not satisfies(Condition(("k",), op, operand), value), op
    assert not satisfies(Condition(("other", "deeper"), "$eq", 1), value)


def test_matches_needs_every_condition() -> None:
    conditions = compile_filter({"a": 1, "b": {"$gt": 2}})
    assert matches({"a": 1, "b": 3}, conditions)
    assert not matches({"a": 1, "b": 2}, conditions)
    assert matches({"x": 1}, ())


def test_rank_without_vector_orders_newest_first_then_pages() -> None:
    items = [_item(k, {"i": i}, updated=100 + i) for i, k in enumerate("abcde")]
    assert [c.key for c in rank(items, _query())] == ["e", "d", "c", "b", "a"]
    assert [c.key for c in rank(items, _query(limit=2, offset=1))] == ["d", "c"]
    assert rank(items, _query(offset=5)) == []


def test_rank_drops_expired_out_of_prefix_and_unmatched_items_before_paging() -> None:
    items = [
        _item("live", {"ok": True}, 5),
        _item("expired", {"ok": True}, 4, expires_ms=1_000),  # expiry == now: gone
        _item("filtered", {"ok": False}, 3),
        _item("elsewhere", {"ok": True}, 2, ns=("other",)),
        _item("child", {"ok": True}, 1, ns=("ns", "child")),
        _item("later", {"ok": True}, 0, expires_ms=1_001),
    ]
    query = _query(prefix=("ns",), conditions=compile_filter({"ok": True}), limit=2)
    assert [c.key for c in rank(items, query)] == ["live", "child"]
    assert [c.key for c in rank(items, _query(prefix=("ns",), offset=2))] == ["child", "later"]


def test_rank_with_vector_uses_the_best_vector_and_skips_unembedded() -> None:
    def vec(*values: float) -> Vector:
        return Vector("text", "d", pack_vector(values))

    items = [
        _item("two", {}, 1, vectors=[vec(0, 1), vec(1, 0)]),
        _item("one", {}, 2, vectors=[vec(1, 1)]),
        _item("none", {}, 3),
    ]
    page = rank(items, _query(vector=(1.0, 0.0)))
    assert [c.key for c in page] == ["two", "one"]
    assert page[0].score == pytest.approx(1.0)
    assert page[1].score == pytest.approx(1 / math.sqrt(2))


@pytest.mark.parametrize(
    ("distance", "expected"),
    [("cosine", 11 / (math.sqrt(5) * 5)), ("inner_product", 11.0), ("l2", -math.sqrt(8))],
)
def test_scores_follow_postgres_store_conventions(distance: str, expected: float) -> None:
    assert score((1.0, 2.0), (3.0, 4.0), distance) == pytest.approx(expected)


def test_cosine_of_a_zero_vector_is_zero() -> None:
    assert score((0.0, 0.0), (1.0, 2.0), "cosine") == 0.0


def test_vectors_pack_as_float32() -> None:
    data = pack_vector([0.5, -1.25, 3.0])
    assert len(data) == 12
    assert unpack_vector(data) == (0.5, -1.25, 3.0)


def test_namespace_text_round_trips() -> None:
    for ns in [("a",), ("a", "b c", "ü", "x\n"), ("a_1", "%", "*")]:
        assert namespace_from_dotted(dotted_namespace(ns)) == ns


def _list_op(
    prefix: list[str] | None = None,
    suffix: list[str] | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> ListNamespacesOp:
    conditions = []
    if prefix is not None:
        conditions.append(MatchCondition("prefix", tuple(prefix)))
    if suffix is not None:
        conditions.append(MatchCondition("suffix", tuple(suffix)))
    return ListNamespacesOp(tuple(conditions) or None, max_depth, limit, offset)


SPACES = [
    ("users", "123"),
    ("users", "789", "settings"),
    ("admin", "users", "789"),
    ("guests", "456", "preferences"),
    ("uid", "users", "malice"),
]


def test_namespace_matches_whole_labels_with_one_label_wildcards() -> None:
    assert namespace_matches(("users", "123"), _list_op(prefix=["users"]))
    assert not namespace_matches(("users2",), _list_op(prefix=["users"]))
    assert namespace_matches(("users", "123"), _list_op(prefix=["*", "123"]))
    assert not namespace_matches(("uid", "users", "malice"), _list_op(suffix=["alice"]))
    assert not namespace_matches(("a",), _list_op(prefix=["a", "*"]))
    assert namespace_matches(("a", "b"), _list_op(prefix=["a"], suffix=["b"]))


def test_literal_prefix_stops_at_the_first_wildcard() -> None:
    assert literal_prefix(_list_op(prefix=["users", "*", "x"])) == ("users",)
    assert literal_prefix(_list_op(prefix=["*", "x"])) == ()
    assert literal_prefix(_list_op(suffix=["x"])) == ()


def test_list_page_truncates_deduplicates_sorts_and_pages() -> None:
    assert list_page(SPACES, _list_op(max_depth=1)) == [
        ("admin",),
        ("guests",),
        ("uid",),
        ("users",),
    ]
    assert list_page(SPACES, _list_op(prefix=["users"], max_depth=2)) == [
        ("users", "123"),
        ("users", "789"),
    ]
    assert list_page(SPACES, _list_op(limit=2, offset=1)) == [
        ("guests", "456", "preferences"),
        ("uid", "users", "malice"),
    ]
    assert list_page(SPACES, _list_op(suffix=["*", "preferences"])) == [
        ("guests", "456", "preferences")
    ]
