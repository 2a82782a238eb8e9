"""Live suite: ``saver.watch`` and the run event log on every backend, side by side, one run.

Per backend (Redis, Redis Cluster, MongoDB, DynamoDB), each in a scratch space of the usual
bench servers (Redis database ``--redis-db``, flushed first; a key prefix of its own on the
cluster; database / table ``graphkeep_bench_live`` on MongoDB / DynamoDB, dropped first):

- **watch latency**: a watcher thread on its own connection follows a thread while this
  thread ``put`` s N checkpoints, one after the other, each after a random pause (up to the
  poll interval on polling stores, so a put lands at a random point of the poll cycle); the
  latency of a checkpoint is from ``put`` returning to the watcher holding its
  ``CheckpointTuple``. p50 / p95 over the N puts (a first, warm-up put is not counted);
- **event appends**: events/s and store requests per 1,000 events for ``append`` one by
  one, ``append_many`` in batches of 100 and :func:`graphkeep.events.streaming.stream_run` of a
  graph streaming tokens (``stream_mode="custom"``; its writer batches per 20 ms window);
  the times include the run's close;
- **read-back**: ``read(run, follow=False)`` of the 5,000 events just appended, median ms
  of 3 reads;
- **idle watchers**: 100 watchers on 100 empty threads sharing one saver, store requests
  per second over a window that starts once polling watchers have backed off to
  ``max_poll_interval`` (Redis watchers block in ``XREAD BLOCK`` and wake every 5 s).

Requests are counted where every backend issues them: a wrapped executor (the callable
that runs the requests the backend's generators yield) counts one per Redis
command / script / pipeline, MongoDB command, DynamoDB API call.

On the same Redis, the hand-rolled alternative: ``PUBLISH`` per event to a channel a
``SUBSCRIBE`` r reads. Its throughput (one PUBLISH per event, until the subscriber has them
all), and the disconnect test both approaches run alike: a writer emits E events in batches
of 10 every 2 ms; the reader drops its connection after E/2 events, waits 200 ms and
reconnects (graphkeep: ``read(run, after=last_id)``, PUBLISH: a new SUBSCRIBE); counted:
events lost and duplicated.

Run it with ``./dev bench --suite live`` or ``python -m graphkeep.bench.suites.live``
(``--only redis,mongodb`` picks backends; ``--quick`` is a fifth of the sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from graphkeep.bench import render
from graphkeep.bench.render import (
    NA,
    Bars,
    Figure,
    Panel,
    number,
    section,
    table,
    target_lines,
    versions,
)
from graphkeep.bench.suites import Options, Skip, Suite
from graphkeep.errors import mask_url

BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb")
KEY_PREFIX = "bench-live"
MONGODB_DATABASE = "graphkeep_bench_live"
DYNAMODB_TABLE = "graphkeep_bench_live"
FULL_TURNS = 50  # Options.turns of a full run: sizes scale by turns / 50 (--quick: 0.2)
#: seconds bench data lives (savers' and event logs' ttl): nothing outlives a crashed run
TTL = 3600
#: issue 11 targets
WATCH_P95_MS = 20.0
#: "far fewer than 1,000 round trips": at least 10x fewer
BATCHED_REQUESTS_MAX = 100.0
WATCH_POLL_INTERVAL = 0.2  # the default of saver.watch
BATCH = 100
DISCONNECT_GAP = 0.2


@dataclass(frozen=True)
class Sizes:
    watch_puts: int
    one_by_one: int
    batched: int
    stream_tokens: int
    reads: int
    idle_watchers: int
    #: seconds idle watchers run before the window (back-off) and the window itself
    idle_settle: float
    idle_window: float
    disconnect_events: int

    @classmethod
    def full(cls) -> Sizes:
        return cls(100, 1000, 5000, 2000, 3, 100, 15.0, 10.0, 5000)

    @classmethod
    def scaled(cls, factor: float) -> Sizes:
        if factor >= 1:
            return cls.full()
        full = cls.full()

        def n(value: int, least: int) -> int:
            return max(least, round(value * factor))

        return cls(
            # watch and one-by-one appends cost wall time per item on polling stores
            watch_puts=n(full.watch_puts // 2, 5),
            one_by_one=n(full.one_by_one // 4, 20),
            batched=n(full.batched, 2 * BATCH),
            stream_tokens=n(full.stream_tokens, 50),
            reads=1,
            idle_watchers=n(full.idle_watchers, 5),
            idle_settle=0.0,
            idle_window=1.5,
            disconnect_events=n(full.disconnect_events, 500),
        )


# --------------------------------------------------------------------------- where


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=path))


@dataclass
class Backend:
    """One backend's scratch space: the URL both savers and event logs open."""

    name: str
    url: str
    key_prefix: str
    where: str


