"""Run event log on Redis: :class:`RedisEventLog` (sync) and :class:`AsyncRedisEventLog`.

Plain Redis >= 7 or Redis Cluster, the client types and URLs of the Redis savers::

    with RedisEventLog.from_url("redis://localhost:6379/0") as events:
        events.append("run-1", {"type": "token", "text": "Hel"})   # -> "1764571123456-0"

Keys (``P`` = ``key_prefix``; ``<run>`` the run id as :func:`~graphkeep.cache.port.escaped_key`
writes it, so never with ``{``, ``}`` or NUL: the run id is the hash tag and both keys of a
run live in one cluster slot)::

    P:ev1:{<run>}:s   STREAM  one entry per event: d = the event's JSON bytes,
                              c = the close status (close event only),
                              p = the id of the event before it (only on the first
                                  entry of a call that starts a new ms, see "Trimming")
    P:ev1:{<run>}:m   HASH    a = last append or heartbeat (epoch ms, the writer's clock),
                              c = close status, l = newest event id,
                              b / i = token and first id of the last append call

Event ids are the stream's own ids (``<ms>-<seq>``), so they are strictly increasing per
run, across writers, and fit an SSE ``id:`` as they are.

- ``append`` / ``append_many`` / ``close``: ONE script call (a batch larger than
  :data:`CALL_EVENTS` events or :data:`CALL_BYTES` bytes takes several): it refuses with an
  error reply (:class:`~graphkeep.errors.RunClosed`, nothing written) when ``c`` is set,
  ``XADD``\\ s every payload with ``MAXLEN ~ max_events`` (Redis drops whole stream nodes,
  so a run keeps between ``max_events`` and ``max_events`` + one node, 100 entries by
  default), sets ``a`` and ``l`` (and ``c`` when closing), and slides both keys' TTL with
  ``PEXPIRE`` (``PERSIST`` when ``ttl`` is None). Every call carries a random token: when
  the executor re-sends a call after a lost connection, a call that did run returns its
  first id again instead of appending twice.
- With ``encryption=`` a payload is sealed at its event id, so the call chooses its ids
  before it is sent: ``<ms>-<seq>`` after the run's newest id as this port last knew it (ms =
  max(the writer's clock, the newest id's ms)), and the script, given that newest id, refuses
  the call (writing nothing, answering the run's newest id) when another writer moved the run
  on: the call is sealed again after it and re-sent. A run this port has not written yet is
  first tried as a new one (a run another writer started costs one refused call).
- ``read``: ``XRANGE key (after + COUNT limit`` (``-`` when ``after`` is None); when that is
  empty and the reader follows, ``XREAD COUNT limit BLOCK wait_ms STREAMS key after`` (sent
  to the node owning the key, see :class:`~graphkeep.backends.redis.requests.XRead`). When
  the event before the first one read is newer than ``after``, retention dropped events the
  reader never saw (a follower more than ``max_events`` behind): it raises
  :class:`~graphkeep.errors.EventsTrimmed` rather than skip them.
- ``state``: one script reading ``a`` and ``c`` and the stream's first entry.
- ``heartbeat``: one script, ``HSET a`` and the same TTL slide; ``delete``: ``DEL`` both keys.
- Key rotation (``rewrite``): a stream entry cannot be changed in place, so one script per
  4 MB of payloads checks that each entry to rewrite still holds the payload read (else it
  writes nothing), then rebuilds the stream with the same ids and fields (``XADD`` of each
  entry), restores its last id, entry count and newest deleted id (``XSETID``) and its TTL.
  Entries trimmed meanwhile are skipped; an append waits for the script, then follows.

Trimming: retention must never make a resuming reader skip events silently, so ``state``
reports the id of the newest event that was dropped. Redis does not record it
(``XINFO STREAM``'s ``max-deleted-entry-id`` follows ``XDEL`` only, not ``MAXLEN``
trimming), so the ids are made so that the first kept entry names it: every call
``XADD``\\ s with ``<ms>-*`` for one ``<ms>`` = max(server time, ms of ``l``), so the ids of a
call are consecutive and an entry ``<ms>-<seq>`` with ``seq > 0`` follows ``<ms>-<seq-1>``;
only the first entry of a call that starts a new millisecond (``seq = 0``) stores its
predecessor in ``p`` (one short field per call at most).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from graphkeep.backends.redis.client import OnRedis, RedisPort, ResponseError
from graphkeep.backends.redis.keys import pattern_prefix
from graphkeep.backends.redis.requests import Command, Delete, Scan, Script, XRead
from graphkeep.cache.port import escaped_key, unescaped
from graphkeep.errors import EventsTrimmed, GraphkeepError, InvalidInput, RunClosed
from graphkeep.events.log import AsyncEventLog, SyncEventLog
from graphkeep.events.port import Batch, Retention, RunState, StoredEvent, StoredRecord
from graphkeep.port import Op, Sleep
from graphkeep.port.lru import ThreadLRU

__all__ = ["AsyncRedisEventLog", "RedisEventLog", "RedisEventsPort"]

FORMAT = "ev1"
#: runs whose newest event id a port remembers (sealed appends choose their ids after it)
KNOWN_RUNS = 4096
#: most events and payload bytes one append script call carries; larger batches take several
CALL_EVENTS = 2000
CALL_BYTES = 4 * 1024 * 1024
#: what the append script's error reply starts with when the run is closed
CLOSED_REPLY = "GRAPHKEEP_RUN_CLOSED"
#: stream entries read per request by ``records``
REKEY_PAGE = 500
#: the largest stream id: nothing can follow it
MAX_ID = f"{2**64 - 1}-{2**64 - 1}"
_ID = re.compile(r"\A([0-9]{1,20})-([0-9]{1,20})\Z")

# KEYS: stream, meta. ARGV: now_ms, ttl_ms ('' = keep), max_events, close status ('' = not
# closing), call token, expected newest id ('*': any; '': none), ms and first seq of the ids
# ('' '': the script's), payload... Returns the first new id (the others follow it:
# <ms>-<seq+k>), or {newest id or ''} when the newest id is not the expected one.
APPEND = """
local stream, meta = KEYS[1], KEYS[2]
local run = redis.call('HMGET', meta, 'c', 'b', 'i', 'l')
if run[2] == ARGV[5] then
  return run[3]
