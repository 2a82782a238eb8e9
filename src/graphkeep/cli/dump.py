"""``graphkeep dump``: the read-only recovery export of a thread's channels as plain JSON.

For each requested channel the value a checkpoint was built from (``seed``: the nearest
stored value, a DeltaChannel snapshot or a plain pre-delta value), every write since,
oldest first, and the target checkpoint's own pending writes (``pending_writes``: the
step's input and the output of its tasks that finished), all decoded to plain JSON from the
stored bytes. LangGraph shows a checkpoint two ways, and each pending write says which of
them apply it (``applied_in``): the *history* view (``get_state_history``, ``get_state``
with a checkpoint id) applies only the input (null task) writes; the *live* view
(``get_state`` without one, so only of the head: ``is_head``) applies those and then the
finished tasks' output. Replaying the writes and then the pending writes of one view onto
the seed with the channel's reducer gives the channel's value as that view shows it, on any
machine, with or without the app's code. A requested channel the checkpoint does not know
is ``unknown_channel``, with a warning and exit code 4.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, TextIO

from langgraph.checkpoint.base import writes_sort_key

from graphkeep.checkpoint.lists import is_manifest, rebuild, where
from graphkeep.checkpoint.read import fetch_elements, sort_writes
from graphkeep.checkpoint.records import Loaded, Typed, WriteRecord
from graphkeep.cli.console import EXIT_NOT_FOUND, CliError, NotFound, print_json
from graphkeep.cli.endpoints import Endpoint, Native, open_endpoint
from graphkeep.cli.foreign import Foreign
from graphkeep.cli.hot import enter_hot, thread_hot
from graphkeep.errors import Place
from graphkeep.moving.decode import (
    EXT_DELTA_SNAPSHOT,
    Encrypted,
    RawExt,
    inspection_serde,
    is_snapshot,
    to_json,
    typed_to_json,
)
from graphkeep.moving.items import CheckpointItem, foreign_writes
from graphkeep.port import codec

#: LangGraph's task id of a step's input: ``Command(update=…)`` and the answers of a resume
#: (its ``NULL_TASK_ID``, not public there)
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
LIVE, HISTORY = "live", "history"


def applied_in(task_id: str) -> list[str]:
    """The views of its checkpoint that apply a pending write on a state channel.

    LangGraph's ``_prepare_state_snapshot`` applies the null task's writes in every view;
    with ``live`` (``get_state`` given no checkpoint id) it then applies the output of each
    finished task, and a task that wrote a state channel has finished (its output).
    """
    return [LIVE, HISTORY] if task_id == NULL_TASK_ID else [LIVE]


def default_channels(channels: Sequence[str]) -> list[str]:
    """State channels of a checkpoint (LangGraph's internal ones left out)."""
    return sorted(ch for ch in channels if not ch.startswith(("branch:", "__")))


def dump_thread(
    endpoint: Endpoint,
    thread_id: str,
    channels: Sequence[str] | None,
    *,
    checkpoint_id: str | None = None,
    ns: str = "",
) -> dict[str, Any]:
    if isinstance(endpoint, Native):
        return _native_dump(endpoint, thread_id, channels, checkpoint_id, ns)
    return _foreign_dump(endpoint, thread_id, channels, checkpoint_id, ns)


def _not_found(thread_id: str, checkpoint_id: str | None, ns: str, label: str) -> NotFound:
    where = f" in namespace {ns!r}" if ns else ""
    if checkpoint_id:
        return NotFound(
            f"checkpoint {checkpoint_id} of thread {thread_id!r}{where} not found at {label}"
        )
    return NotFound(f"thread {thread_id!r}{where} not found at {label}")


def _native_dump(
    endpoint: Native,
    thread_id: str,
    channels: Sequence[str] | None,
    checkpoint_id: str | None,
    ns: str,
) -> dict[str, Any]:
    store = endpoint.saver.port
    target: Loaded | None = endpoint.call(store.load(thread_id, ns, checkpoint_id))
    if target is None:
        raise _not_found(thread_id, checkpoint_id, ns, endpoint.label)
    record = target.record
    wanted = list(dict.fromkeys(channels or default_channels(list(record.versions))))
    result: dict[str, dict[str, Any]] = {}
    present = {
        ch: blob
        for ch in wanted
        if ch in record.versions
        and (blob := target.blobs.get(ch)) is not None
        and blob.tag != codec.EMPTY_TAG
    }
    elements = endpoint.call(
        fetch_elements(store, thread_id, ns, present.values(), target.elements)
    )
    for channel, blob in present.items():
        version = record.versions.get(channel)
        seed = _Seed(blob, elements, where(thread_id, ns, record.checkpoint_id, channel))
        result[channel] = _entry(seed, record.checkpoint_id, version, [])
    walk = [ch for ch in wanted if ch not in result]
    if walk:
        chain = endpoint.call(store.chain(thread_id, ns, record.checkpoint_id, walk))
        # a list seed (a channel that became a DeltaChannel later) may be a manifest
        elements = endpoint.call(fetch_elements(store, thread_id, ns, chain.blobs.values()))
        collected: dict[str, list[list[tuple[str, WriteRecord]]]] = {ch: [] for ch in walk}
        remaining = set(walk)
        for ancestor in chain.ancestors:
            if not remaining:
                break
            own = sort_writes(chain.writes.get(ancestor.checkpoint_id, []))
            for ch in remaining:
                collected[ch].append([(ancestor.checkpoint_id, w) for w in own if w.channel == ch])
            for ch in [c for c in ancestor.present if c in remaining]:
                version = ancestor.versions.get(ch, "")
                seed = chain.blobs.get((ch, version))
                if seed is not None and seed.tag != codec.EMPTY_TAG:
                    writes = [w for group in reversed(collected[ch]) for w in group]
                    at = where(thread_id, ns, ancestor.checkpoint_id, ch)
                    result[ch] = _entry(
                        _Seed(seed, elements, at), ancestor.checkpoint_id, version, writes
                    )
                    remaining.discard(ch)
        for ch in remaining:
            writes = [w for group in reversed(collected[ch]) for w in group]
            result[ch] = _entry(None, None, None, writes)
    pending = sort_writes(target.writes)
    for ch in wanted:
        result[ch]["pending_writes"] = [
            {**_write_json(None, w), "applied_in": applied_in(w.task_id)}
            for w in pending
            if w.channel == ch
        ]
    head = target if checkpoint_id is None else endpoint.call(store.load(thread_id, ns, None))
    is_head = head is not None and head.record.checkpoint_id == record.checkpoint_id
    return _document(
        thread_id, ns, record.checkpoint_id, record.parent_id, is_head, endpoint.label, wanted,
        result, list(record.versions),
    )  # fmt: skip


def _write_json(checkpoint_id: str | None, w: WriteRecord) -> dict[str, Any]:
    head = {} if checkpoint_id is None else {"checkpoint_id": checkpoint_id}
    return {
        **head,
        "task_id": w.task_id,
        "task_path": w.task_path,
        "idx": w.idx,
        "value": typed_to_json(w.value),
    }


def _document(
    thread_id: str,
    ns: str,
    target_id: str,
    parent_id: str | None,
    is_head: bool,
    label: str,
    wanted: list[str],
    result: dict[str, dict[str, Any]],
    known: list[str],
) -> dict[str, Any]:
    """The dump document; a requested channel the checkpoint does not know (no version, no
    write along the walk, no pending write: a typo, most likely) is ``unknown_channel`` and
    listed in ``unknown_channels``."""
    unknown = [
        ch
        for ch in wanted
        if ch not in known and not result[ch]["writes"] and not result[ch]["pending_writes"]
    ]
    for ch in unknown:
        result[ch]["delta_kind"] = "unknown_channel"
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "target_checkpoint_id": target_id,
        "parent_checkpoint_id": parent_id,
        "is_head": is_head,
        "source": label,
        "channels": {ch: result[ch] for ch in wanted},
        "unknown_channels": unknown,
        "known_channels": default_channels(known),
    }


