"""``saver.lock`` on DynamoDB: a per-thread lease, conditional writes on one item (``l#``).

The lease item lives in the thread's partition (holder token ``tok``, expiry ``until`` in
epoch ms, ``exp`` an hour later so DynamoDB removes stale leases eventually): taking it is a
PutItem conditioned on "free, expired or already ours", releasing and extending are
conditioned on the token still holding it. See docs/architecture.md.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import CheckpointTable
from graphkeep.backends.dynamodb.items import EXP, LOCK_TOKEN, LOCK_UNTIL, PK, SK, N, S, key
from graphkeep.backends.dynamodb.requests import Call, error_code
from graphkeep.port import Op


def acquire_lock(t: CheckpointTable, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
    now_ms = int(t.clock() * 1000)
    pk, _ = t.thread_key(thread_id)
    until = now_ms + ttl_ms
    item = {
        PK: S(pk),
        SK: S(keys.LOCK_SK),
        LOCK_TOKEN: S(token),
        LOCK_UNTIL: N(until),
        EXP: N(until // 1000 + 3600),  # DynamoDB removes stale leases eventually
    }
    try:
        yield Call(
            "put_item",
            {
                "TableName": t.table,
                "Item": item,
                # free, expired, or already ours (a retry after a lost reply)
                "ConditionExpression": ("attribute_not_exists(#sk) OR #u < :now OR #t = :token"),
                "ExpressionAttributeNames": {"#sk": SK, "#u": LOCK_UNTIL, "#t": LOCK_TOKEN},
                "ExpressionAttributeValues": {":now": N(now_ms), ":token": S(token)},
            },
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True


def release_lock(t: CheckpointTable, thread_id: str, token: str) -> Op[bool]:
    pk, _ = t.thread_key(thread_id)
    try:
        yield Call(
            "delete_item",
            {
                "TableName": t.table,
                "Key": key(pk, keys.LOCK_SK),
                "ConditionExpression": "#t = :t AND #u >= :now",
                "ExpressionAttributeNames": {"#t": LOCK_TOKEN, "#u": LOCK_UNTIL},
                "ExpressionAttributeValues": {
                    ":t": S(token),
                    ":now": N(int(t.clock() * 1000)),
                },
            },
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True


def extend_lock(t: CheckpointTable, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
    now_ms = int(t.clock() * 1000)
    pk, _ = t.thread_key(thread_id)
    until = now_ms + ttl_ms
    try:
        yield Call(
            "update_item",
            {
                "TableName": t.table,
                "Key": key(pk, keys.LOCK_SK),
                "UpdateExpression": "SET #u = :until, #e = :e",
                "ConditionExpression": "#t = :t AND #u >= :now",
                "ExpressionAttributeNames": {"#t": LOCK_TOKEN, "#u": LOCK_UNTIL, "#e": EXP},
                "ExpressionAttributeValues": {
                    ":t": S(token),
                    ":now": N(now_ms),
                    ":until": N(until),
                    ":e": N(until // 1000 + 3600),
                },
            },
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True
