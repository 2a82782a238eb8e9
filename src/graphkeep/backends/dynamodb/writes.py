"""The checkpoint port's writes: ``put_checkpoint`` and ``put_writes``.

Requests (measured in the tests): ``put_checkpoint`` is 1 TransactWriteItems (new blobs + their
chunks + TTL refreshes + the head, all or nothing) or a single PutItem when there is only the
head. Over the transaction limits (100 items / 4 MB, i.e. values of several MB) chunks and
blobs go first with BatchWriteItem and the head last, so readers still never see a head
without its values. ``put_writes`` is 1 TransactWriteItems per 100 items; regular writes carry
``attribute_not_exists(sk)`` and a failed condition means "already stored" (the group is
dropped and the rest re-sent), special writes (idx < 0) replace.

Fenced (``fence``, a lease's fencing token: :func:`.locks.fence_guard`): every transaction
carries a ``ConditionCheck`` on the lease item and the write fails with
:class:`~graphkeep.errors.LeaseLost` once a newer token was granted. A put of the head alone
is then a transaction of two actions (the head and the check) instead of a PutItem: the
fence costs the transactional price, twice the head's write units plus two for the check,
on fenced writes only; unfenced ones are sent exactly as before. Over the limits, chunk
items still go first with BatchWriteItem (their keys name their bytes' digest, so a late one
rewrites the same bytes and is only ever read through an owner that names it), and the
owner items, TTL refreshes and the head follow in as few fenced transactions as hold them,
the head in the last. A refused write leaves nothing a reader sees: chunks no stored owner
names (like a process killed before its head: DynamoDB's TTL or ``delete_thread`` removes
them; ``graphkeep check`` does not list chunks), and, only when the owners took several
transactions, values no checkpoint names (``orphan_values`` in ``graphkeep check``). They are
not deleted on refusal: the lease's new holder may have written the same keys since.
``put_writes`` over one transaction (100 items, 4 MB) is several, each fenced: a refusal in
a later one leaves the writes of the earlier ones stored, written before the newer grant (as
a process killed between them would), and those pending writes are seen by readers; a
task's writes (LangGraph's ``put_writes`` of one task) are rarely that many.
See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.items import (
    DIGEST,
    EXP,
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
    single,
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
from graphkeep.port import Op

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
    refresh: list[Refresh] = []
    if t.ttl:
        refresh = yield from t.due_for_put(pk, record, blobs, now)
        written = {s(e.item, SK) for e in bodies} | {s(head.item, SK)}
        refresh = [r for r in refresh if r.sk not in written]
    body_items = [c for e in bodies for c in e.chunks] + [e.item for e in bodies]
    yield from _write_then_head(t, pk, body_items + head.chunks, head.item, refresh, now, guard)
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
) -> Op[None]:
    puts = [{"Put": {"TableName": t.table, "Item": item}} for item in body]
    updates, update_owners = t.refresh_actions(pk, refresh, now, first_owner=len(puts))
    actions = [*puts, *updates, {"Put": {"TableName": t.table, "Item": head}}]
    owners = [*range(len(puts)), *update_owners, len(puts) + len(refresh)]
    sizes = [*map(size_of, body), *[REFRESH_BYTES] * len(updates), size_of(head)]
    if guard is None:
        # Unfenced: no transaction. The values and every chunk first (BatchWriteItem), the
        # TTL refreshes next, the head last (PutItem): a reader only reaches values through
        # a head that names them, so it never finds the head without them; a process
        # stopped in between leaves values no head names (``graphkeep check --repair``)
        # that a retry rewrites under the same keys.
        yield from batch_write(t.table, [{"PutRequest": {"Item": item}} for item in body])
        failed = yield from transact_parts(updates, update_owners, [REFRESH_BYTES] * len(updates))
        yield single({"Put": {"TableName": t.table, "Item": head}})
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
        # Unfenced: no transaction. Replacing writes in one batch, then each task's group
        # as one conditional PutItem (insert once, all of the task's writes or none)
        if len(plain) > 1:
            yield from batch_write(t.table, [{"PutRequest": {"Item": e.item}} for e in plain])
        elif plain:
            yield single(_own_put(actions, owners, 0))
        for group in range(len(plain), len(plain) + len(once)):
            failed.update((yield from transact([_own_put(actions, owners, group)], [group])))
    else:
        # fenced: each transaction checks the lease (a refusal in a later one leaves the
        # earlier ones' writes stored: see the module docstring)
        failed = yield from transact_parts(actions, owners, sizes, guard)
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


def _own_put(actions: list[dict[str, Any]], owners: list[int], group: int) -> dict[str, Any]:
    """The owner item's Put of ``group`` (the last of its actions: its chunks come first)."""
    return actions[len(owners) - 1 - owners[::-1].index(group)]
