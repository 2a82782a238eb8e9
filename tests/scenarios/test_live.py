"""Live threads and resumable run streams (issue #11) on every backend set-up, sync and async.

- a watcher in ANOTHER process follows a 50-turn run; it is killed with SIGKILL mid-run and a
  new one resumes with ``after=`` the last id the first printed: together they saw every
  checkpoint of the run once, in commit order (``saver.list`` is the reference);
- 20 runs on 20 threads at once, one watcher each: each sees all of its thread and nothing else;
- an event log takes 5,000 events (``append_many`` in small batches, then ``close``) while 3
  followers read; one disconnects at a random event and resumes with ``after``: all three end
  with the identical 5,000 events and the close event;
- a writer process heart-beating its run is killed with SIGKILL before ``close``: followers that
  kept going while it lived end with ``RunStale`` once it is gone (``stale_after=1``);
- retention: ``max_events`` holds (and bounds the memory of a run on Redis, measured against the
  same events kept unbounded); a run is gone (``UnknownRun``) ``ttl`` after its last append,
  which slides; MongoDB and DynamoDB documents/items carry the matching native expiry;
- bad input (unknown runs, malformed ``after`` ids, non-JSON and over-limit events) raises a
  ``graphkeep.errors`` error and leaves every stored byte as it was.

The event-log and watch call shapes come from the matrix (:mod:`conformance.store.api`): an
:class:`~conformance.store.api.EventsApi` serves the sync or async log behind one call shape
and drains followers in the background (a thread, or a task on its private loop).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from uuid import uuid4

import pytest

from conformance.factory import Api, AsyncApi, Mode
from conformance.store.api import Collector, EventsApi, StoreFactory, store_connector_for
from conformance.store.events import RETENTION_SLACK, retention_floor
from graphkeep.errors import InvalidInput, RunStale, UnknownRun
from graphkeep.events.port import MAX_EVENT_BYTES
from tests.scenarios import live_worker
from tests.scenarios.backends import (
    MODES,
    SETUPS,
    Graph,
    RawMongoDB,
    RawRedis,
    Store,
    thread_config,
)
from tests.scenarios.graphs import chat_graph, user_line

TURNS = 50
KILL_AT_TURN, RESTART_AT_TURN = 15, 25
CONCURRENT_RUNS, TURNS_EACH = 20, 2
EVENTS, BATCH = 5000, 20
#: how many ttls a store's native reaper may wait past a run's expiry
REAPER_SLACK = 2
#: a process that does not finish within this is a hang, not slowness
PROCESS_BOUND_S = 120.0


# -- helpers -------------------------------------------------------------------------------


class Worker:
    """A live_worker process; a thread collects its COMPLETE stdout lines as they come."""

    def __init__(self, args: list[str], stderr: Path) -> None:
        self.stderr = stderr
        with stderr.open("wb") as sink:
            self.process = subprocess.Popen(
                args, cwd=live_worker.REPO, stdout=subprocess.PIPE, stderr=sink, text=True
            )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.endswith("\n"):  # a line cut by SIGKILL was never printed whole
                self.lines.append(line)

    def records(self) -> list[Any]:
        return [json.loads(line) for line in list(self.lines)]

    def _failure(self) -> str:
        return (
            f"worker exited {self.process.returncode}:\n{self.stderr.read_text(errors='replace')}"
        )

    def wait_lines(self, count: int, within: float = 60.0) -> list[Any]:
        deadline = time.monotonic() + within
        while len(self.lines) < count:
            assert self.process.poll() is None, self._failure()
            assert time.monotonic() < deadline, f"{len(self.lines)} lines after {within} s"
            time.sleep(0.02)
        return self.records()

    def kill_9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        assert self.process.returncode == -signal.SIGKILL

    def finish(self, within: float = PROCESS_BOUND_S) -> list[Any]:
        """Wait for a normal exit; its lines."""
        self.process.wait(timeout=within)
        self._reader.join(timeout=30)
        assert self.process.returncode == 0, self._failure()
        return self.records()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _ids(api: Api, thread: str) -> list[str]:
    """The thread's checkpoint ids (every namespace), in commit (= id) order."""
    return sorted(
        t.config["configurable"]["checkpoint_id"] for t in api.list(thread_config(thread))
    )


