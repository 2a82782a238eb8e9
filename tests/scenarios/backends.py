"""The backend set-ups every scenario runs on, and what a scenario gets from them.

`SETUPS` is the one list: Redis and Redis Cluster always; MongoDB and DynamoDB as soon as their
URL scheme is registered in ``graphkeep.connect.BACKENDS`` (no edit needed when they land).
URLs come from REDIS_URL, REDIS_CLUSTER_URL, MONGODB_URI (default database ``graphkeep_scen``)
and DYNAMODB_ENDPOINT_URL (table ``graphkeep_scen``), defaulting to ``./dev services up``.
A server that does not answer FAILS the test with that hint; nothing is skipped.

A test asks for the ``store`` fixture: one set-up plus a fresh key prefix. ``store.open(mode)``
yields a saver made by ``graphkeep.connect`` ("sync") or ``graphkeep.aconnect`` ("async") behind
the matrix's :class:`~conformance.factory.Api`; :class:`Graph` runs a compiled graph on it
through ``invoke``/``get_state``/... or their ``a*`` twins; ``store.scan()`` reads everything
stored under the prefix with the backend's own client (no graphkeep code involved).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.types import StateSnapshot

from conformance.factory import (
    Api,
    AsyncApi,
    Mode,
    SaverFactory,
    ServiceUnavailable,
    connector_for,
    ensure_reachable,
)
from conformance.setups import Setup
from graphkeep.connect import BACKENDS
from tests.conftest import REDIS_CLUSTER_URL, REDIS_URL, unique_prefix
from tests.scenarios.servers import FerretDBServer, MotoServer, PrivateServer, RedisServer

T = TypeVar("T")
MODES: tuple[Mode, ...] = ("sync", "async")
SCENARIO_DB = "graphkeep_scen"

# moto accepts any credentials; boto3 refuses to sign without some
for _var, _value in (
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
):
    os.environ.setdefault(_var, _value)

MONGODB_URI = os.environ.get("MONGODB_URI", f"mongodb://127.0.0.1:27117/{SCENARIO_DB}")
DYNAMODB_ENDPOINT_URL = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")


def mongodb_url(uri: str) -> str:
    """``uri`` with the scenario database when it names none (``.services/env`` names none)."""
    parts = urlsplit(uri)
    if parts.path.strip("/"):
        return uri
    return parts._replace(path=f"/{SCENARIO_DB}").geturl()


def dynamodb_url(endpoint_url: str) -> str:
    return f"dynamodb://{SCENARIO_DB}?region=us-east-1&endpoint_url={endpoint_url}"


# -- the raw store: what a prefix holds, read and deleted with the store's own client -------
#
# Layouts (see each backend's module docstring): Redis keys "<prefix>:<format>:{<thread>}:...",
# MongoDB collections "<prefix>_checkpoints", "_payloads", "_locks" in the URL's database,
# DynamoDB items of the URL's table whose partition key is "<prefix>#<format>#<thread>".


class RawStore(ABC):
    """A backend's own client, scoped to one key prefix."""

    @abstractmethod
    def scan(self, url: str, prefix: str) -> dict[str, bytes]:
        """Every stored record under ``prefix``: an identity -> every byte it holds."""

    @abstractmethod
    def purge(self, url: str, prefix: str) -> None:
        """Delete everything under ``prefix`` (test teardown; keeps shared servers small)."""

    @abstractmethod
    def is_lease(self, identity: str, value: bytes) -> bool:
        """Whether the record ``scan`` gave as ``identity: value`` is a thread's lease or
        fencing token (kept apart from its data: what a lease taken and let go leaves)."""

    def data(self, url: str, prefix: str) -> dict[str, bytes]:
        """:meth:`scan` without the lease records: what "writes nothing" compares."""
        return {k: v for k, v in self.scan(url, prefix).items() if not self.is_lease(k, v)}


