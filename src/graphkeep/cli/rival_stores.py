"""The official LangGraph stores of other packages, for ``graphkeep store copy``.

``langgraph-redis://HOST:PORT/DB`` is ``RedisStore`` (langgraph-checkpoint-redis, on Redis
Stack), ``langgraph-mongodb://HOST:PORT/DB`` is ``MongoDBStore`` (langgraph-store-mongodb) and
``langgraph-dynamodb://TABLE?region=...&endpoint_url=...`` is ``DynamoDBStore``
(langgraph-checkpoint-aws). Query parameters are the stores' own constructor options, named
as their constructors take them (``store_prefix``, ``collection_name``, ``region_name`` ...);
``default_ttl`` and ``refresh_on_read`` make their ``ttl`` config.

As a destination each store is opened through its public API (the copy writes with its
``batch``). As a source each is read from what it stored, not through its ``search``, which
none of them can use to list everything faithfully: ``RedisStore``'s documents are scanned
(``SCAN`` + ``JSON.GET``, remaining life from ``PTTL``); ``MongoDBStore``'s collection is read
with ``find`` (its ``get`` and ``search`` rewrite ``updated_at``, its constructor builds
indexes, and its ``list_namespaces`` limits before de-duplicating: none is used on a source);
``DynamoDBStore``'s table is scanned page by page (its ``search`` matches one namespace
exactly). Nothing is written to a source. A missing package is one line naming it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from langgraph.store.base import BaseStore, Item

from graphkeep.cli.arguments import import_object
from graphkeep.cli.console import MASK, NotFound, UsageError, safe_url
from graphkeep.errors import StorageUnavailable
from graphkeep.moving.openers import entered

RIVAL_SCHEMES = ("langgraph-redis", "langgraph-mongodb", "langgraph-dynamodb")
INSTALL = "pip install 'graphkeep[migrate]'"
#: items per page read from a source
PAGE = 200

_PACKAGES = {
    "langgraph-redis": ("langgraph.store.redis", "langgraph-checkpoint-redis"),
    "langgraph-mongodb": ("langgraph.store.mongodb", "langgraph-store-mongodb"),
    "langgraph-dynamodb": ("langgraph_checkpoint_aws.store.dynamodb", "langgraph-checkpoint-aws"),
}
_TTL_OPTIONS = ("default_ttl", "refresh_on_read")
_OPTIONS = {
    "langgraph-redis": ("store_prefix", "vector_prefix", *_TTL_OPTIONS),
    "langgraph-mongodb": ("collection_name", "auto_index_timeout", *_TTL_OPTIONS),
    "langgraph-dynamodb": (
        "region_name",
        "region",
        "endpoint_url",
        "max_read_capacity_units",
        "max_write_capacity_units",
        *_TTL_OPTIONS,
    ),
}


@dataclass(frozen=True)
class Record:
    """One item as a source keeps it: ``ttl`` is the minutes it has left (None: never
    expires); ``indexed`` says the source holds an embedding of it."""

    item: Item
    ttl: float | None = None
    indexed: bool = False


@dataclass(frozen=True)
class Unreadable:
    """A stored entry of a source that is not an item its store could return: ``where`` names
    it in the store's own terms (a Redis key, a MongoDB ``_id``, a DynamoDB PK/SK)."""

    where: str
    reason: str


Entry = Record | Unreadable
#: every live item of a source under a namespace prefix, a page at a time
Pages = Callable[[tuple[str, ...]], Iterator[list[Entry]]]


def _unreadable(where: str, exc: Exception) -> Unreadable:
    return Unreadable(where, f"{type(exc).__name__}: {exc}"[:300])


def is_rival(url: str) -> bool:
    return url.split("://", 1)[0].lower() in RIVAL_SCHEMES if "://" in url else False


def _module(scheme: str) -> Any:
    name, package = _PACKAGES[scheme]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise UsageError(
            f"{scheme}:// URLs need {package}: {INSTALL} (or pip install {package})"
        ) from exc


@dataclass(frozen=True)
class _Url:
    scheme: str
    netloc: str
    path: str
    options: dict[str, str]
    passthrough: dict[str, str]


