"""The hot layer's Redis side (:class:`RedisHotPort`): recently read checkpoints, per thread.

One HASH per thread (``P`` = the durable saver's ``key_prefix``; the thread escaped as the
savers' keys escape it, so a thread is one Cluster slot)::

    P:hot1:{<thread>}   HASH   c\\0<ns>\\0<checkpoint id>  -> entry (the checkpoint tuple as the
                                                            durable saver returned it, in its
                                                            serializer; sealed as its checkpoint
                                                            with the saver's encryption=)
                               n\\0<ns>                   -> the id of the newest entry of ns
                               l\\0<ns>\\0<before>\\0<limit> -> a ``list`` page: its ids
                               p\\0<ns>\\0<checkpoint id>  -> the entry of a page's checkpoint

    P:hot1:stats        HASH   hit / miss / special / error -> reads of every process since
                               the hash was made (each layer adds its counts every few
                               seconds: ``graphkeep stats --hot`` shows the hit rate)

``fetch`` and ``fill`` are one script each (the newest id and its entry in one round trip);
both push the hash's expiry ``hot_ttl`` out, so a thread leaves Redis ``hot_ttl`` after its
last read. ``evict`` is one ``UNLINK``. What is cached is validated against the durable store
by :mod:`graphkeep.checkpoint.hot` before it is served: nothing here needs invalidating for
reads to be right. ``moved`` (one script, after a checkpoint is written through the layer)
forgets the namespace's newest copy and newest pages, so the next read of the head goes
straight to the durable store instead of asking it first whether the copy is current.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.redis.keys import check_prefix, encode_thread, pattern_prefix
from graphkeep.backends.redis.requests import Command, Script, script_room
from graphkeep.port import Op, codec

__all__ = ["HOT_SCRIPTS", "RedisHotPort"]

FORMAT = "hot1"

# KEYS: the thread's hash; ARGV: ns, checkpoint id ('' = the newest cached), ttl_ms
FETCH = """
local id = ARGV[2]
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if id == '' then
  id = redis.call('HGET', KEYS[1], 'n\\0' .. ARGV[1])
  if not id then return false end
end
return redis.call('HGET', KEYS[1], 'c\\0' .. ARGV[1] .. '\\0' .. id)
"""

# KEYS: the thread's hash; ARGV: ns, checkpoint id, entry, latest ('1' or ''), ttl_ms
FILL = """
redis.call('HSET', KEYS[1], 'c\\0' .. ARGV[1] .. '\\0' .. ARGV[2], ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'n\\0' .. ARGV[1], ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 0
"""

# KEYS: the thread's hash; ARGV: the page's field, ttl_ms. The page's ids, then their entries
PAGE = """
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local index = redis.call('HGET', KEYS[1], ARGV[1])
if not index then return false end
local ids = cmsgpack.unpack(index)
local found = {index}
for i = 1, #ids do
  found[i + 1] = redis.call('HGET', KEYS[1], ARGV[3] .. ids[i]) or ''
end
return found
"""

# KEYS: the thread's hash; ARGV: the page's field ('' = entries only: a page too large for one
# request sends its index with its last part), its index, ttl_ms, entry prefix, then
# (checkpoint id, entry) pairs
FILL_PAGE = """
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[4] .. ARGV[i], ARGV[i + 1])
end
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
"""

# KEYS: the thread's hash; ARGV: ns's newest field, the prefix of ns's newest pages' fields
MOVED = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local fields = redis.call('HKEYS', KEYS[1])
for i = 1, #fields do
  if string.sub(fields[i], 1, #ARGV[2]) == ARGV[2] then
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
return 0
"""

# KEYS: the stats hash; ARGV: outcome, count, outcome, count...
COUNT = """
for i = 1, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 0
"""

HOT_SCRIPTS = {
    "hot_fetch": FETCH,
    "hot_fill": FILL,
    "hot_page": PAGE,
    "hot_fill_page": FILL_PAGE,
    "hot_moved": MOVED,
    "hot_count": COUNT,
}


