"""The checkpoint port's writes: ``put_checkpoint`` and ``put_writes``.

Unfenced writes use no transaction: the order of plain writes protects readers. A reader
reaches a channel value only through a head that names it, and a chunk only through the
owner item that names it, so ``put_checkpoint`` writes the new values and every chunk first
(BatchWriteItem, 25 items a request, ``UnprocessedItems`` re-sent), then the TTL refreshes
the new checkpoint needs, then the head (PutItem): 2 requests when there are values (1
BatchWriteItem per 25 items beyond), 1 PutItem for the head alone, each item billed 1 WCU
per KB instead of a transaction's 2. A process stopped between the values and the head
leaves values no head names (``orphan_values`` in ``graphkeep check``, which ``--repair``
deletes; chunks no owner names are not listed, DynamoDB's TTL or ``delete_thread`` removes
them, and the thread's next put rewrites the same keys), never a head without its values
(tests/test_dynamodb.py, a kill -9 between the two for every put shape). The head also carries
a copy of the put's small values (``iv``: :func:`.encoding.attach_inline`), which the read of
that checkpoint takes instead of a BatchGetItem; the copy travels in the head, so it needs no
ordering of its own. TTL refreshes stay
conditional updates (``attribute_exists``: never resurrect a deleted item as a stub), which
BatchWriteItem cannot send: one UpdateItem, or one TransactWriteItems per 100 when several
are due (at most once per slack period per item, so rarely).

Overwrites: chunk keys carry their bytes' digest, so a payload written again with other
bytes leaves the old chunk items unless the write deletes them, after the item naming the new
ones is stored. The head's PutItem is conditioned on ``attribute_not_exists`` (free): a
checkpoint put again with its id fails it, is written again unconditioned, and then the old
head's chunks and those of the values of this put that other bytes left (one Query of chunk
keys per value) are deleted (:func:`_drop_replaced`). A reader that read the old head just
before reads again (:func:`graphkeep.port.torn.reread`).

``put_writes``: special writes (idx < 0) replace, each its own item: a PutItem (several at
once), conditioned (free) on the stored item having no chunks of other bytes; over one that
has, written again unconditioned, then those chunks deleted. A task's regular writes insert
once (LangGraph's contract: a second ``put_writes`` of the same task keeps the first), and
all or none of them must be seen (LangGraph skips a task whose writes it finds, so half of
them would lose the other half): they are **one item**, the task's write group, keyed as its
lowest ``idx``, the other writes' records in its payload and their ``idx`` in ``wg``
(:func:`.encoding.write_records_of` reads them back), written with one PutItem conditioned
on ``attribute_not_exists(sk)``. A conditional PutItem costs what a plain one does (1 WCU
per KB); a failed condition means "already stored" and bills 1 WCU for the check. So a
task's writes are 1 request and never a transaction, whatever their number (chunks of a
group over 400 KB go first with BatchWriteItem, content-addressed; when the group turns out
to be stored already with another digest, they are deleted again). Readers keep one record
per (task, idx): a write both in a group and in an item of its own (two calls of one task
whose first regular idx differ, which LangGraph does not make) reads as the one whose item
sorts first.

Fenced (``fence``, a lease's fencing token: :func:`.locks.fence_guard`): every write stays
a transaction carrying a ``ConditionCheck`` on the lease item and fails with
:class:`~graphkeep.errors.LeaseLost` once a newer token was granted; that costs the
transactional price (twice each item's write units, plus the check), on fenced writes only.
A put of the head alone is then a transaction of two actions instead of a PutItem, a
task's writes the group and the check. Over the transaction limits (100 items / 4 MB), chunk
items still go first with BatchWriteItem (their keys name their bytes' digest, so a late one
rewrites the same bytes and is only ever read through an owner that names it), and the
owner items, TTL refreshes and the head follow in as few fenced transactions as hold them,
the head in the last. A refused write leaves nothing a reader sees: chunks no stored owner
names, and, only when the owners took several transactions, values no checkpoint names
(``orphan_values``). They are not deleted on refusal: the lease's new holder may have
written the same keys since. ``put_writes`` of several tasks (an import) over one
transaction is several, each fenced: a refusal in a later one leaves the earlier ones'
tasks stored, written before the newer grant.

Elsewhere on DynamoDB a transaction stays where a write needs a condition on several items
or an atomic update: the store's put/delete batches (``created`` through ``if_not_exists``,
"no chunks of another digest", the namespace list's entries: :mod:`graphkeep.backends.dynamodb`),
an event log append (the run's sequence allocated by a conditional update of its meta item in
the same write: :mod:`.events`), TTL re-arms (conditional updates) and fenced writes.
Unfenced deletes are BatchWriteItem (:mod:`.deletes`), the node cache BatchWriteItem
(:mod:`.cache`). See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import attach_inline
from graphkeep.backends.dynamodb.items import (
    DIGEST,
    EXP,
    NCHUNKS,
    SK,
    Encoded,
    key,
    n,
    owner_chunks,
    s,
    size_of,
)
from graphkeep.backends.dynamodb.locks import fence_guard
from graphkeep.backends.dynamodb.requests import (
    TRANSACT_MAX_BYTES,
    TRANSACT_MAX_ITEMS,
    Guard,
    batch_write,
    delete_items,
    query_all,
    transact,
    transact_parts,
)
from graphkeep.backends.dynamodb.ttl import (
    ExpiringTable,
    KnownCheckpoint,
    KnownItem,
    Refresh,
)
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL
from graphkeep.checkpoint.records import BlobRecord, CheckpointRecord, Summary, WriteRecord
from graphkeep.port import Op, Parallel

#: what a TTL refresh (UpdateItem of ``exp``) counts for a transaction's size
REFRESH_BYTES = 200


def put_checkpoint(
    t: ExpiringTable, record: CheckpointRecord, blobs: list[BlobRecord], fence: int | None = None
) -> Op[None]:
    guard = fence_guard(t, record.thread_id, fence)
    now = t.clock()
    pk, _ = t.thread_key(record.thread_id)
    bodies = [t.blob(record.thread_id, record.ns, blob, now) for blob in blobs]
    head = t.head(record, now)
    attach_inline(head.item, blobs)
    refresh: list[Refresh] = []
    if t.ttl:
        refresh = yield from t.due_for_put(pk, record, blobs, now)
        written = {s(e.item, SK) for e in bodies} | {s(head.item, SK)}
        refresh = [r for r in refresh if r.sk not in written]
    body_items = [c for e in bodies for c in e.chunks] + [e.item for e in bodies]
    old = yield from _write_then_head(
        t, pk, body_items + head.chunks, head.item, refresh, now, guard
    )
    if old is not None:  # put again: what the head and the values it rewrote left behind
        yield from _drop_replaced(t, pk, old, head, bodies, guard)
    if not t.ttl:  # stored: its reads here need not fetch the new list elements
        for enc, blob in zip(bodies, blobs, strict=True):
            if blob.channel == ELEMENT_CHANNEL:
                t.element_cache.put(pk, s(enc.item, SK), blob.value)
    if t.ttl:
        exp = t.exp(now)
        for enc, blob in zip(bodies, blobs, strict=True):
            sk = s(enc.item, SK)
            t.known.set_blob(pk, sk, KnownItem(exp, enc.chunk_sks))
            if blob.channel != ELEMENT_CHANNEL:
                t.manifests.set(pk, sk, blob.value)
        summary = Summary(
            record.ns,
            record.checkpoint_id,
            record.parent_id,
            record.versions,
            record.present,
            record.needs_history,
            record.run_id,
        )
        t.known.set_checkpoint(
            pk, record.ns, KnownCheckpoint(summary, {s(head.item, SK): KnownItem(exp)})
        )


def _write_then_head(
    t: ExpiringTable,
    pk: str,
    body: list[dict[str, Any]],
    head: dict[str, Any],
    refresh: list[Refresh],
    now: float,
    guard: Guard | None = None,
) -> Op[dict[str, Any] | None]:
    """Write ``body``, the refreshes and the head last; the head a new one only (a checkpoint
    put again with its id fails that condition, free, and is written again over the old
    one, which is returned: :func:`_drop_replaced`)."""
    puts = [{"Put": {"TableName": t.table, "Item": item}} for item in body]
    updates, update_owners = t.refresh_actions(pk, refresh, now, first_owner=len(puts))
    first = {
        "TableName": t.table,
        "Item": head,
        "ConditionExpression": "attribute_not_exists(#sk)",
        "ExpressionAttributeNames": {"#sk": SK},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    head_owner = len(puts) + len(refresh)
    actions = [*puts, *updates, {"Put": first}]
    owners = [*range(len(puts)), *update_owners, head_owner]
    sizes = [*map(size_of, body), *[REFRESH_BYTES] * len(updates), size_of(head)]
    if guard is None:
        # Unfenced: no transaction. The values and every chunk first (BatchWriteItem), the
        # TTL refreshes next, the head last (PutItem): a reader only reaches values through
        # a head that names them, so it never finds the head without them; a process
        # stopped in between leaves values no head names (``graphkeep check --repair``)
        # that a retry rewrites under the same keys.
        yield from batch_write(t.table, [{"PutRequest": {"Item": item}} for item in body])
        failed = yield from transact_parts(updates, update_owners, [REFRESH_BYTES] * len(updates))
        failed.update((yield from transact([{"Put": first}], [head_owner])))
    elif len(actions) < TRANSACT_MAX_ITEMS and sum(sizes) <= TRANSACT_MAX_BYTES:
        failed = yield from transact(actions, owners, guard)
    else:
        # Fenced, too big for one transaction: the chunks first (content-addressed, see the
        # module docstring), then everything else in fenced transactions, the head last
        chunked = [i for i, item in enumerate(body) if keys.parse_sk(s(item, SK)).kind == "k"]
        yield from batch_write(t.table, [{"PutRequest": {"Item": body[i]}} for i in chunked])
        rest = sorted(set(range(len(actions))) - set(chunked))
        failed = yield from transact_parts(
            [actions[i] for i in rest], [owners[i] for i in rest], [sizes[i] for i in rest], guard
        )
    t.refreshed(refresh, failed, len(puts), now)
    if head_owner not in failed:
        return None
    old: dict[str, Any] = failed[head_owner] or {}
    yield from transact([{"Put": {"TableName": t.table, "Item": head}}], [0], guard)
    return old


def put_writes(
    t: ExpiringTable,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    writes: list[WriteRecord],
    fence: int | None = None,
) -> Op[None]:
    guard = fence_guard(t, thread_id, fence)
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    latest: dict[tuple[str, int], WriteRecord] = {}
    for write in writes:  # one record per (task, idx): the last special write wins
        latest[(write.task_id, write.idx)] = write
    # special writes replace: an item each; a task's regular writes insert once: one item
    # for all of them (its group, keyed as the lowest idx), written only if absent
    plain = [t.write(thread_id, ns, checkpoint_id, w, now) for w in latest.values() if w.special]
    tasks: dict[str, list[WriteRecord]] = {}
    for write in sorted(latest.values(), key=lambda w: w.idx):
        if not write.special:
            tasks.setdefault(write.task_id, []).append(write)
    once = [t.write(thread_id, ns, checkpoint_id, g[0], now, g[1:]) for g in tasks.values()]
    actions: list[dict[str, Any]] = []
    owners: list[int] = []
    sizes: list[int] = []
    ahead: dict[int, Encoded] = {}  # groups whose chunks go first, with BatchWriteItem
    for group, enc in enumerate([*plain, *once]):
        put: dict[str, Any] = {"TableName": t.table, "Item": enc.item}
        if group >= len(plain):
            put["ConditionExpression"] = "attribute_not_exists(#sk)"
            put["ExpressionAttributeNames"] = {"#sk": SK}
            put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        else:  # replaces; fails (free) only over an item with chunks of other bytes
            put.update(_same_chunks(enc))
        chunk_bytes = sum(size_of(c) for c in enc.chunks)
        if enc.chunks and (guard is None or chunk_bytes > TRANSACT_MAX_BYTES // 2):
            ahead[group] = enc
        else:
            actions += [{"Put": {"TableName": t.table, "Item": c}} for c in enc.chunks]
            owners += [group] * len(enc.chunks)
            sizes += [size_of(c) for c in enc.chunks]
        actions.append({"Put": put})
        owners.append(group)
        sizes.append(size_of(enc.item))
    if ahead:  # chunks are read only through an owner item that names them
        yield from batch_write(
            t.table, [{"PutRequest": {"Item": c}} for enc in ahead.values() for c in enc.chunks]
        )
    failed: dict[int, Any] = {}
    if guard is None:
        # Unfenced: no transaction. Each replacing write a PutItem (at once when several),
        # then each task's group as one conditional PutItem (insert once, all of the task's
        # writes or none)
        if plain:
            answers = yield Parallel(
                tuple(transact([_own_put(actions, owners, g)], [g]) for g in range(len(plain)))
            )
            for answer in answers:
                failed.update(answer)
        for group in range(len(plain), len(plain) + len(once)):
            failed.update((yield from transact([_own_put(actions, owners, group)], [group])))
    else:
        # fenced: each transaction checks the lease (a refusal in a later one leaves the
        # earlier ones' writes stored: see the module docstring)
        failed = yield from transact_parts(actions, owners, sizes, guard)
    for group in [g for g in failed if g < len(plain)]:  # over chunks of other bytes
        # written again without the condition (with its chunks when they went with it),
        # then the old chunks deleted: never before the item naming the new ones is stored
        old, enc = failed.pop(group) or {}, plain[group]
        items = [*([] if group in ahead else enc.chunks), enc.item]
        again = [{"Put": {"TableName": t.table, "Item": item}} for item in items]
        yield from transact_parts(again, [0] * len(again), [size_of(i) for i in items], guard)
        stale = sorted(set(owner_chunks(old)) - set(enc.chunk_sks))
        yield from delete_items(t.table, pk, stale, guard)
    everything = [*plain, *once]
    stale = [
        sk
        for group, old in failed.items()
        if group in ahead and (old is None or old.get(DIGEST) != ahead[group].item[DIGEST])
        for sk in ahead[group].chunk_sks
    ]
    if stale:  # our chunks of a regular write that was already stored differently
        yield from batch_write(t.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in stale])
    if t.ttl:
        exp = t.exp(now)
        known: dict[str, KnownItem] = {}
        for group, enc in enumerate(everything):
            if group in failed:
                old = failed[group]
                info = KnownItem(n(old, EXP), owner_chunks(old)) if old else KnownItem(0)
            else:
                info = KnownItem(exp, enc.chunk_sks)
            known[s(enc.item, SK)] = info
        t.known.add_writes(pk, ns, checkpoint_id, known)


def _same_chunks(enc: Encoded) -> dict[str, Any]:
    """The condition of a replacing put that the stored item has no chunk items of other
    bytes than ``enc``'s (its old item returned when it has)."""
    names = {"#nk": NCHUNKS}
    condition = "attribute_not_exists(#nk)"
    values: dict[str, Any] = {}
    if enc.chunks:
        names["#dg"] = DIGEST
        values[":dg"] = enc.item[DIGEST]
        condition += " OR #dg = :dg"
    clause: dict[str, Any] = {
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if values:
        clause["ExpressionAttributeValues"] = values
    return clause


def _drop_replaced(
    t: ExpiringTable,
    pk: str,
    old: dict[str, Any],
    head: Encoded,
    bodies: list[Encoded],
    guard: Guard | None,
) -> Op[None]:
    """After a checkpoint put again with its id (the new head stored): delete the chunk items
    of the old head, and of the values written again, that are not the new bytes' (chunk
    keys name their bytes' digest, so different bytes left the old ones behind). The old
    head names its chunks; a value's are found with one Query of its chunk keys, for the
    values of this put only (so a usual put, a new head, costs nothing here). A reader that
    read the old head or value just before retries (:func:`graphkeep.port.torn.reread`)."""
    stale = set(owner_chunks(old)) - set(head.chunk_sks)
    queries = [
        query_all(t.query(pk, begins=f"k{keys.SEP}{s(enc.item, SK)}{keys.SEP}", projection=[SK]))
        for enc in bodies
    ]
    found = (yield Parallel(tuple(queries))) if queries else []
    for enc, items in zip(bodies, found, strict=True):
        stale |= {s(item, SK) for item in items} - set(enc.chunk_sks)
    yield from delete_items(t.table, pk, sorted(stale), guard)


def _own_put(actions: list[dict[str, Any]], owners: list[int], group: int) -> dict[str, Any]:
    """The owner item's Put of ``group`` (the last of its actions: its chunks come first)."""
    return actions[len(owners) - 1 - owners[::-1].index(group)]