def _is_marker(item: Any) -> bool:
    return bool(item.metadata.get("source") == "update")


@contextmanager
def event_log(store: Store, mode: Mode, **options: Any) -> Iterator[EventsApi]:
    """The set-up's event log under the test's prefix, behind the matrix's call shape."""
    setup = store.backend.setup
    factory = StoreFactory(setup, store_connector_for(setup), mode, key_prefix=store.prefix)
    with factory.open_events(**options) as log:
        yield log


def _nth(count: int) -> Any:
    """An ``until`` for a follower: true at the ``count``-th event (a client that drops)."""
    calls = itertools.count(1)
    return lambda _: next(calls) >= count


def new_run(tag: str = "run") -> str:
    return f"{tag}-{uuid4().hex[:10]}"


def _close(status: str) -> dict[str, Any]:
    return {"type": "close", "status": status}


# -- watch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_watcher_process_sees_a_50_turn_run_once_in_order_across_a_kill_9(
    store: Store, mode: Mode, thread_id: str, tmp_path: Path
) -> None:
    url, prefix = store.backend.url, store.prefix
    config = thread_config(thread_id)
    with store.open(mode) as api:
        graph = Graph(api, chat_graph())
        graph.invoke({"log": [user_line(thread_id, 0)]}, config)
        start = _ids(api, thread_id)[-1]
        watch = ("--mode", mode, "--after")
        first = Worker(
            live_worker.command("watch", url, prefix, thread_id, *watch, start),
            tmp_path / "first.err",
        )
        second: Worker | None = None
        try:
            for turn in range(1, TURNS + 1):
                graph.invoke({"log": [user_line(thread_id, turn)]}, config)
                if turn == KILL_AT_TURN:
                    first.wait_lines(3 * 5)  # live: it has printed checkpoints of this run
                    first.kill_9()
                if turn == RESTART_AT_TURN:
                    last_seen = first.records()[-1]["id"]
                    second = Worker(
                        live_worker.command(
                            "watch", url, prefix, thread_id, *watch, last_seen, "--timeout", "3"
                        ),
                        tmp_path / "second.err",
                    )
            assert second is not None
            expected = [i for i in _ids(api, thread_id) if i > start]
            before_kill, after_restart = first.records(), second.finish()
        finally:
            first.stop()
            if second is not None:
                second.stop()
    assert len(expected) == 3 * TURNS
    seen = [r["id"] for r in before_kill + after_restart]
    twice = sorted({i for i in seen if seen.count(i) > 1})
    assert not twice, f"checkpoints printed twice across the restart: {twice}"
    assert 0 < len(before_kill) < len(expected), "the kill did not land mid-run"
    missing, extra = sorted(set(expected) - set(seen)), sorted(set(seen) - set(expected))
    assert seen == expected, (
        f"first watcher: {len(before_kill)}, resumed one: {len(after_restart)},"
        f" missing: {[expected.index(i) for i in missing]}, extra: {extra[:5]}"
    )
    assert {r["thread"] for r in before_kill + after_restart} == {thread_id}


