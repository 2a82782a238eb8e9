"""The Redis mapping of the memory store (plain Redis >= 7, no modules; Cluster-safe).

Namespaces are grouped into *partitions*: the first ``shard_labels`` labels (default 1) of a
namespace. A partition's keys share one hash tag, so every operation on it is one Lua
script in one slot::

    <prefix>:m1:{<partition>}:i  HASH  "ns\\0key" -> created_us (8 bytes) updated_us (8) value JSON
    <prefix>:m1:{<partition>}:u  ZSET  "ns\\0key" scored by updated_us (search order)
    <prefix>:m1:{<partition>}:e  ZSET  "ns\\0key" scored by expiry (epoch ms), items with a TTL
    <prefix>:m1:{<partition>}:t  HASH  "ns\\0key" -> TTL in ms (what a refresh re-arms)
    <prefix>:m1:{<partition>}:v  HASH  "ns\\0key" -> the item's embeddings (msgpack)
    <prefix>:m1:{<partition>}:n  HASH  ns -> number of items (list_namespaces)
    <prefix>:m1:parts            SET   partitions (read only by searches and listings whose
                                       prefix is shorter than a partition)

``ns`` is the namespace's labels joined by ``.`` (labels hold neither ``.`` nor NUL).
Every script first removes the partition's expired items (so nothing expired is ever
returned, and the partition never holds them for long), then does its work: a get, a put,
a search (filters evaluated next to the data, semantic scoring in Lua over float32
vectors) or a listing — one round trip. Requests that touch several partitions are sent
as one pipeline (one round trip on a single node; one per node on a cluster).

``vector_index=True`` (a single server with the Query Engine: Redis 8, Redis Stack, Valkey
with valkey-search) also keeps every embedding as a hash ``<prefix>:m1:vectors:<dims>:<metric>:
<sha1(member)>:<n>`` (fields ``m`` member, ``p`` the tags of the namespace's prefixes, ``v``
the vector) under an exact FLAT index; the same search script then asks ``FT.SEARCH`` for
the nearest neighbours instead of scoring every item, widening ``K`` until the page is full
after filters and ties are settled, so answers equal the scan's. ``setup()`` creates the
index and indexes items written before it.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import orjson
import redis
import redis.asyncio as aredis
from redis.exceptions import ResponseError

from graphkeep.backends.redis import (
    _AsyncExecutor,
    _check_client,
    _describe,
    _SyncExecutor,
    async_client,
    sync_client,
)
from graphkeep.backends.redis.store import Command, Pipeline, Script, check_prefix, encode_thread
from graphkeep.errors import ConfigurationError
from graphkeep.shared import serde as codec
from graphkeep.shared.keys import mask_url
from graphkeep.shared.memory import (
    AsyncMemoryStore,
    ItemKey,
    MemoryStore,
    Namespace,
    SearchQuery,
    StoredItem,
    SyncMemoryStore,
    Vector,
    decode_value,
    encode_value,
    namespace_of,
    namespace_text,
    pack_vector,
    rank,
)
from graphkeep.shared.port import Op

__all__ = ["STORE_OPTIONS", "AsyncRedisStore", "RedisMemory", "RedisStore"]

#: options beyond the common ones (see ``graphkeep.connect_store``)
STORE_OPTIONS = frozenset({"shard_labels", "vector_index"})
FORMAT = "m1"
PURGE_LIMIT = 1000

PRELUDE = (
    f"local PURGE = {PURGE_LIMIT}\n"
    + r"""
local I, U, E, T, V, N = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local function ns_of(member)
  return string.sub(member, 1, string.find(member, '\0', 1, true) - 1)
end

-- with a Query Engine vector index: every embedding is also a hash XP<sha1(member)>:<i>
local XP = KEYS[7]

local function vector_keys(member, blob)
  local h = struct.unpack('>I4', blob)
  local header = cmsgpack.unpack(string.sub(blob, 5, 4 + h))
  return XP .. redis.sha1hex(member) .. ':', #header, h
end

local function unindex(member)
  if not XP then return end
  local blob = redis.call('HGET', V, member)
  if not blob then return end
  local base, n = vector_keys(member, blob)
  for i = 1, n do redis.call('DEL', base .. i) end
end

