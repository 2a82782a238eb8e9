"""``graphkeep.connect`` / ``connect_store`` / ``connect_cache`` / ``connect_events`` (and their
async twins): one URL, the right backend, a ready saver, store, node cache or run event log.

The URL scheme picks the backend (:data:`SCHEMES`) and :data:`CLASSES` names the class of each
product there; the backend module is imported only then, so ``pip install graphkeep[redis]`` is
enough for Redis users. What a class accepts (:func:`accepted_options`) is its kind's common
options, its module's own (``SAVER_OPTIONS``, ``STORE_OPTIONS``, …) and its backend's client
options; an unknown one is refused before any connection. Each function returns the class's
``from_url`` (:mod:`graphkeep.construction`). See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import ModuleType
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from graphkeep.effects.port import LEDGER_OPTIONS
from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.hot import hot_layer  # noqa: F401 - registers the layer hot= makes
from graphkeep.moving import sources, store_sources
from graphkeep.port.telemetry import check_telemetry
from graphkeep.port.urls import VALKEY_SCHEMES

#: scheme -> (backend package, pip extra)
SCHEMES: dict[str, tuple[str, str]] = {
    "redis": ("graphkeep.backends.redis", "redis"),
    "rediss": ("graphkeep.backends.redis", "redis"),
    "unix": ("graphkeep.backends.redis", "redis"),
    "redis+cluster": ("graphkeep.backends.redis", "redis"),
    "rediss+cluster": ("graphkeep.backends.redis", "redis"),
    # Valkey's forms of the Redis URLs (graphkeep.port.urls): the same backend
    **dict.fromkeys(VALKEY_SCHEMES, ("graphkeep.backends.redis", "redis")),
    "dynamodb": ("graphkeep.backends.dynamodb", "dynamodb"),
    "mongodb": ("graphkeep.backends.mongodb", "mongodb"),
    "mongodb+srv": ("graphkeep.backends.mongodb", "mongodb"),
}

#: the products a URL can open: the saver (``connect``), the BaseStore (``connect_store``), the
#: node cache (``connect_cache``), the run event log (``connect_events``), the effect ledger
#: (``connect_effects``)
PRODUCTS = ("checkpoint", "store", "cache", "events", "effects")

#: backend package -> the name its classes start with (``RedisSaver``, ``AsyncRedisStore``, …)
BACKEND_NAMES = {
    "graphkeep.backends.redis": "Redis",
    "graphkeep.backends.mongodb": "MongoDB",
    "graphkeep.backends.dynamodb": "DynamoDB",
}
#: product -> (its module in a backend package, its classes' name after the backend's)
PRODUCT_CLASSES = {
    "checkpoint": ("", "Saver"),
    "store": (".store", "Store"),
    "cache": (".cache", "Cache"),
    "events": (".events", "EventLog"),
    "effects": (".effects", "Effects"),
}
#: backend package -> product -> (module, sync class, async class): every class a ``connect*``
#: function returns, so that renaming one fails tests/test_connect_table.py rather than a
#: user's first connect call
CLASSES: dict[str, dict[str, tuple[str, str, str]]] = {
    package: {
        product: (package + module, f"{name}{kind}", f"Async{name}{kind}")
        for product, (module, kind) in PRODUCT_CLASSES.items()
    }
    for package, name in BACKEND_NAMES.items()
}

#: scheme -> (module, sync saver class, async saver class, pip extra)
BACKENDS: dict[str, tuple[str, str, str, str]] = {
    scheme: (*CLASSES[package]["checkpoint"], extra) for scheme, (package, extra) in SCHEMES.items()
}

#: options every product on every backend accepts for its client's connection pool
#: (graphkeep.port.pools: requests queue for a connection instead of failing under load)
POOL_OPTIONS = frozenset({"max_connections", "pool_timeout"})
#: the options every backend's product of each kind accepts; a product module adds its own in
#: its ``<KIND>_OPTIONS`` constant, its backend the client options in its ``client_options``
COMMON_KIND_OPTIONS: dict[str, frozenset[str]] = {
    "checkpoint": POOL_OPTIONS
    | frozenset(
        {"serde", "ttl", "refresh_ttl_on_read", "key_prefix", "setup", "max_id_bytes", "fallback"}
        | {"share_lists", "telemetry", "schema_version", "migrations", "encryption"}
    ),
    "store": POOL_OPTIONS
    | frozenset({"index", "ttl", "key_prefix", "setup", "max_key_bytes", "telemetry", "fallback"})
    | frozenset({"encryption"}),
    "cache": POOL_OPTIONS | frozenset({"serde", "key_prefix", "setup", "telemetry", "encryption"}),
    "events": POOL_OPTIONS
    | frozenset(
        {"ttl", "max_events", "stale_after", "poll_interval", "max_poll_interval"}
        | {"key_prefix", "setup", "telemetry", "encryption"}
    ),
    "effects": POOL_OPTIONS
    | frozenset({"serde", "key_prefix", "setup", "telemetry", "encryption"})
    | LEDGER_OPTIONS,
}
#: the constant in a product's module naming the options it accepts beyond the common ones
OPTIONS_CONSTANTS = {
    "checkpoint": "SAVER_OPTIONS",
    "store": "STORE_OPTIONS",
    "cache": "CACHE_OPTIONS",
    "events": "EVENTS_OPTIONS",
    "effects": "EFFECTS_OPTIONS",
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
    module = _import(scheme, module_name, extra)
    chosen = getattr(module, async_name if is_async else sync_name)
    allowed = accepted_options(chosen, product)
    unknown = sorted(set(options) - allowed)
    if unknown:
        where = f"{scheme}://" if product == "checkpoint" else f"a {product} at {scheme}://"
        raise _unknown(unknown, where, allowed)
    return chosen


def accepted_options(cls: Any, product: str = "checkpoint") -> frozenset[str]:
    """Every option ``cls`` (a ``product`` class) takes: the kind's common ones, its module's
    own and its backend's client options."""
    module = importlib.import_module(cls.__module__)
    own = frozenset(getattr(module, OPTIONS_CONSTANTS[product], ()))
    return COMMON_KIND_OPTIONS[product] | own | frozenset(cls.client_options)


