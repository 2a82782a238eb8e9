"""``graphkeep.connect`` / ``connect_store`` / ``connect_cache`` / ``connect_events`` (and their
async twins): one URL, the right backend, a ready saver, store, node cache or run event log.

The URL scheme picks the backend; the backend module is imported only then, so
``pip install graphkeep[redis]`` is enough for Redis users. Stores live in each backend's
``memory`` module, caches in its ``cache`` module, event logs in its ``events`` module; each
declares the options it accepts beyond the common ones (``STORE_OPTIONS`` / ``CACHE_OPTIONS`` /
``EVENTS_OPTIONS``).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from graphkeep.errors import ConfigurationError, mask_url

#: scheme -> (module, sync saver class, async saver class, pip extra)
BACKENDS: dict[str, tuple[str, str, str, str]] = {
    "redis": ("graphkeep.backends.redis", "RedisSaver", "AsyncRedisSaver", "redis"),
    "rediss": ("graphkeep.backends.redis", "RedisSaver", "AsyncRedisSaver", "redis"),
    "unix": ("graphkeep.backends.redis", "RedisSaver", "AsyncRedisSaver", "redis"),
    "redis+cluster": ("graphkeep.backends.redis", "RedisSaver", "AsyncRedisSaver", "redis"),
    "rediss+cluster": ("graphkeep.backends.redis", "RedisSaver", "AsyncRedisSaver", "redis"),
    "dynamodb": ("graphkeep.backends.dynamodb", "DynamoDBSaver", "AsyncDynamoDBSaver", "dynamodb"),
    "mongodb": ("graphkeep.backends.mongodb", "MongoDBSaver", "AsyncMongoDBSaver", "mongodb"),
    "mongodb+srv": ("graphkeep.backends.mongodb", "MongoDBSaver", "AsyncMongoDBSaver", "mongodb"),
}

#: options every backend accepts
COMMON_OPTIONS = frozenset(
    {"serde", "ttl", "refresh_ttl_on_read", "key_prefix", "setup", "max_id_bytes", "share_lists"}
)
#: extra options a backend accepts, by module
BACKEND_OPTIONS: dict[str, frozenset[str]] = {
    "graphkeep.backends.dynamodb": frozenset(
        {"compress", "run_index", "session", "profile_name", "botocore_config"}
    ),
    "graphkeep.backends.mongodb": frozenset({"db_name", "chunk_size", "sharded"}),
}


#: options every store accepts (``graphkeep.connect_store``)
COMMON_STORE_OPTIONS = frozenset({"index", "ttl", "key_prefix", "setup", "max_key_bytes"})
#: options every node cache accepts (``graphkeep.connect_cache``)
COMMON_CACHE_OPTIONS = frozenset({"serde", "key_prefix", "setup"})
#: options every run event log accepts (``graphkeep.connect_events``)
COMMON_EVENTS_OPTIONS = frozenset(
    {"ttl", "max_events", "stale_after", "poll_interval", "max_poll_interval"}
    | {"key_prefix", "setup"}
)
#: what each kind is called in a backend: (module suffix, options constant, class name stems)
KINDS: dict[str, tuple[str, str, str]] = {
    "store": ("store", "STORE_OPTIONS", "Store"),
    "cache": ("cache", "CACHE_OPTIONS", "Cache"),
    "events": ("events", "EVENTS_OPTIONS", "EventLog"),
}
COMMON_KIND_OPTIONS = {
    "store": COMMON_STORE_OPTIONS,
    "cache": COMMON_CACHE_OPTIONS,
    "events": COMMON_EVENTS_OPTIONS,
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


def _scheme(url: str) -> tuple[str, tuple[str, str, str, str]]:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"expected a URL such as redis://host:6379/0, got {mask_url(str(url))!r}"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme not in BACKENDS:
        known = ", ".join(f"{s}://" for s in sorted(BACKENDS))
        raise ConfigurationError(
            f"unsupported URL scheme {scheme!r} in {mask_url(url)}; use {known}"
        )
    return scheme, BACKENDS[scheme]


def _resolve_kind(url: str, options: dict[str, Any], kind: str, is_async: bool) -> Any:
    """The store or cache class for ``url``, after checking ``options``."""
    scheme, entry = _scheme(url)
    suffix, constant, stem = KINDS[kind]
    try:
        module = importlib.import_module(f"{entry[0]}.{suffix}")
    except ImportError as exc:
        raise ConfigurationError(
            f"{scheme}:// needs an optional dependency: pip install 'graphkeep[{entry[3]}]' ({exc})"
        ) from exc
    allowed = COMMON_KIND_OPTIONS[kind] | frozenset(getattr(module, constant, ()))
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for a {kind} at {scheme}://;"
            f" accepted: {', '.join(sorted(allowed))}"
        )
    backend = entry[1].removesuffix("Saver")  # "Redis", "MongoDB", "DynamoDB"
    return getattr(module, f"{'Async' if is_async else ''}{backend}{stem}")


def _resolve(url: str, options: dict[str, Any], which: int) -> Any:
    scheme, entry = _scheme(url)
    allowed = COMMON_OPTIONS | BACKEND_OPTIONS.get(entry[0], frozenset())
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for {scheme}://;"
            f" accepted: {', '.join(sorted(allowed))}"
        )
    try:
        module = importlib.import_module(entry[0])
    except ImportError as exc:
        raise ConfigurationError(
            f"{scheme}:// needs an optional dependency: pip install 'graphkeep[{entry[3]}]' ({exc})"
        ) from exc
    return getattr(module, entry[which])


@contextmanager
def connect(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready sync saver for ``url`` (schema created unless ``setup=False``)."""
    url, options = _url_options(url, options)
    saver_class = _resolve(url, options, 1)
    with saver_class.from_url(url, **options) as saver:
        yield saver


