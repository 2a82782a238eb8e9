"""The saver's sliding TTL on MongoDB: when the documents a write stores expire, and the
updates extending what a new checkpoint (or a read) still needs.

The rules are in the TTL section of :mod:`graphkeep.backends.mongodb`; see
also docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from pymongo import UpdateMany

from graphkeep.backends.mongodb.documents import (
    CHECKPOINT_KINDS,
    ELEMENT_PREFIX,
    KIND_BLOB,
    Run,
    blob_ref,
    conjunction,
    disjunction,
    element_clauses,
    in_batches,
)
from graphkeep.backends.mongodb.heads import DeltaMap, Head
from graphkeep.checkpoint.records import Loaded

#: list elements get this many ``ttl`` of life when written or refreshed, and are
#: refreshed only once less than one ``ttl`` is left: a checkpoint (which gets one
#: ``ttl``) never outlives its elements, and an element is rewritten about once per
#: half ``ttl`` instead of at every put (it may outlive its last checkpoint by ttl/2)
ELEMENT_TTL_FACTOR = 1.5


def utc_now() -> datetime:
    """Now, as the documents' ``expires_at`` is compared (aware, UTC)."""
    return datetime.now(timezone.utc)


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

    def add_delta(self, delta: DeltaMap, upper: str) -> None:
        """The DeltaChannel history ``delta`` names, up to checkpoint ``upper``, and its seeds."""
        if not delta:
            return
        self.ranges.append((min(cid for cid, _ in delta.values()), upper))
        self.blobs.update(blob_ref(ch, v) for ch, (_, v) in delta.items() if v is not None)


class Expiry:
    """One saver's ``ttl`` (None: documents never expire) applied at a moment ``now``."""

    def __init__(self, ttl: timedelta | None) -> None:
        self.ttl = ttl

    def documents(self, now: datetime) -> datetime | None:
        """``expires_at`` of a document written now."""
        return now + self.ttl if self.ttl else None

    def elements(self, now: datetime) -> datetime | None:
        """``expires_at`` of a list element written or refreshed now."""
        return now + self.ttl * ELEMENT_TTL_FACTOR if self.ttl else None

    def refresh_ops(self, refreshes: Iterable[Refresh], now: datetime) -> list[Any]:
        """Updates extending the expiry of what ``refreshes`` name (empty without a ttl)."""
        expires_at, element_expires_at = self.documents(now), self.elements(now)
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


def loaded_refreshes(items: list[Loaded], heads: dict[tuple[str, str, str], Head]) -> list[Refresh]:
    """What a read of ``items`` extends (``refresh_ttl_on_read``): each checkpoint with its
    writes, its values, its DeltaChannel history and its list elements."""
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
            refresh.add_delta(head.delta, rec.checkpoint_id)
            for _version, runs in head.lists.values():
                refresh.elements += runs
    return list(groups.values())
