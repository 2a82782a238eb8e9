"""Redis suite: graphkeep vs ``langgraph-checkpoint-plainredis`` vs ``InMemorySaver``.

Both Redis savers run on the server of ``REDIS_URL`` (default: the local one of
``./dev services up``), each in its own logical database (``--redis-db N`` for
graphkeep, ``N+1`` for plainredis; default 14 and 15) that is flushed before each
run, so "stored" is the sum of ``MEMORY USAGE key SAMPLES 0`` over every key of
that run. A database that holds keys the bench did not write is never flushed
unless ``--force-flush`` is given. Requests are network round trips counted at
the client (:func:`bench.probes.count_round_trips`), bytes sent the RESP
bytes those write on the socket.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from langgraph.checkpoint.memory import InMemorySaver

import graphkeep
from bench.probes import Probe, count_round_trips
from bench.suites import (
    ENCRYPTED,
    ENCRYPTION_NOTE,
    NOSHARE_NOTE,
    TELEMETRY_CONTENDERS,
    TELEMETRY_COSTS,
    TELEMETRY_LOCKSTEP,
    TELEMETRY_NOTE,
    BenchError,
    Contender,
    InProcess,
    Options,
    Skip,
    Suite,
    bench_ring,
    faster_per_turn,
    growth_targets,
    not_yet,
    requests_budget,
    telemetry_option,
)
from bench.workloads import Opened, Result, Workload
from graphkeep.errors import mask_url

MARKER = "graphkeep-bench:scratch"
#: issue 13: W50 (50 turns) stores at most this much on Redis
STORED_MAX = 500_000
#: issue 13: graphkeep's W50 median ms/turn at most this many times InMemorySaver's
MAX_VS_MEMORY = 1.3
KEY_PREFIX = "bench"
#: issue 45: the requests one lease of ``saver.exclusive`` may cost per run: the release;
#: the acquire rides on the run's first read (one script for both)
LEASE_REQUESTS = 1


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")


def with_db(url: str, db: int) -> str:
    """``url`` pointing at logical database ``db``."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"] + [("db", str(db))]
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(path=f"/{db}"))


