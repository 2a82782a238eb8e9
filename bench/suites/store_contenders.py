"""The store suite's contenders (:mod:`bench.suites.store`): how each LangGraph
store is opened on a fresh scratch space of its server and how its requests are counted.

graphkeep on Redis (Redis Stack when ``REDIS_STACK_URL`` answers, with its Query Engine
vector index; else ``REDIS_URL`` db 13) and ``RedisStore``; graphkeep on MongoDB and
``MongoDBStore``, each in its own database; graphkeep on DynamoDB and ``DynamoDBStore``
(run in ``.bench-venvs/aws`` through :mod:`bench.store_workload`'s worker), each in
its own table; ``InMemoryStore``, the floor and the reference answers. Requests: Redis
commands at the connection (a pipeline = 1), MongoDB commands seen by a ``CommandListener``,
DynamoDB HTTP requests (botocore ``before-send``).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from typing import Any

from bench.probes import Probe, count_round_trips
from bench.store_workload import (
    OpenedStore,
    Sizes,
    StoreResult,
    index_config,
    measure_store,
    parse_worker_output,
)
from bench.suites import Options
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
    from bench.suites.redis import admin_client

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

    from bench.suites.mongodb import HOUSEKEEPING

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
    from bench.suites.redis import scratch_database

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

    from bench.suites.redis import scratch_database

    db_url = scratch_database(url, db, force)
    probe = Probe()
    with RedisStore.from_conn_string(db_url, index=index_config()) as store:  # type: ignore[arg-type]
        store.setup()
        count_round_trips(store._redis, probe)
        yield OpenedStore(store, probe)


def _mongodb_scratch(name: str, force: bool) -> None:
    from bench.suites.mongodb import mongo_client, scratch_database

    client = mongo_client()
    try:
        scratch_database(client, name, force)
    finally:
        client.close()


@contextmanager
def open_graphkeep_mongodb(force: bool) -> Iterator[OpenedStore]:
    import graphkeep
    from bench.suites.mongodb import mongodb_url

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

    from bench.suites.mongodb import mongodb_url

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
    from bench.suites.dynamodb import (
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

    from bench.suites.dynamodb import (
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
    from bench.suites.dynamodb import venv_dir
    from bench.worker import ensure_venv, pythonpath

    pins = [f"{d}=={metadata.version(d)}" for d in ("langgraph", "langgraph-checkpoint")]
    python = ensure_venv(venv_dir(), ["langgraph-checkpoint-aws", *pins])
    full = Sizes.full()
    times = max(1, sizes.namespaces // full.namespaces)
    scale = sizes.items / (full.items * times)
    done = subprocess.run(
        [
            str(python), "-m", "bench.store_workload",
            "--factory", "bench.suites.store_contenders:open_dynamodb_rival",
            "--scale", repr(scale), "--data", str(times), "--contender", "DynamoDBStore",
        ],
        env={**os.environ, "PYTHONPATH": pythonpath()},
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
    from bench.suites.redis import redis_url

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

    from bench.suites.dynamodb import endpoint_url
    from bench.suites.mongodb import mongodb_url

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
