"""The live suite's measurements (:mod:`bench.suites.live`), on one backend's
scratch space: watch latency, event appends (one by one, ``append_many``, ``stream_run``, the
AG-UI endpoint), read-back, idle watchers' requests, and PUBLISH per event against the event
log on Redis.

Requests are counted where every backend issues them: :class:`Requests` wraps the executor
(the callable that runs the requests the backend's generators yield) of a saver or an event
log, one per Redis command / script / pipeline, MongoDB command, DynamoDB API call.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

KEY_PREFIX = "bench-live"
#: seconds bench data lives (savers' and event logs' ttl): nothing outlives a crashed run
TTL = 3600
WATCH_POLL_INTERVAL = 0.2  # the default of saver.watch
#: events per ``append_many`` call
BATCH = 100
#: how long the disconnect test's reader stays away
DISCONNECT_GAP = 0.2


@dataclass
class Backend:
    """One backend's scratch space: the URL both savers and event logs open."""

    name: str
    url: str
    key_prefix: str
    where: str


# --------------------------------------------------------------------------- counting


class Requests:
    """Counts the requests an executor runs (thread-safe): wrap a saver's or log's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def wrap(self, owner: Any) -> Requests:
        inner = owner._execute

        def counted(request: Any) -> Any:
            with self._lock:
                self.count += 1
            return inner(request)

        owner._execute = counted
        return self


@contextmanager
def saver_at(backend: Backend, **options: Any) -> Iterator[Any]:
    import graphkeep

    with graphkeep.connect(backend.url, key_prefix=backend.key_prefix, ttl=TTL, **options) as saver:
        yield saver


@contextmanager
def events_at(backend: Backend, **options: Any) -> Iterator[Any]:
    import graphkeep

    with graphkeep.connect_events(
        backend.url, key_prefix=backend.key_prefix, ttl=TTL, **options
    ) as log:
        yield log


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


# --------------------------------------------------------------------------- watch


class Latencies:
    """The p50 / p95 of a measurement's ``latencies_ms`` (None when nothing was seen)."""

    latencies_ms: list[float]

    @property
    def p50(self) -> float | None:
        return percentile(self.latencies_ms, 0.5) if self.latencies_ms else None

    @property
    def p95(self) -> float | None:
        return percentile(self.latencies_ms, 0.95) if self.latencies_ms else None


@dataclass
class WatchResult(Latencies):
    latencies_ms: list[float]
    missed: int
    feed: bool
    #: checkpoints the watcher held before ``put`` had returned (latency counted as 0)
    early: int = 0


def _checkpoint(saver: Any, step: int, previous: str | None) -> tuple[Any, str]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    version = saver.get_next_version(previous, None)
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=step))
    checkpoint["channel_values"] = {"messages": f"turn {step}"}
    checkpoint["channel_versions"] = {"messages": version}
    return checkpoint, version


def measure_watch(backend: Backend, puts: int, rng: random.Random) -> WatchResult:
    thread = f"watch-{uuid.uuid4().hex[:10]}"
    with saver_at(backend) as writer, saver_at(backend, setup=False) as reader:
        feed = reader.port.feed
        pause = 0.02 if feed else WATCH_POLL_INTERVAL
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        version: str | None = None

        def put(step: int) -> tuple[str, float]:
            nonlocal config, version
            checkpoint, version = _checkpoint(writer, step, version)
            metadata = {"source": "loop", "step": step, "parents": {}}
            config = writer.put(config, checkpoint, metadata, {"messages": version})
            return str(config["configurable"]["checkpoint_id"]), time.perf_counter()

        start_id, _ = put(-1)  # the watcher starts after it: no race with its first read
        received: dict[str, float] = {}
        arrived = threading.Condition()
        expected = puts + 1
        failure: list[BaseException] = []

        def watch() -> None:
            try:
                for tup in reader.watch(thread, after=start_id, timeout=30):
                    now = time.perf_counter()
                    with arrived:
                        received[str(tup.config["configurable"]["checkpoint_id"])] = now
                        arrived.notify_all()
                        if len(received) >= expected:
                            return
            except BaseException as exc:  # noqa: BLE001 - reported by the measuring thread
                failure.append(exc)
                with arrived:
                    arrived.notify_all()

        def landed(wanted: str) -> Callable[[], bool]:
            return lambda: wanted in received or bool(failure)

        watcher = threading.Thread(target=watch, name="bench-watcher", daemon=True)
        watcher.start()
        latencies: list[float] = []
        missed = early = 0
        for step in range(expected):
            time.sleep(rng.uniform(0, pause))
            checkpoint_id, returned = put(step)
            with arrived:
                arrived.wait_for(landed(checkpoint_id), timeout=10)
                seen = received.get(checkpoint_id)
            if failure:
                raise failure[0]
            if seen is None:
                missed += 1
            elif step > 0:  # step 0 warms the watcher up
                latencies.append(max(0.0, seen - returned) * 1000)
                early += seen < returned
        watcher.join(timeout=35)
        writer.delete_thread(thread)
    return WatchResult(latencies, missed, feed, early)


