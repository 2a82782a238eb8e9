"""An effect's recorded outcome as stored: packed, and sealed at its record's place
(``("effect", thread, key)``) when the ledger has ``encryption=``
(:class:`~graphkeep.port.encryption.KeyRing`); :func:`rekey_effects`, a thread's outcomes
sealed again under the ring's current key (``graphkeep rekey``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from graphkeep.effects.port import EffectRecord
from graphkeep.errors import CorruptData, Place
from graphkeep.port import Op, codec
from graphkeep.port.encryption import ENVELOPE_TAG, KeyRing, envelope_key_id


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


def rekey_effects(
    ledger: Any,
    thread_id: str,
    dry_run: bool = False,
    legacy: Callable[[codec.Typed], codec.Typed] | None = None,
    fence: int | None = None,
) -> Op[dict[str, int]]:
    """The op sealing ``thread_id``'s recorded outcomes in ``ledger`` (a ledger with
    ``encryption=``) again under its ring's current key, each by one conditional request
    (:meth:`~graphkeep.effects.port.EffectsPort.reseal`: a record that changed meanwhile is
    left as it is) and read back; ``legacy`` opens an outcome in LangGraph's
    ``EncryptedSerializer`` form. What does not open raises
    :class:`~graphkeep.errors.CorruptData` as a replay would. ``fence``: the fencing token of
    the thread's lease the caller holds (``graphkeep rekey`` runs this under the lease it
    rewrites the thread's checkpoints under): each reseal checks it as a fenced ``claim``
    does, and once a newer token was granted writes nothing and raises
    :class:`~graphkeep.errors.LeaseLost`. ``{"rewritten": n, "current": n}``."""
    ring: KeyRing | None = ledger.encryption
    counts = {"rewritten": 0, "current": 0}
    if ring is None:
        return counts
    port = ledger.port
    for record in (yield from port.list(thread_id)):
        if record.data is None:  # started: nothing recorded yet
            continue
        stored = codec.unpack_typed(record.data)
        if stored.tag == ENVELOPE_TAG and envelope_key_id(stored) == ring.current:
            counts["current"] += 1
            continue
        untagged = stored.tag.removeprefix(codec.COMPRESSED_PREFIX)
        if legacy is not None and stored.tag != ENVELOPE_TAG and "+" in untagged:
            plain = legacy(stored)
        else:
            plain = opened(ring, record)
        counts["rewritten"] += 1
        if dry_run:
            continue
        renewed = replace(record, data=packed(ring, record, plain))
        if not (yield from port.reseal(renewed, fence)):
            continue  # settled again meanwhile: written under the current key already
        back = yield from port.get(record.thread_id, record.key)
        if back is None or opened(ring, back) != plain:
            raise CorruptData(
                reason="the rewritten effect record does not read back as written",
                place=Place(thread_id=thread_id or None, key=record.key, part="effect record"),
            )
    return counts
