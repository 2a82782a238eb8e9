"""What the rivals' stores keep, read back as LangGraph items, page by page or by key.

``RedisStore`` (langgraph-checkpoint-redis) keeps each item as a JSON document under
``{store_prefix}:{id}`` (its namespace the dotted, RediSearch-escaped ``prefix`` field, its
times in epoch microseconds, its expiry the key's own); ``MongoDBStore``
(langgraph-store-mongodb) as a document with ``namespace`` (a list), ``key``, ``value`` and
``created_at`` / ``updated_at`` (its expiry a TTL index on ``updated_at``); ``DynamoDBStore``
(langgraph-checkpoint-aws) as an item with ``PK`` (the labels joined by ``:``), ``SK`` (the
key), ISO times and ``expires_at``. Each is read here with a client of its own, never through
the store's methods (``MongoDBStore.get`` and ``search`` rewrite ``updated_at``, its
``list_namespaces`` limits before de-duplicating, ``DynamoDBStore.search`` matches one
namespace exactly, ``RedisStore.get`` misses namespaces of two or more labels): nothing is
written or refreshed. An entry that is no item is an :class:`Unreadable`, reported by the
caller while the others are read. Items past their expiry are skipped (MongoDB and DynamoDB
reap them late). :mod:`.rival_stores` opens the clients (``graphkeep store copy`` reads the
pages, ``connect_store(url, fallback=…)`` the keys).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from langgraph.store.base import Item

from graphkeep.errors import UNDECODABLE, CorruptData, Place, StorageUnavailable

#: items per page read from a source
PAGE = 200
#: keys per ``FT.SEARCH`` of a RedisStore batch, and the matches one key may bring (the
#: search is on text: a key's query can match the same key in a namespace of shared labels)
REDIS_KEYS_PER_QUERY = 50
REDIS_MATCHES_PER_KEY = 10
#: keys per ``BatchGetItem`` (DynamoDB's limit), and the pause after each attempt that left
#: keys unprocessed (throttled) before asking again: eight attempts, the last not waited on
DYNAMODB_KEYS_PER_BATCH = 100
UNPROCESSED_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 0.0)

Namespace = tuple[str, ...]
ItemKey = tuple[Namespace, str]


@dataclass(frozen=True)
class Record:
    """One item as a source keeps it: ``ttl`` is the minutes it has left (None: never
    expires); ``indexed`` says the source holds an embedding of it."""

    item: Item
    ttl: float | None = None
    indexed: bool = False


@dataclass(frozen=True)
class Unreadable:
    """A stored entry of a source that is not an item its store could return: ``where`` names
    it in the store's own terms (a Redis key, a MongoDB ``_id``, a DynamoDB PK/SK)."""

    where: str
    reason: str


Entry = Record | Unreadable
#: every live item of a source under a namespace prefix, a page at a time
Pages = Callable[[Namespace], Iterator[list[Entry]]]
#: the live items of a source at these keys (None where it holds none)
Keys = Callable[[list[ItemKey]], list[Record | None]]


def not_an_item(entry: Unreadable, namespace: Namespace | None, key: str | None) -> CorruptData:
    """The error of a by-key read that finds an entry no store could return as an item (its
    place named, never its bytes)."""
    return CorruptData(
        reason=f"the fallback's {entry.where} is not an item its store could return",
        kind=UNDECODABLE,
        place=Place(namespace=namespace, key=key),
        advice="Delete or repair it in the fallback, or put the item in graphkeep",
    )


def plain(value: Any) -> Any:
    """``value`` with DynamoDB's ``Decimal`` numbers as the ints / floats they were put as."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _unreadable(where: str, exc: Exception) -> Unreadable:
    return Unreadable(where, f"{type(exc).__name__}: {exc}"[:300])


def _under(namespace: Namespace, prefix: Namespace) -> bool:
    return namespace[: len(prefix)] == prefix


def _minutes_left(expires_s: float, now_s: float) -> float:
    return (expires_s - now_s) / 60


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _now_s() -> float:
    return datetime.now(timezone.utc).timestamp()


# -- RedisStore --------------------------------------------------------------------------


def _redis_serde() -> Any:
    from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

    return JsonPlusRedisSerializer()


def _plain_prefix(text: str) -> str:
    from langgraph.store.redis.token_unescaper import TokenUnescaper

    return str(TokenUnescaper().unescape(text))


def _redis_value(value: Any, serde: Any) -> Any:
    """A document's value as ``RedisStore`` returns it: its serde wrapper decoded."""
    if isinstance(value, dict) and set(value) == {"__serde_type__", "__serde_data__"}:
        kind, data = value["__serde_type__"], value["__serde_data__"]
        raw = data.encode() if kind == "json" else bytes.fromhex(data)
        return serde.loads_typed((kind, raw))
    return value


