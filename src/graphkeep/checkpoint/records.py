"""The three record kinds every store keeps, as plain data.

A backend maps these onto its native primitives; it never looks inside a
``Typed`` payload. ``CheckpointRecord`` keeps, next to the serialized
checkpoint, the small plain fields a store needs to serve reads and ancestor
walks without deserializing anything: the version of every channel, which
channels have a stored value, and which DeltaChannels rebuild their value from
ancestor writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from graphkeep.port.codec import Typed

__all__ = [
    "HOLDS_CHECKPOINT",
    "HOLDS_OTHER",
    "HOLDS_VALUE",
    "HOLDS_WRITES",
    "RUN_SOURCES",
    "Activity",
    "BlobRecord",
    "Chain",
    "CheckpointRecord",
    "Expiring",
    "CheckpointKeys",
    "Inventory",
    "Link",
    "ListQuery",
    "Loaded",
    "Summary",
    "ThreadDump",
    "Typed",
    "WriteRecord",
]


@dataclass(slots=True)
class CheckpointRecord:
    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    #: channel -> version key, for every channel in ``channel_versions``
    versions: dict[str, str]
    #: channels whose value is stored as a blob at ``versions[channel]``
    present: list[str]
    #: DeltaChannels as this checkpoint's evidence names them (``put``'s ``delta_evidence``):
    #: those not in ``present`` rebuild their value at this checkpoint from ancestor writes
    needs_history: list[str]
    run_id: str | None
    #: the checkpoint dict without ``channel_values``
    checkpoint: Typed
    metadata: Typed
    #: a plain JSON-compatible copy of the metadata, for server-side filters
    metadata_doc: dict[str, Any] = field(default_factory=dict)
    #: the metadata's ``source`` (LangGraph: "input", "loop", "update" or "fork"), stored
    #: beside the summary so that ``graphkeep check`` tells a run's child from an asked-for
    #: branch without a payload; None when the metadata has none
    source: str | None = None

    def renamed(self, thread_id: str) -> CheckpointRecord:
        return replace(self, thread_id=thread_id)

    def with_payloads(
        self, checkpoint: Typed, metadata: Typed, metadata_doc: dict[str, Any] | None = None
    ) -> CheckpointRecord:
        """The record with these payloads (and plain metadata copy, when given): what
        ``replace`` makes, several times faster (called per record on every sealed put and
        read; ``tests/test_encryption_cost.py`` checks that it keeps every other field)."""
        return CheckpointRecord(
            self.thread_id,
            self.ns,
            self.checkpoint_id,
            self.parent_id,
            self.versions,
            self.present,
            self.needs_history,
            self.run_id,
            checkpoint,
            metadata,
            self.metadata_doc if metadata_doc is None else metadata_doc,
            self.source,
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """What an ancestor walk or a prune needs of a checkpoint (no payload)."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    versions: dict[str, str]
    present: list[str]
    needs_history: list[str]
    run_id: str | None = None
    #: the metadata's ``source``; None when it has none or the store did not record it
    #: (Redis and DynamoDB heads written before graphkeep recorded it)
    source: str | None = None

    def link(self) -> Link:
        return Link(self.ns, self.checkpoint_id, self.parent_id, self.source, self.run_id)


#: the ``source`` of a checkpoint a run writes as it goes (LangGraph's loop: its input, its
#: steps); "update" (``update_state``, graphkeep's tools) and "fork" (a replay, a copy) are
#: branches someone asked for
RUN_SOURCES = ("input", "loop")


