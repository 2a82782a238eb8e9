"""The store case registry: plain functions taking a `StoreFactory`, grouped by capability."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance.factory import BOTH, Mode
from conformance.store.api import StoreFactory

CaseFn = Callable[[StoreFactory], None]

CAPABILITIES: tuple[str, ...] = (
    "get_put_delete",
    "batch",
    "filters",
    "prefix_search",
    "list_namespaces",
    "ttl",
    "semantic_search",
    "bad_input",
    "cache",  # LangGraph BaseCache (node cache); cases in cache.py
    "watch",  # saver.watch / awatch: a thread's checkpoints as committed; cases in watch.py
    "events",  # the run event log (graphkeep.connect_events); cases in events.py
    "effects",  # the effect ledger (graphkeep.connect_effects); cases in effects.py
)


@dataclass(frozen=True)
class StoreCase:
    capability: str
    name: str
    fn: CaseFn
    modes: tuple[Mode, ...]

    def __call__(self, factory: StoreFactory) -> None:
        self.fn(factory)


CASES: list[StoreCase] = []


def case(capability: str, *, modes: tuple[Mode, ...] = BOTH) -> Callable[[CaseFn], CaseFn]:
    """Register a store case; it runs through the sync API, the async API or both."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown store capability {capability!r}")

    def register(fn: CaseFn) -> CaseFn:
        CASES.append(StoreCase(capability, fn.__name__, fn, modes))
        return fn

    return register
