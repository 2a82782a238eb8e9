"""A batch of keys read from a rival store (``connect_store(url, fallback=RIVAL_URL)``'s
reads) costs a few requests, not one or three per key: RedisStore's keys in one ``FT.SEARCH``
and one pipeline, DynamoDBStore's in one ``BatchGetItem`` per 100 keys, MongoDBStore's in one
``find``. The requests are counted where the client puts them on the wire (a redis-py
connection class, botocore's ``before-send`` event, a PyMongo command listener) against the
real servers; the items read equal what each rival's own API stored, in the order asked, with
None for a key it does not hold and near matches (the same key in namespaces that share
labels) never mixed up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import GetOp

import graphkeep
from graphkeep.moving import rival_items

from .conftest import REDIS_URL, unique_prefix
from .rival_stores import RIVALS, Rival, open_rival, redis_stack_url, seed

#: 30 items in namespaces that share labels and keys (a text search of one key's namespace
#: also matches the others), and one key per namespace only some of them hold
ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (ns, key, {"ns": list(ns), "key": key, "n": i})
    for i, (ns, key) in enumerate(
        [(("users", f"u{u}"), "prefs") for u in range(10)]
        + [(("users", f"u{u}", "memories"), "prefs") for u in range(10)]
        + [(("users", f"u{u}", "memories"), f"m{u}") for u in range(10)]
    )
]
MISSING = [(("users", "u1"), "absent"), (("users", "nobody"), "prefs"), (("users",), "prefs")]


@pytest.fixture(params=RIVALS)
def rival(request: pytest.FixtureRequest) -> Iterator[Rival]:
    with open_rival(request.param) as made:
        with made.open() as store:
            seed(store, ITEMS)
        yield made


def _wanted() -> list[tuple[tuple[str, ...], str]]:
    """Every item's key and the missing ones, interleaved, one of them asked twice."""
    keys = [(ns, key) for ns, key, _ in ITEMS]
    others = MISSING + keys[: len(keys) - len(MISSING)]
    asked = [k for pair in zip(keys, others, strict=True) for k in pair]
    return asked + [keys[0]]


def _expected(asked: list[tuple[tuple[str, ...], str]]) -> list[Any]:
    values = {(ns, key): value for ns, key, value in ITEMS}
    return [values.get(k) for k in asked]


class _Counted:
    """Requests put on the wire by one client."""

    def __init__(self) -> None:
        self.sent = 0


def _redis_reader(rival: Rival) -> tuple[Any, _Counted]:
    from redis import Redis
    from redis.connection import Connection

    counted = _Counted()

    class CountingConnection(Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            counted.sent += 1
            super().send_packed_command(command, check_health)

    options = dict(part.split("=", 1) for part in rival.url.split("?", 1)[1].split("&"))
    client = Redis.from_url(redis_stack_url(), connection_class=CountingConnection)
    client.ping()  # connected: the connection's own handshake is not the batch's
    keys = rival_items.redis_keys(client, options["store_prefix"], options["vector_prefix"])
    return keys, counted


def _dynamodb_reader(rival: Rival) -> tuple[Any, _Counted]:
    import boto3

    counted = _Counted()
    client = boto3.client(
        "dynamodb",
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        endpoint_url=os.environ.get("DYNAMODB_ENDPOINT_URL"),
    )

    def count(**_: Any) -> None:
        counted.sent += 1

    client.meta.events.register("before-send.dynamodb", count)
    table = rival.url.split("://", 1)[1].split("?", 1)[0]
    return rival_items.dynamodb_keys(client, table), counted


def _mongodb_reader(rival: Rival) -> tuple[Any, _Counted]:
    from pymongo import MongoClient, monitoring

    counted = _Counted()

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            counted.sent += 1

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    client: Any = MongoClient(os.environ.get("MONGODB_URI"), event_listeners=[Listener()])
    name = rival.url.split("collection_name=", 1)[1]
    return rival_items.mongodb_keys(client["gk_rivals"][name]), counted


READERS = {"redis": _redis_reader, "dynamodb": _dynamodb_reader, "mongodb": _mongodb_reader}
#: round trips for the batch: a search and a pipeline; one BatchGetItem; one find
REQUESTS = {"redis": 2, "dynamodb": 1, "mongodb": 1}


def test_a_batch_of_keys_is_read_in_a_few_requests_and_exactly(rival: Rival) -> None:
    keys, counted = READERS[rival.name](rival)
    asked = _wanted()
    before = counted.sent
    found = keys(asked)
    assert counted.sent - before == REQUESTS[rival.name], f"{rival.name}: {counted.sent - before}"
    assert [None if r is None else r.item.value for r in found] == _expected(asked)
    for key, record in zip(asked, found, strict=True):
        if record is not None:
            assert (tuple(record.item.namespace), record.item.key) == key
    assert keys([]) == []


def test_a_batch_larger_than_one_request_reads_every_key(rival: Rival) -> None:
    """Past one request's keys (50 per Redis search, 100 per BatchGetItem), the batch is split,
    never cut short."""
    keys, counted = READERS[rival.name](rival)
    existing = [(ns, key) for ns, key, _ in ITEMS]
    asked = [(("users", "u0"), f"none{i}") for i in range(95)] + existing  # 125 keys
    before = counted.sent
    found = keys(asked)
    # Redis: three searches (50 + 50 + 25 keys) and one pipeline; DynamoDB: 100 + 25 keys
    want = {"redis": 4, "dynamodb": 2, "mongodb": 1}[rival.name]
    assert counted.sent - before == want, f"{rival.name}: {counted.sent - before}"
    assert [None if r is None else r.item.value for r in found] == _expected(asked)


@pytest.mark.redis
def test_a_store_batch_reads_through_to_a_rival_in_one_read(rival: Rival) -> None:
    """End to end: one ``batch`` of gets on a graphkeep store with the rival as its fallback
    answers every key as the rival holds it (adopted), in order, None where it has none."""
    asked = _wanted()
    ops = [GetOp(ns, key) for ns, key in asked]
    with graphkeep.connect_store(
        REDIS_URL, key_prefix=unique_prefix("rk"), fallback=rival.url
    ) as store:
        got = store.batch(ops)
        again = store.batch(ops)
    assert [None if item is None else item.value for item in got] == _expected(asked)
    assert [None if item is None else item.value for item in again] == _expected(asked)
