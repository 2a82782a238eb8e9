"""Concurrency suite: N threads at once on one async saver per process, graphkeep vs rivals.

For each backend, each N of ``--threads`` (default 1, 10, 100, 500) and each contender on
the same server, one process and one asyncio loop run N LangGraph threads of W50 turns at
once (:mod:`bench.concurrency_workload`: what is measured and how). Each
measurement opens its contender afresh on a scratch space of its own:

- **Redis** (``REDIS_URL``): graphkeep's ``AsyncRedisSaver`` in database ``--redis-db``,
  langgraph-checkpoint-plainredis's ``AsyncRedisSaver`` in the next, both flushed first;
- **Redis Stack** (``REDIS_STACK_URL``, database 0, flushed first like the store suite's: only
  when empty or the bench's own): graphkeep and langgraph-checkpoint-redis's
  ``AsyncRedisSaver`` (which needs RediSearch and RedisJSON, so it runs only here), each under a
  fresh key prefix (the official saver's index names are its prefixes), removed afterwards;
- **Redis Cluster** (``REDIS_CLUSTER_URL``): graphkeep under a fresh key prefix, its threads
  deleted afterwards; plainredis is tried on a ``redis.asyncio.RedisCluster`` client;
- **MongoDB** (``MONGODB_URI``): graphkeep's ``AsyncMongoDBSaver`` and
  langgraph-checkpoint-mongodb's ``MongoDBSaver`` (its ``a*`` methods run the sync saver in
  the loop's default thread pool), each in its own database, dropped first;
- **DynamoDB** (``DYNAMODB_ENDPOINT_URL``): graphkeep's ``AsyncDynamoDBSaver`` and
  langgraph-checkpoint-aws's ``DynamoDBSaver`` (``a*`` methods in the default thread pool;
  run in ``.bench-venvs/aws`` as in the dynamodb suite, the same measurement in a child
  process), each on its own table, created afresh.

Requests: graphkeep's are the requests its executor runs (one per Redis script, pipeline or
command, MongoDB command, DynamoDB API call; the bench's counter wraps the saver's async
executor); plainredis's and the official Redis saver's are round trips counted at their
redis-py connections (:func:`bench.probes.acount_round_trips`), MongoDBSaver's the
commands seen by a pymongo ``CommandListener``, DynamoDBSaver's botocore's ``before-send``
events. Turns per thread: ``--turns`` (50; ``--quick`` 10) up to N = 10, a tenth of it (at
least 1) above.

The report goes to ``<out>/concurrency.md``, the chart (turns/s against N, per backend) to
``concurrency.png`` and the results to ``concurrency.json``; ``python -m
bench.suites.concurrency --merge A/concurrency.json B/concurrency.json --out DIR``
makes one report of several runs (a slow backend run with fewer ``--turns``, say).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import render
from bench.concurrency_workload import (
    MAX_BLOCKING_MS,
    RESULT_MARK,
    THREADS,
    AsyncOpened,
    ConcurrencyResult,
    Opener,
    run_contender,
)
from bench.probes import Probe, acount_round_trips
from bench.render import NA, Bars, Figure, Legend, Panel, number, table, versions
from bench.suites import Options, Skip, Suite
from bench.suites import concurrency_exclusive as exclusive
from graphkeep.errors import mask_url

KEY_PREFIX = "bench"
MONGODB_DATABASES = {
    "graphkeep": "graphkeep_bench_conc_graphkeep",
    "MongoDBSaver": "graphkeep_bench_conc_mongodbsaver",
}
DYNAMODB_TABLES = {
    "graphkeep": "graphkeep_bench_conc_graphkeep",
    "DynamoDBSaver": "graphkeep_bench_conc_dynamodbsaver",
}
#: the N the loop-blocking target is judged at
BLOCKING_AT = 100
#: turns per thread above this N are a tenth of --turns
FEW_TURNS_ABOVE = 10


def turns_at(threads: int, turns: int) -> int:
    """Turns per thread at ``threads``: all of ``turns`` up to N = 10, a tenth above."""
    return turns if threads <= FEW_TURNS_ABOVE else max(1, turns // 10)


# --------------------------------------------------------------------------- contenders


@dataclass
class Contender:
    name: str
    #: what it is and how its async methods work, for the report
    note: str
    #: opens it in this process (None: ``child`` runs it)
    open: Opener | None = None
    #: (python, factory, extra environment): measured in a child process
    child: tuple[str, str, dict[str, str]] | None = None

    def measure(self, backend: str, threads: int, turns: int) -> ConcurrencyResult:
        if self.open is not None:
            return asyncio.run(
                run_contender(
                    self.open, backend=backend, saver_name=self.name, threads=threads, turns=turns
                )
            )
        assert self.child is not None
        return measure_in_child(self.name, backend, threads, turns, *self.child)


def measure_in_child(
    name: str,
    backend: str,
    threads: int,
    turns: int,
    python: str,
    factory: str,
    env: dict[str, str],
) -> ConcurrencyResult:
    from bench.worker import pythonpath

    command = [
        python, "-m", "bench.concurrency_workload", "--factory", factory,
        "--backend", backend, "--saver", name, "--threads", str(threads), "--turns", str(turns),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command,
            env={**os.environ, **env, "PYTHONPATH": pythonpath()},
            capture_output=True,
            text=True,
            timeout=1800,
        )
    except subprocess.TimeoutExpired:
        return _not_run(backend, name, threads, turns, "the child process took over 1800 s")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return ConcurrencyResult.from_json(json.loads(line[len(RESULT_MARK) :]))
    tail = " ".join((done.stderr or done.stdout).splitlines()[-3:])
    return _not_run(backend, name, threads, turns, f"child exit {done.returncode}: {tail[:240]}")


def _not_run(backend: str, name: str, threads: int, turns: int, why: str) -> ConcurrencyResult:
    return ConcurrencyResult(backend, name, threads, turns, failed_threads=threads, error=why)


def count_executor(saver: Any) -> Callable[[], int]:
    """Count the requests graphkeep's async saver runs (its executor wrapped, and its
    ``once`` path: a lease's release is sent that way)."""
    count = [0]

    def counting(inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def counted(request: Any) -> Any:
            count[0] += 1
            return await inner(request)

        return counted

    saver._aexecute = counting(saver._aexecute)
    saver._aonce = counting(saver._aonce)
    return lambda: count[0]


def _port(url: str, default: int) -> frozenset[int]:
    return frozenset({urlsplit(url.replace("+cluster", "")).port or default})


async def _delete_threads(saver: Any, threads: Sequence[str]) -> None:
    for start in range(0, len(threads), 50):
        await asyncio.gather(*(saver.adelete_thread(t) for t in threads[start : start + 50]))


@asynccontextmanager
async def _graphkeep(
    url: str, ports: frozenset[int], *, delete_after: bool = False, **options: Any
) -> AsyncIterator[AsyncOpened]:
    import graphkeep

    async with graphkeep.aconnect(url, **options) as saver:
        opened = AsyncOpened(saver, count_executor(saver), ports)
        yield opened
        if delete_after:
            await _delete_threads(saver, opened.threads)


# -- Redis


def redis_contenders(options: Options) -> list[Contender]:
    from bench.suites.redis import redis_url, scratch_database

    url = redis_url()
    ports = _port(url, 6379)

    def open_graphkeep() -> Any:
        db_url = scratch_database(url, options.redis_db, options.force_flush)
        return _graphkeep(db_url, ports, key_prefix=KEY_PREFIX)

    @asynccontextmanager
    async def open_plainredis() -> AsyncIterator[AsyncOpened]:
        from langgraph_checkpoint_plainredis import AsyncRedisSaver

        db_url = scratch_database(url, options.redis_db + 1, options.force_flush)
        probe = Probe()
        saver = AsyncRedisSaver(url=db_url, prefix=KEY_PREFIX)
        acount_round_trips(saver.client, probe)
        try:
            yield AsyncOpened(saver, lambda: probe.total, ports)
        finally:
            await saver.aclose()

    return [
        Contender("graphkeep", "graphkeep AsyncRedisSaver (redis.asyncio)", open_graphkeep),
        Contender(
            "plainredis",
            "langgraph-checkpoint-plainredis AsyncRedisSaver (redis.asyncio, its default"
            " client from the URL)",
            open_plainredis,
        ),
    ]


def redis_where(options: Options) -> str:
    from bench.suites.redis import redis_url

    db = options.redis_db
    return f"{mask_url(redis_url())}, graphkeep in db {db}, plainredis in db {db + 1}"


# -- Redis Stack


def redis_stack_url() -> str:
    return os.environ.get("REDIS_STACK_URL", "redis://127.0.0.1:16380/0")


async def _drop_prefix(client: Any, prefix: str) -> None:
    """Every index and key of the Redis Stack server named with ``prefix``."""
    for index in await client.execute_command("FT._LIST"):
        name = index.decode() if isinstance(index, bytes) else str(index)
        if name.startswith(prefix):
            await client.execute_command("FT.DROPINDEX", name, "DD")
    batch: list[Any] = []
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            await client.unlink(*batch)
            batch = []
    if batch:
        await client.unlink(*batch)


def redis_stack_contenders(options: Options) -> list[Contender]:
    from bench.suites.redis import scratch_database

    stack = redis_stack_url()
    ports = _port(stack, 6379)

    def scratch() -> str:
        """The Redis Stack database, flushed first as the store suite does (RediSearch's
        indexes live in database 0): only when it is empty or the bench's own, so no
        contender's leftovers (langgraph-checkpoint-redis writes keys outside its prefixes)
        reach the next suite or run."""
        db = int(urlsplit(stack).path.strip("/") or 0)
        return str(scratch_database(stack, db, options.force_flush))

    @asynccontextmanager
    async def open_graphkeep() -> AsyncIterator[AsyncOpened]:
        import redis.asyncio as aredis

        url = scratch()
        prefix = f"{KEY_PREFIX}-conc-{uuid.uuid4().hex[:8]}"
        try:
            async with _graphkeep(url, ports, key_prefix=prefix) as opened:
                yield opened
        finally:
            admin = aredis.Redis.from_url(url)
            try:
                await _drop_prefix(admin, prefix)
            finally:
                await admin.aclose()

    @asynccontextmanager
    async def open_official() -> AsyncIterator[AsyncOpened]:
        import redis.asyncio as aredis
        from langgraph.checkpoint.redis.aio import AsyncRedisSaver

        url = scratch()
        prefix = f"{KEY_PREFIX}conc{uuid.uuid4().hex[:8]}"
        probe = Probe()
        client = acount_round_trips(aredis.Redis.from_url(url), probe)
        saver = AsyncRedisSaver(
            redis_client=client,
            checkpoint_prefix=f"{prefix}_checkpoint",
            checkpoint_write_prefix=f"{prefix}_checkpoint_write",
        )
        try:
            await saver.asetup()
            yield AsyncOpened(saver, lambda: probe.total, ports)
        finally:
            try:
                await _drop_prefix(client, prefix)
            finally:
                await client.aclose()

    return [
        Contender("graphkeep", "graphkeep AsyncRedisSaver (redis.asyncio)", open_graphkeep),
        Contender(
            "RedisSaver (official)",
            "langgraph-checkpoint-redis AsyncRedisSaver (redis.asyncio + RedisVL; needs"
            " RediSearch and RedisJSON), on a redis.asyncio client made from the URL",
            open_official,
        ),
    ]


def redis_stack_where(options: Options) -> str:
    return (
        f"{mask_url(redis_stack_url())}, flushed before each contender (the bench's scratch"
        " database), each under a fresh key prefix"
    )


# -- Redis Cluster


def redis_cluster_url() -> str:
    return os.environ.get("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001")


def cluster_ports(url: str) -> frozenset[int]:
    import redis

    client = redis.RedisCluster.from_url(url.replace("+cluster", ""), socket_timeout=5)
    try:
        return frozenset(int(node.port) for node in client.get_nodes())  # type: ignore[no-untyped-call]
    finally:
        client.close()


def redis_cluster_contenders(options: Options) -> list[Contender]:
    url = redis_cluster_url()
    ports = cluster_ports(url)

    def open_graphkeep() -> Any:
        prefix = f"{KEY_PREFIX}-conc-{uuid.uuid4().hex[:8]}"
        return _graphkeep(url, ports, delete_after=True, key_prefix=prefix)

    @asynccontextmanager
    async def open_plainredis() -> AsyncIterator[AsyncOpened]:
        import redis.asyncio as aredis
        from langgraph_checkpoint_plainredis import AsyncRedisSaver

        client: Any = aredis.RedisCluster.from_url(url.replace("+cluster", ""))
        saver = AsyncRedisSaver(client, prefix=f"{KEY_PREFIX}-conc-{uuid.uuid4().hex[:8]}")
        opened = AsyncOpened(saver, None, ports)
        try:
            yield opened
            await _delete_threads(saver, opened.threads)
        finally:
            await client.aclose()

    return [
        Contender(
            "graphkeep", "graphkeep AsyncRedisSaver (redis.asyncio RedisCluster)", open_graphkeep
        ),
        Contender(
            "plainredis",
            "langgraph-checkpoint-plainredis AsyncRedisSaver given a redis.asyncio RedisCluster"
            " client (it documents a plain Redis; requests not counted here)",
            open_plainredis,
        ),
    ]


def redis_cluster_where(options: Options) -> str:
    return f"{mask_url(redis_cluster_url())}, each contender under a fresh key prefix"


# -- MongoDB


def mongodb_contenders(options: Options) -> list[Contender]:
    from bench.suites.mongodb import mongo_client, mongodb_url, scratch_database

    url = mongodb_url()
    ports = _port(url, 27017)

    def scratch(name: str) -> None:
        client = mongo_client()
        try:
            scratch_database(client, name, options.force_flush)
        finally:
            client.close()

    def open_graphkeep() -> Any:
        name = MONGODB_DATABASES["graphkeep"]
        scratch(name)
        parts = urlsplit(url)
        return _graphkeep(parts._replace(path=f"/{name}").geturl(), ports, key_prefix=KEY_PREFIX)

    @asynccontextmanager
    async def open_rival() -> AsyncIterator[AsyncOpened]:
        from langgraph.checkpoint.mongodb import MongoDBSaver

        name = MONGODB_DATABASES["MongoDBSaver"]
        scratch(name)
        probe = Probe()
        client = mongo_client(probe)
        try:
            yield AsyncOpened(MongoDBSaver(client, db_name=name), lambda: probe.total, ports)
        finally:
            client.close()

    return [
        Contender(
            "graphkeep", "graphkeep AsyncMongoDBSaver (pymongo AsyncMongoClient)", open_graphkeep
        ),
        Contender(
            "MongoDBSaver",
            "langgraph-checkpoint-mongodb MongoDBSaver: no asyncio client; its a* methods run"
            " the sync saver in the loop's default thread pool",
            open_rival,
        ),
    ]


def mongodb_where(options: Options) -> str:
    from bench.suites.mongodb import mongodb_url

    dbs = ", ".join(f"{saver} in {db}" for saver, db in MONGODB_DATABASES.items())
    return f"{mask_url(mongodb_url())}; {dbs}"


# -- DynamoDB


def dynamodb_contenders(options: Options) -> list[Contender]:
    from bench.suites import dynamodb
    from bench.worker import ensure_venv

    dynamodb.local_credentials()
    ports = _port(dynamodb.endpoint_url(), 443)

    def open_graphkeep() -> Any:
        table = DYNAMODB_TABLES["graphkeep"]
        dynamodb.drop_table(dynamodb.dynamodb_client(), table)
        return _graphkeep(dynamodb.table_url(table), ports, key_prefix=KEY_PREFIX)

    graphkeep = Contender("graphkeep", "graphkeep AsyncDynamoDBSaver (aiobotocore)", open_graphkeep)
    rival = "DynamoDBSaver"
    where = dynamodb.venv_dir()
    if not where.exists():
        print(f"  creating {where} for langgraph-checkpoint-aws (once; about a minute)")
    pins = [f"{dist}=={metadata.version(dist)}" for dist in ("langgraph", "langgraph-checkpoint")]
    try:
        python = ensure_venv(where, [*dynamodb.AWS_REQUIREMENTS, *pins])
    except Exception as exc:  # noqa: BLE001 - graphkeep still runs; the rival says why not
        why = f"not run: could not make {where} ({type(exc).__name__}: {exc})"

        @asynccontextmanager
        async def cannot(why: str = why) -> AsyncIterator[AsyncOpened]:
            raise RuntimeError(why)
            yield  # pragma: no cover - an async generator that never yields

        return [graphkeep, Contender(rival, "langgraph-checkpoint-aws DynamoDBSaver", cannot)]
    passed = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "DYNAMODB_"))}
    passed["GRAPHKEEP_BENCH_RIVAL_TABLE"] = DYNAMODB_TABLES[rival]
    return [
        graphkeep,
        Contender(
            rival,
            "langgraph-checkpoint-aws DynamoDBSaver: its a* methods run the sync (boto3) saver"
            " in the loop's default thread pool; measured in a child process in"
            f" {where} with the same langgraph",
            child=(str(python), "bench.suites.dynamodb:open_async_rival", passed),
        ),
    ]


