"""Key rotation of the run event log: every event under an older key id rewritten under the
ring's current key, in place (issue 47's rotation; ``graphkeep rekey --all`` runs it).

Open the log with ``encryption=KeyRing({"k2": new, "k1": old}, current="k2")`` (add
``allow_plaintext=True`` to seal events written before encryption was on), then
``log.rekey()`` (``await alog.rekey()`` on an async log; ``dry_run=True`` only counts). Per run
(every run of the log's key prefix, or ``run_ids``), the op :func:`rekey_runs`:

1. reads the run's records as stored (:meth:`~graphkeep.events.port.EventsPort.records`: a
   stream entry, a document, or a DynamoDB item packing several events);
2. opens every payload not under the current key at its place (``("event", run, id)``) and
   seals it again there under the current key. What does not open fails the run closed as a
   read does (:class:`~graphkeep.errors.CorruptData` ``plaintext``, ``unknown_key``,
   ``tampered``): nothing of that run is written, the others go on;
3. writes the records back in place (:meth:`~graphkeep.events.port.EventsPort.rewrite`: same
   run ids, event ids, order, close status, expiry), each only while its stored bytes are
   still those read, so a concurrent trim or append is never undone;
4. reads the run back: each rewritten event is gone (trimmed meanwhile) or stored as sealed
   and opens to the same event; a record changed meanwhile is taken again (at most
   :data:`PASSES` times, then the run fails as ``busy``).

Events already under the current key are skipped, so a run stopped halfway is run again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from graphkeep.errors import TAMPERED, UNDECODABLE, CorruptData, Place
from graphkeep.events.port import EventsPort, StoredRecord
from graphkeep.events.sealing import envelope, opened, sealer
from graphkeep.events.threads import ThreadRuns
from graphkeep.port import Op
from graphkeep.port.encryption import KeyRing, envelope_key_id

__all__ = ["PLAINTEXT", "EventsRekeyed", "key_id", "rekey_runs"]

#: what a payload that is not an envelope counts under
PLAINTEXT = "plaintext"
#: how many times a run whose records changed while it was rewritten is taken again
PASSES = 3


@dataclass(slots=True)
class EventsRekeyed:
    """What a rekey of an event log did: events per key id before it, events rewritten, and
    the runs rewritten, current (nothing to do) or failed (``{"run_id", "kind", "error"}``)."""

    by_key_id: dict[str, int] = field(default_factory=dict)
    rewritten: int = 0
    rekeyed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    #: a rekey of the runs tied to threads: which runs those were, and what was left alone
    threads: ThreadRuns | None = None

    def as_dict(self) -> dict[str, Any]:
        found = {
            "runs": len(self.rekeyed) + len(self.current) + len(self.failed),
            "rewritten": self.rewritten,
            "by_key_id": dict(sorted(self.by_key_id.items())),
            "rekeyed": list(self.rekeyed),
            "current": list(self.current),
            "failed": list(self.failed),
        }
        if self.threads is not None:
            found["threads"] = {t: list(r) for t, r in sorted(self.threads.by_thread.items())}
            found["other_runs"] = self.threads.others
            found["unreadable"] = list(self.threads.unreadable)
        return found


def key_id(data: bytes) -> str:
    """The key id a stored payload is sealed under, or :data:`PLAINTEXT`."""
    typed = envelope(data)
    if typed is None:
        return PLAINTEXT
    found = envelope_key_id(typed)
    return PLAINTEXT if found is None else found


class _Busy(Exception):
    """The run's records kept changing while they were rewritten."""


