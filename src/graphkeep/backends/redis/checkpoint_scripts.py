"""Server-side Lua for the Redis backend: one script call = one network round trip.

Every key of a thread shares the hash tag ``{<thread>}``, so each script
touches a single slot and runs unchanged on Redis Cluster. The eight keys of a
thread are always passed in this order (see ``RedisCheckpointPort.thread_keys``)::

    KEYS[1] h   HASH  "ns\\0id"            -> head (msgpack, strings only:
                                              parent, versions, present, needs, run_id
                                              [, source: the metadata's, when it has one])
    KEYS[2] p   HASH  "ns\\0id"            -> payload (checkpoint and metadata bytes)
    KEYS[3] x   ZSET  "ns\\0id"            lex index: latest / before within a namespace
    KEYS[4] a   ZSET  "id\\0ns"            lex index: newest first across namespaces
    KEYS[5] w   HASH  "ns\\0id\\0task\\0idx" -> write
    KEYS[6] wi  ZSET  "ns\\0id\\0task\\0idx" lex index of a checkpoint's writes
    KEYS[7] b   HASH  "ns\\0channel\\0version" -> channel value (stored once per version)
    KEYS[8] f   STREAM  {n: ns, c: id | u: uuid bytes} per new checkpoint, in commit order

Names never contain NUL (checked before any call), so "\\0" separators are
unambiguous. TTL is a sliding window on the whole thread: every write (and,
when asked, every read) re-arms PEXPIRE on all eight keys in the same script,
so list elements (blobs of :data:`~graphkeep.checkpoint.lists.ELEMENT_CHANNEL` in
``b``) live exactly as long as the checkpoints whose manifests name them, and
the feed ``f`` exactly as long as the thread.

The feed ``f`` is the thread's commit log for ``saver.watch``: ``put`` (and
``import``) append ``XADD f MAXLEN ~ FEED_MAXLEN * n <ns> c <id>`` (``u <16
bytes>`` for a UUID id) for each checkpoint that did not exist yet, in the same
script as the record, so the stream's order is the commit order and a retried
put is announced once. It holds ids only (never checkpoint data: ``export``,
``inventory`` and the CLI never read it), is trimmed to about
:data:`FEED_MAXLEN` entries, and goes with the thread (``delete_thread``;
``delete`` when no checkpoint is left). A reader that falls further behind
than the trimming is caught up from the ``a`` index instead (see ``FEED``
below), so a slow watcher loses nothing.

Staging: no request may carry more than :data:`~.requests.MAX_ARGS` arguments (ElastiCache
Serverless), yet ``put``, ``put_writes``, ``import`` and ``delete`` of a thread stay one atomic
script however large. When a call's arguments do not fit, the first ones go ahead in ``stage``
calls into the thread's staging hash (``KEYS[9]`` ``s``, same hash tag, never read by anything
else: fields ``token NUL i`` -> argument ``i``) and the script runs as ``<name>/staged`` with the
rest: it reads the staged arguments back, deletes them and runs the very same body on the whole
list, so what the thread shows changes in that one script, all or nothing. A writer killed
before it leaves only staged fields that no reader sees; they go with ``delete_thread`` or with
the staging hash's own expiry (:data:`STAGE_TTL_MS`, pushed out by every stage call). A commit
resent after a lost reply finds its token's ``done`` mark and returns 1 without applying twice.

Reads expand list manifests in the same script (``elements`` below): a blob
whose packed bytes start with the packed manifest tag is decoded with
``cmsgpack`` and the element fields its runs name are read from ``b`` too, so
``get_tuple``, a ``list`` page and ``fetch`` stay one round trip. Each element
is returned once per call, however many checkpoints of the call name it.
"""

from __future__ import annotations

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, MANIFEST_TAG
from graphkeep.checkpoint.records import Typed
from graphkeep.errors import LeaseLost
from graphkeep.port import codec

