"""The bulk-write operations storing a thread's documents: payload upserts by ``_id`` (plus
the shard key when sharded), chunked when large, and checkpoint documents kept within BSON's limit.

A payload written again in place (a checkpoint put again with its id, a special write
replaced, a channel value or a copied thread rewritten) names its tails by the new bytes'
generation, so the old generation's tails are left unreachable. Each head upserted is noted
as a :class:`Stored`; after the write, :func:`replaced` turns the heads the bulk matched (an
existing document, not an insert) into the deletions of what they left behind — after the
new head is stored, never before, so no reader meets a head whose chunks are gone unless it
read the old head before the write (it re-reads: :func:`graphkeep.port.torn.reread`).

The layout is in :mod:`graphkeep.backends.mongodb.checkpoint`; see docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import bson
from pymongo import DeleteMany, ReplaceOne, UpdateOne

from graphkeep.backends.mongodb.documents import (
    BSON_LIMIT,
    KIND_BLOB,
    KIND_CHECKPOINT,
    KIND_CP,
    KIND_WRITE,
    Heading,
    blob_ref,
    checkpoint_id_key,
    identity,
    metadata_fields,
    pack_heading,
    payload_docs,
    tail_generation,
    write_sub,
)
from graphkeep.backends.mongodb.heads import DeltaMap, ListMap
from graphkeep.checkpoint.records import BlobRecord, CheckpointRecord, Typed, WriteRecord
from graphkeep.errors import PayloadTooLarge
from graphkeep.port import codec

#: tag of a chunked checkpoint payload (msgpack of checkpoint and metadata typed pairs)
CHECKPOINT_PAYLOAD_TAG = "graphkeep.checkpoint+metadata"
#: headroom kept under the BSON limit for a checkpoint document
DOC_HEADROOM = 64 * 1024


@dataclass(frozen=True, slots=True)
class Stored:
    """A payload head (or a checkpoint document) in a bulk write, and what the write leaves
    behind when it matched a stored document instead of inserting one."""

    #: the ``_id`` the upsert names (reported back by the bulk when it inserted)
    head_id: str
    #: the payload's identity fields (thread, ns, kind, ref, sub)
    ident: dict[str, Any]
    #: the parts of the tails written with it (empty when the payload is inline)
    parts: tuple[str, ...]
    #: True: the head replaced the stored one (its tails not of these parts are stale);
    #: False: insert-if-absent (these tails are stale when the stored head is another's)
    overwrite: bool
    #: a checkpoint document now inline: the whole ``kind: "checkpoint"`` payload is stale
    whole: bool = False

    def filter(self) -> dict[str, Any]:
        """Every document of the payload (head and tails); an absent ``sub`` matches null."""
        return {**self.ident, "sub": self.ident.get("sub") or None}


def replaced(
    stored: list[Stored], result: Any, heads: Mapping[str, str | None]
) -> tuple[list[Any], list[Stored]]:
    """The deletions of what the heads of ``stored`` that ``result`` (a ``BulkWriteResult``)
    did not insert left behind, and the insert-if-absent ones whose stored head must be read
    first (``heads``: their ``_id`` -> the stored generation, once read)."""
    inserted = set(getattr(result, "upserted_ids", {}).values())
    ops: list[Any] = []
    unknown: list[Stored] = []
    for s in stored:
        if s.head_id in inserted:
            continue
        if s.whole:
            ops.append(DeleteMany(s.filter()))
        elif s.overwrite:
            ops.append(DeleteMany({**s.filter(), "part": {"$gt": "", "$nin": list(s.parts)}}))
        elif s.parts:
            if s.head_id not in heads:
                unknown.append(s)
            elif heads[s.head_id] != tail_generation(s.parts[0]):
                ops.append(DeleteMany({**s.filter(), "part": {"$in": list(s.parts)}}))
    return ops, unknown


class Upserts:
    """Builds the upserts of one saver: payloads over ``chunk_size`` bytes are chunked;
    ``sharded`` upserts also name the shard key ``thread_id`` (MongoDB requires it)."""

    def __init__(self, chunk_size: int, sharded: bool) -> None:
        self.chunk_size = chunk_size
        self.sharded = sharded

    def key(self, by_id: dict[str, Any], thread_id: str) -> dict[str, Any]:
        """The filter of an upsert: the ``_id``, plus the shard key on a sharded cluster."""
        return {**by_id, "thread_id": thread_id} if self.sharded else by_id

    def checkpoint_key(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, Any]:
        return self.key({"_id": checkpoint_id_key(thread_id, ns, checkpoint_id)}, thread_id)

    def payload(
        self,
        ident: Mapping[str, Any],
        fields: Mapping[str, Any],
        value: Typed,
        expires_at: datetime | None,
        *,
        overwrite: bool,
        stored: list[Stored] | None = None,
    ) -> list[Any]:
        """Upserts for one payload: overwrite replaces, otherwise insert-if-absent; its head
        noted in ``stored``."""
        ops: list[Any] = []
        docs = payload_docs(ident, fields, value.tag, value.data, self.chunk_size)
        if stored is not None:
            parts = tuple(d.doc["part"] for d in docs if not d.head)
            stored.append(Stored(docs[-1].filter["_id"], dict(ident), parts, overwrite))
        for part in docs:
            doc = dict(part.doc)
            key = self.key(part.filter, ident["thread_id"])
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

    def blob(
        self,
        thread_id: str,
        ns: str,
        blob: BlobRecord,
        expires_at: datetime | None,
        stored: list[Stored] | None = None,
    ) -> list[Any]:
        """Upserts storing one channel value (blobs are immutable per version: overwrite)."""
        return self.payload(
            identity(thread_id, ns, KIND_BLOB, blob_ref(blob.channel, blob.version)),
            {},  # channel and version are in ``ref``
            blob.value,
            expires_at,
            overwrite=True,
            stored=stored,
        )

    def write(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        write: WriteRecord,
        expires_at: datetime | None,
        *,
        overwrite: bool,
        stored: list[Stored] | None = None,
    ) -> list[Any]:
        """Upserts storing one pending write of ``checkpoint_id``."""
        return self.payload(
            identity(thread_id, ns, KIND_WRITE, checkpoint_id, write_sub(write.task_id, write.idx)),
            # task id and index are in ``sub``; ``channel`` stays a field (history filters on it)
            {"channel": write.channel, "p": write.task_path}
            if write.task_path
            else {"channel": write.channel},
            write.value,
            expires_at,
            overwrite=overwrite,
            stored=stored,
        )

    def chunked_checkpoint(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        packed: bytes | None,
        expires_at: datetime | None,
        stored: list[Stored] | None = None,
    ) -> list[Any]:
        """Upserts storing the payload of a checkpoint too large to inline; for one inline
        (``packed`` None), none, but the checkpoint document noted in ``stored``: put again
        over a chunked one, it leaves that whole payload behind."""
        ident = identity(thread_id, ns, KIND_CHECKPOINT, checkpoint_id)
        if packed is None:
            if stored is not None:
                head_id = checkpoint_id_key(thread_id, ns, checkpoint_id)
                stored.append(Stored(head_id, ident, (), True, whole=True))
            return []
        return self.payload(
            ident,
            {},
            Typed(CHECKPOINT_PAYLOAD_TAG, packed),
            expires_at,
            overwrite=True,
            stored=stored,
        )

    def checkpoint_doc(
        self,
        record: CheckpointRecord,
        expires_at: datetime | None,
        delta: DeltaMap,
        lists: ListMap | None = None,
    ) -> tuple[dict[str, Any], bytes | None]:
        """The checkpoint document, and the payload to chunk when it is too big to inline."""
        metadata_doc, opaque = metadata_fields(record.metadata_doc)
        if record.source and "source" not in metadata_doc:  # a record copied without its copy
            metadata_doc["source"] = record.source
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
