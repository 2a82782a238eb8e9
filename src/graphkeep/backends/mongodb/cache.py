"""LangGraph node cache on MongoDB: :class:`MongoDBCache` (sync) and :class:`AsyncMongoDBCache`.

PyMongo's ``MongoClient`` / native ``AsyncMongoClient``, URLs and ``db_name`` as the savers::

    with MongoDBCache.from_url("mongodb://localhost:27017/mydb") as cache:
        graph = builder.compile(cache=cache)

One collection ``<key_prefix>_cache``, one document per entry::

    {_id: "<ns><key>",          # escaped_namespace + escaped_key: unique per (namespace, key)
     ns: "<ns>",                # escaped_namespace, indexed: clear(namespaces)
     v: Binary,                 # the packed typed value
     exp_ms: int | null,        # exact expiry (epoch ms), checked on every read
     expires_at: Date}          # TTL index (absent: kept until cleared)

Every call is one command: ``get`` a ``find`` by ``_id``, ``set`` one unordered
``bulk_write`` of replacing upserts, ``clear`` one ``delete_many``. Servers without TTL
indexes (FerretDB 1.x) get a plain index: expired entries are hidden from reads and
replaced or cleared later. A value over 16 MiB - 64 KiB is not cached (a warning is logged
and any older value at that key deleted): a cache may drop an entry, never crash a run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import bson
from langgraph.cache.base import FullKey, Namespace
from pymongo import DeleteOne, ReplaceOne

from graphkeep.backends.mongodb.client import OnMongoDB
from graphkeep.backends.mongodb.documents import check_prefix
from graphkeep.backends.mongodb.requests import Command
from graphkeep.backends.mongodb.schema import CACHE_INDEXES, ensure_indexes
from graphkeep.cache.port import (
    Entry,
    Held,
    Stored,
    escaped_key,
    escaped_namespace,
    namespace_of,
    unescaped,
)
from graphkeep.cache.shells import AsyncCache, SyncCache
from graphkeep.construction import PrefixedPort
from graphkeep.port import Op

__all__ = ["AsyncMongoDBCache", "MongoDBCache", "MongoDBCachePort"]


log = logging.getLogger("graphkeep.mongodb")

#: a value larger than this is not cached (documents must stay under BSON's 16 MiB)
MAX_VALUE_BYTES = 16 * 1024 * 1024 - 64 * 1024


class MongoDBCachePort(PrefixedPort):
    """The cache port on one MongoDB collection."""

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.collection = f"{check_prefix(key_prefix)}_cache"

    @staticmethod
    def doc_id(namespace: Namespace, key: str) -> str:
        return escaped_namespace(namespace) + escaped_key(key)

    def setup(self) -> Op[None]:
        # as the saver and the store: a server without TTL indexes gets a plain one
        yield from ensure_indexes(self.collection, CACHE_INDEXES)

    def get(self, keys: list[FullKey]) -> Op[dict[FullKey, Stored]]:
        by_id = {self.doc_id(*address): address for address in keys}
        docs = yield Command(
            self.collection,
            "find",
            ({"_id": {"$in": list(by_id)}},),
            {"projection": {"v": 1, "exp_ms": 1}},
        )
        return {
            by_id[doc["_id"]]: Stored(bytes(doc["v"]), doc.get("exp_ms"))
            for doc in docs
            if doc["_id"] in by_id
        }

    def set(self, entries: list[Entry], now_ms: int) -> Op[None]:
        operations: list[Any] = []
        for entry in entries:
            doc_id = self.doc_id(entry.namespace, entry.key)
            if len(entry.data) > MAX_VALUE_BYTES:
                log.warning(
                    "not caching %r in namespace %r: %d bytes do not fit a MongoDB document",
                    entry.key,
                    entry.namespace,
                    len(entry.data),
                )
                # set replaces: an older value must not outlive this write
                operations.append(DeleteOne({"_id": doc_id}))
                continue
            doc: dict[str, Any] = {
                "_id": doc_id,
                "ns": escaped_namespace(entry.namespace),
                "v": bson.Binary(entry.data),
                "exp_ms": entry.expires_ms,
            }
            if entry.expires_ms is not None:
                doc["expires_at"] = datetime.fromtimestamp(entry.expires_ms / 1000, timezone.utc)
            operations.append(ReplaceOne({"_id": doc_id}, doc, upsert=True))
        yield Command(self.collection, "bulk_write", (operations,), {"ordered": False})

    def clear(self, namespaces: list[Namespace] | None) -> Op[None]:
        if namespaces is None:
            query: dict[str, Any] = {}
        else:
            query = {"ns": {"$in": [escaped_namespace(ns) for ns in namespaces]}}
        yield Command(self.collection, "delete_many", (query,))

    def entries(self) -> Op[list[Held]]:
        docs = yield Command(self.collection, "find", ({},), {"projection": {"v": 1, "ns": 1}})
        held: list[Held] = []
        for doc in docs:
            ns_text, doc_id = doc.get("ns"), doc["_id"]
            if not isinstance(ns_text, str) or not doc_id.startswith(ns_text):
                continue
            address = (namespace_of(ns_text), unescaped(doc_id[len(ns_text) :]))
            held.append(Held(address, bytes(doc["v"]), doc_id))
        return held

    def reseal(self, held: Held, data: bytes) -> Op[bool]:
        query = {"_id": held.ref, "v": bson.Binary(held.data)}
        result = yield Command(
            self.collection, "update_one", (query, {"$set": {"v": bson.Binary(data)}})
        )
        return bool(result.matched_count)


class MongoDBCache(OnMongoDB, SyncCache):
    """Node cache on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``; ``from_url`` takes the URL path),
    ``serde``, ``key_prefix`` (default ``"graphkeep"``: collection ``<prefix>_cache``).
    """

    port_type = MongoDBCachePort


class AsyncMongoDBCache(OnMongoDB, AsyncCache):
    """Node cache on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    port_type = MongoDBCachePort