#: keys per thread, in the order of ``RedisCheckpointPort.thread_keys`` (every thread script's
#: ``KEYS``)
THREAD_KEYS = 8
#: entries a thread's feed keeps (``XADD ... MAXLEN ~``: trimming only drops whole stream
#: nodes, so at least this many, typically up to ~100 more): ~40 bytes an entry with UUID
#: ids, so at most ~45 KB per thread. A watcher further behind than this is caught up from
#: the checkpoint index instead.
FEED_MAXLEN = 1000
#: a checkpoint id in canonical UUID text (what LangGraph makes): the feed keeps its 16
#: bytes (field ``u``) instead of the 36 characters (field ``c``), halving the feed's size
UUID_TEXT = "^" + "%-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12)) + "$"
#: how long a thread's staging hash outlives its last ``stage`` call (or staged commit): far
#: longer than a writer needs between its first stage call and its commit, so only the
#: fields of a writer that died in between expire with it
STAGE_TTL_MS = 3_600_000
#: what the error reply of a staged commit whose staged arguments are gone starts with (the
#: staging hash was deleted with the thread in between: the writer stages again)
STAGE_LOST = "GRAPHKEEP_STAGE_LOST"
#: what the error reply of a fenced write refused for a newer lease starts with (then the
#: newest fencing token): the port raises ``LeaseLost``
LEASE_LOST = "GRAPHKEEP_LEASE_LOST"
#: how long a thread's fencing token outlives its last grant (or the lease's ttl if longer):
#: tokens are at least the granting clock's milliseconds, so a forgotten one is never reused
FENCE_TTL_MS = 30 * 86_400_000
#: entries per feed read. Must stay below ``FEED_MAXLEN``: a read that returns fewer is
#: then proof that nothing after its position was trimmed (see ``FEED``).
FEED_COUNT = 500
assert FEED_COUNT < FEED_MAXLEN


def lua_bytes(data: bytes) -> str:
    """A Lua string literal holding exactly ``data`` (decimal escapes, any byte)."""
    return "'" + "".join(f"\\{b}" for b in data) + "'"


def _manifest_prefix() -> bytes:
    # pack_typed(Typed(tag, data)) = array header, packed tag, packed data
    empty = codec.packb(b"")
    packed = codec.pack_typed(Typed(MANIFEST_TAG, b""))
    assert packed.endswith(empty)
    return packed[: -len(empty)]


#: the first bytes of every packed manifest blob (see ``codec.pack_typed``)
MANIFEST_PREFIX = _manifest_prefix()

#: what separates a namespace from an element key in an element's field of ``b``
ELEMENT_INFIX = b"\x00" + ELEMENT_CHANNEL.encode() + b"\x00"

#: the Python-side constants the Lua needs, defined once (in Python) and injected
CONSTANTS = "\n".join(
    [
        f"local MANIFEST = {lua_bytes(MANIFEST_PREFIX)}",
        f"local ELEMENT = {lua_bytes(ELEMENT_INFIX)}",
        "local BIN_HEADER = {[0xc4] = 1, [0xc5] = 2, [0xc6] = 4}",
        f"local THREAD_KEYS = {THREAD_KEYS}",
        f"local FEED_MAXLEN = {FEED_MAXLEN}",
        f"local UUID_TEXT = '{UUID_TEXT}'",
        f"local STAGE_TTL_MS = {STAGE_TTL_MS}",
        f"local STAGE_LOST = '{STAGE_LOST}'",
        f"local LEASE_LOST = '{LEASE_LOST}'",
        f"local FENCE_TTL_MS = {FENCE_TTL_MS}",
    ]
)

