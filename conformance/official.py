"""The official PyPI suite (`langgraph-checkpoint-conformance`) against one set-up.

Each capability suite gets a fresh async saver with its own `key_prefix`. A capability the saver
does not override is "not implemented", which counts as a failure here: graphkeep must detect
and pass all eight.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks
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
from conformance.rules import owned, report
from conformance.setups import Setup
from graphkeep.testing.rules import Violation
from graphkeep.testing.rules.checks import Checks

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
    #: requests the set-up's rules refuse, sent by this capability's suite
    refused: int = 0

    @property
    def ok(self) -> bool:
        passed = self.failed == 0 and self.passed == self.expected
        return not self.not_implemented and passed and not self.refused

    def cell(self) -> str:
        if self.not_implemented:
            return "n/i"
        return f"{self.passed}/{self.expected}" + (" rules" if self.refused else "")


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


class _ByCapability:
    """The requests each capability's suite sends are that capability's (``checks``)."""

    def __init__(self, setup: Setup, checks: Checks | None) -> None:
        self.setup, self.checks = setup, checks
        self.refused: dict[str, list[Violation]] = {}
        self.open: AbstractContextManager[list[Violation]] | None = None

    def start(self, capability: str, detected: bool) -> None:
        self.end(capability)
        self.open = owned(self.checks, f"{self.setup.name}: official {capability}")
        self.refused[capability] = self.open.__enter__()

    def end(self, capability: str) -> None:
        if self.open is not None:
            self.open.__exit__(None, None, None)
            self.open = None

    def apply(self, outcomes: dict[str, CapabilityOutcome]) -> dict[str, CapabilityOutcome]:
        self.end("")
        left = self.checks.outside() if self.checks is not None else []
        if left:  # a saver's creation before its capability started: the next one's
            self.refused.setdefault(CAPABILITIES[0], []).extend(left)
        for name, refused in self.refused.items():
            if refused and name in outcomes:
                outcomes[name].refused = len(refused)
                outcomes[name].failures.append(f"{name}: {report(refused)}")
        return outcomes


async def arun_official(
    setup: Setup, connector: Connector, checks: Checks | None = None
) -> dict[str, CapabilityOutcome]:
    """Run the official suite; never raises, a crash marks every capability failed. The
    requests a capability's suite sends that the row's rules refuse (``checks``) fail it."""

    async def factory() -> AsyncIterator[Any]:
        prefix = new_key_prefix()
        async with connector.aconnect(setup.url, key_prefix=prefix, **setup.options) as saver:
            yield saver

    registered = checkpointer_test(name=f"graphkeep[{setup.name}]")(factory)
    by_capability = _ByCapability(setup, checks)
    progress = ProgressCallbacks(
        on_capability_start=by_capability.start, on_capability_end=by_capability.end
    )
    try:
        result = await validate(registered, progress=progress)
    except Exception:
        crashed = _errored(f"official suite crashed:\n{traceback.format_exc()}")
        return by_capability.apply(crashed)
    return by_capability.apply(_outcomes(result))


def run_official(
    setup: Setup, connector: Connector, checks: Checks | None = None
) -> dict[str, CapabilityOutcome]:
    return asyncio.run(arun_official(setup, connector, checks))
