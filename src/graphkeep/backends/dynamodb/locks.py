"""``saver.lock`` on DynamoDB: a per-thread fenced lease, conditional writes on one item (``l#``).

The lease item lives in the thread's partition: holder token ``tok``, expiry ``until`` in
epoch ms, and the thread's fencing token ``fence`` (the last grant's; ``exp``, DynamoDB's TTL
attribute, :data:`FENCE_KEEP_S` after the lease's end). Requests:

- taking it (:func:`acquire_lock`) is one UpdateItem that sets holder, expiry and a new
  fencing token ``max(stored + 1, now_ms)``, conditioned on "free or expired" and "the stored
  token below the new one"; a failed condition returns the item as it was
  (``ReturnValuesOnConditionCheckFailure``), which tells "held by another" (answer 0) from
  "our own lease" (re-armed by a second UpdateItem, answering its token unchanged, as Redis
  does: a retry after a lost reply, or ``acquire`` again) and from "the stored token is not
  below ours" (another clock ahead, or two grants in one millisecond: sent again above it);
- releasing removes ``tok`` and ``until`` (UpdateItem) but keeps ``fence``: the item is what
  fenced writes check, so it must outlive the lease. Deleting it would let a holder that
  stalled past its ``ttl`` write again once its successor released (no newer token left to
  refuse it), whatever the next grant's token. ``exp`` drops it 30 days after the last lease
  ended (a write stalled that long is not fenced any more; the ``now_ms`` floor still keeps
  later tokens above forgotten ones, clocks allowing);
- extending is conditioned on the token still holding it;
- a fenced write (:func:`fence_guard`) carries a ``ConditionCheck`` on the item,
  ``attribute_not_exists(fence) OR fence <= :holder``, in each of its transactions (the
  saver's, and the effect ledger's ``claim`` / ``take_over`` under the saver's
  ``key_prefix``: :mod:`.effects`); a refusal whose reply lacks the item reads the newer
  token with :func:`granted_fence`. So the
  lease item now takes part in transactions: DynamoDB refuses a single-item write to an item
  of a transaction under way (``TransactionConflictException``), which the lease's requests
  re-send with backoff (:func:`_on_lease`), as :func:`.requests.transact` does for its own.

``delete_thread`` leaves the item (a lease and its fencing token belong to runs, not to the
thread's data). See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any, Protocol

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import CheckpointTable
from graphkeep.backends.dynamodb.items import EXP, FENCE, LOCK_TOKEN, LOCK_UNTIL, N, S, key, n, s
from graphkeep.backends.dynamodb.requests import (
    MAX_STALLS,
    RETRYABLE_TRANSACTION_ERRORS,
    Call,
    Guard,
    backoff,
    error_code,
)
from graphkeep.errors import LeaseLost, StorageUnavailable
from graphkeep.port import Op, Sleep

#: how long the lease item (and so the thread's fencing token) outlives the lease: the
#: same 30 days as the Redis backend's fencing key
FENCE_KEEP_S = 30 * 86_400
#: attempts of a grant whose stored token was not below the candidate (each one a new grant
#: by someone else in between, which then holds the lease: more than a couple never happen)
GRANT_ATTEMPTS = 8

_NAMES = {"#t": LOCK_TOKEN, "#u": LOCK_UNTIL, "#e": EXP, "#f": FENCE}


class OnTable(Protocol):
    """What finds a thread's lease item: the table and the escaped ``key_prefix`` (a saver's
    :class:`CheckpointTable`, or a port of another product under the saver's prefix)."""

    @property
    def table(self) -> str: ...

    @property
    def prefix(self) -> str: ...


def lease_key(t: OnTable, thread_id: str) -> dict[str, Any]:
    """The key of ``thread_id``'s lease item: ``l#`` of the saver's thread partition."""
    return key(keys.partition(t.prefix, keys.part(thread_id, keys.THREAD_LIMIT)[0]), keys.LOCK_SK)