PRELUDE = r"""
local function refresh(ttl)
  if ttl > 0 then
    for i = 1, THREAD_KEYS do redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end

-- Announce a new checkpoint on the thread's feed (KEYS[8]): its namespace `n` and its id,
-- as 16 bytes `u` when it is a canonical UUID, else as it is `c`.
local function announce(ns, id)
  if string.match(id, UUID_TEXT) then
    local raw = string.gsub(string.gsub(id, '-', ''), '..', function(h)
      return string.char(tonumber(h, 16))
    end)
    redis.call('XADD', KEYS[8], 'MAXLEN', '~', FEED_MAXLEN, '*', 'n', ns, 'u', raw)
  else
    redis.call('XADD', KEYS[8], 'MAXLEN', '~', FEED_MAXLEN, '*', 'n', ns, 'c', id)
  end
end

local function batched(cmd, key, list)
  local out = {}
  for i = 1, #list, 500 do
    local part = {}
    for j = i, math.min(i + 499, #list) do part[#part + 1] = list[j] end
    local got = redis.call(cmd, key, unpack(part))
    if type(got) == 'table' then
      for _, v in ipairs(got) do out[#out + 1] = v end
    end
  end
  return out
end

local function hmget(key, fields)
  if #fields == 0 then return {} end
  local out = {}
  for i = 1, #fields, 500 do
    local part = {}
    for j = i, math.min(i + 499, #fields) do part[#part + 1] = fields[j] end
    local got = redis.call('HMGET', key, unpack(part))
    for k = 1, #part do out[#out + 1] = got[k] end
  end
  return out
end

local function latest(ns)
  local m = redis.call('ZREVRANGEBYLEX', KEYS[3], '(' .. ns .. '\1', '[' .. ns .. '\0',
                       'LIMIT', 0, 1)
  if #m == 0 then return nil end
  return string.sub(m[1], #ns + 2)
end

local function writes_of(f)
  local wf = redis.call('ZRANGEBYLEX', KEYS[6], '[' .. f .. '\0', '(' .. f .. '\1')
  return wf, hmget(KEYS[5], wf)
end

-- A msgpack array of `n` items from their packed bytes `parts` (one reply
-- string: the client decodes it in one call, not one RESP bulk per item).
local function msgpack_array(parts, n)
  local head
  if n < 16 then
    head = string.char(0x90 + n)
  elseif n < 65536 then
    head = string.char(0xdc, math.floor(n / 256), n % 256)
  else
    head = string.char(0xdd, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                       math.floor(n / 256) % 256, n % 256)
  end
  return head .. table.concat(parts)
end

-- The element records the list manifests among `blobs` name, as one msgpack
-- array [key, value, key, value, ...] (value nil where the record is missing;
-- stored values are packed [tag, data] already, so they are copied as they are).
-- `seen` (field -> true) spans one script call, so an element named by several
-- checkpoints of a page is sent once.
local function elements(ns, blobs, seen)
  local keys, fields = {}, {}
  for _, blob in ipairs(blobs) do
    if blob and string.sub(blob, 1, #MANIFEST) == MANIFEST then
      -- cmsgpack has no bin type: skip the data's bin header (c4/c5/c6 + length)
      local skip = BIN_HEADER[string.byte(blob, #MANIFEST + 1)] or 0
      local ok, m = pcall(cmsgpack.unpack, string.sub(blob, #MANIFEST + 2 + skip))
      if ok and type(m) == 'table' and m[1] == 1 then
        for _, run in ipairs(m[2]) do
          local epoch = run[1]
          for seq = run[2], run[2] + run[3] - 1 do
            local key = epoch .. string.format('%08x', seq)
            local field = ns .. ELEMENT .. key
            if not seen[field] then
              seen[field] = true
              keys[#keys + 1] = key
              fields[#fields + 1] = field
            end
          end
        end
      end
    end
  end
  if #keys == 0 then return '' end
  local values = hmget(KEYS[7], fields)
  local parts = {}
  for i = 1, #keys do
    parts[2 * i - 1] = cmsgpack.pack(keys[i])
    parts[2 * i] = values[i] or '\192'
  end
  return msgpack_array(parts, 2 * #keys)
end

-- One checkpoint with its values, pending writes and list elements, or false.
local function item(ns, id, seen)
  local f = ns .. '\0' .. id
  local head = redis.call('HGET', KEYS[1], f)
  if not head then return false end
  local h = cmsgpack.unpack(head)
  local chans, fields = {}, {}
  for _, ch in ipairs(h[3]) do
    local v = h[2][ch]
    if v then
      chans[#chans + 1] = ch
      fields[#fields + 1] = ns .. '\0' .. ch .. '\0' .. v
    end
  end
  local blobs = hmget(KEYS[7], fields)
  local wf, ws = writes_of(f)
  return {ns, id, head, redis.call('HGET', KEYS[2], f), chans, blobs, wf, ws,
          elements(ns, blobs, seen)}
end
"""

