"""events: the run event log of ``graphkeep.connect_events`` / ``aconnect_events``.

What every store's log must do (see :mod:`graphkeep.events.log`): events read back
exactly, in append order, under ids that strictly increase in the store's order (the port's
``id_key``) also across writers; ``read(after=id)`` yields exactly the events after ``id``;
the close event ends a follower and the run (later appends raise ``RunClosed``); unknown runs
raise ``UnknownRun``; bad input raises ``InvalidInput`` and writes nothing; ``max_events``
keeps the newest events (Redis up to one stream node more, :data:`RETENTION_SLACK`; MongoDB
down to a tenth fewer, :func:`retention_floor`) and a
resume point older than them raises ``EventsTrimmed``; a
followed run nobody appends to or heart-beats ends with ``RunStale``. Followers are drained
in the background (:class:`~conformance.store.api.Collector`) while the case writes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import uuid4

from conformance.store._registry import case
from conformance.store.api import EventsApi, StoreFactory
from graphkeep.errors import EventsTrimmed, InvalidInput, RunClosed, RunStale, UnknownRun

#: events whose JSON has every kind of value, keys a document store could trip on, unicode
SAMPLE: list[dict[str, Any]] = [
    {"type": "token", "text": "Hel"},
    {"type": "token", "text": "lo, wörld ✓ \U0001f600", "index": 1},
    {"nested": {"list": [1, 2.5, -3, True, False, None], "empty": {}}, "big": 2**70},
    {"$op": "not an operator", "a.b": "dotted key", "": "empty key", "n": 0.1},
    {},
]
HUGE = 300 * 1024  # bytes of text: over the documented 256 KiB event limit


def new_run(tag: str = "run") -> str:
    return f"{tag}-{uuid4().hex[:10]}"


def closing(status: str, error: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "close", "status": status}
    if error is not None:
        event["error"] = error
    return event


def _increasing(log: EventsApi, ids: list[str]) -> None:
    keys = [log.id_key(i) for i in ids]
    assert all(a < b for a, b in zip(keys, keys[1:], strict=False)), (
        f"event ids do not strictly increase: {ids}"
    )


def _raises(error: type[Exception], call: Callable[[], Any], what: str) -> None:
    try:
        call()
    except error:
        return
    except Exception as exc:
        raise AssertionError(f"{what}: raised {exc!r}, expected {error.__name__}") from exc
    raise AssertionError(f"{what}: accepted (expected {error.__name__})")


@case("events")
def events_read_back_exactly_in_order_under_increasing_ids(factory: StoreFactory) -> None:
    with factory.open_events() as log, factory.open_events() as second_writer:
        run = new_run()
        first = log.append(run, SAMPLE[0])
        rest = log.append_many(run, SAMPLE[1:])
        assert len(rest) == len(SAMPLE) - 1
        assert log.append_many(run, []) == []
        # another writer (its own connection) appends to the same run in between
        other = second_writer.append_many(run, [{"writer": 2, "i": i} for i in range(3)])
        last = log.append(run, {"writer": 1})
        got = log.read(run)
        assert [event for _, event in got] == [
            *SAMPLE,
            *({"writer": 2, "i": i} for i in range(3)),
            {"writer": 1},
        ]
        assert [event_id for event_id, _ in got] == [first, *rest, *other, last]
        _increasing(log, [event_id for event_id, _ in got])
        state = log.state(run)
        assert state is not None and state.closed is None and state.trimmed_through is None


@case("events")
def read_after_an_id_yields_exactly_the_events_after_it(factory: StoreFactory) -> None:
    with factory.open_events() as log:
        run = new_run()
        ids = log.append_many(run, [{"i": i} for i in range(12)])
        close_id = log.close(run, "success")
        everything = log.read(run)
        assert [i for i, _ in everything] == [*ids, close_id]
        for position in (0, 5, 10, 11):
            assert log.read(run, after=ids[position]) == everything[position + 1 :]
        assert log.read(run, after=close_id) == []
        # follow=True on a closed run: the rest, then it ends after the close event
        assert log.read(run, after=ids[7], follow=True) == everything[8:]


@case("events")
def close_ends_followers_and_later_appends_raise_run_closed(factory: StoreFactory) -> None:
    with factory.open_events() as log:
        run = new_run()
        first = log.append(run, {"i": 0})
        from_start = log.follow(run)
        from_first = log.follow(run, after=first)
        more = log.append_many(run, [{"i": 1}, {"i": 2}])
        close_id = log.close(run, "error", error="boom")
        expected = [(first, {"i": 0}), (more[0], {"i": 1}), (more[1], {"i": 2})]
        expected.append((close_id, closing("error", "boom")))
        assert from_start.result() == expected
        assert from_first.result() == expected[1:]
        _raises(RunClosed, lambda: log.append(run, {"late": 1}), "append after close")
        _raises(RunClosed, lambda: log.append_many(run, [{"late": 1}]), "append_many after close")
        _raises(RunClosed, lambda: log.close(run, "success"), "a second close")
        assert log.read(run) == expected, "a refused append after the close was written"
        state = log.state(run)
        assert state is not None and state.closed == "error"


@case("events")
def unknown_or_deleted_runs_raise_unknown_run(factory: StoreFactory) -> None:
    with factory.open_events() as log:
        never = new_run("never")
        assert log.state(never) is None
        _raises(UnknownRun, lambda: log.read(never), "read(follow=False) of an unknown run")
        _raises(UnknownRun, lambda: log.read(never, follow=True), "read(follow=True)")
        run, kept = new_run(), new_run("kept")
        log.append(run, {"i": 0})
        log.append(kept, {"i": 0})
        log.delete([run, never])  # an unknown run among them is no error
        assert log.state(run) is None
        _raises(UnknownRun, lambda: log.read(run), "read of a deleted run")
        assert [e for _, e in log.read(kept)] == [{"i": 0}], "delete removed another run"


BAD_RUN_IDS: list[Any] = ["", "run\x00", "r" * 600, 7, None, b"bytes"]
BAD_EVENTS: list[Any] = [
    ["not", "a", "dict"],
    "text",
    None,
    {"value": object()},
    {"value": math.nan},
    {"value": math.inf},
    {("tuple", "key"): 1},
    {"nested": [{"deeper": {1: "an int key"}}]},
    {"nested": ({"in a tuple": {2.5: 1}},)},
    {"value": {1, 2}},
    {"text": "y" * HUGE},
]
BAD_AFTER: list[Any] = ["garbage", "", 17, "1-2-3-4", "\x00"]


@case("events")
def bad_input_raises_invalid_input_and_writes_nothing(factory: StoreFactory) -> None:
    with factory.open_events() as log:
        run = new_run()
        first = log.append(run, {"i": 0})
        before, state = log.read(run), log.state(run)
        for bad in BAD_RUN_IDS:
            what = f"run id {bad!r:.40}"
            _raises(InvalidInput, partial(log.append, bad, {"i": 1}), f"append, {what}")
            _raises(InvalidInput, partial(log.append_many, bad, [{"i": 1}]), what)
            _raises(InvalidInput, partial(log.close, bad, "success"), f"close, {what}")
            _raises(InvalidInput, partial(log.heartbeat, bad), f"heartbeat, {what}")
            _raises(InvalidInput, partial(log.read_call, bad), f"read, {what}")
            _raises(InvalidInput, partial(log.state, bad), f"state, {what}")
        for bad in BAD_EVENTS:
            what = f"event {bad!r:.40}"
            _raises(InvalidInput, partial(log.append, run, bad), what)
            _raises(InvalidInput, partial(log.append_many, run, [{"ok": 1}, bad]), what)
        _raises(InvalidInput, lambda: log.append_many(run, {"i": 1}), "append_many(a dict)")
        for status in ("done", None, "SUCCESS", ""):
            _raises(InvalidInput, partial(log.close, run, status), f"close status {status!r}")
        for after in BAD_AFTER:
            _raises(InvalidInput, partial(log.read_call, run, after=after), f"after={after!r}")
        _raises(InvalidInput, lambda: log.read_call(run, follow="yes"), "follow='yes'")
        assert log.read(run) == before, "a rejected call wrote events"
        assert log.state(run) == state, "a rejected call changed the run"
        assert log.read(run, after=first) == []


#: how far past ``max_events`` a store may keep: Redis trims with ``XADD MAXLEN ~``, which
#: drops whole stream nodes (100 entries by default), so a run holds up to one node more
RETENTION_SLACK = 100


def retention_floor(max_events: int) -> int:
    """The fewest events a store may keep of a longer run: MongoDB trims in steps, down to
    ``max_events`` less a tenth, so that it deletes once per tenth, not on every append."""
    return max_events - max_events // 10


@case("events")
def max_events_keeps_the_newest_and_older_resume_points_raise(factory: StoreFactory) -> None:
    with factory.open_events(max_events=10) as log:
        run = new_run()
        ids: list[str] = []
        for chunk in range(5):
            ids += log.append_many(run, [{"i": chunk * 50 + j} for j in range(50)])
        kept = log.read(run)
        low, high = retention_floor(10), 10 + RETENTION_SLACK
        assert low <= len(kept) <= high, f"max_events=10 kept {len(kept)} events"
        assert kept == [(ids[i], {"i": i}) for i in range(250 - len(kept), 250)], (
            "retention must drop the oldest events and keep the rest in order"
        )
        state = log.state(run)
        assert state is not None and state.trimmed_through is not None
        assert state.trimmed_through == ids[249 - len(kept)], "trimmed_through: newest dropped"
        _raises(EventsTrimmed, lambda: log.read(run, after=ids[0]), "resume from a dropped id")
        assert log.read(run, after=ids[-2]) == kept[-1:]
        assert log.read(run, after=state.trimmed_through) == kept


@case("events")
def heartbeats_keep_a_quiet_run_followed_and_silence_raises_run_stale(
    factory: StoreFactory,
) -> None:
    with factory.open_events(stale_after=2) as log:
        run = new_run()
        log.heartbeat(run)  # a heartbeat alone creates the run
        state = log.state(run)
        assert state is not None and state.closed is None
        assert log.read(run) == []
        follower = log.follow(run)
        # 2.4 s without an event, never 2 s without a heartbeat (1.7 s of slack for a heartbeat's
        # round trip and the follower's poll); the longest time between one heartbeat's start and
        # the next one's end is measured: a machine so loaded that it reached 1.5 s left the run
        # silent for as long as stale_after allows, and its follower may rightly end
        longest, started = 0.0, time.monotonic()
        for _ in range(8):
            follower.pause(0.3)
            begun = time.monotonic()
            log.heartbeat(run)
            longest, started = max(longest, time.monotonic() - started), begun
        steady = longest < 1.5
        if steady:
            assert not follower.done, f"a heart-beaten run's follower ended: {follower.error!r}"
        event_id = log.append(run, {"at": "last"})
        close_id = log.close(run, "interrupted")
        if steady or not follower.done:
            expected = [(event_id, {"at": "last"}), (close_id, closing("interrupted"))]
            assert follower.result() == expected

        quiet = new_run("quiet")
        quiet_id = log.append(quiet, {"i": 0})
        stale = log.follow(quiet)
        _raises(RunStale, lambda: stale.result(within=30), "following a silent run")
        assert stale.items == [(quiet_id, {"i": 0})]


@case("events")
def runs_and_prefixes_never_see_each_others_events(factory: StoreFactory) -> None:
    with factory.open_events() as log, factory.sibling("other").open_events() as other:
        a, b = new_run("a"), new_run("b")
        log.append(a, {"run": "a"})
        log.append(b, {"run": "b"})
        other.append(a, {"run": "a", "prefix": "other"})
        follower = log.follow(a)
        log.append_many(b, [{"run": "b", "i": i} for i in range(3)])
        other.append_many(a, [{"run": "a", "prefix": "other", "i": i} for i in range(3)])
        other.close(a, "success")
        log.close(b, "success")
        log.append(a, {"run": "a", "i": 1})
        log.close(a, "success")
        assert [e for _, e in follower.result()] == [
            {"run": "a"},
            {"run": "a", "i": 1},
            closing("success"),
        ]
        assert [e for _, e in log.read(b)][:1] == [{"run": "b"}]
        assert all(e.get("prefix") == "other" for _, e in other.read(a)[:-1])