def dynamodb_where(options: Options) -> str:
    from bench.suites.dynamodb import endpoint_url, region

    tables = ", ".join(f"{saver} in table {table}" for saver, table in DYNAMODB_TABLES.items())
    return f"{endpoint_url()} (region {region()}); {tables}"


@dataclass(frozen=True)
class Backend:
    name: str
    title: str
    contenders: Callable[[Options], list[Contender]]
    where: Callable[[Options], str]


BACKENDS: tuple[Backend, ...] = (
    Backend("redis", "Redis", redis_contenders, redis_where),
    Backend("redis-stack", "Redis Stack", redis_stack_contenders, redis_stack_where),
    Backend("redis-cluster", "Redis Cluster", redis_cluster_contenders, redis_cluster_where),
    Backend("mongodb", "MongoDB", mongodb_contenders, mongodb_where),
    Backend("dynamodb", "DynamoDB", dynamodb_contenders, dynamodb_where),
)


# --------------------------------------------------------------------------- running


@dataclass
class Column:
    """One backend's results at every N, or why it did not run."""

    backend: Backend
    where: str = ""
    notes: list[str] = field(default_factory=list)
    results: list[ConcurrencyResult] = field(default_factory=list)
    error: str | None = None
    #: graphkeep through ``saver.exclusive``: one run per thread, then N runs on few threads
    exclusive: list[ConcurrencyResult] = field(default_factory=list)


