"""The saver's read side: stored records turned back into LangGraph's checkpoint tuples, as
ops for ``get_tuple``, ``list`` and ``get_delta_channel_history``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)

from graphkeep.checkpoint.fallback import first_use, hidden_here, listed_elsewhere
from graphkeep.checkpoint.filters import check_filter, matches
from graphkeep.checkpoint.ids import (
    address,
    checkpoint_config,
    configurable,
    normalize_checkpoint_id,
    normalize_namespace,
)
from graphkeep.checkpoint.lists import element_blob_keys, is_manifest, load_value, rebuild, where
from graphkeep.checkpoint.lock import taken_with_read
from graphkeep.checkpoint.migrations import Alias, history_upgrade
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import CheckpointRecord, ListQuery, Loaded, Typed, WriteRecord
from graphkeep.errors import UNDECODABLE, CorruptData, Place
from graphkeep.port import Emit, Op, codec

if TYPE_CHECKING:
    from graphkeep.checkpoint.saver import SaverBase

LIST_PAGE_SIZE = 100


def get_tuple_op(saver: SaverBase, config: RunnableConfig) -> Op[CheckpointTuple | None]:
    """The op of ``get_tuple``: ``config``'s checkpoint (the latest without an id), or None."""
    thread_id, ns, checkpoint_id = address(config, max_bytes=saver.max_id_bytes)
    yield from first_use(saver, thread_id)  # fallback=: moved here first
    lease = taken_with_read(saver, thread_id)  # an exclusive run's first read takes its lease
    try:
        if lease is not None:
            loaded = yield from lease.load_op(ns, checkpoint_id)
        else:
            loaded = yield from saver.port.load(thread_id, ns, checkpoint_id)
        if loaded is None:
            return None
        yield from _expand(saver.port, [loaded])
    except CorruptData as exc:
        raise exc.at(Place(thread_id, ns, checkpoint_id)) from None
    return to_tuple(saver, loaded, learn=True)


def newest_page_op(
    saver: SaverBase, thread_id: str, ns: str, limit: int, before: str | None = None
) -> Op[list[CheckpointTuple]]:
    """The thread's newest ``limit`` checkpoints in ``ns`` (ids below ``before``), newest
    first, from one ``list`` page (see :meth:`~graphkeep.checkpoint.saver.SaverBase.newest_op`)."""
    query = ListQuery(thread_id, ns, None, before, {}, limit)
    yield from first_use(saver, thread_id)
    try:
        items, _ = yield from saver.port.list_page(query, None, limit)
        yield from _expand(saver.port, items)
    except CorruptData as exc:
        raise exc.at(Place(thread_id, ns)) from None
    return [to_tuple(saver, item) for item in items]


