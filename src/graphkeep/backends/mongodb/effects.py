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

and one fence mirror per thread that a lease of ``saver.lock()`` was granted on (see
:mod:`.fences`: each grant of the saver under the same ``key_prefix`` on this database
raises it, with ``$max``, to the token it granted)::

    {_id: "<thread>//fence",    # escaped thread id + "//fence": no record's _id has "//"
     kind: "fence",             # a string: the guard's $inc of it fails (type mismatch)
     token: int,                # the thread's newest fencing token
     expires_at: Date}          # FENCE_TTL after the last grant

It has no ``t``, so ``list`` and ``clear`` of a thread never see it, and ``list`` and
``clear`` of every thread match only documents without ``kind``: ``clear(None)`` leaves it,
so a cleared ledger still refuses a superseded holder.

Outside a lease every transition is one atomic request on the unique ``_id``: ``claim`` a
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

Under a lease (``fence``, the caller's fencing token) ``claim`` and ``take_over`` send
their write as ONE ordered ``bulk_write`` (one ``update`` command) whose first operation is
the guard against the thread's mirror (:meth:`.fences.Guard.guard`): when a newer token was
granted it fails, the batch stops before the write, nothing is stored and the port raises
:class:`~graphkeep.errors.LeaseLost` with the newer token (read from the mirror, one
``find`` on that path only; FerretDB 1.x's reply does not say which write failed, so that
read also tells a refusal from a lost insert race). The fenced ``claim`` is an upsert with
``$setOnInsert`` behind the guard; a bulk write cannot return the document it matched, so
when the record exists the claim reads it with one ``find_one`` (the unfenced claim needs
no such read), and the replacement of an expired record is guarded the same way. Guard and
write are one command, not one atomic step (no transaction, see :mod:`.fences`): a grant
whose mirror is raised while the command is past its guard does not stop its write; every
command sent after that is refused. The mirror is raised by the grant's third request,
after the saver's fence document: in between, the saver's writes of the superseded holder
are refused already and its claims not yet. A missing mirror (a lease granted by an older
graphkeep, or expired) refuses nothing. ``finish`` and ``release`` are not fenced
(:mod:`graphkeep.effects.port`). The collection is sharded on ``_id`` if at all: on a
ranged key the mirror's ``_id`` falls in the range of its thread's records, so the batch
targets one shard; on a hashed one mongos sends its two operations to their shards in
order, still stopping at a failed guard.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import bson
from pymongo import ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from graphkeep.backends.mongodb.client import IncompleteBulkReply, OnMongoDB
from graphkeep.backends.mongodb.documents import KIND_FENCE, check_prefix
from graphkeep.backends.mongodb.fences import Mirror
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
#: what every record matches and the thread's fence mirror does not: ``list`` and ``clear``
#: of every thread (a record has no ``kind``)
RECORDS: dict[str, Any] = {"kind": {"$ne": KIND_FENCE}}
#: MongoDB's duplicate key error
DUPLICATE_KEY = 11000


def lost_race(exc: Exception) -> bool:
    """Whether a claim's insert failed because a concurrent claim inserted the record
    first: a duplicate key; or, from FerretDB 1.x, a fenced insert failing past its guard
    without saying why (:class:`.client.IncompleteBulkReply`: its insert is the one write
    that can fail)."""
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors") or []
        return bool(errors) and all(e.get("code") == DUPLICATE_KEY for e in errors)
    return isinstance(exc, DuplicateKeyError | IncompleteBulkReply)


class MongoDBEffectsPort(PrefixedPort):
    """The effect ledger's port on one MongoDB collection (see the module docstring)."""

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.collection = f"{check_prefix(key_prefix)}_effects"
        #: the threads' fencing tokens as the saver's grants copy them here (:mod:`.fences`)
        self.fences = Mirror(self.collection, lambda thread_id: {"_id": self.fence_id(thread_id)})

    @staticmethod
    def doc_id(thread_id: str, key: str) -> str:
        # neither escaped text contains "/": the address is unambiguous
        return escaped_key(thread_id) + "/" + escaped_key(key)

    @staticmethod
    def fence_id(thread_id: str) -> str:
        # "//" is in no record's _id (an escaped key has no "/"); it starts with the
        # thread's escaped id and "/" as the thread's records do (one range of _id)
        return escaped_key(thread_id) + "//fence"

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

    def claim(
        self, record: EffectRecord, now_ms: int, fence: int | None = None
    ) -> Op[EffectRecord | None]:
        doc = self.document(record)
        fields = {k: v for k, v in doc.items() if k != "_id"}
        for _ in range(CLAIM_ROUNDS):
            try:
                inserted, stored = yield from self._insert(record.thread_id, doc, fields, fence)
            except (DuplicateKeyError, BulkWriteError, IncompleteBulkReply) as exc:
                if not lost_race(exc):
                    raise
                continue  # a concurrent claim inserted it first: read it next round
            if inserted:
                return None
            if stored is None:
                continue  # released, cleared or reaped since: insert it next round
            if stored.get("s") == STARTED and stored.get("tok") == record.token:
                # this very claim, re-sent after its reply was lost (a token is per attempt)
                return None
            if stored["exp_ms"] > now_ms:
                return self.record(stored)
            # past its expiry, not yet reaped: replace it unless another claim did first
            query = {"_id": doc["_id"], "exp_ms": {"$lte": now_ms}}
            if (yield from self._replace(record.thread_id, query, doc, fence)):
                return None
        raise GraphkeepError(
            f"could not claim effect {record.name!r} (key {record.key!r}, thread"
            f" {record.thread_id!r}): its record kept changing under {CLAIM_ROUNDS} attempts"
        )

    def _insert(
        self, thread_id: str, doc: dict[str, Any], fields: dict[str, Any], fence: int | None
    ) -> Op[tuple[bool, Mapping[str, Any] | None]]:
        """Insert ``doc`` unless its address has a record: (inserted, the stored record
        when not). Unfenced one request, which answers the stored record itself; fenced
        one guarded ``bulk_write``, which cannot, so a record found is read with one more."""
        if fence is None:
            stored = yield Command(
                self.collection,
                "find_one_and_update",
                ({"_id": doc["_id"]}, {"$setOnInsert": fields}),
                {"upsert": True},
                retry_conflicts=False,
            )
            return stored is None, stored
        insert = UpdateOne({"_id": doc["_id"]}, {"$setOnInsert": fields}, upsert=True)
        result = yield from self.fences.bulk(
            thread_id, [insert], fence, ordered=True, retry_conflicts=False
        )
        if result.upserted_count:
            return True, None
        return False, (yield Command(self.collection, "find_one", ({"_id": doc["_id"]},)))

    def _replace(
        self, thread_id: str, query: dict[str, Any], doc: dict[str, Any], fence: int | None
    ) -> Op[bool]:
        """Replace the record ``query`` matches with ``doc`` (behind the guard when
        fenced); whether it matched."""
        if fence is None:
            result = yield Command(
                self.collection, "replace_one", (query, doc), retry_conflicts=False
            )
        else:
            replace = ReplaceOne(query, doc)
            result = yield from self.fences.bulk(
                thread_id, [replace], fence, ordered=True, retry_conflicts=False
            )
        return bool(result.matched_count)

    def take_over(
        self, record: EffectRecord, old_token: str, now_ms: int, fence: int | None = None
    ) -> Op[bool]:
        held: dict[str, Any] = {"tok": old_token, "lease": {"$lte": now_ms}}
        query: dict[str, Any] = {"_id": self.doc_id(record.thread_id, record.key), "s": STARTED}
        if record.token != old_token:
            # or this very take-over, re-sent after its reply was lost (its token is new)
            query["$or"] = [held, {"tok": record.token}]
        else:
            query.update(held)
        return (yield from self._replace(record.thread_id, query, self.document(record), fence))

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

    def reseal(self, record: EffectRecord, fence: int | None = None) -> Op[bool]:
        query = {
            "_id": self.doc_id(record.thread_id, record.key),
            "s": record.state,
            "tok": record.token,
            "u": record.updated_ms,
        }
        data = None if record.data is None else bson.Binary(record.data)
        if fence is None:
            result = yield Command(self.collection, "update_one", (query, {"$set": {"d": data}}))
            return bool(result.matched_count)
        # behind the guard against the thread's mirror, as a fenced claim (the guard matches
        # nothing unless it refuses, so the count is the reseal's)
        update = UpdateOne(query, {"$set": {"d": data}})
        result = yield from self.fences.bulk(record.thread_id, [update], fence, ordered=True)
        return bool(result.matched_count)

    def get(self, thread_id: str, key: str) -> Op[EffectRecord | None]:
        doc = yield Command(self.collection, "find_one", ({"_id": self.doc_id(thread_id, key)},))
        return None if doc is None else self.record(doc)

    def list(self, thread_id: str | None) -> Op[list[EffectRecord]]:
        query: dict[str, Any] = RECORDS if thread_id is None else {"t": thread_id}
        docs = yield find(self.collection, query)
        return [self.record(doc) for doc in docs]

    def clear(self, thread_id: str | None) -> Op[int]:
        # never the fence mirrors: a cleared ledger still refuses a superseded holder
        query: dict[str, Any] = RECORDS if thread_id is None else {"t": thread_id}
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
