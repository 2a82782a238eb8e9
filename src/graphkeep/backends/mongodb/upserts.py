"""The bulk-write operations storing a thread's documents: payload upserts by ``_id`` (plus
the shard key when sharded), chunked when large, and checkpoint documents kept within BSON's limit.

The layout is in :mod:`graphkeep.backends.mongodb.checkpoint`; see docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import bson
from pymongo import ReplaceOne, UpdateOne

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
    ) -> list[Any]:
        """Upserts for one payload: overwrite replaces, otherwise insert-if-absent."""
        ops: list[Any] = []
        for part in payload_docs(ident, fields, value.tag, value.data, self.chunk_size):
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
        self, thread_id: str, ns: str, blob: BlobRecord, expires_at: datetime | None
    ) -> list[Any]:
        """Upserts storing one channel value (blobs are immutable per version: overwrite)."""
        return self.payload(
            identity(thread_id, ns, KIND_BLOB, blob_ref(blob.channel, blob.version)),
            {},  # channel and version are in ``ref``
            blob.value,
            expires_at,
            overwrite=True,
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
        )

    def chunked_checkpoint(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        packed: bytes,
        expires_at: datetime | None,
    ) -> list[Any]:
        """Upserts storing the payload of a checkpoint too large to inline."""
        return self.payload(
            identity(thread_id, ns, KIND_CHECKPOINT, checkpoint_id),
            {},
            Typed(CHECKPOINT_PAYLOAD_TAG, packed),
            expires_at,
            overwrite=True,
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