def measure_backend(backend: Backend, options: Options, threads: Sequence[int]) -> Column:
    column = Column(backend)
    try:
        contenders = backend.contenders(options)
        column.where = backend.where(options)
    except Exception as exc:  # noqa: BLE001 - the backend is reported as not run
        column.error = f"not run: {type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
        return column
    column.notes = [f"{c.name} = {c.note}" for c in contenders]
    for i, n in enumerate(threads):
        turns = turns_at(n, options.turns)
        shift = i % len(contenders)  # rotate the order so no contender always runs first
        for contender in contenders[shift:] + contenders[:shift]:
            print(
                f"  concurrency {backend.name}: {contender.name}, N={n} x {turns} turns ...",
                end="",
                flush=True,
            )
            started = time.perf_counter()
            result = contender.measure(backend.name, n, turns)
            column.results.append(result)
            outcome = "ok" if result.ok else f"FAILED ({result.error})"
            print(f" {time.perf_counter() - started:.1f} s, {outcome}", flush=True)
        ours = next((c.open for c in contenders if c.name == "graphkeep" and c.open), None)
        if ours is not None:  # issue 45's rows: the same through saver.exclusive
            column.exclusive += exclusive.measure(ours, backend.name, n, turns)
    order = {c.name: i for i, c in enumerate(contenders)}
    column.results.sort(key=lambda r: (r.threads, order.get(r.saver, 99)))
    return column


