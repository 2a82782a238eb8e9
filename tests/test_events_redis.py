"""The run event log on Redis (one Stream per run): a single node and a Cluster, the sync and
the async log, through ``graphkeep.connect_events`` / ``aconnect_events``, real servers."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import graphkeep
from conformance.setups import by_name
from graphkeep.backends.redis import sync_client
from graphkeep.backends.redis.events import (
    CALL_EVENTS,
    AsyncRedisEventLog,
    RedisEventLog,
    RedisEventsPort,
)
from graphkeep.backends.redis.requests import Script
from graphkeep.errors import (
    ConfigurationError,
    EventsTrimmed,
    InvalidInput,
    RunClosed,
    RunStale,
    UnknownRun,
)
from graphkeep.events.port import MAX_EVENT_BYTES, StoredEvent
from graphkeep.port import adrive, drive

from .conftest import unique_prefix

TARGETS = [
    pytest.param(("redis", False), id="redis-sync", marks=pytest.mark.redis),
    pytest.param(("redis", True), id="redis-async", marks=pytest.mark.redis),
    pytest.param(("redis-cluster", False), id="cluster-sync", marks=pytest.mark.cluster),
    pytest.param(("redis-cluster", True), id="cluster-async", marks=pytest.mark.cluster),
]
SERVERS = [
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", id="cluster", marks=pytest.mark.cluster),
]
#: an SSE id must be one line without NUL; ours are the stream's <ms>-<seq>
SSE_ID = re.compile(r"\A[0-9]+-[0-9]+\Z")
#: generous bound for anything that should end by itself
ENDS_WITHIN = 30.0

Pairs = list[tuple[str, dict[str, Any]]]


def id_key(event_id: str) -> tuple[int, int]:
    ms, seq = event_id.split("-")
    return int(ms), int(seq)


class Log:
    """One test body for both shells: awaits the async log or calls the sync one
    (its blocking reads in a worker thread)."""

    def __init__(self, log: Any, is_async: bool, url: str) -> None:
        self.log = log
        self.is_async = is_async
        self.url = url
        self.port: RedisEventsPort = log.port

    async def _run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.log, name)(*args, **kwargs)
        return await result if self.is_async else result

    async def append(self, run: Any, event: Any) -> str:
        return str(await self._run("append", run, event))

    async def append_many(self, run: Any, events: Any) -> list[str]:
        return list(await self._run("append_many", run, events))

    async def close(self, run: Any, status: Any, error: Any = None) -> str:
        return str(await self._run("close", run, status, error=error))

    async def heartbeat(self, run: Any) -> None:
        await self._run("heartbeat", run)

    async def state(self, run: Any) -> Any:
        return await self._run("state", run)

    async def delete(self, runs: Any) -> None:
        await self._run("delete", runs)

    async def read(self, run: Any, *, after: Any = None, follow: bool = True) -> Pairs:
        """Every pair ``read`` yields until it ends (or raises), within ENDS_WITHIN seconds."""
        if self.is_async:

            async def collect() -> Pairs:
                return [p async for p in self.log.read(run, after=after, follow=follow)]

            return await asyncio.wait_for(collect(), ENDS_WITHIN)
        pairs = self.log.read(run, after=after, follow=follow)  # checks its input now
        return await asyncio.wait_for(asyncio.to_thread(list, pairs), ENDS_WITHIN)

    async def port_read(self, run: str, after: str | None) -> list[StoredEvent]:
        """One page straight from the port, as a follower's later pages are read."""
        op = self.port.read(run, after, 500, 0)
        if self.is_async:
            return await adrive(op, self.log._aexecute)
        return drive(op, self.log._execute)

    def count_requests(self) -> list[Any]:
        """From now on, every request the log sends is recorded in the returned list."""
        seen: list[Any] = []
        if self.is_async:
            inner = self.log._aexecute

            async def acount(request: Any) -> Any:
                seen.append(request)
                return await inner(request)

            self.log._aexecute = acount
        else:
            inner_sync = self.log._execute

            def count(request: Any) -> Any:
                seen.append(request)
                return inner_sync(request)

            self.log._execute = count
        return seen

    def resend_appends(self) -> None:
        """Send every append script call twice, as a retry after a lost reply would."""
        if self.is_async:
            inner = self.log._aexecute

            async def atwice(request: Any) -> Any:
                if isinstance(request, Script) and request.name == "events_append":
                    await inner(request)
                return await inner(request)

            self.log._aexecute = atwice
        else:
            inner_sync = self.log._execute

            def twice(request: Any) -> Any:
                if isinstance(request, Script) and request.name == "events_append":
                    inner_sync(request)
                return inner_sync(request)

            self.log._execute = twice

    async def write_later(
        self, run: str, events: list[dict[str, Any]], every: float, status: str | None
    ) -> list[str]:
        """Append ``events`` one at a time, ``every`` seconds apart, then close with
        ``status`` (unless None): from a thread for the sync log, a task for the async one."""
        if self.is_async:
            ids = []
            for event in events:
                await asyncio.sleep(every)
                ids.append(await self.log.append(run, event))
            if status is not None:
                ids.append(await self.log.close(run, status))
            return ids

        def write() -> list[str]:
            ids = []
            for event in events:
                time.sleep(every)
                ids.append(self.log.append(run, event))
            if status is not None:
                ids.append(self.log.close(run, status))
            return ids

        return await asyncio.to_thread(write)


