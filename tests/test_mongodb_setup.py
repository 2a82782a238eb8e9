"""MongoDB ``setup()`` as a fleet runs it, on a real wire-protocol server (FerretDB locally).

Managed services build one index per collection at a time (DocumentDB's error 40333) and
Cosmos DB RU takes a unique index only on an empty collection, so ``setup()`` creates one
index per ``createIndexes``, one build per collection at a time across processes (the
setup lease of :mod:`graphkeep.backends.mongodb.builds`), before anything writes. Here
four worker *processes* (tests/mongodb_setup_worker.py, each its own client) run every
product's ``setup()`` at once on a fresh database; each records its commands with a PyMongo
``CommandListener`` and the test compares their ``createIndexes`` across workers. Every
test uses a database of its own and drops it. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pymongo
import pytest
from bson import SON
from pymongo import monitoring

from graphkeep.backends.mongodb import (
    AsyncMongoDBCache,
    AsyncMongoDBEventLog,
    AsyncMongoDBSaver,
    AsyncMongoDBStore,
    MongoDBCache,
    MongoDBEventLog,
    MongoDBSaver,
    MongoDBStore,
    builds,
)
from graphkeep.backends.mongodb.effects import AsyncMongoDBEffects, MongoDBEffects
from graphkeep.backends.mongodb.schema import (
    CACHE_INDEXES,
    EFFECTS_INDEXES,
    EVENTS_INDEXES,
    index_specs,
    store_indexes,
)
from graphkeep.errors import ConfigurationError, SetupTimeout, mask_url
from graphkeep.testing.rules import unchecked

from .mongodb_setup_worker import ASYNC_PRODUCTS, SYNC_PRODUCTS

pytestmark = pytest.mark.mongodb

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4
#: what a setup() that finds its indexes in place may send: reads only (and the driver's own)
READS = {"listIndexes", "find", "listCollections", "ping", "aggregate", "endSessions"}
WRITES = {"insert", "update", "delete", "findAndModify", "createIndexes", "drop", "create"}


def url(db: str) -> str:
    return urlsplit(MONGODB_URI)._replace(path=f"/{db}").geturl()


class Recorder(monitoring.CommandListener):
    """Name and collection of every command started."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        self.commands.append((event.command_name, target if isinstance(target, str) else None))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def names(self) -> list[str]:
        return [name for name, _ in self.commands]


@pytest.fixture
def db_name() -> Iterator[str]:
    name = f"gk_setup_{uuid.uuid4().hex[:10]}"
    probe: Any = pymongo.MongoClient(MONGODB_URI, serverSelectionTimeoutMS=5000)
    try:
        probe.admin.command("ping")
    except pymongo.errors.PyMongoError as exc:
        pytest.fail(f"MongoDB at {mask_url(MONGODB_URI)} is not answering ({exc})")
    yield name
    probe.drop_database(name)
    probe.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def client(recorder: Recorder) -> Iterator[Any]:
    mongo: Any = pymongo.MongoClient(MONGODB_URI, event_listeners=[recorder])
    yield mongo
    mongo.close()