def run(options: Options, out: Path, chart_too: bool) -> list[Column]:
    """Every backend (``--backends``: these) at every N; the report, its chart and the
    results as JSON (``concurrency.json``, for :func:`merge`) go to ``out``."""
    threads = options.threads or THREADS
    chosen = [b for b in BACKENDS if not options.backends or b.name in options.backends]
    columns = [measure_backend(backend, options, threads) for backend in chosen]
    publish(columns, out, chart_too)
    return columns


def publish(columns: Sequence[Column], out: Path, chart_too: bool) -> None:
    render.publish(
        markdown(columns), out, "concurrency", partial(chart, columns) if chart_too else None
    )
    saved = [
        {
            "backend": c.backend.name,
            "where": c.where,
            "notes": c.notes,
            "error": c.error,
            "results": [r.to_json() for r in c.results],
            "exclusive": [r.to_json() for r in c.exclusive],
        }
        for c in columns
    ]
    (out / "concurrency.json").write_text(json.dumps(saved, indent=1))


def merge(paths: Sequence[Path], out: Path, chart_too: bool = True) -> list[Column]:
    """One report from the ``concurrency.json`` of several runs (e.g. a slow backend run
    with fewer ``--turns``), in the order of :data:`BACKENDS`; a later file's backend wins."""
    by_name = {b.name: b for b in BACKENDS}
    found: dict[str, Column] = {}
    for path in paths:
        for saved in json.loads(path.read_text()):
            column = Column(by_name[saved["backend"]], saved["where"], list(saved["notes"]))
            column.error = saved["error"]
            column.results = [ConcurrencyResult.from_json(r) for r in saved["results"]]
            column.exclusive = [ConcurrencyResult.from_json(r) for r in saved.get("exclusive", [])]
            found[column.backend.name] = column
    columns = [found[b.name] for b in BACKENDS if b.name in found]
    publish(columns, out, chart_too)
    return columns


