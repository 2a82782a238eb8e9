"""A Redis or Valkey ACL refusal as graphkeep's error: :func:`refusal` turns the server's
``NOPERM`` (or a script's ACL failure) into :class:`~graphkeep.errors.PermissionDenied` naming
the user, the command and the key pattern it lacks (the executors in :mod:`.client` raise
it, never retried). What to grant is :mod:`.acl`'s. See docs/security.md.
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from graphkeep.backends.redis.requests import Command, Delete, MGet, Pipeline, Scan, Script, XRead
from graphkeep.errors import PermissionDenied

__all__ = ["is_refusal", "refusal"]

#: commands whose ACL names are ``command|subcommand``
CONTAINERS = frozenset({"memory", "xinfo", "client", "cluster", "script", "object", "config"})
#: what the server says when the user lacks a command or a key (inside a script too)
_REFUSED = re.compile(
    r"NOPERM|no permissions to|ACL failure in script|user executing the script can't", re.I
)
_COMMAND_REFUSED = re.compile(r"permissions to run|can't run this command", re.I)


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing the user a command or a key."""
    if isinstance(exc, NoPermissionError):
        return True
    return isinstance(exc, ResponseError) and bool(_REFUSED.search(str(exc)))


def _command(request: Any) -> tuple[str, str | None]:
    """The command a request sends and the first key it touches."""
    if isinstance(request, Script):
        return f"EVALSHA (script {request.name})", request.keys[0] if request.keys else None
    if isinstance(request, Pipeline) and request.scripts:
        first = request.scripts[0]
        return f"EVALSHA (script {first.name})", first.keys[0] if first.keys else None
    if isinstance(request, Delete):
        return "DEL", request.keys[0] if request.keys else None
    if isinstance(request, MGet):
        return "MGET", request.keys[0] if request.keys else None
    if isinstance(request, XRead):
        return "XREAD", request.key
    if isinstance(request, Scan):
        return "SCAN", request.pattern
    if isinstance(request, Command) and request.args:
        name = str(request.args[0]).upper()
        if name.lower() in CONTAINERS and len(request.args) > 1:
            name = f"{name} {str(request.args[1]).upper()}"
            return name, str(request.args[2]) if len(request.args) > 2 else None
        return name, str(request.args[1]) if len(request.args) > 1 else None
    return type(request).__name__, None


def refusal(
    exc: BaseException, request: Any, *, where: str, prefix: str | None, user: str | None
) -> PermissionDenied:
    """The :class:`PermissionDenied` of the server's refusal ``exc`` of ``request``."""
    command, key = _command(request)
    who = f"user {user!r}" if user else "the connection's user"
    if _COMMAND_REFUSED.search(str(exc)):
        lacks, resource = f"lacks a command {command} needs", "commands"
    else:
        pattern = f"~{prefix}:*" if prefix else "the key pattern of the keys it uses"
        lacks = f"lacks the key pattern {pattern}" + (f" (key {key!r})" if key else "")
        resource = pattern
    return PermissionDenied(
        f"Redis at {where} refused {command} to {who}: the user {lacks}; grant what"
        f" `graphkeep setup URL --print-acl` prints (the server said: {exc})",
        action=command,
        resource=resource,
        user=user,
    )
