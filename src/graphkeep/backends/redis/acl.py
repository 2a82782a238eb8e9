"""What graphkeep needs of a Redis or Valkey ACL user: the ``ACL SETUSER`` line
``graphkeep setup URL --print-acl`` prints (:func:`acl_line`).

It is derived from what the five products send: the commands their Lua scripts call (read
from the scripts themselves) and the ones the executors and redis-py send outside scripts
(:data:`CLIENT_COMMANDS`); keys and channels under the configured ``key_prefix`` only; and
nothing of ``@dangerous`` (the line ends by taking that category away, so the server
itself guarantees it). See docs/security.md.
"""

from __future__ import annotations

import re

from graphkeep.backends.redis.cache import SCRIPTS as CACHE
from graphkeep.backends.redis.checkpoint import ALL_SCRIPTS as CHECKPOINT
from graphkeep.backends.redis.events import SCRIPTS as EVENTS
from graphkeep.backends.redis.hot import HOT_SCRIPTS as HOT
from graphkeep.backends.redis.permissions import CONTAINERS
from graphkeep.backends.redis.store_scripts import SCRIPTS as STORE

__all__ = ["CLIENT_COMMANDS", "QUERY_ENGINE_COMMANDS", "acl_commands", "acl_line", "scripts"]

#: what graphkeep sends outside its scripts: the executors' requests (``Script``: EVALSHA,
#: SCRIPT LOAD when a server lost its scripts; ``Delete``, ``MGet``, ``Scan``, ``XRead`` and
#: the ``Command`` requests of the ports), and what redis-py sends on a connection or to
#: learn a cluster (its slot map, its command table)
CLIENT_COMMANDS = (
    # the executors' own requests
    "evalsha",
    "script|load",
    "del",
    "unlink",
    "mget",
    "scan",
    "xread",
    # the ports' Command requests (reads and set updates outside scripts)
    "hgetall",
    "sadd",
    "smembers",
    "srem",
    "xrange",
    "zrangebylex",
    "zrevrangebylex",
    "memory|usage",
    # a thread's settled mark, the store's fallback copy finished (fallback=: graphkeep.moving)
    "exists",
    "set",
    # redis-py: a connection's handshake and health check, a cluster's slot map; CLIENT
    # whole (SETNAME, and SETINFO which Redis before 7.2 does not know): its subcommands
    # that reach other connections (KILL, LIST, PAUSE …) are @dangerous, taken away after
    "ping",
    "hello",
    "client",
    "cluster|slots",
    "cluster|shards",
    "command",
    "readonly",
)
#: the store's optional Query Engine index (``vector_index=True``):
#: module commands a server without the module does not know, so granted only when used
QUERY_ENGINE_COMMANDS = ("ft.create", "ft.search", "ft._list")
#: a literal command a script calls: ``redis.call('HSET', …)``, or through its helper
_CALL = re.compile(
    r"(?:redis\.p?call|batched)\(\s*'([A-Za-z][\w.]*)'(?:\s*,\s*'([A-Za-z][\w-]*)')?"
)


def scripts() -> dict[str, str]:
    """Every Lua script of the five products (and the hot layer), by name."""
    return {**CHECKPOINT, **STORE, **CACHE, **EVENTS, **HOT}


def script_commands() -> set[str]:
    """The ACL names of the commands the products' scripts call (module commands left out:
    see :data:`QUERY_ENGINE_COMMANDS`)."""
    found: set[str] = set()
    for source in scripts().values():
        for name, sub in _CALL.findall(source):
            name = name.lower()
            if "." in name:
                continue
            found.add(f"{name}|{sub.lower()}" if name in CONTAINERS and sub else name)
    return found


def acl_commands(*, vector_index: bool = False) -> list[str]:
    """Every command an ACL user of graphkeep needs, sorted."""
    names = script_commands() | set(CLIENT_COMMANDS)
    if vector_index:
        names |= set(QUERY_ENGINE_COMMANDS)
    return sorted(names)


def acl_line(
    prefix: str,
    *,
    user: str = "graphkeep",
    password: str = "<password>",
    vector_index: bool = False,
) -> str:
    """The ``ACL SETUSER`` line of a user that may run every graphkeep product on the keys
    under ``prefix`` (and no other key, channel or command)."""
    granted = " ".join(f"+{name}" for name in acl_commands(vector_index=vector_index))
    return (
        f"ACL SETUSER {user} on >{password} resetkeys ~{prefix}:* resetchannels &{prefix}:*"
        f" -@all {granted} -@dangerous"
    )