def open_backend(name: str, options: Options) -> Backend:
    """Prepare ``name``'s scratch space (flush / drop what the bench owns) and say where."""
    if name == "redis":
        from graphkeep.bench.suites.redis import redis_url, scratch_database

        url = scratch_database(redis_url(), options.redis_db, options.force_flush)
        return Backend(name, url, KEY_PREFIX, f"{mask_url(url)}")
    if name == "redis-cluster":
        url = _env("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001")
        prefix = f"{KEY_PREFIX}-{uuid.uuid4().hex[:8]}"
        return Backend(name, url, prefix, f"{mask_url(url)} (key prefix {prefix})")
    if name == "mongodb":
        from graphkeep.bench.suites.mongodb import mongo_client, mongodb_url
        from graphkeep.bench.suites.mongodb import scratch_database as mongo_scratch

        client = mongo_client()
        try:
            mongo_scratch(client, MONGODB_DATABASE, options.force_flush)
        finally:
            client.close()
        url = _with_path(mongodb_url(), f"/{MONGODB_DATABASE}")
        return Backend(name, url, KEY_PREFIX, f"{mask_url(url)}")
    if name == "dynamodb":
        from graphkeep.bench.suites.dynamodb import drop_table, dynamodb_client, local_credentials
        from graphkeep.bench.suites.dynamodb import table_url as dynamodb_table_url

        local_credentials()
        drop_table(dynamodb_client(), DYNAMODB_TABLE)
        url = dynamodb_table_url(DYNAMODB_TABLE)
        return Backend(name, url, KEY_PREFIX, url)
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")


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


@dataclass
class WatchResult:
    latencies_ms: list[float]
    missed: int
    feed: bool
    #: checkpoints the watcher held before ``put`` had returned (latency counted as 0)
    early: int = 0

    @property
    def p50(self) -> float | None:
        return percentile(self.latencies_ms, 0.5) if self.latencies_ms else None

    @property
    def p95(self) -> float | None:
        return percentile(self.latencies_ms, 0.95) if self.latencies_ms else None


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
        feed = bool(getattr(reader.port, "feed", False))
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


# --------------------------------------------------------------------------- running


@dataclass
class Column:
    """One backend's results; ``None`` = not measured (see ``errors``)."""

    backend: str
    where: str = ""
    watch: WatchResult | None = None
    one_by_one: AppendResult | None = None
    batched: AppendResult | None = None
    streamed: AppendResult | None = None
    read_back_ms: float | None = None
    idle_rps: float | None = None
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Rival:
    """The PUBLISH alternative on the single Redis, and graphkeep's disconnect run there."""

    publish_per_second: float | None = None
    publish_disconnect: Disconnect | None = None
    log_disconnect: Disconnect | None = None
    errors: list[str] = field(default_factory=list)


