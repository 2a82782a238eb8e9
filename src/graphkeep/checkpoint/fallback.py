"""The saver's side of a read-through fallback (``fallback=``): where its ops hand a thread to
the mover before they touch it.

``graphkeep.connect(url, fallback=SOURCE)`` gives the saver a mover
(:class:`graphkeep.moving.fallback.Mover`, registered here by :mod:`graphkeep.moving` as the
hot layer registers its opener) in :attr:`~graphkeep.checkpoint.saver.SaverBase.fallback`.
Every op that reads or writes one thread first runs :func:`first_use`: a thread that is not
*settled* (:meth:`~graphkeep.checkpoint.port.CheckpointPort.is_settled`) is moved from the
fallback under its lease, then settled; ``delete_thread`` and ``prune(strategy="delete")`` run
:func:`before_delete`, which settles the thread under its lease without moving it, so a
deleted thread never comes back. ``list(None)`` adds the threads still only in the fallback
(:func:`listed_elsewhere`). The mover's own reads and writes of a thread skip the hook
(:func:`moving`), so one code path serves both drivers: the ops are the same sync and async.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from graphkeep.port import Op
from graphkeep.port.attach import Attachable

if TYPE_CHECKING:
    from graphkeep.checkpoint.saver import SaverBase

#: threads this context is moving now: their reads and writes skip the hook
_MOVING: ContextVar[frozenset[str]] = ContextVar("graphkeep_moving", default=frozenset())


class Fallback(Protocol):
    """What a saver's ``fallback`` does (:class:`graphkeep.moving.fallback.Mover`)."""

    def first_use(self, saver: SaverBase, thread_id: str) -> Op[None]:
        """Move the thread from the fallback unless it is settled; then it is settled."""
        ...

    def before_delete(self, saver: SaverBase, thread_id: str) -> Op[None]:
        """Settle the thread (under its lease) without moving it: it is about to be deleted."""
        ...

    def settled(self, saver: SaverBase, thread_id: str) -> Op[bool]:
        """Whether the thread is settled (cached once it is: a mark is never taken back)."""
        ...

    def unsettled_tuples(
        self, saver: SaverBase, filter: dict[str, Any] | None, limit: int | None
    ) -> Op[list[Any]]:
        """``list(None)`` of the fallback, less the settled threads' checkpoints."""
        ...


def is_moving(thread_id: str) -> bool:
    return thread_id in _MOVING.get()


@contextmanager
def moving(thread_id: str) -> Iterator[None]:
    """The mover's own reads and writes of ``thread_id`` (inside an op: set and reset in the
    driver's context, so they do not leak into other threads or tasks)."""
    token = _MOVING.set(_MOVING.get() | {thread_id})
    try:
        yield
    finally:
        _MOVING.reset(token)


def first_use(saver: SaverBase, thread_id: str) -> Op[None]:
    """The hook of every op that reads or writes ``thread_id`` (a no-op without a fallback)."""
    fallback = saver.fallback
    if fallback is not None and not is_moving(thread_id):
        yield from fallback.first_use(saver, thread_id)


def before_delete(saver: SaverBase, thread_id: str) -> Op[None]:
    """The hook of ``delete_thread`` and ``prune(strategy="delete")``."""
    fallback = saver.fallback
    if fallback is not None and not is_moving(thread_id):
        yield from fallback.before_delete(saver, thread_id)


def hidden_here(saver: SaverBase, thread_id: str) -> Op[bool]:
    """Whether ``list(None)`` leaves out this saver's checkpoints of ``thread_id``: with a
    fallback, an unsettled thread is shown from the fallback (a copy under way is partial)."""
    fallback = saver.fallback
    if fallback is None:
        return False
    return not (yield from fallback.settled(saver, thread_id))


def listed_elsewhere(
    saver: SaverBase, filter: dict[str, Any] | None, limit: int | None
) -> Op[list[Any]]:
    """The fallback's checkpoints of the threads not settled here (``list(None)``)."""
    fallback = saver.fallback
    if fallback is None:
        return []
    return (yield from fallback.unsettled_tuples(saver, filter, limit))


# -- the option -------------------------------------------------------------------------

#: what makes a mover of a saver and a fallback SOURCE (``graphkeep.moving`` registers it):
#: ``opener(saver, source)`` is a context manager attaching it for the block
FALLBACK = Attachable("fallback", "graphkeep.moving")
register_opener = FALLBACK.register
#: ``fallback`` taken out of a saver's ``options`` (None when not given)
fallback_option = FALLBACK.option
#: ``saver`` reading through to ``source`` for the block (``source`` None: as it is)
with_fallback = FALLBACK.attached
#: :func:`with_fallback` for an async saver (the source is read in worker threads)
awith_fallback = FALLBACK.aattached
