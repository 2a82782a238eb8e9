"""TTL bookkeeping: what this process knows about item expiries, to refresh only what is due.

A put must push out the expiry of everything the new checkpoint needs (values of unchanged
channels, DeltaChannel ancestors and their writes and seed values, with their chunks). Reading
all that on every put would cost more than the put, so the store remembers, per process and
bounded (LRU), the expiry and chunk keys of items it wrote or read. Unknown items are looked
up once; an item is rewritten only when its expiry would fall before the new head's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from graphkeep.checkpoint.records import Summary

KNOWN_CAPACITY = 20_000


@dataclass(slots=True)
class KnownItem:
    """An item's expiry as this process last wrote or read it, and its chunk sort keys."""

    exp: int | None
    chunks: tuple[str, ...] = ()


@dataclass(slots=True)
class KnownCheckpoint:
    summary: Summary
    #: the head and every write of the checkpoint, by sort key
    items: dict[str, KnownItem] = field(default_factory=dict)


class Known:
    """Bounded LRU of item expiries (TTL refresh bookkeeping); thread-safe."""

    def __init__(self, capacity: int = KNOWN_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._blobs: OrderedDict[tuple[str, str], KnownItem] = OrderedDict()
        self._checkpoints: OrderedDict[tuple[str, str, str], KnownCheckpoint] = OrderedDict()
        self._early_writes: OrderedDict[tuple[str, str, str], dict[str, KnownItem]] = OrderedDict()

    def blob(self, pk: str, sk: str) -> KnownItem | None:
        """The blob's known state; ``None`` when unknown (absent blobs have exp None)."""
        with self._lock:
            info = self._blobs.get((pk, sk))
            if info is not None:
                self._blobs.move_to_end((pk, sk))
            return info

    def set_blob(self, pk: str, sk: str, info: KnownItem | None) -> None:
        with self._lock:
            self._blobs[(pk, sk)] = info if info is not None else KnownItem(None)
            self._blobs.move_to_end((pk, sk))
            _trim(self._blobs, self.capacity)

    def checkpoint(self, pk: str, ns: str, checkpoint_id: str) -> KnownCheckpoint | None:
        with self._lock:
            found = self._checkpoints.get((pk, ns, checkpoint_id))
            if found is not None:
                self._checkpoints.move_to_end((pk, ns, checkpoint_id))
            return found

    def set_checkpoint(self, pk: str, ns: str, known: KnownCheckpoint) -> None:
        ident = (pk, ns, known.summary.checkpoint_id)
        with self._lock:
            early = self._early_writes.pop(ident, None)
            if early:
                for sk, info in early.items():
                    known.items.setdefault(sk, info)
            self._checkpoints[ident] = known
            self._checkpoints.move_to_end(ident)
            _trim(self._checkpoints, self.capacity)

    def add_writes(
        self, pk: str, ns: str, checkpoint_id: str, writes: dict[str, KnownItem]
    ) -> None:
        ident = (pk, ns, checkpoint_id)
        with self._lock:
            found = self._checkpoints.get(ident)
            if found is not None:
                found.items.update(writes)
            else:  # writes before their checkpoint: keep until the put
                self._early_writes.setdefault(ident, {}).update(writes)
                _trim(self._early_writes, self.capacity)

    def forget_thread(self, pk: str) -> None:
        with self._lock:
            for blob in [k for k in self._blobs if k[0] == pk]:
                del self._blobs[blob]
            for ident in [k for k in self._checkpoints if k[0] == pk]:
                del self._checkpoints[ident]
            for ident in [k for k in self._early_writes if k[0] == pk]:
                del self._early_writes[ident]


def _trim(mapping: OrderedDict[Any, Any], capacity: int) -> None:
    while len(mapping) > capacity:
        mapping.popitem(last=False)


@dataclass(slots=True)
class Refresh:
    """An item (with its chunks) whose expiry a write pushes out."""

    sk: str
    info: KnownItem
    vis: bool = False
