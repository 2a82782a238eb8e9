"""The store contract and its two shells: :class:`StoreBase` (LangGraph's ``BaseStore`` over a
:class:`~graphkeep.store.port.StorePort`), :class:`SyncStore` and :class:`AsyncStore`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    NotProvided,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

from graphkeep.errors import UNKNOWN_KEY, ConfigurationError, CorruptData, InvalidInput, Place
from graphkeep.port import Call, Op, Telemetry, adrive, drive, on_loop, running_loop, target_of
from graphkeep.port.clock import IncreasingClock, datetime_of_us, now_ms
from graphkeep.port.codec import sealed_key_id
from graphkeep.port.encryption import KeyRing, check_encryption
from graphkeep.port.loop import cancel_until_done
from graphkeep.port.torn import reread
from graphkeep.store.fallback import DONE_RECHECK_S, StoreFallback
from graphkeep.store.filters import compile_filter
from graphkeep.store.port import Embed, ItemKey, SearchQuery, StoredItem, StorePort, Vector
from graphkeep.store.ranking import list_page, literal_prefix
from graphkeep.store.sealed import RekeyCounts, SealedStorePort, envelope_of, rekey, sealed
from graphkeep.store.sweeper import TaskSweeper, ThreadSweeper
from graphkeep.store.validation import (
    DEFAULT_MAX_KEY_BYTES,
    Plan,
    field_tokens,
    index_config,
    plan_batch,
    ttl_config,
)
from graphkeep.store.values import pack_vector, text_digest

DEFAULT_SWEEP_MINUTES = 5

#: ``created_at`` / ``updated_at`` stamps: strictly increasing within the process
STAMPS = IncreasingClock()


def expiry_after_minutes(ttl_minutes: float | None, now_ms: int) -> int | None:
    """Epoch ms at which an item written at ``now_ms`` with ``ttl_minutes`` expires (None:
    never)."""
    return None if ttl_minutes is None else now_ms + int(ttl_minutes * 60_000)


class StoreBase(BaseStore):
    """LangGraph ``BaseStore`` over a :class:`~graphkeep.store.port.StorePort`. Use a
    backend's class or ``graphkeep.connect_store``; this class holds the contract logic.

    Everything that is the same on Redis, MongoDB and DynamoDB is here: validation of
    namespaces, keys, values and filters before anything is written
    (:mod:`~graphkeep.store.validation`), TTL arithmetic, embedding (only texts that changed
    since the stored version are sent to the model), ranking and paging rules
    (:mod:`~graphkeep.store.ranking`). The port's methods yield a backend's own requests;
    the two shells drive the same generators, so sync and async share every line.

    Semantics follow ``PostgresStore`` (LangGraph's reference store):

    - ``created_at`` survives updates, ``updated_at`` changes on every put and is strictly
      increasing within a process;
    - ``search`` without a query is ordered by ``updated_at`` newest first; with a query
      (and an ``index``) by score, the best score among an item's embedded fields; items
      with no embedding are not returned by a query search;
    - scores: cosine similarity (``cosine``), minus the L2 distance (``l2``), the inner
      product (``inner_product``);
    - filters compare values on (nested) keys: plain values and ``$eq`` mean equality,
      ``$ne`` matches present values that differ, ``$gt $gte $lt $lte`` compare numbers
      with numbers and strings with strings; nested keys are given as nested dicts or
      dotted paths;
    - expired items are never returned, even before a store reaps them.

    ``encryption=`` (a :class:`~graphkeep.port.encryption.KeyRing`) seals each item's value
    and embeddings at its namespace and key (:mod:`~graphkeep.store.sealed`); filtered and
    semantic searches then rank in the client.
    """

    # No instance layout of its own: its attributes live in the __dict__ of the two shells
    # below (the only classes instantiated). On CPython 3.10 a class that adds a __dict__ to
    # BaseStore's slotted layout cannot be a base beside AsyncBatchedBaseStore, which adds
    # slots (AsyncStore: "multiple bases have instance lay-out conflict"); 3.11 and later keep
    # the __dict__ out of the layout. Hidden from mypy, which would otherwise check the
    # assignments in __init__ against these empty slots.
    if not TYPE_CHECKING:
        __slots__ = ()

    supports_ttl: bool = True

    def __init__(
        self,
        port: StorePort,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | Mapping[str, Any] | None = None,
        max_key_bytes: int = DEFAULT_MAX_KEY_BYTES,
        telemetry: Any = None,
        execute: Any = None,
        encryption: KeyRing | None = None,
    ) -> None:
        #: the key ring every item is sealed with at ``("item", namespace, key)`` (None:
        #: stored as JSON); see :mod:`graphkeep.store.sealed`
        self.encryption = check_encryption(encryption)
        if self.encryption is not None and getattr(port, "vector_index", False):
            raise ConfigurationError(
                "vector_index=True cannot be used with encryption=: the embeddings are sealed"
                " with the value (they are derived from it), so the server has none to index;"
                " semantic search ranks in the client instead"
            )
        self.port = cast(StorePort, sealed(port, self.encryption))
        #: spans and metrics of every call (see :mod:`graphkeep.port.telemetry`)
        self.telemetry = Telemetry(telemetry, target_of(execute))
        self.index_config = cast(Any, index_config(index))
        self.ttl_config = cast(Any, ttl_config(ttl))
        self.embeddings = (
            ensure_embeddings(self.index_config["embed"]) if self.index_config else None
        )
        self.max_key_bytes = max_key_bytes
        self._sweeper: Any = None
        #: the store an app used before, read through on a miss (``fallback=``; None: none)
        self.fallback: StoreFallback | None = None
        #: (monotonic time of the last look, whether the fallback copy had finished)
        self._done_seen: tuple[float, bool] | None = None

    # -- options -------------------------------------------------------------------

    @property
    def dims(self) -> int | None:
        return int(self.index_config["dims"]) if self.index_config else None

    @property
    def sweep_interval_minutes(self) -> float:
        value = (self.ttl_config or {}).get("sweep_interval_minutes")
        return float(value) if value else DEFAULT_SWEEP_MINUTES

    def _refresh_default(self) -> bool:
        if self.ttl_config is None:
            return True
        return bool(self.ttl_config.get("refresh_on_read", True))

    def _plan(self, ops: Iterable[Any]) -> Plan:
        return plan_batch(ops, self.max_key_bytes)

    # -- the batch -----------------------------------------------------------------

    def _batch(self, ops: Iterable[Any]) -> Op[list[Result]]:
        plan = self._plan(ops)
        now = now_ms()
        # reads see the store as it was before this batch's puts (as PostgresStore does)
        if plan.gets:
            keys = [(op.namespace, op.key) for _, op in plan.gets]
            refresh = [
                op.refresh_ttl if op.refresh_ttl is not None else self._refresh_default()
                for _, op in plan.gets
            ]
            try:
                # read again when a value's chunks went with a concurrent overwrite
                found = yield from reread(lambda: self.port.get(keys, refresh, now))
            except CorruptData as exc:  # the backend names the item; else the one asked for
                namespace, key = keys[0] if len(keys) == 1 else (None, None)
                raise exc.at(Place(namespace=namespace, key=key)) from None
            if self.fallback is not None and None in found:
                yield from self._read_through(keys, refresh, found, now)
            for (i, _), stored in zip(plan.gets, found, strict=True):
                plan.results[i] = None if stored is None else _item(stored)
        for i, op in plan.searches:
            query = yield from self._query(op, now)
            try:
                page = yield from reread(partial(self.port.search, query))
            except CorruptData as exc:
                raise exc.at(Place(namespace=query.prefix)) from None
            plan.results[i] = [_search_item(s, query.vector is not None) for s in page]
        for i, lop in plan.lists:
            prefix = literal_prefix(lop)
            namespaces = yield from self.port.namespaces(prefix, now)
            plan.results[i] = list_page(namespaces, lop)
        if plan.puts:
            yield from self._apply_puts(list(plan.puts.values()))
        return plan.results

    def _read_through(
        self, keys: list[ItemKey], refresh: list[bool], found: list[StoredItem | None], now: int
    ) -> Op[None]:
        """The misses of a ``get`` read from the fallback, adopted (written only where the key
        holds no item and no tombstone, atomically: a put or delete racing it wins), then
        read from graphkeep again: ``found`` ends as graphkeep holds it."""
        fallback = self.fallback
        assert fallback is not None
        if (yield from self._finished()):
            return  # every item of the fallback is here or was deleted here
        misses = [i for i, stored in enumerate(found) if stored is None]
        wanted = list(dict.fromkeys(keys[i] for i in misses))
        copies = yield Call(lambda: fallback.read(wanted, now))
        items = [c for c in copies if c is not None and c.live(now)]
        if not items:
            return
        texts = {
            (c.namespace, c.key): self._texts(PutOp(c.namespace, c.key, c.value)) for c in items
        }
        vectors = yield from self._vectors(texts)
        for item in items:
            item.vectors = vectors[(item.namespace, item.key)]
        yield from self.port.adopt(items, now)
        again = yield from self.port.get(
            [keys[i] for i in misses], [refresh[i] for i in misses], now
        )
        for i, stored in zip(misses, again, strict=True):
            found[i] = stored

    def _stored(self, keys: list[ItemKey]) -> Op[list[StoredItem | None]]:
        plan = self._plan([GetOp(namespace, key) for namespace, key in keys])
        wanted = [(op.namespace, op.key) for _, op in plan.gets]
        return (yield from self.port.get(wanted, [False] * len(wanted), now_ms()))

    def _finished(self, mark: bool = False, fresh: bool = False) -> Op[bool]:
        """Whether the fallback copy has finished (``store copy --all``'s marker): a read
        looks again at most every :data:`DONE_RECHECK_S` until it has, ``fresh`` (the
        public ``fallback_done``) every time; ``mark`` writes it."""
        seen = self._done_seen
        if not (mark or fresh) and seen is not None:
            if seen[1] or time.monotonic() - seen[0] < DONE_RECHECK_S:
                return seen[1]
        done = bool((yield from self.port.switch_done(mark)))
        self._done_seen = (time.monotonic(), done)
        return done

    def adopted_puts(self, puts: list[tuple[PutOp, int, int]]) -> Op[None]:
        """Items copied from the fallback (``graphkeep store copy --all``): as
        :meth:`stamped_puts` keeps their times, but each written only where the key holds no
        item and no tombstone (the port's ``adopt``): never over a newer put, never bringing
        back a deleted item."""
        plan = self._plan([op for op, _, _ in puts])
        ops = [op for op in plan.puts.values() if op.value is not None]
        stamps = {(op.namespace, op.key): (created, updated) for op, created, updated in puts}
        texts = {(op.namespace, op.key): self._texts(op) for op in ops}
        vectors = yield from self._vectors(texts)
        now = now_ms()
        items = [
            StoredItem(
                namespace=op.namespace,
                key=op.key,
                value=dict(cast(dict[str, Any], op.value)),
                created_us=stamps[(op.namespace, op.key)][0],
                updated_us=stamps[(op.namespace, op.key)][1],
                expires_ms=expiry_after_minutes(op.ttl, now),
                ttl_minutes=op.ttl,
                vectors=vectors[(op.namespace, op.key)],
            )
            for op in ops
        ]
        if items:
            yield from self.port.adopt(items, now)

    def _query(self, op: SearchOp, now: int) -> Op[SearchQuery]:
        vector: tuple[float, ...] | None = None
        if op.query and self.index_config:
            embedded = yield Embed((op.query,), query=True)
            vector = tuple(self._check_dims(embedded)[0])
        refresh = op.refresh_ttl if op.refresh_ttl is not None else self._refresh_default()
        return SearchQuery(
            prefix=op.namespace_prefix,
            conditions=compile_filter(op.filter),
            limit=op.limit,
            offset=op.offset,
            refresh=bool(refresh),
            now_ms=now,
            vector=vector,
            distance=self.index_config["distance_type"] if self.index_config else "cosine",
        )

    def _apply_puts(
        self, puts: list[PutOp], stamps: Mapping[ItemKey, tuple[int, int]] | None = None
    ) -> Op[None]:
        texts = {(op.namespace, op.key): self._texts(op) for op in puts if op.value is not None}
        vectors = yield from self._vectors(texts)
        now = now_ms()
        items: list[StoredItem] = []
        deletes: list[ItemKey] = []
        for op in puts:
            key = (op.namespace, op.key)
            if op.value is None:
                deletes.append(key)
                continue
            stamp = STAMPS.now_us()
            created, updated = (stamps or {}).get(key, (stamp, stamp))
            items.append(
                StoredItem(
                    namespace=op.namespace,
                    key=op.key,
                    value=dict(op.value),
                    created_us=created,
                    updated_us=updated,
                    expires_ms=expiry_after_minutes(op.ttl, now),
                    ttl_minutes=op.ttl,
                    vectors=vectors[key],
                )
            )
        # with a fallback, a delete leaves a tombstone: the fallback's copy never comes back
        yield from self.port.put(items, deletes, now, self.fallback is not None)

    def _vectors(
        self, texts: dict[ItemKey, list[tuple[str, str]]]
    ) -> Op[dict[ItemKey, list[Vector]]]:
        """The embeddings of ``texts`` (per item, its (path, text) pairs): a stored vector
        reused for every text that did not change, the others embedded in one request."""
        vectors: dict[ItemKey, list[Vector]] = {k: [] for k in texts}
        wanted = {k: t for k, t in texts.items() if t}
        if wanted:
            # reuse the stored vector of every text that did not change
            keys = list(wanted)
            try:
                stored = yield from self.port.get(keys, [False] * len(keys), now_ms(), True)
            except CorruptData:  # not readable (sealed elsewhere, plaintext): embed afresh
                stored = [None] * len(keys)
            known = {
                (k, v.path, v.digest): v.data
                for k, s in zip(keys, stored, strict=True)
                if s is not None
                for v in s.vectors
            }
            missing = sorted(
                {
                    text
                    for k, pairs in wanted.items()
                    for path, text in pairs
                    if (k, path, text_digest(text)) not in known
                }
            )
            fresh: dict[str, bytes] = {}
            if missing:
                embedded = yield Embed(tuple(missing))
                fresh = {
                    t: pack_vector(v)
                    for t, v in zip(missing, self._check_dims(embedded), strict=True)
                }
            for k, pairs in wanted.items():
                for path, text in pairs:
                    digest = text_digest(text)
                    data = known.get((k, path, digest)) or fresh[text]
                    vectors[k].append(Vector(path, digest, data))
        return vectors

    def stamped_puts(self, puts: list[tuple[PutOp, int, int]]) -> Op[None]:
        """Puts of ``(op, created_us, updated_us)`` that keep the times they are given (epoch
        microseconds) instead of stamping their own: items copied from another store
        (``graphkeep store copy``). A live item already at a key keeps its ``created_at``
        (the port's rule); validation, TTL and embedding are those of ``batch``."""
        plan = self._plan([op for op, _, _ in puts])
        stamps = {(op.namespace, op.key): (created, updated) for op, created, updated in puts}
        yield from self._apply_puts(list(plan.puts.values()), stamps)

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(path, text) pairs to embed for a put, named as PostgresStore names them.

        Configured fields an item lacks are simply not embedded (as PostgresStore does);
        a put that names its own ``index`` paths and none of them holds text is refused.
        """
        if not self.index_config or op.index is False:
            return []
        explicit = op.index is not None
        if explicit:
            paths = [(p, field_tokens(p, InvalidInput)) for p in cast(list[str], op.index)]
        else:
            paths = self.index_config["__tokenized_fields"]
        pairs: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                pairs += [(f"{path}.{i}", text) for i, text in enumerate(texts)]
            elif texts:
                pairs.append((path, texts[0]))
        if explicit and not pairs:
            keys = ", ".join(map(str, cast(dict[str, Any], op.value)))
            raise InvalidInput(
                f"none of the index fields {list(cast(list[str], op.index))} has text in the"
                f" value of {op.key!r} (its keys: {keys})"
            )
        return pairs

    def _check_dims(self, embedded: Any) -> list[list[float]]:
        dims = self.dims
        vectors = [list(map(float, v)) for v in embedded]
        for v in vectors:
            if len(v) != dims:
                raise InvalidInput(
                    f"the embedding model returned {len(v)} dimensions, index['dims'] is {dims}"
                )
            if not all(math.isfinite(x) for x in v):
                raise InvalidInput("the embedding model returned a non-finite number")
        return vectors

    def _sweep(self) -> Op[int]:
        return (yield from self.port.sweep(now_ms()))

    def rekey_op(self, dry_run: bool) -> Op[RekeyCounts]:
        """The op of ``rekey_items`` (see :func:`graphkeep.store.sealed.rekey`)."""
        if not isinstance(self.port, SealedStorePort):
            raise ConfigurationError(
                "rekey_items needs a store opened with encryption= (a KeyRing whose current"
                " key is the new one, the old ones beside it)"
            )
        counts: RekeyCounts = yield from self.observed("rekey", rekey(self.port, dry_run))
        return counts

    def observed(self, name: str, op: Op[Any]) -> Op[Any]:
        """``op`` as one call ``store.<name>`` of this store's telemetry."""
        # a stored item a read refuses (CorruptData) counts in graphkeep.store.read.failures
        return self.telemetry.observe(f"store.{name}", op, local=(Embed,), store_read=True)

    def _observed_batch(self, ops: list[Any]) -> Op[list[Result]]:
        return self.observed(operation_name(ops), self._batch(ops))

    # -- drivers -------------------------------------------------------------------

    def _embed(self, request: Embed) -> list[list[float]]:
        assert self.embeddings is not None
        if request.query:
            return [self.embeddings.embed_query(request.texts[0])]
        return self.embeddings.embed_documents(list(request.texts))

    async def _aembed(self, request: Embed) -> list[list[float]]:
        assert self.embeddings is not None
        if request.query:
            return [await self.embeddings.aembed_query(request.texts[0])]
        return await self.embeddings.aembed_documents(list(request.texts))


def operation_name(ops: list[Any]) -> str:
    """A batch's ``db.operation.name`` after ``store.``: ``get``, ``put``, ``delete``,
    ``search`` or ``list_namespaces`` when every op is of that kind, else ``batch``."""
    kinds = set()
    for op in ops:
        if isinstance(op, GetOp):
            kinds.add("get")
        elif isinstance(op, PutOp):
            kinds.add("put" if op.value is not None else "delete")
        elif isinstance(op, SearchOp):
            kinds.add("search")
        else:
            kinds.add("list_namespaces")
    return kinds.pop() if len(kinds) == 1 else "batch"


def _fields(stored: StoredItem) -> dict[str, Any]:
    """What an ``Item`` and a ``SearchItem`` of ``stored`` share. A value still sealed here
    was read by a store without ``encryption=`` (a sealed port opens every item before): its
    envelope is never passed off as the item's value."""
    envelope = envelope_of(stored.value)
    if envelope is not None:
        raise CorruptData(
            reason=f"its value is encrypted ({sealed_key_id(envelope.data)}) and this store has"
            " no key ring",
            kind=UNKNOWN_KEY,
            place=Place(namespace=stored.namespace, key=stored.key),
            advice="Open the store with encryption=KeyRing(...) holding the writer's key"
            " (GRAPHKEEP_KEYS for the graphkeep command and Agent Server); nothing is"
            " returned in part",
        )
    return {
        "namespace": stored.namespace,
        "key": stored.key,
        "value": stored.value,
        "created_at": datetime_of_us(stored.created_us),
        "updated_at": datetime_of_us(stored.updated_us),
    }


def _item(stored: StoredItem) -> Item:
    return Item(**_fields(stored))


def _search_item(stored: StoredItem, scored: bool) -> SearchItem:
    return SearchItem(**_fields(stored), score=stored.score if scored else None)


class SyncStore(StoreBase):
    """A store on a blocking client; ``abatch`` runs it in a worker thread."""

    def __init__(self, port: StorePort, execute: Callable[[Any], Any], **options: Any) -> None:
        super().__init__(port, execute=execute, **options)
        self._execute = execute

    def _run(self, request: Any) -> Any:
        return self._embed(request) if isinstance(request, Embed) else self._execute(request)

    def _call(self, op: Op[Any]) -> Any:
        return drive(op, self._run)

    def setup(self) -> None:
        self._call(self.observed("setup", self.port.setup()))

    def batch(self, ops: Iterable[Any]) -> list[Result]:
        return cast(list[Result], self._call(self._observed_batch(list(ops))))

    async def abatch(self, ops: Iterable[Any]) -> list[Result]:
        ops = list(ops)
        return await asyncio.to_thread(self.batch, ops)

    def put_stamped(self, puts: list[tuple[PutOp, int, int]]) -> None:
        """Puts keeping the given ``created_at``/``updated_at`` (see :meth:`stamped_puts`)."""
        self._call(self.observed("put", self.stamped_puts(puts)))

    def stored_items(self, keys: list[ItemKey]) -> list[StoredItem | None]:
        """The items at ``keys`` as stored, expiry and TTL included, never refreshing one
        (what a store reading through to this one reads)."""
        return cast(
            list[StoredItem | None],
            self._call(self.observed("get", self._stored(keys))),
        )

    def put_adopted(self, puts: list[tuple[PutOp, int, int]]) -> None:
        """Items copied from a fallback, never over what this store holds or deleted (see
        :meth:`adopted_puts`)."""
        self._call(self.observed("put", self.adopted_puts(puts)))

    def fallback_done(self) -> bool:
        """Whether ``graphkeep store copy SOURCE URL --all`` has finished copying the
        fallback into this store: from then on searches and listings see every item."""
        return bool(self._call(self.observed("fallback_done", self._finished(fresh=True))))

    def mark_fallback_done(self) -> None:
        """Record that the fallback copy has finished (``store copy --all`` does, at its
        end)."""
        self._call(self.observed("fallback_done", self._finished(mark=True)))

    async def afallback_done(self) -> bool:
        """:meth:`fallback_done` in a worker thread."""
        return await asyncio.to_thread(self.fallback_done)

    def sweep_ttl(self) -> int:
        """Remove expired items now; the number removed."""
        return int(self._call(self.observed("sweep_ttl", self._sweep())))

    def rekey_items(self, *, dry_run: bool = False) -> RekeyCounts:
        """Every item under an older key rewritten under the current one (see
        :func:`graphkeep.store.rekey_items`)."""
        return cast(RekeyCounts, self._call(self.rekey_op(dry_run)))

    def close(self) -> None:
        """Stop the TTL sweeper (``from_url`` does on exit)."""
        self.stop_ttl_sweeper(1)

    def start_ttl_sweeper(
        self, sweep_interval_minutes: int | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in a daemon thread."""
        if self._sweeper is not None and not self._sweeper.future.done():
            return cast(concurrent.futures.Future[None], self._sweeper.future)
        interval = 60 * (sweep_interval_minutes or self.sweep_interval_minutes)
        self._sweeper = ThreadSweeper(self.sweep_ttl, interval)
        return cast(concurrent.futures.Future[None], self._sweeper.future)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True when it stopped within ``timeout``."""
        if self._sweeper is None:
            return True
        if not self._sweeper.stop(timeout):
            return False
        self._sweeper = None
        return True


class AsyncStore(StoreBase, AsyncBatchedBaseStore):
    """A store on an asyncio client, batched as LangGraph's own async stores are.

    ``aget``/``aput``/``asearch``/... calls made in the same event-loop tick are gathered
    into one ``abatch`` (one round trip per partition on Redis) by LangGraph's
    ``AsyncBatchedBaseStore``, so a burst of thousands of concurrent calls never needs
    thousands of connections. Inputs are checked when each call is made, so a bad call fails
    alone. Sync calls hop onto the store's event loop from another thread (as LangGraph's
    sync ``invoke`` in a worker does); create the store inside a running event loop.
    """

    def __init__(self, port: StorePort, aexecute: Callable[[Any], Any], **options: Any) -> None:
        self._task = None  # AsyncBatchedBaseStore.__del__ reads it even if __init__ fails
        StoreBase.__init__(self, port, execute=aexecute, **options)
        AsyncBatchedBaseStore.__init__(self)
        self._aexecute = aexecute
        self.loop = running_loop()

    # each call checked alone before it joins a batch (a bad one must not fail the others)

    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        self._plan([GetOp(namespace, key)])
        return await super().aget(namespace, key, refresh_ttl=refresh_ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | None | NotProvided = NOT_PROVIDED,
    ) -> None:
        checked = None if isinstance(ttl, NotProvided) else ttl
        self._plan([PutOp(namespace, key, cast(dict[str, Any], value), index, checked)])
        await super().aput(namespace, key, value, index, ttl=ttl)

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        self._plan([PutOp(namespace, key, None)])
        await super().adelete(namespace, key)

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        self._plan([SearchOp(namespace_prefix, filter, limit, offset, query)])
        return await super().asearch(
            namespace_prefix,
            query=query,
            filter=filter,
            limit=limit,
            offset=offset,
            refresh_ttl=refresh_ttl,
        )

    async def aclose(self) -> None:
        """Stop the TTL sweeper and the batching task (``from_url`` does on exit)."""
        await self.stop_ttl_sweeper(1)
        task = self._task
        if task is not None:
            await cancel_until_done([task])

    async def _arun(self, request: Any) -> Any:
        if isinstance(request, Embed):
            return await self._aembed(request)
        return await self._aexecute(request)

    async def _acall(self, op: Op[Any]) -> Any:
        return await adrive(op, self._arun)

    async def setup(self) -> None:
        await self._acall(self.observed("setup", self.port.setup()))

    async def abatch(self, ops: Iterable[Any]) -> list[Result]:
        return cast(list[Result], await self._acall(self._observed_batch(list(ops))))

    def batch(self, ops: Iterable[Any]) -> list[Result]:
        return cast(
            list[Result],
            on_loop(
                self.loop,
                self.abatch(list(ops)),
                "store",
                "the async methods (aget, asearch, aput, ...) or a sync store from"
                " graphkeep.connect_store()",
            ),
        )

    async def aput_stamped(self, puts: list[tuple[PutOp, int, int]]) -> None:
        """Puts keeping the given ``created_at``/``updated_at`` (see :meth:`stamped_puts`)."""
        await self._acall(self.observed("put", self.stamped_puts(puts)))

    def stored_items(self, keys: list[ItemKey]) -> list[StoredItem | None]:
        """The items at ``keys`` as stored (see :meth:`SyncStore.stored_items`), from another
        thread, on the store's event loop."""
        return cast(
            list[StoredItem | None],
            on_loop(
                self.loop,
                self._acall(self.observed("get", self._stored(keys))),
                "store",
                "a sync store from graphkeep.connect_store()",
            ),
        )

    async def aput_adopted(self, puts: list[tuple[PutOp, int, int]]) -> None:
        """Items copied from a fallback, never over what this store holds or deleted (see
        :meth:`adopted_puts`)."""
        await self._acall(self.observed("put", self.adopted_puts(puts)))

    async def afallback_done(self) -> bool:
        """Whether ``graphkeep store copy SOURCE URL --all`` has finished copying the
        fallback into this store: from then on searches and listings see every item."""
        return bool(await self._acall(self.observed("fallback_done", self._finished(fresh=True))))

    def fallback_done(self) -> bool:
        """:meth:`afallback_done` from another thread (on the store's event loop)."""
        return bool(
            on_loop(self.loop, self.afallback_done(), "store", "await store.afallback_done()")
        )

    async def amark_fallback_done(self) -> None:
        """Record that the fallback copy has finished."""
        await self._acall(self.observed("fallback_done", self._finished(mark=True)))

    async def sweep_ttl(self) -> int:
        """Remove expired items now; the number removed."""
        return int(await self._acall(self.observed("sweep_ttl", self._sweep())))

    async def rekey_items(self, *, dry_run: bool = False) -> RekeyCounts:
        """Every item under an older key rewritten under the current one (see
        :func:`graphkeep.store.rekey_items`)."""
        return cast(RekeyCounts, await self._acall(self.rekey_op(dry_run)))

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: int | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in a background task."""
        if self._sweeper is not None and not self._sweeper.task.done():
            return cast(asyncio.Task[None], self._sweeper.task)
        interval = 60 * (sweep_interval_minutes or self.sweep_interval_minutes)
        self._sweeper = TaskSweeper(self.sweep_ttl, interval)
        return cast(asyncio.Task[None], self._sweeper.task)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; True when it stopped within ``timeout``."""
        if self._sweeper is None:
            return True
        if not await self._sweeper.stop(timeout):
            return False
        self._sweeper = None
        return True
