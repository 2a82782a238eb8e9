"""The official LangGraph stores of other packages, opened for ``graphkeep store copy`` and
``connect_store(url, fallback=…)`` alike (the savers' counterpart is :mod:`.rivals`).

``langgraph-redis://HOST:PORT/DB`` is ``RedisStore`` (langgraph-checkpoint-redis, on Redis
Stack), ``langgraph-mongodb://HOST:PORT/DB`` is ``MongoDBStore`` (langgraph-store-mongodb) and
``langgraph-dynamodb://TABLE?region=...&endpoint_url=...`` is ``DynamoDBStore``
(langgraph-checkpoint-aws). Query parameters are the stores' own constructor options, named
as their constructors take them (``store_prefix``, ``collection_name``, ``region_name`` ...);
``default_ttl`` and ``refresh_on_read`` make their ``ttl`` config.

As a destination each store is opened through its public API (:func:`open_rival_store`: the
copy writes with its ``batch``). As a source each is read from what it stored
(:func:`open_rival_source`, the readers of :mod:`.rival_items`), with a client of its own:
every item page by page (``store copy``) or items by key (the fallback's read-through), never
through the store's methods and never writing or refreshing anything. A missing package is
one line naming it (:class:`~graphkeep.errors.ConfigurationError`); a source that holds no
store (no search index, collection or table) is :class:`StoreMissing`; a server that cannot
be reached, :class:`~graphkeep.errors.StorageUnavailable`, the URL masked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from langgraph.store.base import BaseStore

from graphkeep.errors import ConfigurationError, StorageUnavailable
from graphkeep.moving import rival_items
from graphkeep.moving.openers import entered, scheme_of, shown
from graphkeep.moving.rival_items import ItemKey, Keys, Pages, Record

REDIS = "langgraph-redis"
MONGODB = "langgraph-mongodb"
DYNAMODB = "langgraph-dynamodb"
RIVAL_STORE_SCHEMES = (REDIS, MONGODB, DYNAMODB)
INSTALL = "pip install 'graphkeep[migrate]'"

_PACKAGES = {
    REDIS: ("langgraph.store.redis", "langgraph-checkpoint-redis"),
    MONGODB: ("langgraph.store.mongodb", "langgraph-store-mongodb"),
    DYNAMODB: ("langgraph_checkpoint_aws.store.dynamodb", "langgraph-checkpoint-aws"),
}
_TTL_OPTIONS = ("default_ttl", "refresh_on_read")
_OPTIONS = {
    REDIS: ("store_prefix", "vector_prefix", *_TTL_OPTIONS),
    MONGODB: ("collection_name", "auto_index_timeout", *_TTL_OPTIONS),
    DYNAMODB: (
        "region_name",
        "region",
        "endpoint_url",
        "max_read_capacity_units",
        "max_write_capacity_units",
        *_TTL_OPTIONS,
    ),
}


class StoreMissing(ConfigurationError):
    """The rival a source URL names holds no store there (no search index, collection or
    table of that name)."""


@dataclass(frozen=True)
class RivalSource:
    """A rival store opened as a source: ``pages`` (every item, page by page) and ``get``
    (items by key), read from what it stored; ``label`` names it (masked)."""

    pages: Pages
    get: Keys
    label: str


def is_rival_store(url: str) -> bool:
    return scheme_of(url) in RIVAL_STORE_SCHEMES


def _module(scheme: str) -> Any:
    name, package = _PACKAGES[scheme]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigurationError(
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
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    allowed = _OPTIONS[scheme]
    options: dict[str, str] = {}
    passthrough: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in allowed:
            options[name] = value
        elif scheme == MONGODB:
            passthrough[name] = value  # the MongoDB URI's own options (authSource ...)
        else:
            raise ConfigurationError(
                f"{scheme}:// takes the options {', '.join(allowed)}; got {name!r} in {shown(url)}"
            )
    return _Url(scheme, parts.netloc, parts.path.strip("/"), options, passthrough)


def _number(url: _Url, name: str) -> float | None:
    text = url.options.get(name)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(
            f"{url.scheme}:// option {name} must be a number, got {text!r}"
        ) from None


def _ttl(url: _Url) -> dict[str, Any] | None:
    ttl: dict[str, Any] = {}
    default = _number(url, "default_ttl")
    if default is not None:
        ttl["default_ttl"] = default
    if "refresh_on_read" in url.options:
        ttl["refresh_on_read"] = url.options["refresh_on_read"].lower() in ("1", "true", "yes")
    return ttl or None


def _unavailable(url: str, exc: BaseException) -> StorageUnavailable:
    return StorageUnavailable(f"{shown(url)} is unavailable ({type(exc).__name__}: {exc})")


def _reached(url: str, manager: AbstractContextManager[Any]) -> AbstractContextManager[Any]:
    """``manager`` entered; a failure to reach the server as one StorageUnavailable line."""
    return entered(url, manager, lambda exc: _unavailable(url, exc))


def _redis_conn(parsed: _Url) -> str:
    return f"redis://{parsed.netloc}/{parsed.path or '0'}"


def _mongo_client(parsed: _Url) -> tuple[str, str, str]:
    """(MongoDB URI, database, collection) of a ``langgraph-mongodb://`` URL."""
    query = f"?{urlencode(parsed.passthrough)}" if parsed.passthrough else ""
    return (
        f"mongodb://{parsed.netloc}/{query}",
        parsed.path or "checkpointing_db",
        parsed.options.get("collection_name", "persistent-store"),
    )


