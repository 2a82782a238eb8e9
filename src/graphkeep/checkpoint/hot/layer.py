"""The hot layer's rules as ops (:mod:`graphkeep.checkpoint.hot` states them): reads served from
Redis copies a key-only durable read validates, writes left to the durable saver, Redis failures
logged and paused on."""

from __future__ import annotations

import inspect
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
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
)

from graphkeep.checkpoint.hot.options import DEFAULT_HOT_TTL, check_hot_ttl
from graphkeep.checkpoint.hot.port import Durable, HotPort, Probe, Prober, ToHot
from graphkeep.checkpoint.ids import (
    normalize_checkpoint_id,
    normalize_namespace,
    normalize_thread_id,
)
from graphkeep.checkpoint.records import CheckpointKeys
from graphkeep.errors import PLAINTEXT, TAMPERED, UNKNOWN_KEY, CorruptData, InvalidInput
from graphkeep.port import Op, codec
from graphkeep.port.encryption import ENVELOPE_TAG, KeyRing, check_encryption

log = logging.getLogger("graphkeep.hot")

#: seconds the layer stays durable-only after a Redis error
PAUSE = 1.0
#: the layout of a cached entry (a new one makes older entries misses, never errors)
ENTRY_FORMAT = 1
#: a ``list`` page as the layer returns it (named here: ``list`` is a method in the class)
Page = list[CheckpointTuple]
Probed = list[CheckpointKeys]
#: a read's record of its Redis failures (any: the read counts as an ``error``)
Failures = list[bool]

#: the most checkpoints of a ``list`` page the layer serves from Redis (a UI's history page)
MAX_PAGE = 100
#: seconds between two additions of a layer's counts to the shared totals in Redis
SHARE_EVERY = 5.0


def _checkpoint_id(found: CheckpointTuple) -> str:
    return str(found.config["configurable"]["checkpoint_id"])


def _read_keys(found: CheckpointTuple) -> CheckpointKeys:
    """The keys a durable read itself shows: the checkpoint's id and a write index per
    pending write (special by its channel, as ``put_writes`` stores it). A copy filled from
    them is served only once a later key-only read shows the same id with as many writes
    (regular writes are only ever added, so as many is the same ones)."""
    writes = found.pending_writes or []
    indexes = tuple(WRITES_IDX_MAP.get(channel, i) for i, (_, channel, _) in enumerate(writes))
    return CheckpointKeys(_checkpoint_id(found), indexes)


def _page_current(
    probed: list[CheckpointKeys], page: list[tuple[str, int]], below: str | None
) -> bool:
    """Whether a ``list`` page — ``(checkpoint id, pending writes)`` newest first — is what
    the durable store holds: its keys from the page's oldest checkpoint (all of them for a
    short page) name exactly the page's checkpoints below ``below``, each with as many
    writes and none special."""
    keys = sorted(
        (k for k in probed if below is None or k.checkpoint_id < below),
        key=lambda k: k.checkpoint_id,
        reverse=True,
    )
    return [k.checkpoint_id for k in keys] == [cid for cid, _ in page] and all(
        not k.special and len(k.indexes) == writes
        for k, (_, writes) in zip(keys, page, strict=True)
    )