def list_op(
    saver: SaverBase,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Op[None]:
    """The streaming op of ``list``: emits the matching checkpoints, newest first."""
    checked = check_filter(filter)
    if config is not None:
        conf = configurable(config)
        thread_id: str | None = saver.check_thread_id(conf.get("thread_id"))
        raw_ns = conf.get("checkpoint_ns")
        ns = None if raw_ns is None else normalize_namespace(raw_ns)
        checkpoint_id = normalize_checkpoint_id(conf.get("checkpoint_id"))
    else:
        thread_id, ns, checkpoint_id = None, None, None
    before_id = normalize_checkpoint_id(configurable(before).get("checkpoint_id"))
    if limit is not None and limit <= 0:
        return
    if thread_id is not None:
        yield from first_use(saver, thread_id)
    query = ListQuery(thread_id, ns, checkpoint_id, before_id, checked, limit)
    page_size = LIST_PAGE_SIZE if checked or limit is None else min(limit, LIST_PAGE_SIZE)
    remaining = limit
    cursor: Any = None
    while True:
        try:
            items, cursor = yield from saver.port.list_page(query, cursor, page_size)
            yield from _expand(saver.port, items)
        except CorruptData as exc:
            raise exc.at(Place(thread_id, ns)) from None
        for item in items:
            try:
                metadata = codec.load(saver.serde, item.record.metadata)
            except CorruptData as exc:
                raise exc.at(replace(_place(item.record), part="metadata")) from None
            if checked and not matches(metadata, checked):
                continue
            if thread_id is None and (yield from hidden_here(saver, item.record.thread_id)):
                continue  # fallback=: an unsettled thread is listed from the fallback
            yield Emit(to_tuple(saver, item, metadata))
            if remaining is not None:
                remaining -= 1
                if remaining <= 0:
                    return
        if cursor is None:
            break
    if thread_id is None:  # fallback=: and the threads still only there
        for found in (yield from listed_elsewhere(saver, checked, remaining)):
            yield Emit(found)


def delta_history_op(
    saver: SaverBase, config: RunnableConfig, channels: Sequence[str]
) -> Op[Mapping[str, DeltaChannelHistory]]:
    """The op of ``get_delta_channel_history``: each channel's writes along the parent walk
    back to its last stored value (the seed), upgraded where a migration renamed it."""
    if not channels:
        return {}
    thread_id, ns, checkpoint_id = address(config, max_bytes=saver.max_id_bytes)
    yield from first_use(saver, thread_id)
    wanted = list(dict.fromkeys(channels))
    # stored name -> (requested channel, the older name it is): a channel a migration
    # renamed is read under its older names too (ancestors written before the rename)
    names: dict[str, tuple[str, Alias | None]] = {ch: (ch, None) for ch in wanted}
    if saver.state_schema is not None:
        aliases = saver.state_schema.aliases()
        for ch in wanted:
            for alias in aliases.get(ch, []):
                names.setdefault(alias.name, (ch, alias))
    try:
        chain = yield from saver.port.chain(thread_id, ns, checkpoint_id, list(names))
        # a list seed written as a manifest (DeltaChannels normally are not)
        elements = yield from fetch_elements(saver.port, thread_id, ns, chain.blobs.values())
    except CorruptData as exc:
        raise exc.at(Place(thread_id, ns, checkpoint_id)) from None
    collected: dict[str, list[tuple[str, WriteRecord]]] = {ch: [] for ch in wanted}
    seeds: dict[str, Any] = {}
    remaining = set(wanted)
    for ancestor in chain.ancestors:
        if not remaining:
            break
        for write in reversed(sort_writes(chain.writes.get(ancestor.checkpoint_id, []))):
            if write.channel in names and names[write.channel][0] in remaining:
                collected[names[write.channel][0]].append((ancestor.checkpoint_id, write))
        for stored in [c for c in ancestor.present if c in names]:
            ch, older = names[stored]
            if ch not in remaining:
                continue
            blob = chain.blobs.get((stored, ancestor.versions.get(stored, "")))
            if blob is not None and blob.tag != codec.EMPTY_TAG:
                at = where(thread_id, ns, ancestor.checkpoint_id, stored)
                seed = load_value(saver.serde, blob, elements, at)
                if older is not None:
                    place = (thread_id, ns, ancestor.checkpoint_id)
                    seed = history_upgrade(older, older.value, seed, place)
                seeds[ch] = seed
                remaining.discard(ch)
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": []}
        for cid, w in reversed(collected[ch]):
            for task_id, stored, value in decode_writes(saver.serde, thread_id, ns, cid, [w]):
                older = names[stored][1]
                if older is not None:
                    value = history_upgrade(older, older.write, value, (thread_id, ns, cid))
                entry["writes"].append((task_id, ch, value))
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result


def to_tuple(
    saver: SaverBase, loaded: Loaded, metadata: Any = None, *, learn: bool = False
) -> CheckpointTuple:
    """The ``CheckpointTuple`` of a loaded checkpoint (state upgraded to the saver's schema);
    ``learn``: the saver's list sharer remembers the lists it rebuilt."""
    record = loaded.record
    try:
        checkpoint: Checkpoint = codec.load(saver.serde, record.checkpoint)
        if not isinstance(checkpoint, dict):
            raise CorruptData(
                reason=f"it decoded to a {type(checkpoint).__name__}, not a dict",
                kind=UNDECODABLE,
            )
    except CorruptData as exc:
        raise exc.at(replace(_place(record), part="checkpoint")) from None
    if metadata is None:
        try:
            metadata = codec.load(saver.serde, record.metadata)
        except CorruptData as exc:
            raise exc.at(replace(_place(record), part="metadata")) from None
    values: dict[str, Any] = {}
    for ch, blob in loaded.blobs.items():
        if ch in record.versions and blob.tag != codec.EMPTY_TAG:
            try:
                values[ch] = _value(saver, loaded, ch, blob, learn)
            except CorruptData as exc:
                raise exc.at(replace(_place(record), channel=ch)) from None
    checkpoint["channel_values"] = values
    parent_config: RunnableConfig | None = None
    if record.parent_id:
        parent_config = checkpoint_config(record.thread_id, record.ns, record.parent_id)
    writes = decode_writes(
        saver.serde, record.thread_id, record.ns, record.checkpoint_id, sort_writes(loaded.writes)
    )
    if saver.state_schema is not None:
        # the metadata stays as stored (list filters see it): its schema_version says
        # which version the checkpoint was written at, the state is the running one's
        writes = saver.state_schema.upgrade(
            checkpoint,  # type: ignore[arg-type]
            writes,
            saver.state_schema.stored_version(metadata),
            (record.thread_id, record.ns, record.checkpoint_id),
        )
    return CheckpointTuple(
        config=checkpoint_config(record.thread_id, record.ns, record.checkpoint_id),
        checkpoint=checkpoint,
        metadata=metadata,
        parent_config=parent_config,
        pending_writes=writes,
    )


def decode_writes(
    serde: Any, thread_id: str, ns: str, checkpoint_id: str, writes: Iterable[WriteRecord]
) -> list[PendingWrite]:
    """``(task_id, channel, value)`` of the writes stored at a checkpoint; one that does
    not decode is :class:`CorruptData` naming it."""
    out: list[PendingWrite] = []
    for w in writes:
        try:
            out.append((w.task_id, w.channel, codec.load(serde, w.value)))
        except CorruptData as exc:
            place = Place(thread_id, ns, checkpoint_id, w.channel, w.task_id, w.idx)
            raise exc.at(place) from None
    return out


def fetch_elements(
    port: CheckpointPort,
    thread_id: str,
    ns: str,
    blobs: Iterable[Typed | None],
    have: Mapping[str, Typed] | None = None,
) -> Op[dict[str, Typed]]:
    """``have`` plus the elements the manifests among ``blobs`` name (one ``get_blobs``)."""
    found = dict(have or {})
    manifests = [b for b in blobs if b is not None and is_manifest(b)]
    wanted = [k for k in element_blob_keys(ns, manifests) if k[2] not in found]
    if wanted:
        got = yield from port.get_blobs(thread_id, wanted)
        found.update((key[2], value) for key, value in got.items())
    return found


def sort_writes(writes: list[WriteRecord]) -> list[WriteRecord]:
    """Pending writes in LangGraph's order (task path, task id, index)."""
    return sorted(writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))


