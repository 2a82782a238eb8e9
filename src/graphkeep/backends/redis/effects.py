"""The effect ledger on Redis: :class:`RedisEffects` (sync) and :class:`AsyncRedisEffects`.

Plain Redis >= 7 or Redis Cluster, the client types and URLs of the Redis savers::

    with RedisEffects.from_url("redis://localhost:6379/0") as ledger:
        @ledger.once
        def create_ticket(title: str) -> str: ...

Keys (``P`` = ``key_prefix``; ``<t>`` the thread id escaped as the saver escapes it, so the
records are in the thread's own hash slot; ``%`` for effects called outside a graph, which
no escaped thread id can be)::

    P:fx1:{<t>}:r:<key>   HASH  s state, t token, l lease end (ms), x expiry (ms), d data,
                                n name, c created (ms), u updated (ms); native PEXPIREAT x
    P:fx1:{<t>}:i         ZSET  member <key>, score its expiry: the thread's records

Every transition is one script on the thread's slot (claim, take_over, finish, release),
atomic on a cluster too. Under a lease (``saver.lock``; ``fence`` given) claim and take_over
run as ``/fenced`` variants that also declare the saver's fencing-token key of the thread
(``P:1:{<t>}:fence``, same prefix, same slot) and refuse, writing nothing, when it holds a
newer token than the caller's (:class:`~graphkeep.errors.LeaseLost`): no extra request.
``get`` is one HGETALL, ``list`` / ``clear`` of a thread two scripts (the first learns the
records the index names, the second, declaring them in KEYS, reads or deletes them: no
script touches a key it was not given), of every thread a SCAN for the indexes on every
primary, then that per index.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.redis.checkpoint_scripts import FENCE, LEASE_LOST, lease_refusal
from graphkeep.backends.redis.client import OnRedis, ResponseError
from graphkeep.backends.redis.declared import (
    LIST_INDEXED,
    clear_indexed,
    clear_script,
    list_indexed,
)
from graphkeep.backends.redis.keys import (
    check_prefix,
    decode_thread,
    encode_thread,
    fence_key,
    pattern_prefix,
)
from graphkeep.backends.redis.requests import Command, Scan, Script
from graphkeep.construction import PrefixedPort
from graphkeep.effects.ledger import AsyncLedger, SyncLedger
from graphkeep.effects.port import EffectRecord
from graphkeep.port import Op

__all__ = [
    "EFFECT_SCRIPTS",
    "AsyncRedisEffects",
    "RedisEffects",
    "RedisEffectsPort",
]

FORMAT = "fx1"
#: the hash tag of effects called outside any graph (an escaped thread id never is "%")
NO_THREAD = "%"

# keeps a thread's index: the member's expiry as its score, expired members trimmed, the
# index expiring with its last record
_INDEX = """
local function index(key, member, expires, now)
  redis.call('ZADD', key, expires, member)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last > 0 then redis.call('PEXPIREAT', key, last[2]) end
end
"""

# KEYS: record, index; ARGV: now, member, token, lease end, expiry, name
CLAIM = (
    _INDEX
    + """
local now = tonumber(ARGV[1])
local x = redis.call('HGET', KEYS[1], 'x')
if x and tonumber(x) > now then return redis.call('HGETALL', KEYS[1]) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'started', 't', ARGV[3], 'l', ARGV[4], 'x', ARGV[5],
  'n', ARGV[6], 'c', ARGV[1], 'u', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[5])
index(KEYS[2], ARGV[2], ARGV[5], now)
return false
"""
)

# KEYS: record, index; ARGV: now, member, old token, token, lease end, expiry, name
TAKE_OVER = (
    _INDEX
    + """
local now = tonumber(ARGV[1])
local cur = redis.call('HMGET', KEYS[1], 's', 't', 'l', 'x')
if cur[1] ~= 'started' or cur[2] ~= ARGV[3] or tonumber(cur[3]) > now
   or tonumber(cur[4]) <= now then
  return 0
