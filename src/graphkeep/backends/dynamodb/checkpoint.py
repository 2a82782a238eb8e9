"""The DynamoDB mapping of the storage port: one table, one partition per thread.

Key layout in :mod:`.keys`, item attributes and the 400 KB guard in :mod:`.items`,
request loops in :mod:`.requests`, TTL bookkeeping in :mod:`.ttl`. Requests per port call
(measured in the tests):

- ``put_checkpoint``: 1 TransactWriteItems (new blobs + their chunks + TTL refreshes + the
  head, all or nothing) or a single PutItem when there is only the head. Over the transaction
  limits (100 items / 4 MB, i.e. values of several MB) chunks and blobs go first with
  BatchWriteItem and the head last, so readers still never see a head without its values.
- ``put_writes``: 1 TransactWriteItems per 100 items; regular writes carry
  ``attribute_not_exists(sk)`` and a failed condition means "already stored" (the group is
  dropped and the rest re-sent), special writes (idx < 0) replace.
- ``load``: 1 Query (strongly consistent; the newest head of a namespace comes with its writes
  just before it in a descending Query of 16 items; a newest checkpoint with more pending
  writes costs a second Query narrowed to it) + 1 BatchGetItem for channel values and
  chunks, +1 BatchGetItem when a channel value itself is chunked.
- ``chain``: one descending Query from the target through its ancestors (a first page of 256
  items, about 100 ancestors, then 1 MB pages) + 1 BatchGetItem for the seed values.
- ``list_page``: Query pages of the namespace + BatchGetItem for the page's values.
- ``get_blobs`` (list elements, see :mod:`graphkeep.checkpoint.lists`; the saver asks once per
  ``get_tuple`` and per ``list`` page): element sort keys of one (namespace, epoch) sort by
  sequence number, so a run of 50 or more is read by one Query ``BETWEEN`` its first and
  last key (1 MB pages); shorter runs and other keys by BatchGetItem (100 keys a request);
  +1 BatchGetItem for chunks. An append-only list (one run) costs one Query, whatever its
  length: a ``get_tuple`` of a shared list is one request more than of a plain one.
  ``list(None)`` and ``list_threads`` Scan the table (costly by nature), ``list`` of a thread
  without a namespace reads the whole thread partition.
- ``find_runs``: a Query on the sparse ``run_id`` GSI per run id (eventually consistent: a
  checkpoint written milliseconds ago may be missed). Without the index: one filtered Scan.
- ``commits`` / ``newest_commit`` (``saver.watch``): one consistent Query of one namespace's
  heads above an id, keys only (a filter on ``h`` drops the writes); an idle poll reads no
  item and costs one read unit. ``checkpoint_ns=None`` reads the thread's whole ``c#``
  range per poll (the namespace precedes the id in the sort key) and sorts it here.

Watch uses the shared poller (:mod:`graphkeep.checkpoint.watch`), not DynamoDB Streams: a stream
must be enabled on the table (a table-level change teams that own their schema would have to
make), each watcher would need its own shard discovery and shard iterators (``GetRecords``
polling too, at most five reads per shard per second shared by every consumer, records up to
24 h), and a stream shows every item change of the table, not one thread's commits. Polling
a Query is exact (strongly consistent, ordered by checkpoint id, resumable from any id) and
an idle watcher costs one read unit per poll, backing off to ``max_poll_interval``.

TTL (``ttl`` seconds): every item carries ``exp`` (DynamoDB's TTL attribute) and heads carry
``vis``. Writing an item sets ``exp = now + ttl + slack`` (slack = ttl / 2); a head is visible
until ``vis = now + ttl``. A put also refreshes what the new checkpoint needs: the values of
its unchanged channels and, for DeltaChannels, the ancestor heads, writes and seed values back
to the nearest snapshot; an item is refreshed only when its ``exp`` would fall before the new
head's ``vis``, so each item is rewritten at most once per slack period. What was refreshed
when is known from this process' own reads and writes (a bounded cache); unknown items are
looked up first (one BatchGetItem). Older history expires ``ttl`` after it was written.
List elements live as long as the checkpoints naming them: a put refreshes the elements of
the manifests it writes and of its unchanged channels (manifest blobs carry ``ls``, so a
process that has not seen one learns it with its expiry lookup: one BatchGetItem more for
the manifest, one request for its elements' expiries).
Reads hide heads past ``vis`` and other items past ``exp`` (DynamoDB deletes lazily).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.items import (
    DEFAULT_COMPRESS_LEVEL,
    DIGEST,
    EXP,
    HEAD,
    LIST,
    LOCK_TOKEN,
    LOCK_UNTIL,
    NCHUNKS,
    PK,
    RAW,
    RUN,
    RUN_INDEX,
    SK,
    SMALL_COMPRESS_MIN_BYTES,
    VALUE,
    VIS,
    B,
    Encoded,
    N,
    S,
    attach_payload,
    b,
    chunk_sks,
    head_hidden,
    hidden,
    key,
    n,
    read_payload,
    s,
    size_of,
)
from graphkeep.backends.dynamodb.requests import (
    TRANSACT_MAX_BYTES,
    TRANSACT_MAX_ITEMS,
    Call,
    batch_get,
    batch_write,
    error_code,
    groups,
    query_all,
    query_page,
    single,
    transact,
)
from graphkeep.backends.dynamodb.ttl import Known, KnownCheckpoint, KnownItem, Refresh
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest, manifest_keys
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import (
    BlobRecord,
    Chain,
    CheckpointRecord,
    Inventory,
    ListQuery,
    Loaded,
    Summary,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.errors import ConfigurationError, GraphkeepError
from graphkeep.port import Op, Sleep, codec
from graphkeep.port.lru import ThreadLRU

try:
    from botocore.exceptions import ClientError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the DynamoDB backend needs boto3: pip install 'graphkeep[dynamodb]'"
    ) from exc

log = logging.getLogger("graphkeep.dynamodb")

#: items read by the first page of a "latest checkpoint" Query (head + up to 15 writes)
LATEST_FIRST_PAGE = 16
#: items read by the first page of an ancestor walk (about 100 ancestors with a write each)
CHAIN_FIRST_PAGE = 256
#: ``list`` pages of at least this many checkpoints read whole 1 MB Query pages
LIST_PAGE_FULL = 100
TABLE_WAIT_SECONDS = 600
#: element keys (``lists.element_key``): 16 hex digits of epoch, 8 of sequence number
ELEMENT_KEY_LENGTH = 24
ELEMENT_SEQ_DIGITS = 8
#: elements of one epoch this far apart (in sequence numbers) are read by separate Queries;
#: closer ones by one Query over the whole span (reading a few unnamed items costs less
#: than another request: a Query is billed by the bytes it reads, not per item)
ELEMENT_GAP = 64
#: runs of fewer elements are read by exact key with BatchGetItem (100 keys a request,
#: pooled with the other keys), not by a Query each: a list written by many processes
#: (one epoch each) costs ceil(n / 100) requests, not one per process
ELEMENT_QUERY_MIN = 50
#: how many manifests (blob sort key -> its elements) the TTL bookkeeping remembers
MANIFEST_CAPACITY = 4096


def table_definition(table_name: str, *, run_index: bool = True) -> dict[str, Any]:
    """The CreateTable request ``setup()`` sends (TTL is enabled separately on ``exp``)."""
    attributes = [
        {"AttributeName": PK, "AttributeType": "S"},
        {"AttributeName": SK, "AttributeType": "S"},
    ]
    definition: dict[str, Any] = {
        "TableName": table_name,
        "AttributeDefinitions": attributes,
        "KeySchema": [
            {"AttributeName": PK, "KeyType": "HASH"},
            {"AttributeName": SK, "KeyType": "RANGE"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if run_index:
        attributes.append({"AttributeName": RUN, "AttributeType": "S"})
        definition["GlobalSecondaryIndexes"] = [
            {
                "IndexName": RUN_INDEX,
                "KeySchema": [{"AttributeName": RUN, "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": [RAW]},
            }
        ]
    return definition


# --------------------------------------------------------------------------- decoding


@dataclass(slots=True)
class Collection:
    """A checkpoint head with its writes, as read (``ns``/``checkpoint_id`` key-escaped)."""

    pk: str
    ns: str
    checkpoint_id: str
    head: dict[str, Any] | None
    writes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Names:
    """The raw names behind an item's keys."""

    thread: str
    ns: str
    checkpoint_id: str = ""
    task_id: str = ""
    channel: str = ""
    version: str = ""


