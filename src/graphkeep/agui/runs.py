"""AG-UI runs kept in a graphkeep event log: start a run in a worker, and serve its events to
any number of connections — from the start, after a ``Last-Event-ID``, or joined on a page load
after a snapshot of the thread's checkpoint.

LangGraph's execution becomes AG-UI events through ``ag-ui-langgraph``'s
:class:`~ag_ui_langgraph.LangGraphAgent` (with the protocol's interrupt outcome and
``RunAgentInput.resume``); it composes with a durable log because it is an async iterator of
events: the worker appends each one to the log (batched, :class:`~graphkeep.events.streaming.
EventWriter`) and every connection reads them back from there, never from the worker. What
``ag-ui-langgraph`` keeps in memory (``active_run``) lives as long as the worker's run; what
a reconnecting client needs lives in the log.

Log layout: the run's events under its run id (the first, written before the worker starts, is
``RUN_STARTED`` naming the thread: a connection naming another thread is refused), closed with
the log's close event after the run's terminal event; and a small index per thread
(``agui.thread.<sha256 of the thread id>``, at most :data:`INDEX_EVENTS` kept) naming the runs
started on it, newest last, which a page load reads to find the live run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from graphkeep.agui.dump import dump, pydantic_dump
from graphkeep.checkpoint.exclusive import Exclusive
from graphkeep.errors import (
    EventsTrimmed,
    GraphkeepError,
    InvalidInput,
    UnknownRun,
)
from graphkeep.events.port import MAX_EVENT_BYTES, Encoded, encode
from graphkeep.events.streaming import EventWriter, call_log
from graphkeep.events.threads import index_id
from graphkeep.port.clock import now_ms
from graphkeep.port.loop import cancel_until_done

__all__ = [
    "INDEX_EVENTS",
    "AGUIRuns",
    "Conflict",
    "RunExists",
    "Served",
    "agent_input",
]

log = logging.getLogger("graphkeep.agui")

#: runs kept in a thread's index (the newest is the one that matters)
INDEX_EVENTS = 20
#: events a page load's reader of a live run reads ahead of its connection
READ_AHEAD = 4096
#: the longest run id the endpoint accepts (the log's limit is 512 bytes)
MAX_RUN_ID_BYTES = 400
#: an event served as it was appended: (its log id, the event); replayed ones have no id, and
#: a log event a page load leaves out comes as (its id, None): the client is past it
Served = tuple[str | None, dict[str, Any] | None]

#: opener type -> (closer types, the field naming what is open)
_OPENERS: dict[str, tuple[tuple[str, ...], str]] = {
    "TEXT_MESSAGE_START": (("TEXT_MESSAGE_END",), "messageId"),
    "TOOL_CALL_START": (("TOOL_CALL_END",), "toolCallId"),
    "STEP_STARTED": (("STEP_FINISHED",), "stepName"),
    "REASONING_START": (("REASONING_END",), "messageId"),
    "REASONING_MESSAGE_START": (("REASONING_MESSAGE_END",), "messageId"),
    "SUBAGENT_STARTED": (("SUBAGENT_FINISHED", "SUBAGENT_ERROR"), "subagentRunId"),
}
#: events inside an open one: (its opener, the field naming it)
_INSIDE = {
    "TEXT_MESSAGE_CONTENT": ("TEXT_MESSAGE_START", "messageId"),
    "TOOL_CALL_ARGS": ("TOOL_CALL_START", "toolCallId"),
    "REASONING_MESSAGE_CONTENT": ("REASONING_MESSAGE_START", "messageId"),
}
_CLOSERS = {
    closer: (opener, key) for opener, (closers, key) in _OPENERS.items() for closer in closers
}
#: events whose ``messageId`` names the message they belong to
_MESSAGE_EVENTS = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TEXT_MESSAGE_CHUNK",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_MESSAGE_CHUNK",
        "REASONING_END",
        "TOOL_CALL_RESULT",
    }
)
_TOOL_EVENTS = frozenset({"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_CHUNK"})
_SNAPSHOTS = frozenset({"STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"})
#: events of a live run's log a page load does not send again (it sent RUN_STARTED first, and
#: snapshots newer than these)
_SKIPPED_ON_LOAD = _SNAPSHOTS | {"RUN_STARTED"}
#: deltas that may be cut in pieces to fit the log's event limit
_SPLITTABLE = {"TEXT_MESSAGE_CONTENT": "delta", "TOOL_CALL_ARGS": "delta"}


class Conflict(GraphkeepError):
    """The request cannot be served in the thread's present state (HTTP 409)."""


