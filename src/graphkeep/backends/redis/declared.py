"""What every Redis script of graphkeep keeps to: each key it touches is declared in KEYS,
and no request carries more than :data:`MAX_ARGS` arguments.

Redis's EVAL documentation requires every key a script touches to be passed in KEYS;
Dragonfly enforces it and ElastiCache Serverless relies on it (it also refuses a request of
more than 3,999 arguments, the command name, the script's sha, the key count and KEYS
included). Where a script's keys depend on what is stored (the entries an index ZSET
names), the script touches only the keys it was given and answers the ones it still needs;
the caller sends it again with those (:func:`clear_indexed`, :func:`list_indexed`).
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.redis.requests import MAX_ARGS, Script
from graphkeep.port import Op

__all__ = [
    "arguments",
    "clear_indexed",
    "clear_script",
    "list_indexed",
    "LIST_INDEXED",
    "room",
    "text",
]


def arguments(keys: list[str], args: list[Any]) -> int:
    """The arguments of ``EVALSHA sha numkeys KEYS... ARGV...``."""
    return 3 + len(keys) + len(args)


def room(keys: list[str], args: list[Any]) -> int:
    """How many more keys or arguments a script call of ``keys`` and ``args`` may carry."""
    return MAX_ARGS - arguments(keys, args)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def clear_script(delete: str) -> str:
    """KEYS: an index ZSET, then entries ``base .. member``; ARGV: base. Deletes (with
    ``delete``: DEL or UNLINK) the declared entries and their members, and the index once no
    member is left; returns {entries deleted, the keys of members indexed but not declared}."""
    return f"""
local index, base = KEYS[1], ARGV[1]
local declared = {{}}
for k = 2, #KEYS do declared[KEYS[k]] = true end
local gone, rest, deleted = {{}}, {{}}, 0
for _, member in ipairs(redis.call('ZRANGE', index, 0, -1)) do
  if declared[base .. member] then
    gone[#gone + 1] = member
  else
    rest[#rest + 1] = base .. member
  end
end
for i = 1, #gone, 500 do
  local keys, members = {{}}, {{}}
  for j = i, math.min(i + 499, #gone) do
    keys[#keys + 1] = base .. gone[j]
    members[#members + 1] = gone[j]
  end
  deleted = deleted + redis.call('{delete}', unpack(keys))
  redis.call('ZREM', index, unpack(members))
end
if #rest == 0 then redis.call('{delete}', index) end
return {{deleted, rest}}
"""


# KEYS: an index ZSET, then entries ``base .. member``; ARGV: base. Returns {member, HGETALL,
# member, HGETALL, ... of the declared entries, the keys of members indexed but not declared}
LIST_INDEXED = """
local index, base = KEYS[1], ARGV[1]
local declared = {}
for k = 2, #KEYS do declared[KEYS[k]] = true end
local out, rest = {}, {}
for _, member in ipairs(redis.call('ZRANGE', index, 0, -1)) do
  local key = base .. member
  if declared[key] then
    local fields = redis.call('HGETALL', key)
    if #fields > 0 then
      out[#out + 1] = member
      out[#out + 1] = fields
    end
  else
    rest[#rest + 1] = key
  end
end
return {out, rest}
"""


def clear_indexed(script: str, index: str, base: str) -> Op[int]:
    """Delete every entry ``index`` names and the index: the first call learns the entries'
    keys (or finds none), the next ones delete them, at most :data:`MAX_ARGS` a call."""
    deleted = 0
    declared: list[str] = []
    while True:
        count, rest = yield Script(script, [index, *declared], [base])
        deleted += int(count)
        if not rest:
            return deleted
        declared = [text(k) for k in rest][: room([index], [base])]


def list_indexed(script: str, index: str, base: str) -> Op[list[tuple[str, list[Any]]]]:
    """Every entry ``index`` names with its HGETALL (members in the index's order per call)."""
    found: list[tuple[str, list[Any]]] = []
    seen: set[str] = set()
    declared: list[str] = []
    while True:
        flat, rest = yield Script(script, [index, *declared], [base])
        for i in range(0, len(flat), 2):
            found.append((text(flat[i]), flat[i + 1]))
        seen.update(declared)
        todo = [key for key in map(text, rest) if key not in seen]
        if not todo:
            return found
        declared = todo[: room([index], [base])]