def redis_client(url: str) -> Any:
    """A plain redis-py client on a test URL's server (``redis+cluster://`` a cluster client);
    the URL without its graphkeep query."""
    import redis

    scheme, _, rest = url.partition("?")[0].partition("://")
    if scheme.endswith("+cluster"):
        return redis.RedisCluster.from_url(f"{scheme.removesuffix('+cluster')}://{rest}")
    return redis.Redis.from_url(f"{scheme}://{rest}")


def dynamodb_client(url: str) -> tuple[Any, str]:
    """A plain boto3 DynamoDB client on a test ``dynamodb://TABLE?region=…&endpoint_url=…``
    URL's endpoint, and the URL's table."""
    from urllib.parse import parse_qs, urlsplit

    import boto3

    parts = urlsplit(url)
    query = parse_qs(parts.query)
    client = boto3.client(
        "dynamodb",
        region_name=query.get("region", ["us-east-1"])[0],
        endpoint_url=query["endpoint_url"][0],
    )
    return client, parts.netloc


class RawRedis(RawStore):
    @staticmethod
    def _client(url: str) -> Any:
        return redis_client(url)

    def is_lease(self, identity: str, value: bytes) -> bool:
        return identity.endswith((":lock", ":fence"))

    def _keys(self, client: Any, prefix: str) -> list[bytes]:
        return list(client.scan_iter(match=f"{prefix}:*", count=1000))

    def scan(self, url: str, prefix: str) -> dict[str, bytes]:
        client = self._client(url)
        try:
            return {
                key.decode(errors="backslashreplace"): _redis_value(client, key)
                for key in self._keys(client, prefix)
            }
        finally:
            client.close()

    def purge(self, url: str, prefix: str) -> None:
        client = self._client(url)
        try:
            for key in self._keys(client, prefix):
                client.delete(key)  # one key per call: keys of a cluster live in many slots
        finally:
            client.close()


def _redis_value(client: Any, key: bytes) -> bytes:
    kind: str = client.type(key).decode()
    parts: list[bytes]
    if kind == "string":
        parts = [bytes(client.get(key) or b"")]
    elif kind == "hash":
        parts = [k + b"=" + v for k, v in sorted(client.hgetall(key).items())]
    elif kind == "zset":
        parts = [m + b"@" + repr(s).encode() for m, s in client.zrange(key, 0, -1, withscores=True)]
    elif kind == "set":
        parts = sorted(client.smembers(key))
    elif kind == "list":
        parts = list(client.lrange(key, 0, -1))
    elif kind == "stream":
        parts = [
            i + b"".join(k + b"=" + v for k, v in sorted(fields.items()))
            for i, fields in client.xrange(key)
        ]
    else:  # "none": expired between SCAN and TYPE
        parts = []
    return kind.encode() + b":" + b"\x1f".join(parts)


class RawMongoDB(RawStore):
    @staticmethod
    def _database(url: str) -> tuple[Any, Any]:
        import pymongo

        client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
        return client, client.get_default_database(default="graphkeep")

    @staticmethod
    def _collections(db: Any, prefix: str) -> list[str]:
        return [n for n in db.list_collection_names() if n.startswith(f"{prefix}_")]

    def is_lease(self, identity: str, value: bytes) -> bool:
        import bson

        collection = identity.partition("/")[0]
        return collection.endswith("_locks") or bson.decode(value).get("kind") == "fence"

    def scan(self, url: str, prefix: str) -> dict[str, bytes]:
        import bson

        client, db = self._database(url)
        try:
            return {
                f"{name}/{doc.get('_id')!r}": bson.encode(doc)
                for name in self._collections(db, prefix)
                for doc in db[name].find()
            }
        finally:
            client.close()

    def purge(self, url: str, prefix: str) -> None:
        client, db = self._database(url)
        try:
            for name in self._collections(db, prefix):
                db.drop_collection(name)
        finally:
            client.close()


