"""The node cache (LangGraph ``BaseCache``): the contract once, for every store.

LangGraph caches a node's writes under ``(namespace, key)`` when the node has a
``CachePolicy`` and the graph is compiled with ``cache=``; ``set`` takes
``{(namespace, key): (value, ttl_seconds_or_None)}`` and ``clear(namespaces)`` drops
whole namespaces (all of them when ``None``). What is the same for every store lives here:

- input checks (a namespace is a tuple of strings, a key a string, a ttl ``None`` or
  seconds), raised as :class:`graphkeep.errors.InvalidInput` before anything is written;
- values encoded with the cache's ``serde`` (``dumps_typed``, packed as
  :func:`graphkeep.port.codec.pack_typed` does);
- expiry: an entry written with a ttl carries its exact expiry in epoch milliseconds and
  is never returned once past it, whether or not the server has reaped it yet;
- :func:`namespace_text` / :func:`key_text`, one unambiguous text form of any namespace
  and key (labels may hold any character: ``{``, ``}``, ``#``, ``/``, ``.``, NUL, unicode);
- :class:`SyncCache` / :class:`AsyncCache`, the two shells driving a
  :class:`CachePort` (whose methods yield the store's requests) sync or async.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from langgraph.cache.base import BaseCache, FullKey, Namespace

from graphkeep.checkpoint.records import Typed
from graphkeep.errors import InvalidInput
from graphkeep.port import Op, adrive, codec, drive, on_loop, running_loop

log = logging.getLogger("graphkeep.cache")

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


class CachePort(Protocol):
    """What a backend maps onto its store; addresses arrive validated.

    - ``set`` replaces each entry (value and expiry); entries of one call may span
      namespaces. A store may skip an entry it cannot hold (log it): a cache may drop.
    - ``get`` returns what it finds for the given addresses; it may include expired
      entries (the shell filters them) but must never return another address's value.
    - ``clear(namespaces)`` deletes exactly those namespaces' entries (exact match, not
      prefixes); ``clear(None)`` every entry under this cache's key prefix.
    """

    def setup(self) -> Op[None]: ...

    def get(self, keys: list[FullKey]) -> Op[dict[FullKey, Stored]]: ...

    def set(self, entries: list[Entry], now_ms: int) -> Op[None]: ...

    def clear(self, namespaces: list[Namespace] | None) -> Op[None]: ...


def now_ms() -> int:
    return int(time.time() * 1000)


def _escape(text: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in text)


def namespace_text(namespace: Namespace) -> str:
    """Each label escaped and ended by ``/``: ``()`` -> ``""``, ``("a", "")`` -> ``"a//"``.

    Distinct namespaces give distinct texts; ``{``, ``}``, ``#`` and NUL never occur in
    it (they are percent-escaped, as is ``%``), so it fits inside a Redis hash tag or a
    DynamoDB key component.
    """
    return "".join(_escape(label) + "/" for label in namespace)


def key_text(key: str) -> str:
    """The key escaped like a label (no ``/``): ``namespace_text + key_text`` is unambiguous."""
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


def expiry_ms(ttl: Any, now: int) -> int | None:
    """Epoch ms at which an entry written ``now`` with ``ttl`` seconds expires (None: never)."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or math.isnan(ttl) or ttl < 0:
        raise InvalidInput(f"a cache ttl must be None or seconds >= 0, got {ttl!r}")
    if math.isinf(ttl):
        return None
    return now + math.ceil(ttl * 1000)


def live(stored: Stored, now: int) -> bool:
    return stored.expires_ms is None or stored.expires_ms > now


class CacheBase(BaseCache[Any]):
    """The contract over a :class:`CachePort`; the shells below say how ops are run."""

    def __init__(self, port: CachePort, *, serde: Any = None) -> None:
        super().__init__(serde=serde)
        self.port = port

    def _get(self, keys: Sequence[FullKey]) -> Op[dict[FullKey, Any]]:
        wanted = list(dict.fromkeys(check_address(k) for k in keys))
        if not wanted:
            return {}
        found = yield from self.port.get(wanted)
        now = now_ms()
        values: dict[FullKey, Any] = {}
        for address in wanted:
            stored = found.get(address)
            if stored is None or not live(stored, now):
                continue
            try:
                values[address] = codec.load(self.serde, codec.unpack_typed(stored.data))
            except Exception as exc:  # noqa: BLE001 - an unreadable entry is a miss
                log.warning("cache entry %r cannot be decoded, treated as a miss: %s", address, exc)
        return values

    def _set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> Op[None]:
        now = now_ms()
        entries: list[Entry] = []
        for address, pair in pairs.items():
            namespace, key = check_address(address)
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise InvalidInput(f"cache.set takes {{key: (value, ttl)}}, got {pair!r}")
            value, ttl = pair
            typed: Typed = codec.dump(self.serde, value, f"cached value of {key!r}")
            entries.append(Entry(namespace, key, codec.pack_typed(typed), expiry_ms(ttl, now)))
        if entries:
            yield from self.port.set(entries, now)

    def _clear(self, namespaces: Sequence[Namespace] | None) -> Op[None]:
        if namespaces is None:
            yield from self.port.clear(None)
            return
        if isinstance(namespaces, (str, tuple)) and not all(
            isinstance(x, tuple) for x in namespaces
        ):
            raise InvalidInput(
                f"clear takes a list of namespaces (tuples of strings), got {namespaces!r}"
            )
        checked = list(dict.fromkeys(check_namespace(ns) for ns in namespaces))
        if checked:
            yield from self.port.clear(checked)


class SyncCache(CacheBase):
    """A node cache on a blocking client; the async methods run it in a worker thread."""

    def __init__(self, port: CachePort, execute: Callable[[Any], Any], **options: Any) -> None:
        super().__init__(port, **options)
        self._execute = execute

    def _call(self, op: Op[Any]) -> Any:
        return drive(op, self._execute)

    def setup(self) -> None:
        self._call(self.port.setup())

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return dict(self._call(self._get(keys)))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return await asyncio.to_thread(self.get, keys)

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        self._call(self._set(pairs))

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        await asyncio.to_thread(self.set, pairs)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self._call(self._clear(namespaces))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await asyncio.to_thread(self.clear, namespaces)


class AsyncCache(CacheBase):
    """A node cache on an asyncio client; sync callers hop onto the cache's event loop.

    Sync methods must be called from another thread than the loop's (LangGraph's sync
    ``invoke`` in a worker thread, say); on the loop itself they would deadlock, so they
    raise :class:`asyncio.InvalidStateError` instead.
    """

    def __init__(self, port: CachePort, aexecute: Callable[[Any], Any], **options: Any) -> None:
        super().__init__(port, **options)
        self._aexecute = aexecute
        self.loop = running_loop()

    async def _acall(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aexecute)

    def _call(self, op: Op[Any]) -> Any:
        return on_loop(
            self.loop,
            self._acall(op),
            "node cache",
            "the async methods (ainvoke, aget, aset, aclear) or a sync cache from"
            " graphkeep.connect_cache()",
        )

    async def setup(self) -> None:
        await self._acall(self.port.setup())

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return dict(self._call(self._get(keys)))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return dict(await self._acall(self._get(keys)))

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        self._call(self._set(pairs))

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        await self._acall(self._set(pairs))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self._call(self._clear(namespaces))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await self._acall(self._clear(namespaces))
