"""The official LangGraph savers of other projects, opened for ``graphkeep copy`` and ``fallback=``.

``langgraph-redis://HOST:PORT/DB`` (``langgraph-checkpoint-redis``'s ``RedisSaver``, Redis
Stack), ``langgraph-plainredis://HOST:PORT/DB`` (``langgraph-checkpoint-plainredis``),
``langgraph-mongodb://HOST:PORT/DB`` (``langgraph-checkpoint-mongodb``'s ``MongoDBSaver``) and
``langgraph-dynamodb://TABLE?region=...&endpoint_url=...`` (``langgraph-checkpoint-aws``'s
``DynamoDBSaver``); each saver's own constructor options are query parameters. Each opens as a
:class:`~graphkeep.moving.openers.Reader` that says how to read it right:

* ``threads``: the saver's own listing of its threads (its registry hash, its key pattern, a
  ``distinct``, a paged projected ``Scan``), never ``list(None)`` over every checkpoint;
* ``tuples``: every checkpoint of one thread, each namespace its own, by the route that reads
  what the saver stored (``RedisSaver``: each checkpoint by id, its writes from its write keys,
  since its ``list`` returns messages as dicts and ``get_tuple`` may drop the writes);
* ``write_rows``: ``task_path`` and ``idx`` of each write, from storage, where the saver keeps
  them (none of the four returns ``task_path`` through its API).

A source is opened read-only in spirit: nothing is created, indexed or refreshed on it;
``setup`` (destinations only) creates what the saver needs. docs/migrate.md tells the story
per saver. A package that is not installed is a one-line
:class:`~graphkeep.errors.ConfigurationError` naming it; a server that cannot be reached while
the saver opens, :class:`~graphkeep.errors.StorageUnavailable` (:func:`open_rival`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit, urlunsplit

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
    get_checkpoint_id,
    writes_sort_key,
)

from graphkeep.errors import ConfigurationError
from graphkeep.moving.openers import Reader, entered, scheme_of, shown

REDIS = "langgraph-redis"
PLAINREDIS = "langgraph-plainredis"
MONGODB = "langgraph-mongodb"
DYNAMODB = "langgraph-dynamodb"
RIVAL_SCHEMES = (REDIS, PLAINREDIS, MONGODB, DYNAMODB)

#: the package each scheme needs
PACKAGES = {
    REDIS: "langgraph-checkpoint-redis",
    PLAINREDIS: "langgraph-checkpoint-plainredis",
    MONGODB: "langgraph-checkpoint-mongodb",
    DYNAMODB: "langgraph-checkpoint-aws",
}

Row = tuple[str, int, str, str]  # task_id, idx, task_path, channel
SCAN_COUNT = 1000
#: threads whose checkpoints ``RedisRoute`` keeps after reading them (a long-lived fallback
#: must not hold every thread it moved)
CACHED_THREADS = 64


def is_rival(url: str) -> bool:
    return scheme_of(url) in RIVAL_SCHEMES


def missing(scheme: str) -> ConfigurationError:
    package = PACKAGES[scheme]
    return ConfigurationError(
        f"{scheme}:// URLs need {package}: pip install 'graphkeep[migrate]' (or {package})"
    )


# -- URLs ------------------------------------------------------------------------------


def _options(
    url: str, known: dict[str, Callable[[str], Any]]
) -> tuple[SplitResult, dict[str, Any]]:
    """``url`` split, and its query parameters named in ``known`` converted; any other
    parameter is a usage error naming the ones there are."""
    parts = urlsplit(url)
    options: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in known:
            names = ", ".join(sorted(known)) or "none"
            raise ConfigurationError(
                f"unknown option {name!r} in {shown(url)} (this saver takes: {names})"
            )
        try:
            options[name] = known[name](value)
        except ValueError as exc:
            raise ConfigurationError(f"option {name}={value!r} in {shown(url)}: {exc}") from exc
    return parts, options


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _redis_url(parts: SplitResult) -> str:
    """``langgraph-...://[user:pass@]HOST:PORT/DB`` as ``redis://`` (no query)."""
    return urlunsplit(("redis", parts.netloc, parts.path or "/0", "", ""))