class RawDynamoDB(RawStore):
    @staticmethod
    def _table(url: str) -> tuple[Any, str]:
        import boto3

        parts = urlsplit(url)
        query = parse_qs(parts.query)
        client: Any = boto3.client(
            "dynamodb",
            region_name=query.get("region", ["us-east-1"])[0],
            endpoint_url=query.get("endpoint_url", [None])[0],
        )
        return client, parts.netloc or parts.path.strip("/")

    @staticmethod
    def _items(client: Any, table: str, prefix: str) -> tuple[list[dict[str, Any]], list[str]]:
        try:
            schema = client.describe_table(TableName=table)["Table"]["KeySchema"]
        except client.exceptions.ResourceNotFoundException:
            return [], []
        keys = [k["AttributeName"] for k in schema]
        partition = next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")
        pages = client.get_paginator("scan").paginate(
            TableName=table,
            ConsistentRead=True,
            FilterExpression="begins_with(#pk, :prefix)",
            ExpressionAttributeNames={"#pk": partition},
            ExpressionAttributeValues={":prefix": {"S": f"{prefix}#"}},
        )
        return [item for page in pages for item in page["Items"]], keys

    def is_lease(self, identity: str, value: bytes) -> bool:
        return identity.endswith(", b'l#']")

    def scan(self, url: str, prefix: str) -> dict[str, bytes]:
        client, table = self._table(url)
        items, keys = self._items(client, table, prefix)
        return {
            repr([_dynamodb_bytes(item[k]) for k in keys]): _dynamodb_bytes({"M": item})
            for item in items
        }

    def purge(self, url: str, prefix: str) -> None:
        client, table = self._table(url)
        items, keys = self._items(client, table, prefix)
        requests = [{"DeleteRequest": {"Key": {k: item[k] for k in keys}}} for item in items]
        for start in range(0, len(requests), 25):
            pending: dict[str, Any] = {table: requests[start : start + 25]}
            while pending:
                pending = client.batch_write_item(RequestItems=pending)["UnprocessedItems"]


def _dynamodb_bytes(value: dict[str, Any]) -> bytes:
    """An attribute value as the bytes it holds (strings UTF-8, binaries raw), deterministic."""
    (kind, raw), *_ = value.items()
    if kind in ("S", "N"):
        return str(raw).encode()
    if kind == "B":
        return bytes(raw)
    if kind == "M":
        fields = (k.encode() + b"=" + _dynamodb_bytes(v) for k, v in sorted(raw.items()))
        return b"{" + b",".join(fields) + b"}"
    if kind == "L":
        return b"[" + b",".join(_dynamodb_bytes(v) for v in raw) + b"]"
    if kind in ("SS", "NS"):
        return b"{" + b",".join(sorted(str(v).encode() for v in raw)) + b"}"
    if kind == "BS":
        return b"{" + b",".join(sorted(bytes(v) for v in raw)) + b"}"
    return repr(raw).encode()  # BOOL, NULL


# -- the set-ups ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    name: str
    url: str
    marker: str
    raw: RawStore
    #: largest serialized value one stored item can hold (None: no limit worth testing)
    item_limit: int | None = None
    #: how to start a private server of this kind for the restart tests
    private_server: type[PrivateServer] | None = None

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower()

    @property
    def setup(self) -> Setup:
        """The same set-up as the conformance matrix knows it."""
        return Setup(self.name, self.url, self.marker)

    def param(self) -> Any:
        return pytest.param(self, id=self.name, marks=getattr(pytest.mark, self.marker))


