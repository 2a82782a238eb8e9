"""The events port: the :class:`EventsPort` protocol a backend implements, the records it
exchanges (:class:`StoredEvent`, :class:`RunState`, :class:`Retention`) and the checks of run
ids, events and close statuses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from graphkeep.errors import EventsTrimmed, InvalidInput
from graphkeep.port import Op

#: the largest event accepted, as compact UTF-8 JSON (fits one DynamoDB item with room)
MAX_EVENT_BYTES = 256 * 1024
MAX_RUN_ID_BYTES = 512
STATUSES = ("success", "error", "interrupted")
CLOSE_TYPE = "close"


@dataclass(frozen=True, slots=True)
class Retention:
    """How much of a run a store keeps: ``ttl_ms`` after its last append or heartbeat
    (None: forever) and at most ``max_events`` events (oldest dropped first).

    ``max_events`` is one policy with one trigger for every store that numbers a run's
    events 1, 2, 3… (:meth:`trim_through`, asked after each append): once a run keeps more
    than ``max_events``, its oldest are dropped so that ``max_events - trim_step + 1``
    remain. A run thus keeps at most ``max_events`` once an append returns, a store trims
    once per ``trim_step`` appended events (not on every append), and the newest event
    (the close event) is never dropped. Redis streams trim natively (``XADD MAXLEN ~``).
    """

    ttl_ms: int | None
    max_events: int

    @property
    def trim_step(self) -> int:
        """How many events one trim drops at least: a tenth of ``max_events``, at least one.
        A store that packs several events in one record packs at most this many, so that
        dropping whole records never keeps more than ``max_events``."""
        return max(1, self.max_events // 10)

    def trim_through(self, newest: int, trimmed: int) -> int | None:
        """The position through which a run's events are to be dropped now, None when no
        trim is due: ``newest`` is the run's last position, ``trimmed`` the last one known
        to be dropped (0: none)."""
        if newest - trimmed <= self.max_events:
            return None
        return newest - self.max_events + self.trim_step - 1


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event as a port reads it back: its id, its JSON bytes, whether it closes the run."""

    event_id: str
    data: bytes
    closing: bool


@dataclass(frozen=True, slots=True)
class Batch:
    """What one ``append`` stores: the payloads in order (when ``closing``, the last is the
    close event, of status ``status``), at ``now_ms``, under ``retention``.

    A port stores each payload as :meth:`stored` returns it for the id it is written under:
    with ``encryption=`` the log gives a ``seal`` that binds the payload to its run and event
    id (:mod:`graphkeep.events.sealing`), so a port never reads a payload itself (sizes it by
    :meth:`size`) and the close status comes as ``status``."""

    payloads: list[bytes]
    closing: bool
    now_ms: int
    retention: Retention
    status: str | None = None
    seal: Callable[[str, bytes], bytes] | None = None
    #: bytes sealing adds to a payload at most (its :meth:`size` counts them)
    overhead: int = 0

    def stored(self, event_id: str, payload: bytes) -> bytes:
        """``payload`` as stored under ``event_id`` (sealed there with encryption on)."""
        return payload if self.seal is None else self.seal(event_id, payload)

    def size(self, payload: bytes) -> int:
        """How many bytes ``payload`` takes stored."""
        return len(payload) + self.overhead

    @property
    def close_status(self) -> str | None:
        """The close event's status (None when the batch does not close the run)."""
        if not self.closing:
            return None
        if self.status is not None:
            return self.status
        return str(json.loads(self.payloads[-1])["status"])  # a batch made by hand (tests)


@dataclass(frozen=True, slots=True)
class RunState:
    """What a port knows of a run."""

    #: epoch ms of the last append or heartbeat
    active_ms: int
    #: the close status, once closed
    closed: str | None
    #: id of the newest event retention dropped (None: nothing dropped)
    trimmed_through: str | None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """What a store rewrites as one (a stream entry, a document, a DynamoDB item packing
    consecutive events): its events' ids and stored payloads, and the store's ``handle``
    (what the port needs to rewrite it conditionally: the stored bytes as read, a key)."""

    events: list[tuple[str, bytes]]
    handle: Any = None


