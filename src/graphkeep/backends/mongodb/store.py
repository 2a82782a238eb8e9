"""LangGraph long-term memory on MongoDB: :class:`MongoDBStore` and :class:`AsyncMongoDBStore`.

The ``BaseStore`` contract lives once in :mod:`graphkeep.store.shells`; this module is
its mapping onto one MongoDB collection, ``<key_prefix>_store``, one document per item::

    {_id: "<namespace text>\\x00<key>",   # deterministic: every upsert names its _id
     ns: "a.b.c", key,                    # namespace labels joined by "." (never in a label)
     value: Binary,                       # the exact value as JSON: the round-trip source
     doc: {...},                          # queryable copy of the value, keys escaped
                                          # ({} for an item sealed by encryption=)
     created_us, updated_us,              # epoch microseconds (int64)
     expires_ms, expires_at: Date,        # absent/null when the item never expires
     ttl_minutes,                         # what a refresh re-arms
     embedded: bool, vectors: [{path, digest, data: Binary}]}

Indexes (``setup()``, idempotent; ``MongoDBStore.schema()`` lists them; specs in :mod:`.schema`)::

    gk_ns_key      {ns, key}     unique; serves prefix search (a range on ns) too
    gk_ns_updated  {ns, updated_us}  a namespace's newest-first order (search without query)
    gk_expires_at  {expires_at}  expireAfterSeconds: 0 (TTL)

Filters run on the server. ``doc`` escapes every key (``%`` -> ``%25``, ``.`` -> ``%2E``,
``$`` -> ``%24``, NUL -> ``%00``, the empty key -> ``%``) so no user key is ever read as an
operator or a path, and filter paths are built from escaped segments. Arrays become
``Binary`` (canonical JSON): MongoDB would otherwise match a scalar against array
elements and walk paths into them, which ``satisfies`` does not do; as ``Binary`` an
array still equals an equal array and never orders against numbers or strings. Objects
keep sorted keys so object equality does not depend on key order. MongoDB's type
bracketing gives the contract's ``$gt``..``$lte`` (numbers with numbers, strings with
strings, booleans apart) and ``{path: null}`` matches null or missing, as ``$eq None``
must. Integers beyond int64 are compared as the nearest float.

A search without query is one ``find`` with sort, skip and limit on the server; with a
query vector, the filtered candidates come back with their vectors and are ranked here
(:func:`~graphkeep.store.ranking.rank`): no vector index exists on FerretDB or a
standalone MongoDB (Atlas ``$vectorSearch`` is not used). TTL: reads exclude expired
items themselves (FerretDB has no TTL monitor; MongoDB's runs once a minute); a refresh
is one ``bulk_write``; ``sweep_ttl()`` is one ``delete_many``. Every operation is at most
two commands: a put batch deletes expired items it replaces (so their ``created_at``
starts anew) then upserts with ``$setOnInsert`` for ``created_us``.

While the store reads through to a fallback (``fallback=``, :mod:`graphkeep.store.fallback`), a
delete replaces the item's document by a tombstone of the same ``_id`` (:func:`tombstone`:
``gone``, expired since the epoch, no ``expires_at``), a put first removes the tombstones at its
keys, and ``adopt`` is an upsert with ``$setOnInsert`` alone: a document at the ``_id`` (item
or tombstone) is left as it is, in one atomic write. The copy's finished marker is one document
of ``<key_prefix>_store_meta``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import bson
import orjson
from pymongo import DeleteOne, ReplaceOne, UpdateOne

from graphkeep.backends.mongodb.client import IncompleteBulkReply, OnMongoDB
from graphkeep.backends.mongodb.documents import check_prefix
from graphkeep.backends.mongodb.requests import Command
from graphkeep.backends.mongodb.schema import ensure_indexes, store_indexes
from graphkeep.construction import PrefixedPort
from graphkeep.errors import PayloadTooLarge
from graphkeep.port import Op, Parallel
from graphkeep.port.clock import datetime_of_us
from graphkeep.store.port import Condition, ItemKey, Namespace, SearchQuery, StoredItem, Vector
from graphkeep.store.ranking import rank
from graphkeep.store.shells import AsyncStore, SyncStore
from graphkeep.store.values import (
    decode_value,
    dotted_namespace,
    encode_value,
    namespace_from_dotted,
)

__all__ = [
    "AsyncMongoDBStore",
    "MongoDBStore",
    "MongoDBStorePort",
    "store_indexes",
]

#: a value's JSON plus its queryable copy must stay well under MongoDB's 16 MiB document
MAX_VALUE_BYTES = 7 * 1024 * 1024
INT64 = (-(2**63), 2**63 - 1)
#: everything but the queryable copy and the vectors
ITEM_FIELDS: dict[str, Any] = {"doc": 0, "vectors": 0}
WITH_VECTORS: dict[str, Any] = {"doc": 0}


#: sends of a put while a fallback is attached whose bulk failed without saying why
CONFLICT_ATTEMPTS = 3

#: documents per reply when a query search reads its candidates (the executor retries with
#: smaller batches if a server answers with a reply over the wire limit)
CANDIDATE_BATCH = 10_000


# --------------------------------------------------------------------------- the queryable copy


def escape_key(key: str) -> str:
    """A value's key as a MongoDB field name: never an operator, a path or empty."""
    if not key:
        return "%"
    return key.replace("%", "%25").replace(".", "%2E").replace("$", "%24").replace("\x00", "%00")


