"""A thread as the CLI reads it: its checkpoints and writes as Python data, and its summary.

One view over both kinds of endpoint (:mod:`graphkeep.cli.endpoints`): a graphkeep saver is
read through its checkpoint port (``export_thread``, ``inventory``: stored bytes, shared
lists rebuilt from their element records), one of LangGraph's own savers through its public
``list`` / ``get_tuple``. ``threads``, ``copy`` and ``stats`` build on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import writes_sort_key

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, load_value, where
from graphkeep.checkpoint.records import ThreadDump, Typed, WriteRecord
from graphkeep.cli.console import iso, parse_ts, uuid6_time
from graphkeep.cli.endpoints import Endpoint, Native
from graphkeep.moving.decode import Encrypted, LosslessSerde, load_plain
from graphkeep.moving.items import (
    CheckpointItem,
    WriteItem,
    foreign_items,
)
from graphkeep.port import codec

THREAD_PAGE_SIZE = 500


# -- checkpoints and writes ----------------------------------------------------------


def iter_threads(endpoint: Endpoint, page_size: int = THREAD_PAGE_SIZE) -> Iterator[str]:
    """Every thread id of the store, page by page (foreign savers: one ``list(None)`` pass)."""
    if isinstance(endpoint, Native):
        cursor: Any = None
        while True:
            threads, cursor = endpoint.call(endpoint.saver.port.list_threads(cursor, page_size))
            yield from threads
            if cursor is None:
                return
    if endpoint.threads is not None:  # the saver's own listing (rivals.py)
        yield from endpoint.threads()
        return
    seen: set[str] = set()
    for item in endpoint.saver.list(None):
        thread_id = str(item.config["configurable"]["thread_id"])
        if thread_id not in seen:
            seen.add(thread_id)
    yield from sorted(seen)


def export(endpoint: Native, thread_id: str) -> ThreadDump:
    dump: ThreadDump = endpoint.call(endpoint.saver.port.export_thread(thread_id))
    return dump


# -- shared lists (graphkeep.checkpoint.lists): a manifest blob stands for a list ----------


def is_element(key: tuple[str, str, str]) -> bool:
    """Is this ``(ns, channel, version)`` blob key a list element record?"""
    return key[1] == ELEMENT_CHANNEL


def dump_elements(dump: ThreadDump) -> dict[str, dict[str, Typed]]:
    """The element records of an export: namespace -> element key -> stored value."""
    elements: dict[str, dict[str, Typed]] = {}
    for ns, blob in dump.blobs:
        if blob.channel == ELEMENT_CHANNEL:
            elements.setdefault(ns, {})[blob.version] = blob.value
    return elements


def native_items(
    endpoint: Native, thread_id: str, dump: ThreadDump | None = None
) -> list[CheckpointItem]:
    """A graphkeep thread as :class:`CheckpointItem` s, oldest first (values via saver.serde).

    Shared lists come back whole: their manifests are rebuilt from the export's
    element records.
    """
    dump = dump if dump is not None else export(endpoint, thread_id)
    serde = endpoint.saver.serde
    blobs = {(ns, b.channel, b.version): b.value for ns, b in dump.blobs}
    elements = dump_elements(dump)
    writes: dict[tuple[str, str], list[WriteRecord]] = {}
    for ns, checkpoint_id, w in dump.writes:
        writes.setdefault((ns, checkpoint_id), []).append(w)
    items = []
    for record in sorted(dump.checkpoints, key=lambda r: (r.checkpoint_id, r.ns)):
        checkpoint = codec.load(serde, record.checkpoint)
        if isinstance(checkpoint, dict):
            values = {}
            for channel in record.present:
                blob = blobs.get((record.ns, channel, record.versions.get(channel, "")))
                if blob is not None and blob.tag != codec.EMPTY_TAG:
                    at = where(thread_id, record.ns, record.checkpoint_id, channel)
                    values[channel] = load_value(serde, blob, elements.get(record.ns, {}), at)
            checkpoint["channel_values"] = values
        own = sorted(
            writes.get((record.ns, record.checkpoint_id), []),
            key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx),
        )
        items.append(
            CheckpointItem(
                ns=record.ns,
                checkpoint_id=record.checkpoint_id,
                parent_id=record.parent_id,
                checkpoint=checkpoint,
                metadata=codec.load(serde, record.metadata),
                writes=[
                    WriteItem(w.task_id, w.channel, w.idx, w.task_path, codec.load(serde, w.value))
                    for w in own
                ],
            )
        )
    return items


# -- thread summaries ------------------------------------------------------------------


@dataclass
class ThreadInfo:
    thread_id: str
    checkpoints: int
    namespaces: list[str]
    writes: int | None
    blobs: int | None
    bytes: int | None
    last_checkpoint_id: str | None
    last_ts: float | None
    bytes_by_kind: dict[str, int] = field(default_factory=dict)
    #: list element records (shared lists); not counted in ``blobs``
    elements: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "checkpoints": self.checkpoints,
            "namespaces": self.namespaces,
            "writes": self.writes,
            "blobs": self.blobs,
            "list_elements": self.elements,
            "bytes": self.bytes,
            "bytes_by_kind": self.bytes_by_kind,
            "last_checkpoint_id": self.last_checkpoint_id,
            "last_checkpoint_ts": iso(self.last_ts),
        }


def checkpoint_ts(body: Any, checkpoint_id: str | None) -> float | None:
    """The ``ts`` of a decoded checkpoint body, else the time in its uuid6 id."""
    if isinstance(body, dict):
        ts = parse_ts(body.get("ts"))
        if ts is not None:
            return ts
    return uuid6_time(checkpoint_id) if checkpoint_id else None


def thread_info(endpoint: Endpoint, thread_id: str) -> ThreadInfo | None:
    if isinstance(endpoint, Native):
        return native_info(thread_id, export(endpoint, thread_id))
    return foreign_info(thread_id, foreign_items(endpoint, thread_id))


def quick_info(endpoint: Endpoint, thread_id: str) -> ThreadInfo | None:
    """Counts from the store's index only (no payloads): no sizes, no write counts."""
    if not isinstance(endpoint, Native):
        return thread_info(endpoint, thread_id)
    inventory = endpoint.call(endpoint.saver.port.inventory(thread_id))
    if not inventory.checkpoints:
        return None
    last = max(inventory.checkpoints, key=lambda s: s.checkpoint_id)
    last_ts = uuid6_time(last.checkpoint_id)
    if last_ts is None:
        loaded = endpoint.call(endpoint.saver.port.load(thread_id, last.ns, last.checkpoint_id))
        if loaded is not None:
            last_ts = checkpoint_ts(_plain(loaded.record.checkpoint), last.checkpoint_id)
    return ThreadInfo(
        thread_id=thread_id,
        checkpoints=len(inventory.checkpoints),
        namespaces=sorted({s.ns for s in inventory.checkpoints}),
        writes=None,
        blobs=sum(1 for key in inventory.blob_keys if not is_element(key)),
        bytes=None,
        last_checkpoint_id=last.checkpoint_id,
        last_ts=last_ts,
        elements=sum(1 for key in inventory.blob_keys if is_element(key)),
    )


