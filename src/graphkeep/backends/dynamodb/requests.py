"""Sans-IO requests for DynamoDB: :class:`Call`, Query shapes and the loops around the batch,
transaction and paging APIs.

The ports yield :class:`Call` (one low-level client call, ``getattr(client, operation)(**params)``)
and the port's ``Sleep``; the executors in :mod:`.client` run them on boto3 or aiobotocore.
The loops here are pure logic, so they are unit-tested by feeding responses in:

- :func:`batch_write` / :func:`batch_get` re-send ``UnprocessedItems`` / ``UnprocessedKeys``:
  at once while the previous attempt made progress (DynamoDB also returns leftovers when a
  response would pass 16 MB), with exponential backoff and jitter when it did not (throttling),
  giving up with :class:`StorageUnavailable` after ``MAX_STALLS`` attempts without progress.
- :func:`transact` runs TransactWriteItems; actions are grouped, and a group whose condition
  fails (``ConditionalCheckFailed`` in ``CancellationReasons``) is dropped and the rest re-sent:
  for a regular write that means "already stored", which is success. Conflicts and throttling
  inside a transaction are retried with backoff. A single action goes out as PutItem/UpdateItem
  (half the write cost of a one-item transaction). A :class:`Guard` (a lease's fence) rides in
  every transaction of a write instead: its failed condition fails the whole write.
  :func:`transact_parts` splits a long ordered list of actions into as few transactions as
  the limits allow.
- :func:`query_params` shapes a consistent Query of one partition, :func:`query_page` /
  :func:`query_all` page through ``LastEvaluatedKey``, :func:`get_items` reads by key.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb.items import PK, SK, S, key, s
from graphkeep.errors import StorageUnavailable
from graphkeep.port import Op, Sleep

BATCH_WRITE_MAX = 25
BATCH_GET_MAX = 100
TRANSACT_MAX_ITEMS = 100
#: TransactWriteItems accepts 4 MB in total; stay below it
TRANSACT_MAX_BYTES = 4_000_000
MAX_STALLS = 8
BACKOFF_BASE = 0.05
BACKOFF_CAP = 5.0
#: CancellationReasons codes worth re-sending the transaction for
RETRYABLE_REASONS = frozenset(
    {"None", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
RETRYABLE_TRANSACTION_ERRORS = frozenset(
    {"TransactionConflictException", "TransactionInProgressException"}
)


@dataclass(frozen=True, slots=True)
class Call:
    """``client.<operation>(**params)`` on the low-level DynamoDB client."""

    operation: str
    params: dict[str, Any]


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter: about 50 ms, 100 ms, 200 ms ... capped at 5 s."""
    delay = min(BACKOFF_CAP, BACKOFF_BASE * float(2**attempt))
    return delay * (0.5 + random.random() / 2)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def groups(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _stalled(table: str, stalls: int, left: str) -> Op[None]:
    """The pause before sending again what a batch call left unprocessed (``left``) for the
    ``stalls``-th time in a row without progress; StorageUnavailable after MAX_STALLS."""
    if stalls >= MAX_STALLS:
        raise StorageUnavailable(
            f"DynamoDB left {left} unprocessed {stalls} times in a row"
            f" (table {table} throttled?); retry later or raise its capacity"
        )
    yield Sleep(backoff(stalls))


def batch_write(table: str, requests: Sequence[dict[str, Any]]) -> Op[None]:
    """BatchWriteItem in groups of 25; unprocessed items re-sent until none are left."""
    for group in groups(requests, BATCH_WRITE_MAX):
        pending: list[dict[str, Any]] = group
        stalls = 0
        while pending:
            result = yield Call("batch_write_item", {"RequestItems": {table: pending}})
            left = list((result.get("UnprocessedItems") or {}).get(table, []))
            if not left:
                break
            if len(left) >= len(pending):
                stalls += 1
                yield from _stalled(table, stalls, f"{len(left)} write(s)")
            else:
                stalls = 0
            pending = left


def batch_get(
    table: str,
    keys: Sequence[dict[str, Any]],
    *,
    projection: str | None = None,
    names: dict[str, str] | None = None,
    consistent: bool = True,
) -> Op[list[dict[str, Any]]]:
    """BatchGetItem in groups of 100 (strongly consistent by default); unprocessed keys re-sent."""
    found: list[dict[str, Any]] = []
    for group in groups(keys, BATCH_GET_MAX):
        pending: list[dict[str, Any]] = group
        stalls = 0
        while pending:
            request: dict[str, Any] = {"Keys": pending, "ConsistentRead": consistent}
            if projection:
                request["ProjectionExpression"] = projection
            if names:
                request["ExpressionAttributeNames"] = names
            result = yield Call("batch_get_item", {"RequestItems": {table: request}})
            got = list((result.get("Responses") or {}).get(table, []))
            found += got
            left = list(((result.get("UnprocessedKeys") or {}).get(table) or {}).get("Keys", []))
            if not left:
                break
            if not got:
                stalls += 1
                yield from _stalled(table, stalls, f"{len(left)} key(s)")
            else:
                stalls = 0
            pending = left
    return found


@dataclass(frozen=True, slots=True)
class Guard:
    """A ``ConditionCheck`` action every transaction of a write carries (a lease's fence, see
    :func:`.locks.fence_guard`). Unlike an action's own condition, its failure is not dropped
    and retried: the write fails with ``refused(the checked item as it was, or None)``, that
    transaction applied nothing."""

    check: dict[str, Any]
    refused: Callable[[dict[str, Any] | None], Exception]


def transact(
    actions: Sequence[dict[str, Any]], owners: Sequence[int], guard: Guard | None = None
) -> Op[dict[int, Any]]:
    """Apply ``actions`` atomically; groups (``owners[i]``) whose condition fails are dropped.

    Returns ``{group: old item or None}`` for the dropped groups (the old item comes from
    ``ReturnValuesOnConditionCheckFailure`` when the action asked for it). Everything else
    was applied in one transaction (or one PutItem/UpdateItem when a single action is left).
    With a ``guard`` (at most 99 actions), every attempt is a transaction that ends with its
    check, and a failed check raises ``guard.refused`` (nothing of the attempt applied; when
    every group was dropped, nothing is left to write and nothing is sent).
    """
    failed: dict[int, Any] = {}
    live = list(range(len(actions)))
    attempts = 0
    while live:
        try:
            if len(live) == 1 and guard is None:
                yield single(actions[live[0]])
            else:
                items = [actions[i] for i in live]
                if guard is not None:
                    items.append(guard.check)
                yield Call(
                    "transact_write_items",
                    {"TransactItems": items, "ClientRequestToken": uuid.uuid4().hex},
                )
            return failed
        except ClientError as exc:
            code = error_code(exc)
            if code == "ConditionalCheckFailedException" and len(live) == 1 and guard is None:
                failed[owners[live[0]]] = exc.response.get("Item")
                return failed
            if code == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons") or []
                if guard is not None and len(reasons) > len(live):
                    checked = reasons[len(live)]
                    if checked.get("Code") == "ConditionalCheckFailed":
                        raise guard.refused(checked.get("Item")) from None
                dropped: set[int] = set()
                for position, reason in enumerate(reasons[: len(live)]):
                    if reason.get("Code") == "ConditionalCheckFailed":
                        owner = owners[live[position]]
                        failed[owner] = reason.get("Item")
                        dropped.add(owner)
                if dropped:
                    live = [i for i in live if owners[i] not in dropped]
                    continue
                codes = {str(r.get("Code")) for r in reasons}
                if not reasons or not codes <= RETRYABLE_REASONS:
                    raise
            elif code not in RETRYABLE_TRANSACTION_ERRORS:
                raise
            attempts += 1
            if attempts >= MAX_STALLS:
                raise StorageUnavailable(
                    f"DynamoDB cancelled a transaction {attempts} times ({code}); retry later"
                ) from exc
            yield Sleep(backoff(attempts))
    return failed


def transact_parts(
    actions: Sequence[dict[str, Any]],
    owners: Sequence[int],
    sizes: Sequence[int],
    guard: Guard | None = None,
) -> Op[dict[int, Any]]:
    """:func:`transact` over ``actions`` in their order, in as few transactions as the limits
    allow (100 actions, 99 with a ``guard``; :data:`TRANSACT_MAX_BYTES` by ``sizes``). Each
    transaction is atomic, the whole is not: a failure leaves the earlier ones applied."""
    room = TRANSACT_MAX_ITEMS - (guard is not None)
    failed: dict[int, Any] = {}
    start = 0
    while start < len(actions):
        end, size = start, 0
        while end < len(actions) and end - start < room:
            if end > start and size + sizes[end] > TRANSACT_MAX_BYTES:
                break
            size += sizes[end]
            end += 1
        failed.update((yield from transact(actions[start:end], owners[start:end], guard)))
        start = end
    return failed


def delete_items(table: str, pk: str, sks: Sequence[str], guard: Guard | None) -> Op[None]:
    """Delete the items ``sks`` of partition ``pk`` in their order: BatchWriteItem, or fenced
    transactions behind ``guard``."""
    if guard is None:
        yield from batch_write(table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in sks])
        return
    actions = [{"Delete": {"TableName": table, "Key": key(pk, sk)}} for sk in sks]
    yield from transact_parts(actions, range(len(actions)), [0] * len(actions), guard)


