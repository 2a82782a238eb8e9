"""The store's TTL sweepers: a sweep run every interval until stopped, in a daemon thread
(:class:`ThreadSweeper`) or an asyncio task (:class:`TaskSweeper`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable

from graphkeep.port.loop import cancel_until_done


class ThreadSweeper:
    """Calls ``sweep`` every ``interval`` seconds in a daemon thread until :meth:`stop`;
    a sweep that fails is tried again at the next interval. ``future`` is done once the
    thread has ended."""

    def __init__(self, sweep: Callable[[], object], interval: float) -> None:
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop = threading.Event()

        def loop() -> None:
            try:
                while not self._stop.wait(interval):
                    try:
                        sweep()
                    except Exception:  # noqa: BLE001 - a sweep retries next interval
                        pass
                self.future.set_result(None)
            except BaseException as exc:  # pragma: no cover
                self.future.set_exception(exc)

        threading.Thread(target=loop, name="graphkeep-ttl-sweeper", daemon=True).start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the thread to end; True when it ended within ``timeout`` seconds."""
        self._stop.set()
        try:
            self.future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return False
        return True


class TaskSweeper:
    """Awaits ``sweep`` every ``interval`` seconds in a task of the running loop until
    :meth:`stop`; a sweep that fails is tried again at the next interval."""

    def __init__(self, sweep: Callable[[], Awaitable[object]], interval: float) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await sweep()
                except Exception:  # noqa: BLE001 - a sweep retries next interval
                    pass

        self.task: asyncio.Task[None] = asyncio.create_task(loop())

    async def stop(self, timeout: float | None = None) -> bool:
        """Cancel the task (until it ends); True when it ended within ``timeout`` seconds."""
        return await cancel_until_done([self.task], timeout)
