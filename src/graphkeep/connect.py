"""``graphkeep.connect`` / ``aconnect``: one URL, the right backend, a ready saver.

The URL scheme picks the backend; the backend module is imported only then, so
``pip install graphkeep[redis]`` is enough for Redis users.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from graphkeep.errors import ConfigurationError
from graphkeep.shared.keys import mask_url

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
    {"serde", "ttl", "refresh_ttl_on_read", "key_prefix", "setup", "max_id_bytes"}
)
#: extra options a backend accepts, by module
BACKEND_OPTIONS: dict[str, frozenset[str]] = {
    "graphkeep.backends.dynamodb": frozenset(
        {"compress", "run_index", "session", "profile_name", "botocore_config"}
    ),
    "graphkeep.backends.mongodb": frozenset({"db_name", "chunk_size", "sharded"}),
}


def _resolve(url: str, options: dict[str, Any], which: int) -> Any:
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
    entry = BACKENDS[scheme]
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
    saver_class = _resolve(url, options, 1)
    with saver_class.from_url(url, **options) as saver:
        yield saver


@asynccontextmanager
async def aconnect(url: str, **options: Any) -> AsyncIterator[Any]:
    """Yield a ready async saver for ``url`` (schema created unless ``setup=False``)."""
    saver_class = _resolve(url, options, 2)
    async with saver_class.from_url(url, **options) as saver:
        yield saver