@dataclass
class BurstResult(Latencies):
    """A watcher live on a thread while 15 turns of a 2-node graph run back to back."""

    checkpoints: int
    latencies_ms: list[float]
    missed: int
    #: one ``list`` page of that many checkpoints read by the watcher's saver (ms)
    page_read_ms: float

    @property
    def target_ms(self) -> float:
        """Issue 28: p95 at most twice the poll interval plus one page read."""
        return 2 * WATCH_POLL_INTERVAL * 1000 + self.page_read_ms


def _two_nodes(saver: Any) -> Any:
    from langgraph.graph import END, START, MessagesState, StateGraph

    def a(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"a {len(state['messages'])}")]}

    def b(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"b {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver)


def measure_watch_burst(backend: Backend, turns: int) -> BurstResult:
    """Latency from each ``put`` returning to the watcher holding that checkpoint, while
    ``turns`` graph turns are written back to back (no pause between them)."""
    thread = f"burst-{uuid.uuid4().hex[:10]}"
    with saver_at(backend) as writer, saver_at(backend, setup=False) as reader:
        returned: dict[str, float] = {}
        put = writer.put

        def timed_put(*args: Any, **kwargs: Any) -> Any:
            config = put(*args, **kwargs)
            returned[str(config["configurable"]["checkpoint_id"])] = time.perf_counter()
            return config

        writer.put = timed_put
        config: Any = {"configurable": {"thread_id": thread}}
        graph = _two_nodes(writer)
        graph.invoke({"messages": [("user", "warm up")]}, config)
        start = str(writer.get_tuple(config).config["configurable"]["checkpoint_id"])
        warm = set(returned)
        received: dict[str, float] = {}
        done = threading.Event()

        def watch() -> None:
            for tup in reader.watch(thread, after=start, timeout=3):
                received[str(tup.config["configurable"]["checkpoint_id"])] = time.perf_counter()
                if done.is_set() and len(received) >= len(returned) - len(warm):
                    return

        watcher = threading.Thread(target=watch, name="bench-burst", daemon=True)
        watcher.start()
        time.sleep(2 * WATCH_POLL_INTERVAL)  # the watcher is live before the burst
        for turn in range(turns):
            graph.invoke({"messages": [("user", f"turn {turn}")]}, config)
        done.set()
        watcher.join(timeout=30)
        wanted = {cid: at for cid, at in returned.items() if cid not in warm}
        latencies = [
            max(0.0, received[cid] - at) * 1000 for cid, at in wanted.items() if cid in received
        ]
        started = time.perf_counter()
        list(reader.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                         limit=len(wanted)))  # fmt: skip
        page_ms = (time.perf_counter() - started) * 1000
        writer.delete_thread(thread)
    return BurstResult(len(wanted), latencies, len(wanted) - len(latencies), page_ms)


# --------------------------------------------------------------------------- appends


@dataclass
class AppendResult:
    events: int
    seconds: float
    requests: int

    @property
    def per_second(self) -> float:
        return self.events / self.seconds if self.seconds else math.inf

    @property
    def per_1000(self) -> float:
        return self.requests * 1000 / self.events


def _token(i: int) -> dict[str, Any]:
    return {"type": "token", "seq": i, "text": f"tok{i} "}


def measure_one_by_one(log: Any, counter: Requests, n: int) -> AppendResult:
    run = f"one-{uuid.uuid4().hex[:10]}"
    before = counter.count
    started = time.perf_counter()
    for i in range(n):
        log.append(run, _token(i))
    log.close(run, "success")
    seconds = time.perf_counter() - started
    result = AppendResult(n, seconds, counter.count - before)
    log.delete(run)
    return result