def _dynamodb_options(parsed: _Url) -> dict[str, Any]:
    options: dict[str, Any] = {"region_name": parsed.options.get("region_name")}
    options["region_name"] = options["region_name"] or parsed.options.get("region")
    if "endpoint_url" in parsed.options:
        options["endpoint_url"] = parsed.options["endpoint_url"]
    for name in ("max_read_capacity_units", "max_write_capacity_units"):
        if name in parsed.options:
            options[name] = int(_number(parsed, name) or 0)
    return options


def _table(url: str, parsed: _Url) -> str:
    table = parsed.netloc.rsplit("@", 1)[-1]
    if not table:
        raise ConfigurationError(f"no table in {shown(url)}: langgraph-dynamodb://TABLE?region=...")
    return table


# -- opening the store (destinations): each opener makes its store's context manager ----------


def _redis(url: str, index: dict[str, Any] | None) -> AbstractContextManager[Any]:
    module = _module(REDIS)
    parsed = _parse(url)
    options = {
        k: parsed.options[k] for k in ("store_prefix", "vector_prefix") if k in parsed.options
    }
    return module.RedisStore.from_conn_string(  # type: ignore[no-any-return]
        _redis_conn(parsed), index=index, ttl=_ttl(parsed), **options
    )


def _mongodb(url: str, index: dict[str, Any] | None) -> AbstractContextManager[Any]:
    module = _module(MONGODB)
    parsed = _parse(url)
    conn, db, collection = _mongo_client(parsed)
    options: dict[str, Any] = {}
    if "auto_index_timeout" in parsed.options:
        options["auto_index_timeout"] = int(_number(parsed, "auto_index_timeout") or 0)
    return module.MongoDBStore.from_conn_string(  # type: ignore[no-any-return]
        conn,
        db_name=db,
        collection_name=collection,
        ttl_config=_ttl(parsed),
        index_config=index,
        **options,
    )


def _dynamodb(url: str, index: dict[str, Any] | None) -> AbstractContextManager[Any]:
    module = _module(DYNAMODB)
    parsed = _parse(url)
    return module.DynamoDBStore.from_table_name(  # type: ignore[no-any-return]
        _table(url, parsed), ttl=_ttl(parsed), index=index, **_dynamodb_options(parsed)
    )


_OPENERS: dict[str, Callable[[str, dict[str, Any] | None], AbstractContextManager[Any]]] = {
    REDIS: _redis,
    MONGODB: _mongodb,
    DYNAMODB: _dynamodb,
}


@contextmanager
def open_rival_store(
    url: str, *, setup: bool = False, index: dict[str, Any] | None = None
) -> Iterator[BaseStore]:
    """The store at a ``langgraph-redis://``, ``langgraph-mongodb://`` or
    ``langgraph-dynamodb://`` URL, through its public API; ``setup`` creates its indexes /
    table (destinations)."""
    with _reached(url, _OPENERS[scheme_of(url)](url, index)) as store:
        if setup and hasattr(store, "setup"):
            try:
                store.setup()
            except Exception as exc:
                raise StorageUnavailable(
                    f"{shown(url)}: setup failed ({type(exc).__name__}: {exc})"
                ) from exc
        yield store


# -- reading a source as it stored its items --------------------------------------------


def open_rival_source(url: str) -> AbstractContextManager[RivalSource]:
    """The rival store at ``url`` as a source (:class:`RivalSource`), read with a client of
    its own (none of the store's methods runs); never writes to it. A store that is not
    there is :class:`StoreMissing`."""
    scheme = scheme_of(url)
    _module(scheme)
    sources = {REDIS: _redis_source, MONGODB: _mongodb_source, DYNAMODB: _dynamodb_source}
    return contextmanager(sources[scheme])(url)