def _failed(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    if isinstance(exc, ImportError) or "No module named 'graphkeep.backends." in text:
        return f"not available yet ({text})"
    return f"{type(exc).__name__}: {text}"


def _attempt(column: Column, what: str, step: Callable[[], None]) -> None:
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - one measurement failing is reported
        column.errors.append(f"{what}: {_failed(exc)}")


def measure_backend(name: str, options: Options, sizes: Sizes, rng: random.Random) -> Column:
    column = Column(name)
    started = time.perf_counter()
    try:
        backend = open_backend(name, options)
    except Exception as exc:  # noqa: BLE001 - the whole column is reported as not run
        column.errors.append(f"not run: {_failed(exc)}")
        return column
    column.where = backend.where

    def watch() -> None:
        column.watch = measure_watch(backend, sizes.watch_puts, rng)

    def appends() -> None:
        with events_at(backend) as log:
            counter = Requests().wrap(log)
            column.one_by_one = measure_one_by_one(log, counter, sizes.one_by_one)
            column.batched, run = measure_batched(log, counter, sizes.batched)
            try:
                column.read_back_ms = measure_read_back(log, run, sizes.batched, sizes.reads)
            finally:
                log.delete(run)
            column.streamed = measure_stream_run(log, counter, sizes.stream_tokens)

    def idle() -> None:
        column.idle_rps = measure_idle(
            backend, sizes.idle_watchers, sizes.idle_settle, sizes.idle_window
        )

    for what, step in (("watch", watch), ("events", appends), ("idle watchers", idle)):
        print(f"  live {name}: {what} ...", end="", flush=True)
        at = time.perf_counter()
        _attempt(column, what, step)
        print(f" {time.perf_counter() - at:.1f} s", flush=True)
    column.seconds = time.perf_counter() - started
    return column


def measure_rival(options: Options, sizes: Sizes) -> Rival:
    rival = Rival()
    try:
        backend = open_backend("redis", options)
    except Exception as exc:  # noqa: BLE001 - reported
        rival.errors.append(f"not run: {_failed(exc)}")
        return rival
    steps: list[tuple[str, Callable[[], None]]] = [
        (
            "PUBLISH throughput",
            lambda: setattr(
                rival,
                "publish_per_second",
                measure_publish_throughput(backend.url, sizes.one_by_one),
            ),
        ),
        (
            "PUBLISH disconnect",
            lambda: setattr(
                rival,
                "publish_disconnect",
                disconnect_publish(backend.url, sizes.disconnect_events),
            ),
        ),
        (
            "graphkeep disconnect",
            lambda: setattr(
                rival, "log_disconnect", disconnect_log(backend, sizes.disconnect_events)
            ),
        ),
    ]
    for what, step in steps:
        print(f"  live redis: {what} ...", end="", flush=True)
        at = time.perf_counter()
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported
            rival.errors.append(f"{what}: {_failed(exc)}")
        print(f" {time.perf_counter() - at:.1f} s", flush=True)
    return rival


# --------------------------------------------------------------------------- report


def _eps(result: AppendResult | None) -> float | None:
    return None if result is None else result.per_second


def _rq(result: AppendResult | None) -> float | None:
    return None if result is None else result.per_1000


#: the main table's rows: label -> cell of a column
ROWS: list[tuple[str, Callable[[Column], str]]] = [
    (
        "watch: how",
        lambda c: (
            "n/a"
            if c.watch is None
            else "feed (blocking read)"
            if c.watch.feed
            else f"polling, {WATCH_POLL_INTERVAL * 1000:g} ms"
        ),
    ),
    ("watch latency p50 (ms)", lambda c: number(c.watch.p50 if c.watch else None)),
    ("watch latency p95 (ms)", lambda c: number(c.watch.p95 if c.watch else None)),
    (
        "watch: checkpoints missed",
        lambda c: "n/a" if c.watch is None else str(c.watch.missed),
    ),
    (
        "watch: seen before put returned",
        lambda c: "n/a" if c.watch is None else f"{c.watch.early} of {len(c.watch.latencies_ms)}",
    ),
    ("append one by one (events/s)", lambda c: number(_eps(c.one_by_one), 0)),
    (
        "append one by one (requests / 1,000 events)",
        lambda c: number(_rq(c.one_by_one), 0),
    ),
    (
        f"append_many, batches of {BATCH} (events/s)",
        lambda c: number(_eps(c.batched), 0),
    ),
    (
        f"append_many, batches of {BATCH} (requests / 1,000 events)",
        lambda c: number(_rq(c.batched), 1),
    ),
    ("stream_run, token graph (events/s)", lambda c: number(_eps(c.streamed), 0)),
    (
        "stream_run, token graph (requests / 1,000 events)",
        lambda c: number(_rq(c.streamed), 1),
    ),
    ("read-back of the batched run (ms, median)", lambda c: number(c.read_back_ms, 1)),
    ("idle watchers (requests/s, all together)", lambda c: number(c.idle_rps, 1)),
]


def targets(columns: Sequence[Column], rival: Rival) -> list[tuple[str, bool]]:
    by = {c.backend: c for c in columns}
    out: list[tuple[str, bool]] = []
    redis = by.get("redis")
    if redis and redis.watch and redis.watch.p95 is not None:
        out.append(
            (
                f"Redis: a watcher sees a checkpoint at most {WATCH_P95_MS:g} ms (p95) after"
                f" put returns (issue 11): {redis.watch.p95:.1f} ms",
                redis.watch.p95 <= WATCH_P95_MS and redis.watch.missed == 0,
            )
        )
    if redis and redis.batched and redis.streamed:
        worst = max(redis.batched.per_1000, redis.streamed.per_1000)
        out.append(
            (
                "Redis: 1,000 small events cost far fewer than 1,000 round trips with batching"
                f" (at most {BATCHED_REQUESTS_MAX:g}; issue 11): append_many"
                f" {redis.batched.per_1000:.1f}, stream_run {redis.streamed.per_1000:.1f}",
                worst <= BATCHED_REQUESTS_MAX,
            )
        )
    for c in columns:
        if c.watch is not None and c.watch.missed:
            out.append((f"{c.backend}: the watcher saw every checkpoint", False))
    log = rival.log_disconnect
    if log is not None:
        lost = "n/a" if rival.publish_disconnect is None else rival.publish_disconnect.lost
        out.append(
            (
                "Redis disconnect test: graphkeep's read(after=) loses and duplicates no"
                f" event (issue 11): lost {log.lost}, duplicated {log.duplicated}; the"
                f" PUBLISH reader lost {lost}",
                log.lost == 0 and log.duplicated == 0 and log.in_order,
            )
        )
    return out


def markdown(columns: Sequence[Column], rival: Rival, sizes: Sizes, where: str) -> str:
    names = [c.backend for c in columns]
    lines = [
        "## graphkeep bench: live threads and run event logs",
        "",
        f"{where}. One run, one machine; {versions(('langgraph', 'graphkeep', 'redis'))}.",
        "",
        f"- watch latency: from `put` returning to a watcher thread (own connection) holding"
        f" the `CheckpointTuple`, over {sizes.watch_puts} puts, each after a random pause;"
        f" polling stores at the default `poll_interval` ({WATCH_POLL_INTERVAL:g} s);"
        " a checkpoint the watcher held before `put` returned counts as 0 ms",
        f"- appends: {sizes.one_by_one:,} events one by one, {sizes.batched:,} with"
        f" `append_many` ({BATCH} per call), {sizes.stream_tokens:,} tokens through"
        " `stream_run` (one graph node streaming custom chunks; 20 ms flush window);"
        " times include the close",
        "- requests = what the backend's executor sent to the store: one Redis command,"
        " script or pipeline, one MongoDB command, one DynamoDB API call",
        f"- read-back: `read(run, follow=False)` of the {sizes.batched:,}-event run"
        f" (+ close), median of {sizes.reads}",
        f"- idle watchers: {sizes.idle_watchers} watchers of empty threads on one saver,"
        f" requests/s over {sizes.idle_window:g} s after {sizes.idle_settle:g} s"
        " (polling watchers back off to `max_poll_interval` = 2 s after 5 s idle;"
        " Redis watchers block in XREAD and wake every 5 s)",
        "- timings are from a shared, noisy machine: compare within one run only",
        "",
    ]
    lines += table(
        ["measure", *names],
        [[label, *(cell(c) for c in columns)] for label, cell in ROWS],
        "l" + "r" * len(names),
    )
    redis = next((c for c in columns if c.backend == "redis"), None)
    lines += [
        "",
        "### The hand-rolled alternative on the same Redis: PUBLISH per event",
        "",
        f"Disconnect test: a writer emits {sizes.disconnect_events:,} events, 10 every 2 ms;"
        f" the reader drops its connection after half of them, waits"
        f" {DISCONNECT_GAP * 1000:g} ms and reconnects (PUBLISH: SUBSCRIBE again;"
        " graphkeep: `read(run, after=last_id)`).",
        "",
    ]

    def drop_cells(d: Disconnect | None) -> list[str]:
        if d is None:
            return [NA] * 4
        return [
            f"{d.received:,}",
            f"{d.lost:,}",
            f"{d.duplicated:,}",
            "yes" if d.in_order else "no",
        ]

    one = redis.one_by_one if redis else None
    many = redis.batched if redis else None
    lines += table(
        [
            "approach",
            "events/s (one by one)",
            "requests / 1,000 events",
            "disconnect: received",
            "lost",
            "duplicated",
            "in order",
        ],
        [
            [
                "PUBLISH + SUBSCRIBE",
                number(rival.publish_per_second, 0),
                "1,000",
                *drop_cells(rival.publish_disconnect),
            ],
            [
                "graphkeep `append` + `read(after=)`",
                number(_eps(one), 0),
                number(_rq(one), 0),
                *drop_cells(rival.log_disconnect),
            ],
            [
                f"graphkeep `append_many` ({BATCH})",
                number(_eps(many), 0),
                number(_rq(many), 1),
                "(same reader)",
                "",
                "",
                "",
            ],
        ],
        "lrrrrrl",
    )
    lines += target_lines(targets(columns, rival))
    notes = [f"{c.backend}: {e}" for c in columns for e in c.errors]
    notes += [f"redis (PUBLISH comparison): {e}" for e in rival.errors]
    lines += section("Notes", [n.replace("|", "/") for n in notes])
    return "\n".join(lines) + "\n"


def chart(columns: Sequence[Column], path: Path) -> None:
    """Watch latency p50/p95 and requests per 1,000 events, per backend."""
    names = [c.backend for c in columns]

    def bars(label: str, pick: Callable[[Column], float | None]) -> Bars:
        return Bars(label, [pick(c) for c in columns])

    panels = [
        Panel(
            "watch latency, ms (log scale)",
            names,
            [
                bars("p50", lambda c: c.watch.p50 if c.watch else None),
                bars("p95", lambda c: c.watch.p95 if c.watch else None),
            ],
            log=True,
            legend=True,
            line=(WATCH_P95_MS, "Redis p95 target"),
        ),
        Panel(
            "store requests per 1,000 events (log scale)",
            names,
            [
                bars("append one by one", lambda c: _rq(c.one_by_one)),
                bars(f"append_many ({BATCH})", lambda c: _rq(c.batched)),
                bars("stream_run", lambda c: _rq(c.streamed)),
            ],
            log=True,
            legend=True,
        ),
    ]
    render.chart(Figure("graphkeep bench: live threads and run event logs", panels), path)


def run(
    options: Options, out: Path, chart_too: bool, only: Sequence[str] | None = None
) -> tuple[list[Column], Rival]:
    """Every backend (``only``: these), report to stdout and ``<out>/live.md``."""
    sizes = Sizes.scaled(min(options.turns / FULL_TURNS, 1.0))
    rng = random.Random(11)
    chosen = [b for b in BACKENDS if only is None or b in only]
    columns = [measure_backend(name, options, sizes, rng) for name in chosen]
    rival = measure_rival(options, sizes) if "redis" in chosen else Rival()
    where = "; ".join(f"{c.backend}: {c.where}" for c in columns if c.where)
    text = markdown(columns, rival, sizes, where or "no backend reachable")
    render.publish(text, out, "live", partial(chart, columns) if chart_too else None)
    return columns, rival


def unavailable() -> Skip | None:
    return None  # every backend that cannot run says why in the report's notes


SUITE = Suite(
    name="live",
    title="live threads and run event logs",
    stored_label="n/a",
    request_label="requests run by the backend's executor",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphkeep.bench.suites.live")
    parser.add_argument("--quick", action="store_true", help="a fifth of the sizes")
    parser.add_argument("--only", default=None, help=f"comma list of: {', '.join(BACKENDS)}")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--redis-db", type=int, default=Options.redis_db)
    parser.add_argument("--force-flush", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else None
    if only and set(only) - set(BACKENDS):
        parser.error(f"unknown backends: {', '.join(sorted(set(only) - set(BACKENDS)))}")
    options = Options(
        turns=10 if args.quick else FULL_TURNS,
        redis_db=args.redis_db,
        force_flush=args.force_flush,
    )
    run(options, args.out, not args.no_chart, only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
