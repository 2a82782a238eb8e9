"""The hot layer's two sides as its ops see them: the Redis side (:class:`HotPort`), the durable
side's key-only read (:class:`Prober`), and the requests the ops yield to the shell that answers
them (:class:`ToHot`, :class:`Probe`, :class:`Durable`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from graphkeep.checkpoint.records import CheckpointKeys
from graphkeep.port import Op


@dataclass(frozen=True, slots=True)
class ToHot:
    """A request of the :class:`HotPort` (a Redis script call), for the hot store."""

    request: Any


@dataclass(frozen=True, slots=True)
class Probe:
    """The durable store's :class:`~graphkeep.checkpoint.records.CheckpointKeys` of one
    checkpoint (and every newer one when ``newer``): :meth:`Prober.keys`."""

    thread_id: str
    ns: str
    checkpoint_id: str
    newer: bool


@dataclass(frozen=True, slots=True)
class Durable:
    """A call of the durable saver's method ``method`` (its ``a…`` twin on an async layer);
    ``list`` answers a list of its tuples."""

    method: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()


class HotPort(Protocol):
    """The hot store's side: a Redis mapping (``graphkeep.backends.redis.hot``)."""

    def setup(self) -> Op[None]: ...

    def fetch(
        self, thread_id: str, ns: str, checkpoint_id: str | None, ttl_ms: int
    ) -> Op[bytes | None]:
        """The cached entry of ``checkpoint_id`` (None: of the newest checkpoint cached in
        ``ns``), pushing the thread's expiry ``ttl_ms`` out; None when there is none."""
        ...

    def fill(
        self, thread_id: str, ns: str, checkpoint_id: str, entry: bytes, latest: bool, ttl_ms: int
    ) -> Op[None]:
        """Cache ``entry`` as ``checkpoint_id``'s (and, when ``latest``, as the newest of
        ``ns``: what ``fetch`` of no id answers), pushing the thread's expiry out."""
        ...

    def fetch_page(
        self, thread_id: str, ns: str, before: str | None, limit: int, ttl_ms: int
    ) -> Op[list[bytes] | None]:
        """The entries of a cached ``list`` page (newest first), pushing the thread's expiry
        out; None when the page, or one of its entries, is not cached."""
        ...

    def fill_page(
        self,
        thread_id: str,
        ns: str,
        before: str | None,
        limit: int,
        entries: list[tuple[str, bytes]],
        ttl_ms: int,
    ) -> Op[None]:
        """Cache a ``list`` page: ``(checkpoint id, entry)`` newest first."""
        ...

    def moved(self, thread_id: str, ns: str) -> Op[None]:
        """Forget which cached copy is the newest of ``ns`` (and its newest ``list`` pages):
        a checkpoint was written after them. Copies by id stay."""
        ...

    def evict(self, thread_id: str) -> Op[None]:
        """Drop everything cached of the thread."""
        ...

    def footprint(self, thread_id: str) -> Op[int]:
        """The bytes Redis uses for the thread's copies (0 when none)."""
        ...

    def count(self, counts: dict[str, int]) -> Op[None]:
        """Add ``counts`` (reads by outcome) to the totals every process shares."""
        ...

    def stats(self) -> Op[dict[str, int]]:
        """The shared totals of reads by outcome."""
        ...


class Prober(Protocol):
    """Answers :class:`Probe` for one durable saver: keys only, one request."""

    def keys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> list[CheckpointKeys]: ...

    async def akeys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> list[CheckpointKeys]: ...