@asynccontextmanager
async def open_log(target: tuple[str, bool], **options: Any) -> AsyncIterator[Log]:
    name, is_async = target
    url = by_name(name).url
    options.setdefault("key_prefix", unique_prefix("ev"))
    options.setdefault("ttl", 600)  # test runs clean up after themselves
    if is_async:
        async with graphkeep.aconnect_events(url, **options) as log:
            assert isinstance(log, AsyncRedisEventLog)
            yield Log(log, True, url)
    else:
        with graphkeep.connect_events(url, **options) as log:
            assert isinstance(log, RedisEventLog)
            yield Log(log, False, url)


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def log(target: tuple[str, bool]) -> AsyncIterator[Log]:
    async with open_log(target) as opened:
        yield opened


@pytest.fixture
def raw(target: tuple[str, bool]) -> Any:
    """A plain sync client on the same server, to look at the keys."""
    client = sync_client(by_name(target[0]).url)
    yield client
    client.close()


def keys_of(log: Log, run: str) -> tuple[str, str]:
    return log.port.stream_key(run), log.port.meta_key(run)


# -- ids and round trips -------------------------------------------------------------


async def test_ids_strictly_increase_across_calls_and_writers_and_are_sse_ids(log: Log) -> None:
    ids = [await log.append("r", {"n": 0})]
    ids += await log.append_many("r", [{"n": n} for n in range(1, 301)])
    ids.append(await log.append("r", {"n": 301}))
    # a second writer (another connection) appending to the same run keeps the order
    async with open_log(
        ("redis-cluster" if "cluster" in log.url else "redis", not log.is_async),
        key_prefix=log.port.prefix,
    ) as other:
        ids.append(await other.append("r", {"n": 302}))
    ids += await log.append_many("r", [{"n": 303}, {"n": 304}])
    assert all(SSE_ID.match(i) for i in ids)
    assert [id_key(i) for i in ids] == sorted({id_key(i) for i in ids}), "not strictly increasing"
    stored = await log.read("r", follow=False)
    assert [i for i, _ in stored] == ids
    assert [e["n"] for _, e in stored] == list(range(305))


async def test_append_many_of_a_hundred_events_is_one_round_trip(log: Log) -> None:
    await log.append("r", {"n": -1})
    seen = log.count_requests()
    ids = await log.append_many("r", [{"type": "token", "text": f"t{n}"} for n in range(100)])
    assert len(ids) == 100 and len(seen) == 1, seen
    await log.close("r", "success")
    assert len(seen) == 2
    pairs = await log.read("r", follow=False)
    assert len(pairs) == 102 and len(seen) == 4  # state + one XRANGE page


