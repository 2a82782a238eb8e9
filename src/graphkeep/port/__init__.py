"""The port: sans-IO machinery every product and backend runs on.

Ops (generators yielding store-native requests) and their sync and async drivers
(:mod:`.ops`), the bridges between sync and async callers (:mod:`.loop`), the poller's
pacing (:mod:`.backoff`), the one retry policy executors follow (:mod:`.retry`), and the
small pieces every layer above needs: the payload codec (:mod:`.codec`), option checks
(:mod:`.checks`), a bounded per-thread LRU (:mod:`.lru`) and the OpenTelemetry spans and
metrics of every call (:mod:`.telemetry`). See docs/architecture.md.
"""

from __future__ import annotations

from graphkeep.port.backoff import IDLE_AFTER, Backoff
from graphkeep.port.loop import on_loop, running_loop, stream_in_thread, stream_on_loop
from graphkeep.port.ops import (
    Call,
    Emit,
    Op,
    Parallel,
    Sleep,
    adrive,
    adrive_iter,
    drive,
    drive_iter,
)
from graphkeep.port.telemetry import Target, Telemetry, target_of

__all__ = [
    "IDLE_AFTER",
    "Backoff",
    "Call",
    "Emit",
    "Op",
    "Parallel",
    "Sleep",
    "Target",
    "Telemetry",
    "adrive",
    "adrive_iter",
    "drive",
    "drive_iter",
    "on_loop",
    "running_loop",
    "stream_in_thread",
    "stream_on_loop",
    "target_of",
]
