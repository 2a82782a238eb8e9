"""The hot layer's shells: :class:`HotLayer` over a sync durable saver, :class:`AsyncHotLayer`
over an async one, and :func:`layer_class`, which trims either to the durable saver's methods."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from graphkeep.checkpoint.hot.layer import HotLayerBase
from graphkeep.checkpoint.hot.port import HotPort, Probe, Prober, ToHot
from graphkeep.checkpoint.ids import normalize_thread_id
from graphkeep.port import Op
from graphkeep.port.loop import aiter_of, on_loop, running_loop
from graphkeep.port.ops import adrive, drive


class HotLayer(HotLayerBase):
    """The hot layer over a sync durable saver, on a blocking Redis client (``execute``)."""

    def __init__(
        self,
        durable: BaseCheckpointSaver[Any],
        port: HotPort,
        prober: Prober,
        execute: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        super().__init__(durable, port, prober, **options)
        self._execute = execute

    def _route(self, request: Any) -> Any:
        if isinstance(request, ToHot):
            return self._execute(request.request)
        if isinstance(request, Probe):
            return self.prober.keys(
                request.thread_id, request.ns, request.checkpoint_id, request.newer
            )
        found = getattr(self.durable, request.method)(*request.args, **dict(request.kwargs))
        return list(found) if request.method == "list" else found

    def _run(self, op: Op[Any]) -> Any:
        return drive(op, self._route)

    async def _arun(self, op: Op[Any]) -> Any:
        return await asyncio.to_thread(drive, op, self._route)

    def setup(self) -> None:
        """The durable saver's ``setup`` (when it has one), then the Redis scripts."""
        setup = getattr(self.durable, "setup", None)
        if callable(setup):
            setup()
        self._run(self._hot(self.port.setup()))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._read(config))  # type: ignore[no-any-return]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    def delete_thread(self, thread_id: str) -> None:
        self.durable.delete_thread(thread_id)
        self._run(self._evict(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    def footprint(self, thread_id: Any) -> int:
        """Bytes Redis holds for the thread's copies (0 when none, or Redis is down)."""
        op = self._hot(self.port.footprint(normalize_thread_id(thread_id)))
        return int(self._run(op) or 0)

    def evict(self, thread_id: Any) -> None:
        """Drop the thread's copies from Redis (the durable store keeps everything)."""
        self._run(self._evict(thread_id))

    def shared_stats(self) -> dict[str, int]:
        """Reads by outcome of every process sharing this Redis and prefix (this one's
        counts of the last few seconds not yet in them); empty when Redis is down."""
        return dict(self._run(self._hot(self.port.stats())) or {})

    def close(self) -> None:
        """Close the Redis client the layer made (never the durable saver's)."""
        if self._owned is not None:
            self._owned()
            self._owned = None

    def __enter__(self) -> HotLayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncHotLayer(HotLayerBase):
    """The hot layer over an async durable saver, on an asyncio Redis client; sync calls
    from other threads hop onto the loop it was made on (as graphkeep's async savers do)."""

    def __init__(
        self,
        durable: BaseCheckpointSaver[Any],
        port: HotPort,
        prober: Prober,
        aexecute: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        #: sorts an error of the first request (:meth:`acheck`): raises when Redis refuses
        #: the layer's commands, returns when it is only unreachable
        self._checked: Callable[[BaseException, str], None] | None = options.pop("checked", None)
        super().__init__(durable, port, prober, **options)
        self._aexecute = aexecute
        self.loop = running_loop()

    async def acheck(self) -> None:
        """Load the layer's scripts: an error when Redis refuses them, a warning (and reads
        from the durable store) when it cannot be reached now."""
        try:
            await self._aexecute(next(self.port.setup()))
        except Exception as exc:
            if self._checked is None:
                raise
            self._checked(exc, self.where)

    async def _aroute(self, request: Any) -> Any:
        if isinstance(request, ToHot):
            return await self._aexecute(request.request)
        if isinstance(request, Probe):
            return await self.prober.akeys(
                request.thread_id, request.ns, request.checkpoint_id, request.newer
            )
        method = getattr(self.durable, "a" + request.method)
        if request.method == "list":
            return [item async for item in method(*request.args, **dict(request.kwargs))]
        return await method(*request.args, **dict(request.kwargs))

    async def _arun(self, op: Op[Any]) -> Any:
        return await adrive(op, self._aroute)

    def _run(self, op: Op[Any]) -> Any:
        return self._on_loop(self._arun(op))

    def _on_loop(self, coro: Any) -> Any:
        return on_loop(self.loop, coro, "hot layer", "the async methods (ainvoke, aget_state…)")

    async def asetup(self) -> None:
        setup = getattr(self.durable, "asetup", None) or getattr(self.durable, "setup", None)
        if callable(setup):
            result = setup()
            if asyncio.iscoroutine(result):
                await result
        await self._arun(self._hot(self.port.setup()))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._read(config))  # type: ignore[no-any-return]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._on_loop(self.aget_tuple(config))  # type: ignore[no-any-return]

    async def aget_iter(self, config: RunnableConfig) -> AsyncIterator[CheckpointTuple]:
        """LangGraph Agent Server's read of a thread's state, through the layer."""
        return aiter_of(await self.aget_tuple(config))

    async def adelete_thread(self, thread_id: str) -> None:
        await self.durable.adelete_thread(thread_id)
        await self._arun(self._evict(thread_id))

    def delete_thread(self, thread_id: str) -> None:
        self._on_loop(self.adelete_thread(thread_id))

    async def aevict(self, thread_id: Any) -> None:
        """Drop the thread's copies from Redis (the durable store keeps everything)."""
        await self._arun(self._evict(thread_id))

    async def afootprint(self, thread_id: Any) -> int:
        """Bytes Redis holds for the thread's copies (0 when none, or Redis is down)."""
        op = self._hot(self.port.footprint(normalize_thread_id(thread_id)))
        return int(await self._arun(op) or 0)

    async def aclose(self) -> None:
        """Close the Redis client the layer made (never the durable saver's)."""
        if self._owned is not None:
            closing = self._owned()
            self._owned = None
            if asyncio.iscoroutine(closing):
                await closing

    async def __aenter__(self) -> AsyncHotLayer:
        try:
            await self.acheck()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: methods a saver may leave to ``BaseCheckpointSaver`` (which raises, or composes them from
#: the others); the layer then leaves them too, so it declares exactly the durable saver's
#: capabilities (LangGraph's conformance suite detects them by override)
OPTIONAL = (
    "delete_thread",
    "adelete_thread",
    "delete_for_runs",
    "adelete_for_runs",
    "copy_thread",
    "acopy_thread",
    "prune",
    "aprune",
    "get_delta_channel_history",
    "aget_delta_channel_history",
)
_CLASSES: dict[tuple[type, type], type] = {}


def layer_class(shell: type[HotLayerBase], durable: BaseCheckpointSaver[Any]) -> type[Any]:
    """``shell`` (:class:`HotLayer` or :class:`AsyncHotLayer`) without the methods of
    :data:`OPTIONAL` that ``durable``'s class does not have itself."""
    kind = type(durable)
    made = _CLASSES.get((shell, kind))
    if made is None:
        missing = {
            name: getattr(BaseCheckpointSaver, name)
            for name in OPTIONAL
            if getattr(kind, name, None) is getattr(BaseCheckpointSaver, name)
        }
        made = type(shell.__name__, (shell,), {**missing, "__module__": shell.__module__})
        _CLASSES[(shell, kind)] = made
    return made