def known_setups() -> list[Backend]:
    return [
        Backend("redis", REDIS_URL, "redis", RawRedis(), private_server=RedisServer),
        Backend("redis-cluster", REDIS_CLUSTER_URL, "cluster", RawRedis()),
        Backend(
            "mongodb",
            mongodb_url(MONGODB_URI),
            "mongodb",
            RawMongoDB(),
            item_limit=16 * 1024 * 1024,
            private_server=FerretDBServer,
        ),
        Backend(
            "dynamodb",
            dynamodb_url(DYNAMODB_ENDPOINT_URL),
            "dynamodb",
            RawDynamoDB(),
            item_limit=400 * 1024,
            private_server=MotoServer,
        ),
    ]


#: the set-ups whose backend exists: Redis ones always, the others once registered
SETUPS: list[Backend] = [b for b in known_setups() if b.scheme in BACKENDS]
#: set-ups whose server kind the restart tests can start privately
RESTARTABLE: list[Backend] = [b for b in SETUPS if b.private_server is not None]


# -- what a test gets ----------------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    """One set-up under one fresh key prefix (and the sibling prefixes a test asks for)."""

    backend: Backend
    prefix: str
    siblings: list[Store] = field(default_factory=list, compare=False, repr=False)

    def factory(self, mode: Mode = "sync") -> SaverFactory:
        setup = self.backend.setup
        return SaverFactory(setup, connector_for(setup), mode, key_prefix=self.prefix)

    def open(self, mode: Mode = "sync", **options: Any) -> AbstractContextManager[Api]:
        """A NEW saver instance on this prefix (each call is like a process restart)."""
        return self.factory(mode).open(**options)

    def scan(self) -> dict[str, bytes]:
        """Everything stored under the prefix, read with the backend's own client."""
        return self.backend.raw.scan(self.backend.url, self.prefix)

    def data(self) -> dict[str, bytes]:
        """:meth:`scan` but the lease records (a thread's fencing token outlives its data)."""
        return self.backend.raw.data(self.backend.url, self.prefix)

    def sibling(self, tag: str) -> Store:
        """Another prefix on the same set-up, purged with this one."""
        other = Store(self.backend, f"{self.prefix}-{tag}")
        self.siblings.append(other)
        return other

    def purge(self) -> None:
        for each in (self, *self.siblings):
            self.backend.raw.purge(self.backend.url, each.prefix)


def reachable(backend: Backend) -> Backend:
    try:
        ensure_reachable(backend.setup)
    except ServiceUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    return backend


@pytest.fixture(params=[b.param() for b in SETUPS])
def backend(request: pytest.FixtureRequest) -> Backend:
    return reachable(request.param)


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    """A fresh prefix on the set-up; whatever the test stored there is deleted afterwards."""
    fresh = Store(backend, unique_prefix("scen"))
    yield fresh
    fresh.purge()


def other_mode(mode: Mode) -> Mode:
    """The other API: results written through one are read back through the other."""
    return "async" if mode == "sync" else "sync"


def thread_config(thread_id: Any, **configurable: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **configurable}}


