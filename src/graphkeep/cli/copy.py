"""``graphkeep copy``: move threads between any two savers, with the same ids.

graphkeep -> graphkeep goes through the port: ``export_thread`` on the source,
``import_thread`` of what the destination lacks (blobs, then writes, then
checkpoints oldest first, in bounded batches), so values travel as stored
bytes, encrypted or not; a shared list travels as its manifest and element
records (blobs like any other, counted apart as ``list_elements``). Any other
pair (LangGraph's SQLite / Postgres savers on either side) goes through the
public saver API: oldest checkpoint first, its writes (``put_writes`` per task)
and then the checkpoint (``put`` with its parent's config, ``new_versions`` =
channels whose version changed since the parent), with values loaded by
:class:`~graphkeep.moving.decode.LosslessSerde` so that classes this machine lacks
are copied byte for byte; a shared list is rebuilt from its elements on the way
out and shared again by a graphkeep destination on the way in.

The saver-API path translates channel versions into the kind the destination
steps from (:mod:`graphkeep.moving.versions`: LangGraph's default integers <->
graphkeep's strings), and any LangGraph saver can be either side with
``--source-saver`` / ``--dest-saver`` (:mod:`graphkeep.cli.custom`).

Both paths are idempotent (upserts, insert-if-absent writes) and resumable:
checkpoints already on the destination are skipped; on the saver-API path one
that differs from the source is reported and nothing is written into its
thread. At the end every thread is verified: graphkeep -> graphkeep, each
source checkpoint, write and blob exists on the destination (a destination
that has moved on may hold more writes); any other pair, through LangGraph's
read path (:mod:`graphkeep.cli.verify`). Missing writes are sent again once
before the copy is declared failed.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TextIO

from graphkeep.checkpoint.lists import is_manifest, manifest_keys
from graphkeep.checkpoint.records import (
    BlobRecord,
    CheckpointRecord,
    ThreadDump,
    WriteRecord,
)
from graphkeep.cli.batch import batch_exit, each_thread, report_not_found
from graphkeep.cli.console import Progress, UsageError, print_json
from graphkeep.cli.custom import load_factory, open_side
from graphkeep.cli.endpoints import Endpoint, Native, copy_key_prefixes, is_foreign
from graphkeep.cli.threads import dump_elements, export, is_element, native_items
from graphkeep.cli.verify import capped, load_app_graph, verify_graph, verify_thread
from graphkeep.errors import StorageUnavailable
from graphkeep.moving.decode import EncryptedValueError, LosslessSerde
from graphkeep.moving.items import (
    CheckpointItem,
    fingerprint,
    foreign_items,
    oldest_first,
    thread_config,
)
from graphkeep.moving.versions import VersionPlan, plan_versions, version_kind
from graphkeep.moving.writing import put_args, writes_args
from graphkeep.port import codec
from graphkeep.port.fence import fence_of

#: ``(source thread, destination thread) -> differences`` read through the app's graph
GraphCheck = Callable[[str, str], list[str]]

#: the lease a copy holds on each destination thread (a graphkeep destination), renewed every
#: third of it while the thread is copied: a copy killed midway holds the thread this long
COPY_LEASE_TTL = 30.0

BATCH_BYTES = 4 * 1024 * 1024
BATCH_ITEMS = 500


@dataclass
class ThreadCopy:
    """One thread's copy, as ``--json`` prints it field by field (``thread_id``: the
    source's)."""

    thread_id: str
    target_thread_id: str
    checkpoints: int = 0
    checkpoints_copied: int = 0
    checkpoints_already_present: int = 0
    writes: int = 0
    blobs: int | None = None
    #: list element records (shared lists), not counted in ``blobs``
    list_elements: int | None = None
    verified: bool | None = None
    problems: list[str] = field(default_factory=list)
    #: the destination had settled the thread (moved by ``fallback=``, or deleted there since):
    #: nothing copied
    settled: bool = False


