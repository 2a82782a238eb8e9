"""The checkpoint saver: the whole LangGraph contract, written once for every store.

Each public method is a thin shell over a generator (``_put``, ``_get_tuple``…)
that validates input, builds records, asks the store through the checkpoint port and
turns the answer into LangGraph objects. :class:`SyncSaver` drives those
generators with a blocking executor, :class:`AsyncSaver` with an awaiting one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_metadata,
    writes_sort_key,
)

from graphkeep.checkpoint.check import plan_problems
from graphkeep.checkpoint.filters import check_filter, matches
from graphkeep.checkpoint.ids import (
    DEFAULT_MAX_ID_BYTES,
    check_name,
    checkpoint_config,
    next_version,
    normalize_checkpoint_id,
    normalize_namespace,
    normalize_thread_id,
    version_key,
)
from graphkeep.checkpoint.lists import (
    ELEMENT_CHANNEL,
    ListSharer,
    SharedList,
    element_blob_keys,
    is_manifest,
    load_value,
    rebuild,
    where,
)
from graphkeep.checkpoint.lock import ThreadLock
from graphkeep.checkpoint.migrations import (
    SCHEMA_VERSION_KEY,
    Alias,
    Schema,
    check_schema,
    history_upgrade,
)
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import (
    BlobRecord,
    CheckpointRecord,
    Inventory,
    ListQuery,
    Loaded,
    Typed,
    WriteRecord,
)
from graphkeep.checkpoint.walk import keep_latest
from graphkeep.checkpoint.watch import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, watch_op
from graphkeep.errors import (
    UNDECODABLE,
    ConfigurationError,
    CorruptData,
    InvalidInput,
    Place,
    UnsafePrune,
)
from graphkeep.port import (
    Emit,
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
from graphkeep.port.scoped import ThreadScoped

LIST_PAGE_SIZE = 100
PRUNE_STRATEGIES = ("keep_latest", "delete")


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
    ) -> None:
        super().__init__(serde=serde)
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
        self.squeeze: Callable[[Typed, int], Typed] = _as_is if port.compresses else codec.squeeze
        self.lists = ListSharer(self.serde, self.squeeze)
        #: records other products keep per thread, deleted with it (the effect ledger's)
        self.thread_scoped: tuple[ThreadScoped, ...] = ()
        #: the effect ledger on this saver's connection, serializer and key prefix
        #: (:mod:`graphkeep.effects`), set by the backend; None where there is none
        self.effects: Any = None

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

    def _delete_scoped(self, thread_id: str) -> Op[None]:
        for scoped in self.thread_scoped:
            yield from scoped.clear(thread_id)

    # -- identifiers ---------------------------------------------------------------

    def _address(self, config: RunnableConfig | None) -> tuple[str, str, str | None]:
        conf = _configurable(config)
        thread_id = normalize_thread_id(conf.get("thread_id"), max_bytes=self.max_id_bytes)
        ns = normalize_namespace(conf.get("checkpoint_ns"), max_bytes=self.max_id_bytes)
        checkpoint_id = normalize_checkpoint_id(
            conf.get("checkpoint_id"), max_bytes=self.max_id_bytes
        )
        return thread_id, ns, checkpoint_id

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

    # -- put -----------------------------------------------------------------------

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op[RunnableConfig]:
        thread_id, ns, parent_id = self._address(config)
        checkpoint_id = normalize_checkpoint_id(checkpoint.get("id"), max_bytes=self.max_id_bytes)
        if checkpoint_id is None:
            raise InvalidInput("checkpoint['id'] must be a non-empty string")
        values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
        versions = {
            _channel(ch): version_key(v)
            for ch, v in (checkpoint.get("channel_versions") or {}).items()
        }
        merged = get_checkpoint_metadata(config, metadata)
        if self.state_schema is not None:
            merged[SCHEMA_VERSION_KEY] = self.state_schema.version  # type: ignore[literal-required]
        counters = merged.get("counters_since_delta_snapshot") or {}
        blobs: list[BlobRecord] = []
        shared: list[SharedList] = []
        for ch, v in new_versions.items():
            if ch not in values:
                continue
            what = f"channel {ch!r}"
            # DeltaChannel snapshots keep the plain path: their history is the writes
            listed = (
                self.lists.share(thread_id, ns, ch, values[ch], what)
                if self.share_lists and ch not in counters
                else None
            )
            if listed is None:
                blobs.append(
                    BlobRecord(
                        ch,
                        version_key(v),
                        self.squeeze(
                            codec.dump(self.serde, values[ch], what), codec.COMPRESS_MIN_BYTES
                        ),
                    )
                )
            else:
                shared.append(listed)
                blobs.append(BlobRecord(ch, version_key(v), listed.manifest))
        present = [ch for ch in values if ch in versions]
        needs = [ch for ch in counters if ch in versions and ch not in values]
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        run_id = merged.get("run_id")
        record = CheckpointRecord(
            thread_id=thread_id,
            ns=ns,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            versions=versions,
            present=present,
            needs_history=needs,
            run_id=str(run_id) if run_id is not None else None,
            checkpoint=self.squeeze(
                codec.dump(self.serde, body, "the checkpoint"), codec.COMPRESS_MIN_BYTES
            ),
            metadata=self.squeeze(
                codec.dump(self.serde, merged, "checkpoint metadata"), codec.COMPRESS_MIN_BYTES
            ),
            metadata_doc=codec.plain(merged),
        )
        # elements first: a store that writes in order never names a missing one
        elements = [e for listed in shared for e in listed.elements]
        written = elements + blobs
        if self.telemetry.active():
            self.telemetry.put_bytes(
                "checkpoint.put",
                len(record.checkpoint.data)
                + len(record.metadata.data)
                + sum(len(b.value.data) for b in written),
            )
        yield from self.port.put_checkpoint(record, written)
        if shared:
            self.lists.committed(thread_id, ns, shared)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    # -- put_writes ----------------------------------------------------------------

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Op[None]:
        thread_id, ns, checkpoint_id = self._address(config)
        if checkpoint_id is None:
            raise InvalidInput("put_writes needs config['configurable']['checkpoint_id']")
        check_name(task_id, "task_id", max_bytes=self.max_id_bytes)
        check_name(task_path or "", "task_path", max_bytes=64 * 1024)
        records = [
            WriteRecord(
                task_id=task_id,
                idx=WRITES_IDX_MAP.get(channel, idx),
                channel=_channel(channel),
                task_path=task_path or "",
                value=self.squeeze(
                    codec.dump(self.serde, value, f"write to channel {channel!r}"),
                    codec.COMPRESS_MIN_BYTES,
                ),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        if records:
            if self.telemetry.active():
                size = sum(len(r.value.data) for r in records)
                self.telemetry.put_bytes("checkpoint.put_writes", size)
            yield from self.port.put_writes(thread_id, ns, checkpoint_id, records)

    # -- reads ---------------------------------------------------------------------

    def _get_tuple(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        thread_id, ns, checkpoint_id = self._address(config)
        try:
            loaded = yield from self.port.load(thread_id, ns, checkpoint_id)
            if loaded is None:
                return None
            yield from self._expand([loaded])
        except CorruptData as exc:
            raise exc.at(Place(thread_id, ns, checkpoint_id)) from None
        return self._tuple(loaded, learn=True)

    def load_op(self, thread_id: str, ns: str, checkpoint_id: str) -> Op[CheckpointTuple | None]:
        """The op loading the checkpoint at ``(thread_id, ns, checkpoint_id)`` as ``get_tuple``
        does (None when it is gone); ``watch`` loads each commit it sees with it."""
        return self._get_tuple(checkpoint_config(thread_id, ns, checkpoint_id))

    def newest_op(
        self, thread_id: str, ns: str, limit: int, before: str | None = None
    ) -> Op[list[CheckpointTuple]]:
        """The op loading the thread's newest ``limit`` checkpoints in ``ns`` (with ids below
        ``before``), newest first, in one ``list`` page: ``watch`` reads a burst with it.
        A page may hold fewer (a store's page ended); the caller loads what is missing."""
        query = ListQuery(thread_id, ns, None, before, {}, limit)
        try:
            items, _ = yield from self.port.list_page(query, None, limit)
            yield from self._expand(items)
        except CorruptData as exc:
            raise exc.at(Place(thread_id, ns)) from None
        return [self._tuple(item) for item in items]

    def _expand(self, items: list[Loaded]) -> Op[None]:
        """Fetch the list elements the items' manifests name and the store did not return."""
        wanted: dict[str, dict[tuple[str, str, str], None]] = {}
        for item in items:
            rec = item.record
            for ch, blob in item.blobs.items():
                if is_manifest(blob) and ch in rec.versions:
                    keys = wanted.setdefault(rec.thread_id, {})
                    try:
                        named = element_blob_keys(rec.ns, [blob])
                    except CorruptData as exc:
                        raise exc.at(where(rec.thread_id, rec.ns, rec.checkpoint_id, ch)) from None
                    for key in named:
                        if key[2] not in item.elements:
                            keys[key] = None
        for thread_id, keys in wanted.items():
            if not keys:
                continue
            got = yield from self.port.get_blobs(thread_id, list(keys))
            for item in items:
                if item.record.thread_id == thread_id:
                    ns = item.record.ns
                    item.elements.update(
                        (key[2], value) for key, value in got.items() if key[0] == ns
                    )

    def _value(self, loaded: Loaded, ch: str, blob: Any, learn: bool) -> Any:
        if not is_manifest(blob):
            return codec.load(self.serde, blob)
        rec = loaded.record
        at = where(rec.thread_id, rec.ns, rec.checkpoint_id, ch)
        value, pairs = rebuild(self.serde, blob, loaded.elements, at)
        if learn:
            self.lists.learned(rec.thread_id, rec.ns, ch, value, pairs)
        return value

    def _tuple(
        self, loaded: Loaded, metadata: Any = None, *, learn: bool = False
    ) -> CheckpointTuple:
        record = loaded.record
        try:
            checkpoint: Checkpoint = codec.load(self.serde, record.checkpoint)
            if not isinstance(checkpoint, dict):
                raise CorruptData(
                    reason=f"it decoded to a {type(checkpoint).__name__}, not a dict",
                    kind=UNDECODABLE,
                )
        except CorruptData as exc:
            raise exc.at(replace(self._place(record), part="checkpoint")) from None
        if metadata is None:
            try:
                metadata = codec.load(self.serde, record.metadata)
            except CorruptData as exc:
                raise exc.at(replace(self._place(record), part="metadata")) from None
        values: dict[str, Any] = {}
        for ch, blob in loaded.blobs.items():
            if ch in record.versions and blob.tag != codec.EMPTY_TAG:
                try:
                    values[ch] = self._value(loaded, ch, blob, learn)
                except CorruptData as exc:
                    raise exc.at(replace(self._place(record), channel=ch)) from None
        checkpoint["channel_values"] = values
        parent_config: RunnableConfig | None = None
        if record.parent_id:
            parent_config = checkpoint_config(record.thread_id, record.ns, record.parent_id)
        writes = self._writes(
            record.thread_id, record.ns, record.checkpoint_id, sort_writes(loaded.writes)
        )
        if self.state_schema is not None:
            # the metadata stays as stored (list filters see it): its schema_version says
            # which version the checkpoint was written at, the state is the running one's
            writes = self.state_schema.upgrade(
                checkpoint,  # type: ignore[arg-type]
                writes,
                self.state_schema.stored_version(metadata),
                (record.thread_id, record.ns, record.checkpoint_id),
            )
        return CheckpointTuple(
            config=checkpoint_config(record.thread_id, record.ns, record.checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent_config,
            pending_writes=writes,
        )

    @staticmethod
    def _place(record: CheckpointRecord) -> Place:
        return Place(record.thread_id, record.ns, record.checkpoint_id)

    def _writes(
        self, thread_id: str, ns: str, checkpoint_id: str, writes: Iterable[WriteRecord]
    ) -> list[PendingWrite]:
        """``(task_id, channel, value)`` of the writes stored at a checkpoint; one that does
        not decode is :class:`CorruptData` naming it."""
        out: list[PendingWrite] = []
        for w in writes:
            try:
                out.append((w.task_id, w.channel, codec.load(self.serde, w.value)))
            except CorruptData as exc:
                place = Place(thread_id, ns, checkpoint_id, w.channel, w.task_id, w.idx)
                raise exc.at(place) from None
        return out

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[None]:
        checked = check_filter(filter)
        if config is not None:
            conf = _configurable(config)
            thread_id: str | None = self.check_thread_id(conf.get("thread_id"))
            raw_ns = conf.get("checkpoint_ns")
            ns = None if raw_ns is None else normalize_namespace(raw_ns)
            checkpoint_id = normalize_checkpoint_id(conf.get("checkpoint_id"))
        else:
            thread_id, ns, checkpoint_id = None, None, None
        before_id = normalize_checkpoint_id(_configurable(before).get("checkpoint_id"))
        if limit is not None and limit <= 0:
            return
        query = ListQuery(thread_id, ns, checkpoint_id, before_id, checked, limit)
        page_size = LIST_PAGE_SIZE if checked or limit is None else min(limit, LIST_PAGE_SIZE)
        remaining = limit
        cursor: Any = None
        while True:
            try:
                items, cursor = yield from self.port.list_page(query, cursor, page_size)
                yield from self._expand(items)
            except CorruptData as exc:
                raise exc.at(Place(thread_id, ns)) from None
            for item in items:
                try:
                    metadata = codec.load(self.serde, item.record.metadata)
                except CorruptData as exc:
                    raise exc.at(replace(self._place(item.record), part="metadata")) from None
                if checked and not matches(metadata, checked):
                    continue
                yield Emit(self._tuple(item, metadata))
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            if cursor is None:
                return

    def _delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Op[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = self._address(config)
        wanted = list(dict.fromkeys(channels))
        # stored name -> (requested channel, the older name it is): a channel a migration
        # renamed is read under its older names too (ancestors written before the rename)
        names: dict[str, tuple[str, Alias | None]] = {ch: (ch, None) for ch in wanted}
        if self.state_schema is not None:
            aliases = self.state_schema.aliases()
            for ch in wanted:
                for alias in aliases.get(ch, []):
                    names.setdefault(alias.name, (ch, alias))
        try:
            chain = yield from self.port.chain(thread_id, ns, checkpoint_id, list(names))
            # a list seed written as a manifest (DeltaChannels normally are not)
            elements = yield from fetch_elements(self.port, thread_id, ns, chain.blobs.values())
        except CorruptData as exc:
            raise exc.at(Place(thread_id, ns, checkpoint_id)) from None
        collected: dict[str, list[tuple[str, WriteRecord]]] = {ch: [] for ch in wanted}
        seeds: dict[str, Any] = {}
        remaining = set(wanted)
        for ancestor in chain.ancestors:
            if not remaining:
                break
            for write in reversed(sort_writes(chain.writes.get(ancestor.checkpoint_id, []))):
                if write.channel in names and names[write.channel][0] in remaining:
                    collected[names[write.channel][0]].append((ancestor.checkpoint_id, write))
            for stored in [c for c in ancestor.present if c in names]:
                ch, older = names[stored]
                if ch not in remaining:
                    continue
                blob = chain.blobs.get((stored, ancestor.versions.get(stored, "")))
                if blob is not None and blob.tag != codec.EMPTY_TAG:
                    at = where(thread_id, ns, ancestor.checkpoint_id, stored)
                    seed = load_value(self.serde, blob, elements, at)
                    if older is not None:
                        place = (thread_id, ns, ancestor.checkpoint_id)
                        seed = history_upgrade(older, older.value, seed, place)
                    seeds[ch] = seed
                    remaining.discard(ch)
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": []}
            for cid, w in reversed(collected[ch]):
                for task_id, stored, value in self._writes(thread_id, ns, cid, [w]):
                    older = names[stored][1]
                    if older is not None:
                        value = history_upgrade(older, older.write, value, (thread_id, ns, cid))
                    entry["writes"].append((task_id, ch, value))
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    # -- deletion, copy, prune -----------------------------------------------------

    def _delete_thread(self, thread_id: Any) -> Op[None]:
        thread = self.check_thread_id(thread_id)
        self.lists.forget(thread)
        yield from self.port.delete_thread(thread)
        yield from self._delete_scoped(thread)

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Op[None]:
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not a single str")
        wanted = [str(r) for r in run_ids if r is not None and str(r)]
        if not wanted:
            return
        found = yield from self.port.find_runs(wanted)
        for thread_id, doomed in found.items():
            inventory = yield from self.port.inventory(thread_id)
            yield from self._delete_keeping(thread_id, inventory, set(doomed))

    def _copy_thread(self, source_thread_id: Any, target_thread_id: Any) -> Op[None]:
        source = self.check_thread_id(source_thread_id)
        target = self.check_thread_id(target_thread_id)
        if source == target:
            return
        dump = yield from self.port.export_thread(source)
        if dump:
            yield from self.port.import_thread(target, dump)

    def _prune(self, thread_ids: Sequence[str], strategy: str) -> Op[None]:
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a single str")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES}")
        threads = list(dict.fromkeys(self.check_thread_id(t) for t in thread_ids))
        for thread_id in threads:
            self.lists.forget(thread_id)
            if strategy == "delete":
                yield from self.port.delete_thread(thread_id)
                yield from self._delete_scoped(thread_id)
                continue
            inventory = yield from self.port.inventory(thread_id)
            keep = keep_latest(inventory.checkpoints)
            doomed = {(s.ns, s.checkpoint_id) for s in inventory.checkpoints} - keep
            doomed |= inventory.write_keys - keep
            yield from self._delete_keeping(thread_id, inventory, doomed, preflight=True)

    def _delete_keeping(
        self,
        thread_id: str,
        inventory: Inventory,
        doomed: set[tuple[str, str]],
        *,
        preflight: bool = False,
    ) -> Op[None]:
        """Delete ``doomed`` checkpoints (with their writes) and blobs nothing else uses.

        ``preflight`` (prune): refuse, before deleting anything, a plan that leaves a kept
        checkpoint without what ``graphkeep check`` finds it needs (its DeltaChannel seed or
        the parents its walk replays, a value, its parent in the history)."""
        self.lists.forget(thread_id)
        keep = {(s.ns, s.checkpoint_id) for s in inventory.checkpoints} - doomed
        referenced = yield from referenced_blobs(self.port, thread_id, inventory, keep)
        garbage = sorted(inventory.blob_keys - referenced)
        if preflight:
            problems = plan_problems(thread_id, inventory, doomed, garbage)
            if problems:
                raise UnsafePrune(
                    f"prune of thread {thread_id!r} refused, nothing deleted: the plan would"
                    f" leave {len(problems)} problem(s), first: {problems[0].kind} in"
                    f" namespace {problems[0].ns!r} at checkpoint {problems[0].checkpoint_id}"
                    f" (channel {problems[0].channel}): {problems[0].detail}"
                )
        if doomed or garbage:
            yield from self.port.delete_records(thread_id, sorted(doomed), garbage)

    # -- the public API: every method is one contract op, run sync or async ---------

    def drive(self, op: Op[Any]) -> Any:
        """Run ``op`` (an op over :attr:`port`, such as the thread lease's) to its result the
        way this saver runs its own methods: blocking (an async saver hops onto its loop)."""
        return self._call(op)

    async def adrive(self, op: Op[Any]) -> Any:
        """:meth:`drive` for async callers."""
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
        op = self.observed("get_tuple", self._get_tuple(config), _thread(config), read=True)
        return self._call(op)  # type: ignore[no-any-return]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        op = self.observed("get_tuple", self._get_tuple(config), _thread(config), read=True)
        return await self._acall(op)  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        op = self._list(config, filter, before, limit)
        return self._iterate(self.observed("list", op, _thread(config), read=True))

    def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        op = self._list(config, filter, before, limit)
        return self._aiterate(self.observed("list", op, _thread(config), read=True))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        op = self._put(config, checkpoint, metadata, new_versions)
        return self._call(self.observed("put", op, _thread(config)))  # type: ignore[no-any-return]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        op = self._put(config, checkpoint, metadata, new_versions)
        return await self._acall(self.observed("put", op, _thread(config)))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        op = self._put_writes(config, writes, task_id, task_path)
        self._call(self.observed("put_writes", op, _thread(config)))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        op = self._put_writes(config, writes, task_id, task_path)
        await self._acall(self.observed("put_writes", op, _thread(config)))

    def delete_thread(self, thread_id: str) -> None:
        self._call(self.observed("delete_thread", self._delete_thread(thread_id), thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._acall(self.observed("delete_thread", self._delete_thread(thread_id), thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._call(self.observed("delete_for_runs", self._delete_for_runs(run_ids)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._acall(self.observed("delete_for_runs", self._delete_for_runs(run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        op = self._copy_thread(source_thread_id, target_thread_id)
        self._call(self.observed("copy_thread", op, source_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        op = self._copy_thread(source_thread_id, target_thread_id)
        await self._acall(self.observed("copy_thread", op, source_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._call(self.observed("prune", self._prune(thread_ids, strategy)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._acall(self.observed("prune", self._prune(thread_ids, strategy)))

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
            self._delta_history(config, channels),
            _thread(config),
            read=True,
        )
        return self._call(op)  # type: ignore[no-any-return]

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        op = self.observed(
            "get_delta_channel_history",
            self._delta_history(config, channels),
            _thread(config),
            read=True,
        )
        return await self._acall(op)  # type: ignore[no-any-return]


def fetch_elements(
    port: CheckpointPort,
    thread_id: str,
    ns: str,
    blobs: Iterable[Typed | None],
    have: Mapping[str, Typed] | None = None,
) -> Op[dict[str, Typed]]:
    """``have`` plus the elements the manifests among ``blobs`` name (one ``get_blobs``)."""
    found = dict(have or {})
    manifests = [b for b in blobs if b is not None and is_manifest(b)]
    wanted = [k for k in element_blob_keys(ns, manifests) if k[2] not in found]
    if wanted:
        got = yield from port.get_blobs(thread_id, wanted)
        found.update((key[2], value) for key, value in got.items())
    return found


def referenced_blobs(
    port: CheckpointPort, thread_id: str, inventory: Inventory, keep: set[tuple[str, str]]
) -> Op[set[tuple[str, str, str]]]:
    """Blob keys the checkpoints ``keep`` (ns, id) need: their values and list elements.

    List elements are needed while a kept manifest names them; the manifests
    are read for that (they are small, one ``get_blobs``), only when the thread
    has elements at all.
    """
    survivors = [s for s in inventory.checkpoints if (s.ns, s.checkpoint_id) in keep]
    referenced = {(s.ns, ch, s.versions[ch]) for s in survivors for ch in s.present}
    if any(key[1] == ELEMENT_CHANNEL for key in inventory.blob_keys):
        stored = sorted(referenced & inventory.blob_keys)
        got: dict[tuple[str, str, str], Typed] = {}
        if stored:
            got = yield from port.get_blobs(thread_id, stored)
        for (ns, _, _), blob in got.items():
            if is_manifest(blob):
                referenced.update(element_blob_keys(ns, [blob]))
    return referenced


def _as_is(value: Typed, min_bytes: int) -> Typed:
    return value


def _channel(name: Any) -> str:
    channel = check_name(name, "channel name")
    if channel == ELEMENT_CHANNEL:
        raise InvalidInput(f"channel name {channel!r} is reserved by graphkeep for list elements")
    return channel


def sort_writes(writes: list[WriteRecord]) -> list[WriteRecord]:
    return sorted(writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))


def _thread(config: RunnableConfig | Mapping[str, Any] | None) -> Any:
    """The thread id a call names (as given: telemetry records it only when opted in)."""
    return _configurable(config).get("thread_id")


def _configurable(config: RunnableConfig | Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not config:
        return {}
    conf = config.get("configurable")
    return conf if isinstance(conf, Mapping) else {}


class SyncSaver(SaverBase):
    """A saver on a blocking client; async callers run it in a worker thread."""

    def __init__(self, port: CheckpointPort, execute: Callable[[Any], Any], **kwargs: Any) -> None:
        super().__init__(port, execute=execute, **kwargs)
        self._execute = execute

    def _call(self, op: Op[Any]) -> Any:
        return drive(op, self._execute)

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
        self.loop = running_loop()

    async def _acall(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aexecute)

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
        found = await self.aget_tuple(config)

        async def once() -> AsyncIterator[CheckpointTuple]:
            if found is not None:
                yield found

        return once()

    def _on_loop(self, coro: Any) -> Any:
        return on_loop(
            self.loop,
            coro,
            "saver",
            "the async methods (ainvoke, aget_state, ...) or a sync saver from graphkeep.connect()",
        )