class EventsPort(Protocol):
    """What a backend maps onto its store; run ids and payloads arrive validated.

    - ``append`` stores a :class:`Batch`'s payloads in order as the run's next events and
      returns their ids (strictly increasing per run, also across writers and processes);
      when ``closing`` the last payload is the close event. It raises
      :class:`~graphkeep.errors.RunClosed` (writing nothing) when the run is already
      closed, applies ``retention`` and marks the run active at ``now_ms``.
    - ``read`` returns up to ``limit`` events after ``after`` (from the first when None)
      in id order; a store with ``blocking = True`` waits up to ``wait_ms`` for one when
      there are none (``wait_ms=0``: never waits); others return at once. When events
      right after ``after`` were dropped by retention before this read (a follower more
      than ``max_events`` behind), it raises :class:`~graphkeep.errors.EventsTrimmed`
      rather than return the later ones.
    - ``state`` returns the run's :class:`RunState`, None for an unknown (or expired) run.
    - ``heartbeat`` marks the run active (creating it when new) and slides its TTL.
    - ``id_key`` turns an event id into a sortable key, raising
      :class:`~graphkeep.errors.InvalidInput` for a string that is not one of its ids.
    - ``delete`` removes runs entirely.
    - ``run_ids`` lists every run of the log (at its key prefix), ``records`` a run's
      records as stored (oldest first, expired ones included), and ``rewrite`` replaces
      records' payloads in place (same ids, order, close status, expiry): each only while
      its stored bytes are still those ``records`` read (a record trimmed or changed
      meanwhile is left alone); it returns how many records it rewrote. Key rotation
      (:mod:`graphkeep.events.rekey`) uses them.
    """

    blocking: bool

    def setup(self) -> Op[None]: ...

    def append(self, run_id: str, batch: Batch) -> Op[list[str]]: ...

    def read(
        self, run_id: str, after: str | None, limit: int, wait_ms: int
    ) -> Op[list[StoredEvent]]: ...

    def state(self, run_id: str) -> Op[RunState | None]: ...

    def heartbeat(self, run_id: str, now_ms: int, retention: Retention) -> Op[None]: ...

    def delete(self, run_ids: list[str]) -> Op[None]: ...

    def id_key(self, event_id: str) -> tuple[int, ...]: ...

    def run_ids(self) -> Op[list[str]]: ...

    def records(self, run_id: str) -> Op[list[StoredRecord]]: ...

    def rewrite(self, run_id: str, changes: list[tuple[StoredRecord, list[bytes]]]) -> Op[int]: ...


def check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str):
        raise InvalidInput(f"a run id must be a str, got {type(run_id).__name__}")
    if not run_id:
        raise InvalidInput("a run id must not be empty")
    if "\x00" in run_id:
        raise InvalidInput(f"a run id must not contain NUL characters: {run_id[:60]!r}")
    try:
        size = len(run_id.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"a run id is not valid unicode: {run_id[:60]!r}") from exc
    if size > MAX_RUN_ID_BYTES:
        raise InvalidInput(f"a run id is {size} bytes long; the limit is {MAX_RUN_ID_BYTES}")
    return run_id


#: compact strict JSON, made once: ``json.dumps`` with options builds an encoder per call
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, slots=True)
class Encoded:
    """An event checked and encoded once by :func:`encode` (``data``: its compact UTF-8 JSON).
    Appends take it as it is and check only its size: a writer that needs an event's encoded
    size (the AG-UI endpoint fitting events to :data:`MAX_EVENT_BYTES`) hands the log the
    bytes it measured instead of the event, and the event is encoded once."""

    data: bytes


def encode(event: Any, position: int | None = None) -> Encoded:
    """``event`` checked (a JSON object with str keys, strict JSON) and encoded as compact
    UTF-8 JSON, of any size (appends refuse one over :data:`MAX_EVENT_BYTES`), or
    :class:`InvalidInput` saying what is wrong."""
    where = "event" if position is None else f"event [{position}]"
    if not isinstance(event, dict):
        raise InvalidInput(f"an {where} must be a dict (a JSON object), got {type(event).__name__}")
    _check_keys(event, where)
    try:
        return Encoded(_JSON.encode(event).encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise InvalidInput(f"{where} is not JSON-serialisable: {exc}") from exc


def encode_event(event: Any, position: int | None = None) -> bytes:
    """An event (or an :class:`Encoded` one, not encoded again) as compact UTF-8 JSON of at
    most :data:`MAX_EVENT_BYTES`, or :class:`InvalidInput` saying what is wrong."""
    if isinstance(event, Encoded) and isinstance(event.data, bytes):
        data = event.data
    else:
        data = encode(event, position).data
    if len(data) > MAX_EVENT_BYTES:
        where = "event" if position is None else f"event [{position}]"
        raise InvalidInput(
            f"{where} is {len(data)} bytes as JSON; the limit is {MAX_EVENT_BYTES} bytes"
            " (store large payloads in the store and put a reference in the event)"
        )
    return data


_CONTAINERS = (dict, list, tuple)


def _check_keys(event: dict[str, Any], where: str) -> None:
    """Every object key is a str (JSON would turn ``1`` into ``"1"``, and ``{1: .., "1": ..}``
    into an object with a duplicate key)."""
    stack: list[Any] = [event]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidInput(
                        f"{where} has a key that is not a str: {key!r} ({type(key).__name__})"
                    )
                if isinstance(item, _CONTAINERS):  # only containers can hold a key
                    stack.append(item)
        else:
            stack.extend(item for item in value if isinstance(item, _CONTAINERS))


def close_event(status: Any, error: Any = None) -> dict[str, Any]:
    if status not in STATUSES:
        raise InvalidInput(f"a close status must be one of {', '.join(STATUSES)}, got {status!r}")
    event: dict[str, Any] = {"type": CLOSE_TYPE, "status": status}
    if error is not None:
        event["error"] = str(error)
    return event


def check_sequence(run_id: str, after: str | None, events: list[StoredEvent]) -> None:
    """For stores numbering events 1, 2, 3…: the first event read must follow ``after``
    directly, else retention dropped the ones between (raise, never skip silently)."""
    if after is None or not events or int(events[0].event_id) == int(after) + 1:
        return
    raise EventsTrimmed(
        f"run {run_id!r}: events {int(after) + 1} to {int(events[0].event_id) - 1} were"
        " dropped by retention (max_events / ttl) before they were read; resume from the start"
    )
