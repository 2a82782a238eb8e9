"""``graphkeep health``: the fleet's health for cron and node_exporter's textfile collector.

The numbers come from :mod:`graphkeep.checkpoint.health` (one scan over the checkpoint
port on graphkeep URLs; on LangGraph's SQLite and Postgres savers the same per-thread
activity, read with five and four SQL queries): active, interrupted and runaway threads,
threads and bytes stored, the oldest and newest activity. No payload is read.
``--format prometheus`` writes the text exposition format; exit code 3 when a ``--max-*``
threshold is crossed.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import time
from collections.abc import Iterable
from typing import Any, TextIO

from graphkeep.checkpoint.health import (
    FLEET_GAUGES,
    RECENT_LIMIT,
    FleetHealth,
    HealthWindow,
    id_at,
    scan,
    summarize,
)
from graphkeep.checkpoint.port import INTERRUPT_IDX
from graphkeep.checkpoint.records import Activity
from graphkeep.cli.arguments import Commands, non_negative, size
from graphkeep.cli.console import (
    EXIT_OK,
    EXIT_THRESHOLD,
    CliError,
    NotFound,
    UsageError,
    human_bytes,
    iso,
    parse_duration,
    print_json,
    safe_url,
)
from graphkeep.cli.endpoints import Native, open_endpoint
from graphkeep.cli.fallback_health import (
    add_fallback_option,
    unmoved_prometheus,
    unmoved_report,
    unmoved_text,
)
from graphkeep.cli.foreign import Foreign, postgres_snapshot
from graphkeep.cli.hot import HotUnreachable, add_hot_option, read_hot_report, write_hot_report
from graphkeep.errors import StorageUnavailable

_RUNAWAY = re.compile(r"^\s*(\d+)\s*/\s*(\S+)\s*$")


class Unreachable(CliError):
    """The store did not answer: one line, exit code 2."""

    code = 2


# -- argument types --------------------------------------------------------------------


def window(text: str) -> float:
    """``--window``: a duration (``1h``, ``30m``, ``2d``) above 0."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return seconds


def runaway(text: str) -> tuple[int, float]:
    """``--runaway N/PERIOD``: more than N checkpoints in PERIOD (``1000/10m``)."""
    match = _RUNAWAY.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not N/PERIOD: {text!r} (e.g. 1000/10m: more than 1000 checkpoints in 10 minutes)"
        )
    return int(match.group(1)), window(match.group(2))


def add_health_command(commands: Commands) -> None:
    p = commands.add(
        "health URL",
        cmd_health,
        "fleet health: active, interrupted and runaway threads, threads and bytes stored;"
        " exit code 3 when a threshold is crossed (for cron)",
        "  graphkeep health redis://localhost:6379/0\n"
        "  graphkeep health redis://localhost:6379/0 --window 1h --runaway 1000/10m --json\n"
        "  graphkeep health mongodb://db/app --format prometheus \\\n"
        "      > /var/lib/node_exporter/textfile/graphkeep.prom\n"
        "  graphkeep health sqlite:///checkpoints.db --max-runaway 0 || alert 'dead loop'\n"
        "  graphkeep health postgresql://user:pw@db/app --json\n"
        "  graphkeep health redis://localhost:6379/0 --fallback langgraph-mongodb://db:27017/app\n"
        "\n"
        "Reads ids and indexes only (LangGraph's checkpoint ids carry their time), never a\n"
        "checkpoint's values. A thread is active when its newest checkpoint is within\n"
        "--window, interrupted when its root namespace's latest checkpoint has a pending\n"
        "interrupt, runaway with more than N checkpoints in the --runaway period; concurrent\n"
        "forks are branches runs of one thread wrote by racing, within --window (graphkeep\n"
        "URLs).\n",
    )
    p.add_argument("--window", type=window, default=3600.0, metavar="DURATION", help="default 1h")
    p.add_argument(
        "--runaway",
        type=runaway,
        default=(1000, 600.0),
        metavar="N/PERIOD",
        help="more than N checkpoints in PERIOD (default 1000/10m)",
    )
    p.add_argument(
        "--format",
        choices=["text", "prometheus"],
        default="text",
        help="prometheus: the text exposition format (node_exporter textfile collector)",
    )
    for name, what in (
        ("runaway", "runaway threads"),
        ("interrupted", "interrupted threads"),
        ("active", "active threads"),
        ("threads", "threads stored"),
    ):
        p.add_argument(f"--max-{name}", type=non_negative, metavar="N", help=f"at most N {what}")
    p.add_argument("--max-bytes", type=size, metavar="SIZE", help="at most SIZE stored (10GB)")
    p.add_argument(
        "--capacity",
        type=size,
        metavar="SIZE",
        help="what the store may hold (its disk or memory): written as"
        " graphkeep_storage_capacity_bytes for the 70 %% alert",
    )
    add_hot_option(p)
    add_fallback_option(p)