def _parse(url: str) -> _Url:
    MASK.remember(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    allowed = _OPTIONS[scheme]
    options: dict[str, str] = {}
    passthrough: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in allowed:
            options[name] = value
        elif scheme == "langgraph-mongodb":
            passthrough[name] = value  # the MongoDB URI's own options (authSource ...)
        else:
            raise UsageError(
                f"{scheme}:// takes the options {', '.join(allowed)}; got {name!r}"
                f" in {safe_url(url)}"
            )
    return _Url(scheme, parts.netloc, parts.path.strip("/"), options, passthrough)


def _number(url: _Url, name: str) -> float | None:
    text = url.options.get(name)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{url.scheme}:// option {name} must be a number, got {text!r}") from None


def _ttl(url: _Url) -> dict[str, Any] | None:
    ttl: dict[str, Any] = {}
    default = _number(url, "default_ttl")
    if default is not None:
        ttl["default_ttl"] = default
    if "refresh_on_read" in url.options:
        ttl["refresh_on_read"] = url.options["refresh_on_read"].lower() in ("1", "true", "yes")
    return ttl or None


def _reached(url: str, manager: AbstractContextManager[Any]) -> AbstractContextManager[Any]:
    """``manager`` entered; a failure to reach the server as one StorageUnavailable line."""
    return entered(
        url,
        manager,
        lambda exc: StorageUnavailable(
            f"{safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
        ),
        keep=(UsageError, NotFound),
    )


# -- opening ---------------------------------------------------------------------------


@contextmanager
def _redis(url: str, index: dict[str, Any] | None) -> Iterator[Any]:
    module = _module("langgraph-redis")
    parsed = _parse(url)
    conn = f"redis://{parsed.netloc}/{parsed.path or '0'}"
    options = {
        k: parsed.options[k] for k in ("store_prefix", "vector_prefix") if k in parsed.options
    }
    manager = module.RedisStore.from_conn_string(conn, index=index, ttl=_ttl(parsed), **options)
    with _reached(url, manager) as store:
        yield store


def _mongo_client(parsed: _Url) -> tuple[str, str, str]:
    """(MongoDB URI, database, collection) of a ``langgraph-mongodb://`` URL."""
    query = f"?{urlencode(parsed.passthrough)}" if parsed.passthrough else ""
    return (
        f"mongodb://{parsed.netloc}/{query}",
        parsed.path or "checkpointing_db",
        parsed.options.get("collection_name", "persistent-store"),
    )


@contextmanager
def _mongodb(url: str, index: dict[str, Any] | None) -> Iterator[Any]:
    module = _module("langgraph-mongodb")
    parsed = _parse(url)
    conn, db, collection = _mongo_client(parsed)
    options: dict[str, Any] = {}
    if "auto_index_timeout" in parsed.options:
        options["auto_index_timeout"] = int(_number(parsed, "auto_index_timeout") or 0)
    manager = module.MongoDBStore.from_conn_string(
        conn,
        db_name=db,
        collection_name=collection,
        ttl_config=_ttl(parsed),
        index_config=index,
        **options,
    )
    with _reached(url, manager) as store:
        yield store


def _dynamodb_options(parsed: _Url) -> dict[str, Any]:
    options: dict[str, Any] = {"region_name": parsed.options.get("region_name")}
    options["region_name"] = options["region_name"] or parsed.options.get("region")
    if "endpoint_url" in parsed.options:
        options["endpoint_url"] = parsed.options["endpoint_url"]
    for name in ("max_read_capacity_units", "max_write_capacity_units"):
        if name in parsed.options:
            options[name] = int(_number(parsed, name) or 0)
    return options


@contextmanager
def _dynamodb(url: str, index: dict[str, Any] | None) -> Iterator[Any]:
    module = _module("langgraph-dynamodb")
    parsed = _parse(url)
    table = parsed.netloc.rsplit("@", 1)[-1]
    if not table:
        raise UsageError(f"no table in {safe_url(url)}: langgraph-dynamodb://TABLE?region=...")
    manager = module.DynamoDBStore.from_table_name(
        table, ttl=_ttl(parsed), index=index, **_dynamodb_options(parsed)
    )
    with _reached(url, manager) as store:
        yield store


_OPENERS = {
    "langgraph-redis": _redis,
    "langgraph-mongodb": _mongodb,
    "langgraph-dynamodb": _dynamodb,
}


@contextmanager
def open_rival_store(
    url: str, *, setup: bool = False, index: dict[str, Any] | None = None
) -> Iterator[BaseStore]:
    """The store at a ``langgraph-redis://``, ``langgraph-mongodb://`` or
    ``langgraph-dynamodb://`` URL; ``setup`` creates its indexes / table (destinations)."""
    scheme = url.split("://", 1)[0].lower()
    with _OPENERS[scheme](url, index) as store:
        if setup and hasattr(store, "setup"):
            try:
                store.setup()
            except Exception as exc:
                raise StorageUnavailable(
                    f"{safe_url(url)}: setup failed ({type(exc).__name__}: {exc})"
                ) from exc
        yield store


@contextmanager
def open_callable_store(spec: str, option: str) -> Iterator[BaseStore]:
    """The store ``MODULE:CALLABLE`` yields (a callable returning a context manager)."""
    factory = import_object(spec, option, "myapp.stores:open_store")
    if not callable(factory):
        raise UsageError(f"{option} {spec}: not a callable")
    with factory() as store:
        if not isinstance(store, BaseStore):
            raise UsageError(f"{option} {spec}: yielded {type(store).__name__}, not a BaseStore")
        yield store


# -- reading a source as it stored its items --------------------------------------------


@contextmanager
def open_rival_source(url: str) -> Iterator[Pages]:
    """The pages of every item a rival store at ``url`` holds, read with a client of its
    own (none of the store's methods runs); never writes to it."""
    scheme = url.split("://", 1)[0].lower()
    _module(scheme)
    sources = {
        "langgraph-redis": _redis_source,
        "langgraph-mongodb": _mongodb_source,
        "langgraph-dynamodb": _dynamodb_source,
    }
    yield from sources[scheme](url)


def holds_store(url: str) -> bool:
    """Does the rival at ``url`` hold its store yet (RedisStore's search index, MongoDBStore's
    collection, DynamoDBStore's table)? Looked at without creating anything, for a dry run."""
    scheme = url.split("://", 1)[0].lower()
    _module(scheme)
    parsed = _parse(url)
    try:
        if scheme == "langgraph-redis":
            from redis import Redis
            from redis.exceptions import ResponseError

            with Redis.from_url(f"redis://{parsed.netloc}/{parsed.path or '0'}") as client:
                try:
                    client.execute_command("FT.INFO", parsed.options.get("store_prefix", "store"))
                except ResponseError:
                    return False
                return True
        if scheme == "langgraph-mongodb":
            from pymongo import MongoClient

            conn, db, name = _mongo_client(parsed)
            mongo: Any = MongoClient(conn)
            try:
                return name in mongo[db].list_collection_names()
            finally:
                mongo.close()
        with contextmanager(_dynamodb_source)(url):
            return True
    except NotFound:
        return False
    except Exception as exc:
        raise StorageUnavailable(
            f"{safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
        ) from exc


def native_pages(store: BaseStore) -> Pages | None:
    """How to read ``store`` from its storage when it is a ``MongoDBStore`` or a
    ``DynamoDBStore`` (whose ``search`` cannot list it all); None: use its ``search``."""
    kind = type(store).__module__
    if kind.startswith("langgraph.store.mongodb"):
        collection = store.collection  # type: ignore[attr-defined]
        return lambda prefix: _mongodb_pages(collection, prefix)
    if kind.startswith("langgraph_checkpoint_aws.store"):
        client, table = store.client, store.table_name  # type: ignore[attr-defined]
        return lambda prefix: _dynamodb_pages(client, table, prefix)
    return None


def native_get(store: BaseStore) -> Callable[[list[tuple[tuple[str, ...], str]]], list[Any]] | None:
    """How to read items of ``store`` by key when its ``get`` cannot be relied on (None: it
    can). ``RedisStore`` 0.5.2's ``get`` finds nothing in a namespace of two or more labels
    on Redis Stack (its quoted-phrase query never matches the escaped dots), so its items are
    found the way its own ``put`` finds them to replace: ``@prefix:NS @key:{KEY}``."""
    if not type(store).__module__.startswith("langgraph.store.redis"):
        return None
    from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer
    from redisvl.utils.token_escaper import TokenEscaper

    escape, serde = TokenEscaper().escape, JsonPlusRedisSerializer()
    index: Any = store.store_index  # type: ignore[attr-defined]

    def get(keys: list[tuple[tuple[str, ...], str]]) -> list[Any]:
        found: list[Any] = []
        for namespace, key in keys:
            text = ".".join(namespace)
            query = f"@prefix:{escape(text)} @key:{{{escape(key)}}}"
            rows = [json.loads(doc.json) for doc in index.search(query).docs]
            rows = [r for r in rows if r["key"] == key and _plain_prefix(r["prefix"]) == text]
            if not rows:
                found.append(None)
                continue
            row = max(rows, key=lambda r: r["updated_at"])
            found.append(_redis_item(row, namespace, serde))
        return found

    return get


def _plain_prefix(text: str) -> str:
    from langgraph.store.redis.token_unescaper import TokenUnescaper

    return str(TokenUnescaper().unescape(text))


def _redis_item(row: dict[str, Any], namespace: tuple[str, ...], serde: Any) -> Item:
    return Item(
        value=_redis_value(row["value"], serde),
        key=row["key"],
        namespace=namespace,
        created_at=datetime.fromtimestamp(row["created_at"] / 1_000_000, timezone.utc),
        updated_at=datetime.fromtimestamp(row["updated_at"] / 1_000_000, timezone.utc),
    )


def _under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


def _minutes_left(expires_s: float, now_s: float) -> float:
    return (expires_s - now_s) / 60


def _redis_source(url: str) -> Iterator[Pages]:
    from redis import Redis

    parsed = _parse(url)
    client: Any = Redis.from_url(f"redis://{parsed.netloc}/{parsed.path or '0'}")
    store_prefix = parsed.options.get("store_prefix", "store")
    vector_prefix = parsed.options.get("vector_prefix", "store_vectors")
    try:
        try:
            client.ping()
        except Exception as exc:
            raise StorageUnavailable(
                f"{safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
            ) from exc
        yield lambda prefix: _redis_pages(client, store_prefix, vector_prefix, prefix)
    finally:
        client.close()


def _redis_value(value: Any, serde: Any) -> Any:
    """A document's value as ``RedisStore`` returns it: its serde wrapper decoded."""
    if isinstance(value, dict) and set(value) == {"__serde_type__", "__serde_data__"}:
        kind, data = value["__serde_type__"], value["__serde_data__"]
        raw = data.encode() if kind == "json" else bytes.fromhex(data)
        return serde.loads_typed((kind, raw))
    return value


def _redis_pages(
    client: Any, store_prefix: str, vector_prefix: str, prefix: tuple[str, ...]
) -> Iterator[list[Entry]]:
    """``SCAN`` of the store's documents, ``JSON.MGET`` of each batch, ``PTTL`` for the life
    left; a document's namespace is its dotted, RediSearch-escaped ``prefix`` field."""
    from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer
    from langgraph.store.redis.token_unescaper import TokenUnescaper

    serde, unescaper = JsonPlusRedisSerializer(), TokenUnescaper()
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=f"{store_prefix}:*", count=PAGE)
        keys = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.json().get(key)
            pipe.pttl(key)
            pipe.exists(f"{vector_prefix}:{key.split(':', 1)[1]}")
        replies = pipe.execute() if keys else []
        page: list[Entry] = []
        for i in range(0, len(replies), 3):
            row, ttl, vector = replies[i : i + 3]
            if not row:
                continue  # gone between SCAN and JSON.GET
            try:
                namespace = tuple(unescaper.unescape(row["prefix"]).split("."))
                if not _under(namespace, prefix):
                    continue
                item = _redis_item(row, namespace, serde)
            except Exception as exc:  # one bad document: reported, the others copied
                page.append(_unreadable(f"Redis key {keys[i // 3]}", exc))
                continue
            left = ttl / 60_000 if ttl is not None and ttl > 0 else None
            page.append(Record(item, left, bool(vector)))
        if page:
            yield page
        if int(cursor) == 0:
            return