PUT = r"""
-- ARGV: ns, id, head, payload, ttl_ms, nblobs, (field, value) * nblobs
local ns, id = ARGV[1], ARGV[2]
local n = tonumber(ARGV[6])
for i = 0, n - 1 do
  redis.call('HSET', KEYS[7], ARGV[7 + 2 * i], ARGV[8 + 2 * i])
end
local f = ns .. '\0' .. id
local new = redis.call('HSET', KEYS[1], f, ARGV[3])
redis.call('HSET', KEYS[2], f, ARGV[4])
redis.call('ZADD', KEYS[3], 0, f)
redis.call('ZADD', KEYS[4], 0, id .. '\0' .. ns)
-- a new checkpoint only: an upsert (a retried put) is not committed twice
if new == 1 then announce(ns, id) end
refresh(tonumber(ARGV[5]))
return 1
"""

PUT_WRITES = r"""
-- ARGV: ns, id, ttl_ms, n, (task_id, idx, special, value) * n
local base = ARGV[1] .. '\0' .. ARGV[2] .. '\0'
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  local field = base .. ARGV[5 + 4 * i] .. '\0' .. ARGV[6 + 4 * i]
  if ARGV[7 + 4 * i] == '1' then
    redis.call('HSET', KEYS[5], field, ARGV[8 + 4 * i])
  else
    redis.call('HSETNX', KEYS[5], field, ARGV[8 + 4 * i])
  end
  redis.call('ZADD', KEYS[6], 0, field)
end
refresh(tonumber(ARGV[3]))
return 1
"""

GET = r"""
-- ARGV: ns, id ('' = latest), refresh_ttl_ms
local ns, id = ARGV[1], ARGV[2]
if id == '' then
  id = latest(ns)
  if not id then return false end
end
local found = item(ns, id, {})
if found then refresh(tonumber(ARGV[3])) end
return found
"""

LIST = r"""
-- ARGV: mode ('ns' | 'all' | 'id'), ns, checkpoint_id, upper ('' = none; exclusive),
--       count, refresh_ttl_ms
-- Returns {next_upper or '', item, item, ...}, newest first.
local mode, ns, cid, upper, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local members
if mode == 'ns' then
  local max = '(' .. ns .. '\1'
  if upper ~= '' then max = '(' .. ns .. '\0' .. upper end
  members = redis.call('ZREVRANGEBYLEX', KEYS[3], max, '[' .. ns .. '\0', 'LIMIT', 0, count)
elseif mode == 'id' then
  local max = '(' .. cid .. '\1'
  if upper ~= '' then max = '(' .. upper end
  members = redis.call('ZREVRANGEBYLEX', KEYS[4], max, '[' .. cid .. '\0', 'LIMIT', 0, count)
else
  local max = '+'
  if upper ~= '' then max = '(' .. upper end
  members = redis.call('ZREVRANGEBYLEX', KEYS[4], max, '-', 'LIMIT', 0, count)
end
local out = {''}
local seen = {}
for _, m in ipairs(members) do
  local m_ns, m_id
  if mode == 'ns' then
    m_ns = ns
    m_id = string.sub(m, #ns + 2)
  else
    local cut = string.find(m, '\0', 1, true)
    m_id = string.sub(m, 1, cut - 1)
    m_ns = string.sub(m, cut + 1)
  end
  local found = item(m_ns, m_id, seen)
  if found then out[#out + 1] = found end
end
if #members == count then
  if mode == 'ns' then
    out[1] = string.sub(members[#members], #ns + 2)
  else
    out[1] = members[#members]
  end
end
if #out > 1 then refresh(tonumber(ARGV[6])) end
return out
"""

FETCH = r"""
-- ARGV: n, (ns, id) * n  -> items (false where missing)
local out, seen = {}, {}
for i = 0, tonumber(ARGV[1]) - 1 do
  out[#out + 1] = item(ARGV[2 + 2 * i], ARGV[3 + 2 * i], seen)
end
return out
"""

BLOBS = r"""
-- ARGV: refresh_ttl_ms, blob fields ("ns\0channel\0version")... -> values (false = absent)
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local got = hmget(KEYS[7], fields)
refresh(tonumber(ARGV[1]))
return got
"""

