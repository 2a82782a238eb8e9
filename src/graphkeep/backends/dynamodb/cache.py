"""LangGraph node cache on DynamoDB: :class:`DynamoDBCache` (boto3) and :class:`AsyncDynamoDBCache`.

Same table and URLs as the savers (``dynamodb://<table>?region=..&endpoint_url=..``)::

    with DynamoDBCache.from_url("dynamodb://graphkeep?region=eu-west-1") as cache:
        graph = builder.compile(cache=cache)

One partition per cache namespace, one item per entry (``P`` = escaped ``key_prefix``)::

    pk  P#n1#<ns>     escaped_namespace, key-escaped (never P#1#.. of saver, P#m1#.. of store)
    sk  n#<key>       the key, key-escaped (long ones shortened with a digest, see .keys)
    rw  B             msgpack [namespace, key], only when pk or sk holds a digest: the
                      address a sealed value is bound to, so ``graphkeep rekey`` can open
                      and seal it again (names stay readable, as in the keys; never values)
    v   B             packed typed value (``z`` = "zlib" when compressed)
    xm  N             exact expiry, epoch ms: checked on every read
    exp N             epoch seconds, DynamoDB's TTL attribute (reaps within days)

``get`` is BatchGetItem (strongly consistent, 100 keys per call), ``set`` BatchWriteItem
(25 per call), ``clear(namespaces)`` a Query per namespace plus BatchWriteItem deletes,
``clear(None)`` a Scan for this prefix's cache partitions (costly on a big shared table).
Values from 4 KiB are zlib-compressed when that pays; a value still over the 400 KB item
limit is **not cached** (a warning is logged, the node simply runs again next time).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from botocore.exceptions import ClientError
from langgraph.cache.base import FullKey, Namespace

from graphkeep.backends.dynamodb import keys as keyspace
from graphkeep.backends.dynamodb.client import OnDynamoDB, TablePort
from graphkeep.backends.dynamodb.items import (
    CODEC,
    COMPRESS_MIN_BYTES,
    DEFAULT_COMPRESS_LEVEL,
    EXP,
    INLINE_LIMIT,
    PK,
    RAW,
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
from graphkeep.backends.dynamodb.requests import (
    Call,
    batch_get,
    batch_write,
    error_code,
    query_all,
)
from graphkeep.backends.dynamodb.schema import setup_table
from graphkeep.cache.port import Entry, Held, Stored, escaped_namespace, namespace_of, unreadable
from graphkeep.cache.shells import AsyncCache, SyncCache
from graphkeep.errors import CorruptData
from graphkeep.port import Op, codec

__all__ = ["AsyncDynamoDBCache", "DynamoDBCache", "DynamoDBCachePort"]

log = logging.getLogger("graphkeep.dynamodb")

FORMAT = "n1"
ENTRY = "n#"
EXPIRES_MS = "xm"
KEY_NAMES = {"#p": PK, "#s": SK}


def _with_value(item: dict[str, Any], data: bytes) -> bytes:
    """``item`` given its value ``data``, zlib-compressed when that saves 10 %; the bytes
    stored."""
    if len(data) >= COMPRESS_MIN_BYTES:
        packed = codec.deflate(data, DEFAULT_COMPRESS_LEVEL)
        if len(packed) <= len(data) * 0.9:
            data = packed
            item[CODEC] = S("zlib")
    item[VALUE] = B(data)
    return data


def _entry_part(entry_key: str) -> tuple[str, bool]:
    """The sort key's text for ``entry_key`` and whether it is shortened to a digest."""
    return keyspace.part(entry_key, 1000)


