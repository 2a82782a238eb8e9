"""The node cache contract and its two shells: :class:`CacheBase` (LangGraph's ``BaseCache``
over a :class:`~graphkeep.cache.port.CachePort`), :class:`SyncCache` and :class:`AsyncCache`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.cache.base import BaseCache, FullKey, Namespace

from graphkeep.cache.port import (
    CachePort,
    Entry,
    Held,
    check_address,
    check_namespace,
    expiry_after_seconds,
    live,
    unreadable,
)
from graphkeep.errors import CorruptData, InvalidInput
from graphkeep.port import Op, Telemetry, codec, target_of
from graphkeep.port.clock import now_ms
from graphkeep.port.codec import Typed
from graphkeep.port.encryption import ENVELOPE_TAG, KeyRing, check_encryption
from graphkeep.port.shells import Blocking, Hopping


class CacheBase(BaseCache[Any]):
    """LangGraph's ``BaseCache`` over a :class:`~graphkeep.cache.port.CachePort`; the shells
    below say how ops are run.

    LangGraph caches a node's writes under ``(namespace, key)`` when the node has a
    ``CachePolicy`` and the graph is compiled with ``cache=``; ``set`` takes
    ``{(namespace, key): (value, ttl_seconds_or_None)}`` and ``clear(namespaces)`` drops
    whole namespaces (all of them when ``None``). What is the same for every store:

    - input checks (a namespace is a tuple of strings, a key a string, a ttl ``None`` or
      seconds), raised as :class:`graphkeep.errors.InvalidInput` before anything is written;
    - values encoded with the cache's ``serde`` (``dumps_typed``, packed as
      :func:`graphkeep.port.codec.pack_typed` does), sealed at their namespace and key with
      ``encryption=`` (a :class:`~graphkeep.port.encryption.KeyRing`);
    - expiry: an entry written with a ttl carries its exact expiry in epoch milliseconds
      and is never returned once past it, whether or not the server has reaped it yet.
    """

    def __init__(
        self,
        port: CachePort,
        *,
        serde: Any = None,
        telemetry: Any = None,
        execute: Any = None,
        encryption: KeyRing | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.port = port
        #: the key ring each entry is sealed with at ``("cache", namespace, key)`` (None: stored
        #: as serialized); an entry that does not open there is a logged miss, never a value
        self.encryption = check_encryption(encryption)
        #: spans and metrics of every call (see :mod:`graphkeep.port.telemetry`)
        self.telemetry = Telemetry(telemetry, target_of(execute))

    def observed(self, name: str, op: Op[Any]) -> Op[Any]:
        """``op`` as one call ``cache.<name>`` of this cache's telemetry."""
        return self.telemetry.observe(f"cache.{name}", op)

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
                typed = codec.unpack_typed(stored.data)
                if self.encryption is not None:
                    typed = self.encryption.open(typed, _place(address))
                values[address] = codec.load(self.serde, typed)
            except CorruptData as exc:  # an unreadable entry is a miss, logged without bytes
                unreadable(address, exc)
        return values

    def _set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> Op[None]:
        now = now_ms()
        entries: list[Entry] = []
        for address, pair in pairs.items():
            namespace, key = check_address(address)
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise InvalidInput(f"cache.set takes {{key: (value, ttl)}}, got {pair!r}")
            value, ttl = pair
            typed = codec.dump(self.serde, value, f"cached value of {key!r}")
            if self.encryption is not None:
                typed = self.encryption.seal(typed, _place((namespace, key)))
            entries.append(
                Entry(namespace, key, codec.pack_typed(typed), expiry_after_seconds(ttl, now))
            )
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

    def rekey_op(self, dry_run: bool = False, legacy: Any = None) -> Op[dict[str, int]]:
        """The op sealing every entry again under the ring's current key (``graphkeep
        rekey --all``), each by one conditional request (an entry set meanwhile stays as it
        was set) and read back: ``{"rewritten", "current", "unreadable"}``. An entry that
        does not open (plaintext, a key the ring lacks, a changed one), or whose address the
        port cannot give (:class:`~graphkeep.cache.port.Held`), is left as it is: a miss,
        as every read of it is.
        ``legacy`` opens LangGraph's ``EncryptedSerializer`` form."""
        ring = self.encryption
        counts = {"rewritten": 0, "current": 0, "unreadable": 0}
        if ring is None:
            return counts
        for held in (yield from self.port.entries()):
            state, typed = _renewed(ring, held, legacy)
            counts[state] += 1
            if dry_run or typed is None or held.address is None:
                continue
            data = codec.pack_typed(ring.seal(typed, _place(held.address)))
            if not (yield from self.port.reseal(held, data)):
                continue  # set again meanwhile: under the current key already
            back = (yield from self.port.get([held.address])).get(held.address)
            if back is not None and back.data == data:
                ring.open(codec.unpack_typed(back.data), _place(held.address))
        return counts


