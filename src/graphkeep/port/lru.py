"""A bounded, thread-safe LRU map whose keys start with a thread (or partition) id.

The stores keep small per-process memories of what they wrote or read (MongoDB's
checkpoint heads, DynamoDB's list manifests); a delete of a thread drops its entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=tuple[Hashable, ...])
V = TypeVar("V")
D = TypeVar("D")


class ThreadLRU(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: K) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: K, default: D | None = None) -> V | D | None:
        """The value (now the most recently used), or ``default`` when absent."""
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def drop_thread(self, thread: object) -> None:
        """Forget every entry whose key starts with ``thread``."""
        with self._lock:
            for key in [k for k in self._items if k[0] == thread]:
                del self._items[key]