def _mongodb_source(url: str) -> Iterator[Pages]:
    from pymongo import MongoClient

    parsed = _parse(url)
    conn, db, name = _mongo_client(parsed)
    client: Any = MongoClient(conn)
    try:
        try:
            names = client[db].list_collection_names()
        except Exception as exc:
            raise StorageUnavailable(
                f"{safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
            ) from exc
        if name not in names:
            raise NotFound(f"no MongoDBStore collection {name!r} in database {db!r}")
        collection = client[db][name]
        yield lambda prefix: _mongodb_pages(collection, prefix)
    finally:
        client.close()


def _mongodb_pages(collection: Any, prefix: tuple[str, ...]) -> Iterator[list[Entry]]:
    """Every document, by ``_id``; remaining life from the collection's TTL index on
    ``updated_at`` (documents past it are skipped: MongoDB reaps them a minute late)."""
    expire_after: float | None = None
    for index in collection.list_indexes():
        if dict(index["key"]) == {"updated_at": 1} and "expireAfterSeconds" in index:
            expire_after = float(index["expireAfterSeconds"])
    now = datetime.now(timezone.utc).timestamp()
    query: dict[str, Any] = {}
    if prefix:
        query = {f"namespace.{i}": label for i, label in enumerate(prefix)}
    last: Any = None
    while True:
        page_query = dict(query) if last is None else {**query, "_id": {"$gt": last}}
        docs = list(collection.find(page_query).sort("_id", 1).limit(PAGE))
        if not docs:
            return
        last = docs[-1]["_id"]
        page: list[Entry] = []
        for doc in docs:
            try:
                created, updated = _aware(doc["created_at"]), _aware(doc["updated_at"])
                item = Item(
                    value=doc["value"],
                    key=doc["key"],
                    namespace=tuple(doc["namespace"]),
                    created_at=created,
                    updated_at=updated,
                )
            except Exception as exc:  # one bad document: reported, the others copied
                page.append(_unreadable(f"MongoDB document {doc.get('_id')}", exc))
                continue
            ttl = None
            if expire_after is not None:
                ttl = _minutes_left(updated.timestamp() + expire_after, now)
                if ttl <= 0:
                    continue
            page.append(Record(item, ttl, "embedding" in doc))
        if page:
            yield page


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _dynamodb_source(url: str) -> Iterator[Pages]:
    import boto3

    parsed = _parse(url)
    table = parsed.netloc.rsplit("@", 1)[-1]
    options = _dynamodb_options(parsed)
    client = boto3.client(
        "dynamodb", region_name=options["region_name"], endpoint_url=options.get("endpoint_url")
    )
    try:
        client.describe_table(TableName=table)
    except client.exceptions.ResourceNotFoundException:
        raise NotFound(f"no DynamoDBStore table {table!r}") from None
    except Exception as exc:
        raise StorageUnavailable(
            f"{safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
        ) from exc
    yield lambda prefix: _dynamodb_pages(client, table, prefix)