def native_info(thread_id: str, dump: ThreadDump) -> ThreadInfo | None:
    if not dump:
        return None
    elements = [b for _, b in dump.blobs if b.channel == ELEMENT_CHANNEL]
    kinds = {
        "checkpoints": sum(len(r.checkpoint.data) + len(r.metadata.data) for r in dump.checkpoints),
        "writes": sum(len(w.value.data) for _, _, w in dump.writes),
        "blobs": sum(len(b.value.data) for _, b in dump.blobs if b.channel != ELEMENT_CHANNEL),
        "list_elements": sum(len(b.value.data) for b in elements),
    }
    last = max(dump.checkpoints, key=lambda r: r.checkpoint_id, default=None)
    last_ts = None
    if last is not None:
        last_ts = checkpoint_ts(_plain(last.checkpoint), last.checkpoint_id)
    return ThreadInfo(
        thread_id=thread_id,
        checkpoints=len(dump.checkpoints),
        namespaces=sorted({r.ns for r in dump.checkpoints}),
        writes=len(dump.writes),
        blobs=len(dump.blobs) - len(elements),
        bytes=sum(kinds.values()),
        last_checkpoint_id=last.checkpoint_id if last else None,
        last_ts=last_ts,
        bytes_by_kind=kinds,
        elements=len(elements),
    )


def foreign_info(thread_id: str, items: list[CheckpointItem]) -> ThreadInfo | None:
    if not items:
        return None
    sizer = LosslessSerde(strict=False)
    kinds = {"checkpoints": 0, "writes": 0}
    sized = True
    for item in items:
        try:
            kinds["checkpoints"] += len(sizer.dumps_typed(item.checkpoint)[1])
            kinds["checkpoints"] += len(sizer.dumps_typed(item.metadata)[1])
            kinds["writes"] += sum(len(sizer.dumps_typed(w.value)[1]) for w in item.writes)
        except Exception:  # encrypted without the key: count, but do not size
            sized = False
    last = max(items, key=lambda i: i.checkpoint_id)
    return ThreadInfo(
        thread_id=thread_id,
        checkpoints=len(items),
        namespaces=sorted({i.ns for i in items}),
        writes=sum(len(i.writes) for i in items),
        blobs=None,
        bytes=sum(kinds.values()) if sized else None,
        last_checkpoint_id=last.checkpoint_id,
        last_ts=checkpoint_ts(last.checkpoint, last.checkpoint_id),
        bytes_by_kind=kinds if sized else {},
    )


def _plain(value: Typed) -> Any:
    loaded = load_plain(value.tag, value.data)
    return None if isinstance(loaded, Encrypted) else loaded