async def test_a_resent_append_call_is_stored_once(log: Log) -> None:
    log.resend_appends()
    one = await log.append("r", {"n": 0})
    many = await log.append_many("r", [{"n": n} for n in range(1, 51)])
    close = await log.close("r", "success")
    stored = await log.read("r", follow=False)
    assert [i for i, _ in stored] == [one, *many, close]
    assert [e.get("n") for _, e in stored] == [*range(51), None]


async def test_a_batch_larger_than_one_script_call_is_split_in_order(log: Log) -> None:
    count = CALL_EVENTS + 123
    seen = log.count_requests()
    ids = await log.append_many("r", [{"n": n} for n in range(count)])
    assert len(seen) == 2
    stored = await log.read("r", follow=False)
    assert [i for i, _ in stored] == ids
    assert [e["n"] for _, e in stored] == list(range(count))


# -- reading -------------------------------------------------------------------------


async def test_read_after_resumes_exactly_after_the_given_id(log: Log) -> None:
    ids = await log.append_many("r", [{"n": n} for n in range(20)])
    assert await log.read("r", after=ids[-1], follow=False) == []
    assert await log.read("r", after=f"{2**64 - 1}-{2**64 - 1}", follow=False) == []
    for cut in (0, 7, 18):
        pairs = await log.read("r", after=ids[cut], follow=False)
        assert [i for i, _ in pairs] == ids[cut + 1 :]
    # a well-formed id older than the run's first event reads it all
    assert [i for i, _ in await log.read("r", after="0-0", follow=False)] == ids


async def test_followers_get_every_live_event_once_and_end_at_close(log: Log) -> None:
    await log.heartbeat("r")  # the run exists before its first event: followers may start
    first = await log.append_many("r", [{"n": n} for n in range(5)])
    events = [{"n": n} for n in range(5, 45)]
    readers = [
        asyncio.ensure_future(log.read("r")),
        asyncio.ensure_future(log.read("r", after=first[2])),
    ]
    written = await log.write_later("r", events, 0.005, "success")
    from_start, from_middle = await asyncio.gather(*readers)
    ids = first + written
    assert [i for i, _ in from_start] == ids
    assert [i for i, _ in from_middle] == ids[3:]
    assert [e.get("n") for _, e in from_start] == [*range(45), None]
    assert from_start[-1][1] == {"type": "close", "status": "success"}
    # after the close, a late follower gets everything and ends at once
    assert await log.read("r") == from_start


async def test_read_without_follow_ends_at_the_last_stored_event(log: Log) -> None:
    ids = await log.append_many("r", [{"n": n} for n in range(3)])
    pairs = await log.read("r", follow=False)
    assert [i for i, _ in pairs] == ids


async def test_a_reader_that_breaks_out_leaves_nothing_behind(log: Log) -> None:
    await log.append_many("r", [{"n": n} for n in range(3)])
    if log.is_async:
        stream = log.log.read("r")
        got = [await stream.__anext__() for _ in range(2)]
        await stream.aclose()
    else:
        stream = log.log.read("r")
        got = [next(stream) for _ in range(2)]
        stream.close()
    assert [e["n"] for _, e in got] == [0, 1]
    assert await log.append("r", {"n": 3})  # the log still works


async def test_unknown_runs_raise_unknown_run(log: Log) -> None:
    with pytest.raises(UnknownRun):
        await log.read("never-written")
    with pytest.raises(UnknownRun):
        await log.read("never-written", follow=False)
    assert await log.state("never-written") is None


@pytest.mark.parametrize(
    "after", ["abc", "12", "-1-1", "1-", "-1", "1-2-3", " 1-2", "1-2\n", "١-٢", f"{2**64}-0", 5]
)
async def test_malformed_after_raises_invalid_input(log: Log, after: Any) -> None:
    await log.append("r", {"n": 0})
    with pytest.raises(InvalidInput):
        await log.read("r", after=after)


# -- close ---------------------------------------------------------------------------


