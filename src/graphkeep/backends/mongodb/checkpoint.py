"""The checkpoint port on MongoDB (:class:`MongoDBCheckpointPort`) and the two savers built on
it, :class:`MongoDBSaver` (``pymongo.MongoClient``) and :class:`AsyncMongoDBSaver`
(``pymongo.AsyncMongoClient``).

The port yields :class:`~graphkeep.backends.mongodb.requests.Command` requests; the
executors of :mod:`.client` run them. What a document looks like is in :mod:`.documents`
and :mod:`.upserts`, the indexes in :mod:`.schema`, the TTL in :mod:`.ttl`, heads and
the parent walk in :mod:`.heads` and :mod:`.ancestors`, leases in :mod:`.locks`, the
format-1 rewrite in :mod:`.migrate`. See docs/architecture.md.

Collections (``P`` = ``key_prefix``, default ``graphkeep``)
-----------------------------------------------------------
``P_payloads`` holds everything of a thread (format 2), told apart by ``kind``, so that
one ordered command writes a checkpoint with its values::

    {_id, thread_id, ns, kind, ref, sub, part, expires_at, ...}

Only the indexed and queried fields keep readable names; what only the client reads is
short-named or packed (FerretDB keeps a document as JSON with its field names and a type
schema, binary as base64: this layout stores W50 in about half the bytes of 0.1.x's).
``sub`` is left out when empty, ``part`` on heads (both index as null).

- ``kind: "cp"``, a checkpoint; ``ref`` = checkpoint id::

    {..., s: Binary,         # msgpack [format 2, parent_id, {channel: version}, present,
                             #   needs_history, delta {channel: [id, v]},
                             #   lists {channel: [version, [[epoch, lo, hi], ...]]}, chunked]
     d: Binary,              # msgpack [checkpoint tag, bytes, metadata tag, bytes] (exact)
     run_id,                 # indexed (sparse): delete_for_runs
     metadata_doc: {...}, metadata_opaque: [key, ...]}   # queryable copy (see below)

  ``delta`` is the DeltaChannel bookkeeping for the TTL, ``lists`` the element runs of
  its list channels; ``d`` is absent when the payload moved to chunk documents.
- ``kind: "blob"``, a channel value: ``ref`` = ``"<len(channel)>:<channel>:<version>"``;
  also ``y`` (type tag) and ``d`` (bytes, left out when empty). Stored once per (thread,
  ns, channel, version), only for channels in ``new_versions``. A list value is a small
  *manifest* blob plus one *element* blob per element (channel ``__graphkeep.element__``,
  version = element key; see :mod:`graphkeep.checkpoint.lists`), each stored once per thread.
- ``kind: "write"``: ``ref`` = checkpoint id, ``sub`` = ``"<len(task_id)>:<task_id>:<idx>"``;
  also ``channel`` (queried by the DeltaChannel history), ``p`` (task path, when set),
  ``y``, ``d``. Regular writes are insert-if-absent (``$setOnInsert`` upserts), special
  writes (idx < 0) replace; one ``bulk_write``.
- ``kind: "checkpoint"``: the packed checkpoint + metadata of a checkpoint too large to
  inline (``ref`` = checkpoint id).

One collection makes ``put`` ONE ordered ``update`` command: element and blob upserts,
expiry refreshes, then the checkpoint document last; an ordered batch stops at its first
error, so no reader ever finds a checkpoint whose values are missing (no transaction).
``get_tuple`` is two ``find`` commands: the checkpoint, then its writes, blobs *and* list
elements (read as index ranges of ``ref``, from the checkpoint's ``lists`` runs); FerretDB
1.24, our test server, has no ``$lookup``/``$unionWith``. A checkpoint whose list
channels its writer did not know (a new process putting with the list unchanged) has no
``lists`` entry for them and costs one more find to read.

Format 1 (graphkeep 0.1.x) kept checkpoints in ``P_checkpoints`` and spelled every field
out (``_id`` the identity itself, ``type``/``data``/``count``/``gen``, ``channel`` and
``version`` on blobs, ``task_id``/``idx``/``task_path`` on writes, chunk tails
``part: "<gen>:<n>"``). ``setup()`` rewrites it: payload documents in place (new
document first, then the old one deleted; the two never collide in the unique index, and
readers accept both layouts meanwhile), checkpoints moved into ``P_payloads``, the
emptied ``P_checkpoints`` dropped; resumable. Stop 0.1.x writers before upgrading: what
they write afterwards is not read.

``P_locks`` holds the per-thread leases of ``saver.lock()`` (``_id`` = thread id, a
token and ``expires_at``), apart from the thread's data.

Indexes (``MongoDBSaver.schema()`` returns them as dicts; ``setup()`` creates them
idempotently, comparing key *and* options; ``setup=False`` skips it)::

    P_payloads     gk_thread_ns_kind_ref    {thread_id, ns, kind, ref, sub, part}  unique
                   gk_run_id                {run_id}  sparse (only checkpoints carry it)
                   gk_expires_at            {expires_at}  expireAfterSeconds: 0 (TTL)
    P_locks        gk_expires_at            {expires_at}  expireAfterSeconds: 0 (TTL)

Every document has a deterministic ``_id``: a 128-bit digest (22 base64url characters) of
its identity, length-prefixed: ``c``, thread, ns, checkpoint id for a checkpoint; ``p``,
thread, ns, kind, ref, sub, part for a payload. Every upsert names its document by ``_id``, the
primary key that every MongoDB-compatible server looks up through an index (FerretDB's
SQLite handler pushes down no other filter, so upserts on the compound key would scan
the collection there). Queries use the compound indexes above.

Sharding: shard ``P_payloads`` on ``{thread_id: 1}`` and pass
``sharded=True`` (``graphkeep.connect(url, sharded=True)``): MongoDB requires an upsert
on a sharded collection to name the full shard key, so the upserts then filter on
``{_id, thread_id}``. Every unique index leads with ``thread_id``, so MongoDB can
enforce it on this ranged shard key, every query carries ``thread_id`` and every
operation of a thread targets one shard. A hashed ``{thread_id: "hashed"}`` key spreads
hot threads more evenly, but MongoDB cannot enforce compound unique indexes there:
create the ``schema()`` indexes without ``unique`` yourself and pass ``setup=False``.
Nothing is lost: the ``_id`` encodes the thread, so all copies of one record would live
on the thread's shard, where ``_id`` is unique.

The 16 MB guard: our own chunk documents, not GridFS
---------------------------------------------------
Any payload (blob, write, or checkpoint + metadata) over ``chunk_size`` (8 MiB) is
split into a *head* document (no ``part``, first chunk, count ``n``, ``g`` = digest of
the whole payload) and tail documents (``part: "<g>/<i>"``) in the same payloads
collection, under the same ``ref``. So the queries that fetch a checkpoint's writes and
blobs fetch their chunks too (no extra round trip), deleting by ``ref`` deletes every
chunk, and the TTL refresh of a ``ref`` covers every chunk. A reader assembles only the
head's generation, so a retried or overwritten payload never mixes chunks; an incomplete
payload reads as not yet written. GridFS would need two more collections, a second
query per file and its own deletion and expiry, and knows nothing of threads.
Documents stay far below 16 MiB: identity fields are bounded (1 KiB ids, 64 KiB task
paths), the queryable metadata copy is capped at 1 MiB.

Metadata filters
----------------
``metadata_doc`` is a plain BSON copy of the metadata, so ``list(filter=...)`` runs on the
server for any top-level key, as ``{"metadata_doc.<key>": {"$eq": value}}`` (values are
always wrapped in ``$eq``, never operators). Keys containing "." or "$" are left out of
the copy and never pushed down; values a document cannot hold portably (ints beyond
int64, NaN/inf, arrays nested directly in arrays, keys with "."/"$" inside) are listed
in ``metadata_opaque`` so the server still selects those checkpoints. The saver
re-checks every filter in Python, and the serialized ``metadata`` is the source of truth.

TTL
---
``ttl`` sets an absolute ``expires_at`` on every document written; a TTL index with
``expireAfterSeconds: 0`` lets MongoDB delete it. The window slides per thread without
touching the whole thread: each ``put`` writes fresh expiries on its documents and, in
the same command, extends what the new checkpoint needs: the blobs of unchanged
channels, the list elements its manifests name, and, for DeltaChannels rebuilt from
history, the ancestors (checkpoints, writes, chunks) from the nearest stored value up to
the parent plus that seed value. List elements get 1.5 ``ttl`` and are refreshed only
once less than one ``ttl`` is left (a filter on ``expires_at``), so a growing list is
not rewritten at every put and an element never expires before a checkpoint naming it
(it may outlive its last one by ttl/2). A put whose writer does not know the list
channels of an unchanged value (cold cache) refreshes every element of the namespace.
Where that history starts is kept in each checkpoint's ``delta`` field and in a small
in-process cache, so ``put`` reads its parent only after a restart (one extra find).
``put_writes`` stamps its writes. Old history a live head does not need expires on
schedule. Documents past ``expires_at`` are hidden from every read even before the TTL
monitor (which runs about once a minute) deletes them. Servers without TTL indexes
(FerretDB 1.x) get a plain index instead and a warning; call ``purge_expired()``
periodically there. ``refresh_ttl_on_read`` extends what each read returns (one more
command per read).

Errors: a lost server raises :class:`graphkeep.errors.StorageUnavailable` naming the URL
(password masked). Every request is idempotent, so quick connection drops and upsert
races on a unique key are retried with backoff; after the driver itself waited for a
server, the error is raised at once. ``from_url`` sets ``serverSelectionTimeoutMS`` to
10 s unless the URL sets it (PyMongo's default is 30 s).

Wire-compatible servers: everything used here exists on MongoDB and on FerretDB 1.24;
the code avoids ``$lookup``, pipeline updates, ``collMod``, partial and hashed indexes
and never stores nested arrays, NaN or dotted keys. Where FerretDB differs, the code
adapts without changing behaviour on MongoDB: no TTL indexes (see TTL), and reply
batches not capped at 16 MiB (a reply over the 48 MB wire limit is re-read in small
batches). FerretDB 1.x answers every query but ``_id`` equality by scanning the
collection, so it gets slow as a collection grows; MongoDB uses the indexes above.

Round trips: ``put`` 1 command (one ordered batch), ``put_writes`` 1, ``get_tuple`` 2
(+1 for list channels its checkpoint does not name), a ``list`` page 2 (writes, blobs and
elements of the whole page in one ``find``), ``get_delta_channel_history`` 2 for up to
1,000 ancestors, ``delete_thread`` 1. Multi-document transactions are never used: blobs
and chunks are written before the checkpoint and deleted after it, in ordered batches,
so a reader never sees a checkpoint whose values are missing.

Watching a thread
-----------------
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
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, cast

import pymongo
from pymongo import DeleteMany, ReplaceOne, UpdateMany

from graphkeep.backends.mongodb.ancestors import CHAIN_PAGE, HeadPages, read_ancestors
from graphkeep.backends.mongodb.client import (
    DEFAULT_DB,
    async_client,
    async_executor,
    check_db_name,
    database_from_url,
    describe,
    sync_client,
    sync_executor,
)
from graphkeep.backends.mongodb.documents import (
    CHUNK_SIZE,
    FORMAT,
    KIND_BLOB,
    KIND_CHECKPOINT,
    KIND_CP,
    KIND_WRITE,
    Run,
    blob_ref,
    check_prefix,
    checkpoint_record,
    complete_payloads,
    conjunction,
    disjunction,
    element_clauses,
    element_key_of,
    heading_of,
    in_batches,
    key_runs,
    keyset_after,
    live,
    metadata_filter,
    parse_blob_ref,
    parse_write_sub,
    payload_type,
    write_record,
)
from graphkeep.backends.mongodb.effects import MongoDBEffectsPort
from graphkeep.backends.mongodb.heads import (
    SUMMARY_FIELDS,
    DeltaMap,
    Head,
    HeadCache,
    ListMap,
    head_of,
    manifest_runs,
)
from graphkeep.backends.mongodb.locks import acquire_lease, extend_lease, release_lease
from graphkeep.backends.mongodb.migrate import legacy_checkpoints, migrate
from graphkeep.backends.mongodb.requests import Command, find
from graphkeep.backends.mongodb.schema import collection_names, ensure_indexes, index_specs
from graphkeep.backends.mongodb.ttl import Expiry, Refresh, loaded_refreshes
from graphkeep.backends.mongodb.upserts import Upserts
from graphkeep.checkpoint.hot import alayered, hot_options, layered
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest
from graphkeep.checkpoint.port import INTERRUPT_IDX, CheckpointPort
from graphkeep.checkpoint.records import (
    HOLDS_CHECKPOINT,
    HOLDS_VALUE,
    HOLDS_WRITES,
    Activity,
    BlobRecord,
    Chain,
    CheckpointKeys,
    CheckpointRecord,
    Expiring,
    Inventory,
    ListQuery,
    Loaded,
    Summary,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, ttl_seconds
from graphkeep.effects.ledger import AsyncLedger, SyncLedger
from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.port import Op
from graphkeep.port.factory import aopened, opened
from graphkeep.port.pools import pool_options

__all__ = ["AsyncMongoDBSaver", "MongoDBCheckpointPort", "MongoDBSaver"]

log = logging.getLogger("graphkeep.mongodb")

#: what ``commits`` reads of a checkpoint document: only fields of the index (covered)
COMMIT_FIELDS: dict[str, Any] = {"_id": 0, "ns": 1, "ref": 1}
WRITE_KINDS = [KIND_WRITE, KIND_CHECKPOINT]


def _epoch(value: Any) -> float | None:
    """Epoch seconds of a stored ``expires_at`` (pymongo hands back naive UTC datetimes)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    stamp: float = value.timestamp()
    return stamp