def expected(prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Every collection of every product under ``prefix``, with its index specs."""
    wanted: dict[str, list[dict[str, Any]]] = {}
    for spec in [*index_specs(prefix), *store_indexes(prefix)]:
        wanted.setdefault(spec["collection"], []).append(spec)
    wanted[f"{prefix}_cache"] = CACHE_INDEXES
    wanted[f"{prefix}_events"] = EVENTS_INDEXES
    wanted[f"{prefix}_effects"] = EFFECTS_INDEXES
    return wanted


def assert_indexes_exactly_once(db: Any, prefix: str) -> None:
    """Each wanted index exists once, with its key and options (a TTL index, or on a server
    without TTL indexes its ``_plain`` stand-in), and nothing else but ``_id_``."""
    for collection, specs in expected(prefix).items():
        listed = list(db[collection].list_indexes())
        keys = [tuple(ix["key"].items()) for ix in listed]
        assert len(keys) == len(set(keys)), (collection, listed)
        by_name = {ix["name"]: ix for ix in listed}
        names = {"_id_"}
        for spec in specs:
            have = by_name.get(spec["name"])
            if have is None and "expireAfterSeconds" in spec:
                plain = spec["name"] + builds.PLAIN_SUFFIX
                have = by_name[plain]
                assert "expireAfterSeconds" not in have
                names.add(plain)
            else:
                assert have is not None, (collection, spec["name"], listed)
                names.add(spec["name"])
                assert builds.equivalent(spec, have), (spec, have)
                assert bool(have.get("unique")) == bool(spec.get("unique"))
        assert set(by_name) == names, (collection, sorted(by_name))
    assert db[f"{prefix}_setup"].count_documents({}) == 0  # every lease released


def run_fleet(db: str, prefix: str, modes: list[str], tmp: Path) -> list[dict[str, Any]]:
    """One worker process per mode (``sync`` / ``async``), started together (each prints
    ``ready``; then one line on every stdin starts them all); what each recorded: its
    ``commands`` and the indexes it ``seen`` as each setup() returned."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    n = len(modes)
    outs = [tmp / f"worker{i}.json" for i in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.mongodb_setup_worker", url(db), db, prefix, modes[i]]
            + [str(i), str(outs[i])],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for i, p in enumerate(procs):
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"worker {i} failed:\n{err}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [json.loads(out.read_text()) for out in outs]


def test_four_workers_set_up_a_fresh_database_one_build_at_a_time(
    db_name: str, tmp_path: Path
) -> None:
    """Two sync and two async workers (PyMongo's MongoClient and AsyncMongoClient) start
    every product's setup() at the same moment on a fresh database."""
    prefix = "fleet"
    timelines = run_fleet(db_name, prefix, ["sync", "async"] * (WORKERS // 2), tmp_path)
    mongo: Any = pymongo.MongoClient(MONGODB_URI)
    with mongo:
        assert_indexes_exactly_once(mongo[db_name], prefix)

    # every setup() returned only once its collections had all their indexes
    for record in timelines:
        assert len(record["seen"]) == len(PRODUCT_COLLECTIONS)
        for product, indexes in record["seen"]:
            for what in PRODUCT_COLLECTIONS[product.removeprefix("Async")]:
                collection = f"{prefix}_{what}"
                for spec in expected(prefix)[collection]:
                    stand_in = spec["name"] + builds.PLAIN_SUFFIX
                    assert {spec["name"], stand_in} & set(indexes[collection]), (product, spec)

    builds_by_collection: dict[str, list[tuple[float, float, int, bool]]] = {}
    for worker, record in enumerate(timelines):
        for c in record["commands"]:
            if c["name"] == "createIndexes":
                assert c["indexes"] == 1, c  # one index per createIndexes
                assert c["end"] is not None
                builds_by_collection.setdefault(c["collection"], []).append(
                    (c["start"], c["end"], worker, c["failed"])
                )
    assert set(builds_by_collection) == set(expected(prefix))
    for collection, spans in builds_by_collection.items():
        spans.sort()
        # no two createIndexes on one collection in flight at once, across the workers
        for (_, end, w1, _), (start, _, w2, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, (collection, w1, w2, spans)
        # each index built once in the whole fleet (a refused TTL index: once, then _plain)
        made = [s for s in spans if not s[3]]
        assert len(made) == len(expected(prefix)[collection]), (collection, spans)
        refused = [s for s in spans if s[3]]
        assert len(refused) <= sum("expireAfterSeconds" in s for s in expected(prefix)[collection])

    # the same on a database set up already, sync and async: no createIndexes, no write
    for sent in setup_everything_again(db_name, prefix):
        assert sent <= READS, sent
        assert not sent & WRITES


#: the collections each product's setup() indexes (the saver: its effect ledger's too)
PRODUCT_COLLECTIONS = {
    "MongoDBSaver": ("payloads", "locks", "effects"),
    "MongoDBStore": ("store",),
    "MongoDBCache": ("cache",),
    "MongoDBEventLog": ("events",),
    "MongoDBEffects": ("effects",),
}


def setup_everything_again(db: str, prefix: str) -> list[set[str]]:
    """The names of the commands each product's setup() sends, sync and async."""
    sent: list[set[str]] = []
    recorder = Recorder()
    sync: Any = pymongo.MongoClient(MONGODB_URI, event_listeners=[recorder])
    with sync:
        for cls in SYNC_PRODUCTS:
            recorder.commands.clear()
            cls(sync, db_name=db, key_prefix=prefix).setup()
            sent.append(set(recorder.names()))

    async def run_async() -> None:
        client: Any = pymongo.AsyncMongoClient(MONGODB_URI, event_listeners=[recorder])
        try:
            for cls in ASYNC_PRODUCTS:
                recorder.commands.clear()
                product: Any = cls(client, db_name=db, key_prefix=prefix)
                await (product.asetup() if cls is AsyncMongoDBSaver else product.setup())
                sent.append(set(recorder.names()))
        finally:
            await client.close()

    asyncio.run(run_async())
    return sent


def make_index(collection: Any, spec: dict[str, Any], **options: Any) -> None:
    """``spec`` created by hand, as graphkeep made it before (``options`` added); a TTL
    index the server refuses as its plain stand-in."""
    key = [(k, v) for k, v in spec["key"]]
    options.update(name=spec["name"], unique=bool(spec.get("unique")))
    if "expireAfterSeconds" in spec:
        try:
            collection.create_index(key, expireAfterSeconds=spec["expireAfterSeconds"], **options)
            return
        except pymongo.errors.OperationFailure:
            options["name"] += builds.PLAIN_SUFFIX
    collection.create_index(key, **options)


def test_a_sparse_run_id_index_of_an_older_graphkeep_is_kept(
    client: Any, recorder: Recorder, db_name: str
) -> None:
    db = client[db_name]
    with unchecked():  # an older graphkeep's sparse index: what Cosmos DB vCore lacks
        for spec in index_specs("old"):
            sparse = {"sparse": True} if spec["name"] == "gk_run_id" else {}
            make_index(db[spec["collection"]], spec, **sparse)
        for spec in EFFECTS_INDEXES:  # the ledger's, unchanged
            make_index(db["old_effects"], spec)
    recorder.commands.clear()
    MongoDBSaver(client, db_name=db_name, key_prefix="old").setup()
    sent = set(recorder.names())
    assert sent <= READS and not sent & WRITES, sent  # no rebuild, nothing written
    assert "gk_run_id" in {ix["name"] for ix in db["old_payloads"].list_indexes()}


def test_the_sparse_flag_as_mongodb_lists_it_counts_only_for_gk_run_id() -> None:
    """FerretDB keeps no sparse flag, so the comparison is shown on ``listIndexes``
    entries as MongoDB returns them."""
    payloads = [s for s in index_specs("p") if s["collection"] == "p_payloads"]
    listed = [
        {"v": 2, "key": SON([("_id", 1)]), "name": "_id_"},
        {"v": 2, "key": SON([("run_id", 1)]), "name": "gk_run_id", "sparse": True},
    ]
    run_id = next(s for s in payloads if s["name"] == "gk_run_id")
    assert "sparse" not in run_id  # every service has plain indexes
    assert builds.plan("p_payloads", [run_id], listed).missing == []
    unique = next(s for s in payloads if s.get("unique"))
    key = SON([(k, v) for k, v in unique["key"]])
    sparse_unique = {"v": 2, "key": key, "name": unique["name"], "unique": True, "sparse": True}
    with pytest.raises(ConfigurationError, match=unique["name"]):
        builds.plan("p_payloads", [unique], [sparse_unique])


def _lease(db: Any, collection: str, seconds: float) -> None:
    """The lease a builder that crashed leaves behind, expiring in ``seconds``."""
    db[builds.leases_collection(collection)].insert_one(
        {
            "_id": collection,
            "token": "crashed",
            "expires_at": datetime.now(timezone.utc) + timedelta(seconds=seconds),
        }
    )


def test_a_crashed_builders_lease_is_taken_over(
    client: Any, recorder: Recorder, db_name: str
) -> None:
    db = client[db_name]
    collection = "crash_store"
    make_index(db[collection], store_indexes("crash")[0])
    _lease(db, collection, 1.5)  # the crashed builder made its first index, then died
    recorder.commands.clear()
    began = time.monotonic()
    store = MongoDBStore(client, db_name=db_name, key_prefix="crash")
    store.setup()
    assert time.monotonic() - began >= 1.0  # it waited for the lease to run out
    assert_collection(db, collection, store_indexes("crash"))
    assert db[builds.leases_collection(collection)].count_documents({}) == 0
    made = [c for c in recorder.commands if c[0] == "createIndexes"]
    assert all(target == collection for _, target in made) and len(made) >= 2


async def test_a_crashed_builders_lease_is_taken_over_async(db_name: str) -> None:
    sync: Any = pymongo.MongoClient(MONGODB_URI)
    _lease(sync[db_name], "acrash_events", 1.0)
    began = time.monotonic()
    async with AsyncMongoDBEventLog.from_url(url(db_name), key_prefix="acrash"):
        pass
    assert time.monotonic() - began >= 0.5
    assert_collection(sync[db_name], "acrash_events", EVENTS_INDEXES)
    sync.close()


def test_a_waiter_returns_once_the_builder_made_the_indexes(
    client: Any, recorder: Recorder, db_name: str
) -> None:
    """Another process holds the lease (a live builder: here the test, building by hand):
    setup() waits, sends no createIndexes of its own, and returns only after the last
    index exists."""
    db = client[db_name]
    collection = "wait_cache"
    _lease(db, collection, 60)
    recorder.commands.clear()
    returned: list[float] = []
    waiter = threading.Thread(
        target=lambda: (
            MongoDBCache(client, db_name=db_name, key_prefix="wait").setup(),
            returned.append(time.monotonic()),
        )
    )
    waiter.start()
    time.sleep(1.0)
    assert not returned  # still waiting
    builder: Any = pymongo.MongoClient(MONGODB_URI)
    with builder:
        last = 0.0
        for spec in CACHE_INDEXES:
            last = time.monotonic()
            make_index(builder[db_name][collection], spec)
        builder[db_name][builds.leases_collection(collection)].delete_one({"_id": collection})
    waiter.join(10)
    assert returned and returned[0] > last
    assert "createIndexes" not in recorder.names()


def assert_collection(db: Any, collection: str, specs: list[dict[str, Any]]) -> None:
    names = {ix["name"] for ix in db[collection].list_indexes()}
    for spec in specs:
        assert spec["name"] in names or spec["name"] + builds.PLAIN_SUFFIX in names, spec


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_lease_that_never_ends_is_a_setup_timeout(
    client: Any,
    recorder: Recorder,
    db_name: str,
    is_async: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(builds, "SETUP_WAIT_S", 0.5)
    _lease(client[db_name], "stuck_cache", 3600)
    recorder.commands.clear()
    with pytest.raises(SetupTimeout, match="stuck_cache"):
        if is_async:
            async with AsyncMongoDBCache.from_url(url(db_name), key_prefix="stuck"):
                pass
        else:
            MongoDBCache(client, db_name=db_name, key_prefix="stuck").setup()
    if not is_async:
        assert "createIndexes" not in recorder.names()  # it built nothing while waiting


def test_an_index_the_data_refuses_is_a_configuration_error_and_the_lease_released(
    client: Any, db_name: str
) -> None:
    """The server refuses a unique index over duplicate documents (the data was written
    before setup(), e.g. with setup=False): a clear error naming the index, and the lease
    released for the next process."""
    db = client[db_name]
    db["dup_events"].insert_many([{"run": "r", "seq": 1}, {"run": "r", "seq": 1}])
    # the refusal is the point: a unique index over data (Cosmos DB RU refuses any)
    with (
        unchecked(),
        pytest.raises(ConfigurationError, match="gk_run_seq.*before a collection's first write"),
    ):
        MongoDBEventLog(client, db_name=db_name, key_prefix="dup").setup()
    assert db[builds.leases_collection("dup_events")].count_documents({}) == 0


def test_from_url_creates_every_index_before_the_first_write(db_name: str) -> None:
    """Every product opened by ``from_url`` / ``connect`` (setup on by default) finds its
    collections indexed and empty: nothing wrote before the indexes existed (Cosmos DB
    RU's rule for unique indexes)."""
    prefix = "first"
    raw: Any = pymongo.MongoClient(MONGODB_URI)
    db = raw[db_name]
    with (
        MongoDBSaver.from_url(url(db_name), key_prefix=prefix),
        MongoDBStore.from_url(url(db_name), key_prefix=prefix),
        MongoDBCache.from_url(url(db_name), key_prefix=prefix),
        MongoDBEventLog.from_url(url(db_name), key_prefix=prefix),
        MongoDBEffects.from_url(url(db_name), key_prefix=prefix),
    ):
        for collection, specs in expected(prefix).items():
            assert db[collection].count_documents({}) == 0
            assert_collection(db, collection, specs)
    assert_indexes_exactly_once(db, prefix)
    raw.close()


async def test_async_products_set_up_the_same_indexes(db_name: str) -> None:
    prefix = "asy"
    async with (
        AsyncMongoDBSaver.from_url(url(db_name), key_prefix=prefix),
        AsyncMongoDBStore.from_url(url(db_name), key_prefix=prefix),
        AsyncMongoDBCache.from_url(url(db_name), key_prefix=prefix),
        AsyncMongoDBEventLog.from_url(url(db_name), key_prefix=prefix),
        AsyncMongoDBEffects.from_url(url(db_name), key_prefix=prefix),
    ):
        pass
    raw: Any = pymongo.MongoClient(MONGODB_URI)
    assert_indexes_exactly_once(raw[db_name], prefix)
    raw.close()
