"""Reference saver for validating the conformance harness itself (test-only, never shipped).

`ReferenceSaver` is `InMemorySaver` plus what the contract asks of graphkeep and the in-memory
saver lacks: str thread ids with validation (raising the stand-in error classes below, which play
the role of `graphkeep.errors`), fresh normalized configs, globally ordered `list`, a lock for
thread safety, `delete_for_runs`, `copy_thread`, a DeltaChannel-aware `prune` and the
`get_next_version` scheme of docs/contract.md section 6.

`connect("memory://", key_prefix=...)` hands out savers that share one in-memory store per
key prefix, so "a new saver on the same URL and prefix" sees the same data, like a server.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

MAX_THREAD_ID_BYTES = 1024


class StandInGraphkeepError(Exception):
    """Stand-in for `graphkeep.errors.GraphkeepError`."""


class StandInInvalidThreadId(StandInGraphkeepError, ValueError):
    """Stand-in for `graphkeep.errors.InvalidThreadId`."""


class StandInLeaseLost(StandInGraphkeepError):
    """Stand-in for `graphkeep.errors.LeaseLost` (a fenced write refused)."""

    def __init__(self, thread_id: str, token: int, newer: int | None) -> None:
        self.thread_id, self.token, self.newer = thread_id, token, newer
        super().__init__(f"lease on {thread_id!r} lost: token {token}, newer {newer}")


#: thread id -> the fencing token this context carries (graphkeep.port.fence's role)
_CARRIED: ContextVar[dict[str, int]] = ContextVar("reference_fences", default={})  # noqa: B039


class ReferenceLease:
    """`saver.lock(thread_id)`: an in-memory fenced lease (tokens grow per thread)."""

    def __init__(self, store: _Store, thread_id: str, ttl: float, blocking: bool) -> None:
        self.store, self.thread_id, self.ttl, self.blocking = store, thread_id, ttl, blocking
        self.token = uuid4().hex
        self.fence: int | None = None

    def acquire(self) -> bool:
        while True:
            with self.store.lock:
                holder = self.store.leases.get(self.thread_id)
                now = time.monotonic()
                if holder is None or holder[1] <= now or holder[0] == self.token:
                    fence = self.store.fences.get(self.thread_id, 0) + 1
                    self.store.fences[self.thread_id] = fence
                    self.store.leases[self.thread_id] = (self.token, now + self.ttl)
                    self.fence = fence
                    self.carry()
                    return True
            if not self.blocking:
                raise StandInLockNotAcquired(f"thread {self.thread_id!r} is locked")
            time.sleep(0.01)

    def carry(self) -> None:
        assert self.fence is not None
        _CARRIED.set({**_CARRIED.get(), self.thread_id: self.fence})

    def release(self) -> bool:
        carried = dict(_CARRIED.get())
        carried.pop(self.thread_id, None)
        _CARRIED.set(carried)
        with self.store.lock:
            holder = self.store.leases.get(self.thread_id)
            if holder and holder[0] == self.token and holder[1] > time.monotonic():
                del self.store.leases[self.thread_id]
                return True
        return False

    async def aacquire(self) -> bool:
        return self.acquire()

    async def arelease(self) -> bool:
        return self.release()


class StandInLockNotAcquired(StandInGraphkeepError):
    """Stand-in for `graphkeep.errors.LockNotAcquired`."""


def normalize_thread_id(thread_id: object) -> str:
    """Return the stored form of a thread id (str) or raise `StandInInvalidThreadId`."""
    if isinstance(thread_id, bool) or not isinstance(thread_id, (str, int)):
        raise StandInInvalidThreadId(
            f"thread_id must be a str or int, got {type(thread_id).__name__}"
        )
    text = str(thread_id)
    if not text:
        raise StandInInvalidThreadId("thread_id must not be empty")
    if "\x00" in text:
        raise StandInInvalidThreadId("thread_id must not contain NUL characters")
    if len(text.encode("utf-8")) > MAX_THREAD_ID_BYTES:
        raise StandInInvalidThreadId(f"thread_id longer than {MAX_THREAD_ID_BYTES} bytes")
    return text


def _with_thread_id(config: RunnableConfig, *, default_ns: bool) -> RunnableConfig:
    configurable = dict(config.get("configurable") or {})
    configurable["thread_id"] = normalize_thread_id(configurable.get("thread_id"))
    if default_ns:
        configurable.setdefault("checkpoint_ns", "")
    return {**config, "configurable": configurable}


def _fresh_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


@dataclass
class _Store:
    """The three InMemorySaver dicts plus the lock that guards them."""

    storage: defaultdict[str, Any] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict))
    )
    writes: defaultdict[Any, Any] = field(default_factory=lambda: defaultdict(dict))
    blobs: dict[Any, Any] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: thread id -> (holder token, monotonic expiry) and its last fencing token
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)


_STORES: dict[tuple[str, str], _Store] = {}
_STORES_LOCK = threading.Lock()


def _store_for(url: str, key_prefix: str) -> _Store:
    with _STORES_LOCK:
        return _STORES.setdefault((url, key_prefix), _Store())


class ReferenceSaver(InMemorySaver):
    """InMemorySaver completed to the graphkeep contract; for harness validation only."""

    def __init__(self, *, serde: SerializerProtocol | None = None, store: _Store | None = None):
        super().__init__(serde=serde)
        store = store or _Store()
        self.storage = store.storage
        self.writes = store.writes
        self.blobs = store.blobs
        self._lock = store.lock
        self._store = store

    def lock(
        self, thread_id: Any, *, ttl: float = 30.0, blocking: bool = True, **_: Any
    ) -> ReferenceLease:
        return ReferenceLease(self._store, normalize_thread_id(thread_id), ttl, blocking)

    def _fenced(self, thread_id: str) -> None:
        """Refuse a write carrying a token older than the thread's newest (under the lock)."""
        token = _CARRIED.get().get(thread_id)
        newest = self._store.fences.get(thread_id, 0)
        if token is not None and newest > token:
            raise StandInLeaseLost(thread_id, token, newest)

    # -- contract methods that InMemorySaver has, with validation, locking, normalization --

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        config = _with_thread_id(config, default_ns=False)
        with self._lock:
            found = super().get_tuple(config)
        if found is None:
            return None
        conf = found.config["configurable"]
        fresh = _fresh_config(conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"])
        return found._replace(config=fresh)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is not None:
            config = _with_thread_id(config, default_ns=False)
        with self._lock:
            found = [*super().list(config, filter=filter, before=before)]
        found.sort(key=lambda t: t.config["configurable"]["checkpoint_id"], reverse=True)
        yield from found[:limit] if limit is not None else found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        config = _with_thread_id(config, default_ns=True)
        with self._lock:
            self._fenced(config["configurable"]["thread_id"])
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        config = _with_thread_id(config, default_ns=False)
        with self._lock:
            self._fenced(config["configurable"]["thread_id"])
            super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        thread_id = normalize_thread_id(thread_id)
        with self._lock:
            self._fenced(thread_id)
            super().delete_thread(thread_id)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = _with_thread_id(config, default_ns=False)
        with self._lock:
            return super().get_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the extended capabilities --

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        if not wanted:
            return
        with self._lock:
            for thread_id in list(self.storage):
                for ns, checkpoints in self.storage[thread_id].items():
                    for checkpoint_id, (_, metadata, _) in list(checkpoints.items()):
                        if self.serde.loads_typed(metadata).get("run_id") in wanted:
                            self._fenced(thread_id)
                            self._drop_checkpoint(thread_id, ns, checkpoint_id)
                self._collect_blobs(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source = normalize_thread_id(source_thread_id)
        target = normalize_thread_id(target_thread_id)
        with self._lock:
            self._fenced(target)
            if source not in self.storage:
                return
            for ns, checkpoints in self.storage[source].items():
                self.storage[target][ns].update(checkpoints)
            for (thread_id, ns, checkpoint_id), writes in list(self.writes.items()):
                if thread_id == source:
                    self.writes[(target, ns, checkpoint_id)] = dict(writes)
            for (thread_id, ns, channel, version), blob in list(self.blobs.items()):
                if thread_id == source:
                    self.blobs[(target, ns, channel, version)] = blob

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        for raw in thread_ids:
            thread_id = normalize_thread_id(raw)
            with self._lock:
                self._fenced(thread_id)
                if strategy == "delete":
                    super().delete_thread(thread_id)
                else:
                    self._keep_latest(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    # -- helpers (caller holds the lock) --

    def _keep_latest(self, thread_id: str) -> None:
        for ns, checkpoints in list(self.storage.get(thread_id, {}).items()):
            if not checkpoints:
                continue
            keep = self._head_chain(thread_id, ns)
            for checkpoint_id in [c for c in checkpoints if c not in keep]:
                self._drop_checkpoint(thread_id, ns, checkpoint_id)
            for checkpoint_id, (body, metadata, parent) in list(checkpoints.items()):
                if parent is not None and parent not in checkpoints:
                    checkpoints[checkpoint_id] = (body, metadata, None)
        self._collect_blobs(thread_id)

    def _head_chain(self, thread_id: str, ns: str) -> set[str]:
        """The head plus its ancestors back to a stored value for every value-less channel."""
        checkpoints = self.storage[thread_id][ns]
        head = max(checkpoints)
        keep = {head}
        versions = self._versions(thread_id, ns, head)
        missing = {ch for ch, v in versions.items() if not self._has_value(thread_id, ns, ch, v)}
        current = checkpoints[head][2]
        while missing and current is not None and current in checkpoints:
            keep.add(current)
            for ch, version in self._versions(thread_id, ns, current).items():
                if ch in missing and self._has_value(thread_id, ns, ch, version):
                    missing.discard(ch)
            current = checkpoints[current][2]
        return keep

    def _versions(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, Any]:
        body = self.storage[thread_id][ns][checkpoint_id][0]
        return dict(self.serde.loads_typed(body).get("channel_versions", {}))

    def _has_value(self, thread_id: str, ns: str, channel: str, version: Any) -> bool:
        blob = self.blobs.get((thread_id, ns, channel, version))
        return blob is not None and blob[0] != "empty"

    def _drop_checkpoint(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        self.storage[thread_id][ns].pop(checkpoint_id, None)
        self.writes.pop((thread_id, ns, checkpoint_id), None)

    def _collect_blobs(self, thread_id: str) -> None:
        """Drop the thread's blobs that no remaining checkpoint references."""
        referenced = {
            (thread_id, ns, ch, v)
            for ns, checkpoints in self.storage.get(thread_id, {}).items()
            for checkpoint_id in checkpoints
            for ch, v in self._versions(thread_id, ns, checkpoint_id).items()
        }
        for key in [k for k in self.blobs if k[0] == thread_id and k not in referenced]:
            del self.blobs[key]


@contextmanager
def connect(
    url: str,
    *,
    key_prefix: str = "",
    serde: SerializerProtocol | None = None,
    **_options: Any,
) -> Iterator[ReferenceSaver]:
    """Sync twin of `graphkeep.connect` for the reference set-up (`ttl`, `setup` are ignored)."""
    yield ReferenceSaver(serde=serde, store=_store_for(url, key_prefix))


@asynccontextmanager
async def aconnect(
    url: str,
    *,
    key_prefix: str = "",
    serde: SerializerProtocol | None = None,
    **_options: Any,
) -> AsyncIterator[ReferenceSaver]:
    """Async twin of `graphkeep.aconnect` for the reference set-up."""
    yield ReferenceSaver(serde=serde, store=_store_for(url, key_prefix))