# The parent walk of a read, server-side in one round trip: it mirrors the one rule of
# graphkeep.checkpoint.walk.walk_op (ancestors rootward until every channel has a stored
# value; stop at the root, at a missing ancestor or at an id already visited). Keep the
# two alike.
CHAIN = r"""
-- ARGV: ns, id ('' = latest), refresh_ttl_ms, channels...
-- Walks parent links from the target's parent until every channel has a stored
-- value (or the root); returns {target_id, {parent_id, head, wfields, writes,
-- seed_channels, seed_blobs}...}.
local ns, id = ARGV[1], ARGV[2]
if id == '' then
  id = latest(ns)
  if not id then return {false, {}} end
end
local head = redis.call('HGET', KEYS[1], ns .. '\0' .. id)
if not head then return {false, {}} end
local remaining, left = {}, 0
for i = 4, #ARGV do
  if not remaining[ARGV[i]] then left = left + 1 end
  remaining[ARGV[i]] = true
end
local out = {}
local parent = cmsgpack.unpack(head)[1]
local seen = {}
while parent ~= '' and left > 0 and not seen[parent] do
  seen[parent] = true
  local f = ns .. '\0' .. parent
  local hd = redis.call('HGET', KEYS[1], f)
  if not hd then break end
  local h = cmsgpack.unpack(hd)
  local wf, ws = writes_of(f)
  local chans, fields = {}, {}
  for _, ch in ipairs(h[3]) do
    if remaining[ch] and h[2][ch] then
      remaining[ch] = nil
      left = left - 1
      chans[#chans + 1] = ch
      fields[#fields + 1] = ns .. '\0' .. ch .. '\0' .. h[2][ch]
    end
  end
  out[#out + 1] = {parent, hd, wf, ws, chans, hmget(KEYS[7], fields)}
  parent = h[1]
end
refresh(tonumber(ARGV[3]))
return {id, out}
"""

DELETE = r"""
-- ARGV: ncp, (ns, id) * ncp, blob fields...
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local ns, id = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local f = ns .. '\0' .. id
  redis.call('HDEL', KEYS[1], f)
  redis.call('HDEL', KEYS[2], f)
  redis.call('ZREM', KEYS[3], f)
  redis.call('ZREM', KEYS[4], id .. '\0' .. ns)
  local wf = redis.call('ZRANGEBYLEX', KEYS[6], '[' .. f .. '\0', '(' .. f .. '\1')
  if #wf > 0 then
    batched('HDEL', KEYS[5], wf)
    redis.call('ZREMRANGEBYLEX', KEYS[6], '[' .. f .. '\0', '(' .. f .. '\1')
  end
end
local blobs = {}
for i = 2 + 2 * n, #ARGV do blobs[#blobs + 1] = ARGV[i] end
if #blobs > 0 then batched('HDEL', KEYS[7], blobs) end
-- no checkpoint left: the thread is gone, its feed goes with it
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[8]) end
return 1
"""

INVENTORY = r"""
-- Heads of every checkpoint, every write key and every blob key of the thread, and the
-- absolute expiry of each of its keys (PEXPIRETIME: unix ms, -1 none, -2 no such key).
local expiries = {}
for i = 1, THREAD_KEYS do expiries[i] = redis.call('PEXPIRETIME', KEYS[i]) end
return {redis.call('HGETALL', KEYS[1]), redis.call('ZRANGE', KEYS[6], 0, -1),
        redis.call('HKEYS', KEYS[7]), expiries}
"""

REARM = r"""
-- ARGV: at (unix ms; -1: never), key indexes... Sets the expiry of those of the thread's
-- keys that exist; never one in the past (that would delete the key).
local at = tonumber(ARGV[1])
if at >= 0 then
  local now = redis.call('TIME')
  if at <= tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) then return 0 end
end
local n = 0
for i = 2, #ARGV do
  local k = KEYS[tonumber(ARGV[i])]
  if redis.call('EXISTS', k) == 1 then
    if at >= 0 then redis.call('PEXPIREAT', k, at) else redis.call('PERSIST', k) end
    n = n + 1
  end
end
return n
"""

