"""filters: search(filter=...) on values, nested keys and operators.

Where PostgresStore is plainly wrong ($gt/$lt compare text, so 10 < 9; dotted paths are not
nested), these cases test the sensible behaviour graphkeep documents instead.
"""

from __future__ import annotations

from typing import Any

from conformance.store._registry import case
from conformance.store.api import StoreApi, StoreFactory
from conformance.store.fixtures import key_set

NS = ("items",)


def _found(api: StoreApi, filter: dict[str, Any]) -> set[str]:
    return key_set(api.search(NS, filter=filter, limit=100))


@case("filters")
def equality_on_one_and_several_keys(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "a", {"author": "Alice", "kind": "doc"})
        api.put(NS, "b", {"author": "Bob", "kind": "doc"})
        api.put(NS, "c", {"author": "Alice", "kind": "image"})
        assert _found(api, {"author": "Alice"}) == {"a", "c"}
        assert _found(api, {"author": "Alice", "kind": "doc"}) == {"a"}
        assert _found(api, {"author": {"$eq": "Bob"}}) == {"b"}
        assert _found(api, {"author": "alice"}) == set(), "string equality is case sensitive"
        assert _found(api, {"missing": "x"}) == set()


@case("filters")
def nested_dicts_and_dotted_paths(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "a", {"user": {"name": "ann", "address": {"city": "Oslo"}}})
        api.put(NS, "b", {"user": {"name": "bob", "address": {"city": "Rome"}}})
        api.put(NS, "c", {"user": "ann"})
        assert _found(api, {"user": {"name": "ann"}}) == {"a"}
        assert _found(api, {"user.name": "ann"}) == {"a"}
        assert _found(api, {"user.address.city": "Rome"}) == {"b"}
        assert _found(api, {"user": {"address": {"city": "Oslo"}}}) == {"a"}
        assert _found(api, {"user.address": {"city": {"$ne": "Oslo"}}}) == {"b"}
        assert _found(api, {"user": "ann"}) == {"c"}


