"""Fleet health: active, interrupted and runaway threads, concurrent forks, threads and bytes
stored.

One scan, written once over the checkpoint port (:meth:`CheckpointPort.activity
<graphkeep.checkpoint.port.CheckpointPort.activity>` per thread, from the store's indexes:
never a payload), and one summary over the per-thread :class:`Activity` records, so
``graphkeep health`` (every graphkeep backend, and LangGraph's SQLite saver, whose
activity the CLI reads with SQL) and an in-process observer (``observe_fleet``) report
the same numbers. Time comes from the checkpoint ids: LangGraph's are uuid6, whose
leading bits are their creation time, so "written within the window" is "id above the id
of the window's start" and an index range read answers it.

Concurrent forks (:mod:`graphkeep.checkpoint.forks`: runs of a thread that raced) are counted
from the parent id and source each store returns with the recent ids in the same requests:
a fork whose newest child was written within the window, both children being among the
checkpoints the scan reads (those of the window or the runaway period, whichever is longer).
``graphkeep check`` finds every fork, however old; on stores whose activity does not carry
parents (LangGraph's SQLite and Postgres savers) the count is unknown (None).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from graphkeep.checkpoint.forks import concurrent_forks
from graphkeep.checkpoint.ids import id_at, id_time
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import Activity
from graphkeep.checkpoint.saver import SaverBase
from graphkeep.port.ops import Op, counted

__all__ = [
    "FLEET_GAUGES",
    "RECENT_LIMIT",
    "FleetGauge",
    "FleetHealth",
    "HealthWindow",
    "RunawayThread",
    "fleet_health",
    "afleet_health",
    "id_at",
    "id_time",
    "scan",
    "summarize",
]

#: checkpoint ids one thread's activity read returns at most (a runaway thread is counted
#: up to this many checkpoints in the runaway period)
RECENT_LIMIT = 10_000
#: threads per ``list_threads`` page of the scan
THREAD_PAGE = 500
#: threads per ``activities`` request (a Redis pipeline)
ACTIVITY_BATCH = 100


@dataclass(frozen=True, slots=True)
class HealthWindow:
    """What a scan looks at: ``window`` seconds of activity, and a runaway threshold of
    more than ``runaway_checkpoints`` checkpoints in ``runaway_period`` seconds."""

    window: float = 3600.0
    runaway_checkpoints: int = 1000
    runaway_period: float = 600.0

    def __post_init__(self) -> None:
        if not self.window > 0 or not self.runaway_period > 0 or self.runaway_checkpoints < 0:
            raise ValueError(f"window and runaway period must be > 0, got {self}")


@dataclass(frozen=True, slots=True)
class RunawayThread:
    thread_id: str
    #: checkpoints in the runaway period (counted up to :data:`RECENT_LIMIT`)
    checkpoints: int


@dataclass(slots=True)
class FleetHealth:
    """The summary of one scan (``graphkeep health``'s report)."""

    at: float
    window: HealthWindow
    threads_stored: int
    threads_active: int
    threads_interrupted: int
    runaway: list[RunawayThread]
    #: bytes stored, None when the store cannot say (DynamoDB)
    storage_bytes: int | None
    #: the newest checkpoint of the least / most recently active thread (POSIX seconds)
    oldest_activity: float | None
    newest_activity: float | None
    #: threads whose ids carry no time (not uuid6): never counted active or runaway
    threads_untimed: int = 0
    interrupted_ids: list[str] = field(default_factory=list)
    #: concurrent forks whose newest child is within the window (None: the store's activity
    #: does not say), and the threads that have them
    concurrent_forks: int | None = None
    forked_ids: list[str] = field(default_factory=list)
    #: requests the scan sent and how long it took
    requests: int = 0
    seconds: float = 0.0

    @property
    def threads_runaway(self) -> int:
        return len(self.runaway)

    @property
    def window_seconds(self) -> float:
        return self.window.window

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "window_seconds": self.window.window,
            "runaway_threshold": {
                "checkpoints": self.window.runaway_checkpoints,
                "period_seconds": self.window.runaway_period,
            },
            "threads_stored": self.threads_stored,
            "threads_active": self.threads_active,
            "threads_interrupted": self.threads_interrupted,
            "threads_runaway": self.threads_runaway,
            "threads_untimed": self.threads_untimed,
            "concurrent_forks": self.concurrent_forks,
            "forked": list(self.forked_ids),
            "runaway": [
                {"thread_id": r.thread_id, "checkpoints": r.checkpoints} for r in self.runaway
            ],
            "interrupted": list(self.interrupted_ids),
            "storage_bytes": self.storage_bytes,
            "oldest_activity": self.oldest_activity,
            "newest_activity": self.newest_activity,
            "scan": {"requests": self.requests, "seconds": round(self.seconds, 4)},
        }


