"""Thread export and import (``graphkeep copy``, ``saver.export_thread``) and the list of threads.

An export reads the thread's partition with one paged Query and keeps its visible heads plus
the hidden ancestors their DeltaChannels still need; an import writes values and writes first
and the heads last (BatchWriteItem). ``list_threads`` Scans the table (costly by nature).

An import onto a thread under a lease (``fence``: :func:`.locks.fence_guard`, ``copy_thread``
inside ``saver.lock(target)``) writes its chunk items first as before (content-addressed:
see :mod:`.writes`), then the rest in order in TransactWriteItems of up to 99 puts and the
lease's ``ConditionCheck`` (twice the write units), and stops with
:class:`~graphkeep.errors.LeaseLost` at the first one refused: a thread that fits in one
transaction is imported whole or not at all; a longer one keeps the transactions applied
before the newer grant (values before the heads that name them, as a crash would leave it).
See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import (
    CheckpointTable,
    Collection,
    Names,
    collections_of,
    names_of,
    record_of,
    summary_of,
    write_records_of,
    writes_of,
)
from graphkeep.backends.dynamodb.items import (
    RAW,
    SK,
    has_payload,
    head_hidden,
    hidden,
    read_payload,
    s,
    size_of,
)
from graphkeep.backends.dynamodb.locks import fence_guard
from graphkeep.backends.dynamodb.requests import batch_write, query_all, transact_parts
from graphkeep.checkpoint.records import BlobRecord, Summary, ThreadDump
from graphkeep.port import Op, codec


def export_thread(t: CheckpointTable, thread_id: str) -> Op[ThreadDump]:
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(t.query(pk))
    by_sk = {s(item, SK): item for item in items}
    colls = collections_of(items)
    summaries: dict[tuple[str, str], tuple[Names, Summary, Collection]] = {}
    for coll in colls.values():
        if coll.head is None or hidden(coll.head, now):
            continue
        names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
        summary = summary_of(names.ns, names.checkpoint_id, coll.head)
        summaries[(names.ns, names.checkpoint_id)] = (names, summary, coll)
    # visible heads, plus the hidden ancestors their DeltaChannels still need; a walk
    # stops at a checkpoint already kept (linear in the thread's length, unlike walk_op)
    keep: set[tuple[str, str]] = set()
    for (ns, cid), (_names, summary, coll) in summaries.items():
        assert coll.head is not None
        if head_hidden(coll.head, now):
            continue
        keep.add((ns, cid))
        missing = set(summary.needs_history) - set(summary.present)
        parent = summary.parent_id
        while parent and missing and (ns, parent) in summaries and (ns, parent) not in keep:
            keep.add((ns, parent))
            ancestor = summaries[(ns, parent)][1]
            missing -= set(ancestor.present)
            parent = ancestor.parent_id
    dump = ThreadDump([], [], [])
    headless: set[tuple[str, str, str]] = set()
    for ident, coll in colls.items():
        if coll.head is None:
            headless.add(ident)
    for ns_cid in sorted(keep):
        names, summary, coll = summaries[ns_cid]
        assert coll.head is not None
        dump.checkpoints.append(record_of(names, summary, coll.head, by_sk))
        live = [w for w in coll.writes if not hidden(w, now)]
        for record in writes_of(live, by_sk):
            dump.writes.append((names.ns, names.checkpoint_id, record))
    for ident in headless:  # writes that arrived before (or without) their checkpoint
        for write in colls[ident].writes:
            if not hidden(write, now):
                names = names_of(write, keys.parse_sk(s(write, SK)))
                for record in write_records_of(write, by_sk):
                    dump.writes.append((names.ns, names.checkpoint_id, record))
    for sk, item in by_sk.items():
        parsed = keys.parse_sk(sk)
        if parsed.kind == "b" and not hidden(item, now) and has_payload(item):
            names = names_of(item, parsed)
            value = codec.unpack_typed(read_payload(item, by_sk))
            dump.blobs.append((names.ns, BlobRecord(names.channel, names.version, value)))
    return dump


def import_thread(
    t: CheckpointTable, thread_id: str, dump: ThreadDump, fence: int | None = None
) -> Op[None]:
    now = t.clock()
    body: list[dict[str, Any]] = []
    for ns, blob in dump.blobs:
        enc = t.blob(thread_id, ns, blob, now)
        body += [*enc.chunks, enc.item]
    for ns, cid, write in dump.writes:
        enc = t.write(thread_id, ns, cid, write, now)
        body += [*enc.chunks, enc.item]
    heads: list[dict[str, Any]] = []
    for record in dump.checkpoints:
        enc = t.head(record.renamed(thread_id), now)
        body += enc.chunks
        heads.append(enc.item)
    guard = fence_guard(t, thread_id, fence)
    if guard is None:
        yield from batch_write(t.table, [{"PutRequest": {"Item": item}} for item in body])
        yield from batch_write(t.table, [{"PutRequest": {"Item": item}} for item in heads])
        return
    chunks = [item for item in body if keys.parse_sk(s(item, SK)).kind == "k"]
    rest = [item for item in body if keys.parse_sk(s(item, SK)).kind != "k"] + heads
    yield from batch_write(t.table, [{"PutRequest": {"Item": item}} for item in chunks])
    puts = [{"Put": {"TableName": t.table, "Item": item}} for item in rest]
    yield from transact_parts(puts, range(len(puts)), [size_of(i) for i in rest], guard)


def list_threads(t: CheckpointTable, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]:
    items = yield from query_all(t.scan(projection=[RAW]))
    threads = set()
    for item in items:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind == "c":
            threads.add(names_of(item, parsed).thread)
    return sorted(threads), None