@dataclass(frozen=True, slots=True)
class Link:
    """A checkpoint's place in its thread's tree and who wrote it (no payload): what the
    fork rule (:func:`graphkeep.checkpoint.check.concurrent_forks`) reads."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    source: str | None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class WriteRecord:
    task_id: str
    idx: int
    channel: str
    task_path: str
    value: Typed

    def with_value(self, value: Typed) -> WriteRecord:
        """The write with this payload (``replace``, several times faster)."""
        return WriteRecord(self.task_id, self.idx, self.channel, self.task_path, value)

    @property
    def special(self) -> bool:
        """Special writes (error, interrupt, resume, scheduled) replace; others insert once."""
        return self.idx < 0


@dataclass(frozen=True, slots=True)
class CheckpointKeys:
    """A checkpoint as its keys show it (no payload): its id and the ``idx`` of each of its
    pending writes, one per write, in any order.

    What the hot layer (:mod:`graphkeep.checkpoint.hot`) validates a cached checkpoint
    against: a checkpoint never changes once written and its regular writes are only ever
    added, so the same id with as many writes is the same checkpoint with the same writes;
    special writes (``idx < 0``: error, interrupt, resume, scheduled) replace in place, so
    a checkpoint that has one is never served from a cache.
    """

    checkpoint_id: str
    indexes: tuple[int, ...]

    @property
    def special(self) -> bool:
        return any(idx < 0 for idx in self.indexes)


@dataclass(frozen=True, slots=True)
class BlobRecord:
    channel: str
    version: str
    value: Typed

    def with_value(self, value: Typed) -> BlobRecord:
        """The blob with this payload (``replace``, several times faster)."""
        return BlobRecord(self.channel, self.version, value)


@dataclass(slots=True)
class Loaded:
    """One checkpoint as read back: the record, its channel values and pending writes."""

    record: CheckpointRecord
    blobs: dict[str, Typed]
    writes: list[WriteRecord]
    #: list elements the store returned with the checkpoint (element key -> value);
    #: stores that cannot fetch them in the same request leave it empty and the
    #: saver asks ``get_blobs`` (see :mod:`graphkeep.checkpoint.lists`)
    elements: dict[str, Typed] = field(default_factory=dict)


@dataclass(slots=True)
class Chain:
    """What a store returns for an ancestor walk.

    ``ancestors`` starts at the target's parent and goes rootward; it must reach
    at least the nearest ancestor storing a value for each requested channel
    (more is harmless). ``writes`` maps ancestor ids to their writes and
    ``blobs`` maps (channel, version) to seed values.
    """

    target_id: str | None
    ancestors: list[Summary]
    writes: dict[str, list[WriteRecord]]
    blobs: dict[tuple[str, str], Typed]


@dataclass(slots=True)
class Inventory:
    """Everything a thread holds, without payloads (for prune and GC)."""

    checkpoints: list[Summary]
    #: (ns, checkpoint_id) of every checkpoint that has writes, even without a checkpoint
    write_keys: set[tuple[str, str]]
    #: (ns, channel, version) of every stored blob
    blob_keys: set[tuple[str, str, str]]
    #: when each unit of the thread's storage expires (read in the same request as the
    #: rest, never a payload); empty from a port that does not report it
    expiries: list[Expiring] = field(default_factory=list)
    #: the port's refs of chunks (:meth:`~graphkeep.checkpoint.port.CheckpointPort.chunk_refs`)
    #: whose stored owner names other bytes: left by an overwrite before that deleted them
    #: (:meth:`~graphkeep.checkpoint.port.CheckpointPort.drop_chunks` deletes them); empty
    #: from a port without chunks
    stray_chunks: frozenset[str] = frozenset()


#: what an :class:`Expiring` unit holds: a checkpoint (its head, payload or chunks), the
#: pending writes of a checkpoint, a channel value (list elements included), or, for a
#: unit of the whole thread (a Redis key), something else of every record (an index, the feed)
HOLDS_CHECKPOINT, HOLDS_WRITES, HOLDS_VALUE, HOLDS_OTHER = "checkpoint", "writes", "value", "other"


@dataclass(frozen=True, slots=True)
class Expiring:
    """When one unit of a thread's storage expires: the granule of the store's TTL (a Redis
    key, a MongoDB document, a DynamoDB item) and what it holds.

    ``ns`` None marks a unit of the whole thread: a Redis key holds one part of every record
    of the thread (``holds`` says which part), and every write re-arms all of them together.
    Otherwise the unit is (part of) one record: the checkpoint ``checkpoint_id`` or its
    writes, or the value ``(channel, version)``.
    """

    #: the port's own name for the unit (``rearm`` takes it back): a key, an ``_id``, a sort key
    ref: Any
    #: epoch seconds from which reads no longer see it; None: it never expires
    at: float | None
    holds: str
    ns: str | None = None
    checkpoint_id: str | None = None
    channel: str | None = None
    version: str | None = None


@dataclass(slots=True)
class ThreadDump:
    """A whole thread, for copy and migration."""

    checkpoints: list[CheckpointRecord]
    writes: list[tuple[str, str, WriteRecord]]
    blobs: list[tuple[str, BlobRecord]]

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.writes or self.blobs)


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A ``list`` call as the store sees it (filter is re-checked by the saver)."""

    thread_id: str | None
    ns: str | None
    checkpoint_id: str | None
    before: str | None
    filter: dict[str, Any]
    limit: int | None


@dataclass(frozen=True, slots=True)
class Activity:
    """What a health scan needs of one thread, read from the store's indexes (no payload).

    ``recent``: ids of the thread's checkpoints (every namespace) above the scan's
    ``above`` id, ascending, at most the scan's limit (LangGraph's ids are uuid6: they
    carry their creation time); ``newest_id``: its highest checkpoint id; ``interrupted``:
    the root namespace's latest checkpoint has a pending interrupt write; ``bytes``: what
    the thread occupies on the store, None when the store cannot say cheaply; ``links``: the
    :class:`Link` of each checkpoint of ``recent`` (for the fork count), None when the
    store did not read them.
    """

    thread_id: str
    newest_id: str | None
    recent: list[str]
    interrupted: bool
    bytes: int | None = None
    links: list[Link] | None = None