def measure_batched(log: Any, counter: Requests, n: int) -> tuple[AppendResult, str]:
    """``append_many`` in batches of :data:`BATCH`; returns the (closed) run for read-back."""
    run = f"many-{uuid.uuid4().hex[:10]}"
    before = counter.count
    started = time.perf_counter()
    for first in range(0, n, BATCH):
        log.append_many(run, [_token(i) for i in range(first, min(n, first + BATCH))])
    log.close(run, "success")
    seconds = time.perf_counter() - started
    return AppendResult(n, seconds, counter.count - before), run


def token_graph(tokens: int) -> Any:
    """A graph whose one node streams ``tokens`` custom chunks, as an LLM node streams."""
    from typing import TypedDict

    from langgraph.config import get_stream_writer
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        n: int

    async def speak(state: State) -> State:
        write = get_stream_writer()
        for i in range(state["n"]):
            write(_token(i))
            if i % 10 == 9:
                await asyncio.sleep(0)
        return {"n": state["n"]}

    builder = StateGraph(State)
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    builder.add_edge("speak", END)
    return builder.compile()


def measure_stream_run(log: Any, counter: Requests, n: int) -> AppendResult:
    from graphkeep.events.streaming import stream_run

    run = f"stream-{uuid.uuid4().hex[:10]}"
    graph = token_graph(n)

    async def go() -> int:
        chunks = 0
        async for _ in stream_run(graph, {"n": n}, None, log, stream_mode="custom", run_id=run):
            chunks += 1
        return chunks

    before = counter.count
    started = time.perf_counter()
    chunks = asyncio.run(go())
    seconds = time.perf_counter() - started
    if chunks != n:
        raise RuntimeError(f"the token graph streamed {chunks} chunks, expected {n}")
    stored = sum(1 for _ in log.read(run, follow=False))
    if stored != n + 1:
        raise RuntimeError(f"stream_run stored {stored} events, expected {n} + close")
    result = AppendResult(n, seconds, counter.count - before)
    log.delete(run)
    return result


@dataclass
class AGUIResult(AppendResult):
    """The AG-UI endpoint's run: ``events`` is every event it wrote (``RUN_STARTED`` …
    ``RUN_FINISHED``, not the log's close), ``requests`` the event log's and the saver's,
    ``saver_requests`` the saver's alone; ``thread`` / ``run`` name what :func:`forget_agui`
    deletes."""

    saver_requests: int = 0
    thread: str = ""
    run: str = ""