def _dynamodb_pages(client: Any, table: str, prefix: tuple[str, ...]) -> Iterator[list[Entry]]:
    """A paged ``Scan`` of the table (an item's namespace is its ``PK``, labels joined by
    ``:``); items past ``expires_at`` are skipped (DynamoDB deletes them up to days late)."""
    from boto3.dynamodb.types import TypeDeserializer

    decode = TypeDeserializer().deserialize
    pages = client.get_paginator("scan").paginate(
        TableName=table, PaginationConfig={"PageSize": PAGE}
    )
    for raw in pages:
        now = datetime.now(timezone.utc).timestamp()
        page: list[Entry] = []
        for found in raw.get("Items", []):
            row = {k: decode(v) for k, v in found.items()}
            if "value" not in row:
                continue  # not an item of the store (moto leaves a refused put's bare key)
            try:
                ttl = None
                if row.get("expires_at") is not None:
                    ttl = _minutes_left(float(row["expires_at"]), now)
                    if ttl <= 0:
                        continue
                namespace = tuple(row["PK"].split(":")) if row["PK"] else ()
                if not _under(namespace, prefix):
                    continue
                item = Item(
                    value=row["value"],
                    key=row["SK"],
                    namespace=namespace,
                    created_at=datetime.fromisoformat(row["created_at"]),
                    updated_at=datetime.fromisoformat(row["updated_at"]),
                )
            except Exception as exc:  # one bad item: reported, the others copied
                where = f"DynamoDB item PK={row.get('PK')!r} SK={row.get('SK')!r}"
                page.append(_unreadable(where, exc))
                continue
            page.append(Record(item, ttl, row.get("embedding") is not None))
        if page:
            yield page
