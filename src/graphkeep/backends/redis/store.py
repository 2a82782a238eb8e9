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
from typing import Any

import orjson

from graphkeep.backends.redis.client import OnRedis, RedisSite, ResponseError
from graphkeep.backends.redis.keys import check_prefix, encode_thread
from graphkeep.backends.redis.requests import Command, Pipeline, Script
from graphkeep.backends.redis.store_scripts import SCRIPTS
from graphkeep.errors import ConfigurationError
from graphkeep.port import Op, codec
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

    def keys(self, partition: Namespace) -> list[str]:
        base = f"{self.prefix}:{FORMAT}:{{{encode_thread(dotted_namespace(partition))}}}"
        keys = [f"{base}:{suffix}" for suffix in ("i", "u", "e", "t", "n", "l")]
        # the index entries' prefix rides along as KEYS[7] (single node only: it has no tag)
        return [*keys, self.index_prefix] if self.index_prefix else keys

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
                args += [_item_member(*keys[i]), int(refresh[i])]
            calls.append(_script("m_get", self.keys(partition), args))
        replies = yield from self._calls(calls)
        found: list[StoredItem | None] = [None] * len(keys)
        for indexes, reply in zip(groups.values(), replies, strict=True):
            for i, entry in zip(indexes, reply, strict=True):
                if entry:
                    record, expires, blob = entry
                    found[i] = _stored(_item_member(*keys[i]), record, expires, blob)
        return found

    def put(self, items: list[StoredItem], deletes: list[ItemKey], now_ms: int) -> Op[None]:
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
            args: list[Any] = [now_ms, len(puts)]
            for item in puts:
                args += [
                    _item_member(item.namespace, item.key),
                    item.created_us.to_bytes(8, "big"),
                    item.updated_us.to_bytes(8, "big") + encode_value(item.value),
                    item.updated_us,
                    item.expires_ms if item.expires_ms is not None else "",
                    int(item.ttl_minutes * 60_000) if item.ttl_minutes is not None else "",
                    _pack_vectors(item.vectors) if item.vectors else "",
                ]
            args += [_item_member(*key) for key in dels]
            calls.append(_script("m_put", self.keys(partition), args))
        yield from self._calls(calls)
        self._registered.update(fresh)

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        partitions = yield from self.partitions(query.prefix)
        several = len(partitions) > 1
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
            self.index_name if query.vector is not None and not several else "",
            _tag(query.prefix) if query.prefix else "",
            orjson.dumps(_needles(query)),
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
                member = _item_member(item.namespace, item.key)
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
            [
                _script("m_namespaces", self.keys(p), [now_ms, dotted_namespace(prefix)])
                for p in partitions
            ]
        )
        found = []
        for reply in replies:
            for raw in reply:
                namespace = namespace_from_dotted(raw.decode())
                if namespace[: len(prefix)] == prefix:
                    found.append(namespace)
        return found

    def sweep(self, now_ms: int) -> Op[int]:
        partitions = yield from self.partitions(())
        replies = yield from self._calls(
            [_script("m_sweep", self.keys(p), [now_ms]) for p in partitions]
        )
        empty = [
            dotted_namespace(p)
            for p, (_, left) in zip(partitions, replies, strict=True)
            if not left
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
