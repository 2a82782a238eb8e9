"""``graphkeep.hot_layer``: Redis as the hot layer over a durable saver (and ``connect``'s
``hot=``).

``hot_layer(saver, "redis://…", hot_ttl=…)`` wraps graphkeep's MongoDB or DynamoDB saver or
LangGraph's ``PostgresSaver`` / ``AsyncPostgresSaver`` (sync or async: the layer follows the
saver) in a :class:`~graphkeep.checkpoint.hot.HotLayer` / ``AsyncHotLayer``. The rules are
:mod:`graphkeep.checkpoint.hot`'s; this module picks the durable side's key-only read, builds
the Redis client (one attempt per request, half a second at most: Redis is a cache here) and
checks the Redis side before the first read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from langgraph.checkpoint.base import BaseCheckpointSaver

from graphkeep.checkpoint.hot import (
    DEFAULT_HOT_TTL,
    HOT_SCHEMES,
    AsyncHotLayer,
    HotLayer,
    HotLayerBase,
    check_hot_ttl,
    check_hot_url,
    layer_class,
    register_opener,
)
from graphkeep.checkpoint.records import CheckpointKeys
from graphkeep.checkpoint.saver import AsyncSaver, SaverBase, SyncSaver
from graphkeep.errors import ConfigurationError, StorageUnavailable, mask_url
from graphkeep.port.loop import running_loop
from graphkeep.port.telemetry import Telemetry

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

__all__ = ["HOT_SCHEMES", "PortProber", "hot_layer"]

log = logging.getLogger("graphkeep.hot")

#: seconds a Redis request of the hot layer may take (connect and reply) unless the URL says
HOT_TIMEOUT = 0.5


class PortProber:
    """:class:`~graphkeep.checkpoint.hot.Prober` on a graphkeep saver: its port's
    ``checkpoint_keys``, run the way the saver runs its own ops."""

    def __init__(self, saver: SaverBase) -> None:
        self.saver = saver

    def keys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> list[CheckpointKeys]:
        op = self.saver.port.checkpoint_keys(thread_id, ns, checkpoint_id, newer)
        return self.saver.drive(op)  # type: ignore[no-any-return]

    async def akeys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> list[CheckpointKeys]:
        op = self.saver.port.checkpoint_keys(thread_id, ns, checkpoint_id, newer)
        return await self.saver.adrive(op)  # type: ignore[no-any-return]


def _redis_url(url: Any) -> tuple[str, str | None]:
    """``url`` with the hot layer's timeouts (unless it sets its own) and without a
    ``key_prefix`` query option, and that option."""
    url = check_hot_url(url)
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((v for n, v in pairs if n == "key_prefix"), None)
    rest = [(n, v) for n, v in pairs if n != "key_prefix"]
    named = {n for n, _ in rest}
    for option in ("socket_timeout", "socket_connect_timeout"):
        if option not in named:
            rest.append((option, str(HOT_TIMEOUT)))
    return urlunsplit(parts._replace(query=urlencode(rest))), prefix


def _prober(saver: Any) -> tuple[Any, str | None, str]:
    """The durable side's prober, its key prefix (None: it has none) and its state schema
    tag."""
    from graphkeep.backends.postgres import PostgresProber, is_postgres_saver

    if isinstance(saver, HotLayerBase):
        raise ConfigurationError("this saver already has a hot layer")
    if isinstance(saver, SaverBase):
        port = saver.port
        if not getattr(port, "probes", False):
            raise ConfigurationError(
                f"{type(saver).__name__} keeps its checkpoints in Redis already: a Redis hot"
                " layer goes over a MongoDB, DynamoDB or Postgres saver"
            )
        prefix = getattr(port, "key_prefix", None) or getattr(port, "prefix", "graphkeep")
        schema = saver.state_schema
        return PortProber(saver), str(prefix), "" if schema is None else str(schema.version)
    if is_postgres_saver(saver):
        return PostgresProber(saver), None, ""
    raise ConfigurationError(
        f"no hot layer for {type(saver).__name__}: it goes over graphkeep's MongoDB and"
        " DynamoDB savers and LangGraph's PostgresSaver / AsyncPostgresSaver"
    )


def _is_async(saver: Any) -> bool:
    if isinstance(saver, AsyncSaver):
        return True
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    except ImportError:
        return False
    return isinstance(saver, AsyncPostgresSaver)


def _checked_redis(exc: BaseException, where: str) -> None:
    """A failed check of the Redis side: down or unreachable is fine (the layer reads the
    durable store until it answers); a server that refuses the layer's commands is not."""
    if isinstance(exc, ConfigurationError):  # the URL itself (a client made on first use)
        raise exc
    if isinstance(exc, StorageUnavailable):
        log.warning("hot layer: %s is not reachable now (%s): durable reads only", where, exc)
        return
    raise ConfigurationError(
        f"hot layer: {where} refused what the layer needs (Lua scripts, HSET, PEXPIRE,"
        f" UNLINK): {type(exc).__name__}: {exc}"
    ) from exc


@overload
def hot_layer(
    saver: AsyncSaver | AsyncPostgresSaver,
    url: str,
    *,
    hot_ttl: float = ...,
    key_prefix: str | None = ...,
    telemetry: Any = ...,
) -> AsyncHotLayer: ...


