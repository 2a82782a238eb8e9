"""cache: LangGraph's BaseCache (node cache) through `graphkeep.connect_cache`.

Runs where the backend has a `cache` module; the reference set-up uses LangGraph's
`InMemoryCache`. A backend without one is reported as skipped.
"""

from __future__ import annotations

import time

from conformance.store._registry import case
from conformance.store.api import StoreFactory


@case("cache")
def set_then_get_round_trips_values(factory: StoreFactory) -> None:
    with factory.open_cache() as cache:
        first, second = (("node", "a"), "k1"), (("node", "b"), "k2")
        cache.set({first: ({"x": [1, 2]}, None), second: ("text", 60)})
        got = cache.get([first, second, (("node", "a"), "missing")])
        assert got == {first: {"x": [1, 2]}, second: "text"}


@case("cache")
def entries_expire_after_their_ttl_seconds(factory: StoreFactory) -> None:
    with factory.open_cache() as cache:
        short, kept = (("node",), "short"), (("node",), "kept")
        cache.set({short: ("v", 1), kept: ("w", None)})
        time.sleep(1.3)
        assert cache.get([short, kept]) == {kept: "w"}


@case("cache")
def clear_by_namespace_or_everything(factory: StoreFactory) -> None:
    with factory.open_cache() as cache:
        a, b = (("node", "a"), "k"), (("node", "b"), "k")
        cache.set({a: (1, None), b: (2, None)})
        cache.clear([("node", "a")])
        assert cache.get([a, b]) == {b: 2}
        cache.clear()
        assert cache.get([a, b]) == {}
