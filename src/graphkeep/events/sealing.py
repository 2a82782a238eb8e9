"""An event's payload as stored with ``encryption=``: sealed at ``("event", run id, event id)``.

The event id is given by the store when the event is written (a Redis stream id, the next
sequence number of a MongoDB or DynamoDB run), so the log hands the port a
:class:`~graphkeep.events.port.Batch` whose ``seal`` the port calls with each payload's id as
it writes it (again with the new id when a lost race moves the payload on). The stored bytes
are the envelope packed as :func:`~graphkeep.port.codec.pack_typed` does; the id, the run and
the close status stay readable (resume by id, retention, ``state``), the payload does not.

Reads open each payload at the run and id it was read from: a payload that is not sealed
(``plaintext``), under a key id the ring lacks (``unknown_key``), copied from another run or
id or changed (``tampered``) is :class:`~graphkeep.errors.CorruptData`, never an event.
"""

from __future__ import annotations

from collections.abc import Callable

from graphkeep.errors import TAMPERED, UNKNOWN_KEY, CorruptData
from graphkeep.port import codec
from graphkeep.port.encryption import ENVELOPE_TAG, MAX_KEY_ID_BYTES, KeyRing

#: the inner tag of a sealed event (its compact UTF-8 JSON)
JSON_TAG = "json"
#: bytes a sealed payload takes beyond the event's JSON, at most: the packed envelope's
#: framing and tag (~30), header with key id, nonce and GCM tag, the inner pair's framing
OVERHEAD = 96 + MAX_KEY_ID_BYTES


def place(run_id: str, event_id: str) -> tuple[str, str, str]:
    """Where an event lives, for its encryption: its run and its id."""
    return ("event", run_id, event_id)


def sealer(ring: KeyRing, run_id: str) -> Callable[[str, bytes], bytes]:
    """What a port calls to store a payload of ``run_id`` under an event id."""

    def seal(event_id: str, payload: bytes) -> bytes:
        typed = ring.seal(codec.Typed(JSON_TAG, payload), place(run_id, event_id))
        return codec.pack_typed(typed)

    return seal


def envelope(data: bytes) -> codec.Typed | None:
    """The envelope a stored payload is; None when it is none: not graphkeep's framing (an
    event's JSON as written without a ring), or a pair that nothing sealed."""
    try:
        typed = codec.unpack_typed(data)
    except CorruptData:
        return None
    return typed if typed.tag == ENVELOPE_TAG else None


def opened(ring: KeyRing, run_id: str, event_id: str, data: bytes) -> bytes:
    """The event JSON of a payload read at ``run_id`` / ``event_id``, or
    :class:`~graphkeep.errors.CorruptData` (the caller names the place)."""
    typed = envelope(data) or codec.Typed(JSON_TAG, data)  # else as written without a ring
    inner = ring.open(typed, place(run_id, event_id))
    if inner is typed:  # allow_plaintext: read as written
        return data
    if inner.tag != JSON_TAG:  # sealed here, yet not an event: never read as one
        raise CorruptData(reason="its sealed payload is not an event", kind=TAMPERED)
    return inner.data


def sealed_without_ring(data: bytes) -> CorruptData | None:
    """The error for a sealed payload read by a log without ``encryption=`` (None: ``data``
    is no envelope)."""
    typed = None if data[:1] == b"{" else envelope(data)
    if typed is None:
        return None
    return CorruptData(
        reason=f"its payload is encrypted ({codec.sealed_key_id(typed.data)}) and this reader"
        " has no key ring",
        kind=UNKNOWN_KEY,
        advice="Open the event log with encryption=KeyRing(...) holding the writer's key"
        " (GRAPHKEEP_KEYS for the graphkeep command); nothing is returned",
    )
