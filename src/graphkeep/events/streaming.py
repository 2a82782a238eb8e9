"""Run a graph and keep its stream: :func:`stream_run` appends every chunk to an event log.

The worker runs::

    async with graphkeep.aconnect_events(url) as events:
        async for chunk in stream_run(graph, inputs, config, events, run_id=run_id,
                                      stream_mode=["messages", "updates"]):
            ...                                        # the local caller sees every chunk

while any number of readers follow ``events.read(run_id, after=last_id)`` elsewhere and
resume after a dropped connection with no gap and no duplicate.

Each chunk becomes one JSON event ``{"mode": ..., "ns": [...], "data": ...}`` (``ns`` only
with ``subgraphs=True``; messages, dataclasses such as ``Interrupt`` and pydantic models
become plain JSON, anything else its ``repr``). Appends are batched: chunks that arrive
within ``flush_ms`` of each other go in one ``append_many`` (a token stream costs a request
per window, not per token) and no chunk waits longer than ``flush_ms`` plus one request to be
readable. While the graph is busy without output the run sends a heartbeat every
``heartbeat`` seconds (default a third of the log's ``stale_after``), so followers can tell a
slow run from a dead worker. The run is closed with its outcome: ``"interrupted"`` when the
graph stopped at an ``interrupt()``, ``"error"`` (with the error's text) when it raised — the
exception is re-raised — or when the caller stopped iterating early, else ``"success"``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import enum
import inspect
import logging
import math
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import date, datetime
from typing import Any

from graphkeep.errors import InvalidInput
from graphkeep.events.log import DEFAULT_STALE_AFTER, PAGE
from graphkeep.events.port import Encoded

__all__ = ["EventWriter", "RunStream", "call_log", "jsonable", "stream_run"]

DEFAULT_FLUSH_MS = 20
log = logging.getLogger("graphkeep.events.streaming")


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, numbers, bools, None)."""
    if depth > 64:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, enum.Enum):
        return jsonable(value.value, depth + 1)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models: LangChain messages
        try:
            return jsonable(dump(), depth + 1)
        except Exception:  # noqa: BLE001 - fall back to repr
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
    return repr(value)


def _event(chunk: Any, stream_mode: Any, subgraphs: bool) -> tuple[dict[str, Any], bool]:
    """The event for one ``astream`` chunk, and whether it reports an interrupt."""
    ns: Any = None
    if subgraphs and isinstance(chunk, tuple) and len(chunk) >= 2:
        ns, chunk = chunk[0], chunk[1:] if len(chunk) > 2 else chunk[1]
    if isinstance(stream_mode, str):
        mode, data = stream_mode, chunk
    elif isinstance(chunk, tuple) and len(chunk) == 2:
        mode, data = chunk
    else:
        mode, data = "unknown", chunk
    event: dict[str, Any] = {"mode": mode}
    if subgraphs:
        event["ns"] = list(ns or ())
    event["data"] = jsonable(data)
    interrupted = isinstance(data, Mapping) and "__interrupt__" in data
    return event, interrupted


async def call_log(log: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call a sync or an async event log's method from async code."""
    method = getattr(log, name)
    if inspect.iscoroutinefunction(method):
        return await method(*args, **kwargs)
    return await asyncio.to_thread(lambda: method(*args, **kwargs))


class EventWriter:
    """Batches a run's events into the log ``log`` (sync or async): one ``append_many`` per
    ``flush_ms`` window, in order, a heartbeat while quiet; ``finish`` flushes and closes the
    run. :func:`stream_run` and the AG-UI endpoint (:mod:`graphkeep.agui`) write through it."""

    def __init__(self, log: Any, run_id: str, flush_ms: float, heartbeat: float) -> None:
        self.log = log
        self.run_id = run_id
        self.delay = flush_ms / 1000
        self.heartbeat = heartbeat
        self.buffer: list[dict[str, Any] | Encoded] = []
        self.ready = asyncio.Event()
        self.lock = asyncio.Lock()
        self.failed: BaseException | None = None
        self.stopping = False
        self.stopped = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.last_write = asyncio.get_running_loop().time()

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._pump(), name=f"graphkeep-events-{self.run_id}"),
            asyncio.create_task(self._beat(), name=f"graphkeep-heartbeat-{self.run_id}"),
        ]

    def add(self, event: dict[str, Any] | Encoded) -> None:
        if self.failed is not None:
            raise self.failed
        self.buffer.append(event)
        self.ready.set()

    async def flush(self) -> None:
        """Append what the buffer holds now; events added while it appends wait for the next
        window (draining them too would append back to back, a request per round trip)."""
        async with self.lock:
            pending, self.buffer = self.buffer, []
            self.ready.clear()
            for first in range(0, len(pending), PAGE):
                batch = pending[first : first + PAGE]
                await call_log(self.log, "append_many", self.run_id, batch)
                self.last_write = asyncio.get_running_loop().time()

    async def _pump(self) -> None:
        """Flush each window until ``finish`` says stop (never cancelled mid-append: an
        append running in a worker thread would go on and race the final flush)."""
        try:
            while not self.stopping:
                await self.ready.wait()
                if len(self.buffer) < PAGE and not self.stopping:
                    await asyncio.sleep(self.delay)  # let the window fill
                await self.flush()
        except Exception as exc:  # reported by the next add() or by finish()
            self.failed = exc

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping:
            try:
                await asyncio.wait_for(self.stopped.wait(), self.heartbeat / 2)
                return
            except asyncio.TimeoutError:
                pass
            if loop.time() - self.last_write >= self.heartbeat:
                try:
                    await call_log(self.log, "heartbeat", self.run_id)
                except Exception:  # noqa: BLE001 - the next append reports a dead store
                    log.warning("heartbeat of run %r failed", self.run_id, exc_info=True)
                self.last_write = loop.time()

    async def finish(self, status: str, error: str | None = None) -> None:
        # no task is cancelled: a cancelled append would go on in its worker thread (or be
        # half-sent), so both tasks are told to stop and finish what they are doing
        self.stopping = True
        self.ready.set()
        self.stopped.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.failed is not None:
            raise self.failed
        await self.flush()
        await call_log(self.log, "close", self.run_id, status, error=error)