def _renewed(
    ring: KeyRing, run_id: str, records: list[StoredRecord]
) -> tuple[list[tuple[StoredRecord, list[bytes]]], dict[str, tuple[bytes, bytes]]]:
    """The records holding a stale event with their payloads sealed under the current key,
    and per rewritten event id its new bytes and its JSON (for the read-back)."""
    seal = sealer(ring, run_id)
    changes: list[tuple[StoredRecord, list[bytes]]] = []
    renewed: dict[str, tuple[bytes, bytes]] = {}
    for record in records:
        new: list[bytes] = []
        stale = False
        for event_id, data in record.events:
            try:
                held = key_id(data)
            except CorruptData as exc:  # a header that does not parse
                raise exc.at(Place(run_id=run_id, event_id=event_id)) from None
            if held == ring.current:
                new.append(data)
                continue
            try:
                plain = opened(ring, run_id, event_id, data)
                if not isinstance(json.loads(plain), dict):
                    raise ValueError
            except CorruptData as exc:
                raise exc.at(Place(run_id=run_id, event_id=event_id)) from None
            except ValueError:
                raise CorruptData(
                    reason="its stored payload is not a JSON object",
                    kind=UNDECODABLE,
                    place=Place(run_id=run_id, event_id=event_id),
                ) from None
            sealed = seal(event_id, plain)
            renewed[event_id] = (sealed, plain)
            new.append(sealed)
            stale = True
        if stale:
            changes.append((record, new))
    return changes, renewed


def _verify(
    ring: KeyRing, run_id: str, records: list[StoredRecord], renewed: dict[str, tuple[bytes, bytes]]
) -> bool:
    """Whether every rewritten event reads back as written (True) or some record changed
    meanwhile (False: take the run again); an event that does not open: CorruptData."""
    stored = {event_id: data for r in records for event_id, data in r.events}
    intact = True
    for event_id, (sealed, plain) in renewed.items():
        data = stored.get(event_id)
        if data is None:  # trimmed (or expired) meanwhile: nothing to keep
            continue
        if data != sealed:
            intact = False
            continue
        if opened(ring, run_id, event_id, data) != plain:  # pragma: no cover - sealed here
            raise CorruptData(
                reason="it does not read back as it was rewritten",
                kind=TAMPERED,
                place=Place(run_id=run_id, event_id=event_id),
            )
    return intact


def _rekey_run(
    port: EventsPort, ring: KeyRing, run_id: str, dry_run: bool, counts: dict[str, int]
) -> Op[int]:
    """Rekey one run (its events counted per key id into ``counts`` first); returns how
    many events it rewrote (would rewrite, dry run)."""
    records = yield from port.records(run_id)
    for record in records:
        for _, data in record.events:
            try:
                held = key_id(data)
            except CorruptData:
                held = TAMPERED
            counts[held] = counts.get(held, 0) + 1
    done: set[str] = set()
    for _ in range(PASSES):
        changes, renewed = _renewed(ring, run_id, records)
        if dry_run:
            return len(renewed)
        if not changes:
            return len(done)
        yield from port.rewrite(run_id, changes)
        records = yield from port.records(run_id)
        if _verify(ring, run_id, records, renewed):
            return len(done | set(renewed))
        # a record changed meanwhile: what did land is current now, the rest is taken again
        kept = {i: d for r in records for i, d in r.events}
        done.update(i for i, (sealed, _) in renewed.items() if kept.get(i) == sealed)
    raise _Busy(f"run {run_id!r} kept changing while it was rekeyed; run rekey again")


def rekey_runs(
    port: EventsPort, ring: KeyRing, *, dry_run: bool = False, run_ids: list[str] | None = None
) -> Op[EventsRekeyed]:
    """Rewrite the events of ``run_ids`` (None: every run of the log) under an older key id,
    or in plaintext when the ring allows it, under the current key (see the module
    docstring); a run that fails is reported, the others go on."""
    result = EventsRekeyed(by_key_id={k: 0 for k in ring.key_ids})
    runs = run_ids if run_ids is not None else (yield from port.run_ids())
    for run_id in runs:
        try:
            done = yield from _rekey_run(port, ring, run_id, dry_run, result.by_key_id)
        except CorruptData as exc:
            result.failed.append({"run_id": run_id, "kind": exc.kind, "error": str(exc)})
            continue
        except _Busy as exc:
            result.failed.append({"run_id": run_id, "kind": "busy", "error": str(exc)})
            continue
        result.rewritten += done
        (result.rekeyed if done else result.current).append(run_id)
    return result
