"""Every store case x every enabled set-up (+ the reference store) x sync and async."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("conformance.store")

from conformance.factory import BackendNotReady, Mode, ensure_reachable  # noqa: E402
from conformance.setups import ENABLED, Setup, by_name  # noqa: E402
from conformance.store import StoreCase, StoreFactory, runs, store_connector_for  # noqa: E402
from conformance.testing import marks_for  # noqa: E402

SETUPS = [
    *ENABLED,
    *([] if any(s.name == "reference" for s in ENABLED) else [by_name("reference")]),
]

PARAMS = [
    pytest.param(
        setup,
        store_case,
        mode,
        id=f"{setup.name}-{store_case.capability}-{store_case.name}-{mode}",
        marks=marks_for(setup),
    )
    for setup in SETUPS
    for store_case, mode in runs()
]


@pytest.mark.parametrize(("setup", "store_case", "mode"), PARAMS)
def test_store_meets_case(setup: Setup, store_case: StoreCase, mode: Mode) -> None:
    try:
        connector = store_connector_for(setup)
    except BackendNotReady as exc:
        pytest.skip(f"{setup.name}: {exc}")
    ensure_reachable(setup)
    factory = StoreFactory(setup, connector, mode)
    try:
        store_case(factory)
    except BackendNotReady as exc:  # e.g. no node cache module on this backend yet
        pytest.skip(f"{setup.name}: {exc}")
    finally:
        factory.purge()
