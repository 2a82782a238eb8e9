"""The Redis mapping of LangGraph's BaseStore (plain Redis >= 7, no modules; Cluster-safe):
the store port :class:`RedisStorePort` and :class:`RedisStore` / :class:`AsyncRedisStore`.

Namespaces are grouped into *partitions*: the first ``shard_labels`` labels (default 1) of a
namespace. A partition's keys share one hash tag, so every operation on it is one Lua
script in one slot::

    <prefix>:m1:{<partition>}:i        HASH  "ns\\0key" -> created, updated, value JSON
    <prefix>:m1:{<partition>}:u        ZSET  "ns\\0key" by updated_us (the partition's order)
    <prefix>:m1:{<partition>}:e / :t   expiry index and TTLs of items that have one
    <prefix>:m1:{<partition>}:n / :l   item count per namespace, namespaces in lexical order
    <prefix>:m1:{<partition>}:o:<ns>   ZSET  a namespace's items by updated_us
    <prefix>:m1:{<partition>}:w:<ns>   HASH  a namespace's embeddings (float32)
    <prefix>:m1:{<partition>}:g        HASH  tombstones: members deleted while the store read
                                             through to a fallback (never adopted again)
    <prefix>:m1:fallback-done          STRING the fallback copy has finished (store copy --all)
    <prefix>:m1:parts                  SET   partitions (read only by searches and listings
                                             whose prefix is shorter than a partition)

``ns`` is the namespace's labels joined by ``.`` (labels hold neither ``.`` nor NUL); the
scripts and the exact layout are in :mod:`.store_scripts`. Every script first removes the
partition's expired items (so nothing expired is ever returned, and the partition never
holds them for long), then does its work: a get, a put, a search (filters evaluated next to
the data, semantic scoring in Lua over float32 vectors; a search of one namespace reads
only that namespace's items) or a listing — one round trip. Requests that touch several
partitions are sent as one pipeline (one round trip on a single node; one per node on a
cluster).

Every key a script touches is declared in its KEYS: the per-namespace keys and the vector
index's entries are computed here; where they depend on what is stored, the script answers
the keys it lacks without writing and is sent again with them (:class:`Call`, ``_run``);
what a partition needed is remembered, so the common case stays one round trip. No request
carries more than 3,999 arguments: a partition's writes are cut into several calls, each
atomic, sent in one pipeline (in order; every item appears once in a batch, so a call sent
again after it asked for keys cannot reorder two writes of one item).

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from graphkeep.backends.redis.client import OnRedis, RedisSite, ResponseError
from graphkeep.backends.redis.declared import room, text
from graphkeep.backends.redis.keys import check_prefix, encode_thread
from graphkeep.backends.redis.requests import MAX_ARGS, Command, Pipeline, Script
from graphkeep.backends.redis.store_scripts import MERGE_LIMIT, SCRIPTS
from graphkeep.errors import ConfigurationError, GraphkeepError
from graphkeep.port import Op, codec
from graphkeep.port.lru import ThreadLRU
from graphkeep.store.port import ItemKey, Namespace, SearchQuery, StoredItem, Vector
from graphkeep.store.ranking import rank
from graphkeep.store.shells import AsyncStore, SyncStore
from graphkeep.store.validation import index_config
from graphkeep.store.values import (
    decode_value,
    dotted_namespace,
    encode_value,
    namespace_from_dotted,
    pack_vector,
)

__all__ = ["STORE_OPTIONS", "AsyncRedisStore", "RedisStorePort", "RedisStore"]

#: options beyond the common ones (see ``graphkeep.connect_store``)
STORE_OPTIONS = frozenset({"shard_labels", "vector_index"})
FORMAT = "m1"
#: Query Engine metric names for PostgresStore's distance types
METRICS = {"cosine": "COSINE", "l2": "L2", "inner_product": "IP"}


def _item_member(namespace: Namespace, key: str) -> bytes:
    return dotted_namespace(namespace).encode() + b"\x00" + key.encode("utf-8", "surrogatepass")


def _item_key(member: bytes) -> ItemKey:
    ns, _, key = member.partition(b"\x00")
    return namespace_from_dotted(ns.decode()), key.decode("utf-8", "surrogatepass")


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
    namespace, key = _item_key(member)
    return StoredItem(
        namespace=namespace,
        key=key,
        value=decode_value(record[16:], namespace, key),
        created_us=int.from_bytes(record[:8], "big"),
        updated_us=int.from_bytes(record[8:16], "big"),
        expires_ms=int(float(expires)) if expires else None,
        vectors=_unpack_vectors(vectors) if vectors else [],
    )


#: keys of expired items a partition's calls declare beyond their own (learned from replies)
HINT_KEYS = 64
#: what a put chunk leaves free for keys a retry learns (an old item's vector index entries)
HEADROOM = 64
#: namespaces one exact vector scan reads when a prefix has more than one request declares
SCAN_NAMESPACES = 3800
#: namespaces a partition remembers having written (a search of a prefix declares theirs)
WRITTEN = 256
#: rounds of a call whose keys are learned from its replies
ROUNDS = 1000
#: arguments of a script call besides KEYS and its own: EVALSHA, sha, numkeys, the XP prefix
OVERHEAD = 4


@dataclass
class Call:
    """One script call on a partition: its arguments and the keys it declares besides the
    partition's six. A call whose keys do not fit one request is cut in two by ``parts``;
    a ``progressive`` one does what its declared keys allow and is sent again with the next
    ones (``partials``: the payloads of those rounds)."""

    partition: Namespace
    name: str
    args: list[Any]
    keys: list[str]
    parts: Callable[[], tuple[Call, Call]] | None = None
    progressive: bool = False
    order: tuple[int, ...] = ()
    partials: list[Any] = field(default_factory=list)


class Overflow(GraphkeepError):
    """A call that cannot be split needs more keys than one request carries."""

    def __init__(self, call: Call) -> None:
        super().__init__(
            f"store script {call.name} needs {len(call.keys)} keys, more than one request of"
            f" {MAX_ARGS} arguments carries"
        )
        self.call = call


class RedisStorePort:
    """The :class:`~graphkeep.store.port.StorePort` on Redis."""

    scripts = SCRIPTS

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
        #: per partition, keys of expired items its scripts could not purge (declared next)
        self._hints: ThreadLRU[tuple[Namespace], list[str]] = ThreadLRU(1024)
        #: per partition, namespaces this process wrote (what a search of a prefix declares)
        self._written: ThreadLRU[tuple[Namespace], list[str]] = ThreadLRU(1024)
        #: per (partition, prefix, kind), the keys the last search declared
        self._searched: ThreadLRU[tuple[Namespace, str, str], list[str]] = ThreadLRU(4096)
        self.vector_index = vector_index
        #: the Query Engine index and the key prefix of its entries (set by ``use_index``)
        self.index_name = ""
        self.index_prefix = ""
        self.index_schema: tuple[Any, ...] = ()

    @classmethod
    def configured(cls, site: RedisSite, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The port ``options`` describe (``vector_index`` with the ``index`` it indexes)."""
        vector_index = options.pop("vector_index", False)
        if vector_index and site.cluster:
            raise ConfigurationError(
                "vector_index=True needs a single Redis server: the Query Engine does not index"
                " across an open-source Redis Cluster"
            )
        port = cls(
            key_prefix=options.pop("key_prefix", "graphkeep"),
            shard_labels=options.pop("shard_labels", 1),
            vector_index=vector_index,
        )
        if port.vector_index:
            index = index_config(options.get("index"))
            if not index:
                raise ConfigurationError("vector_index=True needs an index (dims, embed) to index")
            port.use_index(int(index["dims"]), index["distance_type"])
        return port, options

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

    def stem(self, partition: Namespace) -> str:
        return f"{self.prefix}:{FORMAT}:{{{encode_thread(dotted_namespace(partition))}}}:"

    def keys(self, partition: Namespace) -> list[str]:
        """The partition's six fixed keys (what every script call declares first)."""
        stem = self.stem(partition)
        return [f"{stem}{suffix}" for suffix in ("i", "u", "e", "t", "n", "l")]

    def order_key(self, namespace: Namespace) -> str:
        return f"{self.stem(self.partition(namespace))}o:{dotted_namespace(namespace)}"

    def vectors_key(self, namespace: Namespace) -> str:
        return f"{self.stem(self.partition(namespace))}w:{dotted_namespace(namespace)}"

    def entry_keys(self, member: bytes, count: int) -> list[str]:
        """The Query Engine entries of an item's ``count`` embeddings (none without one)."""
        if not self.index_prefix:
            return []
        base = f"{self.index_prefix}{hashlib.sha1(member).hexdigest()}:"
        return [f"{base}{i}" for i in range(1, count + 1)]

    def partitions(self, prefix: Namespace) -> Op[list[Namespace]]:
        """The partitions that can hold namespaces under ``prefix``."""
        if len(prefix) >= self.shard_labels:
            return [self.partition(prefix)]
        raw = yield Command(("SMEMBERS", self.registry))
        found = [namespace_from_dotted(p.decode() if isinstance(p, bytes) else p) for p in raw]
        return sorted(p for p in found if p[: len(prefix)] == prefix)

    def _calls(self, calls: list[Any]) -> Op[list[Any]]:
        if len(calls) == 1:
            return [(yield calls[0])]
        if not calls:
            return []
        return list((yield Pipeline(tuple(calls))))

    # -- declared keys ---------------------------------------------------------------

    def _script(self, call: Call) -> Script:
        """``call`` as a request: the partition's six keys, the call's, then as many of the
        partition's hints as fit."""
        fixed = self.keys(call.partition)
        keys = list(dict.fromkeys([*fixed, *call.keys]))
        args = [self.index_prefix, *call.args]
        free = room(keys, args)
        taken = set(keys)
        hints = [k for k in self._hints.get((call.partition,)) or () if k not in taken]
        return _script(call.name, [*keys, *hints[: max(free, 0)]], args)

    def _fitting(self, call: Call) -> list[Call]:
        """``call`` as requests of at most MAX_ARGS arguments."""
        used = OVERHEAD + 6 + len(call.keys) + len(call.args)
        if used <= MAX_ARGS:
            return [call]
        if call.progressive:  # the first keys fit; the next round declares the rest
            call.keys = call.keys[: MAX_ARGS - OVERHEAD - 6 - len(call.args)]
            return [call]
        if call.parts is None:
            raise Overflow(call)
        first, second = call.parts()
        first.order, second.order = (*call.order, 0), (*call.order, 1)
        return [*self._fitting(first), *self._fitting(second)]

    def _run(self, calls: list[Call]) -> Op[list[list[Any]]]:
        """Send ``calls`` (one pipeline a round) until every one is done: a call told of keys
        it needs and did not declare is sent again declaring them. The payloads of each
        call (its parts' in order, a progressive call's rounds' then its last)."""
        for number, call in enumerate(calls):
            call.order = (number,)
        finished: list[tuple[tuple[int, ...], list[Any]]] = []
        pending = calls
        for _ in range(ROUNDS):
            ready = [part for call in pending for part in self._fitting(call)]
            replies = yield from self._calls([self._script(call) for call in ready])
            pending = []
            for call, (done, payload, missing) in zip(ready, replies, strict=True):
                missing = [text(k) for k in missing or ()]
                if done:
                    self._learn(call.partition, missing)
                    finished.append((call.order, [*call.partials, payload]))
                    continue
                if call.progressive:
                    if payload is not None:
                        call.partials.append(payload)
                    # what it did needs no key again (purged items are gone): the next ones
                    call.keys = list(dict.fromkeys(missing))
                else:
                    new = [k for k in missing if k not in call.keys]
                    if not new:
                        raise GraphkeepError(f"store script {call.name} asked for keys it had")
                    call.keys = [*call.keys, *new]
                pending.append(call)
            if not pending:
                break
        else:
            raise GraphkeepError(f"store scripts still needed keys after {ROUNDS} rounds")
        results: list[list[Any]] = [[] for _ in calls]
        for order, payloads in sorted(finished, key=lambda entry: entry[0]):
            results[order[0]] += payloads
        return results

    def _hints_of(self, call: Call) -> set[str]:
        return set(self._hints.get((call.partition,)) or ())

    def _learn(self, partition: Namespace, hints: list[str]) -> None:
        """Keys of expired items the partition's purge could not reach: declared by its next
        calls (so they are purged then, without a round trip of their own)."""
        if hints or (partition,) in self._hints:
            self._hints.put((partition,), list(dict.fromkeys(hints))[:HINT_KEYS])

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
        for partition in (yield from self.partitions(())):
            for raw in (yield from self._namespaces(partition, (), 0)):
                yield from self._reindex(partition, namespace_from_dotted(text(raw)))

    def _reindex(self, partition: Namespace, namespace: Namespace) -> Op[None]:
        """Write the index entries of a namespace's embedded items, a request's worth of
        entry keys at a time (the script says which it needs next)."""
        cursor, keys = "", [self.vectors_key(namespace)]
        for _ in range(ROUNDS):
            reply = yield self._script(
                Call(partition, "m_reindex", [dotted_namespace(namespace), cursor], keys)
            )
            done, payload, missing = reply
            if payload:
                cursor = text(payload[0])
            if done:
                return
            keys = [keys[0], *(text(k) for k in missing)]
            keys = keys[: MAX_ARGS - OVERHEAD - 6 - 2]
        raise GraphkeepError(f"reindexing {namespace} needed more than {ROUNDS} rounds")

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]:
        groups: dict[Namespace, list[int]] = {}
        for i, (namespace, _) in enumerate(keys):
            groups.setdefault(self.partition(namespace), []).append(i)
        chunks: list[list[int]] = []
        calls: list[Call] = []
        for partition, indexes in groups.items():
            args: list[Any] = [now_ms, int(vectors)]
            declared: dict[str, None] = {}
            chunk: list[int] = []
            for i in indexes:
                more = [self.vectors_key(keys[i][0])] if vectors else []
                more = [k for k in more if k not in declared]
                if chunk and OVERHEAD + 6 + len(declared) + len(more) + len(args) + 2 > (MAX_ARGS):
                    calls.append(Call(partition, "m_get", args, list(declared)))
                    chunks.append(chunk)
                    args, declared, chunk = [now_ms, int(vectors)], {}, []
                    more = [self.vectors_key(keys[i][0])] if vectors else []
                declared.update(dict.fromkeys(more))
                args += [_item_member(*keys[i]), int(refresh[i])]
                chunk.append(i)
            calls.append(Call(partition, "m_get", args, list(declared)))
            chunks.append(chunk)
        replies = yield from self._run(calls)
        found: list[StoredItem | None] = [None] * len(keys)
        for indexes, (reply,) in zip(chunks, replies, strict=True):
            for i, entry in zip(indexes, reply, strict=True):
                if entry:
                    record, expires, blob, ttl_ms = entry
                    found[i] = stored = _stored(_item_member(*keys[i]), record, expires, blob)
                    stored.ttl_minutes = int(ttl_ms) / 60_000 if ttl_ms else None
        return found

    def put(
        self,
        items: list[StoredItem],
        deletes: list[ItemKey],
        now_ms: int,
        tombstones: bool = False,
    ) -> Op[None]:
        yield from self._write(items, deletes, now_ms, "t" if tombstones else "")

    def adopt(self, items: list[StoredItem], now_ms: int) -> Op[None]:
        """The put script in its adopting mode: each item written only where its partition
        holds no record and no tombstone (``g``) of it, in the one atomic call."""
        yield from self._write(items, [], now_ms, "a")

    def switch_done(self, mark: bool = False) -> Op[bool]:
        marker = f"{self.prefix}:{FORMAT}:fallback-done"
        if mark:
            yield Command(("SET", marker, "1"))
        return bool((yield Command(("EXISTS", marker))))

    def _write(
        self, items: list[StoredItem], deletes: list[ItemKey], now_ms: int, mode: str
    ) -> Op[None]:
        groups: dict[Namespace, tuple[list[StoredItem], list[ItemKey]]] = {}
        for item in items:
            groups.setdefault(self.partition(item.namespace), ([], []))[0].append(item)
        for key in deletes:
            groups.setdefault(self.partition(key[0]), ([], []))[1].append(key)
        fresh = [
            dotted_namespace(p)
            for p, (puts, _) in groups.items()
            if puts and dotted_namespace(p) not in self._registered
        ]
        if fresh:
            # registered before the items are written: a listing may find an empty partition,
            # never miss a full one
            yield Command(("SADD", self.registry, *fresh))
        calls = []
        for partition, (puts, dels) in groups.items():
            calls += self._put_calls(partition, puts, dels, now_ms, mode)
        yield from self._run(calls)
        self._registered.update(fresh)
        for partition, (puts, _) in groups.items():
            known = self._written.get((partition,)) or []
            new = [dotted_namespace(item.namespace) for item in puts]
            if any(ns not in known for ns in new):
                self._written.put((partition,), list(dict.fromkeys([*known, *new]))[-WRITTEN:])

    def _put_calls(
        self,
        partition: Namespace,
        puts: list[StoredItem],
        dels: list[ItemKey],
        now_ms: int,
        mode: str,
    ) -> list[Call]:
        """A partition's writes cut into calls of at most MAX_ARGS arguments (less
        HEADROOM, and room for as many old index entries as the new item has)."""
        calls: list[Call] = []
        chunk_puts: list[StoredItem] = []
        chunk_dels: list[ItemKey] = []
        namespaces: set[Namespace] = set()
        used = OVERHEAD + 6 + 4
        ops: list[StoredItem | ItemKey] = [*puts, *dels]
        for item in ops:
            namespace = item.namespace if isinstance(item, StoredItem) else item[0]
            cost = 2 if namespace not in namespaces else 0
            if isinstance(item, StoredItem):
                cost += 7 + (2 * len(item.vectors) if self.index_prefix else 0)
            else:
                cost += 1
            if (chunk_puts or chunk_dels) and used + cost > MAX_ARGS - HEADROOM:
                calls.append(self._put_call(partition, chunk_puts, chunk_dels, now_ms, mode))
                cost += 0 if namespace not in namespaces else 2  # declared anew in the next
                chunk_puts, chunk_dels, namespaces = [], [], set()
                used = OVERHEAD + 6 + 4
            if isinstance(item, StoredItem):
                chunk_puts.append(item)
            else:
                chunk_dels.append(item)
            namespaces.add(namespace)
            used += cost
        if chunk_puts or chunk_dels:
            calls.append(self._put_call(partition, chunk_puts, chunk_dels, now_ms, mode))
        return calls

    def _put_call(
        self,
        partition: Namespace,
        puts: list[StoredItem],
        dels: list[ItemKey],
        now_ms: int,
        mode: str,
    ) -> Call:
        args: list[Any] = [now_ms, len(puts), mode]
        # the partition's tombstones (a delete with a fallback leaves one; adopt reads them)
        keys: dict[str, None] = {f"{self.stem(partition)}g": None} if mode else {}
        for item in puts:
            member = _item_member(item.namespace, item.key)
            args += [
                member,
                item.created_us.to_bytes(8, "big"),
                item.updated_us.to_bytes(8, "big") + encode_value(item.value),
                item.updated_us,
                item.expires_ms if item.expires_ms is not None else "",
                int(item.ttl_minutes * 60_000) if item.ttl_minutes is not None else "",
                _pack_vectors(item.vectors) if item.vectors else "",
            ]
            keys.update(dict.fromkeys(self._namespace_keys(item.namespace)))
            keys.update(dict.fromkeys(self.entry_keys(member, len(item.vectors))))
        for key in dels:
            args.append(_item_member(*key))
            keys.update(dict.fromkeys(self._namespace_keys(key[0])))
        call = Call(partition, "m_put", args, list(keys))
        if len(puts) + len(dels) > 1:

            def halves() -> tuple[Call, Call]:
                ops: list[StoredItem | ItemKey] = [*puts, *dels]
                half = len(ops) // 2
                first, second = ops[:half], ops[half:]
                return (
                    self._put_call(partition, *_split_ops(first), now_ms, mode),
                    self._put_call(partition, *_split_ops(second), now_ms, mode),
                )

            call.parts = halves
        return call

    def _namespace_keys(self, namespace: Namespace) -> list[str]:
        return [self.order_key(namespace), self.vectors_key(namespace)]

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        partitions = yield from self.partitions(query.prefix)
        units: list[tuple[Namespace, list[str] | None]] = [(p, None) for p in partitions]
        while True:
            several = len(units) > 1
            calls = [self._search_call(query, p, only, several) for p, only in units]
            try:
                replies = yield from self._run(calls)
            except Overflow as over:
                # an exact vector scan of more namespaces than one request declares: scan
                # them in parts, merged as the parts of several partitions are
                units = yield from self._scan_units(units, over.call.partition, query)
                continue
            break
        for call, (_, only) in zip(calls, units, strict=True):
            if only is not None:
                continue  # a part of a scan: the next search splits it again
            hints = self._hints_of(call)
            learned = [k for k in call.keys if k not in hints]
            # keys hinted by this search (the order indexes it could not merge) stay with it
            learned += [k for k in hints if k.startswith(self.stem(call.partition))]
            self._searched.put(self._search_memo(query, call.partition), learned)
        found: list[StoredItem] = []
        ttl_members: dict[bytes, Namespace] = {}
        for (partition, _), (reply,) in zip(units, replies, strict=True):
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
                member = _item_member(item.namespace, item.key)
                if member in ttl_members:
                    refresh.setdefault(ttl_members[member], []).append(member)
            step = MAX_ARGS - OVERHEAD - 6 - 1
            yield from self._run(
                [
                    Call(p, "m_refresh", [query.now_ms, *members[at : at + step]], [])
                    for p, members in refresh.items()
                    for at in range(0, len(members), step)
                ]
            )
        return page

    def _search_memo(self, query: SearchQuery, partition: Namespace) -> tuple[Namespace, str, str]:
        kind = "order" if query.vector is None else "index" if self.index_name else "vectors"
        return partition, dotted_namespace(query.prefix), kind

    def _search_call(
        self, query: SearchQuery, partition: Namespace, only: list[str] | None, several: bool
    ) -> Call:
        """The search of one partition (of ``only`` these namespaces: an exact scan's part);
        it declares what the last search of the prefix there needed, else the prefix's own
        keys (the script answers the keys of the namespaces below it, if any)."""
        indexed = query.vector is not None and not several and bool(self.index_name)
        args: list[Any] = [
            query.now_ms,
            dotted_namespace(query.prefix),
            0 if several else query.offset,
            query.offset + query.limit if several else query.limit,
            int(query.refresh and not several),
            orjson.dumps([[list(c.path), c.op, c.value] for c in query.conditions]),
            query.distance if query.vector is not None else "",
            pack_vector(query.vector) if query.vector is not None else b"",
            len(query.vector) if query.vector is not None else 0,
            self.index_name if indexed else "",
            _tag(query.prefix) if query.prefix else "",
            orjson.dumps(_needles(query)),
            orjson.dumps(only) if only is not None else "",
        ]
        if only is not None:
            keys = [self.vectors_key(namespace_from_dotted(ns)) for ns in only]
        elif indexed:
            keys = [self.index_name]
        else:
            keys = list(self._searched.get(self._search_memo(query, partition)) or ())
            if not keys:
                keys = self._predicted(query, partition)
        return Call(partition, "m_search", args, keys)

    def _predicted(self, query: SearchQuery, partition: Namespace) -> list[str]:
        """Keys a first search of ``query.prefix`` declares: the prefix's own and those of
        the namespaces below it this process wrote (more than MERGE_LIMIT of them: a search
        without a vector walks the partition's order instead, and needs none)."""
        prefix = dotted_namespace(query.prefix)
        spaces = [ns for ns in self._written.get((partition,)) or () if _under(ns, prefix)]
        if query.prefix[: len(partition)] == partition:
            spaces = list(dict.fromkeys([prefix, *spaces]))
        if query.vector is None:
            if len(spaces) > MERGE_LIMIT:
                return []
            return [self.order_key(namespace_from_dotted(ns)) for ns in spaces]
        return [self.vectors_key(namespace_from_dotted(ns)) for ns in spaces][:SCAN_NAMESPACES]

    def _scan_units(
        self,
        units: list[tuple[Namespace, list[str] | None]],
        partition: Namespace,
        query: SearchQuery,
    ) -> Op[list[tuple[Namespace, list[str] | None]]]:
        spaces = [text(ns) for ns in (yield from self._namespaces(partition, query.prefix, 0))]
        parts: list[tuple[Namespace, list[str] | None]] = [
            (partition, spaces[at : at + SCAN_NAMESPACES])
            for at in range(0, len(spaces), SCAN_NAMESPACES)
        ]
        at = units.index((partition, None))
        return [*units[:at], *parts, *units[at + 1 :]]

    def _namespaces(self, partition: Namespace, prefix: Namespace, now_ms: int) -> Op[list[Any]]:
        """The namespaces of one partition under ``prefix`` (its expired items purged)."""
        call = Call(partition, "m_namespaces", [now_ms, dotted_namespace(prefix)], [])
        call.progressive = True
        (result,) = yield from self._run([call])
        return list(result[-1])

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]:
        partitions = yield from self.partitions(prefix)
        calls = [
            Call(p, "m_namespaces", [now_ms, dotted_namespace(prefix)], [], progressive=True)
            for p in partitions
        ]
        replies = yield from self._run(calls)
        found = []
        for payloads in replies:
            for raw in payloads[-1]:
                namespace = namespace_from_dotted(text(raw))
                if namespace[: len(prefix)] == prefix:
                    found.append(namespace)
        return found

    def sweep(self, now_ms: int) -> Op[int]:
        partitions = yield from self.partitions(())
        replies = yield from self._run(
            [Call(p, "m_sweep", [now_ms], [], progressive=True) for p in partitions]
        )
        empty = [
            dotted_namespace(p)
            for p, payloads in zip(partitions, replies, strict=True)
            if not payloads[-1][1]
        ]
        if empty:
            yield Command(("SREM", self.registry, *empty))
            self._registered.difference_update(empty)
        return sum(int(p[-1][0]) + sum(int(x) for x in p[:-1]) for p in replies)