def redis_item(row: dict[str, Any], namespace: Namespace, serde: Any) -> Item:
    """A ``RedisStore`` document as the item its store returns."""
    return Item(
        value=_redis_value(row["value"], serde),
        key=row["key"],
        namespace=namespace,
        created_at=datetime.fromtimestamp(row["created_at"] / 1_000_000, timezone.utc),
        updated_at=datetime.fromtimestamp(row["updated_at"] / 1_000_000, timezone.utc),
    )


def _left(pttl: Any) -> float | None:
    return pttl / 60_000 if pttl is not None and pttl > 0 else None


def redis_pages(
    client: Any, store_prefix: str, vector_prefix: str, prefix: Namespace
) -> Iterator[list[Entry]]:
    """``SCAN`` of the store's documents, ``JSON.GET`` of each batch, ``PTTL`` for the life
    left; a document's namespace is its dotted, RediSearch-escaped ``prefix`` field."""
    serde = _redis_serde()
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=f"{store_prefix}:*", count=PAGE)
        keys = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.json().get(key)
            pipe.pttl(key)
            pipe.exists(f"{vector_prefix}:{key.split(':', 1)[1]}")
        replies = pipe.execute() if keys else []
        page: list[Entry] = []
        for i in range(0, len(replies), 3):
            row, ttl, vector = replies[i : i + 3]
            if not row:
                continue  # gone between SCAN and JSON.GET
            try:
                namespace = tuple(_plain_prefix(row["prefix"]).split("."))
                if not _under(namespace, prefix):
                    continue
                item = redis_item(row, namespace, serde)
            except Exception as exc:  # one bad document: reported, the others copied
                page.append(_unreadable(f"Redis key {keys[i // 3]}", exc))
                continue
            page.append(Record(item, _left(ttl), bool(vector)))
        if page:
            yield page
        if int(cursor) == 0:
            return


def redis_query(namespace: Namespace, key: str) -> str:
    """The query ``RedisStore`` itself finds an item by (``@prefix:NS @key:{KEY}``): its
    ``get``'s quoted phrase never matches a namespace of two or more labels on Redis Stack."""
    from redisvl.utils.token_escaper import TokenEscaper

    escape = TokenEscaper().escape
    return f"@prefix:{escape('.'.join(namespace))} @key:{{{escape(key)}}}"


def _row_prefix(row: dict[str, Any]) -> str | None:
    prefix = row.get("prefix")
    return _plain_prefix(prefix) if isinstance(prefix, str) else None