def _sorted_rows(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: writes_sort_key(r[2], r[0], r[1]))


def _text(value: Any) -> str:
    return str(value.decode() if isinstance(value, bytes) else value)


def _glob(value: str) -> str:
    """``value`` with Redis glob metacharacters escaped (a thread id ``a*`` is one thread)."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in value)


# -- langgraph-checkpoint-redis (RedisSaver, Redis Stack) --------------------------------


REDIS_OPTIONS: dict[str, Callable[[str], Any]] = {
    "checkpoint_prefix": str,
    "checkpoint_write_prefix": str,
    "default_ttl": float,  # ttl={"default_ttl": minutes, "refresh_on_read": ...}
    "refresh_on_read": _flag,
}


@contextmanager
def open_redis_saver(url: str, *, setup: bool, serde: Any, must_exist: bool) -> Iterator[Reader]:
    try:
        from langgraph.checkpoint.redis import RedisSaver
        from langgraph.checkpoint.redis.key_registry import SyncCheckpointKeyRegistry
    except ImportError as exc:
        raise missing(REDIS) from exc
    parts, options = _options(url, REDIS_OPTIONS)
    ttl: dict[str, Any] = {
        k: options.pop(k) for k in ("default_ttl", "refresh_on_read") if k in options
    }
    if not setup:
        ttl = {}  # a source is never written: no TTL refresh on read
    saver = RedisSaver(_redis_url(parts), ttl=ttl or None, **options)
    if setup:
        saver.setup()
    else:  # what setup() does besides creating its indices: its write-key registry reader
        saver._detect_cluster_mode()
        saver._key_registry = SyncCheckpointKeyRegistry(saver._redis)
    route = RedisRoute(saver, serde)
    try:
        yield Reader(route, REDIS, route.rows, threads=route.threads, tuples=route.tuples)
    finally:
        if getattr(saver, "_owns_its_client", False):
            saver._redis.close()


class RedisRoute(BaseCheckpointSaver[str]):
    """``RedisSaver`` 0.5.2 read by the routes that give back what it stored.

    Its ``list`` returns messages as plain dicts, ``Send`` as ``{"__send__": ...}`` and
    DeltaChannel snapshots as ``{"__delta_snapshot__": ...}``, and lists subgraph checkpoints
    under the root namespace; its ``get_tuple`` drops a checkpoint's writes when the
    checkpoint's ``has_writes`` flag was lost to a race. Here each checkpoint is found by its
    key (SCAN of its key pattern) and read with ``get_tuple`` by id, and its writes come from
    its write keys (with ``task_path`` and ``idx``). Values read are handed on as ``serde``
    (copy's lossless serde) loads them; values written are revived into LangGraph objects
    first, as RedisSaver's JSON serializer needs. What was read is cached per thread until
    this saver writes to it or reads it again (the last :data:`CACHED_THREADS` threads)."""

    def __init__(self, saver: Any, serde: Any) -> None:
        super().__init__(serde=saver.serde)
        from langgraph.checkpoint.redis.util import (
            from_storage_safe_id,
            from_storage_safe_str,
            to_storage_safe_id,
        )
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.inner = saver
        self.client = saver._redis
        self.lossless = serde
        self.plus = JsonPlusSerializer()
        self.safe_id, self.from_id, self.from_str = (
            to_storage_safe_id,
            from_storage_safe_id,
            from_storage_safe_str,
        )
        self.cp_prefix = _glob(saver._checkpoint_prefix)
        self.wr_prefix = _glob(saver._checkpoint_write_prefix)
        self.cache: dict[str, list[CheckpointTuple]] = {}
        self.rows_of: dict[tuple[str, str, str], list[Row]] = {}
        #: checkpoints this saver wrote writes of
        self.written: set[tuple[str, str, str]] = set()

    # values: lossless markers out, LangGraph objects in
    def _lower(self, value: Any) -> Any:
        if self.lossless is None:
            return value
        return self.lossless.loads_typed(self.plus.dumps_typed(value))

    def _revive(self, value: Any) -> Any:
        if self.lossless is None:
            return value
        return self.plus.loads_typed(self.lossless.dumps_typed(value))

    def _docs(self, pattern: str, paths: tuple[str, ...]) -> Iterator[list[Any]]:
        """The JSON fields ``paths`` of every key matching ``pattern`` (SCAN, pipelined)."""
        keys = [_text(k) for k in self.client.scan_iter(match=pattern, count=SCAN_COUNT)]
        for start in range(0, len(keys), 200):
            with self.client.pipeline(transaction=False) as pipe:
                for key in keys[start : start + 200]:
                    pipe.json().get(key, *paths)
                found = pipe.execute()
            for doc in found:
                if doc is None:
                    continue
                if len(paths) == 1:
                    doc = {paths[0]: doc}
                yield [_first(doc.get(p)) for p in paths]

    def threads(self) -> Iterator[str]:
        docs = self._docs(f"{self.cp_prefix}:*", ("$.thread_id",))
        yield from sorted({self.from_id(_text(t)) for (t,) in docs if t is not None})

    def _writes(self, thread_id: str) -> dict[tuple[str, str], list[tuple[Row, Any]]]:
        fields: tuple[str, ...] = ("$.thread_id", "$.checkpoint_ns", "$.checkpoint_id")
        fields += ("$.task_id", "$.task_path", "$.idx", "$.channel", "$.type", "$.blob")
        found: dict[tuple[str, str], list[tuple[Row, Any]]] = {}
        pattern = f"{self.wr_prefix}:{_glob(self.safe_id(thread_id))}:*"
        for t, ns, cid, task, path, idx, channel, type_, blob in self._docs(pattern, fields):
            if t is None or self.from_id(_text(t)) != thread_id:
                continue
            value = self.inner.serde.loads_typed((str(type_), self.inner._decode_blob(blob)))
            row = (str(task), int(idx), str(path or ""), str(channel))
            key = (self.from_str(_text(ns)), self.from_id(_text(cid)))
            found.setdefault(key, []).append((row, self._lower(value)))
        return found

    def tuples(self, thread_id: str) -> list[CheckpointTuple]:
        """Every checkpoint of the thread, newest first, read now (``get_tuple`` / ``list``
        answer from what was read last: a copy's verification right after it)."""
        fields = ("$.thread_id", "$.checkpoint_ns", "$.checkpoint_id")
        pattern = f"{self.cp_prefix}:{_glob(self.safe_id(thread_id))}:*"
        heads = {
            (self.from_str(_text(ns)), self.from_id(_text(cid)))
            for t, ns, cid in self._docs(pattern, fields)
            if t is not None and self.from_id(_text(t)) == thread_id
        }
        writes = self._writes(thread_id)
        out = []
        for ns, cid in sorted(heads, key=lambda k: k[1], reverse=True):
            conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            tup = self.inner.get_tuple({"configurable": conf})
            if tup is None:
                continue
            own = sorted(writes.get((ns, cid), []), key=lambda w: _sort(w[0]))
            self.rows_of[(thread_id, ns, cid)] = [r for r, _ in own]
            body = dict(tup.checkpoint)
            values = body.get("channel_values") or {}
            body["channel_values"] = {k: self._lower(v) for k, v in values.items()}
            pending = [(r[0], r[3], value) for r, value in own]
            out.append(tup._replace(checkpoint=body, pending_writes=pending))
        self.cache.pop(thread_id, None)
        while len(self.cache) >= CACHED_THREADS:  # the oldest read first
            dropped = next(iter(self.cache))
            del self.cache[dropped]
            for key in [k for k in self.rows_of if k[0] == dropped]:
                del self.rows_of[key]
        self.cache[thread_id] = out
        return out

    def _read(self, thread_id: str) -> list[CheckpointTuple]:
        found = self.cache.get(thread_id)
        return found if found is not None else self.tuples(thread_id)

    def rows(self, thread_id: str, ns: str, checkpoint_id: str) -> list[Row] | None:
        if (thread_id, ns, checkpoint_id) not in self.rows_of:
            self.tuples(thread_id)
        return self.rows_of.get((thread_id, ns, checkpoint_id))

    # -- BaseCheckpointSaver

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        conf = config["configurable"]
        ns, wanted = conf.get("checkpoint_ns", ""), get_checkpoint_id(config)
        for tup in self._read(str(conf["thread_id"])):
            at = tup.config["configurable"]
            if at["checkpoint_ns"] == ns and (not wanted or at["checkpoint_id"] == wanted):
                return tup
        return None

    def list(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        threads = [str(config["configurable"]["thread_id"])] if config else list(self.threads())
        ns = (config or {}).get("configurable", {}).get("checkpoint_ns")
        before_id = get_checkpoint_id(before) if before else None
        count = 0
        for thread_id in threads:
            for tup in self._read(thread_id):
                at = tup.config["configurable"]
                if ns is not None and at["checkpoint_ns"] != ns:
                    continue
                if before_id is not None and at["checkpoint_id"] >= before_id:
                    continue
                if filter and any(tup.metadata.get(k) != v for k, v in filter.items()):
                    continue
                if limit is not None and count >= limit:
                    return
                count += 1
                yield tup

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self.cache.pop(str(config["configurable"]["thread_id"]), None)
        values = {k: self._revive(v) for k, v in (checkpoint.get("channel_values") or {}).items()}
        body = {**checkpoint, "channel_values": values}
        stored = self.inner.put(config, body, metadata, new_versions)
        at = stored["configurable"]
        key = (str(at["thread_id"]), str(at.get("checkpoint_ns", "")), str(at["checkpoint_id"]))
        if key in self.written:
            # a copy sends a checkpoint's writes before it (never visible without them);
            # RedisSaver flags the checkpoint as having writes only if it already exists, and
            # its get_tuple skips the writes of a checkpoint without the flag
            checkpoint_key = self.inner._make_redis_checkpoint_key_cached(*key)
            self.client.json().set(checkpoint_key, "$.has_writes", True)
        return stored

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        self.cache.pop(str(conf["thread_id"]), None)
        revived = [(c, self._revive(v)) for c, v in writes]
        self.inner.put_writes(config, revived, task_id, task_path)
        self.written.add(
            (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), str(conf["checkpoint_id"]))
        )

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self.inner.get_next_version(current, channel)

    def delete_thread(self, thread_id: str) -> None:
        self.cache.pop(thread_id, None)
        self.inner.delete_thread(thread_id)


def _first(value: Any) -> Any:
    """A JSONPath ``$.x`` answer is a list of matches: its first, or None."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _sort(row: Row) -> tuple[Any, ...]:
    return writes_sort_key(row[2], row[0], row[1])


# -- langgraph-checkpoint-plainredis -----------------------------------------------------


PLAINREDIS_OPTIONS: dict[str, Callable[[str], Any]] = {
    "prefix": str,
    "ttl": int,
    "protocol": int,
    "socket_timeout": float,
    "socket_connect_timeout": float,
}


@contextmanager
def open_plainredis_saver(
    url: str, *, setup: bool, serde: Any, must_exist: bool
) -> Iterator[Reader]:
    try:
        from langgraph_checkpoint_plainredis import RedisSaver
    except ImportError as exc:
        raise missing(PLAINREDIS) from exc
    parts, options = _options(url, PLAINREDIS_OPTIONS)
    if not setup:
        options.pop("ttl", None)  # a source is never written
    saver = RedisSaver(url=_redis_url(parts), serde=serde, **options)
    client = saver.client

    def registry() -> list[tuple[str, str, str]]:
        """(thread, ns, timeline key) of its ``{prefix}:threads`` hash, read only (its own
        ``list`` drops stale entries from it: a write)."""
        found = []
        for key, value in client.hgetall(saver._key_threads()).items():
            try:
                info = json.loads(value)
                found.append((str(info["thread"]), str(info["ns"]), _text(key)))
            except (ValueError, TypeError, KeyError):
                continue
        return found

    def threads() -> Iterator[str]:
        yield from sorted({thread for thread, _, _ in registry()})

    def tuples(thread_id: str) -> list[CheckpointTuple]:
        out = []
        for thread, ns, timeline in registry():
            if thread != thread_id:
                continue
            for cid in client.zrevrange(timeline, 0, -1):
                tup = saver._load_tuple(thread_id, ns, _text(cid))
                if tup is not None:
                    out.append(tup)
        return sorted(out, key=lambda t: str(t.config["configurable"]["checkpoint_id"]))[::-1]

    def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[Row]:
        """Its write hash fields are ``task_id:idx``; it keeps no task_path."""
        raw = client.hgetall(saver._key_writes(thread_id, ns, checkpoint_id))
        found = []
        for field, value in raw.items():
            task_id, _, idx = _text(field).rpartition(":")
            one: dict[Any, Any] = {field: value}
            channel = saver._parse_pending_writes(thread_id, ns, checkpoint_id, one)
            found.append((task_id, int(idx), "", str(channel[0][1])))
        return found

    try:
        yield Reader(saver, PLAINREDIS, rows, threads=threads, tuples=tuples)
    finally:
        saver.close()


# -- langgraph-checkpoint-mongodb (MongoDBSaver) -----------------------------------------


MONGODB_SAVER_OPTIONS: dict[str, Callable[[str], Any]] = {
    "checkpoint_collection_name": str,
    "writes_collection_name": str,
    "ttl": int,
}


@contextmanager
def open_mongodb_saver(url: str, *, setup: bool, serde: Any, must_exist: bool) -> Iterator[Reader]:
    try:
        from langgraph.checkpoint.mongodb import MongoDBSaver
        from pymongo import MongoClient
    except ImportError as exc:
        raise missing(MONGODB) from exc
    parts = urlsplit(url)
    saver_query = [(k, v) for k, v in parse_qsl(parts.query) if k in MONGODB_SAVER_OPTIONS]
    client_query = "&".join(
        f"{k}={v}" for k, v in parse_qsl(parts.query) if k not in MONGODB_SAVER_OPTIONS
    )
    options = {k: MONGODB_SAVER_OPTIONS[k](v) for k, v in saver_query}
    db_name = parts.path.strip("/") or "checkpointing_db"
    client: Any = MongoClient(urlunsplit(("mongodb", parts.netloc, "/", client_query, "")))
    try:
        if setup:
            saver = MongoDBSaver(client, db_name, serde=serde, **options)
        else:
            saver = _mongodb_reader(MongoDBSaver, client, db_name, serde, options)

        def threads() -> Iterator[str]:
            yield from sorted(str(t) for t in saver.checkpoint_collection.distinct("thread_id"))

        def tuples(thread_id: str) -> list[CheckpointTuple]:
            return list(saver.list({"configurable": {"thread_id": thread_id}}))

        def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[Row]:
            query = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            projection = {"task_id": 1, "idx": 1, "task_path": 1, "channel": 1, "_id": 0}
            return [
                (str(d["task_id"]), int(d["idx"]), str(d.get("task_path") or ""), d["channel"])
                for d in saver.writes_collection.find(query, projection)
            ]

        yield Reader(saver, MONGODB, rows, threads=threads, tuples=tuples)
    finally:
        client.close()


def _mongodb_reader(
    cls: Any, client: Any, db_name: str, serde: Any, options: dict[str, Any]
) -> Any:
    """A ``MongoDBSaver`` on the source without its constructor, which creates indexes."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    saver = cls.__new__(cls)
    BaseCheckpointSaver.__init__(saver, serde=serde)
    saver.client = client
    saver.db = client[db_name]
    saver.checkpoint_collection = saver.db[options.get("checkpoint_collection_name", "checkpoints")]
    saver.writes_collection = saver.db[options.get("writes_collection_name", "checkpoint_writes")]
    saver.ttl = None
    if serde is None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        saver.serde = JsonPlusSerializer()
    return saver


# -- langgraph-checkpoint-aws (DynamoDBSaver) --------------------------------------------


S3 = "s3_offload_config."
DYNAMODB_OPTIONS: dict[str, Callable[[str], Any]] = {
    "region": str,
    "endpoint_url": str,
    "ttl_seconds": int,
    "enable_checkpoint_compression": _flag,
    f"{S3}bucket_name": str,
    f"{S3}endpoint_url": str,
    f"{S3}key_prefix": str,
}


@contextmanager
def open_dynamodb_saver(url: str, *, setup: bool, serde: Any, must_exist: bool) -> Iterator[Reader]:
    try:
        from langgraph_checkpoint_aws import DynamoDBSaver
    except ImportError as exc:
        raise missing(DYNAMODB) from exc
    parts, options = _options(url, DYNAMODB_OPTIONS)
    table = parts.netloc
    if not table:
        raise ConfigurationError(
            f"no table in {shown(url)} (langgraph-dynamodb://TABLE?region=...)"
        )
    s3 = {k[len(S3) :]: options.pop(k) for k in list(options) if k.startswith(S3)}
    if not setup:
        options.pop("ttl_seconds", None)  # a source is never written (nor its S3 lifecycle)
    saver = DynamoDBSaver(
        table,
        region_name=options.pop("region", None),
        endpoint_url=options.pop("endpoint_url", None),
        s3_offload_config=s3 or None,
        **options,
    )
    if serde is not None:  # its serializer wraps the saver's serde: the same object for both
        saver.serde = serde
        saver.serializer.serde = serde
    client = saver.client
    if setup:
        create_table(client, table, options.get("ttl_seconds"))

    def threads() -> Iterator[str]:
        seen: set[str] = set()
        params: dict[str, Any] = {
            "TableName": table,
            "ProjectionExpression": "PK",
            "FilterExpression": "begins_with(PK, :p)",
            "ExpressionAttributeValues": {":p": {"S": "CHECKPOINT_"}},
        }
        while True:
            page = client.scan(**params)
            seen.update(item["PK"]["S"][len("CHECKPOINT_") :] for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                break
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        yield from sorted(seen)

    def tuples(thread_id: str) -> list[CheckpointTuple]:
        return list(saver.list({"configurable": {"thread_id": thread_id}}))

    def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[Row]:
        params: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": {":pk": {"S": f"WRITES_{thread_id}#{ns}#{checkpoint_id}"}},
            "ProjectionExpression": "task_id, idx, task_path, channel",
        }
        found: list[Row] = []
        while True:
            page = client.query(**params)
            for item in page["Items"]:
                path = item.get("task_path", {}).get("S", "")
                found.append(
                    (item["task_id"]["S"], int(item["idx"]["N"]), path, item["channel"]["S"])
                )
            if "LastEvaluatedKey" not in page:
                return found
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    yield Reader(saver, DYNAMODB, rows, threads=threads, tuples=tuples)


def create_table(client: Any, table: str, ttl_seconds: int | None) -> None:
    """The table ``DynamoDBSaver`` expects (``PK``/``SK`` strings, on demand), unless there:
    the saver has no ``setup`` of its own."""
    try:
        client.describe_table(TableName=table)
        return
    except client.exceptions.ResourceNotFoundException:
        pass
    client.create_table(
        TableName=table,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table)
    if ttl_seconds:
        client.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
        )


OPENERS: dict[str, Callable[..., AbstractContextManager[Reader]]] = {
    REDIS: open_redis_saver,
    PLAINREDIS: open_plainredis_saver,
    MONGODB: open_mongodb_saver,
    DYNAMODB: open_dynamodb_saver,
}


def open_rival(
    url: str, *, setup: bool = False, serde: Any = None, must_exist: bool = True
) -> AbstractContextManager[Reader]:
    """The rival saver ``url`` names (its scheme one of :data:`RIVAL_SCHEMES`), read only
    unless ``setup``; a failure to open it is one line (:func:`~.openers.entered`)."""
    opener = OPENERS[scheme_of(url)]
    return entered(url, opener(url, setup=setup, serde=serde, must_exist=must_exist))