# --------------------------------------------------------------------------- report

HEADERS = [
    "N",
    "saver",
    "turns/thread",
    "turns/s",
    "p50 ms",
    "p99 ms",
    "requests/turn",
    "peak connections",
    "loop blocking per call (CPU), median / max ms",
    "blocking max, wall ms",
    f"calls > {MAX_BLOCKING_MS:g} ms",
    "GC: collections (gen 2) / longest ms",
    "loop lag p99 / max ms",
    "outcome",
]


def _pair(a: float | None, b: float | None, digits: int = 2) -> str:
    if a is None and b is None:
        return NA
    return f"{number(a, digits)} / {number(b, digits)}"


def _outcome(r: ConcurrencyResult) -> str:
    if r.ok:
        return "ok"
    text = (r.error or "").replace("|", "\\|")
    if r.failed_threads and r.failed_threads < r.threads:
        return f"FAILED {r.failed_threads}/{r.threads} threads: {text}"
    return f"FAILED: {text}"


def result_row(r: ConcurrencyResult) -> list[str]:
    blocking = _pair(r.block_median_ms, r.block_max_ms)
    if r.block_max_method and r.block_max_ms is not None:
        blocking += f" ({r.block_max_method})"
    return [
        str(r.threads),
        r.saver,
        str(r.turns_per_thread),
        number(r.turns_per_second, 1),
        number(r.p50_ms, 1),
        number(r.p99_ms, 1),
        number(r.requests_per_turn, 2),
        number(r.peak_connections),
        blocking,
        number(r.block_wall_max_ms, 2),
        number(r.calls_over_limit) if r.calls else NA,
        f"{r.gc_collections} ({r.gc_full_collections}) / {number(r.gc_max_ms, 1)}"
        if r.gc_collections
        else NA,
        _pair(r.lag_p99_ms, r.lag_max_ms, 1),
        _outcome(r),
    ]