class MongoDBCheckpointPort(CheckpointPort):
    """The checkpoint port on MongoDB. ``ttl`` (seconds) slides per thread on every write."""

    probes = True

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
        self.upserts = Upserts(chunk_size, sharded)
        self.expiry = Expiry(self.ttl)
        self.heads = HeadCache()
        #: whether the server keeps TTL indexes (None until setup() ran)
        self.ttl_index: bool | None = None

    # -- helpers -------------------------------------------------------------------

    @staticmethod
    def _now() -> datetime:
        return datetime.now(timezone.utc)

    def schema(self) -> list[dict[str, Any]]:
        return index_specs(self.prefix)

    def _apply_refresh(self, refreshes: list[Refresh]) -> Op[None]:
        ops = self.expiry.refresh_ops(refreshes, self._now())
        if ops:
            yield Command(self.payloads, "bulk_write", (ops,), {"ordered": False})

    def _refresh_loaded(
        self, items: list[Loaded], heads: dict[tuple[str, str, str], Head]
    ) -> Op[None]:
        yield from self._apply_refresh(loaded_refreshes(items, heads))

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
        moved = yield from migrate(self.payloads, self.legacy, self.upserts.key)
        if moved:
            self.heads = HeadCache(self.heads.size)
            log.info("rewrote %d format-1 documents of %s in format %d", moved, self.prefix, FORMAT)

    # -- port: writes --------------------------------------------------------------

    def put_checkpoint(self, record: CheckpointRecord, blobs: list[BlobRecord]) -> Op[None]:
        """ONE ordered ``update`` command: elements and blobs (and chunks), the expiry
        refreshes, then the checkpoint document last. An ordered batch stops at its
        first error, so no reader ever finds the checkpoint without its values."""
        now = self._now()
        expires_at = self.expiry.documents(now)
        element_expires_at = self.expiry.elements(now)
        t, ns, cid = record.thread_id, record.ns, record.checkpoint_id
        ops: list[Any] = []
        written: dict[str, Typed] = {}
        for blob in blobs:
            if blob.channel == ELEMENT_CHANNEL:
                ops += self.upserts.blob(t, ns, blob, element_expires_at)
            else:
                ops += self.upserts.blob(t, ns, blob, expires_at)
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
                refresh.add_delta(delta, record.parent_id)
            for _version, runs in lists.values():
                refresh.elements += runs
            refresh.all_elements = not complete  # unknown lists: refresh every element
            ops += self.expiry.refresh_ops([refresh], now)
        doc, chunked = self.upserts.checkpoint_doc(record, expires_at, delta, lists)
        if chunked is not None:
            ops += self.upserts.chunked_checkpoint(t, ns, cid, chunked, expires_at)
        ops.append(ReplaceOne(self.upserts.checkpoint_key(t, ns, cid), doc, upsert=True))
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
            docs = yield find(
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
            found, seeds = yield from read_ancestors(
                self.payloads, t, ns, p.parent_id, unknown, HeadPages(), now
            )
            floor = found[-1].checkpoint_id if found else p.checkpoint_id
            for ch in unknown:
                delta[ch] = seeds.get(ch, (floor, None))
        return delta

    def put_writes(
        self, thread_id: str, ns: str, checkpoint_id: str, writes: list[WriteRecord]
    ) -> Op[None]:
        expires_at = self.expiry.documents(self._now())
        ops: list[Any] = []
        for w in writes:
            ops += self.upserts.write(
                thread_id, ns, checkpoint_id, w, expires_at, overwrite=w.special
            )
        yield Command(self.payloads, "bulk_write", (ops,), {"ordered": False})

    # -- port: reads ---------------------------------------------------------------

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        now = self._now()
        match: dict[str, Any] = {"thread_id": thread_id, "ns": ns, "kind": KIND_CP}
        if checkpoint_id is not None:
            match["ref"] = checkpoint_id
        docs = yield find(
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
        found = yield find(self.payloads, conjunction([disjunction(clauses) or {}, live(now)]))
        writes: dict[tuple[str, str, str], list[WriteRecord]] = {}
        blobs: dict[tuple[str, str, str], Typed] = {}
        elements: dict[tuple[str, str], dict[str, Typed]] = {}
        chunks: dict[tuple[str, str, str], bytes] = {}
        for t, ns, kind, ref, head, data in complete_payloads(found):
            if kind == KIND_WRITE:
                writes.setdefault((t, ns, ref), []).append(write_record(head, data))
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
            record = checkpoint_record(doc, chunks.get(key))
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
        found = yield find(
            self.payloads, conjunction([disjunction(clauses) or {}, live(self._now())])
        )
        wanted = set(keys)
        got: dict[tuple[str, str, str], Typed] = {}
        for _t, ns, kind, ref, head, data in complete_payloads(found):
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
        docs = yield find(
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
        docs = yield find(
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
        pages = HeadPages()
        pages.add_page(target_id, docs, full=len(docs) == CHAIN_PAGE + 1)
        ancestors, seeds = yield from read_ancestors(
            self.payloads, thread_id, ns, target.summary.parent_id, channels, pages, now
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
        found = yield find(self.payloads, conjunction([disjunction(clauses) or {}, live(now)]))
        writes: dict[str, list[WriteRecord]] = {}
        blobs: dict[tuple[str, str], Typed] = {}
        for _t, _ns, kind, ref, head, data in complete_payloads(found):
            if kind == KIND_WRITE:
                writes.setdefault(ref, []).append(write_record(head, data))
            elif kind == KIND_BLOB:
                blobs[parse_blob_ref(ref)] = Typed(payload_type(head), data)
        if self.refresh_on_read:
            refresh = Refresh(thread_id, ns, ranges=[(ancestors[-1].checkpoint_id, target_id)])
            refresh.blobs.update(seed_refs)
            yield from self._apply_refresh([refresh])
        return Chain(target_id, ancestors, writes, blobs)

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
        # ``_id`` and ``expires_at`` ride along: each document's expiry, for the check
        found = yield find(
            self.payloads,
            {"thread_id": thread_id},
            projection={**SUMMARY_FIELDS, "_id": 1, "kind": 1, "expires_at": 1},
        )
        summaries: list[Summary] = []
        write_keys: set[tuple[str, str]] = set()
        blob_keys: set[tuple[str, str, str]] = set()
        expiries: list[Expiring] = []
        for doc in found:
            at = _epoch(doc.get("expires_at"))
            if doc["kind"] == KIND_CP:
                summary = head_of(doc).summary
                summaries.append(summary)
                expiries.append(
                    Expiring(doc["_id"], at, HOLDS_CHECKPOINT, summary.ns, summary.checkpoint_id)
                )
            elif doc["kind"] in WRITE_KINDS:
                write_keys.add((doc["ns"], doc["ref"]))
                # a pending write, or the payload of a chunked checkpoint
                holds = HOLDS_WRITES if doc["kind"] == KIND_WRITE else HOLDS_CHECKPOINT
                expiries.append(Expiring(doc["_id"], at, holds, doc["ns"], doc["ref"]))
            elif doc["kind"] == KIND_BLOB:
                ns, (channel, version) = doc["ns"], parse_blob_ref(doc["ref"])
                blob_keys.add((ns, channel, version))
                expiries.append(
                    Expiring(doc["_id"], at, HOLDS_VALUE, ns, channel=channel, version=version)
                )
        return Inventory(summaries, write_keys, blob_keys, expiries)

    def rearm(self, thread_id: str, refs: list[Any], at: float | None) -> Op[None]:
        update: dict[str, Any] = (
            {"$unset": {"expires_at": ""}}
            if at is None
            else {"$set": {"expires_at": datetime.fromtimestamp(at, timezone.utc)}}
        )
        ops = [
            UpdateMany({"thread_id": thread_id, "_id": {"$in": batch}}, update)
            for batch in in_batches(list(refs))
        ]
        if ops:
            yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})

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
            docs = yield find(
                self.payloads,
                {"run_id": {"$in": batch}, "kind": KIND_CP},
                projection={"_id": 0, "thread_id": 1, "ns": 1, "ref": 1},
            )
            for doc in docs:
                found.setdefault(doc["thread_id"], []).append((doc["ns"], doc["ref"]))
        return found

    def export_thread(self, thread_id: str) -> Op[ThreadDump]:
        found = yield find(self.payloads, {"thread_id": thread_id})
        dump = ThreadDump([], [], [])
        docs = [d for d in found if d["kind"] == KIND_CP]
        chunks: dict[tuple[str, str], bytes] = {}
        payloads = complete_payloads(d for d in found if d["kind"] != KIND_CP)
        for _t, ns, kind, ref, head, data in payloads:
            if kind == KIND_WRITE:
                dump.writes.append((ns, ref, write_record(head, data)))
            elif kind == KIND_BLOB:
                value = Typed(payload_type(head), data)
                dump.blobs.append((ns, BlobRecord(*parse_blob_ref(ref), value)))
            elif kind == KIND_CHECKPOINT:
                chunks[(ns, ref)] = data
        for doc in docs:
            record = checkpoint_record(doc, chunks.get((doc["ns"], doc["ref"])))
            if record is not None:
                dump.checkpoints.append(record)
        return dump

    def import_thread(self, thread_id: str, dump: ThreadDump) -> Op[None]:
        now = self._now()
        expires_at = self.expiry.documents(now)
        ops: list[Any] = []
        for ns, blob in dump.blobs:
            elements = blob.channel == ELEMENT_CHANNEL
            ops += self.upserts.blob(
                thread_id, ns, blob, self.expiry.elements(now) if elements else expires_at
            )
        for ns, cid, w in dump.writes:
            ops += self.upserts.write(thread_id, ns, cid, w, expires_at, overwrite=True)
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
            doc, chunked = self.upserts.checkpoint_doc(record, expires_at, {}, lists)
            if chunked is not None:
                ops += self.upserts.chunked_checkpoint(
                    thread_id, record.ns, record.checkpoint_id, chunked, expires_at
                )
            key = self.upserts.checkpoint_key(thread_id, record.ns, record.checkpoint_id)
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
        docs = yield find(self.payloads, match, projection=COMMIT_FIELDS, sort=sort, limit=limit)
        return [(doc["ns"], doc["ref"]) for doc in docs]

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        """The thread's highest checkpoint id (in ``ns``, or any when None): ONE ``find``
        sorted by ``ref`` descending with limit 1, on the same index as :meth:`commits`."""
        match: dict[str, Any] = {"thread_id": thread_id}
        if ns is not None:
            match["ns"] = ns
        match["kind"] = KIND_CP
        docs = yield find(
            self.payloads, match, projection=COMMIT_FIELDS, sort=[("ref", -1)], limit=1
        )
        return str(docs[0]["ref"]) if docs else None

    def activities(self, thread_ids: list[str], above: str, limit: int) -> Op[list[Activity]]:
        """A batch of threads in two requests, plus two per idle thread (a server that scans,
        as FerretDB does, then scans twice per batch instead of twice per thread): a
        ``find`` of the batch's checkpoint ids above ``above`` (which name each active
        thread's newest checkpoint and its root namespace's newest), :meth:`newest_commit`
        twice for a thread with none above ``above``, then one ``find`` of the root heads'
        write documents' ``sub`` (task id and index)."""
        if not thread_ids:
            return []
        cps = {"thread_id": {"$in": thread_ids}, "kind": KIND_CP}
        docs = yield find(
            self.payloads,
            {**cps, "ref": {"$gt": above}},
            projection={"_id": 0, "thread_id": 1, "ns": 1, "ref": 1},
        )
        recent: dict[str, list[tuple[str, str]]] = {t: [] for t in thread_ids}
        for doc in docs:
            recent[doc["thread_id"]].append((doc["ns"], doc["ref"]))
        newest: dict[str, str] = {}
        root: dict[str, str] = {}
        for t, found in recent.items():
            found.sort(key=lambda c: (c[1], c[0]))
            if found:
                newest[t] = found[-1][1]
            roots = [cid for ns, cid in found if ns == ""]
            if roots:
                root[t] = roots[-1]
        for t in thread_ids:
            # idle threads (no checkpoint above ``above``): their newest ids one by one, as
            # FerretDB's ``$group`` has no ``$max``; each is one index-served ``find``
            if t not in newest:
                found_newest = yield from self.newest_commit(t, None)
                if found_newest is None:
                    continue
                newest[t] = found_newest
            if t not in root:
                found_root = yield from self.newest_commit(t, "")
                if found_root is not None:
                    root[t] = found_root
        interrupted: set[str] = set()
        if root:
            writes = yield find(
                self.payloads,
                {
                    "thread_id": {"$in": sorted(root)},
                    "ns": "",
                    "kind": KIND_WRITE,
                    "ref": {"$in": sorted(set(root.values()))},
                },
                projection={"_id": 0, "thread_id": 1, "ref": 1, "sub": 1, "idx": 1},
            )
            for doc in writes:
                idx = int(doc["idx"]) if "idx" in doc else parse_write_sub(doc["sub"])[1]
                if idx == INTERRUPT_IDX and root.get(doc["thread_id"]) == doc["ref"]:
                    interrupted.add(doc["thread_id"])
        return [
            Activity(
                t,
                newest.get(t),
                [cid for _, cid in recent[t][:limit]],
                t in interrupted,
                None,
            )
            for t in thread_ids
        ]

    def write_indexes(self, thread_id: str, ns: str, checkpoint_id: str) -> Op[list[int]]:
        """ONE ``find`` of the checkpoint's write documents, projecting the index fields
        only (``sub`` holds task id and index; format 1: ``idx``), never ``data``."""
        docs = yield find(
            self.payloads,
            {"thread_id": thread_id, "ns": ns, "kind": KIND_WRITE, "ref": checkpoint_id},
            projection={"_id": 0, "sub": 1, "idx": 1},
        )
        return [int(d["idx"]) if "idx" in d else parse_write_sub(d["sub"])[1] for d in docs]

    def checkpoint_keys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> Op[list[CheckpointKeys]]:
        """ONE ``find`` on ``gk_thread_ns_kind_ref`` of the checkpoint documents and write
        documents with ``ref`` = ``checkpoint_id`` (or ``>=`` it when ``newer``), projecting
        ``ref``, ``kind`` and the write's ``sub`` (format 1: ``task_id``, ``idx``) — never a
        payload. A write stored in chunks counts once (its chunks share ``sub``)."""
        ref: Any = {"$gte": checkpoint_id} if newer else checkpoint_id
        match = {"thread_id": thread_id, "ns": ns, "kind": {"$in": [KIND_CP, KIND_WRITE]}}
        docs = yield find(
            self.payloads,
            conjunction([{**match, "ref": ref}, live(self._now())]),
            projection={"_id": 0, "kind": 1, "ref": 1, "sub": 1, "task_id": 1, "idx": 1},
        )
        heads: set[str] = set()
        writes: dict[str, dict[tuple[str, int], None]] = {}
        for doc in docs:
            if doc["kind"] == KIND_CP:
                heads.add(doc["ref"])
                continue
            sub = doc.get("sub")
            key = parse_write_sub(sub) if sub is not None else (doc["task_id"], int(doc["idx"]))
            writes.setdefault(doc["ref"], {})[key] = None
        return [
            CheckpointKeys(cid, tuple(idx for _, idx in writes.get(cid, {})))
            for cid in sorted(heads)
        ]

    def storage_bytes(self) -> Op[int | None]:
        """ONE ``collStats`` of the thread collection: its ``size`` (the documents' bytes,
        before compression; indexes not counted). Per-thread sizes would need ``$bsonSize``,
        which FerretDB does not implement."""
        stats = yield Command(None, "command", ("collStats", self.payloads))
        return int(stats["size"])

    # -- port: per-thread lease (:mod:`.locks`) ------------------------------------

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        return (yield from acquire_lease(self.locks, thread_id, token, ttl_ms, self._now()))

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        return (yield from release_lease(self.locks, thread_id, token))

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        return (yield from extend_lease(self.locks, thread_id, token, ttl_ms, self._now()))

    def purge_expired(self) -> Op[int]:
        """Delete expired documents now (for servers without a TTL monitor)."""
        expired = {"expires_at": {"$lte": self._now()}}
        # checkpoints first: a reader never finds a checkpoint whose values are gone
        ops = [DeleteMany({**expired, "kind": KIND_CP}), DeleteMany(expired)]
        result = yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})
        deleted = int(result.deleted_count)
        locks = yield Command(self.locks, "delete_many", (expired,))
        return deleted + int(locks.deleted_count)


# -- the savers -------------------------------------------------------------------------


def _port(options: dict[str, Any]) -> tuple[MongoDBCheckpointPort, dict[str, Any]]:
    """The port the saver options describe, and the options left for the saver contract."""
    port = MongoDBCheckpointPort(
        key_prefix=options.pop("key_prefix", "graphkeep"),
        ttl=ttl_seconds(options.pop("ttl", None)),
        refresh_ttl_on_read=bool(options.pop("refresh_ttl_on_read", False)),
        **({"chunk_size": options.pop("chunk_size")} if "chunk_size" in options else {}),
        sharded=options.pop("sharded", False),
    )
    return port, options


class _Schema:
    """``Saver.schema()`` -> the index specs; on an instance, for its own ``key_prefix``."""

    def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., list[dict[str, Any]]]:
        if obj is None:

            def for_prefix(key_prefix: str = "graphkeep") -> list[dict[str, Any]]:
                return index_specs(key_prefix)

            return for_prefix
        port: MongoDBCheckpointPort = obj.port

        def for_saver() -> list[dict[str, Any]]:
            return port.schema()

        return for_saver


