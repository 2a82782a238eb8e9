"""Server-side Lua of the Redis memory store: one script call = one round trip, one slot.

A partition's keys share one hash tag (see :mod:`.store`); the six fixed ones are always
passed first, in this order::

    KEYS[1] i  HASH  "ns\\0key" -> created_us (8 bytes BE) updated_us (8 bytes BE) value JSON
    KEYS[2] u  ZSET  "ns\\0key" by updated_us: the partition's newest-first order
    KEYS[3] e  ZSET  "ns\\0key" by expiry (epoch ms), items with a TTL
    KEYS[4] t  HASH  "ns\\0key" -> TTL in ms (what a refresh re-arms)
    KEYS[5] n  HASH  ns -> number of items
    KEYS[6] l  ZSET  ns, all scores 0: namespaces in lexical order (prefix ranges)

and per namespace, in the same slot (their names extend the fixed keys' common stem)::

    <stem>o:<ns>  ZSET  "ns\\0key" by updated_us: the namespace's newest-first order
    <stem>w:<ns>  HASH  "ns\\0key" -> embeddings: 4-byte header length, msgpack header
                        [[path, digest], ...], then every vector's float32 data

so a search of one namespace (or a few) reads only its items, whatever else the partition
holds. While the store reads through to a fallback, ``<stem>g`` HASH holds tombstones, the
members deleted meanwhile (the put script's ``t`` mode writes them; its ``a`` mode, an
adoption, never writes over one or over any record). ``ns`` is the namespace's labels
joined by ``.``; labels hold neither ``.`` nor NUL, so ``ns .. "\\0"`` and ``ns .. "."``
bound a namespace and its descendants. With the Query Engine (``vector_index=True``) every
embedding is also a hash ``XP<sha1(member)>:<n>``.

**Every key a script touches is declared.** KEYS[7...] are the per-namespace keys, vector
index entries (and the index itself, a key to ``FT.SEARCH``) the caller computed; ARGV[1]
is the index entries' prefix XP ('' without an index), removed from ARGV before the script's
own arguments. Where the keys depend on what is stored (the namespaces under a prefix, how
many vectors an item had, which items expired), a script first works out every key its work
would touch, reading only declared keys, and when one is missing returns ``{0, partial,
missing keys}`` having written nothing but its purge (which, like every write, touches
declared keys only): the caller sends it again with them. Done, it returns ``{1, result,
hints}``: ``hints`` are the keys of expired items the purge had to leave (their keys were
not declared), for the caller to declare next time. Expired items are never returned, purged
or not: reads check the expiry.
"""

from __future__ import annotations

#: expired items a script removes before its work (bounded; sweep loops)
PURGE_LIMIT = 1000
#: a search merges the order indexes of at most this many namespaces; more: the partition's
MERGE_LIMIT = 16

#: keys of missing entries one reply names at most
REPORT_LIMIT = 3000

