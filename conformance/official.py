"""The official PyPI suite (`langgraph-checkpoint-conformance`) against one set-up.

Each capability suite gets a fresh async saver with its own `key_prefix`. A capability the saver
does not override is "not implemented", which counts as a failure here: graphkeep must detect
and pass all eight.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)

from conformance.factory import Connector, new_key_prefix
from conformance.setups import Setup

CAPABILITIES: tuple[str, ...] = tuple(cap.value for cap in Capability)

# How many tests each capability has, so a cell can say "17/17" even when nothing ran.
EXPECTED_TESTS: dict[str, int] = {
    "put": len(test_put.ALL_PUT_TESTS),
    "put_writes": len(test_put_writes.ALL_PUT_WRITES_TESTS),
    "get_tuple": len(test_get_tuple.ALL_GET_TUPLE_TESTS),
    "list": len(test_list.ALL_LIST_TESTS),
    "delete_thread": len(test_delete_thread.ALL_DELETE_THREAD_TESTS),
    "delete_for_runs": len(test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS),
    "copy_thread": len(test_copy_thread.ALL_COPY_THREAD_TESTS),
    "prune": len(test_prune.ALL_PRUNE_TESTS),
}


@dataclass
class CapabilityOutcome:
    name: str
    expected: int
    passed: int = 0
    failed: int = 0
    not_implemented: bool = False
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.not_implemented and self.failed == 0 and self.passed == self.expected

    def cell(self) -> str:
        if self.not_implemented:
            return "n/i"
        return f"{self.passed}/{self.expected}"


def _outcomes(report: CapabilityReport) -> dict[str, CapabilityOutcome]:
    outcomes: dict[str, CapabilityOutcome] = {}
    for name in CAPABILITIES:
        outcome = CapabilityOutcome(name, EXPECTED_TESTS[name])
        result = report.results.get(name)
        if result is None or not result.detected:
            outcome.not_implemented = True
            outcome.failures.append(f"{name}: not implemented (a{name} is not overridden)")
        else:
            outcome.passed, outcome.failed = result.tests_passed, result.tests_failed
            outcome.failures.extend(result.failures)
        outcomes[name] = outcome
    return outcomes


def _errored(message: str) -> dict[str, CapabilityOutcome]:
    return {
        name: CapabilityOutcome(
            name, EXPECTED_TESTS[name], failed=EXPECTED_TESTS[name], failures=[message]
        )
        for name in CAPABILITIES
    }


async def arun_official(setup: Setup, connector: Connector) -> dict[str, CapabilityOutcome]:
    """Run the official suite; never raises, a crash marks every capability failed."""

    async def factory() -> AsyncIterator[Any]:
        prefix = new_key_prefix()
        async with connector.aconnect(setup.url, key_prefix=prefix, **setup.options) as saver:
            yield saver

    registered = checkpointer_test(name=f"graphkeep[{setup.name}]")(factory)
    try:
        report = await validate(registered)
    except Exception:
        return _errored(f"official suite crashed:\n{traceback.format_exc()}")
    return _outcomes(report)


def run_official(setup: Setup, connector: Connector) -> dict[str, CapabilityOutcome]:
    return asyncio.run(arun_official(setup, connector))
