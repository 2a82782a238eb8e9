"""Turn cost suite (issue 48): what one W50 turn costs on each backend, beside InMemorySaver
and each rival, and what the AG-UI endpoint costs per event, in one section and one chart.

Per backend, W50 turns of graphkeep, the backend's rival(s) and InMemorySaver, in rounds with
a rotating order (the saver suites' contenders and scratch spaces, W50 only, one history read):

- **redis** (``REDIS_URL``): graphkeep, plainredis (:mod:`.redis`);
- **redis-stack** (``REDIS_STACK_URL``): graphkeep and langgraph-checkpoint-redis's
  ``RedisSaver`` (it needs RediSearch and RedisJSON); other work shares this server, so nothing
  is flushed: each saver runs under a fresh key prefix whose keys and indexes are dropped after
  the run (``RedisSaver``'s ``write_keys_zset:<thread>`` keys too);
- **mongodb** (``MONGODB_URI``): graphkeep, ``MongoDBSaver`` (:mod:`.mongodb`), at most 10
  turns a run (the local FerretDB scans its collections, and is shared: the quick size
  compares the savers there);
- **dynamodb** (``DYNAMODB_ENDPOINT_URL``): graphkeep, ``DynamoDBSaver`` in its own
  virtualenv (:mod:`.dynamodb`).

Columns: ms/turn (median wall time), client CPU ms/turn (median ``time.process_time()`` of
the process that runs the turns, every thread: the saver's client and driver, LangGraph and
the graph; the servers are other processes and are not counted), requests/turn (round trips
counted at the client, as in each saver suite), and ms and CPU as multiples of InMemorySaver's
in the same run. The AG-UI rows are the live suite's (:mod:`.live`): ``AGUIRuns`` of a token
graph and ``stream_run`` of as many tokens on the same event log, events/s per process and
requests per 1,000 events, on every backend of the live suite.

``--suite turncost`` measures all of it; under ``--suite all`` the section is built from what
the redis, mongodb, dynamodb and live suites measured in the same invocation, and measures only
what they do not (the Redis Stack rows). Written to ``<out>/turn-cost.md`` and
``<out>/turn-cost.png``.
"""

from __future__ import annotations

import os
import platform
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from bench import render
from bench.live_workload import AppendResult
from bench.probes import Probe, count_round_trips
from bench.render import NA, Bars, Figure, Panel, number, table, version
from bench.suites import Contender, InProcess, Options, Skip, Suite, load
from bench.workloads import GROWTH_WORKLOAD, Opened, Result, Workload, combine, workload
from graphkeep.errors import mask_url

NAME = "turncost"
#: the turns of a MongoDB run (``--quick``'s; :attr:`Backend.max_turns`)
QUICK_TURNS = 10
#: the report's file names in ``--out``
FILE = "turn-cost"
REFERENCE = "InMemorySaver"
#: the workload whose turns are costed
WORKLOAD = GROWTH_WORKLOAD
CPU_LABEL = (
    "client CPU = time.process_time() around each turn in the process that runs it (every"
    " thread: the saver's client and driver, LangGraph, the graph; DynamoDBSaver runs in its"
    " own virtualenv and is measured there), median per turn; the servers are other processes"
    " and are not counted"
)


@dataclass(frozen=True)
class Backend:
    """One backend's rows: the savers measured there (graphkeep first, InMemorySaver last)."""

    name: str
    title: str
    rivals: tuple[str, ...]
    #: the saver suite whose W50 rows these are (``--suite all`` reuses them); None: own
    suite: str | None
    contenders: Callable[[Options], list[Contender]]
    where: Callable[[Options], str]
    unavailable: Callable[[], Skip | None]
    #: turns per run at most (FerretDB, the local MongoDB stand-in, scans its collections:
    #: the quick size is enough to compare there); None: ``--turns``
    max_turns: int | None = None

    @property
    def savers(self) -> tuple[str, ...]:
        return ("graphkeep", *self.rivals, REFERENCE)


def _from_suite(name: str, savers: Sequence[str]) -> Callable[[Options], list[Contender]]:
    def contenders(options: Options) -> list[Contender]:
        return [c for c in load(name).contenders(options) if c.name in savers]

    return contenders


# --------------------------------------------------------------------------- Redis Stack


def redis_stack_url() -> str:
    return os.environ.get("REDIS_STACK_URL", "redis://127.0.0.1:16380/0")