@pytest.mark.parametrize("mode", MODES)
def test_20_concurrent_runs_each_watcher_sees_all_of_its_thread_and_nothing_else(
    store: Store, mode: Mode
) -> None:
    tag = uuid4().hex[:6]
    threads = [f"live-{tag}-{i:02d}" for i in range(CONCURRENT_RUNS)]
    seen: dict[str, list[Any]] = {t: [] for t in threads}
    with store.open(mode) as api:
        graph = Graph(api, chat_graph())
        for thread in threads:
            graph.invoke({"log": [user_line(thread, 0)]}, thread_config(thread))
        starts = {t: _ids(api, t)[-1] for t in threads}
        saver: Any = api.saver
        compiled = graph.compiled
        if mode == "sync":

            def watch(thread: str) -> None:
                with closing(saver.watch(thread, after=starts[thread], timeout=60)) as items:
                    for item in items:
                        seen[thread].append(item)
                        if _is_marker(item):
                            break

            def run(thread: str) -> None:
                config = thread_config(thread)
                for turn in range(1, TURNS_EACH + 1):
                    compiled.invoke({"log": [user_line(thread, turn)]}, config)
                compiled.update_state(config, {"log": ["end"]})

            with ThreadPoolExecutor(2 * CONCURRENT_RUNS) as pool:
                futures = [pool.submit(watch, t) for t in threads]
                futures += [pool.submit(run, t) for t in threads]
                for future in futures:
                    future.result(timeout=PROCESS_BOUND_S)
        else:

            async def awatch(thread: str) -> None:
                items = saver.awatch(thread, after=starts[thread], timeout=60)
                try:
                    async for item in items:
                        seen[thread].append(item)
                        if _is_marker(item):
                            break
                finally:
                    await items.aclose()

            async def arun(thread: str) -> None:
                config = thread_config(thread)
                for turn in range(1, TURNS_EACH + 1):
                    await compiled.ainvoke({"log": [user_line(thread, turn)]}, config)
                await compiled.aupdate_state(config, {"log": ["end"]})

            async def everyone() -> None:
                await asyncio.gather(*(awatch(t) for t in threads), *(arun(t) for t in threads))

            assert isinstance(api, AsyncApi)
            api.run(asyncio.wait_for(everyone(), PROCESS_BOUND_S))
        expected = {t: [i for i in _ids(api, t) if i > starts[t]] for t in threads}
    for thread in threads:
        items = seen[thread]
        assert {t.config["configurable"]["thread_id"] for t in items} == {thread}, (
            f"{thread}'s watcher saw another thread's checkpoints"
        )
        got = [t.config["configurable"]["checkpoint_id"] for t in items]
        assert len(expected[thread]) == 3 * TURNS_EACH + 1
        assert got == expected[thread], f"{thread}: {len(got)} of {len(expected[thread])}"


# -- the run event log ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_5000_events_reach_3_followers_identically_one_resuming_after_a_disconnect(
    store: Store, mode: Mode
) -> None:
    run = new_run()
    events = [{"i": n, "text": f"token {n}"} for n in range(EVENTS)]
    cut = random.Random().randrange(1, EVENTS)  # where the flaky reader drops its connection
    with event_log(store, mode) as writer, event_log(store, mode) as readers:
        with event_log(store, mode) as reconnected:
            ids = writer.append_many(run, events[:BATCH])
            steady = [readers.follow(run), readers.follow(run)]
            flaky = readers.follow(run, until=_nth(cut))
            resumed: Collector[tuple[str, dict[str, Any]]] | None = None
            for at in range(BATCH, EVENTS, BATCH):
                ids += writer.append_many(run, events[at : at + BATCH])
                if resumed is None and flaky.done:  # reconnect while the run goes on
                    resumed = reconnected.follow(run, after=flaky.result()[-1][0])
            ids.append(writer.close(run, "success"))
            dropped = flaky.result(within=PROCESS_BOUND_S)
            assert len(dropped) == cut
            if resumed is None:
                resumed = reconnected.follow(run, after=dropped[-1][0])
            results = {
                "steady-1": steady[0].result(within=PROCESS_BOUND_S),
                "steady-2": steady[1].result(within=PROCESS_BOUND_S),
                "resumed": dropped + resumed.result(within=PROCESS_BOUND_S),
            }
    expected = list(zip(ids, [*events, _close("success")], strict=True))
    for name, got in results.items():
        assert len(got) == len(expected), f"{name} (cut at {cut}): {len(got)} events"
        assert got == expected, f"{name} (cut at {cut}) differs from what was written"


@pytest.mark.parametrize("mode", MODES)
def test_followers_end_with_run_stale_once_the_writer_is_killed_before_close(
    store: Store, mode: Mode, tmp_path: Path
) -> None:
    run = new_run()
    url, prefix = store.backend.url, store.prefix
    writer = Worker(
        live_worker.command("write", url, prefix, run, "--events", "30", "--mode", mode),
        tmp_path / "writer.err",
    )
    try:
        (ids,) = writer.wait_lines(1)
        with event_log(store, mode, stale_after=1) as log:
            from_start, from_middle = log.follow(run), log.follow(run, after=ids[9])
            from_start.pause(2.5)  # silent but heart-beating: nobody gives up on it
            assert not from_start.done and not from_middle.done, (
                f"a follower ended while the writer was alive: {from_start.error!r}"
                f" / {from_middle.error!r}"
            )
            writer.kill_9()
            killed = time.monotonic()
            for follower, expected in ((from_start, ids), (from_middle, ids[10:])):
                with pytest.raises(RunStale):
                    follower.result(within=30)
                assert [i for i, _ in follower.items] == expected
            assert time.monotonic() - killed < 30
            log.delete(run)
    finally:
        writer.stop()


