"""Which runs of an event log belong to a thread: what ``graphkeep rekey --thread T`` rekeys.

A run of the log is tied to thread ``T`` when

- it is ``T``'s AG-UI index of runs (:func:`index_id`: ``agui.thread.<sha256 of T>``, which
  :mod:`graphkeep.agui` keeps beside the runs it starts);
- its first event names ``T`` as ``threadId``: the ``RUN_STARTED`` every AG-UI run of
  :mod:`graphkeep.agui` begins with (also after the index dropped it: the index keeps the
  newest 20);
- its id is the ``run_id`` of one of ``T``'s checkpoints (the caller reads them from the
  saver): LangGraph records the config's ``run_id`` in each checkpoint's metadata, and
  :func:`~graphkeep.events.streaming.stream_run` names its run by it unless given another.

Anything else names no thread on any backend — a log appended by hand, ``stream_run`` under a
run id of its own, a run whose first events retention dropped — and only ``--all`` reaches
it. Finding the tied runs reads the log's run list and the first event of each run not tied
by its id (one request a run, opened with the ring: a run whose first event does not open is
reported as unreadable, since its thread cannot be told, and left alone).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from graphkeep.errors import CorruptData
from graphkeep.events.port import EventsPort
from graphkeep.events.sealing import opened
from graphkeep.port import Op
from graphkeep.port.encryption import KeyRing

__all__ = ["INDEX_PREFIX", "ThreadRuns", "index_id", "thread_runs"]

#: the run id prefix of a thread's AG-UI index of runs
INDEX_PREFIX = "agui.thread."
#: the event field naming a run's thread (AG-UI's ``RUN_STARTED``)
THREAD_FIELD = "threadId"


def index_id(thread_id: str) -> str:
    """The run id of a thread's AG-UI index of runs in the event log."""
    return INDEX_PREFIX + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()


@dataclass(slots=True)
class ThreadRuns:
    """The runs of a log tied to the threads asked for (by thread), how many others it
    holds (tied to no thread asked for, or to none), and the runs whose first event does not
    open, so their thread cannot be told."""

    by_thread: dict[str, list[str]] = field(default_factory=dict)
    others: int = 0
    unreadable: list[str] = field(default_factory=list)

    @property
    def run_ids(self) -> list[str]:
        return list(dict.fromkeys(r for runs in self.by_thread.values() for r in runs))


def thread_runs(
    port: EventsPort, ring: KeyRing | None, threads: Mapping[str, Iterable[str]]
) -> Op[ThreadRuns]:
    """The op finding the runs of the log tied to ``threads`` (thread id -> the run ids its
    checkpoints name), by the rules of the module docstring."""
    found = ThreadRuns(by_thread={t: [] for t in threads})
    named = {run: t for t, runs in threads.items() for run in runs}
    indexes = {index_id(t): t for t in threads}
    for run in (yield from port.run_ids()):
        thread = indexes.get(run) or named.get(run)
        if thread is None:
            try:
                thread = yield from _named_thread(port, ring, run)
            except CorruptData:
                found.unreadable.append(run)
                continue
        if thread is not None and thread in found.by_thread:
            found.by_thread[thread].append(run)
        else:
            found.others += 1
    return found


def _named_thread(port: EventsPort, ring: KeyRing | None, run: str) -> Op[str | None]:
    """The thread the run's first event names (``threadId``), None when it names none."""
    first = yield from port.read(run, None, 1, 0)
    if not first:
        return None
    data = first[0].data
    if ring is not None:
        data = opened(ring, run, first[0].event_id, data)
    try:
        event = json.loads(data)
    except ValueError:
        return None
    thread = event.get(THREAD_FIELD) if isinstance(event, dict) else None
    return thread if isinstance(thread, str) else None