PRELUDE = (
    f"local PURGE, MERGE, REPORT = {PURGE_LIMIT}, {MERGE_LIMIT}, {REPORT_LIMIT}\n"
    + r"""
local XP = table.remove(ARGV, 1)
if XP == '' then XP = nil end
local I, U, E, T, N, L = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local STEM = string.sub(I, 1, #I - 1)
local DECLARED = {}
for k = 1, #KEYS do DECLARED[KEYS[k]] = true end
-- keys the work needs and the call did not declare; keys the purge had to leave
local UNDECLARED, HINTS, NOTED = {}, {}, {}

-- whether the call declared `key`; if not, it is noted (once) in `into`
local function declared(key, into)
  if DECLARED[key] then return true end
  local noted = NOTED[into] or {}
  NOTED[into] = noted
  if not noted[key] and #into < REPORT then
    noted[key] = true
    into[#into + 1] = key
  end
  return false
end

local function ns_of(member)
  return string.sub(member, 1, string.find(member, '\0', 1, true) - 1)
end
local function order_key(ns) return STEM .. 'o:' .. ns end
local function vectors_key(ns) return STEM .. 'w:' .. ns end
local function vectors_of(member)
  return redis.call('HGET', vectors_key(ns_of(member)), member)
end

-- with a Query Engine vector index every embedding is also a hash XP<sha1(member)>:<n>
local function vector_keys(member, blob)
  local h = struct.unpack('>I4', blob)
  local header = cmsgpack.unpack(string.sub(blob, 5, 4 + h))
  return XP .. redis.sha1hex(member) .. ':', #header, h
end

-- whether the keys of `blob`'s index entries are declared (the others noted in `into`)
local function entries_declared(member, blob, into)
  if not XP or blob == '' then return true end
  local base, n = vector_keys(member, blob)
  local ok = true
  for i = 1, n do ok = declared(base .. i, into) and ok end
  return ok
end

-- whether every key rewriting or removing `member` touches is declared (reads only
-- declared keys; the missing ones are noted in `into`)
local function covered(member, into)
  local ns = ns_of(member)
  local ok = declared(order_key(ns), into)
  if not declared(vectors_key(ns), into) then return false end
  local blob = XP and redis.call('HGET', vectors_key(ns), member)
  if blob then ok = entries_declared(member, blob, into) and ok end
  return ok
end

local function unindex(member)
  if not XP then return end
  local blob = vectors_of(member)
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
    local ns = ns_of(member)
    redis.call('ZREM', U, member)
    redis.call('ZREM', E, member)
    redis.call('HDEL', T, member)
    redis.call('ZREM', order_key(ns), member)
    unindex(member)
    redis.call('HDEL', vectors_key(ns), member)
    if redis.call('HINCRBY', N, ns, -1) <= 0 then
      redis.call('HDEL', N, ns)
      redis.call('ZREM', L, ns)
    end
    return 1
  end
  return 0
end

-- remove expired items whose keys this call declared (the others' keys go to HINTS),
-- looking at `limit` of them, or at all of them when `all`; the number removed
local function purge(now, limit, all)
  local count, skipped = 0, 0
  while true do
    local gone = redis.call('ZRANGEBYSCORE', E, '-inf', now, 'LIMIT', skipped, limit)
    for _, member in ipairs(gone) do
      if covered(member, HINTS) and remove(member) == 1 then
        count = count + 1
      else
        skipped = skipped + 1
      end
    end
    if not all or #gone < limit then return count end
  end
end

local function done(result) return {1, result, HINTS} end
local function again(partial) return {0, partial or false, UNDECLARED} end

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

-- the namespaces of this partition equal to `prefix` or below it ('' = all), in lexical
-- order; nil when there are more than `limit`
local function namespaces(prefix, limit)
  local found = {}
  if prefix == '' then
    found = redis.call('ZRANGE', L, 0, limit or -1)
  else
    if redis.call('HEXISTS', N, prefix) == 1 then found[1] = prefix end
    local below = limit and {'LIMIT', 0, limit + 1} or {}
    for _, ns in ipairs(redis.call('ZRANGEBYLEX', L, '[' .. prefix .. '.',
                                   '(' .. prefix .. '/', unpack(below))) do
      found[#found + 1] = ns
    end
  end
  if limit and #found > limit then return nil end
  return found
end
"""
)

GET = (
    PRELUDE
    + r"""
-- ARGV: now, with_vectors, then pairs (member, refresh 0/1)
local now = tonumber(ARGV[1])
if ARGV[2] == '1' then
  for i = 3, #ARGV, 2 do declared(vectors_key(ns_of(ARGV[i])), UNDECLARED) end
end
if #UNDECLARED > 0 then return again() end
purge(now, PURGE, false)
local out = {}
for i = 3, #ARGV, 2 do
  local member = ARGV[i]
  local record = live(member, now)
  if record then
    local at = ARGV[i + 1] == '1' and refresh(member, now) or expiry(member)
    local vectors = false
    if ARGV[2] == '1' then vectors = vectors_of(member) or false end
    out[#out + 1] = {record, at, vectors, redis.call('HGET', T, member) or false}
  else
    out[#out + 1] = false
  end
end
return done(out)
"""
)