@case("filters")
def keys_with_hyphens_digits_and_spaces(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
        api.put(NS, "digit", {"123abc": "ok", "user": {"123abc": "ok2"}, "0": "zero"})
        api.put(NS, "space", {"a key": "v", "quote'\"": "q", "ключ": "значение"})
        assert _found(api, {"access-level": "public"}) == {"hyphen"}
        assert _found(api, {"user.access-level": "nested"}) == {"hyphen"}
        assert _found(api, {"123abc": "ok"}) == {"digit"}
        assert _found(api, {"user.123abc": "ok2"}) == {"digit"}
        assert _found(api, {"0": "zero"}) == {"digit"}
        assert _found(api, {"a key": "v"}) == {"space"}
        assert _found(api, {"quote'\"": "q"}) == {"space"}
        assert _found(api, {"ключ": "значение"}) == {"space"}


@case("filters")
def comparison_operators_on_numbers(factory: StoreFactory) -> None:
    with factory.open() as api:
        for key, price in {"p9": 9, "p10": 10, "p10.5": 10.5, "p20": 20, "neg": -3}.items():
            api.put(NS, key, {"price": price})
        api.put(NS, "text", {"price": "15"})
        api.put(NS, "none", {"price": None})
        api.put(NS, "absent", {"other": 1})
        assert _found(api, {"price": {"$gt": 10}}) == {"p10.5", "p20"}
        assert _found(api, {"price": {"$gte": 10}}) == {"p10", "p10.5", "p20"}
        assert _found(api, {"price": {"$lt": 10}}) == {"p9", "neg"}
        assert _found(api, {"price": {"$lte": 10.0}}) == {"p9", "p10", "neg"}
        assert _found(api, {"price": {"$gt": 9, "$lt": 20}}) == {"p10", "p10.5"}
        assert _found(api, {"price": {"$lt": 0}}) == {"neg"}
        assert _found(api, {"price": 10}) == {"p10"}
        assert _found(api, {"price": 10.0}) == {"p10"}, "1 == 1.0 as in JSON"


@case("filters")
def comparison_operators_on_strings(factory: StoreFactory) -> None:
    with factory.open() as api:
        for key in ("apple", "banana", "cherry", "Zebra"):
            api.put(NS, key, {"name": key})
        api.put(NS, "number", {"name": 5})
        assert _found(api, {"name": {"$gt": "banana"}}) == {"cherry"}
        assert _found(api, {"name": {"$gte": "banana"}}) == {"banana", "cherry"}
        assert _found(api, {"name": {"$lt": "banana"}}) == {"apple", "Zebra"}
        assert _found(api, {"name": {"$lte": "apple"}}) == {"apple", "Zebra"}


@case("filters")
def ne_matches_present_values_that_differ(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "red", {"color": "red"})
        api.put(NS, "blue", {"color": "blue"})
        api.put(NS, "one", {"color": 1})
        api.put(NS, "absent", {"shape": "round"})
        assert _found(api, {"color": {"$ne": "red"}}) == {"blue", "one"}
        assert _found(api, {"color": {"$ne": 1}}) == {"red", "blue"}


@case("filters")
def booleans_are_not_numbers(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "on", {"active": True})
        api.put(NS, "off", {"active": False})
        api.put(NS, "one", {"active": 1})
        api.put(NS, "zero", {"active": 0})
        assert _found(api, {"active": True}) == {"on"}
        assert _found(api, {"active": False}) == {"off"}
        assert _found(api, {"active": 1}) == {"one"}
        assert _found(api, {"active": {"$eq": 0}}) == {"zero"}
        assert _found(api, {"active": {"$ne": True}}) == {"off", "one", "zero"}


@case("filters")
def none_matches_an_explicit_null(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "null", {"owner": None})
        api.put(NS, "set", {"owner": "ann"})
        assert "null" in _found(api, {"owner": None})
        assert "set" not in _found(api, {"owner": None})
        assert _found(api, {"owner": {"$ne": None}}) == {"set"}


@case("filters")
def lists_and_objects_compare_whole(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "ab", {"tags": ["a", "b"], "meta": {"x": 1, "y": [1, 2]}})
        api.put(NS, "ba", {"tags": ["b", "a"], "meta": {"x": 1}})
        api.put(NS, "a", {"tags": ["a"]})
        assert _found(api, {"tags": ["a", "b"]}) == {"ab"}
        assert _found(api, {"tags": ("a",)}) == {"a"}
        assert _found(api, {"tags": {"$eq": ["b", "a"]}}) == {"ba"}
        assert _found(api, {"meta.y": [1, 2]}) == {"ab"}
        assert _found(api, {"tags": "a"}) == set(), "no list membership: equality is whole"


@case("filters")
def filters_combine_with_limit_and_offset(factory: StoreFactory) -> None:
    with factory.open() as api:
        for i in range(12):
            api.put(NS, f"k{i:02d}", {"even": i % 2 == 0, "i": i})
        pages = [
            [i.key for i in api.search(NS, filter={"even": True}, limit=4, offset=o)]
            for o in (0, 4, 8)
        ]
        # newest first: k10, k08, ... k00
        assert pages == [["k10", "k08", "k06", "k04"], ["k02", "k00"], []]
        found = api.search(NS, filter={"i": {"$gte": 3}}, limit=3, offset=2)
        assert [i.key for i in found] == ["k09", "k08", "k07"]


@case("filters")
def infinities_nan_and_huge_numbers_as_sqlite_store_handles_them(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(NS, "a", {"price": 10})
        api.put(NS, "b", {"price": 20})
        api.put(NS, "c", {"price": -30})
        api.put(NS, "none", {"other": 1})
        inf = float("inf")
        assert _found(api, {"price": {"$lt": inf}}) == {"a", "b", "c"}
        assert _found(api, {"price": {"$lte": inf}}) == {"a", "b", "c"}
        assert _found(api, {"price": {"$gt": -inf}}) == {"a", "b", "c"}
        assert _found(api, {"price": {"$gt": inf}}) == set()
        assert _found(api, {"price": {"$lt": -inf}}) == set()
        assert _found(api, {"price": {"$eq": float("nan")}}) == set()
        assert _found(api, {"price": float("nan")}) == set()
        assert _found(api, {"price": {"$ne": float("nan")}}) == {"a", "b", "c"}
        assert _found(api, {"price": {"$gt": float("nan")}}) == set()
        assert _found(api, {"price": {"$lt": 10**100}}) == {"a", "b", "c"}
        assert _found(api, {"price": {"$gt": -(10**100)}}) == {"a", "b", "c"}


@case("filters")
def a_key_that_is_not_a_path_is_an_invalid_filter_key(factory: StoreFactory) -> None:
    from graphkeep.errors import InvalidFilter

    with factory.open() as api:
        api.put(NS, "a", {"access": "public"})
        injection = "access') = 'public' OR '1'='1' OR json_extract(value, '$."
        for key in (injection, "a..b", ".a", "$where"):
            try:
                api.search(NS, filter={key: "x"})
            except InvalidFilter as exc:
                assert "Invalid filter key" in str(exc)  # the words SqliteStore's tests match
            else:
                raise AssertionError(f"{key!r} was accepted")
        assert _found(api, {"access": "public' OR '1'='1"}) == set(), "values are data"
