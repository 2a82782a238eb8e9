"""The effect ledger on DynamoDB: :class:`DynamoDBEffects` (boto3), :class:`AsyncDynamoDBEffects`
and the port they run, :class:`DynamoDBEffectsPort` (see :mod:`graphkeep.effects.port`).

Same table and URLs as the savers, the node cache and the event log
(``dynamodb://<table>?region=..&endpoint_url=..``)::

    with DynamoDBEffects.from_url("dynamodb://graphkeep?region=eu-west-1") as effects: ...

One partition per thread, one item per effect (``P`` = escaped ``key_prefix``)::

    pk  P#f1#<thread>   the thread, key-escaped (``P#f1#`` for "": an effect outside a graph);
                        never P#1#.. of the saver, P#m1#.. / P#m1r / P#m1n of the store, P#n1#.. of
                        the cache nor P#e1#.. of the event log
    sk  e#<key>         the idempotency key, key-escaped (long ones shortened with a digest,
                        see .keys; ``th`` and ``k`` always carry the raw names)
    th  S   thread id              k   S   idempotency key          nm  S   effect name
    st  S   started | done | failed                tok S   lease holder's token
    lu  N   lease end, epoch ms    xm  N   exact expiry, epoch ms: reads check it
    exp N   epoch seconds, DynamoDB's TTL attribute (reaps within days)
    v   B   packed typed result / error of a settled record (``z`` = "zlib" when compressed)
    cm  N   created, epoch ms      um  N   last transition, epoch ms

Every transition is one conditional request:

- ``claim``: PutItem if ``attribute_not_exists(pk) OR xm <= now``; when the condition fails
  the live item comes back with the error (``ReturnValuesOnConditionCheckFailure``; a
  server that does not return it costs one strongly consistent GetItem, repeated a few
  times if the item vanished meanwhile).
- ``take_over``: PutItem if ``st = started AND tok = old AND lu <= now``.
- ``finish``: PutItem if ``st = started AND tok = token``; a result whose item would still
  pass DynamoDB's 400 KB item limit compressed raises :class:`PayloadTooLarge`, nothing
  written.
- ``release``: DeleteItem if ``st = started AND tok = token``.

A condition that fails on an item already holding the caller's own token and state is a
retry whose first attempt was applied (its reply lost): it counts as success.

Under a lease (``fence``: the caller's fencing token, see :mod:`graphkeep.effects.port`) a
``claim`` or ``take_over`` is one TransactWriteItems instead of its PutItem: the same Put
with its condition, and the ``ConditionCheck`` every fenced saver write carries
(:func:`.locks.fence_guard`: ``attribute_not_exists(fence) OR fence <= :holder`` on ``l#``
of ``P#1#<thread>``, the saver's lease item under this port's ``key_prefix``). The check and
the Put commit together or not at all (transactions are serializable with every other write
of either item), so a refusal stores nothing. ``CancellationReasons`` (one per action, in
order) says which condition failed:

- the check's: :class:`~graphkeep.errors.LeaseLost` carrying the newer token, from the
  reason's item (``ReturnValuesOnConditionCheckFailure``); a server that does not return it
  costs one strongly consistent GetItem of the lease item, on that path only (that read is
  not atomic with the refusal: it reports the newest token at the time of the read);
- the Put's only: the unfenced request's answer by the same rules (``claim``: the live
  record, read back as above when not returned; ``take_over``: False; the own-token retry
  counts as success);
- both (a server reports every failed condition; moto does): ``LeaseLost``. A server that
  reported the Put's alone would answer as for the Put's: still nothing stored, and the
  holder's next fenced request is refused.

A conflict with another transaction on either item (a fenced write of the thread, a lease
being taken) cancels it (``TransactionConflict``) and it is re-sent with backoff
(:func:`.requests.transact`). No extra round trip: still one request, but a transactional
write bills twice the write units of a plain one per item, so a fenced claim costs twice
the Put's WCUs plus two for the check of the small lease item (an unfenced one: the Put's).
Unfenced calls (``fence`` None) are the single PutItem above, unchanged. ``finish`` and
``release`` are never fenced (see the port).

``get`` is a
strongly consistent GetItem, ``list(thread)`` / ``clear(thread)`` a Query of the thread's
partition, ``list(None)`` / ``clear(None)`` a Scan for this prefix's effect partitions
(costly on a big shared table); clears delete with BatchWriteItem.
"""