PUT = (
    PRELUDE
    + r"""
-- ARGV: now, n_puts, mode, then per put: member, created(8 bytes), rest (updated(8) +
--       value), updated_us, expires_ms or '', ttl_ms or '', vectors or ''; then members to
--       delete. mode: '' a put; 't' a put whose deletes leave a tombstone in the partition's
--       `g` hash (a store reading through to a fallback); 'a' an adoption: each item is
--       written only where the partition holds no record and no tombstone of its member
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local mode = ARGV[3]
local G = STEM .. 'g'
if mode ~= '' then declared(G, UNDECLARED) end
local i = 4
for _ = 1, n do
  covered(ARGV[i], UNDECLARED)
  entries_declared(ARGV[i], ARGV[i + 6], UNDECLARED)
  i = i + 7
end
for j = i, #ARGV do covered(ARGV[j], UNDECLARED) end
if #UNDECLARED > 0 then return again() end
purge(now, PURGE, false)
i = 4
for _ = 1, n do
  local member = ARGV[i]
  local ns = ns_of(member)
  if mode == 'a' and (redis.call('HEXISTS', I, member) == 1
                      or redis.call('HEXISTS', G, member) == 1) then
    i = i + 7
  else
  -- an expired item the purge did not reach yet is replaced, not updated
  if not live(member, now) then remove(member) end
  local old = redis.call('HGET', I, member)
  local created = ARGV[i + 1]
  if old then
    created = string.sub(old, 1, 8)
  elseif redis.call('HINCRBY', N, ns, 1) == 1 then
    redis.call('ZADD', L, 0, ns)
  end
  redis.call('HSET', I, member, created .. ARGV[i + 2])
  redis.call('ZADD', U, ARGV[i + 3], member)
  redis.call('ZADD', order_key(ns), ARGV[i + 3], member)
  if ARGV[i + 4] ~= '' then
    redis.call('ZADD', E, ARGV[i + 4], member)
    redis.call('HSET', T, member, ARGV[i + 5])
  else
    redis.call('ZREM', E, member)
    redis.call('HDEL', T, member)
  end
  unindex(member)
  if ARGV[i + 6] ~= '' then
    redis.call('HSET', vectors_key(ns), member, ARGV[i + 6])
    index(member, ARGV[i + 6])
  else
    redis.call('HDEL', vectors_key(ns), member)
  end
  i = i + 7
  end
end
for j = i, #ARGV do
  remove(ARGV[j])
  if mode == 't' then redis.call('HSET', G, ARGV[j], '1') end
end
return done(redis.call('HLEN', I))
"""
)

SEARCH = (
    PRELUDE
    + r"""
-- ARGV: now, prefix ('' = all), offset, limit, refresh 0/1, conditions (JSON),
--       distance ('' = no vector), query vector (float32 LE), dims,
--       vector index name ('' = none: exact scan here), the prefix's index tag ('' = all),
--       needles (JSON): strings, JSON-encoded as the values are, that every match contains,
--       the namespaces an exact vector scan reads (JSON; '' = every one under the prefix)
local now = tonumber(ARGV[1])
local prefix, offset, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local conditions, needles = cjson.decode(ARGV[6]), cjson.decode(ARGV[12])
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
  -- a value that lacks a string an equality asks for cannot match: no need to decode it
  for _, needle in ipairs(needles) do
    if not string.find(record, needle, 17, true) then return false end
  end
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

-- the best score among an item's embeddings (see the vectors' layout above)
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

local function by_score(a, b)
  if a[3] ~= b[3] then return a[3] > b[3] end
  return a[1] < b[1]
end

local page, need = {}, offset + limit

-- what the search reads, worked out (and its keys checked) before the purge
local spaces, only = nil, nil
if need == 0 then
  -- nothing asked
elseif query == nil then
  spaces = namespaces(prefix, MERGE)
  if spaces ~= nil then
    -- without their order indexes declared, the partition's order serves (and their keys
    -- are answered as hints, for the next search)
    local all = true
    for _, ns in ipairs(spaces) do all = declared(order_key(ns), HINTS) and all end
    if not all then spaces = nil end
  end
elseif ARGV[10] ~= '' then
  declared(ARGV[10], UNDECLARED)  -- FT.SEARCH's key is its index
else
  only = ARGV[13] ~= '' and cjson.decode(ARGV[13]) or namespaces(prefix, nil)
  for _, ns in ipairs(only) do declared(vectors_key(ns), UNDECLARED) end
end
if #UNDECLARED > 0 then return again() end
purge(now, PURGE, false)

local function page_of(scored)
  for j = offset + 1, math.min(need, #scored) do
    local entry = scored[j]
    page[#page + 1] = {entry[1], entry[2], string.format('%.17g', entry[3])}
  end
end

if need == 0 then
  -- nothing asked
elseif query == nil then
  -- newest first, stopping once offset + limit items matched: one namespace walks its own
  -- order index, a few are merged, many walk the partition's
  local seen = 0
  local function take(member)
    local record = wanted(member)
    if record then
      seen = seen + 1
      if seen > offset then page[#page + 1] = {member, record, false} end
    end
    return seen >= need
  end
  local function walk(key, check)
    local start = 0
    while true do
      local batch = redis.call('ZREVRANGE', key, start, start + 255)
      if #batch == 0 then return end
      for _, member in ipairs(batch) do
        if (not check or in_prefix(member)) and take(member) then return end
      end
      start = start + 256
    end
  end
  if spaces == nil then
    walk(U, true)
  elseif #spaces == 1 then
    walk(order_key(spaces[1]), false)
  elseif #spaces > 1 then
    local all = {}
    for _, ns in ipairs(spaces) do
      local got = redis.call('ZREVRANGE', order_key(ns), 0, -1, 'WITHSCORES')
      for k = 1, #got, 2 do all[#all + 1] = {got[k], tonumber(got[k + 1])} end
    end
    table.sort(all, function(a, b)
      if a[2] ~= b[2] then return a[2] > b[2] end
      return a[1] > b[1]
    end)
    for _, entry in ipairs(all) do
      if take(entry[1]) then break end
    end
  end
elseif ARGV[10] ~= '' then
  -- the Query Engine's exact (FLAT) KNN, widened until offset + limit items pass the filter
  -- and every item tied with the last of them is in (so ties break by member, as the scan)
  local k, seen, scored = need * 2 + 10, {}, {}
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
  table.sort(scored, by_score)
  page_of(scored)
else
  -- exact: score every embedded item of the namespaces under the prefix
  local scored = {}
  for _, ns in ipairs(only) do
    local all = redis.call('HGETALL', vectors_key(ns))
    for k = 1, #all, 2 do
      local member = all[k]
      local record = wanted(member)
      if record then
        local s = score(all[k + 1])
        if s ~= nil then scored[#scored + 1] = {member, record, s} end
      end
    end
  end
  table.sort(scored, by_score)
  page_of(scored)
end
for _, entry in ipairs(page) do
  local member = entry[1]
  entry[4] = ARGV[5] == '1' and refresh(member, now) or expiry(member)
  entry[5] = redis.call('HEXISTS', T, member)
end
return done(page)
"""
)

