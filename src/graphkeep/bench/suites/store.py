"""Store suite: workload S1 (:mod:`graphkeep.bench.store_workload`) on every LangGraph store.

Contenders, each on a fresh, empty scratch space of the same server in one run:

- ``graphkeep-redis`` (``graphkeep.connect_store``) and ``RedisStore``
  (langgraph-checkpoint-redis) on the Redis Stack server of ``REDIS_STACK_URL`` (default:
  the ``redis-stack`` service that ``./dev bench`` starts on 127.0.0.1:16380): RedisStore
  needs RediSearch and RedisJSON, whose indexes live in database 0, so both run in
  database 0 (one after the other, each flushing it first), graphkeep with its Query Engine
  vector index (``vector_index=True``). Without a Redis Stack server graphkeep runs on
  ``REDIS_URL`` (database 13, exact scan in Lua) and RedisStore is left out, saying why.
- ``graphkeep-mongodb`` and ``MongoDBStore`` (langgraph-store-mongodb) on ``MONGODB_URI``,
  each in its own database, dropped first.
- ``graphkeep-dynamodb`` and ``DynamoDBStore`` (langgraph-checkpoint-aws, in
  ``.bench-venvs/aws`` like the dynamodb suite's rival) on ``DYNAMODB_ENDPOINT_URL``, each in
  its own table, deleted first.
- ``InMemoryStore`` with the same index: the floor, and the reference answers.

Requests are counted as the other suites count them: Redis commands at the connection
(a pipeline = 1), MongoDB commands seen by a ``CommandListener``, DynamoDB HTTP requests
(botocore ``before-send``). A rival that cannot build its vector index on this server is
run without it and its semantic row says why; a graphkeep backend that has not landed is
left out with "not available yet".

Run it with ``./dev bench --suite store`` or ``python -m graphkeep.bench.suites.store``
(``--only NAME,...`` picks contenders; ``--scale`` shrinks S1).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from graphkeep.bench import render
from graphkeep.bench.probes import Probe, count_round_trips
from graphkeep.bench.render import NA, Bars, Figure, Panel, number, ratio, section, table, versions
from graphkeep.bench.store_workload import (
    KINDS,
    OpenedStore,
    OpResult,
    Sizes,
    StoreResult,
    index_config,
    measure_store,
    parse_worker_output,
    same_top_k,
)
from graphkeep.bench.suites import Options, Skip, Suite
from graphkeep.errors import mask_url

KEY_PREFIX = "bench"
REFERENCE = "InMemoryStore"
#: graphkeep contender -> (rival on the same server, store label)
PAIRS = {
    "graphkeep-redis": ("RedisStore", "Redis Stack"),
    "graphkeep-mongodb": ("MongoDBStore", "MongoDB (FerretDB)"),
    "graphkeep-dynamodb": ("DynamoDBStore", "DynamoDB (moto)"),
}
CONTENDERS = (*[n for pair in PAIRS.items() for n in (pair[0], pair[1][0])], REFERENCE)
MONGODB_DATABASES = {
    "graphkeep-mongodb": "graphkeep_bench_store_graphkeep",
    "MongoDBStore": "graphkeep_bench_store_mongodbstore",
}
DYNAMODB_TABLES = {
    "graphkeep-dynamodb": "graphkeep_bench_store_graphkeep",
    "DynamoDBStore": "graphkeep_bench_store_dynamodbstore",
}
#: scratch databases on Redis Stack (RediSearch indexes only database 0, so both use it, one
#: after the other, each flushing it first) and on REDIS_URL
REDIS_STACK_DBS = {"RedisStore": 0, "graphkeep-redis": 0}
PLAIN_REDIS_DB = 13
FULL_TURNS = 50  # Options.turns of a full run: S1 is scaled by turns / 50 (--quick: 0.2)


def redis_stack_url() -> str:
    return os.environ.get("REDIS_STACK_URL", "redis://127.0.0.1:16380/0")


# --------------------------------------------------------------------------- contenders


class Unavailable(Exception):
    """This contender cannot run here (message: why)."""


@dataclass
class Contender:
    name: str
    #: opens the contender in this process, or ``None`` when ``run`` is given
    open: Callable[[], AbstractContextManager[OpenedStore]] | None = None
    #: runs S1 elsewhere (another virtualenv) and returns its result
    run: Callable[[Sizes], StoreResult] | None = None

    def measure(self, sizes: Sizes) -> StoreResult:
        if self.run is not None:
            return self.run(sizes)
        assert self.open is not None
        with self.open() as opened:
            return measure_store(opened, self.name, sizes)


def _redis_ping(url: str) -> str | None:
    from graphkeep.bench.suites.redis import admin_client

    try:
        client = admin_client(url)
        try:
            client.ping()
            modules = {m[b"name"].decode().lower() for m in client.module_list()}
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - the reason is reported
        return f"no Redis answers at {mask_url(url)} ({type(exc).__name__})"
    if not {"search", "rejson", "redisjson"} & modules or "search" not in modules:
        return f"{mask_url(url)} has no RediSearch/RedisJSON modules (not Redis Stack)"
    return None


def _store_module(backend: str) -> Any:
    try:
        return importlib.import_module(f"graphkeep.backends.{backend}.store")
    except ImportError as exc:
        raise Unavailable(f"graphkeep.backends.{backend}.store not available yet") from exc


def _find(obj: Any, test: Callable[[Any], bool], depth: int = 3) -> Any:
    """The first attribute (breadth-first, a few levels deep) of ``obj`` passing ``test``."""
    level, seen = [obj], {id(obj)}
    for _ in range(depth):
        found_next: list[Any] = []
        for item in level:
            if test(item):
                return item
            for value in list(getattr(item, "__dict__", {}).values()):
                if id(value) not in seen and not isinstance(value, (str, bytes, int, float)):
                    seen.add(id(value))
                    found_next.append(value)
        level = found_next
    for item in level:
        if test(item):
            return item
    raise LookupError(f"no client found inside {type(obj).__name__}")


def _is_redis_client(value: Any) -> bool:
    return hasattr(value, "connection_pool") and hasattr(value, "execute_command")


def _is_botocore_client(value: Any) -> bool:
    meta = getattr(value, "meta", None)
    return meta is not None and hasattr(meta, "events") and hasattr(meta, "service_model")


# MongoDB: one process-wide listener (pymongo registers listeners for every client made
# after ``monitoring.register``), forwarding to the probe of the store being measured.
_MONGO_PROBE: dict[str, Probe | None] = {"probe": None}
_MONGO_LISTENING = threading.Lock()
_mongo_registered = False


def _listen_to_mongodb(probe: Probe) -> None:
    global _mongo_registered
    from pymongo import monitoring

    from graphkeep.bench.suites.mongodb import HOUSEKEEPING

    with _MONGO_LISTENING:
        _MONGO_PROBE["probe"] = probe
        if _mongo_registered:
            return

        class Commands(monitoring.CommandListener):
            def started(self, event: monitoring.CommandStartedEvent) -> None:
                current = _MONGO_PROBE["probe"]
                if current is not None and event.command_name.lower() not in HOUSEKEEPING:
                    current.request()

            def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
                pass

            def failed(self, event: monitoring.CommandFailedEvent) -> None:
                pass

        monitoring.register(Commands())
        _mongo_registered = True


@contextmanager
def open_memory() -> Iterator[OpenedStore]:
    from langgraph.store.memory import InMemoryStore

    yield OpenedStore(InMemoryStore(index=index_config()), Probe(counts_requests=False))  # type: ignore[arg-type]


@contextmanager
def open_graphkeep_redis(
    url: str, db: int, force: bool, vector_index: bool = False
) -> Iterator[OpenedStore]:
    import graphkeep
    from graphkeep.bench.suites.redis import scratch_database

    _store_module("redis")
    db_url = scratch_database(url, db, force)
    probe = Probe()
    with graphkeep.connect_store(
        db_url, index=index_config(), key_prefix=KEY_PREFIX, vector_index=vector_index
    ) as store:
        count_round_trips(_find(store, _is_redis_client), probe)
        yield OpenedStore(store, probe)


@contextmanager
def open_redis_rival(url: str, db: int, force: bool) -> Iterator[OpenedStore]:
    from langgraph.store.redis import RedisStore

    from graphkeep.bench.suites.redis import scratch_database

    db_url = scratch_database(url, db, force)
    probe = Probe()
    with RedisStore.from_conn_string(db_url, index=index_config()) as store:  # type: ignore[arg-type]
        store.setup()
        count_round_trips(store._redis, probe)
        yield OpenedStore(store, probe)


def _mongodb_scratch(name: str, force: bool) -> None:
    from graphkeep.bench.suites.mongodb import mongo_client, scratch_database

    client = mongo_client()
    try:
        scratch_database(client, name, force)
    finally:
        client.close()


@contextmanager
def open_graphkeep_mongodb(force: bool) -> Iterator[OpenedStore]:
    import graphkeep
    from graphkeep.bench.suites.mongodb import mongodb_url

    _store_module("mongodb")
    name = MONGODB_DATABASES["graphkeep-mongodb"]
    _mongodb_scratch(name, force)
    probe = Probe()
    _listen_to_mongodb(probe)
    try:
        with graphkeep.connect_store(
            mongodb_url(), index=index_config(), key_prefix=KEY_PREFIX, db_name=name
        ) as store:
            yield OpenedStore(store, probe)
    finally:
        _MONGO_PROBE["probe"] = None


@contextmanager
def open_mongodb_rival(force: bool) -> Iterator[OpenedStore]:
    import pymongo
    from langgraph.store.mongodb import MongoDBStore, create_vector_index_config

    from graphkeep.bench.suites.mongodb import mongodb_url

    name = MONGODB_DATABASES["MongoDBStore"]
    _mongodb_scratch(name, force)
    probe = Probe()
    _listen_to_mongodb(probe)
    client: Any = pymongo.MongoClient(mongodb_url(), serverSelectionTimeoutMS=3000)
    try:
        collection = client[name]["store"]
        notes: list[str] = []
        try:
            config = create_vector_index_config(dims=64, embed=index_config()["embed"])
            store = MongoDBStore(collection, index_config=config)
            semantic = True
        except Exception as exc:  # noqa: BLE001 - reported: the store runs without its index
            first = str(exc).splitlines()[0][:140] if str(exc) else ""
            notes.append(
                "MongoDBStore: no semantic search on this server: its vector index is an"
                f" Atlas Search index (createSearchIndexes / $vectorSearch): {first}"
            )
            store = MongoDBStore(collection)
            semantic = False
        yield OpenedStore(store, probe, semantic=semantic, notes=notes)
    finally:
        _MONGO_PROBE["probe"] = None
        client.close()


@contextmanager
def open_graphkeep_dynamodb() -> Iterator[OpenedStore]:
    import graphkeep
    from graphkeep.bench.suites.dynamodb import (
        count_requests,
        drop_table,
        dynamodb_client,
        local_credentials,
        table_url,
    )

    _store_module("dynamodb")
    local_credentials()
    table = DYNAMODB_TABLES["graphkeep-dynamodb"]
    drop_table(dynamodb_client(), table)
    probe = Probe()
    with graphkeep.connect_store(
        table_url(table), index=index_config(), key_prefix=KEY_PREFIX
    ) as store:
        count_requests(_find(store, _is_botocore_client), probe)
        yield OpenedStore(store, probe)


@contextmanager
def open_dynamodb_rival() -> Iterator[OpenedStore]:
    """Factory run inside ``.bench-venvs/aws`` (langgraph-checkpoint-aws)."""
    from langgraph_checkpoint_aws import DynamoDBStore

    from graphkeep.bench.suites.dynamodb import (
        count_requests,
        drop_table,
        dynamodb_client,
        endpoint_url,
        local_credentials,
        region,
    )

    local_credentials()
    table = DYNAMODB_TABLES["DynamoDBStore"]
    admin = dynamodb_client()
    notes: list[str] = []

    def build(index: dict[str, Any] | None) -> Any:
        drop_table(admin, table)
        store = DynamoDBStore(
            table_name=table, region_name=region(), endpoint_url=endpoint_url(), index=index
        )
        # it polls for an ACTIVE vector index for up to 600 s: an endpoint that never
        # reports one (moto ignores VectorIndexes) fails after one poll instead
        store._wait_for_vector_index = partial(store._wait_for_vector_index, timeout=5)
        store.setup()
        return store

    try:
        store, semantic = build(index_config()), True
    except Exception as exc:  # noqa: BLE001 - reported: the store runs without its index
        first = str(exc).splitlines()[0][:140] if str(exc) else ""
        notes.append(
            "DynamoDBStore: no semantic search on this server: it needs a DynamoDB vector"
            f" index (VectorIndexes / SearchVectors): {type(exc).__name__}: {first}"
        )
        store, semantic = build(None), False
    try:
        store.put(("float-check",), "k", {"score": 0.5})
    except Exception as exc:  # noqa: BLE001 - reported: why S1's scores are integers
        notes.append(
            "DynamoDBStore cannot store a float in a value"
            f" ({type(exc).__name__}: {exc}), so S1's scores are integers for everyone"
        )
    probe = Probe()
    count_requests(store.client, probe)
    yield OpenedStore(store, probe, semantic=semantic, notes=notes)


def _aws_rival(sizes: Sizes) -> StoreResult:
    from graphkeep.bench.suites.dynamodb import venv_dir
    from graphkeep.bench.worker import SRC_DIR, ensure_venv

    pins = [f"{d}=={metadata.version(d)}" for d in ("langgraph", "langgraph-checkpoint")]
    python = ensure_venv(venv_dir(), ["langgraph-checkpoint-aws", *pins])
    path = os.pathsep.join(p for p in (str(SRC_DIR), os.environ.get("PYTHONPATH")) if p)
    scale = sizes.items / Sizes.full().items
    done = subprocess.run(
        [
            str(python), "-m", "graphkeep.bench.store_workload",
            "--factory", "graphkeep.bench.suites.store:open_dynamodb_rival",
            "--scale", repr(scale), "--contender", "DynamoDBStore",
        ],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=3600,
    )  # fmt: skip
    for data in parse_worker_output(done.stdout):
        return StoreResult.from_json(data)
    tail = "\n".join((done.stderr or done.stdout).splitlines()[-5:])
    raise Unavailable(f"worker failed (exit {done.returncode}): {tail}")


def contenders(options: Options) -> tuple[list[Contender], str]:
    """Every contender of S1, and where each runs (for the report)."""
    from graphkeep.bench.suites.redis import redis_url

    force = options.force_flush
    stack = redis_stack_url()
    no_stack = _redis_ping(stack)
    if no_stack is None:
        redis_where = (
            f"Redis Stack at {mask_url(stack)} (db 0; graphkeep with its Query Engine vector"
            " index, vector_index=True)"
        )
        redis_at, graphkeep_db = stack, REDIS_STACK_DBS["graphkeep-redis"]
    else:
        redis_where = f"Redis at {mask_url(redis_url())} db {PLAIN_REDIS_DB} ({no_stack})"
        redis_at, graphkeep_db = redis_url(), PLAIN_REDIS_DB

    def redis_rival() -> AbstractContextManager[OpenedStore]:
        if no_stack is not None:
            raise Unavailable(f"needs Redis Stack: {no_stack}")
        return open_redis_rival(stack, REDIS_STACK_DBS["RedisStore"], force)

    from graphkeep.bench.suites.dynamodb import endpoint_url
    from graphkeep.bench.suites.mongodb import mongodb_url

    where = f"{redis_where}; MongoDB at {mask_url(mongodb_url())}; DynamoDB at {endpoint_url()}"
    return [
        Contender(REFERENCE, open_memory),
        Contender(
            "graphkeep-redis",
            lambda: open_graphkeep_redis(redis_at, graphkeep_db, force, no_stack is None),
        ),
        Contender("RedisStore", redis_rival),
        Contender("graphkeep-mongodb", lambda: open_graphkeep_mongodb(force)),
        Contender("MongoDBStore", lambda: open_mongodb_rival(force)),
        Contender("graphkeep-dynamodb", open_graphkeep_dynamodb),
        Contender("DynamoDBStore", run=_aws_rival),
    ], where


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """One contender's pooled result, or why it did not run."""

    name: str
    result: StoreResult | None = None
    skipped: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _pool(results: Sequence[StoreResult]) -> StoreResult:
    """Rounds pooled: all timings together, requests summed; answers of the first round."""
    first = results[0]
    pooled = StoreResult(first.contender, notes=list(first.notes))
    for kind, op in first.ops.items():
        same = [r.ops[kind] for r in results if kind in r.ops]
        counted = [o.requests for o in same]
        pooled.ops[kind] = OpResult(
            calls=sum(o.calls for o in same),
            ms=[ms for o in same for ms in o.ms],
            requests=None if None in counted else sum(c or 0 for c in counted),
            answers=op.answers,
            scores=op.scores,
            error=next((o.error for o in same if o.error), None),
        )
    return pooled