@dataclass(frozen=True, slots=True)
class FleetGauge:
    """One number of the report as a gauge: its OpenTelemetry instrument name and unit
    (for an observer in a process) and the Prometheus name the OTel Prometheus exporter
    makes of them, which ``graphkeep health --format prometheus`` writes too, so the rules
    and the dashboard see one name whichever way the number is published."""

    name: str
    unit: str
    description: str
    #: the :class:`FleetHealth` attribute it reads
    field: str

    @property
    def prometheus_name(self) -> str:
        """Dots to underscores, then the unit's suffix (``By``: bytes, ``s``: seconds;
        annotations such as ``{thread}`` add none), as the exporter names it."""
        base = self.name.replace(".", "_")
        suffix = {"By": "bytes", "s": "seconds"}.get(self.unit)
        return f"{base}_{suffix}" if suffix and not base.endswith(f"_{suffix}") else base

    def value(self, health: FleetHealth) -> float | None:
        found = getattr(health, self.field)
        return None if found is None else float(found)


FLEET_GAUGES: tuple[FleetGauge, ...] = (
    FleetGauge(
        "graphkeep.threads.stored",
        "{thread}",
        "Threads with at least one checkpoint.",
        "threads_stored",
    ),
    FleetGauge(
        "graphkeep.threads.active",
        "{thread}",
        "Threads whose newest checkpoint is within the window.",
        "threads_active",
    ),
    FleetGauge(
        "graphkeep.threads.interrupted",
        "{thread}",
        "Threads whose latest root checkpoint waits on an interrupt.",
        "threads_interrupted",
    ),
    FleetGauge(
        "graphkeep.threads.runaway",
        "{thread}",
        "Threads with more than the runaway threshold of checkpoints in its period.",
        "threads_runaway",
    ),
    FleetGauge(
        "graphkeep.concurrent_forks",
        "{fork}",
        "Forks of a thread's history by runs that raced, written within the window"
        " (graphkeep check names them).",
        "concurrent_forks",
    ),
    FleetGauge(
        "graphkeep.storage", "By", "Bytes the checkpoints occupy on the store.", "storage_bytes"
    ),
    FleetGauge(
        "graphkeep.oldest_activity.timestamp",
        "s",
        "Newest checkpoint time of the least recently active thread.",
        "oldest_activity",
    ),
    FleetGauge(
        "graphkeep.newest_activity.timestamp",
        "s",
        "Time of the newest checkpoint of the store.",
        "newest_activity",
    ),
    FleetGauge(
        "graphkeep.health.window", "s", "The window of graphkeep_threads_active.", "window_seconds"
    ),
    FleetGauge(
        "graphkeep.health.scan.requests", "{request}", "Requests the health scan sent.", "requests"
    ),
    FleetGauge("graphkeep.health.scan.duration", "s", "How long the health scan took.", "seconds"),
    FleetGauge("graphkeep.health.scan.timestamp", "s", "When the health scan ran.", "at"),
)


