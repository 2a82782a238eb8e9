"""``saver.watch`` / ``saver.awatch``: a thread's checkpoints as they are committed.

One op for every store, run sync or async like every saver op. Two ways in:

- a store with a native feed (:class:`~graphkeep.checkpoint.port.Feed`, Redis: a Stream per
  thread appended by the put script) is read blocking; its order is the commit order;
- every other store is polled with
  :meth:`~graphkeep.checkpoint.port.CheckpointPort.commits` (an indexed query on the
  checkpoint id): a read that found new checkpoints is followed by the next at once (a
  burst is drained, not paced), one that found none by a pause of ``poll_interval``, backing
  off to ``max_poll_interval`` once the thread has been idle for a while
  (:class:`~graphkeep.port.Backoff`).

Polling reads ids above a *settled* floor, not above the last id seen: a checkpoint whose
id is lower than one already seen (two writers, or a subgraph's put finishing after its
parent's) still shows up while it is younger than ``SETTLE`` seconds; ids seen in that
window are remembered so none is yielded twice.

``after=<checkpoint_id>`` first yields every checkpoint with a higher id (the commits after
it: checkpoint ids grow with time), then goes on live — a client that remembers the last id
it saw misses none. Without ``after`` the watch starts at the call, not at its first read
(made when iteration starts; for ``awatch`` in a task, when that task first runs): that read
notes where the thread ends and, when its newest checkpoint was made after the call (a uuid6
id carries its time), also yields every checkpoint made after the call.

``timeout`` ends the iterator after that many seconds without a new checkpoint. A burst
(or a backlog) is loaded a ``list`` page at a time per namespace, each checkpoint as
``get_tuple`` would return it; a lone commit is one ``get_tuple``; one deleted in between
(prune, delete_thread) is skipped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphkeep.checkpoint.ids import id_at, id_time, normalize_checkpoint_id, normalize_namespace
from graphkeep.port import Backoff, Emit, Op, Sleep
from graphkeep.port.checks import check_seconds

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple

    from graphkeep.checkpoint.saver import SaverBase

#: checkpoints read per ``commits`` page
PAGE = 200
#: seconds a checkpoint id may commit after a higher one and still be seen by a poller
SETTLE = 2.0
#: longest single blocking read on a feed (ms); the loop re-checks ``timeout`` after each
MAX_BLOCK_MS = 5000
DEFAULT_POLL_INTERVAL = 0.2
DEFAULT_MAX_POLL_INTERVAL = 2.0


def watch_op(
    saver: SaverBase,
    thread_id: Any,
    *,
    after: Any = None,
    checkpoint_ns: Any = "",
    timeout: Any = None,
    poll_interval: Any = DEFAULT_POLL_INTERVAL,
    max_poll_interval: Any = DEFAULT_MAX_POLL_INTERVAL,
) -> Op[None]:
    """The op emitting the thread's new ``CheckpointTuple``s in commit order, each once.

    Arguments are checked here, before the op runs (bad input raises at the call).
    """
    thread = saver.check_thread_id(thread_id)
    limit = saver.max_id_bytes
    ns = None if checkpoint_ns is None else normalize_namespace(checkpoint_ns, max_bytes=limit)
    start = None if after is None else normalize_checkpoint_id(after, max_bytes=limit)
    wait = None if timeout is None else check_seconds(timeout, "timeout")
    interval = check_seconds(poll_interval, "poll_interval", finite=True)
    longest = max(check_seconds(max_poll_interval, "max_poll_interval", finite=True), interval)
    since = time.time()  # without ``after``, the watch starts here, at the call
    watched = Watched(saver, thread, ns, since, wait)
    if saver.port.feed:
        return _follow_feed(watched, start)
    return _poll(watched, start, interval, longest)


@dataclass(frozen=True, slots=True)
class Watched:
    """What one watch follows: the ``thread`` of ``saver`` in namespace ``ns`` (None: every
    one), from the call made at ``since`` until ``wait`` seconds pass without a new
    checkpoint (None: it never ends)."""

    saver: SaverBase
    thread: str
    ns: str | None
    since: float
    wait: float | None


def _from_the_call(watched: Watched) -> Op[tuple[str | None, bool]]:
    """Where a watch without ``after`` starts, read at its first read: the thread's newest
    checkpoint id then, or — when that checkpoint was made after the call (``since``), so
    others made after the call may have committed before this read — the call's instant
    (``id_at(since)``); and whether it is the latter. Ids that carry no time (not uuid6)
    keep the newest."""
    newest = yield from watched.saver.port.newest_commit(watched.thread, watched.ns)
    made = None if newest is None else id_time(newest)
    if made is not None and made > watched.since:
        return id_at(watched.since), True
    return newest, False


def _emit(
    watched: Watched,
    commits: Iterable[tuple[str, str]],
    span: Iterable[tuple[str, str]] | None = None,
    newest: bool = True,
) -> Op[int]:
    """Load and emit each of ``commits`` (ascending); returns how many were emitted.

    A burst is read in pages, not one ``get_tuple`` each: per namespace, one ``list``
    page of the checkpoints ``span`` (every commit of the read that found ``commits``,
    default ``commits`` itself) holds there — the newest ones when ``newest``, else those
    below the span's highest id, which is loaded alone. A commit the page does not hold
    (one that landed in between, or a store's shorter page) is loaded alone too; one
    deleted in between (prune, delete_thread) is skipped.
    """
    commits = list(commits)
    loaded: dict[tuple[str, str], CheckpointTuple] = {}
    if len(commits) > 1:
        wanted = set(commits)
        for ns in dict.fromkeys(ns for ns, _ in commits):
            ids = sorted(c for n, c in (commits if span is None else span) if n == ns)
            if sum(1 for n, _ in commits if n == ns) < 2:
                continue
            before = None if newest else ids.pop()
            if not ids:
                continue
            page = yield from watched.saver.newest_op(watched.thread, ns, len(ids), before)
            for one in page:
                key = (ns, one.config["configurable"]["checkpoint_id"])
                if key in wanted:
                    loaded[key] = one
    count = 0
    for ns, checkpoint_id in commits:
        found = loaded.get((ns, checkpoint_id))
        if found is None:
            found = yield from watched.saver.load_op(watched.thread, ns, checkpoint_id)
        if found is not None:
            watched.saver.telemetry.watch_lag(found.checkpoint.get("ts"))
            yield Emit(found)
            count += 1
    return count


def _backlog(watched: Watched, above: str) -> Op[list[tuple[str, str]]]:
    """Emit every commit with an id above ``above``, ascending, a page at a time; returns
    them."""
    found: list[tuple[str, str]] = []
    while True:
        page = yield from watched.saver.port.commits(watched.thread, watched.ns, above, PAGE)
        found += page
        yield from _emit(watched, page, newest=len(page) < PAGE)
        if len(page) < PAGE:
            return found
        above = page[-1][1]


def _follow_feed(watched: Watched, start: str | None) -> Op[None]:
    store: Any = watched.saver.port
    position = yield from store.feed_end(watched.thread)
    if start is None:  # the feed has what commits from now on; before now, the index
        floor, lowered = yield from _from_the_call(watched)
        start = floor if lowered else None
    pending: set[tuple[str, str]] = set()
    if start is not None:
        backlog = yield from _backlog(watched, start)
        pending = set(backlog)  # may show up again in the feed: skip them there
    last = time.monotonic()
    while True:
        block = MAX_BLOCK_MS
        if watched.wait is not None:
            left = watched.wait - (time.monotonic() - last)
            if left <= 0:
                return
            block = max(1, min(block, math.ceil(left * 1000)))
        entries, position = yield from store.feed_read(watched.thread, position, block)
        fresh = []
        for entry in entries:
            if entry in pending:
                pending.discard(entry)
            elif watched.ns is None or entry[0] == watched.ns:
                fresh.append(entry)
        if (yield from _emit(watched, fresh)):
            last = time.monotonic()


def _poll(watched: Watched, start: str | None, interval: float, longest: float) -> Op[None]:
    store = watched.saver.port
    floor = start
    if floor is None:
        floor, _ = yield from _from_the_call(watched)
    #: commits above ``floor`` already emitted, with when they were first seen
    recent: dict[tuple[str, str], float] = {}
    backoff = Backoff(interval, longest)
    while True:
        emitted = 0
        above = floor
        while True:
            page = yield from store.commits(watched.thread, watched.ns, above, PAGE)
            now = time.monotonic()
            fresh = [c for c in page if c not in recent]
            for commit in fresh:
                recent[commit] = now
            emitted += yield from _emit(watched, fresh, page, newest=len(page) < PAGE)
            if len(page) < PAGE:
                break
            above = page[-1][1]  # a full page: read on right away
        # raise the floor to the highest id first seen SETTLE seconds ago or more
        settled = [c[1] for c, seen in recent.items() if now - seen >= SETTLE]
        if settled:
            floor = max(settled) if floor is None else max(floor, *settled)
            recent = {c: seen for c, seen in recent.items() if c[1] > floor}
        if emitted:
            backoff.news()  # silence counts from the end of what was just handed out
            continue  # a busy thread: read on at once, until a read finds nothing new
        idle = backoff.quiet
        if watched.wait is not None and idle >= watched.wait:
            return
        delay = backoff.pause()
        yield Sleep(delay if watched.wait is None else min(delay, max(0.001, watched.wait - idle)))
