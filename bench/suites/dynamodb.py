"""DynamoDB suite: graphkeep vs ``langgraph-checkpoint-aws``'s ``DynamoDBSaver``.

Both savers run on the endpoint of ``DYNAMODB_ENDPOINT_URL`` (default: the local
moto server of ``./dev services up``), each in its own table
(``graphkeep_bench_graphkeep``, ``graphkeep_bench_dynamodbsaver``) that is deleted
and created again before each run. Requests = HTTP requests, counted with
botocore's ``before-send`` event on the saver's client (a retry counts again),
bytes sent = the bodies of those requests; capacity units (WCU, RCU) = AWS's rules applied
to each call's parameters and response (:mod:`bench.capacity`), billed to the saver
call that made it;
stored = the DynamoDB item size (attribute names plus values, AWS's rules) summed
over a scan of the table after the run; moto does not report ``TableSizeBytes``.

``langgraph-checkpoint-aws`` wants the newest boto3, so its saver runs in a
virtualenv of its own, ``.bench-venvs/aws`` (``GRAPHKEEP_BENCH_VENVS`` moves it),
made on first use with the same langgraph version as ours, through
:class:`bench.worker.InSubprocess`; :func:`open_rival` is the factory it
calls there. On a loopback endpoint without AWS credentials in the environment
the suite sets the dummy ones moto accepts.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.memory import InMemorySaver

from bench.capacity import CapacityMeter, Consumed, item_size
from bench.probes import Probe
from bench.suites import (
    ENCRYPTED,
    ENCRYPTION_NOTE,
    NOSHARE_NOTE,
    TELEMETRY_CONTENDERS,
    TELEMETRY_COSTS,
    TELEMETRY_LOCKSTEP,
    TELEMETRY_NOTE,
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
from bench.workloads import EDGE_TURNS, Opened, Result, Workload

KEY_PREFIX = "bench"
TABLES = {
    "graphkeep": "graphkeep_bench_graphkeep",
    "graphkeep-nozlib": "graphkeep_bench_graphkeep_nozlib",
    "graphkeep-noshare": "graphkeep_bench_graphkeep_noshare",
    "graphkeep-otel": "graphkeep_bench_graphkeep_otel",
    "graphkeep-notel": "graphkeep_bench_graphkeep_notel",
    "graphkeep-enc": "graphkeep_bench_graphkeep_enc",
    "DynamoDBSaver": "graphkeep_bench_dynamodbsaver",
}
#: the large-message check: over DynamoDB's 400 KB item limit
LARGE_MESSAGE = 500_000
#: issue 13: W50 (50 turns) stores at most this many item bytes on DynamoDB
STORED_MAX = 400_000
#: issue 4's budget of API calls per W50 turn
MAX_CALLS_PER_TURN = 5
AWS_REQUIREMENTS = ("langgraph-checkpoint-aws",)
#: issue 45: the requests one lease of ``saver.exclusive`` may cost per run: acquire and
#: release, one conditional write each
LEASE_REQUESTS = 2


def endpoint_url() -> str:
    return os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")


def region() -> str:
    return os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


def table_url(table: str) -> str:
    return f"dynamodb://{table}?region={region()}&endpoint_url={endpoint_url()}"


def local_credentials() -> None:
    """Dummy credentials for a loopback endpoint (moto) when none are configured."""
    host = urlsplit(endpoint_url()).hostname or ""
    configured = os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")
    if host in ("127.0.0.1", "localhost", "::1") and not configured:
        os.environ["AWS_ACCESS_KEY_ID"] = "test"
        os.environ["AWS_SECRET_ACCESS_KEY"] = "test"


def dynamodb_client() -> Any:
    """A boto3 DynamoDB client of the bench endpoint (local credentials set when needed)."""
    import boto3

    local_credentials()
    return boto3.client("dynamodb", endpoint_url=endpoint_url(), region_name=region())


def body_size(body: Any) -> int:
    """Bytes of a botocore request body (bytes, str, a seekable stream or nothing)."""
    if body is None:
        return 0
    if isinstance(body, str):
        return len(body.encode())
    if isinstance(body, (bytes, bytearray, memoryview)):
        return memoryview(body).nbytes
    if hasattr(body, "seek") and hasattr(body, "tell"):
        at = int(body.tell())
        size = int(body.seek(0, 2)) - at
        body.seek(at)
        return size
    return 0


def count_requests(client: Any, probe: Probe) -> None:
    """Report every HTTP request the boto3 client sends (retries included) to ``probe``,
    with the bytes of its body and its operation (``before-send.dynamodb.<Operation>``)."""

    def sent(request: Any = None, event_name: str = "", **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1] if event_name.count(".") >= 2 else None
        probe.request(sent=body_size(getattr(request, "body", None)), operation=operation)

    client.meta.events.register("before-send.dynamodb", sent)


def count_capacity(client: Any, probe: Probe, hash_key: str, range_key: str) -> CapacityMeter:
    """Report the capacity units of every call the boto3 client makes on a table keyed
    ``(hash_key, range_key)`` to ``probe`` (:mod:`bench.capacity`)."""
    meter = CapacityMeter(hash_key, range_key)

    def report(consumed: Consumed) -> None:
        probe.consumed(read=consumed.read, write=consumed.write)

    meter.attach(client, report)
    probe.counts_capacity = True
    return meter


def drop_table(client: Any, table: str) -> None:
    if table in client.list_tables().get("TableNames", []):
        client.delete_table(TableName=table)
        client.get_waiter("table_not_exists").wait(TableName=table)


def stored_bytes(table: str) -> int:
    client = dynamodb_client()
    total = 0
    for page in client.get_paginator("scan").paginate(TableName=table):
        total += sum(item_size(item) for item in page.get("Items", []))
    return total


def unavailable() -> Skip | None:
    if skip := not_yet("dynamodb"):
        return skip
    try:
        dynamodb_client().list_tables(Limit=1)
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run", with the reason
        return Skip(f"no DynamoDB answers at {endpoint_url()} ({type(exc).__name__}: {exc})")
    return None


@contextmanager
def open_rival(work: Workload) -> Iterator[Opened]:
    """Factory run inside ``.bench-venvs/aws``: langgraph-checkpoint-aws on a fresh table."""
    from langgraph_checkpoint_aws import DynamoDBSaver

    table = TABLES["DynamoDBSaver"]
    create_rival_table(table)
    saver = DynamoDBSaver(table_name=table, region_name=region(), endpoint_url=endpoint_url())
    probe = Probe()
    count_requests(saver.client, probe)
    count_capacity(saver.client, probe, "PK", "SK")
    yield Opened(saver, probe, lambda: stored_bytes(table))


def create_rival_table(table: str) -> None:
    """``table`` afresh, keyed as langgraph-checkpoint-aws's DynamoDBSaver wants it (the
    definition graphkeep's copy uses for that saver)."""
    from graphkeep.moving.rivals import create_table

    admin = dynamodb_client()
    drop_table(admin, table)
    create_table(admin, table, ttl_seconds=None)