@asynccontextmanager
async def aconnect(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async saver for ``url`` (schema created unless ``setup=False``)."""
    url, options = _url_options(url, options)
    saver_class = _resolve(url, options, 2)
    async with saver_class.from_url(url, **options) as saver:
        yield saver


@contextmanager
def connect_store(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready sync LangGraph store (``BaseStore``) for ``url``.

    Options: ``index`` (IndexConfig: ``dims``, ``embed``, ``fields``, ``distance_type``),
    ``ttl`` (TTLConfig: ``default_ttl``, ``refresh_on_read``, ``sweep_interval_minutes``,
    in minutes), ``key_prefix``, ``setup``, ``max_key_bytes`` and the backend's own.
    """
    url, options = _url_options(url, options)
    store_class = _resolve_kind(url, options, "store", False)
    with store_class.from_url(url, **options) as store:
        yield store


@asynccontextmanager
async def aconnect_store(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async LangGraph store for ``url`` (native async driver)."""
    url, options = _url_options(url, options)
    store_class = _resolve_kind(url, options, "store", True)
    async with store_class.from_url(url, **options) as store:
        yield store


@contextmanager
def connect_cache(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready LangGraph node cache (``BaseCache``) on a sync client for ``url``."""
    url, options = _url_options(url, options)
    cache_class = _resolve_kind(url, options, "cache", False)
    with cache_class.from_url(url, **options) as cache:
        yield cache


@asynccontextmanager
async def aconnect_cache(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready LangGraph node cache on an async client for ``url``."""
    url, options = _url_options(url, options)
    cache_class = _resolve_kind(url, options, "cache", True)
    async with cache_class.from_url(url, **options) as cache:
        yield cache


@contextmanager
def connect_events(url: str, **options: Any) -> Iterator[Any]:
    """Yield a ready run event log (:class:`graphkeep.events.log.SyncEventLog`) for ``url``.

    Options: ``ttl`` (seconds after a run's last append, sliding; default one day),
    ``max_events`` (per run, default 10,000), ``stale_after`` (seconds, default 60),
    ``poll_interval`` / ``max_poll_interval``, ``key_prefix``, ``setup``.
    """
    url, options = _url_options(url, options)
    log_class = _resolve_kind(url, options, "events", False)
    with log_class.from_url(url, **options) as log:
        yield log


@asynccontextmanager
async def aconnect_events(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async run event log (``await log.append(...)``,
    ``async for event_id, event in log.read(...)``)."""
    url, options = _url_options(url, options)
    log_class = _resolve_kind(url, options, "events", True)
    async with log_class.from_url(url, **options) as log:
        yield log
