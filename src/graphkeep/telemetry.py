"""``graphkeep.telemetry``: the public home of the OpenTelemetry instrumentation.

Every saver, store, node cache and event log records one CLIENT span and the database client
metrics per call (see :mod:`graphkeep.port.telemetry` and docs/observability.md); this module
names what an application may use directly, and :func:`observe_fleet` publishes the fleet's
health (``graphkeep health``'s numbers) as observable gauges from a running process.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any

from graphkeep.checkpoint.health import FLEET_GAUGES, FleetGauge, FleetHealth, HealthWindow
from graphkeep.checkpoint.health import fleet_health as scan_fleet
from graphkeep.errors import ConfigurationError
from graphkeep.port.checks import check_seconds
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
    "HealthWindow",
    "OPTIONS",
    "SCOPE",
    "Target",
    "Telemetry",
    "check_telemetry",
    "FleetObserver",
    "observe_fleet",
]

log = logging.getLogger(__name__)


class FleetObserver:
    """The gauges :func:`observe_fleet` registered and the thread that keeps them fresh.

    ``latest`` is the newest scan (None before the first one ends); ``error`` the failure
    of the newest scan when it failed (the gauges keep the last good numbers then).
    ``close()`` (or leaving a ``with`` block) stops the scans; an OpenTelemetry gauge cannot
    be unregistered, so a closed observer's gauges report nothing from then on.
    """

    def __init__(self, saver: Any, every: float, window: HealthWindow, meter_provider: Any) -> None:
        from opentelemetry import metrics

        self.saver = saver
        self.every = every
        self.window = window
        self.latest: FleetHealth | None = None
        self.error: BaseException | None = None
        self.scans = 0
        self._closed = threading.Event()
        self._scanned = threading.Event()
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter(SCOPE)
        for gauge in FLEET_GAUGES:
            meter.create_observable_gauge(
                gauge.name,
                callbacks=[self._callback(gauge)],
                unit=gauge.unit,
                description=gauge.description,
            )
        self._thread = threading.Thread(target=self._run, name="graphkeep-fleet", daemon=True)
        self._thread.start()

    def _callback(self, gauge: FleetGauge) -> Any:
        from opentelemetry.metrics import Observation

        def observe(options: Any) -> list[Any]:
            latest = self.latest
            if latest is None or self._closed.is_set():
                return []
            value = gauge.value(latest)
            return [] if value is None else [Observation(value)]

        return observe

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self.latest = scan_fleet(self.saver, self.window)
                self.error = None
            except Exception as exc:  # noqa: BLE001 - a failed scan keeps the last numbers
                self.error = exc
                log.warning("graphkeep fleet health scan failed: %s", type(exc).__name__)
            self.scans += 1
            self._scanned.set()
            self._closed.wait(self.every)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the first scan has ended (True) or ``timeout`` passed (False)."""
        return self._scanned.wait(timeout)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=max(5.0, self.every))

    def __enter__(self) -> FleetObserver:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def observe_fleet(
    saver: Any,
    every: float = 60.0,
    *,
    window: HealthWindow | None = None,
    meter_provider: Any = None,
) -> FleetObserver:
    """Publish ``graphkeep health``'s numbers for ``saver``'s store as OpenTelemetry
    observable gauges (``graphkeep.threads.active``, ``graphkeep.threads.interrupted``,
    ``graphkeep.threads.runaway``, ``graphkeep.storage`` …, the names the Prometheus rules in
    ``deploy/prometheus`` read), rescanned every ``every`` seconds in a daemon thread.

    Any graphkeep saver, sync or async (an async saver's loop must keep running). A scan
    reads no payload (see docs/health.md for its cost); ``window`` is the activity window
    and runaway threshold (default: one hour; more than 1,000 checkpoints in 10 minutes);
    ``meter_provider`` defaults to the global one.
    """
    if not AVAILABLE:
        raise ConfigurationError(
            "observe_fleet needs the OpenTelemetry API: pip install 'graphkeep[otel]'"
        )
    if not hasattr(saver, "port") or not hasattr(saver, "drive"):
        raise ConfigurationError(
            f"observe_fleet needs a graphkeep saver, got {type(saver).__name__}"
        )
    seconds = check_seconds(every, "every", error=ConfigurationError, finite=True)
    if window is not None and not isinstance(window, HealthWindow):
        raise ConfigurationError(f"window must be a HealthWindow, got {type(window).__name__}")
    return FleetObserver(saver, seconds, window or HealthWindow(), meter_provider)
