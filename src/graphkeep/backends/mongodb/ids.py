"""The MongoDB checkpoint port's reads of ids and indexes only, never a payload: the commits a
watcher polls, a thread's activity for fleet health, a checkpoint's write indexes and the hot
layer's key read; all served by the ``gk_thread_ns_kind_ref`` index (see the package docstring).
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.mongodb.documents import (
    KIND_CP,
    KIND_WRITE,
    SOURCE_FIELD,
    conjunction,
    live,
    parse_write_sub,
)
from graphkeep.backends.mongodb.heads import SUMMARY_FIELDS, head_of
from graphkeep.backends.mongodb.requests import Command, find
from graphkeep.backends.mongodb.ttl import utc_now
from graphkeep.checkpoint.port import INTERRUPT_IDX
from graphkeep.checkpoint.records import Activity, CheckpointKeys, Link
from graphkeep.port import Op

#: what ``commits`` reads of a checkpoint document: only fields of the index (covered)
COMMIT_FIELDS: dict[str, Any] = {"_id": 0, "ns": 1, "ref": 1}


class KeyReads:
    """The checkpoint port's key-only reads (a part of
    :class:`~graphkeep.backends.mongodb.checkpoint.MongoDBCheckpointPort`)."""

    payloads: str

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        """``(ns, checkpoint_id)`` of the thread's checkpoints above ``above``, ascending.

        ONE ``find`` served by ``gk_thread_ns_kind_ref`` (see the package docstring),
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
        # with each checkpoint's head and source: its parent and writer, for the fork count
        docs = yield find(
            self.payloads,
            {**cps, "ref": {"$gt": above}},
            projection={**SUMMARY_FIELDS, SOURCE_FIELD: 1},
        )
        recent: dict[str, list[tuple[str, str]]] = {t: [] for t in thread_ids}
        links: dict[str, dict[tuple[str, str], Link]] = {t: {} for t in thread_ids}
        for doc in docs:
            recent[doc["thread_id"]].append((doc["ns"], doc["ref"]))
            links[doc["thread_id"]][(doc["ns"], doc["ref"])] = head_of(doc).summary.link()
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
                [links[t][c] for c in recent[t][:limit]],
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
            conjunction([{**match, "ref": ref}, live(utc_now())]),
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