-- the item's namespace and every prefix of it, as tags (sha1 of the labels joined by '.')
local function tags(member)
  local ns, out, at = ns_of(member), {}, 0
  while true do
    at = string.find(ns, '.', at + 1, true)
    out[#out + 1] = string.sub(redis.sha1hex(string.sub(ns, 1, (at or 0) - 1)), 1, 20)
    if not at then break end
  end
  return table.concat(out, ' ')
end

local function index(member, blob)
  if not XP or blob == '' then return end
  local base, n, h = vector_keys(member, blob)
  local tagged = tags(member)
  local size = (#blob - 4 - h) / n
  for i = 1, n do
    local first = 5 + h + (i - 1) * size
    redis.call('HSET', base .. i, 'm', member, 'p', tagged,
               'v', string.sub(blob, first, first + size - 1))
  end
end

local function remove(member)
  if redis.call('HDEL', I, member) == 1 then
    redis.call('ZREM', U, member)
    redis.call('ZREM', E, member)
    redis.call('HDEL', T, member)
    unindex(member)
    redis.call('HDEL', V, member)
    local ns = ns_of(member)
    if redis.call('HINCRBY', N, ns, -1) <= 0 then redis.call('HDEL', N, ns) end
    return 1
  end
  return 0
end

-- remove up to `limit` expired items of this partition; the number removed
local function purge(now, limit)
  local gone = redis.call('ZRANGEBYSCORE', E, '-inf', now, 'LIMIT', 0, limit)
  local count = 0
  for _, member in ipairs(gone) do count = count + remove(member) end
  return count
end

local function expiry(member)
  local at = redis.call('ZSCORE', E, member)
  if at then return at end
  return false
end

-- the item's record, or false when missing or expired (past what purge removed)
local function live(member, now)
  local at = redis.call('ZSCORE', E, member)
  if at and tonumber(at) <= now then return false end
  return redis.call('HGET', I, member)
end

local function refresh(member, now)
  local ttl = redis.call('HGET', T, member)
  if ttl then
    local at = now + tonumber(ttl)
    redis.call('ZADD', E, at, member)
    return tostring(at)
  end
  return expiry(member)
end
"""
)

GET = (
    PRELUDE
    + r"""
-- ARGV: now, with_vectors, then pairs (member, refresh 0/1)
local now = tonumber(ARGV[1])
purge(now, PURGE)
local out = {}
for i = 3, #ARGV, 2 do
  local member = ARGV[i]
  local record = live(member, now)
  if record then
    local at = ARGV[i + 1] == '1' and refresh(member, now) or expiry(member)
    local vectors = false
    if ARGV[2] == '1' then vectors = redis.call('HGET', V, member) or false end
    out[#out + 1] = {record, at, vectors}
  else
    out[#out + 1] = false
  end
end
return out
"""
)

PUT = (
    PRELUDE
    + r"""
-- ARGV: now, n_puts, then per put: member, created(8 bytes), rest (updated(8) + value),
--       updated_us, expires_ms or '', ttl_ms or '', vectors or ''; then members to delete
local now = tonumber(ARGV[1])
purge(now, PURGE)
local n = tonumber(ARGV[2])
local i = 3
for _ = 1, n do
  local member = ARGV[i]
  local old = redis.call('HGET', I, member)
  local created = ARGV[i + 1]
  if old then
    created = string.sub(old, 1, 8)
  else
    redis.call('HINCRBY', N, ns_of(member), 1)
  end
  redis.call('HSET', I, member, created .. ARGV[i + 2])
  redis.call('ZADD', U, ARGV[i + 3], member)
  if ARGV[i + 4] ~= '' then
    redis.call('ZADD', E, ARGV[i + 4], member)
    redis.call('HSET', T, member, ARGV[i + 5])
  else
    redis.call('ZREM', E, member)
    redis.call('HDEL', T, member)
  end
  unindex(member)
  if ARGV[i + 6] ~= '' then
    redis.call('HSET', V, member, ARGV[i + 6])
    index(member, ARGV[i + 6])
  else
    redis.call('HDEL', V, member)
  end
  i = i + 7
end
for j = i, #ARGV do remove(ARGV[j]) end
return redis.call('HLEN', I)
"""
)

SEARCH = (
    PRELUDE
    + r"""
-- ARGV: now, prefix ('' = all), offset, limit, refresh 0/1, conditions (JSON),
--       distance ('' = no vector), query vector (float32 LE), dims,
--       vector index name ('' = none: exact scan here), the prefix's index tag ('' = all)
local now = tonumber(ARGV[1])
purge(now, PURGE)
local prefix, offset, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local conditions = cjson.decode(ARGV[6])
local distance, dims = ARGV[7], tonumber(ARGV[9])
local MISSING = {}

local function at(value, path)
  for _, part in ipairs(path) do
    if type(value) ~= 'table' then return MISSING end
    local inner = value[part]
    if inner == nil then return MISSING end
    value = inner
  end
  return value
end

local function equal(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == 'table' then
    for k, v in pairs(a) do
      if b[k] == nil or not equal(v, b[k]) then return false end
    end
    for k, _ in pairs(b) do
      if a[k] == nil then return false end
    end
    return true
  end
  return a == b
end

local function satisfies(value, c)
  local found, op, expected = at(value, c[1]), c[2], c[3]
  if op == '$eq' then
    if expected == cjson.null then return found == MISSING or found == cjson.null end
    return found ~= MISSING and equal(found, expected)
  end
  if found == MISSING then return false end
  if op == '$ne' then return not equal(found, expected) end
  if type(expected) == 'string' then
    if type(found) ~= 'string' then return false end
  elseif type(found) ~= 'number' then
    return false
  end
  if op == '$gt' then return found > expected end
  if op == '$gte' then return found >= expected end
  if op == '$lt' then return found < expected end
  return found <= expected
end

local expiring = redis.call('ZCARD', E) > 0

local function in_prefix(member)
  if prefix == '' then return true end
  if string.sub(member, 1, #prefix) ~= prefix then return false end
  local next = string.sub(member, #prefix + 1, #prefix + 1)
  return next == '\0' or next == '.'
end

-- the item's record when it is live and passes the filter, else false
local function wanted(member)
  local record
  if expiring then
    record = live(member, now)
  else
    record = redis.call('HGET', I, member)
  end
  if not record then return false end
  if #conditions > 0 then
    local value = cjson.decode(string.sub(record, 17))
    for _, c in ipairs(conditions) do
      if not satisfies(value, c) then return false end
    end
  end
  return record
end

local query, qnorm = nil, 0
if distance ~= '' then
  query = {struct.unpack('<' .. string.rep('f', dims), ARGV[8])}
  for k = 1, dims do qnorm = qnorm + query[k] * query[k] end
  qnorm = math.sqrt(qnorm)
end

-- an item's embeddings: 4-byte header length, msgpack header (paths), float32 data
local function score(blob)
  local best = nil
  local format = '<' .. string.rep('f', dims)
  local size = dims * 4
  for first = 5 + struct.unpack('>I4', blob), #blob - size + 1, size do
    local v = {struct.unpack(format, blob, first)}
    local s = 0
    if distance == 'l2' then
      for k = 1, dims do s = s + (query[k] - v[k]) ^ 2 end
      s = -math.sqrt(s)
    else
      for k = 1, dims do s = s + query[k] * v[k] end
      if distance == 'cosine' then
        local norm = 0
        for k = 1, dims do norm = norm + v[k] * v[k] end
        norm = math.sqrt(norm) * qnorm
        if norm > 0 then s = s / norm else s = 0 end
      end
    end
    if best == nil or s > best then best = s end
  end
  return best
end

local page = {}
if query == nil then
  -- newest first; stop once offset + limit items matched
  local need, seen, start = offset + limit, 0, 0
  while seen < need do
    local batch = redis.call('ZREVRANGE', U, start, start + 255)
    if #batch == 0 then break end
    for _, member in ipairs(batch) do
      local record = in_prefix(member) and wanted(member)
      if record then
        seen = seen + 1
        if seen > offset then page[#page + 1] = {member, record, false} end
        if seen >= need then break end
      end
    end
    start = start + 256
  end
elseif ARGV[10] ~= '' then
  -- the Query Engine's exact (FLAT) KNN, widened until offset + limit items pass the filter
  -- and every item tied with the last of them is in (so ties break by member, as the scan)
  local need, k, seen, scored = offset + limit, (offset + limit) * 2 + 10, {}, {}
  local match = ARGV[11] == '' and '*' or ('@p:{' .. ARGV[11] .. '}')
  while true do
    local reply = redis.call('FT.SEARCH', ARGV[10], match .. '=>[KNN ' .. k .. ' @v $B AS d]',
      'PARAMS', '2', 'B', ARGV[8], 'RETURN', '2', 'm', 'd', 'SORTBY', 'd',
      'LIMIT', '0', k, 'DIALECT', '2')
    local farthest = nil
    for j = 3, #reply, 2 do
      local fields, member, d = reply[j], nil, nil
      for f = 1, #fields, 2 do
        if fields[f] == 'm' then member = fields[f + 1] else d = tonumber(fields[f + 1]) end
      end
      if d then farthest = d end
      if member and d and not seen[member] then
        seen[member] = true
        local record = in_prefix(member) and wanted(member)
        if record then
          local s = 1 - d
          if distance == 'l2' then s = -math.sqrt(math.max(d, 0)) end
          scored[#scored + 1] = {member, record, s, d}
        end
      end
    end
    if (#reply - 1) / 2 < k then break end  -- every candidate seen
    if #scored >= need then
      table.sort(scored, function(a, b)
        if a[4] ~= b[4] then return a[4] < b[4] end
        return a[1] < b[1]
      end)
      if farthest > scored[need][4] then break end
    end
    k = k * 4
  end
  table.sort(scored, function(a, b)
    if a[3] ~= b[3] then return a[3] > b[3] end
    return a[1] < b[1]
  end)
  for j = offset + 1, math.min(need, #scored) do
    local entry = scored[j]
    page[#page + 1] = {entry[1], entry[2], string.format('%.17g', entry[3])}
  end
else
  local scored = {}
  local all = redis.call('HGETALL', V)
  for k = 1, #all, 2 do
    local member = all[k]
    if in_prefix(member) then
      local record = wanted(member)
      if record then
        local s = score(all[k + 1])
        if s ~= nil then scored[#scored + 1] = {member, record, s} end
      end
    end
  end
  table.sort(scored, function(a, b)
    if a[3] ~= b[3] then return a[3] > b[3] end
    return a[1] < b[1]
  end)
  for k = offset + 1, math.min(offset + limit, #scored) do
    local entry = scored[k]
    page[#page + 1] = {entry[1], entry[2], string.format('%.17g', entry[3])}
  end
end
for _, entry in ipairs(page) do
  local member = entry[1]
  entry[4] = ARGV[5] == '1' and refresh(member, now) or expiry(member)
  entry[5] = redis.call('HEXISTS', T, member)
end
return page
"""
)

NAMESPACES = (
    PRELUDE
    + r"""
purge(tonumber(ARGV[1]), PURGE)
return redis.call('HKEYS', N)
"""
)

SWEEP = (
    PRELUDE
    + r"""
-- remove every expired item (in rounds), then report what is left
local now, removed = tonumber(ARGV[1]), 0
while true do
  local count = purge(now, PURGE)
  removed = removed + count
  if count < PURGE then break end
end
return {removed, redis.call('HLEN', I)}
"""
)

REINDEX = (
    PRELUDE
    + r"""
-- (re)write the vector index entries of every embedded item of this partition
local all, count = redis.call('HGETALL', V), 0
for k = 1, #all, 2 do
  unindex(all[k])
  index(all[k], all[k + 1])
  count = count + 1
end
return count
"""
)

REFRESH = (
    PRELUDE
    + r"""
local now = tonumber(ARGV[1])
for i = 2, #ARGV do refresh(ARGV[i], now) end
return 1
"""
)

SCRIPTS: dict[str, str] = {
    "m_get": GET,
    "m_put": PUT,
    "m_search": SEARCH,
    "m_namespaces": NAMESPACES,
    "m_sweep": SWEEP,
    "m_refresh": REFRESH,
    "m_reindex": REINDEX,
}
#: Query Engine metric names for PostgresStore's distance types
METRICS = {"cosine": "COSINE", "l2": "L2", "inner_product": "IP"}


def _member(namespace: Namespace, key: str) -> bytes:
    return namespace_text(namespace).encode() + b"\x00" + key.encode("utf-8", "surrogatepass")


def _split_member(member: bytes) -> ItemKey:
    ns, _, key = member.partition(b"\x00")
    return namespace_of(ns.decode()), key.decode("utf-8", "surrogatepass")


def _pack_vectors(vectors: list[Vector]) -> bytes:
    """Header length (4 bytes), msgpack [[path, digest], ...], then every vector's float32
    data back to back (what the search script scores)."""
    header = codec.packb([[v.path, v.digest] for v in vectors])
    return len(header).to_bytes(4, "big") + header + b"".join(v.data for v in vectors)


def _unpack_vectors(blob: bytes) -> list[Vector]:
    size = int.from_bytes(blob[:4], "big")
    header = codec.unpackb(blob[4 : 4 + size])
    data = blob[4 + size :]
    width = len(data) // len(header)
    return [
        Vector(path, digest, data[i * width : (i + 1) * width])
        for i, (path, digest) in enumerate(header)
    ]


def _stored(member: bytes, record: bytes, expires: Any, vectors: bytes | None = None) -> StoredItem:
    namespace, key = _split_member(member)
    return StoredItem(
        namespace=namespace,
        key=key,
        value=decode_value(record[16:]),
        created_us=int.from_bytes(record[:8], "big"),
        updated_us=int.from_bytes(record[8:16], "big"),
        expires_ms=int(float(expires)) if expires else None,
        vectors=_unpack_vectors(vectors) if vectors else [],
    )


class RedisMemory:
    """The :class:`~graphkeep.shared.memory.MemoryPort` on Redis."""

    def __init__(
        self, *, key_prefix: str = "graphkeep", shard_labels: int = 1, vector_index: bool = False
    ) -> None:
        self.prefix = check_prefix(key_prefix)
        if isinstance(shard_labels, bool) or not isinstance(shard_labels, int) or shard_labels < 1:
            raise ConfigurationError(f"shard_labels must be an int >= 1, got {shard_labels!r}")
        if not isinstance(vector_index, bool):
            raise ConfigurationError(f"vector_index must be True or False, got {vector_index!r}")
        self.shard_labels = shard_labels
        self.registry = f"{self.prefix}:{FORMAT}:parts"
        self._registered: set[str] = set()
        self.vector_index = vector_index
        #: the Query Engine index and the key prefix of its entries (set by ``use_index``)
        self.index_name = ""
        self.index_prefix = ""
        self.index_schema: tuple[Any, ...] = ()

    def use_index(self, dims: int, distance: str) -> None:
        """Keep every embedding also as a hash indexed by the Query Engine (FLAT: exact)."""
        metric = METRICS[distance]
        self.index_name = f"{self.prefix}:{FORMAT}:vectors:{dims}:{metric}"
        self.index_prefix = f"{self.index_name}:"
        self.index_schema = (
            "FT.CREATE", self.index_name, "ON", "HASH", "PREFIX", "1", self.index_prefix,
            "SCHEMA", "p", "TAG", "SEPARATOR", " ",
            "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", dims, "DISTANCE_METRIC", metric,
        )  # fmt: skip

    # -- keys ----------------------------------------------------------------------

    def partition(self, namespace: Namespace) -> Namespace:
        return namespace[: self.shard_labels]

    def keys(self, partition: Namespace) -> list[str]:
        base = f"{self.prefix}:{FORMAT}:{{{encode_thread(namespace_text(partition))}}}"
        keys = [f"{base}:{suffix}" for suffix in ("i", "u", "e", "t", "v", "n")]
        # the index entries' prefix rides along as KEYS[7] (single node only: it has no tag)
        return [*keys, self.index_prefix] if self.index_prefix else keys

    def partitions(self, prefix: Namespace) -> Op[list[Namespace]]:
        """The partitions that can hold namespaces under ``prefix``."""
        if len(prefix) >= self.shard_labels:
            return [self.partition(prefix)]
        raw = yield Command(("SMEMBERS", self.registry))
        found = [namespace_of(p.decode() if isinstance(p, bytes) else p) for p in raw]
        return sorted(p for p in found if p[: len(prefix)] == prefix)

    def _calls(self, calls: list[Any]) -> Op[list[Any]]:
        if len(calls) == 1:
            return [(yield calls[0])]
        if not calls:
            return []
        return list((yield Pipeline(tuple(calls))))

    # -- port ----------------------------------------------------------------------

    def setup(self) -> Op[None]:
        yield _script("__load__", [], [])
        if not self.index_name:
            return
        try:
            existing = yield Command(("FT._LIST",))
        except ResponseError as exc:
            raise ConfigurationError(
                "vector_index=True needs a Redis with the Query Engine (Redis 8, Redis Stack,"
                f" Valkey with valkey-search): {exc}"
            ) from exc
        if self.index_name.encode() in existing or self.index_name in existing:
            return
        yield Command(self.index_schema)
        # entries for items embedded before the index existed
        partitions = yield from self.partitions(())
        yield from self._calls([_script("m_reindex", self.keys(p), []) for p in partitions])

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]:
        groups: dict[Namespace, list[int]] = {}
        for i, (namespace, _) in enumerate(keys):
            groups.setdefault(self.partition(namespace), []).append(i)
        calls = []
        for partition, indexes in groups.items():
            args: list[Any] = [now_ms, int(vectors)]
            for i in indexes:
                args += [_member(*keys[i]), int(refresh[i])]
            calls.append(_script("m_get", self.keys(partition), args))
        replies = yield from self._calls(calls)
        found: list[StoredItem | None] = [None] * len(keys)
        for indexes, reply in zip(groups.values(), replies, strict=True):
            for i, entry in zip(indexes, reply, strict=True):
                if entry:
                    record, expires, blob = entry
                    found[i] = _stored(_member(*keys[i]), record, expires, blob)
        return found

    def put(self, items: list[StoredItem], deletes: list[ItemKey], now_ms: int) -> Op[None]:
        groups: dict[Namespace, tuple[list[StoredItem], list[ItemKey]]] = {}
        for item in items:
            groups.setdefault(self.partition(item.namespace), ([], []))[0].append(item)
        for key in deletes:
            groups.setdefault(self.partition(key[0]), ([], []))[1].append(key)
        fresh = [
            namespace_text(p)
            for p, (puts, _) in groups.items()
            if puts and namespace_text(p) not in self._registered
        ]
        if fresh:
            # registered before the items are written: a listing may find an empty partition,
            # never miss a full one
            yield Command(("SADD", self.registry, *fresh))
        calls = []
        for partition, (puts, dels) in groups.items():
            args: list[Any] = [now_ms, len(puts)]
            for item in puts:
                args += [
                    _member(item.namespace, item.key),
                    item.created_us.to_bytes(8, "big"),
                    item.updated_us.to_bytes(8, "big") + encode_value(item.value),
                    item.updated_us,
                    item.expires_ms if item.expires_ms is not None else "",
                    int(item.ttl_minutes * 60_000) if item.ttl_minutes is not None else "",
                    _pack_vectors(item.vectors) if item.vectors else "",
                ]
            args += [_member(*key) for key in dels]
            calls.append(_script("m_put", self.keys(partition), args))
        yield from self._calls(calls)
        self._registered.update(fresh)

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        partitions = yield from self.partitions(query.prefix)
        several = len(partitions) > 1
        args: list[Any] = [
            query.now_ms,
            namespace_text(query.prefix),
            0 if several else query.offset,
            query.offset + query.limit if several else query.limit,
            int(query.refresh and not several),
            orjson.dumps([[list(c.path), c.op, c.value] for c in query.conditions]),
            query.distance if query.vector is not None else "",
            pack_vector(query.vector) if query.vector is not None else b"",
            len(query.vector) if query.vector is not None else 0,
            self.index_name if query.vector is not None and not several else "",
            _tag(query.prefix) if query.prefix else "",
        ]
        replies = yield from self._calls(
            [_script("m_search", self.keys(p), args) for p in partitions]
        )
        found: list[StoredItem] = []
        ttl_members: dict[bytes, Namespace] = {}
        for partition, reply in zip(partitions, replies, strict=True):
            for member, record, score, expires, has_ttl in reply:
                item = _stored(member, record, expires)
                item.score = float(score) if score else None
                found.append(item)
                if has_ttl:
                    ttl_members[member] = partition
        if not several:
            return found
        page = _merge(found, query)
        if query.refresh:
            refresh: dict[Namespace, list[bytes]] = {}
            for item in page:
                member = _member(item.namespace, item.key)
                if member in ttl_members:
                    refresh.setdefault(ttl_members[member], []).append(member)
            yield from self._calls(
                [
                    _script("m_refresh", self.keys(p), [query.now_ms, *members])
                    for p, members in refresh.items()
                ]
            )
        return page

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]:
        partitions = yield from self.partitions(prefix)
        replies = yield from self._calls(
            [_script("m_namespaces", self.keys(p), [now_ms]) for p in partitions]
        )
        found = []
        for reply in replies:
            for raw in reply:
                namespace = namespace_of(raw.decode())
                if namespace[: len(prefix)] == prefix:
                    found.append(namespace)
        return found

    def sweep(self, now_ms: int) -> Op[int]:
        partitions = yield from self.partitions(())
        replies = yield from self._calls(
            [_script("m_sweep", self.keys(p), [now_ms]) for p in partitions]
        )
        empty = [
            namespace_text(p) for p, (_, left) in zip(partitions, replies, strict=True) if not left
        ]
        if empty:
            yield Command(("SREM", self.registry, *empty))
            self._registered.difference_update(empty)
        return sum(int(removed) for removed, _ in replies)


def _merge(found: list[StoredItem], query: SearchQuery) -> list[StoredItem]:
    """The page across partitions: each partition returned its best offset + limit."""
    if query.vector is None:
        return rank(found, query)
    found.sort(key=lambda c: (c.namespace, c.key))
    found.sort(key=lambda c: c.score or 0.0, reverse=True)
    return found[query.offset : query.offset + query.limit]


def _script(name: str, keys: list[str], args: list[Any]) -> Script:
    return Script(name, keys, args)


def _tag(namespace: Namespace) -> str:
    """The index tag of a namespace prefix (what the ``tags`` Lua function writes)."""
    return hashlib.sha1(namespace_text(namespace).encode()).hexdigest()[:20]


def _memory(client: Any, options: dict[str, Any]) -> tuple[RedisMemory, dict[str, Any]]:
    vector_index = options.pop("vector_index", False)
    if vector_index and isinstance(client, (redis.RedisCluster, aredis.RedisCluster)):
        raise ConfigurationError(
            "vector_index=True needs a single Redis server: the Query Engine does not index"
            " across an open-source Redis Cluster"
        )
    port = RedisMemory(
        key_prefix=options.pop("key_prefix", "graphkeep"),
        shard_labels=options.pop("shard_labels", 1),
        vector_index=vector_index,
    )
    return port, options


def _use_index(store: MemoryStore) -> None:
    port = cast(RedisMemory, store.port)
    if port.vector_index:
        if not store.index_config:
            raise ConfigurationError("vector_index=True needs an index (dims, embed) to index")
        port.use_index(int(store.index_config["dims"]), store.index_config["distance_type"])


class RedisStore(SyncMemoryStore):
    """LangGraph ``BaseStore`` on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``index`` (IndexConfig), ``ttl`` (TTLConfig), ``key_prefix``, ``shard_labels``
    (how many leading namespace labels pick a partition / cluster slot; default 1),
    ``vector_index`` (use the server's Query Engine for semantic search; single server
    only; every process writing the store must set it alike), ``max_key_bytes``.
    """

    def __init__(self, client: Any, **options: Any) -> None:
        _check_client(client)
        port, rest = _memory(client, dict(options))
        self.client = client
        super().__init__(port, _SyncExecutor(client, _describe(client), SCRIPTS), **rest)
        _use_index(self)

    @classmethod
    @contextmanager
    def from_url(cls, url: str, *, setup: bool = True, **options: Any) -> Iterator[RedisStore]:
        client = sync_client(url)
        store = None
        try:
            store = cls(client, **options)
            store._execute.where = mask_url(url)  # type: ignore[attr-defined]
            if setup:
                store.setup()
            yield store
        finally:
            if store is not None:
                store.stop_ttl_sweeper(0)
            client.close()


class AsyncRedisStore(AsyncMemoryStore):
    """LangGraph ``BaseStore`` on a ``redis.asyncio`` client (``Redis`` or ``RedisCluster``)."""

    def __init__(self, client: Any, **options: Any) -> None:
        _check_client(client)
        port, rest = _memory(client, dict(options))
        self.client = client
        super().__init__(port, _AsyncExecutor(client, _describe(client), SCRIPTS), **rest)
        _use_index(self)

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, setup: bool = True, **options: Any
    ) -> AsyncIterator[AsyncRedisStore]:
        client = async_client(url)
        store = None
        try:
            store = cls(client, **options)
            store._aexecute.where = mask_url(url)  # type: ignore[attr-defined]
            if setup:
                await store.setup()
            yield store
        finally:
            if store is not None:
                await store.stop_ttl_sweeper(0)
            await client.aclose()
