"""The saver's thread maintenance as ops: ``delete_thread``, ``delete_for_runs``, ``copy_thread``
and ``prune``, deleting only what no kept checkpoint needs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from graphkeep.checkpoint.check import plan_problems
from graphkeep.checkpoint.fallback import before_delete, first_use
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, element_blob_keys, is_manifest
from graphkeep.checkpoint.lock import ThreadLock
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import Inventory, Typed
from graphkeep.checkpoint.walk import keep_latest
from graphkeep.errors import LockNotAcquired, ThreadBusy, UnsafePrune
from graphkeep.port import Op
from graphkeep.port.fence import fence_of

if TYPE_CHECKING:
    from graphkeep.checkpoint.saver import SaverBase

PRUNE_STRATEGIES = ("keep_latest", "delete")
#: the lease ``prune`` and ``delete_for_runs`` take on a thread for the call (ms): far longer
#: than they need for one thread; a crashed caller's expires by itself
MAINTENANCE_LEASE_MS = 60_000
#: how long they wait for a thread another holder has (a run finishing, another delete of the
#: same runs: LangGraph's Agent Server deletes a rolled-back run's checkpoints twice at once)
#: before they raise ThreadBusy
MAINTENANCE_WAIT_SECONDS = 30.0

Fences = dict[str, int | None]


def delete_thread_op(saver: SaverBase, thread_id: Any) -> Op[None]:
    """The op of ``delete_thread``: the thread's records, and those other products keep
    with it (:attr:`~graphkeep.checkpoint.saver.SaverBase.thread_scoped`)."""
    thread = saver.check_thread_id(thread_id)
    yield from before_delete(saver, thread)  # fallback=: never read from it again
    saver.lists.forget(thread)
    yield from saver.port.delete_thread(thread, fence_of(thread))
    yield from _delete_scoped(saver, thread)


def delete_for_runs_op(saver: SaverBase, run_ids: Sequence[str]) -> Op[None]:
    """The op of ``delete_for_runs``: the checkpoints those runs wrote, with their writes
    and the values no other checkpoint uses."""
    if isinstance(run_ids, str):
        raise TypeError("run_ids must be a sequence of run ids, not a single str")
    wanted = [str(r) for r in run_ids if r is not None and str(r)]
    if not wanted:
        return
    found = yield from saver.port.find_runs(wanted)

    def delete(fences: Fences) -> Op[None]:
        for thread_id, doomed in found.items():
            inventory = yield from saver.port.inventory(thread_id)
            yield from _delete_keeping(saver, thread_id, inventory, set(doomed), fences[thread_id])

    yield from _leased(saver, list(found), "delete_for_runs", delete)


def copy_thread_op(saver: SaverBase, source_thread_id: Any, target_thread_id: Any) -> Op[None]:
    """The op of ``copy_thread``: every record of the source thread, under the target's id."""
    source = saver.check_thread_id(source_thread_id)
    target = saver.check_thread_id(target_thread_id)
    if source == target:
        return
    yield from first_use(saver, source)
    yield from first_use(saver, target)
    dump = yield from saver.port.export_thread(source)
    if dump:
        yield from saver.port.import_thread(target, dump, fence_of(target))


def prune_op(saver: SaverBase, thread_ids: Sequence[str], strategy: str) -> Op[None]:
    """The op of ``prune``: per thread, ``keep_latest`` keeps each namespace's newest
    checkpoint and the ancestors its DeltaChannels replay (:func:`keep_latest_plan`),
    ``delete`` drops it all.

    ``keep_latest`` plans every thread of the batch before it deletes anything, so a plan
    the pre-flight refuses (:class:`~graphkeep.errors.UnsafePrune`) leaves the whole batch
    as it was, as PostgresSaver's refusal does."""
    if isinstance(thread_ids, str):
        raise TypeError("thread_ids must be a sequence of thread ids, not a single str")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES}")
    threads = list(dict.fromkeys(saver.check_thread_id(t) for t in thread_ids))
    for thread_id in threads:  # fallback=: deleted ones settled, the others moved first
        yield from (before_delete if strategy == "delete" else first_use)(saver, thread_id)

    def delete(fences: Fences) -> Op[None]:
        for thread_id in threads:
            saver.lists.forget(thread_id)
            yield from saver.port.delete_thread(thread_id, fences[thread_id])
            yield from _delete_scoped(saver, thread_id)

    def keep(fences: Fences) -> Op[None]:
        plans: list[tuple[str, list[tuple[str, str]], list[tuple[str, str, str]]]] = []
        for thread_id in threads:
            saver.lists.forget(thread_id)
            inventory = yield from saver.port.inventory(thread_id)
            doomed = keep_latest_plan(inventory)
            plans.append(
                (thread_id, *(yield from _plan(saver, thread_id, inventory, doomed, True)))
            )
        for thread_id, checkpoints, garbage in plans:
            saver.lists.forget(thread_id)
            if checkpoints or garbage:
                fence = fences[thread_id]
                yield from saver.port.delete_records(thread_id, checkpoints, garbage, fence)

    yield from _leased(saver, threads, "prune", delete if strategy == "delete" else keep)


