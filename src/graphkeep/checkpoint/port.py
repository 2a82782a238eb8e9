"""The checkpoint port: what a backend maps onto its store for the savers.

Every method is an op (:mod:`graphkeep.port.ops`): a generator yielding the store's own
requests. :class:`graphkeep.checkpoint.saver.SaverBase` holds the contract and asks the
port; a backend's ``checkpoint`` module implements it (``RedisCheckpointPort``…).
"""

from __future__ import annotations

from typing import Any, Protocol

from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.serde.types import INTERRUPT

from graphkeep.checkpoint.records import (
    Activity,
    BlobRecord,
    Chain,
    CheckpointKeys,
    CheckpointRecord,
    Inventory,
    Link,
    ListQuery,
    Loaded,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.port.ops import Op

#: the index LangGraph gives an interrupt's pending write (``WRITES_IDX_MAP[INTERRUPT]``)
INTERRUPT_IDX = WRITES_IDX_MAP[INTERRUPT]


class CheckpointPort(Protocol):
    """What a backend maps onto its store. Thread ids and names arrive validated.

    Capabilities, class attributes a port inherits from this protocol (a backend's port
    subclasses it) and overrides when it has them:

    - ``compresses`` (default False): the port compresses payloads itself, so the saver
      stores them as they are; otherwise the saver zlib-compresses large payloads;
      ``compression`` (default None) is then the port's own rule, (zlib level, smallest
      payload compressed) or None when it is turned off: a sealed payload is ciphertext,
      which does not compress, so with ``encryption=`` the saver compresses each payload
      by that rule before it is sealed (:func:`graphkeep.checkpoint.saver.squeezer`);
    - ``feed`` (default False): the port has a native commit feed (:class:`Feed`) that
      ``watch`` blocks on; otherwise ``watch`` polls :meth:`commits`;
    - ``probes`` (default False): the port answers :meth:`checkpoint_keys`, so a Redis hot
      layer can sit over it (:mod:`graphkeep.checkpoint.hot`);
    - ``leases_with_read`` (default False): :meth:`load_leased` takes the lease and reads in
      one request, so ``saver.exclusive``'s runs take their lease with their first read;
      otherwise with a request of their own before it.

    Semantics every implementation must keep (see docs/architecture.md):
    - ``put_checkpoint`` stores ``blobs`` and then the record so that no reader
      ever sees the record without its blobs; upsert on (thread, ns, id).
    - ``put_writes``: regular writes (idx >= 0) are insert-if-absent per
      (thread, ns, checkpoint_id, task_id, idx); special writes replace.
    - ``load`` returns the exact checkpoint, or the max id in (thread, ns).
    - ``list_page`` returns newest-first pages; it may pre-filter on metadata.
    - TTL: every write refreshes the expiry of all the thread needs, including
      the list elements its manifests name (``lists.ELEMENT_CHANNEL`` blobs).
    - Chunks (a store that splits a large payload into records of its own: MongoDB's tail
      documents, DynamoDB's chunk items): a payload written again in place with other
      bytes (a checkpoint put again with its id, a value written again, a special write
      replaced, a regular write sent again, an import over the thread) leaves none of its
      old chunks stored, and none of the new ones when the first write is kept; they are
      deleted after the record naming the new bytes is stored, never before. A read that
      meets a record whose chunks are not stored raises
      :class:`~graphkeep.port.torn.Torn` and ``load``, ``list_page``, ``get_blobs`` and
      ``chain`` read again (:func:`~graphkeep.port.torn.reread`): an overwrite removed
      them since the record was read, or, still missing, the data is damaged
      (``CorruptData``, ``missing_value``); a value is never read as absent or in part.
    - Fencing: a write given ``fence`` (the fencing token of the lease its caller holds,
      :mod:`graphkeep.port.fence`) checks it in the same request and, when a newer
      token was granted on the thread (:meth:`acquire_lock`), stores nothing and raises
      :class:`~graphkeep.errors.LeaseLost`; ``fence=None`` writes are not checked.
    """

    compresses: bool = False
    compression: tuple[int, int] | None = None
    feed: bool = False
    probes: bool = False
    leases_with_read: bool = False

    def setup(self) -> Op[None]: ...

    def put_checkpoint(
        self, record: CheckpointRecord, blobs: list[BlobRecord], fence: int | None = None
    ) -> Op[None]: ...

    def put_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        writes: list[WriteRecord],
        fence: int | None = None,
    ) -> Op[None]: ...

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]: ...

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]: ...

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]: ...

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        """Blobs by ``(ns, channel, version)``; absent keys are left out.

        Used for list elements (channel ``lists.ELEMENT_CHANNEL``, whose keys are
        sorted and mostly contiguous: a store may read them as ranges) and for
        the manifests a prune must look into. One request where the store allows.
        """
        ...

    def delete_thread(self, thread_id: str, fence: int | None = None) -> Op[None]: ...

    def inventory(self, thread_id: str) -> Op[Inventory]:
        """Every checkpoint's summary, write key and value key of the thread, and when each
        unit of its storage expires (:class:`~graphkeep.checkpoint.records.Expiring`), in
        one request where the store allows (one per page on DynamoDB); never a payload."""
        ...

    def rearm(self, thread_id: str, refs: list[Any], at: float | None) -> Op[None]:
        """Set the expiry of the thread's units ``refs`` (``Expiring.ref`` of its
        ``inventory``) to ``at`` (epoch seconds; None: never), leaving units that are gone
        gone; nothing else changes. ``graphkeep check --repair`` re-arms expiry drift."""
        ...

    def delete_records(
        self,
        thread_id: str,
        checkpoints: list[tuple[str, str]],
        blobs: list[tuple[str, str, str]],
        fence: int | None = None,
    ) -> Op[None]: ...

    def find_runs(self, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]: ...

    def export_thread(self, thread_id: str) -> Op[ThreadDump]: ...

    def import_thread(
        self, thread_id: str, dump: ThreadDump, fence: int | None = None
    ) -> Op[None]: ...

    def chunk_refs(self, thread_id: str) -> Op[frozenset[str]]:
        """The thread's chunk items (a store that splits large payloads into items of their
        own whose keys follow the bytes: DynamoDB's chunk items, MongoDB's tail documents);
        empty where a store keeps none apart."""
        return frozenset()
        yield  # an op

    def drop_chunks(
        self, thread_id: str, refs: frozenset[str], fence: int | None = None
    ) -> Op[None]:
        """Delete the chunk items ``refs`` (of :meth:`chunk_refs`, read before a payload was
        rewritten in place: ``graphkeep rekey``) that no stored record names any more."""
        return
        yield  # an op

    def list_threads(self, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]: ...

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        """``(ns, checkpoint_id)`` of the thread's checkpoints with an id above ``above``.

        Ascending by checkpoint id (then namespace), at most ``limit``; ``above=None``
        starts at the first; ``ns=None`` means every namespace. Served by an index
        (never a scan of the thread's values): ``watch`` polls and catches up with it.
        """
        ...

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        """The thread's highest checkpoint id (in ``ns``, or any when None); None if none."""
        ...

    def checkpoint_keys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> Op[list[CheckpointKeys]]:
        """The :class:`~graphkeep.checkpoint.records.CheckpointKeys` of checkpoint
        ``checkpoint_id`` of ``(thread_id, ns)`` and, when ``newer``, of every newer one,
        ascending by id; empty when it is gone. Keys only (never a payload), in ONE
        request; what ``load`` hides (expired) is left out; what it cannot read yet (a
        payload still being written) may show, so the hot layer reads the store then, never
        its cache. Only a port whose ``probes`` is True has it."""
        raise NotImplementedError(f"{type(self).__name__} has no key-only read (probes=False)")
        yield  # an op

    def write_indexes(self, thread_id: str, ns: str, checkpoint_id: str) -> Op[list[int]]:
        """The ``idx`` of each pending write of one checkpoint, from the store's keys or
        index (never a write's value): ``WRITES_IDX_MAP[INTERRUPT]`` marks an interrupt."""
        ...

    def storage_bytes(self) -> Op[int | None]:
        """What the store's checkpoints occupy, in one request of the store's own statistics
        (never a payload); None (the default) when the store has none, or when
        :meth:`activity` reports each thread's bytes instead."""
        return None
        yield  # an op: a generator that yields no request

    def activity(self, thread_id: str, above: str, limit: int) -> Op[Activity]:
        """The thread's :class:`~graphkeep.checkpoint.records.Activity` for a health scan.

        The default composes index reads: :meth:`commits` above ``above`` (or
        :meth:`recent_links`, the same read with each head's parent and source), which, when not
        capped at ``limit``, also names the newest checkpoint and the root namespace's
        newest), :meth:`newest_commit` only for what it did not, then :meth:`write_indexes`
        of the root's latest checkpoint; no bytes. An active thread costs two requests,
        an idle one four. A store that can answer in fewer overrides it (Redis: one script,
        with the thread's memory usage).
        """
        links = yield from self.recent_links(thread_id, above, limit)
        if links is None:
            commits = yield from self.commits(thread_id, None, above, limit)
        else:
            commits = [(link.ns, link.checkpoint_id) for link in links]
        complete = len(commits) < limit
        recent = [cid for _, cid in commits]
        newest: str | None
        if commits and complete:
            newest = max(recent)
        else:
            newest = yield from self.newest_commit(thread_id, None)
            if newest is None:
                return Activity(thread_id, None, [], False, None)
        roots = [cid for ns, cid in commits if ns == ""]
        root: str | None
        if roots and complete:
            root = max(roots)
        else:
            root = yield from self.newest_commit(thread_id, "")
        interrupted = False
        if root is not None:
            indexes = yield from self.write_indexes(thread_id, "", root)
            interrupted = INTERRUPT_IDX in indexes
        return Activity(thread_id, newest, recent, interrupted, None, links)

    def recent_links(self, thread_id: str, above: str, limit: int) -> Op[list[Link] | None]:
        """The :class:`~graphkeep.checkpoint.records.Link` of each checkpoint
        :meth:`commits` ``(thread_id, None, above, limit)`` answers, in its order, read in the
        requests it would send (so :meth:`activity` sends no more); None (the default) when
        the store cannot read parents and sources that way: the scan then counts no fork."""
        return None
        yield  # an op: a generator that yields no request

    def activities(self, thread_ids: list[str], above: str, limit: int) -> Op[list[Activity]]:
        """:meth:`activity` of each thread, in order (a store may batch them: Redis
        pipelines one script per thread)."""
        found = []
        for thread_id in thread_ids:
            found.append((yield from self.activity(thread_id, above, limit)))
        return found

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[int]:
        """Take the thread's lease if free (or expired, or already ``token``'s): the grant's
        fencing token, or 0 when another holder has it. The fencing token only grows per
        thread: the larger of the thread's last one plus one and the clock's epoch
        milliseconds (so it grows even where the store forgot the last one); it is kept
        apart from the thread's data (``delete_thread`` leaves it)."""
        ...

    def load_leased(
        self, thread_id: str, ns: str, checkpoint_id: str | None, token: str, ttl_ms: int
    ) -> Op[tuple[int, Loaded | None]]:
        """:meth:`acquire_lock` and, when granted, :meth:`load`: ``(fencing token, loaded)``,
        ``(0, None)`` when another holder has the lease (nothing read). A run of
        ``saver.exclusive`` takes its lease this way, with its first read, on a port with
        ``leases_with_read`` (which overrides this with one request: Redis, one script);
        this default costs the two requests."""
        fence = yield from self.acquire_lock(thread_id, token, ttl_ms)
        if not fence:
            return 0, None
        return fence, (yield from self.load(thread_id, ns, checkpoint_id))

    def is_settled(self, thread_id: str) -> Op[bool]:
        """Whether the thread is *settled*: a fallback saver (``fallback=``) is never read for
        it again — moved from it, found absent there, or deleted here. The mark is kept apart
        from the thread's data (``delete_thread``, ``prune`` and TTL leave it) and only ever
        set (:mod:`graphkeep.moving.fallback`)."""
        ...

    def settle(self, thread_id: str) -> Op[None]:
        """Mark the thread settled (idempotent; see :meth:`is_settled`)."""
        ...

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        """Free the lease only if ``token`` still holds it; True when released."""
        ...

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        """Push the lease's expiry out if ``token`` still holds it."""
        ...


class Feed(Protocol):
    """A port with a native commit feed (``port.feed`` is True): ``watch`` blocks on it.

    ``put_checkpoint`` appends ``(ns, checkpoint_id)`` to the thread's feed in the
    same atomic step as the record, so the feed's order is the commit order.
    """

    feed: bool

    def feed_end(self, thread_id: str) -> Op[Any]:
        """The position of the newest entry of the thread's feed (one before any when empty)."""
        ...

    def feed_read(
        self, thread_id: str, position: Any, wait_ms: int
    ) -> Op[tuple[list[tuple[str, str]], Any]]:
        """Entries after ``position`` in commit order and the new position; when there
        are none, wait up to ``wait_ms`` for one (0: do not wait)."""
        ...