def run_contenders(
    contenders: Sequence[Contender], sizes: Sizes, rounds: int, only: set[str] | None = None
) -> list[Outcome]:
    import time

    outcomes: dict[str, Outcome] = {}
    samples: dict[str, list[StoreResult]] = {}
    chosen = [c for c in contenders if only is None or c.name in only]
    for round_ in range(rounds):
        shift = round_ % max(len(chosen), 1)
        for contender in chosen[shift:] + chosen[:shift]:
            outcome = outcomes.setdefault(contender.name, Outcome(contender.name))
            if outcome.skipped:
                continue
            print(f"  store round {round_ + 1}/{rounds}: {contender.name} ...", end="", flush=True)
            started = time.perf_counter()
            try:
                samples.setdefault(contender.name, []).append(contender.measure(sizes))
            except Unavailable as exc:
                outcome.skipped = str(exc)
            except Exception as exc:  # noqa: BLE001 - one contender failing is reported
                outcome.skipped = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            outcome.seconds += time.perf_counter() - started
            print(f" {outcome.skipped or f'{time.perf_counter() - started:.1f} s'}", flush=True)
    for name, results in samples.items():
        outcomes[name].result = _pool(results)
    return [outcomes[c.name] for c in chosen]


# --------------------------------------------------------------------------- report