def test_max_events_holds_and_bounds_the_memory_of_a_run(store: Store) -> None:
    run = new_run()
    payload = "x" * 200
    batches = [[{"i": b * 50 + j, "text": payload} for j in range(50)] for b in range(40)]
    with event_log(store, "sync", max_events=100) as log:
        ids = [i for batch in batches for i in log.append_many(run, batch)]
        kept = log.read(run)
        low, high = retention_floor(100), 100 + RETENTION_SLACK
        assert low <= len(kept) <= high, f"max_events=100 kept {len(kept)}"
        assert [i for i, _ in kept] == ids[-len(kept) :], "retention kept other than the newest"
        assert [e["i"] for _, e in kept] == list(range(2000 - len(kept), 2000))
        if not isinstance(store.backend.raw, RawRedis):
            return
        unbounded = store.sibling("unbounded")
        with event_log(unbounded, "sync", max_events=10_000) as full:
            for batch in batches:
                full.append_many(run, batch)
            bounded_bytes = _redis_memory(store)
            full_bytes = _redis_memory(unbounded)
    assert full_bytes > 2000 * len(payload), "the unbounded run is not where it was expected"
    assert bounded_bytes * 5 < full_bytes, (
        f"max_events=100 holds {bounded_bytes} bytes; 2,000 events unbounded {full_bytes}"
    )


def _redis_memory(store: Store) -> int:
    """``MEMORY USAGE`` of every key under the store's prefix, summed."""
    raw = RawRedis()
    client = raw._client(store.backend.url)
    try:
        return sum(
            int(client.memory_usage(key, samples=0) or 0) for key in raw._keys(client, store.prefix)
        )
    finally:
        client.close()


def test_a_run_disappears_ttl_after_its_last_append(store: Store) -> None:
    run = new_run()
    # a 2 s ttl: with 1 s, a loaded moto's slow append left the read past the slid expiry
    # (CI run E of 4b0d1b2); the read still comes after the first append's ttl
    with event_log(store, "sync", ttl=2) as log:
        first = log.append(run, {"i": 0})
        time.sleep(1.2)
        second = log.append(run, {"i": 1})  # slides the expiry
        time.sleep(1.2)
        assert [i for i, _ in log.read(run)] == [first, second], "expired before its ttl slid"
        time.sleep(3.2)
        assert log.state(run) is None, "the run outlived its ttl"
        with pytest.raises(UnknownRun):
            log.read(run)
        if isinstance(store.backend.raw, RawRedis):
            assert store.scan() == {}, "Redis kept keys of an expired run"


#: set-ups whose store removes expired data with a reaper of its own (a TTL index, a TTL
#: attribute); Redis expires keys itself: test_a_run_disappears_ttl_after_its_last_append
REAPED = [b.param() for b in SETUPS if not isinstance(b.raw, RawRedis)]


@pytest.mark.parametrize("backend", REAPED, indirect=True)
def test_stored_events_carry_the_stores_native_expiry(store: Store) -> None:
    """MongoDB: a TTL index's field; DynamoDB: the table's TTL attribute (epoch seconds).

    The store's own reaper must never remove a run before ``ttl`` after its last append and
    must remove it eventually: within ``REAPER_SLACK`` ttls (DynamoDB writes ``1.5 ttl`` so
    that older items are refreshed at most once per half ttl; reads hide a run at ``ttl``).
    (Redis: see the test above.)"""
    ttl = 3600
    run = new_run()
    with event_log(store, "sync", ttl=ttl) as log:
        log.append_many(run, [{"i": 0}, {"i": 1}])
        written = time.time()
        log.close(run, "success")
        expiries = (
            _mongodb_expiries(store)
            if isinstance(store.backend.raw, RawMongoDB)
            else _dynamodb_expiries(store)
        )
    assert expiries, "no stored event or run record carries an expiry"
    for expires in expiries:
        assert written + ttl - 5 <= expires <= time.time() + REAPER_SLACK * ttl + 5, (
            f"expiry {expires - written:.0f} s after the append; ttl is {ttl}"
        )


