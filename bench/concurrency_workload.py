"""The concurrency bench's measurement: N threads at once on one async saver, one event loop.

One process, one asyncio loop. N LangGraph threads each run ``turns`` turns of the W50 graph
(:mod:`.workloads`: a human message in, ``assistant`` and ``tool`` each append a message;
here the nodes are ``async`` functions, so the loop's default thread pool is left to the
savers that use one) with ``ainvoke``, all N started together; a thread's turns run one
after the other. Measured, over the timed turns only (a warm-up turn before, the state check
after are not counted):

- **turns/s**: turns completed / wall time from the start of the first to the end of the
  last; **p50 / p99 turn latency**: of every ``ainvoke`` (nearest rank);
- **requests/turn**: what the contender's counter says (see the suite for how each is
  counted) / turns completed;
- **peak connections**: the most TCP sockets of this process in state ESTABLISHED to the
  server's ports, sampled every :data:`SAMPLE_EVERY` s by a thread that matches the socket
  inodes of ``/proc/self/fd`` with ``/proc/net/tcp`` and ``tcp6``;
- **loop blocking per saver call**: each async saver method (``aget_tuple``, ``aput``,
  ``aput_writes``, ``alist``) is wrapped on the instance so that its coroutine is driven
  step by step (:class:`Steps`): a step runs from the moment the loop resumes the call to
  the moment it suspends again (awaits I/O) or returns, and nothing else runs on the loop
  meanwhile. A call's blocking time is its longest step in CPU time of the loop's thread
  (so the shared machine preempting the process is not counted; the wall-clock max is
  reported beside it) without the garbage collections that ran in it (they stop the whole
  process, whichever code allocated last; counted apart, with their longest pause); the
  table gives the median and the max over calls. Work a saver
  hands to a thread (``run_in_executor``) does not block the loop in a step, but its
  Python code holds the GIL the loop needs: that shows in the **loop lag** instead,
  measured by a task that sleeps 1 ms in a loop and records how late it wakes (p99, max);
- **lease wait** (runs through ``saver.exclusive``): how long each turn's lease acquire took,
  polls for a busy thread included (median, p95, max), when N runs share fewer threads;
- **outcome**: ``ok``, or the threads that failed and the first error (a rival failing under
  concurrency is a result, not a crash of the bench).

:func:`main` is the same measurement in a child process, for rivals that need their own
virtualenv (``python -m bench.concurrency_workload --factory mod:function ...``,
the protocol of :mod:`.worker`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import math
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from bench.probes import trace_lease
from bench.workloads import (
    MESSAGES_PER_TURN,
    ChatState,
    ai_message,
    human_message,
    tool_message,
)

#: the suite's thread counts
THREADS = (1, 10, 100, 500)
#: the async saver methods whose calls are timed
TIMED_METHODS = ("aget_tuple", "aput", "aput_writes")
TIMED_ITERATORS = ("alist",)
#: a saver call may block the loop at most this long at N = 100 (issue 28)
MAX_BLOCKING_MS = 5.0
#: seconds between two connection samples
SAMPLE_EVERY = 1.0
#: the loop-lag probe's sleep
LAG_SLEEP = 0.001
RESULT_MARK = "GRAPHKEEP-BENCH-RESULT "


# --------------------------------------------------------------------------- the graph


def _turn_number(state: Any) -> int:
    return sum(1 for m in state["messages"] if m.type == "human")


async def assistant(state: Any) -> dict[str, list[AnyMessage]]:
    return {"messages": [ai_message(_turn_number(state))]}


async def tool(state: Any) -> dict[str, list[AnyMessage]]:
    return {"messages": [tool_message(_turn_number(state))]}


def build(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """W50's 2-node graph on ``messages`` (``add_messages``), its nodes async."""
    builder = StateGraph(ChatState)
    builder.add_node("assistant", assistant)
    builder.add_node("tool", tool)
    builder.add_edge(START, "assistant")
    builder.add_edge("assistant", "tool")
    return builder.compile(checkpointer=checkpointer)


# --------------------------------------------------------------------------- results


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by the nearest-rank method; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@dataclass
class ConcurrencyResult:
    """One contender at one N. ``None``: not measured (see ``error``)."""

    backend: str
    saver: str
    threads: int
    turns_per_thread: int
    turns: int = 0
    seconds: float | None = None
    turns_per_second: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    requests_per_turn: float | None = None
    peak_connections: int | None = None
    calls: int = 0
    block_median_ms: float | None = None
    block_max_ms: float | None = None
    #: the saver method of the call that blocked longest
    block_max_method: str = ""
    #: the longest step of any call in wall time (preemption by the machine included)
    block_wall_max_ms: float | None = None
    #: saver calls whose longest step exceeded MAX_BLOCKING_MS
    calls_over_limit: int = 0
    #: garbage collections during the run (generation 2 of them) and the longest, CPU ms
    gc_collections: int = 0
    gc_full_collections: int = 0
    gc_max_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    failed_threads: int = 0
    error: str | None = None
    #: every run went through ``saver.exclusive`` (the thread's fenced lease held per turn)
    exclusive: bool = False
    #: LangGraph threads the ``threads`` concurrent runs shared (None: one thread per run)
    lease_threads: int | None = None
    #: how long an exclusive turn waited for its thread's lease (acquire, polls included)
    lease_wait_p50_ms: float | None = None
    lease_wait_p95_ms: float | None = None
    lease_wait_max_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.failed_threads == 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConcurrencyResult:
        return cls(**data)


