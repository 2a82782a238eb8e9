"""Format 1 (graphkeep 0.1.x) rewritten in format 2: the document upgrades and the resumable
rewrite ``setup()`` runs.

Format 1 kept checkpoints in ``<prefix>_checkpoints`` and spelled every field out; the
rewrite moves them into the thread collection (then drops that collection) and rewrites
format-1 payload documents in place, each new document written before its old one is
deleted. See the layout in :mod:`graphkeep.backends.mongodb.checkpoint` and
docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pymongo import ReplaceOne

from graphkeep.backends.mongodb.documents import (
    KIND_CP,
    KIND_WRITE,
    checkpoint_id_key,
    checkpoint_payload,
    heading_of,
    identity,
    pack_heading,
    payload_id,
    tail_part,
)
from graphkeep.backends.mongodb.requests import Command
from graphkeep.port import Op

#: checkpoint documents moved per command
MIGRATE_BATCH = 500

#: an upsert's filter: the ``_id``, plus the shard key ``thread_id`` when sharded
KeyOf = Callable[[dict[str, Any], str], dict[str, Any]]


def legacy_checkpoints(prefix: str) -> str:
    """Where format 1 (graphkeep 0.1.x) kept checkpoint documents; ``setup()`` empties it."""
    return f"{prefix}_checkpoints"


#: fields of a format-1 checkpoint document that format 2 packs into ``s`` and ``d``
_FORMAT_1_CP_FIELDS = (
    "checkpoint_id",
    "sub",
    "part",
    "format",
    "parent_id",
    "versions",
    "present",
    "needs_history",
    "delta",
    "lists",
    "chunked",
    "checkpoint",
    "checkpoint_type",
    "metadata",
    "metadata_type",
)


def upgrade_checkpoint(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A format-1 checkpoint document (``<prefix>_checkpoints``) as a format-2 one (its
    ``_id`` included)."""
    ref = doc["checkpoint_id"] if "checkpoint_id" in doc else doc["ref"]
    new = {k: v for k, v in doc.items() if k not in _FORMAT_1_CP_FIELDS}
    new.update(
        _id=checkpoint_id_key(doc["thread_id"], doc["ns"], ref),
        kind=KIND_CP,
        ref=ref,
        s=pack_heading(heading_of(doc)),
    )
    payload = checkpoint_payload(doc)
    if payload is not None:
        new["d"] = payload
    return new


def upgrade_payload(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A format-1 payload document (long ``_id``, named fields) as a format-2 one."""
    t, ns, kind, ref = doc["thread_id"], doc["ns"], doc["kind"], doc["ref"]
    sub, part = doc.get("sub") or "", doc.get("part") or ""
    new: dict[str, Any] = identity(t, ns, kind, ref, sub)
    if "expires_at" in doc:
        new["expires_at"] = doc["expires_at"]
    if kind == KIND_WRITE:
        new["channel"] = doc["channel"]
        if doc.get("task_path"):
            new["p"] = doc["task_path"]
    if part:
        gen, _, n = part.rpartition(":")
        part = tail_part(gen, int(n))
        new["part"] = part
    else:
        new["y"] = doc["type"]
        if int(doc.get("count", 1)) > 1:
            new["n"], new["g"] = int(doc["count"]), doc["gen"]
    if doc.get("data"):
        new["d"] = doc["data"]
    new["_id"] = payload_id(t, ns, kind, ref, sub, part)
    return new


def migrate(payloads: str, legacy: str, key: KeyOf) -> Op[int]:
    """Rewrite what format 1 stored; returns how many documents moved.

    Payload documents (the ones with a ``data`` field) are rewritten in place, then the
    checkpoints of ``legacy`` move into ``payloads`` and ``legacy`` is dropped.
    Idempotent and resumable: each new document is written before its old one is
    deleted, and the two never collide in the unique index (a format-2 head has no
    ``part``, a tail's ``part`` is ``<gen>/<n>``, not ``<gen>:<n>``), so a reader finds
    the payload under either layout meanwhile. Stop 0.1.x writers first: what they
    write after this is not read.
    """
    in_place = {"data": {"$exists": True}}
    moved = yield from _rewrite(payloads, payloads, in_place, upgrade_payload, key)
    found = yield Command(None, "list_collection_names", (), {"filter": {"name": legacy}})
    if found:
        moved += yield from _rewrite(legacy, payloads, {}, upgrade_checkpoint, key)
        yield Command(None, "drop_collection", (legacy,))
    return moved


def _rewrite(
    source: str,
    payloads: str,
    match: dict[str, Any],
    upgrade: Callable[[Mapping[str, Any]], dict[str, Any]],
    key: KeyOf,
) -> Op[int]:
    """Format-1 documents of ``source`` matching ``match``, rewritten into ``payloads``:
    new document first, then the old one deleted, in ``_id`` order (an index walk on
    MongoDB, never a rescan), so an interrupted run resumes."""
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
            ReplaceOne(key({"_id": u["_id"]}, u["thread_id"]), u, upsert=True)
            for u in map(upgrade, docs)
        ]
        yield Command(payloads, "bulk_write", (ops,), {"ordered": False})
        ids = [d["_id"] for d in docs]
        yield Command(source, "delete_many", ({"_id": {"$in": ids}},))
        moved += len(docs)
        last = ids[-1]