@dataclass(frozen=True, slots=True)
class _Seed:
    """A stored channel value, with the list elements a manifest may name."""

    blob: Typed
    elements: Mapping[str, Typed]
    where: Place

    def to_json(self) -> Any:
        """Plain JSON; a shared list (manifest) is shown rebuilt, never as its manifest."""
        if is_manifest(self.blob):
            return to_json(rebuild(inspection_serde(), self.blob, self.elements, self.where)[0])
        return typed_to_json(self.blob)


def _entry(
    seed: _Seed | None,
    seed_checkpoint_id: str | None,
    seed_version: Any,
    writes: list[tuple[str, WriteRecord]],
) -> dict[str, Any]:
    if seed is None:
        kind = "no_seed"
    elif is_snapshot(seed.blob):
        kind = "snapshot"
    else:
        kind = "legacy_plain"
    return {
        "delta_kind": kind,
        "seed": None if seed is None else seed.to_json(),
        "seed_checkpoint_id": seed_checkpoint_id,
        "seed_version": None if seed_version is None else str(seed_version),
        "writes": [_write_json(checkpoint_id, w) for checkpoint_id, w in writes],
    }


def _foreign_dump(
    endpoint: Foreign,
    thread_id: str,
    channels: Sequence[str] | None,
    checkpoint_id: str | None,
    ns: str,
) -> dict[str, Any]:
    saver = endpoint.saver
    target = saver.get_tuple(_config(thread_id, ns, checkpoint_id))
    if target is None:
        raise _not_found(thread_id, checkpoint_id, ns, endpoint.label)
    body = _checkpoint_dict(target.checkpoint)
    target_id = str(target.config["configurable"]["checkpoint_id"])
    versions = dict(body.get("channel_versions") or {})
    values = body.get("channel_values") or {}
    wanted = list(dict.fromkeys(channels or default_channels(list(versions))))
    result: dict[str, dict[str, Any]] = {}
    for ch in wanted:
        if ch in values:
            result[ch] = _foreign_entry(values[ch], True, target_id, versions.get(ch), [])
    remaining = [ch for ch in wanted if ch not in result]
    collected: dict[str, list[list[dict[str, Any]]]] = {ch: [] for ch in remaining}
    parent_id = (target.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    seen: set[str] = set()
    while parent_id and remaining and parent_id not in seen:
        seen.add(parent_id)
        items = _foreign_one(endpoint, thread_id, ns, parent_id)
        if items is None:
            break
        item, next_parent = items
        anc = _checkpoint_dict(item.checkpoint)
        anc_values = anc.get("channel_values") or {}
        anc_versions = anc.get("channel_versions") or {}
        for ch in list(remaining):
            collected[ch].append(
                [
                    {
                        "checkpoint_id": item.checkpoint_id,
                        "task_id": w.task_id,
                        "task_path": w.task_path,
                        "idx": w.idx,
                        "value": to_json(w.value),
                    }
                    for w in item.writes
                    if w.channel == ch
                ]
            )
            if ch in anc_values:
                writes = [w for group in reversed(collected[ch]) for w in group]
                result[ch] = _foreign_entry(
                    anc_values[ch], True, item.checkpoint_id, anc_versions.get(ch), writes
                )
                remaining.remove(ch)
        parent_id = next_parent
    for ch in remaining:
        writes = [w for group in reversed(collected[ch]) for w in group]
        result[ch] = _foreign_entry(None, False, None, None, writes)
    own = _foreign_one(endpoint, thread_id, ns, target_id)
    pending = own[0].writes if own is not None else []
    for ch in wanted:
        result[ch]["pending_writes"] = [
            {
                "task_id": w.task_id,
                "task_path": w.task_path,
                "idx": w.idx,
                "value": to_json(w.value),
                "applied_in": applied_in(w.task_id),
            }
            for w in pending
            if w.channel == ch
        ]
    parent = (target.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    head = target if not checkpoint_id else saver.get_tuple(_config(thread_id, ns))
    is_head = head is not None and head.config["configurable"]["checkpoint_id"] == target_id
    return _document(
        thread_id, ns, target_id, parent or None, is_head, endpoint.label, wanted, result,
        list(versions),
    )  # fmt: skip


def _foreign_one(
    endpoint: Foreign, thread_id: str, ns: str, checkpoint_id: str
) -> tuple[CheckpointItem, str | None] | None:
    tup = endpoint.saver.get_tuple(_config(thread_id, ns, checkpoint_id))
    if tup is None:
        return None
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    item = CheckpointItem(
        ns,
        checkpoint_id,
        parent or None,
        tup.checkpoint,
        tup.metadata,
        sorted(
            foreign_writes(endpoint, thread_id, ns, checkpoint_id, tup),
            key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx or 0),
        ),
    )
    return item, parent or None


def _config(thread_id: str, ns: str, checkpoint_id: str | None = None) -> Any:
    """A saver's config for a thread's namespace: its head, or the checkpoint named."""
    conf = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint_dict(checkpoint: Any) -> dict[str, Any]:
    if isinstance(checkpoint, dict):
        return checkpoint
    if isinstance(checkpoint, Encrypted):
        raise CliError(
            f"the checkpoint is encrypted ({checkpoint.tag}); set LANGGRAPH_AES_KEY to read it"
            + (f": {checkpoint.error}" if checkpoint.error else "")
        )
    raise CliError(f"cannot read a checkpoint stored as {type(checkpoint).__name__}")


def _foreign_entry(
    seed: Any,
    has_seed: bool,
    seed_checkpoint_id: str | None,
    seed_version: Any,
    writes: list[dict[str, Any]],
) -> dict[str, Any]:
    if not has_seed:
        kind = "no_seed"
    elif isinstance(seed, RawExt) and seed.code == EXT_DELTA_SNAPSHOT:
        kind = "snapshot"
    else:
        kind = "legacy_plain"
    return {
        "delta_kind": kind,
        "seed": to_json(seed) if has_seed else None,
        "seed_checkpoint_id": seed_checkpoint_id,
        "seed_version": None if seed_version is None else str(seed_version),
        "writes": writes,
    }


def cmd_dump(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with ExitStack() as stack:  # --hot opened first: a bad one fails before any read
        view = enter_hot(stack, args)
        with open_endpoint(
            args.url, key_prefix=args.key_prefix, serde=inspection_serde()
        ) as endpoint:
            document = dump_thread(
                endpoint,
                args.thread_id,
                args.channel,
                checkpoint_id=args.checkpoint_id,
                ns=args.checkpoint_ns,
            )
        if view is not None:
            ns, wanted = args.checkpoint_ns, args.checkpoint_id
            document["hot"] = thread_hot(view, args.thread_id, ns, wanted)
    if args.output in (None, "-"):
        print_json(document, out, compact=args.compact)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            print_json(document, handle, compact=args.compact)
        channels = ", ".join(
            f"{ch} ({entry['delta_kind']}, {len(entry['writes'])} writes)"
            for ch, entry in document["channels"].items()
        )
        err.write(f"wrote {args.output}: {channels or 'no channels'}\n")
    if document["unknown_channels"]:
        known = ", ".join(document["known_channels"]) or "none"
        for ch in document["unknown_channels"]:
            err.write(
                f"warning: checkpoint {document['target_checkpoint_id']} has no channel {ch!r}"
                f" (no value, no write; its channels: {known})\n"
            )
        return EXIT_NOT_FOUND
    return 0
