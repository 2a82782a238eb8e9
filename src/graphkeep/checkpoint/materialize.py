"""Materialize DeltaChannels: a rollback path for runtimes older than LangGraph 1.2.

LangGraph 1.2's ``DeltaChannel`` stores no value in most checkpoints: the value is rebuilt from
the nearest ``_DeltaSnapshot`` (or plain value) and the writes since. LangGraph 1.1 does not know
that, so it reads such a channel as empty and starts the conversation again.
:func:`materialize` writes, per namespace of a thread, one new checkpoint (a child of the
namespace's latest) whose DeltaChannels hold their full value as a plain value; everything else is
the head's, and nothing is changed or removed. LangGraph 1.1 reads the plain value as its
``BinaryOperatorAggregate`` would; LangGraph 1.2 reads it too (``DeltaChannel.from_checkpoint``
takes a plain value: its "migration from old blobs").

Written against LangGraph's public saver API only (``get_tuple``, ``list``,
``get_delta_channel_history``, ``put``, ``get_next_version``), so it serves graphkeep's savers and
LangGraph's own (SQLite, Postgres) alike. On a graphkeep saver the thread's lease
(:mod:`.lock`) is held meanwhile: a thread a live run holds is skipped and reported ``locked``.

The new checkpoint:

- ``channel_values``: the head's plain values plus each materialized channel's value;
- ``channel_versions``: the head's, with only the materialized channels bumped (by the saver's
  ``get_next_version`` of the highest version of the head), so no stored value is replaced;
  ``versions_seen`` and ``updated_channels`` are the head's, so the next step is the head's;
- metadata ``source: "update"``, ``step`` one past the head's, the head's ``parents``,
  ``counters_since_delta_snapshot`` without the materialized channels (as LangGraph resets them
  after a snapshot), ``graphkeep_materialize: {"from_checkpoint_id": <head id>, "channels":
  [...]}`` and the head's other metadata (:mod:`.append`: the app's keys, ``schema_version``).

Like LangGraph's ``update_state``, the new checkpoint does not carry the head's pending writes
(they belong to the child that consumes them): an interrupted thread's ``next`` is unchanged,
resuming it (``Command(resume=...)``) runs the interrupted node again, and its
``get_state().interrupts`` is empty until then. A DeltaChannel the head's pending writes touch is
always materialized, so a reader never replays those writes into the new checkpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, RemoveMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.types import Overwrite

from graphkeep.checkpoint.append import MATERIALIZED_KEY, appended_identity, appended_metadata
from graphkeep.checkpoint.saver import SaverBase
from graphkeep.errors import LockNotAcquired

COUNTERS = "counters_since_delta_snapshot"
#: ``Overwrite``'s dict form (``{"__overwrite__": value}``), as LangGraph's reducers accept it
OVERWRITE_KEY = "__overwrite__"
#: how long the lease of a thread being materialized lasts (renewed by nothing: one thread's
#: reads and puts take far less)
LOCK_TTL = 120.0

#: per-thread outcomes
MATERIALIZED = "materialized"
WOULD_MATERIALIZE = "would_materialize"
ALREADY_PLAIN = "already_plain"
LOCKED = "locked"
NOT_FOUND = "not_found"
FAILED = "failed"


@dataclass
class NamespaceResult:
    """One namespace of a thread: what was (or would be) written."""

    ns: str
    status: str
    source_checkpoint_id: str | None = None
    checkpoint_id: str | None = None
    #: materialized channel -> number of items of its value (None when it has no length)
    channels: dict[str, int | None] = field(default_factory=dict)
    reason: str | None = None
    verified: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "checkpoint_ns": self.ns,
            "status": self.status,
            "source_checkpoint_id": self.source_checkpoint_id,
            "checkpoint_id": self.checkpoint_id,
            "channels": self.channels,
            "reason": self.reason,
            "verified": self.verified,
        }


@dataclass
class MaterializeReport:
    """One thread: its status (the module's constants) and each namespace's result."""

    thread_id: str
    status: str
    namespaces: list[NamespaceResult] = field(default_factory=list)
    reason: str | None = None

    @property
    def written(self) -> int:
        """Checkpoints written (0 on a dry run, an already plain or a failed thread)."""
        return sum(1 for n in self.namespaces if n.status == MATERIALIZED)

    @property
    def verified(self) -> bool | None:
        checked = [n.verified for n in self.namespaces if n.verified is not None]
        return all(checked) if checked else None

    def as_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "status": self.status,
            "reason": self.reason,
            "written": self.written,
            "verified": self.verified,
            "namespaces": [n.as_json() for n in self.namespaces],
        }


# -- reducers --------------------------------------------------------------------------


def messages_reducer(state: Sequence[Any], writes: Sequence[Any]) -> list[Any]:
    """``add_messages`` over a batch of writes, one write at a time (``RemoveMessage`` and
    ``REMOVE_ALL_MESSAGES`` as ``add_messages`` applies them); ``Overwrite`` is the channel's,
    before this is called. A ``RemoveMessage`` naming a message that is not there is dropped, as
    LangGraph 1.2's DeltaChannel messages reducer does (``add_messages`` would raise): the
    thread's own runtime read it that way."""
    value: list[Any] = list(state or [])
    for write in writes:
        batch = convert_to_messages(write if isinstance(write, list) else [write])
        known = {m.id for m in value if isinstance(m, BaseMessage)}
        known.update(m.id for m in batch if not isinstance(m, RemoveMessage))
        kept = [
            m
            for m in batch
            if not isinstance(m, RemoveMessage) or m.id == REMOVE_ALL_MESSAGES or m.id in known
        ]
        fold: Any = add_messages
        value = list(fold(value, kept))
    return value


def _unwrap(value: Any) -> Any:
    if isinstance(value, Overwrite):
        return value.value
    if isinstance(value, dict) and len(value) == 1 and OVERWRITE_KEY in value:
        return value[OVERWRITE_KEY]
    return value


def _is_message(item: Any) -> bool:
    """A message, or a message dict (``{"role"|"type": ..., "content": ...}``) as
    ``add_messages`` takes it; a bare string is not: a list of strings is no chat."""
    if isinstance(item, BaseMessage):
        return True
    return isinstance(item, dict) and "content" in item and ("role" in item or "type" in item)


def _messages_like(values: Iterable[Any]) -> bool:
    """Every value is a message or a list of messages (after an ``Overwrite`` is unwrapped)."""
    for value in values:
        value = _unwrap(value)
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        if not all(_is_message(item) for item in items):
            return False
    return True


def _channel_for(graph: Any, ns: str, channel: str) -> Any | None:
    """The graph's own channel object for ``channel`` in namespace ``ns`` (a subgraph's when
    ``ns`` names one), or None."""
    if graph is None:
        return None
    owner = graph
    if ns:
        path = "|".join(part.split(":", 1)[0] for part in ns.split("|"))
        owner = None
        try:
            for name, sub in graph.get_subgraphs(recurse=True):
                if name == path:
                    owner = sub
                    break
        except Exception:
            owner = None
        if owner is None:
            return None
    spec = getattr(owner, "channels", {}).get(channel)
    return spec if hasattr(spec, "from_checkpoint") else None


def _reduce(spec: Any, seed: Any, writes: Sequence[Any]) -> Any:
    """``seed`` plus ``writes`` (PendingWrite tuples) through ``spec``, as LangGraph replays."""
    ch = spec.from_checkpoint(seed)
    if hasattr(ch, "replay_writes"):
        ch.replay_writes(writes)
    else:  # a channel that is no DeltaChannel (any more): one update per write, as LangGraph
        for _, _, value in writes:
            ch.update([value])
    return ch.get()


# -- the plan --------------------------------------------------------------------------


def _config(thread_id: str, ns: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _is_snapshot(value: Any) -> bool:
    # LangGraph's ``_DeltaSnapshot`` (a private NamedTuple): recognised by name, as its module
    # may move while the format is beta
    return type(value).__name__ == "_DeltaSnapshot"


def delta_channels(head: CheckpointTuple) -> list[str]:
    """The head's DeltaChannels not held as a plain value: those its metadata counts
    (``counters_since_delta_snapshot``) with a version and no value, and every snapshot."""
    values = head.checkpoint.get("channel_values") or {}
    versions = head.checkpoint.get("channel_versions") or {}
    metadata: Any = head.metadata if isinstance(head.metadata, dict) else {}
    counted = dict(metadata.get(COUNTERS) or {})
    found = {ch for ch in counted if ch in versions and ch not in values}
    found |= {ch for ch, value in values.items() if _is_snapshot(value)}
    return sorted(found)


def namespaces(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[str]:
    """The thread's namespaces, the root last (a graphkeep saver: from its inventory)."""
    if isinstance(saver, SaverBase):
        inventory = saver.drive(saver.port.inventory(thread_id))
        found = {s.ns for s in inventory.checkpoints}
    else:
        found = {
            str(t.config["configurable"].get("checkpoint_ns", ""))
            for t in saver.list({"configurable": {"thread_id": thread_id}})
        }
    return sorted(found, key=lambda ns: (ns == "", ns))


@dataclass
class _Planned:
    head: CheckpointTuple
    values: dict[str, Any]


def _plan(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    ns: str,
    channels: Sequence[str] | None,
    graph: Any,
) -> tuple[NamespaceResult, _Planned | None]:
    head = saver.get_tuple(_config(thread_id, ns))
    if head is None:
        return NamespaceResult(ns, NOT_FOUND, reason="no checkpoint"), None
    head_id = str(head.checkpoint["id"])
    result = NamespaceResult(ns, ALREADY_PLAIN, source_checkpoint_id=head_id)
    pending = {ch for _, ch, _ in head.pending_writes or []}
    wanted = [
        ch for ch in delta_channels(head) if channels is None or ch in channels or ch in pending
    ]
    if not wanted:
        result.reason = "every DeltaChannel already holds a plain value"
        return result, None
    values_at_head = head.checkpoint.get("channel_values") or {}
    needs_history = [ch for ch in wanted if ch not in values_at_head]
    histories = (
        saver.get_delta_channel_history(config=head.config, channels=needs_history)
        if needs_history
        else {}
    )
    values: dict[str, Any] = {}
    for ch in wanted:
        if ch in values_at_head:  # a snapshot: the value itself
            seed, writes = values_at_head[ch], []
        else:
            history = histories.get(ch) or {"writes": []}
            seed, writes = history.get("seed"), list(history.get("writes") or [])
        spec = _channel_for(graph, ns, ch)
        if spec is None:
            raw = [] if seed is None else [seed.value if _is_snapshot(seed) else seed]
            if not _messages_like([*raw, *(w[2] for w in writes)]):
                where = f" in subgraph namespace {ns!r}" if ns and graph is not None else ""
                result.status = FAILED
                result.reason = f"channel {ch!r} is not a list of messages and has no reducer" + (
                    f" (the --graph has no channel {ch!r}{where})"
                    if graph is not None
                    else ": pass the app's graph (--graph module:attr) to use its reducer"
                )
                return result, None
            spec = DeltaChannel(messages_reducer, list)
        try:
            values[ch] = _reduce(spec, seed, writes)
        except Exception as exc:
            result.status = FAILED
            result.reason = f"channel {ch!r}: the reducer failed: {type(exc).__name__}: {exc}"
            return result, None
    result.status = WOULD_MATERIALIZE
    result.channels = {ch: _size(v) for ch, v in values.items()}
    return result, _Planned(head, values)


def _size(value: Any) -> int | None:
    try:
        return len(value)
    except TypeError:
        return None


# -- the write -------------------------------------------------------------------------


def _highest(versions: Iterable[Any]) -> Any:
    found = list(versions)
    if not found:
        return None
    try:
        return max(found)
    except TypeError:  # mixed types: compare as text
        return max(found, key=str)


def _write(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str, planned: _Planned
) -> tuple[str, bool]:
    """Put the materialized checkpoint; its id and whether the saver gives back the values."""
    head = planned.head
    head_id = str(head.checkpoint["id"])
    metadata_in: dict[str, Any] = dict(head.metadata or {})
    metadata = appended_metadata(head, drop=(COUNTERS,))
    versions = dict(head.checkpoint.get("channel_versions") or {})
    bumped = saver.get_next_version(_highest(versions.values()), None)
    new_versions = {ch: bumped for ch in planned.values}
    versions.update(new_versions)
    values = {
        ch: v
        for ch, v in (head.checkpoint.get("channel_values") or {}).items()
        if ch not in planned.values
    }
    values.update(planned.values)
    checkpoint: Any = {
        **head.checkpoint,
        **appended_identity(metadata),
        "channel_values": values,
        "channel_versions": versions,
    }
    metadata[MATERIALIZED_KEY] = {
        "from_checkpoint_id": head_id,
        "channels": sorted(planned.values),
    }
    # LangGraph resets a channel's counters when it snapshots; the other DeltaChannels count
    # this checkpoint as one more superstep without an update
    counters = {
        ch: (int(c[0]), int(c[1]) + 1)
        for ch, c in dict(metadata_in.get(COUNTERS) or {}).items()
        if ch not in planned.values
    }
    if counters:
        metadata[COUNTERS] = counters
    stored = saver.put(_config(thread_id, ns, head_id), checkpoint, metadata, new_versions)  # type: ignore[arg-type]
    new_id = str(stored["configurable"].get("checkpoint_id") or checkpoint["id"])
    again = saver.get_tuple(_config(thread_id, ns, new_id))
    ok = (
        again is not None
        and all(
            (again.checkpoint.get("channel_values") or {}).get(ch) == value
            for ch, value in planned.values.items()
        )
        and not set(delta_channels(again)) & set(planned.values)
    )
    return new_id, bool(ok)


def materialize(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    *,
    channels: Sequence[str] | None = None,
    graph: Any = None,
    dry_run: bool = False,
    lock: bool = True,
) -> MaterializeReport:
    """Write one checkpoint per namespace of ``thread_id`` whose DeltaChannels hold their full
    value as a plain value (see the module docstring); idempotent: a thread whose heads are
    already plain gets nothing.

    ``channels`` limits which DeltaChannels (default: all; those the head's pending writes
    touch are always included). ``graph`` is the app's compiled graph: its channels' reducers
    are used (a subgraph namespace: the subgraph's); without it, a messages channel is reduced
    with ``add_messages`` and any other DeltaChannel fails the thread (nothing is written for
    it). ``dry_run`` computes everything and writes nothing. ``lock``: on a graphkeep saver,
    hold the thread's lease meanwhile, a thread locked by a live run being reported
    ``locked``. Each checkpoint written is read back and compared with what was computed
    (``verified``).
    """
    if isinstance(saver, SaverBase):
        thread_id = saver.check_thread_id(thread_id)
        if lock and not dry_run:
            try:
                with saver.lock(thread_id, ttl=LOCK_TTL, blocking=False):
                    return _materialize(saver, thread_id, channels, graph, dry_run)
            except LockNotAcquired as exc:
                return MaterializeReport(thread_id, LOCKED, reason=str(exc))
    return _materialize(saver, thread_id, channels, graph, dry_run)


async def amaterialize(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    *,
    channels: Sequence[str] | None = None,
    graph: Any = None,
    dry_run: bool = False,
    lock: bool = True,
) -> MaterializeReport:
    """:func:`materialize` for async callers, on any saver whose sync API answers from another
    thread (graphkeep's async savers, ``AsyncSqliteSaver``, ``AsyncPostgresSaver``): the same
    code, run in a worker thread."""
    return await asyncio.to_thread(
        materialize,
        saver,
        thread_id,
        channels=channels,
        graph=graph,
        dry_run=dry_run,
        lock=lock,
    )


def _materialize(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    channels: Sequence[str] | None,
    graph: Any,
    dry_run: bool,
) -> MaterializeReport:
    report = MaterializeReport(thread_id, ALREADY_PLAIN)
    found = namespaces(saver, thread_id)
    if not found:
        report.status, report.reason = NOT_FOUND, "no checkpoint"
        return report
    plans: list[tuple[NamespaceResult, _Planned | None]] = [
        _plan(saver, thread_id, ns, channels, graph) for ns in found
    ]
    report.namespaces = [result for result, _ in plans]
    failed = [r for r in report.namespaces if r.status == FAILED]
    if failed:
        report.status = FAILED
        report.reason = "; ".join(
            (f"namespace {r.ns!r}: " if r.ns else "") + str(r.reason) for r in failed
        )
        return report
    todo = [(result, planned) for result, planned in plans if planned is not None]
    if not todo:
        return report
    if dry_run:
        report.status = WOULD_MATERIALIZE
        return report
    for result, planned in todo:
        # a writer that moved the head since the plan (foreign savers have no lease): skip
        latest = saver.get_tuple(_config(thread_id, result.ns))
        if latest is None or str(latest.checkpoint["id"]) != result.source_checkpoint_id:
            result.status = FAILED
            result.reason = "the thread moved on while it was materialized: run again"
            continue
        result.checkpoint_id, result.verified = _write(saver, thread_id, result.ns, planned)
        result.status = MATERIALIZED
    failed = [r for r in report.namespaces if r.status == FAILED]
    if failed:
        report.status = FAILED
        report.reason = "; ".join(str(r.reason) for r in failed)
    else:
        report.status = MATERIALIZED
    return report
