"""Resumable chat: a support bot whose tokens stream to a page over AG-UI, surviving drops.

Run it (any graphkeep backend URL)::

    pip install "graphkeep[web,agui,redis]"        # or [web,agui,mongodb], [web,agui,dynamodb]
    GRAPHKEEP_URL=redis://localhost:6379/0 uvicorn examples.resumable_chat.app:app

Routes:

- ``GET /``: the page (``static/index.html``, vanilla JS: ``fetch`` with a streaming body
  reader and a small Server-Sent Events parser);
- ``POST /agent``: the bot (:mod:`examples.resumable_chat.bot`) as an AG-UI endpoint
  (:func:`graphkeep.agui.agui_routes` over :class:`graphkeep.agui.AGUIRuns`). A
  ``RunAgentInput`` with a new ``runId`` (the customer's message, or ``resume`` answering the
  refund approval) starts the run in a worker and streams its AG-UI events as SSE, each with
  ``id:`` = its event log id; the run goes on when the connection drops. The page re-POSTs the
  same ``RunAgentInput`` with ``Last-Event-ID`` to get every later event exactly once;
- ``POST /agent/connect``: what the page sends on load: the thread's ``MESSAGES_SNAPSHOT``
  and ``STATE_SNAPSHOT`` from its checkpoint, then its live run joined without a gap or a
  doubled token, or ``RUN_FINISHED`` (with the interrupt outcome while the refund waits for
  approval);
- ``GET /healthz``; ``/static/…``.

Environment: ``GRAPHKEEP_URL`` (default ``redis://localhost:6379/0``), ``GRAPHKEEP_KEY_PREFIX``
(optional, for the saver and the event log), ``RESUMABLE_CHAT_TOKEN_DELAY`` (seconds between
streamed chunks, default 0.025). **Test hooks** (never set them in production):
``RESUMABLE_CHAT_TEST_DROP_AFTER=N`` makes the app cut the connection of each run's event
stream once, after N events (it closes the connection without ending the response, as a
network drop does); with it (or with ``RESUMABLE_CHAT_TEST_HOOKS=1``) ``GET /_test/runs/{run_id}``
lists the SSE connections the run was served on (``POST /agent`` or ``/agent/connect``, the
``Last-Event-ID`` each came with, how many events it sent, the ids it sent, when) and the
run's state in the event log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Send

import graphkeep
from graphkeep.agui import AGUIRuns, agui_routes
from graphkeep.errors import mask_url

from .bot import build_graph

__all__ = ["AGENT_PATH", "app", "create_app"]

log = logging.getLogger("resumable_chat")

STATIC = Path(__file__).parent / "static"
#: where the AG-UI endpoint is mounted (the page posts there)
AGENT_PATH = "/agent"
#: test hook: how many runs' traces are kept
MAX_TRACES = 1000


class Chat:
    """What the app holds while it serves: the saver, the event log, the AG-UI runs."""

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
        self.agui: AGUIRuns | None = None
        #: test hook: runs whose connection was already cut once
        self.dropped: set[str] = set()
        #: test hook: run id -> the SSE connections it was served on
        self.traces: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with (
            graphkeep.aconnect(self.url, **self.options) as saver,
            graphkeep.aconnect_events(self.url, **self.options) as events,
        ):
            graph = build_graph(saver, token_delay=self.token_delay)
            self.agui = AGUIRuns(graph, events, name="support")
            log.info("resumable chat on %s", mask_url(self.url))
            try:
                yield
            finally:  # runs still going end with RUN_ERROR in their logs, not silently
                await self.agui.aclose()
                self.agui = None

    def runs(self) -> AGUIRuns:
        if self.agui is None:
            raise RuntimeError("the app is not started (its lifespan opens the saver and log)")
        return self.agui

    # -- routes ----------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "backend": mask_url(self.url).split("://", 1)[0]})

    # -- test hooks ------------------------------------------------------------------

    def hooked(
        self, endpoint: Callable[[Request], Awaitable[Response]], path: str
    ) -> Callable[[Request], Awaitable[Response]]:
        """Test hook: the AG-UI endpoint ``endpoint`` with its SSE responses watched: traced
        under the run their ``RUN_STARTED`` names, and cut once per run after ``drop_after``
        events."""

        async def watched(request: Request) -> Response:
            connection: dict[str, Any] = {
                "path": path,
                "opened": time.time(),
                "last_event_id": request.headers.get("last-event-id") or None,
                "served": 0,
                "last_event_id_sent": None,
                "ids_sent": [],
                "last_sent": None,
                "dropped": False,
            }
            run: list[str] = []

            def sent(chunk: str) -> bool:
                for event_id, data in _sse_events(chunk):
                    if not run and data.get("type") == "RUN_STARTED":
                        run.append(str(data.get("runId")))
                        self._trace(run[0]).append(connection)
                    connection["served"] += 1
                    connection["last_sent"] = time.time()
                    if event_id is not None:
                        connection["last_event_id_sent"] = event_id
                        connection["ids_sent"].append(event_id)
                if (
                    self.drop_after is None
                    or not run
                    or connection["served"] < self.drop_after
                    or run[0] in self.dropped
                ):
                    return False
                self.dropped.add(run[0])
                connection["dropped"] = True
                return True

            response = await endpoint(request)
            if not isinstance(response, StreamingResponse):
                return response
            return _CutStream(response, sent)

        return watched

    def _trace(self, run_id: str) -> list[dict[str, Any]]:
        if run_id not in self.traces:
            self.traces[run_id] = []
            while len(self.traces) > MAX_TRACES:
                self.traces.popitem(last=False)
        return self.traces[run_id]

    async def test_run(self, request: Request) -> Response:
        """Test hook: the run's SSE connections oldest first, and its state in the log."""
        run_id = request.path_params["run_id"]
        connections = self.traces.get(run_id)
        state = await self.runs().events.state(run_id)
        if connections is None and state is None:
            return JSONResponse({"error": "no such run traced"}, status_code=404)
        return JSONResponse(
            {
                "connections": connections or [],
                "log": None
                if state is None
                else {"closed": state.closed, "trimmed_through": state.trimmed_through},
            }
        )