async def test_appending_after_close_raises_run_closed_and_writes_nothing(
    log: Log, raw: Any
) -> None:
    ids = await log.append_many("r", [{"n": 0}, {"n": 1}])
    close = await log.close("r", "error", error="model timed out")
    stream, _ = keys_of(log, "r")
    before = raw.xlen(stream)
    with pytest.raises(RunClosed):
        await log.append("r", {"n": 2})
    with pytest.raises(RunClosed):
        await log.append_many("r", [{"n": 3}, {"n": 4}])
    with pytest.raises(RunClosed):
        await log.close("r", "success")
    assert raw.xlen(stream) == before == 3
    pairs = await log.read("r")
    assert [i for i, _ in pairs] == [*ids, close]
    assert pairs[-1][1] == {"type": "close", "status": "error", "error": "model timed out"}
    state = await log.state("r")
    assert state.closed == "error"


async def test_bad_close_status_raises_invalid_input(log: Log) -> None:
    await log.append("r", {"n": 0})
    with pytest.raises(InvalidInput):
        await log.close("r", "done")
    assert (await log.state("r")).closed is None


# -- writer gone ---------------------------------------------------------------------


async def test_followers_raise_run_stale_when_the_writer_stops(target: tuple[str, bool]) -> None:
    async with open_log(target, stale_after=0.5) as log:
        await log.append("r", {"n": 0})
        started = time.monotonic()
        with pytest.raises(RunStale):
            await log.read("r")
        assert 0.4 <= time.monotonic() - started < ENDS_WITHIN


async def test_followers_wait_while_heartbeats_continue(target: tuple[str, bool]) -> None:
    async with open_log(target, stale_after=0.5) as log:
        await log.append("r", {"n": 0})
        reader = asyncio.ensure_future(log.read("r"))
        for _ in range(12):  # 1.2 s of silence in events, well past stale_after
            await asyncio.sleep(0.1)
            await log.heartbeat("r")
        await log.append("r", {"n": 1})
        await log.close("r", "interrupted")
        pairs = await reader
        assert [e.get("n") for _, e in pairs] == [0, 1, None]
        assert pairs[-1][1]["status"] == "interrupted"


# -- bad input -----------------------------------------------------------------------


class Opaque:
    pass


BAD_EVENTS: list[Any] = [
    {"set": {1, 2}},
    {"nan": math.nan},
    {"inf": -math.inf},
    {"object": Opaque()},
    ["not", "a", "dict"],
    "text",
    None,
    {"big": "x" * MAX_EVENT_BYTES},
]


async def test_bad_events_raise_invalid_input_and_write_nothing(log: Log, raw: Any) -> None:
    stream, meta = keys_of(log, "r")
    for event in BAD_EVENTS:
        with pytest.raises(InvalidInput):
            await log.append("r", event)
        with pytest.raises(InvalidInput):
            await log.append_many("r", [{"ok": 1}, event])
    with pytest.raises(InvalidInput):
        await log.append_many("r", {"a": 1})
    for bad_run in ["", None, 7, "nul\x00", "x" * 513]:
        with pytest.raises(InvalidInput):
            await log.append(bad_run, {"ok": 1})
    assert raw.exists(stream, meta) == 0
    # right at the limit is fine
    text = "x" * (MAX_EVENT_BYTES - len(json.dumps({"big": ""}, separators=(",", ":"))))
    assert await log.append("r", {"big": text})
    assert raw.xlen(stream) == 1


async def test_run_ids_and_prefixes_never_see_each_other(log: Log) -> None:
    runs = ["a", "A", "a{b}", "{", "}", "a%7Bb%7D", "a%", "a/b", "a#b", "ключ🙂", "a b", "a:s"]
    for n, run in enumerate(runs):
        await log.append_many(run, [{"run": run, "n": n}, {"run": run, "n": n}])
    for n, run in enumerate(runs):
        pairs = await log.read(run, follow=False)
        assert [e for _, e in pairs] == [{"run": run, "n": n}] * 2
    async with open_log(
        ("redis-cluster" if "cluster" in log.url else "redis", log.is_async)
    ) as other:
        with pytest.raises(UnknownRun):
            await other.read("a", follow=False)
        await other.append("a", {"other": True})
    assert [e for _, e in await log.read("a", follow=False)] == [{"run": "a", "n": 0}] * 2
    await log.delete(runs[:6])
    for run in runs[:6]:
        assert await log.state(run) is None
    assert len(await log.read("a/b", follow=False)) == 2


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        with graphkeep.connect_events(by_name("redis").url, max_events=0):
            pass
    with pytest.raises(ConfigurationError):
        with graphkeep.connect_events(by_name("redis").url, poll_every=1):
            pass


