"""Run event log on DynamoDB: :class:`DynamoDBEventLog` (boto3) and :class:`AsyncDynamoDBEventLog`.

Same table and URLs as the savers and the node cache::

    with graphkeep.connect_events("dynamodb://graphkeep?region=eu-west-1") as events:
        events.append("run-1", {"type": "token", "text": "Hel"})       # -> "1"

One partition per run, ordered items in it (``P`` = escaped ``key_prefix``)::

    pk  P#e1#<run id>   (never P#1#.. of the saver, P#n1#.. of the cache, P#m1#.. of the store)

    sk  e#<last seq, 19 digits>   consecutive events packed in one item:
        n   N   how many (the item holds seqs last-n+1 .. last)
        v   B   msgpack list of the events' JSON bytes (``z`` = "zlib" when compressed;
                with ``encryption=`` each sealed at its run and seq: graphkeep.events.sealing)
        cl  N   1 when the item's last event is the run's close event
        exp N   epoch seconds, DynamoDB's TTL attribute (only with ``ttl``)
    sk  m#                        the run's meta item:
        hi  N   highest seq written      act N  epoch ms of the last append / heartbeat
        st  S   close status, once closed tr  N  highest seq dropped by retention
        rf  N   exp every event item has at least (sliding TTL bookkeeping)
        xm  N   epoch ms the run expires (act + ttl)       exp N  TTL attribute

Event ids are the decimal sequence numbers ``"1"``, ``"2"``, … per run.

**Appends.** ``append``/``append_many`` pack consecutive events into items of up to about
350 KB and ``max_events / 10`` events (an event is at most 256 KiB of JSON, so one always
fits; packed items from 4 KiB are zlib-compressed when that saves 10 %) and write them with **one
TransactWriteItems** per 99 items / 4 MB: the item Puts plus an Update of the meta item
that sets ``hi`` to the new last seq, conditioned on ``hi`` being the previous last seq,
the run not closed and not expired. The meta item is thus the run's sequencer: two writers
racing for the same seqs are serialised by DynamoDB, and the loser's transaction fails
whole (nothing written), returns the meta item (``ReturnValuesOnConditionCheckFailure``)
and is re-sent with the next free seq: ids never collide or leave gaps, and no extra read
is needed. Each port remembers its runs' last seq (bounded LRU): a first append to a new
run succeeds at once, to a run another writer moved on costs one failed attempt more.
A closed run fails the condition too: :class:`~graphkeep.errors.RunClosed`, nothing
written. ``close`` is an append whose meta Update also sets ``st``. 100 small events cost
one request (one item + the meta Update), where one item per event could not fit in one
transaction at all (100 actions at most). A batch over 4 MB goes out as several
transactions in order (events of a concurrent writer may land between them).

Why a condition on the meta item rather than ``attribute_not_exists`` on each event item
(plus a ConditionCheck of the meta item): every append marks the run active, so the meta
item is written anyway, and its ``hi`` both detects a lost race and tells the next free
seq; a per-item condition would not catch a writer whose remembered seq lies below what
retention already deleted (its put would succeed and reuse an id), and one item per event
could not put 100 events in one transaction.

**Reads.** ``read`` is one strongly consistent Query ``sk BETWEEN e#<after + 1> AND
e#<max>`` (items are keyed by their *last* seq, so the item holding ``after + 1`` is the
first returned; its events up to ``after`` are skipped here). Not blocking: followers poll
(``poll_interval``, backing off to ``max_poll_interval`` when idle); an idle poll reads no
item (one read unit). ``state`` is one GetItem of the meta item.

**Key rotation.** ``run_ids`` Scans for this prefix's meta items (costly on a big shared
table), ``records`` Queries a run's event items, and ``rewrite`` puts each item back as read with
its new ``v`` (and ``z``), one PutItem conditioned on ``v`` and ``exp`` being those read, so
a trim or a TTL slide meanwhile is never undone (the item is read again); keys, ``n``,
``cl`` and ``exp`` stay.

**Retention.** ``max_events``: the writer applies
:meth:`~graphkeep.events.port.Retention.trim_through` after each append (one Query for the
keys of items wholly below the cut, ``tr`` raised in the meta item first, then
BatchWriteItem deletes): once a run keeps more than ``max_events``, whole items are dropped
up to the cut, so trimming is amortised over ``max_events / 10`` events; an item packs at
most ``max_events / 10`` events (``Retention.trim_step``), so the item left across the cut
never makes a run keep more than ``max_events``.
``ttl``: the run expires ``ttl`` after its last append or heartbeat (``xm``, checked by
every reader and writer; DynamoDB's TTL on ``exp`` reaps later). Event items get
``exp = now + 1.5 ttl`` when written; a writer refreshes the older items (one Query plus a
transaction of conditional Updates per 100 items) only when some could expire before the
run, i.e. at most once per ``ttl / 2``. An append or heartbeat to a run that expired but
is not reaped yet deletes its old items first and goes on numbering after them (``tr``
says they are gone), so a reused run id never shows another run's events.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb import keys as keyspace
from graphkeep.backends.dynamodb.client import OnDynamoDB, TablePort
from graphkeep.backends.dynamodb.event_items import (
    ITEM_LIMIT,
    MAX_SEQ,
    Pack,
    event_item,
    event_sk,
    events_of,
    pack_events,
    packed,
    seq_of,
    transactions,
)
from graphkeep.backends.dynamodb.items import (
    CODEC,
    EXP,
    PK,
    SK,
    VALUE,
    B,
    N,
    S,
    key,
    n,
    s,
)
from graphkeep.backends.dynamodb.requests import (
    MAX_STALLS,
    RETRYABLE_REASONS,
    RETRYABLE_TRANSACTION_ERRORS,
    TRANSACT_MAX_ITEMS,
    Call,
    backoff,
    batch_write,
    error_code,
    query_all,
    query_page,
    transact,
)
from graphkeep.backends.dynamodb.schema import setup_table
from graphkeep.errors import UNDECODABLE, CorruptData, GraphkeepError, InvalidInput, RunClosed
from graphkeep.events.log import AsyncEventLog, SyncEventLog
from graphkeep.events.port import (
    Batch,
    Retention,
    RunState,
    StoredEvent,
    StoredRecord,
    check_sequence,
)
from graphkeep.port import Op, Sleep
from graphkeep.port.clock import now_ms as clock_ms
from graphkeep.port.lru import ThreadLRU

__all__ = [
    "AsyncDynamoDBEventLog",
    "DynamoDBEventLog",
    "DynamoDBEventsPort",
]


FORMAT = "e1"
META_SK = "m#"
ACTIVE, STATUS, HIGH, TRIMMED, REFRESHED, EXPIRES_MS = "act", "st", "hi", "tr", "rf", "xm"
#: runs whose last seq / retention bookkeeping a port remembers
KNOWN_RUNS = 10_000
#: how many times a transaction is re-sent after conflicts or throttling (not lost races)
MAX_CONFLICTS = 3 * MAX_STALLS

_ID = re.compile(r"[0-9]{1,19}", re.ASCII)
_PLACEHOLDER = re.compile(r"[#:]\w+")


@dataclass(slots=True)
class _Run:
    """What a port knows of a run: its last seq, the last seq dropped, the items' min exp."""

    hi: int = 0
    trimmed: int = 0
    refreshed: int = 0