from __future__ import annotations

import math
from typing import Any

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb import keys as keyspace
from graphkeep.backends.dynamodb.client import OnDynamoDB, TablePort
from graphkeep.backends.dynamodb.items import (
    CODEC,
    COMPRESS_MIN_BYTES,
    COMPRESS_MIN_SAVING,
    DEFAULT_COMPRESS_LEVEL,
    EXP,
    MAX_ITEM_BYTES,
    PK,
    SK,
    VALUE,
    B,
    N,
    S,
    b,
    key,
    n,
    s,
    size_of,
)
from graphkeep.backends.dynamodb.locks import fence_guard, granted_fence
from graphkeep.backends.dynamodb.requests import (
    Call,
    backoff,
    batch_write,
    error_code,
    query_all,
    transact,
)
from graphkeep.backends.dynamodb.schema import setup_table
from graphkeep.effects.ledger import AsyncLedger, SyncLedger
from graphkeep.effects.port import STARTED, EffectRecord
from graphkeep.errors import CorruptData, LeaseLost, PayloadTooLarge, StorageUnavailable
from graphkeep.port import Op, Sleep, codec

__all__ = ["AsyncDynamoDBEffects", "DynamoDBEffects", "DynamoDBEffectsPort"]

#: the partition tag of effect records ("e1" is the event log's)
FORMAT = "f1"
ENTRY = "e#"
THREAD, KEY, NAME = "th", "k", "nm"
STATE, TOKEN, LEASE_UNTIL, EXPIRES_MS = "st", "tok", "lu", "xm"
CREATED, UPDATED = "cm", "um"
KEY_NAMES = {"#p": PK, "#s": SK}
#: a claim whose condition failed on an item that is gone when read: claims sent again
CLAIM_ATTEMPTS = 5
#: the longest sort-key component of an idempotency key (DynamoDB's sort key limit: 1024)
KEY_LIMIT = 1000
CONDITION_FAILED = "ConditionalCheckFailedException"