class _CutStream(StreamingResponse):
    """Test hook: ``response`` with each chunk handed to ``sent`` once sent; when ``sent``
    says so, the response stops there without being ended (uvicorn then closes the
    connection: the browser sees a network drop, not the end of the stream)."""

    def __init__(self, response: StreamingResponse, sent: Callable[[str], bool]) -> None:
        self.inner = response.body_iterator
        self.sent = sent
        self.cut = False
        super().__init__(
            self._chunks(), status_code=response.status_code, headers=dict(response.headers)
        )

    async def _chunks(self) -> AsyncIterator[str | bytes | memoryview]:
        try:
            async for chunk in self.inner:
                yield chunk
                text = chunk if isinstance(chunk, str) else bytes(chunk).decode()
                if self.sent(text):
                    self.cut = True
                    return
        finally:
            close = getattr(self.inner, "aclose", None)
            if close is not None:
                await close()

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            if not isinstance(chunk, bytes | memoryview):
                chunk = chunk.encode(self.charset)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if not self.cut:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _sse_events(text: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The ``(id, data)`` of each SSE event in ``text`` (the endpoint sends whole events)."""
    found = []
    for block in text.split("\n\n"):
        event_id, data = None, []
        for line in block.split("\n"):
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            found.append((event_id, json.loads("\n".join(data))))
    return found


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
    agent: list[BaseRoute] = list(agui_routes(chat.runs, AGENT_PATH))
    if chat.test_hooks:
        agent = [
            Route(r.path, chat.hooked(r.endpoint, r.path), methods=["POST"])
            if isinstance(r, Route) and r.methods and "POST" in r.methods
            else r
            for r in agent
        ]
    routes: list[BaseRoute] = [
        Route("/", chat.index),
        Route("/healthz", chat.healthz),
        *agent,
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    if chat.test_hooks:
        routes.append(Route("/_test/runs/{run_id}", chat.test_run))
    app = Starlette(routes=routes, lifespan=chat.lifespan)
    app.state.chat = chat
    return app


app = create_app()
