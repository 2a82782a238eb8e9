"""Run event log on MongoDB: :class:`MongoDBEventLog` (sync) and :class:`AsyncMongoDBEventLog`.

PyMongo's ``MongoClient`` / native ``AsyncMongoClient``, URLs and ``db_name`` as the savers::

    with MongoDBEventLog.from_url("mongodb://localhost:27017/mydb") as events:
        events.append("run-1", {"type": "token", "text": "Hel"})   # -> "1"

One collection ``<key_prefix>_events``, one document per event and one per run::

    {_id: "<digest>",         # of (run, seq): the same position always names the same document
     run: "<run id>",
     seq: 1, 2, 3, ...        # per run, from 1; the event id is str(seq)
     d: Binary,               # the event's JSON bytes (encryption=: sealed at (run, seq),
                              #   graphkeep.events.sealing; resealed when a race moves it)
     at: <epoch ms>,          # the writer's clock at the append
     w: "<token>",            # random token of the append call that wrote it
     close: "success",        # the close event only: the run's status
     expires_at: Date}        # now + ttl (absent when ttl is None)

    {_id: "<digest>", run: "<run id>", seq: 0,    # the run's meta document
     hb: <epoch ms>,          # creation, then the last heartbeat
     close: "success",        # once closed
     expires_at: Date}        # 1.5 ttl: it outlives every event of its run

Indexes: ``gk_run_seq`` ``{run, seq}`` unique (every query is a range of it) and
``gk_expires_at`` ``{expires_at}`` with ``expireAfterSeconds: 0`` (a plain index on servers
without TTL indexes, FerretDB 1.x: expired documents are then hidden from every read and
removed by ``purge_expired()``).

- ``append`` / ``append_many`` / ``close``: ONE ordered ``insert_many`` of the events at
  the next positions: the log remembers each run's next ``seq`` (a bounded LRU), so the
  steady state never reads first. A position already taken (another writer, or a run this
  log object has not written before) stops the insert with a duplicate-key error on the
  ``_id``, writing nothing from there on: the log then reads the run's newest document
  and retries above it, or raises :class:`~graphkeep.errors.RunClosed` when that is the
  close event. Ids are therefore strictly increasing and gapless per run across writers
  and processes; events of one call stay in order (another writer's may come between
  them only when a conflict split the call). The first append of a log object for a run
  inserts the meta document first (seq 0): on a new run the one command creates it; on a
  known run it collides at once and nothing is written (so that first append costs
  insert, find, find, insert). When the executor re-sends an insert whose reply was lost,
  the re-sent one collides with the first one's events: a collision at the first position
  therefore also looks for this call's token (one ``find``), and what the call already
  wrote is not written twice. A close racing with a batch raises ``RunClosed`` after the
  part of the batch that landed before the close. ``close`` then marks the meta document.
  Upkeep after the insert (trim, slide, close mark) that fails is logged, not raised:
  the events are stored, and a caller retrying the call would store them twice.
- ``read``: ``find({run, seq: {$gt: after}})`` sorted by ``seq`` with a limit (never
  blocking: followers poll, see :class:`~graphkeep.events.log.EventLogBase`).
- ``state``: two ``find``\\ s of at most two documents (the meta document and the oldest
  event; the newest event): ``active_ms`` = max(meta ``hb``, newest event's ``at``),
  ``closed`` from the newest event, ``trimmed_through`` = oldest kept ``seq`` - 1.
- ``heartbeat``: one upsert of the meta document (``$max`` on ``hb``, fresh expiry), in
  the same command as the TTL slide when one is due.
- ``max_events``: the append applies :meth:`~graphkeep.events.port.Retention.trim_through`
  (one ``delete_many`` on ``seq <= cut``, a range of the index): once a run holds more than
  ``max_events`` events its oldest are deleted so that ``max_events - max_events // 10 + 1``
  remain: one more command every ``max_events // 10`` events (every append when
  ``max_events`` < 20), and never more than ``max_events`` events once the append returns.
  The close event, the newest, is never trimmed.
- ``ttl``: every event gets ``expires_at`` = now + ``ttl`` and the meta document 1.5
  ``ttl``; while the run appends or heart-beats, the log slides the whole run
  (``update_many`` on its events and the meta document) at most once per ``ttl`` / 2, so
  no document of an active run expires and the meta document expires last.
- ``delete``: one ``delete_many`` on ``{run: {$in: runs}}``.
- key rotation: ``run_ids`` walks ``gk_run_seq`` (one ``find`` per run), ``records`` reads
  a run's event documents, ``rewrite`` ``$set``\\ s ``d`` conditioned on the ``d`` read (an
  unordered ``bulk_write``): ids, ``at``, ``close`` and ``expires_at`` stay as they are.

Sharding: shard ``<prefix>_events`` on ``{run: 1}``: every command names ``run`` (the
meta upserts filter on ``{_id, run}``) and the unique index leads with it.
Multi-document transactions are never used.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import bson
from pymongo import UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError

from graphkeep.backends.mongodb.client import OnMongoDB
from graphkeep.backends.mongodb.documents import check_prefix, doc_id, live
from graphkeep.backends.mongodb.requests import Command
from graphkeep.backends.mongodb.schema import EVENTS_INDEXES, ensure_indexes
from graphkeep.construction import PrefixedPort
from graphkeep.errors import InvalidInput, RunClosed
from graphkeep.events.log import AsyncEventLog, SyncEventLog
from graphkeep.events.port import (
    Batch,
    Retention,
    RunState,
    StoredEvent,
    StoredRecord,
    check_sequence,
)
from graphkeep.port import Op
from graphkeep.port.lru import ThreadLRU

__all__ = ["AsyncMongoDBEventLog", "MongoDBEventLog", "MongoDBEventsPort"]


log = logging.getLogger("graphkeep.mongodb")

#: the meta document outlives its run's events by this many ``ttl``
META_TTL_FACTOR = 1.5
#: runs whose next position a log object remembers
KNOWN_RUNS = 4096
DUPLICATE_KEY = 11000
#: event documents read (and rewritten) per request by key rotation
REKEY_PAGE = 200
#: an event id: a positive int64 in canonical decimal form
_EVENT_ID = re.compile(r"[1-9][0-9]{0,18}")
INT64_MAX = 2**63 - 1
_STATE_FIELDS = {"_id": 0, "seq": 1, "hb": 1, "at": 1, "close": 1}
_READ_FIELDS = {"_id": 0, "seq": 1, "d": 1, "close": 1}


@dataclass(frozen=True, slots=True)
class _Run:
    """What a log object knows of a run it wrote (replaced whole, never mutated)."""

    #: the position of its next event (None: unknown, try it as a new run)
    next: int | None = None
    #: every event up to this position is known to be trimmed
    trimmed: int = 0
    #: epoch ms of this log's last slide of the run's expiry (0: never)
    slid_ms: int = 0
    closed: bool = False


def _aware(value: Any) -> datetime | None:
    """A stored date as an aware UTC datetime (PyMongo returns naive UTC by default)."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _conflict(exc: BulkWriteError) -> int:
    """How many documents the ordered insert wrote before a taken position; any other
    error is raised as it is."""
    errors = exc.details.get("writeErrors") or []
    if not errors or any(e.get("code") != DUPLICATE_KEY for e in errors):
        raise exc
    return int(min(e.get("index", 0) for e in errors))


