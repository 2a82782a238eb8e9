"""The spec case registry: plain functions taking a `SaverFactory`, grouped by capability."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance.factory import BOTH, Mode, SaverFactory

CaseFn = Callable[[SaverFactory], None]

GROUPS: tuple[str, ...] = (
    "sync_api",
    "delta_history",
    "versions",
    "metadata",
    "writes_order",
    "thread_ids",
    "delta_prune_copy",
    "write_ownership",
    "prune",
)


@dataclass(frozen=True)
class Case:
    group: str
    name: str
    fn: CaseFn
    modes: tuple[Mode, ...]

    def __call__(self, factory: SaverFactory) -> None:
        self.fn(factory)


CASES: list[Case] = []


def case(group: str, *, modes: tuple[Mode, ...] = BOTH) -> Callable[[CaseFn], CaseFn]:
    """Register a spec case; `modes` says whether it runs through sync, async or both APIs."""
    if group not in GROUPS:
        raise ValueError(f"unknown spec group {group!r}")

    def register(fn: CaseFn) -> CaseFn:
        CASES.append(Case(group, fn.__name__, fn, modes))
        return fn

    return register
