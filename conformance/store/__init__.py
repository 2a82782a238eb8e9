"""The store suite: LangGraph's BaseStore contract (PostgresStore semantics), by capability.

Each case is a plain function `case(factory: StoreFactory) -> None` raising AssertionError on
a violation; `factory.open(**options)` yields the store behind one call shape, served by its
sync methods or its async ones (`factory.mode`), so each case is written once. `runs()` lists
every (case, mode) pair; pytest (`test_store.py`) and `python -m conformance` both use it.
The "cache" capability (node cache, `cache.py`) runs where a backend has a cache module;
"watch" (`watch.py`: ``saver.watch`` / ``awatch``) and "events" (`events.py`: the run event
log of ``graphkeep.connect_events``) where the backend has them — the reference set-up has
neither, so those cells read "skip" there.
"""

from __future__ import annotations

from conformance.factory import Mode
from conformance.store import (  # noqa: F401  (importing registers the cases)
    bad_input,
    batch,
    cache,
    effects,
    events,
    filters,
    get_put_delete,
    list_namespaces,
    prefix_search,
    semantic_search,
    ttl,
    watch,
)
from conformance.store._registry import CAPABILITIES, CASES, StoreCase
from conformance.store.api import (
    CapabilityMissing,
    NotOffered,
    StoreFactory,
    store_connector_for,
)


def runs(capabilities: list[str] | None = None) -> list[tuple[StoreCase, Mode]]:
    """Every (case, mode) pair of the given capabilities (all by default), in order."""
    wanted = capabilities or list(CAPABILITIES)
    unknown = sorted(set(wanted) - set(CAPABILITIES))
    if unknown:
        raise ValueError(f"unknown store capabilities {unknown}; known: {', '.join(CAPABILITIES)}")
    return [
        (c, mode)
        for capability in CAPABILITIES
        if capability in wanted
        for c in CASES
        if c.capability == capability
        for mode in c.modes
    ]


__all__ = [
    "CAPABILITIES",
    "CASES",
    "CapabilityMissing",
    "NotOffered",
    "StoreCase",
    "StoreFactory",
    "runs",
    "store_connector_for",
]