# -- reading ---------------------------------------------------------------------------


def sqlite_health(endpoint: Foreign, health_window: HealthWindow, now: float) -> FleetHealth:
    """The scan on LangGraph's ``SqliteSaver``: five queries over its two tables (ids,
    write channels and ``LENGTH`` of the stored bytes; no value is decoded)."""
    saver: Any = endpoint.saver  # a SqliteSaver: its connection and its lock
    conn: sqlite3.Connection = saver.conn
    above = id_at(now - max(health_window.window, health_window.runaway_period))
    started = time.perf_counter()
    with saver.lock:
        newest = dict(
            conn.execute(
                "SELECT thread_id, MAX(checkpoint_id) FROM checkpoints GROUP BY thread_id"
            ).fetchall()
        )
        recent: dict[str, list[str]] = {}
        for thread_id, checkpoint_id in conn.execute(
            "SELECT thread_id, checkpoint_id FROM checkpoints WHERE checkpoint_id > ?"
            " ORDER BY thread_id, checkpoint_id",
            (above,),
        ):
            ids = recent.setdefault(thread_id, [])
            if len(ids) < RECENT_LIMIT:
                ids.append(checkpoint_id)
            else:  # keep the newest RECENT_LIMIT: the runaway period is the newest part
                ids.pop(0)
                ids.append(checkpoint_id)
        interrupted = {
            row[0]
            for row in conn.execute(
                "SELECT c.thread_id FROM (SELECT thread_id, MAX(checkpoint_id) AS cid"
                " FROM checkpoints WHERE checkpoint_ns = '' GROUP BY thread_id) AS c"
                " WHERE EXISTS (SELECT 1 FROM writes AS w WHERE w.thread_id = c.thread_id"
                " AND w.checkpoint_ns = '' AND w.checkpoint_id = c.cid"
                " AND w.channel = '__interrupt__')"
            )
        }
        sizes: dict[str, int] = {}
        for query in (
            "SELECT thread_id, SUM(LENGTH(checkpoint) + LENGTH(metadata)) FROM checkpoints"
            " GROUP BY thread_id",
            "SELECT thread_id, SUM(LENGTH(value)) FROM writes GROUP BY thread_id",
        ):
            for thread_id, total in conn.execute(query):
                sizes[thread_id] = sizes.get(thread_id, 0) + int(total or 0)
    activities = [
        Activity(
            str(thread_id),
            str(cid),
            recent.get(thread_id, []),
            thread_id in interrupted,
            sizes.get(thread_id, 0),
        )
        for thread_id, cid in sorted(newest.items())
    ]
    health = summarize(activities, health_window, now)
    health.requests = 5
    health.seconds = time.perf_counter() - started
    return health


#: the tables of LangGraph's PostgresSaver (its migrations), whose sizes are the bytes stored
POSTGRES_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")