class RunExists(Conflict):
    """The run id was started already (a retried request): rejoin it instead."""


def agent_input(body: Any) -> Any:
    """``body`` (parsed JSON) as an AG-UI ``RunAgentInput``; raises ``InvalidInput`` with the
    validation message when it is not one (nothing is written)."""
    from ag_ui.core import RunAgentInput
    from pydantic import ValidationError

    try:
        parsed = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        raise InvalidInput(f"not a RunAgentInput: {exc}") from None
    _check_id(parsed.thread_id, "threadId")
    _check_id(parsed.run_id, "runId")
    return parsed


def _check_id(value: str, field: str) -> None:
    if not value or "\x00" in value or len(value.encode("utf-8")) > MAX_RUN_ID_BYTES:
        raise InvalidInput(
            f"{field} must be 1 to {MAX_RUN_ID_BYTES} UTF-8 bytes without NUL, got {value!r:.80}"
        )


def fit(event: dict[str, Any]) -> list[Encoded]:
    """``event`` as events that each fit the log's limit (``MAX_EVENT_BYTES``), encoded once
    (the log appends the bytes measured here as they are): a text or tool-argument delta is
    cut in pieces that concatenate to it; a state snapshot loses its ``messages`` copy
    (``MESSAGES_SNAPSHOT`` carries them); anything else too large becomes a ``CUSTOM`` event
    ``graphkeep:event_omitted`` naming its type and size."""
    encoded = encode(event)
    size = len(encoded.data)
    if size <= MAX_EVENT_BYTES:
        return [encoded]
    kind = event.get("type")
    field = _SPLITTABLE.get(str(kind))
    if field is not None and isinstance(event.get(field), str):
        text: str = event[field]
        # a character is at most 4 UTF-8 bytes (6 as a JSON escape): pieces stay far under
        step = max(1, (MAX_EVENT_BYTES - (size - len(text.encode("utf-8")))) // 8)
        return [encode({**event, field: text[i : i + step]}) for i in range(0, len(text), step)]
    snapshot = event.get("snapshot")
    if kind == "STATE_SNAPSHOT" and isinstance(snapshot, dict) and "messages" in snapshot:
        lighter = encode(
            {**event, "snapshot": {k: v for k, v in snapshot.items() if k != "messages"}}
        )
        if len(lighter.data) <= MAX_EVENT_BYTES:
            return [lighter]
    log.warning("AG-UI event %s of %d bytes is over the log's limit: sent as omitted", kind, size)
    omitted = {
        "type": "CUSTOM",
        "name": "graphkeep:event_omitted",
        "value": {"type": kind, "bytes": size, "limit": MAX_EVENT_BYTES},
    }
    return [encode(omitted)]


class _Open:
    """What is open at a point of a run's events (messages, tool calls, steps…), in order."""

    def __init__(self) -> None:
        self.openers: dict[tuple[str, str], dict[str, Any]] = {}

    def see(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type"))
        if kind in _OPENERS:
            self.openers[(kind, str(event.get(_OPENERS[kind][1])))] = event
        elif kind in _CLOSERS:
            opener, key = _CLOSERS[kind]
            self.openers.pop((opener, str(event.get(key))), None)

    def replay(self) -> list[dict[str, Any]]:
        return list(self.openers.values())

    def allows(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` may follow what is open: an opener, or an event inside or closing
        an open one, or one that is in nothing."""
        kind = str(event.get("type"))
        inside = _INSIDE.get(kind) or _CLOSERS.get(kind)
        return inside is None or (inside[0], str(event.get(inside[1]))) in self.openers


class AGUIRuns:
    """A compiled graph served as an AG-UI agent over a graphkeep event log.

    ``graph``: a compiled LangGraph graph whose checkpointer is any graphkeep saver (or any
    saver), or ``saver.exclusive(graph)`` when several processes serve the same threads;
    ``events``: an event log from :func:`graphkeep.aconnect_events` (or
    ``connect_events``). ``agent_options`` go to ``ag_ui_langgraph.LangGraphAgent`` (its
    defaults here: the protocol's interrupt outcome on, the legacy ``on_interrupt`` custom
    event and raw events off). ``flush_ms`` and ``heartbeat`` are :func:`~graphkeep.streaming.
    stream_run`'s. ``translation``: ``"ag-ui-langgraph"`` (the default) runs every run
    through ``ag-ui-langgraph``; ``"graphkeep"`` translates the runs it supports from the
    graph's own streams (:mod:`graphkeep.agui.translate`: the same events for the shapes it
    covers, half the CPU per event) and the others through ``ag-ui-langgraph``, decided per
    run before it starts. Not the default: a graph invoked inside a node, nodes of one step
    running at once and ``predict_state`` only show once a run is under way, and there its
    events differ from ``ag-ui-langgraph``'s (an inner graph's tokens are not streamed).

    One run of a thread at a time. With a plain graph, a start is refused while the log
    shows a run of the thread live (starts of a thread take turns in this process only).
    Through ``saver.exclusive`` (:class:`~graphkeep.checkpoint.exclusive.Exclusive`) the rule
    is the thread's fenced lease, across processes: a start takes it before its checks and
    its run keeps it until the graph is done; a start of a busy thread waits for it
    (``timeout``), or raises :class:`~graphkeep.errors.ThreadBusy` (then, or at once with
    ``on_busy="reject"``) having written nothing; a run that stalled past its lease while
    another took the thread is refused its next write (:class:`~graphkeep.errors.LeaseLost`:
    it ends with ``RUN_ERROR``, nothing of it stored).
    """

    def __init__(
        self,
        graph: Any,
        events: Any,
        *,
        name: str = "agent",
        description: str | None = None,
        flush_ms: float = 20,
        heartbeat: float | None = None,
        translation: str = "ag-ui-langgraph",
        **agent_options: Any,
    ) -> None:
        from graphkeep.agui.agent import Agent

        if translation not in ("graphkeep", "ag-ui-langgraph"):
            raise InvalidInput(
                f"translation must be 'graphkeep' or 'ag-ui-langgraph', got {translation!r}"
            )
        self.translation = translation

        options = {
            "emit_interrupt_outcome": True,
            "enable_legacy_on_interrupt_event": False,
            "emit_raw_events": False,
            **agent_options,
        }
        self.graph = graph
        #: the thread's lease, when ``graph`` is ``saver.exclusive(...)``: held around whole
        #: runs here, so the agent runs the graph it wraps
        self.exclusive = graph if isinstance(graph, Exclusive) else None
        runnable = graph.graph if self.exclusive is not None else graph
        self.events = events
        self.agent = Agent(name=name, graph=runnable, description=description, **options)
        self.index = events.with_options(max_events=INDEX_EVENTS)
        self.flush_ms = flush_ms
        stale = float(getattr(events, "stale_after", 60.0))
        self.stale_after = stale
        self.heartbeat = heartbeat if heartbeat is not None else max(0.05, min(stale, 60.0) / 3)
        self.tasks: set[asyncio.Task[None]] = set()
        #: thread id -> [its start lock, how many starts hold or wait for it]
        self.locks: dict[str, list[Any]] = {}

    # -- starting a run --------------------------------------------------------------

    async def start(self, request: Any) -> None:
        """Start the run ``request`` (a ``RunAgentInput``) in a worker task: refused with
        :class:`Conflict` when another run of the thread is live or the run id is taken, with
        ``UnknownRun`` when it resumes a thread that has no checkpoint, and — through
        ``saver.exclusive`` — with ``ThreadBusy`` when the thread's lease stays held. When
        this returns, the run's ``RUN_STARTED`` is in the log and :meth:`serve` can read it."""
        if self.exclusive is None:
            async with self._thread_lock(request.thread_id):
                await self._open(request, leased=False)
            self._spawn(self._work(request), request.run_id)
            return
        if await call_log(self.events, "state", request.run_id) is not None:
            # a retried request: it joins at once, not after its own run's lease
            raise RunExists(f"run {request.run_id!r} exists already: rejoin it")
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        leased = asyncio.Event()
        work = self._leased(self.exclusive, request, opened, leased)
        task = self._spawn(work, request.run_id)
        try:
            await asyncio.shield(opened)
        except asyncio.CancelledError:
            if not opened.done():  # nobody waits for the start any more
                opened.cancel()
                if not leased.is_set():  # nor for the lease
                    task.cancel()
            raise

    def _spawn(self, work: Any, run_id: str) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=f"graphkeep-agui-{run_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _open(self, request: Any, leased: bool) -> None:
        """The start's checks, then the run's ``RUN_STARTED`` and its line in the thread's
        index (one start of the thread at a time: the caller holds its lock or its lease —
        then no other run uses the thread's checkpoints, whatever the log shows)."""
        thread_id, run_id = request.thread_id, request.run_id
        if await call_log(self.events, "state", run_id) is not None:
            raise RunExists(f"run {run_id!r} exists already: rejoin it")
        live = None if leased else await self.live_run(thread_id)
        if live is not None:
            raise Conflict(f"thread {thread_id!r} is running {live!r}: wait for it to end")
        await self._check_resume(request)
        started = {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}
        await call_log(self.index, "append", index_id(thread_id), {"runId": run_id})
        await call_log(self.events, "append", run_id, started)

    async def _leased(
        self,
        exclusive: Exclusive,
        request: Any,
        opened: asyncio.Future[None],
        leased: asyncio.Event,
    ) -> None:
        """A start and its run under the thread's lease, let go once the graph is done
        (before the run's last events are flushed: a client that saw the run end finds the
        thread free). ``opened`` gets the start's outcome; ``leased`` is set once it is held."""
        config = {"configurable": {"thread_id": request.thread_id}}
        try:
            async with contextlib.AsyncExitStack() as lease:
                await lease.enter_async_context(exclusive.aheld(config))
                leased.set()
                if opened.done():
                    return  # the start was given up while it waited: nothing written
                await self._open(request, leased=True)
                if not opened.done():
                    opened.set_result(None)
                # started: it runs even if the start was given up meanwhile
                await self._work(request, lease.aclose)
        except BaseException as exc:
            if not opened.done():
                if isinstance(exc, asyncio.CancelledError):
                    opened.cancel()
                else:
                    opened.set_exception(exc)
            elif isinstance(exc, Exception):  # raised to nobody: said here
                log.exception("AG-UI run %s of thread %s failed", request.run_id, request.thread_id)
            if not isinstance(exc, Exception):
                raise

    @contextlib.asynccontextmanager
    async def _thread_lock(self, thread_id: str) -> AsyncIterator[None]:
        """One start at a time per thread in this process (dropped when nobody holds it)."""
        entry = self.locks.setdefault(thread_id, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self.locks[thread_id]

    async def _check_resume(self, request: Any) -> None:
        config = {"configurable": {"thread_id": request.thread_id}}
        state = await self.graph.aget_state(config)
        pending = {i.id for i in state.interrupts}
        answers = [entry.interrupt_id for entry in request.resume or ()]
        if answers:
            if not state.values and not state.next:
                raise UnknownRun(f"thread {request.thread_id!r} has no checkpoint to resume")
            unknown = sorted(set(answers) - pending)
            if unknown:
                raise Conflict(
                    f"thread {request.thread_id!r} does not wait for interrupt(s) {unknown}"
                    f" (pending: {sorted(pending) or 'none'})"
                )
        elif pending:
            raise Conflict(
                f"thread {request.thread_id!r} waits for interrupt(s) {sorted(pending)}:"
                " answer them in RunAgentInput.resume"
            )

    async def _work(
        self, request: Any, release: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """The agent's run into the log; ``release`` (the thread's lease) is let go once the
        agent is done with the graph."""
        run_id = request.run_id
        writer = EventWriter(self.events, run_id, self.flush_ms, self.heartbeat)
        writer.start()
        status, error, last = "error", None, None
        try:
            try:
                async for event in self._agent_events(request):
                    data = dump(event)
                    if data.get("type") == "RUN_STARTED":
                        continue  # written before the worker started
                    for part in fit(data):
                        writer.add(part)
                    last = data
            finally:
                if release is not None:
                    await _let_go(release, run_id)
            status = _status(last)
            if last is None or last.get("type") not in ("RUN_FINISHED", "RUN_ERROR"):
                writer.add(_run_error("the agent ended without RUN_FINISHED", "Incomplete"))
                status = "error"
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, asyncio.CancelledError):
                message = "the server stopped before the run ended"
            else:
                message = error
                log.exception("AG-UI run %s of thread %s failed", run_id, request.thread_id)
            with contextlib.suppress(Exception):  # a writer that failed: finish says why
                writer.add(_run_error(message, type(exc).__name__))
            if not isinstance(exc, Exception):
                raise
        finally:
            try:
                await writer.finish(status, error)
            except Exception:  # the store is gone: readers see the run go stale
                log.exception("AG-UI run %s could not be closed in the event log", run_id)

    def _agent_events(self, request: Any) -> AsyncIterator[Any]:
        """The run's AG-UI events: translated by graphkeep when it supports the run (decided
        here, before the run starts), else ``ag-ui-langgraph``'s."""
        from graphkeep.agui.translate import supported, translate

        agent = self.agent.clone()
        if self.translation == "graphkeep" and supported(agent, request):
            return translate(agent, request)
        events: AsyncIterator[Any] = agent.run(request)
        return events

    async def aclose(self) -> None:
        """Stop the runs this process is running (each ends with ``RUN_ERROR``)."""
        # cancelled once, not until done: a run's answer to its cancellation is to write its
        # RUN_ERROR, which a second cancellation would cut short (the run stays open)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- finding runs ----------------------------------------------------------------

    async def live_run(self, thread_id: str) -> str | None:
        """The run of ``thread_id`` still running (not closed, heard from within
        ``stale_after``), or None."""
        latest = None
        try:
            async for _id, entry in _aiter(self.index, index_id(thread_id), None, False):
                latest = entry.get("runId")
        except UnknownRun:
            return None
        if not isinstance(latest, str):
            return None
        state = await call_log(self.events, "state", latest)
        if state is None or state.closed is not None:
            return None
        if (now_ms() - state.active_ms) / 1000 > self.stale_after:
            return None
        return latest

    async def _head(self, thread_id: str, run_id: str) -> dict[str, Any]:
        """The run's ``RUN_STARTED``; ``UnknownRun`` when the run is not the thread's."""
        async for _id, event in _aiter(self.events, run_id, None, False):
            if event.get("type") == "RUN_STARTED" and event.get("runId") == run_id:
                if event.get("threadId") == thread_id:
                    return event
                break  # another thread's run: unknown to this one
            state = await call_log(self.events, "state", run_id)
            if state is not None and state.trimmed_through is not None:
                raise EventsTrimmed(
                    f"run {run_id!r}: its first events were dropped by retention"
                    " (max_events / ttl); it cannot be rejoined"
                )
            break  # not an AG-UI run
        raise UnknownRun(f"thread {thread_id!r} has no run {run_id!r}")

    # -- serving ---------------------------------------------------------------------

    async def serve(
        self, thread_id: str, run_id: str, after: str | None = None
    ) -> AsyncIterator[Served]:
        """The run's events for a connection: all of them, or (``after``: the last event id
        the client saw) ``RUN_STARTED`` and what was still open at that point (messages, tool
        calls, steps — events the client has already seen, sent again without an id so the
        protocol's stream rules hold) and then every later event exactly once, live until
        the run ends. The log's close event is not sent."""
        head = await self._head(thread_id, run_id)
        if after is not None:
            opened = _Open()
            found = False
            async for event_id, event in _aiter(self.events, run_id, None, False):
                opened.see(event)
                if event_id == after:
                    found = True
                    break
            if not found:
                # the id is of the run's form but not one of its events: from the start
                raise EventsTrimmed(
                    f"run {run_id!r} has no event {after}: it was dropped by retention or"
                    " never was the run's; start over without Last-Event-ID"
                )
            yield None, head
            for event in opened.replay():
                yield None, event
        async for item in self._follow(run_id, after):
            yield item

    async def _follow(
        self, run_id: str, after: str | None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        state = await call_log(self.events, "state", run_id)
        follow = state is not None and state.closed is None
        async for event_id, event in _aiter(self.events, run_id, after, follow):
            if event.get("type") == "close":
                return
            yield event_id, event

    async def connect(self, thread_id: str, run_id: str) -> AsyncIterator[Served]:
        """What a page load needs: the thread's messages and state from its checkpoint, then —
        when a run of the thread is live — that run joined without a gap or a doubled token
        (events of messages the snapshot already holds are left out); else the snapshot as a
        finished run ``run_id`` (with the interrupt outcome when the thread waits for one)."""
        live = await self.live_run(thread_id)
        config = {"configurable": {"thread_id": thread_id}}
        if live is None:
            state = await self.graph.aget_state(config)
            yield None, {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}
            for event in snapshots(state):
                yield None, event
            yield None, finished(thread_id, run_id, state)
            return
        try:
            head = await self._head(thread_id, live)
        except EventsTrimmed:  # a long run: the thread's index names it, the snapshot leads
            head = {"type": "RUN_STARTED", "threadId": thread_id, "runId": live}
        # what the log holds now, then the checkpoint: a snapshot event in that part of the
        # log is no newer than the checkpoint, and is left out
        ahead = _ReadAhead(self.events, live, self._follow)
        try:
            before = await ahead.prefix()
            state = await self.graph.aget_state(config)
            join = _Join(state)
            yield None, head
            for event in snapshots(state):
                yield None, event
            for event_id, event in before:
                if event.get("type") == "close":
                    return
                wanted = event.get("type") not in _SKIPPED_ON_LOAD and join.wants(event)
                yield event_id, (event if wanted else None)
            async for follow_id, followed in ahead.rest():
                yield follow_id, (followed if join.wants(followed) else None)
        finally:
            await ahead.aclose()


class _ReadAhead:
    """A live run's log read without a pause from the moment a page load starts joining it:
    what it holds now (``prefix``), then every later event (``rest``), read ahead into a
    bounded queue — so the checkpoint read and the snapshot sent in between leave no gap for
    retention (``max_events``) to drop unread events into. A connection more than
    :data:`READ_AHEAD` events behind makes the reader wait, as any follower does."""

    _END = object()

    def __init__(self, events: Any, run_id: str, follow: Any) -> None:
        self.events, self.run_id, self.follow = events, run_id, follow
        self.read: list[tuple[str, dict[str, Any]]] = []
        self.whole = False
        self.error: Exception | None = None
        self.caught_up = asyncio.Event()
        self.queue: asyncio.Queue[Any] = asyncio.Queue(READ_AHEAD)
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        try:
            async for item in _aiter(self.events, self.run_id, None, False):
                self.read.append(item)
            self.whole = True
            self.caught_up.set()
            async for item in self.follow(self.run_id, self.read[-1][0] if self.read else None):
                await self.queue.put(item)
        except Exception as exc:  # raised to the connection where it reaches it
            self.error = exc
        self.caught_up.set()
        await self.queue.put(self._END)

    async def prefix(self) -> list[tuple[str, dict[str, Any]]]:
        await self.caught_up.wait()
        if not self.whole and self.error is not None:
            raise self.error  # the log could not be read: before anything is sent
        return list(self.read)

    async def rest(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        while (item := await self.queue.get()) is not self._END:
            yield item
        if self.error is not None:
            raise self.error

    async def aclose(self) -> None:
        await cancel_until_done([self.task])


class _Join:
    """What a page load sends of a live run's events after its checkpoint snapshot: not the
    events of messages and tool calls the snapshot holds, nor events inside or closing one
    whose opener it did not send (dropped by retention, or left out)."""

    def __init__(self, state: Any) -> None:
        messages = (
            (state.values or {}).get("messages", []) if isinstance(state.values, dict) else []
        )
        self.messages = {str(getattr(m, "id", None)) for m in messages}
        self.tool_calls = {
            str(call.get("id"))
            for m in messages
            for call in (getattr(m, "tool_calls", None) or ())
            if isinstance(call, dict)
        }
        #: tool calls a tool message of the snapshot answers (its result may have been
        #: streamed under another message id than the one stored)
        self.answered = {
            str(m.tool_call_id) for m in messages if getattr(m, "tool_call_id", None) is not None
        }

        #: what the page load has opened so far
        self.open = _Open()

    def wants(self, event: dict[str, Any]) -> bool:
        if not self._new(event) or not self.open.allows(event):
            return False
        self.open.see(event)
        return True

    def _new(self, event: dict[str, Any]) -> bool:
        """Whether the snapshot does not hold what ``event`` is about."""
        kind = event.get("type")
        if kind == "TOOL_CALL_RESULT" and str(event.get("toolCallId")) in self.answered:
            return False
        if kind in _MESSAGE_EVENTS:
            return str(event.get("messageId")) not in self.messages
        if kind in _TOOL_EVENTS:
            if event.get("parentMessageId") in self.messages:
                self.tool_calls.add(str(event.get("toolCallId")))
            return str(event.get("toolCallId")) not in self.tool_calls
        return True


def snapshots(state: Any) -> list[dict[str, Any]]:
    """``MESSAGES_SNAPSHOT`` and ``STATE_SNAPSHOT`` of a LangGraph ``StateSnapshot``, as
    ``ag-ui-langgraph`` makes them during a run."""
    from ag_ui_langgraph import make_json_safe
    from ag_ui_langgraph.utils import langchain_messages_to_agui

    values = state.values if isinstance(state.values, dict) else {}
    messages = [
        pydantic_dump(m) for m in langchain_messages_to_agui(list(values.get("messages", [])))
    ]
    return [
        {"type": "MESSAGES_SNAPSHOT", "messages": messages},
        {"type": "STATE_SNAPSHOT", "snapshot": make_json_safe(dict(values))},
    ]


def finished(thread_id: str, run_id: str, state: Any) -> dict[str, Any]:
    """``RUN_FINISHED`` for a thread at rest: the interrupt outcome when it waits for one."""
    from ag_ui_langgraph.interrupts import lg_interrupts_to_agui

    event: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    if state.interrupts:
        interrupts = [pydantic_dump(i) for i in lg_interrupts_to_agui(list(state.interrupts))]
        event["outcome"] = {"type": "interrupt", "interrupts": interrupts}
    return event


async def _let_go(release: Callable[[], Awaitable[None]], run_id: str) -> None:
    try:
        await release()
    except Exception:  # the store is away: the lease expires after its ttl
        log.exception("AG-UI run %s could not let the thread's lease go", run_id)


def _status(last: dict[str, Any] | None) -> str:
    if last is None or last.get("type") == "RUN_ERROR":
        return "error"
    outcome = last.get("outcome")
    if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
        return "interrupted"
    return "success"


def _run_error(message: str, code: str) -> dict[str, Any]:
    return {
        "type": "RUN_ERROR",
        "message": message,
        "code": code,
        "timestamp": int(time.time() * 1000),
    }


async def _aiter(
    events: Any, run_id: str, after: str | None, follow: bool
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``events.read`` of a sync or an async log, as an async iterator that is closed."""
    reader = events.aread(run_id, after=after, follow=follow)
    try:
        async for item in reader:
            yield item
    finally:
        close = getattr(reader, "aclose", None)
        if close is not None:
            await close()
