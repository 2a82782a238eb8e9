"""Every error graphkeep raises on purpose derives from :class:`GraphkeepError`.

Messages say what was wrong and what to do about it. Errors about the caller's
input are raised before anything is written to the store. :func:`mask_url` keeps passwords
out of every message that names a server.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


class GraphkeepError(Exception):
    """Base class of all graphkeep errors."""


class ConfigurationError(GraphkeepError, ValueError):
    """A URL, option or constructor argument is not usable."""


class InvalidInput(GraphkeepError, ValueError):
    """An argument of a saver call cannot be stored (raised before any write)."""


class InvalidThreadId(InvalidInput):
    """A thread id is missing, of the wrong type, too long or contains NUL."""


class InvalidNamespace(InvalidInput):
    """A checkpoint namespace or id cannot be stored."""


class InvalidFilter(InvalidInput):
    """A metadata filter for ``list`` cannot be evaluated safely."""


class SerializationError(GraphkeepError, TypeError):
    """A value in graph state (or a write) cannot be serialized."""


class PayloadTooLarge(GraphkeepError):
    """A value is larger than the store accepts and chunking is disabled."""


class StorageUnavailable(GraphkeepError, ConnectionError):
    """The store cannot be reached (refused, timed out, restarting)."""


class PoolExhausted(StorageUnavailable):
    """No connection of a client's pool came free for ``pool_timeout`` seconds while a
    request waited for one (raise ``max_connections`` or ``pool_timeout``); never retried."""


class LockNotAcquired(GraphkeepError):
    """A per-thread lease is held by someone else."""


class CorruptData(GraphkeepError):
    """Stored data cannot be read back whole (e.g. a list element record is missing)."""


class UnsafePrune(GraphkeepError):
    """A prune plan would take from a kept checkpoint what it needs (nothing was deleted)."""


class UnknownRun(InvalidInput):
    """An event-log run id has no events, heartbeat or close (never written, or expired)."""


class RunClosed(InvalidInput):
    """An event was appended to a run after its close event."""


class RunStale(GraphkeepError):
    """A followed run stopped appending and heart-beating before its close (writer gone)."""


class EventsTrimmed(GraphkeepError):
    """Events after the requested id were dropped by retention (``max_events`` / TTL)."""


__all__ = [
    "ConfigurationError",
    "CorruptData",
    "EventsTrimmed",
    "GraphkeepError",
    "InvalidFilter",
    "InvalidInput",
    "InvalidNamespace",
    "InvalidThreadId",
    "LockNotAcquired",
    "PayloadTooLarge",
    "PoolExhausted",
    "RunClosed",
    "RunStale",
    "SerializationError",
    "StorageUnavailable",
    "UnknownRun",
    "UnsafePrune",
    "mask_url",
]


def mask_url(url: str) -> str:
    """Return ``url`` with any password (and secret query values) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}{':***' if sep else ''}@{host}"
    query = re.sub(
        r"(?i)((?:password|secret|token|aws_secret_access_key|aws_session_token)=)[^&]*",
        r"\1***",
        parts.query,
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