def acquire_lock(t: CheckpointTable, thread_id: str, token: str, ttl_ms: int) -> Op[int]:
    now_ms = int(t.clock() * 1000)
    pk, _ = t.thread_key(thread_id)
    until = now_ms + ttl_ms
    candidate = now_ms
    for _attempt in range(GRANT_ATTEMPTS):
        try:
            yield from _on_lease(
                {
                    "TableName": t.table,
                    "Key": key(pk, keys.LOCK_SK),
                    "UpdateExpression": "SET #t = :token, #u = :until, #e = :e, #f = :f",
                    # free or expired (or ours without a fencing token: taken by a version
                    # before fencing), and the new token above the stored one
                    "ConditionExpression": (
                        "(attribute_not_exists(#t) OR #u < :now"
                        " OR (#t = :token AND attribute_not_exists(#f)))"
                        " AND (attribute_not_exists(#f) OR #f < :f)"
                    ),
                    "ExpressionAttributeNames": _NAMES,
                    "ExpressionAttributeValues": {
                        ":token": S(token),
                        ":until": N(until),
                        ":e": N(until // 1000 + FENCE_KEEP_S),
                        ":f": N(candidate),
                        ":now": N(now_ms),
                    },
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                },
            )
            return candidate
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            old: dict[str, Any] = exc.response.get("Item") or {}
        if not old:  # a server that does not return the item: read as contended
            return 0
        stored = n(old, FENCE) or 0
        if LOCK_TOKEN in old and (n(old, LOCK_UNTIL) or 0) >= now_ms:
            if s(old, LOCK_TOKEN) != token:
                return 0  # held by another
            if (yield from _rearm(t, pk, token, stored, until)):
                return stored  # ours already: re-armed, its token unchanged
            continue  # it changed in between: look again
        candidate = max(candidate, stored + 1)
    raise StorageUnavailable(
        f"the lease of thread {thread_id!r} changed hands {GRANT_ATTEMPTS} times while it was"
        " being taken; retry later"
    )


def _rearm(t: CheckpointTable, pk: str, token: str, fence: int, until: int) -> Op[bool]:
    """Push out the expiry of our own lease, still holding fencing token ``fence``."""
    names = {k: _NAMES[k] for k in ("#t", "#u", "#e", "#f")}
    values = {":token": S(token), ":f": N(fence), ":until": N(until)}
    values[":e"] = N(until // 1000 + FENCE_KEEP_S)
    update = "SET #u = :until, #e = :e"
    return (yield from _if_lease(t, pk, update, "#t = :token AND #f = :f", names, values))


def release_lock(t: CheckpointTable, thread_id: str, token: str) -> Op[bool]:
    pk, _ = t.thread_key(thread_id)
    names = {"#t": LOCK_TOKEN, "#u": LOCK_UNTIL}
    values = {":t": S(token), ":now": N(int(t.clock() * 1000))}
    # the fencing token (and ``exp``) stay: see the module docstring
    return (yield from _if_lease(t, pk, "REMOVE #t, #u", "#t = :t AND #u >= :now", names, values))


def extend_lock(t: CheckpointTable, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
    now_ms = int(t.clock() * 1000)
    pk, _ = t.thread_key(thread_id)
    until = now_ms + ttl_ms
    names = {"#t": LOCK_TOKEN, "#u": LOCK_UNTIL, "#e": EXP}
    values = {":t": S(token), ":now": N(now_ms), ":until": N(until)}
    values[":e"] = N(until // 1000 + FENCE_KEEP_S)
    update = "SET #u = :until, #e = :e"
    return (yield from _if_lease(t, pk, update, "#t = :t AND #u >= :now", names, values))


def _if_lease(
    t: CheckpointTable,
    pk: str,
    update: str,
    condition: str,
    names: dict[str, str],
    values: dict[str, Any],
) -> Op[bool]:
    """The lease item of partition ``pk`` updated where ``condition`` holds (by
    :func:`_on_lease`): True when done, False when the condition failed (the lease is not
    what the caller holds)."""
    try:
        yield from _on_lease(
            {
                "TableName": t.table,
                "Key": key(pk, keys.LOCK_SK),
                "UpdateExpression": update,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _on_lease(params: dict[str, Any]) -> Op[None]:
    """UpdateItem on the lease item, re-sent with backoff while a fenced write's transaction
    holds the item (``TransactionConflictException``); any other error is the caller's."""
    attempts = 0
    while True:
        try:
            yield Call("update_item", params)
            return
        except ClientError as exc:
            attempts += 1
            if error_code(exc) not in RETRYABLE_TRANSACTION_ERRORS or attempts >= MAX_STALLS:
                raise
        yield Sleep(backoff(attempts))


def fence_guard(t: OnTable, thread_id: str, fence: int | None) -> Guard | None:
    """The check a write under fencing token ``fence`` carries in each of its transactions:
    refused (:class:`~graphkeep.errors.LeaseLost`) once a newer token was granted on the
    thread. None for an unfenced write (``fence`` None: nothing checked, nothing added).
    ``t``: the saver's table, or any port under the saver's ``key_prefix`` on that table."""
    if fence is None:
        return None
    check = {
        "ConditionCheck": {
            "TableName": t.table,
            "Key": lease_key(t, thread_id),
            # no item (never locked, or forgotten 30 days on) is no newer token
            "ConditionExpression": "attribute_not_exists(#f) OR #f <= :holder",
            "ExpressionAttributeNames": {"#f": FENCE},
            "ExpressionAttributeValues": {":holder": N(fence)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
    held = fence

    def refused(old: dict[str, Any] | None) -> Exception:
        return LeaseLost(thread_id, held, n(old, FENCE) if old else None)

    return Guard(check, refused)


def granted_fence(t: OnTable, thread_id: str) -> Op[int | None]:
    """The newest fencing token granted on ``thread_id`` (None: never locked, or forgotten):
    one strongly consistent GetItem of the lease item, for a refusal whose reply did not
    carry the item (a server without ``ReturnValuesOnConditionCheckFailure``)."""
    result = yield Call(
        "get_item",
        {
            "TableName": t.table,
            "Key": lease_key(t, thread_id),
            "ConsistentRead": True,
            "ProjectionExpression": "#f",
            "ExpressionAttributeNames": {"#f": FENCE},
        },
    )
    return n(result.get("Item") or {}, FENCE)


def is_settled(t: CheckpointTable, thread_id: str) -> Op[bool]:
    """The thread's settled mark (``s#`` in its partition; see
    :meth:`~graphkeep.checkpoint.port.CheckpointPort.is_settled`), read strongly consistent."""
    pk, _ = t.thread_key(thread_id)
    found = yield Call(
        "get_item",
        {"TableName": t.table, "Key": key(pk, keys.SETTLED_SK), "ConsistentRead": True},
    )
    return "Item" in found


def settle(t: CheckpointTable, thread_id: str) -> Op[None]:
    pk, _ = t.thread_key(thread_id)
    yield Call("put_item", {"TableName": t.table, "Item": key(pk, keys.SETTLED_SK)})
