"""Our own spec: what the official conformance suite does not cover (docs/contract.md s13).

Each case is a plain function `case(factory: SaverFactory) -> None` that raises AssertionError
on a violation; `factory.mode` says whether it goes through the sync or the async saver methods.
`runs()` lists every (case, mode) pair, which pytest and `python -m conformance` both use.
"""

from __future__ import annotations

from conformance.factory import Mode
from conformance.spec import (  # noqa: F401  (importing registers the cases)
    delta_history,
    delta_prune_copy,
    metadata,
    prune,
    sync_api,
    thread_ids,
    versions,
    write_ownership,
    writes_order,
)
from conformance.spec._registry import CASES, GROUPS, Case


def runs(groups: list[str] | None = None) -> list[tuple[Case, Mode]]:
    """Every (case, mode) pair of the given groups (all groups by default), in group order."""
    wanted = groups or list(GROUPS)
    unknown = sorted(set(wanted) - set(GROUPS))
    if unknown:
        raise ValueError(f"unknown spec groups {unknown}; known: {', '.join(GROUPS)}")
    return [
        (c, mode)
        for group in GROUPS
        if group in wanted
        for c in CASES
        if c.group == group
        for mode in c.modes
    ]


__all__ = ["CASES", "GROUPS", "Case", "runs"]