class _MongoSaverMixin:
    """What both MongoDB savers add to the shared contract."""

    #: ``MongoDBSaver.schema(key_prefix="graphkeep")`` or ``saver.schema()``: index specs
    schema = _Schema()
    port: Any

    if TYPE_CHECKING:  # provided by SyncSaver / AsyncSaver

        def _call(self, op: Any) -> Any: ...

        async def _acall(self, op: Any) -> Any: ...

    def purge_expired(self) -> int:
        """Delete expired documents now (servers without TTL indexes); returns the count."""
        return int(self._call(cast(MongoDBCheckpointPort, self.port).purge_expired()))

    async def apurge_expired(self) -> int:
        return int(await self._acall(cast(MongoDBCheckpointPort, self.port).purge_expired()))


class MongoDBSaver(_MongoSaverMixin, SyncSaver):
    """Sync saver on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``), ``serde``, ``ttl`` (seconds or
    timedelta, sliding per thread), ``refresh_ttl_on_read``, ``key_prefix`` (default
    ``"graphkeep"``: collections ``<prefix>_payloads`` and ``<prefix>_locks``),
    ``chunk_size`` (default 8 MiB), ``max_id_bytes`` (default 1024), ``sharded``
    (default False; True when the collections are sharded on ``thread_id``). ``where``
    names the server in errors (default: the client's hosts).
    """

    def __init__(
        self, client: Any, db_name: str = DEFAULT_DB, *, where: str | None = None, **options: Any
    ) -> None:
        if not isinstance(client, pymongo.MongoClient):
            raise ConfigurationError(
                f"MongoDBSaver needs a pymongo.MongoClient, got {type(client).__name__};"
                " use AsyncMongoDBSaver with pymongo.AsyncMongoClient (motor is not supported)"
            )
        port, rest = _port(dict(options))
        self.client = client
        self.db = client[check_db_name(db_name)]
        execute = sync_executor(self.db, where or describe(client))
        super().__init__(port, execute, **rest)
        effects = MongoDBEffectsPort(key_prefix=options.get("key_prefix", "graphkeep"))
        self.with_effects(effects, SyncLedger(effects, execute, serde=self.serde))

    @classmethod
    @contextmanager
    def from_url(
        cls, url: str, *, db_name: str | None = None, setup: bool = True, **options: Any
    ) -> Iterator[MongoDBSaver]:
        name = check_db_name(db_name) if db_name is not None else database_from_url(url)
        hot, layer = hot_options(options)

        def build(client: Any) -> MongoDBSaver:
            return cls(client, db_name=name, where=mask_url(url), **options)

        client = sync_client(url, pool_options(options))
        with opened(client, build, setup) as saver, layered(saver, hot, layer) as layer_saver:
            yield layer_saver


