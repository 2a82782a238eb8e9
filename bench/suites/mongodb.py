"""MongoDB suite: graphkeep vs ``langgraph-checkpoint-mongodb``'s ``MongoDBSaver``.

Both savers run on the server of ``MONGODB_URI`` (default: the local FerretDB of
``./dev services up``), each in its own database (``graphkeep_bench_graphkeep``,
``graphkeep_bench_mongodbsaver``) that is dropped before each run; a database
holding collections the bench did not create is never dropped unless
``--force-flush`` is given. Requests = commands seen by a
``pymongo.monitoring.CommandListener`` on the saver's client (one command = one
round trip: a ``getMore`` counts, connection handshakes do not); bytes sent = the
BSON size of each such command as the listener sees it (``event.command``, the
document sequences of an OP_MSG folded in); stored = the database's ``dbStats``
``dataSize + indexSize`` after the run; the growth rows (issue 13) use
``dataSize`` alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from bench.probes import Probe
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

MARKER = "graphkeep_bench_scratch"
KEY_PREFIX = "bench"
DATABASES = {
    "graphkeep": "graphkeep_bench_graphkeep",
    "graphkeep-noshare": "graphkeep_bench_graphkeep_noshare",
    "graphkeep-otel": "graphkeep_bench_graphkeep_otel",
    "graphkeep-notel": "graphkeep_bench_graphkeep_notel",
    "graphkeep-enc": "graphkeep_bench_graphkeep_enc",
    "MongoDBSaver": "graphkeep_bench_mongodbsaver",
}
#: issue 13: W50 (50 turns) stores at most this much data on MongoDB
STORED_MAX = 1_000_000
#: issue 13: W50 commands per turn, at most (one command per saver call)
MAX_COMMANDS_PER_TURN = 9
#: commands that are connection or session housekeeping, not saver work
HOUSEKEEPING = frozenset(
    {"hello", "ismaster", "saslstart", "saslcontinue", "ping", "endsessions", "buildinfo"}
)
#: issue 45: the requests one lease of ``saver.exclusive`` may cost per run: acquire (up to
#: three commands: the lease, its fencing token, and the effect ledger's copy of the token)
#: and release
LEASE_REQUESTS = 4


def mongodb_url() -> str:
    return os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")


def mongo_client(probe: Probe | None = None) -> Any:
    """A client of ``MONGODB_URI``; with ``probe``, every non-housekeeping command is counted."""
    import bson
    import pymongo
    from pymongo import monitoring

    listeners: list[Any] = []
    if probe is not None:
        count = probe.request

        class Commands(monitoring.CommandListener):
            def started(self, event: monitoring.CommandStartedEvent) -> None:
                if event.command_name.lower() not in HOUSEKEEPING:
                    count(sent=len(bson.encode(event.command)))

            def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
                pass

            def failed(self, event: monitoring.CommandFailedEvent) -> None:
                pass

        listeners.append(Commands())
    return pymongo.MongoClient(
        mongodb_url(), serverSelectionTimeoutMS=3000, event_listeners=listeners
    )


def unavailable() -> Skip | None:
    url = mongodb_url()
    if skip := not_yet(url.split("://", 1)[0].lower()):
        return skip
    try:
        import langgraph.checkpoint.mongodb  # noqa: F401
    except ImportError:
        return Skip(
            "langgraph-checkpoint-mongodb is missing (pip install langgraph-checkpoint-mongodb)"
        )
    try:
        client = mongo_client()
        try:
            client.admin.command("ping")
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run", with the reason
        return Skip(f"no MongoDB answers at {mask_url(url)} ({type(exc).__name__}: {exc})")
    return None


def scratch_database(client: Any, name: str, force: bool) -> None:
    """Drop database ``name`` (only if it is the bench's own) and mark it as the bench's."""
    if name in client.list_database_names():
        collections = client[name].list_collection_names()
        if collections and MARKER not in collections and not force:
            raise BenchError(
                f"database {name} on {mask_url(mongodb_url())} holds collections the bench"
                " did not create; drop it yourself or pass --force-flush"
            )
        client.drop_database(name)
    client[name][MARKER].insert_one({"note": "scratch database of python -m bench"})


def stored_bytes(name: str, indexes: bool = True) -> int:
    """``dataSize`` (``+ indexSize``) of the database, without the marker collection."""
    client = mongo_client()
    try:
        db = client[name]
        stats = db.command("dbStats")
        marker = db.command("collStats", MARKER)
        total = int(stats.get("dataSize", 0)) - int(marker.get("size", 0))
        if indexes:
            total += int(stats.get("indexSize", 0)) - int(marker.get("totalIndexSize", 0))
        return total
    finally:
        client.close()


def data_bytes(name: str) -> int:
    """``dataSize`` of the database without the marker collection (issue 13's measure)."""
    return stored_bytes(name, indexes=False)


def graphkeep_opener(name: str, options: Options, **saver_options: Any) -> Any:
    @contextmanager
    def open_graphkeep(work: Workload) -> Iterator[Opened]:
        from graphkeep.backends.mongodb import MongoDBSaver

        db_name = DATABASES[name]
        probe = Probe()
        client = mongo_client(probe)
        try:
            scratch_database(client, db_name, options.force_flush)
            saver = MongoDBSaver(client, db_name=db_name, key_prefix=KEY_PREFIX, **saver_options)
            saver.setup()
            yield Opened(saver, probe, lambda: stored_bytes(db_name), lambda: data_bytes(db_name))
        finally:
            client.close()

    return open_graphkeep


def growth_contenders(options: Options) -> list[Contender]:
    opener = graphkeep_opener("graphkeep-noshare", options, share_lists=False)
    return [InProcess("graphkeep-noshare", opener)]


def contenders(options: Options) -> list[Contender]:
    @contextmanager
    def open_memory(work: Workload) -> Iterator[Opened]:
        yield Opened(InMemorySaver(), Probe(counts_requests=False))

    open_graphkeep = graphkeep_opener("graphkeep", options)

    @contextmanager
    def open_rival(work: Workload) -> Iterator[Opened]:
        from langgraph.checkpoint.mongodb import MongoDBSaver as LangGraphMongoDBSaver

        name = DATABASES["MongoDBSaver"]
        probe = Probe()
        client = mongo_client(probe)
        try:
            scratch_database(client, name, options.force_flush)
            saver = LangGraphMongoDBSaver(client, db_name=name)
            yield Opened(saver, probe, lambda: stored_bytes(name), lambda: data_bytes(name))
        finally:
            client.close()

    return [
        InProcess("graphkeep", open_graphkeep),
        *(
            InProcess(name, graphkeep_opener(name, options, telemetry=telemetry_option(name)))
            for name in TELEMETRY_CONTENDERS
        ),
        InProcess(ENCRYPTED, graphkeep_opener(ENCRYPTED, options, encryption=bench_ring())),
        InProcess("MongoDBSaver", open_rival),
        InProcess("InMemorySaver", open_memory),
    ]


def where(options: Options) -> str:
    dbs = ", ".join(f"{saver} in {db}" for saver, db in DATABASES.items())
    return f"MongoDB at {mask_url(mongodb_url())}; {dbs}"


def targets(results: list[Result]) -> list[tuple[str, bool]]:
    return (
        requests_budget(results, MAX_COMMANDS_PER_TURN, "commands per turn (issue 13)")
        + faster_per_turn(results, "MongoDBSaver")
        + growth_targets(results, STORED_MAX)
    )


SUITE = Suite(
    name="mongodb",
    title="MongoDB",
    stored_label="dbStats dataSize + indexSize of the saver's database",
    request_label="commands seen by pymongo command monitoring (one per round trip)",
    sent_label="BSON size of each command seen by pymongo command monitoring"
    " (event.command; handshakes not counted)",
    growth_stored_label="dbStats dataSize of the saver's database (indexes not counted)",
    unavailable=unavailable,
    contenders=contenders,
    baseline="graphkeep",
    rival="MongoDBSaver",
    where=where,
    targets=targets,
    growth_contenders=growth_contenders,
    # FerretDB answers in tens of ms per command: one round of 50 turns is ~15 minutes
    default_rounds=1,
    lockstep=TELEMETRY_LOCKSTEP,
    lockstep_costs=TELEMETRY_COSTS,
    lease_requests=LEASE_REQUESTS,
    notes=[
        NOSHARE_NOTE,
        TELEMETRY_NOTE,
        ENCRYPTION_NOTE,
        "MongoDBSaver = langgraph-checkpoint-mongodb (sync);"
        " InMemorySaver = langgraph's reference saver, no store (n/a)",
    ],
)