def queryable(value: Any) -> Any:
    """The BSON form filters run on (see the module docstring)."""
    if isinstance(value, dict):
        pairs = sorted((escape_key(k), queryable(v)) for k, v in value.items())
        return dict(pairs)
    if isinstance(value, list):
        return bson.Binary(orjson.dumps(_canonical(value), option=orjson.OPT_SORT_KEYS))
    if isinstance(value, int) and not isinstance(value, bool):
        return value if INT64[0] <= value <= INT64[1] else float(value)
    return value


def _canonical(value: Any) -> Any:
    """JSON in one spelling per ``json_equal`` class (1 and 1.0 alike, booleans apart)."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer() and INT64[0] <= value <= INT64[1]:
        return int(value)
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        return float(value)
    return value


def condition_filter(condition: Condition) -> dict[str, Any]:
    path = "doc." + ".".join(escape_key(part) for part in condition.path)
    operand = queryable(condition.value)
    if condition.op == "$eq":
        # {path: null} matches null or a missing field, as $eq None must
        return {path: None} if operand is None else {path: {"$eq": operand}}
    if condition.op == "$ne":
        return {path: {"$exists": True, "$ne": operand}}
    # type bracketing: a number operand compares numbers only, a string strings only
    return {path: {condition.op: operand}}


def live_at_ms(now_ms: int) -> dict[str, Any]:
    """Items not expired at ``now_ms`` (epoch milliseconds; the saver's ``live`` takes a
    datetime, as its documents keep ``expires_at`` only)."""
    return {"expires_ms": {"$not": {"$lte": now_ms}}}


def prefix_filter(prefix: Namespace) -> dict[str, Any]:
    """Namespaces equal to ``prefix`` or below it: ``ns`` in [P + ".", P + "/")."""
    if not prefix:
        return {}
    text = dotted_namespace(prefix)
    return {"$or": [{"ns": text}, {"ns": {"$gte": text + ".", "$lt": text + "/"}}]}


def search_filter(query: SearchQuery) -> dict[str, Any]:
    clauses = [live_at_ms(query.now_ms), prefix_filter(query.prefix)]
    clauses += [condition_filter(c) for c in query.conditions]
    if query.vector is not None:
        clauses.append({"embedded": True})
    return {"$and": [c for c in clauses if c]}


def item_id(namespace: Namespace, key: str) -> str:
    # labels never hold NUL, so the first NUL ends the namespace
    return f"{dotted_namespace(namespace)}\x00{key}"


def tombstone(namespace: Namespace, key: str, now_ms: int) -> dict[str, Any]:
    """The document a delete leaves while the store reads through to a fallback: expired
    since the epoch (every read, search and listing leaves it out), without ``expires_at``
    (neither the TTL index nor ``sweep_ttl`` removes it), so ``adopt`` never writes there.
    A put with a fallback removes it first (its deletes and upserts are then two commands);
    one without (the switch over) upserts onto it, and the item's ``created_us`` is the
    delete's time."""
    return {
        "ns": dotted_namespace(namespace),
        "key": key,
        "gone": True,
        "value": bson.Binary(b"{}"),
        "doc": {},
        "created_us": now_ms * 1000,
        "updated_us": now_ms * 1000,
        "expires_ms": 0,
        "expires_at": None,
        "embedded": False,
        "vectors": [],
    }


