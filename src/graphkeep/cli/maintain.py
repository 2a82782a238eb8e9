"""Commands that look after a store: ``prune``, ``stats`` and ``setup``.

``prune`` plans with the same rule the saver applies (``keep_latest``: each
namespace's head plus the ancestors its DeltaChannels still need), prints the
plan, and then calls ``saver.prune`` thread by thread; ``--dry-run`` stops after
the plan. ``stats`` is the growth report for cron: exit code 3 when a thread
crosses a threshold.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, MANIFEST_TAG
from graphkeep.checkpoint.maintenance import referenced_blobs
from graphkeep.checkpoint.records import Inventory
from graphkeep.checkpoint.walk import keep_latest
from graphkeep.cli.batch import report_not_found
from graphkeep.cli.console import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_THRESHOLD,
    CliError,
    Progress,
    UsageError,
    human_bytes,
    iso,
    print_json,
    safe_url,
    table,
    uuid6_time,
)
from graphkeep.cli.endpoints import (
    Native,
    is_foreign,
    open_endpoint,
    refuse_rival,
    scheme_of,
)
from graphkeep.cli.foreign import describe_schema as describe_foreign_schema
from graphkeep.cli.hot import read_hot_report, write_hot_report
from graphkeep.cli.privileges import cmd_print_privileges
from graphkeep.cli.threads import ThreadInfo, checkpoint_ts, is_element, iter_threads, thread_info
from graphkeep.connect import BACKENDS
from graphkeep.moving.decode import LosslessSerde, load_plain, to_json

# -- prune -----------------------------------------------------------------------------


def _require_native(endpoint: Any, command: str) -> Native:
    if not isinstance(endpoint, Native):
        raise UsageError(
            f"{command} works on graphkeep URLs ({', '.join(sorted(BACKENDS))}://),"
            f" not on {endpoint.scheme}://"
        )
    return endpoint


def last_activity(endpoint: Native, thread_id: str, inventory: Inventory) -> float | None:
    """When the thread's newest checkpoint was made (uuid6 id time, else its ``ts``)."""
    if not inventory.checkpoints:
        return None
    newest = max(inventory.checkpoints, key=lambda s: s.checkpoint_id)
    seconds = uuid6_time(newest.checkpoint_id)
    if seconds is not None:
        return seconds
    loaded = endpoint.call(endpoint.saver.port.load(thread_id, newest.ns, newest.checkpoint_id))
    if loaded is None:
        return None
    body = load_plain(loaded.record.checkpoint.tag, loaded.record.checkpoint.data)
    return checkpoint_ts(body, newest.checkpoint_id)


def prune_keeps(inventory: Inventory, strategy: str) -> set[tuple[str, str]]:
    """The (ns, checkpoint_id) that ``saver.prune(strategy=...)`` keeps."""
    return keep_latest(inventory.checkpoints) if strategy == "keep_latest" else set()


def referenced(
    endpoint: Native, thread_id: str, inventory: Inventory, keep: set[tuple[str, str]]
) -> set[tuple[str, str, str]]:
    """Blob keys (values and list elements) the kept checkpoints need, as the saver's prune."""
    op = referenced_blobs(endpoint.saver.port, thread_id, inventory, keep)
    return endpoint.call(op)  # type: ignore[no-any-return]


def plan_prune(
    inventory: Inventory,
    keep: set[tuple[str, str]],
    referenced: set[tuple[str, str, str]],
    strategy: str = "keep_latest",
) -> dict[str, Any]:
    """What ``saver.prune`` removes from a thread with this inventory.

    ``keep``: the (ns, id) it keeps (:func:`prune_keeps`); ``referenced``: the blob
    keys those need (:func:`referenced`); every other blob and element goes. Writes go
    with the checkpoints removed (``keep_latest`` keeps those under a checkpoint that is
    not stored: they may be a live run's), all of them with ``delete``.
    """
    every = {(s.ns, s.checkpoint_id) for s in inventory.checkpoints}
    heads = {(ns, max(cid for n, cid in every if n == ns)) for ns in {n for n, _ in every}}
    doomed = every - keep
    write_sets = inventory.write_keys if strategy == "delete" else inventory.write_keys & doomed
    garbage = inventory.blob_keys - referenced
    orphans = {key for key in garbage if is_element(key)}
    return {
        "checkpoints_before": len(every),
        "checkpoints_kept": len(keep),
        "kept_for_delta_channels": len(keep - heads),
        "checkpoints_removed": len(doomed),
        "checkpoint_writes_removed": len(write_sets),
        "blobs_removed": len(garbage) - len(orphans),
        "list_elements_removed": len(orphans),
        "removed_checkpoint_ids": [
            {"checkpoint_ns": ns, "checkpoint_id": cid} for ns, cid in sorted(doomed)
        ],
    }