def describe_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}" if text else type(exc).__name__


# --------------------------------------------------------------------------- probes


class Collections:
    """CPU time the loop's thread spends in the garbage collector (``gc.callbacks``).

    A collection runs in whatever code allocates when a threshold is crossed, so it
    lands in some saver call's step: a generation-2 pass over a process holding LangGraph,
    botocore and pydantic takes ~100 ms here. :class:`Steps` takes it out of the call's
    blocking time; the table reports the collections beside it.
    """

    def __init__(self) -> None:
        #: CPU seconds in collections so far (read by Steps around each step)
        self.seconds = 0.0
        #: (CPU seconds, generation) of each collection while installed
        self.pauses: list[tuple[float, int]] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        took = time.thread_time() - self._started
        self.seconds += took
        self.pauses.append((took, int(info.get("generation", 0))))

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


#: the collector clock the steps read (one loop per process measures at a time)
COLLECTIONS = Collections()


class Steps:
    """Await a coroutine step by step, reporting its longest step when it ends.

    A step is one ``send`` / ``throw`` into the coroutine: the time it holds the loop
    before it suspends on I/O or returns. What it yields (asyncio futures) goes up to the
    task unchanged, and what the task sends or throws goes back down. Reported: the longest
    step in CPU time of the loop's thread (``time.thread_time``: the machine preempting the
    process is not the call's doing) and in wall time, both in seconds; the CPU time
    leaves out garbage collections that ran during the step (:class:`Collections`).
    """

    __slots__ = ("_coro", "_done")

    def __init__(self, coro: Any, done: Callable[[float, float], None]) -> None:
        self._coro = coro
        self._done = done

    def __await__(self) -> Generator[Any, Any, Any]:
        cpu = wall = 0.0
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                gc_started = COLLECTIONS.seconds
                cpu_started, wall_started = time.thread_time(), time.perf_counter()
                try:
                    yielded = self._coro.send(value) if error is None else self._coro.throw(error)
                except StopIteration as stop:
                    return stop.value
                finally:
                    wall = max(wall, time.perf_counter() - wall_started)
                    collected = COLLECTIONS.seconds - gc_started
                    cpu = max(cpu, time.thread_time() - cpu_started - collected)
                error = None
                try:
                    value = yield yielded
                except BaseException as exc:  # noqa: BLE001 - cancellation goes to the call
                    error, value = exc, None
        finally:
            self._done(cpu, wall)