def ratio_lines(column: Column) -> list[str]:
    """Per N and rival: turns/s graphkeep / rival, p99 rival / graphkeep (above 1: ours better)."""
    by = {(r.saver, r.threads): r for r in column.results}
    rivals = list(dict.fromkeys(r.saver for r in column.results if r.saver != "graphkeep"))
    lines = []
    for r in column.results:
        if r.saver != "graphkeep":
            continue
        cells = []
        for rival in rivals:
            theirs = by.get((rival, r.threads))
            if theirs is None:
                continue
            if not theirs.ok or not theirs.turns_per_second:
                cells.append(f"{rival} failed")
                continue
            cells.append(
                f"{rival}: turns/s {render.ratio(r.turns_per_second, theirs.turns_per_second)},"
                f" p99 {render.ratio(theirs.p99_ms, r.p99_ms)}"
            )
        if cells:
            lines.append(f"- N={r.threads}: " + "; ".join(cells))
    return lines


def targets(column: Column) -> list[tuple[str, bool]]:
    """Issue 28: turns/s at least and p99 at most every rival's at every N; at N = 100 no
    graphkeep saver call blocks the loop longer than 5 ms."""
    title = column.backend.title
    out: list[tuple[str, bool]] = []
    for ours in (r for r in column.results if r.saver == "graphkeep"):
        n = ours.threads
        if not ours.ok:
            out.append(
                (f"{title} N={n}: graphkeep completes every thread: {_outcome(ours)}", False)
            )
            continue
        for theirs in (r for r in column.results if r.threads == n and r.saver != "graphkeep"):
            if not theirs.ok or theirs.turns_per_second is None:
                out.append((f"{title} N={n}: {theirs.saver} failed, graphkeep did not", True))
                continue
            assert ours.turns_per_second is not None
            out.append(
                (
                    f"{title} N={n}: graphkeep turns/s at least {theirs.saver}'s:"
                    f" {ours.turns_per_second:,.1f} vs {theirs.turns_per_second:,.1f}",
                    ours.turns_per_second >= theirs.turns_per_second,
                )
            )
            if ours.p99_ms is not None and theirs.p99_ms is not None:
                out.append(
                    (
                        f"{title} N={n}: graphkeep p99 at most {theirs.saver}'s:"
                        f" {ours.p99_ms:,.1f} vs {theirs.p99_ms:,.1f} ms",
                        ours.p99_ms <= theirs.p99_ms,
                    )
                )
        if n == BLOCKING_AT and ours.block_max_ms is not None:
            out.append(
                (
                    f"{title} N={n}: no graphkeep saver call blocks the loop over"
                    f" {MAX_BLOCKING_MS:g} ms: max {ours.block_max_ms:,.2f} ms"
                    f" ({ours.block_max_method}), {ours.calls_over_limit} of {ours.calls}"
                    " calls over",
                    ours.block_max_ms <= MAX_BLOCKING_MS,
                )
            )
    return out