def _select_threads(
    endpoint: Native, args: argparse.Namespace, err: TextIO
) -> Iterator[tuple[str, Inventory | None]]:
    store = endpoint.saver.port
    if args.thread:
        for thread_id in dict.fromkeys(args.thread):
            yield thread_id, endpoint.call(store.inventory(thread_id))
        return
    cutoff = time.time() - args.older_than
    with Progress("scanning", stream=err, enabled=args.progress) as progress:
        for thread_id in iter_threads(endpoint):
            inventory = endpoint.call(store.inventory(thread_id))
            progress.advance(detail=thread_id)
            last = last_activity(endpoint, thread_id, inventory)
            if last is not None and last < cutoff:
                yield thread_id, inventory


def cmd_prune(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    strategy = "delete" if args.delete else "keep_latest"
    results: list[dict[str, Any]] = []
    missing: list[str] = []
    with open_endpoint(args.url, key_prefix=args.key_prefix) as opened:
        endpoint = _require_native(opened, "prune")
        label = endpoint.label
        selected = list(_select_threads(endpoint, args, err))
        with Progress(
            "pruning" if not args.dry_run else "planning",
            len(selected),
            stream=err,
            enabled=args.progress,
        ) as progress:
            for thread_id, inventory in selected:
                progress.advance(detail=thread_id)
                if inventory is None or not (
                    inventory.checkpoints or inventory.write_keys or inventory.blob_keys
                ):
                    missing.append(thread_id)
                    continue
                keep = prune_keeps(inventory, strategy)
                needed = referenced(endpoint, thread_id, inventory, keep)
                plan = {"thread_id": thread_id, **plan_prune(inventory, keep, needed, strategy)}
                if not args.dry_run and (
                    plan["checkpoints_removed"]
                    or plan["checkpoint_writes_removed"]
                    or plan["blobs_removed"]
                    or plan["list_elements_removed"]
                ):
                    endpoint.saver.prune([thread_id], strategy=strategy)
                results.append(plan)
    verb = "would remove" if args.dry_run else "removed"
    if args.json:
        print_json(
            {
                "url": label,
                "strategy": strategy,
                "dry_run": args.dry_run,
                "threads": results,
                "not_found": missing,
            },
            out,
        )
    else:
        for plan in results:
            delta = plan["kept_for_delta_channels"]
            kept = f"kept {plan['checkpoints_kept']}"
            if delta:
                kept += f" (head + {delta} DeltaChannel ancestor(s))"
            out.write(
                f"{plan['thread_id']}: {verb} {plan['checkpoints_removed']} of"
                f" {plan['checkpoints_before']} checkpoint(s), writes of"
                f" {plan['checkpoint_writes_removed']} checkpoint(s),"
                f" {plan['blobs_removed']} blob(s){_elements_part(plan)}; {kept}\n"
            )
            if args.verbose:
                for entry in plan["removed_checkpoint_ids"]:
                    ns = entry["checkpoint_ns"]
                    out.write(f"  - {entry['checkpoint_id']}{f' (ns {ns})' if ns else ''}\n")
        report_not_found(missing, label, err)
        if not results and not missing:
            out.write(f"no thread matches at {label}\n")
        if args.dry_run and results:
            out.write("dry run: nothing was removed\n")
    return EXIT_NOT_FOUND if missing else EXIT_OK


def _elements_part(plan: dict[str, Any]) -> str:
    removed = plan["list_elements_removed"]
    return f", {removed} list element(s)" if removed else ""


# -- stats -----------------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    infos: list[ThreadInfo] = []
    hot = read_hot_report(args)
    with (
        open_endpoint(
            args.url, key_prefix=args.key_prefix, serde=LosslessSerde(strict=False)
        ) as endpoint,
        Progress("stats", stream=err, enabled=args.progress) as progress,
    ):
        label = endpoint.label
        for thread_id in iter_threads(endpoint):
            info = thread_info(endpoint, thread_id)
            progress.advance(detail=thread_id)
            if info is not None:
                infos.append(info)
    violations = []
    for info in infos:
        crossed = []
        if (
            args.max_checkpoints_per_thread is not None
            and info.checkpoints > args.max_checkpoints_per_thread
        ):
            crossed.append(f"{info.checkpoints} checkpoints > {args.max_checkpoints_per_thread}")
        if (
            args.max_bytes_per_thread is not None
            and info.bytes is not None
            and info.bytes > args.max_bytes_per_thread
        ):
            crossed.append(f"{human_bytes(info.bytes)} > {human_bytes(args.max_bytes_per_thread)}")
        if crossed:
            violations.append({"thread_id": info.thread_id, "crossed": crossed})
    total_bytes = sum(i.bytes or 0 for i in infos)
    total_cp = sum(i.checkpoints for i in infos)
    top = sorted(infos, key=lambda i: (i.bytes or 0, i.checkpoints), reverse=True)[: args.top]
    report: dict[str, Any] = {
        "url": label,
        "threads": len(infos),
        "checkpoints": total_cp,
        "writes": sum(i.writes or 0 for i in infos),
        "blobs": None if any(i.blobs is None for i in infos) else sum(i.blobs or 0 for i in infos),
        "list_elements": None
        if any(i.elements is None for i in infos)
        else sum(i.elements or 0 for i in infos),
        "bytes": total_bytes,
        "avg_checkpoints_per_thread": round(total_cp / len(infos), 1) if infos else 0,
        "avg_bytes_per_thread": int(total_bytes / len(infos)) if infos else 0,
        "max_checkpoints_per_thread": max((i.checkpoints for i in infos), default=0),
        "max_bytes_per_thread": max((i.bytes or 0 for i in infos), default=0),
        "top": [i.as_json() for i in top],
        "thresholds": {
            "max_checkpoints_per_thread": args.max_checkpoints_per_thread,
            "max_bytes_per_thread": args.max_bytes_per_thread,
        },
        "violations": violations,
    }
    if hot is not None:
        report["hot"] = hot
    if args.json:
        print_json(report, out)
    else:
        out.write(
            f"{label}: {len(infos)} thread(s), {total_cp} checkpoint(s), {report['writes']}"
            f" write(s), {human_bytes(total_bytes)} stored (approx.)\n"
            f"per thread: avg {report['avg_checkpoints_per_thread']} checkpoints /"
            f" {human_bytes(report['avg_bytes_per_thread'])},"
            f" max {report['max_checkpoints_per_thread']} checkpoints /"
            f" {human_bytes(report['max_bytes_per_thread'])}\n"
        )
        if top:
            out.write(f"top {len(top)} by size:\n")
            table(
                [
                    "THREAD",
                    "CHECKPOINTS",
                    "WRITES",
                    "BLOBS",
                    "LIST ELEMENTS",
                    "SIZE",
                    "LAST CHECKPOINT",
                ],
                [
                    [
                        i.thread_id,
                        i.checkpoints,
                        i.writes,
                        i.blobs,
                        i.elements,
                        human_bytes(i.bytes),
                        iso(i.last_ts),
                    ]
                    for i in top
                ],
                out,
            )
        if hot is not None:
            write_hot_report(hot, out)
        for v in violations:
            out.write(f"THRESHOLD {v['thread_id']}: {'; '.join(v['crossed'])}\n")
    return EXIT_THRESHOLD if violations else EXIT_OK


# -- setup -----------------------------------------------------------------------------

#: functions a backend may expose (on its saver class or module) to describe its schema
SCHEMA_HOOKS = ("schema", "table_definition", "index_specs")

#: backends with nothing to create: what they keep instead (shown by ``setup --print``)
KEY_LAYOUTS: dict[str, dict[str, Any]] = {
    "graphkeep.backends.redis": {
        "schema": None,
        "setup": "loads the Lua scripts (SCRIPT LOAD); no keys, indexes or modules are created",
        "keys_per_thread": {
            "{prefix}:1:{{thread}}:h": "HASH ns\\0checkpoint_id -> head (parent, versions,"
            " present, needs_history, run_id[, source])",
            "{prefix}:1:{{thread}}:p": "HASH ns\\0checkpoint_id -> checkpoint and metadata bytes",
            "{prefix}:1:{{thread}}:x": "ZSET ns\\0checkpoint_id (latest / before per namespace)",
            "{prefix}:1:{{thread}}:a": "ZSET checkpoint_id\\0ns (newest first, all namespaces)",
            "{prefix}:1:{{thread}}:w": "HASH ns\\0checkpoint_id\\0task_id\\0idx -> write",
            "{prefix}:1:{{thread}}:wi": "ZSET of write keys (a checkpoint's writes in order)",
            "{prefix}:1:{{thread}}:b": "HASH ns\\0channel\\0version -> channel value",
            "{prefix}:1:{{thread}}:lock": "STRING lease token (saver.lock)",
            "{prefix}:1:{{thread}}:f": "STREAM n=ns, c=checkpoint id (u=its 16 uuid bytes):"
            " the thread's commit feed for saver.watch, appended by put, trimmed to ~1000",
            "{prefix}:1:{{thread}}:s": "HASH token\\0i -> argument: the staged first arguments"
            " of a call over 3,999 arguments until its script commits it (expires after 1 h)",
        },
        "notes": [
            "every key of a thread shares the hash tag {thread}: Redis Cluster safe",
            "TTL (option ttl) is a sliding expiry on all keys of a thread",
            f"a shared list value is a manifest blob (tag {MANIFEST_TAG}) naming element"
            f" blobs of channel {ELEMENT_CHANNEL} (version = element key)",
        ],
    },
}


def _hook(module: Any, saver_class: Any) -> tuple[str, Callable[..., Any]] | None:
    for owner in (saver_class, module):
        for name in SCHEMA_HOOKS:
            fn = getattr(owner, name, None)
            if callable(fn):
                return name, fn
    return None


def _hook_arguments(fn: Callable[..., Any], url: str, key_prefix: str | None) -> dict[str, Any]:
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    offered: dict[str, Any] = {"url": url}
    if key_prefix is not None:
        offered.update(key_prefix=key_prefix, prefix=key_prefix)
    if parts.hostname and scheme_of(url).startswith("dynamodb"):
        offered.update(table_name=parts.netloc, table=parts.netloc)
    database = parts.path.lstrip("/")
    if database:
        offered.update(database=database, db=database, database_name=database)
    offered.update({k: v for k, v in query.items() if k not in offered})
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    chosen: dict[str, Any] = {}
    for name, param in params.items():
        if name in offered and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            chosen[name] = offered[name]
        elif param.default is param.empty and param.kind not in (
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ):
            raise CliError(f"cannot describe the schema: {fn.__qualname__}() needs {name!r}")
    return chosen


def describe_schema(url: str, key_prefix: str | None) -> dict[str, Any]:
    refuse_rival(url, "setup --print")
    scheme = scheme_of(url)
    if is_foreign(url):
        return describe_foreign_schema(url)
    if scheme not in BACKENDS:
        known = ", ".join(f"{s}://" for s in sorted(BACKENDS))
        raise UsageError(f"unsupported URL scheme {scheme!r} in {safe_url(url)}; use {known}")
    module_name, class_name, _async, extra = BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"{scheme}:// needs an optional dependency: pip install 'graphkeep[{extra}]' ({exc})"
        ) from exc
    saver_class = getattr(module, class_name)
    described: dict[str, Any] = {"backend": module_name, "url": safe_url(url)}
    hook = _hook(module, saver_class)
    if hook is not None:
        name, fn = hook
        described[name] = to_json(fn(**_hook_arguments(fn, url, key_prefix)))
        return described
    layout = KEY_LAYOUTS.get(module_name)
    if layout is None:
        described.update(
            schema=None,
            note="this backend publishes no schema description; `graphkeep setup URL`"
            " creates whatever it needs",
        )
        return described
    prefix = key_prefix or "graphkeep"
    described.update({k: v for k, v in layout.items() if k != "keys_per_thread"})
    described["key_prefix"] = prefix
    described["keys_per_thread"] = {
        key.format(prefix=prefix): meaning for key, meaning in layout["keys_per_thread"].items()
    }
    return described


def cmd_setup(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.print_acl or args.print_iam_policy or args.read_only:
        return cmd_print_privileges(args, out)
    if args.print:
        print_json(describe_schema(args.url, args.key_prefix), out)
        return EXIT_OK
    with open_endpoint(args.url, key_prefix=args.key_prefix, setup=True) as endpoint:
        label = endpoint.label
        kind = "graphkeep" if isinstance(endpoint, Native) else endpoint.kind
    if args.json:
        print_json({"url": label, "backend": kind, "setup": "done"}, out)
    else:
        out.write(f"schema ready at {label}\n")
    return EXIT_OK