def _renewed(ring: KeyRing, held: Held, legacy: Any) -> tuple[str, Typed | None]:
    """What ``rekey_op`` does with one entry: ``"current"``, ``"unreadable"`` or
    ``"rewritten"`` and the payload to seal."""
    try:
        stored = codec.unpack_typed(held.data)
        if stored.tag == ENVELOPE_TAG and ring.key_id(stored) == ring.current:
            return "current", None
        if held.address is None:
            return "unreadable", None
        if legacy is not None and stored.tag != ENVELOPE_TAG and "+" in stored.tag:
            return "rewritten", legacy(stored)
        return "rewritten", ring.open(stored, _place(held.address))
    except CorruptData:
        return "unreadable", None


def _place(address: FullKey) -> tuple[Any, ...]:
    namespace, key = address
    return ("cache", list(namespace), key)


class SyncCache(Blocking, CacheBase):
    """A node cache on a blocking client; the async methods run it in a worker thread."""

    def setup(self) -> None:
        self._call(self.observed("setup", self.port.setup()))

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return dict(self._call(self.observed("get", self._get(keys))))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return await asyncio.to_thread(self.get, keys)

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        self._call(self.observed("set", self._set(pairs)))

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        await asyncio.to_thread(self.set, pairs)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self._call(self.observed("clear", self._clear(namespaces)))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await asyncio.to_thread(self.clear, namespaces)

    def rekey(self, dry_run: bool = False, legacy: Any = None) -> dict[str, int]:
        """Every entry sealed again under the current key (see :meth:`rekey_op`)."""
        return dict(self._call(self.observed("rekey", self.rekey_op(dry_run, legacy))))


class AsyncCache(Hopping, CacheBase):
    """A node cache on an asyncio client; sync callers hop onto the cache's event loop.

    Sync methods must be called from another thread than the loop's (LangGraph's sync
    ``invoke`` in a worker thread, say); on the loop itself they would deadlock, so they
    raise :class:`asyncio.InvalidStateError` instead.
    """

    HOP = (
        "node cache",
        "the async methods (ainvoke, aget, aset, aclear) or a sync cache from"
        " graphkeep.connect_cache()",
    )

    async def setup(self) -> None:
        await self._acall(self.observed("setup", self.port.setup()))

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return dict(self._call(self.observed("get", self._get(keys))))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return dict(await self._acall(self.observed("get", self._get(keys))))

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        self._call(self.observed("set", self._set(pairs)))

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        await self._acall(self.observed("set", self._set(pairs)))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self._call(self.observed("clear", self._clear(namespaces)))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await self._acall(self.observed("clear", self._clear(namespaces)))

    async def arekey(self, dry_run: bool = False, legacy: Any = None) -> dict[str, int]:
        """Every entry sealed again under the current key (see :meth:`rekey_op`)."""
        return dict(await self._acall(self.observed("rekey", self.rekey_op(dry_run, legacy))))