# -- retention -----------------------------------------------------------------------


async def test_max_events_bounds_the_stream_and_resuming_before_it_raises_events_trimmed(
    target: tuple[str, bool], raw: Any
) -> None:
    async with open_log(target, max_events=150) as log:
        ids = []
        for at in range(0, 600, 50):
            ids += await log.append_many("r", [{"n": n} for n in range(at, at + 50)])
        stream, _ = keys_of(log, "r")
        kept = raw.xlen(stream)
        assert 150 <= kept <= 150 + 100  # MAXLEN ~ drops whole nodes (100 entries)
        pairs = await log.read("r", follow=False)
        assert [i for i, _ in pairs] == ids[-kept:]
        state = await log.state("r")
        assert state.trimmed_through == ids[-kept - 1]  # exactly the newest dropped event
        with pytest.raises(EventsTrimmed):
            await log.read("r", after=ids[0], follow=False)
        with pytest.raises(EventsTrimmed):
            await log.read("r", after=ids[-kept - 2])
        # a reader that saw the newest dropped event lost nothing: it resumes
        resumed = await log.read("r", after=ids[-kept - 1], follow=False)
        assert resumed == pairs


async def test_a_follower_overtaken_by_trimming_gets_events_trimmed_not_a_gap(
    target: tuple[str, bool],
) -> None:
    async with open_log(target, max_events=100) as log:
        ids = await log.append_many("r", [{"n": n} for n in range(50)])
        assert [e.event_id for e in await log.port_read("r", ids[9])] == ids[10:]
        # the follower is at ids[9] when 300 more events push ids[10..] out
        ids += await log.append_many("r", [{"n": n} for n in range(50, 350)])
        with pytest.raises(EventsTrimmed):
            await log.port_read("r", ids[9])
        newest_dropped = (await log.state("r")).trimmed_through
        kept = await log.port_read("r", newest_dropped)
        assert [e.event_id for e in kept] == ids[ids.index(newest_dropped) + 1 :]
        assert [e.event_id for e in await log.port_read("r", None)] == [e.event_id for e in kept]


async def test_trimmed_through_is_exact_when_every_append_starts_a_new_millisecond(
    target: tuple[str, bool], raw: Any
) -> None:
    async with open_log(target, max_events=100) as log:
        ids = []
        for n in range(260):
            ids.append(await log.append("r", {"n": n}))
            await asyncio.sleep(0.0012)  # the next id starts a new millisecond: <ms>-0
        assert sum(id_key(i)[1] == 0 for i in ids) > 200
        stream, _ = keys_of(log, "r")
        kept = raw.xlen(stream)
        assert 100 <= kept < 260
        assert id_key(ids[-kept])[1] == 0  # the first kept event names its predecessor
        state = await log.state("r")
        assert state.trimmed_through == ids[-kept - 1]
        assert await log.read("r", after=ids[-kept - 1], follow=False) == await log.read(
            "r", follow=False
        )
        with pytest.raises(EventsTrimmed):
            await log.read("r", after=ids[-kept - 2], follow=False)


