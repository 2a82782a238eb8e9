"""Live suite: ``saver.watch`` and the run event log on every backend, side by side, one run.

Per backend (Redis, Redis Cluster, MongoDB, DynamoDB), each in a scratch space of the usual
bench servers (Redis database ``--redis-db``, flushed first; a key prefix of its own on the
cluster; database / table ``graphkeep_bench_live`` on MongoDB / DynamoDB, dropped first):

- **watch latency**: a watcher thread on its own connection follows a thread while this
  thread ``put`` s N checkpoints, one after the other, each after a random pause (up to the
  poll interval on polling stores, so a put lands at a random point of the poll cycle); the
  latency of a checkpoint is from ``put`` returning to the watcher holding its
  ``CheckpointTuple``. p50 / p95 over the N puts (a first, warm-up put is not counted);
- **event appends**: events/s and store requests per 1,000 events for ``append`` one by
  one, ``append_many`` in batches of 100, :func:`graphkeep.events.streaming.stream_run` of a
  graph streaming tokens (``stream_mode="custom"``; its writer batches per 20 ms window) and
  the AG-UI endpoint (:class:`graphkeep.agui.AGUIRuns`, what ``POST /agent`` starts) running
  as many tokens from a fake chat model through LangGraph's message stream, every AG-UI event
  it writes counted (``RUN_STARTED`` … ``RUN_FINISHED``), the requests of its event log and
  of the graph's saver (graphkeep, same backend); the times include the run's close, and no
  reader follows either run while it is timed;
- **read-back**: ``read(run, follow=False)`` of the 5,000 events just appended, median ms
  of 3 reads;
- **idle watchers**: 100 watchers on 100 empty threads sharing one saver, store requests
  per second over a window that starts once polling watchers have backed off to
  ``max_poll_interval`` (Redis watchers block in ``XREAD BLOCK`` and wake every 5 s).

The measurements, and how their requests are counted (a wrapped executor: one per Redis
command / script / pipeline, MongoDB command, DynamoDB API call), are
:mod:`bench.live_workload`; this module prepares each backend, runs them and
renders the report (:mod:`bench.render`).

On the same Redis, the hand-rolled alternative: ``PUBLISH`` per event to a channel a
``SUBSCRIBE`` r reads. Its throughput (one PUBLISH per event, until the subscriber has them
all), and the disconnect test both approaches run alike: a writer emits E events in batches
of 10 every 2 ms; the reader drops its connection after E/2 events, waits 200 ms and
reconnects (graphkeep: ``read(run, after=last_id)``, PUBLISH: a new SUBSCRIBE); counted:
events lost and duplicated.

Run it with ``./dev bench --suite live`` or ``python -m bench.suites.live``
(``--only redis,mongodb`` picks backends; ``--quick`` is a fifth of the sizes).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench import render
from bench.live_workload import (
    BATCH,
    DISCONNECT_GAP,
    KEY_PREFIX,
    WATCH_POLL_INTERVAL,
    AGUIResult,
    AppendResult,
    Backend,
    BurstResult,
    Disconnect,
    Requests,
    WatchResult,
    disconnect_log,
    disconnect_publish,
    events_at,
    forget_agui,
    measure_agui,
    measure_batched,
    measure_idle,
    measure_one_by_one,
    measure_publish_throughput,
    measure_read_back,
    measure_stream_run,
    measure_watch,
    measure_watch_burst,
    saver_at,
)
from bench.render import (
    NA,
    Bars,
    Figure,
    Panel,
    number,
    section,
    table,
    target_lines,
    versions,
)
from bench.suites import Options, Skip, Suite
from graphkeep.errors import mask_url

BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb")
MONGODB_DATABASE = "graphkeep_bench_live"
DYNAMODB_TABLE = "graphkeep_bench_live"
FULL_TURNS = 50  # Options.turns of a full run: sizes scale by turns / 50 (--quick: 0.2)
#: issue 11 targets
WATCH_P95_MS = 20.0
#: "far fewer than 1,000 round trips": at least 10x fewer
BATCHED_REQUESTS_MAX = 100.0


@dataclass(frozen=True)
class Sizes:
    watch_puts: int
    one_by_one: int
    batched: int
    stream_tokens: int
    reads: int
    idle_watchers: int
    #: seconds idle watchers run before the window (back-off) and the window itself
    idle_settle: float
    idle_window: float
    disconnect_events: int
    #: graph turns of the watch burst (issue 28: 15 turns of a 2-node graph, 60 checkpoints)
    burst_turns: int = 15

    @classmethod
    def full(cls) -> Sizes:
        return cls(100, 1000, 5000, 2000, 3, 100, 15.0, 10.0, 5000)

    @classmethod
    def scaled(cls, factor: float) -> Sizes:
        if factor >= 1:
            return cls.full()
        full = cls.full()

        def n(value: int, least: int) -> int:
            return max(least, round(value * factor))

        return cls(
            # watch and one-by-one appends cost wall time per item on polling stores
            watch_puts=n(full.watch_puts // 2, 5),
            one_by_one=n(full.one_by_one // 4, 20),
            batched=n(full.batched, 2 * BATCH),
            stream_tokens=n(full.stream_tokens, 50),
            reads=1,
            idle_watchers=n(full.idle_watchers, 5),
            idle_settle=0.0,
            idle_window=1.5,
            disconnect_events=n(full.disconnect_events, 500),
            burst_turns=n(full.burst_turns, 3),
        )


# --------------------------------------------------------------------------- where


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=path))


def open_backend(name: str, options: Options) -> Backend:
    """Prepare ``name``'s scratch space (flush / drop what the bench owns) and say where."""
    if name == "redis":
        from bench.suites.redis import redis_url, scratch_database

        url = scratch_database(redis_url(), options.redis_db, options.force_flush)
        return Backend(name, url, KEY_PREFIX, f"{mask_url(url)}")
    if name == "redis-cluster":
        url = _env("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001")
        prefix = f"{KEY_PREFIX}-{uuid.uuid4().hex[:8]}"
        return Backend(name, url, prefix, f"{mask_url(url)} (key prefix {prefix})")
    if name == "mongodb":
        from bench.suites.mongodb import mongo_client, mongodb_url
        from bench.suites.mongodb import scratch_database as mongo_scratch

        client = mongo_client()
        try:
            mongo_scratch(client, MONGODB_DATABASE, options.force_flush)
        finally:
            client.close()
        url = _with_path(mongodb_url(), f"/{MONGODB_DATABASE}")
        return Backend(name, url, KEY_PREFIX, f"{mask_url(url)}")
    if name == "dynamodb":
        from bench.suites.dynamodb import drop_table, dynamodb_client, local_credentials
        from bench.suites.dynamodb import table_url as dynamodb_table_url

        local_credentials()
        drop_table(dynamodb_client(), DYNAMODB_TABLE)
        url = dynamodb_table_url(DYNAMODB_TABLE)
        return Backend(name, url, KEY_PREFIX, url)
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")