@contextmanager
def renewed_lease(saver: Any, thread_id: str, ttl: float) -> Iterator[None]:
    """``saver.lock(thread_id)`` for the block, renewed by a thread of its own every ``ttl / 3``
    (a copy's writes carry its fencing token: once the lease is lost they are refused)."""
    with saver.lock(thread_id, ttl=ttl) as lock:
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl / 3):
                if not lock.extend():
                    return

        renewer = threading.Thread(target=renew, name=f"lease {thread_id}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()


def cmd_copy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.rename_to is not None and (args.all or len(args.thread or []) != 1):
        raise UsageError("--rename-to needs exactly one --thread")
    src_factory = load_factory(args.source_saver, "--source-saver")
    dst_factory = load_factory(args.dest_saver, "--dest-saver")
    src_prefix, dst_prefix = copy_key_prefixes(args)
    if src_factory is not None:
        src_prefix = None
    if dst_factory is not None:
        dst_prefix = None
    same_store = (
        args.src_url.rstrip("/") == args.dst_url.rstrip("/")
        and src_prefix == dst_prefix
        and (src_factory and src_factory.spec) == (dst_factory and dst_factory.spec)
    )
    if same_store and args.rename_to is None:
        raise UsageError(
            "source and destination are the same store: use --rename-to (one thread)"
            " or a different --dst-key-prefix"
        )
    graph = load_app_graph(args.graph) if args.graph is not None else None
    both_native = (
        src_factory is None
        and dst_factory is None
        and not is_foreign(args.src_url)
        and not is_foreign(args.dst_url)
    )
    serde = LosslessSerde(strict=not both_native)
    with ExitStack() as sides:
        src = sides.enter_context(
            open_side(args.src_url, src_factory, key_prefix=src_prefix, serde=serde)
        )
        dst = sides.enter_context(
            open_side(
                args.dst_url,
                dst_factory,
                key_prefix=dst_prefix,
                serde=serde,
                setup=True,
                must_exist=False,
            )
        )
        graph_check: GraphCheck | None = None
        if graph is not None:
            # the app's graph reads with the app's serializer, not the copy's lossless one
            app_src = sides.enter_context(
                open_side(args.src_url, src_factory, key_prefix=src_prefix)
            )
            app_dst = sides.enter_context(
                open_side(args.dst_url, dst_factory, key_prefix=dst_prefix)
            )

            def graph_check(thread_id: str, target: str) -> list[str]:
                try:
                    return verify_graph(graph, app_src.saver, app_dst.saver, thread_id, target)
                except Exception as exc:  # the app's graph may fail to read either side
                    return [f"--graph could not read the thread: {type(exc).__name__}: {exc}"]

        def copy_one(thread_id: str, target: str) -> ThreadCopy | None:
            if isinstance(src, Native) and isinstance(dst, Native):
                return _copy_native(src, dst, thread_id, target, args, err)
            return _copy_generic(src, dst, thread_id, target, args, err, graph_check)

        def copy_thread(thread_id: str) -> ThreadCopy | None:
            target = args.rename_to or thread_id
            if not isinstance(dst, Native):
                return copy_one(thread_id, target)
            # beside a live switch (fallback=): under the thread's lease, as the app's move
            # is, and never into a thread the destination settled (moved, or deleted since)
            with renewed_lease(dst.saver, target, COPY_LEASE_TTL):
                if dst.call(dst.saver.port.is_settled(target)):
                    return ThreadCopy(thread_id, target, settled=True)
                return copy_one(thread_id, target)

        results, missing = each_thread("copy", args, src, copy_thread, err)
        src_label, dst_label = src.label, dst.label
    failed = [r for r in results if r.problems]
    if args.json:
        print_json(
            {
                "source": src_label,
                "destination": dst_label,
                "threads": [asdict(r) for r in results],
                "not_found": missing,
                "ok": not failed and not missing,
            },
            out,
        )
    else:
        for r in results:
            name = r.thread_id
            if r.target_thread_id != r.thread_id:
                name += f" -> {r.target_thread_id}"
            blobs = "" if r.blobs is None else f", {r.blobs} blob(s)"
            if r.list_elements:
                blobs += f", {r.list_elements} list element(s)"
            if r.settled:
                out.write(f"{name}: moved already by a live switch (or deleted there): skipped\n")
                continue
            state = {True: "verified", False: "VERIFY FAILED", None: "not verified"}[r.verified]
            out.write(
                f"{name}: {r.checkpoints_copied} checkpoint(s) copied,"
                f" {r.checkpoints_already_present} already present,"
                f" {r.writes} write(s){blobs}; {state}\n"
            )
            for problem in r.problems:
                out.write(f"  ! {problem}\n")
        report_not_found(missing, src_label, err)
        if not results and not missing:
            out.write(f"no threads at {src_label}\n")
    return batch_exit(failed=bool(failed), missing=bool(missing))


# -- graphkeep -> graphkeep: the port's export/import ----------------------------------


def _copy_native(
    src: Native,
    dst: Native,
    thread_id: str,
    target: str,
    args: argparse.Namespace,
    err: TextIO,
) -> ThreadCopy | None:
    dump = export(src, thread_id)
    if not dump:
        return None
    result = ThreadCopy(thread_id, target, checkpoints=len(dump.checkpoints))
    elements = sum(1 for ns, b in dump.blobs if is_element((ns, b.channel, b.version)))
    result.writes, result.blobs = len(dump.writes), len(dump.blobs) - elements
    result.list_elements = elements
    inventory = dst.call(dst.saver.port.inventory(target))
    present = {(s.ns, s.checkpoint_id) for s in inventory.checkpoints}
    checkpoints = [
        _for_target(src, rec, target)
        for rec in sorted(dump.checkpoints, key=lambda r: (r.checkpoint_id, r.ns))
        if (rec.ns, rec.checkpoint_id) not in present
    ]
    result.checkpoints_copied = len(checkpoints)
    result.checkpoints_already_present = len(dump.checkpoints) - len(checkpoints)
    copied = {(r.ns, r.checkpoint_id) for r in checkpoints}
    writes = [
        w for w in dump.writes if (w[0], w[1]) in copied or (w[0], w[1]) not in inventory.write_keys
    ]
    blobs = [b for b in dump.blobs if (b[0], b[1].channel, b[1].version) not in inventory.blob_keys]
    _import(dst, target, blobs, writes, checkpoints, args, err)
    if args.verify:
        _verify_native(src, dst, dump, target, result, args, err)
    return result


def _for_target(src: Native, record: CheckpointRecord, target: str) -> CheckpointRecord:
    renamed = record.renamed(target)
    if not renamed.metadata_doc:  # some stores do not return it; others filter on it
        try:
            metadata = codec.load(src.saver.serde, record.metadata)
        except Exception:  # encrypted without the key: the destination re-derives nothing
            return renamed
        if isinstance(metadata, dict):
            renamed = replace(renamed, metadata_doc=codec.plain(metadata))
    return renamed


def _import(
    dst: Native,
    target: str,
    blobs: list[tuple[str, BlobRecord]],
    writes: list[tuple[str, str, WriteRecord]],
    checkpoints: list[CheckpointRecord],
    args: argparse.Namespace,
    err: TextIO,
) -> None:
    # Order matters for readers and for resuming: values first, checkpoints last
    # (oldest first), so a checkpoint is never visible before what it needs.
    batches = list(_batches(blobs, writes, checkpoints))
    if not batches:
        return
    total = sum(size for _, size in batches)
    with Progress(f"  {target}", total, stream=err, enabled=args.progress, unit="B") as progress:
        for batch, size in batches:
            dst.call(dst.saver.port.import_thread(target, batch, fence_of(target)))
            progress.advance(size)


def _batches(
    blobs: list[tuple[str, BlobRecord]],
    writes: list[tuple[str, str, WriteRecord]],
    checkpoints: list[CheckpointRecord],
) -> Iterator[tuple[ThreadDump, int]]:
    """Batches (with their size), each closed once it reaches BATCH_BYTES or BATCH_ITEMS: the
    values (blobs, then writes), then the checkpoints, which never share a batch with values."""
    values: list[tuple[str, Any, int]] = [("blobs", b, len(b[1].value.data) + 64) for b in blobs]
    values += [("writes", w, len(w[2].value.data) + 64) for w in writes]
    heads = [
        ("checkpoints", r, len(r.checkpoint.data) + len(r.metadata.data) + 128) for r in checkpoints
    ]
    for part in (values, heads):
        current, size, count = ThreadDump([], [], []), 0, 0
        for kind, record, cost in part:
            getattr(current, kind).append(record)
            size, count = size + cost, count + 1
            if size >= BATCH_BYTES or count >= BATCH_ITEMS:
                yield current, size
                current, size, count = ThreadDump([], [], []), 0, 0
        if current:
            yield current, size


def _write_counts(writes: list[tuple[str, str, WriteRecord]]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for ns, checkpoint_id, _ in writes:
        counts[(ns, checkpoint_id)] = counts.get((ns, checkpoint_id), 0) + 1
    return counts


def _verify_native(
    src: Native,
    dst: Native,
    dump: ThreadDump,
    target: str,
    result: ThreadCopy,
    args: argparse.Namespace,
    err: TextIO,
) -> None:
    want = _write_counts(dump.writes)
    for attempt in range(2):
        copied = export(dst, target)
        have_cp = {(r.ns, r.checkpoint_id) for r in copied.checkpoints}
        have_blobs = {(ns, b.channel, b.version) for ns, b in copied.blobs}
        have = _write_counts(copied.writes)
        problems = _compare(
            {(r.ns, r.checkpoint_id) for r in dump.checkpoints}, have_cp, want, have
        )
        lost = [key for key in _blob_keys(dump) if key not in have_blobs]
        lost_elements = sum(1 for key in lost if is_element(key))
        if len(lost) > lost_elements:
            problems.append(f"{len(lost) - lost_elements} blob(s) missing on the destination")
        if lost_elements:
            problems.append(f"{lost_elements} list element(s) missing on the destination")
        problems += _unreadable_lists(dump)
        short_writes = any(p.startswith("writes") for p in problems)
        if not problems or attempt == 1 or not short_writes:
            result.problems = problems
            result.verified = not problems
            return
        # a source checkpoint gained writes since (or a write batch was lost): send all again
        _import(dst, target, [], list(dump.writes), [], args, err)


def _blob_keys(dump: ThreadDump) -> list[tuple[str, str, str]]:
    return [(ns, b.channel, b.version) for ns, b in dump.blobs]


def _unreadable_lists(dump: ThreadDump) -> list[str]:
    """Manifests of the source's checkpoints whose elements the source itself lacks.

    Such a list cannot be rebuilt on either side (the source is damaged, or a
    writer deleted the thread during the copy): reported, never copied silently.
    """
    blobs = {(ns, b.channel, b.version): b.value for ns, b in dump.blobs}
    elements = dump_elements(dump)
    damaged = []
    for record in dump.checkpoints:
        for channel in record.present:
            blob = blobs.get((record.ns, channel, record.versions.get(channel, "")))
            if blob is not None and is_manifest(blob):
                have = elements.get(record.ns, {})
                if any(key not in have for key in manifest_keys(blob)):
                    damaged.append(f"{channel} at {record.checkpoint_id}")
    if not damaged:
        return []
    return [
        f"source: {len(damaged)} list value(s) name elements the source does not hold"
        f" (first: {damaged[0]}); they cannot be rebuilt"
    ]


def _compare(
    source_ids: set[tuple[str, str]],
    target_ids: set[tuple[str, str]],
    want: dict[tuple[str, str], int],
    have: dict[tuple[str, str], int],
) -> list[str]:
    problems = []
    lost = source_ids - target_ids
    if lost:
        problems.append(
            f"{len(lost)} of {len(source_ids)} checkpoint(s) missing on the destination"
        )
    short = {key: n for key, n in want.items() if have.get(key, 0) < n}
    if short:
        missing = sum(n - have.get(key, 0) for key, n in short.items())
        problems.append(
            f"writes: {missing} write(s) of {len(short)} checkpoint(s) missing on the destination"
        )
    return problems


# -- any other pair: the saver API -----------------------------------------------------


def _source_items(src: Endpoint, thread_id: str) -> list[CheckpointItem]:
    if isinstance(src, Native):
        return native_items(src, thread_id)
    return foreign_items(src, thread_id)


def _present(dst: Endpoint, target: str) -> set[tuple[str, str]]:
    """The destination's checkpoints of ``target`` (without reading their values)."""
    if isinstance(dst, Native):
        inventory = dst.call(dst.saver.port.inventory(target))
        return {(s.ns, s.checkpoint_id) for s in inventory.checkpoints}
    return {
        (
            str(t.config["configurable"].get("checkpoint_ns", "")),
            str(t.config["configurable"]["checkpoint_id"]),
        )
        for t in dst.saver.list(thread_config(target))
    }


def _copy_generic(
    src: Endpoint,
    dst: Endpoint,
    thread_id: str,
    target: str,
    args: argparse.Namespace,
    err: TextIO,
    graph_check: GraphCheck | None = None,
) -> ThreadCopy | None:
    try:
        items = oldest_first(_source_items(src, thread_id))
    except (StorageUnavailable, EncryptedValueError):  # every thread would fail the same way
        raise
    except Exception as exc:  # one thread the source cannot read: the others go on
        unreadable = ThreadCopy(thread_id, target, verified=False)
        unreadable.problems = [f"source: the thread cannot be read: {type(exc).__name__}: {exc}"]
        return unreadable
    if not items:
        return None
    result = ThreadCopy(thread_id, target, checkpoints=len(items))
    locked = [i.checkpoint_id for i in items if not isinstance(i.checkpoint, dict)]
    if locked:
        result.verified = False
        result.problems = [
            f"source: checkpoint {locked[0]} (and {len(locked) - 1} more) cannot be read"
            " (undecodable, or encrypted: set LANGGRAPH_AES_KEY); nothing copied"
        ]
        return result
    result.writes = sum(len(i.writes) for i in items)
    plan = plan_versions(items, version_kind(dst.saver), fingerprint)
    present = _present(dst, target)
    there = [i for i in items if (i.ns, i.checkpoint_id) in present]
    result.checkpoints_already_present = len(there)
    # a checkpoint the destination holds already is never overwritten; if one differs from
    # the source, nothing is added to that thread
    held = frozenset(present)
    short: list[CheckpointItem] = []
    differing = verify_thread(
        src, dst, thread_id, target, there, plan, present=held, whole=False, short=short
    )
    if differing:
        result.problems = capped(differing)
        result.verified = False
        return result
    for item in short:  # writes are insert-if-absent: the ones there stay as they are
        _put_writes(dst, target, item)
    by_key = {(i.ns, i.checkpoint_id): i for i in items}
    copied = []
    with Progress(f"  {target}", len(items), stream=err, enabled=args.progress) as progress:
        for item in items:
            progress.advance()
            if (item.ns, item.checkpoint_id) in present:
                continue
            _put_writes(dst, target, item)
            parent = by_key.get((item.ns, item.parent_id)) if item.parent_id else None
            _put(dst, target, item, parent, plan)
            copied.append(item)
    result.checkpoints_copied = len(copied)
    if args.verify:
        for attempt in range(2):
            problems = verify_thread(src, dst, thread_id, target, items, plan, present=held)
            if attempt == 1 or not any("pending writes" in p for p in problems):
                break
            # a source checkpoint gained writes since (or a write was lost): send them again
            for item in copied:
                _put_writes(dst, target, item)
        if graph_check is not None and not problems:
            problems = graph_check(thread_id, target)
        result.problems = capped(problems)
        result.verified = not problems
    return result


def _put(
    dst: Endpoint,
    target: str,
    item: CheckpointItem,
    parent: CheckpointItem | None,
    plan: VersionPlan,
) -> None:
    dst.saver.put(*put_args(target, item, parent, plan))


def _put_writes(dst: Endpoint, target: str, item: CheckpointItem) -> None:
    for config, batch, task_id, task_path in writes_args(target, item):
        dst.saver.put_writes(config, batch, task_id, task_path)