NAMESPACES = (
    PRELUDE
    + r"""
-- ARGV: now, prefix ('' = all). Expired items are purged first (their keys declared)
purge(tonumber(ARGV[1]), PURGE, false)
if #HINTS > 0 then
  UNDECLARED = HINTS
  return again()
end
return done(namespaces(ARGV[2], nil))
"""
)

SWEEP = (
    PRELUDE
    + r"""
-- remove every expired item whose keys are declared; the keys of the others, or what is left
local removed = purge(tonumber(ARGV[1]), PURGE, true)
if #HINTS > 0 then
  UNDECLARED = HINTS
  return again(removed)
end
return done({removed, redis.call('HLEN', I)})
"""
)

REFRESH = (
    PRELUDE
    + r"""
local now = tonumber(ARGV[1])
for i = 2, #ARGV do refresh(ARGV[i], now) end
return done(1)
"""
)

REINDEX = (
    PRELUDE
    + r"""
-- (re)write the vector index entries of one namespace's embedded items, in member order
-- after ARGV[2] (a cursor, '' = from the first), while their keys are declared.
-- ARGV: ns, cursor. Returns {the last member written, count} and the keys still missing
local ns, cursor = ARGV[1], ARGV[2]
if not declared(vectors_key(ns), UNDECLARED) then return again() end
local all = redis.call('HGETALL', vectors_key(ns))
local todo = {}
for k = 1, #all, 2 do
  if all[k] > cursor then todo[#todo + 1] = {all[k], all[k + 1]} end
end
table.sort(todo, function(a, b) return a[1] < b[1] end)
local count = 0
for _, entry in ipairs(todo) do
  if #UNDECLARED == 0 and entries_declared(entry[1], entry[2], UNDECLARED) then
    unindex(entry[1])
    index(entry[1], entry[2])
    cursor, count = entry[1], count + 1
  else
    entries_declared(entry[1], entry[2], UNDECLARED)
    if #UNDECLARED >= REPORT then break end
  end
end
if #UNDECLARED > 0 then return again({cursor, count}) end
return done({cursor, count})
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