class Blocking:
    """Wraps a saver's async methods on the instance; records each call's longest step."""

    def __init__(self) -> None:
        self.recording = False
        #: (CPU seconds, wall seconds, method) of each call's longest step while recording
        self.calls: list[tuple[float, float, str]] = []

    def _record(self, method: str) -> Callable[[float, float], None]:
        def done(cpu: float, wall: float) -> None:
            if self.recording:
                self.calls.append((cpu, wall, method))

        return done

    def trace(self, saver: Any) -> Any:
        for name in TIMED_METHODS:
            original = getattr(saver, name, None)
            if original is not None:
                setattr(saver, name, self._wrap(name, original))
        for name in TIMED_ITERATORS:
            original = getattr(saver, name, None)
            if original is not None:
                setattr(saver, name, self._wrap_iterator(name, original))
        return saver

    def _wrap(self, name: str, original: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            return await Steps(original(*args, **kwargs), self._record(name))

        return timed

    def _wrap_iterator(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            longest = [0.0, 0.0]

            def step(cpu: float, wall: float) -> None:
                longest[:] = [max(longest[0], cpu), max(longest[1], wall)]

            iterator = original(*args, **kwargs).__aiter__()
            try:
                while True:
                    try:
                        item = await Steps(iterator.__anext__(), step)
                    except StopAsyncIteration:
                        return
                    yield item
            finally:
                self._record(name)(*longest)

        return timed


async def loop_lag(samples: list[float], stop: asyncio.Event) -> None:
    """Sleep :data:`LAG_SLEEP` over and over; record how late each wake-up is (seconds)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        started = loop.time()
        await asyncio.sleep(LAG_SLEEP)
        samples.append(max(0.0, loop.time() - started - LAG_SLEEP))


def socket_inodes() -> set[str]:
    """The inodes of this process's open sockets (Linux ``/proc/self/fd``)."""
    inodes: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def established(ports: frozenset[int], ignore: frozenset[str] = frozenset()) -> int:
    """TCP sockets of this process ESTABLISHED to one of ``ports`` (Linux ``/proc``), but
    those whose inode is in ``ignore`` (sockets opened before, by other clients).

    ``/proc/net/tcp`` lists every socket of the network namespace (thousands on a busy
    machine), so its lines are picked with one regular expression rather than split one by
    one: a sample must not hold the GIL long enough to show in the loop lag it measures.
    """
    if not ports:
        return 0
    inodes = socket_inodes() - ignore
    hex_ports = "|".join(f"{port:04X}" for port in sorted(ports))
    # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    line = re.compile(
        rf"^ *\d+: \S+ [0-9A-F]+:(?:{hex_ports}) 01 \S+ \S+ \S+ +\d+ +\d+ (\d+)", re.M
    )
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as table:
                text = table.read()
        except OSError:
            continue
        count += sum(1 for match in line.finditer(text) if match.group(1) in inodes)
    return count


class Connections:
    """Samples :func:`established` in a thread of its own; ``peak`` is the most seen."""

    def __init__(self, ports: frozenset[int]) -> None:
        self.ports = ports
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-connections", daemon=True)

    def sample(self) -> None:
        if not self.ports or not os.path.isdir("/proc/self/fd"):
            return
        seen = established(self.ports)
        self.peak = seen if self.peak is None else max(self.peak, seen)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    def __enter__(self) -> Connections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# --------------------------------------------------------------------------- measuring


@dataclass
class AsyncOpened:
    """An async saver ready for one measurement: how its requests are counted (``None``:
    not counted) and the server ports its connections go to."""

    saver: BaseCheckpointSaver[Any]
    requests: Callable[[], int] | None = None
    ports: frozenset[int] = frozenset()
    #: thread ids the run used, for a contender that cleans up after itself
    threads: list[str] = field(default_factory=list)


async def _warm_up(app: Any, run: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": f"{run}-warm"}}
    await app.ainvoke({"messages": [human_message(1)]}, config)


async def measure_concurrency(
    opened: AsyncOpened,
    *,
    backend: str,
    saver_name: str,
    threads: int,
    turns: int,
    timeout: float = 900.0,
    exclusive: bool = False,
    lease_threads: int | None = None,
) -> ConcurrencyResult:
    """``threads`` threads at once, ``turns`` turns each, on ``opened.saver``.

    ``exclusive``: every turn runs through ``saver.exclusive(graph)`` (a graphkeep saver),
    the wait for each lease recorded; ``lease_threads``: the ``threads`` concurrent runs
    share that many LangGraph threads (run ``i`` on thread ``i % lease_threads``), so runs
    of one thread contend for its lease and take turns.
    """
    result = ConcurrencyResult(backend, saver_name, threads, turns)
    result.exclusive, result.lease_threads = exclusive, lease_threads
    blocking = Blocking()
    graph = build(blocking.trace(opened.saver))
    waits: list[float] = []
    saver: Any = opened.saver
    app = trace_lease(saver, waits=waits).exclusive(graph) if exclusive else graph
    run = f"conc-{uuid.uuid4().hex[:10]}"
    opened.threads.append(f"{run}-warm")
    try:
        await _warm_up(app, run)
    except Exception as exc:  # noqa: BLE001 - the outcome is what the table reports
        result.failed_threads = threads
        result.error = f"warm-up turn: {describe_error(exc)}"
        return result

    latencies: list[float] = []
    shared = lease_threads or threads
    waits.clear()  # the warm-up's

    async def one_thread(i: int) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": f"{run}-{i % shared}"}}
        for turn in range(1, turns + 1):
            started = time.perf_counter()
            await app.ainvoke({"messages": [human_message(turn)]}, config)
            latencies.append(time.perf_counter() - started)

    ids = [f"{run}-{i}" for i in range(shared)]
    opened.threads.extend(ids)
    lags: list[float] = []
    stop = asyncio.Event()
    before = opened.requests() if opened.requests else 0
    COLLECTIONS.pauses.clear()
    with Connections(opened.ports) as connections, COLLECTIONS:
        lag_task = asyncio.create_task(loop_lag(lags, stop))
        blocking.recording = True
        started = time.perf_counter()
        try:
            outcomes = await asyncio.wait_for(
                asyncio.gather(*(one_thread(i) for i in range(threads)), return_exceptions=True),
                timeout,
            )
        except TimeoutError:
            outcomes = [TimeoutError(f"the run took more than {timeout:.0f} s")] * threads
        elapsed = time.perf_counter() - started
        blocking.recording = False
        connections.sample()  # the pools are at their fullest now
        stop.set()
        await lag_task
    after = opened.requests() if opened.requests else 0

    errors = [o for o in outcomes if isinstance(o, BaseException)]
    result.turns = len(latencies)
    result.seconds = elapsed
    if latencies:
        result.turns_per_second = len(latencies) / elapsed
        result.p50_ms = _ms(percentile(latencies, 0.5))
        result.p99_ms = _ms(percentile(latencies, 0.99))
        if opened.requests is not None:
            result.requests_per_turn = (after - before) / len(latencies)
    result.peak_connections = connections.peak
    steps = [cpu for cpu, _, _ in blocking.calls]
    result.calls = len(steps)
    if steps:
        worst = max(blocking.calls)
        result.block_median_ms = _ms(percentile(steps, 0.5))
        result.block_max_ms = _ms(worst[0])
        result.block_max_method = worst[2]
        result.block_wall_max_ms = _ms(max(wall for _, wall, _ in blocking.calls))
        result.calls_over_limit = sum(1 for s in steps if s * 1000 > MAX_BLOCKING_MS)
    if waits:
        result.lease_wait_p50_ms = _ms(percentile(waits, 0.5))
        result.lease_wait_p95_ms = _ms(percentile(waits, 0.95))
        result.lease_wait_max_ms = _ms(max(waits))
    result.lag_p99_ms = _ms(percentile(lags, 0.99))
    result.lag_max_ms = _ms(max(lags)) if lags else None
    pauses = list(COLLECTIONS.pauses)
    result.gc_collections = len(pauses)
    result.gc_full_collections = sum(1 for _, generation in pauses if generation == 2)
    result.gc_max_ms = _ms(max(seconds for seconds, _ in pauses)) if pauses else None
    result.failed_threads = len(errors)
    if errors:
        result.error = describe_error(errors[0])
        return result

    # every thread holds exactly its messages (every turn of each run on it: none lost to
    # a fork), or the numbers mean nothing
    async def check(thread_id: str) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        state = await graph.aget_state(config)
        count = len(state.values.get("messages", []))
        runs = sum(1 for i in range(threads) if f"{run}-{i % shared}" == thread_id)
        if count != MESSAGES_PER_TURN * turns * runs:
            raise AssertionError(
                f"thread {thread_id}: {count} messages after {turns} turns of {runs} run(s),"
                f" expected {MESSAGES_PER_TURN * turns * runs}"
            )

    checked = await _bounded(check, ids)
    wrong = [o for o in checked if isinstance(o, BaseException)]
    if wrong:
        result.failed_threads = len(wrong)
        result.error = f"state check: {describe_error(wrong[0])}"
    return result


async def _bounded(
    call: Callable[[str], Awaitable[None]], items: Sequence[str], at_once: int = 50
) -> list[BaseException | None]:
    """``call`` on every item, at most ``at_once`` at a time; exceptions returned."""
    out: list[BaseException | None] = []
    for start in range(0, len(items), at_once):
        chunk = items[start : start + at_once]
        done = await asyncio.gather(*(call(item) for item in chunk), return_exceptions=True)
        out += [d if isinstance(d, BaseException) else None for d in done]
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


#: opens a contender for one measurement: an async context manager of an AsyncOpened
Opener = Callable[[], AbstractAsyncContextManager[AsyncOpened]]


async def run_contender(
    open_saver: Opener,
    *,
    backend: str,
    saver_name: str,
    threads: int,
    turns: int,
    exclusive: bool = False,
    lease_threads: int | None = None,
) -> ConcurrencyResult:
    """Open, measure, close; a failure to open or close is the result's error."""
    try:
        async with open_saver() as opened:
            return await measure_concurrency(
                opened,
                backend=backend,
                saver_name=saver_name,
                threads=threads,
                turns=turns,
                exclusive=exclusive,
                lease_threads=lease_threads,
            )
    except Exception as exc:  # noqa: BLE001 - reported in the table
        result = ConcurrencyResult(backend, saver_name, threads, turns)
        result.exclusive, result.lease_threads = exclusive, lease_threads
        result.failed_threads = threads
        result.error = describe_error(exc)
        return result


# --------------------------------------------------------------------------- child process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency_workload")
    parser.add_argument("--factory", required=True, help="module:function returning an Opener")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--saver", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--turns", type=int, required=True)
    args = parser.parse_args(argv)
    module_name, _, function = args.factory.partition(":")
    opener: Opener = getattr(importlib.import_module(module_name), function)
    result = asyncio.run(
        run_contender(
            opener,
            backend=args.backend,
            saver_name=args.saver,
            threads=args.threads,
            turns=args.turns,
        )
    )
    print(RESULT_MARK + json.dumps(result.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