def _opened(url: str, product: str, is_async: bool, options: dict[str, Any]) -> Any:
    """``from_url`` of the class ``product`` has at ``url``, its options checked first."""
    url, options = _checked(url, options)
    return class_for(url, product, is_async=is_async, options=options).from_url(url, **options)


def _same_url(url: str, options: dict[str, Any], refused: Any = sources.same_store_refused) -> None:
    """``fallback=`` naming ``url`` itself, with no ``key_prefix`` option to set the two
    apart: refused before any connection (an instance, another spelling of the same store or
    the same prefix given as an option is found once open: ``sources.same_store``)."""
    fallback = options.get("fallback")
    if options.get("key_prefix") is not None:
        return
    if isinstance(fallback, str) and fallback.rstrip("/") == url.rstrip("/"):
        raise refused(mask_url(url))


def _fallback_saver(url: str) -> AbstractContextManager[Any]:
    """A graphkeep URL given as ``fallback=``: its saver, opened without setup (never written)."""
    return connect(url, setup=False)


sources.register(_fallback_saver)


def _fallback_store(url: str) -> AbstractContextManager[Any]:
    """A graphkeep URL given as a store's ``fallback=``: its store, opened without setup."""
    return connect_store(url, setup=False)


store_sources.register(_fallback_store)


def connect(url: str, **options: Any) -> AbstractContextManager[Any]:
    """``with connect(url) as saver``: a ready sync saver for ``url`` (schema created unless
    ``setup=False``); ``hot="redis://…"`` (and ``hot_ttl``) puts Redis in front of it as its
    hot layer (:func:`graphkeep.hot_layer`); ``encryption=`` (a
    :class:`graphkeep.encryption.KeyRing`) seals every record at its place and refuses at read
    what is not sealed there (not with ``hot=``); ``fallback=SOURCE`` (a URL or a saver) moves
    each thread from the saver the app used before on its first use (the live switch:
    :mod:`graphkeep.moving.fallback`, docs/migrate.md)."""
    _same_url(url, options)
    return cast(AbstractContextManager[Any], _opened(url, "checkpoint", False, options))


def aconnect(url: str, **options: Any) -> AbstractAsyncContextManager[Any]:
    """``async with aconnect(url) as saver``: a ready async saver for ``url`` (schema created
    unless ``setup=False``); ``hot="redis://…"`` and ``fallback=`` as for :func:`connect`."""
    _same_url(url, options)
    return cast(AbstractAsyncContextManager[Any], _opened(url, "checkpoint", True, options))