class HotLayerBase(BaseCheckpointSaver[Any]):
    """The contract of the hot layer; :class:`HotLayer` and :class:`AsyncHotLayer` run it.

    Every method the layer does not serve itself is the durable saver's (``watch``,
    ``lock``, ``effects``… of a graphkeep saver included), called on it directly.
    """

    def __init__(
        self,
        durable: BaseCheckpointSaver[Any],
        port: HotPort,
        prober: Prober,
        *,
        hot_ttl: float = DEFAULT_HOT_TTL,
        where: str = "Redis",
        schema: str = "",
        telemetry: Any = None,
        owned: Callable[[], Any] | None = None,
        encryption: KeyRing | None = None,
    ) -> None:
        super().__init__(serde=durable.serde)
        self.durable = durable
        #: the durable saver's key ring: each copy sealed at its checkpoint (see ``_encode``)
        self.encryption = check_encryption(encryption)
        self.port = port
        self.prober = prober
        self.hot_ttl = check_hot_ttl(hot_ttl)
        self.ttl_ms = max(1, int(self.hot_ttl * 1000))
        #: names the hot store in logs (password masked)
        self.where = where
        #: the reading code's state schema: a copy made by code of another schema is a miss
        self.schema = schema
        #: reads by outcome: ``hit``, ``miss``, ``special`` (read from the durable store
        #: because of a special write), ``error`` (Redis failed; durable-only for a while)
        self.reads: Counter[str] = Counter()
        self.telemetry = telemetry
        self._owned = owned
        self._paused_until = 0.0
        self._unshared: Counter[str] = Counter()
        self._share_at = 0.0
        #: whether this layer adds its reads to the shared totals (``graphkeep`` commands
        #: reading through a layer set it to False: their reads are not the app's)
        self.shares = True
        #: whether the durable saver's put_writes takes ``task_path`` (LangGraph asks ours)
        self._task_path = "task_path" in inspect.signature(durable.put_writes).parameters

    # -- the durable saver's own surface ----------------------------------------------

    @property
    def config_specs(self) -> list[Any]:
        return list(self.durable.config_specs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "durable":
            raise AttributeError(name)
        return getattr(self.durable, name)

    def hit_rate(self) -> float | None:
        """Hits over reads through the layer so far (None before the first read)."""
        total = sum(self.reads.values())
        return None if total == 0 else self.reads["hit"] / total

    # every write, and the reads the layer does not serve (``list`` calls other than one
    # namespace's pages, DeltaChannel history), go to the durable saver as they are (a ``put``
    # then has Redis forget the namespace's newest copy); same signatures, since LangGraph
    # reads them (``put_writes``' ``task_path``)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = self.durable.put(config, checkpoint, metadata, new_versions)
        self._run(self._moved(saved))
        return saved

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = await self.durable.aput(config, checkpoint, metadata, new_versions)
        await self._arun(self._moved(saved))
        return saved

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self._task_path:
            self.durable.put_writes(config, writes, task_id, task_path)
        else:
            self.durable.put_writes(config, writes, task_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self._task_path:
            await self.durable.aput_writes(config, writes, task_id, task_path)
        else:
            await self.durable.aput_writes(config, writes, task_id)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        page = self._page_address(config, filter, before, limit)
        if page is None or config is None:
            return self.durable.list(config, filter=filter, before=before, limit=limit)
        return iter(self._run(self._page(config, before, page)))

    def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        page = self._page_address(config, filter, before, limit)
        if page is None or config is None:
            return self.durable.alist(config, filter=filter, before=before, limit=limit)
        return self._apage(self._page(config, before, page))

    async def _apage(self, op: Op[Page]) -> AsyncIterator[CheckpointTuple]:
        for item in await self._arun(op):
            yield item

    def _run(self, op: Op[Any]) -> Any:
        """Run ``op`` from sync code (the shell's way: on this thread, or on its loop)."""
        raise NotImplementedError

    async def _arun(self, op: Op[Any]) -> Any:
        """Run ``op`` from async code."""
        raise NotImplementedError

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.durable.delete_for_runs(run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.durable.adelete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.durable.copy_thread(source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.durable.acopy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.durable.prune(thread_ids, strategy=strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.durable.aprune(thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return self.durable.get_next_version(current, channel)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.durable.get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.durable.aget_delta_channel_history(config=config, channels=channels)

    # -- the ops ------------------------------------------------------------------------

    def _count(self, outcome: str) -> None:
        self.reads[outcome] += 1
        self._unshared[outcome] += 1
        if self.telemetry is not None:
            self.telemetry.hot_read(outcome)

    def _share(self) -> Op[None]:
        """Add the counts of the last :data:`SHARE_EVERY` seconds to Redis's totals."""
        if not self.shares or not self._unshared or time.monotonic() < self._share_at:
            return
        counts, self._unshared = dict(self._unshared), Counter()
        self._share_at = time.monotonic() + SHARE_EVERY
        yield from self._hot(self.port.count(counts))

    def _hot(self, op: Op[Any], failed: Failures | None = None) -> Op[Any]:
        """``op`` (a :class:`HotPort` op) with its requests sent to Redis; None when Redis
        fails (logged; the layer then reads only the durable store for :data:`PAUSE`
        seconds) and, without a request, while it is paused. A read passes ``failed``: it
        then counts as an ``error`` read."""
        if time.monotonic() < self._paused_until:
            if failed is not None:
                failed.append(True)
            return None
        try:
            request = next(op)
            while True:
                try:
                    result = yield ToHot(request)
                except BaseException as exc:  # the executor's error goes into the op
                    request = op.throw(exc)
                else:
                    request = op.send(result)
        except StopIteration as stop:
            return stop.value
        except Exception as exc:  # noqa: BLE001 - Redis failing is never the graph's problem
            self._paused_until = time.monotonic() + PAUSE
            if failed is not None:
                failed.append(True)
            log.warning(
                "hot layer: %s failed (%s); reading the durable store only for %.0f s",
                self.where,
                type(exc).__name__,
                PAUSE,
            )
            return None

    def _address(self, config: RunnableConfig) -> tuple[str, str, str | None]:
        conf = config.get("configurable") or {}
        return (
            normalize_thread_id(conf.get("thread_id")),
            normalize_namespace(conf.get("checkpoint_ns")),
            normalize_checkpoint_id(conf.get("checkpoint_id")),
        )

    def _read(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        found = yield from self._lookup(config)
        yield from self._share()
        return found

    def _lookup(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        try:
            thread_id, ns, wanted = self._address(config)
        except InvalidInput:  # the durable saver's own rules decide (its answer or error)
            direct: CheckpointTuple | None = yield Durable("get_tuple", (config,))
            return direct
        failed: Failures = []
        raw = yield from self._hot(self.port.fetch(thread_id, ns, wanted, self.ttl_ms), failed)
        cached = self._decode(raw, thread_id, ns)
        probed: Probed = []
        if cached is not None:
            cached_id, writes, copy = cached
            probed = yield Probe(thread_id, ns, cached_id, wanted is None)
            if (
                probed
                and probed[0].checkpoint_id == cached_id
                and probed[-1].checkpoint_id == cached_id
                and not probed[0].special
                and len(probed[0].indexes) == writes
            ):
                self._count("hit")
                return copy
        found: CheckpointTuple | None = yield Durable("get_tuple", (config,))
        outcome = "miss"
        if found is not None:
            found_id = _checkpoint_id(found)
            keys = next((k for k in probed if k.checkpoint_id == found_id), None)
            if keys is None:  # nothing was probed for it: what the read shows
                keys = _read_keys(found)
            # before the read or in it, the same number of writes means the same writes
            if keys.special:
                outcome = "special"
            elif len(keys.indexes) == len(found.pending_writes or []):
                entry = self._encode(thread_id, ns, found_id, found)
                fill = self.port.fill(thread_id, ns, found_id, entry, wanted is None, self.ttl_ms)
                yield from self._hot(fill, failed)
        self._count("error" if failed else outcome)
        return found

    def _page_address(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None,
        limit: int | None,
    ) -> tuple[str, str, str | None, int] | None:
        """``(thread, ns, before id, limit)`` of a ``list`` call the layer serves — one
        namespace of one thread, newest first, at most :data:`MAX_PAGE` — else None."""
        if config is None or filter or limit is None or not 0 < limit <= MAX_PAGE:
            return None
        conf = config.get("configurable") or {}
        if "checkpoint_ns" not in conf or conf.get("checkpoint_id"):
            return None
        try:
            thread_id = normalize_thread_id(conf.get("thread_id"))
            ns = normalize_namespace(conf.get("checkpoint_ns"))
            below = None
            if before is not None:
                below = normalize_checkpoint_id(
                    (before.get("configurable") or {}).get("checkpoint_id")
                )
                if below is None:
                    return None
        except InvalidInput:
            return None
        return thread_id, ns, below, limit

    def _page(
        self,
        config: RunnableConfig,
        before: RunnableConfig | None,
        address: tuple[str, str, str | None, int],
    ) -> Op[Page]:
        """A history page: Redis's copy when the durable store's keys (from the page's
        oldest checkpoint, or all of a short page's) show the same checkpoints with as many
        writes; else the durable store's page, copied when its keys agree."""
        thread_id, ns, below, limit = address
        failed: Failures = []
        fetch = self.port.fetch_page(thread_id, ns, below, limit, self.ttl_ms)
        raw = yield from self._hot(fetch, failed)
        cached = [self._decode(entry, thread_id, ns) for entry in raw or []]
        probed: Probed | None = None
        probed_from = ""
        if cached and all(entry is not None for entry in cached):
            copies = [entry for entry in cached if entry is not None]
            probed_from = copies[-1][0] if len(copies) == limit else ""
            probed = yield Probe(thread_id, ns, probed_from, True)
            if _page_current(probed, [(cid, n) for cid, n, _ in copies], below):
                self._count("hit")
                yield from self._share()
                return [found for _, _, found in copies]
        kwargs = (("before", before), ("limit", limit))
        page: Page = yield Durable("list", (config,), kwargs)
        ids = [(_checkpoint_id(t), len(t.pending_writes or [])) for t in page]
        outcome = "miss"
        if ids and not failed:
            low = ids[-1][0] if len(ids) == limit else ""
            if probed is None or probed_from > low:
                # what the read shows (the keys read before it only serve a page they cover)
                probed = [_read_keys(found) for found in page]
            probed = [k for k in probed if k.checkpoint_id >= low]
            if _page_current(probed, ids, below):
                pairs = zip(ids, page, strict=True)
                entries = [(cid, self._encode(thread_id, ns, cid, t)) for (cid, _), t in pairs]
                fill = self.port.fill_page(thread_id, ns, below, limit, entries, self.ttl_ms)
                yield from self._hot(fill, failed)
            elif any(k.special for k in probed):
                outcome = "special"
        self._count("error" if failed else outcome)
        yield from self._share()
        return page

    def _moved(self, saved: RunnableConfig) -> Op[None]:
        """After a checkpoint is written through the layer: Redis forgets which copy was
        the newest of its namespace (and the newest pages), so the next read of the head is
        the durable store's one read, not a key-only read and then the read. Reads are right
        without it (every copy is validated); a Redis error here is logged and paused on."""
        try:
            thread_id, ns, _ = self._address(saved)
        except InvalidInput:
            return
        yield from self._hot(self.port.moved(thread_id, ns))

    def _evict(self, thread_id: Any) -> Op[None]:
        yield from self._hot(self.port.evict(normalize_thread_id(thread_id)))

    # -- entries ---------------------------------------------------------------------------

    def _encode(self, thread_id: str, ns: str, checkpoint_id: str, found: CheckpointTuple) -> bytes:
        """A copy: its checkpoint id and pending write count readable (the key-only probe
        checks them), the tuple serialized, and with ``encryption`` sealed at its checkpoint
        and write count (:func:`_place`), so nothing of it is readable in Redis."""
        kind, data = self.serde.dumps_typed(
            [
                found.config,
                found.checkpoint,
                found.metadata,
                found.parent_config,
                [list(w) for w in found.pending_writes or []],
            ]
        )
        writes = len(found.pending_writes or [])
        if self.encryption is not None:
            place = _place(thread_id, ns, checkpoint_id, writes, self.schema)
            sealed = self.encryption.seal(codec.Typed(kind, data), place)
            kind, data = sealed.tag, sealed.data
        return codec.packb([ENTRY_FORMAT, self.schema, checkpoint_id, writes, kind, data])

    def _decode(
        self, raw: bytes | None, thread_id: str, ns: str
    ) -> tuple[str, int, CheckpointTuple] | None:
        """(checkpoint id, pending writes, tuple) of a cached entry; None for an entry of
        another format or schema, or one that cannot be read (a miss, logged). With
        ``encryption`` a copy that does not open at this thread, namespace, checkpoint and
        write count (planted, copied, changed, plaintext, an unknown key) is refused: a miss,
        logged with its reason, and the durable store's checkpoint is read (and copied)."""
        if raw is None:
            return None
        try:
            fmt, schema, checkpoint_id, writes, kind, data = codec.unpack_fields(raw, 6)
            if fmt != ENTRY_FORMAT or schema != self.schema:
                return None
            if self.encryption is not None:
                if kind != ENVELOPE_TAG:  # a cache: never served, allow_plaintext or not
                    raise CorruptData(reason="it is not encrypted", kind=PLAINTEXT)
                place = _place(thread_id, ns, checkpoint_id, writes, schema)
                opened = self.encryption.open(codec.Typed(kind, data), place)
                kind, data = opened.tag, opened.data
            config, checkpoint, metadata, parent, pending = self.serde.loads_typed((kind, data))
        except CorruptData as exc:
            if exc.kind in (PLAINTEXT, TAMPERED, UNKNOWN_KEY):
                log.warning(
                    "hot layer: a cached copy in thread %r was refused (%s: %s): read from"
                    " the durable store",
                    thread_id,
                    exc.kind,
                    exc.reason,
                )
            else:
                log.warning("hot layer: a cached checkpoint could not be read (%s): a miss", exc)
            return None
        except (ValueError, TypeError) as exc:
            log.warning("hot layer: a cached checkpoint could not be read (%s): a miss", exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a serializer's own error: read the store
            log.warning("hot layer: a cached checkpoint could not be read (%s): a miss", exc)
            return None
        found = CheckpointTuple(
            config=config,
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent,
            pending_writes=[tuple(w) for w in pending],
        )
        return str(checkpoint_id), int(writes), found


def _place(
    thread_id: str, ns: str, checkpoint_id: Any, writes: Any, schema: Any
) -> tuple[Any, ...]:
    """Where a copy lives, for its encryption: its checkpoint (thread, namespace, id), and
    the write count and schema the layer trusts it by (a copy of fewer writes relabelled
    would otherwise pass the probe)."""
    return ("hot", thread_id, ns, checkpoint_id, writes, schema)