ACTIVITY = r"""
-- A health scan's read of one thread, from its indexes (no payload): ids of `a` above
-- ARGV[1] (at most ARGV[2]), the newest id, whether the root namespace's latest
-- checkpoint has a write of index ARGV[3] (an interrupt) in `wi`, the thread's
-- MEMORY USAGE (sampled) over its eight keys, and each recent checkpoint's parent, run id
-- and source from its head (the fork count; '' when the head has none).
local limit = tonumber(ARGV[2])
local recent = redis.call('ZRANGEBYLEX', KEYS[4], '(' .. ARGV[1], '+', 'LIMIT', 0, limit)
local links = {}
for i, member in ipairs(recent) do
  local at = string.find(member, '\0', 1, true)
  local field = string.sub(member, at + 1) .. '\0' .. string.sub(member, 1, at - 1)
  local head = redis.call('HGET', KEYS[1], field)
  local parent, run, source = '', '', ''
  if head then
    local h = cmsgpack.unpack(head)
    parent, run, source = h[1], h[5], h[6] or ''
  end
  links[i] = {parent, run, source}
end
local newest = redis.call('ZREVRANGEBYLEX', KEYS[4], '+', '-', 'LIMIT', 0, 1)
local root = redis.call('ZREVRANGEBYLEX', KEYS[3], '(\1', '[\0', 'LIMIT', 0, 1)
local interrupted = 0
if root[1] then
  local writes = redis.call('ZRANGEBYLEX', KEYS[6], '[' .. root[1] .. '\0', '(' .. root[1] .. '\1')
  local suffix = '\0' .. ARGV[3]
  for _, member in ipairs(writes) do
    if string.sub(member, -#suffix) == suffix then interrupted = 1 break end
  end
end
local bytes = 0
for i = 1, #KEYS do
  local n = redis.call('MEMORY', 'USAGE', KEYS[i])
  if n then bytes = bytes + n end
end
return {recent, newest[1] or '', interrupted, bytes, links}
"""

EXPORT = r"""
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]),
        redis.call('HGETALL', KEYS[5]), redis.call('HGETALL', KEYS[7])}
"""

IMPORT = r"""
-- ARGV: ttl_ms, nblobs, ncp, nwrites, then blob (field, value)*, checkpoint
--       (field, head, payload)*, write (field, value)*. Blobs go first.
local ttl, nb, nc, nw = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local i = 5
for _ = 1, nb do
  redis.call('HSET', KEYS[7], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, nw do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[6], 0, ARGV[i])
  i = i + 2
end
for _ = 1, nc do
  local f = ARGV[i]
  local cut = string.find(f, '\0', 1, true)
  local ns, id = string.sub(f, 1, cut - 1), string.sub(f, cut + 1)
  local new = redis.call('HSET', KEYS[1], f, ARGV[i + 1])
  redis.call('HSET', KEYS[2], f, ARGV[i + 2])
  redis.call('ZADD', KEYS[3], 0, f)
  redis.call('ZADD', KEYS[4], 0, id .. '\0' .. ns)
  if new == 1 then announce(ns, id) end
  i = i + 3
end
refresh(ttl)
return 1
"""

FIND_RUNS = r"""
-- ARGV: run ids. Returns the fields ("ns\0id") of checkpoints made by those runs.
local wanted = {}
for i = 1, #ARGV do wanted[ARGV[i]] = true end
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local h = cmsgpack.unpack(all[i + 1])
  if h[5] ~= '' and wanted[h[5]] then out[#out + 1] = all[i] end
end
return out
"""

ALL_IDS = r"""
return redis.call('ZRANGE', KEYS[4], 0, -1)
"""

FEED_END = r"""
-- The feed's newest entry id ('0-0' when there is none) and the thread's highest
-- checkpoint id ('' when none): where a watcher starting now begins.
local last = redis.call('XREVRANGE', KEYS[8], '+', '-', 'COUNT', 1)
local top = redis.call('ZREVRANGEBYLEX', KEYS[4], '+', '-', 'LIMIT', 0, 1)
local pos, newest = '0-0', ''
if #last > 0 then pos = last[1][1] end
if #top > 0 then newest = string.sub(top[1], 1, string.find(top[1], '\0', 1, true) - 1) end
return {pos, newest}
"""