def markdown(columns: Sequence[Column]) -> str:
    import platform

    lines = [
        "## graphkeep bench: concurrency",
        "",
        "One process, one asyncio loop: N LangGraph threads at once, each running W50 turns"
        " (the 2-node graph, async nodes) with `ainvoke`; turns per thread in the"
        " turns/thread column (`--turns` up to N = 10, a tenth of it above). Each"
        " contender is opened afresh on a scratch space of the same server for every N, and"
        " runs one untimed warm-up turn first. "
        + versions(
            (
                "langgraph",
                "langgraph-checkpoint",
                "graphkeep",
                "redis",
                "pymongo",
                "aiobotocore",
                "langgraph-checkpoint-plainredis",
                "langgraph-checkpoint-redis",
                "langgraph-checkpoint-mongodb",
            )
        )
        + f", Python {platform.python_version()}.",
        "",
        "- turns/s = turns completed / wall time of the run; p50 / p99 = of every turn's"
        " `ainvoke` (nearest rank)",
        "- requests/turn: graphkeep = requests its async executor runs (a Redis script or"
        " pipeline, a MongoDB command, a DynamoDB API call = 1); rivals = round trips at their"
        " redis-py connections, pymongo commands (CommandListener), botocore HTTP requests",
        "- peak connections = most TCP sockets of the process ESTABLISHED to the server's"
        " ports (/proc/self/fd matched with /proc/net/tcp, sampled every second and at the end)",
        "- loop blocking per call = the longest stretch a saver call (aget_tuple, aput,"
        " aput_writes, alist) held the loop without awaiting, measured by driving the call's"
        " coroutine step by step, in CPU time of the loop's thread (time.thread_time: the"
        " machine preempting the process is not counted; the wall-clock max beside it),"
        " garbage collections during the call taken out (they stop the whole process,"
        " whichever code allocated last: the GC column counts them, with the longest);"
        " median and max over the run's calls (the method of the max in brackets); calls >"
        f" {MAX_BLOCKING_MS:g} ms counts calls by that CPU time. A saver that runs its calls"
        " in a thread pool blocks little here, but"
        " its threads hold the GIL the loop needs: that shows in the loop lag",
        "- loop lag = how late a task sleeping 1 ms wakes, p99 / max over the run",
        "- timings on a shared 2-core machine with other work on it: compare within one run",
    ]
    for column in columns:
        title = column.backend.title
        lines += ["", f"### {title}", ""]
        if column.error:
            lines.append(f"{title}: {column.error}")
            continue
        lines += [f"{column.where}.", ""]
        lines += [f"- {note}" for note in column.notes]
        lines += [""]
        lines += table(HEADERS, [result_row(r) for r in column.results], "rlrrrrrrrrrrrl")
        ratios = ratio_lines(column)
        if ratios:
            lines += [
                "",
                "graphkeep vs rival (turns/s ours/theirs, p99 theirs/ours;"
                " above 1 = graphkeep better):",
                "",
            ]
            lines += ratios
        lines += exclusive.lines(column.results, column.exclusive, _outcome)
    all_targets = [
        t
        for column in columns
        for t in targets(column)
        + exclusive.targets(column.backend.title, column.exclusive, _outcome)
    ]
    lines += render.target_lines(all_targets)
    return "\n".join(lines) + "\n"