class AsyncMongoDBSaver(_MongoSaverMixin, AsyncSaver):
    """Asyncio saver on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    def __init__(
        self, client: Any, db_name: str = DEFAULT_DB, *, where: str | None = None, **options: Any
    ) -> None:
        if not isinstance(client, pymongo.AsyncMongoClient):
            raise ConfigurationError(
                f"AsyncMongoDBSaver needs a pymongo.AsyncMongoClient, got"
                f" {type(client).__name__}; use MongoDBSaver with pymongo.MongoClient"
                " (motor is not supported)"
            )
        port, rest = _port(dict(options))
        self.client = client
        self.db = client[check_db_name(db_name)]
        aexecute = async_executor(self.db, where or describe(client))
        super().__init__(port, aexecute, **rest)
        effects = MongoDBEffectsPort(key_prefix=options.get("key_prefix", "graphkeep"))
        self.with_effects(effects, AsyncLedger(effects, aexecute, serde=self.serde))

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, db_name: str | None = None, setup: bool = True, **options: Any
    ) -> AsyncIterator[AsyncMongoDBSaver]:
        name = check_db_name(db_name) if db_name is not None else database_from_url(url)
        hot, layer = hot_options(options)

        def build(client: Any) -> AsyncMongoDBSaver:
            return cls(client, db_name=name, where=mask_url(url), **options)

        async with (
            aopened(async_client(url, pool_options(options)), build, setup) as saver,
            alayered(saver, hot, layer) as layer_saver,
        ):
            yield layer_saver