def _redis_stack_client() -> Any:
    import redis

    return redis.Redis.from_url(redis_stack_url(), socket_timeout=10, socket_connect_timeout=2)


def _drop_tagged(client: Any, tag: str) -> None:
    """Every index and key of the server whose name holds ``tag``, and ``RedisSaver``'s
    ``write_keys_zset:<thread>:…`` keys of the threads those keys name (outside its prefixes)."""
    for index in client.execute_command("FT._LIST"):
        name = index.decode() if isinstance(index, bytes) else str(index)
        if tag in name:
            client.execute_command("FT.DROPINDEX", name, "DD")
    keys = list(client.scan_iter(match=f"*{tag}*", count=1000))
    threads = {k.split(b":")[1] for k in keys if k.count(b":") >= 1}
    for thread in threads:
        keys += client.scan_iter(match=b"write_keys_zset:" + thread + b":*", count=1000)
    for start in range(0, len(keys), 1000):
        client.unlink(*keys[start : start + 1000])


def _redis_stack_unavailable() -> Skip | None:
    try:
        import langgraph.checkpoint.redis  # noqa: F401
    except ImportError:
        return Skip("langgraph-checkpoint-redis is missing (pip install 'graphkeep[dev]')")
    try:
        client = _redis_stack_client()
        try:
            client.execute_command("FT._LIST")
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run", with the reason
        url = mask_url(redis_stack_url())
        return Skip(f"no Redis Stack answers at {url} ({type(exc).__name__}: {exc})")
    return None


def _redis_stack_contenders(options: Options) -> list[Contender]:
    @contextmanager
    def open_graphkeep(work: Workload) -> Iterator[Opened]:
        import graphkeep

        tag = f"bench-tc-{uuid.uuid4().hex[:8]}"
        probe = Probe()
        try:
            with graphkeep.connect(redis_stack_url(), key_prefix=tag) as saver:
                count_round_trips(saver.client, probe)
                yield Opened(saver, probe)
        finally:
            admin = _redis_stack_client()
            try:
                _drop_tagged(admin, tag)
            finally:
                admin.close()

    @contextmanager
    def open_redissaver(work: Workload) -> Iterator[Opened]:
        from langgraph.checkpoint.redis import RedisSaver

        tag = f"benchtc{uuid.uuid4().hex[:8]}"
        probe = Probe()
        client = count_round_trips(_redis_stack_client(), probe)
        try:
            saver = RedisSaver(
                redis_client=client,
                checkpoint_prefix=f"{tag}_checkpoint",
                checkpoint_write_prefix=f"{tag}_checkpoint_write",
            )
            saver.setup()
            probe.take()
            yield Opened(saver, probe)
        finally:
            try:
                _drop_tagged(client, tag)
            finally:
                client.close()

    @contextmanager
    def open_memory(work: Workload) -> Iterator[Opened]:
        yield Opened(InMemorySaver(), Probe(counts_requests=False))

    return [
        InProcess("graphkeep", open_graphkeep),
        InProcess("RedisSaver", open_redissaver),
        InProcess(REFERENCE, open_memory),
    ]


def _redis_stack_where(options: Options) -> str:
    return f"Redis Stack at {mask_url(redis_stack_url())}: each saver under a fresh key prefix"


def _redis_where(options: Options) -> str:
    from bench.suites.redis import redis_url

    db = options.redis_db
    return f"Redis at {mask_url(redis_url())}: graphkeep in db {db}, plainredis in db {db + 1}"


def _mongodb_where(options: Options) -> str:
    from bench.suites.mongodb import DATABASES, mongodb_url

    return (
        f"MongoDB at {mask_url(mongodb_url())}: graphkeep in {DATABASES['graphkeep']},"
        f" MongoDBSaver in {DATABASES['MongoDBSaver']}"
    )


def _dynamodb_where(options: Options) -> str:
    from bench.suites.dynamodb import TABLES, endpoint_url, region

    return (
        f"DynamoDB at {endpoint_url()} (region {region()}): graphkeep in table"
        f" {TABLES['graphkeep']}, DynamoDBSaver in table {TABLES['DynamoDBSaver']} (its own"
        " virtualenv)"
    )


def _suite_unavailable(name: str) -> Callable[[], Skip | None]:
    return lambda: load(name).unavailable()


