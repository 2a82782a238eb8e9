"""The MongoDB reads of the parent walk: ancestors' heads fetched in pages, for the one rule
:func:`graphkeep.checkpoint.walk.walk_op`, and the seed values a chain read starts from.

See docs/architecture.md ("Where each contract rule lives").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from graphkeep.backends.mongodb.documents import KIND_CP, conjunction, live
from graphkeep.backends.mongodb.heads import SUMMARY_FIELDS, Head, head_of
from graphkeep.backends.mongodb.requests import find
from graphkeep.checkpoint.records import Summary
from graphkeep.checkpoint.walk import walk_op
from graphkeep.port import Op

#: checkpoint summaries fetched per query by ancestor walks
CHAIN_PAGE = 1000

#: channel -> (checkpoint id, version) of the nearest ancestor storing its value
Seeds = dict[str, tuple[str, str | None]]


class HeadPages:
    """Heads fetched so far by an ancestor walk, and which id ranges are complete."""

    def __init__(self) -> None:
        self.heads: dict[str, Head] = {}
        self.covered: list[tuple[str, str]] = []

    def add_page(self, upper: str, docs: list[Mapping[str, Any]], full: bool) -> None:
        """``docs``: the checkpoints with ids <= ``upper``, newest first; ``full`` when the
        page was cut by its limit (older ones exist)."""
        for doc in docs:
            head = head_of(doc)
            self.heads[head.summary.checkpoint_id] = head
        low = docs[-1]["ref"] if (full and docs) else ""
        self.covered.append((low, upper))

    def get(self, checkpoint_id: str) -> Head | None:
        return self.heads.get(checkpoint_id)

    def covers(self, checkpoint_id: str) -> bool:
        return any(low <= checkpoint_id <= high for low, high in self.covered)


def read_ancestors(
    payloads: str,
    thread_id: str,
    ns: str,
    start: str | None,
    channels: Iterable[str],
    pages: HeadPages,
    now: datetime,
) -> Op[tuple[list[Summary], Seeds]]:
    """Ancestors from ``start`` (inclusive) rootward until each channel has a stored value
    (:func:`walk_op`), with channel -> (seed checkpoint id, seed version).

    An ancestor not in ``pages`` costs one find of the next CHAIN_PAGE heads (ids <= the
    missing one, newest first), so a chain of up to CHAIN_PAGE ancestors costs at most
    one more query; an id inside a range already read is not stored (the walk ends).
    """
    wanted = list(channels)

    def read(checkpoint_id: str) -> Op[Summary | None]:
        head = pages.get(checkpoint_id)
        if head is None:
            if pages.covers(checkpoint_id):
                return None
            match = {
                "thread_id": thread_id,
                "ns": ns,
                "kind": KIND_CP,
                "ref": {"$lte": checkpoint_id},
            }
            docs = yield find(
                payloads,
                conjunction([match, live(now)]),
                projection=SUMMARY_FIELDS,
                sort=[("ref", -1)],
                limit=CHAIN_PAGE,
            )
            pages.add_page(checkpoint_id, docs, full=len(docs) == CHAIN_PAGE)
            head = pages.get(checkpoint_id)
            if head is None:
                return None
        return head.summary

    found = yield from walk_op(start, wanted, read)
    return found, seeds(found, wanted)


def seeds(found: list[Summary], channels: Iterable[str]) -> Seeds:
    """For each channel, the first of ``found`` (nearest first) storing its value."""
    wanted = set(channels)
    seeded: Seeds = {}
    for summary in found:
        for ch in summary.present:
            if ch in wanted and ch not in seeded and ch in summary.versions:
                seeded[ch] = (summary.checkpoint_id, summary.versions[ch])
    return seeded