class Graph:
    """A graph compiled on an Api's saver, run through that Api's mode (invoke or ainvoke...)."""

    def __init__(self, api: Api, builder: StateGraph[Any]) -> None:
        self.api = api
        self.compiled = builder.compile(checkpointer=api.saver)

    def _run(self, sync: Callable[[], T], coro: Callable[[], Awaitable[T]]) -> T:
        if isinstance(self.api, AsyncApi):
            return self.api.run(coro())
        return sync()

    def invoke(self, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        return self._run(
            lambda: self.compiled.invoke(input, config, **kwargs),
            lambda: self.compiled.ainvoke(input, config, **kwargs),
        )

    def state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        return self._run(
            lambda: self.compiled.get_state(config, subgraphs=subgraphs),
            lambda: self.compiled.aget_state(config, subgraphs=subgraphs),
        )

    def history(self, config: RunnableConfig, limit: int | None = None) -> list[StateSnapshot]:
        async def collect() -> list[StateSnapshot]:
            return [s async for s in self.compiled.aget_state_history(config, limit=limit)]

        return self._run(
            lambda: list(self.compiled.get_state_history(config, limit=limit)), collect
        )

    def update(self, config: RunnableConfig, values: Any) -> RunnableConfig:
        return self._run(
            lambda: self.compiled.update_state(config, values),
            lambda: self.compiled.aupdate_state(config, values),
        )


def checkpoint_ids(snapshots: list[StateSnapshot]) -> list[str]:
    return [s.config["configurable"]["checkpoint_id"] for s in snapshots]


# -- damage: stored bytes rewritten with the backend's own client ------------------------

#: what a damage helper does to one stored byte string: its new bytes, or None (unchanged)
Rewrite = Callable[[bytes], "bytes | None"]


def mapped(value: Any, rewrite: Rewrite) -> tuple[Any, int]:
    """``value`` (a document, an item) with every byte string ``rewrite`` changes changed."""
    if isinstance(value, (bytes, bytearray)):
        new = rewrite(bytes(value))
        return (value, 0) if new is None else (new, 1)
    if isinstance(value, dict):
        out, count = {}, 0
        for k, v in value.items():
            out[k], n = mapped(v, rewrite)
            count += n
        return out, count
    if isinstance(value, list):
        pairs = [mapped(v, rewrite) for v in value]
        return [p[0] for p in pairs], sum(p[1] for p in pairs)
    return value, 0


def damage_redis(url: str, rewrite: Rewrite) -> int:
    prefix = parse_qs(urlsplit(url).query)["key_prefix"][0]
    client = redis_client(url)
    count = 0
    try:
        keys = set(client.scan_iter(match=f"{prefix}*")) | set(
            client.scan_iter(match=f"*{{{prefix}*")
        )
        for key in keys:
            kind = client.type(key)
            if kind == b"string":
                new = rewrite(client.get(key) or b"")
                if new is not None:
                    client.set(key, new, keepttl=True)
                    count += 1
            elif kind == b"hash":
                for field, value in client.hgetall(key).items():
                    new = rewrite(value)
                    if new is not None:
                        client.hset(key, field, new)
                        count += 1
            elif kind == b"stream":  # entries keep their ids: the stream is written again
                entries = client.xrange(key)
                changed = [mapped(fields, rewrite) for _, fields in entries]
                if any(n for _, n in changed):
                    ttl = client.pttl(key)
                    client.delete(key)
                    for (entry_id, _), (fields, _) in zip(entries, changed, strict=True):
                        client.xadd(key, fields, id=entry_id)
                    if ttl > 0:
                        client.pexpire(key, ttl)
                    count += sum(n for _, n in changed)
    finally:
        client.close()
    return count


def mongodb_documents(url: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Every document of the database ``url`` names, with its collection (a whole scan: for
    tests that damage or remove stored data by hand)."""
    import pymongo

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
    with client:
        db = client.get_default_database()
        for name in db.list_collection_names():
            for doc in db[name].find():
                yield db[name], doc


def damage_mongodb(url: str, rewrite: Rewrite) -> int:
    count = 0
    for collection, doc in mongodb_documents(url):
        new, n = mapped(doc, rewrite)
        if n:
            collection.replace_one({"_id": doc["_id"]}, new)
            count += n
    return count


def damage_dynamodb(url: str, rewrite: Rewrite) -> int:
    client, table_name = dynamodb_client(url)
    count = 0
    tables = [t for t in client.list_tables()["TableNames"] if t.startswith(table_name)]
    for table in tables:
        for page in client.get_paginator("scan").paginate(TableName=table):
            for item in page["Items"]:
                new, n = mapped(item, rewrite)
                if n:
                    client.put_item(TableName=table, Item=new)
                    count += n
    return count


DAMAGE = {
    "redis": damage_redis,
    "redis-cluster": damage_redis,
    "mongodb": damage_mongodb,
    "dynamodb": damage_dynamodb,
    "valkey": damage_redis,
    "valkey-cluster": damage_redis,
}
