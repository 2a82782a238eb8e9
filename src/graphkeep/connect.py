"""``graphkeep.connect`` / ``connect_store`` / ``connect_cache`` / ``connect_events`` (and their
async twins): one URL, the right backend, a ready saver, store, node cache or run event log.

The URL scheme picks the backend (:data:`SCHEMES`) and :data:`CLASSES` names the class of each
product there; the backend module is imported only then, so ``pip install graphkeep[redis]`` is
enough for Redis users. Each product module declares the options it accepts beyond the common
ones (``STORE_OPTIONS`` / ``CACHE_OPTIONS`` / ``EVENTS_OPTIONS``; savers: :data:`BACKEND_OPTIONS`).
See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from graphkeep.checkpoint.hot import HOT_OPTIONS, alayered, hot_options, layered
from graphkeep.effects.port import LEDGER_OPTIONS
from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.hot import hot_layer  # noqa: F401 - registers the layer hot= makes
from graphkeep.port.telemetry import check_telemetry

#: scheme -> (backend package, pip extra)
SCHEMES: dict[str, tuple[str, str]] = {
    "redis": ("graphkeep.backends.redis", "redis"),
    "rediss": ("graphkeep.backends.redis", "redis"),
    "unix": ("graphkeep.backends.redis", "redis"),
    "redis+cluster": ("graphkeep.backends.redis", "redis"),
    "rediss+cluster": ("graphkeep.backends.redis", "redis"),
    "dynamodb": ("graphkeep.backends.dynamodb", "dynamodb"),
    "mongodb": ("graphkeep.backends.mongodb", "mongodb"),
    "mongodb+srv": ("graphkeep.backends.mongodb", "mongodb"),
}

#: the products a URL can open: the saver (``connect``), the BaseStore (``connect_store``), the
#: node cache (``connect_cache``), the run event log (``connect_events``), the effect ledger
#: (``connect_effects``)
PRODUCTS = ("checkpoint", "store", "cache", "events", "effects")

#: backend package -> product -> (module, sync class, async class): every class a ``connect*``
#: function returns, written out, so that renaming one fails tests/test_connect_table.py
#: rather than a user's first connect call
CLASSES: dict[str, dict[str, tuple[str, str, str]]] = {
    "graphkeep.backends.redis": {
        "checkpoint": ("graphkeep.backends.redis", "RedisSaver", "AsyncRedisSaver"),
        "store": ("graphkeep.backends.redis.store", "RedisStore", "AsyncRedisStore"),
        "cache": ("graphkeep.backends.redis.cache", "RedisCache", "AsyncRedisCache"),
        "events": ("graphkeep.backends.redis.events", "RedisEventLog", "AsyncRedisEventLog"),
        "effects": ("graphkeep.backends.redis.effects", "RedisEffects", "AsyncRedisEffects"),
    },
    "graphkeep.backends.mongodb": {
        "checkpoint": ("graphkeep.backends.mongodb", "MongoDBSaver", "AsyncMongoDBSaver"),
        "store": ("graphkeep.backends.mongodb.store", "MongoDBStore", "AsyncMongoDBStore"),
        "cache": ("graphkeep.backends.mongodb.cache", "MongoDBCache", "AsyncMongoDBCache"),
        "events": (
            "graphkeep.backends.mongodb.events",
            "MongoDBEventLog",
            "AsyncMongoDBEventLog",
        ),
        "effects": ("graphkeep.backends.mongodb.effects", "MongoDBEffects", "AsyncMongoDBEffects"),
    },
    "graphkeep.backends.dynamodb": {
        "checkpoint": ("graphkeep.backends.dynamodb", "DynamoDBSaver", "AsyncDynamoDBSaver"),
        "store": ("graphkeep.backends.dynamodb.store", "DynamoDBStore", "AsyncDynamoDBStore"),
        "cache": ("graphkeep.backends.dynamodb.cache", "DynamoDBCache", "AsyncDynamoDBCache"),
        "events": (
            "graphkeep.backends.dynamodb.events",
            "DynamoDBEventLog",
            "AsyncDynamoDBEventLog",
        ),
        "effects": (
            "graphkeep.backends.dynamodb.effects",
            "DynamoDBEffects",
            "AsyncDynamoDBEffects",
        ),
    },
}

#: scheme -> (module, sync saver class, async saver class, pip extra)
BACKENDS: dict[str, tuple[str, str, str, str]] = {
    scheme: (*CLASSES[package]["checkpoint"], extra) for scheme, (package, extra) in SCHEMES.items()
}

#: options every product on every backend accepts for its client's connection pool
#: (graphkeep.port.pools: requests queue for a connection instead of failing under load)
POOL_OPTIONS = frozenset({"max_connections", "pool_timeout"})
#: options every backend accepts
COMMON_OPTIONS = POOL_OPTIONS | frozenset(
    {"serde", "ttl", "refresh_ttl_on_read", "key_prefix", "setup", "max_id_bytes", "share_lists"}
    | {"telemetry", "schema_version", "migrations"}
)
#: extra options a backend accepts, by module
BACKEND_OPTIONS: dict[str, frozenset[str]] = {
    "graphkeep.backends.dynamodb": frozenset(
        {"compress", "run_index", "session", "profile_name", "botocore_config"}
    )
    | HOT_OPTIONS,
    "graphkeep.backends.mongodb": frozenset({"db_name", "chunk_size", "sharded"}) | HOT_OPTIONS,
}


#: options every store accepts (``graphkeep.connect_store``)
COMMON_STORE_OPTIONS = POOL_OPTIONS | frozenset(
    {"index", "ttl", "key_prefix", "setup", "max_key_bytes", "telemetry"}
)
#: options every node cache accepts (``graphkeep.connect_cache``)
COMMON_CACHE_OPTIONS = POOL_OPTIONS | frozenset({"serde", "key_prefix", "setup", "telemetry"})
#: options every run event log accepts (``graphkeep.connect_events``)
COMMON_EVENTS_OPTIONS = POOL_OPTIONS | frozenset(
    {"ttl", "max_events", "stale_after", "poll_interval", "max_poll_interval"}
    | {"key_prefix", "setup", "telemetry"}
)
#: options every effect ledger accepts (``graphkeep.connect_effects``)
COMMON_EFFECTS_OPTIONS = (
    POOL_OPTIONS | frozenset({"serde", "key_prefix", "setup", "telemetry"}) | LEDGER_OPTIONS
)
#: the constant in a product's module naming the options it accepts beyond the common ones
OPTIONS_CONSTANTS = {
    "store": "STORE_OPTIONS",
    "cache": "CACHE_OPTIONS",
    "events": "EVENTS_OPTIONS",
    "effects": "EFFECTS_OPTIONS",
}
COMMON_KIND_OPTIONS = {
    "store": COMMON_STORE_OPTIONS,
    "cache": COMMON_CACHE_OPTIONS,
    "events": COMMON_EVENTS_OPTIONS,
    "effects": COMMON_EFFECTS_OPTIONS,
}


#: options a URL may carry in its query, for every scheme (taken out before the driver sees it)
URL_OPTIONS = ("key_prefix",)


def _url_options(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``url`` without the :data:`URL_OPTIONS` in its query, and ``options`` with them.

    ``redis://host:6379/0?key_prefix=tenant-a`` is ``connect("redis://host:6379/0",
    key_prefix="tenant-a")``, so one URL string can name an isolated set of keys (the
    ``graphkeep.testing`` fixtures hand such URLs to tests). Giving an option both ways is
    an error rather than a silent choice.
    """
    if not isinstance(url, str) or "?" not in url:
        return url, options
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    taken = [(name, value) for name, value in pairs if name in URL_OPTIONS]
    if not taken:
        return url, options
    merged = dict(options)
    for name, value in taken:
        if name in merged:
            raise ConfigurationError(
                f"{name} is given both in the URL {mask_url(url)} and as an option"
            )
        if not value:
            raise ConfigurationError(f"empty {name} in the URL {mask_url(url)}")
        merged[name] = value
    rest = urlencode([(n, v) for n, v in pairs if n not in URL_OPTIONS])
    return urlunsplit(parts._replace(query=rest)), merged


