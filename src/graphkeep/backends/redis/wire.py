"""The lean request path of the Redis backend: a script call written on one connection.

redis-py's own call path costs more client CPU than a loopback round trip: the ``Script``
wrapper, ``execute_command`` with its retry wrapper and operation-duration hooks, the
command packed, the reply parsed through the client's callbacks. graphkeep already bounds
its requests (:mod:`graphkeep.port.pools`), retries them (:mod:`graphkeep.port.retry`) and
traces each call once (:mod:`graphkeep.port.telemetry`), so on the happy path a ``Script``
request is sent here instead: one connection taken from the pool of the server that owns
the keys (the client's pool; on a Cluster, the pool of the node that serves the first key's
slot, as redis-py routes it), ``EVALSHA`` packed once and written with
``send_packed_command``, the reply read with ``read_response`` (redis-py's hiredis parser
where ``hiredis`` is installed: the ``[redis]`` extra brings it), the connection given back.

The pool bound still holds: the request holds one slot of graphkeep's gate and one
connection of the driver's pool, as before. Anything but a server's reply — a dropped
connection, a timeout, a loading server, a slot that moved, a server that lost its scripts —
leaves the connection disconnected (or, for a reply, in the pool) and :class:`Detour` sends
the caller the full way once: through redis-py, with its reconnection, its cluster
redirections and slot-map refresh, its script reload. A failure there reaches graphkeep's
retry exactly as before the lean path existed. A checkout that cannot connect to a single
server raises as redis-py's own call does (its checkout is outside its retry too), and a
refused login is never sent twice (``AuthenticationError``: refused at once). A script's own
error reply (a fence's refusal, a closed run) was read whole: it is raised as redis-py raises
it and the connection goes back to the pool as it is, never reconnected for it. Whatever
ends a call, its connection goes back exactly once; after anything but a reply it is closed
first, and that clean-up is shielded from a second cancellation.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import redis
import redis.asyncio as aredis
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterDownError,
    MaxConnectionsError,
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

__all__ = ["REPLIES", "TRANSPORT", "Detour", "acall", "aroute", "call", "route"]

#: the server's replies that send a request the full way once (MovedError is an AskError):
#: redis-py reloads the scripts, follows the redirection, refreshes the slot map
REPLIES = (NoScriptError, AskError, TryAgainError, ClusterDownError)
#: transport failures (BusyLoadingError is a ConnectionError): the connection is dropped and
#: the request goes the full way once, redis-py reconnecting as it does
TRANSPORT = (RedisConnectionError, RedisTimeoutError, OSError)

#: redis-py before 5.3 wants a command name for a pool checkout; later ones warn about it
_NAMED = (
    inspect.signature(redis.ConnectionPool.get_connection).parameters["command_name"].default
    is inspect.Parameter.empty
)
_CHECKOUT: tuple[str, ...] = ("EVALSHA",) if _NAMED else ()


class Detour(Exception):
    """The lean path could not send the request: send it the full way (``__cause__``)."""


def route(client: Any, keys: list[Any]) -> Any:
    """The redis-py connection pool a script call on ``keys`` is written to, or None when
    it goes the full way (a client on one connection, a Cluster slot map not known)."""
    if isinstance(client, redis.RedisCluster):
        if not keys:
            return None
        cluster: Any = client
        try:
            node = cluster.get_node_from_key(keys[0])
        except RedisClusterException:
            return None
        connection = getattr(node, "redis_connection", None)
        return None if connection is None else connection.connection_pool
    if getattr(client, "connection", None) is not None:  # single_connection_client=True
        return None
    return client.connection_pool


def call(pool: Any, args: tuple[Any, ...], cluster: bool = False) -> Any:
    """``args`` (a command) packed once, written on one of ``pool``'s connections, its reply
    read; raises :class:`Detour` where the full way must be taken, and a server's error reply
    (a script's error, an ACL refusal) or a refused login as redis-py does. ``cluster``:
    ``pool`` is a Cluster node's."""
    try:
        connection = pool.get_connection(*_CHECKOUT)
    except TRANSPORT as exc:
        # a checkout that cannot connect raises as redis-py's own call does on one server
        # (its checkout is outside its retry: graphkeep's retry decides); a Cluster node's
        # goes the full way, whose slot-map refresh finds a failed-over primary
        if not cluster or isinstance(exc, AuthenticationError):
            raise
        raise Detour() from exc
    try:
        connection.send_packed_command(connection.pack_command(*args))
        reply = connection.read_response()
    except redis.ResponseError as exc:  # an error reply, read whole: the connection goes back as is
        pool.release(connection)
        if isinstance(exc, REPLIES):
            raise Detour() from exc
        raise
    except BaseException as exc:  # dropped, timed out or interrupted mid-request
        connection.disconnect()  # never hand on a half-used socket
        pool.release(connection)
        if isinstance(exc, TRANSPORT) and not isinstance(exc, AuthenticationError):
            raise Detour() from exc
        raise  # a refused login is refused at once
    pool.release(connection)
    return reply


def aroute(client: Any, keys: list[Any]) -> Any:
    """The asyncio :func:`route`: a pool (``redis.asyncio.Redis``) or a Cluster node."""
    if isinstance(client, aredis.RedisCluster):
        if not keys or getattr(client, "_initialize", True):
            return None  # the slot map is not known yet: redis-py's first call learns it
        try:
            return client.get_node_from_key(keys[0])
        except RedisClusterException:
            return None
    if getattr(client, "connection", None) is not None:
        return None
    return client.connection_pool


async def acall(where: Any, args: tuple[Any, ...]) -> Any:
    """The asyncio :func:`call` on a pool or a Cluster node (:func:`aroute`). The connection
    goes back once, whatever happens: as it is after a reply (an error reply too), dropped
    after anything else — that clean-up shielded from a second cancellation (a caller that
    cancels until its task ends), which would leave the connection taken for good."""
    node = isinstance(where, aredis.cluster.ClusterNode)
    if node:
        try:
            connection = where.acquire_connection()
        except MaxConnectionsError as exc:  # the node's own bound: redis-py's cluster path
            raise Detour() from exc
    else:
        connection = await where.get_connection(*_CHECKOUT)  # as the sync call's checkout
    try:
        if node and getattr(connection, "should_reconnect", bool)():  # marked by redis-py
            await connection.disconnect()
        await connection.send_packed_command(connection.pack_command(*args))
        reply = await connection.read_response()
    except redis.ResponseError as exc:  # an error reply, read whole: the connection goes back as is
        await _release(where, connection, node)
        if isinstance(exc, REPLIES):
            raise Detour() from exc
        raise
    except BaseException as exc:  # dropped, timed out or cancelled mid-request
        await asyncio.shield(_drop(where, connection, node))
        if isinstance(exc, TRANSPORT) and not isinstance(exc, AuthenticationError):
            raise Detour() from exc
        raise  # a refused login is refused at once
    await _release(where, connection, node)
    return reply


async def _release(where: Any, connection: Any, node: bool) -> None:
    if node:
        where.release(connection)
    else:
        await where.release(connection)


async def _drop(where: Any, connection: Any, node: bool) -> None:
    """``connection`` closed (never a half-used socket handed on), then given back."""
    try:
        await connection.disconnect(nowait=True)
    finally:
        await _release(where, connection, node)