class RunStream:
    """The async iterator :func:`stream_run` returns; ``run_id`` names the run's events."""

    def __init__(
        self,
        graph: Any,
        input: Any,
        config: Any,
        events: Any,
        run_id: str,
        stream_mode: Any,
        subgraphs: bool,
        flush_ms: float,
        heartbeat: float,
        kwargs: dict[str, Any],
    ) -> None:
        self.graph, self.input, self.config, self.events = graph, input, config, events
        self.run_id = run_id
        self.stream_mode, self.subgraphs = stream_mode, subgraphs
        self.flush_ms, self.heartbeat, self.kwargs = flush_ms, heartbeat, kwargs
        self._iterator: AsyncIterator[Any] | None = None

    def __aiter__(self) -> AsyncIterator[Any]:
        if self._iterator is None:
            self._iterator = self._run()
        return self._iterator

    async def _run(self) -> AsyncIterator[Any]:
        writer = EventWriter(self.events, self.run_id, self.flush_ms, self.heartbeat)
        writer.start()
        interrupted = False
        outcome: tuple[str, str | None] = ("error", "stream_run was closed before the run ended")
        try:
            async for chunk in self.graph.astream(
                self.input,
                self.config,
                stream_mode=self.stream_mode,
                subgraphs=self.subgraphs,
                **self.kwargs,
            ):
                event, interrupt = _event(chunk, self.stream_mode, self.subgraphs)
                interrupted = interrupted or interrupt
                writer.add(event)
                yield chunk
            interrupted = interrupted or await self._pending_interrupts()
            outcome = ("interrupted" if interrupted else "success", None)
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                outcome = ("error", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            await writer.finish(*outcome)

    async def _pending_interrupts(self) -> bool:
        try:
            state = await self.graph.aget_state(self.config)
        except Exception:  # noqa: BLE001 - no checkpointer: the chunks told us already
            return False
        return bool(getattr(state, "interrupts", ()))


def stream_run(
    graph: Any,
    input: Any,
    config: Any,
    events: Any,
    *,
    stream_mode: Any = "updates",
    run_id: str | None = None,
    subgraphs: bool = False,
    flush_ms: float = DEFAULT_FLUSH_MS,
    heartbeat: float | None = None,
    **kwargs: Any,
) -> RunStream:
    """Run ``graph.astream(input, config, stream_mode=...)``, append every chunk to the event
    log ``events`` (sync or async) under ``run_id``, close the run with its outcome, and
    yield the chunks to the caller too.

    ``run_id`` defaults to ``config["run_id"]``, else a new UUID (read it back from the
    returned stream's ``run_id``). Other keyword arguments go to ``astream``.
    """
    if run_id is None:
        run_id = str((config or {}).get("run_id") or uuid.uuid4())
    if not isinstance(run_id, str) or not run_id:
        raise InvalidInput(f"run_id must be a non-empty str, got {run_id!r}")
    if not isinstance(flush_ms, (int, float)) or isinstance(flush_ms, bool) or flush_ms < 0:
        raise InvalidInput(f"flush_ms must be a number >= 0, got {flush_ms!r}")
    if heartbeat is None:
        stale = getattr(events, "stale_after", DEFAULT_STALE_AFTER)
        heartbeat = max(0.05, (stale if math.isfinite(stale) else DEFAULT_STALE_AFTER) / 3)
    return RunStream(
        graph, input, config, events, run_id, stream_mode, subgraphs, flush_ms, heartbeat, kwargs
    )
