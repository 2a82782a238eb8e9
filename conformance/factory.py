"""How the matrix gets savers for a set-up: connectors, reachability probe, per-case factories.

A `Connector` wraps `graphkeep.connect`/`aconnect` (or the reference saver's twins for a
`memory://` URL, via `CONNECTOR_HOOKS`). A `SaverFactory` binds a connector to one set-up, one
mode ("sync" or "async") and a fresh `key_prefix`, so every spec run has its own namespace in a
shared server. `SaverFactory.open()` yields an `Api`: the saver methods behind one synchronous
call shape, served by the sync methods in "sync" mode and by the `a*` methods on a private event
loop in "async" mode. That lets each spec case be written once and run both ways.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs, urlsplit
from uuid import uuid4

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from conformance.cleanup import made
from conformance.setups import Setup

T = TypeVar("T")
Mode = Literal["sync", "async"]
SYNC: tuple[Mode, ...] = ("sync",)
BOTH: tuple[Mode, ...] = ("sync", "async")
Saver = BaseCheckpointSaver[Any]
SERVICES_HINT = "start the project's local services with `./dev services up`"
SRC_DIR = Path(__file__).resolve().parent.parent / "src"


class BackendNotReady(Exception):
    """The graphkeep package (or its connect API) does not exist yet: skip, don't fail."""


class ServiceUnavailable(Exception):
    """The set-up's server does not answer: a failure, with a hint to start the services."""


@dataclass(frozen=True)
class Connector:
    connect: Callable[..., AbstractContextManager[Saver]]
    aconnect: Callable[..., AbstractAsyncContextManager[Saver]]
    errors: Callable[[], tuple[type[Exception], type[Exception]]]
    """Returns (InvalidThreadId, GraphkeepError) of this implementation."""
    lease_errors: Callable[[], tuple[type[Exception], type[Exception]]]
    """Returns (LeaseLost, LockNotAcquired) of this implementation."""


def _reference_connector(_scheme: str) -> Connector:
    from conformance import reference

    def errors() -> tuple[type[Exception], type[Exception]]:
        return reference.StandInInvalidThreadId, reference.StandInGraphkeepError

    def lease_errors() -> tuple[type[Exception], type[Exception]]:
        return reference.StandInLeaseLost, reference.StandInLockNotAcquired

    return Connector(reference.connect, reference.aconnect, errors, lease_errors)


def _import_from_source_tree(cause: ModuleNotFoundError) -> ModuleType:
    if not (SRC_DIR / "graphkeep" / "__init__.py").is_file():
        raise BackendNotReady(
            "the graphkeep package does not exist yet (no src/graphkeep/__init__.py)"
        ) from cause
    sys.path.insert(0, str(SRC_DIR))  # not installed: use the source tree
    importlib.invalidate_caches()
    return importlib.import_module("graphkeep")


def import_graphkeep() -> ModuleType:
    try:
        module = importlib.import_module("graphkeep")
    except ModuleNotFoundError as exc:
        if exc.name != "graphkeep":
            raise  # graphkeep exists but is broken: a real failure
        module = _import_from_source_tree(exc)
    missing = [name for name in ("connect", "aconnect") if not hasattr(module, name)]
    if missing:
        raise BackendNotReady(f"graphkeep has no {' / '.join(missing)} yet")
    return module


def _graphkeep_errors() -> tuple[type[Exception], type[Exception]]:
    errors = importlib.import_module("graphkeep.errors")
    return errors.InvalidThreadId, errors.GraphkeepError


def _graphkeep_lease_errors() -> tuple[type[Exception], type[Exception]]:
    errors = importlib.import_module("graphkeep.errors")
    return errors.LeaseLost, errors.LockNotAcquired


def _graphkeep_connector(scheme: str) -> Connector:
    module = import_graphkeep()
    backends = getattr(module, "BACKENDS", None)  # scheme -> backend, where graphkeep says
    if backends is not None and scheme not in backends:
        raise BackendNotReady(f"graphkeep has no {scheme}:// backend yet")
    return Connector(module.connect, module.aconnect, _graphkeep_errors, _graphkeep_lease_errors)


