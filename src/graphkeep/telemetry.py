"""``graphkeep.telemetry``: the public home of the OpenTelemetry instrumentation.

Every saver, store, node cache and event log records one CLIENT span and the database client
metrics per call (see :mod:`graphkeep.port.telemetry` and docs/observability.md); this module
names what an application may use directly.
"""

from __future__ import annotations

from graphkeep.port.telemetry import (
    AVAILABLE,
    DURATION_BUCKETS,
    OPTIONS,
    SCOPE,
    Target,
    Telemetry,
    check_telemetry,
)

__all__ = [
    "AVAILABLE",
    "DURATION_BUCKETS",
    "OPTIONS",
    "SCOPE",
    "Target",
    "Telemetry",
    "check_telemetry",
]
