"""What the MongoDB checkpoint port does to whole threads: delete one, take its inventory and
repair it (``graphkeep check``), export and import it (``copy_thread``), find runs
(``delete_for_runs``), list the threads, and purge what expired on servers without TTL indexes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pymongo import DeleteMany, ReplaceOne, UpdateMany

from graphkeep.backends.mongodb.documents import (
    KIND_BLOB,
    KIND_CHECKPOINT,
    KIND_CP,
    KIND_WRITE,
    SOURCE_FIELD,
    blob_ref,
    checkpoint_record,
    complete_payloads,
    group_key,
    heading_of,
    in_batches,
    parse_blob_ref,
    payload_type,
    tail_generation,
    thread_data,
    write_record,
)
from graphkeep.backends.mongodb.fences import Fences
from graphkeep.backends.mongodb.heads import (
    SUMMARY_FIELDS,
    HeadCache,
    ListMap,
    head_of,
    manifest_runs,
)
from graphkeep.backends.mongodb.requests import Command, find
from graphkeep.backends.mongodb.ttl import Expiry, utc_now
from graphkeep.backends.mongodb.upserts import Stored, Upserts, replaced
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest
from graphkeep.checkpoint.records import (
    HOLDS_CHECKPOINT,
    HOLDS_VALUE,
    HOLDS_WRITES,
    BlobRecord,
    Expiring,
    Inventory,
    Summary,
    ThreadDump,
    Typed,
)
from graphkeep.port import Op

#: the fields of a payload document's identity (:func:`~.documents.group_key`)
IDENTITY = {"_id": 1, "thread_id": 1, "ns": 1, "kind": 1, "ref": 1, "sub": 1}
#: the kinds whose ``ref`` is a checkpoint id besides the checkpoint's own document
WRITE_KINDS = [KIND_WRITE, KIND_CHECKPOINT]
#: what :func:`stale_chunks` reads of each document (a checkpoint's heading: ``s``, or
#: format 1's ``chunked``; never a payload)
CHUNK_FIELDS = {**IDENTITY, "part": 1, "g": 1, "gen": 1, "s": 1, "chunked": 1}


def stale_chunks(found: list[dict[str, Any]]) -> frozenset[str]:
    """The ``_id`` of the chunk documents among a thread's ``found`` that no stored record
    reaches: tails of a generation their head no longer names, and the ``kind:
    "checkpoint"`` payload (head and tails) of a checkpoint now stored inline. An overwrite
    left them before it deleted them. Tails whose head is gone and the payload of a
    checkpoint that is gone are not among them (``delete_records``' business: orphan
    writes)."""
    generations = {
        group_key(doc): str(doc.get("g", doc.get("gen"))) for doc in found if not doc.get("part")
    }
    inline = {
        (doc["ns"], doc["ref"])
        for doc in found
        if doc["kind"] == KIND_CP and not heading_of(doc).chunked
    }
    stale = set()
    for doc in found:
        part = doc.get("part")
        if doc["kind"] == KIND_CHECKPOINT and (doc["ns"], doc["ref"]) in inline:
            stale.add(str(doc["_id"]))
        elif part and generations.get(group_key(doc), tail_generation(part)) != tail_generation(
            part
        ):
            stale.add(str(doc["_id"]))
    return frozenset(stale)


def _epoch(value: Any) -> float | None:
    """Epoch seconds of a stored ``expires_at`` (pymongo hands back naive UTC datetimes)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    stamp: float = value.timestamp()
    return stamp