def holds_store(url: str) -> bool:
    """Does the rival at ``url`` hold its store yet (RedisStore's search index, MongoDBStore's
    collection, DynamoDBStore's table)? Looked at without creating anything, for a dry run."""
    try:
        with open_rival_source(url):
            return True
    except StoreMissing:
        return False


def _redis_source(url: str) -> Iterator[RivalSource]:
    from redis import Redis
    from redis.exceptions import ResponseError

    parsed = _parse(url)
    store_prefix = parsed.options.get("store_prefix", "store")
    vector_prefix = parsed.options.get("vector_prefix", "store_vectors")
    client: Any = Redis.from_url(_redis_conn(parsed))
    try:
        try:
            client.execute_command("FT.INFO", store_prefix)
        except ResponseError:
            raise StoreMissing(
                f"no RedisStore search index {store_prefix!r} at {shown(url)}"
            ) from None
        except Exception as exc:
            raise _unavailable(url, exc) from exc
        yield RivalSource(
            lambda prefix: rival_items.redis_pages(client, store_prefix, vector_prefix, prefix),
            rival_items.redis_keys(client, store_prefix, vector_prefix),
            shown(url),
        )
    finally:
        client.close()


def _mongodb_source(url: str) -> Iterator[RivalSource]:
    from pymongo import MongoClient

    parsed = _parse(url)
    conn, db, name = _mongo_client(parsed)
    client: Any = MongoClient(conn)
    try:
        try:
            names = client[db].list_collection_names()
        except Exception as exc:
            raise _unavailable(url, exc) from exc
        if name not in names:
            raise StoreMissing(f"no MongoDBStore collection {name!r} in database {db!r}")
        collection = client[db][name]
        yield RivalSource(
            lambda prefix: rival_items.mongodb_pages(collection, prefix),
            rival_items.mongodb_keys(collection),
            shown(url),
        )
    finally:
        client.close()


def _dynamodb_source(url: str) -> Iterator[RivalSource]:
    import boto3

    parsed = _parse(url)
    table = _table(url, parsed)
    options = _dynamodb_options(parsed)
    client = boto3.client(
        "dynamodb", region_name=options["region_name"], endpoint_url=options.get("endpoint_url")
    )
    try:
        try:
            client.describe_table(TableName=table)
        except client.exceptions.ResourceNotFoundException:
            raise StoreMissing(f"no DynamoDBStore table {table!r}") from None
        except Exception as exc:
            raise _unavailable(url, exc) from exc
        yield RivalSource(
            lambda prefix: rival_items.dynamodb_pages(client, table, prefix),
            rival_items.dynamodb_keys(client, table),
            shown(url),
        )
    finally:
        client.close()


# -- a rival's store object ------------------------------------------------------------------


def native_pages(store: BaseStore) -> Pages | None:
    """How to read ``store`` from its storage when it is a ``MongoDBStore`` or a
    ``DynamoDBStore`` (whose ``search`` cannot list it all); None: use its ``search``."""
    kind = type(store).__module__
    if kind.startswith("langgraph.store.mongodb"):
        collection = store.collection  # type: ignore[attr-defined]
        return lambda prefix: rival_items.mongodb_pages(collection, prefix)
    if kind.startswith("langgraph_checkpoint_aws.store"):
        client, table = store.client, store.table_name  # type: ignore[attr-defined]
        return lambda prefix: rival_items.dynamodb_pages(client, table, prefix)
    return None


def native_get(store: BaseStore) -> Callable[[list[ItemKey]], list[Any]] | None:
    """How to read items of ``store`` by key when its ``get`` cannot be relied on (None: it
    can). ``RedisStore`` 0.5.2's ``get`` finds nothing in a namespace of two or more labels
    on Redis Stack (its quoted-phrase query never matches the escaped dots), so its items are
    found the way its own ``put`` finds them to replace: ``@prefix:NS @key:{KEY}``; a
    ``MongoDBStore``'s are read from its collection, so that no read rewrites
    ``updated_at``. Items come back as ``Item`` (None where missing)."""
    kind = type(store).__module__
    keys: Keys | None = None
    if kind.startswith("langgraph.store.redis"):
        keys = rival_items.redis_keys(
            store._redis,  # type: ignore[attr-defined]
            store.store_prefix,  # type: ignore[attr-defined]
            store.vector_prefix,  # type: ignore[attr-defined]
        )
    elif kind.startswith("langgraph.store.mongodb"):
        keys = rival_items.mongodb_keys(store.collection)  # type: ignore[attr-defined]
    if keys is None:
        return None
    read = keys

    def get(wanted: list[ItemKey]) -> list[Any]:
        return [r.item if isinstance(r, Record) else None for r in read(wanted)]

    return get