def _mongodb_expiries(store: Store) -> list[float]:
    """When each document under the prefix expires: by its collection's TTL index, or, on a
    server without TTL indexes (FerretDB), by an indexed field holding dates (the store
    then hides and sweeps expired documents itself)."""
    client, db = RawMongoDB._database(store.backend.url)
    found: list[float] = []
    try:
        for name in RawMongoDB._collections(db, store.prefix):
            for index in db[name].list_indexes():
                fields = list(index["key"])
                if len(fields) != 1 or fields[0] == "_id":
                    continue
                values = [d[fields[0]] for d in db[name].find({fields[0]: {"$exists": True}})]
                if "expireAfterSeconds" not in index and not (
                    values and all(isinstance(v, datetime) for v in values)
                ):
                    continue
                after = float(index.get("expireAfterSeconds", 0))
                for at in values:
                    if at.tzinfo is None:
                        at = at.replace(tzinfo=timezone.utc)
                    found.append(at.timestamp() + after)
    finally:
        client.close()
    return found


def _dynamodb_expiries(store: Store) -> list[float]:
    """Each item's TTL attribute, in every table of the URL's name family holding the prefix."""
    import boto3

    parts = urlsplit(store.backend.url)
    query = parse_qs(parts.query)
    client: Any = boto3.client(
        "dynamodb",
        region_name=query.get("region", ["us-east-1"])[0],
        endpoint_url=query.get("endpoint_url", [None])[0],
    )
    base = parts.netloc or parts.path.strip("/")
    found: list[float] = []
    tables = [t for t in client.list_tables()["TableNames"] if t.startswith(base)]
    for table in tables:
        spec = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        attribute = spec.get("AttributeName")
        if spec.get("TimeToLiveStatus") != "ENABLED" or not attribute:
            continue
        schema = client.describe_table(TableName=table)["Table"]["KeySchema"]
        partition = next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")
        for page in client.get_paginator("scan").paginate(
            TableName=table,
            ConsistentRead=True,
            FilterExpression="begins_with(#pk, :prefix) AND attribute_exists(#exp)",
            ExpressionAttributeNames={"#pk": partition, "#exp": attribute},
            ExpressionAttributeValues={":prefix": {"S": f"{store.prefix}#"}},
        ):
            found += [float(item[attribute]["N"]) for item in page["Items"]]
    return found


@pytest.mark.parametrize("mode", MODES)
def test_bad_event_input_raises_a_clear_error_and_changes_no_stored_byte(
    store: Store, mode: Mode
) -> None:
    run = new_run()
    fits = {"t": "x" * (MAX_EVENT_BYTES - len('{"t":""}'))}
    too_big = {"t": "x" * (MAX_EVENT_BYTES - len('{"t":""}') + 1)}
    with event_log(store, mode) as log:
        first = log.append(run, {"i": 0})
        stored = store.scan()
        assert stored, "the event is not where the raw scan looks"
        for unknown in (new_run("never"), "never"):
            with pytest.raises(UnknownRun):
                log.read(unknown)
            with pytest.raises(UnknownRun):
                log.read(unknown, follow=True)
            assert log.state(unknown) is None
        for after in ("garbage", "", "1-2-3-4", "-", 17, b"1-0", "\x00"):
            with pytest.raises(InvalidInput):
                log.read_call(run, after=after)
        non_json: list[Any] = [
            {"x": object()},
            {"x": b"bytes"},
            {"x": datetime.now()},
            {"x": float("nan")},
            {("tuple",): 1},
            "a string",
            [{"x": 1}],
        ]
        for bad in [*non_json, too_big]:
            with pytest.raises(InvalidInput):
                log.append(run, bad)
            with pytest.raises(InvalidInput):
                log.append_many(run, [{"ok": 1}, bad])
        with pytest.raises(InvalidInput, match=str(MAX_EVENT_BYTES)):
            log.append(run, too_big)
        assert store.scan() == stored, "a rejected call changed what is stored"
        assert log.read(run) == [(first, {"i": 0})]
        # the documented limit itself is accepted and read back whole, on every store
        big = new_run("big")
        big_id = log.append(big, fits)
        assert log.read(big) == [(big_id, fits)]
