"""The live switch: a graphkeep saver reading through to the saver an app used before
(``graphkeep.connect(url, fallback=SOURCE)``).

The saver's ops hand each thread to :class:`Mover` before they touch it
(:mod:`graphkeep.checkpoint.fallback`). A thread is *settled* once the fallback is never to be
read for it again; the mark lives in graphkeep beside the thread's lease and survives
``delete_thread``, ``prune`` and TTL (:meth:`~graphkeep.checkpoint.port.CheckpointPort.settle`).
The first use of a thread that is not settled:

1. takes the thread's lease (``saver.lock``: the caller's where it holds one already, a
   ``saver.exclusive`` run's taken now), so two workers never move one thread at once and a
   run never writes beside a move; every write of the move carries the lease's fencing token
   (a mover that stalled past its lease has its next write refused), and the lease is renewed
   as the move goes;
2. looks at the mark again (another worker may have moved the thread while this one waited);
3. reads the thread from the fallback — in a worker thread for an async saver
   (:class:`~graphkeep.port.ops.Call`), the lease renewed meanwhile by the thread that renews
   ``saver.exclusive`` runs' leases, so a big thread on a slow fallback never outlives it; only
   reads, never a write to the fallback; the move's writes stay requests of the op, made in the
   driver's context with the lease's fencing token, sync and async — and writes
   what graphkeep lacks, oldest first, writes before their checkpoint, versions translated as
   ``graphkeep copy`` does (:mod:`.versions`, :mod:`.writing`); checkpoints already here (an
   interrupted move, ``graphkeep copy``) are kept as they are;
4. verifies every checkpoint through LangGraph's read path (:mod:`.compare`): a difference
   raises :class:`~graphkeep.errors.MoveFailed` and the thread stays unsettled;
5. settles the thread, then lets the lease go.

A delete (``delete_thread``, ``prune(strategy="delete")``) settles the thread under its lease
first, without moving it: a move under way finishes before, and none starts after, so a
deleted thread never comes back. Writes go to graphkeep only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from graphkeep.checkpoint.exclusive import renewed
from graphkeep.checkpoint.fallback import moving
from graphkeep.checkpoint.lock import ThreadLock, taken_with_read
from graphkeep.checkpoint.put import put_op, put_writes_op
from graphkeep.checkpoint.read import get_tuple_op
from graphkeep.errors import GraphkeepError, LeaseLost, MoveFailed, StorageUnavailable
from graphkeep.moving.compare import compare_tuples, config_of, error_text, place_of
from graphkeep.moving.items import CheckpointItem, fingerprint, oldest_first, read_thread
from graphkeep.moving.openers import unreachable
from graphkeep.moving.versions import plan_versions, version_kind
from graphkeep.moving.writing import put_args, writes_args
from graphkeep.port import Call, Op
from graphkeep.port.fence import fence_of

if TYPE_CHECKING:
    from graphkeep.checkpoint.saver import SaverBase

#: the lease a move takes (renewed every third of it while the move goes on)
LEASE_TTL = 30.0
#: settled thread ids remembered per process (a mark is never taken back, so a remembered
#: one is never stale); forgotten all at once past this many
KNOWN_MAX = 100_000


@dataclass
class FallbackSource:
    """A saver read as the fallback: its own reader of a thread where it has one (a rival's
    storage read directly, as ``graphkeep copy`` reads it), else its public API."""

    saver: Any
    label: str
    tuples: Callable[[str], list[Any]] | None = None
    write_rows: Callable[[str, str, str], list[tuple[str, int, str, str]] | None] | None = None
    #: its own listing of its threads (with ``tuples``: ``list(None)`` reads each unsettled
    #: thread its own way, never the saver's ``list(None)``, which may write: plainredis)
    threads: Callable[[], Iterator[str]] | None = None


class _Renewal:
    """A move's lease renewed every third of its ttl (``lease`` None: the lease is the
    caller's own, taken before the move, which the caller renews as any holder does):
    :meth:`kept` from the grant until the release, and :meth:`op` between the move's steps,
    which also finds a lease lost meanwhile."""

    def __init__(self, thread_id: str, lease: ThreadLock | None) -> None:
        self.thread_id = thread_id
        self.lease = lease
        self.period = (lease.ttl_ms / 1000 if lease is not None else LEASE_TTL) / 3
        self.last = time.monotonic()

    def op(self) -> Op[None]:
        """Renew if due; a lease lost meanwhile raises :class:`~graphkeep.errors.LeaseLost`."""
        if self.lease is None or time.monotonic() - self.last < self.period:
            return
        if not (yield from self.lease.extend_op()):
            raise LeaseLost(self.thread_id, self.lease.fence or 0)
        self.last = time.monotonic()

    def kept(self) -> AbstractContextManager[None]:
        """The lease renewed for the block by the process's lease renewer (as a
        ``saver.exclusive`` run's: :func:`~graphkeep.checkpoint.exclusive.renewed`), on time
        whatever the move waits on — a slow fallback's read (inline for a sync saver, a worker
        thread for an async one: :class:`~graphkeep.port.ops.Call`), a slow store's writes."""
        return nullcontext() if self.lease is None else renewed(self.lease, self.period)


def _matches(tup: Any, filter: dict[str, Any] | None) -> bool:
    return not filter or all((tup.metadata or {}).get(k) == v for k, v in filter.items())