def venv_dir() -> Path:
    return Path(os.environ.get("GRAPHKEEP_BENCH_VENVS", ".bench-venvs")) / "aws"


def graphkeep_opener(name: str, **saver_options: Any) -> Any:
    import graphkeep

    @contextmanager
    def open_graphkeep(work: Workload) -> Iterator[Opened]:
        table = TABLES[name]
        drop_table(dynamodb_client(), table)
        probe = Probe()
        url = table_url(table)
        with graphkeep.connect(url, key_prefix=KEY_PREFIX, **saver_options) as saver:
            count_requests(saver.client, probe)
            count_capacity(saver.client, probe, "pk", "sk")  # items.PK, items.SK
            yield Opened(saver, probe, lambda: stored_bytes(table))

    return open_graphkeep


def growth_contenders(options: Options) -> list[Contender]:
    local_credentials()
    opener = graphkeep_opener("graphkeep-noshare", share_lists=False)
    return [InProcess("graphkeep-noshare", opener)]


def contenders(options: Options) -> list[Contender]:
    from bench.worker import InSubprocess, ensure_venv

    local_credentials()

    @contextmanager
    def open_memory(work: Workload) -> Iterator[Opened]:
        yield Opened(InMemorySaver(), Probe(counts_requests=False))

    where = venv_dir()
    if not where.exists():
        print(f"  creating {where} for langgraph-checkpoint-aws (once; about a minute)")
    pins = [f"{dist}=={metadata.version(dist)}" for dist in ("langgraph", "langgraph-checkpoint")]
    python = ensure_venv(where, [*AWS_REQUIREMENTS, *pins])
    passed = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "DYNAMODB_"))}
    rival = InSubprocess("DynamoDBSaver", str(python), "bench.suites.dynamodb:open_rival", passed)
    return [
        InProcess("graphkeep", graphkeep_opener("graphkeep", compress=True)),
        InProcess("graphkeep-nozlib", graphkeep_opener("graphkeep-nozlib", compress=False)),
        *(
            InProcess(name, graphkeep_opener(name, compress=True, telemetry=telemetry_option(name)))
            for name in TELEMETRY_CONTENDERS
        ),
        InProcess(ENCRYPTED, graphkeep_opener(ENCRYPTED, compress=True, encryption=bench_ring())),
        rival,
        InProcess("InMemorySaver", open_memory),
    ]


def where(options: Options) -> str:
    tables = ", ".join(f"{saver} in table {table}" for saver, table in TABLES.items())
    return f"DynamoDB at {endpoint_url()} (region {region()}); {tables}"


def capacity_targets(results: list[Result], rival: str) -> list[tuple[str, bool]]:
    """Issue 28: "W50: graphkeep WCU/turn <= the rival's", and RCU likewise."""
    by = {(r.saver, r.workload): r for r in results}
    ours, theirs = by.get(("graphkeep", "W50")), by.get((rival, "W50"))
    if ours is None or theirs is None:
        return []
    out: list[tuple[str, bool]] = []
    for unit, mine, other in (
        ("WCU", ours.write_units_per_turn, theirs.write_units_per_turn),
        ("RCU", ours.read_units_per_turn, theirs.read_units_per_turn),
    ):
        if mine is not None and other is not None:
            out.append(
                (
                    f"W50: graphkeep {unit}/turn <= {rival}'s (issue 28): {mine:.2f} vs"
                    f" {other:.2f}",
                    mine <= other,
                )
            )
    return out