def chat_token_graph(tokens: int, checkpointer: Any) -> Any:
    """:func:`token_graph` for the AG-UI endpoint: its one node asks a fake chat model that
    streams ``tokens`` chunks (no delay) through LangGraph's message stream, which
    ag-ui-langgraph turns into one ``TEXT_MESSAGE_CONTENT`` event each."""
    from collections.abc import AsyncIterator

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
    from langchain_core.outputs import ChatGenerationChunk
    from langgraph.graph import END, START, MessagesState, StateGraph

    class TokenModel(GenericFakeChatModel):
        # the chat model base class reports each chunk to the callbacks (the message stream)
        async def _astream(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> AsyncIterator[ChatGenerationChunk]:
            message = next(self.messages)
            reply = message.id if isinstance(message, AIMessage) else None
            for i in range(tokens):
                text = _token(i)["text"]
                yield ChatGenerationChunk(message=AIMessageChunk(content=text, id=reply))
                if i % 10 == 9:
                    await asyncio.sleep(0)

    async def speak(state: MessagesState) -> dict[str, Any]:
        reply = AIMessage(content="", id=f"reply-{uuid.uuid4().hex[:10]}")
        model = TokenModel(messages=iter([reply]))
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    builder.add_edge("speak", END)
    return builder.compile(checkpointer=checkpointer)


def measure_agui(
    saver: Any,
    saver_counter: Requests,
    log: Any,
    counter: Requests,
    n: int,
    translation: str = "graphkeep",
) -> AGUIResult:
    """The AG-UI endpoint's run (:class:`graphkeep.agui.AGUIRuns`, what ``POST /agent``
    starts) of :func:`chat_token_graph` checkpointed by ``saver``: timed from ``start`` to the
    worker having written the run's close event, as :func:`measure_stream_run` with no reader
    following. Then (not counted) the run is read back through ``AGUIRuns.serve`` and checked
    against the log: every token once and in order, ``RUN_STARTED`` first, ``RUN_FINISHED``
    last. The run stays in the log and the thread in the saver: :func:`forget_agui`.
    ``translation``: ``AGUIRuns``' (``"ag-ui-langgraph"``: the events through
    ag-ui-langgraph over ``astream_events``, as before graphkeep translated them)."""
    from graphkeep.agui import AGUIRuns, agent_input

    thread, run = f"agui-{uuid.uuid4().hex[:10]}", f"agui-run-{uuid.uuid4().hex[:10]}"
    runs = AGUIRuns(chat_token_graph(n, saver), log, translation=translation)
    request = agent_input(
        {
            "threadId": thread,
            "runId": run,
            "state": {},
            "messages": [{"id": f"user-{run}", "role": "user", "content": "speak"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
    )

    async def go() -> tuple[float, int, int, list[dict[str, Any]]]:
        log_before, saver_before = counter.count, saver_counter.count
        started = time.perf_counter()
        await runs.start(request)
        await asyncio.gather(*runs.tasks)  # the worker ends once the close is written
        seconds = time.perf_counter() - started
        requests = counter.count - log_before, saver_counter.count - saver_before
        served = [event async for _, event in runs.serve(thread, run) if event is not None]
        return seconds, *requests, served

    seconds, log_requests, saver_requests, served = asyncio.run(go())
    stored = [event for _, event in log.read(run, follow=False)]
    if stored[-1:] != [{"type": "close", "status": "success"}]:
        raise RuntimeError(f"the AG-UI run did not close with success: {stored[-1:]}")
    events = stored[:-1]
    if served != events:
        raise RuntimeError(
            f"AGUIRuns.serve sent {len(served)} events, the log holds {len(events)} + close"
        )
    kinds = [event.get("type") for event in events]
    if kinds[:1] != ["RUN_STARTED"] or kinds[-1:] != ["RUN_FINISHED"]:
        raise RuntimeError(f"the AG-UI run went {kinds[:1]} … {kinds[-1:]}")
    deltas = [e.get("delta") for e in events if e.get("type") == "TEXT_MESSAGE_CONTENT"]
    if deltas != [_token(i)["text"] for i in range(n)]:
        raise RuntimeError(f"the AG-UI run wrote {len(deltas)} token deltas, expected {n} in order")
    return AGUIResult(
        len(events), seconds, log_requests + saver_requests, saver_requests, thread, run
    )


def forget_agui(saver: Any, log: Any, result: AGUIResult) -> None:
    """Delete what :func:`measure_agui` left: the run, the thread's index of runs, the thread."""
    from graphkeep.events.threads import index_id

    log.delete([result.run, index_id(result.thread)])
    saver.delete_thread(result.thread)


def measure_read_back(log: Any, run: str, n: int, reads: int) -> float:
    """Median ms of reading the closed run's ``n`` events (+ close) back."""
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        count = sum(1 for _ in log.read(run, follow=False))
        times.append((time.perf_counter() - started) * 1000)
        if count != n + 1:
            raise RuntimeError(f"read back {count} events, expected {n} + close")
    return statistics.median(times)


# --------------------------------------------------------------------------- idle watchers


def measure_idle(backend: Backend, watchers: int, settle: float, window: float) -> float:
    """Requests/s made by ``watchers`` idle watchers (one saver) over ``window`` seconds."""
    with saver_at(backend, setup=False) as saver:
        counter = Requests().wrap(saver)
        span = settle + window + 0.5

        failures: list[BaseException] = []

        def idle(thread_id: str) -> None:
            try:
                for _ in saver.watch(thread_id, timeout=span):
                    pass
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                failures.append(exc)

        threads = [
            threading.Thread(
                target=idle, args=(f"idle-{uuid.uuid4().hex[:10]}",), name=f"bench-idle-{i}"
            )
            for i in range(watchers)
        ]
        for thread in threads:
            thread.start()
        time.sleep(settle)
        before, started = counter.count, time.perf_counter()
        time.sleep(window)
        rate = (counter.count - before) / (time.perf_counter() - started)
        for thread in threads:
            thread.join(timeout=span + 10)
    if failures:
        raise failures[0]
    return rate


# --------------------------------------------------------------------------- PUBLISH vs log


@dataclass
class Disconnect:
    received: int
    lost: int
    duplicated: int
    in_order: bool


def _redis(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=2)


def measure_publish_throughput(url: str, n: int) -> float:
    """Events/s of PUBLISH one by one, until the subscriber has received them all."""
    channel = f"{KEY_PREFIX}:pub:{uuid.uuid4().hex[:10]}"
    publisher, subscriber = _redis(url), _redis(url)
    pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    done = threading.Event()

    def receive() -> None:
        count = 0
        while count < n:
            if pubsub.get_message(timeout=5.0) is None:
                return
            count += 1
        done.set()

    reader = threading.Thread(target=receive, name="bench-subscriber", daemon=True)
    reader.start()
    started = time.perf_counter()
    for i in range(n):
        publisher.publish(channel, json.dumps(_token(i)))
    done.wait(timeout=30)
    seconds = time.perf_counter() - started
    reader.join(timeout=10)
    pubsub.close()
    publisher.close()
    subscriber.close()
    if not done.is_set():
        raise RuntimeError("the subscriber did not receive every PUBLISH")
    return n / seconds


def _paced(total: int, emit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Emit ``total`` events in batches of 10, one batch every 2 ms."""
    for first in range(0, total, 10):
        emit([_token(i) for i in range(first, min(total, first + 10))])
        time.sleep(0.002)


def _tally(seqs: list[int], total: int) -> Disconnect:
    distinct = set(seqs)
    return Disconnect(
        received=len(seqs),
        lost=total - len(distinct & set(range(total))),
        duplicated=len(seqs) - len(distinct),
        in_order=seqs == sorted(seqs),
    )


def disconnect_publish(url: str, total: int) -> Disconnect:
    channel = f"{KEY_PREFIX}:pub:{uuid.uuid4().hex[:10]}"
    publisher = _redis(url)
    seqs: list[int] = []
    ready, back = threading.Event(), threading.Event()

    def subscribe() -> tuple[Any, Any]:
        client = _redis(url)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(channel)
        pubsub.get_message(timeout=1.0)
        return client, pubsub

    def read() -> None:
        client, pubsub = subscribe()
        ready.set()
        dropped = False
        while True:
            message = pubsub.get_message(timeout=5.0)
            if message is None:
                break
            event = json.loads(message["data"])
            if event.get("type") == "close":
                break
            seqs.append(int(event["seq"]))
            if not dropped and len(seqs) >= total // 2:
                dropped = True
                pubsub.close()  # the connection drops
                client.close()
                time.sleep(DISCONNECT_GAP)
                client, pubsub = subscribe()
                back.set()
        pubsub.close()
        client.close()

    reader = threading.Thread(target=read, name="bench-publish-reader", daemon=True)
    reader.start()
    ready.wait(timeout=10)

    def emit(batch: list[dict[str, Any]]) -> None:
        pipe = publisher.pipeline(transaction=False)
        for event in batch:
            pipe.publish(channel, json.dumps(event))
        pipe.execute()

    _paced(total, emit)
    back.wait(timeout=10)  # the close goes out once the reader is subscribed again
    publisher.publish(channel, json.dumps({"type": "close", "status": "success"}))
    reader.join(timeout=30)
    publisher.close()
    return _tally(seqs, total)


def disconnect_log(backend: Backend, total: int) -> Disconnect:
    run = f"drop-{uuid.uuid4().hex[:10]}"
    seqs: list[int] = []
    failure: list[BaseException] = []
    with events_at(backend) as writer:
        writer.append_many(run, [_token(0)])  # the run exists before the reader starts

        def read() -> None:
            try:
                last: str | None = None
                with events_at(backend, setup=False) as log:
                    for event_id, event in log.read(run):
                        last = event_id
                        if event.get("type") == "close":
                            return
                        seqs.append(int(event["seq"]))
                        if len(seqs) >= total // 2:
                            break  # leaving the block closes the reader's connection
                time.sleep(DISCONNECT_GAP)
                with events_at(backend, setup=False) as log:
                    for _, event in log.read(run, after=last):
                        if event.get("type") != "close":
                            seqs.append(int(event["seq"]))
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
                failure.append(exc)

        reader = threading.Thread(target=read, name="bench-log-reader", daemon=True)
        reader.start()
        first = [True]

        def emit(batch: list[dict[str, Any]]) -> None:
            if first[0]:  # event 0 is stored already
                first[0] = False
                batch = batch[1:]
            if batch:
                writer.append_many(run, batch)

        _paced(total, emit)
        writer.close(run, "success")
        reader.join(timeout=60)
        writer.delete(run)
    if failure:
        raise failure[0]
    return _tally(seqs, total)