class Mover:
    """A saver's ``fallback``: moves each thread from ``source`` on its first use."""

    def __init__(self, source: FallbackSource, *, lease_ttl: float = LEASE_TTL) -> None:
        self.source = source
        self.lease_ttl = lease_ttl
        self.known: set[str] = set()
        #: what this process copied: threads (those it wrote a checkpoint of), checkpoints
        self.moved_threads = 0
        self.moved_checkpoints = 0

    def _remember(self, thread_id: str) -> None:
        if len(self.known) >= KNOWN_MAX:
            self.known.clear()
        self.known.add(thread_id)

    def settled(self, saver: SaverBase, thread_id: str) -> Op[bool]:
        if thread_id in self.known:
            return True
        found = yield from saver.port.is_settled(thread_id)
        if found:
            self._remember(thread_id)
        return bool(found)

    def first_use(self, saver: SaverBase, thread_id: str) -> Op[None]:
        if not (yield from self.settled(saver, thread_id)):
            yield from self._leased(saver, thread_id, move=True)

    def before_delete(self, saver: SaverBase, thread_id: str) -> Op[None]:
        if not (yield from self.settled(saver, thread_id)):
            yield from self._leased(saver, thread_id, move=False)

    def unsettled_tuples(
        self, saver: SaverBase, filter: dict[str, Any] | None, limit: int | None
    ) -> Op[list[Any]]:
        source = self.source
        kept: list[Any] = []
        if source.threads is not None and source.tuples is not None:
            threads, tuples = source.threads, source.tuples
            for thread_id in (yield Call(lambda: list(threads()))):
                if limit is not None and len(kept) >= limit:
                    break
                if not (yield from self.settled(saver, thread_id)):
                    found = yield Call(partial(tuples, thread_id))
                    kept += [tup for tup in found if _matches(tup, filter)]
            return kept[:limit] if limit is not None else kept
        listed = yield Call(lambda: list(source.saver.list(None, filter=filter)))
        for tup in listed:
            if limit is not None and len(kept) >= limit:
                break
            thread_id = str(tup.config["configurable"]["thread_id"])
            if not (yield from self.settled(saver, thread_id)):
                kept.append(tup)
        return kept

    def _leased(self, saver: SaverBase, thread_id: str, *, move: bool) -> Op[None]:
        own: ThreadLock | None = None
        renewable: ThreadLock | None = None
        if fence_of(thread_id) is None:  # not held by this context already
            waiting = taken_with_read(saver, thread_id)
            if waiting is not None:  # a saver.exclusive run: its lease, taken now
                yield from waiting.take_op()
                renewable = waiting
            else:
                own = renewable = saver.lock(thread_id, ttl=self.lease_ttl)
                yield from own.take_op()
        renewal = _Renewal(thread_id, renewable)
        try:
            with renewal.kept():  # from the grant on, until just before the release
                if not (yield from saver.port.is_settled(thread_id)):
                    if move:
                        yield from self._move(saver, thread_id, renewal)
                    yield from saver.port.settle(thread_id)
        finally:
            if own is not None:
                yield from own.release_op()
                own.let_go()
        self._remember(thread_id)

    def _move(self, saver: SaverBase, thread_id: str, renewal: _Renewal) -> Op[None]:
        with moving(thread_id):  # the move's own reads and writes skip the hook
            try:
                read = yield Call(lambda: read_thread(self.source, thread_id))
            except Exception as exc:
                if isinstance(exc, GraphkeepError) or not unreachable(exc):
                    raise
                text = " ".join(f"{type(exc).__name__}: {exc}".split())
                raise StorageUnavailable(
                    f"the fallback {self.source.label} is unavailable ({text})"
                ) from exc
            if not read:
                return
            items = oldest_first([item for item, _ in read])
            tuples = {(item.ns, item.checkpoint_id): tup for item, tup in read}
            unreadable = [i.checkpoint_id for i in items if not isinstance(i.checkpoint, dict)]
            if unreadable:
                raise MoveFailed(
                    thread_id, [f"checkpoint {c}: unreadable on the fallback" for c in unreadable]
                )
            plan = plan_versions(items, version_kind(saver), fingerprint)
            inventory = yield from saver.port.inventory(thread_id)
            present = {(s.ns, s.checkpoint_id) for s in inventory.checkpoints}
            by_key = {(i.ns, i.checkpoint_id): i for i in items}
            copied = 0
            for item in items:
                # writes are insert-if-absent: a present checkpoint's missing ones are added
                for config, batch, task_id, task_path in writes_args(thread_id, item):
                    yield from put_writes_op(saver, config, batch, task_id, task_path)
                if (item.ns, item.checkpoint_id) not in present:
                    parent = by_key.get((item.ns, item.parent_id)) if item.parent_id else None
                    yield from put_op(saver, *put_args(thread_id, item, parent, plan))
                    copied += 1
                yield from renewal.op()
            problems = yield from self._verify(saver, thread_id, items, tuples, plan, renewal)
            if problems:
                raise MoveFailed(thread_id, problems)
            self.moved_threads += 1 if copied else 0
            self.moved_checkpoints += copied

    def _verify(
        self,
        saver: SaverBase,
        thread_id: str,
        items: list[CheckpointItem],
        tuples: dict[tuple[str, str], Any],
        plan: Any,
        renewal: _Renewal,
    ) -> Op[list[str]]:
        problems: list[str] = []
        for item in items:
            yield from renewal.op()
            at = place_of(item.ns, item.checkpoint_id)
            try:
                dest = yield from get_tuple_op(
                    saver, config_of(thread_id, item.ns, item.checkpoint_id)
                )
            except Exception as exc:  # a value this process cannot load
                problems.append(f"{at}: unreadable here: {error_text(exc)}")
                continue
            if dest is None:
                problems.append(f"{at}: missing here")
                continue
            source = tuples[(item.ns, item.checkpoint_id)]
            fields = compare_tuples(source, dest, plan.versions(item), plan.seen(item))
            if fields:
                problems.append(f"{at}: differs: {'; '.join(fields)}")
        return problems
