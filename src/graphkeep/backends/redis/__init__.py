"""Redis checkpoint savers: :class:`RedisSaver` (sync) and :class:`AsyncRedisSaver` (asyncio).

Plain Redis >= 7 with no modules, single node or Redis Cluster. Construct from
an existing redis-py client (``Redis``, ``RedisCluster`` or their asyncio twins)
or with ``from_url`` as a context manager::

    with RedisSaver.from_url("redis://localhost:6379/0") as saver:
        graph = builder.compile(checkpointer=saver)

URLs: ``redis://``, ``rediss://``, ``unix://`` for one server and
``redis+cluster://host:port`` (``rediss+cluster://`` with TLS) for a cluster seed.
The key layout and scripts are in :mod:`.store` and :mod:`.scripts`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from graphkeep.backends.redis.checkpoint import (
    Command,
    Delete,
    Pipeline,
    RedisCheckpointPort,
    Scan,
    Script,
    XRead,
)
from graphkeep.backends.redis.checkpoint_scripts import SCRIPTS
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, ttl_seconds
from graphkeep.errors import ConfigurationError, StorageUnavailable, mask_url

try:
    import redis
    import redis.asyncio as aredis
    from redis.exceptions import (
        AskError,
        BusyLoadingError,
        ClusterDownError,
        MovedError,
        NoScriptError,
        RedisClusterException,
        TryAgainError,
    )
    from redis.exceptions import (
        ConnectionError as RedisConnectionError,
    )
    from redis.exceptions import (
        TimeoutError as RedisTimeoutError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the Redis backend needs redis-py: pip install 'graphkeep[redis]'") from exc

__all__ = ["AsyncRedisSaver", "RedisSaver", "RedisCheckpointPort"]

#: errors worth a retry: every store call is idempotent (upserts, insert-if-absent)
TRANSIENT = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, ClusterDownError)
RETRY_DELAYS = (0.05, 0.2, 0.5)
#: how long before the client's socket timeout a blocking read must end (see _block_limit_ms)
BLOCK_MARGIN_MS = 200
#: a slot moved under a request sent to the node we thought owned it
REDIRECTED = (MovedError, AskError, TryAgainError)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SINGLE_SCHEMES = ("redis", "rediss", "unix")


def _describe(client: Any) -> str:
    try:
        kwargs = client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix://{kwargs['path']}"
        return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
    except AttributeError:
        nodes = getattr(client, "startup_nodes", None) or []
        if nodes:
            node = nodes[0]
            return f"redis+cluster://{node.host}:{node.port}"
        return type(client).__name__


def _connection_kwargs(client: Any) -> dict[str, Any]:
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return dict(pool.connection_kwargs)
    if hasattr(client, "get_connection_kwargs"):
        return dict(client.get_connection_kwargs())
    return {}


#: redis-py's default socket timeout (a connection's own default when a client names none)
_DEFAULT_SOCKET_TIMEOUT = (
    inspect.signature(redis.connection.AbstractConnection.__init__)
    .parameters["socket_timeout"]
    .default
)


def _block_limit_ms(client: Any) -> int | None:
    """The longest ``XREAD BLOCK`` the client's socket timeout allows (None: no limit).

    A read blocked longer than ``socket_timeout`` would fail as a timeout (and drop its
    connection), so blocking reads stop early and the caller simply reads again: at 80%
    of the timeout and at least 200 ms before it, as the server ends a block only on its
    next tick (every 1000/hz ms, 100 ms by default).
    """
    kwargs = _connection_kwargs(client)
    # redis-py keeps a URL's or the default timeout (5 s since redis-py 6) per connection:
    # "socket_timeout" when given explicitly, else "orig_socket_timeout", else the default
    for name in ("socket_timeout", "orig_socket_timeout"):
        if name in kwargs:
            timeout = kwargs[name]
            break
    else:
        timeout = _DEFAULT_SOCKET_TIMEOUT
    if not timeout:
        return None
    ms = float(timeout) * 1000
    return max(1, int(min(ms * 0.8, ms - BLOCK_MARGIN_MS)))


def _xread_args(request: XRead, limit: int | None) -> tuple[Any, ...]:
    args: tuple[Any, ...] = ("XREAD", "COUNT", request.count)
    if request.block_ms > 0:
        block = request.block_ms if limit is None else min(request.block_ms, limit)
        args += ("BLOCK", block)
    return (*args, "STREAMS", request.key, request.position)


def _check_client(client: Any) -> None:
    kwargs = _connection_kwargs(client)
    if kwargs.get("decode_responses"):
        raise ConfigurationError(
            "graphkeep stores binary values: create the Redis client with"
            " decode_responses=False (the default)"
        )


def _unavailable(where: str, exc: BaseException) -> StorageUnavailable:
    return StorageUnavailable(
        f"Redis at {where} is unavailable ({type(exc).__name__}: {exc});"
        " is the server running and reachable? (locally: ./dev services up)"
    )


class _SyncExecutor:
    """Runs requests on a sync client; ``scripts`` (name -> Lua source) are what
    ``Script`` requests may name (the saver's by default; the store and cache bring theirs)."""

    def __init__(self, client: Any, where: str, scripts: dict[str, str] = SCRIPTS) -> None:
        self.client = client
        self.where = where
        self.scripts = {name: client.register_script(src) for name, src in scripts.items()}
        self.block_limit_ms = _block_limit_ms(client)

    def __call__(self, request: Any) -> Any:
        for delay in (*RETRY_DELAYS, None):
            try:
                return self._once(request)
            except TRANSIENT as exc:
                if delay is None:
                    raise _unavailable(self.where, exc) from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _once(self, request: Any) -> Any:
        if isinstance(request, Script):
            if request.name == "__load__":
                for script in self.scripts.values():
                    self.client.script_load(script.script)
                return None
            return self.scripts[request.name](keys=request.keys, args=request.args)
        if isinstance(request, Delete):
            return self.client.delete(*request.keys)
        if isinstance(request, Command):
            return self.client.execute_command(*request.args)
        if isinstance(request, XRead):
            args = _xread_args(request, self.block_limit_ms)
            if isinstance(self.client, redis.RedisCluster):
                cluster: Any = self.client
                try:
                    node = cluster.get_node_from_key(request.key)
                    return cluster.execute_command(*args, target_nodes=node)
                except REDIRECTED:
                    pass  # the slot moved: redis-py finds its node (and learns the new map)
            return self.client.execute_command(*args)
        if isinstance(request, Scan):
            return list(self.client.scan_iter(match=request.pattern, count=1000))
        if isinstance(request, Pipeline):
            if isinstance(self.client, redis.RedisCluster):
                # redis-py refuses scripts in cluster pipelines: one call per slot
                return [self._once(call) for call in request.scripts]
            try:
                return self._pipeline(request).execute()
            except NoScriptError:  # a restarted server: load the scripts, send again
                for script in self.scripts.values():
                    self.client.script_load(script.script)
                return self._pipeline(request).execute()
        raise TypeError(f"unknown Redis request {request!r}")

    def _pipeline(self, request: Pipeline) -> Any:
        pipe = self.client.pipeline(transaction=False)
        for call in request.scripts:
            sha = self.scripts[call.name].sha
            pipe.evalsha(sha, len(call.keys), *call.keys, *call.args)
        return pipe


class _AsyncExecutor:
    def __init__(self, client: Any, where: str, scripts: dict[str, str] = SCRIPTS) -> None:
        self.client = client
        self.where = where
        self.scripts = {name: client.register_script(src) for name, src in scripts.items()}
        self.block_limit_ms = _block_limit_ms(client)

    async def __call__(self, request: Any) -> Any:
        for delay in (*RETRY_DELAYS, None):
            try:
                return await self._once(request)
            except TRANSIENT as exc:
                if delay is None:
                    raise _unavailable(self.where, exc) from exc
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _once(self, request: Any) -> Any:
        if isinstance(request, Script):
            if request.name == "__load__":
                for script in self.scripts.values():
                    await self.client.script_load(script.script)
                return None
            return await self.scripts[request.name](keys=request.keys, args=request.args)
        if isinstance(request, Delete):
            return await self.client.delete(*request.keys)
        if isinstance(request, Command):
            return await self.client.execute_command(*request.args)
        if isinstance(request, XRead):
            args = _xread_args(request, self.block_limit_ms)
            if isinstance(self.client, aredis.RedisCluster):
                try:
                    await self.client.initialize()  # the slot map (no-op once known)
                    node = self.client.get_node_from_key(request.key)
                    return await self.client.execute_command(*args, target_nodes=node)
                except REDIRECTED:
                    pass  # the slot moved: redis-py finds its node (and learns the new map)
            return await self.client.execute_command(*args)
        if isinstance(request, Scan):
            return [k async for k in self.client.scan_iter(match=request.pattern, count=1000)]
        if isinstance(request, Pipeline):
            if isinstance(self.client, aredis.RedisCluster):
                # redis-py refuses scripts in cluster pipelines: the slots' calls run at once
                return list(await asyncio.gather(*map(self._once, request.scripts)))
            try:
                return await self._pipeline(request).execute()
            except NoScriptError:  # a restarted server: load the scripts, send again
                for script in self.scripts.values():
                    await self.client.script_load(script.script)
                return await self._pipeline(request).execute()
        raise TypeError(f"unknown Redis request {request!r}")

    def _pipeline(self, request: Pipeline) -> Any:
        pipe = self.client.pipeline(transaction=False)
        for call in request.scripts:
            sha = self.scripts[call.name].sha
            pipe.evalsha(sha, len(call.keys), *call.keys, *call.args)
        return pipe


def _store(options: dict[str, Any]) -> tuple[RedisCheckpointPort, dict[str, Any]]:
    store = RedisCheckpointPort(
        key_prefix=options.pop("key_prefix", "graphkeep"),
        ttl=ttl_seconds(options.pop("ttl", None)),
        refresh_ttl_on_read=bool(options.pop("refresh_ttl_on_read", False)),
    )
    return store, options


class RedisSaver(SyncSaver):
    """Sync saver on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``serde``, ``ttl`` (seconds or timedelta, sliding per thread),
    ``refresh_ttl_on_read``, ``key_prefix`` (default ``"graphkeep"``),
    ``max_id_bytes`` (default 1024).
    """

    def __init__(self, client: Any, **options: Any) -> None:
        _check_client(client)
        store, rest = _store(dict(options))
        self.client = client
        super().__init__(store, _SyncExecutor(client, _describe(client)), **rest)

    @classmethod
    @contextmanager
    def from_url(cls, url: str, *, setup: bool = True, **options: Any) -> Iterator[RedisSaver]:
        client = sync_client(url)
        try:
            saver = cls(client, **options)
            saver._execute.where = mask_url(url)  # type: ignore[attr-defined]
            if setup:
                saver.setup()
            yield saver
        finally:
            client.close()


class AsyncRedisSaver(AsyncSaver):
    """Asyncio saver on a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` client."""

    def __init__(self, client: Any, **options: Any) -> None:
        _check_client(client)
        store, rest = _store(dict(options))
        self.client = client
        super().__init__(store, _AsyncExecutor(client, _describe(client)), **rest)

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, setup: bool = True, **options: Any
    ) -> AsyncIterator[AsyncRedisSaver]:
        client = async_client(url)
        try:
            saver = cls(client, **options)
            saver._aexecute.where = mask_url(url)  # type: ignore[attr-defined]
            if setup:
                await saver.asetup()
            yield saver
        finally:
            await client.aclose()


