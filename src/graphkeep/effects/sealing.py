"""An effect's recorded outcome as stored: packed, and sealed at its record's place
(``("effect", thread, key)``) when the ledger has ``encryption=``
(:class:`~graphkeep.port.encryption.KeyRing`)."""

from __future__ import annotations

from graphkeep.effects.port import EffectRecord
from graphkeep.errors import CorruptData, Place
from graphkeep.port import codec
from graphkeep.port.encryption import KeyRing


def place(record: EffectRecord) -> tuple[str, str, str]:
    """Where an effect's outcome lives, for its encryption: its thread and key."""
    return ("effect", record.thread_id, record.key)


def packed(ring: KeyRing | None, record: EffectRecord, typed: codec.Typed) -> bytes:
    """``typed`` as ``record`` stores it: sealed at its place with a ring."""
    if ring is not None:
        typed = ring.seal(typed, place(record))
    return codec.pack_typed(typed)


def opened(ring: KeyRing | None, record: EffectRecord) -> codec.Typed:
    """``record``'s stored outcome read back; with a ring opened at the record's place
    (:class:`~graphkeep.errors.CorruptData` naming the record when it does not open)."""
    typed = codec.unpack_typed(record.data or b"")
    if ring is None:
        return typed
    try:
        return ring.open(typed, place(record))
    except CorruptData as exc:
        where = Place(thread_id=record.thread_id or None, key=record.key, part="effect record")
        raise exc.at(where) from None


def resealed(ring: KeyRing | None, found: EffectRecord, record: EffectRecord) -> bytes | None:
    """``found``'s stored outcome as ``record`` stores it (opened and sealed again at
    ``record``'s place with a ring)."""
    if ring is None or found.data is None:
        return found.data
    return packed(ring, record, opened(ring, found))
