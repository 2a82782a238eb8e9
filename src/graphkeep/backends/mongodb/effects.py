"""Effect ledger on MongoDB: :class:`MongoDBEffects` (sync) and :class:`AsyncMongoDBEffects`.

PyMongo's ``MongoClient`` / native ``AsyncMongoClient``, URLs and ``db_name`` as the savers::

    with MongoDBEffects.from_url("mongodb://localhost:27017/mydb") as effects:
        ...

One collection ``<key_prefix>_effects``, one document per record (see
:mod:`graphkeep.effects.port`)::

    {_id: "<thread>/<key>",     # escaped thread id + "/" + escaped key: unique per address
     t: "<thread_id>",          # indexed: list(thread_id) / clear(thread_id)
     k: "<key>",
     s: "started" | "done" | "failed",
     tok: "<token>",            # the holder of a started record (a random hex per attempt)
     lease: int,                # lease_until_ms (epoch ms)
     exp_ms: int,               # exact expiry (epoch ms): a record past it counts as absent
     expires_at: Date,          # TTL index: the server reaps it (FerretDB 1.x: never)
     d: Binary | null,          # DONE: the packed result; FAILED: the packed error
     n: "<name>",               # the effect's qualified name
     c: int, u: int}            # created_ms, updated_ms

Every transition is one atomic request on the unique ``_id``: ``claim`` a
``find_one_and_update`` upsert with ``$setOnInsert`` (nothing back: claimed; else the
stored record, in the same request — when past ``exp_ms`` it is replaced by a
``replace_one`` conditioned on that expiry; a concurrent upsert's duplicate key reads it
again), ``take_over`` and ``finish`` a conditional ``replace_one`` (state, token and, for
``take_over``, an ended lease), ``release`` a conditional ``delete_one``. ``get`` is a
``find_one``, ``list`` a ``find`` and ``clear`` a ``delete_many``, by ``t`` or over the
whole collection. A result over 16 MiB - 64 KiB does not fit a document: ``finish`` raises
:class:`~graphkeep.errors.PayloadTooLarge` before writing. Servers without TTL indexes
(FerretDB 1.x) get a plain index: expired records stay until replaced by a claim or
cleared; the ledger treats them as absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import bson
from pymongo.errors import DuplicateKeyError

from graphkeep.backends.mongodb.client import OnMongoDB
from graphkeep.backends.mongodb.documents import check_prefix
from graphkeep.backends.mongodb.requests import Command, find
from graphkeep.backends.mongodb.schema import EFFECTS_INDEXES, ensure_indexes
from graphkeep.cache.port import escaped_key
from graphkeep.construction import PrefixedPort
from graphkeep.effects.ledger import AsyncLedger, SyncLedger
from graphkeep.effects.port import STARTED, EffectRecord
from graphkeep.errors import GraphkeepError, PayloadTooLarge
from graphkeep.port import Op

__all__ = ["AsyncMongoDBEffects", "MongoDBEffects", "MongoDBEffectsPort"]


#: a result larger than this does not fit a document (BSON's 16 MiB, less room for the rest)
MAX_DATA_BYTES = 16 * 1024 * 1024 - 64 * 1024
#: insert / read / replace rounds of one claim before giving up (each lost round means a
#: concurrent release, clear or reaping deleted the record between two of its requests)
CLAIM_ROUNDS = 8


class MongoDBEffectsPort(PrefixedPort):
    """The effect ledger's port on one MongoDB collection (see the module docstring)."""

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.collection = f"{check_prefix(key_prefix)}_effects"

    @staticmethod
    def doc_id(thread_id: str, key: str) -> str:
        # neither escaped text contains "/": the address is unambiguous
        return escaped_key(thread_id) + "/" + escaped_key(key)

    @classmethod
    def document(cls, record: EffectRecord) -> dict[str, Any]:
        return {
            "_id": cls.doc_id(record.thread_id, record.key),
            "t": record.thread_id,
            "k": record.key,
            "s": record.state,
            "tok": record.token,
            "lease": record.lease_until_ms,
            "exp_ms": record.expires_ms,
            "expires_at": datetime.fromtimestamp(record.expires_ms / 1000, timezone.utc),
            "d": None if record.data is None else bson.Binary(record.data),
            "n": record.name,
            "c": record.created_ms,
            "u": record.updated_ms,
        }

    @staticmethod
    def record(doc: Mapping[str, Any]) -> EffectRecord:
        data = doc.get("d")
        return EffectRecord(
            thread_id=doc["t"],
            key=doc["k"],
            state=doc["s"],
            token=doc["tok"],
            lease_until_ms=int(doc["lease"]),
            expires_ms=int(doc["exp_ms"]),
            data=None if data is None else bytes(data),
            name=doc.get("n", ""),
            created_ms=int(doc["c"]),
            updated_ms=int(doc["u"]),
        )

    def setup(self) -> Op[None]:
        # as the cache: a server without TTL indexes gets a plain one
        yield from ensure_indexes(self.collection, EFFECTS_INDEXES)

    def claim(self, record: EffectRecord, now_ms: int) -> Op[EffectRecord | None]:
        doc = self.document(record)
        fields = {k: v for k, v in doc.items() if k != "_id"}
        for _ in range(CLAIM_ROUNDS):
            # one request either way: inserted (None back) or the stored record
            try:
                stored = yield Command(
                    self.collection,
                    "find_one_and_update",
                    ({"_id": doc["_id"]}, {"$setOnInsert": fields}),
                    {"upsert": True},
                    retry_conflicts=False,
                )
            except DuplicateKeyError:
                continue  # a concurrent claim inserted it first: read it next round
            if stored is None:
                return None
            if stored.get("s") == STARTED and stored.get("tok") == record.token:
                # this very claim, re-sent after its reply was lost (a token is per attempt)
                return None
            if stored["exp_ms"] > now_ms:
                return self.record(stored)
            # past its expiry, not yet reaped: replace it unless another claim did first
            replaced = yield Command(
                self.collection,
                "replace_one",
                ({"_id": doc["_id"], "exp_ms": {"$lte": now_ms}}, doc),
                retry_conflicts=False,
            )
            if replaced.matched_count:
                return None
        raise GraphkeepError(
            f"could not claim effect {record.name!r} (key {record.key!r}, thread"
            f" {record.thread_id!r}): its record kept changing under {CLAIM_ROUNDS} attempts"
        )

    def take_over(self, record: EffectRecord, old_token: str, now_ms: int) -> Op[bool]:
        held: dict[str, Any] = {"tok": old_token, "lease": {"$lte": now_ms}}
        query: dict[str, Any] = {"_id": self.doc_id(record.thread_id, record.key), "s": STARTED}
        if record.token != old_token:
            # or this very take-over, re-sent after its reply was lost (its token is new)
            query["$or"] = [held, {"tok": record.token}]
        else:
            query.update(held)
        result = yield Command(
            self.collection, "replace_one", (query, self.document(record)), retry_conflicts=False
        )
        return bool(result.matched_count)

    def finish(self, record: EffectRecord, now_ms: int) -> Op[bool]:
        if record.data is not None and len(record.data) > MAX_DATA_BYTES:
            raise PayloadTooLarge(
                f"the {record.state} result of effect {record.name!r} (key {record.key!r},"
                f" thread {record.thread_id!r}) is {len(record.data)} bytes packed; a MongoDB"
                f" document holds at most {MAX_DATA_BYTES} (16 MiB - 64 KiB). Nothing was"
                " written: return a smaller result (e.g. a reference to where the data is)"
            )
        query = {
            "_id": self.doc_id(record.thread_id, record.key),
            "s": STARTED,
            "tok": record.token,
        }
        result = yield Command(
            self.collection, "replace_one", (query, self.document(record)), retry_conflicts=False
        )
        return bool(result.matched_count)

    def release(self, thread_id: str, key: str, token: str) -> Op[bool]:
        query = {"_id": self.doc_id(thread_id, key), "s": STARTED, "tok": token}
        result = yield Command(self.collection, "delete_one", (query,))
        return bool(result.deleted_count)

    def get(self, thread_id: str, key: str) -> Op[EffectRecord | None]:
        doc = yield Command(self.collection, "find_one", ({"_id": self.doc_id(thread_id, key)},))
        return None if doc is None else self.record(doc)

    def list(self, thread_id: str | None) -> Op[list[EffectRecord]]:
        query: dict[str, Any] = {} if thread_id is None else {"t": thread_id}
        docs = yield find(self.collection, query)
        return [self.record(doc) for doc in docs]

    def clear(self, thread_id: str | None) -> Op[int]:
        query: dict[str, Any] = {} if thread_id is None else {"t": thread_id}
        result = yield Command(self.collection, "delete_many", (query,))
        return int(result.deleted_count)


class MongoDBEffects(OnMongoDB, SyncLedger):
    """Effect ledger on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``; ``from_url`` takes the URL path),
    ``serde``, ``key_prefix`` (default ``"graphkeep"``: collection ``<prefix>_effects``),
    and the ledger's own options.
    """

    port_type = MongoDBEffectsPort


class AsyncMongoDBEffects(OnMongoDB, AsyncLedger):
    """Effect ledger on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    port_type = MongoDBEffectsPort
