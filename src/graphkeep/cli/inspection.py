"""Read-only listings: ``threads`` (one row per thread) and ``history`` (a thread's
checkpoints, newest first), and the ``history`` + ``dump`` transcript of one thread that
:func:`graphkeep.cli.show_thread` prints. ``dump`` itself: :mod:`graphkeep.cli.dump`.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, TextIO

from graphkeep.checkpoint.records import ListQuery, Loaded, Summary, Typed
from graphkeep.cli.console import NotFound, Progress, human_bytes, iso, print_json, table
from graphkeep.cli.dump import dump_thread
from graphkeep.cli.endpoints import Endpoint, Native, open_endpoint
from graphkeep.cli.foreign import Foreign
from graphkeep.cli.hot import enter_hot, hot_bytes, thread_hot, write_thread_hot
from graphkeep.cli.threads import ThreadInfo, checkpoint_ts, iter_threads, quick_info, thread_info
from graphkeep.moving.decode import Encrypted, inspection_serde, load_plain, to_json
from graphkeep.moving.items import CheckpointItem, foreign_items, thread_config

HISTORY_PAGE_SIZE = 100


# -- threads ---------------------------------------------------------------------------


def cmd_threads(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    infos: list[ThreadInfo] = []
    truncated = False
    hot: list[int | None] | None = None
    with ExitStack() as stack:  # --hot opened first: a bad one fails before any read
        view = enter_hot(stack, args)
        with (
            open_endpoint(
                args.url, key_prefix=args.key_prefix, serde=inspection_serde()
            ) as endpoint,
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
        if view is not None:
            hot = hot_bytes(view, [i.thread_id for i in infos])
    if args.json:
        listed = [i.as_json() for i in infos]
        for entry, size in zip(listed, hot or [], strict=False):
            entry["hot_bytes"] = size
        report: dict[str, Any] = {"url": label, "count": len(infos), "truncated": truncated}
        if view is not None:
            report["hot"] = view.label
        print_json({**report, "threads": listed}, out)
        return 0
    if not infos:
        out.write(f"no threads at {label}\n")
        return 0
    headers = ["THREAD", "CHECKPOINTS", "NAMESPACES", "WRITES", "SIZE", "LAST CHECKPOINT"]
    rows_out: list[list[Any]] = [
        [
            i.thread_id,
            i.checkpoints,
            _namespaces(i.namespaces),
            i.writes,
            human_bytes(i.bytes),
            iso(i.last_ts),
        ]
        for i in infos
    ]
    if hot is not None:
        headers.append("HOT")
        for row, size in zip(rows_out, hot, strict=True):
            row.append("-" if size is None else human_bytes(size))
    table(headers, rows_out, out)
    more = f" (first {len(infos)}; --limit to see more)" if truncated else ""
    held = ""
    if view is not None and hot is not None:
        held = f"; {sum(s is not None for s in hot)} in Redis ({view.label})"
    out.write(f"{len(infos)} thread(s) at {label}{more}{held}\n")
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
    hot = None
    with ExitStack() as stack:  # --hot opened first: a bad one fails before any read
        view = enter_hot(stack, args)
        with open_endpoint(
            args.url, key_prefix=args.key_prefix, serde=inspection_serde()
        ) as endpoint:
            rows = history_rows(endpoint, args.thread, ns, args.limit)
            label = endpoint.label
        if view is not None:
            hot = thread_hot(view, args.thread, ns or "")
    if args.json:
        report = {"url": label, "thread_id": args.thread, "checkpoints": rows}
        if hot is not None:
            report["hot"] = hot
        print_json(report, out)
        return 0
    write_history(rows, out, show_ns=ns is None)
    if hot is not None:
        write_thread_hot(hot, out)
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