class ThreadOps:
    """The checkpoint port's operations on whole threads (a part of
    :class:`~graphkeep.backends.mongodb.checkpoint.MongoDBCheckpointPort`)."""

    payloads: str
    locks: str
    heads: HeadCache
    expiry: Expiry
    upserts: Upserts
    fences: Fences

    def delete_thread(self, thread_id: str, fence: int | None = None) -> Op[None]:
        self.heads.drop_thread(thread_id)
        # ONE ordered command, checkpoints first: a reader never finds one whose values are
        # gone. The fence document stays (tokens keep growing after the thread is gone).
        ops = [
            DeleteMany({"thread_id": thread_id, "kind": KIND_CP}),
            DeleteMany(thread_data(thread_id)),
        ]
        yield from self.fences.bulk(thread_id, ops, fence, ordered=True)

    def inventory(self, thread_id: str) -> Op[Inventory]:
        # ``_id`` and ``expires_at`` ride along: each document's expiry, for the check; the
        # metadata's source: the check's fork rule
        # ``part``, ``g``/``gen``, ``sub`` and ``chunked`` too: chunks no record reaches
        found = yield find(
            self.payloads,
            thread_data(thread_id),
            projection={
                **SUMMARY_FIELDS,
                **CHUNK_FIELDS,
                SOURCE_FIELD: 1,
                "expires_at": 1,
            },
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
        return Inventory(summaries, write_keys, blob_keys, expiries, stale_chunks(found))

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
        fence: int | None = None,
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
            yield from self.fences.bulk(thread_id, ops, fence, ordered=True)

    def chunk_refs(self, thread_id: str) -> Op[frozenset[str]]:
        """The ``_id`` of the thread's tail chunk documents (one ``find``, ids only)."""
        found = yield find(
            self.payloads, {**thread_data(thread_id), "part": {"$gt": ""}}, projection={"_id": 1}
        )
        return frozenset(str(doc["_id"]) for doc in found)

    def drop_chunks(
        self, thread_id: str, refs: frozenset[str], fence: int | None = None
    ) -> Op[None]:
        """Delete the tail chunks ``refs`` (of :meth:`chunk_refs`, read before ``graphkeep
        rekey`` rewrote their payloads) of a generation their head no longer names: a
        rewritten payload's head names the new bytes' generation, so the old tails are
        unreachable, and they hold the old ciphertext. Tails of the head's generation, and
        tails whose head is gone (``delete_records``' business), are left alone; under the
        lease, behind its fence guard."""
        if not refs:
            return
        found = yield find(self.payloads, thread_data(thread_id), projection=CHUNK_FIELDS)
        stale = sorted(refs & stale_chunks(found))
        ops: list[Any] = [
            DeleteMany({"thread_id": thread_id, "_id": {"$in": batch}})
            for batch in in_batches(stale)
        ]
        if ops:
            yield from self.fences.bulk(thread_id, ops, fence, ordered=True)

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
        found = yield find(self.payloads, thread_data(thread_id))
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

    def import_thread(self, thread_id: str, dump: ThreadDump, fence: int | None = None) -> Op[None]:
        now = utc_now()
        expires_at = self.expiry.documents(now)
        ops: list[Any] = []
        stored: list[Stored] = []
        for ns, blob in dump.blobs:
            elements = blob.channel == ELEMENT_CHANNEL
            ops += self.upserts.blob(
                thread_id, ns, blob, self.expiry.elements(now) if elements else expires_at, stored
            )
        for ns, cid, w in dump.writes:
            ops += self.upserts.write(
                thread_id, ns, cid, w, expires_at, overwrite=True, stored=stored
            )
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
            ops += self.upserts.chunked_checkpoint(
                thread_id, record.ns, record.checkpoint_id, chunked, expires_at, stored
            )
            key = self.upserts.checkpoint_key(thread_id, record.ns, record.checkpoint_id)
            checkpoint_ops.append(ReplaceOne(key, doc, upsert=True))
        if ops or checkpoint_ops:
            # values first, the checkpoints last, in one ordered command
            result = yield from self.fences.bulk(
                thread_id, ops + checkpoint_ops, fence, ordered=True
            )
            yield from self.drop_replaced(thread_id, stored, result, fence)

    def drop_replaced(
        self, thread_id: str, stored: list[Stored], result: Any, fence: int | None
    ) -> Op[None]:
        """After a write of the thread (its ``result``): delete the tails, or the whole
        chunked checkpoint payload, that the payloads it replaced left behind
        (:func:`.upserts.replaced`). Nothing when every head was inserted (the usual put:
        no request); else one ``delete`` command, behind the fence guard under a lease, and
        one ``find`` first when a chunked insert-if-absent write met a stored one (its tails
        are deleted unless the stored head is of the same bytes)."""
        ops, unknown = replaced(stored, result, {})
        if unknown:
            found = yield find(
                self.payloads,
                {"thread_id": thread_id, "_id": {"$in": [s.head_id for s in unknown]}},
                projection={"_id": 1, "g": 1, "gen": 1},
            )
            heads: dict[str, str | None] = {s.head_id: None for s in unknown}
            for doc in found:
                gen = doc.get("g", doc.get("gen"))
                heads[str(doc["_id"])] = None if gen is None else str(gen)
            ops += replaced(unknown, result, heads)[0]
        if ops:
            yield from self.fences.bulk(thread_id, ops, fence, ordered=True)

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

    def purge_expired(self) -> Op[int]:
        """Delete expired documents now (for servers without a TTL monitor)."""
        expired = {"expires_at": {"$lte": utc_now()}}
        # checkpoints first: a reader never finds a checkpoint whose values are gone
        ops = [DeleteMany({**expired, "kind": KIND_CP}), DeleteMany(expired)]
        result = yield Command(self.payloads, "bulk_write", (ops,), {"ordered": True})
        deleted = int(result.deleted_count)
        locks = yield Command(self.locks, "delete_many", (expired,))
        return deleted + int(locks.deleted_count)