@overload
def hot_layer(
    saver: SyncSaver | PostgresSaver,
    url: str,
    *,
    hot_ttl: float = ...,
    key_prefix: str | None = ...,
    telemetry: Any = ...,
) -> HotLayer: ...


@overload
def hot_layer(
    saver: BaseCheckpointSaver[Any],
    url: str,
    *,
    hot_ttl: float = ...,
    key_prefix: str | None = ...,
    telemetry: Any = ...,
) -> Any: ...


def hot_layer(
    saver: BaseCheckpointSaver[Any],
    url: str,
    *,
    hot_ttl: float = DEFAULT_HOT_TTL,
    key_prefix: str | None = None,
    telemetry: Any = None,
) -> HotLayer | AsyncHotLayer:
    """``saver`` with Redis at ``url`` as its hot layer (see :mod:`graphkeep.checkpoint.hot`).

    ``hot_ttl``: seconds a thread stays in Redis after its last read (sliding). Copies are
    kept under a graphkeep saver's ``key_prefix`` (a ``key_prefix`` given here or in the URL
    must be the same); over LangGraph's Postgres saver under ``key_prefix`` (default
    ``"graphkeep"``). A sync saver gets a :class:`~graphkeep.checkpoint.hot.HotLayer`, checked now;
    an async one an :class:`~graphkeep.checkpoint.hot.AsyncHotLayer` (make it on the event
    loop; ``async with`` checks it). Close it (``with`` / ``async with``, ``close()``) to close
    its Redis client; the durable saver stays yours.
    """
    from graphkeep.backends.redis.client import async_client, sync_client
    from graphkeep.backends.redis.hot import HOT_SCRIPTS, RedisHotPort

    ttl = check_hot_ttl(hot_ttl)
    redis_url, url_prefix = _redis_url(url)
    prober, prefix, schema = _prober(saver)
    if prefix is None:  # a saver of LangGraph's: the layer's own prefix, "graphkeep" by default
        prefix = key_prefix or url_prefix or "graphkeep"
    for given in (url_prefix, key_prefix):
        if given is not None and given != prefix:
            raise ConfigurationError(
                f"the hot layer's key_prefix {given!r} is not the saver's ({prefix!r}): one"
                " prefix names one set of threads in both stores"
            )
    port = RedisHotPort(key_prefix=prefix)
    where = mask_url(url)
    if telemetry is None:
        telemetry = getattr(saver, "telemetry", None)
    if not isinstance(telemetry, Telemetry):
        telemetry = Telemetry(telemetry)
    options: dict[str, Any] = {
        "hot_ttl": ttl,
        "where": where,
        "schema": schema,
        "telemetry": telemetry,
        # a graphkeep saver's key ring: the copies are sealed as its checkpoints are
        "encryption": getattr(saver, "encryption", None),
    }
    if _is_async(saver):
        if running_loop() is None:
            raise ConfigurationError(
                "make the hot layer of an async saver on its event loop (inside async code)"
            )
        aclient = async_client(redis_url)
        aexecute = hot_executor(aclient, HOT_SCRIPTS, where, is_async=True)
        async_shell = layer_class(AsyncHotLayer, saver)
        return async_shell(  # type: ignore[no-any-return]
            saver, port, prober, aexecute, owned=aclient.aclose, checked=_checked_redis, **options
        )
    execute = DeferredExecutor(lambda: sync_client(redis_url), HOT_SCRIPTS, where)
    layer: HotLayer = layer_class(HotLayer, saver)(
        saver, port, prober, execute, owned=execute.close, **options
    )
    try:
        execute(next(port.setup()))
    except Exception as exc:  # noqa: BLE001 - sorted by _checked_redis
        try:
            _checked_redis(exc, where)
        except ConfigurationError:
            layer.close()
            raise
    return layer


class DeferredExecutor:
    """The sync layer's executor, its Redis client made at its first request (and again at
    the next one while that fails): redis-py's ``RedisCluster`` connects when it is made, so a
    cluster down when the layer starts makes requests fail (durable reads, counted) instead
    of the layer; a single Redis client connects on use anyway."""

    def __init__(self, make: Callable[[], Any], scripts: dict[str, str], where: str) -> None:
        self._make = make
        self._scripts = scripts
        self._where = where
        self._lock = threading.Lock()
        self._client: Any = None
        self._execute: Callable[[Any], Any] | None = None

    def __call__(self, request: Any) -> Any:
        execute = self._execute
        if execute is None:
            with self._lock:
                if self._execute is None:
                    client = self._make()  # StorageUnavailable while a cluster is down
                    self._execute = hot_executor(client, self._scripts, self._where, is_async=False)
                    self._client = client
                execute = self._execute
        return execute(request)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = self._execute = None


def hot_executor(client: Any, scripts: dict[str, str], where: str, *, is_async: bool) -> Any:
    """An executor for the hot layer's Redis requests: one attempt each (a cache read that
    fails is a durable read, not a wait)."""
    from graphkeep.backends.redis.client import ONCE, async_executor, sync_executor

    if is_async:
        return async_executor(client, scripts, where, retry=ONCE)
    return sync_executor(client, scripts, where, retry=ONCE)


register_opener(hot_layer)