def top_k_column(outcomes: Sequence[Outcome], sizes: Sizes) -> dict[str, str]:
    """Contender -> "yes" / "no" / "n/a (why)" for "semantic top-10 = InMemoryStore"."""
    by = {o.name: o.result for o in outcomes if o.result}
    reference = by.get(REFERENCE)
    out: dict[str, str] = {}
    for name, result in by.items():
        op = result.ops.get("search (semantic)")
        if name == REFERENCE:
            out[name] = "reference"
        elif reference is None or "search (semantic)" not in reference.ops:
            out[name] = "n/a (no reference)"
        elif op is None:
            out[name] = "n/a (no semantic search on this server)"
        elif op.error:
            out[name] = "n/a (search failed)"
        else:
            same = same_top_k(op, reference.ops["search (semantic)"], sizes)
            out[name] = "n/a" if same is None else "yes" if same else "no"
    return out


def markdown(outcomes: Sequence[Outcome], sizes: Sizes, rounds: int, where: str) -> str:
    by = {o.name: o.result for o in outcomes if o.result}
    top = top_k_column(outcomes, sizes)
    dists = ("langgraph", "graphkeep", "langgraph-checkpoint-redis", "langgraph-store-mongodb")
    lines = [
        "## graphkeep bench: Store (workload S1)",
        "",
        f"{where}. S1: {sizes.items:,} puts in {sizes.namespaces} namespaces"
        f' (`("users", "u<n>", "memories")`, value = text + category + score),'
        f" {sizes.gets:,} gets, {sizes.searches:,} filtered searches (one namespace,"
        f" category equality and score `$gt`, limit 10), {sizes.semantic:,} semantic"
        f' searches over `("users",)` (top 10), {sizes.list_namespaces:,} list_namespaces;'
        f" index = 64-dim hashing bag-of-words on `text` (local, deterministic);"
        f" {rounds} round(s), one thread, medians pooled over rounds. {versions(dists)}.",
        "",
        "- requests/op = Redis commands at the connection (pipeline = 1), MongoDB commands"
        " (CommandListener), DynamoDB HTTP requests (botocore before-send); n/a in process",
        "- top-10 = InMemoryStore: every semantic search returns InMemoryStore's top 10 in"
        " its order (items of equal score may trade places)",
        "- timings are medians on a shared, noisy machine: compare within one run only",
        "",
    ]
    ops = [
        [
            kind,
            o.name,
            number(op.ms_median, 3),
            number(op.requests_per_op, 2),
            (op.error or "").replace("|", "\\|"),
        ]
        for kind in KINDS
        for o in outcomes
        if o.result and (op := o.result.ops.get(kind)) is not None
    ]
    lines += table(
        ["operation", "contender", "ms/op (median)", "requests/op", "error"], ops, "llrrl"
    )
    lines.append("")
    lines += table(
        ["contender", "top-10 = InMemoryStore", "run time s"],
        [
            [
                o.name,
                top.get(o.name, f"not run: {o.skipped}" if o.skipped else NA).replace("|", "/"),
                f"{o.seconds:,.1f}",
            ]
            for o in outcomes
        ],
        "llr",
    )
    ratio_lines: list[str] = []
    for ours_name, (rival, label) in PAIRS.items():
        ours, theirs = by.get(ours_name), by.get(rival)
        if not ours or not theirs:
            continue
        parts = []
        for kind in KINDS:
            a, b = ours.ops.get(kind), theirs.ops.get(kind)
            if a and b and not a.error and not b.error:
                parts.append(
                    f"{kind} ms {ratio(b.ms_median, a.ms_median)},"
                    f" requests {ratio(b.requests_per_op, a.requests_per_op)}"
                )
        ratio_lines.append(f"{label}, {rival} / {ours_name}: " + "; ".join(parts))
    floor = by.get(REFERENCE)
    for ours_name in PAIRS:
        ours = by.get(ours_name)
        if ours and floor:
            parts = [
                f"{kind} {ratio(ours.ops[kind].ms_median, floor.ops[kind].ms_median)}"
                for kind in KINDS
                if kind in ours.ops and kind in floor.ops and not ours.ops[kind].error
            ]
            ratio_lines.append(f"{ours_name} / InMemoryStore ms: " + ", ".join(parts))
    lines += section("Ratios (rival / graphkeep: above 1 = graphkeep better)", ratio_lines)
    notes = [n for o in outcomes if o.result for n in o.result.notes]
    notes += [f"{o.name} not run: {o.skipped}" for o in outcomes if o.skipped]
    lines += section("Notes", notes)
    return "\n".join(lines) + "\n"


