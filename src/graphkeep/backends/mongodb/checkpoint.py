"""The MongoDB mapping of the storage port (one collection per thread's data, plain CRUD).

Requests yielded here are :class:`Command` values (a collection method and its
arguments); the executors in :mod:`graphkeep.backends.mongodb` run them on a
``MongoClient`` or an ``AsyncMongoClient``. The layout is described in the
package docstring; the pure document builders are in :mod:`.documents`.

Watching a thread (``saver.watch`` / ``awatch``) polls :meth:`MongoDBCheckpointPort.commits`: one
``find`` on ``{thread_id, ns, kind: "cp", ref: {$gt: above}}`` sorted by ``ref``, projecting
only ``ns`` and ``ref``, which the unique ``gk_thread_ns_kind_ref`` index serves as a range
scan (equality on its first three fields, the range and the sort on ``ref``) and covers
(every field it returns is in the index: no document is fetched). ``ns=None`` drops the
``ns`` equality: the same index is scanned with ``ns`` unbounded (the planner seeks each
namespace's ``kind: "cp", ref > above`` interval) and the few matching keys are sorted by
``(ref, ns)`` with the limit (a top-k sort), so no index is added for it (a fourth index
would be maintained on every blob and write document of every put). Nothing new costs one
``find`` that returns no document. The poller backs off while the thread is idle
(:mod:`graphkeep.checkpoint.watch`).

Change streams are not used: a change stream needs a replica set (or a sharded cluster)
and keeps one server cursor per watcher, while polling the index works the same on a
standalone server, replica sets, sharded clusters (every query names the shard key
``thread_id``) and wire-compatible servers without change streams (FerretDB), and an
idle watcher costs one indexed ``find`` per ``max_poll_interval``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import bson
from pymongo import DeleteMany, IndexModel, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import DuplicateKeyError, OperationFailure

from graphkeep.backends.mongodb.documents import (
    BSON_LIMIT,
    CHECKPOINT_KINDS,
    CHUNK_SIZE,
    ELEMENT_PREFIX,
    FORMAT,
    INDEX_OPTIONS,
    KIND_BLOB,
    KIND_CHECKPOINT,
    KIND_CP,
    KIND_WRITE,
    OPAQUE,
    Heading,
    Run,
    assemble,
    blob_ref,
    check_prefix,
    checkpoint_id_key,
    checkpoint_payload,
    collection_names,
    conjunction,
    disjunction,
    group_payloads,
    heading_of,
    identity,
    in_batches,
    index_signature,
    index_specs,
    key_runs,
    keyset_after,
    legacy_checkpoints,
    live,
    merge_runs,
    metadata_fields,
    metadata_filter,
    pack_heading,
    parse_blob_ref,
    parse_write_sub,
    payload_docs,
    payload_type,
    run_clauses,
    upgrade_checkpoint,
    upgrade_payload,
    write_sub,
)
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest, manifest_keys
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import (
    BlobRecord,
    Chain,
    CheckpointRecord,
    Inventory,
    ListQuery,
    Loaded,
    Summary,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.errors import ConfigurationError, PayloadTooLarge
from graphkeep.port import Op, codec
from graphkeep.port.lru import ThreadLRU

log = logging.getLogger("graphkeep.mongodb")

#: checkpoint summaries fetched per query by ancestor walks
CHAIN_PAGE = 1000
#: first-batch size of unbounded finds (the server still caps a batch at 16 MiB)
FIND_BATCH = 100_000
#: tag of a chunked checkpoint payload (msgpack of checkpoint and metadata typed pairs)
CHECKPOINT_PAYLOAD_TAG = "graphkeep.checkpoint+metadata"
#: headroom kept under the BSON limit for a checkpoint document
DOC_HEADROOM = 64 * 1024
#: list elements get this many ``ttl`` of life when written or refreshed, and are
#: refreshed only once less than one ``ttl`` is left: a checkpoint (which gets one
#: ``ttl``) never outlives its elements, and an element is rewritten about once per
#: half ``ttl`` instead of at every put (it may outlive its last checkpoint by ttl/2)
ELEMENT_TTL_FACTOR = 1.5
#: checkpoint documents moved per command by the format-1 migration in ``setup()``
MIGRATE_BATCH = 500

SUMMARY_FIELDS: dict[str, Any] = {
    "_id": 0,
    "thread_id": 1,
    "ns": 1,
    "ref": 1,
    "s": 1,
    # format 1 spelled these out (checkpoints moved by setup() keep them until rewritten)
    "parent_id": 1,
    "versions": 1,
    "present": 1,
    "needs_history": 1,
    "run_id": 1,
    "delta": 1,
    "lists": 1,
}
NO_ID: dict[str, Any] = {"_id": 0}
#: what ``commits`` reads of a checkpoint document: only fields of the index (covered)
COMMIT_FIELDS: dict[str, Any] = {"_id": 0, "ns": 1, "ref": 1}
WRITE_KINDS = [KIND_WRITE, KIND_CHECKPOINT]

#: DeltaChannel bookkeeping: channel -> (oldest checkpoint id needed, seed version or None)
DeltaMap = dict[str, tuple[str, str | None]]


@dataclass(frozen=True, slots=True)
class Command:
    """One driver call: ``db[collection].<method>(*args, **kwargs)`` (``db`` when None).

    Cursors (``find``, ``aggregate``, ``list_indexes``) are materialised by the
    executor; every other method returns the driver's result object.
    """

    collection: str | None
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: re-send on a duplicate-key error (an upsert race); False where a conflict is an answer
    retry_conflicts: bool = True


#: list channels of a checkpoint: channel -> (version, runs of the element keys it names)
ListMap = dict[str, tuple[str, list[Run]]]


@dataclass(frozen=True, slots=True)
class Head:
    """A checkpoint's summary plus where its DeltaChannels' history starts, and which of
    its present channels are lists stored as elements (``complete``: all of them known)."""

    summary: Summary
    delta: DeltaMap
    lists: ListMap = field(default_factory=dict)
    complete: bool = False


@dataclass(slots=True)
class Refresh:
    """Documents of one (thread, ns) whose expiry a write or read extends."""

    thread_id: str
    ns: str
    ids: set[str] = field(default_factory=set)
    ranges: list[tuple[str, str]] = field(default_factory=list)
    blobs: set[str] = field(default_factory=set)
    #: list elements (by runs of keys); ``all_elements``: every element of the namespace
    elements: list[Run] = field(default_factory=list)
    all_elements: bool = False


class HeadCache(ThreadLRU[tuple[str, str, str], Head]):
    """Recently written or read checkpoint heads (bounded LRU, thread-safe).

    Lets ``put`` find its parent's DeltaChannel bookkeeping without a read in
    the usual case (the parent was put or loaded by this process); on a miss
    the parent document is read. Only consulted when a TTL is configured.
    """

    def __init__(self, size: int = 4096) -> None:
        super().__init__(size)


class _Summaries:
    """Summaries fetched so far by an ancestor walk, and which id ranges are complete."""

    def __init__(self) -> None:
        self.heads: dict[str, Head] = {}
        self.covered: list[tuple[str, str]] = []

    def add_page(self, upper: str, docs: list[Mapping[str, Any]], full: bool) -> None:
        for doc in docs:
            head = head_of(doc)
            self.heads[head.summary.checkpoint_id] = head
        low = docs[-1]["ref"] if (full and docs) else ""
        self.covered.append((low, upper))

    def get(self, checkpoint_id: str) -> Head | None:
        return self.heads.get(checkpoint_id)

    def covers(self, checkpoint_id: str) -> bool:
        return any(low <= checkpoint_id <= high for low, high in self.covered)


def head_of(doc: Mapping[str, Any], complete: bool = False) -> Head:
    """The head of a checkpoint document; ``complete`` when its ``lists`` are known
    to name every list channel (they are only a hint otherwise)."""
    h = heading_of(doc)
    summary = Summary(
        ns=doc["ns"],
        checkpoint_id=doc["ref"],
        parent_id=h.parent_id,
        versions=h.versions,
        present=h.present,
        needs_history=h.needs_history,
        run_id=doc.get("run_id"),
    )
    return Head(summary, dict(h.delta), dict(h.lists), complete)


def manifest_runs(manifest: Typed) -> list[Run]:
    return key_runs(manifest_keys(manifest))


def element_key_of(ref: str) -> str | None:
    """The element key of a blob ``ref``, or None when it is not an element."""
    return ref[len(ELEMENT_PREFIX) :] if ref.startswith(ELEMENT_PREFIX) else None


def element_clauses(thread_id: str, ns: str, runs: list[Run]) -> list[dict[str, Any]]:
    """Filters (each index-backed alone) selecting the element blobs of ``runs``."""
    base = {"thread_id": thread_id, "ns": ns, "kind": KIND_BLOB}
    return [{**base, "ref": clause} for clause in run_clauses(merge_runs(runs))]


def _model(spec: Mapping[str, Any]) -> IndexModel:
    options = {name: spec[name] for name in INDEX_OPTIONS if name in spec}
    return IndexModel([(k, v) for k, v in spec["key"]], name=spec["name"], **options)


def _ttl_unsupported(exc: OperationFailure) -> bool:
    return exc.code in (115, 238) or "expireAfterSeconds" in str(exc)


def ensure_indexes(collection: str, wanted: list[dict[str, Any]]) -> Op[bool]:
    """Create the ``wanted`` index specs on ``collection`` unless equal ones exist (key and
    options); a TTL index the server refuses becomes a plain ``<name>_plain`` index.
    Returns whether the server keeps TTL indexes."""
    existing: list[Mapping[str, Any]] = yield Command(collection, "list_indexes")
    by_name = {ix["name"]: ix for ix in existing}
    signatures = {index_signature(ix) for ix in existing}
    missing = []
    for spec in wanted:
        have = by_name.get(spec["name"])
        if have is not None:
            # a server that keeps no sparse flag (FerretDB 1.x) lists the index without it
            unflagged = {**spec, "sparse": have.get("sparse")}
            if index_signature(have) not in (index_signature(spec), index_signature(unflagged)):
                raise ConfigurationError(
                    f"index {spec['name']!r} on collection {collection!r} exists with"
                    f" other keys or options ({dict(have)}); expected {spec}. Drop it,"
                    " or pass setup=False and manage the indexes yourself"
                    " (MongoDBSaver.schema() lists them)"
                )
            continue
        if index_signature(spec) not in signatures:
            missing.append(spec)
    plain = [s for s in missing if "expireAfterSeconds" not in s]
    if plain:
        yield Command(collection, "create_indexes", ([_model(s) for s in plain],))
    ttl_ok = True
    for spec in [s for s in missing if "expireAfterSeconds" in s]:
        try:
            yield Command(collection, "create_indexes", ([_model(spec)],))
        except OperationFailure as exc:
            if not _ttl_unsupported(exc):
                raise
            ttl_ok = False
            fallback = {k: v for k, v in spec.items() if k != "expireAfterSeconds"}
            fallback["name"] = f"{spec['name']}_plain"
            if fallback["name"] not in by_name:
                yield Command(collection, "create_indexes", ([_model(fallback)],))
    return ttl_ok


class MongoDBCheckpointPort(CheckpointPort):
    """Storage port on MongoDB. ``ttl`` (seconds) slides per thread on every write."""

    def __init__(
        self,
        *,
        key_prefix: str = "graphkeep",
        ttl: float | None = None,
        refresh_ttl_on_read: bool = False,
        chunk_size: int = CHUNK_SIZE,
        sharded: bool = False,
    ) -> None:
        self.prefix = check_prefix(key_prefix)
        if not isinstance(sharded, bool):
            raise ConfigurationError(f"sharded must be True or False, got {sharded!r}")
        #: upserts also name the shard key ``thread_id`` (MongoDB requires it when sharded)
        self.sharded = sharded
        #: one collection holds a thread's checkpoints, writes, blobs, elements and chunks,
        #: so a put is one ordered command (values first, the checkpoint last)
        self.payloads, self.locks = collection_names(self.prefix)
        self.legacy = legacy_checkpoints(self.prefix)
        self.ttl = timedelta(seconds=ttl) if ttl else None
        self.refresh_on_read = bool(refresh_ttl_on_read and ttl)
        if not isinstance(chunk_size, int) or not 1024 <= chunk_size <= CHUNK_SIZE:
            raise ConfigurationError(
                f"chunk_size must be an int between 1 KiB and {CHUNK_SIZE // 1024 // 1024} MiB"
            )
        self.chunk_size = chunk_size
        self.heads = HeadCache()
        #: whether the server keeps TTL indexes (None until setup() ran)
        self.ttl_index: bool | None = None

    # -- helpers -------------------------------------------------------------------

    @staticmethod
    def _now() -> datetime:
        return datetime.now(timezone.utc)

    def _expiry(self, now: datetime) -> datetime | None:
        return now + self.ttl if self.ttl else None

    def _element_expiry(self, now: datetime) -> datetime | None:
        return now + self.ttl * ELEMENT_TTL_FACTOR if self.ttl else None

    def schema(self) -> list[dict[str, Any]]:
        return index_specs(self.prefix)

    @staticmethod
    def _find(
        collection: str,
        filter: Mapping[str, Any],
        *,
        projection: Mapping[str, Any] | None = None,
        sort: list[tuple[str, int]] | None = None,
        limit: int = 0,
    ) -> Command:
        kwargs: dict[str, Any] = {
            "projection": dict(projection or NO_ID),
            "batch_size": limit or FIND_BATCH,
        }
        if sort:
            kwargs["sort"] = sort
        if limit:
            kwargs["limit"] = limit
        return Command(collection, "find", (dict(filter),), kwargs)

    def _payload_ops(
        self,
        ident: Mapping[str, Any],
        fields: Mapping[str, Any],
        value: Typed,
        expires_at: datetime | None,
        *,
        overwrite: bool,
    ) -> list[Any]:
        """Upserts for one payload: overwrite replaces, otherwise insert-if-absent."""
        ops: list[Any] = []
        for part in payload_docs(ident, fields, value.tag, value.data, self.chunk_size):
            doc = dict(part.doc)
            key = self._key(part.filter, ident["thread_id"])
            if expires_at is not None:
                doc["expires_at"] = expires_at
            if part.head and overwrite:
                ops.append(ReplaceOne(key, doc, upsert=True))
                continue
            update: dict[str, Any] = {
                "$setOnInsert": {k: v for k, v in doc.items() if k not in key and k != "expires_at"}
            }
            if expires_at is not None:
                update["$set"] = {"expires_at": expires_at}
            ops.append(UpdateOne(key, update, upsert=True))
        return ops

    def _blob_ops(
        self, thread_id: str, ns: str, blob: BlobRecord, expires_at: datetime | None
    ) -> list[Any]:
        """Upserts storing one channel value (blobs are immutable per version: overwrite)."""
        return self._payload_ops(
            identity(thread_id, ns, KIND_BLOB, blob_ref(blob.channel, blob.version)),
            {},  # channel and version are in ``ref``
            blob.value,
            expires_at,
            overwrite=True,
        )

    def _write_ops(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        write: WriteRecord,
        expires_at: datetime | None,
        *,
        overwrite: bool,
    ) -> list[Any]:
        """Upserts storing one pending write of ``checkpoint_id``."""
        return self._payload_ops(
            identity(thread_id, ns, KIND_WRITE, checkpoint_id, write_sub(write.task_id, write.idx)),
            # task id and index are in ``sub``; ``channel`` stays a field (history filters on it)
            {"channel": write.channel, "p": write.task_path}
            if write.task_path
            else {"channel": write.channel},
            write.value,
            expires_at,
            overwrite=overwrite,
        )

    def _chunked_checkpoint_ops(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        packed: bytes,
        expires_at: datetime | None,
    ) -> list[Any]:
        """Upserts storing the payload of a checkpoint too large to inline."""
        return self._payload_ops(
            identity(thread_id, ns, KIND_CHECKPOINT, checkpoint_id),
            {},
            Typed(CHECKPOINT_PAYLOAD_TAG, packed),
            expires_at,
            overwrite=True,
        )

    def _key(self, by_id: dict[str, Any], thread_id: str) -> dict[str, Any]:
        """The filter of an upsert: the ``_id``, plus the shard key on a sharded cluster."""
        return {**by_id, "thread_id": thread_id} if self.sharded else by_id

    def _checkpoint_key(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, Any]:
        return self._key({"_id": checkpoint_id_key(thread_id, ns, checkpoint_id)}, thread_id)

    def _checkpoint_doc(
        self,
        record: CheckpointRecord,
        expires_at: datetime | None,
        delta: DeltaMap,
        lists: ListMap | None = None,
    ) -> tuple[dict[str, Any], bytes | None]:
        """The checkpoint document, and the payload to chunk when it is too big to inline."""
        metadata_doc, opaque = metadata_fields(record.metadata_doc)
        payload = len(record.checkpoint.data) + len(record.metadata.data)
        inline = payload <= self.chunk_size
        heading = Heading(
            record.parent_id,
            dict(record.versions),
            list(record.present),
            list(record.needs_history),
            dict(delta),
            dict(lists or {}),
            chunked=not inline,
        )
        doc: dict[str, Any] = {
            "thread_id": record.thread_id,
            "ns": record.ns,
            "kind": KIND_CP,
            "ref": record.checkpoint_id,
            # parent, versions, present, needs_history, delta and lists, packed: read only
            # by the client, and far smaller packed than as BSON arrays of documents
            "s": pack_heading(heading),
            "metadata_doc": metadata_doc,
        }
        if opaque:
            doc["metadata_opaque"] = opaque
        if record.run_id is not None:
            doc["run_id"] = record.run_id
        if expires_at is not None:
            doc["expires_at"] = expires_at
        budget = BSON_LIMIT - DOC_HEADROOM - (payload if inline else 0)
        size = len(bson.encode(doc))
        if size > budget:
            # only the queryable metadata copy can be large: keep it out of the document
            opaque = list(metadata_doc) + opaque
            doc["metadata_doc"], doc["metadata_opaque"] = {}, opaque
            size = len(bson.encode(doc))
            if size > budget:
                raise PayloadTooLarge(
                    f"checkpoint {record.checkpoint_id!r} of thread {record.thread_id!r}"
                    f" lists {len(record.versions)} channels: its document would be {size}"
                    " bytes without payload, over what MongoDB can store; use fewer or"
                    " shorter channel names"
                )
        packed = codec.packb(
            [
                record.checkpoint.tag,
                record.checkpoint.data,
                record.metadata.tag,
                record.metadata.data,
            ]
        )
        if inline:
            doc["d"] = packed
            return doc, None
        return doc, packed

    def _refresh_ops(self, refreshes: Iterable[Refresh], now: datetime) -> list[Any]:
        """Updates extending the expiry of what ``refreshes`` name (empty without a ttl)."""
        expires_at, element_expires_at = self._expiry(now), self._element_expiry(now)
        if expires_at is None or element_expires_at is None:
            return []
        ops: list[Any] = []
        update = {"$set": {"expires_at": expires_at}}
        for r in refreshes:
            base = {"thread_id": r.thread_id, "ns": r.ns}
            # checkpoints with their writes and chunked payloads: all share ``ref``
            own = {**base, "kind": {"$in": CHECKPOINT_KINDS}}
            for batch in in_batches(sorted(r.ids)):
                ops.append(UpdateMany({**own, "ref": {"$in": batch}}, update))
            for low, high in r.ranges:
                ops.append(UpdateMany({**own, "ref": {"$gte": low, "$lte": high}}, update))
            for batch in in_batches(sorted(r.blobs)):
                ops.append(UpdateMany({**base, "kind": KIND_BLOB, "ref": {"$in": batch}}, update))
            # elements: only those with less than one ttl left, to ELEMENT_TTL_FACTOR ttl
            stale = {"expires_at": {"$lt": expires_at}}
            refresh_elements = {"$set": {"expires_at": element_expires_at}}
            if r.all_elements:
                every = {"$gte": ELEMENT_PREFIX, "$lt": ELEMENT_PREFIX[:-1] + ";"}
                clauses = [{**base, "kind": KIND_BLOB, "ref": every}]
            else:
                clauses = element_clauses(r.thread_id, r.ns, r.elements)
            if clauses:
                ops.append(
                    UpdateMany(conjunction([disjunction(clauses) or {}, stale]), refresh_elements)
                )
        return ops

    @staticmethod
    def _delta_refresh(refresh: Refresh, delta: DeltaMap, upper: str) -> None:
        if not delta:
            return
        refresh.ranges.append((min(cid for cid, _ in delta.values()), upper))
        refresh.blobs.update(blob_ref(ch, v) for ch, (_, v) in delta.items() if v is not None)

    def _apply_refresh(self, refreshes: list[Refresh]) -> Op[None]:
        ops = self._refresh_ops(refreshes, self._now())
        if ops:
            yield Command(self.payloads, "bulk_write", (ops,), {"ordered": False})

    def _refresh_loaded(
        self, items: list[Loaded], heads: dict[tuple[str, str, str], Head]
    ) -> Op[None]:
        groups: dict[tuple[str, str], Refresh] = {}
        for item in items:
            rec = item.record
            refresh = groups.setdefault((rec.thread_id, rec.ns), Refresh(rec.thread_id, rec.ns))
            refresh.ids.add(rec.checkpoint_id)
            refresh.blobs.update(
                blob_ref(ch, rec.versions[ch]) for ch in rec.present if ch in rec.versions
            )
            head = heads.get((rec.thread_id, rec.ns, rec.checkpoint_id))
            if head is not None:
                self._delta_refresh(refresh, head.delta, rec.checkpoint_id)
                for _version, runs in head.lists.values():
                    refresh.elements += runs
        yield from self._apply_refresh(list(groups.values()))

    # -- port: schema --------------------------------------------------------------

    def setup(self) -> Op[None]:
        """Create the indexes of :func:`index_specs` unless equal ones exist (key and options),
        and move checkpoints written in format 1 (graphkeep 0.1.x) into the thread collection."""
        specs = index_specs(self.prefix)
        ttl_ok = True
        for collection in (self.payloads, self.locks):
            wanted = [s for s in specs if s["collection"] == collection]
            ttl_ok = (yield from ensure_indexes(collection, wanted)) and ttl_ok
        self.ttl_index = ttl_ok
        if not ttl_ok:
            (log.warning if self.ttl else log.info)(
                "this MongoDB-compatible server has no TTL indexes: expired checkpoints are"
                " hidden from reads but stay stored until purge_expired() removes them"
            )
        yield from self._migrate()

    def _migrate(self) -> Op[None]:
        """Rewrite what format 1 (graphkeep 0.1.x) stored: its checkpoints, kept in
        ``<prefix>_checkpoints``, move into the thread collection (then that collection is
        dropped), and its payload documents (long ``_id``, named fields) are rewritten in
        the format-2 layout. Idempotent and resumable: each new document is written before
        its old one is deleted, and the two never collide in the unique index (a format-2
        head has no ``part``, a tail's ``part`` is ``<gen>/<n>``, not ``<gen>:<n>``), so a
        reader finds the payload under either layout meanwhile. Stop 0.1.x writers
        first: what they write after this is not read."""
        # payload documents (the ones with a ``data`` field) in place, then checkpoints
        moved = yield from self._rewrite(
            self.payloads, {"data": {"$exists": True}}, upgrade_payload
        )
        found = yield Command(None, "list_collection_names", (), {"filter": {"name": self.legacy}})
        if found:
            moved += yield from self._rewrite(self.legacy, {}, upgrade_checkpoint)
            yield Command(None, "drop_collection", (self.legacy,))
        if moved:
            self.heads = HeadCache(self.heads.size)
            log.info("rewrote %d format-1 documents of %s in format %d", moved, self.prefix, FORMAT)

    def _rewrite(
        self,
        source: str,
        match: dict[str, Any],
        upgrade: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> Op[int]:
        """Format-1 documents of ``source`` matching ``match``, rewritten into the payloads
        collection: new document first, then the old one deleted, in ``_id`` order (an
        index walk on MongoDB, never a rescan), so an interrupted run resumes."""
        moved = 0
        last: Any = None
        while True:
            query = dict(match) if last is None else {**match, "_id": {"$gt": last}}
            docs = yield Command(
                source, "find", (query,), {"sort": [("_id", 1)], "limit": MIGRATE_BATCH}
            )
            if not docs:
                return moved
            ops = [
                ReplaceOne(self._key({"_id": u["_id"]}, u["thread_id"]), u, upsert=True)
                for u in map(upgrade, docs)
            ]
            yield Command(self.payloads, "bulk_write", (ops,), {"ordered": False})
            ids = [d["_id"] for d in docs]
            yield Command(source, "delete_many", ({"_id": {"$in": ids}},))
            moved += len(docs)
            last = ids[-1]

    # -- port: writes --------------------------------------------------------------

    def put_checkpoint(self, record: CheckpointRecord, blobs: list[BlobRecord]) -> Op[None]:
        """ONE ordered ``update`` command: elements and blobs (and chunks), the expiry
        refreshes, then the checkpoint document last. An ordered batch stops at its
        first error, so no reader ever finds the checkpoint without its values."""
        now = self._now()
        expires_at = self._expiry(now)
        element_expires_at = self._element_expiry(now)
        t, ns, cid = record.thread_id, record.ns, record.checkpoint_id
        ops: list[Any] = []
        written: dict[str, Typed] = {}
        for blob in blobs:
            if blob.channel == ELEMENT_CHANNEL:
                ops += self._blob_ops(t, ns, blob, element_expires_at)
            else:
                ops += self._blob_ops(t, ns, blob, expires_at)
                written[blob.channel] = blob.value
        lists, complete = self._lists_for(record, written)
        delta: DeltaMap = {}
        if expires_at is not None:
            delta = yield from self._delta_for(record, now)
            refresh = Refresh(t, ns)
            refresh.blobs.update(
                blob_ref(ch, record.versions[ch])
                for ch in record.present
                if ch not in written and ch in record.versions
            )
            if record.parent_id:
                self._delta_refresh(refresh, delta, record.parent_id)
            for _version, runs in lists.values():
                refresh.elements += runs
            refresh.all_elements = not complete  # unknown lists: refresh every element
            ops += self._refresh_ops([refresh], now)
        doc, chunked = self._checkpoint_doc(record, expires_at, delta, lists)
        if chunked is not None:
            ops += self._chunked_checkpoint_ops(t, ns, cid, chunked, expires_at)
        ops.append(ReplaceOne(self._checkpoint_key(t, ns, cid), doc, upsert=True))
        yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})
        summary = Summary(
            ns,
            cid,
            record.parent_id,
            dict(record.versions),
            list(record.present),
            list(record.needs_history),
            record.run_id,
        )
        self.heads.put((t, ns, cid), Head(summary, delta, lists, complete))

    def _lists_for(
        self, record: CheckpointRecord, written: Mapping[str, Typed]
    ) -> tuple[ListMap, bool]:
        """The list channels of a new checkpoint (written now, or carried over from its
        parent's head when this process knows it), and whether that is all of them."""
        parent = None
        if record.parent_id:
            parent = self.heads.get((record.thread_id, record.ns, record.parent_id))
        lists: ListMap = {}
        complete = True
        for ch in record.present:
            version = record.versions.get(ch)
            if version is None:
                continue
            value = written.get(ch)
            if value is not None:
                if is_manifest(value):
                    lists[ch] = (version, manifest_runs(value))
                continue
            known = parent.lists.get(ch) if parent is not None else None
            if known is not None and known[0] == version:
                lists[ch] = known
            elif not (
                parent is not None
                and parent.complete
                and ch in parent.summary.present
                and parent.summary.versions.get(ch) == version
            ):
                complete = False
        return lists, complete

    def _delta_for(self, record: CheckpointRecord, now: datetime) -> Op[DeltaMap]:
        """Where the history of each DeltaChannel the new checkpoint rebuilds starts."""
        needed = [ch for ch in record.needs_history if ch not in record.present]
        if not needed or not record.parent_id:
            return {}
        t, ns = record.thread_id, record.ns
        parent = self.heads.get((t, ns, record.parent_id))
        if parent is None:
            docs = yield self._find(
                self.payloads,
                {"thread_id": t, "ns": ns, "kind": KIND_CP, "ref": record.parent_id},
                projection=SUMMARY_FIELDS,
                limit=1,
            )
            if not docs:
                return {}  # parent gone: nothing left to keep alive
            parent = head_of(docs[0])
            self.heads.put((t, ns, record.parent_id), parent)
        p = parent.summary
        delta: DeltaMap = {}
        unknown = []
        for ch in needed:
            if ch in p.present and ch in p.versions:
                delta[ch] = (p.checkpoint_id, p.versions[ch])
            elif ch in parent.delta:
                delta[ch] = parent.delta[ch]
            elif ch not in p.versions or not p.parent_id:
                delta[ch] = (p.checkpoint_id, None)
            else:
                unknown.append(ch)
        if unknown:  # the parent was written without bookkeeping: walk its ancestors once
            summaries = _Summaries()
            ancestors, seeds = yield from self._walk(t, ns, p.parent_id, unknown, summaries, now)
            floor = ancestors[-1].checkpoint_id if ancestors else p.checkpoint_id
            for ch in unknown:
                delta[ch] = seeds.get(ch, (floor, None))
        return delta

    def put_writes(
        self, thread_id: str, ns: str, checkpoint_id: str, writes: list[WriteRecord]
    ) -> Op[None]:
        expires_at = self._expiry(self._now())
        ops: list[Any] = []
        for w in writes:
            ops += self._write_ops(thread_id, ns, checkpoint_id, w, expires_at, overwrite=w.special)
        yield Command(self.payloads, "bulk_write", (ops,), {"ordered": False})

    # -- port: reads ---------------------------------------------------------------

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        now = self._now()
        match: dict[str, Any] = {"thread_id": thread_id, "ns": ns, "kind": KIND_CP}
        if checkpoint_id is not None:
            match["ref"] = checkpoint_id
        docs = yield self._find(
            self.payloads,
            conjunction([match, live(now)]),
            sort=[("ref", -1)],
            limit=1,
        )
        if not docs:
            return None
        items = yield from self._attach(docs, now)
        return items[0] if items else None

    def _attach(self, docs: list[Mapping[str, Any]], now: datetime) -> Op[list[Loaded]]:
        """Checkpoint documents -> Loaded, with the writes, blobs and list elements of all
        of them in ONE find (elements by the runs each document's ``lists`` field names)."""
        wanted: dict[tuple[str, str], tuple[set[str], set[str], list[Run]]] = {}
        for doc in docs:
            ids, refs, runs = wanted.setdefault((doc["thread_id"], doc["ns"]), (set(), set(), []))
            ids.add(doc["ref"])
            heading = heading_of(doc)
            versions = heading.versions
            present = [ch for ch in heading.present if ch in versions]
            refs.update(blob_ref(ch, versions[ch]) for ch in present)
            for ch, (listed, named) in heading.lists.items():
                if ch in present and versions[ch] == listed:
                    runs += named
        clauses: list[dict[str, Any]] = []
        for (t, ns), (ids, refs, runs) in wanted.items():
            clauses.append(
                {
                    "thread_id": t,
                    "ns": ns,
                    "kind": {"$in": WRITE_KINDS},
                    "ref": {"$in": sorted(ids)},
                }
            )
            if refs:
                clauses.append(
                    {"thread_id": t, "ns": ns, "kind": KIND_BLOB, "ref": {"$in": sorted(refs)}}
                )
            clauses += element_clauses(t, ns, runs)
        found = yield self._find(
            self.payloads, conjunction([disjunction(clauses) or {}, live(now)])
        )
        writes: dict[tuple[str, str, str], list[WriteRecord]] = {}
        blobs: dict[tuple[str, str, str], Typed] = {}
        elements: dict[tuple[str, str], dict[str, Typed]] = {}
        chunks: dict[tuple[str, str, str], bytes] = {}
        for t, ns, kind, ref, head, data in _payloads(found):
            if kind == KIND_WRITE:
                writes.setdefault((t, ns, ref), []).append(_write(head, data))
            elif kind == KIND_BLOB:
                element = element_key_of(ref)
                if element is None:
                    blobs[(t, ns, ref)] = Typed(payload_type(head), data)
                else:
                    elements.setdefault((t, ns), {})[element] = Typed(payload_type(head), data)
            elif kind == KIND_CHECKPOINT:
                chunks[(t, ns, ref)] = data
        items: list[Loaded] = []
        heads: dict[tuple[str, str, str], Head] = {}
        for doc in docs:
            key = (doc["thread_id"], doc["ns"], doc["ref"])
            record = _record(doc, chunks.get(key))
            if record is None:
                continue
            values = {}
            for ch in record.present:
                version = record.versions.get(ch)
                blob = blobs.get((key[0], key[1], blob_ref(ch, version))) if version else None
                if blob is not None:
                    values[ch] = blob
            items.append(Loaded(record, values, writes.get(key, []), elements.get(key[:2], {})))
            heads[key] = self._loaded_head(doc, values)
            self.heads.put(key, heads[key])
        if self.refresh_on_read and items:
            yield from self._refresh_loaded(items, heads)
        return items

    @staticmethod
    def _loaded_head(doc: Mapping[str, Any], values: Mapping[str, Typed]) -> Head:
        """The head of a loaded checkpoint; its list channels are known from the values
        read (complete when every present channel's value was found)."""
        head = head_of(doc)
        s = head.summary
        lists: ListMap = {}
        for ch in s.present:
            value = values.get(ch)
            if value is not None and is_manifest(value):
                version = s.versions[ch]
                known = head.lists.get(ch)
                same = known is not None and known[0] == version
                lists[ch] = known if same and known else (version, manifest_runs(value))
        complete = all(ch in values for ch in s.present if ch in s.versions)
        return replace(head, lists=lists, complete=complete)

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        """ONE find: list elements as index ranges of ``ref`` per run, other blobs by ``$in``."""
        if not keys:
            return {}
        by_ns: dict[str, tuple[list[str], list[str]]] = {}
        for ns, channel, version in keys:
            refs, element_keys = by_ns.setdefault(ns, ([], []))
            if channel == ELEMENT_CHANNEL:
                element_keys.append(version)
            else:
                refs.append(blob_ref(channel, version))
        clauses: list[dict[str, Any]] = []
        for ns, (refs, element_keys) in by_ns.items():
            clauses += element_clauses(thread_id, ns, key_runs(element_keys))
            for batch in in_batches(sorted(set(refs))):
                clauses.append(
                    {"thread_id": thread_id, "ns": ns, "kind": KIND_BLOB, "ref": {"$in": batch}}
                )
        found = yield self._find(
            self.payloads, conjunction([disjunction(clauses) or {}, live(self._now())])
        )
        wanted = set(keys)
        got: dict[tuple[str, str, str], Typed] = {}
        for _t, ns, kind, ref, head, data in _payloads(found):
            if kind != KIND_BLOB:
                continue
            key = (ns, *parse_blob_ref(ref))
            if key in wanted:
                got[key] = Typed(payload_type(head), data)
        return got

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        now = self._now()
        keys = ["ref"]
        match: dict[str, Any] = {"kind": KIND_CP}
        if query.thread_id is None:
            keys.append("thread_id")
        else:
            match["thread_id"] = query.thread_id
        if query.ns is None:
            keys.append("ns")
        else:
            match["ns"] = query.ns
        if query.checkpoint_id is not None:
            match["ref"] = query.checkpoint_id
        clauses = [match, live(now), *metadata_filter(query.filter)]
        if query.before is not None:
            clauses.append({"ref": {"$lt": query.before}})
        if cursor is not None:
            clauses.append(keyset_after(keys, cursor))
        docs = yield self._find(
            self.payloads,
            conjunction(clauses),
            sort=[(k, -1) for k in keys],
            limit=page_size,
        )
        if not docs:
            return [], None
        items = yield from self._attach(docs, now)
        next_cursor = tuple(docs[-1][k] for k in keys) if len(docs) == page_size else None
        return items, next_cursor

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]:
        now = self._now()
        match: dict[str, Any] = {"thread_id": thread_id, "ns": ns, "kind": KIND_CP}
        if checkpoint_id is not None:
            match["ref"] = {"$lte": checkpoint_id}
        docs = yield self._find(
            self.payloads,
            conjunction([match, live(now)]),
            projection=SUMMARY_FIELDS,
            sort=[("ref", -1)],
            limit=CHAIN_PAGE + 1,
        )
        if not docs or (checkpoint_id is not None and docs[0]["ref"] != checkpoint_id):
            return Chain(None, [], {}, {})
        target = head_of(docs[0])
        target_id = target.summary.checkpoint_id
        summaries = _Summaries()
        summaries.add_page(target_id, docs, full=len(docs) == CHAIN_PAGE + 1)
        ancestors, seeds = yield from self._walk(
            thread_id, ns, target.summary.parent_id, channels, summaries, now
        )
        if not ancestors:
            return Chain(target_id, [], {}, {})
        seed_refs = sorted({blob_ref(ch, v) for ch, (_, v) in seeds.items() if v is not None})
        clauses: list[dict[str, Any]] = [
            {
                "thread_id": thread_id,
                "ns": ns,
                "kind": KIND_WRITE,
                "ref": {"$in": [a.checkpoint_id for a in ancestors]},
                "channel": {"$in": list(dict.fromkeys(channels))},
            }
        ]
        if seed_refs:
            clauses.append(
                {"thread_id": thread_id, "ns": ns, "kind": KIND_BLOB, "ref": {"$in": seed_refs}}
            )
        found = yield self._find(
            self.payloads, conjunction([disjunction(clauses) or {}, live(now)])
        )
        writes: dict[str, list[WriteRecord]] = {}
        blobs: dict[tuple[str, str], Typed] = {}
        for _t, _ns, kind, ref, head, data in _payloads(found):
            if kind == KIND_WRITE:
                writes.setdefault(ref, []).append(_write(head, data))
            elif kind == KIND_BLOB:
                blobs[parse_blob_ref(ref)] = Typed(payload_type(head), data)
        if self.refresh_on_read:
            refresh = Refresh(thread_id, ns, ranges=[(ancestors[-1].checkpoint_id, target_id)])
            refresh.blobs.update(seed_refs)
            yield from self._apply_refresh([refresh])
        return Chain(target_id, ancestors, writes, blobs)

    def _walk(
        self,
        thread_id: str,
        ns: str,
        start: str | None,
        channels: Iterable[str],
        summaries: _Summaries,
        now: datetime,
    ) -> Op[tuple[list[Summary], dict[str, tuple[str, str | None]]]]:
        """Ancestors from ``start`` (inclusive) rootward until each channel has a stored value.

        Returns them with channel -> (seed checkpoint id, seed version). Summaries are
        read in pages of CHAIN_PAGE (ids <= the missing one, newest first), so a chain
        of up to CHAIN_PAGE ancestors costs at most one more query.
        """
        remaining = set(channels)
        ancestors: list[Summary] = []
        seeds: dict[str, tuple[str, str | None]] = {}
        seen: set[str] = set()
        cid = start
        while cid and remaining and cid not in seen:
            seen.add(cid)
            head = summaries.get(cid)
            if head is None:
                if summaries.covers(cid):
                    break
                docs = yield self._find(
                    self.payloads,
                    conjunction(
                        [
                            {
                                "thread_id": thread_id,
                                "ns": ns,
                                "kind": KIND_CP,
                                "ref": {"$lte": cid},
                            },
                            live(now),
                        ]
                    ),
                    projection=SUMMARY_FIELDS,
                    sort=[("ref", -1)],
                    limit=CHAIN_PAGE,
                )
                summaries.add_page(cid, docs, full=len(docs) == CHAIN_PAGE)
                head = summaries.get(cid)
                if head is None:
                    break
            s = head.summary
            ancestors.append(s)
            for ch in s.present:
                if ch in remaining and ch in s.versions:
                    seeds[ch] = (s.checkpoint_id, s.versions[ch])
                    remaining.discard(ch)
            cid = s.parent_id
        return ancestors, seeds

    # -- port: deletion, copy, admin -----------------------------------------------

    def delete_thread(self, thread_id: str) -> Op[None]:
        self.heads.drop_thread(thread_id)
        # ONE ordered command, checkpoints first: a reader never finds one whose values are gone
        ops = [
            DeleteMany({"thread_id": thread_id, "kind": KIND_CP}),
            DeleteMany({"thread_id": thread_id}),
        ]
        yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})

    def inventory(self, thread_id: str) -> Op[Inventory]:
        found = yield self._find(
            self.payloads,
            {"thread_id": thread_id},
            projection={**SUMMARY_FIELDS, "kind": 1},
        )
        summaries: list[Summary] = []
        write_keys: set[tuple[str, str]] = set()
        blob_keys: set[tuple[str, str, str]] = set()
        for doc in found:
            if doc["kind"] == KIND_CP:
                summaries.append(head_of(doc).summary)
            elif doc["kind"] in WRITE_KINDS:
                write_keys.add((doc["ns"], doc["ref"]))
            elif doc["kind"] == KIND_BLOB:
                blob_keys.add((doc["ns"], *parse_blob_ref(doc["ref"])))
        return Inventory(summaries, write_keys, blob_keys)

    def delete_records(
        self,
        thread_id: str,
        checkpoints: list[tuple[str, str]],
        blobs: list[tuple[str, str, str]],
    ) -> Op[None]:
        ids_by_ns: dict[str, list[str]] = {}
        for ns, cid in checkpoints:
            ids_by_ns.setdefault(ns, []).append(cid)
        refs_by_ns: dict[str, list[str]] = {}
        for ns, ch, version in blobs:
            refs_by_ns.setdefault(ns, []).append(blob_ref(ch, version))
        checkpoint_ops: list[Any] = []
        payload_ops: list[Any] = []
        for ns, ids in ids_by_ns.items():
            base = {"thread_id": thread_id, "ns": ns}
            for batch in in_batches(ids):
                checkpoint_ops.append(DeleteMany({**base, "kind": KIND_CP, "ref": {"$in": batch}}))
                # writes and chunked payloads of those checkpoints, every chunk included
                payload_ops.append(
                    DeleteMany({**base, "kind": {"$in": WRITE_KINDS}, "ref": {"$in": batch}})
                )
        for ns, refs in refs_by_ns.items():
            for batch in in_batches(refs):
                payload_ops.append(
                    DeleteMany(
                        {"thread_id": thread_id, "ns": ns, "kind": KIND_BLOB, "ref": {"$in": batch}}
                    )
                )
        if checkpoint_ops or payload_ops:
            # ONE ordered command, checkpoints first (see delete_thread)
            ops = checkpoint_ops + payload_ops
            yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})

    def find_runs(self, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]:
        found: dict[str, list[tuple[str, str]]] = {}
        for batch in in_batches([str(r) for r in run_ids]):
            docs = yield self._find(
                self.payloads,
                {"run_id": {"$in": batch}, "kind": KIND_CP},
                projection={"_id": 0, "thread_id": 1, "ns": 1, "ref": 1},
            )
            for doc in docs:
                found.setdefault(doc["thread_id"], []).append((doc["ns"], doc["ref"]))
        return found

    def export_thread(self, thread_id: str) -> Op[ThreadDump]:
        found = yield self._find(self.payloads, {"thread_id": thread_id})
        dump = ThreadDump([], [], [])
        docs = [d for d in found if d["kind"] == KIND_CP]
        chunks: dict[tuple[str, str], bytes] = {}
        for _t, ns, kind, ref, head, data in _payloads(d for d in found if d["kind"] != KIND_CP):
            if kind == KIND_WRITE:
                dump.writes.append((ns, ref, _write(head, data)))
            elif kind == KIND_BLOB:
                value = Typed(payload_type(head), data)
                dump.blobs.append((ns, BlobRecord(*parse_blob_ref(ref), value)))
            elif kind == KIND_CHECKPOINT:
                chunks[(ns, ref)] = data
        for doc in docs:
            record = _record(doc, chunks.get((doc["ns"], doc["ref"])))
            if record is not None:
                dump.checkpoints.append(record)
        return dump

    def import_thread(self, thread_id: str, dump: ThreadDump) -> Op[None]:
        now = self._now()
        expires_at = self._expiry(now)
        ops: list[Any] = []
        for ns, blob in dump.blobs:
            elements = blob.channel == ELEMENT_CHANNEL
            ops += self._blob_ops(
                thread_id, ns, blob, self._element_expiry(now) if elements else expires_at
            )
        for ns, cid, w in dump.writes:
            ops += self._write_ops(thread_id, ns, cid, w, expires_at, overwrite=True)
        manifests = {
            (ns, blob.channel, blob.version): blob.value
            for ns, blob in dump.blobs
            if is_manifest(blob.value)
        }
        checkpoint_ops: list[Any] = []
        for source in dump.checkpoints:
            record = source.renamed(thread_id)
            lists: ListMap = {}
            for ch in record.present:
                version = record.versions.get(ch, "")
                manifest = manifests.get((record.ns, ch, version))
                if manifest is not None:
                    lists[ch] = (version, manifest_runs(manifest))
            doc, chunked = self._checkpoint_doc(record, expires_at, {}, lists)
            if chunked is not None:
                ops += self._chunked_checkpoint_ops(
                    thread_id, record.ns, record.checkpoint_id, chunked, expires_at
                )
            key = self._checkpoint_key(thread_id, record.ns, record.checkpoint_id)
            checkpoint_ops.append(ReplaceOne(key, doc, upsert=True))
        if ops or checkpoint_ops:
            # values first, the checkpoints last, in one ordered command
            yield Command(self.payloads, "bulk_write", (ops + checkpoint_ops,), {"ordered": True})

    def list_threads(self, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]:
        match: dict[str, Any] = {"kind": KIND_CP}
        if cursor is not None:
            match["thread_id"] = {"$gt": cursor}
        pipeline = [
            {"$match": match},
            {"$group": {"_id": "$thread_id"}},
            {"$sort": {"_id": 1}},
            {"$limit": page_size},
        ]
        docs = yield Command(self.payloads, "aggregate", (pipeline,), {"batchSize": page_size})
        threads = [d["_id"] for d in docs]
        return threads, (threads[-1] if len(threads) == page_size else None)

    # -- port: watch ----------------------------------------------------------------

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        """``(ns, checkpoint_id)`` of the thread's checkpoints above ``above``, ascending.

        ONE ``find`` served by ``gk_thread_ns_kind_ref`` (see the module docstring),
        projecting ``ns`` and ``ref`` only (a covered query). Expired checkpoints a TTL
        monitor has not removed yet are listed too: the watcher loads each one like
        ``get_tuple``, which hides them.
        """
        match: dict[str, Any] = {"thread_id": thread_id}
        sort = [("ref", 1), ("ns", 1)]
        if ns is not None:
            match["ns"] = ns
            sort = [("ref", 1)]
        match["kind"] = KIND_CP
        if above is not None:
            match["ref"] = {"$gt": above}
        docs = yield self._find(
            self.payloads, match, projection=COMMIT_FIELDS, sort=sort, limit=limit
        )
        return [(doc["ns"], doc["ref"]) for doc in docs]

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        """The thread's highest checkpoint id (in ``ns``, or any when None): ONE ``find``
        sorted by ``ref`` descending with limit 1, on the same index as :meth:`commits`."""
        match: dict[str, Any] = {"thread_id": thread_id}
        if ns is not None:
            match["ns"] = ns
        match["kind"] = KIND_CP
        docs = yield self._find(
            self.payloads, match, projection=COMMIT_FIELDS, sort=[("ref", -1)], limit=1
        )
        return str(docs[0]["ref"]) if docs else None

    # -- port: per-thread lease ----------------------------------------------------
    # One document per held thread in ``<prefix>_locks`` (``_id`` = thread id), apart
    # from the thread's data so delete_thread or a TTL refresh never touches a lease.
    # Expiry uses the client's clock (no server-side clock in plain update documents
    # on every wire-compatible server): keep worker clocks in sync well within ``ttl``.

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        now = self._now()
        try:
            yield Command(
                self.locks,
                "update_one",
                (
                    # free, expired, or already ours (a retry after a lost reply)
                    {
                        "_id": thread_id,
                        "$or": [{"expires_at": {"$lte": now}}, {"token": {"$eq": token}}],
                    },
                    {"$set": {"token": token, "expires_at": now + timedelta(milliseconds=ttl_ms)}},
                ),
                {"upsert": True},
                retry_conflicts=False,
            )
        except DuplicateKeyError:
            return False  # a live lease exists: the upsert's insert collided with it
        return True

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        result = yield Command(self.locks, "delete_one", ({"_id": thread_id, "token": token},))
        return bool(result.deleted_count)

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        now = self._now()
        result = yield Command(
            self.locks,
            "update_one",
            (
                {"_id": thread_id, "token": token, "expires_at": {"$gt": now}},
                {"$set": {"expires_at": now + timedelta(milliseconds=ttl_ms)}},
            ),
        )
        return bool(result.matched_count)

    def purge_expired(self) -> Op[int]:
        """Delete expired documents now (for servers without a TTL monitor)."""
        expired = {"expires_at": {"$lte": self._now()}}
        # checkpoints first: a reader never finds a checkpoint whose values are gone
        ops = [DeleteMany({**expired, "kind": KIND_CP}), DeleteMany(expired)]
        result = yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})
        deleted = int(result.deleted_count)
        locks = yield Command(self.locks, "delete_many", (expired,))
        return deleted + int(locks.deleted_count)


