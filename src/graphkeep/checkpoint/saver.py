"""The checkpoint saver: the whole LangGraph contract, written once for every store.

Each public method of :class:`SaverBase` is a thin shell over an op — the write path
(:mod:`.put`), the read side (:mod:`.read`), thread maintenance (:mod:`.maintenance`),
``watch`` (:mod:`.watch`) — that validates input, builds records, asks the store through
the checkpoint port and turns the answer into LangGraph objects. :class:`SyncSaver` drives
those ops with a blocking executor, :class:`AsyncSaver` with an awaiting one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from graphkeep.checkpoint.exclusive import DEFAULT_TTL, Exclusive
from graphkeep.checkpoint.fallback import Fallback
from graphkeep.checkpoint.ids import (
    DEFAULT_MAX_ID_BYTES,
    checkpoint_config,
    configurable,
    next_version,
    normalize_thread_id,
)
from graphkeep.checkpoint.lists import ListSharer
from graphkeep.checkpoint.lock import ThreadLock
from graphkeep.checkpoint.maintenance import (
    copy_thread_op,
    delete_for_runs_op,
    delete_thread_op,
    prune_op,
)
from graphkeep.checkpoint.migrations import Schema, check_schema
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.put import put_op, put_writes_op
from graphkeep.checkpoint.read import delta_history_op, get_tuple_op, list_op, newest_page_op
from graphkeep.checkpoint.records import Typed
from graphkeep.checkpoint.sealed import SealedPort, sealed
from graphkeep.checkpoint.watch import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, watch_op
from graphkeep.errors import ConfigurationError
from graphkeep.port import (
    Op,
    Telemetry,
    adrive,
    adrive_iter,
    codec,
    drive,
    drive_iter,
    on_loop,
    running_loop,
    stream_in_thread,
    stream_on_loop,
    target_of,
)
from graphkeep.port.encryption import KeyRing, check_encryption
from graphkeep.port.loop import aiter_of
from graphkeep.port.scoped import ThreadScoped


def ttl_seconds(ttl: float | int | timedelta | None) -> float | None:
    """Normalise the ``ttl`` option (seconds or timedelta; None = keep forever)."""
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise ConfigurationError(f"ttl must be seconds or a timedelta, got {ttl!r}")
    if seconds <= 0:
        raise ConfigurationError(f"ttl must be positive, got {ttl!r}")
    return seconds


def thread_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take out of ``options`` what every backend's checkpoint port takes: ``key_prefix``,
    ``ttl`` (normalised by :func:`ttl_seconds`) and ``refresh_ttl_on_read``."""
    return {
        "key_prefix": options.pop("key_prefix", "graphkeep"),
        "ttl": ttl_seconds(options.pop("ttl", None)),
        "refresh_ttl_on_read": bool(options.pop("refresh_ttl_on_read", False)),
    }