def admin_client(url: str) -> Any:
    """A plain redis-py client for the bench's own housekeeping (flush, sizes, ping)."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=2)


def unavailable() -> Skip | None:
    url = redis_url()
    scheme = url.split("://", 1)[0].lower()
    if skip := not_yet(scheme):
        return skip
    if scheme not in ("redis", "rediss", "unix"):
        return Skip(f"the redis suite needs a single Redis server, REDIS_URL is {mask_url(url)}")
    try:
        import langgraph_checkpoint_plainredis  # noqa: F401
    except ImportError:
        return Skip("langgraph-checkpoint-plainredis is missing (pip install 'graphkeep[dev]')")
    try:
        client = admin_client(url)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run", with the reason
        return Skip(f"no Redis answers at {mask_url(url)} ({type(exc).__name__}: {exc})")
    return None


def scratch_database(url: str, db: int, force: bool) -> str:
    """Flush logical database ``db`` (only if it is the bench's own) and return its URL."""
    db_url = with_db(url, db)
    client = admin_client(db_url)
    try:
        if client.dbsize() and not client.exists(MARKER) and not force:
            raise BenchError(
                f"database {db} of {mask_url(url)} holds keys the bench did not write;"
                " pick free databases with --redis-db N (uses N and N+1) or pass --force-flush"
            )
        client.flushdb()
        client.set(MARKER, "scratch database of python -m bench, flushed on every run")
    finally:
        client.close()
    return db_url


def stored_bytes(db_url: str) -> int:
    """Sum of ``MEMORY USAGE`` (all elements sampled) over the database's keys."""
    client = admin_client(db_url)
    try:
        keys = [k for k in client.scan_iter(count=1000) if k != MARKER.encode()]
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.memory_usage(key, samples=0)
        return sum(int(size or 0) for size in pipe.execute())
    finally:
        client.close()


def graphkeep_opener(url: str, db: int, options: Options, **saver_options: Any) -> Any:
    @contextmanager
    def open_graphkeep(work: Workload) -> Iterator[Opened]:
        db_url = scratch_database(url, db, options.force_flush)
        probe = Probe()
        with graphkeep.connect(db_url, key_prefix=KEY_PREFIX, **saver_options) as saver:
            count_round_trips(saver.client, probe)
            yield Opened(saver, probe, lambda: stored_bytes(db_url))

    return open_graphkeep


def growth_contenders(options: Options) -> list[Contender]:
    """graphkeep without list sharing; it runs after the rounds, in graphkeep's database."""
    opener = graphkeep_opener(redis_url(), options.redis_db, options, share_lists=False)
    return [InProcess("graphkeep-noshare", opener)]


def contenders(options: Options) -> list[Contender]:
    url = redis_url()
    graphkeep_db, plainredis_db = options.redis_db, options.redis_db + 1

    @contextmanager
    def open_memory(work: Workload) -> Iterator[Opened]:
        yield Opened(InMemorySaver(), Probe(counts_requests=False))

    open_graphkeep = graphkeep_opener(url, graphkeep_db, options)

    @contextmanager
    def open_plainredis(work: Workload) -> Iterator[Opened]:
        from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver

        db_url = scratch_database(url, plainredis_db, options.force_flush)
        probe = Probe()
        saver = PlainRedisSaver(url=db_url, prefix=KEY_PREFIX)
        count_round_trips(saver.client, probe)
        try:
            yield Opened(saver, probe, lambda: stored_bytes(db_url))
        finally:
            saver.close()

    return [
        InProcess("graphkeep", open_graphkeep),
        *(
            InProcess(
                name, graphkeep_opener(url, graphkeep_db, options, telemetry=telemetry_option(name))
            )
            for name in TELEMETRY_CONTENDERS
        ),
        InProcess(ENCRYPTED, graphkeep_opener(url, graphkeep_db, options, encryption=bench_ring())),
        InProcess("plainredis", open_plainredis),
        InProcess("InMemorySaver", open_memory),
    ]


def targets(results: list[Result]) -> list[tuple[str, bool]]:
    """The targets of issue 2 (section 6), judged on this run."""
    by = {(r.saver, r.workload): r for r in results}
    out: list[tuple[str, bool]] = []
    plain = by.get(("graphkeep", "W50"))
    delta = by.get(("graphkeep", "W50-delta"))
    out += requests_budget(results, 8, "requests/turn (issue 2: one per saver call)")
    out += faster_per_turn(results, "plainredis")
    memory = by.get(("InMemorySaver", "W50"))
    if plain and memory and memory.ms_per_turn:
        times = plain.ms_per_turn / memory.ms_per_turn
        out.append(
            (
                f"W50: graphkeep ms/turn at most {MAX_VS_MEMORY} x InMemorySaver's (issue 13):"
                f" {times:.2f} x ({plain.ms_per_turn:.2f} vs {memory.ms_per_turn:.2f} ms)",
                times <= MAX_VS_MEMORY,
            )
        )
    if plain and delta and plain.requests_per_turn is not None:
        assert delta.requests_per_turn is not None
        loads = delta.turn_tally.calls.get("get_tuple", 0) / delta.turns
        extra = delta.requests_per_turn - plain.requests_per_turn
        out.append(
            (
                f"W50-delta: at most one extra request per checkpoint load: {extra:+.2f}"
                f" requests/turn for {loads:.2f} checkpoint loads/turn",
                extra <= loads + 1e-9,
            )
        )
    if plain and delta and plain.history_requests is not None:
        assert delta.history_requests is not None
        extra_history = delta.history_requests - plain.history_requests
        out.append(
            (
                f"W50-delta history: at most one extra request per checkpoint read:"
                f" {extra_history:+d} requests for {delta.history_entries} entries",
                extra_history <= delta.history_entries,
            )
        )
    return out + growth_targets(results, STORED_MAX)


def where(options: Options) -> str:
    return (
        f"Redis at {mask_url(redis_url())}, graphkeep (and graphkeep-noshare after it) in db"
        f" {options.redis_db},"
        f" plainredis in db {options.redis_db + 1}"
    )


SUITE = Suite(
    name="redis",
    title="Redis",
    stored_label="Redis memory, sum of MEMORY USAGE over the run's keys",
    request_label="network round trips counted at the client (pipeline or script = 1)",
    sent_label="RESP bytes of the commands the client writes on its connections"
    " (send_packed_command; connection handshakes not counted)",
    unavailable=unavailable,
    contenders=contenders,
    baseline="graphkeep",
    rival="plainredis",
    where=where,
    targets=targets,
    growth_contenders=growth_contenders,
    lockstep=TELEMETRY_LOCKSTEP,
    lockstep_costs=TELEMETRY_COSTS,
    lease_requests=LEASE_REQUESTS,
    notes=[
        NOSHARE_NOTE,
        TELEMETRY_NOTE,
        ENCRYPTION_NOTE,
        "plainredis = langgraph-checkpoint-plainredis 0.1.0 (RedisSaver, sync);"
        " InMemorySaver = langgraph's reference saver, no store (n/a)",
    ],
)