def _expand(port: CheckpointPort, items: list[Loaded]) -> Op[None]:
    """Fetch the list elements the items' manifests name and the store did not return."""
    wanted: dict[str, dict[tuple[str, str, str], None]] = {}
    for item in items:
        rec = item.record
        for ch, blob in item.blobs.items():
            if is_manifest(blob) and ch in rec.versions:
                keys = wanted.setdefault(rec.thread_id, {})
                try:
                    named = element_blob_keys(rec.ns, [blob])
                except CorruptData as exc:
                    raise exc.at(where(rec.thread_id, rec.ns, rec.checkpoint_id, ch)) from None
                for key in named:
                    if key[2] not in item.elements:
                        keys[key] = None
    for thread_id, keys in wanted.items():
        if not keys:
            continue
        got = yield from port.get_blobs(thread_id, list(keys))
        for item in items:
            if item.record.thread_id == thread_id:
                ns = item.record.ns
                item.elements.update((key[2], value) for key, value in got.items() if key[0] == ns)


def _value(saver: SaverBase, loaded: Loaded, ch: str, blob: Any, learn: bool) -> Any:
    if not is_manifest(blob):
        return codec.load(saver.serde, blob)
    rec = loaded.record
    at = where(rec.thread_id, rec.ns, rec.checkpoint_id, ch)
    value, pairs = rebuild(saver.serde, blob, loaded.elements, at)
    if learn:
        saver.lists.learned(rec.thread_id, rec.ns, ch, value, pairs)
    return value


def _place(record: CheckpointRecord) -> Place:
    return Place(record.thread_id, record.ns, record.checkpoint_id)