async def test_ttl_is_set_on_both_keys_and_slides_with_appends_and_heartbeats(
    target: tuple[str, bool], raw: Any
) -> None:
    async with open_log(target, ttl=5) as log:
        await log.append("r", {"n": 0})
        stream, meta = keys_of(log, "r")
        first = [raw.pttl(stream), raw.pttl(meta)]
        assert all(4000 < t <= 5000 for t in first), first
        await asyncio.sleep(1.2)
        aged = raw.pttl(stream)
        assert aged < first[0] - 800
        await log.append("r", {"n": 1})
        assert raw.pttl(stream) > aged + 800 and raw.pttl(meta) > aged + 800
        await asyncio.sleep(1.2)
        aged = raw.pttl(meta)
        await log.heartbeat("r")
        assert raw.pttl(stream) > aged + 800 and raw.pttl(meta) > aged + 800
    async with open_log(target, ttl=None) as log:
        await log.append("r", {"n": 0})
        await log.heartbeat("r")
        assert [raw.pttl(k) for k in keys_of(log, "r")] == [-1, -1]
        await log.delete("r")


async def test_an_expired_run_is_unknown(target: tuple[str, bool]) -> None:
    async with open_log(target, ttl=0.3) as log:
        await log.append("r", {"n": 0})
        assert len(await log.read("r", follow=False)) == 1
        await asyncio.sleep(0.8)
        assert await log.state("r") is None
        with pytest.raises(UnknownRun):
            await log.read("r", follow=False)


@pytest.mark.parametrize("server", SERVERS)
def test_fifty_thousand_events_keep_the_stream_memory_bounded(server: str) -> None:
    url = by_name(server).url
    with graphkeep.connect_events(url, key_prefix=unique_prefix("mem"), max_events=1000) as log:
        stream = log.port.stream_key("r")
        event = {"type": "token", "text": "lorem ipsum"}
        usage: dict[int, int] = {}
        for done in range(500, 50_001, 500):
            log.append_many("r", [event] * 500)
            if done in (2_000, 10_000, 50_000):
                usage[done] = log.client.memory_usage(stream, samples=0)
        length = log.client.xlen(stream)
        print(f"\n[{server}] stream after 50,000 events, max_events=1000: {length} entries,")
        print("  MEMORY USAGE " + ", ".join(f"{n:,} events: {b:,} B" for n, b in usage.items()))
        assert 1000 <= length <= 1100
        assert usage[50_000] <= usage[2_000] * 1.25  # flat once max_events is reached
        assert usage[50_000] < 200_000  # ~1,100 entries of ~40 bytes, never 50,000
        log.delete("r")


@pytest.mark.parametrize("server", SERVERS)
def test_append_many_is_far_faster_than_one_append_per_event(server: str) -> None:
    url = by_name(server).url
    with graphkeep.connect_events(url, key_prefix=unique_prefix("tput")) as log:
        event = {"type": "token", "text": "lorem ipsum"}
        started = time.perf_counter()
        for _ in range(2000):
            log.append("one", event)
        single = 2000 / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(200):
            log.append_many("many", [event] * 100)
        batched = 20_000 / (time.perf_counter() - started)
        print(
            f"\n[{server}] append: {single:,.0f} events/s;"
            f" append_many(100): {batched:,.0f} events/s ({batched / single:.0f}x)"
        )
        assert batched > 2 * single
        log.delete(["one", "many"])


# -- sync and async together ---------------------------------------------------------


@pytest.mark.parametrize("server", SERVERS)
async def test_a_sync_writer_thread_and_an_async_reader_share_a_run(server: str) -> None:
    url = by_name(server).url
    prefix = unique_prefix("mix")
    async with graphkeep.aconnect_events(url, key_prefix=prefix) as alog:
        with graphkeep.connect_events(url, key_prefix=prefix) as slog:
            slog.heartbeat("r")
            written: list[str] = []

            def write() -> None:
                for n in range(200):
                    if n % 20 == 0:
                        time.sleep(0.01)
                    written.append(slog.append("r", {"n": n}))
                written.append(slog.close("r", "success"))

            writer = threading.Thread(target=write)

            async def collect() -> Pairs:
                return [p async for p in alog.read("r")]

            reader = asyncio.ensure_future(collect())
            writer.start()
            pairs = await asyncio.wait_for(reader, ENDS_WITHIN)
            writer.join()
            assert [i for i, _ in pairs] == written
            # the async log serves a blocking reader on another thread too
            again = await asyncio.to_thread(lambda: list(alog.sync_read("r")))
            assert again == pairs