def redis_keys(client: Any, store_prefix: str, vector_prefix: str) -> Keys:
    """Items by key: ``FT.SEARCH`` of the store's index as ``RedisStore`` finds them (the
    newest document of the key, should there be two), ``PTTL`` for the life left. A batch
    costs two round trips per :data:`REDIS_KEYS_PER_QUERY` keys: one search of the keys'
    queries joined by ``|``, then one pipeline of every found document's ``PTTL`` and its
    vector's ``EXISTS`` (a search whose matches outnumber its page is asked key by key)."""
    from redis.commands.search.query import Query

    serde, index = _redis_serde(), client.ft(store_prefix)

    def search(wanted: list[ItemKey]) -> list[tuple[str, dict[str, Any]]]:
        text = "|".join(f"({redis_query(namespace, key)})" for namespace, key in wanted)
        size = REDIS_MATCHES_PER_KEY * len(wanted)
        result = index.search(Query(text).dialect(2).paging(0, size))
        if len(wanted) > 1 and result.total > len(result.docs):  # crowded: key by key
            return [row for one in wanted for row in search([one])]
        return [(doc.id, json.loads(doc.json)) for doc in result.docs]

    def get(keys: list[ItemKey]) -> list[Record | None]:
        wanted = list(dict.fromkeys(keys))
        named: dict[tuple[str | None, Any], ItemKey] = {
            (".".join(namespace), key): (namespace, key) for namespace, key in wanted
        }
        newest: dict[ItemKey, tuple[str, dict[str, Any]]] = {}
        for start in range(0, len(wanted), REDIS_KEYS_PER_QUERY):
            for doc_id, row in search(wanted[start : start + REDIS_KEYS_PER_QUERY]):
                place = named.get((_row_prefix(row), row.get("key")))
                if place is None:
                    continue  # a near match of the text search: another namespace
                held = newest.get(place)
                if held is None or row["updated_at"] > held[1]["updated_at"]:
                    newest[place] = (doc_id, row)
        pipe = client.pipeline(transaction=False)
        for doc_id, _ in newest.values():
            pipe.pttl(doc_id)
            pipe.exists(f"{vector_prefix}:{doc_id.split(':', 1)[1]}")
        replies = iter(pipe.execute() if newest else [])
        found: dict[ItemKey, Record] = {}
        for place, (doc_id, row) in newest.items():
            pttl, indexed = next(replies), next(replies)
            if pttl == -2:
                continue  # expired since the search
            try:
                item = redis_item(row, place[0], serde)
            except Exception as exc:
                where = _unreadable(f"Redis key {doc_id}", exc)
                raise not_an_item(where, place[0], place[1]) from None
            found[place] = Record(item, _left(pttl), bool(indexed))
        return [found.get(key) for key in keys]

    return get


# -- MongoDBStore ------------------------------------------------------------------------


def _mongodb_expiry(collection: Any) -> float | None:
    """Seconds after ``updated_at`` the collection's TTL index reaps a document."""
    for index in collection.list_indexes():
        if dict(index["key"]) == {"updated_at": 1} and "expireAfterSeconds" in index:
            return float(index["expireAfterSeconds"])
    return None


def _mongodb_entry(doc: dict[str, Any], expire_after: float | None, now: float) -> Entry | None:
    """A document as a record (None: past its expiry, not reaped yet)."""
    try:
        created, updated = _aware(doc["created_at"]), _aware(doc["updated_at"])
        item = Item(
            value=doc["value"],
            key=doc["key"],
            namespace=tuple(doc["namespace"]),
            created_at=created,
            updated_at=updated,
        )
    except Exception as exc:  # one bad document: reported, the others read
        return _unreadable(f"MongoDB document {doc.get('_id')}", exc)
    ttl = None
    if expire_after is not None:
        ttl = _minutes_left(updated.timestamp() + expire_after, now)
        if ttl <= 0:
            return None
    return Record(item, ttl, "embedding" in doc)


def mongodb_pages(collection: Any, prefix: Namespace) -> Iterator[list[Entry]]:
    """Every document, by ``_id``; remaining life from the collection's TTL index on
    ``updated_at``."""
    expire_after = _mongodb_expiry(collection)
    now = _now_s()
    query: dict[str, Any] = {}
    if prefix:
        query = {f"namespace.{i}": label for i, label in enumerate(prefix)}
    last: Any = None
    while True:
        page_query = dict(query) if last is None else {**query, "_id": {"$gt": last}}
        docs = list(collection.find(page_query).sort("_id", 1).limit(PAGE))
        if not docs:
            return
        last = docs[-1]["_id"]
        page = [e for e in (_mongodb_entry(d, expire_after, now) for d in docs) if e is not None]
        if page:
            yield page


def mongodb_keys(collection: Any) -> Keys:
    """Items by key: one ``find`` of the documents at the keys (``namespace`` and ``key``
    equal, as ``MongoDBStore`` matches them), nothing updated."""
    expire_after = _mongodb_expiry(collection)

    def get(keys: list[ItemKey]) -> list[Record | None]:
        if not keys:
            return []
        wanted = [{"namespace": list(ns), "key": key} for ns, key in dict.fromkeys(keys)]
        now = _now_s()
        found: dict[ItemKey, Record] = {}
        for doc in collection.find({"$or": wanted}):
            entry = _mongodb_entry(doc, expire_after, now)
            if isinstance(entry, Unreadable):
                raise not_an_item(entry, None, None)
            if entry is not None:
                found[(tuple(entry.item.namespace), entry.item.key)] = entry
        return [found.get((tuple(ns), key)) for ns, key in keys]

    return get