BACKENDS: tuple[Backend, ...] = (
    Backend(
        "redis",
        "Redis",
        ("plainredis",),
        "redis",
        _from_suite("redis", ("graphkeep", "plainredis", REFERENCE)),
        _redis_where,
        _suite_unavailable("redis"),
    ),
    Backend(
        "redis-stack",
        "Redis Stack",
        ("RedisSaver",),
        None,
        _redis_stack_contenders,
        _redis_stack_where,
        _redis_stack_unavailable,
    ),
    Backend(
        "mongodb",
        "MongoDB",
        ("MongoDBSaver",),
        "mongodb",
        _from_suite("mongodb", ("graphkeep", "MongoDBSaver", REFERENCE)),
        _mongodb_where,
        _suite_unavailable("mongodb"),
        max_turns=QUICK_TURNS,
    ),
    Backend(
        "dynamodb",
        "DynamoDB",
        ("DynamoDBSaver",),
        "dynamodb",
        _from_suite("dynamodb", ("graphkeep", "DynamoDBSaver", REFERENCE)),
        _dynamodb_where,
        _suite_unavailable("dynamodb"),
    ),
)


# --------------------------------------------------------------------------- measuring


@dataclass
class Rows:
    """One backend's W50 results (graphkeep, rivals, InMemorySaver), or why there are none."""

    backend: Backend
    where: str = ""
    results: tuple[Result, ...] = ()
    error: str = ""


@dataclass
class AGUIRow:
    """One backend's AG-UI endpoint and ``stream_run`` runs (the live suite's)."""

    backend: str
    agui: AppendResult | None
    streamed: AppendResult | None
    errors: tuple[str, ...] = ()


def measure_rows(backend: Backend, options: Options) -> Rows:
    """W50 of the backend's savers, ``options.rounds`` rounds in rotating order, pooled."""
    rows = Rows(backend)
    skip = backend.unavailable()
    if skip is not None:
        rows.error = f"not run: {skip.reason}"
        return rows
    if backend.max_turns is not None and options.turns > backend.max_turns:
        options = replace(options, turns=backend.max_turns)
    work = workload(WORKLOAD)
    contenders = backend.contenders(options)
    samples: dict[str, list[Result]] = {}
    for round_ in range(options.rounds):
        shift = round_ % max(len(contenders), 1)
        for contender in contenders[shift:] + contenders[:shift]:
            started = time.perf_counter()
            label = f"round {round_ + 1}/{options.rounds}: {contender.name} on {work.name}"
            print(f"  turn cost {backend.name} {label} ...", end="", flush=True)
            result = contender.run(work, options, NAME)
            samples.setdefault(contender.name, []).append(result)
            print(f" {time.perf_counter() - started:.1f} s", flush=True)
    rows.results = tuple(combine(samples[c.name]) for c in contenders)
    rows.where = backend.where(options)
    return rows


def measure_agui(options: Options, names: Sequence[str]) -> list[AGUIRow]:
    """The live suite's ``stream_run`` and AG-UI endpoint steps on each of ``names``."""
    from bench.suites import live

    sizes = live.Sizes.scaled(min(options.turns / live.FULL_TURNS, 1.0))
    rng = random.Random(11)
    steps = ("stream_run", "AG-UI endpoint")
    return [
        agui_row(live.measure_backend(name, options, sizes, rng, steps=steps)) for name in names
    ]


def agui_row(column: Any) -> AGUIRow:
    """The turn cost section's row of a live suite column."""
    return AGUIRow(column.backend, column.agui, column.streamed, tuple(column.errors))


def warm_up() -> None:
    from bench.cli import warm_up as untimed_turns

    untimed_turns()


# --------------------------------------------------------------------------- report


def _times(value: float | None, reference: float | None) -> str:
    if value is None or not reference:
        return NA
    return f"{value / reference:,.2f} x"


def _requests(r: Result) -> str:
    if r.saver == REFERENCE:
        return "0 (in process)"
    return number(r.requests_per_turn, 2)