def connect_store(url: str, **options: Any) -> AbstractContextManager[Any]:
    """``with connect_store(url) as store``: a ready sync LangGraph store (``BaseStore``).

    Options: ``index`` (IndexConfig: ``dims``, ``embed``, ``fields``, ``distance_type``),
    ``ttl`` (TTLConfig: ``default_ttl``, ``refresh_on_read``, ``sweep_interval_minutes``,
    in minutes), ``key_prefix``, ``setup``, ``max_key_bytes``, ``telemetry``, ``encryption``
    (a :class:`graphkeep.encryption.KeyRing`: each item's value and embeddings sealed at its
    namespace and key; filtered and semantic searches rank in the client) and the backend's
    own; ``fallback=SOURCE`` (a URL or a ``BaseStore``) reads each item graphkeep does not
    hold through from the store the app used before and copies it (the live switch:
    :mod:`graphkeep.store.fallback`, docs/migrate.md).
    """
    _same_url(url, options, store_sources.same_store_refused)
    return cast(AbstractContextManager[Any], _opened(url, "store", False, options))


def aconnect_store(url: str, **options: Any) -> AbstractAsyncContextManager[Any]:
    """``async with aconnect_store(url) as store``: a ready async LangGraph store for ``url``
    (native async driver); ``fallback=`` as for :func:`connect_store`."""
    _same_url(url, options, store_sources.same_store_refused)
    return cast(AbstractAsyncContextManager[Any], _opened(url, "store", True, options))


def connect_cache(url: str, **options: Any) -> AbstractContextManager[Any]:
    """``with connect_cache(url) as cache``: a ready LangGraph node cache (``BaseCache``) on a
    sync client for ``url``; ``encryption=`` (a :class:`graphkeep.encryption.KeyRing`) seals
    each entry at its namespace and key (one that does not open there is a miss)."""
    return cast(AbstractContextManager[Any], _opened(url, "cache", False, options))


def aconnect_cache(url: str, **options: Any) -> AbstractAsyncContextManager[Any]:
    """``async with aconnect_cache(url) as cache``: a ready LangGraph node cache on an async
    client for ``url``."""
    return cast(AbstractAsyncContextManager[Any], _opened(url, "cache", True, options))


def connect_events(url: str, **options: Any) -> AbstractContextManager[Any]:
    """``with connect_events(url) as log``: a ready run event log
    (:class:`graphkeep.events.log.SyncEventLog`) for ``url``.

    Options: ``ttl`` (seconds after a run's last append, sliding; default one day),
    ``max_events`` (per run, default 10,000), ``stale_after`` (seconds, default 60),
    ``poll_interval`` / ``max_poll_interval``, ``key_prefix``, ``setup``, ``telemetry``.
    """
    return cast(AbstractContextManager[Any], _opened(url, "events", False, options))


def aconnect_events(url: str, **options: Any) -> AbstractAsyncContextManager[Any]:
    """``async with aconnect_events(url) as log``: a ready async run event log
    (``await log.append(...)``, ``async for event_id, event in log.read(...)``)."""
    return cast(AbstractAsyncContextManager[Any], _opened(url, "events", True, options))


def connect_effects(url: str, **options: Any) -> AbstractContextManager[Any]:
    """``with connect_effects(url) as ledger``: a ready effect ledger
    (:class:`graphkeep.effects.ledger.SyncLedger`) for ``url``: ``@ledger.once`` makes a
    function, node, task or tool happen once per key.

    Options: ``ttl`` (seconds a record is kept, default 7 days), ``lease`` (seconds a running
    effect holds its record, default 60), ``wait`` (seconds a duplicate waits, default 30),
    ``poll``, ``on_unknown`` (``"retry"`` or ``"raise"``), ``cache_errors``, ``serde``,
    ``encryption`` (a :class:`graphkeep.encryption.KeyRing`: each outcome sealed at its thread
    and key), ``key_prefix``, ``setup``, ``telemetry`` and the backend's own.
    """
    return cast(AbstractContextManager[Any], _opened(url, "effects", False, options))


def aconnect_effects(url: str, **options: Any) -> AbstractAsyncContextManager[Any]:
    """``async with aconnect_effects(url) as ledger``: a ready effect ledger on an async client
    for ``url`` (same options)."""
    return cast(AbstractAsyncContextManager[Any], _opened(url, "effects", True, options))