class MongoDBEventsPort(PrefixedPort):
    """The event port on one MongoDB collection (see the module docstring)."""

    blocking = False

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.collection = f"{check_prefix(key_prefix)}_events"
        self.runs: ThreadLRU[tuple[str], _Run] = ThreadLRU(KNOWN_RUNS)
        #: whether the server keeps TTL indexes (None until setup() ran)
        self.ttl_index: bool | None = None

    # -- documents -------------------------------------------------------------------

    @staticmethod
    def key(run_id: str, seq: int) -> str:
        """``_id`` of a run's document at ``seq`` (0: the meta document)."""
        return doc_id("e", run_id, str(seq))

    def _meta_filter(self, run_id: str) -> dict[str, Any]:
        # names the shard key ``run`` too: an upsert on a sharded collection must
        return {"_id": self.key(run_id, 0), "run": run_id}

    @staticmethod
    def _expiry(now_ms: int, ttl_ms: int | None, factor: float = 1.0) -> datetime | None:
        if ttl_ms is None:
            return None
        at = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
        return at + timedelta(milliseconds=ttl_ms * factor)

    def _event_docs(
        self,
        run_id: str,
        start: int,
        payloads: list[bytes],
        status: str | None,
        now_ms: int,
        token: str,
        expires_at: datetime | None,
        stored: Callable[[str, bytes], bytes],
    ) -> list[dict[str, Any]]:
        docs = []
        for offset, data in enumerate(payloads):
            seq = start + offset
            doc: dict[str, Any] = {
                "_id": self.key(run_id, seq),
                "run": run_id,
                "seq": seq,
                "d": bson.Binary(stored(str(seq), data)),
                "at": now_ms,
                "w": token,
            }
            if status is not None and offset == len(payloads) - 1:
                doc["close"] = status
            if expires_at is not None:
                doc["expires_at"] = expires_at
            docs.append(doc)
        return docs

    def _meta_doc(
        self, run_id: str, now_ms: int, token: str, retention: Retention
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "_id": self.key(run_id, 0),
            "run": run_id,
            "seq": 0,
            "hb": now_ms,
            "w": token,
        }
        expires_at = self._expiry(now_ms, retention.ttl_ms, META_TTL_FACTOR)
        if expires_at is not None:
            doc["expires_at"] = expires_at
        return doc

    def _find(
        self,
        query: Mapping[str, Any],
        fields: Mapping[str, Any],
        sort: int,
        limit: int = 0,
    ) -> Command:
        kwargs: dict[str, Any] = {"projection": dict(fields), "sort": [("seq", sort)]}
        if limit:
            kwargs["limit"] = limit
            kwargs["batch_size"] = limit
        return Command(self.collection, "find", (dict(query),), kwargs)

    # -- port ------------------------------------------------------------------------

    def setup(self) -> Op[None]:
        """Create ``gk_run_seq`` and ``gk_expires_at`` unless equal ones exist."""
        self.ttl_index = yield from ensure_indexes(self.collection, EVENTS_INDEXES)
        if not self.ttl_index:
            log.info(
                "this MongoDB-compatible server has no TTL indexes: expired events of %s are"
                " hidden from reads but stay stored until purge_expired() removes them",
                self.collection,
            )

    def id_key(self, event_id: str) -> tuple[int, ...]:
        if (
            not isinstance(event_id, str)
            or not _EVENT_ID.fullmatch(event_id)
            or int(event_id) > INT64_MAX
        ):
            raise InvalidInput(
                f"{str(event_id)[:60]!r} is not an event id of a MongoDB event log"
                " (a positive decimal sequence number such as '42')"
            )
        return (int(event_id),)

    def append(self, run_id: str, batch: Batch) -> Op[list[str]]:
        payloads, closing = batch.payloads, batch.closing
        now_ms, retention = batch.now_ms, batch.retention
        known = self.runs.get((run_id,)) or _Run()
        if known.closed:
            raise RunClosed(f"run {run_id!r} is closed: nothing more can be appended")
        status = batch.close_status
        token = secrets.token_hex(8)
        expires_at = self._expiry(now_ms, retention.ttl_ms)
        written: list[int] = []
        pending = list(payloads)
        base = known.next
        conflicted = False
        while pending:
            start = 1 if base is None else base
            docs = self._event_docs(
                run_id, start, pending, status, now_ms, token, expires_at, batch.stored
            )
            if base is None:
                docs.insert(0, self._meta_doc(run_id, now_ms, token, retention))
            try:
                yield Command(
                    self.collection,
                    "insert_many",
                    (docs,),
                    {"ordered": True},
                    retry_conflicts=False,
                )
            except BulkWriteError as exc:
                conflicted = True
                done = max(0, _conflict(exc) - (1 if base is None else 0))
                written += range(start, start + done)
                del pending[:done]
                if done == 0:
                    # a re-sent insert (its reply lost) may have written some already; one
                    # that wrote at ``start`` before would have stopped this one there
                    mine = yield from self._own(run_id, start, token)
                    written += mine
                    del pending[: len(mine)]
                if not pending:
                    break
                base = yield from self._next_free(run_id, now_ms)
                continue
            written += range(start, start + len(pending))
            break
        entry = _Run(
            next=written[-1] + 1,
            trimmed=known.trimmed,
            # a new run written in one go is fresh: nothing older to slide
            slid_ms=now_ms if known.next is None and not conflicted else known.slid_ms,
            closed=closing,
        )
        self.runs.put((run_id,), entry)
        if closing:
            yield from self._quietly(
                "mark the close", run_id, self._mark_closed(run_id, status, now_ms, retention)
            )
        yield from self._retain(run_id, entry, now_ms, retention)
        return [str(seq) for seq in written]

    def _own(self, run_id: str, start: int, token: str) -> Op[list[int]]:
        """Positions from ``start`` on that this call's ``token`` already holds (written by
        an attempt whose reply was lost), as long as they are contiguous."""
        docs = yield self._find(
            {"run": run_id, "seq": {"$gte": start}, "w": token}, {"_id": 0, "seq": 1}, 1
        )
        mine: list[int] = []
        for doc in docs:
            if int(doc["seq"]) != start + len(mine):
                break
            mine.append(int(doc["seq"]))
        return mine

    def _next_free(self, run_id: str, now_ms: int) -> Op[int]:
        """The position after the run's newest document, or RunClosed when that is a live
        close event (one ``find``; expired documents count: positions are never reused)."""
        docs = yield self._find(
            {"run": run_id}, {"_id": 0, "seq": 1, "close": 1, "expires_at": 1}, -1, 1
        )
        if not docs:
            return 1
        newest = docs[0]
        expires_at = _aware(newest.get("expires_at"))
        alive = expires_at is None or expires_at.timestamp() * 1000 > now_ms
        if newest.get("close") is not None and int(newest["seq"]) > 0 and alive:
            self.runs.put((run_id,), _Run(next=int(newest["seq"]) + 1, closed=True))
            raise RunClosed(
                f"run {run_id!r} was closed ({newest['close']}): nothing more can be appended"
            )
        return int(newest["seq"]) + 1

    def _mark_closed(
        self, run_id: str, status: str | None, now_ms: int, retention: Retention
    ) -> Op[None]:
        on_insert: dict[str, Any] = {"seq": 0, "hb": now_ms}
        expires_at = self._expiry(now_ms, retention.ttl_ms, META_TTL_FACTOR)
        if expires_at is not None:
            on_insert["expires_at"] = expires_at
        yield Command(
            self.collection,
            "update_one",
            (self._meta_filter(run_id), {"$set": {"close": status}, "$setOnInsert": on_insert}),
            {"upsert": True},
        )

    def _quietly(self, what: str, run_id: str, op: Op[None]) -> Op[bool]:
        """Run upkeep that follows a successful insert; True when it succeeded. The events
        are written, so a failure here is logged, not raised (a caller retrying would append
        them twice); the next append of the run tries again."""
        try:
            yield from op
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("could not %s of run %r in %s: %s", what, run_id, self.collection, exc)
            return False
        return True

    def _retain(self, run_id: str, entry: _Run, now_ms: int, retention: Retention) -> Op[None]:
        """Amortized retention after an append: trim past ``max_events``, slide the TTL."""
        cut = retention.trim_through((entry.next or 1) - 1, entry.trimmed)
        if cut is not None:
            if (yield from self._quietly("trim", run_id, self._trim(run_id, cut))):
                entry = replace(entry, trimmed=max(entry.trimmed, cut))
                self._remember(run_id, entry)
        if self._slide_due(entry, now_ms, retention):
            slide = self._slide(run_id, now_ms, retention, [])
            if (yield from self._quietly("slide the expiry", run_id, slide)):
                self._remember(run_id, replace(entry, slid_ms=now_ms))

    def _remember(self, run_id: str, entry: _Run) -> None:
        """Store ``entry`` unless another call of this log moved the run further meanwhile."""
        current = self.runs.get((run_id,))
        if current is None or (current.next or 0) <= (entry.next or 0):
            self.runs.put((run_id,), entry)

    def _trim(self, run_id: str, cut: int) -> Op[None]:
        yield Command(
            self.collection, "delete_many", ({"run": run_id, "seq": {"$gt": 0, "$lte": cut}},)
        )

    @staticmethod
    def _slide_due(entry: _Run, now_ms: int, retention: Retention) -> bool:
        ttl = retention.ttl_ms
        return ttl is not None and now_ms - entry.slid_ms >= ttl / 2

    def _slide(self, run_id: str, now_ms: int, retention: Retention, first: list[Any]) -> Op[None]:
        """``first`` (the heartbeat's meta upsert) and the slide of every document of the run,
        in one unordered ``update`` command."""
        ttl = retention.ttl_ms
        operations = list(first)
        if ttl is not None:
            events_until = self._expiry(now_ms, ttl)
            meta_until = self._expiry(now_ms, ttl, META_TTL_FACTOR)
            operations.append(
                UpdateMany(
                    {"run": run_id, "seq": {"$gt": 0}}, {"$set": {"expires_at": events_until}}
                )
            )
            if not first:
                operations.append(
                    UpdateOne(
                        self._meta_filter(run_id),
                        {
                            "$set": {"expires_at": meta_until},
                            "$setOnInsert": {"seq": 0, "hb": now_ms},
                        },
                        upsert=True,
                    )
                )
        yield Command(self.collection, "bulk_write", (operations,), {"ordered": False})

    def heartbeat(self, run_id: str, now_ms: int, retention: Retention) -> Op[None]:
        update: dict[str, Any] = {"$max": {"hb": now_ms}, "$setOnInsert": {"seq": 0}}
        meta_until = self._expiry(now_ms, retention.ttl_ms, META_TTL_FACTOR)
        if meta_until is not None:
            update["$set"] = {"expires_at": meta_until}
        upsert = UpdateOne(self._meta_filter(run_id), update, upsert=True)
        known = self.runs.get((run_id,)) or _Run()
        if self._slide_due(known, now_ms, retention):
            yield from self._slide(run_id, now_ms, retention, [upsert])
            self._remember(run_id, replace(known, slid_ms=now_ms))
        else:
            yield Command(self.collection, "bulk_write", ([upsert],), {"ordered": False})

    def read(
        self, run_id: str, after: str | None, limit: int, wait_ms: int
    ) -> Op[list[StoredEvent]]:
        floor = 0 if after is None else self.id_key(after)[0]
        now = datetime.now(timezone.utc)
        query = {"run": run_id, "seq": {"$gt": floor}, **live(now)}
        docs = yield self._find(query, _READ_FIELDS, 1, limit)
        events = [
            StoredEvent(str(doc["seq"]), bytes(doc["d"]), doc.get("close") is not None)
            for doc in docs
        ]
        check_sequence(run_id, after, events)
        return events

    def state(self, run_id: str) -> Op[RunState | None]:
        now = datetime.now(timezone.utc)
        query = {"run": run_id, **live(now)}
        head = yield self._find(query, _STATE_FIELDS, 1, 2)
        if not head:
            return None
        tail = yield self._find(query, _STATE_FIELDS, -1, 1)
        meta = head[0] if int(head[0]["seq"]) == 0 else None
        oldest = next((doc for doc in head if int(doc["seq"]) > 0), None)
        newest = tail[0] if tail and int(tail[0]["seq"]) > 0 else None
        active = max(
            int(meta.get("hb", 0)) if meta else 0,
            int(newest.get("at", 0)) if newest else 0,
        )
        closed = (newest if newest is not None else meta or {}).get("close")
        trimmed = None
        if oldest is not None and int(oldest["seq"]) > 1:
            trimmed = str(int(oldest["seq"]) - 1)
        return RunState(active, None if closed is None else str(closed), trimmed)

    def delete(self, run_ids: list[str]) -> Op[None]:
        yield Command(self.collection, "delete_many", ({"run": {"$in": list(run_ids)}},))
        for run_id in run_ids:
            self.runs.drop_thread(run_id)

    # -- key rotation ----------------------------------------------------------------

    def run_ids(self) -> Op[list[str]]:
        """Every run of the collection: one ``find`` per run along ``gk_run_seq``."""
        runs: list[str] = []
        while True:
            query = {"run": {"$gt": runs[-1]}} if runs else {}
            docs = yield Command(
                self.collection,
                "find",
                (query,),
                {"projection": {"_id": 0, "run": 1}, "sort": [("run", 1), ("seq", 1)], "limit": 1},
            )
            if not docs:
                return runs
            runs.append(str(docs[0]["run"]))

    def records(self, run_id: str) -> Op[list[StoredRecord]]:
        """Every event document of the run (expired ones too), oldest first."""
        records: list[StoredRecord] = []
        floor = 0
        while True:
            query = {"run": run_id, "seq": {"$gt": floor}}
            docs = yield self._find(query, {"_id": 0, "seq": 1, "d": 1}, 1, REKEY_PAGE)
            records += [StoredRecord([(str(doc["seq"]), bytes(doc["d"]))]) for doc in docs]
            if len(docs) < REKEY_PAGE:
                return records
            floor = int(docs[-1]["seq"])

    def rewrite(self, run_id: str, changes: list[tuple[StoredRecord, list[bytes]]]) -> Op[int]:
        """One unordered ``bulk_write`` of conditional ``$set``\\ s of ``d`` per
        :data:`REKEY_PAGE` documents: each only while ``d`` is still what was read."""
        done = 0
        for at in range(0, len(changes), REKEY_PAGE):
            operations = []
            for record, new in changes[at : at + REKEY_PAGE]:
                ((event_id, old),) = record.events
                where = {"_id": self.key(run_id, int(event_id)), "run": run_id}
                where["d"] = bson.Binary(old)
                operations.append(UpdateOne(where, {"$set": {"d": bson.Binary(new[0])}}))
            result = yield Command(self.collection, "bulk_write", (operations,), {"ordered": False})
            done += int(result.matched_count)
        return done

    def purge_expired(self) -> Op[int]:
        """Delete expired documents now (for servers without a TTL monitor)."""
        result = yield Command(
            self.collection,
            "delete_many",
            ({"expires_at": {"$lte": datetime.now(timezone.utc)}},),
        )
        return int(result.deleted_count)


class MongoDBEventLog(OnMongoDB, SyncEventLog):
    """Run event log on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``; ``from_url`` takes the URL path),
    ``key_prefix`` (default ``"graphkeep"``: collection ``<prefix>_events``), ``ttl``
    (seconds after a run's last append or heartbeat, sliding; default one day; None keeps
    runs until deleted), ``max_events`` (per run, default 10,000), ``stale_after``,
    ``poll_interval`` / ``max_poll_interval`` (followers poll: reads do not block).
    """

    port_type = MongoDBEventsPort
    port: MongoDBEventsPort

    def purge_expired(self) -> int:
        """Delete expired events now; only needed on servers without TTL indexes."""
        return int(self._call(self.port.purge_expired()))


class AsyncMongoDBEventLog(OnMongoDB, AsyncEventLog):
    """Run event log on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    port_type = MongoDBEventsPort
    port: MongoDBEventsPort

    async def purge_expired(self) -> int:
        """Delete expired events now; only needed on servers without TTL indexes."""
        return int(await self._acall(self.port.purge_expired()))