def _split(url: str) -> tuple[str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(f"not a Redis URL: {mask_url(url)}")
    return scheme.lower(), rest


def sync_client(url: str) -> Any:
    scheme, rest = _split(url)
    try:
        if scheme in CLUSTER_SCHEMES:
            return redis.RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}")
        if scheme in SINGLE_SCHEMES:
            return redis.Redis.from_url(url)
    except (*TRANSIENT, RedisClusterException) as exc:
        raise _unavailable(mask_url(url), exc) from exc
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL {mask_url(url)}: {exc}") from exc
    raise ConfigurationError(f"not a Redis URL: {mask_url(url)}")


def async_client(url: str) -> Any:
    scheme, rest = _split(url)
    try:
        if scheme in CLUSTER_SCHEMES:
            return aredis.RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}")
        if scheme in SINGLE_SCHEMES:
            return aredis.Redis.from_url(url)
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL {mask_url(url)}: {exc}") from exc
    raise ConfigurationError(f"not a Redis URL: {mask_url(url)}")


# the memory store, the node cache and the run event log build on the executors and clients above
from graphkeep.backends.redis.cache import AsyncRedisCache, RedisCache  # noqa: E402
from graphkeep.backends.redis.events import AsyncRedisEventLog, RedisEventLog  # noqa: E402
from graphkeep.backends.redis.store import AsyncRedisStore, RedisStore  # noqa: E402

__all__ += [
    "AsyncRedisCache",
    "AsyncRedisEventLog",
    "AsyncRedisStore",
    "RedisCache",
    "RedisEventLog",
    "RedisStore",
]
