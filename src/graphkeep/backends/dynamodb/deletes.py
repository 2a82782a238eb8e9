"""What deletions read and remove: a thread, the records a prune drops, the checkpoints of runs.

``delete_thread`` reads the thread's keys (one paged Query) and deletes heads first (a reader
never sees a head that lost its writes or values; a held lease stays). ``inventory`` /
``delete_records`` serve prune. ``find_runs`` (``delete_for_runs``) Queries the sparse
``run_id`` GSI per run id (eventually consistent: a checkpoint written milliseconds ago may be
missed); without the index one filtered Scan.

Fenced (``fence``: :func:`.locks.fence_guard`), the deletes of ``delete_thread`` and
``delete_records`` go in TransactWriteItems of 99 DeleteItems and the lease's
``ConditionCheck`` (BatchWriteItem takes no condition; a transaction costs twice the write
units) and stop with :class:`~graphkeep.errors.LeaseLost` at the first one refused. More
than 99 items take several transactions: the earlier ones stay applied, made before the
newer grant, heads first as always (the thread reads as a delete cut short would leave it).
See docs/architecture.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import names_of, summary_of
from graphkeep.backends.dynamodb.items import (
    DIGEST,
    EXP,
    HEAD,
    PK,
    RAW,
    RUN,
    RUN_INDEX,
    SK,
    SOURCE,
    VIS,
    N,
    S,
    key,
    n,
    s,
)
from graphkeep.backends.dynamodb.locks import fence_guard
from graphkeep.backends.dynamodb.requests import (
    TRANSACT_MAX_ITEMS,
    delete_items,
    error_code,
    groups,
    query_all,
    transact,
)
from graphkeep.backends.dynamodb.ttl import ExpiringTable
from graphkeep.checkpoint.records import (
    HOLDS_CHECKPOINT,
    HOLDS_VALUE,
    HOLDS_WRITES,
    Expiring,
    Inventory,
    Summary,
)
from graphkeep.port import Op

log = logging.getLogger("graphkeep.dynamodb")


def delete_thread(t: ExpiringTable, thread_id: str, fence: int | None = None) -> Op[None]:
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(t.query(pk, projection=[]))
    # heads first: a concurrent reader never sees a head that lost its writes or values;
    # a held lease stays (it belongs to a run, not to the data), and the settled mark
    kept = (keys.LOCK_SK, keys.SETTLED_SK)
    sks = sorted((s(i, SK) for i in items if s(i, SK) not in kept), key=_delete_order)
    yield from _delete(t, thread_id, pk, sks, fence)
    t.known.forget_thread(pk)
    t.manifests.forget_thread(pk)
    t.element_cache.forget_thread(pk)


def inventory(t: ExpiringTable, thread_id: str) -> Op[Inventory]:
    pk, _ = t.thread_key(thread_id)
    # ``exp`` and ``vis`` ride along: each item's expiry, for the check; ``so``: the
    # metadata's source, for the check's fork rule; ``dg``: the digest an owner's chunks
    # carry, for chunks of other bytes (stray, as :func:`drop_chunks` finds them)
    items = yield from query_all(t.query(pk, projection=[HEAD, RAW, EXP, VIS, SOURCE, DIGEST]))
    checkpoints: list[Summary] = []
    write_keys: set[tuple[str, str]] = set()
    blob_keys: set[tuple[str, str, str]] = set()
    expiries: list[Expiring] = []
    owners: dict[str, Expiring] = {}
    chunks: list[tuple[str, str, float | None]] = []
    for item in items:
        sk = s(item, SK)
        parsed = keys.parse_sk(sk)
        # reads stop seeing a head at ``vis``, any other item at ``exp``
        at: float | None = n(item, VIS) if VIS in item else n(item, EXP)
        unit: Expiring | None = None
        if parsed.kind == "c" and HEAD in item:
            names = names_of(item, parsed)
            checkpoints.append(summary_of(names.ns, names.checkpoint_id, item))
            unit = Expiring(sk, at, HOLDS_CHECKPOINT, names.ns, names.checkpoint_id)
        elif parsed.kind == "w":
            names = names_of(item, parsed)
            write_keys.add((names.ns, names.checkpoint_id))
            unit = Expiring(sk, at, HOLDS_WRITES, names.ns, names.checkpoint_id)
        elif parsed.kind == "b":
            names = names_of(item, parsed)
            blob_keys.add((names.ns, names.channel, names.version))
            unit = Expiring(
                sk, at, HOLDS_VALUE, names.ns, channel=names.channel, version=names.version
            )
        elif parsed.kind == "k":
            chunks.append((sk, parsed.owner or "", at))
        if unit is not None:
            expiries.append(unit)
            owners[sk] = unit
    for sk, owner_sk, chunk_at in chunks:  # a chunk item expires with its record
        owner = owners.get(owner_sk)
        if owner is not None:
            expiries.append(replace(owner, ref=sk, at=chunk_at))
    return Inventory(checkpoints, write_keys, blob_keys, expiries, stale_chunks(items))


def rearm(t: ExpiringTable, thread_id: str, refs: list[Any], at: float | None) -> Op[None]:
    """Set ``exp`` (and a head's ``vis``) of the items ``refs`` to ``at``, or remove both:
    TransactWriteItems of up to 100 conditional updates (an item that is gone stays gone)."""
    pk, _ = t.thread_key(thread_id)
    actions: list[dict[str, Any]] = []
    for sk in sorted(refs):
        head = keys.parse_sk(sk).kind == "c"
        names = {"#sk": SK, "#e": EXP, **({"#v": VIS} if head else {})}
        update: dict[str, Any] = {
            "TableName": t.table,
            "Key": key(pk, sk),
            "ConditionExpression": "attribute_exists(#sk)",
            "ExpressionAttributeNames": names,
        }
        if at is None:
            update["UpdateExpression"] = "REMOVE #e" + (", #v" if head else "")
        else:
            update["UpdateExpression"] = "SET #e = :e" + (", #v = :e" if head else "")
            update["ExpressionAttributeValues"] = {":e": N(math.ceil(at))}
        actions.append({"Update": update})
    for start in range(0, len(actions), TRANSACT_MAX_ITEMS):
        batch = actions[start : start + TRANSACT_MAX_ITEMS]
        yield from transact(batch, list(range(len(batch))))
    t.known.forget_thread(pk)


def delete_records(
    t: ExpiringTable,
    thread_id: str,
    checkpoints: list[tuple[str, str]],
    blobs: list[tuple[str, str, str]],
    fence: int | None = None,
) -> Op[None]:
    pk, _ = t.thread_key(thread_id)
    t.element_cache.forget_thread(pk)
    doomed = set(checkpoints)
    garbage = set(blobs)
    items = yield from query_all(t.query(pk, projection=[RAW]))
    delete: set[str] = set()
    chunks: list[tuple[str, str]] = []
    for item in items:
        sk = s(item, SK)
        parsed = keys.parse_sk(sk)
        if parsed.kind in ("c", "w"):
            names = names_of(item, parsed)
            if (names.ns, names.checkpoint_id) in doomed:
                delete.add(sk)
        elif parsed.kind == "b":
            names = names_of(item, parsed)
            if (names.ns, names.channel, names.version) in garbage:
                delete.add(sk)
        elif parsed.kind == "k":
            chunks.append((sk, parsed.owner))
    # chunks of deleted owners go too (chunks of live items are left alone: a put in
    # flight writes its chunks before their owner)
    delete.update(sk for sk, owner in chunks if owner in delete)
    ordered = sorted(delete, key=_delete_order)
    yield from _delete(t, thread_id, pk, ordered, fence)


def chunk_refs(t: ExpiringTable, thread_id: str) -> Op[frozenset[str]]:
    """The sort keys of the thread's chunk items (one Query of its ``k#`` range)."""
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(t.query(pk, begins=f"k{keys.SEP}", projection=[RAW]))
    return frozenset(s(item, SK) for item in items)


def drop_chunks(
    t: ExpiringTable, thread_id: str, refs: frozenset[str], fence: int | None = None
) -> Op[None]:
    """Delete the chunk items ``refs`` whose owner item now names another digest (its payload
    was rewritten in place: chunk keys are content-addressed). A chunk not in ``refs`` — a put
    in flight writes its chunks before their owner — and the chunks of an owner that is gone
    (``delete_records``' business) are left alone."""
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(t.query(pk, projection=[DIGEST]))
    yield from _delete(t, thread_id, pk, sorted(refs & stale_chunks(items)), fence)


def stale_chunks(items: list[dict[str, Any]]) -> frozenset[str]:
    """The chunk items among a partition's ``items`` (read with ``dg``) whose owner item is
    stored and names another digest: an overwrite left them (content-addressed keys), and
    no read ever reaches them. Chunks of an owner not stored are not among them (a put in
    flight writes its chunks first; a deleted owner's are ``delete_records``' business)."""
    named = {
        s(item, SK): (s(item, DIGEST) if DIGEST in item else None)
        for item in items
        if keys.parse_sk(s(item, SK)).kind != "k"
    }
    stale = set()
    for item in items:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind == "k" and parsed.owner in named and named[parsed.owner] != parsed.digest:
            stale.add(s(item, SK))
    return frozenset(stale)


def _delete(
    t: ExpiringTable, thread_id: str, pk: str, sks: list[str], fence: int | None
) -> Op[None]:
    """Delete ``sks`` in their order: BatchWriteItem, or fenced transactions under ``fence``."""
    yield from delete_items(t.table, pk, sks, fence_guard(t, thread_id, fence))


def find_runs(t: ExpiringTable, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]:
    rows: list[dict[str, Any]] = []
    try:
        for run_id in dict.fromkeys(run_ids):
            rows += yield from query_all(
                {
                    "TableName": t.table,
                    "IndexName": RUN_INDEX,
                    "KeyConditionExpression": "#rk = :r",
                    "ExpressionAttributeNames": {"#rk": RUN},
                    "ExpressionAttributeValues": {":r": S(t.run_key(run_id))},
                }
            )
    except ClientError as exc:
        message = str(exc.response.get("Error", {}).get("Message", "")).lower()
        if error_code(exc) not in ("ValidationException", "ResourceNotFoundException") or (
            "index" not in message
        ):
            raise
        log.warning(
            "table %s has no %r index: delete_for_runs scans the table (create the table"
            " with setup() or add the index from table_definition())",
            t.table,
            RUN_INDEX,
        )
        rows = []
        for group in groups(list(dict.fromkeys(run_ids)), 100):
            values = {f":r{i}": S(t.run_key(r)) for i, r in enumerate(group)}
            rows += yield from query_all(
                {
                    "_op": "scan",
                    "TableName": t.table,
                    "FilterExpression": f"#rk IN ({', '.join(values)})",
                    "ProjectionExpression": "#pk, #sk, #rw",
                    "ExpressionAttributeNames": {"#rk": RUN, "#pk": PK, "#sk": SK, "#rw": RAW},
                    "ExpressionAttributeValues": values,
                }
            )
    found: dict[str, list[tuple[str, str]]] = {}
    for item in rows:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind != "c":
            continue
        names = names_of(item, parsed)
        entry = (names.ns, names.checkpoint_id)
        listed = found.setdefault(names.thread, [])
        if entry not in listed:
            listed.append(entry)
    return found


def _delete_order(sk: str) -> tuple[int, str]:
    parsed = keys.parse_sk(sk)
    return ({"c": 0, "w": 1, "b": 2, "k": 3}.get(parsed.kind, 4), sk)