COLORS = {"graphkeep": "#2a7ab9"}
PALETTE = ["#e07b39", "#5aa469", "#b5446e", "#7d5ba6"]


def _rate(turns_per_second: float) -> str:
    return f"{turns_per_second:,.0f}" if turns_per_second >= 10 else f"{turns_per_second:.1f}"


def chart(columns: Sequence[Column], path: Path) -> None:
    """turns/s vs N per backend: one panel each, N as groups, a bar per contender; a
    contender that failed at an N says so at the foot of its bar."""
    shown = [c for c in columns if c.results]
    savers = list(dict.fromkeys(r.saver for c in shown for r in c.results))
    rivals = [s for s in savers if s not in COLORS]
    colors = {**COLORS, **{s: PALETTE[i % len(PALETTE)] for i, s in enumerate(rivals)}}
    panels = []
    for column in shown:
        threads = list(dict.fromkeys(r.threads for r in column.results))
        by = {(r.saver, r.threads): r for r in column.results}
        names = list(dict.fromkeys(r.saver for r in column.results))
        bars = []
        for saver in names:
            values: list[float | None] = []
            labels: list[str] = []
            for n in threads:
                r = by.get((saver, n))
                measured = r.turns_per_second if r is not None and r.ok else None
                values.append(measured)
                labels.append(_rate(measured) if measured else "failed" if r else "not run")
            bars.append(Bars(saver, values, colors[saver], labels))
        groups = [f"N={n}" for n in threads]
        panels.append(Panel(f"{column.backend.title}: turns/s", groups, bars))
    columns_count = 3
    rows = max(1, -(-(len(panels) + 1) // columns_count))
    note = (
        "one process, one asyncio loop\n"
        "N threads at once, W50 turns (async nodes)\n"
        "turns/s = turns completed / wall time\n"
        "failed: the contender failed at that N\n"
        "shared 2-core machine: compare within one run"
    )
    figure = Figure(
        "graphkeep bench: concurrency (turns/s vs N threads at once)",
        panels,
        rows=rows,
        columns=columns_count,
        size=(16, 4.5 * rows),
        legend=Legend([(s, colors[s]) for s in savers], note),
    )
    render.chart(figure, path)


def unavailable() -> Skip | None:
    return None  # a backend that cannot run says why in its section


SUITE = Suite(
    name="concurrency",
    title="concurrency",
    stored_label="n/a",
    request_label="requests per turn (see the report)",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.suites.concurrency --merge A.json B.json --out DIR``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.suites.concurrency")
    parser.add_argument("--merge", type=Path, nargs="+", required=True, help="concurrency.json")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-chart", action="store_true")
    args = parser.parse_args(argv)
    merge(args.merge, args.out, not args.no_chart)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
