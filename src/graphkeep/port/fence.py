"""The fencing token of the lease a caller holds, carried with every write it makes.

``saver.lock(thread_id)`` is granted with a fencing token that only grows per thread (see
:mod:`graphkeep.checkpoint.lock`). While the lease is held, this module's context variable
maps the thread to that token, so every write the holder makes on the thread — ``put``,
``put_writes``, ``delete_thread``, ``delete_for_runs``, ``prune``, ``copy_thread`` onto it,
the effect ledger's ``claim`` and ``take_over``, made directly or by ``graph.invoke`` inside
``with saver.lock(t):`` — carries the token in the same request,
and the store refuses it once a newer token was granted (:class:`~graphkeep.errors.LeaseLost`,
nothing of the write stored). A context variable is async-safe and follows the call into
LangGraph's executor threads and tasks (each copies its caller's context); a write made
outside any lease carries nothing and is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType

_EMPTY: Mapping[str, int] = MappingProxyType({})

#: thread id -> the fencing token of the lease this context holds on it
_HELD: ContextVar[Mapping[str, int]] = ContextVar("graphkeep_fences", default=_EMPTY)


def fence_of(thread_id: str) -> int | None:
    """The fencing token this context holds on ``thread_id`` (None when it holds no lease)."""
    return _HELD.get().get(thread_id)


def hold(thread_id: str, token: int) -> None:
    """Carry ``token`` with this context's writes to ``thread_id`` until :func:`drop`."""
    current = _HELD.get()
    _HELD.set(MappingProxyType({**current, thread_id: token} if current else {thread_id: token}))


def drop(thread_id: str) -> None:
    """Stop carrying a token with this context's writes to ``thread_id``."""
    current = _HELD.get()
    if thread_id in current:
        _HELD.set(
            MappingProxyType({k: v for k, v in current.items() if k != thread_id})
            if len(current) > 1
            else _EMPTY
        )
