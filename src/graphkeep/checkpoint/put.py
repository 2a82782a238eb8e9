"""The saver's write path: ``put`` and ``put_writes`` turned into records (the checkpoint, its
new channel values, shared list elements, pending writes) and handed to the checkpoint port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from graphkeep.checkpoint.fallback import first_use
from graphkeep.checkpoint.ids import address, check_name, normalize_checkpoint_id, version_key
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, SharedList
from graphkeep.checkpoint.lock import write_fence
from graphkeep.checkpoint.migrations import SCHEMA_VERSION_KEY
from graphkeep.checkpoint.records import BlobRecord, CheckpointRecord, WriteRecord
from graphkeep.errors import InvalidInput
from graphkeep.port import Op, codec

if TYPE_CHECKING:
    from graphkeep.checkpoint.saver import SaverBase


def put_op(
    saver: SaverBase,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Op[RunnableConfig]:
    """The op of ``put``: the checkpoint and the values of ``new_versions`` stored at once;
    answers the config naming the stored checkpoint."""
    thread_id, ns, parent_id = address(config, max_bytes=saver.max_id_bytes)
    checkpoint_id = normalize_checkpoint_id(checkpoint.get("id"), max_bytes=saver.max_id_bytes)
    if checkpoint_id is None:
        raise InvalidInput("checkpoint['id'] must be a non-empty string")
    yield from first_use(saver, thread_id)  # fallback=: a thread not moved yet moves first
    values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
    versions = {
        _channel(ch): version_key(v) for ch, v in (checkpoint.get("channel_versions") or {}).items()
    }
    merged = get_checkpoint_metadata(config, metadata)
    if saver.state_schema is not None:
        merged[SCHEMA_VERSION_KEY] = saver.state_schema.version  # type: ignore[literal-required]
    counters = merged.get("counters_since_delta_snapshot") or {}
    blobs: list[BlobRecord] = []
    shared: list[SharedList] = []
    for ch, v in new_versions.items():
        if ch not in values:
            continue
        what = f"channel {ch!r}"
        # DeltaChannel snapshots keep the plain path: their history is the writes
        listed = (
            saver.lists.share(thread_id, ns, ch, values[ch], what)
            if saver.share_lists and ch not in counters
            else None
        )
        if listed is None:
            blobs.append(
                BlobRecord(
                    ch,
                    version_key(v),
                    saver.squeeze(
                        codec.dump(saver.serde, values[ch], what), codec.COMPRESS_MIN_BYTES
                    ),
                )
            )
        else:
            shared.append(listed)
            blobs.append(BlobRecord(ch, version_key(v), listed.manifest))
    present = [ch for ch in values if ch in versions]
    needs = delta_evidence(merged, values, versions)
    body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    run_id = merged.get("run_id")
    source = merged.get("source")
    record = CheckpointRecord(
        thread_id=thread_id,
        ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        versions=versions,
        present=present,
        needs_history=needs,
        run_id=str(run_id) if run_id is not None else None,
        checkpoint=saver.squeeze(
            codec.dump(saver.serde, body, "the checkpoint"), codec.COMPRESS_MIN_BYTES
        ),
        metadata=saver.squeeze(
            codec.dump(saver.serde, merged, "checkpoint metadata"), codec.COMPRESS_MIN_BYTES
        ),
        metadata_doc=codec.plain(merged),
        source=source if isinstance(source, str) and source else None,
    )
    # elements first: a store that writes in order never names a missing one
    elements = [e for listed in shared for e in listed.elements]
    written = elements + blobs
    if saver.telemetry.active():
        saver.telemetry.put_bytes(
            "checkpoint.put",
            len(record.checkpoint.data)
            + len(record.metadata.data)
            + sum(len(b.value.data) for b in written),
        )
    fence = yield from write_fence(saver, thread_id)
    yield from saver.port.put_checkpoint(record, written, fence)
    if shared:
        saver.lists.committed(thread_id, ns, shared)
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


#: LangGraph.js's metadata key, ``true`` on the checkpoints of threads its DeltaChannel graphs
#: start: every DeltaChannel write of the branch has a version (names no channel)
WRITES_VERSIONED = "delta_writes_versioned"


def delta_evidence(
    metadata: Mapping[str, Any], values: Mapping[str, Any], versions: Mapping[str, str]
) -> list[str]:
    """The checkpoint's DeltaChannels as its own evidence names them: what ``put`` stores as
    ``needs_history`` (those also in ``values`` hold a snapshot; the others rebuild their
    value from ancestor writes). Read from the metadata and the values' Python types only,
    never a serialized payload, so a prune or check sees it in the inventory:

    - ``counters_since_delta_snapshot`` (LangGraph, LangGraph.js): the channels it counts
      that have a version and no value here;
    - a ``_DeltaSnapshot`` value (LangGraph; recognised by its class name, a private
      NamedTuple whose module may move): that channel. LangGraph resets a channel's counter
      when it snapshots it, so the snapshot is the only evidence at that checkpoint, and
      the only evidence for a later head written without counters;
    - ``delta_writes_versioned: true`` (LangGraph.js; names no channel): every channel with
      a version and no value here, since any of them may be a DeltaChannel. Conservative:
      a prune keeps such a channel's chain back to its nearest stored value.
    """
    counters = metadata.get("counters_since_delta_snapshot")
    counted = counters if isinstance(counters, dict) else {}
    versioned = metadata.get(WRITES_VERSIONED) is True
    found = [
        ch
        for ch in versions
        if (ch not in values and (versioned or ch in counted))
        or (ch in values and type(values[ch]).__name__ == "_DeltaSnapshot")
    ]
    return sorted(found)


def put_writes_op(
    saver: SaverBase,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> Op[None]:
    """The op of ``put_writes``: a task's pending writes stored at ``config``'s checkpoint."""
    thread_id, ns, checkpoint_id = address(config, max_bytes=saver.max_id_bytes)
    if checkpoint_id is None:
        raise InvalidInput("put_writes needs config['configurable']['checkpoint_id']")
    check_name(task_id, "task_id", max_bytes=saver.max_id_bytes)
    check_name(task_path or "", "task_path", max_bytes=64 * 1024)
    yield from first_use(saver, thread_id)
    records = [
        WriteRecord(
            task_id=task_id,
            idx=WRITES_IDX_MAP.get(channel, idx),
            channel=_channel(channel),
            task_path=task_path or "",
            value=saver.squeeze(
                codec.dump(saver.serde, value, f"write to channel {channel!r}"),
                codec.COMPRESS_MIN_BYTES,
            ),
        )
        for idx, (channel, value) in enumerate(writes)
    ]
    if records:
        if saver.telemetry.active():
            size = sum(len(r.value.data) for r in records)
            saver.telemetry.put_bytes("checkpoint.put_writes", size)
        fence = yield from write_fence(saver, thread_id)
        yield from saver.port.put_writes(thread_id, ns, checkpoint_id, records, fence)


def _channel(name: Any) -> str:
    channel = check_name(name, "channel name")
    if channel == ELEMENT_CHANNEL:
        raise InvalidInput(f"channel name {channel!r} is reserved by graphkeep for list elements")
    return channel