def _payloads(
    found: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[str, str, str, str, Mapping[str, Any], bytes]]:
    """(thread, ns, kind, ref, head document, payload bytes) of each complete payload;
    chunks are reassembled, a payload still being written is left out."""
    for (t, ns, kind, ref, _sub), group in group_payloads(found).items():
        assembled = assemble(group)
        if assembled is not None:
            yield t, ns, kind, ref, assembled[0], assembled[1]


def _write(head: Mapping[str, Any], data: bytes) -> WriteRecord:
    if "y" in head:  # format 2: task id and index are in ``sub``
        task_id, idx = parse_write_sub(head["sub"])
        task_path = head.get("p", "")
    else:
        task_id, idx, task_path = head["task_id"], int(head["idx"]), head.get("task_path", "")
    return WriteRecord(
        task_id=task_id,
        idx=idx,
        channel=head["channel"],
        task_path=task_path,
        value=Typed(payload_type(head), data),
    )


def _record(doc: Mapping[str, Any], chunked: bytes | None) -> CheckpointRecord | None:
    heading = heading_of(doc)
    packed = chunked if heading.chunked else checkpoint_payload(doc)
    if packed is None:
        return None  # payload not (fully) written: treat as absent
    ctag, cdata, mtag, mdata = codec.unpackb(packed)
    metadata_doc: dict[str, Any] = dict(doc.get("metadata_doc") or {})
    for key in doc.get("metadata_opaque") or []:
        metadata_doc[key] = OPAQUE  # re-marked opaque if this record is stored again
    return CheckpointRecord(
        thread_id=doc["thread_id"],
        ns=doc["ns"],
        checkpoint_id=doc["ref"],
        parent_id=heading.parent_id,
        versions=heading.versions,
        present=heading.present,
        needs_history=heading.needs_history,
        run_id=doc.get("run_id"),
        checkpoint=Typed(ctag, bytes(cdata)),
        metadata=Typed(mtag, bytes(mdata)),
        metadata_doc=metadata_doc,
    )