# --------------------------------------------------------------------------- running


@dataclass
class Column:
    """One backend's results; ``None`` = not measured (see ``errors``)."""

    backend: str
    where: str = ""
    watch: WatchResult | None = None
    burst: BurstResult | None = None
    one_by_one: AppendResult | None = None
    batched: AppendResult | None = None
    streamed: AppendResult | None = None
    agui: AGUIResult | None = None
    read_back_ms: float | None = None
    idle_rps: float | None = None
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Rival:
    """The PUBLISH alternative on the single Redis, and graphkeep's disconnect run there."""

    publish_per_second: float | None = None
    publish_disconnect: Disconnect | None = None
    log_disconnect: Disconnect | None = None
    errors: list[str] = field(default_factory=list)


def _failed(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    if isinstance(exc, ImportError) or "No module named 'graphkeep.backends." in text:
        return f"not available yet ({text})"
    return f"{type(exc).__name__}: {text}"


def _attempt(column: Column, what: str, step: Callable[[], None]) -> None:
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - one measurement failing is reported
        column.errors.append(f"{what}: {_failed(exc)}")


#: the steps of :func:`measure_backend`, in order
STEPS = ("watch", "watch burst", "events", "stream_run", "AG-UI endpoint", "idle")


def measure_backend(
    name: str,
    options: Options,
    sizes: Sizes,
    rng: random.Random,
    steps: Sequence[str] = STEPS,
) -> Column:
    """``name``'s column; ``steps``: these of :data:`STEPS` only (the turn cost section runs
    ``stream_run`` and the AG-UI endpoint)."""
    column = Column(name)
    started = time.perf_counter()
    try:
        backend = open_backend(name, options)
    except Exception as exc:  # noqa: BLE001 - the whole column is reported as not run
        column.errors.append(f"not run: {_failed(exc)}")
        return column
    column.where = backend.where

    def watch() -> None:
        column.watch = measure_watch(backend, sizes.watch_puts, rng)

    def burst() -> None:
        column.burst = measure_watch_burst(backend, sizes.burst_turns)

    def appends() -> None:
        with events_at(backend) as log:
            counter = Requests().wrap(log)
            column.one_by_one = measure_one_by_one(log, counter, sizes.one_by_one)
            column.batched, run = measure_batched(log, counter, sizes.batched)
            try:
                column.read_back_ms = measure_read_back(log, run, sizes.batched, sizes.reads)
            finally:
                log.delete(run)

    def streamed() -> None:
        with events_at(backend) as log:
            column.streamed = measure_stream_run(log, Requests().wrap(log), sizes.stream_tokens)

    def agui() -> None:
        with events_at(backend) as log, saver_at(backend) as saver:
            counter, saver_counter = Requests().wrap(log), Requests().wrap(saver)
            column.agui = measure_agui(saver, saver_counter, log, counter, sizes.stream_tokens)
            forget_agui(saver, log, column.agui)

    def idle() -> None:
        column.idle_rps = measure_idle(
            backend, sizes.idle_watchers, sizes.idle_settle, sizes.idle_window
        )

    chosen = [
        (what, step)
        for what, step in zip(STEPS, (watch, burst, appends, streamed, agui, idle), strict=True)
        if what in steps
    ]
    for what, step in chosen:
        print(f"  live {name}: {what} ...", end="", flush=True)
        at = time.perf_counter()
        _attempt(column, what, step)
        print(f" {time.perf_counter() - at:.1f} s", flush=True)
    column.seconds = time.perf_counter() - started
    return column


def measure_rival(options: Options, sizes: Sizes) -> Rival:
    rival = Rival()
    try:
        backend = open_backend("redis", options)
    except Exception as exc:  # noqa: BLE001 - reported
        rival.errors.append(f"not run: {_failed(exc)}")
        return rival
    steps: list[tuple[str, Callable[[], None]]] = [
        (
            "PUBLISH throughput",
            lambda: setattr(
                rival,
                "publish_per_second",
                measure_publish_throughput(backend.url, sizes.one_by_one),
            ),
        ),
        (
            "PUBLISH disconnect",
            lambda: setattr(
                rival,
                "publish_disconnect",
                disconnect_publish(backend.url, sizes.disconnect_events),
            ),
        ),
        (
            "graphkeep disconnect",
            lambda: setattr(
                rival, "log_disconnect", disconnect_log(backend, sizes.disconnect_events)
            ),
        ),
    ]
    for what, step in steps:
        print(f"  live redis: {what} ...", end="", flush=True)
        at = time.perf_counter()
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported
            rival.errors.append(f"{what}: {_failed(exc)}")
        print(f" {time.perf_counter() - at:.1f} s", flush=True)
    return rival


# --------------------------------------------------------------------------- report


def _eps(result: AppendResult | None) -> float | None:
    return None if result is None else result.per_second


def _rq(result: AppendResult | None) -> float | None:
    return None if result is None else result.per_1000


#: the main table's rows: label -> cell of a column
ROWS: list[tuple[str, Callable[[Column], str]]] = [
    (
        "watch: how",
        lambda c: (
            "n/a"
            if c.watch is None
            else "feed (blocking read)"
            if c.watch.feed
            else f"polling, {WATCH_POLL_INTERVAL * 1000:g} ms"
        ),
    ),
    ("watch latency p50 (ms)", lambda c: number(c.watch.p50 if c.watch else None)),
    ("watch latency p95 (ms)", lambda c: number(c.watch.p95 if c.watch else None)),
    (
        "watch: checkpoints missed",
        lambda c: "n/a" if c.watch is None else str(c.watch.missed),
    ),
    (
        "watch: seen before put returned",
        lambda c: "n/a" if c.watch is None else f"{c.watch.early} of {len(c.watch.latencies_ms)}",
    ),
    (
        "watch burst: checkpoints (graph turns back to back)",
        lambda c: "n/a" if c.burst is None else str(c.burst.checkpoints),
    ),
    ("watch burst latency p50 (ms)", lambda c: number(c.burst.p50 if c.burst else None)),
    ("watch burst latency p95 (ms)", lambda c: number(c.burst.p95 if c.burst else None)),
    (
        "watch burst: target p95, 2 polls + one page read (ms)",
        lambda c: number(c.burst.target_ms if c.burst else None),
    ),
    (
        "watch burst: checkpoints missed",
        lambda c: "n/a" if c.burst is None else str(c.burst.missed),
    ),
    ("append one by one (events/s)", lambda c: number(_eps(c.one_by_one), 0)),
    (
        "append one by one (requests / 1,000 events)",
        lambda c: number(_rq(c.one_by_one), 0),
    ),
    (
        f"append_many, batches of {BATCH} (events/s)",
        lambda c: number(_eps(c.batched), 0),
    ),
    (
        f"append_many, batches of {BATCH} (requests / 1,000 events)",
        lambda c: number(_rq(c.batched), 1),
    ),
    ("stream_run, token graph (events/s)", lambda c: number(_eps(c.streamed), 0)),
    (
        "stream_run, token graph (requests / 1,000 events)",
        lambda c: number(_rq(c.streamed), 1),
    ),
    ("AG-UI endpoint, token graph (events/s)", lambda c: number(_eps(c.agui), 0)),
    (
        "AG-UI endpoint, token graph (requests / 1,000 events)",
        lambda c: number(_rq(c.agui), 1),
    ),
    ("read-back of the batched run (ms, median)", lambda c: number(c.read_back_ms, 1)),
    ("idle watchers (requests/s, all together)", lambda c: number(c.idle_rps, 1)),
]


def targets(columns: Sequence[Column], rival: Rival) -> list[tuple[str, bool]]:
    by = {c.backend: c for c in columns}
    out: list[tuple[str, bool]] = []
    redis = by.get("redis")
    if redis and redis.watch and redis.watch.p95 is not None:
        out.append(
            (
                f"Redis: a watcher sees a checkpoint at most {WATCH_P95_MS:g} ms (p95) after"
                f" put returns (issue 11): {redis.watch.p95:.1f} ms",
                redis.watch.p95 <= WATCH_P95_MS and redis.watch.missed == 0,
            )
        )
    if redis and redis.batched and redis.streamed:
        batched = [redis.batched.per_1000, redis.streamed.per_1000]
        agui = ""
        if redis.agui is not None:
            batched.append(redis.agui.per_1000)
            agui = f", AG-UI endpoint {redis.agui.per_1000:.1f}"
        out.append(
            (
                "Redis: 1,000 small events cost far fewer than 1,000 round trips with batching"
                f" (at most {BATCHED_REQUESTS_MAX:g}; issue 11): append_many"
                f" {redis.batched.per_1000:.1f}, stream_run {redis.streamed.per_1000:.1f}" + agui,
                max(batched) <= BATCHED_REQUESTS_MAX,
            )
        )
    for c in columns:
        if c.watch is not None and c.watch.missed:
            out.append((f"{c.backend}: the watcher saw every checkpoint", False))
        b = c.burst
        if b is not None and b.p95 is not None and c.watch is not None and not c.watch.feed:
            out.append(
                (
                    f"{c.backend}: a polling watcher keeps up with a burst of {b.checkpoints}"
                    f" checkpoints, p95 at most 2 polls + one page read (issue 28):"
                    f" {b.p95:.0f} ms <= {b.target_ms:.0f} ms, {b.missed} missed",
                    b.p95 <= b.target_ms and b.missed == 0,
                )
            )
    log = rival.log_disconnect
    if log is not None:
        lost = "n/a" if rival.publish_disconnect is None else rival.publish_disconnect.lost
        out.append(
            (
                "Redis disconnect test: graphkeep's read(after=) loses and duplicates no"
                f" event (issue 11): lost {log.lost}, duplicated {log.duplicated}; the"
                f" PUBLISH reader lost {lost}",
                log.lost == 0 and log.duplicated == 0 and log.in_order,
            )
        )
    return out


def agui_saver_share(columns: Sequence[Column]) -> str:
    """The saver's requests per 1,000 events of each backend's AG-UI run."""
    shares = [
        f"{c.backend} {number(c.agui.saver_requests * 1000 / c.agui.events, 1)}"
        for c in columns
        if c.agui is not None
    ]
    return ", ".join(shares) or NA


def markdown(columns: Sequence[Column], rival: Rival, sizes: Sizes, where: str) -> str:
    names = [c.backend for c in columns]
    lines = [
        "## graphkeep bench: live threads and run event logs",
        "",
        f"{where}. One run, one machine; {versions(('langgraph', 'graphkeep', 'redis'))}.",
        "",
        f"- watch latency: from `put` returning to a watcher thread (own connection) holding"
        f" the `CheckpointTuple`, over {sizes.watch_puts} puts, each after a random pause;"
        f" polling stores at the default `poll_interval` ({WATCH_POLL_INTERVAL:g} s);"
        " a checkpoint the watcher held before `put` returned counts as 0 ms",
        f"- appends: {sizes.one_by_one:,} events one by one, {sizes.batched:,} with"
        f" `append_many` ({BATCH} per call), {sizes.stream_tokens:,} tokens through"
        " `stream_run` (one graph node streaming custom chunks; 20 ms flush window);"
        " times include the close; no reader follows the run while it is timed",
        f"- AG-UI endpoint: `AGUIRuns.start` (what `POST /agent` starts;"
        ' `translation="graphkeep"`) of a one-node graph'
        f" whose fake chat model streams {sizes.stream_tokens:,} tokens through LangGraph's"
        " message stream (ag-ui-langgraph: one `TEXT_MESSAGE_CONTENT` each), until its"
        " worker has closed the run (same 20 ms window; no reader while timed); events:"
        " every AG-UI event written, `RUN_STARTED` … `RUN_FINISHED`; requests: its event"
        " log's and its graph's graphkeep saver's (same backend; the saver's share per"
        f" 1,000 events: {agui_saver_share(columns)})",
        "- requests = what the backend's executor sent to the store: one Redis command,"
        " script or pipeline, one MongoDB command, one DynamoDB API call",
        f"- read-back: `read(run, follow=False)` of the {sizes.batched:,}-event run"
        f" (+ close), median of {sizes.reads}",
        f"- idle watchers: {sizes.idle_watchers} watchers of empty threads on one saver,"
        f" requests/s over {sizes.idle_window:g} s after {sizes.idle_settle:g} s"
        " (polling watchers back off to `max_poll_interval` = 2 s after 5 s idle;"
        " Redis watchers block in XREAD and wake every 5 s)",
        "- timings are from a shared, noisy machine: compare within one run only",
        "",
    ]
    lines += table(
        ["measure", *names],
        [[label, *(cell(c) for c in columns)] for label, cell in ROWS],
        "l" + "r" * len(names),
    )
    redis = next((c for c in columns if c.backend == "redis"), None)
    lines += [
        "",
        "### The hand-rolled alternative on the same Redis: PUBLISH per event",
        "",
        f"Disconnect test: a writer emits {sizes.disconnect_events:,} events, 10 every 2 ms;"
        f" the reader drops its connection after half of them, waits"
        f" {DISCONNECT_GAP * 1000:g} ms and reconnects (PUBLISH: SUBSCRIBE again;"
        " graphkeep: `read(run, after=last_id)`).",
        "",
    ]

    def drop_cells(d: Disconnect | None) -> list[str]:
        if d is None:
            return [NA] * 4
        return [
            f"{d.received:,}",
            f"{d.lost:,}",
            f"{d.duplicated:,}",
            "yes" if d.in_order else "no",
        ]

    one = redis.one_by_one if redis else None
    many = redis.batched if redis else None
    lines += table(
        [
            "approach",
            "events/s (one by one)",
            "requests / 1,000 events",
            "disconnect: received",
            "lost",
            "duplicated",
            "in order",
        ],
        [
            [
                "PUBLISH + SUBSCRIBE",
                number(rival.publish_per_second, 0),
                "1,000",
                *drop_cells(rival.publish_disconnect),
            ],
            [
                "graphkeep `append` + `read(after=)`",
                number(_eps(one), 0),
                number(_rq(one), 0),
                *drop_cells(rival.log_disconnect),
            ],
            [
                f"graphkeep `append_many` ({BATCH})",
                number(_eps(many), 0),
                number(_rq(many), 1),
                "(same reader)",
                "",
                "",
                "",
            ],
        ],
        "lrrrrrl",
    )
    lines += target_lines(targets(columns, rival))
    notes = [f"{c.backend}: {e}" for c in columns for e in c.errors]
    notes += [f"redis (PUBLISH comparison): {e}" for e in rival.errors]
    lines += section("Notes", [n.replace("|", "/") for n in notes])
    return "\n".join(lines) + "\n"


def chart(columns: Sequence[Column], path: Path) -> None:
    """Watch latency p50/p95 and requests per 1,000 events, per backend."""
    names = [c.backend for c in columns]

    def bars(label: str, pick: Callable[[Column], float | None]) -> Bars:
        return Bars(label, [pick(c) for c in columns])

    panels = [
        Panel(
            "watch latency, ms (log scale)",
            names,
            [
                bars("p50", lambda c: c.watch.p50 if c.watch else None),
                bars("p95", lambda c: c.watch.p95 if c.watch else None),
            ],
            log=True,
            legend=True,
            line=(WATCH_P95_MS, "Redis p95 target"),
        ),
        Panel(
            "store requests per 1,000 events (log scale)",
            names,
            [
                bars("append one by one", lambda c: _rq(c.one_by_one)),
                bars(f"append_many ({BATCH})", lambda c: _rq(c.batched)),
                bars("stream_run", lambda c: _rq(c.streamed)),
                bars("AG-UI endpoint", lambda c: _rq(c.agui)),
            ],
            log=True,
            legend=True,
        ),
    ]
    render.chart(Figure("graphkeep bench: live threads and run event logs", panels), path)


def run(
    options: Options, out: Path, chart_too: bool, only: Sequence[str] | None = None
) -> tuple[list[Column], Rival]:
    """Every backend (``only``: these), report to stdout and ``<out>/live.md``."""
    sizes = Sizes.scaled(min(options.turns / FULL_TURNS, 1.0))
    rng = random.Random(11)
    chosen = [b for b in BACKENDS if only is None or b in only]
    columns = [measure_backend(name, options, sizes, rng) for name in chosen]
    rival = measure_rival(options, sizes) if "redis" in chosen else Rival()
    where = "; ".join(f"{c.backend}: {c.where}" for c in columns if c.where)
    text = markdown(columns, rival, sizes, where or "no backend reachable")
    render.publish(text, out, "live", partial(chart, columns) if chart_too else None)
    return columns, rival


def unavailable() -> Skip | None:
    return None  # every backend that cannot run says why in the report's notes


SUITE = Suite(
    name="live",
    title="live threads and run event logs",
    stored_label="n/a",
    request_label="requests run by the backend's executor",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suites.live")
    parser.add_argument("--quick", action="store_true", help="a fifth of the sizes")
    parser.add_argument("--only", default=None, help=f"comma list of: {', '.join(BACKENDS)}")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--redis-db", type=int, default=Options.redis_db)
    parser.add_argument("--force-flush", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else None
    if only and set(only) - set(BACKENDS):
        parser.error(f"unknown backends: {', '.join(sorted(set(only) - set(BACKENDS)))}")
    options = Options(
        turns=10 if args.quick else FULL_TURNS,
        redis_db=args.redis_db,
        force_flush=args.force_flush,
    )
    run(options, args.out, not args.no_chart, only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
