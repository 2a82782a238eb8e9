"""Checkpoint heads: a checkpoint's summary with its DeltaChannel and list bookkeeping, read
from its document, and the process's bounded cache of recent ones (:class:`HeadCache`).

See the TTL section of :mod:`graphkeep.backends.mongodb.checkpoint` and docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphkeep.backends.mongodb.documents import Run, heading_of, key_runs, source_of
from graphkeep.checkpoint.lists import manifest_keys
from graphkeep.checkpoint.records import Summary, Typed
from graphkeep.port.lru import ThreadLRU

#: what a head is read from: the fields of a checkpoint document the client decodes
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

#: DeltaChannel bookkeeping: channel -> (oldest checkpoint id needed, seed version or None)
DeltaMap = dict[str, tuple[str, str | None]]
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


class HeadCache(ThreadLRU[tuple[str, str, str], Head]):
    """Recently written or read checkpoint heads (bounded LRU, thread-safe).

    Lets ``put`` find its parent's DeltaChannel bookkeeping without a read in
    the usual case (the parent was put or loaded by this process); on a miss
    the parent document is read. Only consulted when a TTL is configured.
    """

    def __init__(self, size: int = 4096) -> None:
        super().__init__(size)


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
        source=source_of(doc),
    )
    return Head(summary, dict(h.delta), dict(h.lists), complete)


def manifest_runs(manifest: Typed) -> list[Run]:
    """The element keys a list manifest names, as runs."""
    return key_runs(manifest_keys(manifest))
