"""The AG-UI endpoint over HTTP (Starlette routes; mount them in a Starlette or FastAPI app).

- ``POST {path}``: a ``RunAgentInput`` → ``text/event-stream`` of the run's AG-UI events, each
  with ``id:`` = its event log id. A new ``runId`` starts the run in a worker (it goes on when
  the connection drops); a ``runId`` the thread already ran is rejoined: from its first event,
  or — with a ``Last-Event-ID`` header — after that event (what was open at that point is
  sent again first, without ids, so the protocol's stream rules hold).
- ``POST {path}/connect``: a ``RunAgentInput`` naming the thread (what ``AbstractAgent.connect``
  sends on a page load) → the thread's ``MESSAGES_SNAPSHOT`` and ``STATE_SNAPSHOT`` from its
  checkpoint, then the live run of the thread joined without a gap, or ``RUN_FINISHED`` when
  none is running (with the interrupt outcome when the thread waits for one).
- ``GET {path}/health``.

Errors: a body that is not a ``RunAgentInput`` → 422 with the validation message, nothing
written; an unknown thread or run on a resume or rejoin → 404; a thread already running
another run, or a resume that answers no pending interrupt → 409; a resume point older than
what the log keeps → a ``RUN_ERROR`` event with ``code`` ``EventsTrimmed``, never a gap; with
``saver.exclusive(graph)``, a thread whose lease another run keeps past ``timeout`` (or at
once with ``on_busy="reject"``) → ``RUN_STARTED`` and a ``RUN_ERROR`` with ``code``
``ThreadBusy``, nothing written.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from graphkeep.agui.runs import AGUIRuns, Conflict, RunExists, Served, agent_input
from graphkeep.errors import (
    EventsTrimmed,
    GraphkeepError,
    InvalidInput,
    RunStale,
    ThreadBusy,
    UnknownRun,
)
from graphkeep.port.loop import cancel_until_done

__all__ = ["KEEPALIVE_S", "agui_app", "agui_routes"]

#: a comment line is sent after this many quiet seconds, so a gone client is noticed
KEEPALIVE_S = 15.0
MEDIA_TYPE = "text/event-stream"


def _sse(event_id: str | None, event: dict[str, Any]) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


def _run_error(exc: Exception) -> dict[str, Any]:
    return {"type": "RUN_ERROR", "message": str(exc), "code": type(exc).__name__}


def _busy(agent: Any, exc: ThreadBusy) -> Response:
    """A start refused for a busy thread, as a run that ended at once (nothing is kept)."""
    started = {"type": "RUN_STARTED", "threadId": agent.thread_id, "runId": agent.run_id}
    body = [_sse(None, started), _sse(None, _run_error(exc))]
    return StreamingResponse(iter(body), media_type=MEDIA_TYPE)


class Prefetch:
    """Pulls an async iterator in its own task, so the reader can wait with a timeout (for
    keep-alives) without cancelling the read, and can look at the first item before the
    response starts (an error there is an HTTP status, not an event)."""

    def __init__(self, iterator: AsyncIterator[Any]) -> None:
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=64)
        self.task = asyncio.create_task(self._pump(iterator))
        self.head: tuple[str, Any] | None = None

    async def _pump(self, iterator: AsyncIterator[Any]) -> None:
        try:
            async for item in iterator:
                await self.queue.put(("item", item))
            await self.queue.put(("end", None))
        except Exception as exc:  # handed to the reader
            await self.queue.put(("error", exc))
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await close()

    async def _get(self, timeout: float | None) -> tuple[str, Any]:
        if self.head is not None:
            head, self.head = self.head, None
            return head
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def first(self) -> None:
        """Wait for the first item; raise what the iterator raised before it."""
        self.head = await self._get(None)
        if self.head[0] == "error":
            error, self.head = self.head[1], None
            raise error

    async def next(self, timeout: float) -> Any:
        """The next item; None at the end; raises what the read raised, or TimeoutError."""
        kind, value = await self._get(timeout)
        if kind == "error":
            raise value
        return value if kind == "item" else None

    async def aclose(self) -> None:
        # the read would go on with nobody listening after one lost cancellation
        await cancel_until_done([self.task])
        await asyncio.gather(self.task, return_exceptions=True)


async def _stream(events: Prefetch) -> AsyncIterator[str]:
    try:
        while True:
            try:
                item = await events.next(KEEPALIVE_S)
            except asyncio.TimeoutError:
                yield ": keep-alive\n\n"
                continue
            except (UnknownRun, RunStale, EventsTrimmed) as exc:
                yield _sse(None, _run_error(exc))
                return
            if item is None:
                return
            event_id, event = item
            # an event a page load leaves out: its id alone, so a rejoin starts after it
            yield f"id: {event_id}\n\n" if event is None else _sse(event_id, event)
    finally:
        await events.aclose()


async def _respond(items: AsyncIterator[Served]) -> Response:
    """The SSE response for ``items``; an error before the first item is an HTTP status."""
    events = Prefetch(items)
    try:
        await events.first()
    except EventsTrimmed as exc:  # the stream exists, but not from that point: say so
        return StreamingResponse(iter([_sse(None, _run_error(exc))]), media_type=MEDIA_TYPE)
    except UnknownRun as exc:
        await events.aclose()
        return _error(404, str(exc))
    except InvalidInput as exc:
        await events.aclose()
        return _error(422, str(exc))
    except BaseException:
        await events.aclose()
        raise
    return StreamingResponse(
        _stream(events),
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _input(request: Request) -> Any:
    try:
        body = await request.json()
    except ValueError:
        raise InvalidInput("the body must be JSON (a RunAgentInput)") from None
    return agent_input(body)


def agui_routes(runs: AGUIRuns | Callable[[], AGUIRuns], path: str = "") -> list[Route]:
    """The endpoint's routes under ``path`` (e.g. ``"/agent"``; ``""``: at the root).

    ``runs`` is an :class:`~graphkeep.agui.AGUIRuns`, or a function returning it when each
    request arrives (for apps that open the saver and the event log in their lifespan).
    """
    get = runs if callable(runs) and not isinstance(runs, AGUIRuns) else (lambda: runs)
    base = path.rstrip("/")

    def taking_input(
        handle: Callable[[AGUIRuns, Any, Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A POST route whose body is a ``RunAgentInput`` (422 when it is not)."""

        async def route(request: Request) -> Response:
            agui = get()
            try:
                agent = await _input(request)
            except InvalidInput as exc:
                return _error(422, str(exc))
            return await handle(agui, agent, request)

        return route

    @taking_input
    async def run(agui: AGUIRuns, agent: Any, request: Request) -> Response:
        after = request.headers.get("last-event-id") or None
        if after is None:
            try:
                await agui.start(agent)
            except RunExists:
                pass  # a retried request joins the run from its first event (404 when the
                # run is another thread's)
            except Conflict as exc:
                return _error(409, str(exc))
            except ThreadBusy as exc:  # saver.exclusive: another process's run holds the lease
                return _busy(agent, exc)
            except UnknownRun as exc:
                return _error(404, str(exc))
            except InvalidInput as exc:
                return _error(422, str(exc))
            except GraphkeepError as exc:
                return _error(400, str(exc))
        return await _respond(agui.serve(agent.thread_id, agent.run_id, after))

    @taking_input
    async def connect(agui: AGUIRuns, agent: Any, request: Request) -> Response:
        return await _respond(agui.connect(agent.thread_id, agent.run_id))

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return [
        Route(base or "/", run, methods=["POST"]),
        Route(f"{base}/connect", connect, methods=["POST"]),
        Route(f"{base}/health", health, methods=["GET"]),
    ]


def agui_app(runs: AGUIRuns | Callable[[], AGUIRuns]) -> Starlette:
    """An ASGI app serving ``runs`` at its root (``app.mount("/agent", agui_app(runs))`` in
    FastAPI or Starlette). The app does not own the runs: call ``await runs.aclose()`` when
    the process stops, so runs still going end with ``RUN_ERROR`` in their logs."""
    return Starlette(routes=agui_routes(runs))