def summarize(
    activities: Iterable[Activity],
    window: HealthWindow,
    now: float,
    *,
    storage_bytes: int | None = None,
) -> FleetHealth:
    """The fleet summary of per-thread activity records. Bytes stored: ``storage_bytes``
    (the store's own figure) when given, else the sum of the threads' bytes when any
    thread reports them, else None."""
    window_from = now - window.window
    runaway_from = now - window.runaway_period
    stored = active = untimed = 0
    interrupted: list[str] = []
    runaway: list[RunawayThread] = []
    total = 0
    sized = False
    newest_times: list[float] = []
    forks: int | None = 0
    forked: list[str] = []
    for a in activities:
        if a.newest_id is None:
            continue
        stored += 1
        if a.links is None:
            forks = None
        elif forks is not None:
            found = [
                f
                for f in concurrent_forks(a.links)
                if (id_time(f.newest) or window_from) >= window_from
            ]
            forks += len(found)
            if found:
                forked.append(a.thread_id)
        if a.bytes is not None:
            sized = True
            total += a.bytes
        if a.interrupted:
            interrupted.append(a.thread_id)
        last = id_time(a.newest_id)
        if last is None:
            untimed += 1
            continue
        newest_times.append(last)
        times = [t for t in (id_time(cid) for cid in a.recent) if t is not None]
        if last >= window_from:
            active += 1
        count = sum(1 for t in times if t >= runaway_from)
        if count > window.runaway_checkpoints:
            runaway.append(RunawayThread(a.thread_id, count))
    runaway.sort(key=lambda r: (-r.checkpoints, r.thread_id))
    return FleetHealth(
        at=now,
        window=window,
        threads_stored=stored,
        threads_active=active,
        threads_interrupted=len(interrupted),
        runaway=runaway,
        storage_bytes=storage_bytes if storage_bytes is not None else (total if sized else None),
        oldest_activity=min(newest_times, default=None),
        newest_activity=max(newest_times, default=None),
        threads_untimed=untimed,
        interrupted_ids=sorted(interrupted),
        concurrent_forks=forks,
        forked_ids=sorted(forked) if forks is not None else [],
    )


def _activities(
    port: CheckpointPort, window: HealthWindow, now: float
) -> Op[tuple[list[Activity], int | None]]:
    above = id_at(now - max(window.window, window.runaway_period))
    runaway_above = id_at(now - window.runaway_period)
    found: list[Activity] = []
    cursor: Any = None
    while True:
        threads, cursor = yield from port.list_threads(cursor, THREAD_PAGE)
        page_start = len(found)
        for start in range(0, len(threads), ACTIVITY_BATCH):
            batch = threads[start : start + ACTIVITY_BATCH]
            found.extend((yield from port.activities(batch, above, RECENT_LIMIT)))
        for i in range(page_start, len(found)):
            a = found[i]
            if len(a.recent) >= RECENT_LIMIT and runaway_above > above:
                # capped: the newest ids (the runaway period) may be missing; read those
                commits = yield from port.commits(a.thread_id, None, runaway_above, RECENT_LIMIT)
                recent = [cid for _, cid in commits]
                # the links stay those of the first ids: forks are counted among them
                found[i] = Activity(
                    a.thread_id, a.newest_id, recent, a.interrupted, a.bytes, a.links
                )
        if cursor is None:
            size = yield from port.storage_bytes()
            return found, size


def scan(port: CheckpointPort, window: HealthWindow, now: float | None = None) -> Op[FleetHealth]:
    """The op of a health scan over every thread of ``port`` (``now``: default the clock)."""
    at = time.time() if now is None else now
    started = time.perf_counter()
    tally = [0]
    activities, size = yield from counted(_activities(port, window, at), tally)
    health = summarize(activities, window, at, storage_bytes=size)
    health.requests = tally[0]
    health.seconds = time.perf_counter() - started
    return health


def fleet_health(saver: SaverBase, window: HealthWindow | None = None) -> FleetHealth:
    """The health of every thread ``saver`` keeps (blocking; any graphkeep saver)."""
    health: FleetHealth = saver.drive(scan(saver.port, window or HealthWindow()))
    return health


async def afleet_health(saver: SaverBase, window: HealthWindow | None = None) -> FleetHealth:
    """:func:`fleet_health` for async callers."""
    health: FleetHealth = await saver.adrive(scan(saver.port, window or HealthWindow()))
    return health
