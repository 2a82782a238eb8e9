"""The official conformance suite per enabled set-up: every capability detected, all passed."""

from __future__ import annotations

import pytest

from conformance.factory import Connector
from conformance.official import CAPABILITIES, CapabilityOutcome, run_official
from conformance.setups import SAVER_ENABLED, Setup
from conformance.testing import connector_or_skip, marks_for
from graphkeep.testing.rules.checks import Checks

_RESULTS: dict[str, dict[str, CapabilityOutcome]] = {}


def _official(
    setup: Setup, connector: Connector, checks: Checks | None
) -> dict[str, CapabilityOutcome]:
    """The suite runs once per set-up (under its rules); each capability is then its own test."""
    if setup.name not in _RESULTS:
        _RESULTS[setup.name] = run_official(setup, connector, checks)
    return _RESULTS[setup.name]


@pytest.mark.parametrize(
    ("setup", "capability"),
    [
        pytest.param(setup, capability, id=f"{setup.name}-{capability}", marks=marks_for(setup))
        for setup in SAVER_ENABLED
        for capability in CAPABILITIES
    ],
)
def test_official_capability_is_detected_and_fully_passes(
    setup: Setup, capability: str, row_checks: Checks | None
) -> None:
    outcome = _official(setup, connector_or_skip(setup), row_checks)[capability]
    assert outcome.ok, f"{capability} {outcome.cell()}:\n" + "\n".join(outcome.failures)
