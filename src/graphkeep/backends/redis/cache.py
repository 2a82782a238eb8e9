"""LangGraph node cache on Redis: :class:`RedisCache` (sync) and :class:`AsyncRedisCache`.

Plain Redis >= 7 or Redis Cluster, the client types and URLs of the Redis savers::

    with RedisCache.from_url("redis://localhost:6379/0") as cache:
        graph = builder.compile(cache=cache)

Keys (``P`` = ``key_prefix``; ``<ns>`` / ``<key>`` as
:func:`~graphkeep.cache.port.escaped_namespace` and :func:`~graphkeep.cache.port.escaped_key`
write them, so never with ``{``, ``}`` or NUL)::

    P:nc1:{/<ns>}:e:<key>   STRING  msgpack [expires_ms | nil, typed value], native PX expiry
    P:nc1:{/<ns>}:i         ZSET    member <key>, score expires_ms (inf: no ttl)

The hash tag holds the namespace, so a namespace is one cluster slot (``/`` leads the tag:
an empty tag would hash the whole key). ``set`` writes a namespace's entries and its index
in one script (one per 998 entries: no request over 3,999 arguments), trims index members
already expired and lets the index expire with its last entry. ``clear(namespaces)`` runs
two scripts per namespace: the first learns the indexed keys, the second deletes exactly
them, declared in KEYS (an empty namespace: one); ``clear(None)`` SCANs for this prefix's
indexes on every primary.
``get`` is one MGET per namespace (slot), pipelined on a single server: one round trip.
"""

from __future__ import annotations

from typing import Any

from langgraph.cache.base import FullKey, Namespace

from graphkeep.backends.redis.client import OnRedis, RedisPort
from graphkeep.backends.redis.declared import clear_indexed, clear_script
from graphkeep.backends.redis.keys import pattern_prefix
from graphkeep.backends.redis.requests import MAX_ARGS, MGet, Scan, Script
from graphkeep.cache.port import (
    Entry,
    Held,
    Stored,
    escaped_key,
    escaped_namespace,
    namespace_of,
    unescaped,
    unreadable,
)
from graphkeep.cache.shells import AsyncCache, SyncCache
from graphkeep.errors import CorruptData
from graphkeep.port import Op, codec

__all__ = ["AsyncRedisCache", "RedisCache", "RedisCachePort"]

FORMAT = "nc1"

# KEYS: index, entry...; ARGV: now_ms, then (member, value, expires_ms or "") per entry
SET = """
local index = KEYS[1]
local now = tonumber(ARGV[1])
for i = 2, #KEYS do
  local at = 2 + (i - 2) * 3
  local member, value, expires = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  if expires == '' then
    redis.call('SET', KEYS[i], value)
    redis.call('ZADD', index, 'inf', member)
  else
    local px = tonumber(expires) - now
    if px < 1 then px = 1 end
    redis.call('SET', KEYS[i], value, 'PX', px)
    redis.call('ZADD', index, expires, member)
  end
end
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
if #last == 0 then
  redis.call('DEL', index)
elseif last[2] == 'inf' then
  redis.call('PERSIST', index)
else
  redis.call('PEXPIREAT', index, last[2])
end
return 0
"""

# KEYS: entry; ARGV: the stored value read, the new one. Replaced only if unchanged, expiry kept
RESEAL = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
"""

SCRIPTS = {"cache_set": SET, "cache_clear": clear_script("UNLINK"), "cache_reseal": RESEAL}
#: entries of one ``cache_set`` call: 4 arguments each, under MAX_ARGS with the index
SET_ENTRIES = (MAX_ARGS - 5) // 4


class RedisCachePort(RedisPort):
    """The cache port on Redis."""

    scripts = SCRIPTS

    def _base(self, namespace: Namespace) -> str:
        return f"{self.prefix}:{FORMAT}:{{/{escaped_namespace(namespace)}}}:"

    def entry_key(self, namespace: Namespace, key: str) -> str:
        return f"{self._base(namespace)}e:{escaped_key(key)}"

    def index_key(self, namespace: Namespace) -> str:
        return f"{self._base(namespace)}i"

    def _index_pattern(self) -> str:
        return f"{pattern_prefix(self.prefix)}:{FORMAT}:{{*}}:i"

    def setup(self) -> Op[None]:
        yield Script("__load__", [], [])

    def get(self, keys: list[FullKey]) -> Op[dict[FullKey, Stored]]:
        addresses = list(dict.fromkeys(keys))
        raw = yield MGet([self.entry_key(*address) for address in addresses])
        found: dict[FullKey, Stored] = {}
        for address, value in zip(addresses, raw, strict=True):
            if value is not None:
                try:
                    expires_ms, data = codec.unpack_fields(value, 2)
                except CorruptData as exc:
                    unreadable(address, exc)
                    continue
                found[address] = Stored(data, expires_ms)
        return found

    def set(self, entries: list[Entry], now_ms: int) -> Op[None]:
        by_namespace: dict[Namespace, list[Entry]] = {}
        for entry in entries:
            by_namespace.setdefault(entry.namespace, []).append(entry)
        for namespace, entries in by_namespace.items():
            for at in range(0, len(entries), SET_ENTRIES):
                yield self._set(namespace, entries[at : at + SET_ENTRIES], now_ms)

    def _set(self, namespace: Namespace, group: list[Entry], now_ms: int) -> Script:
        keys = [self.index_key(namespace)]
        args: list[Any] = [now_ms]
        for entry in group:
            keys.append(self.entry_key(namespace, entry.key))
            expires = "" if entry.expires_ms is None else entry.expires_ms
            packed = codec.packb([entry.expires_ms, entry.data])
            args += [escaped_key(entry.key), packed, expires]
        return Script("cache_set", keys, args)

    def clear(self, namespaces: list[Namespace] | None) -> Op[None]:
        if namespaces is None:
            indexes: list[bytes | str] = yield Scan(self._index_pattern())
            names = [k.decode() if isinstance(k, bytes) else k for k in indexes]
        else:
            names = [self.index_key(ns) for ns in namespaces]
        for index in names:
            yield from clear_indexed("cache_clear", index, index.removesuffix("i") + "e:")

    def entries(self) -> Op[list[Held]]:
        found: list[bytes | str] = yield Scan(f"{pattern_prefix(self.prefix)}:{FORMAT}:{{*}}:e:*")
        names = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
        values = yield MGet(names)
        held: list[Held] = []
        start = f"{self.prefix}:{FORMAT}:{{/"
        for name, value in zip(names, values, strict=True):
            if value is None or not name.startswith(start):
                continue
            ns_text, _, key_text = name[len(start) :].rpartition("}:e:")
            try:
                _, data = codec.unpack_fields(value, 2)
            except CorruptData:
                continue
            address = (namespace_of(ns_text), unescaped(key_text))
            held.append(Held(address, bytes(data), (name, bytes(value))))
        return held

    def reseal(self, held: Held, data: bytes) -> Op[bool]:
        name, stored = held.ref
        expires_ms, _ = codec.unpack_fields(stored, 2)
        done = yield Script("cache_reseal", [name], [stored, codec.packb([expires_ms, data])])
        return bool(done)


class RedisCache(OnRedis, SyncCache):
    """Node cache on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``serde`` (default LangGraph's JsonPlusSerializer), ``key_prefix``
    (default ``"graphkeep"``); ``where`` names the server in errors (default: the
    client's host and port).
    """

    port_type = RedisCachePort


class AsyncRedisCache(OnRedis, AsyncCache):
    """Node cache on a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` client."""

    port_type = RedisCachePort