# URL scheme -> connector; everything else goes through graphkeep.connect/aconnect.
CONNECTOR_HOOKS: dict[str, Callable[[str], Connector]] = {"memory": _reference_connector}


def connector_for(setup: Setup) -> Connector:
    """The connector for a set-up; raises BackendNotReady while its backend does not exist."""
    scheme = setup.url.split("://", 1)[0]
    return CONNECTOR_HOOKS.get(scheme, _graphkeep_connector)(scheme)


# -- reachability ---------------------------------------------------------------------------

_DEFAULT_PORTS = {
    **dict.fromkeys(("redis", "rediss", "redis+cluster", "rediss+cluster"), 6379),
    "mongodb": 27017,
    "http": 80,
    "https": 443,
}
_PROBED: dict[str, str | None] = {}


def _endpoint(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    if parts.scheme == "dynamodb":
        endpoints = parse_qs(parts.query).get("endpoint_url")
        return _endpoint(endpoints[0]) if endpoints else None
    if parts.scheme not in _DEFAULT_PORTS:
        return None
    first = parts.netloc.rsplit("@", 1)[-1].split(",")[0]
    host, _, port = first.rpartition(":") if ":" in first else (first, "", "")
    return host.strip("[]") or "127.0.0.1", int(port) if port else _DEFAULT_PORTS[parts.scheme]


def _probe_message(setup: Setup) -> str | None:
    endpoint = _endpoint(setup.url)
    if endpoint is None:
        return None
    try:
        socket.create_connection(endpoint, timeout=3).close()
    except OSError as exc:
        host, port = endpoint
        return (
            f"set-up {setup.name!r}: nothing answers at {host}:{port} ({exc}); "
            f"{SERVICES_HINT} (URL {setup.url})"
        )
    return None


def ensure_reachable(setup: Setup) -> None:
    """Raise ServiceUnavailable when the set-up's server is down (result cached per URL)."""
    if setup.url not in _PROBED:
        _PROBED[setup.url] = _probe_message(setup)
    message = _PROBED[setup.url]
    if message is not None:
        raise ServiceUnavailable(message)


# -- the call shape spec cases use -----------------------------------------------------------


class EventLoop:
    """A private event loop driven from synchronous code (one per async-mode saver)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, awaitable: Awaitable[T]) -> T:
        return self._loop.run_until_complete(awaitable)

    @contextmanager
    def enter(self, manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
        value = self.run(manager.__aenter__())
        try:
            yield value
        except BaseException as exc:
            self.run(manager.__aexit__(type(exc), exc, exc.__traceback__))
            raise
        else:
            self.run(manager.__aexit__(None, None, None))

    def close(self) -> None:
        self.run(self._loop.shutdown_asyncgens())
        self._loop.close()


class Api(ABC):
    """Saver operations with one synchronous call shape; `list` returns a list."""

    mode: Mode

    def __init__(self, saver: Saver) -> None:
        self.saver = saver

    def next_version(self, current: Any) -> Any:
        return self.saver.get_next_version(current, None)

    def lease(self, thread_id: Any, ttl: float) -> Lease:
        """The thread's lease (``saver.lock``, not waiting), taken and released in this mode."""
        return Lease(self, self.saver.lock(thread_id, ttl=ttl, blocking=False))

    @abstractmethod
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig: ...

    @abstractmethod
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None: ...

    @abstractmethod
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    @abstractmethod
    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]: ...

    @abstractmethod
    def delete_thread(self, thread_id: Any) -> None: ...

    @abstractmethod
    def delete_for_runs(self, run_ids: Sequence[str]) -> None: ...

    @abstractmethod
    def copy_thread(self, source: Any, target: Any) -> None: ...

    @abstractmethod
    def prune(self, thread_ids: Sequence[Any], *, strategy: str = "keep_latest") -> None: ...

    @abstractmethod
    def history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]: ...