def chart(outcomes: Sequence[Outcome], path: Path) -> None:
    """ms/op and requests/op per operation kind, one bar per contender."""
    ran = [o for o in outcomes if o.result]

    def bars(pick: Callable[[OpResult], float | None]) -> list[Bars]:
        out = []
        for o in ran:
            assert o.result is not None
            found = [o.result.ops.get(kind) for kind in KINDS]
            out.append(Bars(o.name, [pick(op) if op and not op.error else None for op in found]))
        return out

    panels = [
        Panel("ms/op (median, log scale)", KINDS, bars(lambda op: op.ms_median), log=True),
        Panel("requests/op", KINDS, bars(lambda op: op.requests_per_op), legend=True),
    ]
    for panel in panels:
        panel.tick_size = 8
    render.chart(Figure("graphkeep bench: Store (workload S1)", panels, size=(15, 5.5)), path)


def run(
    options: Options, out: Path, chart_too: bool, only: set[str] | None = None
) -> list[Outcome]:
    """S1 for every contender (``only``: these), report to stdout and ``<out>/store.md``."""
    sizes = Sizes.scaled(min(options.turns / FULL_TURNS, 1.0))
    listed, where = contenders(options)
    outcomes = run_contenders(listed, sizes, options.rounds, only)
    text = markdown(outcomes, sizes, options.rounds, where)
    render.publish(text, out, "store", partial(chart, outcomes) if chart_too else None)
    return outcomes


def unavailable() -> Skip | None:
    return None  # InMemoryStore always runs; every other contender says why it did not


SUITE = Suite(
    name="store",
    title="Store (workload S1)",
    stored_label="n/a",
    request_label="round trips counted at the client",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphkeep.bench.suites.store")
    parser.add_argument("--quick", action="store_true", help="S1 at a fifth of its size")
    parser.add_argument("--scale", type=float, default=None, help="S1 size factor (1.0)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default=None, help=f"comma list of: {', '.join(CONTENDERS)}")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--force-flush", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    scale = args.scale if args.scale is not None else 0.2 if args.quick else 1.0
    only = set(args.only.split(",")) if args.only else None
    if only and only - set(CONTENDERS):
        parser.error(f"unknown contenders: {', '.join(sorted(only - set(CONTENDERS)))}")
    options = Options(
        turns=max(1, round(scale * FULL_TURNS)), rounds=args.rounds, force_flush=args.force_flush
    )
    run(options, args.out, not args.no_chart, only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