class DynamoDBEventsPort(TablePort):
    """The event port on one DynamoDB table (shared with the savers if you like)."""

    blocking = False

    def __init__(self, table: str, *, key_prefix: str = "graphkeep") -> None:
        super().__init__(table, key_prefix=key_prefix)
        self.runs: ThreadLRU[tuple[str], _Run] = ThreadLRU(KNOWN_RUNS)

    def partition(self, run_id: str) -> str:
        # run ids are at most 512 UTF-8 bytes, 1,024 escaped: never shortened
        text = keyspace.part(run_id, keyspace.THREAD_LIMIT)[0]
        return f"{self.prefix}{keyspace.SEP}{FORMAT}{keyspace.SEP}{text}"

    def id_key(self, event_id: str) -> tuple[int, ...]:
        if not isinstance(event_id, str) or not _ID.fullmatch(event_id):
            raise InvalidInput(
                f"{event_id!r} is not an event id of this log (a decimal sequence number"
                " such as '42')"
            )
        return (int(event_id),)

    def setup(self) -> Op[None]:
        # the saver's table and TTL set-up, exactly, so savers, caches and logs can share it
        yield from setup_table(self.table)

    # -- append --------------------------------------------------------------------------

    def append(self, run_id: str, batch: Batch) -> Op[list[str]]:
        payloads, closing = batch.payloads, batch.closing
        now_ms, retention = batch.now_ms, batch.retention
        pk = self.partition(run_id)
        known = self._known(pk)
        packs = pack_events(payloads, closing, retention.trim_step, batch.size)
        ids: list[str] = []
        for group in transactions(packs):
            first = yield from self._commit(pk, known, group, batch, now_ms, retention)
            count = sum(len(p.payloads) for p in group)
            ids += [str(seq) for seq in range(first, first + count)]
        yield from self._retain(pk, known, now_ms, retention)
        return ids

    def _known(self, pk: str) -> _Run:
        found = self.runs.get((pk,))
        if found is None:
            found = _Run()
            self.runs.put((pk,), found)
        return found

    def _commit(
        self,
        pk: str,
        known: _Run,
        group: list[Pack],
        batch: Batch,
        now_ms: int,
        retention: Retention,
    ) -> Op[int]:
        """Write one transaction's packs after the run's last seq; returns the first seq."""
        status = batch.close_status
        reborn: int | None = None  # act of an expired run being restarted
        conflicts = 0
        refused: dict[str, Any] | None = None  # the meta item that refused the last attempt
        while True:
            prev = known.hi
            actions, last = self._actions(pk, group, prev, batch, now_ms, retention, reborn)
            try:
                yield Call(
                    "transact_write_items",
                    {"TransactItems": actions, "ClientRequestToken": uuid.uuid4().hex},
                )
            except ClientError as exc:
                code = error_code(exc)
                reasons = exc.response.get("CancellationReasons") or []
                meta_reason = reasons[-1] if len(reasons) == len(actions) else {}
                if meta_reason.get("Code") == "ConditionalCheckFailed":
                    meta = meta_reason.get("Item")
                    if meta is None:  # a server that does not return it: read it
                        meta = yield from self._meta(pk)
                    if meta == refused:  # each lost race shows another writer's progress
                        raise GraphkeepError(
                            f"the meta item of run partition {pk!r} refuses appends and does"
                            f" not change ({meta}); was it written by another program?"
                        ) from exc
                    refused = meta
                    reborn = yield from self._learn(pk, known, meta, now_ms, status)
                    continue
                codes = {str(r.get("Code")) for r in reasons}
                retry = code in RETRYABLE_TRANSACTION_ERRORS or (
                    code == "TransactionCanceledException" and codes <= RETRYABLE_REASONS
                )
                conflicts += 1
                if not retry or conflicts >= MAX_CONFLICTS:
                    raise
                yield Sleep(backoff(conflicts))
                continue
            if prev == 0 or reborn is not None:
                # a new (or restarted) run: every item it has was written just now
                known.refreshed = self._item_exp(now_ms, retention) or 0
            if reborn is not None:
                known.trimmed = max(known.trimmed, prev)
            known.hi = max(known.hi, last)
            return prev + 1

    def _meta(self, pk: str) -> Op[dict[str, Any]]:
        """The run's meta item, strongly consistent (empty when there is none)."""
        result = yield Call(
            "get_item",
            {"TableName": self.table, "Key": key(pk, META_SK), "ConsistentRead": True},
        )
        return dict(result.get("Item") or {})

    def _learn(
        self, pk: str, known: _Run, meta: dict[str, Any], now_ms: int, status: str | None
    ) -> Op[int | None]:
        """After a failed meta condition: take in the meta item as it is; returns the ``act``
        of an expired run to restart (its old items deleted), else None."""
        if not meta:  # deleted (or reaped) meanwhile: a new run
            known.hi = known.trimmed = known.refreshed = 0
            return None
        hi, trimmed = n(meta, HIGH) or 0, n(meta, TRIMMED) or 0
        known.hi, known.trimmed = hi, trimmed
        known.refreshed = n(meta, REFRESHED) or 0
        until = n(meta, EXPIRES_MS)
        if until is not None and until < now_ms:
            # expired but not reaped yet: drop what is left of it, then number on after it
            yield from self._delete_events(pk, hi)
            return n(meta, ACTIVE) or 0
        if STATUS in meta:
            closed = s(meta, STATUS)
            what = "close it again" if status is not None else "append to it"
            raise RunClosed(f"this run was closed with status {closed!r}; cannot {what}")
        return None

    def _actions(
        self,
        pk: str,
        group: list[Pack],
        prev: int,
        batch: Batch,
        now_ms: int,
        retention: Retention,
        reborn: int | None,
    ) -> tuple[list[dict[str, Any]], int]:
        status = batch.close_status
        exp = self._item_exp(now_ms, retention)
        actions: list[dict[str, Any]] = []
        seq = prev
        closes = False
        for pack in group:
            seq += len(pack.payloads)
            item = event_item(pk, seq, pack, batch.stored)
            if exp is not None:
                item[EXP] = N(exp)
            closes = closes or pack.closing
            actions.append({"Put": {"TableName": self.table, "Item": item}})
        names = {"#hi": HIGH, "#a": ACTIVE, "#st": STATUS, "#xm": EXPIRES_MS}
        values: dict[str, Any] = {":hi": N(seq), ":now": N(now_ms)}
        sets = ["#hi = :hi", "#a = :now"]
        removes: list[str] = []
        self._stamp_meta(sets, removes, names, values, now_ms, retention)
        if closes and status is not None:
            sets.append("#st = :st")
            values[":st"] = S(status)
        seq_condition = "attribute_not_exists(#hi)" if prev == 0 else "#hi = :prev"
        if prev:
            values[":prev"] = N(prev)
        if reborn is None:
            condition = (
                f"{seq_condition} AND attribute_not_exists(#st)"
                " AND (attribute_not_exists(#xm) OR #xm >= :now)"
            )
            if prev == 0:
                names["#rf"] = REFRESHED
                sets.append("#rf = :rf")
                values[":rf"] = N(exp or 0)
        else:  # restart an expired run: its old events are gone (``tr``), it is open again
            condition = f"{seq_condition} AND #a = :old"
            values[":old"] = N(reborn)
            names["#tr"], names["#rf"] = TRIMMED, REFRESHED
            sets += ["#tr = :tr", "#rf = :rf"]
            values[":tr"], values[":rf"] = N(prev), N(exp or 0)
            if not (closes and status is not None):
                removes.append("#st")
        actions.append({"Update": self._meta_update(pk, sets, removes, names, values, condition)})
        return actions, seq

    def _meta_update(
        self,
        pk: str,
        sets: list[str],
        removes: list[str],
        names: dict[str, str],
        values: dict[str, Any],
        condition: str,
    ) -> dict[str, Any]:
        """The update of a run's meta item: ``SET`` ``sets`` (and ``REMOVE`` ``removes``) where
        ``condition`` holds, with the names and values they use; the old item returned where
        it does not."""
        update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        names, values = _used(names, values, update, condition)
        return {
            "TableName": self.table,
            "Key": key(pk, META_SK),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    @staticmethod
    def _stamp_meta(
        sets: list[str],
        removes: list[str],
        names: dict[str, str],
        values: dict[str, Any],
        now_ms: int,
        retention: Retention,
    ) -> None:
        """The meta item's expiry: exact (``xm``) and for DynamoDB's reaper (``exp``);
        without ``ttl`` none (an expiry another writer set with a ttl is removed)."""
        names["#e"], names["#xm"] = EXP, EXPIRES_MS
        if retention.ttl_ms is None:
            removes += ["#xm", "#e"]
            return
        sets += ["#xm = :xm", "#e = :e"]
        values[":xm"] = N(now_ms + retention.ttl_ms)
        # the reaper may take the meta item only after every event item (their exp is lower)
        values[":e"] = N(math.ceil((now_ms + retention.ttl_ms * 1.5) / 1000) + 1)

    @staticmethod
    def _item_exp(now_ms: int, retention: Retention) -> int | None:
        """``exp`` of an event item written (or refreshed) now: ttl plus half a ttl of slack."""
        if retention.ttl_ms is None:
            return None
        return math.ceil((now_ms + retention.ttl_ms * 1.5) / 1000)

    # -- retention -----------------------------------------------------------------------

    def _retain(self, pk: str, known: _Run, now_ms: int, retention: Retention) -> Op[None]:
        """Trim to ``max_events`` and slide the items' TTL, each only when due."""
        cut = retention.trim_through(known.hi, known.trimmed)
        if cut is not None:
            yield from self._trim(pk, known, cut)
        if retention.ttl_ms is not None:
            needed = math.ceil((now_ms + retention.ttl_ms) / 1000)
            if known.refreshed < needed:
                yield from self._slide(pk, known, now_ms, retention)

    def _trim(self, pk: str, known: _Run, cut: int) -> Op[None]:
        """Drop the items holding only seqs up to ``cut``: ``tr`` first, then the deletes,
        so a reader resuming inside the dropped range is told, never silently skipped."""
        items = yield from query_all(self._events_query(pk, 1, cut, keys_only=True))
        if not items:
            known.trimmed = max(known.trimmed, cut)
            return
        through = max(seq_of(s(i, SK)) for i in items)
        yield from self._raise_meta(pk, TRIMMED, through)
        deletes = [{"DeleteRequest": {"Key": key(pk, s(i, SK))}} for i in items]
        yield from batch_write(self.table, deletes)
        known.trimmed = max(known.trimmed, through)

    def _slide(self, pk: str, known: _Run, now_ms: int, retention: Retention) -> Op[None]:
        """Push the expiry of the run's older items out to that of a new one."""
        exp = self._item_exp(now_ms, retention)
        assert exp is not None
        needed = math.ceil((now_ms + (retention.ttl_ms or 0)) / 1000)
        items = yield from query_all(self._events_query(pk, 1, MAX_SEQ, keys_only=True))
        due = [i for i in items if (n(i, EXP) or 0) < needed]
        actions = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": key(pk, s(item, SK)),
                    "UpdateExpression": "SET #e = :e",
                    # never resurrect an item retention deleted meanwhile
                    "ConditionExpression": "attribute_exists(#sk)",
                    "ExpressionAttributeNames": {"#e": EXP, "#sk": SK},
                    "ExpressionAttributeValues": {":e": N(exp)},
                }
            }
            for item in due
        ]
        for start in range(0, len(actions), TRANSACT_MAX_ITEMS):
            part = actions[start : start + TRANSACT_MAX_ITEMS]
            yield from transact(part, list(range(len(part))))
        yield from self._raise_meta(pk, REFRESHED, exp)
        known.refreshed = max(known.refreshed, exp)

    def _raise_meta(self, pk: str, attribute: str, value: int) -> Op[None]:
        """Raise a number on the run's meta item, never lower it: a writer that finds it as
        high already (another writer got there first) or the run gone leaves it be."""
        try:
            yield Call(
                "update_item",
                {
                    "TableName": self.table,
                    "Key": key(pk, META_SK),
                    "UpdateExpression": "SET #v = :v",
                    "ConditionExpression": (
                        "attribute_exists(#a) AND (attribute_not_exists(#v) OR #v < :v)"
                    ),
                    "ExpressionAttributeNames": {"#v": attribute, "#a": ACTIVE},
                    "ExpressionAttributeValues": {":v": N(value)},
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    # -- heartbeat, state, read, delete --------------------------------------------------

    def heartbeat(self, run_id: str, now_ms: int, retention: Retention) -> Op[None]:
        pk = self.partition(run_id)
        known = self._known(pk)
        reborn: int | None = None
        while True:
            names = {"#a": ACTIVE, "#xm": EXPIRES_MS}
            values: dict[str, Any] = {":now": N(now_ms)}
            sets = ["#a = :now"]
            removes: list[str] = []
            self._stamp_meta(sets, removes, names, values, now_ms, retention)
            if reborn is None:
                condition = "attribute_not_exists(#xm) OR #xm >= :now"
            else:  # restart an expired run: its old events are gone (``tr``)
                condition = "#a = :old"
                values[":old"] = N(reborn)
                names["#tr"], names["#st"] = TRIMMED, STATUS
                values[":tr"] = N(known.hi)
                sets.append("#tr = :tr")
                removes.append("#st")
            update = self._meta_update(pk, sets, removes, names, values, condition)
            try:
                result = yield Call("update_item", {**update, "ReturnValues": "ALL_OLD"})
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                meta = exc.response.get("Item")
                if meta is None:  # a server that does not return it: read it
                    meta = yield from self._meta(pk)
                if not meta:
                    reborn = None
                    continue
                known.hi = n(meta, HIGH) or 0
                until = n(meta, EXPIRES_MS)
                if until is not None and until < now_ms:
                    yield from self._delete_events(pk, known.hi)
                    reborn = n(meta, ACTIVE) or 0
                else:
                    reborn = None
                continue
            old = result.get("Attributes") or {}
            if reborn is not None:
                known.trimmed = max(known.trimmed, known.hi)
                known.refreshed = 0
            else:
                known.hi = max(known.hi, n(old, HIGH) or 0)
                known.trimmed = max(known.trimmed, n(old, TRIMMED) or 0)
                known.refreshed = max(known.refreshed, n(old, REFRESHED) or 0)
            break
        if retention.ttl_ms is not None and known.hi > known.trimmed:
            needed = math.ceil((now_ms + retention.ttl_ms) / 1000)
            if known.refreshed < needed:
                yield from self._slide(pk, known, now_ms, retention)

    def state(self, run_id: str) -> Op[RunState | None]:
        meta = yield from self._meta(self.partition(run_id))
        if not meta:
            return None
        until = n(meta, EXPIRES_MS)
        if until is not None and until < clock_ms():
            return None
        trimmed = n(meta, TRIMMED)
        return RunState(
            active_ms=n(meta, ACTIVE) or 0,
            closed=s(meta, STATUS) if STATUS in meta else None,
            trimmed_through=str(trimmed) if trimmed else None,
        )

    def read(
        self, run_id: str, after: str | None, limit: int, wait_ms: int
    ) -> Op[list[StoredEvent]]:
        """Up to ``limit`` events after ``after``: Query pages from the item holding the
        next seq, until ``limit`` events or the end (never a short page before the end)."""
        pk = self.partition(run_id)
        floor = 0 if after is None else self.id_key(after)[0]
        if floor >= MAX_SEQ:
            return []
        params = self._events_query(pk, floor + 1, MAX_SEQ, keys_only=False)
        params["Limit"] = limit + 1
        now_s = clock_ms() / 1000
        found: list[StoredEvent] = []
        start: dict[str, Any] | None = None
        while len(found) < limit:
            page = yield from query_page(params, start)
            for item in page.get("Items", []):
                exp = n(item, EXP)
                if exp is not None and exp < now_s:
                    continue  # expired, not reaped yet
                found += events_of(item, floor)
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        check_sequence(run_id, after, found)
        return found[:limit]

    def delete(self, run_ids: list[str]) -> Op[None]:
        for run_id in run_ids:
            pk = self.partition(run_id)
            items = yield from query_all(
                {
                    "TableName": self.table,
                    "KeyConditionExpression": "#p = :p",
                    "ProjectionExpression": "#p, #s",
                    "ExpressionAttributeNames": {"#p": PK, "#s": SK},
                    "ExpressionAttributeValues": {":p": S(pk)},
                    "ConsistentRead": True,
                }
            )
            # events first, the meta item last: a run is never "unknown" with events left
            sks = sorted((s(i, SK) for i in items), key=lambda sk: sk == META_SK)
            yield from batch_write(
                self.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in sks]
            )
            self.runs.drop_thread((pk,))

    # -- key rotation --------------------------------------------------------------------

    def run_ids(self) -> Op[list[str]]:
        """Every run of this key prefix: a Scan for its meta items (costly on a big table)."""
        base = f"{self.prefix}{keyspace.SEP}{FORMAT}{keyspace.SEP}"
        items = yield from query_all(
            {
                "_op": "scan",
                "TableName": self.table,
                "FilterExpression": "begins_with(#p, :p) AND #s = :m",
                "ProjectionExpression": "#p",
                "ExpressionAttributeNames": {"#p": PK, "#s": SK},
                "ExpressionAttributeValues": {":p": S(base), ":m": S(META_SK)},
                "ConsistentRead": True,
            }
        )
        return sorted({keyspace.unescape(s(i, PK)[len(base) :]) for i in items})

    def records(self, run_id: str) -> Op[list[StoredRecord]]:
        """Every event item of the run (expired ones too), oldest first; the handle is the
        item as read."""
        pk = self.partition(run_id)
        items = yield from query_all(self._events_query(pk, 1, MAX_SEQ, keys_only=False))
        return [
            StoredRecord([(e.event_id, e.data) for e in events_of(item, 0)], item) for item in items
        ]

    def rewrite(self, run_id: str, changes: list[tuple[StoredRecord, list[bytes]]]) -> Op[int]:
        """One PutItem per item: the item as read with its new ``v`` (and ``z``), on the
        condition that ``v`` and ``exp`` are still those read (a trim, or a slide of the TTL
        meanwhile, is never undone: the item is left alone and read again)."""
        done = 0
        for record, new in changes:
            item = {k: v for k, v in record.handle.items() if k != CODEC}
            value, deflated = packed(new)
            if len(value) > ITEM_LIMIT:
                raise CorruptData(
                    reason=f"its events sealed take {len(value)} bytes, more than one item"
                    " holds (written without encryption in one dense item)",
                    kind=UNDECODABLE,
                    advice="Nothing of the run was rewritten; delete the run or keep the old key",
                )
            item[VALUE] = B(value)
            if deflated:
                item[CODEC] = S("zlib")
            names = {"#v": VALUE, "#e": EXP}
            values: dict[str, Any] = {":old": record.handle[VALUE]}
            condition = "#v = :old AND attribute_not_exists(#e)"
            if EXP in record.handle:
                condition = "#v = :old AND #e = :e"
                values[":e"] = record.handle[EXP]
            try:
                yield Call(
                    "put_item",
                    {
                        "TableName": self.table,
                        "Item": item,
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    },
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                continue  # trimmed or changed meanwhile: left alone
            done += 1
        return done

    # -- helpers -------------------------------------------------------------------------

    def _events_query(self, pk: str, low: int, high: int, *, keys_only: bool) -> dict[str, Any]:
        """A consistent ascending Query of the event items holding seqs ``low`` .. ``high``
        (plus the one straddling ``high``'s item boundary only when reading)."""
        params: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#p = :p AND #s BETWEEN :lo AND :hi",
            "ExpressionAttributeNames": {"#p": PK, "#s": SK},
            "ExpressionAttributeValues": {
                ":p": S(pk),
                ":lo": S(event_sk(low)),
                ":hi": S(event_sk(high)),
            },
            "ConsistentRead": True,
        }
        if keys_only:
            params["ExpressionAttributeNames"]["#e"] = EXP
            params["ProjectionExpression"] = "#p, #s, #e"
        return params

    def _delete_events(self, pk: str, through: int) -> Op[None]:
        """Delete the event items holding seqs up to ``through`` (an expired run's)."""
        if through <= 0:
            return
        items = yield from query_all(self._events_query(pk, 1, through, keys_only=True))
        deletes = [{"DeleteRequest": {"Key": key(pk, s(i, SK))}} for i in items]
        yield from batch_write(self.table, deletes)


def _used(
    names: dict[str, str], values: dict[str, Any], *expressions: str
) -> tuple[dict[str, str], dict[str, Any]]:
    """The placeholders the expressions use (DynamoDB rejects unused ones)."""
    tokens = set(_PLACEHOLDER.findall(" ".join(expressions)))
    return (
        {k: v for k, v in names.items() if k in tokens},
        {k: v for k, v in values.items() if k in tokens},
    )


class DynamoDBEventLog(OnDynamoDB, SyncEventLog):
    """Run event log on a boto3 low-level DynamoDB client (``boto3.client("dynamodb")``).

    Options: ``ttl``, ``max_events``, ``stale_after``, ``poll_interval``,
    ``max_poll_interval`` (see :class:`graphkeep.events.log.EventLogBase`), ``key_prefix``;
    ``from_url`` also takes the client options of ``DynamoDBSaver.from_table``
    (``session``, ``profile_name``, ``botocore_config``).
    """

    port_type = DynamoDBEventsPort


class AsyncDynamoDBEventLog(OnDynamoDB, AsyncEventLog):
    """Run event log on an aiobotocore DynamoDB client (same options)."""

    port_type = DynamoDBEventsPort
