"""Redis as the hot layer over a durable saver: reads from Redis, never stale.

:class:`HotLayer` (sync) and :class:`AsyncHotLayer` wrap a durable saver — graphkeep's
MongoDB or DynamoDB saver, LangGraph's Postgres saver — and serve ``get_tuple`` (so
``get_state``, and the first read of every ``invoke``) from a Redis copy of the checkpoints
read recently, validated on every read by ONE key-only request to the durable store.

The rules, written once as ops (the Redis side is a :class:`HotPort`, the durable side the
requests :class:`Probe` and :class:`Durable`, answered by the shell):

- **Durability is the durable store's.** Every write (``put``, ``put_writes``, deletes,
  copies, prunes) goes to the durable saver only; Redis is filled by reads. A call returns
  when the durable store has answered (a ``put`` then has Redis forget the namespace's
  newest copy: one request, its failure logged); Redis never fails or loses a write.
- **Never stale.** A checkpoint never changes once written and its regular pending writes are
  only ever added, so a cached checkpoint is served only when the durable store's keys
  (:class:`~graphkeep.checkpoint.records.CheckpointKeys`: the checkpoint still there, no
  newer one for a "latest" read, as many writes as the copy holds) say it is what a read of
  the durable store would return. A checkpoint with a special write (an interrupt, an
  error, a resume: they replace in place) is always read from the durable store. So no
  read returns an older checkpoint as the latest or misses a pending write, whatever
  happened to Redis (flushed, restarted from an old snapshot, written by a process that
  died, unreachable from one process only) and whoever wrote the durable store.
- **Redis failing is never the graph's problem.** A Redis error is logged, counted
  (``graphkeep.hot.reads`` with outcome ``error``) and turns the layer durable-only for
  :data:`PAUSE` seconds; reads then go to the durable store as if there were no layer.
- **Bounded.** A thread's copies live in one Redis hash that expires ``hot_ttl`` seconds
  after the thread's last read through the layer (sliding), and come back on the next read.

See docs/hot.md for the measured costs and the fault matrix.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

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

from graphkeep.checkpoint.ids import (
    normalize_checkpoint_id,
    normalize_namespace,
    normalize_thread_id,
)
from graphkeep.checkpoint.records import CheckpointKeys
from graphkeep.errors import ConfigurationError, CorruptData, InvalidInput, mask_url
from graphkeep.port import Op, codec
from graphkeep.port.loop import on_loop, running_loop
from graphkeep.port.ops import adrive, drive

__all__ = [
    "DEFAULT_HOT_TTL",
    "HOT_OPTIONS",
    "HOT_SCHEMES",
    "PAUSE",
    "AsyncHotLayer",
    "Durable",
    "HotLayer",
    "HotLayerBase",
    "HotPort",
    "Probe",
    "Prober",
    "ToHot",
    "alayered",
    "check_hot_ttl",
    "check_hot_url",
    "hot_options",
    "layer_class",
    "layered",
    "register_opener",
]

log = logging.getLogger("graphkeep.hot")

#: seconds a thread stays in Redis after its last read, unless ``hot_ttl`` says otherwise
DEFAULT_HOT_TTL = 3600.0
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


# -- what the ops yield besides the Redis port's own requests --------------------------


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


def check_hot_ttl(hot_ttl: Any) -> float:
    """``hot_ttl`` in seconds (> 0), or :class:`~graphkeep.errors.ConfigurationError`."""
    if isinstance(hot_ttl, bool) or not isinstance(hot_ttl, int | float) or not hot_ttl > 0:
        raise ConfigurationError(f"hot_ttl must be a number of seconds above 0, got {hot_ttl!r}")
    if hot_ttl == float("inf"):
        raise ConfigurationError("hot_ttl must be finite: the hot layer only holds hot threads")
    return float(hot_ttl)


#: URL schemes the hot layer accepts (Redis and Redis Cluster)
HOT_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def check_hot_url(url: Any) -> str:
    """``url`` if it is a Redis URL (:data:`HOT_SCHEMES`), or ConfigurationError."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"hot= must be a Redis URL (redis://…), got {url!r}")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in HOT_SCHEMES:
        raise ConfigurationError(
            f"hot= must be a Redis URL ({', '.join(s + '://' for s in HOT_SCHEMES)}),"
            f" got {mask_url(url)}"
        )
    return url


#: the saver options that make the layer (savers whose durable store is not Redis take them)
HOT_OPTIONS = frozenset({"hot", "hot_ttl"})


def hot_options(options: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``hot`` (a Redis URL, or None) and the layer's options (``hot_ttl``, and the saver's
    ``telemetry``) taken out of a saver's ``options``, checked before any connection."""
    hot = options.pop("hot", None)
    if "hot_ttl" in options and hot is None:
        raise ConfigurationError("hot_ttl is an option of the hot layer: give hot='redis://…'")
    layer: dict[str, Any] = {}
    if hot is not None:
        check_hot_url(hot)
        layer["hot_ttl"] = check_hot_ttl(options.pop("hot_ttl", DEFAULT_HOT_TTL))
        if "telemetry" in options:
            layer["telemetry"] = options["telemetry"]
    return hot, layer


#: what makes a layer of a saver and a Redis URL (``graphkeep.hot.hot_layer``, which builds
#: the Redis side, registers itself when imported): the saver classes' ``hot=`` reaches it here
_OPENER: list[Callable[..., Any]] = []


def register_opener(opener: Callable[..., Any]) -> None:
    """Make ``opener(saver, url, **layer)`` the maker of :func:`layered`'s hot layers."""
    _OPENER[:] = [opener]


def _opener() -> Callable[..., Any]:
    if not _OPENER:
        raise ConfigurationError("hot= needs graphkeep.hot (import graphkeep first)")
    return _OPENER[0]


@contextmanager
def layered(saver: Any, hot: str | None, layer: Mapping[str, Any]) -> Iterator[Any]:
    """``saver`` itself when ``hot`` is None, else ``saver`` behind Redis at ``hot`` for the
    block (the layer's Redis client closed after it; the saver stays the caller's)."""
    if hot is None:
        yield saver
        return
    with _opener()(saver, hot, **layer) as hot_saver:
        yield hot_saver


@asynccontextmanager
async def alayered(saver: Any, hot: str | None, layer: Mapping[str, Any]) -> AsyncIterator[Any]:
    """:func:`layered` for an async saver."""
    if hot is None:
        yield saver
        return
    async with _opener()(saver, hot, **layer) as hot_saver:
        yield hot_saver


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
    ) -> None:
        super().__init__(serde=durable.serde)
        self.durable = durable
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
        cached = self._decode(raw)
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
                entry = self._encode(found_id, found)
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
        cached = [self._decode(entry) for entry in raw or []]
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
                entries = [(cid, self._encode(cid, t)) for (cid, _), t in pairs]
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

    def _encode(self, checkpoint_id: str, found: CheckpointTuple) -> bytes:
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
        return codec.packb([ENTRY_FORMAT, self.schema, checkpoint_id, writes, kind, data])

    def _decode(self, raw: bytes | None) -> tuple[str, int, CheckpointTuple] | None:
        """(checkpoint id, pending writes, tuple) of a cached entry; None for an entry of
        another format or schema, or one that cannot be read (a miss, logged)."""
        if raw is None:
            return None
        try:
            fmt, schema, checkpoint_id, writes, kind, data = codec.unpack_fields(raw, 6)
            if fmt != ENTRY_FORMAT or schema != self.schema:
                return None
            config, checkpoint, metadata, parent, pending = self.serde.loads_typed((kind, data))
        except (CorruptData, ValueError, TypeError) as exc:
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


