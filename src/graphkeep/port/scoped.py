"""Records another product keeps per thread, which the saver deletes with the thread."""

from __future__ import annotations

from typing import Protocol

from graphkeep.port.ops import Op


class ThreadScoped(Protocol):
    """A port keeping records per thread (the effect ledger's): ``setup`` runs with the
    saver's, ``clear(thread_id)`` with its ``delete_thread`` and ``prune(strategy="delete")``."""

    def setup(self) -> Op[None]: ...

    def clear(self, thread_id: str | None) -> Op[int]: ...
