"""The matrix's store rows (conformance/store_runner.py) on a real server: a row without service
rules runs the ttl capability's cases side by side (each under its own key prefix), so their
expiry sleeps overlap — one after another they sleep at least ~27 s (the refresh cases' reads
wait out a 2.4 s window past a 1.5 s step, 4 cases x 4.2 s, 2 x 3 s, the short expiries
~4 s), side by side ~5 s — and each case's outcome is still its own, in the matrix's order."""

from __future__ import annotations

import time

import pytest

from conformance.rules import row_rules
from conformance.setups import by_name
from conformance.store import runs
from conformance.store_runner import run_store_setup

#: the least the ttl cases sleep one after another (see the module's docstring)
SEQUENTIAL_FLOOR = 27.0


@pytest.mark.redis
def test_a_row_without_rules_runs_its_ttl_cases_side_by_side_each_with_its_own_outcome() -> None:
    setup = by_name("redis")
    assert row_rules(setup) == ()  # a row without rules ($GRAPHKEEP_RULES unset)
    began = time.monotonic()
    report = run_store_setup(setup, capabilities=["ttl"])
    took = time.monotonic() - began
    assert [(c.capability, c.name, c.mode) for c in report.cases] == [
        (case.capability, case.name, mode) for case, mode in runs(["ttl"])
    ]
    assert report.ok, [c.error for c in report.cases if c.error]
    assert report.cell("ttl") == "16/16"
    # a generous margin for a loaded machine, still below what the sleeps alone take in turn
    assert took < SEQUENTIAL_FLOOR - 7, f"{took:.1f} s: the ttl cases ran one after another"