class DynamoDBCachePort(TablePort):
    """The cache port on one DynamoDB table (shared with the savers if you like)."""

    def partition(self, namespace: Namespace) -> str:
        return self._partition(namespace)[0]

    def _partition(self, namespace: Namespace) -> tuple[str, bool]:
        text, shortened = keyspace.part(escaped_namespace(namespace), keyspace.THREAD_LIMIT)
        return f"{self.prefix}{keyspace.SEP}{FORMAT}{keyspace.SEP}{text}", shortened

    @staticmethod
    def sort_key(entry_key: str) -> str:
        return ENTRY + _entry_part(entry_key)[0]

    def setup(self) -> Op[None]:
        # the saver's table and TTL set-up, exactly (with its run_id index), so a saver that
        # later shares a table the cache created finds what it expects
        yield from setup_table(self.table)

    def get(self, keys: list[FullKey]) -> Op[dict[FullKey, Stored]]:
        by_key = {(self.partition(ns), self.sort_key(k)): (ns, k) for ns, k in keys}
        items = yield from batch_get(self.table, [key(pk, sk) for pk, sk in by_key])
        found: dict[FullKey, Stored] = {}
        for item in items:
            address = by_key.get((s(item, PK), s(item, SK)))
            if address is None:
                continue
            data = b(item, VALUE)
            if CODEC in item:
                try:
                    data = codec.inflate(data)
                except CorruptData as exc:
                    unreadable(address, exc)
                    continue
            found[address] = Stored(data, n(item, EXPIRES_MS))
        return found

    def set(self, entries: list[Entry], now_ms: int) -> Op[None]:
        requests = []
        for entry in entries:
            pk, long_namespace = self._partition(entry.namespace)
            sk_text, long_key = _entry_part(entry.key)
            item = key(pk, ENTRY + sk_text)
            if long_namespace or long_key:  # the address the keys no longer spell out
                item[RAW] = B(codec.packb([list(entry.namespace), entry.key]))
            if entry.expires_ms is not None:
                item[EXPIRES_MS] = N(entry.expires_ms)
                item[EXP] = N(math.ceil(entry.expires_ms / 1000))
            data = _with_value(item, entry.data)
            if size_of(item) > INLINE_LIMIT:
                log.warning(
                    "not caching %r in namespace %r: %d bytes after compression pass"
                    " DynamoDB's 400 KB item limit",
                    entry.key,
                    entry.namespace,
                    len(data),
                )
                # set replaces: an older value must not outlive this write
                requests.append({"DeleteRequest": {"Key": key(s(item, PK), s(item, SK))}})
                continue
            requests.append({"PutRequest": {"Item": item}})
        yield from batch_write(self.table, requests)

    def clear(self, namespaces: list[Namespace] | None) -> Op[None]:
        found: list[dict[str, Any]] = []
        if namespaces is None:
            base = f"{self.prefix}{keyspace.SEP}{FORMAT}{keyspace.SEP}"
            found = yield from query_all(
                {
                    "_op": "scan",
                    "TableName": self.table,
                    "FilterExpression": "begins_with(#p, :p)",
                    "ProjectionExpression": "#p, #s",
                    "ExpressionAttributeNames": KEY_NAMES,
                    "ExpressionAttributeValues": {":p": S(base)},
                }
            )
        else:
            for namespace in namespaces:
                found += yield from query_all(
                    {
                        "TableName": self.table,
                        "KeyConditionExpression": "#p = :p",
                        "ProjectionExpression": "#p, #s",
                        "ExpressionAttributeNames": KEY_NAMES,
                        "ExpressionAttributeValues": {":p": S(self.partition(namespace))},
                        "ConsistentRead": True,
                    }
                )
        deletes = [{"DeleteRequest": {"Key": key(s(i, PK), s(i, SK))}} for i in found]
        yield from batch_write(self.table, deletes)

    def entries(self) -> Op[list[Held]]:
        base = f"{self.prefix}{keyspace.SEP}{FORMAT}{keyspace.SEP}"
        items = yield from query_all(
            {
                "_op": "scan",
                "TableName": self.table,
                "FilterExpression": "begins_with(#p, :p)",
                "ExpressionAttributeNames": {"#p": PK},
                "ExpressionAttributeValues": {":p": S(base)},
                "ConsistentRead": True,
            }
        )
        held: list[Held] = []
        for item in items:
            ns_text = keyspace.decode(s(item, PK)[len(base) :])
            key_text = keyspace.decode(s(item, SK).removeprefix(ENTRY))
            address: FullKey | None = None
            if ns_text is not None and key_text is not None:
                address = (namespace_of(ns_text), key_text)
            elif RAW in item:  # a digest in the keys: the address written beside it
                address = self._raw_address(item)
            try:
                data = codec.inflate(b(item, VALUE)) if CODEC in item else b(item, VALUE)
            except CorruptData:
                continue
            held.append(Held(address, data, item))
        return held

    def _raw_address(self, item: dict[str, Any]) -> FullKey | None:
        """The address ``rw`` names, when it is the one this item's keys were made from
        (else None: a copied or changed ``rw`` never lends an item another address)."""
        try:
            namespace, entry_key = codec.unpackb(b(item, RAW))
            address = (tuple(namespace), entry_key)
            if not all(isinstance(label, str) for label in namespace):
                return None
            if not isinstance(entry_key, str):
                return None
        except (CorruptData, TypeError, ValueError):
            return None
        if (self.partition(address[0]), self.sort_key(entry_key)) != (s(item, PK), s(item, SK)):
            return None
        return address

    def reseal(self, held: Held, data: bytes) -> Op[bool]:
        item = dict(held.ref)
        item.pop(CODEC, None)
        _with_value(item, data)
        try:
            yield Call(
                "put_item",
                {
                    "TableName": self.table,
                    "Item": item,
                    "ConditionExpression": "#v = :v",
                    "ExpressionAttributeNames": {"#v": VALUE},
                    "ExpressionAttributeValues": {":v": held.ref[VALUE]},
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True


class DynamoDBCache(OnDynamoDB, SyncCache):
    """Node cache on a boto3 low-level DynamoDB client (``boto3.client("dynamodb")``).

    Options: ``serde``, ``key_prefix`` (default ``"graphkeep"``); ``from_url`` also takes
    the client options of ``DynamoDBSaver.from_table`` (``session``, ``profile_name``,
    ``botocore_config``).
    """

    port_type = DynamoDBCachePort


class AsyncDynamoDBCache(OnDynamoDB, AsyncCache):
    """Node cache on an aiobotocore DynamoDB client (same options)."""

    port_type = DynamoDBCachePort