#: the four queries of :func:`postgres_health`, run in one read-only snapshot
POSTGRES_QUERIES = {
    # the tables' sizes (heap, TOAST and indexes: what the server keeps on disk for them),
    # and whether they exist at all; PostgreSQL's own figures, no row is read
    "bytes": "SELECT count(t) = 3 AS present, COALESCE(SUM(pg_total_relation_size(t)), 0)"
    " AS bytes FROM unnest(ARRAY[to_regclass('checkpoints'), to_regclass('checkpoint_blobs'),"
    " to_regclass('checkpoint_writes')]) AS t",
    # each thread's highest checkpoint id (every namespace)
    "newest": "SELECT thread_id, MAX(checkpoint_id) AS newest FROM checkpoints GROUP BY thread_id",
    # the ids above the scan's start, at most RECENT_LIMIT per thread (its newest ones)
    "recent": "SELECT thread_id, checkpoint_id FROM (SELECT thread_id, checkpoint_id,"
    " row_number() OVER (PARTITION BY thread_id ORDER BY checkpoint_id DESC) AS n"
    " FROM checkpoints WHERE checkpoint_id > %(above)s) AS r"
    " WHERE n <= %(limit)s ORDER BY thread_id, checkpoint_id",
    # threads whose root namespace's latest checkpoint has a pending interrupt write
    "interrupted": "SELECT c.thread_id FROM (SELECT thread_id, MAX(checkpoint_id) AS cid"
    " FROM checkpoints WHERE checkpoint_ns = '' GROUP BY thread_id) AS c"
    " WHERE EXISTS (SELECT 1 FROM checkpoint_writes AS w WHERE w.thread_id = c.thread_id"
    " AND w.checkpoint_ns = '' AND w.checkpoint_id = c.cid AND w.idx = %(interrupt)s)",
}


def postgres_health(endpoint: Foreign, health_window: HealthWindow, now: float) -> FleetHealth:
    """The scan on LangGraph's ``PostgresSaver``: the four :data:`POSTGRES_QUERIES` over its
    three tables, in one read-only repeatable-read transaction (one snapshot), whatever the
    number of threads. Ids, namespaces and write indexes only, never the ``checkpoint``,
    ``metadata`` or ``blob`` columns; the bytes are the tables' ``pg_total_relation_size``."""
    params = {
        "above": id_at(now - max(health_window.window, health_window.runaway_period)),
        "limit": RECENT_LIMIT,
        "interrupt": INTERRUPT_IDX,
    }
    started = time.perf_counter()
    with postgres_snapshot(endpoint.saver, endpoint.label) as cur:
        cur.execute(POSTGRES_QUERIES["bytes"])
        row = cur.fetchone()
        if row is None or not row["present"]:
            raise NotFound(
                f"no LangGraph checkpoint tables ({', '.join(POSTGRES_TABLES)}) at"
                f" {endpoint.label} (PostgresSaver.setup() creates them)"
            )
        size = int(row["bytes"])
        cur.execute(POSTGRES_QUERIES["newest"])
        newest = {str(r["thread_id"]): str(r["newest"]) for r in cur.fetchall()}
        recent: dict[str, list[str]] = {}
        cur.execute(POSTGRES_QUERIES["recent"], params)
        for r in cur.fetchall():
            recent.setdefault(str(r["thread_id"]), []).append(str(r["checkpoint_id"]))
        cur.execute(POSTGRES_QUERIES["interrupted"], params)
        interrupted = {str(r["thread_id"]) for r in cur.fetchall()}
    activities = [
        Activity(thread_id, cid, recent.get(thread_id, []), thread_id in interrupted)
        for thread_id, cid in sorted(newest.items())
    ]
    health = summarize(activities, health_window, now, storage_bytes=size)
    health.requests = len(POSTGRES_QUERIES)
    health.seconds = time.perf_counter() - started
    return health


