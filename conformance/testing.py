"""pytest glue shared by `test_official.py` and `test_spec.py`."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.factory import (
    BackendNotReady,
    Connector,
    ServiceUnavailable,
    connector_for,
    ensure_reachable,
)
from conformance.setups import Setup


def connector_or_skip(setup: Setup) -> Connector:
    """Skip while graphkeep does not exist yet; FAIL (not skip) when the server is down."""
    try:
        connector = connector_for(setup)
    except BackendNotReady as exc:
        not_ready: str | None = f"{setup.name}: {exc}"
    else:
        not_ready = None
    if not_ready is not None:
        pytest.skip(not_ready)
    try:
        ensure_reachable(setup)
    except ServiceUnavailable as exc:
        down = str(exc)
    else:
        return connector
    pytest.fail(down, pytrace=False)


def marks_for(setup: Setup) -> list[Any]:
    return [getattr(pytest.mark, setup.marker)] if setup.marker else []