class RedisHotPort:
    """The :class:`~graphkeep.checkpoint.hot.HotPort` on Redis or Redis Cluster."""

    def __init__(self, *, key_prefix: str = "graphkeep") -> None:
        self.prefix = check_prefix(key_prefix)

    def key(self, thread_id: str) -> str:
        return f"{self.prefix}:{FORMAT}:{{{encode_thread(thread_id)}}}"

    @staticmethod
    def newest_field(ns: str) -> str:
        """The field naming the newest copy of namespace ``ns`` in a thread's hash."""
        return f"n\0{ns}"

    @staticmethod
    def entry_field(ns: str, checkpoint_id: str) -> str:
        """The field of a checkpoint's copy in a thread's hash."""
        return f"c\0{ns}\0{checkpoint_id}"

    def stats_key(self) -> str:
        return f"{self.prefix}:{FORMAT}:stats"

    def thread_pattern(self) -> str:
        """A SCAN pattern of every thread's hash under this prefix."""
        return f"{pattern_prefix(self.prefix)}:{FORMAT}:{{*}}"

    def setup(self) -> Op[None]:
        yield Script("__load__", [], [])

    def fetch(
        self, thread_id: str, ns: str, checkpoint_id: str | None, ttl_ms: int
    ) -> Op[bytes | None]:
        found: Any = yield Script(
            "hot_fetch", [self.key(thread_id)], [ns, checkpoint_id or "", ttl_ms]
        )
        return found if isinstance(found, bytes) else None

    def fill(
        self, thread_id: str, ns: str, checkpoint_id: str, entry: bytes, latest: bool, ttl_ms: int
    ) -> Op[None]:
        args = [ns, checkpoint_id, entry, "1" if latest else "", ttl_ms]
        yield Script("hot_fill", [self.key(thread_id)], args)

    def fetch_page(
        self, thread_id: str, ns: str, before: str | None, limit: int, ttl_ms: int
    ) -> Op[list[bytes] | None]:
        field = _page_field(ns, before, limit)
        found: Any = yield Script(
            "hot_page", [self.key(thread_id)], [field, ttl_ms, _page_entry(ns, "")]
        )
        if not isinstance(found, list) or not found:
            return None
        ids = codec.unpackb(found[0])
        if len(found) != len(ids) + 1 or any(not entry for entry in found[1:]):
            return None  # an entry is gone: read the store
        return [bytes(entry) for entry in found[1:]]

    def fill_page(
        self,
        thread_id: str,
        ns: str,
        before: str | None,
        limit: int,
        entries: list[tuple[str, bytes]],
        ttl_ms: int,
    ) -> Op[None]:
        # entries first, the page's index with the last part: a page is served only once
        # every entry its index names is there (``fetch_page``)
        index = codec.packb([cid for cid, _ in entries])
        per = (script_room(1) - 4) // 2
        parts = [entries[i : i + per] for i in range(0, len(entries), per)] or [[]]
        for number, part in enumerate(parts):
            field = _page_field(ns, before, limit) if number == len(parts) - 1 else ""
            args: list[Any] = [field, index if field else "", ttl_ms, _page_entry(ns, "")]
            for cid, entry in part:
                args += [cid, entry]
            yield Script("hot_fill_page", [self.key(thread_id)], args)

    def moved(self, thread_id: str, ns: str) -> Op[None]:
        """Forget which copy is the newest of ``ns`` and its newest pages (a checkpoint was
        written after them); the copies stay, addressed by id."""
        newest_pages = _page_field(ns, None, 0)[:-1]  # "l\0<ns>\0\0": every limit
        yield Script("hot_moved", [self.key(thread_id)], [self.newest_field(ns), newest_pages])

    def evict(self, thread_id: str) -> Op[None]:
        yield Command(("UNLINK", self.key(thread_id)))

    def count(self, counts: dict[str, int]) -> Op[None]:
        args: list[Any] = []
        for outcome, n in counts.items():
            args += [outcome, n]
        if args:
            yield Script("hot_count", [self.stats_key()], args)

    def stats(self) -> Op[dict[str, int]]:
        raw = yield Command(("HGETALL", self.stats_key()))
        return {_text(k): int(v) for k, v in (raw or {}).items()}

    def footprint(self, thread_id: str) -> Op[int]:
        used = yield Command(("MEMORY", "USAGE", self.key(thread_id), "SAMPLES", "0"))
        return int(used or 0)


def _page_field(ns: str, before: str | None, limit: int) -> str:
    return f"l\0{ns}\0{before or ''}\0{limit}"


def _page_entry(ns: str, checkpoint_id: str) -> str:
    return f"p\0{ns}\0{checkpoint_id}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