def _leased(
    saver: SaverBase, threads: list[str], name: str, body: Callable[[Fences], Op[None]]
) -> Op[None]:
    """``body`` with every thread's lease held, given each one's fencing token: the caller's
    where it holds the lease (``with saver.lock(t): saver.prune([t])``), else one taken here
    for the call and let go after it. A thread another holder has (a run in flight) is waited
    for, then :class:`~graphkeep.errors.ThreadBusy` before anything of the batch is deleted:
    a prune never races a live run, and every delete it makes is fenced."""
    fences: Fences = {}
    taken: list[ThreadLock] = []
    try:
        for thread_id in threads:
            fence = fence_of(thread_id)
            if fence is None:
                lock = ThreadLock(
                    saver,
                    thread_id,
                    ttl=MAINTENANCE_LEASE_MS / 1000,
                    timeout=MAINTENANCE_WAIT_SECONDS,
                )
                try:
                    fence = yield from lock.acquire_op()
                except LockNotAcquired:
                    raise ThreadBusy(
                        f"{name} refused, nothing deleted: thread {thread_id!r} stayed busy"
                        f" (another run held its lease) for {MAINTENANCE_WAIT_SECONDS:g}s;"
                        " try again when it is done"
                    ) from None
                taken.append(lock)
            fences[thread_id] = fence
        yield from body(fences)
    except GeneratorExit:  # closed mid-way (cancelled): the leases expire by themselves
        raise
    except BaseException:
        for lock in taken:
            yield from lock.release_op()
        raise
    for lock in taken:
        yield from lock.release_op()


def keep_latest_plan(inventory: Inventory) -> set[tuple[str, str]]:
    """The (ns, checkpoint_id) ``prune(strategy="keep_latest")`` deletes, each with its
    pending writes: the stored checkpoints :func:`~graphkeep.checkpoint.walk.keep_latest`
    does not keep.

    Writes under a checkpoint that is not stored are never deleted: under LangGraph's
    ``durability="async"`` a step's writes can land before their checkpoint, so they may
    belong to a run in flight (PostgresSaver deletes writes only with the checkpoints it
    deletes, for the same reason). Those that stay orphans are ``graphkeep check``'s
    ``orphan_writes`` warning, which ``--repair`` deletes once older than its grace period.
    """
    keep = keep_latest(inventory.checkpoints)
    return {(s.ns, s.checkpoint_id) for s in inventory.checkpoints} - keep


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


def _delete_scoped(saver: SaverBase, thread_id: str) -> Op[None]:
    for scoped in saver.thread_scoped:
        yield from scoped.clear(thread_id)


def _delete_keeping(
    saver: SaverBase,
    thread_id: str,
    inventory: Inventory,
    doomed: set[tuple[str, str]],
    fence: int | None,
) -> Op[None]:
    """Delete ``doomed`` checkpoints (with their writes) and blobs nothing else uses."""
    saver.lists.forget(thread_id)
    checkpoints, garbage = yield from _plan(saver, thread_id, inventory, doomed, False)
    if checkpoints or garbage:
        yield from saver.port.delete_records(thread_id, checkpoints, garbage, fence)


def _plan(
    saver: SaverBase,
    thread_id: str,
    inventory: Inventory,
    doomed: set[tuple[str, str]],
    preflight: bool,
) -> Op[tuple[list[tuple[str, str]], list[tuple[str, str, str]]]]:
    """What deleting ``doomed`` checkpoints deletes: those (with their writes), and the blobs
    no other checkpoint needs.

    ``preflight`` (prune): refuse, before deleting anything, a plan that leaves a kept
    checkpoint without what ``graphkeep check`` finds it needs (its DeltaChannel seed or
    the parents its walk replays, a value, its parent in the history)."""
    keep = {(s.ns, s.checkpoint_id) for s in inventory.checkpoints} - doomed
    referenced = yield from referenced_blobs(saver.port, thread_id, inventory, keep)
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
    return sorted(doomed), garbage
