"""Resumable chat: a support bot whose tokens stream to a page over SSE that survives drops.

Run it (any graphkeep backend URL)::

    pip install "graphkeep[web,redis]"        # or [web,mongodb], [web,dynamodb]
    GRAPHKEEP_URL=redis://localhost:6379/0 uvicorn examples.resumable_chat.app:app

Routes:

- ``GET /``: the page (``static/index.html``, vanilla JS with ``EventSource``);
- ``POST /runs`` ``{"thread_id", "message"}`` or ``{"thread_id", "resume": true|false}``
  starts a run of the bot (:mod:`examples.resumable_chat.bot`) in a background task through
  :func:`graphkeep.streaming.stream_run`, which appends every chunk of
  ``graph.astream(stream_mode=["messages", "updates"])`` to the run event log; answers
  ``{"run_id"}`` at once;
- ``GET /runs/{run_id}/events``: Server-Sent Events read from the event log with
  ``events.read(run_id, after=<Last-Event-ID header or ?after=>, follow=True)``: one SSE event
  per stored event, ``id:`` = the log's event id, ``data:`` = the event mapped to what the
  page draws (:func:`page_event`); it ends after the run's close event. A dropped connection
  is resumed by the browser itself: ``EventSource`` reconnects after ``retry:`` ms sending the
  last id it saw as ``Last-Event-ID``, and the log yields exactly the events after that one;
- ``GET /threads/{thread_id}/state``: the thread's messages and pending approval from the
  checkpoint (``graph.aget_state``), what a reloaded page draws before re-reading its run;
- ``GET /healthz``.

Environment: ``GRAPHKEEP_URL`` (default ``redis://localhost:6379/0``), ``GRAPHKEEP_KEY_PREFIX``
(optional, for the saver and the event log), ``RESUMABLE_CHAT_TOKEN_DELAY`` (seconds between
streamed chunks, default 0.025). **Test hooks** (never set them in production):
``RESUMABLE_CHAT_TEST_DROP_AFTER=N`` makes the events endpoint cut the connection after
serving N events, once per run, to simulate a dropped connection; with it (or with
``RESUMABLE_CHAT_TEST_HOOKS=1``) ``GET /_test/runs/{run_id}`` tells when a run started and
ended and lists the SSE connections it was served on (the ``Last-Event-ID`` each one came
with, the last id it sent, when).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from langgraph.types import Command
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import graphkeep
from graphkeep.errors import (
    EventsTrimmed,
    GraphkeepError,
    InvalidInput,
    RunStale,
    UnknownRun,
    mask_url,
)
from graphkeep.streaming import stream_run

from .bot import build_graph

__all__ = ["RETRY_MS", "app", "create_app", "page_event"]

log = logging.getLogger("resumable_chat")

STATIC = Path(__file__).parent / "static"
#: how long the browser waits before reconnecting a dropped event stream
RETRY_MS = 300
#: a comment line is sent after this many quiet seconds, so a gone client is noticed
KEEPALIVE_S = 15.0
STREAM_MODE = ["messages", "updates"]
MAX_MESSAGE_CHARS = 4000
MAX_THREAD_ID_CHARS = 200
#: test hook: how many runs' traces are kept
MAX_TRACES = 1000


def page_event(event: dict[str, Any]) -> dict[str, Any]:
    """One stored chunk (``{"mode", "data"}`` from ``stream_run``, or the close event) as what
    the page draws: ``token`` / ``message`` / ``interrupt`` / ``close`` (``step`` otherwise)."""
    if event.get("type") == "close":
        return {"type": "close", "status": event.get("status"), "error": event.get("error")}
    mode, data = event.get("mode"), event.get("data")
    if mode == "messages" and isinstance(data, list) and data and isinstance(data[0], dict):
        chunk = data[0]
        if chunk.get("type") == "AIMessageChunk" and isinstance(chunk.get("content"), str):
            return {"type": "token", "message_id": chunk.get("id"), "text": chunk["content"]}
    if mode == "updates" and isinstance(data, dict):
        if "__interrupt__" in data:
            pending = [
                {"id": i.get("id"), "value": i.get("value")}
                for i in data["__interrupt__"]
                if isinstance(i, dict)
            ]
            return {"type": "interrupt", "interrupts": pending}
        messages = [
            _message_json(m)
            for update in data.values()
            if isinstance(update, dict)
            for m in update.get("messages", [])
            if isinstance(m, dict)
        ]
        if messages:
            return {"type": "message", "messages": messages}
        return {"type": "step", "nodes": list(data)}
    return {"type": "step"}


def _message_json(message: Any) -> dict[str, Any]:
    """A LangChain message (object or its JSON dump) as ``{id, role, content}``."""
    if isinstance(message, dict):
        kind, content, message_id = message.get("type"), message.get("content"), message.get("id")
    else:
        kind, content, message_id = message.type, message.content, message.id
    role = {"human": "user", "ai": "assistant", "AIMessageChunk": "assistant"}.get(
        str(kind), str(kind)
    )
    text = content if isinstance(content, str) else json.dumps(content)
    return {"id": message_id, "role": role, "content": text}


def _sse(event_id: str | None, data: dict[str, Any]) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class Chat:
    """What the app holds while it serves: the saver, the event log, the graph, the runs."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str | None,
        token_delay: float,
        drop_after: int | None,
        test_hooks: bool,
    ) -> None:
        self.url = url
        self.options: dict[str, Any] = {} if key_prefix is None else {"key_prefix": key_prefix}
        self.token_delay = token_delay
        self.drop_after = drop_after
        self.test_hooks = test_hooks or drop_after is not None
        self.graph: Any = None
        self.events: Any = None
        #: thread id -> id of the run this process is running on it
        self.running: dict[str, str] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        #: test hook: runs whose connection was already cut once
        self.dropped: set[str] = set()
        #: test hook: run id -> when it started and ended, the SSE connections it was served on
        self.traces: OrderedDict[str, dict[str, Any]] = OrderedDict()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            saver = await stack.enter_async_context(graphkeep.aconnect(self.url, **self.options))
            self.events = await stack.enter_async_context(
                graphkeep.aconnect_events(self.url, **self.options)
            )
            self.graph = build_graph(saver, token_delay=self.token_delay)
            log.info("resumable chat on %s", mask_url(self.url))
            try:
                yield
            finally:  # runs still going end as "error" in their logs, not silently
                for task in list(self.tasks):
                    task.cancel()
                await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- routes ----------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "backend": mask_url(self.url).split("://", 1)[0]})

    async def start_run(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body must be JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        thread_id = body.get("thread_id")
        if not isinstance(thread_id, str) or not 0 < len(thread_id) <= MAX_THREAD_ID_CHARS:
            return _error(400, f"thread_id must be a string of 1 to {MAX_THREAD_ID_CHARS} chars")
        has_message, has_resume = "message" in body, "resume" in body
        if has_message == has_resume:
            return _error(400, "send exactly one of message or resume")
        if thread_id in self.running:
            return _error(409, f"thread {thread_id!r} is running {self.running[thread_id]}")
        config = {"configurable": {"thread_id": thread_id}}
        try:
            state = await self.graph.aget_state(config)
        except GraphkeepError as exc:
            return _error(400, str(exc))
        inputs: Any
        if has_message:
            message = body["message"]
            if not isinstance(message, str) or not message.strip():
                return _error(400, "message must be a non-empty string")
            if len(message) > MAX_MESSAGE_CHARS:
                return _error(400, f"message is longer than {MAX_MESSAGE_CHARS} characters")
            if state.interrupts:
                return _error(409, "the thread waits for an approval: resume it first")
            inputs = {"messages": [{"role": "user", "content": message}]}
        else:
            if not isinstance(body["resume"], bool):
                return _error(400, "resume must be true or false")
            if not state.interrupts:
                return _error(409, "the thread has no pending approval")
            inputs = Command(resume=body["resume"])
        run_id = uuid.uuid4().hex
        # the run exists in the log before its first chunk, so the page can follow it at once
        await self.events.heartbeat(run_id)
        self.running[thread_id] = run_id
        task = asyncio.create_task(self._run(thread_id, run_id, inputs, config))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return JSONResponse({"run_id": run_id, "thread_id": thread_id}, status_code=202)

    async def _run(self, thread_id: str, run_id: str, inputs: Any, config: Any) -> None:
        trace = self._trace(run_id)
        trace["started"] = time.time()
        try:
            async for _chunk in stream_run(
                self.graph, inputs, config, self.events, run_id=run_id, stream_mode=STREAM_MODE
            ):
                pass  # the log has it; readers get it from there
        except Exception:
            log.exception("run %s on thread %s failed", run_id, thread_id)
        finally:
            trace["ended"] = time.time()
            if self.running.get(thread_id) == run_id:
                del self.running[thread_id]

    async def thread_state(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        try:
            state = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        except GraphkeepError as exc:
            return _error(400, str(exc))
        pending = [{"id": i.id, "value": i.value} for i in state.interrupts]
        return JSONResponse(
            {
                "thread_id": thread_id,
                "messages": [_message_json(m) for m in state.values.get("messages", [])],
                "interrupt": pending[0] if pending else None,
                "running": self.running.get(thread_id),
            }
        )

    async def run_events(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        # a reconnecting EventSource sends Last-Event-ID; a page that starts over uses ?after=
        last_event_id = request.headers.get("last-event-id") or None
        after = last_event_id or request.query_params.get("after") or None
        try:
            state = await self.events.state(run_id)
            if state is None:
                return _error(404, f"unknown run {run_id!r}")
            # a closed run is read to its end; following it would wait for nothing after close
            events = self.events.read(run_id, after=after, follow=state.closed is None)
        except InvalidInput as exc:
            return _error(400, str(exc))
        connection = self._record(run_id, last_event_id, after)
        stream = _Prefetch(events)
        if state.closed is not None and await stream.empty():
            await stream.aclose()
            # nothing after the client's last event: 204 tells EventSource not to reconnect
            return Response(status_code=204)
        return StreamingResponse(
            self._serve(run_id, stream, connection),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _serve(
        self, run_id: str, stream: _Prefetch, connection: dict[str, Any]
    ) -> AsyncIterator[str]:
        yield f"retry: {RETRY_MS}\n\n"
        served = 0
        try:
            while True:
                try:
                    item = await stream.next(KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if item is None:
                    return
                event_id, event = item
                yield _sse(event_id, page_event(event))
                served += 1
                connection["served"] = served
                connection["last_event_id_sent"] = event_id
                connection["last_sent"] = time.time()
                if (
                    self.drop_after is not None
                    and served >= self.drop_after
                    and run_id not in self.dropped
                ):
                    self.dropped.add(run_id)  # test hook: simulate a dropped connection
                    connection["dropped"] = True
                    return
        except (UnknownRun, RunStale, EventsTrimmed) as exc:
            yield _sse(None, {"type": "error", "message": str(exc)})
        finally:
            await stream.aclose()

    def _trace(self, run_id: str) -> dict[str, Any]:
        """Test hook: what happened to a run (a throwaway dict unless hooks are on)."""
        if not self.test_hooks:
            return {"connections": []}
        if run_id not in self.traces:
            self.traces[run_id] = {"started": None, "ended": None, "connections": []}
            while len(self.traces) > MAX_TRACES:
                self.traces.popitem(last=False)
        return self.traces[run_id]

    def _record(self, run_id: str, last_event_id: str | None, after: str | None) -> dict[str, Any]:
        connection: dict[str, Any] = {
            "opened": time.time(),
            "last_event_id": last_event_id,
            "after": after,
            "served": 0,
            "last_event_id_sent": None,
            "last_sent": None,
            "dropped": False,
        }
        self._trace(run_id)["connections"].append(connection)
        return connection

    async def test_run(self, request: Request) -> Response:
        """Test hook: when the run started and ended, its SSE connections oldest first."""
        trace = self.traces.get(request.path_params["run_id"])
        return JSONResponse(trace) if trace else _error(404, "no such run traced")


class _Prefetch:
    """Pulls an async iterator in its own task, so the reader can wait with a timeout (for
    keep-alives) without cancelling the read, and can peek whether there is anything."""

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
            close: Callable[[], Awaitable[None]] | None = getattr(iterator, "aclose", None)
            if close is not None:
                await close()

    async def _get(self, timeout: float | None) -> tuple[str, Any]:
        if self.head is not None:
            head, self.head = self.head, None
            return head
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def empty(self) -> bool:
        self.head = await self._get(None)
        return self.head[0] == "end"

    async def next(self, timeout: float) -> Any:
        """The next item; None at the end; raises what the read raised, or asyncio.TimeoutError."""
        kind, value = await self._get(timeout)
        if kind == "error":
            raise value
        return value if kind == "item" else None

    async def aclose(self) -> None:
        # cancel until the task ends: on Python < 3.12 asyncio.wait_for (redis-py sends each
        # command through it) drops a cancellation that lands just as the write it awaits
        # completes, and the read would go on with nobody listening
        while not self.task.done():
            self.task.cancel()
            await asyncio.wait([self.task], timeout=0.1)
        await asyncio.gather(self.task, return_exceptions=True)


def create_app(
    url: str | None = None,
    *,
    key_prefix: str | None = None,
    token_delay: float | None = None,
    drop_after: int | None = None,
    test_hooks: bool = False,
) -> Starlette:
    """The ASGI app; unset arguments come from the environment (see the module docstring)."""
    env = os.environ
    drop = env.get("RESUMABLE_CHAT_TEST_DROP_AFTER")
    chat = Chat(
        url or env.get("GRAPHKEEP_URL") or "redis://localhost:6379/0",
        key_prefix=key_prefix or env.get("GRAPHKEEP_KEY_PREFIX") or None,
        token_delay=(
            token_delay
            if token_delay is not None
            else float(env.get("RESUMABLE_CHAT_TOKEN_DELAY", "0.025"))
        ),
        drop_after=drop_after if drop_after is not None else (int(drop) if drop else None),
        test_hooks=test_hooks or env.get("RESUMABLE_CHAT_TEST_HOOKS") == "1",
    )
    routes = [
        Route("/", chat.index),
        Route("/healthz", chat.healthz),
        Route("/runs", chat.start_run, methods=["POST"]),
        Route("/runs/{run_id}/events", chat.run_events),
        Route("/threads/{thread_id}/state", chat.thread_state),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    if chat.test_hooks:
        routes.append(Route("/_test/runs/{run_id}", chat.test_run))
    app = Starlette(routes=routes, lifespan=chat.lifespan)
    app.state.chat = chat
    return app


app = create_app()
