"""The concurrency suite's single-writer rows (issue 45): graphkeep through ``saver.exclusive``.

At each N the suite's graphkeep contender runs again with every turn through
``saver.exclusive(graph)``: first N threads with one run each (the lease is never busy: its
cost is the acquire and release of each turn), then N runs at once sharing
:func:`contended_threads` threads, so runs of one thread take turns holding its lease (they
queue in the process, and only the first asks the store: :mod:`graphkeep.checkpoint.exclusive`).
Beside graphkeep's own row: turns/s, turn latency (the lease's wait included), requests/turn
(the lease's acquire and release included) and the lease's wait per turn (median / p95 /
max). The state check after each run counts every run's messages on its thread, so a turn lost
to a fork fails the row.
Backend-neutral: the rows use the backend's graphkeep contender as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from bench.concurrency_workload import ConcurrencyResult, Opener, run_contender
from bench.render import number, table

#: the contended rows: N runs at once share N / this many threads (at least one)
RUNS_PER_THREAD = 5
#: graphkeep's twin whose every turn runs through ``saver.exclusive``
EXCLUSIVE = "graphkeep-exclusive"

HEADERS = [
    "N",
    "saver",
    "LangGraph threads",
    "turns/run",
    "turns/s",
    "p50 ms",
    "p99 ms",
    "requests/turn",
    "lease wait median / p95 / max ms",
    "outcome",
]

Outcome = Callable[[ConcurrencyResult], str]


def contended_threads(n: int) -> int:
    """The LangGraph threads N contended runs share."""
    return max(1, n // RUNS_PER_THREAD)


def measure(open_saver: Opener, backend: str, n: int, turns: int) -> list[ConcurrencyResult]:
    """graphkeep (``open_saver``) through ``saver.exclusive`` at N: one run per thread, then
    (from N = 2) N runs sharing :func:`contended_threads` threads."""
    shares: list[int | None] = [None] + ([contended_threads(n)] if n >= 2 else [])
    out = []
    for shared in shares:
        what = "one run per thread" if shared is None else f"{n} runs on {shared} thread(s)"
        print(
            f"  concurrency {backend}: {EXCLUSIVE}, N={n} x {turns} turns, {what} ...",
            end="",
            flush=True,
        )
        started = time.perf_counter()
        result = asyncio.run(
            run_contender(
                open_saver,
                backend=backend,
                saver_name=EXCLUSIVE,
                threads=n,
                turns=turns,
                exclusive=True,
                lease_threads=shared,
            )
        )
        outcome = "ok" if result.ok else f"FAILED ({result.error})"
        print(f" {time.perf_counter() - started:.1f} s, {outcome}", flush=True)
        out.append(result)
    return out


def row(r: ConcurrencyResult, outcome: Outcome) -> list[str]:
    shared = r.lease_threads or r.threads
    waits = (r.lease_wait_p50_ms, r.lease_wait_p95_ms, r.lease_wait_max_ms)
    return [
        str(r.threads),
        r.saver,
        f"{shared} ({r.threads / shared:g} runs each)" if r.lease_threads else str(shared),
        str(r.turns_per_thread),
        number(r.turns_per_second, 1),
        number(r.p50_ms, 1),
        number(r.p99_ms, 1),
        number(r.requests_per_turn, 2),
        " / ".join(number(w, 1) for w in waits) if r.exclusive else "no lease",
        outcome(r),
    ]


def lines(
    results: Sequence[ConcurrencyResult],
    exclusive: Sequence[ConcurrencyResult],
    outcome: Outcome,
) -> list[str]:
    """A backend's single-writer table: at each N graphkeep's row (from ``results``), then
    its runs through ``saver.exclusive`` (``exclusive``)."""
    if not exclusive:
        return []
    rows = []
    for n in dict.fromkeys(r.threads for r in [*results, *exclusive]):
        rows += [r for r in results if r.threads == n and r.saver == "graphkeep"]
        rows += [r for r in exclusive if r.threads == n]
    return [
        "",
        "Single-writer runs (`saver.exclusive(graph)`, issue 45): graphkeep as above, then"
        " every turn through `exclusive` with one run per thread (the lease never busy), then"
        f" N runs at once sharing N / {RUNS_PER_THREAD} threads (runs of a thread take turns"
        " holding its lease: they queue in the process, first come first served, and only the"
        " first asks the store). Lease wait = each turn's wait for its thread (the queue and"
        " the acquire), part of the turn's latency; requests/turn count the lease's (acquire,"
        " release, and a poll of a thread another process holds):",
        "",
        *table(HEADERS, [row(r, outcome) for r in rows], "rllrrrrrrl"),
    ]


def targets(
    title: str, exclusive: Sequence[ConcurrencyResult], outcome: Outcome
) -> list[tuple[str, bool]]:
    """Runs through ``saver.exclusive`` complete every turn, on shared threads too: none
    lost to a fork (the state check counts every run's messages on its thread)."""
    return [
        (
            f"{title} N={r.threads} on {r.lease_threads or r.threads} thread(s): every turn"
            f" through saver.exclusive stored, none lost (issue 45): {outcome(r)}",
            r.ok,
        )
        for r in exclusive
    ]