#: issue 48: graphkeep's W50 turns cost the same at the end of the run as at its start
FLAT_TOLERANCE = 0.20


def flat_targets(results: list[Result]) -> list[tuple[str, bool]]:
    """Issue 48: W50 ms/turn over the last turns within 20 % of the first turns'."""
    ours = next((r for r in results if (r.saver, r.workload) == ("graphkeep", "W50")), None)
    if ours is None or ours.first_ms is None or ours.last_ms is None:
        return []
    change = ours.last_ms / ours.first_ms - 1
    return [
        (
            f"W50: graphkeep ms/turn flat, last {EDGE_TURNS} turns within"
            f" {FLAT_TOLERANCE:.0%} of the first {EDGE_TURNS} (issue 48): {ours.first_ms:.1f}"
            f" -> {ours.last_ms:.1f} ms ({change:+.0%})",
            abs(change) <= FLAT_TOLERANCE,
        )
    ]


def targets(results: list[Result]) -> list[tuple[str, bool]]:
    """Issue 4's budget of calls per W50 turn, faster per turn than the rival, and issue
    28's capacity units per turn."""
    return (
        requests_budget(results, MAX_CALLS_PER_TURN, "API calls per turn (issue 4)")
        + faster_per_turn(results, "DynamoDBSaver")
        + capacity_targets(results, "DynamoDBSaver")
        + flat_targets(results)
        + growth_targets(results, STORED_MAX)
    )


SUITE = Suite(
    name="dynamodb",
    title="DynamoDB",
    stored_label="DynamoDB item bytes (names + values) summed over a scan of the saver's table",
    request_label="HTTP requests (botocore before-send events, retries included)",
    sent_label="HTTP request body bytes (botocore before-send, retries included)",
    capacity_label=(
        "WCU, RCU = capacity units by AWS's documented rules (bench.capacity),"
        " computed at each call's botocore after-call event from its parameters and response:"
        " writes 1 WCU per KB of item size rounded up per item (the larger of before and"
        " after), TransactWriteItems twice that; reads 1 RCU per 4 KB strongly consistent,"
        " 0.5 eventually consistent, rounded up per item for GetItem/BatchGetItem and over"
        " the items a Query reads (whole items, projections and filters do not shrink"
        " them). moto's own ReturnConsumedCapacity figures are fixed (1.0 per write, 0.5"
        " per read), so they are not used. graphkeep reads strongly consistent (a read"
        " after a put sees it), DynamoDBSaver eventually consistent (half the RCU per byte)"
    ),
    unavailable=unavailable,
    contenders=contenders,
    baseline="graphkeep",
    rival="DynamoDBSaver",
    where=where,
    targets=targets,
    growth_contenders=growth_contenders,
    default_rounds=1,
    large_message=LARGE_MESSAGE,
    lockstep=TELEMETRY_LOCKSTEP,
    lockstep_costs=TELEMETRY_COSTS,
    lease_requests=LEASE_REQUESTS,
    notes=[
        "graphkeep = the default (zlib level 6 on payloads from 4 KiB);"
        " graphkeep-nozlib = the same with compress=False",
        NOSHARE_NOTE,
        TELEMETRY_NOTE,
        ENCRYPTION_NOTE,
        "DynamoDBSaver = langgraph-checkpoint-aws (sync), run in .bench-venvs/aws with the"
        " same langgraph; InMemorySaver = langgraph's reference saver, no store (n/a)",
        "ms on moto are not DynamoDB's: moto copies the table (to roll back) for every"
        " TransactWriteItems, so transactions slow down as the table grows, which DynamoDB's"
        " do not; graphkeep's unfenced put and put_writes send none (values, then the head;"
        " a task's writes one conditional PutItem), its fenced writes (the exclusive rows) do."
        " Requests and stored bytes carry over to DynamoDB; ms/turn do not",
    ],
)


@asynccontextmanager
async def open_async_rival() -> AsyncIterator[Any]:
    """The concurrency suite's factory, run inside ``.bench-venvs/aws``: langgraph-checkpoint-aws
    on a fresh table (``GRAPHKEEP_BENCH_RIVAL_TABLE``), its async methods as they come."""
    from langgraph_checkpoint_aws import DynamoDBSaver

    from bench.concurrency_workload import AsyncOpened

    table = os.environ.get("GRAPHKEEP_BENCH_RIVAL_TABLE", TABLES["DynamoDBSaver"])
    create_rival_table(table)
    saver = DynamoDBSaver(table_name=table, region_name=region(), endpoint_url=endpoint_url())
    probe = Probe()
    count_requests(saver.client, probe)
    yield AsyncOpened(saver, lambda: probe.total, frozenset({urlsplit(endpoint_url()).port or 443}))