def read_health(url: str, key_prefix: str | None, health_window: HealthWindow) -> FleetHealth:
    now = time.time()
    try:
        with open_endpoint(url, key_prefix=key_prefix) as endpoint:
            if isinstance(endpoint, Native):
                health: FleetHealth = endpoint.call(scan(endpoint.saver.port, health_window, now))
                return health
            if endpoint.kind == "postgres":
                return postgres_health(endpoint, health_window, now)
            if endpoint.kind != "sqlite":
                raise CliError(f"graphkeep health does not read {endpoint.kind} savers yet")
            return sqlite_health(endpoint, health_window, now)
    except StorageUnavailable as exc:
        raise Unreachable(" ".join(str(exc).split())) from exc


# -- writing ---------------------------------------------------------------------------

#: (name, help, FleetHealth attribute) of each gauge ``--format prometheus`` writes: the
#: report's (:data:`~graphkeep.checkpoint.health.FLEET_GAUGES`, as the OTel Prometheus
#: exporter names them), and ``--capacity`` after ``graphkeep_storage_bytes``
GAUGES: list[tuple[str, str, str]] = [
    (g.prometheus_name, g.description, g.field) for g in FLEET_GAUGES
]
GAUGES.insert(
    [name for name, _, _ in GAUGES].index("graphkeep_storage_bytes") + 1,
    (
        "graphkeep_storage_capacity_bytes",
        "What the store may hold (graphkeep health --capacity).",
        "capacity",
    ),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _gauges(specs: list[tuple[str, str, str]], values: dict[str, Any], labels: str) -> list[str]:
    """The exposition lines of gauges ``(name, help, key)`` whose ``values[key]`` is known."""
    lines: list[str] = []
    for name, help_text, key in specs:
        value = values[key]
        if value is None:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines.append(f"{name}{{{labels}}} {_number(value)}")
    return lines


def _by_label(
    name: str,
    kind: str,
    help_text: str,
    labels: str,
    label: str,
    samples: Iterable[tuple[str, Any]],
) -> list[str]:
    """The exposition lines of the metric ``name`` with one sample per value of ``label``
    (``samples``: (that value, the sample)), besides the ``labels`` every sample has."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for value, sample in samples:
        lines.append(f'{name}{{{labels},{label}="{_label(value)}"}} {sample}')
    return lines


def prometheus_text(health: FleetHealth, backend: str, capacity: int | None = None) -> str:
    """The report in Prometheus' text exposition format (a ``backend`` label on each)."""
    values: dict[str, Any] = {g.field: g.value(health) for g in FLEET_GAUGES}
    values["capacity"] = capacity
    labels = f'backend="{_label(backend)}"'
    runaway = _by_label(
        "graphkeep_runaway_thread_checkpoints",
        "gauge",
        "Checkpoints in the runaway period of each runaway thread.",
        labels,
        "thread_id",
        [(r.thread_id, r.checkpoints) for r in health.runaway],
    )
    return "\n".join(_gauges(GAUGES, values, labels) + runaway) + "\n"


#: (name, help, report field) of the gauges ``--hot`` adds to ``--format prometheus``
HOT_GAUGES = [
    (
        "graphkeep_hot_hit_ratio",
        "Hits over reads through the hot layer, every process (graphkeep health --hot).",
        "hit_rate",
    ),
    ("graphkeep_hot_threads", "Threads the hot layer's Redis holds now.", "threads"),
    ("graphkeep_hot_bytes", "Redis bytes of those threads (MEMORY USAGE).", "bytes"),
]


def hot_prometheus_text(hot: dict[str, Any], backend: str) -> str:
    """``--hot``'s part in the text exposition format (reads by outcome as a counter)."""
    labels = f'backend="{_label(backend)}"'
    reads = _by_label(
        "graphkeep_hot_reads_total",
        "counter",
        "Reads through the hot layer by outcome, every process.",
        labels,
        "outcome",
        hot["reads"].items(),
    )
    return "\n".join(_gauges(HOT_GAUGES, hot, labels) + reads) + "\n"


def crossed(health: FleetHealth, args: argparse.Namespace) -> list[str]:
    """The thresholds given on the command line that the report crosses."""
    found = []
    for name, value in (
        ("runaway", health.threads_runaway),
        ("interrupted", health.threads_interrupted),
        ("active", health.threads_active),
        ("threads", health.threads_stored),
    ):
        limit = getattr(args, f"max_{name}")
        if limit is not None and value > limit:
            found.append(f"{value} {name} thread(s) > {limit}")
    if args.max_bytes is not None and (health.storage_bytes or 0) > args.max_bytes:
        found.append(f"{human_bytes(health.storage_bytes)} stored > {human_bytes(args.max_bytes)}")
    return found


def _backend(url: str) -> str:
    return url.split("://", 1)[0].lower()


def cmd_health(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.json and args.format == "prometheus":
        raise UsageError("--json and --format prometheus exclude each other")
    count, period = args.runaway
    health_window = HealthWindow(args.window, count, period)
    try:
        hot = read_hot_report(args)
    except HotUnreachable as exc:
        raise Unreachable(str(exc)) from exc
    health = read_health(args.url, args.key_prefix, health_window)
    fallback = unmoved_report(args)
    violations = crossed(health, args)
    if args.json:
        report: dict[str, Any] = {
            "url": safe_url(args.url),
            **health.as_json(),
            "at": iso(health.at),
            "oldest_activity": iso(health.oldest_activity),
            "newest_activity": iso(health.newest_activity),
            "capacity_bytes": args.capacity,
            "violations": violations,
        }
        if hot is not None:
            report["hot"] = hot
        if fallback is not None:
            report["fallback"] = fallback
        print_json(report, out)
    elif args.format == "prometheus":
        out.write(prometheus_text(health, _backend(args.url), args.capacity))
        if hot is not None:
            out.write(hot_prometheus_text(hot, _backend(args.url)))
        if fallback is not None:
            out.write(unmoved_prometheus(fallback, _backend(args.url)))
    else:
        stored = "unknown" if health.storage_bytes is None else human_bytes(health.storage_bytes)
        out.write(
            f"threads: {health.threads_stored} stored, {health.threads_active} active in the"
            f" last {_span(health.window.window)}, {health.threads_interrupted} interrupted,"
            f" {health.threads_runaway} runaway (> {count} checkpoints in {_span(period)})\n"
            f"stored: {stored}\n"
            f"activity: oldest {iso(health.oldest_activity)},"
            f" newest {iso(health.newest_activity)}\n"
            f"scan: {health.requests} request(s), {health.seconds:.3f}s\n"
        )
        if health.concurrent_forks is not None:
            out.write(
                f"forks: {health.concurrent_forks} by runs that raced in the last"
                f" {_span(health.window.window)} (graphkeep check --thread T names them)\n"
            )
        for r in health.runaway:
            out.write(f"RUNAWAY {r.thread_id}: {r.checkpoints} checkpoints in {_span(period)}\n")
        for thread_id in health.forked_ids[:20]:
            out.write(f"FORKED {thread_id}\n")
        for thread_id in health.interrupted_ids[:20]:
            out.write(f"interrupted: {thread_id}\n")
        if hot is not None:
            write_hot_report(hot, out)
        if fallback is not None:
            out.write(unmoved_text(fallback))
        for line in violations:
            out.write(f"THRESHOLD {line}\n")
    if violations and (args.json or args.format == "prometheus"):
        for line in violations:
            err.write(f"graphkeep: threshold crossed: {line}\n")
    return EXIT_THRESHOLD if violations else EXIT_OK


def _span(seconds: float) -> str:
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= factor and seconds % factor == 0:
            return f"{int(seconds // factor)}{unit}"
    return f"{seconds:g}s"
