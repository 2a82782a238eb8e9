"""What deletions read and remove: a thread, the records a prune drops, the checkpoints of runs.

``delete_thread`` reads the thread's keys (one paged Query) and deletes heads first (a reader
never sees a head that lost its writes or values; a held lease stays). ``inventory`` /
``delete_records`` serve prune. ``find_runs`` (``delete_for_runs``) Queries the sparse
``run_id`` GSI per run id (eventually consistent: a checkpoint written milliseconds ago may be
missed); without the index one filtered Scan. See docs/architecture.md.
"""

from __future__ import annotations

import logging
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import names_of, summary_of
from graphkeep.backends.dynamodb.items import HEAD, PK, RAW, RUN, RUN_INDEX, SK, S, key, s
from graphkeep.backends.dynamodb.requests import batch_write, error_code, groups, query_all
from graphkeep.backends.dynamodb.ttl import ExpiringTable
from graphkeep.checkpoint.records import Inventory, Summary
from graphkeep.port import Op

try:
    from botocore.exceptions import ClientError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the DynamoDB backend needs boto3: pip install 'graphkeep[dynamodb]'"
    ) from exc

log = logging.getLogger("graphkeep.dynamodb")


def delete_thread(t: ExpiringTable, thread_id: str) -> Op[None]:
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(t.query(pk, projection=[]))
    # heads first: a concurrent reader never sees a head that lost its writes or values;
    # a held lease stays (it belongs to a run, not to the data)
    sks = sorted((s(i, SK) for i in items if s(i, SK) != keys.LOCK_SK), key=_delete_order)
    yield from batch_write(t.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in sks])
    t.known.forget_thread(pk)
    t.manifests.forget_thread(pk)


def inventory(t: ExpiringTable, thread_id: str) -> Op[Inventory]:
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(t.query(pk, projection=[HEAD, RAW]))
    checkpoints: list[Summary] = []
    write_keys: set[tuple[str, str]] = set()
    blob_keys: set[tuple[str, str, str]] = set()
    for item in items:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind == "c" and HEAD in item:
            names = names_of(item, parsed)
            checkpoints.append(summary_of(names.ns, names.checkpoint_id, item))
        elif parsed.kind == "w":
            names = names_of(item, parsed)
            write_keys.add((names.ns, names.checkpoint_id))
        elif parsed.kind == "b":
            names = names_of(item, parsed)
            blob_keys.add((names.ns, names.channel, names.version))
    return Inventory(checkpoints, write_keys, blob_keys)


def delete_records(
    t: ExpiringTable,
    thread_id: str,
    checkpoints: list[tuple[str, str]],
    blobs: list[tuple[str, str, str]],
) -> Op[None]:
    pk, _ = t.thread_key(thread_id)
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
    yield from batch_write(t.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in ordered])


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