class SaverBase(BaseCheckpointSaver[str]):
    """Contract logic over a :class:`~graphkeep.checkpoint.port.CheckpointPort`."""

    port: CheckpointPort

    def __init__(
        self,
        port: CheckpointPort,
        *,
        serde: Any = None,
        max_id_bytes: int = DEFAULT_MAX_ID_BYTES,
        share_lists: bool = True,
        telemetry: Any = None,
        execute: Any = None,
        schema_version: int | None = None,
        migrations: Mapping[int, Callable[[Any], None]] | None = None,
        encryption: KeyRing | None = None,
    ) -> None:
        super().__init__(serde=serde)
        #: the key ring every record is sealed with at its place (None: stored as serialized);
        #: see :mod:`graphkeep.checkpoint.sealed`
        self.encryption = check_encryption(encryption)
        port = sealed(port, self.encryption)
        self.port = port
        #: ``schema_version`` and ``migrations`` checked (None: unversioned); see
        #: :mod:`graphkeep.checkpoint.migrations`
        self.state_schema: Schema | None = check_schema(schema_version, migrations)
        #: spans and metrics of every call (``telemetry=False``: none); see
        #: :mod:`graphkeep.port.telemetry`
        self.telemetry = Telemetry(telemetry, target_of(execute))
        self.max_id_bytes = max_id_bytes
        if not isinstance(share_lists, bool):
            raise ConfigurationError(f"share_lists must be True or False, got {share_lists!r}")
        #: store list values as shared element records (see :mod:`.lists`)
        self.share_lists = share_lists
        #: payloads are zlib-compressed here unless the store compresses them itself
        self.squeeze: Callable[[Typed, int], Typed] = squeezer(port)
        self.lists = ListSharer(self.serde, self.squeeze)
        #: records other products keep per thread, deleted with it (the effect ledger's)
        self.thread_scoped: tuple[ThreadScoped, ...] = ()
        #: the effect ledger on this saver's connection, serializer and key prefix
        #: (:mod:`graphkeep.effects`), set by the backend; None where there is none
        self.effects: Any = None
        #: the read-through mover of ``fallback=`` (:mod:`.fallback`); None without one
        self.fallback: Fallback | None = None

    def with_effects(self, port: ThreadScoped, ledger: Any) -> None:
        """Give this saver an effect ledger (``saver.effects``) whose records (``port``'s)
        are set up with the saver's schema and deleted with their thread."""
        self.thread_scoped = (*self.thread_scoped, port)
        ledger.telemetry = self.telemetry
        self.effects = ledger

    def _setup(self) -> Op[None]:
        yield from self.port.setup()
        for scoped in self.thread_scoped:
            yield from scoped.setup()

    # -- identifiers ---------------------------------------------------------------

    def check_thread_id(self, thread_id: Any) -> str:
        """``thread_id`` normalised as every method of this saver takes it (a str of at most
        ``max_id_bytes``), or :class:`~graphkeep.errors.InvalidInput`."""
        return normalize_thread_id(thread_id, max_bytes=self.max_id_bytes)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    def lock(
        self,
        thread_id: Any,
        *,
        ttl: float = 30.0,
        blocking: bool = True,
        timeout: float | None = None,
    ) -> ThreadLock:
        """A lease on ``thread_id`` (``with`` / ``async with``); see :mod:`.lock`."""
        return ThreadLock(self, thread_id, ttl=ttl, blocking=blocking, timeout=timeout)

    def exclusive(
        self,
        graph: Any,
        *,
        timeout: float = 30.0,
        on_busy: str = "wait",
        ttl: float = DEFAULT_TTL,
    ) -> Exclusive:
        """``graph`` whose every run of a thread holds the thread's fenced lease, from before
        its first read to its last write; see :mod:`.exclusive`."""
        return Exclusive(self, graph, timeout=timeout, on_busy=on_busy, ttl=ttl)

    def load_op(self, thread_id: str, ns: str, checkpoint_id: str) -> Op[CheckpointTuple | None]:
        """The op loading the checkpoint at ``(thread_id, ns, checkpoint_id)`` as ``get_tuple``
        does (None when it is gone); ``watch`` loads each commit it sees with it."""
        return get_tuple_op(self, checkpoint_config(thread_id, ns, checkpoint_id))

    def newest_op(
        self, thread_id: str, ns: str, limit: int, before: str | None = None
    ) -> Op[list[CheckpointTuple]]:
        """The op loading the thread's newest ``limit`` checkpoints in ``ns`` (with ids below
        ``before``), newest first, in one ``list`` page: ``watch`` reads a burst with it.
        A page may hold fewer (a store's page ended); the caller loads what is missing."""
        return newest_page_op(self, thread_id, ns, limit, before)

    # -- the public API: every method is one contract op, run sync or async ---------

    def drive(self, op: Op[Any]) -> Any:
        """Run ``op`` (an op over :attr:`port`, such as the thread lease's) to its result the
        way this saver runs its own methods: blocking (an async saver hops onto its loop)."""
        return self._call(op)

    async def adrive(self, op: Op[Any]) -> Any:
        """:meth:`drive` for async callers."""
        return await self._acall(op)

    def drive_once(self, op: Op[Any]) -> Any:
        """:meth:`drive` for an op of one small request the caller waits on at the end of its
        work (a lease's release): sent without waiting for a slot of the pool or the retry
        loop on the happy path, the full way after any failure (see the executor's ``once``)."""
        return self._call(op)

    async def adrive_once(self, op: Op[Any]) -> Any:
        """:meth:`drive_once` for async callers."""
        return await self._acall(op)

    def observed(
        self, name: str, op: Op[Any], thread_id: Any = None, *, read: bool = False
    ) -> Op[Any]:
        """``op`` as one call ``checkpoint.<name>`` of this saver's telemetry (a span, its
        metrics; ``read``: a failure to decode counts in ``graphkeep.resume.failures``)."""
        return self.telemetry.observe(f"checkpoint.{name}", op, thread_id=thread_id, read=read)

    def _call(self, op: Op[Any]) -> Any:
        raise NotImplementedError

    async def _acall(self, op: Op[Any]) -> Any:
        raise NotImplementedError

    def _iterate(self, op: Op[None]) -> Iterator[Any]:
        raise NotImplementedError

    def _aiterate(self, op: Op[None]) -> AsyncIterator[Any]:
        raise NotImplementedError

    def setup(self) -> None:
        """Create the store's schema (idempotent); a no-op where there is none."""
        self._call(self.observed("setup", self._setup()))

    async def asetup(self) -> None:
        await self._acall(self.observed("setup", self._setup()))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        op = self.observed("get_tuple", get_tuple_op(self, config), _thread(config), read=True)
        return self._call(op)  # type: ignore[no-any-return]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        op = self.observed("get_tuple", get_tuple_op(self, config), _thread(config), read=True)
        return await self._acall(op)  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        op = list_op(self, config, filter, before, limit)
        return self._iterate(self.observed("list", op, _thread(config), read=True))

    def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        op = list_op(self, config, filter, before, limit)
        return self._aiterate(self.observed("list", op, _thread(config), read=True))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        op = put_op(self, config, checkpoint, metadata, new_versions)
        return self._call(self.observed("put", op, _thread(config)))  # type: ignore[no-any-return]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        op = put_op(self, config, checkpoint, metadata, new_versions)
        return await self._acall(self.observed("put", op, _thread(config)))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        op = put_writes_op(self, config, writes, task_id, task_path)
        self._call(self.observed("put_writes", op, _thread(config)))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        op = put_writes_op(self, config, writes, task_id, task_path)
        await self._acall(self.observed("put_writes", op, _thread(config)))

    def delete_thread(self, thread_id: str) -> None:
        op = delete_thread_op(self, thread_id)
        self._call(self.observed("delete_thread", op, thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        op = delete_thread_op(self, thread_id)
        await self._acall(self.observed("delete_thread", op, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._call(self.observed("delete_for_runs", delete_for_runs_op(self, run_ids)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._acall(self.observed("delete_for_runs", delete_for_runs_op(self, run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        op = copy_thread_op(self, source_thread_id, target_thread_id)
        self._call(self.observed("copy_thread", op, source_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        op = copy_thread_op(self, source_thread_id, target_thread_id)
        await self._acall(self.observed("copy_thread", op, source_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._call(self.observed("prune", prune_op(self, thread_ids, strategy)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._acall(self.observed("prune", prune_op(self, thread_ids, strategy)))

    def watch(
        self,
        thread_id: str,
        *,
        after: str | None = None,
        checkpoint_ns: str | None = "",
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
    ) -> Iterator[CheckpointTuple]:
        """Each checkpoint committed to the thread from now on (or after ``after``), once,
        in commit order, by any process; ``checkpoint_ns=None`` watches every namespace.

        Ends after ``timeout`` seconds without a new checkpoint (None: never); leaving
        the loop early releases everything. ``poll_interval`` / ``max_poll_interval``
        pace stores without a native feed (see :mod:`graphkeep.checkpoint.watch`).
        """
        op = watch_op(
            self,
            thread_id,
            after=after,
            checkpoint_ns=checkpoint_ns,
            timeout=timeout,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
        )
        return self._stream(self.observed("watch", op, thread_id, read=True))

    def awatch(
        self,
        thread_id: str,
        *,
        after: str | None = None,
        checkpoint_ns: str | None = "",
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
    ) -> AsyncIterator[CheckpointTuple]:
        """The async iterator of :meth:`watch`."""
        op = watch_op(
            self,
            thread_id,
            after=after,
            checkpoint_ns=checkpoint_ns,
            timeout=timeout,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
        )
        return self._astream(self.observed("watch", op, thread_id, read=True))

    def _stream(self, op: Op[None]) -> Iterator[Any]:
        raise NotImplementedError

    def _astream(self, op: Op[None]) -> AsyncIterator[Any]:
        raise NotImplementedError

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        op = self.observed(
            "get_delta_channel_history",
            delta_history_op(self, config, channels),
            _thread(config),
            read=True,
        )
        return self._call(op)  # type: ignore[no-any-return]

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        op = self.observed(
            "get_delta_channel_history",
            delta_history_op(self, config, channels),
            _thread(config),
            read=True,
        )
        return await self._acall(op)  # type: ignore[no-any-return]


def _as_is(value: Typed, min_bytes: int) -> Typed:
    return value


def squeezer(port: Any) -> Callable[[Typed, int], Typed]:
    """How a saver compresses each payload before ``port`` (perhaps sealed) stores it.

    A port that does not compress gets payloads zlib-compressed here
    (:func:`~graphkeep.port.codec.squeeze`); one that does (``compresses``) gets them as
    they are. Sealed, such a port would be handed ciphertext, which does not compress: the
    payloads are compressed here by the port's own rule (its ``compression``: level and
    smallest payload, None when its compression is off) before they are sealed, so
    encryption keeps what compression saves on every backend."""
    inner = port.inner if isinstance(port, SealedPort) else port
    if not inner.compresses:
        return codec.squeeze
    rule = inner.compression if inner is not port else None
    if rule is None:
        return _as_is
    level, min_bytes = rule

    def squeeze(value: Typed, _: int) -> Typed:
        return codec.squeeze(value, min_bytes, level)

    return squeeze


def _thread(config: RunnableConfig | Mapping[str, Any] | None) -> Any:
    """The thread id a call names (as given: telemetry records it only when opted in)."""
    return configurable(config).get("thread_id")


class SyncSaver(SaverBase):
    """A saver on a blocking client; async callers run it in a worker thread."""

    def __init__(self, port: CheckpointPort, execute: Callable[[Any], Any], **kwargs: Any) -> None:
        super().__init__(port, execute=execute, **kwargs)
        self._execute = execute
        self._once: Callable[[Any], Any] = getattr(execute, "once", execute)

    def _call(self, op: Op[Any]) -> Any:
        return drive(op, self._execute)

    def drive_once(self, op: Op[Any]) -> Any:
        return drive(op, self._once)

    async def adrive_once(self, op: Op[Any]) -> Any:
        return await asyncio.to_thread(drive, op, self._once)

    async def _acall(self, op: Op[Any]) -> Any:
        return await asyncio.to_thread(drive, op, self._execute)

    def _iterate(self, op: Op[None]) -> Iterator[Any]:
        return drive_iter(op, self._execute)

    async def _aiterate(self, op: Op[None]) -> AsyncIterator[Any]:
        for item in await asyncio.to_thread(lambda: list(drive_iter(op, self._execute))):
            yield item

    def _stream(self, op: Op[None]) -> Iterator[Any]:
        return drive_iter(op, self._execute)

    def _astream(self, op: Op[None]) -> AsyncIterator[Any]:
        return stream_in_thread(drive_iter(op, self._execute))


class AsyncSaver(SaverBase):
    """A saver on an asyncio client; sync callers hop onto the saver's event loop.

    Sync methods must be called from another thread than the loop's (LangGraph's
    sync ``invoke`` on a worker thread, say); on the loop itself they would
    deadlock, so they raise :class:`asyncio.InvalidStateError` instead.
    """

    def __init__(self, port: CheckpointPort, aexecute: Callable[[Any], Any], **kwargs: Any) -> None:
        super().__init__(port, execute=aexecute, **kwargs)
        self._aexecute = aexecute
        self._aonce: Callable[[Any], Any] = getattr(aexecute, "once", aexecute)
        self.loop = running_loop()

    async def _acall(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aexecute)

    def drive_once(self, op: Op[Any]) -> Any:
        return self._on_loop(self.adrive_once(op))

    async def adrive_once(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aonce)

    def _aiterate(self, op: Op[None]) -> AsyncIterator[Any]:
        return adrive_iter(op, self._aexecute)

    def _call(self, op: Op[Any]) -> Any:
        return self._on_loop(self._acall(op))

    def _iterate(self, op: Op[None]) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [item async for item in adrive_iter(op, self._aexecute)]

        yield from self._on_loop(collect())

    def _stream(self, op: Op[None]) -> Iterator[Any]:
        return stream_on_loop(adrive_iter(op, self._aexecute), self._on_loop)

    def _astream(self, op: Op[None]) -> AsyncIterator[Any]:
        return adrive_iter(op, self._aexecute)

    async def aget_iter(self, config: RunnableConfig) -> AsyncIterator[CheckpointTuple]:
        """LangGraph Agent Server's read of a thread's state: ``config``'s checkpoint (the
        latest without a ``checkpoint_id``), read now and handed back as an async iterator
        of zero or one tuple, as the server's own savers answer it."""
        return aiter_of(await self.aget_tuple(config))

    def _on_loop(self, coro: Any) -> Any:
        return on_loop(
            self.loop,
            coro,
            "saver",
            "the async methods (ainvoke, aget_state, ...) or a sync saver from graphkeep.connect()",
        )