def names_of(item: dict[str, Any], parsed: keys.ParsedKey) -> Names:
    if RAW in item:
        raw = codec.unpackb(b(item, RAW))
        if parsed.kind == "c":
            return Names(raw[0], raw[1], checkpoint_id=raw[2])
        if parsed.kind == "w":
            return Names(raw[0], raw[1], checkpoint_id=raw[2], task_id=raw[3])
        if parsed.kind == "b":
            return Names(raw[0], raw[1], channel=raw[2], version=raw[3])
    thread = keys.decode(keys.thread_part_of(s(item, PK)))
    parts = [parsed.ns, parsed.checkpoint_id, parsed.task_id, parsed.channel, parsed.version]
    decoded = [keys.decode(p) for p in parts]
    if thread is None or any(d is None for d in decoded):
        raise GraphkeepError(f"item {s(item, SK)!r} has a shortened key but no raw names")
    ns, checkpoint_id, task_id, channel, version = (d or "" for d in decoded)
    return Names(thread, ns, checkpoint_id, task_id, channel, version)


def summary_of(ns: str, checkpoint_id: str, head: dict[str, Any]) -> Summary:
    parent, versions, present, needs, run_id = codec.unpackb(b(head, HEAD))
    return Summary(ns, checkpoint_id, parent or None, versions, present, needs, run_id or None)


def pack_head(record: CheckpointRecord) -> bytes:
    return codec.packb(
        [
            record.parent_id or "",
            record.versions,
            record.present,
            record.needs_history,
            record.run_id or "",
        ]
    )


def _plain(*tags: str) -> bool:
    """Worth compressing: encrypted payloads (tag "<inner>+<cipher>") are not."""
    return not any("+" in tag for tag in tags)


class _Descending:
    """Groups a descending stream of checkpoint items (writes come just before their head)."""

    def __init__(self) -> None:
        self.ident: tuple[str, str, str] | None = None
        self.writes: list[dict[str, Any]] = []

    def feed(self, pk: str, item: dict[str, Any]) -> Collection | None:
        parsed = keys.parse_sk(s(item, SK))
        ident = (pk, parsed.ns, parsed.checkpoint_id)
        if parsed.kind == "w":
            if ident != self.ident:
                self.ident, self.writes = ident, []
            self.writes.append(item)
        elif parsed.kind == "c":
            writes = self.writes if ident == self.ident else []
            self.ident, self.writes = None, []
            return Collection(pk, parsed.ns, parsed.checkpoint_id, item, writes)
        return None


def collections_of(items: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], Collection]:
    """Heads and writes grouped per checkpoint, in any order (writes without a head kept)."""
    found: dict[tuple[str, str, str], Collection] = {}
    for item in items:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind not in ("c", "w"):
            continue
        pk = s(item, PK)
        ident = (pk, parsed.ns, parsed.checkpoint_id)
        coll = found.get(ident)
        if coll is None:
            coll = found[ident] = Collection(pk, parsed.ns, parsed.checkpoint_id, None)
        if parsed.kind == "c":
            coll.head = item
        else:
            coll.writes.append(item)
    return found


# --------------------------------------------------------------------------- list elements

_ELEMENT_SK = re.compile(
    re.escape(f"{keys.SEP}{keys.escape(ELEMENT_CHANNEL)}{keys.SEP}")
    + f"[0-9a-f]{{{ELEMENT_KEY_LENGTH}}}$"
)


def is_element_sk(sk: str) -> bool:
    """A list element's sort key: ``b#<ns>#__graphkeep.element__#<epoch><seq>``.

    Element keys are fixed-width lowercase hex and never shortened, so the elements of one
    (namespace, epoch) share a sort key prefix and sort by sequence number: a range.
    """
    return sk.startswith("b#") and _ELEMENT_SK.search(sk) is not None


def element_runs(sks: Iterable[str]) -> list[list[str]]:
    """Element sort keys grouped into sorted runs, each readable by one range Query.

    Keys of one (namespace, epoch) whose sequence numbers are at most :data:`ELEMENT_GAP`
    apart share a run (an append-only list is one run, whatever its length).
    """
    by_prefix: dict[str, list[tuple[int, str]]] = {}
    for sk in sks:
        prefix, seq = sk[:-ELEMENT_SEQ_DIGITS], int(sk[-ELEMENT_SEQ_DIGITS:], 16)
        by_prefix.setdefault(prefix, []).append((seq, sk))
    runs: list[list[str]] = []
    for entries in by_prefix.values():
        entries.sort()
        run = [entries[0][1]]
        for (before, _), (seq, sk) in zip(entries, entries[1:], strict=False):
            if seq - before > ELEMENT_GAP:
                runs.append(run)
                run = []
            run.append(sk)
        runs.append(run)
    return runs


class Manifests:
    """TTL bookkeeping: which blobs are list manifests, and what they name (bounded LRU).

    A put keeps alive the elements of the checkpoint's manifests; for the channels it does
    not rewrite it learns them here (from this process' own writes and reads), else reads
    the manifest once (blobs marked ``ls``).
    """

    def __init__(self, capacity: int = MANIFEST_CAPACITY) -> None:
        #: (pk, sk) -> the manifest, or None for a blob known to be plain
        self.known: ThreadLRU[tuple[str, str], Typed | None] = ThreadLRU(capacity)

    def knows(self, pk: str, sk: str) -> bool:
        return (pk, sk) in self.known

    def element_sks(self, pk: str, sk: str) -> list[str]:
        """Sort keys of the elements the blob ``sk`` names (none for a plain blob)."""
        manifest = self.known.get((pk, sk))
        if manifest is None:
            return []
        ns_part = keys.parse_sk(sk).ns
        channel = keys.escape(ELEMENT_CHANNEL)
        return [keys.blob_sk(ns_part, channel, key) for key in manifest_keys(manifest)]

    def set(self, pk: str, sk: str, value: Typed | None) -> None:
        self.known.put((pk, sk), value if is_manifest(value) else None)

    def forget_thread(self, pk: str) -> None:
        self.known.drop_thread(pk)


# --------------------------------------------------------------------------- the store