def item_of(doc: Mapping[str, Any]) -> StoredItem:
    namespace, key = namespace_from_dotted(doc["ns"]), doc["key"]
    return StoredItem(
        namespace=namespace,
        key=key,
        value=decode_value(bytes(doc["value"]), namespace, key),
        created_us=int(doc["created_us"]),
        updated_us=int(doc["updated_us"]),
        expires_ms=doc.get("expires_ms"),
        ttl_minutes=doc.get("ttl_minutes"),
        vectors=[
            Vector(v["path"], v["digest"], bytes(v["data"])) for v in doc.get("vectors") or ()
        ],
    )


# --------------------------------------------------------------------------- the port


class MongoDBStorePort(PrefixedPort):
    """:class:`~graphkeep.store.port.StorePort` on one MongoDB collection."""

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.prefix = check_prefix(key_prefix)
        self.collection = f"{self.prefix}_store"
        #: whether the server keeps TTL indexes (None until setup() ran)
        self.ttl_index: bool | None = None

    def schema(self) -> list[dict[str, Any]]:
        return store_indexes(self.prefix)

    def setup(self) -> Op[None]:
        # FerretDB 1.x has no TTL indexes: reads hide expired items, sweep_ttl() deletes them
        self.ttl_index = yield from ensure_indexes(self.collection, self.schema())

    def _refresh(self, items: Sequence[StoredItem], now_ms: int) -> Op[None]:
        """Re-arm ``now + ttl`` on ``items`` that have a ttl (one bulk_write, if any)."""
        updates = []
        for item in items:
            if item.ttl_minutes is None:
                continue
            item.expires_ms = now_ms + int(item.ttl_minutes * 60_000)
            expiry = {
                "expires_ms": item.expires_ms,
                "expires_at": datetime_of_us(item.expires_ms * 1000),
            }
            updates.append(UpdateOne({"_id": item_id(item.namespace, item.key)}, {"$set": expiry}))
        if updates:
            yield Command(self.collection, "bulk_write", (updates,), {"ordered": False})

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]:
        ids = [item_id(ns, key) for ns, key in keys]
        unique = sorted(set(ids))
        # by _id alone, the lookup every MongoDB-compatible server indexes; expiry is checked
        # here (an expiry condition in the query makes some servers scan the collection)
        docs: list[Mapping[str, Any]] = yield Command(
            self.collection,
            "find",
            ({"_id": unique[0] if len(unique) == 1 else {"$in": unique}},),
            {"projection": WITH_VECTORS if vectors else ITEM_FIELDS},
        )
        found = {doc["_id"]: item_of(doc) for doc in docs}
        items = [found.get(i) for i in ids]
        items = [item if item is not None and item.live(now_ms) else None for item in items]
        stale = {id(s): s for s, r in zip(items, refresh, strict=True) if s is not None and r}
        yield from self._refresh(list(stale.values()), now_ms)
        return items

    def put(
        self,
        items: list[StoredItem],
        deletes: list[ItemKey],
        now_ms: int,
        tombstones: bool = False,
    ) -> Op[None]:
        removals: list[Any] = [
            ReplaceOne({"_id": item_id(ns, key)}, tombstone(ns, key, now_ms), upsert=True)
            if tombstones
            else DeleteOne({"_id": item_id(ns, key)})
            for ns, key in deletes
        ]
        upserts: list[Any] = []
        documents = self._documents(items)
        if tombstones:  # tombstones at the keys go first, so created_us starts anew
            removals = [DeleteOne({"_id": i, "gone": True}) for i, _, _ in documents] + removals
        for _id, fields, created in documents:
            upserts.append(
                UpdateOne(
                    {"_id": _id},
                    {"$set": fields, "$setOnInsert": {"created_us": created}},
                    upsert=True,
                )
            )
        # upserts by _id alone: created_us survives until the item is deleted or swept, as
        # in PostgresStore (a put is one command; no delete of an expired item first)
        if not (removals or upserts):
            return
        request = Command(self.collection, "bulk_write", (removals + upserts,), {"ordered": True})
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                yield request
                return
            except IncompleteBulkReply:
                # an upsert that raced an adoption of its _id, told apart by FerretDB 1.x from
                # no other failure: every write of the bulk is idempotent, so it is sent again
                if not tombstones or attempt == CONFLICT_ATTEMPTS - 1:
                    raise

    def adopt(self, items: list[StoredItem], now_ms: int) -> Op[None]:
        # $setOnInsert alone: a document at the _id (an item, live or expired, or a
        # tombstone) is left as it is. One update_one per item, several at once: two
        # adopters racing to insert one _id get a duplicate key error, which the executor
        # sends again and which then finds the document (a bulk's write error is not
        # always told apart on FerretDB 1.x: IncompleteBulkReply)
        adoptions = tuple(
            self._adopt_one(_id, {**fields, "created_us": created})
            for _id, fields, created in self._documents(items)
        )
        if adoptions:
            yield Parallel(adoptions)

    def _adopt_one(self, _id: str, document: dict[str, Any]) -> Op[None]:
        yield Command(
            self.collection,
            "update_one",
            ({"_id": _id}, {"$setOnInsert": document}),
            {"upsert": True},
        )

    def switch_done(self, mark: bool = False) -> Op[bool]:
        meta = f"{self.collection}_meta"
        if mark:
            yield Command(
                meta,
                "update_one",
                ({"_id": "fallback-done"}, {"$set": {"done": True}}),
                {"upsert": True},
            )
        found = yield Command(meta, "find", ({"_id": "fallback-done"},), {})
        return bool(found)

    def _documents(self, items: list[StoredItem]) -> list[tuple[str, dict[str, Any], int]]:
        """(_id, fields, created_us) of each item's document, its size checked first."""
        documents = []
        for item in items:
            data = encode_value(item.value)
            if len(data) > MAX_VALUE_BYTES:
                raise PayloadTooLarge(
                    f"the value of {item.key!r} is {len(data)} bytes as JSON; a MongoDB store"
                    f" item holds at most {MAX_VALUE_BYTES} (16 MiB documents)"
                )
            _id = item_id(item.namespace, item.key)
            expires = item.expires_ms
            fields = {
                "ns": dotted_namespace(item.namespace),
                "key": item.key,
                "value": bson.Binary(data),
                "doc": queryable(decode_value(data)) if item.filterable else {},
                "updated_us": item.updated_us,
                "expires_ms": expires,
                "expires_at": None if expires is None else datetime_of_us(expires * 1000),
                "ttl_minutes": item.ttl_minutes,
                "gone": False,
                "embedded": bool(item.vectors),
                "vectors": [
                    {"path": v.path, "digest": v.digest, "data": bson.Binary(v.data)}
                    for v in item.vectors
                ],
            }
            documents.append((_id, fields, item.created_us))
        return documents

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        if query.limit == 0:
            return []
        if query.vector is None:
            docs: list[Mapping[str, Any]] = yield Command(
                self.collection,
                "find",
                (search_filter(query),),
                {
                    "projection": ITEM_FIELDS,
                    "sort": [("updated_us", -1), ("ns", 1), ("key", 1)],
                    "skip": query.offset,
                    "limit": query.limit,
                },
            )
            page = [item_of(doc) for doc in docs]
        else:
            # every candidate in as few replies as the server allows (16 MiB each), not the
            # driver's default first batch of 101 followed by getMores
            docs = yield Command(
                self.collection,
                "find",
                (search_filter(query),),
                {"projection": WITH_VECTORS, "batch_size": CANDIDATE_BATCH},
            )
            page = rank([item_of(doc) for doc in docs], query)
            for item in page:
                item.vectors = []
        if query.refresh:
            yield from self._refresh(page, query.now_ms)
        return page

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]:
        texts: list[str] = yield Command(
            self.collection, "distinct", ("ns", {**live_at_ms(now_ms), **prefix_filter(prefix)})
        )
        return [namespace_from_dotted(t) for t in texts]

    def sweep(self, now_ms: int) -> Op[int]:
        result = yield Command(
            self.collection,
            "delete_many",
            ({"expires_at": {"$lte": datetime_of_us(now_ms * 1000)}},),
        )
        return int(result.deleted_count)


# --------------------------------------------------------------------------- public stores


class _Schema:
    """``MongoDBStore.schema(key_prefix=...)``, or ``store.schema()`` for its own prefix."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return store_indexes
        return obj.port.schema


class MongoDBStore(OnMongoDB, SyncStore):
    """LangGraph ``BaseStore`` on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``), ``key_prefix`` (collection
    ``<key_prefix>_store``), ``index`` (IndexConfig), ``ttl`` (TTLConfig, minutes),
    ``max_key_bytes``. Call ``setup()`` once (``from_url`` does).
    """

    port_type = MongoDBStorePort
    schema = _Schema()
    port: MongoDBStorePort


class AsyncMongoDBStore(OnMongoDB, AsyncStore):
    """LangGraph ``BaseStore`` on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    port_type = MongoDBStorePort
    schema = _Schema()
    port: MongoDBStorePort
