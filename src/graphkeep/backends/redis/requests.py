"""The requests the Redis ports yield: plain data the executors in :mod:`.client` send.

Every request is idempotent (scripts upsert or insert-if-absent, deletes are by key), so
the executors may send one again after a lost connection (see docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_ARGS",
    "Command",
    "Delete",
    "MGet",
    "Pipeline",
    "Scan",
    "Script",
    "XRead",
    "script_room",
]

#: the most arguments one request may carry, its command name and KEYS included: ElastiCache
#: Serverless refuses more (AWS ElastiCache docs, "Best practices: Lua scripts" / serverless
#: limits). Every request a Redis port yields stays within it, whatever the data's size.
MAX_ARGS = 3999


def script_room(nkeys: int) -> int:
    """How many ARGV one script call on ``nkeys`` keys may carry: ``EVALSHA sha numkeys``
    and the keys count against :data:`MAX_ARGS`."""
    return MAX_ARGS - 3 - nkeys


@dataclass(frozen=True, slots=True)
class Script:
    """One call of the Lua script ``name`` (``"__load__"``: load every script the
    executor knows, ``SCRIPT LOAD``)."""

    name: str
    keys: list[str]
    args: list[Any]


@dataclass(frozen=True, slots=True)
class Scan:
    """Every key matching ``pattern`` (on every primary of a cluster)."""

    pattern: str


@dataclass(frozen=True, slots=True)
class Delete:
    """``DEL`` of ``keys``: one command per hash slot (a single-node server with a Cluster
    policy answers CROSSSLOT to keys of several slots) and per :data:`MAX_ARGS`, pipelined;
    the number of keys deleted."""

    keys: list[str]


@dataclass(frozen=True, slots=True)
class MGet:
    """``MGET`` of ``keys``, cut like :class:`Delete` (one command per hash slot and per
    :data:`MAX_ARGS`, pipelined: one round trip on a single node); the values in ``keys``'
    order (``None`` where absent)."""

    keys: list[str]


@dataclass(frozen=True, slots=True)
class Command:
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class XRead:
    """``XREAD COUNT count [BLOCK block_ms] STREAMS key position`` on one stream.

    Sent straight to the node that owns ``key`` on a cluster (redis-py would otherwise
    ask the server for XREAD's keys on every call). ``block_ms`` 0 does not block; a
    blocking read is kept below the client's socket timeout by the executor, and
    takes a pooled connection of its own for its duration (other calls on the same
    client use other connections). The reply is redis-py's XREAD reply, None when
    nothing came.
    """

    key: str
    position: str
    count: int
    block_ms: int = 0


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Several ``Script`` calls (on any slots) sent at once; their results in order."""

    scripts: tuple[Script, ...]