def _checked(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """:func:`_url_options`, and the ``telemetry`` option checked before any connection."""
    if "telemetry" in options:
        check_telemetry(options["telemetry"])
    return _url_options(url, options)


def _scheme(url: str) -> tuple[str, str, str]:
    """``(scheme, backend package, pip extra)`` of ``url``."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"expected a URL such as redis://host:6379/0, got {mask_url(str(url))!r}"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise ConfigurationError(
            f"unsupported URL scheme {scheme!r} in {mask_url(url)}; use {known}"
        )
    return (scheme, *SCHEMES[scheme])


def _import(scheme: str, module_name: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"{scheme}:// needs an optional dependency: pip install 'graphkeep[{extra}]' ({exc})"
        ) from exc


def _unknown(unknown: list[str], where: str, allowed: frozenset[str]) -> ConfigurationError:
    return ConfigurationError(
        f"unknown option(s) {', '.join(unknown)} for {where};"
        f" accepted: {', '.join(sorted(allowed))}"
    )


def class_for(
    url: str, product: str = "checkpoint", *, is_async: bool = False, options: Iterable[str] = ()
) -> Any:
    """The class ``connect*`` opens ``url`` with, for ``product`` (one of :data:`PRODUCTS`),
    after checking the names in ``options`` against what it accepts (:data:`CLASSES`)."""
    scheme, package, extra = _scheme(url)
    module_name, sync_name, async_name = CLASSES[package][product]
    if product == "checkpoint":
        allowed = COMMON_OPTIONS | BACKEND_OPTIONS.get(package, frozenset())
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise _unknown(unknown, f"{scheme}://", allowed)
        module = _import(scheme, module_name, extra)
    else:
        module = _import(scheme, module_name, extra)
        allowed = COMMON_KIND_OPTIONS[product] | frozenset(
            getattr(module, OPTIONS_CONSTANTS[product], ())
        )
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise _unknown(unknown, f"a {product} at {scheme}://", allowed)
    return getattr(module, async_name if is_async else sync_name)


@contextmanager
def connect(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready sync saver for ``url`` (schema created unless ``setup=False``);
    ``hot="redis://…"`` (and ``hot_ttl``) puts Redis in front of it as its hot layer
    (:func:`graphkeep.hot_layer`)."""
    url, options = _checked(url, options)
    hot, layer = hot_options(options)
    saver_class = class_for(url, options=options)
    with saver_class.from_url(url, **options) as saver, layered(saver, hot, layer) as layer_saver:
        yield layer_saver


@asynccontextmanager
async def aconnect(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async saver for ``url`` (schema created unless ``setup=False``);
    ``hot="redis://…"`` as for :func:`connect`."""
    url, options = _checked(url, options)
    hot, layer = hot_options(options)
    saver_class = class_for(url, is_async=True, options=options)
    async with (
        saver_class.from_url(url, **options) as saver,
        alayered(saver, hot, layer) as layer_saver,
    ):
        yield layer_saver


@contextmanager
def connect_store(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready sync LangGraph store (``BaseStore``) for ``url``.

    Options: ``index`` (IndexConfig: ``dims``, ``embed``, ``fields``, ``distance_type``),
    ``ttl`` (TTLConfig: ``default_ttl``, ``refresh_on_read``, ``sweep_interval_minutes``,
    in minutes), ``key_prefix``, ``setup``, ``max_key_bytes``, ``telemetry`` and the
    backend's own.
    """
    url, options = _checked(url, options)
    store_class = class_for(url, "store", options=options)
    with store_class.from_url(url, **options) as store:
        yield store


@asynccontextmanager
async def aconnect_store(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async LangGraph store for ``url`` (native async driver)."""
    url, options = _checked(url, options)
    store_class = class_for(url, "store", is_async=True, options=options)
    async with store_class.from_url(url, **options) as store:
        yield store


@contextmanager
def connect_cache(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready LangGraph node cache (``BaseCache``) on a sync client for ``url``."""
    url, options = _checked(url, options)
    cache_class = class_for(url, "cache", options=options)
    with cache_class.from_url(url, **options) as cache:
        yield cache


@asynccontextmanager
async def aconnect_cache(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready LangGraph node cache on an async client for ``url``."""
    url, options = _checked(url, options)
    cache_class = class_for(url, "cache", is_async=True, options=options)
    async with cache_class.from_url(url, **options) as cache:
        yield cache


@contextmanager
def connect_events(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready run event log (:class:`graphkeep.events.log.SyncEventLog`) for ``url``.

    Options: ``ttl`` (seconds after a run's last append, sliding; default one day),
    ``max_events`` (per run, default 10,000), ``stale_after`` (seconds, default 60),
    ``poll_interval`` / ``max_poll_interval``, ``key_prefix``, ``setup``, ``telemetry``.
    """
    url, options = _checked(url, options)
    log_class = class_for(url, "events", options=options)
    with log_class.from_url(url, **options) as log:
        yield log


@asynccontextmanager
async def aconnect_events(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async run event log (``await log.append(...)``,
    ``async for event_id, event in log.read(...)``)."""
    url, options = _checked(url, options)
    log_class = class_for(url, "events", is_async=True, options=options)
    async with log_class.from_url(url, **options) as log:
        yield log


@contextmanager
def connect_effects(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready effect ledger (:class:`graphkeep.effects.ledger.SyncLedger`) for ``url``:
    ``@ledger.once`` makes a function, node, task or tool happen once per key.

    Options: ``ttl`` (seconds a record is kept, default 7 days), ``lease`` (seconds a running
    effect holds its record, default 60), ``wait`` (seconds a duplicate waits, default 30),
    ``poll``, ``on_unknown`` (``"retry"`` or ``"raise"``), ``cache_errors``, ``serde``,
    ``key_prefix``, ``setup``, ``telemetry`` and the backend's own.
    """
    url, options = _checked(url, options)
    ledger_class = class_for(url, "effects", options=options)
    with ledger_class.from_url(url, **options) as ledger:
        yield ledger


@asynccontextmanager
async def aconnect_effects(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready effect ledger on an async client for ``url`` (same options)."""
    url, options = _checked(url, options)
    ledger_class = class_for(url, "effects", is_async=True, options=options)
    async with ledger_class.from_url(url, **options) as ledger:
        yield ledger