end
redis.call('HSET', KEYS[1], 't', ARGV[4], 'l', ARGV[5], 'x', ARGV[6], 'n', ARGV[7],
  'u', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
index(KEYS[2], ARGV[2], ARGV[6], now)
return 1
"""
)

# KEYS: record, index; ARGV: now, member, token, state, data, expiry
FINISH = (
    _INDEX
    + """
local cur = redis.call('HMGET', KEYS[1], 's', 't')
if cur[1] ~= 'started' or cur[2] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 's', ARGV[4], 'd', ARGV[5], 'x', ARGV[6], 'u', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
index(KEYS[2], ARGV[2], ARGV[6], tonumber(ARGV[1]))
return 1
"""
)

# KEYS: record, index; ARGV: member, token
RELEASE = """
local cur = redis.call('HMGET', KEYS[1], 's', 't')
if cur[1] ~= 'started' or cur[2] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS: record; ARGV: state, token, updated, data
RESEAL = """
local cur = redis.call('HMGET', KEYS[1], 's', 't', 'u')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'd', ARGV[4])
return 1
"""

# a fenced claim or take_over: the script above after the saver's fence check (KEYS: record,
# index, the thread's fencing token; ARGV: the script's, then the holder's token)
_FENCE = f"local LEASE_LOST = '{LEASE_LOST}'\n{FENCE}"

EFFECT_SCRIPTS = {
    "effects_claim": CLAIM,
    "effects_claim/fenced": _FENCE + CLAIM,
    "effects_take_over": TAKE_OVER,
    "effects_take_over/fenced": _FENCE + TAKE_OVER,
    "effects_finish": FINISH,
    "effects_release": RELEASE,
    "effects_reseal": RESEAL,
    "effects_reseal/fenced": _FENCE + RESEAL,
    "effects_list": LIST_INDEXED,
    "effects_clear": clear_script("DEL"),
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _record(thread_id: str, key: str, flat: list[Any]) -> EffectRecord:
    fields = {_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}
    data = fields.get("d")
    return EffectRecord(
        thread_id=thread_id,
        key=key,
        state=_text(fields["s"]),
        token=_text(fields["t"]),
        lease_until_ms=int(fields["l"]),
        expires_ms=int(fields["x"]),
        data=None if data is None else bytes(data),
        name=_text(fields.get("n", b"")),
        created_ms=int(fields["c"]),
        updated_ms=int(fields["u"]),
    )


class RedisEffectsPort(PrefixedPort):
    """The effect ledger's port on Redis (a thread's records in its hash slot)."""

    scripts = EFFECT_SCRIPTS

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.prefix = check_prefix(key_prefix)

    def _base(self, thread_id: str) -> str:
        tag = encode_thread(thread_id) if thread_id else NO_THREAD
        return f"{self.prefix}:{FORMAT}:{{{tag}}}:"

    def record_key(self, thread_id: str, key: str) -> str:
        return f"{self._base(thread_id)}r:{key}"

    def index_key(self, thread_id: str) -> str:
        return f"{self._base(thread_id)}i"

    def _keys(self, record: EffectRecord) -> list[str]:
        return [self.record_key(record.thread_id, record.key), self.index_key(record.thread_id)]

    def _thread_of(self, index: str) -> str:
        tag = index[len(self.prefix) + len(FORMAT) + 3 : -3]
        return "" if tag == NO_THREAD else decode_thread(tag)

    def setup(self) -> Op[None]:
        yield Script("__load__", [], [])

    def _starting(
        self, name: str, record: EffectRecord, args: list[Any], fence: int | None
    ) -> Op[Any]:
        """Script ``name`` on the record's keys; under a lease (``fence``) its ``/fenced``
        variant, which first checks the saver's fencing token of the thread (same prefix,
        same slot) and refuses when a newer one was granted: ``LeaseLost``, nothing written."""
        if fence is None:
            return (yield Script(name, self._keys(record), args))
        keys = [*self._keys(record), fence_key(self.prefix, record.thread_id)]
        try:
            return (yield Script(f"{name}/fenced", keys, [*args, fence]))
        except ResponseError as exc:
            raise lease_refusal(exc, record.thread_id, fence) from None

    def claim(
        self, record: EffectRecord, now_ms: int, fence: int | None = None
    ) -> Op[EffectRecord | None]:
        args = [now_ms, record.key, record.token, record.lease_until_ms, record.expires_ms]
        found = yield from self._starting("effects_claim", record, [*args, record.name], fence)
        return _record(record.thread_id, record.key, found) if found else None

    def take_over(
        self, record: EffectRecord, old_token: str, now_ms: int, fence: int | None = None
    ) -> Op[bool]:
        args = [now_ms, record.key, old_token, record.token, record.lease_until_ms]
        done = yield from self._starting(
            "effects_take_over", record, [*args, record.expires_ms, record.name], fence
        )
        return bool(done)

    def finish(self, record: EffectRecord, now_ms: int) -> Op[bool]:
        args = [now_ms, record.key, record.token, record.state, record.data or b""]
        done = yield Script("effects_finish", self._keys(record), [*args, record.expires_ms])
        return bool(done)

    def release(self, thread_id: str, key: str, token: str) -> Op[bool]:
        keys = [self.record_key(thread_id, key), self.index_key(thread_id)]
        done = yield Script("effects_release", keys, [key, token])
        return bool(done)

    def reseal(self, record: EffectRecord, fence: int | None = None) -> Op[bool]:
        keys = [self.record_key(record.thread_id, record.key)]
        args = [record.state, record.token, str(record.updated_ms), record.data or b""]
        if fence is None:
            return bool((yield Script("effects_reseal", keys, args)))
        keys.append(fence_key(self.prefix, record.thread_id))
        try:
            return bool((yield Script("effects_reseal/fenced", keys, [*args, fence])))
        except ResponseError as exc:
            raise lease_refusal(exc, record.thread_id, fence) from None

    def get(self, thread_id: str, key: str) -> Op[EffectRecord | None]:
        flat = yield Command(("HGETALL", self.record_key(thread_id, key)))
        if isinstance(flat, dict):  # a client that answers HGETALL with a dict
            flat = [x for pair in flat.items() for x in pair]
        return _record(thread_id, key, list(flat)) if flat else None

    def _indexes(self, thread_id: str | None) -> Op[list[str]]:
        if thread_id is not None:
            return [self.index_key(thread_id)]
        found = yield Scan(f"{pattern_prefix(self.prefix)}:{FORMAT}:{{*}}:i")
        return sorted({_text(k) for k in found})

    def list(self, thread_id: str | None) -> Op[list[EffectRecord]]:
        records: list[EffectRecord] = []
        for index in (yield from self._indexes(thread_id)):
            thread = self._thread_of(index)
            for key, flat in (yield from list_indexed("effects_list", index, index[:-1] + "r:")):
                records.append(_record(thread, key, flat))
        return records

    def clear(self, thread_id: str | None) -> Op[int]:
        deleted = 0
        for index in (yield from self._indexes(thread_id)):
            deleted += yield from clear_indexed("effects_clear", index, index[:-1] + "r:")
        return deleted


class RedisEffects(OnRedis, SyncLedger):
    """Effect ledger on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``serde``, ``key_prefix`` (default ``"graphkeep"``), ``telemetry`` and the
    ledger's (``ttl``, ``lease``, ``wait``, ``poll``, ``on_unknown``, ``cache_errors``:
    see :class:`~graphkeep.effects.ledger.LedgerBase`).
    """

    port_type = RedisEffectsPort


class AsyncRedisEffects(OnRedis, AsyncLedger):
    """Effect ledger on a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` client."""

    port_type = RedisEffectsPort