class Lease:
    """A thread's lease driven in its Api's mode. Taking it carries its fencing token with
    the case's later calls (each an async-mode task copies the case's context); ``carry``
    makes the case act as this holder again after another holder's calls."""

    def __init__(self, api: Api, lock: Any) -> None:
        self.api, self.lock = api, lock

    @property
    def fence(self) -> int:
        return int(self.lock.fence)

    def acquire(self) -> None:
        if isinstance(self.api, AsyncApi):
            self.api.run(self.lock.aacquire())
        else:
            self.lock.acquire()
        self.lock.carry()

    def carry(self) -> None:
        self.lock.carry()

    def release(self) -> bool:
        if isinstance(self.api, AsyncApi):
            released = bool(self.api.run(self.lock.arelease()))
        else:
            released = bool(self.lock.release())
        return released


class SyncApi(Api):
    mode: Mode = "sync"

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.saver.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.saver.put_writes(config, writes, task_id, task_path)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]:
        return [*self.saver.list(config, filter=filter, before=before, limit=limit)]

    def delete_thread(self, thread_id: Any) -> None:
        self.saver.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(run_ids)

    def copy_thread(self, source: Any, target: Any) -> None:
        self.saver.copy_thread(source, target)

    def prune(self, thread_ids: Sequence[Any], *, strategy: str = "keep_latest") -> None:
        self.saver.prune(thread_ids, strategy=strategy)

    def history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.saver.get_delta_channel_history(config=config, channels=channels)


async def _collect(items: AsyncIterator[T]) -> list[T]:
    return [item async for item in items]


class AsyncApi(Api):
    mode: Mode = "async"

    def __init__(self, saver: Saver, loop: EventLoop) -> None:
        super().__init__(saver)
        self.loop = loop

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run(awaitable)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.run(self.saver.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.run(self.saver.aput_writes(config, writes, task_id, task_path))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.run(self.saver.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]:
        items = self.saver.alist(config, filter=filter, before=before, limit=limit)
        return self.run(_collect(items))

    def delete_thread(self, thread_id: Any) -> None:
        self.run(self.saver.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.run(self.saver.adelete_for_runs(run_ids))

    def copy_thread(self, source: Any, target: Any) -> None:
        self.run(self.saver.acopy_thread(source, target))

    def prune(self, thread_ids: Sequence[Any], *, strategy: str = "keep_latest") -> None:
        self.run(self.saver.aprune(thread_ids, strategy=strategy))

    def history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.run(self.saver.aget_delta_channel_history(config=config, channels=channels))


def new_key_prefix() -> str:
    return made(f"gkt-{uuid4().hex[:10]}")


@dataclass
class SaverFactory:
    """Savers for one spec run: one set-up, one mode, one fresh key prefix."""

    setup: Setup
    connector: Connector
    mode: Mode
    key_prefix: str = field(default_factory=new_key_prefix)

    def connect(self, **options: Any) -> AbstractContextManager[Saver]:
        options = {**self.setup.options, **options}
        return self.connector.connect(self.setup.url, key_prefix=self.key_prefix, **options)

    def aconnect(self, **options: Any) -> AbstractAsyncContextManager[Saver]:
        options = {**self.setup.options, **options}
        return self.connector.aconnect(self.setup.url, key_prefix=self.key_prefix, **options)

    @contextmanager
    def open(self, **options: Any) -> Iterator[Api]:
        """A new saver instance (same URL and prefix) behind the `Api` of this mode."""
        if self.mode == "sync":
            with self.connect(**options) as saver:
                yield SyncApi(saver)
            return
        loop = EventLoop()
        try:
            with loop.enter(self.aconnect(**options)) as saver:
                yield AsyncApi(saver, loop)
        finally:
            loop.close()

    def errors(self) -> tuple[type[Exception], type[Exception]]:
        """(InvalidThreadId, GraphkeepError) of the implementation under test."""
        return self.connector.errors()