def backend_table(rows: Rows) -> list[str]:
    """One backend's table: a row per saver, graphkeep first, InMemorySaver last."""
    title = f"### {rows.backend.title}"
    if not rows.results:
        return ["", title, "", f"Not measured: {rows.error or 'no result'}"]
    by = {r.saver: r for r in rows.results}
    reference = by.get(REFERENCE)
    ref_ms = reference.ms_per_turn if reference else None
    ref_cpu = reference.cpu_ms_per_turn if reference else None
    cells = [
        [
            f"**{r.saver}**" if r.saver == "graphkeep" else r.saver,
            number(r.ms_per_turn, 2),
            _times(r.ms_per_turn, ref_ms),
            number(r.cpu_ms_per_turn, 2),
            _times(r.cpu_ms_per_turn, ref_cpu),
            _requests(r),
        ]
        for name in rows.backend.savers
        if (r := by.get(name)) is not None
    ]
    headers = [
        "saver",
        "ms/turn",
        f"ms x {REFERENCE}",
        "client CPU ms/turn",
        f"CPU x {REFERENCE}",
        "requests/turn",
    ]
    rounds = "/".join(str(n) for n in sorted({r.rounds for r in rows.results}))
    turns = "/".join(str(n) for n in sorted({r.turns for r in rows.results}))
    where = f"{rows.where}; {turns} turns, {rounds} round(s) per saver."
    lines = ["", title, "", where, "", *table(headers, cells, "lrrrrr")]
    missing = [name for name in rows.backend.savers if name not in by]
    if missing:
        lines += ["", f"Not measured here: {', '.join(missing)}"]
    return lines


def agui_table(agui: Sequence[AGUIRow]) -> list[str]:
    lines = [
        "",
        "### AG-UI endpoint",
        "",
        "The live suite's runs: `AGUIRuns.start` (what `POST /agent` starts) of a one-node graph"
        " streaming tokens from a fake chat model, every AG-UI event it writes counted"
        " (`RUN_STARTED` … `RUN_FINISHED`), requests of its event log and of the graph's saver;"
        " beside it `stream_run` of as many tokens on the same backend's event log. Events/s per"
        " process, timed to the run's close, no reader following.",
        "",
    ]
    cells = []
    for row in agui:
        cells.append(
            [
                row.backend,
                number(None if row.agui is None else row.agui.events, 0),
                number(None if row.agui is None else row.agui.per_second, 0),
                number(None if row.agui is None else row.agui.per_1000, 1),
                number(None if row.streamed is None else row.streamed.per_second, 0),
                number(None if row.streamed is None else row.streamed.per_1000, 1),
                _times(
                    None if row.streamed is None else row.streamed.per_second,
                    None if row.agui is None else row.agui.per_second,
                ),
            ]
        )
    headers = [
        "backend",
        "AG-UI events",
        "AG-UI events/s",
        "AG-UI requests / 1,000 events",
        "stream_run events/s",
        "stream_run requests / 1,000 events",
        "stream_run / AG-UI events/s",
    ]
    lines += table(headers, cells, "lrrrrrr")
    errors = [f"{row.backend}: {e}" for row in agui for e in row.errors]
    lines += render.section("Not measured", errors)
    return lines


def markdown(rows: Sequence[Rows], agui: Sequence[AGUIRow], reused: Sequence[str]) -> str:
    source = (
        f"the {WORKLOAD} rows of the {', '.join(reused)} suite(s) of this run, the others"
        " measured for this section"
        if reused
        else "measured for this section"
    )
    lines = [
        "## graphkeep bench: turn cost",
        "",
        f"What one {WORKLOAD} turn costs per backend (the turns of one thread per saver, in"
        f" rounds in rotating order, medians pooled over rounds; {source}), beside {REFERENCE}"
        " (no store: the graph's own cost) and each rival on the same server. Run on"
        f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}"
        f" ({os.cpu_count()} CPUs), Python {platform.python_version()}, langgraph"
        f" {version('langgraph', '?')}, graphkeep {version('graphkeep', '?')}.",
        "",
        "- ms/turn = median wall time of `invoke`",
        f"- {CPU_LABEL}",
        "- requests/turn = round trips counted at the client (each saver suite's count: Redis"
        " commands, pipelines and scripts; MongoDB commands; DynamoDB HTTP requests)",
        f"- x {REFERENCE} = the figure over {REFERENCE}'s in the same run",
        "- timings are medians on a shared, noisy machine: compare within one table only;"
        " FerretDB and moto are stand-ins whose times say little about MongoDB's and DynamoDB's",
    ]
    for backend_rows in rows:
        lines += backend_table(backend_rows)
    lines += agui_table(agui)
    return "\n".join(lines) + "\n"


#: bar colors per series: graphkeep, the backend's rival (named on its bar), InMemorySaver
COLORS = {"graphkeep": "#2a7ab9", "rival": "#e07b39", REFERENCE: "#9aa5b1"}