class DynamoDBCheckpointPort(CheckpointPort):
    """Storage port on one DynamoDB table (see the module docstring for the mapping)."""

    #: payloads are compressed here, per item (``compress`` option, recorded in ``z``),
    #: so the saver leaves them alone
    compresses = True

    def __init__(
        self,
        table: str,
        *,
        key_prefix: str = "graphkeep",
        ttl: float | None = None,
        refresh_ttl_on_read: bool = False,
        compress: bool | int = True,
        run_index: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(table, str) or not table:
            raise ConfigurationError("table_name must be a non-empty string")
        self.table = table
        self.key_prefix = key_prefix
        self.prefix = keys.check_prefix(key_prefix)
        self.ttl = int(math.ceil(ttl)) if ttl else None
        self.slack = max(1, self.ttl // 2) if self.ttl else 0
        self.refresh_on_read = bool(refresh_ttl_on_read) and self.ttl is not None
        self.level = _compress_level(compress)
        self.run_index = run_index
        self.clock = clock
        self.known = Known()
        self.manifests = Manifests()

    # -- keys and items --------------------------------------------------------------

    def thread_key(self, thread_id: str) -> tuple[str, bool]:
        part, shortened = keys.part(thread_id, keys.THREAD_LIMIT)
        return keys.partition(self.prefix, part), shortened

    def run_key(self, run_id: str) -> str:
        return keys.partition(self.prefix, keys.part(run_id, keys.THREAD_LIMIT)[0])

    def _exp(self, now: float) -> int:
        assert self.ttl is not None
        return math.ceil(now + self.ttl + self.slack)

    def _vis(self, now: float) -> int:
        assert self.ttl is not None
        return math.ceil(now + self.ttl)

    def _stamp(self, item: dict[str, Any], now: float, *, head: bool = False) -> None:
        if self.ttl:
            item[EXP] = N(self._exp(now))
            if head:
                item[VIS] = N(self._vis(now))

    def _item(self, pk: str, sk: str, raw: list[str] | None) -> dict[str, Any]:
        item: dict[str, Any] = {PK: S(pk), SK: S(sk)}
        if raw is not None:
            item[RAW] = B(codec.packb(raw))
        return item

    def _head(self, record: CheckpointRecord, now: float) -> Encoded:
        pk, short_thread = self.thread_key(record.thread_id)
        ns, short_ns = keys.part(record.ns)
        cid, short_id = keys.part(record.checkpoint_id)
        raw = [record.thread_id, record.ns, record.checkpoint_id]
        item = self._item(
            pk, keys.head_sk(ns, cid), raw if short_thread or short_ns or short_id else None
        )
        item[HEAD] = B(pack_head(record))
        if record.run_id:
            item[RUN] = S(self.run_key(record.run_id))
        self._stamp(item, now, head=True)
        checkpoint, metadata = record.checkpoint, record.metadata
        payload = codec.packb([checkpoint.tag, checkpoint.data, metadata.tag, metadata.data])
        return attach_payload(
            item,
            payload,
            level=self.level,
            compressible=_plain(record.checkpoint.tag, record.metadata.tag),
            min_bytes=SMALL_COMPRESS_MIN_BYTES,
        )

    def _write(
        self, thread_id: str, ns: str, checkpoint_id: str, write: WriteRecord, now: float
    ) -> Encoded:
        pk, short_thread = self.thread_key(thread_id)
        ns_part, short_ns = keys.part(ns)
        cid, short_id = keys.part(checkpoint_id)
        task, short_task = keys.part(write.task_id)
        shortened = short_thread or short_ns or short_id or short_task
        item = self._item(
            pk,
            keys.write_sk(ns_part, cid, task, write.idx),
            [thread_id, ns, checkpoint_id, write.task_id] if shortened else None,
        )
        self._stamp(item, now)
        payload = codec.packb([write.channel, write.task_path, write.value.tag, write.value.data])
        return attach_payload(
            item,
            payload,
            level=self.level,
            compressible=_plain(write.value.tag),
            min_bytes=SMALL_COMPRESS_MIN_BYTES,
        )

    def _blob(self, thread_id: str, ns: str, blob: BlobRecord, now: float) -> Encoded:
        pk, short_thread = self.thread_key(thread_id)
        sk, short = self._blob_sk(ns, blob.channel, blob.version)
        item = self._item(
            pk, sk, [thread_id, ns, blob.channel, blob.version] if short or short_thread else None
        )
        self._stamp(item, now)
        if is_manifest(blob.value):
            item[LIST] = N(1)
        payload = codec.pack_typed(blob.value)
        return attach_payload(
            item,
            payload,
            level=self.level,
            compressible=_plain(blob.value.tag),
            min_bytes=SMALL_COMPRESS_MIN_BYTES,
        )

    @staticmethod
    def _blob_sk(ns: str, channel: str, version: str) -> tuple[str, bool]:
        ns_part, a = keys.part(ns)
        ch_part, b_ = keys.part(channel)
        ver_part, c = keys.part(version)
        return keys.blob_sk(ns_part, ch_part, ver_part), a or b_ or c

    def _query(
        self,
        pk: str,
        *,
        begins: str | None = None,
        between: tuple[str, str] | None = None,
        forward: bool = True,
        limit: int | None = None,
        projection: Iterable[str] | None = None,
    ) -> dict[str, Any]:
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
            "TableName": self.table,
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

    def _scan(self, projection: Iterable[str] | None = None) -> dict[str, Any]:
        """A consistent Scan of this prefix' checkpoint items (heads and writes)."""
        names = {"#pk": PK, "#sk": SK}
        params: dict[str, Any] = {
            "_op": "scan",
            "TableName": self.table,
            "ConsistentRead": True,
            "FilterExpression": "begins_with(#pk, :p) AND begins_with(#sk, :c)",
            "ExpressionAttributeValues": {
                ":p": S(keys.partition_prefix(self.prefix)),
                ":c": S("c#"),
            },
        }
        if projection is not None:
            wanted = list(dict.fromkeys([PK, SK, *projection]))
            names.update({f"#p{i}": a for i, a in enumerate(wanted)})
            params["ProjectionExpression"] = ", ".join(f"#p{i}" for i in range(len(wanted)))
        params["ExpressionAttributeNames"] = names
        return params

    # -- setup -----------------------------------------------------------------------

    def setup(self) -> Op[None]:
        table = self.table
        try:
            described = yield Call("describe_table", {"TableName": table})
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            try:
                yield Call("create_table", table_definition(table, run_index=self.run_index))
            except ClientError as exc2:
                if error_code(exc2) != "ResourceInUseException":
                    raise
            described = yield Call("describe_table", {"TableName": table})
        waited = 0.0
        while described["Table"].get("TableStatus") not in ("ACTIVE", "UPDATING"):
            if waited >= TABLE_WAIT_SECONDS:
                raise GraphkeepError(
                    f"DynamoDB table {table} is still {described['Table'].get('TableStatus')}"
                    f" after {TABLE_WAIT_SECONDS}s"
                )
            yield Sleep(1.0)
            waited += 1.0
            described = yield Call("describe_table", {"TableName": table})
        _check_table(described["Table"], self.run_index)
        ttl = yield Call("describe_time_to_live", {"TableName": table})
        state = ttl.get("TimeToLiveDescription") or {}
        status = state.get("TimeToLiveStatus", "DISABLED")
        if status in ("ENABLED", "ENABLING"):
            if state.get("AttributeName") not in (None, EXP):
                raise ConfigurationError(
                    f"table {table} has TTL on attribute {state.get('AttributeName')!r};"
                    f" graphkeep writes expiries to {EXP!r}"
                )
        elif status == "DISABLED":
            yield Call(
                "update_time_to_live",
                {
                    "TableName": table,
                    "TimeToLiveSpecification": {"Enabled": True, "AttributeName": EXP},
                },
            )

    # -- put -------------------------------------------------------------------------

    def put_checkpoint(self, record: CheckpointRecord, blobs: list[BlobRecord]) -> Op[None]:
        now = self.clock()
        pk, _ = self.thread_key(record.thread_id)
        bodies = [self._blob(record.thread_id, record.ns, blob, now) for blob in blobs]
        head = self._head(record, now)
        refresh: list[Refresh] = []
        if self.ttl:
            refresh = yield from self._due_for_put(pk, record, blobs, now)
            written = {s(e.item, SK) for e in bodies} | {s(head.item, SK)}
            refresh = [r for r in refresh if r.sk not in written]
        body_items = [c for e in bodies for c in e.chunks] + [e.item for e in bodies]
        yield from self._write_then_head(pk, body_items + head.chunks, head.item, refresh, now)
        if self.ttl:
            exp = self._exp(now)
            for enc, blob in zip(bodies, blobs, strict=True):
                sk = s(enc.item, SK)
                self.known.set_blob(pk, sk, KnownItem(exp, enc.chunk_sks))
                if blob.channel != ELEMENT_CHANNEL:
                    self.manifests.set(pk, sk, blob.value)
            summary = Summary(
                record.ns,
                record.checkpoint_id,
                record.parent_id,
                record.versions,
                record.present,
                record.needs_history,
                record.run_id,
            )
            self.known.set_checkpoint(
                pk, record.ns, KnownCheckpoint(summary, {s(head.item, SK): KnownItem(exp)})
            )

    def _write_then_head(
        self,
        pk: str,
        body: list[dict[str, Any]],
        head: dict[str, Any],
        refresh: list[Refresh],
        now: float,
    ) -> Op[None]:
        puts = [{"Put": {"TableName": self.table, "Item": item}} for item in body]
        updates, update_owners = self._refresh_actions(pk, refresh, now, first_owner=len(puts))
        actions = [*puts, *updates, {"Put": {"TableName": self.table, "Item": head}}]
        owners = [*range(len(puts)), *update_owners, len(puts) + len(refresh)]
        size = sum(size_of(item) for item in body) + size_of(head) + 200 * len(updates)
        if len(actions) <= TRANSACT_MAX_ITEMS and size <= TRANSACT_MAX_BYTES:
            failed = yield from transact(actions, owners)
        else:
            # Too big for one transaction: values first, the head last, so a reader never
            # finds the head without them (a failure in between leaves unreferenced values
            # that a retry rewrites under the same keys).
            yield from batch_write(self.table, [{"PutRequest": {"Item": item}} for item in body])
            failed = {}
            for start in range(0, len(updates), TRANSACT_MAX_ITEMS):
                part = updates[start : start + TRANSACT_MAX_ITEMS]
                part_owners = update_owners[start : start + TRANSACT_MAX_ITEMS]
                failed.update((yield from transact(part, part_owners)))
            yield single({"Put": {"TableName": self.table, "Item": head}})
        self._refreshed(refresh, failed, len(puts), now)

    def _refresh_actions(
        self, pk: str, refresh: list[Refresh], now: float, *, first_owner: int
    ) -> tuple[list[dict[str, Any]], list[int]]:
        actions: list[dict[str, Any]] = []
        owners: list[int] = []
        if not refresh:
            return actions, owners
        exp = self._exp(now)
        for offset, entry in enumerate(refresh):
            for sk in (entry.sk, *entry.info.chunks):
                update = "SET #e = :e"
                values: dict[str, Any] = {":e": N(exp)}
                names = {"#e": EXP, "#sk": SK}
                if entry.vis and sk == entry.sk:
                    update += ", #v = :v"
                    values[":v"] = N(self._vis(now))
                    names["#v"] = VIS
                actions.append(
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": key(pk, sk),
                            "UpdateExpression": update,
                            # never resurrect an item that is gone as a stub
                            "ConditionExpression": "attribute_exists(#sk)",
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": values,
                        }
                    }
                )
                owners.append(first_owner + offset)
        return actions, owners

    def _refreshed(
        self, refresh: list[Refresh], failed: dict[int, Any], first_owner: int, now: float
    ) -> None:
        if not refresh:
            return
        exp = self._exp(now)
        for offset, entry in enumerate(refresh):
            entry.info.exp = None if first_owner + offset in failed else exp

    def _due_for_put(
        self, pk: str, record: CheckpointRecord, blobs: list[BlobRecord], now: float
    ) -> Op[list[Refresh]]:
        """Items the new checkpoint needs whose expiry would fall before its own.

        That includes the list elements its manifests name: those of the manifests it
        writes (all but the new elements were written before) and of unchanged channels.
        """
        new_channels = {x.channel for x in blobs}
        present = set(record.present)
        element_channel = keys.escape(ELEMENT_CHANNEL)
        ns_part = keys.part(record.ns)[0]
        writing = {x.version for x in blobs if x.channel == ELEMENT_CHANNEL}
        elements = [
            keys.blob_sk(ns_part, element_channel, element)
            for blob in blobs
            if blob.channel in present and is_manifest(blob.value)
            for element in manifest_keys(blob.value)
            if element not in writing
        ]
        blob_sks = [
            self._blob_sk(record.ns, ch, record.versions[ch])[0]
            for ch in record.present
            if ch not in new_channels and ch in record.versions
        ]
        ancestors: list[KnownCheckpoint] = []
        channels = set(record.needs_history) - set(record.present)
        if channels and record.parent_id:
            ancestors = yield from self._known_chain(pk, record.ns, record.parent_id, channels, now)
            blob_sks += self._seed_sks(record.ns, ancestors, channels)
        return (yield from self._due(pk, blob_sks, ancestors, now, elements))

    def _due(
        self,
        pk: str,
        blob_sks: list[str],
        ancestors: list[KnownCheckpoint],
        now: float,
        elements: Iterable[str] = (),
    ) -> Op[list[Refresh]]:
        """What is due for a refresh: the blobs, the elements their manifests (and
        ``elements``) name, and the ancestors' items; unknown expiries are read first."""
        assert self.ttl is not None
        blob_sks = list(dict.fromkeys(blob_sks))
        unknown = [
            sk
            for sk in blob_sks
            if self.known.blob(pk, sk) is None or not self.manifests.knows(pk, sk)
        ]
        if unknown:
            yield from self._learn_blobs(pk, unknown)
        named = [e for sk in blob_sks for e in self.manifests.element_sks(pk, sk)]
        plain = set(blob_sks)
        element_sks = [e for e in dict.fromkeys([*elements, *named]) if e not in plain]
        unknown = [sk for sk in element_sks if self.known.blob(pk, sk) is None]
        if unknown:
            yield from self._learn_blobs(pk, unknown)
        threshold = now + self.ttl
        due: list[Refresh] = []
        for sk in blob_sks + element_sks:
            info = self.known.blob(pk, sk)
            if info is not None and info.exp is not None and info.exp < threshold:
                due.append(Refresh(sk, info))
        for ancestor in ancestors:
            for sk, info in ancestor.items.items():
                if info.exp is not None and info.exp < threshold:
                    due.append(Refresh(sk, info))
        return due

    def _seed_sks(self, ns: str, ancestors: list[KnownCheckpoint], channels: set[str]) -> list[str]:
        remaining = set(channels)
        found = []
        for ancestor in ancestors:
            for ch in ancestor.summary.present:
                if ch in remaining and ch in ancestor.summary.versions:
                    remaining.discard(ch)
                    found.append(self._blob_sk(ns, ch, ancestor.summary.versions[ch])[0])
        return found

    def _learn_blobs(self, pk: str, sks: list[str]) -> Op[None]:
        """Expiries and chunk keys of blobs (elements by range), and what manifests name."""
        by_sk = yield from self._read(pk, sks, projection=[EXP, NCHUNKS, DIGEST, LIST])
        manifests: list[str] = []
        for sk in sks:
            item = by_sk.get(sk)
            if item is None:
                self.known.set_blob(pk, sk, None)
            else:
                self.known.set_blob(pk, sk, KnownItem(n(item, EXP), _owner_chunks(item)))
            if is_element_sk(sk):
                continue
            if item is not None and LIST in item:
                manifests.append(sk)
            else:
                self.manifests.set(pk, sk, None)
        if manifests:  # small items: read whole
            full = yield from self._read(pk, manifests)
            for sk in manifests:
                item = full.get(sk)
                value = None
                if item is not None and _has_payload(item):
                    value = codec.unpack_typed(read_payload(item, full))
                self.manifests.set(pk, sk, value)

    def _read(
        self, pk: str, sks: Iterable[str], *, projection: list[str] | None = None
    ) -> Op[dict[str, dict[str, Any]]]:
        """Items of one partition by sort key: long runs of list elements with one Query
        per range (:func:`element_runs`), everything else with BatchGetItem. Without
        ``projection`` the chunks of chunked items come too (one more BatchGetItem when
        there are any)."""
        wanted = dict.fromkeys(sks)
        others = [sk for sk in wanted if not is_element_sk(sk)]
        ranges: list[tuple[str, str]] = []
        for run in element_runs(sk for sk in wanted if is_element_sk(sk)):
            if len(run) < ELEMENT_QUERY_MIN:
                others += run
            else:
                ranges.append((run[0], run[-1]))
        found: dict[str, dict[str, Any]] = {}
        for low, high in ranges:
            params = self._query(pk, between=(low, high), projection=projection)
            items = yield from query_all(params)
            found.update((s(item, SK), item) for item in items if s(item, SK) in wanted)
        if others and projection is None:
            got = yield from self._get({(pk, sk): None for sk in others})
            found.update((sk, item) for (_pk, sk), item in got.items())
        elif others and projection is not None:
            fields = [PK, SK, *projection]
            names = {f"#p{i}": name for i, name in enumerate(fields)}
            items = yield from batch_get(
                self.table,
                [key(pk, sk) for sk in others],
                projection=", ".join(names),
                names=names,
            )
            found.update((s(item, SK), item) for item in items)
        if projection is None:
            chunks = {
                (pk, sk): None
                for item in found.values()
                for sk in chunk_sks(item)
                if sk not in found
            }
            if chunks:
                got = yield from self._get(chunks)
                found.update((sk, item) for (_pk, sk), item in got.items())
        return found

    def _known_chain(
        self, pk: str, ns: str, parent_id: str, channels: set[str], now: float
    ) -> Op[list[KnownCheckpoint]]:
        """The DeltaChannel ancestors from ``parent_id`` rootward (cache first, else read)."""
        chain: list[KnownCheckpoint] = []
        remaining = set(channels)
        checkpoint_id: str | None = parent_id
        seen: set[str] = set()
        learned = False
        while checkpoint_id and remaining and checkpoint_id not in seen:
            seen.add(checkpoint_id)
            known = self.known.checkpoint(pk, ns, checkpoint_id)
            if known is None and not learned:
                learned = True
                ns_part = keys.part(ns)[0]
                yield from self._walk(pk, ns_part, checkpoint_id, remaining, now, keep=True)
                known = self.known.checkpoint(pk, ns, checkpoint_id)
            if known is None:
                break
            chain.append(known)
            remaining.difference_update(known.summary.present)
            checkpoint_id = known.summary.parent_id
        return chain

    # -- put_writes ------------------------------------------------------------------

    def put_writes(
        self, thread_id: str, ns: str, checkpoint_id: str, writes: list[WriteRecord]
    ) -> Op[None]:
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        latest: dict[tuple[str, int], WriteRecord] = {}
        for write in writes:  # one item per (task, idx): the last special write wins
            latest[(write.task_id, write.idx)] = write
        encoded = [(w, self._write(thread_id, ns, checkpoint_id, w, now)) for w in latest.values()]
        prewritten: dict[int, Encoded] = {}
        batches: list[tuple[list[dict[str, Any]], list[int]]] = []
        actions: list[dict[str, Any]] = []
        owners: list[int] = []
        size = 0
        for group, (write, enc) in enumerate(encoded):
            put: dict[str, Any] = {"TableName": self.table, "Item": enc.item}
            if not write.special:
                put["ConditionExpression"] = "attribute_not_exists(#sk)"
                put["ExpressionAttributeNames"] = {"#sk": SK}
                put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            chunk_bytes = sum(size_of(c) for c in enc.chunks)
            mine = [{"Put": {"TableName": self.table, "Item": c}} for c in enc.chunks]
            if chunk_bytes > TRANSACT_MAX_BYTES // 2:
                prewritten[group] = enc  # chunks go first with BatchWriteItem
                mine = []
                chunk_bytes = 0
            mine.append({"Put": put})
            mine_size = chunk_bytes + size_of(enc.item)
            too_many = len(actions) + len(mine) > TRANSACT_MAX_ITEMS
            if actions and (too_many or size + mine_size > TRANSACT_MAX_BYTES):
                batches.append((actions, owners))
                actions, owners, size = [], [], 0
            actions += mine
            owners += [group] * len(mine)
            size += mine_size
        if actions:
            batches.append((actions, owners))
        if prewritten:
            yield from batch_write(
                self.table,
                [{"PutRequest": {"Item": c}} for enc in prewritten.values() for c in enc.chunks],
            )
        failed: dict[int, Any] = {}
        for batch_actions, batch_owners in batches:
            failed.update((yield from transact(batch_actions, batch_owners)))
        stale = [
            sk
            for group, old in failed.items()
            if group in prewritten
            and (old is None or old.get(DIGEST) != prewritten[group].item[DIGEST])
            for sk in prewritten[group].chunk_sks
        ]
        if stale:  # our chunks of a regular write that was already stored differently
            yield from batch_write(
                self.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in stale]
            )
        if self.ttl:
            exp = self._exp(now)
            known: dict[str, KnownItem] = {}
            for group, (_write, enc) in enumerate(encoded):
                if group in failed:
                    old = failed[group]
                    info = KnownItem(n(old, EXP), _owner_chunks(old)) if old else KnownItem(0)
                else:
                    info = KnownItem(exp, enc.chunk_sks)
                known[s(enc.item, SK)] = info
            self.known.add_writes(pk, ns, checkpoint_id, known)

    # -- reads -----------------------------------------------------------------------

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        ns_part = keys.part(ns)[0]
        coll: Collection | None
        if checkpoint_id:
            begins = keys.head_sk(ns_part, keys.part(checkpoint_id)[0])
            items = yield from query_all(self._query(pk, begins=begins))
            coll = next(iter(collections_of(items).values()), None)
        else:
            coll = yield from self._latest(pk, ns_part)
        if coll is None or coll.head is None or head_hidden(coll.head, now):
            return None
        (loaded,) = yield from self._complete([coll], now)
        if self.refresh_on_read:
            yield from self._refresh_on_read(pk, coll, loaded, now)
        return loaded

    def _latest(self, pk: str, ns_part: str) -> Op[Collection | None]:
        """The newest head of a namespace with its writes, reading as little as possible.

        A descending Query yields the newest checkpoint's writes, then its head. The first
        page is small; if it ends inside that checkpoint, the next Query is narrowed to it.
        """
        broad = self._query(
            pk, begins=keys.namespace_prefix(ns_part), forward=False, limit=LATEST_FIRST_PAGE
        )
        params = broad
        grouping = _Descending()
        start: dict[str, Any] | None = None
        narrowed = False
        while True:
            page = yield from query_page(params, start)
            items = page.get("Items", [])
            for item in items:
                found = grouping.feed(pk, item)
                if found is not None:
                    return found
            start = page.get("LastEvaluatedKey")
            if start is None:
                if not narrowed or not items and grouping.ident is None:
                    return None
                # the narrowed checkpoint has writes but no head: continue below it
                params, narrowed = broad, False
                start = key(pk, s((items or grouping.writes)[-1], SK))
                grouping = _Descending()
                continue
            if grouping.ident is not None and not narrowed:
                _pk, ns, cid = grouping.ident
                params = self._query(pk, begins=keys.head_sk(ns, cid), forward=False)
                narrowed = True

    def _complete(self, colls: list[Collection], now: float) -> Op[list[Loaded]]:
        """Fetch the channel values and chunks the heads and writes refer to."""
        wanted: dict[tuple[str, str], None] = {}
        plans = []
        for coll in colls:
            assert coll.head is not None
            names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
            summary = summary_of(names.ns, names.checkpoint_id, coll.head)
            blob_sks: dict[str, str] = {}
            for ch in summary.present:
                version = summary.versions.get(ch)
                if version is not None:
                    blob_sks[ch] = self._blob_sk(names.ns, ch, version)[0]
                    wanted[(coll.pk, blob_sks[ch])] = None
            for sk in chunk_sks(coll.head):
                wanted[(coll.pk, sk)] = None
            writes = [w for w in coll.writes if not hidden(w, now)]
            for write in writes:
                for sk in chunk_sks(write):
                    wanted[(coll.pk, sk)] = None
            plans.append((coll, names, summary, blob_sks, writes))
        got = yield from self._get(wanted)
        more: dict[tuple[str, str], None] = {}
        for (pk, _sk), item in got.items():
            for sk in chunk_sks(item):
                if (pk, sk) not in got:
                    more[(pk, sk)] = None
        if more:
            got.update((yield from self._get(more)))
        by_pk: dict[str, dict[str, dict[str, Any]]] = {}
        for (pk, sk), item in got.items():
            by_pk.setdefault(pk, {})[sk] = item
        loaded = []
        for coll, names, summary, blob_sks, writes in plans:
            assert coll.head is not None
            fetched = by_pk.get(coll.pk, {})
            values: dict[str, Typed] = {}
            for ch, sk in blob_sks.items():
                item = fetched.get(sk)
                if item is not None and not hidden(item, now) and _has_payload(item):
                    values[ch] = codec.unpack_typed(read_payload(item, fetched))
            record = self._record(names, summary, coll.head, fetched)
            loaded.append(Loaded(record, values, [self._write_record(w, fetched) for w in writes]))
            if self.ttl:
                self._remember(coll, summary, fetched, blob_sks)
                for ch, sk in blob_sks.items():
                    self.manifests.set(coll.pk, sk, values.get(ch))
        return loaded

    def _get(self, wanted: dict[tuple[str, str], None]) -> Op[dict[tuple[str, str], Any]]:
        if not wanted:
            return {}
        got = yield from batch_get(self.table, [key(pk, sk) for pk, sk in wanted])
        return {(s(item, PK), s(item, SK)): item for item in got}

    def _record(
        self,
        names: Names,
        summary: Summary,
        head: dict[str, Any],
        chunks: dict[str, dict[str, Any]],
    ) -> CheckpointRecord:
        ctag, cdata, mtag, mdata = codec.unpackb(read_payload(head, chunks))
        return CheckpointRecord(
            thread_id=names.thread,
            ns=names.ns,
            checkpoint_id=names.checkpoint_id,
            parent_id=summary.parent_id,
            versions=summary.versions,
            present=summary.present,
            needs_history=summary.needs_history,
            run_id=summary.run_id,
            checkpoint=Typed(ctag, cdata),
            metadata=Typed(mtag, mdata),
        )

    @staticmethod
    def _write_record(item: dict[str, Any], chunks: dict[str, dict[str, Any]]) -> WriteRecord:
        parsed = keys.parse_sk(s(item, SK))
        names = names_of(item, parsed)
        channel, task_path, tag, data = codec.unpackb(read_payload(item, chunks))
        return WriteRecord(names.task_id, parsed.idx, channel, task_path, Typed(tag, data))

    def _remember(
        self,
        coll: Collection,
        summary: Summary,
        fetched: dict[str, dict[str, Any]],
        blob_sks: dict[str, str],
    ) -> None:
        assert coll.head is not None
        self.known.set_checkpoint(coll.pk, summary.ns, self._known_checkpoint(coll, summary))
        for sk in blob_sks.values():
            item = fetched.get(sk)
            info = KnownItem(n(item, EXP), _owner_chunks(item)) if item is not None else None
            self.known.set_blob(coll.pk, sk, info)

    @staticmethod
    def _known_checkpoint(coll: Collection, summary: Summary) -> KnownCheckpoint:
        assert coll.head is not None
        items = {s(coll.head, SK): KnownItem(n(coll.head, EXP))}
        for write in coll.writes:
            items[s(write, SK)] = KnownItem(n(write, EXP), chunk_sks(write))
        return KnownCheckpoint(summary, items)

    def _refresh_on_read(self, pk: str, coll: Collection, loaded: Loaded, now: float) -> Op[None]:
        """``refresh_ttl_on_read``: a read keeps the checkpoint (and what it needs) alive."""
        assert self.ttl is not None and coll.head is not None
        vis = n(coll.head, VIS)
        if vis is None or vis >= now + self.ttl - self.slack:
            return  # refreshed (or written) less than a slack period ago
        record = loaded.record
        known = self.known.checkpoint(pk, record.ns, record.checkpoint_id)
        if known is None:
            return
        head_sk = s(coll.head, SK)
        refresh = [Refresh(head_sk, known.items[head_sk], vis=True)]
        refresh += [Refresh(sk, info) for sk, info in known.items.items() if sk != head_sk]
        blob_sks = [self._blob_sk(record.ns, ch, record.versions[ch])[0] for ch in loaded.blobs]
        ancestors: list[KnownCheckpoint] = []
        channels = set(record.needs_history) - set(record.present)
        if channels and record.parent_id:
            ancestors = yield from self._known_chain(pk, record.ns, record.parent_id, channels, now)
            blob_sks += self._seed_sks(record.ns, ancestors, channels)
        refresh += yield from self._due(pk, blob_sks, ancestors, now)
        actions, owners = self._refresh_actions(pk, refresh, now, first_owner=0)
        failed: dict[int, Any] = {}
        for start in range(0, len(actions), TRANSACT_MAX_ITEMS):
            failed.update(
                (
                    yield from transact(
                        actions[start : start + TRANSACT_MAX_ITEMS],
                        owners[start : start + TRANSACT_MAX_ITEMS],
                    )
                )
            )
        self._refreshed(refresh, failed, 0, now)

    # -- list ------------------------------------------------------------------------

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        now = self.clock()
        if query.thread_id is None or query.ns is None:
            return (yield from self._list_materialized(query, cursor, page_size, now))
        if query.checkpoint_id is not None:
            if query.before and query.checkpoint_id >= query.before:
                return [], None
            exact = yield from self.load(query.thread_id, query.ns, query.checkpoint_id)
            return ([exact] if exact else []), None
        pk, _ = self.thread_key(query.thread_id)
        ns_part = keys.part(query.ns)[0]
        upper = cursor if cursor is not None else query.before
        lower = keys.namespace_prefix(ns_part)
        limit = None if page_size >= LIST_PAGE_FULL else page_size * 4 + 4
        if upper:
            bound = keys.before_bound(ns_part, keys.part(upper)[0])
            params = self._query(pk, between=(lower, bound), forward=False, limit=limit)
        else:
            params = self._query(pk, begins=lower, forward=False, limit=limit)
        grouping = _Descending()
        colls: list[Collection] = []
        start: dict[str, Any] | None = None
        exhausted = False
        while len(colls) < page_size:
            page = yield from query_page(params, start)
            for item in page.get("Items", []):
                found = grouping.feed(pk, item)
                if found is not None and found.head is not None:
                    if not head_hidden(found.head, now):
                        colls.append(found)
                        if len(colls) >= page_size:
                            break
            start = page.get("LastEvaluatedKey")
            if start is None:
                exhausted = len(colls) < page_size or not page.get("Items")
                break
        loaded = yield from self._complete(colls, now)
        if exhausted or not loaded:
            return loaded, None
        return loaded, loaded[-1].record.checkpoint_id

    def _list_materialized(
        self, query: ListQuery, cursor: Any, page_size: int, now: float
    ) -> Op[tuple[list[Loaded], Any]]:
        # A thread without a namespace reads the whole partition; no thread at all is a
        # Scan of the table (documented as costly). Both are sorted by id, newest first.
        if cursor is None:
            if query.thread_id is None:
                items = yield from query_all(self._scan())
            else:
                pk, _ = self.thread_key(query.thread_id)
                items = yield from query_all(self._query(pk, begins="c#"))
            entries: list[tuple[str, str, Collection]] = []
            for coll in collections_of(items).values():
                if coll.head is None or head_hidden(coll.head, now):
                    continue
                names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
                if query.before is not None and not names.checkpoint_id < query.before:
                    continue
                if query.checkpoint_id is not None and names.checkpoint_id != query.checkpoint_id:
                    continue
                if query.ns is not None and names.ns != query.ns:
                    continue
                entries.append((names.checkpoint_id, names.ns, coll))
            entries.sort(key=lambda e: (e[0], e[1]), reverse=True)
            cursor = (entries, 0)
        entries, pos = cursor
        page = entries[pos : pos + page_size]
        loaded = yield from self._complete([coll for _, _, coll in page], now)
        pos += len(page)
        return loaded, ((entries, pos) if pos < len(entries) else None)

    # -- blobs by key (list elements, manifests) ---------------------------------------

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        """Blobs by (ns, channel, version): list elements with one Query per range of
        their sort keys (an append-only list is one range), others with BatchGetItem,
        chunks reassembled and payloads decompressed as on every read."""
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        wanted = {self._blob_sk(ns, ch, version)[0]: (ns, ch, version) for ns, ch, version in keys}
        fetched = yield from self._read(pk, wanted)
        found: dict[tuple[str, str, str], Typed] = {}
        for sk, ident in wanted.items():
            item = fetched.get(sk)
            if item is None or hidden(item, now) or not _has_payload(item):
                continue
            found[ident] = codec.unpack_typed(read_payload(item, fetched))
            if self.ttl:
                self.known.set_blob(pk, sk, KnownItem(n(item, EXP), _owner_chunks(item)))
                if not is_element_sk(sk):
                    self.manifests.set(pk, sk, found[ident])
        return found

    # -- DeltaChannel ancestor walk ---------------------------------------------------

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]:
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        ns_part = keys.part(ns)[0]
        target, ancestors = yield from self._walk(
            pk, ns_part, checkpoint_id, set(channels), now, keep=bool(self.ttl)
        )
        if target is None or target.head is None:
            return Chain(None, [], {}, {})
        summaries: list[Summary] = []
        wanted: dict[tuple[str, str], None] = {}
        seeds: dict[tuple[str, str], str] = {}
        remaining = set(channels)
        for coll in ancestors:
            assert coll.head is not None
            names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
            summary = summary_of(names.ns, names.checkpoint_id, coll.head)
            summaries.append(summary)
            for ch in summary.present:
                if ch in remaining and ch in summary.versions:
                    remaining.discard(ch)
                    sk = self._blob_sk(ns, ch, summary.versions[ch])[0]
                    seeds[(ch, summary.versions[ch])] = sk
                    wanted[(pk, sk)] = None
            for write in coll.writes:
                for sk in chunk_sks(write):
                    wanted[(pk, sk)] = None
        got = yield from self._get(wanted)
        more = {(pk, sk): None for (_, _), item in got.items() for sk in chunk_sks(item)}
        more = {k: None for k in more if k not in got}
        if more:
            got.update((yield from self._get(more)))
        fetched = {sk: item for (_pk, sk), item in got.items()}
        blobs: dict[tuple[str, str], Typed] = {}
        for ident, sk in seeds.items():
            item = fetched.get(sk)
            if item is not None and not hidden(item, now) and _has_payload(item):
                blobs[ident] = codec.unpack_typed(read_payload(item, fetched))
                if self.ttl:
                    self.known.set_blob(pk, sk, KnownItem(n(item, EXP), _owner_chunks(item)))
                    self.manifests.set(pk, sk, blobs[ident])
        writes = {
            summary.checkpoint_id: [
                self._write_record(w, fetched) for w in coll.writes if not hidden(w, now)
            ]
            for summary, coll in zip(summaries, ancestors, strict=True)
        }
        target_names = names_of(target.head, keys.parse_sk(s(target.head, SK)))
        chain = Chain(target_names.checkpoint_id, summaries, writes, blobs)
        if self.refresh_on_read and summaries:
            known = [
                k
                for k in (self.known.checkpoint(pk, ns, x.checkpoint_id) for x in summaries)
                if k is not None
            ]
            refresh = yield from self._due(pk, list(seeds.values()), known, now)
            actions, owners = self._refresh_actions(pk, refresh, now, first_owner=0)
            failed: dict[int, Any] = {}
            for start in range(0, len(actions), TRANSACT_MAX_ITEMS):
                failed.update(
                    (
                        yield from transact(
                            actions[start : start + TRANSACT_MAX_ITEMS],
                            owners[start : start + TRANSACT_MAX_ITEMS],
                        )
                    )
                )
            self._refreshed(refresh, failed, 0, now)
        return chain

    def _walk(
        self,
        pk: str,
        ns_part: str,
        checkpoint_id: str | None,
        channels: set[str],
        now: float,
        *,
        keep: bool,
    ) -> Op[tuple[Collection | None, list[Collection]]]:
        """The target collection and its ancestors (parent first) until ``channels`` are seeded.

        One descending Query from the target down: collections of other branches are passed
        over, parents are followed by id. ``keep`` records what was read in the TTL cache
        (the target included, as the first link of a chain a put may need).
        """
        lower = keys.namespace_prefix(ns_part)
        if checkpoint_id:
            upper = keys.through_bound(ns_part, keys.part(checkpoint_id)[0])
            params = self._query(pk, between=(lower, upper), forward=False, limit=CHAIN_FIRST_PAGE)
        else:
            params = self._query(pk, begins=lower, forward=False, limit=CHAIN_FIRST_PAGE)
        grouping = _Descending()
        target: Collection | None = None
        ancestors: list[Collection] = []
        expected: str | None = None
        remaining = set(channels)
        start: dict[str, Any] | None = None
        done = False
        while not done:
            page = yield from query_page(params, start)
            for item in page.get("Items", []):
                coll = grouping.feed(pk, item)
                if coll is None or coll.head is None:
                    continue
                if target is None:
                    target_names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
                    if checkpoint_id and target_names.checkpoint_id != checkpoint_id:
                        done = True
                        break
                    if hidden(coll.head, now):
                        done = True
                        break
                    target = coll
                    parent = summary_of("", "", coll.head).parent_id
                    expected = keys.part(parent)[0] if parent else None
                    if expected is None or not remaining:
                        done = True
                        break
                    continue
                assert expected is not None
                if coll.checkpoint_id > expected:
                    continue  # another branch
                if coll.checkpoint_id < expected or hidden(coll.head, now):
                    done = True  # the expected ancestor is not stored
                    break
                ancestors.append(coll)
                summary = summary_of("", "", coll.head)
                remaining.difference_update(summary.present)
                expected = keys.part(summary.parent_id)[0] if summary.parent_id else None
                if expected is None or not remaining:
                    done = True
                    break
            start = page.get("LastEvaluatedKey")
            if start is None:
                break
            params = {k: v for k, v in params.items() if k != "Limit"}
        if keep and self.ttl:
            for coll in ([target] if target else []) + ancestors:
                assert coll.head is not None
                names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
                summary = summary_of(names.ns, names.checkpoint_id, coll.head)
                self.known.set_checkpoint(pk, names.ns, self._known_checkpoint(coll, summary))
        return target, ancestors

    # -- delete, inventory, runs, copy -----------------------------------------------

    def delete_thread(self, thread_id: str) -> Op[None]:
        pk, _ = self.thread_key(thread_id)
        items = yield from query_all(self._query(pk, projection=[]))
        # heads first: a concurrent reader never sees a head that lost its writes or values;
        # a held lease stays (it belongs to a run, not to the data)
        sks = sorted((s(i, SK) for i in items if s(i, SK) != keys.LOCK_SK), key=_delete_order)
        yield from batch_write(self.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in sks])
        self.known.forget_thread(pk)
        self.manifests.forget_thread(pk)

    def inventory(self, thread_id: str) -> Op[Inventory]:
        pk, _ = self.thread_key(thread_id)
        items = yield from query_all(self._query(pk, projection=[HEAD, RAW]))
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
        self,
        thread_id: str,
        checkpoints: list[tuple[str, str]],
        blobs: list[tuple[str, str, str]],
    ) -> Op[None]:
        pk, _ = self.thread_key(thread_id)
        doomed = set(checkpoints)
        garbage = set(blobs)
        items = yield from query_all(self._query(pk, projection=[RAW]))
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
        yield from batch_write(
            self.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in ordered]
        )

    def find_runs(self, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]:
        rows: list[dict[str, Any]] = []
        try:
            for run_id in dict.fromkeys(run_ids):
                rows += yield from query_all(
                    {
                        "TableName": self.table,
                        "IndexName": RUN_INDEX,
                        "KeyConditionExpression": "#rk = :r",
                        "ExpressionAttributeNames": {"#rk": RUN},
                        "ExpressionAttributeValues": {":r": S(self.run_key(run_id))},
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
                self.table,
                RUN_INDEX,
            )
            rows = []
            for group in groups(list(dict.fromkeys(run_ids)), 100):
                values = {f":r{i}": S(self.run_key(r)) for i, r in enumerate(group)}
                rows += yield from query_all(
                    {
                        "_op": "scan",
                        "TableName": self.table,
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

    def export_thread(self, thread_id: str) -> Op[ThreadDump]:
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        items = yield from query_all(self._query(pk))
        by_sk = {s(item, SK): item for item in items}
        colls = collections_of(items)
        summaries: dict[tuple[str, str], tuple[Names, Summary, Collection]] = {}
        for coll in colls.values():
            if coll.head is None or hidden(coll.head, now):
                continue
            names = names_of(coll.head, keys.parse_sk(s(coll.head, SK)))
            summary = summary_of(names.ns, names.checkpoint_id, coll.head)
            summaries[(names.ns, names.checkpoint_id)] = (names, summary, coll)
        # visible heads, plus the hidden ancestors their DeltaChannels still need
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
            dump.checkpoints.append(self._record(names, summary, coll.head, by_sk))
            for write in coll.writes:
                if not hidden(write, now):
                    record = self._write_record(write, by_sk)
                    dump.writes.append((names.ns, names.checkpoint_id, record))
        for ident in headless:  # writes that arrived before (or without) their checkpoint
            for write in colls[ident].writes:
                if not hidden(write, now):
                    names = names_of(write, keys.parse_sk(s(write, SK)))
                    record = self._write_record(write, by_sk)
                    dump.writes.append((names.ns, names.checkpoint_id, record))
        for sk, item in by_sk.items():
            parsed = keys.parse_sk(sk)
            if parsed.kind == "b" and not hidden(item, now) and _has_payload(item):
                names = names_of(item, parsed)
                value = codec.unpack_typed(read_payload(item, by_sk))
                dump.blobs.append((names.ns, BlobRecord(names.channel, names.version, value)))
        return dump

    def import_thread(self, thread_id: str, dump: ThreadDump) -> Op[None]:
        now = self.clock()
        body: list[dict[str, Any]] = []
        for ns, blob in dump.blobs:
            enc = self._blob(thread_id, ns, blob, now)
            body += [*enc.chunks, enc.item]
        for ns, cid, write in dump.writes:
            enc = self._write(thread_id, ns, cid, write, now)
            body += [*enc.chunks, enc.item]
        heads: list[dict[str, Any]] = []
        for record in dump.checkpoints:
            enc = self._head(record.renamed(thread_id), now)
            body += enc.chunks
            heads.append(enc.item)
        yield from batch_write(self.table, [{"PutRequest": {"Item": item}} for item in body])
        yield from batch_write(self.table, [{"PutRequest": {"Item": item}} for item in heads])

    def list_threads(self, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]:
        items = yield from query_all(self._scan(projection=[RAW]))
        threads = set()
        for item in items:
            parsed = keys.parse_sk(s(item, SK))
            if parsed.kind == "c":
                threads.add(names_of(item, parsed).thread)
        return sorted(threads), None

    # -- watch: the thread's commits by checkpoint id ----------------------------------

    def _heads(
        self, pk: str, *, between: tuple[str, str] | None, forward: bool, limit: int | None
    ) -> dict[str, Any]:
        """A consistent Query for checkpoint heads only, returning their keys (no payload).

        Heads are the ``c#`` items carrying ``h``; a write of the same range lacks it, so
        the filter drops writes (they still count towards ``Limit`` and the read units:
        DynamoDB filters after reading).
        """
        if between is None:
            params = self._query(
                pk, begins="c#", forward=forward, limit=limit, projection=[RAW, VIS, EXP]
            )
        else:
            params = self._query(
                pk, between=between, forward=forward, limit=limit, projection=[RAW, VIS, EXP]
            )
        params["ExpressionAttributeNames"]["#h"] = HEAD
        params["FilterExpression"] = "attribute_exists(#h)"
        return params

    def _commit_of(self, item: dict[str, Any], now: float) -> tuple[str, str] | None:
        """``(ns, checkpoint_id)`` of a head item; None when its TTL hides it."""
        if head_hidden(item, now):
            return None
        names = names_of(item, keys.parse_sk(s(item, SK)))
        return names.ns, names.checkpoint_id

    def _all_commits(self, pk: str, now: float) -> Op[list[tuple[str, str]]]:
        """Every visible head of the thread, any namespace, ascending by (id, namespace)."""
        items = yield from query_all(self._heads(pk, between=None, forward=True, limit=None))
        found = [c for c in (self._commit_of(i, now) for i in items) if c is not None]
        found.sort(key=lambda c: (c[1], c[0]))
        return found

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        """The thread's heads with an id above ``above``, ascending, at most ``limit``.

        One namespace: one consistent Query ``BETWEEN c#<ns>#<above>#~ AND c#<ns>$`` (just
        past ``above`` and its writes, up to the namespace's end) returning keys only,
        followed through ``LastEvaluatedKey`` only while fewer than ``limit`` heads were
        found. Nothing new costs one Query that reads no item (one read unit).

        ``ns=None``: the sort key puts the namespace before the id, so ids of different
        namespaces interleave and no key range is "every id above X". The whole ``c#``
        range of the thread is read (keys only, every page) and sorted by (id, namespace)
        here; the first ``limit`` above ``above`` are returned. Paging on the id is then
        exact: the poller asks again above the last id of a full page and this re-reads and
        re-sorts. The cost grows with the thread's checkpoint items (heads and writes, as
        billed by size), so watching one namespace is the cheap form on long threads.
        """
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        if ns is None:
            everything = yield from self._all_commits(pk, now)
            return [c for c in everything if above is None or c[1] > above][:limit]
        ns_part = keys.part(ns)[0]
        low = (
            keys.namespace_prefix(ns_part)
            if above is None
            else keys.through_bound(ns_part, keys.part(above)[0])
        )
        params = self._heads(
            pk, between=(low, keys.namespace_end(ns_part)), forward=True, limit=None
        )
        found: list[tuple[str, str]] = []
        start: dict[str, Any] | None = None
        while True:
            page = yield from query_page(params, start)
            for item in page.get("Items", []):
                commit = self._commit_of(item, now)
                if commit is not None and (above is None or commit[1] > above):
                    found.append(commit)
            start = page.get("LastEvaluatedKey")
            if not start or len(found) >= limit:
                break
        found.sort(key=lambda c: c[1])  # key order is id order unless an id was shortened
        return found[:limit]

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        """The highest visible checkpoint id of the thread (in ``ns``, or any when None).

        One namespace: a descending Query of the namespace's heads (small first page: the
        newest checkpoint's writes come before its head), paged only until a head shows up.
        ``ns=None`` reads the thread's ``c#`` range like :meth:`commits`.
        """
        now = self.clock()
        pk, _ = self.thread_key(thread_id)
        if ns is None:
            everything = yield from self._all_commits(pk, now)
            return max((c[1] for c in everything), default=None)
        ns_part = keys.part(ns)[0]
        bounds = (keys.namespace_prefix(ns_part), keys.namespace_end(ns_part))
        params = self._heads(pk, between=bounds, forward=False, limit=LATEST_FIRST_PAGE)
        start: dict[str, Any] | None = None
        newest: str | None = None
        while True:
            page = yield from query_page(params, start)
            for item in page.get("Items", []):
                commit = self._commit_of(item, now)
                if commit is None:
                    continue
                if newest is None and keys.HASH_MARK not in s(item, SK):
                    return commit[1]
                # a shortened id sorts by its head only: then every head is compared
                newest = commit[1] if newest is None else max(newest, commit[1])
            start = page.get("LastEvaluatedKey")
            if not start:
                return newest

    # -- per-thread lease (conditional writes on one item of the thread's partition) ---

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        now_ms = int(self.clock() * 1000)
        pk, _ = self.thread_key(thread_id)
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
                    "TableName": self.table,
                    "Item": item,
                    # free, expired, or already ours (a retry after a lost reply)
                    "ConditionExpression": (
                        "attribute_not_exists(#sk) OR #u < :now OR #t = :token"
                    ),
                    "ExpressionAttributeNames": {"#sk": SK, "#u": LOCK_UNTIL, "#t": LOCK_TOKEN},
                    "ExpressionAttributeValues": {":now": N(now_ms), ":token": S(token)},
                },
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        pk, _ = self.thread_key(thread_id)
        try:
            yield Call(
                "delete_item",
                {
                    "TableName": self.table,
                    "Key": key(pk, keys.LOCK_SK),
                    "ConditionExpression": "#t = :t AND #u >= :now",
                    "ExpressionAttributeNames": {"#t": LOCK_TOKEN, "#u": LOCK_UNTIL},
                    "ExpressionAttributeValues": {
                        ":t": S(token),
                        ":now": N(int(self.clock() * 1000)),
                    },
                },
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        now_ms = int(self.clock() * 1000)
        pk, _ = self.thread_key(thread_id)
        until = now_ms + ttl_ms
        try:
            yield Call(
                "update_item",
                {
                    "TableName": self.table,
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


def _owner_chunks(item: dict[str, Any]) -> tuple[str, ...]:
    """Chunk keys of an owner item read with or without its payload attribute."""
    count = n(item, NCHUNKS)
    if not count or VALUE in item or DIGEST not in item:
        return ()
    return chunk_sks(item)


def _has_payload(item: dict[str, Any]) -> bool:
    return VALUE in item or NCHUNKS in item


def _delete_order(sk: str) -> tuple[int, str]:
    parsed = keys.parse_sk(sk)
    return ({"c": 0, "w": 1, "b": 2, "k": 3}.get(parsed.kind, 4), sk)


def _compress_level(compress: bool | int | None) -> int | None:
    if compress is None or compress is False:
        return None
    if compress is True:
        return DEFAULT_COMPRESS_LEVEL
    if isinstance(compress, int) and 0 <= compress <= 9:
        return compress or None
    raise ConfigurationError(f"compress must be True, False or a zlib level 1-9, got {compress!r}")


def _check_table(table: dict[str, Any], run_index: bool) -> None:
    schema = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    if schema != {PK: "HASH", SK: "RANGE"} or types.get(PK) != "S" or types.get(SK) != "S":
        raise ConfigurationError(
            f"table {table.get('TableName')} has key schema {schema}; graphkeep needs"
            f" {PK!r} (S, HASH) and {SK!r} (S, RANGE). Use another table name, or create it"
            " from DynamoDBSaver.table_definition()"
        )
    indexes = {i.get("IndexName") for i in table.get("GlobalSecondaryIndexes", []) or []}
    if run_index and RUN_INDEX not in indexes:
        log.warning(
            "table %s has no %r index; delete_for_runs will scan the table",
            table.get("TableName"),
            RUN_INDEX,
        )
