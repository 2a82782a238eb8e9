"""Every spec case x every enabled set-up x the modes the case runs in (sync/async)."""

from __future__ import annotations

import pytest

from conformance.factory import Mode, SaverFactory
from conformance.setups import SAVER_ENABLED, Setup
from conformance.spec import Case, runs
from conformance.testing import connector_or_skip, marks_for

PARAMS = [
    pytest.param(
        setup,
        spec_case,
        mode,
        id=f"{setup.name}-{spec_case.group}-{spec_case.name}-{mode}",
        marks=marks_for(setup),
    )
    for setup in SAVER_ENABLED
    for spec_case, mode in runs()
]


@pytest.mark.parametrize(("setup", "spec_case", "mode"), PARAMS)
def test_saver_meets_spec_case(setup: Setup, spec_case: Case, mode: Mode) -> None:
    spec_case(SaverFactory(setup, connector_or_skip(setup), mode))
