"""A thread of any LangGraph saver as Python data: its checkpoints with their writes.

What ``graphkeep copy`` and the live switch's mover (:mod:`graphkeep.moving.fallback`) read a
source thread into: :class:`CheckpointItem` per checkpoint, newest first, each with its pending
writes (:class:`WriteItem`, with the ``idx`` / ``task_path`` the saver stored where its own
reader gives them: :class:`Source`). :func:`oldest_first` orders them for writing and
:func:`task_batches` groups a task's writes so ``put_writes`` gives each its ``idx`` again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key

from graphkeep.moving.decode import LosslessSerde


class Source(Protocol):
    """A saver read as a source: ``tuples`` / ``write_rows``, where not None, are its own
    reader of a thread's checkpoints and of a checkpoint's stored write rows
    (``(task_id, idx, task_path, channel)``), in place of ``list`` / ``pending_writes``."""

    @property
    def saver(self) -> Any: ...

    @property
    def tuples(self) -> Callable[[str], list[Any]] | None: ...

    @property
    def write_rows(
        self,
    ) -> Callable[[str, str, str], list[tuple[str, int, str, str]] | None] | None: ...


@dataclass
class WriteItem:
    task_id: str
    channel: str
    idx: int | None
    task_path: str
    value: Any


@dataclass
class CheckpointItem:
    """One checkpoint as Python data (values loaded losslessly), with its writes."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: Any
    metadata: Any
    writes: list[WriteItem] = field(default_factory=list)

    @property
    def versions(self) -> dict[str, Any]:
        if isinstance(self.checkpoint, dict):
            return dict(self.checkpoint.get("channel_versions") or {})
        return {}


def thread_config(thread_id: str, ns: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    return {"configurable": conf}


def foreign_items(
    endpoint: Source, thread_id: str, *, ns: str | None = None, limit: int | None = None
) -> list[CheckpointItem]:
    """A foreign saver's thread, newest first (``list`` order; the saver's own reader where
    it has one, :mod:`graphkeep.moving.rivals`)."""
    return [item for item, _ in read_thread(endpoint, thread_id, ns=ns, limit=limit)]


def read_thread(
    endpoint: Source, thread_id: str, *, ns: str | None = None, limit: int | None = None
) -> list[tuple[CheckpointItem, Any]]:
    """:func:`foreign_items`, each with the ``CheckpointTuple`` it was read from."""
    items = []
    if endpoint.tuples is not None:
        tuples = endpoint.tuples(thread_id)
        if ns is not None:
            tuples = [t for t in tuples if t.config["configurable"].get("checkpoint_ns", "") == ns]
        tuples = tuples[:limit] if limit is not None else tuples
    else:
        # materialised first: SqliteSaver holds its lock while its list() generator runs
        tuples = list(endpoint.saver.list(thread_config(thread_id, ns), limit=limit))
    for tup in tuples:
        conf = tup.config["configurable"]
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        ns_of = str(conf.get("checkpoint_ns", ""))
        checkpoint_id = str(conf["checkpoint_id"])
        item = CheckpointItem(
            ns=ns_of,
            checkpoint_id=checkpoint_id,
            parent_id=parent or None,
            checkpoint=tup.checkpoint,
            metadata=tup.metadata,
            writes=foreign_writes(endpoint, thread_id, ns_of, checkpoint_id, tup),
        )
        items.append((item, tup))
    return items


def foreign_writes(
    endpoint: Source, thread_id: str, ns: str, checkpoint_id: str, tup: Any
) -> list[WriteItem]:
    pending: Sequence[tuple[str, str, Any]] = tup.pending_writes or []
    rows: list[tuple[str, int, str, str]] | None = None
    if endpoint.write_rows is not None and pending:
        try:
            rows = endpoint.write_rows(thread_id, ns, checkpoint_id)
        except Exception:  # the saver's own tables changed shape: fall back to the API
            rows = None
    if rows is not None:
        matched = _match_rows(rows, pending)
        if matched is not None:
            return matched
    return [
        WriteItem(str(task_id), channel, None, "", value) for task_id, channel, value in pending
    ]


def _match_rows(
    rows: list[tuple[str, int, str, str]], pending: Sequence[tuple[str, str, Any]]
) -> list[WriteItem] | None:
    """The pending writes with their stored ``idx`` / ``task_path``, in LangGraph's
    ``writes_sort_key`` order: each write takes the first unused row of its task and channel
    (savers return writes in their own order). None when the rows do not account for every
    write, one for one."""
    if len(rows) != len(pending):
        return None
    free = sorted(rows, key=lambda r: writes_sort_key(r[2], r[0], r[1]))
    taken = [False] * len(free)
    found: list[tuple[int, WriteItem]] = []
    for task_id, channel, value in pending:
        for at, row in enumerate(free):
            if not taken[at] and row[0] == str(task_id) and row[3] == channel:
                taken[at] = True
                found.append((at, WriteItem(str(task_id), channel, row[1], row[2], value)))
                break
        else:
            return None
    return [item for _, item in sorted(found, key=lambda f: f[0])]


def oldest_first(items: list[CheckpointItem]) -> list[CheckpointItem]:
    """By id, but a parent always before its children (ids need not be time-ordered)."""
    by_key = {(i.ns, i.checkpoint_id): i for i in items}
    ordered: list[CheckpointItem] = []
    done: set[tuple[str, str]] = set()
    for item in sorted(items, key=lambda i: (i.checkpoint_id, i.ns)):
        stack = []
        key: tuple[str, str] | None = (item.ns, item.checkpoint_id)
        while key is not None and key in by_key and key not in done and key not in stack:
            stack.append(key)
            parent = by_key[key].parent_id
            key = (key[0], parent) if parent else None
        for k in reversed(stack):
            done.add(k)
            ordered.append(by_key[k])
    return ordered


def task_batches(writes: list[WriteItem]) -> list[list[tuple[str, Any]]]:
    """``put_writes`` batches that give each write its original ``idx`` where known.

    ``put_writes`` numbers regular writes by list position and special ones by
    channel, so a task's writes ``{resume: -4, a: 1, b: 2}`` go in one batch as
    ``[resume, a, b]``. When the original positions cannot be rebuilt (or are
    unknown), special and regular writes go in two batches, in order.
    """
    special = [w for w in writes if w.channel in WRITES_IDX_MAP]
    regular = [w for w in writes if w.channel not in WRITES_IDX_MAP]
    known = [w.idx for w in regular if w.idx is not None]
    if regular and len(known) == len(regular):
        slots = {w.idx: w for w in regular if w.idx is not None}
        size = max(known) + 1
        if len(slots) == len(regular) and size - len(regular) <= len(special):
            fillers = iter(special)
            batch = [slots[i] if i in slots else next(fillers) for i in range(size)]
            batch += list(fillers)
            return [[(w.channel, w.value) for w in batch]]
    batches = []
    if special:
        batches.append([(w.channel, w.value) for w in special])
    if regular:
        batches.append([(w.channel, w.value) for w in regular])
    return batches


#: what tells two values of one channel version apart (see graphkeep.moving.versions)
FINGERPRINT_SERDE = LosslessSerde(strict=False)


def fingerprint(value: Any) -> bytes:
    """A value's bytes as the copy would store them (the same value, the same bytes)."""
    try:
        tag, data = FINGERPRINT_SERDE.dumps_typed(value)
    except Exception:  # not msgpack-able: its text still tells values apart
        return repr(value).encode()
    return tag.encode() + b"\x00" + data
