"""The parent walk on DynamoDB: a checkpoint and the ancestors its DeltaChannels need.

The rule is :func:`graphkeep.checkpoint.walk.walk_op`'s; this module supplies its read of one
ancestor from one descending Query of the namespace, starting at the target and read ahead a
page at a time (a first page of :data:`CHAIN_FIRST_PAGE` items, about 100 ancestors with a
write each, then 1 MB pages): collections of other branches are passed over, parents are
found by id. See docs/architecture.md ("Where each contract rule lives").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import (
    CheckpointTable,
    Collection,
    Descending,
    head_names,
    summary_of,
)
from graphkeep.backends.dynamodb.items import hidden
from graphkeep.backends.dynamodb.requests import query_page
from graphkeep.checkpoint.records import Summary
from graphkeep.checkpoint.walk import walk_op
from graphkeep.port import Op

#: items read by the first page of an ancestor walk (about 100 ancestors with a write each)
CHAIN_FIRST_PAGE = 256


@dataclass(slots=True)
class Link:
    """A checkpoint of a walk: its head and writes as read, and its summary."""

    coll: Collection
    summary: Summary


@dataclass(slots=True)
class Walk:
    """The target (None when it is not stored or expired) and its ancestors, parent first."""

    target: Link | None
    ancestors: list[Link]


class _Pages:
    """A descending Query read ahead a page at a time, as checkpoints (heads with writes)."""

    def __init__(self, pk: str, params: dict[str, Any]) -> None:
        self.pk = pk
        self.params = params
        self.grouping = Descending()
        self.items: list[dict[str, Any]] = []
        self.pos = 0
        self.start: dict[str, Any] | None = None
        self.fetched = False

    def next(self) -> Op[Collection | None]:
        """The next checkpoint down the namespace; None past the last page."""
        while True:
            while self.pos < len(self.items):
                item = self.items[self.pos]
                self.pos += 1
                coll = self.grouping.feed(self.pk, item)
                if coll is not None and coll.head is not None:
                    return coll
            if self.fetched:
                if self.start is None:
                    return None
                # later pages are whole 1 MB pages
                self.params = {k: v for k, v in self.params.items() if k != "Limit"}
            page = yield from query_page(self.params, self.start)
            self.fetched = True
            self.items, self.pos = page.get("Items", []), 0
            self.start = page.get("LastEvaluatedKey")


def _link(coll: Collection) -> Link:
    assert coll.head is not None
    names = head_names(coll.head)
    return Link(coll, summary_of(names.ns, names.checkpoint_id, coll.head))


def walk(
    t: CheckpointTable,
    pk: str,
    ns_part: str,
    checkpoint_id: str | None,
    channels: Iterable[str],
    now: float,
) -> Op[Walk]:
    """The target (``checkpoint_id``, or the newest of the namespace) and its ancestors
    until ``channels`` are seeded, by :func:`walk_op`'s rule over one descending Query."""
    lower = keys.namespace_prefix(ns_part)
    if checkpoint_id:
        upper = keys.through_bound(ns_part, keys.part(checkpoint_id)[0])
        params = t.query(pk, between=(lower, upper), forward=False, limit=CHAIN_FIRST_PAGE)
    else:
        params = t.query(pk, begins=lower, forward=False, limit=CHAIN_FIRST_PAGE)
    pages = _Pages(pk, params)
    first = yield from pages.next()
    if first is None or first.head is None:
        return Walk(None, [])
    target = _link(first)
    if checkpoint_id and target.summary.checkpoint_id != checkpoint_id:
        return Walk(None, [])
    if hidden(first.head, now):
        return Walk(None, [])
    ancestors: list[Link] = []

    def read(parent_id: str) -> Op[Summary | None]:
        expected = keys.part(parent_id)[0]
        while True:
            coll = yield from pages.next()
            if coll is None:
                return None
            if coll.checkpoint_id > expected:
                continue  # another branch
            assert coll.head is not None
            if coll.checkpoint_id < expected or hidden(coll.head, now):
                return None  # the expected ancestor is not stored
            ancestors.append(_link(coll))
            return ancestors[-1].summary

    yield from walk_op(target.summary.parent_id, channels, read)
    return Walk(target, ancestors)
