"""The run event log's contract and its two shells: :class:`EventLogBase` (over an
:class:`~graphkeep.events.port.EventsPort`), :class:`SyncEventLog` and :class:`AsyncEventLog`.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

from graphkeep.errors import (
    UNDECODABLE,
    ConfigurationError,
    CorruptData,
    EventsTrimmed,
    InvalidInput,
    Place,
    RunStale,
    UnknownRun,
)
from graphkeep.events.port import (
    Batch,
    Encoded,
    EventsPort,
    Retention,
    RunState,
    check_run_id,
    close_event,
    encode_event,
)
from graphkeep.events.rekey import EventsRekeyed, rekey_runs
from graphkeep.events.sealing import OVERHEAD, opened, sealed_without_ring, sealer
from graphkeep.events.threads import thread_runs
from graphkeep.port import (
    Backoff,
    Emit,
    Op,
    Sleep,
    Telemetry,
    adrive_iter,
    drive_iter,
    on_loop,
    stream_in_thread,
    stream_on_loop,
    target_of,
)
from graphkeep.port.checks import check_seconds
from graphkeep.port.clock import now_ms
from graphkeep.port.encryption import KeyRing, check_encryption
from graphkeep.port.shells import Awaited, Blocking

#: events read per request
PAGE = 500
#: longest single blocking read (ms); the loop checks the run's liveness in between
MAX_BLOCK_MS = 5000

DEFAULT_TTL = 24 * 3600.0
DEFAULT_MAX_EVENTS = 10_000
DEFAULT_STALE_AFTER = 60.0
DEFAULT_POLL_INTERVAL = 0.1
DEFAULT_MAX_POLL_INTERVAL = 1.0


class EventLogBase:
    """The contract over an :class:`~graphkeep.events.port.EventsPort`; the shells below say
    how ops are run.

    A worker appends a run's events (LLM tokens, node updates, custom progress) while any
    number of readers — SSE endpoints in other processes — read them from any point::

        with graphkeep.connect_events("redis://localhost:6379/0") as events:
            events.append("run-1", {"type": "token", "text": "Hel"})  # -> "1764571123456-0"
            events.close("run-1", "success")
            for event_id, event in events.read("run-1", after=last_seen_id):
                ...                                 # ends after the close event

    What is the same for every store lives here:

    - input checks, before anything is written (:mod:`graphkeep.events.port`): a run id is
      a non-empty string of at most ``MAX_RUN_ID_BYTES`` UTF-8 bytes without NUL; an event
      is a JSON object (``dict`` with string keys; strict JSON: no NaN/Infinity) of at most
      ``MAX_EVENT_BYTES`` encoded (an event a writer encoded already with
      :func:`~graphkeep.events.port.encode` is taken as those bytes, not encoded again);
      ``after`` is an id of the store's form; a close status is one of ``STATUSES``;
    - the close event ``{"type": "close", "status": ..., ["error": ...]}`` is the run's last:
      an append after it raises :class:`~graphkeep.errors.RunClosed`, and ``read`` yields it
      and ends;
    - ``read(run_id, after=None, follow=True)``: every kept event after ``after``, then (with
      ``follow``) live ones until the close event. It never skips silently: a resume point
      older than what retention kept raises :class:`~graphkeep.errors.EventsTrimmed`; an
      unknown run :class:`~graphkeep.errors.UnknownRun`; a followed run whose writer stopped
      appending and heart-beating for ``stale_after`` seconds
      :class:`~graphkeep.errors.RunStale` (a writer that is alive but quiet calls
      ``heartbeat``; :func:`graphkeep.events.streaming.stream_run` does);
    - retention (:class:`~graphkeep.events.port.Retention`): at most ``max_events`` per run
      (oldest dropped first) and ``ttl`` seconds after the run's last append or heartbeat
      (sliding while it appends).

    Options: ``ttl`` (seconds after a run's last append or heartbeat, sliding; default one
    day; None keeps runs until deleted), ``max_events`` (per run, default 10,000),
    ``stale_after`` (seconds a followed run may stay silent, default 60),
    ``poll_interval`` / ``max_poll_interval`` (stores without blocking reads),
    ``encryption`` (a :class:`~graphkeep.encryption.KeyRing`: each event's payload sealed
    at its run and event id, :mod:`graphkeep.events.sealing`; reads fail closed).
    """

    def __init__(
        self,
        port: EventsPort,
        *,
        ttl: float | None = DEFAULT_TTL,
        max_events: int = DEFAULT_MAX_EVENTS,
        stale_after: float = DEFAULT_STALE_AFTER,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        telemetry: Any = None,
        encryption: KeyRing | None = None,
        execute: Any = None,
    ) -> None:
        self.port = port
        self.encryption = check_encryption(encryption)
        #: the options this log was made with (:meth:`with_options` starts from them)
        self.options: dict[str, Any] = {
            "ttl": ttl,
            "max_events": max_events,
            "stale_after": stale_after,
            "poll_interval": poll_interval,
            "max_poll_interval": max_poll_interval,
            "telemetry": telemetry,
            "encryption": encryption,
        }
        #: spans and metrics of every call (see :mod:`graphkeep.port.telemetry`)
        self.telemetry = Telemetry(telemetry, target_of(execute))
        ttl_s = None if ttl is None else check_seconds(ttl, "ttl", error=ConfigurationError)
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            raise ConfigurationError(f"max_events must be an int >= 1, got {max_events!r}")
        ttl_ms = None if ttl_s is None or math.isinf(ttl_s) else math.ceil(ttl_s * 1000)
        self.retention = Retention(ttl_ms, max_events)
        self.stale_after = check_seconds(stale_after, "stale_after", error=ConfigurationError)
        self.poll_interval = check_seconds(
            poll_interval, "poll_interval", error=ConfigurationError, finite=True
        )
        self.max_poll_interval = max(
            self.poll_interval,
            check_seconds(
                max_poll_interval, "max_poll_interval", error=ConfigurationError, finite=True
            ),
        )

    def observed(self, name: str, op: Op[Any], read: bool = False) -> Op[Any]:
        """``op`` as one call ``events.<name>`` of this log's telemetry (``read``: one that
        returns stored events, whose failures count in ``graphkeep.resume.failures``)."""
        return self.telemetry.observe(f"events.{name}", op, read=read)

    # -- ops -------------------------------------------------------------------------

    def _append(
        self, run_id: Any, events: Iterable[Any], status: str | None = None
    ) -> Op[list[str]]:
        """Append ``events``; ``status``: the last is the close event of that status."""
        run = check_run_id(run_id)
        if isinstance(events, (dict, str, bytes)):
            raise InvalidInput("append_many takes a list of events (dicts)")
        payloads = [encode_event(e, i) for i, e in enumerate(events)]
        if not payloads:
            return []
        self.telemetry.append_batch(len(payloads))
        closing = status is not None
        if self.encryption is None:
            batch = Batch(payloads, closing, now_ms(), self.retention, status)
        else:
            seal = sealer(self.encryption, run)
            batch = Batch(payloads, closing, now_ms(), self.retention, status, seal, OVERHEAD)
        return (yield from self.port.append(run, batch))

    def _close(self, run_id: Any, status: Any, error: Any) -> Op[str]:
        event = close_event(status, error)
        ids = yield from self._append(run_id, [event], event["status"])
        return ids[0]

    def _heartbeat(self, run_id: Any) -> Op[None]:
        yield from self.port.heartbeat(check_run_id(run_id), now_ms(), self.retention)

    def _state(self, run_id: Any) -> Op[RunState | None]:
        return (yield from self.port.state(check_run_id(run_id)))

    def _delete(self, run_ids: Any) -> Op[None]:
        runs = [run_ids] if isinstance(run_ids, str) else list(run_ids)
        checked = [check_run_id(r) for r in runs]
        if checked:
            yield from self.port.delete(checked)

    def _rekey(self, dry_run: Any, run_ids: Any, threads: Any = None) -> Op[EventsRekeyed]:
        """Key rotation (:mod:`graphkeep.events.rekey`), checked now."""
        if self.encryption is None:
            raise ConfigurationError(
                "rekey needs a log opened with encryption=KeyRing(...) (the new key current,"
                " the old ones after it)"
            )
        if not isinstance(dry_run, bool):
            raise InvalidInput(f"dry_run must be True or False, got {dry_run!r}")
        runs = None
        if run_ids is not None:
            listed = [run_ids] if isinstance(run_ids, str) else list(run_ids)
            runs = list(dict.fromkeys(check_run_id(r) for r in listed))
        if threads is None:
            return rekey_runs(self.port, self.encryption, dry_run=dry_run, run_ids=runs)
        if runs is not None:
            raise InvalidInput("rekey takes run_ids or threads, not both")
        if not isinstance(threads, Mapping) or not all(isinstance(t, str) for t in threads):
            raise InvalidInput("threads must map thread ids to the run ids their checkpoints name")
        named = {
            t: [check_run_id(r) for r in ([rs] if isinstance(rs, str) else rs)]
            for t, rs in threads.items()
        }
        return self._rekey_threads(self.encryption, dry_run, named)

    def _rekey_threads(
        self, ring: KeyRing, dry_run: bool, threads: dict[str, list[str]]
    ) -> Op[EventsRekeyed]:
        """The runs tied to ``threads`` (:mod:`graphkeep.events.threads`) rekeyed."""
        tied = yield from thread_runs(self.port, ring, threads)
        result: EventsRekeyed = yield from rekey_runs(
            self.port, ring, dry_run=dry_run, run_ids=tied.run_ids
        )
        result.threads = tied
        return result

    def _check_after(self, after: Any) -> str | None:
        if after is None:
            return None
        if not isinstance(after, str):
            raise InvalidInput(f"after must be an event id (str), got {type(after).__name__}")
        self.port.id_key(after)
        return after

    def _read(self, run_id: Any, after: Any, follow: bool) -> Op[None]:
        """Checked now; the returned op emits ``(event_id, event)`` pairs."""
        run = check_run_id(run_id)
        cursor = self._check_after(after)
        if not isinstance(follow, bool):
            raise InvalidInput(f"follow must be True or False, got {follow!r}")
        return self._reading(run, cursor, follow)

    def _reading(self, run: str, cursor: str | None, follow: bool) -> Op[None]:
        port = self.port
        state = yield from port.state(run)
        if state is None:
            raise UnknownRun(f"run {run!r} has no events (never written, deleted or expired)")
        if (
            cursor is not None
            and state.trimmed_through is not None
            and port.id_key(cursor) < port.id_key(state.trimmed_through)
        ):
            raise EventsTrimmed(
                f"run {run!r}: events after {cursor} up to {state.trimmed_through} were"
                " dropped by retention (max_events / ttl); resume from the start instead"
            )
        check_every = max(0.05, min(self.stale_after / 4, 5.0))
        checked = time.monotonic()
        backoff = Backoff(self.poll_interval, self.max_poll_interval)
        while True:
            wait = 0
            if follow and port.blocking:
                left = check_every - (time.monotonic() - checked)
                wait = max(1, min(MAX_BLOCK_MS, math.ceil(left * 1000)))
            try:
                batch = yield from port.read(run, cursor, PAGE, wait)
            except CorruptData as exc:  # a record of the run that does not read back
                after = None if cursor is None else f"after event {cursor}"
                raise exc.at(Place(run_id=run, part=after)) from None
            for stored in batch:
                data = stored.data
                if self.encryption is not None:
                    try:
                        data = opened(self.encryption, run, stored.event_id, data)
                    except CorruptData as exc:
                        raise exc.at(Place(run_id=run, event_id=stored.event_id)) from None
                try:
                    event = json.loads(data)
                except ValueError:  # damaged, or never written by graphkeep: never quoted
                    event = None
                if not isinstance(event, dict):
                    sealed = sealed_without_ring(data) if self.encryption is None else None
                    if sealed is not None:
                        raise sealed.at(Place(run_id=run, event_id=stored.event_id))
                    raise CorruptData(
                        reason="its stored payload is not a JSON object",
                        kind=UNDECODABLE,
                        place=Place(run_id=run, event_id=stored.event_id),
                    )
                yield Emit((stored.event_id, event))
                cursor = stored.event_id
                if stored.closing:
                    return
            if batch:
                backoff.news()
                if len(batch) == PAGE:
                    continue
            if not follow:
                if len(batch) < PAGE:
                    return
                continue
            if time.monotonic() - checked >= check_every:
                checked = time.monotonic()
                state = yield from port.state(run)
                if state is None:
                    raise UnknownRun(f"run {run!r} expired or was deleted while being read")
                silent = (now_ms() - state.active_ms) / 1000
                if state.closed is None and silent > self.stale_after:
                    raise RunStale(
                        f"run {run!r} has not appended or sent a heartbeat for {silent:.1f} s"
                        f" (stale_after={self.stale_after:g}); its writer is probably gone"
                    )
            if not port.blocking:
                yield Sleep(backoff.pause())


class SyncEventLog(Blocking, EventLogBase):
    """An event log on a blocking client; the ``a``-prefixed methods run it in a worker thread."""

    def with_options(self, **options: Any) -> SyncEventLog:
        """A log on the same connection with other options (e.g. ``max_events=20`` for a
        small index of runs): the rest are this log's."""
        return SyncEventLog(self.port, self._execute, **{**self.options, **options})

    def setup(self) -> None:
        self._call(self.observed("setup", self.port.setup()))

    def append(self, run_id: str, event: dict[str, Any]) -> str:
        """Store one event; returns its id (usable as an SSE ``id:``)."""
        ids = self._call(self.observed("append", self._append(run_id, [event])))
        return str(ids[0])

    def append_many(self, run_id: str, events: Iterable[dict[str, Any] | Encoded]) -> list[str]:
        """Store events in order in one request where the store allows; returns their ids.
        An event may come encoded already (:class:`~graphkeep.events.port.Encoded`, from
        :func:`~graphkeep.events.port.encode`): its bytes are stored as they are."""
        return list(self._call(self.observed("append", self._append(run_id, events))))

    def close(self, run_id: str, status: str, *, error: str | None = None) -> str:
        """Write the run's final close event; later appends raise ``RunClosed``."""
        return str(self._call(self.observed("close", self._close(run_id, status, error))))

    def heartbeat(self, run_id: str) -> None:
        """Mark the run alive (followers raise ``RunStale`` after ``stale_after`` without)."""
        self._call(self.observed("heartbeat", self._heartbeat(run_id)))

    def state(self, run_id: str) -> RunState | None:
        return self._call(self.observed("state", self._state(run_id)))  # type: ignore[no-any-return]

    def delete(self, run_ids: str | Iterable[str]) -> None:
        self._call(self.observed("delete", self._delete(run_ids)))

    def rekey(
        self,
        *,
        dry_run: bool = False,
        run_ids: Iterable[str] | None = None,
        threads: Mapping[str, Iterable[str]] | None = None,
    ) -> EventsRekeyed:
        """Rewrite every event of the log (or of ``run_ids``; or of the runs tied to
        ``threads``, thread id -> the run ids its checkpoints name:
        :mod:`graphkeep.events.threads`) under an older key id under the current key of
        ``encryption=``, in place (:mod:`graphkeep.events.rekey`)."""
        op = self._rekey(dry_run, run_ids, threads)
        return self._call(self.observed("rekey", op))  # type: ignore[no-any-return]

    async def arekey(
        self,
        *,
        dry_run: bool = False,
        run_ids: Iterable[str] | None = None,
        threads: Mapping[str, Iterable[str]] | None = None,
    ) -> EventsRekeyed:
        return await asyncio.to_thread(
            lambda: self.rekey(dry_run=dry_run, run_ids=run_ids, threads=threads)
        )

    def read(
        self, run_id: str, *, after: str | None = None, follow: bool = True
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(event_id, event)`` after ``after``; with ``follow`` live until the close event."""
        return drive_iter(
            self.observed("read", self._read(run_id, after, follow), read=True), self._execute
        )

    async def aappend(self, run_id: str, event: dict[str, Any]) -> str:
        return await asyncio.to_thread(self.append, run_id, event)

    async def aappend_many(
        self, run_id: str, events: Iterable[dict[str, Any] | Encoded]
    ) -> list[str]:
        return await asyncio.to_thread(self.append_many, run_id, list(events))

    async def aclose_run(self, run_id: str, status: str, *, error: str | None = None) -> str:
        return await asyncio.to_thread(lambda: self.close(run_id, status, error=error))

    async def aheartbeat(self, run_id: str) -> None:
        await asyncio.to_thread(self.heartbeat, run_id)

    def aread(
        self, run_id: str, *, after: str | None = None, follow: bool = True
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        return stream_in_thread(self.read(run_id, after=after, follow=follow))


class AsyncEventLog(Awaited, EventLogBase):
    """An event log on an asyncio client: ``append``, ``close``… are coroutines and ``read``
    an async iterator (``aappend``, ``aread``… are the same methods under LangGraph's
    ``a`` names). ``sync_read`` serves a blocking caller from another thread."""

    def with_options(self, **options: Any) -> AsyncEventLog:
        """A log on the same connection with other options (e.g. ``max_events=20`` for a
        small index of runs): the rest are this log's."""
        return AsyncEventLog(self.port, self._aexecute, **{**self.options, **options})

    async def setup(self) -> None:
        await self._acall(self.observed("setup", self.port.setup()))

    async def append(self, run_id: str, event: dict[str, Any]) -> str:
        ids = await self._acall(self.observed("append", self._append(run_id, [event])))
        return str(ids[0])

    async def append_many(
        self, run_id: str, events: Iterable[dict[str, Any] | Encoded]
    ) -> list[str]:
        return list(await self._acall(self.observed("append", self._append(run_id, events))))

    async def close(self, run_id: str, status: str, *, error: str | None = None) -> str:
        return str(await self._acall(self.observed("close", self._close(run_id, status, error))))

    async def heartbeat(self, run_id: str) -> None:
        await self._acall(self.observed("heartbeat", self._heartbeat(run_id)))

    async def state(self, run_id: str) -> RunState | None:
        return await self._acall(self.observed("state", self._state(run_id)))  # type: ignore[no-any-return]

    async def delete(self, run_ids: str | Iterable[str]) -> None:
        await self._acall(self.observed("delete", self._delete(run_ids)))

    async def rekey(
        self,
        *,
        dry_run: bool = False,
        run_ids: Iterable[str] | None = None,
        threads: Mapping[str, Iterable[str]] | None = None,
    ) -> EventsRekeyed:
        """As :meth:`SyncEventLog.rekey`."""
        op = self._rekey(dry_run, run_ids, threads)
        return await self._acall(self.observed("rekey", op))  # type: ignore[no-any-return]

    def read(
        self, run_id: str, *, after: str | None = None, follow: bool = True
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        op = self.observed("read", self._read(run_id, after, follow), read=True)
        return adrive_iter(op, self._aexecute)

    aappend = append
    aappend_many = append_many
    aclose_run = close
    aheartbeat = heartbeat
    aread = read
    arekey = rekey

    def sync_read(
        self, run_id: str, *, after: str | None = None, follow: bool = True
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``read`` for a blocking caller on another thread than the log's event loop."""

        def hop(coro: Any) -> Any:
            return on_loop(self.loop, coro, "event log", "async for ... in events.read(...)")

        return stream_on_loop(self.read(run_id, after=after, follow=follow), hop)