end
if run[1] then
  return redis.error_reply('GRAPHKEEP_RUN_CLOSED ' .. run[1])
end
local last = run[4]
if not last then
  local newest = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if #newest > 0 then last = newest[1][1] end
end
if ARGV[6] ~= '*' and (last or '') ~= ARGV[6] then
  return {last or ''}
end
local ms, seq = tonumber(ARGV[7]), tonumber(ARGV[8])
if not ms then
  local now = redis.call('TIME')
  ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
local before = false
if last then
  local last_ms = tonumber(string.match(last, '^(%d+)-'))
  if last_ms >= ms then ms = last_ms else before = last end
end
local ms_text = string.format('%.0f', ms)
local status = ARGV[4]
local first, id
for i = 9, #ARGV do
  local fields = {'d', ARGV[i]}
  if i == 9 and before then
    fields[3] = 'p'
    fields[4] = before
  end
  if i == #ARGV and status ~= '' then
    fields[#fields + 1] = 'c'
    fields[#fields + 1] = status
  end
  local id_form = ms_text .. '-*'
  if seq then id_form = ms_text .. '-' .. string.format('%.0f', seq + i - 9) end
  id = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[3], id_form, unpack(fields))
  if i == 9 then first = id end
end
redis.call('HSET', meta, 'a', ARGV[1], 'l', id, 'b', ARGV[5], 'i', first)
if status ~= '' then
  redis.call('HSET', meta, 'c', status)
end
if ARGV[2] == '' then
  redis.call('PERSIST', stream)
  redis.call('PERSIST', meta)
else
  redis.call('PEXPIRE', stream, ARGV[2])
  redis.call('PEXPIRE', meta, ARGV[2])
end
return first
"""

# KEYS: stream, meta. Returns {active ms, close status, first entry id, its predecessor}.
STATE = """
local run = redis.call('HMGET', KEYS[2], 'a', 'c')
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local first_id, before, active = false, false, run[1]
if #first > 0 then
  first_id = first[1][1]
  local fields = first[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'p' then before = fields[i + 1] end
  end
  if not active then
    local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
    active = string.match(newest[1][1], '^(%d+)-')
  end
end
return {active, run[2], first_id, before}
"""

# KEYS: stream, meta. ARGV: now_ms, ttl_ms ('' = keep).
HEARTBEAT = """
redis.call('HSET', KEYS[2], 'a', ARGV[1])
if ARGV[2] == '' then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 0
"""

# KEYS: stream. ARGV: id, payload as read, new payload, ... Rewrites the ``d`` field of those
# entries in place: the stream rebuilt with the same ids and fields, its last id, entry count,
# newest deleted id and TTL restored (a stream entry cannot be changed otherwise). Entries
# trimmed meanwhile are skipped; an entry whose payload is not the one read refuses the call
# (returns -1, nothing written). Returns how many entries it rewrote.
REKEY = """
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local want = {}
for i = 1, #ARGV, 3 do want[ARGV[i]] = i end
local entries = redis.call('XRANGE', key, '-', '+')
local count = 0
for _, entry in ipairs(entries) do
  local at = want[entry[1]]
  if at then
    local fields = entry[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'd' then
        if fields[j + 1] ~= ARGV[at + 1] then return -1 end
        fields[j + 1] = ARGV[at + 2]
        count = count + 1
      end
    end
  end
end
if count == 0 then return 0 end
local info = redis.call('XINFO', 'STREAM', key)
local meta = {}
for i = 1, #info, 2 do meta[info[i]] = info[i + 1] end
local ttl = redis.call('PTTL', key)
redis.call('DEL', key)
for _, entry in ipairs(entries) do
  redis.call('XADD', key, entry[1], unpack(entry[2]))
end
if meta['entries-added'] then
  redis.call('XSETID', key, meta['last-generated-id'], 'ENTRIESADDED', meta['entries-added'],
    'MAXDELETEDID', meta['max-deleted-entry-id'])
else
  redis.call('XSETID', key, meta['last-generated-id'])
end
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
return count
"""

SCRIPTS = {
    "events_append": APPEND,
    "events_state": STATE,
    "events_heartbeat": HEARTBEAT,
    "events_rekey": REKEY,
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse_id(event_id: str) -> tuple[int, int] | None:
    match = _ID.match(event_id)
    if match is None:
        return None
    ms, seq = int(match.group(1)), int(match.group(2))
    if ms >= 2**64 or seq >= 2**64:
        return None
    return ms, seq


def _fields(raw: Any) -> dict[bytes, bytes]:
    """An entry's fields as redis-py hands them over: a dict, or a flat list (raw RESP)."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    items = list(raw)
    return dict(zip(items[::2], items[1::2], strict=False))


def _before(entry_id: str, stored: Any) -> str | None:
    """The id of the event written just before ``entry_id`` (None for a run's first event):
    ``<ms>-<seq-1>``, or the ``p`` field the first entry of a new millisecond stores."""
    parsed = _parse_id(entry_id)
    if parsed is not None and parsed[1] > 0:
        return f"{parsed[0]}-{parsed[1] - 1}"
    return None if stored is None else _text(stored)


def _entries(raw: Any) -> tuple[list[StoredEvent], str | None]:
    """``XRANGE`` entries (``[(id, fields), ...]``) as stored events, and the id of the
    event written just before the first of them."""
    events: list[StoredEvent] = []
    before: str | None = None
    for entry_id, raw_fields in raw or ():
        fields = _fields(raw_fields)
        data = fields.get(b"d")
        if data is None:  # not written by graphkeep: keep the position, say it is empty
            data = b"{}"
        if not events:
            before = _before(_text(entry_id), fields.get(b"p"))
        events.append(StoredEvent(_text(entry_id), bytes(data), b"c" in fields))
    return events, before


def _xread_entries(raw: Any) -> tuple[list[StoredEvent], str | None]:
    """``XREAD`` of one stream: None (timed out), ``[[key, entries]]`` or ``{key: entries}``."""
    if not raw:
        return [], None
    streams = list(raw.values()) if isinstance(raw, dict) else [pair[1] for pair in raw]
    return _entries(streams[0])


class RedisEventsPort(RedisPort):
    """The event port on Redis (one stream and one hash per run, see the module docstring)."""

    blocking = True
    scripts = SCRIPTS

    def __init__(self, *, key_prefix: str = "graphkeep", cluster: bool = False) -> None:
        super().__init__(key_prefix=key_prefix, cluster=cluster)
        #: the newest event id of each run this port appended sealed events to (bounded)
        self.newest: ThreadLRU[tuple[str], str] = ThreadLRU(KNOWN_RUNS)

    def _base(self, run_id: str) -> str:
        return f"{self.prefix}:{FORMAT}:{{{escaped_key(run_id)}}}:"

    def stream_key(self, run_id: str) -> str:
        return f"{self._base(run_id)}s"

    def meta_key(self, run_id: str) -> str:
        return f"{self._base(run_id)}m"

    def _keys(self, run_id: str) -> list[str]:
        return [self.stream_key(run_id), self.meta_key(run_id)]

    def setup(self) -> Op[None]:
        yield Script("__load__", [], [])

    def append(self, run_id: str, batch: Batch) -> Op[list[str]]:
        closing, retention = batch.closing, batch.retention
        ttl = "" if retention.ttl_ms is None else retention.ttl_ms
        calls = _calls(batch.payloads, batch.size)
        ids: list[str] = []
        for number, call in enumerate(calls):
            status = ""
            if closing and number == len(calls) - 1:
                status = batch.close_status or ""
            args = [batch.now_ms, ttl, retention.max_events, status, uuid.uuid4().hex]
            try:
                if batch.seal is None:
                    first = yield Script(
                        "events_append", self._keys(run_id), args + ["*", "", ""] + call
                    )
                else:
                    first = yield from self._append_sealed(run_id, batch, args, call)
            except ResponseError as exc:
                if CLOSED_REPLY not in str(exc):
                    raise
                closed = str(exc).split(CLOSED_REPLY, 1)[1].strip()
                written = (
                    f"the first {len(ids)} events of this batch were stored before it closed,"
                    " the rest were not"
                    if ids
                    else "nothing was appended"
                )
                raise RunClosed(f"run {run_id!r} is closed ({closed}); {written}") from None
            parsed = _parse_id(_text(first))
            if parsed is None:
                raise AssertionError(f"the append script returned {first!r}, not a stream id")
            ms, seq = parsed
            ids += [f"{ms}-{seq + k}" for k in range(len(call))]
        return ids

    def _append_sealed(
        self, run_id: str, batch: Batch, args: list[Any], call: list[bytes]
    ) -> Op[Any]:
        """One script call of a sealed batch: its ids are chosen here, after the newest id
        this port knows of the run, so that each payload is sealed at its id; when another
        writer moved the run on, the script answers its newest id and the call is sealed
        again after it (the token stays: a re-sent call that did run is not run twice)."""
        newest = self.newest.get((run_id,)) or ""  # a run this port has not written: a new one?
        while True:
            ms, seq = batch.now_ms, 0
            if newest:
                last_ms, last_seq = self.id_key(newest)
                if last_ms >= ms:
                    ms, seq = last_ms, last_seq + 1
            sealed = [batch.stored(f"{ms}-{seq + k}", p) for k, p in enumerate(call)]
            reply = yield Script(
                "events_append", self._keys(run_id), [*args, newest, ms, seq, *sealed]
            )
            if not isinstance(reply, list):
                self.newest.put((run_id,), f"{ms}-{seq + len(call) - 1}")
                return reply
            if _text(reply[0]) == newest:  # each lost race shows another writer's progress
                raise GraphkeepError(
                    f"the append script refuses run {run_id!r} after {newest or 'nothing'}"
                    " and names that same id: were its keys written by another program?"
                )
            newest = _text(reply[0])

    def read(
        self, run_id: str, after: str | None, limit: int, wait_ms: int
    ) -> Op[list[StoredEvent]]:
        key = self.stream_key(run_id)
        if after == MAX_ID:  # no id can follow it (and XRANGE refuses "(" + MAX_ID)
            if wait_ms > 0:
                yield Sleep(wait_ms / 1000)
            return []
        start = "-" if after is None else f"({after}"
        events, before = _entries((yield Command(("XRANGE", key, start, "+", "COUNT", limit))))
        if not events and wait_ms > 0:
            since = "0-0" if after is None else after
            reply = yield XRead(key, since, limit, wait_ms)
            events, before = _xread_entries(reply)
        # the event before the first one read is newer than ``after`` yet not read: retention
        # dropped it (a follower that fell more than max_events behind). Never skip silently.
        if after is not None and before is not None and self.id_key(before) > self.id_key(after):
            raise EventsTrimmed(
                f"run {run_id!r}: events after {after} up to {before} were dropped by"
                " retention (max_events / ttl) before they were read; resume from the start"
            )
        return events

    def state(self, run_id: str) -> Op[RunState | None]:
        active, closed, first_id, before = yield Script("events_state", self._keys(run_id), [])
        if active is None and closed is None and first_id is None:
            return None
        # the first kept event's predecessor is the newest event retention dropped
        trimmed = None if first_id is None else _before(_text(first_id), before)
        return RunState(
            active_ms=int(_text(active)) if active is not None else 0,
            closed=_text(closed) if closed is not None else None,
            trimmed_through=trimmed,
        )

    def heartbeat(self, run_id: str, now_ms: int, retention: Retention) -> Op[None]:
        ttl = "" if retention.ttl_ms is None else retention.ttl_ms
        yield Script("events_heartbeat", self._keys(run_id), [now_ms, ttl])

    def delete(self, run_ids: list[str]) -> Op[None]:
        if self.cluster:  # a run's two keys share a slot: one DEL per run
            for run_id in run_ids:
                yield Delete(self._keys(run_id))
            return
        for at in range(0, len(run_ids), 500):
            yield Delete([key for run in run_ids[at : at + 500] for key in self._keys(run)])

    def run_ids(self) -> Op[list[str]]:
        found = yield Scan(f"{pattern_prefix(self.prefix)}:{FORMAT}:{{*}}:s")
        head = len(f"{self.prefix}:{FORMAT}:{{")
        return sorted({unescaped(_text(k)[head:-3]) for k in found})

    def records(self, run_id: str) -> Op[list[StoredRecord]]:
        """Every entry of the run's stream (one event each), oldest first."""
        key = self.stream_key(run_id)
        records: list[StoredRecord] = []
        start = "-"
        while True:
            page, _ = _entries((yield Command(("XRANGE", key, start, "+", "COUNT", REKEY_PAGE))))
            records += [StoredRecord([(e.event_id, e.data)]) for e in page]
            if len(page) < REKEY_PAGE:
                return records
            start = f"({page[-1].event_id}"

    def rewrite(self, run_id: str, changes: list[tuple[StoredRecord, list[bytes]]]) -> Op[int]:
        """One script call per :data:`CALL_BYTES` of payloads (each rebuilds the stream)."""
        done = 0
        args: list[Any] = []
        size = 0
        for at, (record, new) in enumerate(changes):
            ((event_id, old),) = record.events
            args += [event_id, old, new[0]]
            size += len(old) + len(new[0])
            if size >= CALL_BYTES or at == len(changes) - 1:
                count = yield Script("events_rekey", [self.stream_key(run_id)], args)
                done += max(0, int(count))
                args, size = [], 0
        return done

    def id_key(self, event_id: str) -> tuple[int, ...]:
        parsed = _parse_id(event_id) if isinstance(event_id, str) else None
        if parsed is None:
            raise InvalidInput(
                f"{str(event_id)[:60]!r} is not a Redis event id (<ms>-<seq>, e.g. 1700000000000-3)"
            )
        return parsed


def _calls(payloads: list[bytes], size_of: Callable[[bytes], int]) -> list[list[bytes]]:
    """Payloads cut into script calls of at most CALL_EVENTS events and about CALL_BYTES
    stored (``size_of``: sealed with encryption on)."""
    calls: list[list[bytes]] = [[]]
    size = 0
    for payload in payloads:
        cost = size_of(payload)
        if calls[-1] and (len(calls[-1]) >= CALL_EVENTS or size + cost > CALL_BYTES):
            calls.append([])
            size = 0
        calls[-1].append(payload)
        size += cost
    return calls


class RedisEventLog(OnRedis, SyncEventLog):
    """Run event log on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``ttl`` (seconds after a run's last append or heartbeat, sliding; default one
    day; None keeps runs until deleted), ``max_events`` (per run, default 10,000; Redis
    trims by whole stream nodes, so up to ~100 more are kept), ``stale_after`` (seconds),
    ``key_prefix`` (default ``"graphkeep"``); ``poll_interval`` / ``max_poll_interval`` are
    accepted and unused (reads block on the stream); ``where`` names the server in errors
    (default: the client's host and port).
    """

    port_type = RedisEventsPort


class AsyncRedisEventLog(OnRedis, AsyncEventLog):
    """Run event log on a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` client
    (options as :class:`RedisEventLog`)."""

    port_type = RedisEventsPort
