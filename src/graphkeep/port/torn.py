"""A read that met a record whose chunks are gone: read again, then fail closed.

A store that splits a large payload into chunks (MongoDB's tail documents, DynamoDB's chunk
items) writes the chunks first and the record naming them last, and deletes the chunks of an
overwritten payload only after the new record is stored. A reader that read the old record
just before an overwrite can still find its chunks gone: the read is *torn*, not damaged.
:func:`reread` runs the read again (the record it then finds names chunks that are stored);
when the same record still lacks its chunks after a few reads, the :class:`Torn` error is
raised as what it is: :class:`~graphkeep.errors.CorruptData` of kind ``missing_value``. A
read never returns a payload without its chunks as if it were absent or whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from graphkeep.errors import CorruptData
from graphkeep.port.ops import Op, Sleep

T = TypeVar("T")

#: pauses before the reads after the first (seconds): a concurrent overwrite's record and
#: deletion are two requests apart, so the second read almost always finds the new record
PAUSES = (0.0, 0.05, 0.2)


class Torn(CorruptData):
    """A record read whose chunks were not found: raised by a backend's read, caught by
    :func:`reread`, raised to the caller only when reading again does not mend it."""


def reread(read: Callable[[], Op[T]], pauses: tuple[float, ...] = PAUSES) -> Op[T]:
    """``read()`` run again while it raises :class:`Torn`, after each of ``pauses``; the last
    :class:`Torn` is raised when every read was torn."""
    for pause in pauses:
        try:
            return (yield from read())
        except Torn:
            if pause:
                yield Sleep(pause)
    return (yield from read())