def _merge(found: list[StoredItem], query: SearchQuery) -> list[StoredItem]:
    """The page across partitions: each partition returned its best offset + limit."""
    if query.vector is None:
        return rank(found, query)
    found.sort(key=lambda c: (c.namespace, c.key))
    found.sort(key=lambda c: c.score or 0.0, reverse=True)
    return found[query.offset : query.offset + query.limit]


def _script(name: str, keys: list[str], args: list[Any]) -> Script:
    return Script(name, keys, args)


def _under(namespace: str, prefix: str) -> bool:
    return not prefix or namespace == prefix or namespace.startswith(prefix + ".")


def _split_ops(ops: list[StoredItem | ItemKey]) -> tuple[list[StoredItem], list[ItemKey]]:
    puts = [op for op in ops if isinstance(op, StoredItem)]
    return puts, [op for op in ops if not isinstance(op, StoredItem)]


def _needles(query: SearchQuery) -> list[str]:
    """Strings every match's stored JSON contains: the JSON text of each string an equality
    asks for (values are stored as orjson writes them, so the same string reads the same)."""
    return [
        orjson.dumps(c.value).decode()
        for c in query.conditions
        if c.op == "$eq" and isinstance(c.value, str)
    ]


def _tag(namespace: Namespace) -> str:
    """The index tag of a namespace prefix (what the ``tags`` Lua function writes)."""
    return hashlib.sha1(dotted_namespace(namespace).encode()).hexdigest()[:20]


class RedisStore(OnRedis, SyncStore):
    """LangGraph ``BaseStore`` on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``index`` (IndexConfig), ``ttl`` (TTLConfig), ``key_prefix``, ``shard_labels``
    (how many leading namespace labels pick a partition / cluster slot; default 1),
    ``vector_index`` (use the server's Query Engine for semantic search; single server
    only; every process writing the store must set it alike), ``max_key_bytes``. ``where``
    names the server in errors (default: the client's host and port).
    """

    port_type = RedisStorePort


class AsyncRedisStore(OnRedis, AsyncStore):
    """LangGraph ``BaseStore`` on a ``redis.asyncio`` client (``Redis`` or ``RedisCluster``)."""

    port_type = RedisStorePort
