"""Read-only commands: ``threads``, ``history`` and ``dump``.

``dump`` is the recovery export: for each requested channel the value a
checkpoint was built from (``seed``: the nearest stored value, a DeltaChannel
snapshot or a plain pre-delta value) and every write since, oldest first, all
decoded to plain JSON from the stored bytes. Replaying the writes onto the seed
with the channel's reducer gives the channel's value at the target checkpoint,
on any machine, with or without the app's code.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from langgraph.checkpoint.base import writes_sort_key

from graphkeep.checkpoint.lists import is_manifest, rebuild, where
from graphkeep.checkpoint.records import ListQuery, Loaded, Summary, Typed, WriteRecord
from graphkeep.checkpoint.saver import fetch_elements, sort_writes
from graphkeep.cli.console import (
    CliError,
    NotFound,
    Progress,
    human_bytes,
    iso,
    print_json,
    table,
)
from graphkeep.cli.decode import (
    EXT_DELTA_SNAPSHOT,
    Encrypted,
    LosslessSerde,
    RawExt,
    is_snapshot,
    load_plain,
    to_json,
    typed_to_json,
)
from graphkeep.cli.endpoints import (
    CheckpointItem,
    Endpoint,
    Foreign,
    Native,
    ThreadInfo,
    checkpoint_ts,
    foreign_items,
    foreign_writes,
    iter_threads,
    open_endpoint,
    quick_info,
    thread_config,
    thread_info,
)
from graphkeep.port import codec

HISTORY_PAGE_SIZE = 100


def inspection_serde() -> LosslessSerde:
    """Foreign savers decode with this: no class imports, encrypted values as markers."""
    return LosslessSerde(strict=False)


# -- threads ---------------------------------------------------------------------------


def cmd_threads(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    infos: list[ThreadInfo] = []
    truncated = False
    with (
        open_endpoint(args.url, key_prefix=args.key_prefix, serde=inspection_serde()) as endpoint,
        Progress("threads", stream=err, enabled=args.progress) as progress,
    ):
        for thread_id in iter_threads(endpoint, args.page_size):
            if args.limit is not None and len(infos) >= args.limit:
                truncated = True
                break
            info = (quick_info if args.quick else thread_info)(endpoint, thread_id)
            progress.advance(detail=thread_id)
            if info is not None:
                infos.append(info)
        label = endpoint.label
    if args.json:
        print_json(
            {
                "url": label,
                "count": len(infos),
                "truncated": truncated,
                "threads": [i.as_json() for i in infos],
            },
            out,
        )
        return 0
    if not infos:
        out.write(f"no threads at {label}\n")
        return 0
    table(
        ["THREAD", "CHECKPOINTS", "NAMESPACES", "WRITES", "SIZE", "LAST CHECKPOINT"],
        [
            [
                i.thread_id,
                i.checkpoints,
                _namespaces(i.namespaces),
                i.writes,
                human_bytes(i.bytes),
                iso(i.last_ts),
            ]
            for i in infos
        ],
        out,
    )
    more = f" (first {len(infos)}; --limit to see more)" if truncated else ""
    out.write(f"{len(infos)} thread(s) at {label}{more}\n")
    return 0


def _namespaces(namespaces: Sequence[str]) -> str:
    shown = ['""' if ns == "" else ns for ns in namespaces]
    if len(shown) > 3:
        return ",".join(shown[:3]) + f",+{len(shown) - 3}"
    return ",".join(shown)


# -- history ---------------------------------------------------------------------------


def history_rows(
    endpoint: Endpoint, thread_id: str, ns: str | None, limit: int | None
) -> list[dict[str, Any]]:
    """Checkpoints newest first; raises :class:`NotFound` for an unknown thread."""
    if isinstance(endpoint, Native):
        return _native_history(endpoint, thread_id, ns, limit)
    return _foreign_history(endpoint, thread_id, ns, limit)


def _native_history(
    endpoint: Native, thread_id: str, ns: str | None, limit: int | None
) -> list[dict[str, Any]]:
    store = endpoint.saver.port
    inventory = endpoint.call(store.inventory(thread_id))
    summaries: dict[tuple[str, str], Summary] = {
        (s.ns, s.checkpoint_id): s for s in inventory.checkpoints
    }
    if not summaries:
        raise NotFound(f"thread {thread_id!r} not found at {endpoint.label}")
    query = ListQuery(thread_id, ns, None, None, {}, limit)
    page_size = min(limit, HISTORY_PAGE_SIZE) if limit else HISTORY_PAGE_SIZE
    rows: list[dict[str, Any]] = []
    cursor: Any = None
    while True:
        page: list[Loaded]
        page, cursor = endpoint.call(store.list_page(query, cursor, page_size))
        for loaded in page:
            record = loaded.record
            parent = summaries.get((record.ns, record.parent_id)) if record.parent_id else None
            metadata = _plain(record.metadata)
            body = _plain(record.checkpoint)
            rows.append(
                _row(
                    ns=record.ns,
                    checkpoint_id=record.checkpoint_id,
                    parent_id=record.parent_id,
                    metadata=metadata,
                    ts=checkpoint_ts(body, record.checkpoint_id),
                    versions=record.versions,
                    parent_versions=None if parent is None else parent.versions,
                    writes=[(w.task_id, w.channel) for w in loaded.writes],
                )
            )
            if limit is not None and len(rows) >= limit:
                return rows
        if cursor is None:
            return rows


def _foreign_history(
    endpoint: Foreign, thread_id: str, ns: str | None, limit: int | None
) -> list[dict[str, Any]]:
    items = foreign_items(endpoint, thread_id, ns=ns, limit=limit)
    if not items:
        if endpoint.saver.get_tuple(thread_config(thread_id, "")) is None and not list(
            endpoint.saver.list(thread_config(thread_id), limit=1)
        ):
            raise NotFound(f"thread {thread_id!r} not found at {endpoint.label}")
        return []
    by_id = {(i.ns, i.checkpoint_id): i for i in items}
    rows = []
    for item in items:
        parent_versions: dict[str, Any] | None = None
        if item.parent_id:
            parent = by_id.get((item.ns, item.parent_id))
            if parent is None:
                tup = endpoint.saver.get_tuple(
                    {
                        "configurable": {
                            "thread_id": thread_id,
                            "checkpoint_ns": item.ns,
                            "checkpoint_id": item.parent_id,
                        }
                    }
                )
                if tup is not None:
                    parent = CheckpointItem(item.ns, item.parent_id, None, tup.checkpoint, {})
            parent_versions = None if parent is None else parent.versions
        rows.append(
            _row(
                ns=item.ns,
                checkpoint_id=item.checkpoint_id,
                parent_id=item.parent_id,
                metadata=item.metadata,
                ts=checkpoint_ts(item.checkpoint, item.checkpoint_id),
                versions=item.versions,
                parent_versions=parent_versions,
                writes=[(w.task_id, w.channel) for w in item.writes],
            )
        )
    return rows


def _row(
    *,
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
    metadata: Any,
    ts: float | None,
    versions: dict[str, Any],
    parent_versions: dict[str, Any] | None,
    writes: list[tuple[str, str]],
) -> dict[str, Any]:
    meta = metadata if isinstance(metadata, dict) else {}
    if parent_id is None:
        changed: list[str] | None = sorted(versions)
    elif parent_versions is None:
        changed = None  # the parent is not stored (pruned): unknown
    else:
        changed = sorted(ch for ch, v in versions.items() if parent_versions.get(ch) != v)
    return {
        "checkpoint_id": checkpoint_id,
        "checkpoint_ns": ns,
        "ts": iso(ts),
        "step": to_json(meta.get("step")),
        "source": to_json(meta.get("source")),
        "parent_checkpoint_id": parent_id,
        "pending_writes": len(writes),
        "write_channels": sorted({channel for _, channel in writes}),
        "channels_changed": changed,
        "metadata_encrypted": isinstance(metadata, Encrypted),
    }


def cmd_history(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    ns = None if args.all_ns else args.ns
    with open_endpoint(args.url, key_prefix=args.key_prefix, serde=inspection_serde()) as endpoint:
        rows = history_rows(endpoint, args.thread, ns, args.limit)
        label = endpoint.label
    if args.json:
        print_json({"url": label, "thread_id": args.thread, "checkpoints": rows}, out)
        return 0
    write_history(rows, out, show_ns=ns is None)
    return 0


def write_history(rows: list[dict[str, Any]], out: TextIO, *, show_ns: bool = False) -> None:
    headers = ["CHECKPOINT", "STEP", "SOURCE", "PARENT", "WRITES", "CHANGED", "TS"]
    if show_ns:
        headers.insert(1, "NS")
    body = []
    for row in rows:
        changed = row["channels_changed"]
        cells = [
            row["checkpoint_id"],
            row["step"],
            row["source"],
            row["parent_checkpoint_id"],
            row["pending_writes"],
            "?" if changed is None else (",".join(changed) or "-"),
            row["ts"],
        ]
        if show_ns:
            cells.insert(1, row["checkpoint_ns"] or '""')
        body.append(cells)
    table(headers, body, out)


# -- dump ------------------------------------------------------------------------------


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
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "target_checkpoint_id": record.checkpoint_id,
        "parent_checkpoint_id": record.parent_id,
        "source": endpoint.label,
        "channels": {ch: result[ch] for ch in wanted},
    }


@dataclass(frozen=True, slots=True)
class _Seed:
    """A stored channel value, with the list elements a manifest may name."""

    blob: Typed
    elements: Mapping[str, Typed]
    where: str

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
        "writes": [
            {
                "checkpoint_id": checkpoint_id,
                "task_id": w.task_id,
                "task_path": w.task_path,
                "idx": w.idx,
                "value": typed_to_json(w.value),
            }
            for checkpoint_id, w in writes
        ],
    }


def _foreign_dump(
    endpoint: Foreign,
    thread_id: str,
    channels: Sequence[str] | None,
    checkpoint_id: str | None,
    ns: str,
) -> dict[str, Any]:
    saver = endpoint.saver
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    if checkpoint_id:
        config["configurable"]["checkpoint_id"] = checkpoint_id
    target = saver.get_tuple(config)  # type: ignore[arg-type]
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
    parent = (target.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "target_checkpoint_id": target_id,
        "parent_checkpoint_id": parent or None,
        "source": endpoint.label,
        "channels": {ch: result[ch] for ch in wanted},
    }


def _foreign_one(
    endpoint: Foreign, thread_id: str, ns: str, checkpoint_id: str
) -> tuple[CheckpointItem, str | None] | None:
    tup = endpoint.saver.get_tuple(
        {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
    )
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
    with open_endpoint(args.url, key_prefix=args.key_prefix, serde=inspection_serde()) as endpoint:
        document = dump_thread(
            endpoint,
            args.thread_id,
            args.channel,
            checkpoint_id=args.checkpoint_id,
            ns=args.checkpoint_ns,
        )
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
    return 0


def _plain(value: Typed) -> Any:
    return load_plain(value.tag, value.data)


# -- for the demo ----------------------------------------------------------------------


def write_thread_report(
    endpoint: Endpoint,
    thread_id: str,
    out: TextIO,
    *,
    ns: str = "",
    channels: Sequence[str] | None = None,
    limit: int | None = 10,
    key_prefix: str | None = None,
) -> None:
    """``graphkeep history`` then ``graphkeep dump`` of one thread, as a transcript."""
    rows = history_rows(endpoint, thread_id, ns, limit)
    prefix = f" --key-prefix {shlex.quote(key_prefix)}" if key_prefix else ""
    target = f"{shlex.quote(endpoint.label)}{prefix}"
    out.write(f"$ graphkeep history {target} {shlex.quote(thread_id)}")
    out.write(f" --limit {limit}\n" if limit else "\n")
    write_history(rows, out)
    document = dump_thread(endpoint, thread_id, channels, ns=ns)
    flags = "".join(f" --channel {ch}" for ch in document["channels"])
    out.write(f"$ graphkeep dump {target} --thread-id {shlex.quote(thread_id)}{flags}\n")
    print_json(document, out)
