"""The driver side of the Redis backend: redis-py clients from URLs, the server's name in
errors, the retry data, and the executors that send the ports' requests once each.

Retries follow the one policy of :mod:`graphkeep.port.retry`; Redis gives only its data
(:data:`RETRY`): connection losses, timeouts, a loading server and a cluster that is down
are retried after 50 ms, 200 ms and 500 ms, then the caller sees
:class:`~graphkeep.errors.StorageUnavailable` naming the server; every other error is the
caller's at once. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import parse_qsl

import redis
import redis.asyncio as aredis
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    MaxConnectionsError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from graphkeep.backends.redis import wire
from graphkeep.backends.redis.keys import check_prefix
from graphkeep.backends.redis.permissions import is_refusal, refusal
from graphkeep.backends.redis.requests import (
    MAX_ARGS,
    Command,
    Delete,
    MGet,
    Pipeline,
    Scan,
    Script,
    XRead,
)
from graphkeep.construction import Opening, Product
from graphkeep.errors import (
    ConfigurationError,
    PoolExhausted,
    StorageUnavailable,
    credentials_refused,
    mask_url,
)
from graphkeep.port.pools import (
    DEFAULT_MAX_CONNECTIONS,
    Pool,
    PoolOptions,
    pool_for,
    pool_options,
    register,
)
from graphkeep.port.retry import AsyncExecutor, Retry, SyncExecutor
from graphkeep.port.telemetry import Target
from graphkeep.port.tls import (
    TLS_CONNECT_TIMEOUT,
    check_tls_options,
    is_tls_option,
    server_unavailable,
    tls_reason,
)
from graphkeep.port.urls import redis_form

__all__ = [
    "ONCE",
    "RETRY",
    "AsyncSend",
    "OnRedis",
    "RedisPort",
    "RedisSite",
    "ResponseError",
    "SyncSend",
    "aconnected",
    "async_client",
    "async_executor",
    "block_limit_ms",
    "check_client",
    "connected",
    "slot_batches",
    "describe",
    "is_cluster",
    "sync_client",
    "sync_executor",
]

#: errors worth a retry: every request is idempotent (upserts, insert-if-absent)
TRANSIENT = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, ClusterDownError)
RETRY_DELAYS = (0.05, 0.2, 0.5)
#: how long before the client's socket timeout a blocking read must end (see block_limit_ms)
BLOCK_MARGIN_MS = 200
#: a slot moved under a request sent to the node we thought owned it
REDIRECTED = (MovedError, AskError, TryAgainError)
#: the most per-slot calls of one cluster pipeline in flight at once
FAN_OUT = 8
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SINGLE_SCHEMES = ("redis", "rediss", "unix")
#: the URL option that names the CA a server's certificate is checked against
CA_OPTION = "ssl_ca_certs="
#: the TLS options a rediss:// URL takes: redis-py's, sync and asyncio alike
TLS_OPTIONS = frozenset(
    name
    for name in inspect.signature(redis.connection.SSLConnection.__init__).parameters
    if name.startswith("ssl_")
) & frozenset(
    name
    for name in inspect.signature(aredis.connection.SSLConnection.__init__).parameters
    if name.startswith("ssl_")
)
# Valkey's schemes (valkey://, valkeys://, valkey+cluster://, valkeys+cluster://) are read as
# the Redis form they stand for (graphkeep.port.urls.redis_form) before redis-py sees them


# -- clients ---------------------------------------------------------------------------


def _split(url: str) -> tuple[str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(f"not a Redis URL: {mask_url(url)}")
    return scheme.lower(), rest


#: a cluster node's own pool holds twice the gate's slots: redis-py's cluster client also
#: takes connections of its own (the slot map, redirections), and its pools cannot wait
CLUSTER_POOL_FACTOR = 2


def _pool(client: Any, name: str, options: PoolOptions) -> Any:
    """``client`` with its gate (see :mod:`graphkeep.port.pools`): blocking XREADs take
    slots of their own, and are sent without BLOCK when those are all taken."""
    return register(client, Pool(name, options, blocks=_blocks, unblocked=_unblocked))


def _blocks(request: Any) -> bool:
    return isinstance(request, XRead) and request.block_ms > 0


def _unblocked(request: XRead) -> XRead:
    return dataclasses.replace(request, block_ms=0)


def sync_client(url: str, pool: PoolOptions | None = None) -> Any:
    """A ``redis.Redis`` (``redis://``, ``rediss://``, ``unix://``) or ``redis.RedisCluster``
    (``redis+cluster://``, ``rediss+cluster://``) for ``url``, its connections bounded as
    ``pool`` says (a ``max_connections`` in the URL's query wins); Valkey's schemes
    (``valkey://``, ``valkeys://``, ``valkey+cluster://``, ``valkeys+cluster://``) are
    aliases of those."""
    return _client(redis, url, pool)


def async_client(url: str, pool: PoolOptions | None = None) -> Any:
    """The ``redis.asyncio`` twin of :func:`sync_client` (it connects on first use)."""
    return _client(aredis, url, pool)


def check_tls(scheme: str, rest: str, url: str) -> None:
    """A misspelt TLS option (redis-py: a ``TypeError`` at the first request) or one on a
    plain scheme is a :class:`~graphkeep.errors.ConfigurationError` now."""
    names = [name for name, _ in parse_qsl(rest.partition("?")[2], keep_blank_values=True)]
    if scheme.startswith("rediss"):
        check_tls_options(names, TLS_OPTIONS, backend="Redis", url=mask_url(url))
    elif any(is_tls_option(name) for name in names):
        raise ConfigurationError(
            f"TLS options in a {scheme}:// URL ({mask_url(url)}): TLS is the rediss://"
            " (rediss+cluster://, valkeys://) scheme"
        )


def _client(driver: Any, url: str, pool: PoolOptions | None) -> Any:
    """:func:`sync_client` with ``driver`` (``redis`` or ``redis.asyncio``)."""
    scheme, rest = _split(redis_form(url))
    check_tls(scheme, rest, url)
    options = pool or PoolOptions()
    try:
        if scheme in CLUSTER_SCHEMES:
            cluster = driver.RedisCluster.from_url(
                f"{CLUSTER_SCHEMES[scheme]}://{rest}",
                max_connections=CLUSTER_POOL_FACTOR * options.max_connections,
            )
            return _pool(cluster, f"Redis Cluster at {mask_url(url)}", options)
        if scheme in SINGLE_SCHEMES:
            connections = driver.BlockingConnectionPool.from_url(
                f"{scheme}://{rest}",
                max_connections=options.max_connections,
                timeout=options.pool_timeout,
            )
            single = driver.Redis.from_pool(connections)
            return _pool(single, f"Redis at {mask_url(url)}", _sized(options, connections))
    except (*TRANSIENT, RedisClusterException) as exc:  # a sync Cluster client connects now
        where = mask_url(url)
        refused = _login_refused(exc)
        raise (_failure(exc, where) if refused else unavailable(where, exc)) from exc
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL {mask_url(url)}: {exc}") from exc
    raise ConfigurationError(f"not a Redis URL: {mask_url(url)}")


def _sized(options: PoolOptions, connections: Any) -> PoolOptions:
    """``options`` with the size the driver's pool took (the URL's ``max_connections``)."""
    return dataclasses.replace(options, max_connections=connections.max_connections)


def _default_pool(client: Any) -> Pool:
    """The gate of a client the application built: as many slots as its pool holds (when
    bounded), so graphkeep queues where redis-py would refuse."""
    size = getattr(client, "max_connections", None)  # an asyncio cluster client's own
    connections = getattr(client, "connection_pool", None)
    if connections is not None:
        size = getattr(connections, "max_connections", None)
    elif size is None:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", {})
        size = kwargs.get("max_connections")
    if not isinstance(size, int) or size > 10_000:
        size = DEFAULT_MAX_CONNECTIONS
    name = f"Redis at {describe(client)}"
    return Pool(name, PoolOptions(max_connections=size), blocks=_blocks, unblocked=_unblocked)


@contextmanager
def connected(url: str, pool: PoolOptions | None = None) -> Iterator[Any]:
    """:func:`sync_client` for ``url``, made when the block starts and closed when it ends."""
    client = sync_client(url, pool)
    try:
        yield client
    finally:
        client.close()


@asynccontextmanager
async def aconnected(url: str, pool: PoolOptions | None = None) -> AsyncIterator[Any]:
    """:func:`async_client` for ``url``, closed (``aclose``) when the block ends."""
    client = async_client(url, pool)
    try:
        yield client
    finally:
        await client.aclose()


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, (redis.RedisCluster, aredis.RedisCluster))


def describe(client: Any) -> str:
    """The server a client talks to, as errors name it (no password)."""
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


def target(client: Any) -> Target:
    """The server a client talks to, as telemetry names it (database index, host, port)."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        nodes = getattr(client, "startup_nodes", None) or []
        if not nodes:
            return Target("redis")
        node = nodes[0]
        return Target("redis", "0", str(node.host), int(node.port))
    db = str(kwargs.get("db", 0) or 0)
    if "path" in kwargs:
        return Target("redis", db, str(kwargs["path"]))
    port = kwargs.get("port")
    return Target(
        "redis", db, str(kwargs.get("host", "localhost")), None if port is None else int(port)
    )


def _connection_kwargs(client: Any) -> dict[str, Any]:
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return dict(pool.connection_kwargs)
    if hasattr(client, "get_connection_kwargs"):
        return dict(client.get_connection_kwargs())
    return {}


def check_client(client: Any) -> None:
    """Refuse a client that decodes replies: graphkeep stores bytes."""
    kwargs = _connection_kwargs(client)
    if kwargs.get("decode_responses"):
        raise ConfigurationError(
            "graphkeep stores binary values: create the Redis client with"
            " decode_responses=False (the default)"
        )


#: redis-py's default socket timeout (a connection's own default when a client names none)
_DEFAULT_SOCKET_TIMEOUT = (
    inspect.signature(redis.connection.AbstractConnection.__init__)
    .parameters["socket_timeout"]
    .default
)


def block_limit_ms(client: Any) -> int | None:
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


# -- the retry data --------------------------------------------------------------------


def unavailable(where: str, exc: BaseException) -> StorageUnavailable:
    return server_unavailable("Redis", where, exc, CA_OPTION)


def _login_refused(exc: BaseException) -> bool:
    """The server refused the URL's user or password: redis-py's ``AuthenticationError`` (a
    ``ConnectionError`` to it), also as the cause of a Cluster client's failed start."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AuthenticationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return isinstance(exc, RedisClusterException) and "invalid username-password" in str(exc)


def _retryable(exc: BaseException, request: Any, seconds: float) -> bool:
    # a refused login or a failed TLS handshake fails the same way again (the same
    # credentials, the same certificates): never retried
    refused = isinstance(exc, MaxConnectionsError) or _login_refused(exc)
    return isinstance(exc, TRANSIENT) and not refused and tls_reason(exc) is None


def _failure(exc: BaseException, where: str) -> BaseException:
    if isinstance(exc, MaxConnectionsError):  # a pool the application sized itself
        return PoolExhausted(
            f"the connection pool of Redis at {where} is full ({exc}): give the client's"
            " pool more connections, or let graphkeep make the client (option max_connections)"
        )
    if _login_refused(exc):
        return credentials_refused("Redis", where, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, TRANSIENT) or tls_reason(exc) is not None:
        return unavailable(where, exc)  # (an asyncio Cluster's refused handshake too)
    return exc


#: how Redis requests are retried (see the module docstring)
RETRY = Retry(delays=RETRY_DELAYS, retryable=_retryable, failure=_failure)
#: one attempt, no retry: the hot layer's (a cache read that fails is a durable read)
ONCE = Retry(delays=(), retryable=_retryable, failure=_failure)


# -- sending one request once ----------------------------------------------------------


def _xread_args(request: XRead, limit: int | None) -> tuple[Any, ...]:
    args: tuple[Any, ...] = ("XREAD", "COUNT", request.count)
    if request.block_ms > 0:
        block = request.block_ms if limit is None else min(request.block_ms, limit)
        args += ("BLOCK", block)
    return (*args, "STREAMS", request.key, request.position)


def _evalsha(sha: str, request: Script) -> tuple[Any, ...]:
    """The ``EVALSHA`` command of a script call, as redis-py's ``Script`` sends it."""
    return ("EVALSHA", sha, len(request.keys), *request.keys, *request.args)


def slot_batches(keys: list[Any]) -> list[list[Any]]:
    """``keys`` as the key lists of multi-key commands (``DEL``, ``MGET``): one per hash slot
    (a single node with a Cluster policy, Azure Managed Redis OSS, answers CROSSSLOT
    otherwise) and at most :data:`MAX_ARGS` arguments each."""
    groups: dict[int, list[Any]] = {}
    for key in keys:
        groups.setdefault(key_slot(key.encode() if isinstance(key, str) else key), []).append(key)
    per = MAX_ARGS - 1
    return [g[i : i + per] for g in groups.values() for i in range(0, len(g), per)]


def _in_order(keys: list[Any], batches: list[list[Any]], replies: list[Any]) -> list[Any]:
    """The replies of :func:`slot_batches`' MGETs as one list in ``keys``' order."""
    found: dict[Any, Any] = {}
    for batch, reply in zip(batches, replies, strict=True):
        found.update(zip(batch, reply, strict=True))
    return [found[key] for key in keys]


def user(client: Any) -> str:
    """The ACL user a client authenticates as (``default`` when it names none)."""
    kwargs = _connection_kwargs(client)
    if not kwargs:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", {}) or {}
    return str(kwargs.get("username") or "default")


def uses_tls(client: Any) -> bool:
    """The client's connections are TLS ones (``rediss://``)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kind = pool.connection_class
    else:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", {}) or {}
        kind = kwargs.get("connection_class", object)
    return isinstance(kind, type) and issubclass(kind, (redis.SSLConnection, aredis.SSLConnection))


def _connect_timed_out(exc: BaseException) -> bool:
    """``exc`` (or a cause) is redis-py's asyncio "Timeout connecting to server": its TCP
    connect and TLS handshake run under one timeout, and the error does not say which."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            return False
        if isinstance(current, RedisTimeoutError) and "connecting" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


class Refusals:
    """What a send needs to name a refusal (:func:`.permissions.refusal`): the server, the
    port's key prefix, the client's user."""

    def __init__(self, client: Any, where: str, prefix: str | None) -> None:
        self.where = where
        self.prefix = prefix
        self.user = user(client)

    def error(self, exc: ResponseError, request: Any) -> BaseException:
        if not is_refusal(exc):
            return exc
        return refusal(exc, request, where=self.where, prefix=self.prefix, user=self.user)


def _pipeline(client: Any, scripts: dict[str, Any], request: Pipeline) -> Any:
    """A (sync or asyncio) client's pipeline of ``request``'s script calls, not yet sent."""
    pipe = client.pipeline(transaction=False)
    for call in request.scripts:
        sha = scripts[call.name].sha
        pipe.evalsha(sha, len(call.keys), *call.keys, *call.args)
    return pipe


class SyncSend:
    """Sends one request once on a sync client; ``scripts`` (name -> Lua source) are what
    ``Script`` requests may name (each product brings its own). An ACL refusal is raised as
    :class:`~graphkeep.errors.PermissionDenied` (``prefix``: the key prefix it names)."""

    def __init__(
        self, client: Any, scripts: dict[str, str], where: str = "", prefix: str | None = None
    ) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.RedisCluster)
        self.scripts = {name: client.register_script(src) for name, src in scripts.items()}
        self.block_limit_ms = block_limit_ms(client)
        self.refusals = Refusals(client, where or describe(client), prefix)

    def __call__(self, request: Any) -> Any:
        try:
            return self._send(request)
        except ResponseError as exc:
            error = self.refusals.error(exc, request)
            if error is exc:
                raise
            raise error from exc

    def _send(self, request: Any) -> Any:
        if isinstance(request, Script):
            if request.name == "__load__":
                for script in self.scripts.values():
                    self.client.script_load(script.script)
                return None
            script = self.scripts[request.name]
            pool = wire.route(self.client, request.keys)
            if pool is not None:
                try:
                    return wire.call(pool, _evalsha(script.sha, request), self.cluster)
                except wire.Detour:
                    pass  # not sent, or not answered: the full way once (see .wire)
            return script(keys=request.keys, args=request.args)
        if isinstance(request, Delete):
            batches = slot_batches(request.keys)
            if len(batches) == 1 or isinstance(self.client, redis.RedisCluster):
                return sum(self.client.delete(*batch) for batch in batches)
            pipe = self.client.pipeline(transaction=False)
            for batch in batches:
                pipe.delete(*batch)
            return sum(pipe.execute())
        if isinstance(request, MGet):
            batches = slot_batches(request.keys)
            if len(batches) == 1 or isinstance(self.client, redis.RedisCluster):
                replies = [self.client.mget(batch) for batch in batches]
            else:
                pipe = self.client.pipeline(transaction=False)
                for batch in batches:
                    pipe.mget(batch)
                replies = pipe.execute()
            return _in_order(request.keys, batches, replies)
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
                return [self(call) for call in request.scripts]
            try:
                return _pipeline(self.client, self.scripts, request).execute()
            except NoScriptError:  # a restarted server: load the scripts, send again
                for script in self.scripts.values():
                    self.client.script_load(script.script)
                return _pipeline(self.client, self.scripts, request).execute()
        raise TypeError(f"unknown Redis request {request!r}")


class AsyncSend:
    """The asyncio twin of :class:`SyncSend`; on a cluster, a pipeline's per-slot calls
    run side by side on as many of ``pool``'s slots as are free (at least the one the
    executor holds)."""

    def __init__(
        self,
        client: Any,
        scripts: dict[str, str],
        pool: Pool | None = None,
        where: str = "",
        prefix: str | None = None,
    ) -> None:
        self.client = client
        self.pool = pool
        self.scripts = {name: client.register_script(src) for name, src in scripts.items()}
        self.block_limit_ms = block_limit_ms(client)
        self.refusals = Refusals(client, where or describe(client), prefix)
        self.tls = uses_tls(client)

    async def __call__(self, request: Any) -> Any:
        try:
            return await self._send(request)
        except (RedisTimeoutError, RedisClusterException) as exc:
            if self.tls and _connect_timed_out(exc):  # as the sync client's handshake timeout
                raise RedisConnectionError(f"{TLS_CONNECT_TIMEOUT}: {exc}") from exc
            raise
        except ResponseError as exc:
            error = self.refusals.error(exc, request)
            if error is exc:
                raise
            raise error from exc

    async def _send(self, request: Any) -> Any:
        if isinstance(request, Script):
            if request.name == "__load__":
                for script in self.scripts.values():
                    await self.client.script_load(script.script)
                return None
            script = self.scripts[request.name]
            where = wire.aroute(self.client, request.keys)
            if where is not None:
                try:
                    return await wire.acall(where, _evalsha(script.sha, request))
                except wire.Detour:
                    pass  # not sent, or not answered: the full way once (see .wire)
            return await script(keys=request.keys, args=request.args)
        if isinstance(request, Delete):
            batches = slot_batches(request.keys)
            if len(batches) == 1 or isinstance(self.client, aredis.RedisCluster):
                return sum([await self.client.delete(*batch) for batch in batches])
            pipe = self.client.pipeline(transaction=False)
            for batch in batches:
                pipe.delete(*batch)
            return sum(await pipe.execute())
        if isinstance(request, MGet):
            batches = slot_batches(request.keys)
            if len(batches) == 1 or isinstance(self.client, aredis.RedisCluster):
                replies = [await self.client.mget(batch) for batch in batches]
            else:
                pipe = self.client.pipeline(transaction=False)
                for batch in batches:
                    pipe.mget(batch)
                replies = await pipe.execute()
            return _in_order(request.keys, batches, replies)
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
                return await self._fan_out(request.scripts)
            try:
                return await _pipeline(self.client, self.scripts, request).execute()
            except NoScriptError:  # a restarted server: load the scripts, send again
                for script in self.scripts.values():
                    await self.client.script_load(script.script)
                return await _pipeline(self.client, self.scripts, request).execute()
        raise TypeError(f"unknown Redis request {request!r}")

    async def _fan_out(self, calls: tuple[Script, ...]) -> list[Any]:
        """``calls`` in order, ``width`` at a time: the slot the executor holds plus the
        pool's free ones (never waited for), up to :data:`FAN_OUT`."""
        extra = 0
        try:
            while self.pool is not None and extra < min(len(calls), FAN_OUT) - 1:
                if not self.pool.extra():
                    break
                extra += 1
            width = extra + 1
            replies: list[Any] = []
            for start in range(0, len(calls), width):
                chunk: list[Awaitable[Any]] = [self(c) for c in calls[start : start + width]]
                replies.extend(await asyncio.gather(*chunk))
            return replies
        finally:
            for _ in range(extra):
                assert self.pool is not None
                self.pool.give_extra()


# -- executors -------------------------------------------------------------------------


def sync_executor(
    client: Any,
    scripts: dict[str, str],
    where: str | None = None,
    *,
    retry: Retry = RETRY,
    prefix: str | None = None,
) -> SyncExecutor:
    """Runs requests on a sync client, retried as ``retry`` (:data:`RETRY`) says; ``where``
    names the server in errors (default: :func:`describe` of the client), ``prefix`` the
    key prefix an ACL refusal names."""
    where = describe(client) if where is None else where
    send = SyncSend(client, scripts, where, prefix)
    pool = pool_for(client, lambda: _default_pool(client))
    return SyncExecutor(send, retry, where, target(client), pool=pool)


def async_executor(
    client: Any,
    scripts: dict[str, str],
    where: str | None = None,
    *,
    retry: Retry = RETRY,
    prefix: str | None = None,
) -> AsyncExecutor:
    """The asyncio twin of :func:`sync_executor`."""
    pool = pool_for(client, lambda: _default_pool(client))
    where = describe(client) if where is None else where
    send: Callable[[Any], Awaitable[Any]] = AsyncSend(client, scripts, pool, where, prefix)
    return AsyncExecutor(send, retry, where, target(client), pool=pool)


# -- the products' construction (graphkeep.construction) --------------------------------


@dataclasses.dataclass(frozen=True)
class RedisSite:
    """A redis-py client as the products' ports see it: whether it is a Cluster client, and
    the executor of a port's requests (its Lua scripts registered)."""

    client: Any
    where: str | None = None

    @property
    def cluster(self) -> bool:
        return is_cluster(self.client)

    def executor(self, port: Any, is_async: bool) -> SyncExecutor | AsyncExecutor:
        make = async_executor if is_async else sync_executor
        return make(self.client, port.scripts, self.where, prefix=getattr(port, "prefix", None))


class RedisPort:
    """A port on the keys under one ``key_prefix`` that groups its reads by slot on a Cluster
    (``cluster``): its ``configured`` builds it from the option and the client."""

    def __init__(self, *, key_prefix: str = "graphkeep", cluster: bool = False) -> None:
        self.prefix = check_prefix(key_prefix)
        self.cluster = cluster

    @classmethod
    def configured(cls, site: RedisSite, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return cls(key_prefix=options.pop("key_prefix", "graphkeep"), cluster=site.cluster), options


class OnRedis(Product):
    """A product on a redis-py client: ``redis.Redis`` or ``redis.cluster.RedisCluster`` (their
    ``redis.asyncio`` twins for an ``Async…`` class), made with ``decode_responses=False``.
    ``Class(client, *, where=None, **options)``: ``where`` names the server in errors (default:
    the client's host and port); ``from_url`` takes ``max_connections`` / ``pool_timeout``."""

    def __init__(self, client: Any, *, where: str | None = None, **options: Any) -> None:
        check_client(client)
        self.client = client
        self.build(RedisSite(client, where), options)

    @classmethod
    def opening(cls, url: str, options: dict[str, Any]) -> Opening:
        pool = pool_options(options)

        def client(is_async: bool) -> Any:
            return (aconnected if is_async else connected)(url, pool)

        return Opening(client, {"where": mask_url(url)})