class DynamoDBEffectsPort(TablePort):
    """The effect ledger's port on one DynamoDB table (shared with the savers if you like)."""

    def __init__(self, table: str, *, key_prefix: str = "graphkeep") -> None:
        super().__init__(table, key_prefix=key_prefix)
        #: what every effect partition of this prefix starts with
        self.base = f"{self.prefix}{keyspace.SEP}{FORMAT}{keyspace.SEP}"

    # ------------------------------------------------------------------ keys and items

    def partition(self, thread_id: str) -> str:
        return self.base + keyspace.part(thread_id, keyspace.THREAD_LIMIT)[0]

    @staticmethod
    def sort_key(effect_key: str) -> str:
        return ENTRY + keyspace.part(effect_key, KEY_LIMIT)[0]

    def address(self, thread_id: str, effect_key: str) -> dict[str, Any]:
        return key(self.partition(thread_id), self.sort_key(effect_key))

    def item(self, record: EffectRecord) -> dict[str, Any]:
        """``record`` as an item: its data compressed when that pays."""
        item = self.address(record.thread_id, record.key)
        item.update(
            {
                THREAD: S(record.thread_id),
                KEY: S(record.key),
                NAME: S(record.name),
                STATE: S(record.state),
                TOKEN: S(record.token),
                LEASE_UNTIL: N(record.lease_until_ms),
                EXPIRES_MS: N(record.expires_ms),
                EXP: N(math.ceil(record.expires_ms / 1000)),
                CREATED: N(record.created_ms),
                UPDATED: N(record.updated_ms),
            }
        )
        if record.data is not None:
            data = record.data
            if len(data) >= COMPRESS_MIN_BYTES:
                packed = codec.deflate(data, DEFAULT_COMPRESS_LEVEL)
                if len(packed) <= len(data) * (1 - COMPRESS_MIN_SAVING):
                    data = packed
                    item[CODEC] = S("zlib")
            item[VALUE] = B(data)
        return item

    @staticmethod
    def record(item: dict[str, Any]) -> EffectRecord:
        data: bytes | None = None
        if VALUE in item:
            data = b(item, VALUE)
            if CODEC in item:
                try:
                    data = codec.inflate(data)
                except CorruptData as exc:
                    raise CorruptData(
                        f"the stored result of effect {s(item, KEY)!r} (thread"
                        f" {s(item, THREAD)!r}) is damaged: {exc.reason}",
                        kind=exc.kind,
                    ) from None
        return EffectRecord(
            thread_id=s(item, THREAD),
            key=s(item, KEY),
            state=s(item, STATE),
            token=s(item, TOKEN),
            lease_until_ms=n(item, LEASE_UNTIL) or 0,
            expires_ms=n(item, EXPIRES_MS) or 0,
            data=data,
            name=s(item, NAME),
            created_ms=n(item, CREATED) or 0,
            updated_ms=n(item, UPDATED) or 0,
        )

    def put(
        self,
        item: dict[str, Any],
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        fence: int | None = None,
    ) -> Op[dict[str, Any] | None]:
        """A conditional PutItem: None when written, else the item that failed the condition
        (``{}`` when the server returned none). Under a lease (``fence``): one
        TransactWriteItems of the same Put and the lease's check (:func:`.locks.fence_guard`),
        refused with :class:`LeaseLost` once a newer token was granted."""
        put = {
            "TableName": self.table,
            "Item": item,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if fence is not None:
            return (yield from self.fenced_put(put, s(item, THREAD), fence))
        try:
            yield Call("put_item", put)
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
                raise
            old: dict[str, Any] = exc.response.get("Item") or {}
            return old
        return None

    def fenced_put(
        self, put: dict[str, Any], thread_id: str, fence: int
    ) -> Op[dict[str, Any] | None]:
        """:meth:`put` as a transaction with the fence of ``thread_id``'s lease (the saver's
        lease item under this port's ``key_prefix``); same answer, or :class:`LeaseLost`."""
        try:
            failed = yield from transact([{"Put": put}], [0], fence_guard(self, thread_id, fence))
        except LeaseLost as lost:
            if lost.newer is not None:
                raise
            # the reply did not carry the lease item: read its token (refusals only)
            newer = yield from granted_fence(self, thread_id)
            raise LeaseLost(thread_id, fence, newer) from None
        if not failed:
            return None
        old: dict[str, Any] = failed[0] or {}
        return old

    def read(self, address: dict[str, Any]) -> Op[dict[str, Any] | None]:
        result = yield Call(
            "get_item", {"TableName": self.table, "Key": address, "ConsistentRead": True}
        )
        item: dict[str, Any] | None = result.get("Item")
        return item or None

    @staticmethod
    def holds(item: dict[str, Any] | None, state: str, token: str) -> bool:
        """``item`` is in ``state`` under ``token`` (a retried request that was applied)."""
        return item is not None and item.get(STATE) == S(state) and item.get(TOKEN) == S(token)

    # ------------------------------------------------------------------ the port

    def setup(self) -> Op[None]:
        # the saver's table and TTL set-up, exactly, as the cache and event log do
        yield from setup_table(self.table)

    def claim(
        self, record: EffectRecord, now_ms: int, fence: int | None = None
    ) -> Op[EffectRecord | None]:
        item = self.item(record)
        for attempt in range(CLAIM_ATTEMPTS):
            old = yield from self.put(
                item,
                "attribute_not_exists(#p) OR #xm <= :now",
                {"#p": PK, "#xm": EXPIRES_MS},
                {":now": N(now_ms)},
                fence,
            )
            if old is None:
                return None
            if not old:  # the server did not return the item: read it
                old = yield from self.read(key(s(item, PK), s(item, SK)))
            if old and n(old, EXPIRES_MS) is not None and (n(old, EXPIRES_MS) or 0) > now_ms:
                if self.holds(old, STARTED, record.token):
                    return None  # our own claim, applied before its reply was lost
                return self.record(old)
            # released or expired between the write and the read: claim again
            if attempt:
                yield Sleep(backoff(attempt))
        raise StorageUnavailable(
            f"claiming effect {record.name!r} (key {record.key!r}, thread {record.thread_id!r})"
            f" failed {CLAIM_ATTEMPTS} times: the record kept changing under it; retry later"
        )

    def take_over(
        self, record: EffectRecord, old_token: str, now_ms: int, fence: int | None = None
    ) -> Op[bool]:
        old = yield from self.put(
            self.item(record),
            "#st = :started AND #tok = :old AND #lu <= :now",
            {"#st": STATE, "#tok": TOKEN, "#lu": LEASE_UNTIL},
            {":started": S(STARTED), ":old": S(old_token), ":now": N(now_ms)},
            fence,
        )
        return old is None or self.holds(old, STARTED, record.token)

    def finish(self, record: EffectRecord, now_ms: int) -> Op[bool]:
        item = self.item(record)
        size = size_of(item)
        if size > MAX_ITEM_BYTES:
            raise PayloadTooLarge(
                f"the result of effect {record.name!r} (key {record.key!r}, thread"
                f" {record.thread_id!r}) takes {size} bytes stored"
                + (" after compression" if CODEC in item else "")
                + f", over DynamoDB's {MAX_ITEM_BYTES}-byte item limit; return less data"
                " (or a reference to it) from the effect"
            )
        old = yield from self.put(
            item,
            "#st = :started AND #tok = :token",
            {"#st": STATE, "#tok": TOKEN},
            {":started": S(STARTED), ":token": S(record.token)},
        )
        return old is None or self.holds(old, record.state, record.token)

    def reseal(self, record: EffectRecord, fence: int | None = None) -> Op[bool]:
        old = yield from self.put(
            self.item(record),
            "#st = :state AND #tok = :token AND #up = :updated",
            {"#st": STATE, "#tok": TOKEN, "#up": UPDATED},
            {
                ":state": S(record.state),
                ":token": S(record.token),
                ":updated": N(record.updated_ms),
            },
            fence,
        )
        return old is None

    def release(self, thread_id: str, key: str, token: str) -> Op[bool]:
        try:
            yield Call(
                "delete_item",
                {
                    "TableName": self.table,
                    "Key": self.address(thread_id, key),
                    "ConditionExpression": "#st = :started AND #tok = :token",
                    "ExpressionAttributeNames": {"#st": STATE, "#tok": TOKEN},
                    "ExpressionAttributeValues": {":started": S(STARTED), ":token": S(token)},
                },
            )
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
                return False
            raise
        return True

    def get(self, thread_id: str, key: str) -> Op[EffectRecord | None]:
        item = yield from self.read(self.address(thread_id, key))
        return None if item is None else self.record(item)

    def _items(self, thread_id: str | None, keys_only: bool) -> Op[list[dict[str, Any]]]:
        params: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        if keys_only:
            params["ProjectionExpression"] = "#p, #s"
        if thread_id is None:
            params["_op"] = "scan"
            params["FilterExpression"] = "begins_with(#p, :p)"
            params["ExpressionAttributeValues"] = {":p": S(self.base)}
        else:
            params["KeyConditionExpression"] = "#p = :p"
            params["ExpressionAttributeValues"] = {":p": S(self.partition(thread_id))}
        params["ExpressionAttributeNames"] = KEY_NAMES if keys_only else {"#p": PK}
        items = yield from query_all(params)
        # only effect items (a partition of this prefix never holds others; be strict anyway)
        return [i for i in items if s(i, SK).startswith(ENTRY)]

    def list(self, thread_id: str | None) -> Op[list[EffectRecord]]:
        items = yield from self._items(thread_id, keys_only=False)
        return [self.record(i) for i in items]

    def clear(self, thread_id: str | None) -> Op[int]:
        found = yield from self._items(thread_id, keys_only=True)
        deletes = [{"DeleteRequest": {"Key": key(s(i, PK), s(i, SK))}} for i in found]
        yield from batch_write(self.table, deletes)
        return len(deletes)


class DynamoDBEffects(OnDynamoDB, SyncLedger):
    """Effect ledger on a boto3 low-level DynamoDB client (``boto3.client("dynamodb")``).

    Options: ``serde``, ``key_prefix`` (default ``"graphkeep"``), ``telemetry`` and the
    ledger's own options; ``from_url`` also takes the client options of
    ``DynamoDBSaver.from_table`` (``session``, ``profile_name``, ``botocore_config``).
    """

    port_type = DynamoDBEffectsPort


class AsyncDynamoDBEffects(OnDynamoDB, AsyncLedger):
    """Effect ledger on an aiobotocore DynamoDB client (same options)."""

    port_type = DynamoDBEffectsPort