FEED = r"""
-- ARGV: position (a feed entry id), newest checkpoint id delivered ('' = none), count
-- Returns {caught_up, position, ns, field, id, ns, field, id, ...}: `field` says how
-- the id is written ('c': text, 'u': the 16 bytes of a UUID; see `announce`).
--
-- Normally (caught_up = 0): up to `count` feed entries after `position`, in commit
-- order, and the id of the last one. If entries after `position` were trimmed
-- away (the reader fell more than FEED_MAXLEN behind: the stream has dropped
-- entries and its first one is past `position`), the feed cannot say what they
-- were; the reader is caught up from the `a` index instead (caught_up = 1): up
-- to `count` checkpoints with an id above `newest`, ascending. While that page is
-- full the position stays (the next call goes on from the new `newest`); the
-- last page moves it to the feed's end, which this script sees atomically, so
-- nothing committed in between is lost. (Only a checkpoint that committed out of
-- id order inside the trimmed span can be missed; it is still in `list`.)
local key = KEYS[8]
local pos, newest, count = ARGV[1], ARGV[2], tonumber(ARGV[3])

local function before(a, b)  -- stream id a < stream id b
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end

local trimmed = false
if redis.call('EXISTS', key) == 1 then
  local info = redis.call('XINFO', 'STREAM', key)
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  local first = fields['first-entry']
  -- entries-added (Redis >= 7) counts every entry ever added; without it, a feed at
  -- its cap is taken as trimmed (a catch-up from the index is then merely redundant)
  local dropped
  if fields['entries-added'] then
    dropped = fields['entries-added'] > fields['length']
  else
    dropped = fields['length'] >= FEED_MAXLEN
  end
  trimmed = dropped and first and before(pos, first[1])
end

if not trimmed then
  local out = {0, pos}
  local got = redis.call('XRANGE', key, '(' .. pos, '+', 'COUNT', count)
  for _, entry in ipairs(got) do
    local e = {}
    for i = 1, #entry[2], 2 do e[entry[2][i]] = entry[2][i + 1] end
    out[#out + 1] = e['n'] or ''
    if e['u'] then
      out[#out + 1] = 'u'
      out[#out + 1] = e['u']
    else
      out[#out + 1] = 'c'
      out[#out + 1] = e['c'] or ''
    end
  end
  if #got > 0 then out[2] = got[#got][1] end
  return out
end

local min = '-'
if newest ~= '' then min = '[' .. newest .. '\1' end
local members = redis.call('ZRANGEBYLEX', KEYS[4], min, '+', 'LIMIT', 0, count)
local out = {1, pos}
for _, m in ipairs(members) do
  local cut = string.find(m, '\0', 1, true)
  out[#out + 1] = string.sub(m, cut + 1)
  out[#out + 1] = 'c'
  out[#out + 1] = string.sub(m, 1, cut - 1)
end
if #members < count then
  out[2] = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1][1]
end
return out
"""

LOCK = r"""
-- KEYS: the lock key, the thread's fencing token; ARGV: token, ttl_ms, the clock's epoch ms.
-- Answers the grant's fencing token, 0 when another holder has the lease. Taking a lease we
-- already hold re-arms it (a retry after a lost reply does not lock ourselves out).
local holder = redis.call('GET', KEYS[1])
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local keep = math.max(FENCE_TTL_MS, tonumber(ARGV[2]))
if holder == ARGV[1] and fence > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return fence
end
if holder and holder ~= ARGV[1] then return 0 end
fence = math.max(fence + 1, tonumber(ARGV[3]))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', keep)
return fence
"""

# GET under the thread's lease taken in the same script (``saver.exclusive``'s first read).
# KEYS: the thread's, the lock key, the fencing token's; ARGV: GET's, then LOCK's. Answers
# {0} when another holder has the lease (nothing read), else {fencing token[, found]}.
GET_LEASED = (
    "local function take(KEYS, ARGV)\n"
    + LOCK
    + """end
local fence = take({KEYS[#KEYS - 1], KEYS[#KEYS]},
  {ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]})
if fence == 0 then return {0} end
local function get()
"""
    + GET
    + """end
local found = get()
if not found then return {fence} end
return {fence, found}
"""
)

UNLOCK = r"""
-- KEYS[1] lock key; ARGV: token. Only the holder's token releases the lease.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

EXTEND_LOCK = r"""
-- KEYS[1] lock key; ARGV: token, ttl_ms
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

STAGE = r"""
-- KEYS[1] the thread's staging hash; ARGV: token, index of the first argument, then the
-- arguments: field "token NUL index" -> argument, for the staged commit (see UNSTAGE)
local stage, token, first = KEYS[1], ARGV[1], tonumber(ARGV[2])
for i = 3, #ARGV, 500 do
  local part = {}
  for j = i, math.min(i + 499, #ARGV) do
    part[#part + 1] = token .. '\0' .. (first + j - 3)
    part[#part + 1] = ARGV[j]
  end
  redis.call('HSET', stage, unpack(part))
end
redis.call('PEXPIRE', stage, STAGE_TTL_MS)
return 1
"""

