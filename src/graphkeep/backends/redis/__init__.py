"""graphkeep on Redis (plain Redis >= 7 with no modules, single node or Redis Cluster): the
public classes, re-exported from the modules that hold them.

Savers :class:`RedisSaver` / :class:`AsyncRedisSaver` (:mod:`.checkpoint`), BaseStores
:class:`RedisStore` / :class:`AsyncRedisStore` (:mod:`.store`), node caches
:class:`RedisCache` / :class:`AsyncRedisCache` (:mod:`.cache`), run event logs
:class:`RedisEventLog` / :class:`AsyncRedisEventLog` (:mod:`.events`), and the clients
:func:`sync_client` / :func:`async_client` for a URL (:mod:`.client`). Construct each from
an existing redis-py client or with ``from_url`` as a context manager::

    with RedisSaver.from_url("redis://localhost:6379/0") as saver:
        graph = builder.compile(checkpointer=saver)

URLs: ``redis://``, ``rediss://``, ``unix://`` for one server and
``redis+cluster://host:port`` (``rediss+cluster://`` with TLS) for a cluster seed.
"""

from __future__ import annotations

try:  # the driver first: without the pip extra, the error says which one to install
    import redis  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the Redis backend needs redis-py: pip install 'graphkeep[redis]'") from exc

from graphkeep.backends.redis.cache import AsyncRedisCache, RedisCache
from graphkeep.backends.redis.checkpoint import AsyncRedisSaver, RedisCheckpointPort, RedisSaver
from graphkeep.backends.redis.client import async_client, sync_client
from graphkeep.backends.redis.events import AsyncRedisEventLog, RedisEventLog
from graphkeep.backends.redis.store import AsyncRedisStore, RedisStore

__all__ = [
    "AsyncRedisCache",
    "AsyncRedisEventLog",
    "AsyncRedisSaver",
    "AsyncRedisStore",
    "RedisCache",
    "RedisCheckpointPort",
    "RedisEventLog",
    "RedisSaver",
    "RedisStore",
    "async_client",
    "sync_client",
]
