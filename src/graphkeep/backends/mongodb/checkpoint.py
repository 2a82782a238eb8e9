"""The checkpoint port on MongoDB (:class:`MongoDBCheckpointPort`: its writes and reads of
checkpoints) and the two savers built on it, :class:`MongoDBSaver` (``pymongo.MongoClient``) and
:class:`AsyncMongoDBSaver` (``pymongo.AsyncMongoClient``).

The port yields :class:`~graphkeep.backends.mongodb.requests.Command` requests; the
executors of :mod:`.client` run them. The layout, the round trips and why are in the package
docstring (:mod:`graphkeep.backends.mongodb`); what a document looks like is in :mod:`.documents`
and :mod:`.upserts`, the indexes in :mod:`.schema`, the TTL in :mod:`.ttl`, heads and the parent
walk in :mod:`.heads` and :mod:`.ancestors`, leases in :mod:`.locks`, the format-1 rewrite in
:mod:`.migrate`; the port's operations on whole threads are in :mod:`.threads`, its id-only
reads in :mod:`.ids`. See docs/architecture.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from pymongo import ReplaceOne

from graphkeep.backends.mongodb.ancestors import CHAIN_PAGE, HeadPages, read_ancestors
from graphkeep.backends.mongodb.client import OnMongoDB
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
    payload_type,
    write_record,
)
from graphkeep.backends.mongodb.effects import MongoDBEffectsPort
from graphkeep.backends.mongodb.fences import Fences
from graphkeep.backends.mongodb.heads import (
    SUMMARY_FIELDS,
    DeltaMap,
    Head,
    HeadCache,
    ListMap,
    head_of,
    manifest_runs,
)
from graphkeep.backends.mongodb.ids import KeyReads
from graphkeep.backends.mongodb.locks import extend_lease, release_lease, take_lease
from graphkeep.backends.mongodb.migrate import legacy_checkpoints, migrate
from graphkeep.backends.mongodb.requests import Command, find
from graphkeep.backends.mongodb.schema import collection_names, ensure_indexes, index_specs
from graphkeep.backends.mongodb.threads import WRITE_KINDS, ThreadOps
from graphkeep.backends.mongodb.ttl import Expiry, Refresh, loaded_refreshes, utc_now
from graphkeep.backends.mongodb.upserts import Stored, Upserts
from graphkeep.checkpoint.hot import HOT_OPTIONS
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import (
    BlobRecord,
    Chain,
    CheckpointRecord,
    ListQuery,
    Loaded,
    Summary,
    Typed,
    WriteRecord,
)
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, thread_options
from graphkeep.errors import ConfigurationError
from graphkeep.port import Op
from graphkeep.port.torn import reread

__all__ = ["SAVER_OPTIONS", "AsyncMongoDBSaver", "MongoDBCheckpointPort", "MongoDBSaver"]

#: the savers' options beyond every saver's (and ``db_name``, see :class:`.client.OnMongoDB`)
SAVER_OPTIONS = frozenset({"chunk_size", "sharded"}) | HOT_OPTIONS

log = logging.getLogger("graphkeep.mongodb")


class MongoDBCheckpointPort(ThreadOps, KeyReads, CheckpointPort):
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
        #: the threads' fencing tokens, one document per thread in ``payloads``
        self.fences = Fences(self.payloads, self.upserts)
        #: their copies in the effect ledger's ``<prefix>_effects``, which fence its records
        self.ledger_fences = MongoDBEffectsPort(key_prefix=self.prefix).fences
        self.expiry = Expiry(self.ttl)
        self.heads = HeadCache()
        #: whether the server keeps TTL indexes (None until setup() ran)
        self.ttl_index: bool | None = None

    @classmethod
    def configured(cls, site: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        port = cls(
            **thread_options(options),
            **({"chunk_size": options.pop("chunk_size")} if "chunk_size" in options else {}),
            sharded=options.pop("sharded", False),
        )
        return port, options

    # -- helpers -------------------------------------------------------------------

    def schema(self) -> list[dict[str, Any]]:
        return index_specs(self.prefix)

    def _apply_refresh(self, refreshes: list[Refresh]) -> Op[None]:
        ops = self.expiry.refresh_ops(refreshes, utc_now())
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

    def put_checkpoint(
        self, record: CheckpointRecord, blobs: list[BlobRecord], fence: int | None = None
    ) -> Op[None]:
        """ONE ordered ``update`` command: elements and blobs (and chunks), the expiry
        refreshes, then the checkpoint document last. An ordered batch stops at its
        first error, so no reader ever finds the checkpoint without its values. Under a
        lease (``fence``), the fence guard goes first (:mod:`.fences`)."""
        now = utc_now()
        expires_at = self.expiry.documents(now)
        element_expires_at = self.expiry.elements(now)
        t, ns, cid = record.thread_id, record.ns, record.checkpoint_id
        ops: list[Any] = []
        stored: list[Stored] = []
        written: dict[str, Typed] = {}
        for blob in blobs:
            if blob.channel == ELEMENT_CHANNEL:
                ops += self.upserts.blob(t, ns, blob, element_expires_at, stored)
            else:
                ops += self.upserts.blob(t, ns, blob, expires_at, stored)
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
        ops += self.upserts.chunked_checkpoint(t, ns, cid, chunked, expires_at, stored)
        ops.append(ReplaceOne(self.upserts.checkpoint_key(t, ns, cid), doc, upsert=True))
        result = yield from self.fences.bulk(t, ops, fence, ordered=True)
        yield from self.drop_replaced(t, stored, result, fence)
        summary = Summary(
            ns,
            cid,
            record.parent_id,
            dict(record.versions),
            list(record.present),
            list(record.needs_history),
            record.run_id,
            record.source,
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
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        writes: list[WriteRecord],
        fence: int | None = None,
    ) -> Op[None]:
        expires_at = self.expiry.documents(utc_now())
        ops: list[Any] = []
        stored: list[Stored] = []
        for w in writes:
            ops += self.upserts.write(
                thread_id, ns, checkpoint_id, w, expires_at, overwrite=w.special, stored=stored
            )
        # unordered (the writes are independent), but behind the fence guard under a lease
        result = yield from self.fences.bulk(thread_id, ops, fence, ordered=False)
        yield from self.drop_replaced(thread_id, stored, result, fence)

    # -- port: reads ---------------------------------------------------------------

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        """Two finds (the checkpoint, then what it names), read again when torn by an
        overwrite (:func:`graphkeep.port.torn.reread`)."""
        return (yield from reread(lambda: self._load(thread_id, ns, checkpoint_id)))

    def _load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        now = utc_now()
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
        for t, ns, kind, ref, head, data in complete_payloads(found, strict=True):
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
            record = checkpoint_record(doc, chunks.get(key), strict=True)
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
        """ONE find: list elements as index ranges of ``ref`` per run, other blobs by ``$in``
        (again when torn by an overwrite)."""
        return (yield from reread(lambda: self._get_blobs(thread_id, keys)))

    def _get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
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
            self.payloads, conjunction([disjunction(clauses) or {}, live(utc_now())])
        )
        wanted = set(keys)
        got: dict[tuple[str, str, str], Typed] = {}
        for _t, ns, kind, ref, head, data in complete_payloads(found, strict=True):
            if kind != KIND_BLOB:
                continue
            key = (ns, *parse_blob_ref(ref))
            if key in wanted:
                got[key] = Typed(payload_type(head), data)
        return got

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        return (yield from reread(lambda: self._list_page(query, cursor, page_size)))

    def _list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        now = utc_now()
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
        return (yield from reread(lambda: self._chain(thread_id, ns, checkpoint_id, channels)))

    def _chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]:
        now = utc_now()
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
        for _t, _ns, kind, ref, head, data in complete_payloads(found, strict=True):
            if kind == KIND_WRITE:
                writes.setdefault(ref, []).append(write_record(head, data))
            elif kind == KIND_BLOB:
                blobs[parse_blob_ref(ref)] = Typed(payload_type(head), data)
        if self.refresh_on_read:
            refresh = Refresh(thread_id, ns, ranges=[(ancestors[-1].checkpoint_id, target_id)])
            refresh.blobs.update(seed_refs)
            yield from self._apply_refresh([refresh])
        return Chain(target_id, ancestors, writes, blobs)

    # -- port: per-thread lease (:mod:`.locks`, :mod:`.fences`) --------------------

    def is_settled(self, thread_id: str) -> Op[bool]:
        """The mark is a document of ``P_locks`` whose ``_id`` is ``{"settled": thread}`` (a
        lease's is the thread id itself): no ``expires_at``, so no TTL or purge removes it."""
        found = yield Command(self.locks, "find_one", ({"_id": {"settled": thread_id}},))
        return found is not None

    def settle(self, thread_id: str) -> Op[None]:
        mark = {"_id": {"settled": thread_id}}
        yield Command(self.locks, "update_one", (mark, {"$set": mark}), {"upsert": True})

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[int]:
        """Three requests per grant: the lease in ``P_locks`` (one upsert), then the
        thread's fencing token raised in its fence document (one more when the token is
        already at the clock's milliseconds), then its copy in ``P_effects`` raised to it
        (the effect ledger's guard reads it there), before this returns; a re-armed lease
        reads the token instead of raising it, and raises the copy all the same (a grant
        that failed before its copy). 0 when another holder has the lease (one request)."""
        now = utc_now()
        taken = yield from take_lease(self.locks, thread_id, token, ttl_ms, now)
        if taken is None:
            return 0
        fence = yield from self.fences.granted(thread_id, token, ttl_ms, now, taken)
        yield from self.ledger_fences.raised(thread_id, fence, ttl_ms, now)
        return fence

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        return (yield from release_lease(self.locks, thread_id, token))

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        return (yield from extend_lease(self.locks, thread_id, token, ttl_ms, utc_now()))


# -- the savers -------------------------------------------------------------------------


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


class MongoDBSaver(OnMongoDB, _MongoSaverMixin, SyncSaver):
    """Sync saver on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``), ``serde``, ``ttl`` (seconds or
    timedelta, sliding per thread), ``refresh_ttl_on_read``, ``key_prefix`` (default
    ``"graphkeep"``: collections ``<prefix>_payloads`` and ``<prefix>_locks``),
    ``chunk_size`` (default 8 MiB), ``max_id_bytes`` (default 1024), ``sharded``
    (default False; True when the collections are sharded on ``thread_id``). ``where``
    names the server in errors (default: the client's hosts).
    """

    port_type = MongoDBCheckpointPort
    effects_port_type = MongoDBEffectsPort


class AsyncMongoDBSaver(OnMongoDB, _MongoSaverMixin, AsyncSaver):
    """Asyncio saver on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    port_type = MongoDBCheckpointPort
    effects_port_type = MongoDBEffectsPort