# -- DynamoDBStore -----------------------------------------------------------------------


def _dynamodb_entry(row: dict[str, Any], now: float) -> Entry | None:
    """A decoded item of the table as a record (None: no store item, or past its expiry)."""
    if "value" not in row:
        return None  # not an item of the store (moto leaves a refused put's bare key)
    try:
        ttl = None
        if row.get("expires_at") is not None:
            ttl = _minutes_left(float(row["expires_at"]), now)
            if ttl <= 0:
                return None
        item = Item(
            value=row["value"],
            key=row["SK"],
            namespace=tuple(row["PK"].split(":")) if row["PK"] else (),
            created_at=datetime.fromisoformat(row["created_at"]),
            updated_at=datetime.fromisoformat(row["updated_at"]),
        )
    except Exception as exc:  # one bad item: reported, the others read
        where = f"DynamoDB item PK={row.get('PK')!r} SK={row.get('SK')!r}"
        return _unreadable(where, exc)
    return Record(item, ttl, row.get("embedding") is not None)


def dynamodb_pages(client: Any, table: str, prefix: Namespace) -> Iterator[list[Entry]]:
    """A paged ``Scan`` of the table (an item's namespace is its ``PK``, labels joined by
    ``:``); items past ``expires_at`` are skipped (DynamoDB deletes them up to days late)."""
    from boto3.dynamodb.types import TypeDeserializer

    decode = TypeDeserializer().deserialize
    pages = client.get_paginator("scan").paginate(
        TableName=table, PaginationConfig={"PageSize": PAGE}
    )
    for raw in pages:
        now = _now_s()
        page: list[Entry] = []
        for found in raw.get("Items", []):
            entry = _dynamodb_entry({k: decode(v) for k, v in found.items()}, now)
            if isinstance(entry, Record) and not _under(tuple(entry.item.namespace), prefix):
                continue
            if entry is not None:
                page.append(entry)
        if page:
            yield page


def dynamodb_keys(client: Any, table: str) -> Keys:
    """Items by key: consistent ``BatchGetItem`` requests of up to 100 keys (``PK`` the labels
    joined by ``:``, ``SK`` the key, as ``DynamoDBStore`` keeps them), the keys the service
    leaves unprocessed asked again after a growing pause."""
    from boto3.dynamodb.types import TypeDeserializer

    decode = TypeDeserializer().deserialize

    def get(keys: list[ItemKey]) -> list[Record | None]:
        wanted = list(dict.fromkeys(keys))
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for start in range(0, len(wanted), DYNAMODB_KEYS_PER_BATCH):
            ask = [
                {"PK": {"S": ":".join(namespace)}, "SK": {"S": key}}
                for namespace, key in wanted[start : start + DYNAMODB_KEYS_PER_BATCH]
            ]
            request: dict[str, Any] = {table: {"Keys": ask, "ConsistentRead": True}}
            for pause in UNPROCESSED_PAUSES_S:
                reply = client.batch_get_item(RequestItems=request)
                for raw in reply.get("Responses", {}).get(table, []):
                    row = {k: decode(v) for k, v in raw.items()}
                    rows[(str(row.get("PK")), str(row.get("SK")))] = row
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(pause)
            else:
                raise StorageUnavailable(
                    f"DynamoDB table {table!r} left keys unprocessed "
                    f"{len(UNPROCESSED_PAUSES_S)} times in a row: throttled; try again later"
                )
        now = _now_s()
        found: list[Record | None] = []
        for namespace, key in keys:
            held = rows.get((":".join(namespace), key))
            entry = _dynamodb_entry(held, now) if held else None
            if isinstance(entry, Unreadable):
                raise not_an_item(entry, namespace, key)
            found.append(entry)
        return found

    return get