def chart(rows: Sequence[Rows], agui: Sequence[AGUIRow], path: Path) -> None:
    """ms, client CPU and requests per turn per backend (graphkeep, rival, InMemorySaver),
    and the AG-UI endpoint's events/s beside ``stream_run``'s."""
    measured = [r for r in rows if r.results]
    groups = [r.backend.name for r in measured]

    def series(attr: str, role: str) -> Bars:
        values: list[float | None] = []
        labels: list[str] = []
        for r in measured:
            name = role if role != "rival" else r.backend.rivals[0]
            found = next((x for x in r.results if x.saver == name), None)
            value = None if found is None else getattr(found, attr)
            if found is not None and name == REFERENCE and attr == "requests_per_turn":
                value = 0.0  # in process: no request (the table says so too)
            values.append(None if value is None else float(value))
            shown = "" if value is None else f"{value:,.1f}"
            labels.append(f"{name}\n{shown}" if role == "rival" and shown else shown)
        label = "rival (named on its bar)" if role == "rival" else role
        return Bars(label, values, COLORS[role], labels)

    def panel(title: str, attr: str, log: bool) -> Panel:
        roles = ("graphkeep", "rival", REFERENCE)
        return Panel(title, groups, [series(attr, role) for role in roles], log=log, legend=True)

    def rate(label: str, pick: Callable[[AGUIRow], AppendResult | None], color: str) -> Bars:
        values = [None if (found := pick(row)) is None else found.per_second for row in agui]
        labels = ["" if v is None else f"{v:,.0f}" for v in values]
        return Bars(label, values, color, labels)

    events = Panel(
        "AG-UI endpoint vs stream_run (events/s per process; log scale)",
        [row.backend for row in agui],
        [
            rate("AG-UI endpoint", lambda row: row.agui, "#2a7ab9"),
            rate("stream_run", lambda row: row.streamed, "#5aa469"),
        ],
        log=True,
        legend=True,
    )
    figure = Figure(
        f"graphkeep bench: turn cost ({WORKLOAD}) and the AG-UI endpoint",
        [
            panel("ms per turn (median; log scale)", "ms_per_turn", True),
            panel("client CPU ms per turn (median; log scale)", "cpu_ms_per_turn", True),
            panel("requests per turn", "requests_per_turn", False),
            events,
        ],
        rows=2,
        columns=2,
        size=(15, 10),
    )
    render.chart(figure, path)


# --------------------------------------------------------------------------- running


def run(
    options: Options, out: Path, chart_too: bool, measured: Mapping[str, object] | None = None
) -> tuple[list[Rows], list[AGUIRow]]:
    """The section; ``measured``: suite name -> what it returned earlier in this invocation
    (a saver suite's results, the live suite's ``(columns, rival)``), reused where present."""
    from bench.suites import live

    measured = measured or {}
    # one history read per run: the turns are what the section costs
    history = replace(options, history_runs=1)
    reused: list[str] = []
    rows: list[Rows] = []
    warmed = False
    for backend in BACKENDS:
        earlier = measured.get(backend.suite) if backend.suite else None
        if isinstance(earlier, list):
            results = [
                r
                for r in earlier
                if isinstance(r, Result) and r.workload == WORKLOAD and r.saver in backend.savers
            ]
            rows.append(Rows(backend, backend.where(options), tuple(results)))
            reused.append(backend.name)
            continue
        if not warmed:
            warm_up()
            warmed = True
        try:
            rows.append(measure_rows(backend, history))
        except Exception as exc:  # noqa: BLE001 - one backend failing is reported in its table
            text = " ".join(str(exc).split())[:300]
            rows.append(Rows(backend, error=f"failed: {type(exc).__name__}: {text}"))
            print(f"\n  turn cost {backend.name}: {type(exc).__name__}: {text}", flush=True)
    earlier_live = measured.get("live")
    if isinstance(earlier_live, tuple) and earlier_live:
        agui = [agui_row(column) for column in earlier_live[0]]
    else:
        agui = measure_agui(options, live.BACKENDS)
    text = markdown(rows, agui, reused)
    render.publish(text, out, FILE, partial(chart, rows, agui) if chart_too else None)
    return rows, agui


def unavailable() -> Skip | None:
    return None  # a backend that cannot run says why in its table


SUITE = Suite(
    name=NAME,
    title="turn cost",
    stored_label="n/a",
    request_label="round trips counted at the client",
    unavailable=unavailable,
    contenders=lambda options: [],
    run=lambda options, out, chart_too: run(options, out, chart_too),
    run_after=run,
)
