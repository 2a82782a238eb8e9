"""The cache port: the :class:`CachePort` protocol a backend implements, the records it
exchanges (:class:`Entry`, :class:`Stored`), the escaped text of namespaces and keys, and the
input checks.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from langgraph.cache.base import FullKey, Namespace

from graphkeep.errors import CorruptData, InvalidInput
from graphkeep.port import Op

log = logging.getLogger("graphkeep.cache")


def unreadable(address: FullKey, exc: CorruptData) -> None:
    """Log that the entry at ``address`` does not read back; the caller treats it as a miss
    (a cache is recomputable: the node runs again). The line names the entry and the
    reason, never the stored bytes (:class:`CorruptData`'s message quotes none)."""
    log.warning("cache entry %r cannot be decoded, treated as a miss: %s", address, exc)


#: characters that never appear in an encoded label or key: ``/`` ends a label, ``{``/``}``
#: would bound a Redis Cluster hash tag, ``#`` separates DynamoDB key parts, ``%`` escapes
_ESCAPES = {c: f"%{ord(c):02X}" for c in "%/{}#\x00"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One value to store: its address, the packed typed value and its expiry."""

    namespace: Namespace
    key: str
    data: bytes
    #: epoch milliseconds after which the entry is gone; None = kept until cleared
    expires_ms: int | None


@dataclass(frozen=True, slots=True)
class Stored:
    """What a port read back for one key."""

    data: bytes
    expires_ms: int | None


@dataclass(frozen=True, slots=True)
class Held:
    """An entry as stored, for ``graphkeep rekey``: its address, its packed typed value, and
    what the port needs to replace it. A store whose keys hold only a digest of a long
    address keeps the address beside it (DynamoDB's ``rw``); None only for an entry written
    before it did, which rekey then cannot open (its value is sealed at the address)."""

    address: FullKey | None
    data: bytes
    ref: Any


class CachePort(Protocol):
    """What a backend maps onto its store; addresses arrive validated.

    - ``set`` replaces each entry (value and expiry); entries of one call may span
      namespaces. A store may skip an entry it cannot hold (log it): a cache may drop.
    - ``get`` returns what it finds for the given addresses; it may include expired
      entries (the shell filters them) but must never return another address's value.
    - ``clear(namespaces)`` deletes exactly those namespaces' entries (exact match, not
      prefixes); ``clear(None)`` every entry under this cache's key prefix.
    - ``entries()``: every entry under this cache's key prefix (:class:`Held`; expired ones
      may be included); ``reseal(held, data)`` replaces ``held``'s value with ``data``,
      its expiry kept, when the stored value is still ``held.data`` (one conditional
      request; True when replaced). ``graphkeep rekey`` seals entries again with them.
    """

    def setup(self) -> Op[None]: ...

    def get(self, keys: list[FullKey]) -> Op[dict[FullKey, Stored]]: ...

    def set(self, entries: list[Entry], now_ms: int) -> Op[None]: ...

    def clear(self, namespaces: list[Namespace] | None) -> Op[None]: ...

    def entries(self) -> Op[list[Held]]: ...

    def reseal(self, held: Held, data: bytes) -> Op[bool]: ...


def _escape(text: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in text)


def escaped_namespace(namespace: Namespace) -> str:
    """Each label escaped and ended by ``/``: ``()`` -> ``""``, ``("a", "")`` -> ``"a//"``.

    Distinct namespaces give distinct texts; ``{``, ``}``, ``#`` and NUL never occur in
    it (they are percent-escaped, as is ``%``), so it fits inside a Redis hash tag or a
    DynamoDB key component.
    """
    return "".join(_escape(label) + "/" for label in namespace)


def unescaped(text: str) -> str:
    """An escaped label or key back to its text."""
    return re.sub("%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


def namespace_of(escaped: str) -> Namespace:
    """:func:`escaped_namespace`'s text back to its namespace."""
    return tuple(unescaped(label) for label in escaped.split("/")[:-1])


def escaped_key(key: str) -> str:
    """The key escaped like a label (no ``/``): ``escaped_namespace + escaped_key`` is
    unambiguous."""
    return _escape(key)


def check_namespace(namespace: Any) -> Namespace:
    if not isinstance(namespace, tuple) or not all(isinstance(x, str) for x in namespace):
        raise InvalidInput(f"a cache namespace must be a tuple of strings, got {namespace!r}")
    return namespace


def check_address(address: Any) -> FullKey:
    if not isinstance(address, tuple) or len(address) != 2:
        raise InvalidInput(f"a cache key must be a (namespace, key) pair, got {address!r}")
    namespace, key = address
    if not isinstance(key, str):
        raise InvalidInput(f"a cache key must be a string, got {type(key).__name__}")
    return check_namespace(namespace), key


def expiry_after_seconds(ttl: Any, now_ms: int) -> int | None:
    """Epoch ms at which an entry written at ``now_ms`` with ``ttl`` seconds expires (None:
    never)."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or math.isnan(ttl) or ttl < 0:
        raise InvalidInput(f"a cache ttl must be None or seconds >= 0, got {ttl!r}")
    if math.isinf(ttl):
        return None
    return now_ms + math.ceil(ttl * 1000)


def live(stored: Stored, now: int) -> bool:
    return stored.expires_ms is None or stored.expires_ms > now