class HotLayer(HotLayerBase):
    """The hot layer over a sync durable saver, on a blocking Redis client (``execute``)."""

    def __init__(
        self,
        durable: BaseCheckpointSaver[Any],
        port: HotPort,
        prober: Prober,
        execute: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        super().__init__(durable, port, prober, **options)
        self._execute = execute

    def _route(self, request: Any) -> Any:
        if isinstance(request, ToHot):
            return self._execute(request.request)
        if isinstance(request, Probe):
            return self.prober.keys(
                request.thread_id, request.ns, request.checkpoint_id, request.newer
            )
        found = getattr(self.durable, request.method)(*request.args, **dict(request.kwargs))
        return list(found) if request.method == "list" else found

    def _run(self, op: Op[Any]) -> Any:
        return drive(op, self._route)

    async def _arun(self, op: Op[Any]) -> Any:
        return await asyncio.to_thread(drive, op, self._route)

    def setup(self) -> None:
        """The durable saver's ``setup`` (when it has one), then the Redis scripts."""
        setup = getattr(self.durable, "setup", None)
        if callable(setup):
            setup()
        self._run(self._hot(self.port.setup()))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._read(config))  # type: ignore[no-any-return]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    def delete_thread(self, thread_id: str) -> None:
        self.durable.delete_thread(thread_id)
        self._run(self._evict(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    def footprint(self, thread_id: Any) -> int:
        """Bytes Redis holds for the thread's copies (0 when none, or Redis is down)."""
        op = self._hot(self.port.footprint(normalize_thread_id(thread_id)))
        return int(self._run(op) or 0)

    def evict(self, thread_id: Any) -> None:
        """Drop the thread's copies from Redis (the durable store keeps everything)."""
        self._run(self._evict(thread_id))

    def shared_stats(self) -> dict[str, int]:
        """Reads by outcome of every process sharing this Redis and prefix (this one's
        counts of the last few seconds not yet in them); empty when Redis is down."""
        return dict(self._run(self._hot(self.port.stats())) or {})

    def close(self) -> None:
        """Close the Redis client the layer made (never the durable saver's)."""
        if self._owned is not None:
            self._owned()
            self._owned = None

    def __enter__(self) -> HotLayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncHotLayer(HotLayerBase):
    """The hot layer over an async durable saver, on an asyncio Redis client; sync calls
    from other threads hop onto the loop it was made on (as graphkeep's async savers do)."""

    def __init__(
        self,
        durable: BaseCheckpointSaver[Any],
        port: HotPort,
        prober: Prober,
        aexecute: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        #: sorts an error of the first request (:meth:`acheck`): raises when Redis refuses
        #: the layer's commands, returns when it is only unreachable
        self._checked: Callable[[BaseException, str], None] | None = options.pop("checked", None)
        super().__init__(durable, port, prober, **options)
        self._aexecute = aexecute
        self.loop = running_loop()

    async def acheck(self) -> None:
        """Load the layer's scripts: an error when Redis refuses them, a warning (and reads
        from the durable store) when it cannot be reached now."""
        try:
            await self._aexecute(next(self.port.setup()))
        except Exception as exc:
            if self._checked is None:
                raise
            self._checked(exc, self.where)

    async def _aroute(self, request: Any) -> Any:
        if isinstance(request, ToHot):
            return await self._aexecute(request.request)
        if isinstance(request, Probe):
            return await self.prober.akeys(
                request.thread_id, request.ns, request.checkpoint_id, request.newer
            )
        method = getattr(self.durable, "a" + request.method)
        if request.method == "list":
            return [item async for item in method(*request.args, **dict(request.kwargs))]
        return await method(*request.args, **dict(request.kwargs))

    async def _arun(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aroute)

    def _run(self, op: Op[Any]) -> Any:
        return self._on_loop(self._arun(op))

    def _on_loop(self, coro: Any) -> Any:
        return on_loop(self.loop, coro, "hot layer", "the async methods (ainvoke, aget_state…)")

    async def asetup(self) -> None:
        setup = getattr(self.durable, "asetup", None) or getattr(self.durable, "setup", None)
        if callable(setup):
            result = setup()
            if asyncio.iscoroutine(result):
                await result
        await self._arun(self._hot(self.port.setup()))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._read(config))  # type: ignore[no-any-return]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._on_loop(self.aget_tuple(config))  # type: ignore[no-any-return]

    async def aget_iter(self, config: RunnableConfig) -> AsyncIterator[CheckpointTuple]:
        """LangGraph Agent Server's read of a thread's state, through the layer."""
        found = await self.aget_tuple(config)

        async def once() -> AsyncIterator[CheckpointTuple]:
            if found is not None:
                yield found

        return once()

    async def adelete_thread(self, thread_id: str) -> None:
        await self.durable.adelete_thread(thread_id)
        await self._arun(self._evict(thread_id))

    def delete_thread(self, thread_id: str) -> None:
        self._on_loop(self.adelete_thread(thread_id))

    async def aevict(self, thread_id: Any) -> None:
        """Drop the thread's copies from Redis (the durable store keeps everything)."""
        await self._arun(self._evict(thread_id))

    async def afootprint(self, thread_id: Any) -> int:
        """Bytes Redis holds for the thread's copies (0 when none, or Redis is down)."""
        op = self._hot(self.port.footprint(normalize_thread_id(thread_id)))
        return int(await self._arun(op) or 0)

    async def aclose(self) -> None:
        """Close the Redis client the layer made (never the durable saver's)."""
        if self._owned is not None:
            closing = self._owned()
            self._owned = None
            if asyncio.iscoroutine(closing):
                await closing

    async def __aenter__(self) -> AsyncHotLayer:
        try:
            await self.acheck()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: methods a saver may leave to ``BaseCheckpointSaver`` (which raises, or composes them from
#: the others); the layer then leaves them too, so it declares exactly the durable saver's
#: capabilities (LangGraph's conformance suite detects them by override)
OPTIONAL = (
    "delete_thread",
    "adelete_thread",
    "delete_for_runs",
    "adelete_for_runs",
    "copy_thread",
    "acopy_thread",
    "prune",
    "aprune",
    "get_delta_channel_history",
    "aget_delta_channel_history",
)
_CLASSES: dict[tuple[type, type], type] = {}


def layer_class(shell: type[HotLayerBase], durable: BaseCheckpointSaver[Any]) -> type[Any]:
    """``shell`` (:class:`HotLayer` or :class:`AsyncHotLayer`) without the methods of
    :data:`OPTIONAL` that ``durable``'s class does not have itself."""
    kind = type(durable)
    made = _CLASSES.get((shell, kind))
    if made is None:
        missing = {
            name: getattr(BaseCheckpointSaver, name)
            for name in OPTIONAL
            if getattr(kind, name, None) is getattr(BaseCheckpointSaver, name)
        }
        made = type(shell.__name__, (shell,), {**missing, "__module__": shell.__module__})
        _CLASSES[(shell, kind)] = made
    return made