def single(action: dict[str, Any]) -> Call:
    """One transaction action as the equivalent single-item call."""
    if "Put" in action:
        return Call("put_item", dict(action["Put"]))
    if "Update" in action:
        return Call("update_item", dict(action["Update"]))
    if "Delete" in action:
        return Call("delete_item", dict(action["Delete"]))
    raise ValueError(f"unsupported transaction action {sorted(action)}")


def query_page(params: dict[str, Any], start: dict[str, Any] | None) -> Op[dict[str, Any]]:
    """One Query/Scan page (``params["_op"]`` picks Scan); follow ``LastEvaluatedKey`` yourself."""
    request = {k: v for k, v in params.items() if k != "_op"}
    if start is not None:
        request["ExclusiveStartKey"] = start
    result: dict[str, Any] = yield Call(params.get("_op", "query"), request)
    return result


def query_all(params: dict[str, Any]) -> Op[list[dict[str, Any]]]:
    """Every item of a Query/Scan, paged through ``LastEvaluatedKey``."""
    items: list[dict[str, Any]] = []
    start: dict[str, Any] | None = None
    while True:
        page = yield from query_page(params, start)
        items += page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def query_params(
    table: str,
    pk: str,
    *,
    begins: str | None = None,
    between: tuple[str, str] | None = None,
    forward: bool = True,
    limit: int | None = None,
    projection: Iterable[str] | None = None,
) -> dict[str, Any]:
    """A strongly consistent Query of partition ``pk``: sort keys ``begins`` with a prefix
    or lie ``between`` two bounds (inclusive), ``projection`` naming the attributes beyond
    the keys (none: whole items)."""
    names = {"#pk": PK}
    values: dict[str, Any] = {":pk": S(pk)}
    condition = "#pk = :pk"
    if begins is not None:
        names["#sk"] = SK
        values[":b"] = S(begins)
        condition += " AND begins_with(#sk, :b)"
    elif between is not None:
        names["#sk"] = SK
        values[":lo"], values[":hi"] = S(between[0]), S(between[1])
        condition += " AND #sk BETWEEN :lo AND :hi"
    params: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": condition,
        "ExpressionAttributeValues": values,
        "ConsistentRead": True,
        "ScanIndexForward": forward,
    }
    if projection is not None:
        wanted = list(dict.fromkeys([PK, SK, *projection]))
        names.update({f"#p{i}": a for i, a in enumerate(wanted)})
        params["ProjectionExpression"] = ", ".join(f"#p{i}" for i in range(len(wanted)))
    params["ExpressionAttributeNames"] = names
    if limit is not None:
        params["Limit"] = limit
    return params


def get_items(table: str, wanted: dict[tuple[str, str], None]) -> Op[dict[tuple[str, str], Any]]:
    """Whole items by ``(pk, sk)`` (BatchGetItem, strongly consistent); absent ones left out."""
    if not wanted:
        return {}
    got = yield from batch_get(table, [key(pk, sk) for pk, sk in wanted])
    return {(s(item, PK), s(item, SK)): item for item in got}
