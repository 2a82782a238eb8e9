"""How a product's shells run its ops: one way for the node cache, the event log and the ledger.

A product's logic is written once as ops; its sync shell drives them on a blocking client
(:class:`Blocking`), its async shell awaits them on an asyncio client (:class:`Awaited`) and,
where it serves sync callers too, hops onto the loop it was made on (:class:`Hopping`, through
:func:`~graphkeep.port.loop.on_loop`). A shell is ``class SyncX(Blocking, XBase)``: the
mixin's ``__init__`` takes the port, the client's executor and the options, hands them on to
the product's base (next in the MRO, as ``execute=``) and keeps the executor (and the loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from graphkeep.port.loop import on_loop, running_loop
from graphkeep.port.ops import Op, adrive, drive

__all__ = ["Awaited", "Blocking", "Hopping"]


class Blocking:
    """A sync shell: each op driven to its result on the blocking client's executor."""

    def __init__(self, port: Any, execute: Callable[[Any], Any], **options: Any) -> None:
        base: Any = super()  # the product's base, next in the MRO
        base.__init__(port, execute=execute, **options)
        self._execute = execute

    def _call(self, op: Op[Any]) -> Any:
        return drive(op, self._execute)


class Awaited:
    """An async shell: each op awaited on the asyncio client's executor."""

    def __init__(self, port: Any, aexecute: Callable[[Any], Any], **options: Any) -> None:
        base: Any = super()  # the product's base, next in the MRO
        base.__init__(port, execute=aexecute, **options)
        self._aexecute = aexecute
        #: the event loop the shell was made on (its client's)
        self.loop: asyncio.AbstractEventLoop | None = running_loop()

    async def _acall(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aexecute)


class Hopping(Awaited):
    """An async shell whose sync methods hop onto its loop from another thread."""

    #: what :func:`~graphkeep.port.loop.on_loop`'s errors call the shell and what they
    #: suggest instead
    HOP: ClassVar[tuple[str, str]]

    def _call(self, op: Op[Any]) -> Any:
        return on_loop(self.loop, self._acall(op), *self.HOP)