# The head of a staged commit: KEYS[THREAD_KEYS + 1] is the staging hash; ARGV: token, number
# of staged arguments, then the rest. It makes ARGV the whole argument list (staged ones
# first) for the body that follows, unchanged. Every body it heads returns 1.
UNSTAGE = r"""
local stage, token, nstaged = KEYS[THREAD_KEYS + 1], ARGV[1], tonumber(ARGV[2])
local done = token .. '\0done'
if redis.call('HEXISTS', stage, done) == 1 then return 1 end
local fields = {}
for i = 1, nstaged do fields[i] = token .. '\0' .. (i - 1) end
local all = hmget(stage, fields)
for i = 1, nstaged do
  if not all[i] then return redis.error_reply(STAGE_LOST .. ' ' .. token) end
end
for i = 3, #ARGV do all[#all + 1] = ARGV[i] end
batched('HDEL', stage, fields)
redis.call('HSET', stage, done, '1')
redis.call('PEXPIRE', stage, STAGE_TTL_MS)
local ARGV = all
"""

# The head of a fenced write: KEYS[#KEYS] is the thread's fencing token, ARGV's last the
# holder's. Refused (nothing written) when a newer token was granted; else it drops the
# holder's token from ARGV and the body (or UNSTAGE) that follows runs unchanged.
FENCE = r"""
local holder_fence = tonumber(table.remove(ARGV))
local newest = tonumber(redis.call('GET', KEYS[#KEYS]) or '0')
if newest > holder_fence then
  return redis.error_reply(LEASE_LOST .. ' ' .. string.format('%.0f', newest))
end
"""


def lease_refusal(exc: Exception, thread_id: str, fence: int | None) -> Exception:
    """A fenced script's error reply ``exc`` as :class:`~graphkeep.errors.LeaseLost` (the
    newest token from the reply); any other error as it is."""
    if fence is not None and str(exc).startswith(LEASE_LOST):
        return LeaseLost(thread_id, fence, int(str(exc).split()[1]))
    return exc


# delete_thread under a lease: the thread's keys (KEYS but the fencing token's), at once
DROP = r"""
redis.call('DEL', unpack(KEYS, 1, #KEYS - 1))
return 1
"""

#: the scripts whose arguments may be staged (each also runs as ``<name>/staged``)
STAGED = ("put", "put_writes", "import", "delete")
#: the writes a lease fences (each also runs as ``<name>/fenced``, staged ones as
#: ``<name>/staged/fenced``): the fencing token's key last, the holder's token last
FENCED = (*STAGED, "drop")

_BODIES = {
    "put": PUT,
    "put_writes": PUT_WRITES,
    "get": GET,
    "list": LIST,
    "fetch": FETCH,
    "blobs": BLOBS,
    "chain": CHAIN,
    "delete": DELETE,
    "inventory": INVENTORY,
    "rearm": REARM,
    "activity": ACTIVITY,
    "export": EXPORT,
    "import": IMPORT,
    "find_runs": FIND_RUNS,
    "all_ids": ALL_IDS,
    "feed_end": FEED_END,
    "feed": FEED,
    "lock": LOCK,
    "get/leased": GET_LEASED,
    "unlock": UNLOCK,
    "extend_lock": EXTEND_LOCK,
}
_FENCED_BODIES = {**{name: _BODIES[name] for name in STAGED}, "drop": DROP}

SCRIPTS: dict[str, str] = {
    **{name: CONSTANTS + PRELUDE + body for name, body in _BODIES.items()},
    **{f"{name}/staged": CONSTANTS + PRELUDE + UNSTAGE + _BODIES[name] for name in STAGED},
    **{
        f"{name}/fenced": CONSTANTS + PRELUDE + FENCE + body
        for name, body in _FENCED_BODIES.items()
    },
    **{
        f"{name}/staged/fenced": CONSTANTS + PRELUDE + FENCE + UNSTAGE + _BODIES[name]
        for name in STAGED
    },
    "stage": CONSTANTS + STAGE,
}
