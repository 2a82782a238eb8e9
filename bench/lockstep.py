"""Savers measured turn by turn in lockstep: the telemetry cost rows of issue 22, the
``saver.exclusive`` rows of issue 45 and the encryption rows of issue 47.

The rounds run each contender on its own, one after the other, so a slow minute of the
machine (another process, a compaction on the server) lands on one contender only: on a
shared 2-core machine two runs of the same saver differ by ±10 %, which hides a 5 % cost.
Here every contender has its own thread and the turns alternate — turn 1 of each, then
turn 2 of each (the order rotating every turn) — so a turn and its counterparts run within
milliseconds of each other on the same machine and server state. The cost is the median of
the per-turn ratios (a paired statistic): drift cancels out of each pair.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any

from bench.probes import LEASE_METHODS, LEASE_WITH_READ
from bench.render import kib
from bench.workloads import Opened, Workload, human_message, turn_runner

#: the at-most ratio of issue 22's cost target (ms/turn with telemetry over without)
MAX_OVERHEAD = 1.05
#: the at-most ratio of issue 45's cost target (ms/turn through ``saver.exclusive`` over
#: the bare graph's)
MAX_EXCLUSIVE_OVERHEAD = 1.03
#: the at-most ratio of issue 47's cost target (ms/turn with ``encryption=`` over without)
MAX_ENCRYPTION_OVERHEAD = 1.05


@dataclass
class Paired:
    """One contender's turns of a lockstep run (pooled over rounds)."""

    saver: str
    samples_ms: list[float] = field(default_factory=list)
    calls: int = 0
    #: calls and requests per saver method (and lease call), summed over rounds; requests
    #: stay empty when the contender's probe does not count them
    calls_by: dict[str, int] = field(default_factory=dict)
    requests_by: dict[str, int] = field(default_factory=dict)
    #: wall seconds inside each saver method (and lease call), summed over rounds
    seconds_by: dict[str, float] = field(default_factory=dict)
    counts_requests: bool = True

    @property
    def ms_per_turn(self) -> float:
        return statistics.median(self.samples_ms) if self.samples_ms else 0.0

    @property
    def calls_per_turn(self) -> float:
        return self.calls / len(self.samples_ms) if self.samples_ms else 0.0


def measure_lockstep(
    contenders: Sequence[tuple[str, Callable[[Workload], AbstractContextManager[Opened]]]],
    work: Workload,
    *,
    turns: int,
    rounds: int,
) -> list[Paired]:
    """Run ``turns`` turns of ``work`` on a fresh thread of each contender, turn by turn in
    rotating order, ``rounds`` times; each contender's turn durations and saver calls."""
    paired = [Paired(name) for name, _ in contenders]
    for _ in range(rounds):
        with ExitStack() as stack:
            opened = [stack.enter_context(open_(work)) for _, open_ in contenders]
            apps = [turn_runner(o, work.build(o.probe.trace(o.saver))) for o in opened]
            configs: list[Any] = [
                {"configurable": {"thread_id": f"lockstep-{uuid.uuid4().hex[:12]}"}}
                for _ in contenders
            ]
            for o in opened:
                o.probe.take()
            for turn in range(1, turns + 1):
                shift = turn % len(contenders)
                for i in [*range(shift, len(contenders)), *range(shift)]:
                    started = time.perf_counter()
                    apps[i].invoke({"messages": [human_message(turn)]}, configs[i])
                    paired[i].samples_ms.append((time.perf_counter() - started) * 1000)
            for i, o in enumerate(opened):
                tally = o.probe.take()
                p = paired[i]
                p.calls += sum(n for m, n in tally.calls.items() if m not in LEASE_METHODS)
                p.counts_requests = o.probe.counts_requests
                for into, counts in ((p.calls_by, tally.calls), (p.requests_by, tally.requests)):
                    for method, n in counts.items():
                        into[method] = into.get(method, 0) + n
                for method, seconds in tally.seconds.items():
                    p.seconds_by[method] = p.seconds_by.get(method, 0.0) + seconds
    return paired


def paired_ratio(on: Paired, off: Paired) -> float:
    """The median over turns of ``on``'s turn time over ``off``'s same turn."""
    ratios = [a / b for a, b in zip(on.samples_ms, off.samples_ms, strict=True) if b > 0]
    return statistics.median(ratios) if ratios else float("nan")


def telemetry_rows(
    paired: Sequence[Paired], off: str, costs: Sequence[tuple[str, str]]
) -> tuple[list[str], list[tuple[str, bool]]]:
    """The report's section and the targets: each ``(contender, what)`` of ``costs`` against
    contender ``off`` (telemetry=False)."""
    by = {p.saver: p for p in paired}
    base = by[off]
    lines = [
        "",
        "### Telemetry cost (W50, turns in lockstep)",
        "",
        f"Each contender on its own thread, {len(base.samples_ms)} turns each, alternating"
        " turn by turn (order rotating); ratio = median over turns of the turn's time over"
        f" {off}'s same turn.",
        "",
        "| saver | ms/turn (median) | saver calls/turn | ratio to telemetry=False |",
        "|---|---|---|---|",
    ]
    targets: list[tuple[str, bool]] = []
    for p in paired:
        ratio = 1.0 if p is base else paired_ratio(p, base)
        lines.append(
            f"| {p.saver} | {p.ms_per_turn:.2f} | {p.calls_per_turn:.1f} | {ratio:.3f} x |"
        )
    for name, what in costs:
        on = by.get(name)
        if on is None:
            continue
        ratio = paired_ratio(on, base)
        targets.append(
            (
                f"W50 telemetry cost, {what}: at most {MAX_OVERHEAD} x telemetry=False's"
                f" ms/turn (issue 22, turns in lockstep): {ratio:.3f} x"
                f" ({on.ms_per_turn:.2f} vs {base.ms_per_turn:.2f} ms)",
                ratio <= MAX_OVERHEAD,
            )
        )
    return lines, targets


def _per(count: float, of: float) -> float:
    return count / of if of else float("nan")


def exclusive_rows(
    paired: Sequence[Paired], off: str, on: str, lease_budget: int
) -> tuple[list[str], list[tuple[str, bool]]]:
    """Issue 45's cost rows: contender ``on`` (every turn through ``saver.exclusive``)
    against ``off`` (the same saver, the bare graph), turns in lockstep. The lease's
    requests are those of its acquire, release and renewal calls (the probe attributes
    them, :func:`bench.probes.trace_lease`); every other request is the turn's own, so the
    writes' share is the same with and without the lease unless the fence costs a request.
    ``lease_budget``: the requests a lease may cost per run on this store without renewals
    (acquire + release)."""
    by = {p.saver: p for p in paired}
    base, ours = by[off], by[on]
    turns = len(ours.samples_ms)
    runs = ours.calls_by.get("lease.acquire", 0) + ours.calls_by.get(LEASE_WITH_READ, 0)
    lease = {m: ours.requests_by.get(m, 0) for m in LEASE_METHODS}
    lease_total = sum(lease.values())

    def own_requests(p: Paired) -> int:
        return sum(n for m, n in p.requests_by.items() if m not in LEASE_METHODS)

    lines = [
        "",
        "### Single-writer runs: cost of `saver.exclusive` (W50, turns in lockstep)",
        "",
        f"{off} runs each turn with `graph.invoke`, {on} with `saver.exclusive(graph).invoke`"
        " (the thread's fenced lease taken before the turn's first read, or with it in the"
        " same request where the store can, released after its last write, renewed every"
        " third of its ttl, 30 s by default);"
        f" {turns} turns each, alternating turn by turn on threads of their own;"
        " lease requests = the round trips of the lease's"
        " acquire / release / renewal calls, counted at the client (a lease taken with the"
        " read adds none: the read's request is the turn's own); lease ms/run = wall time"
        " inside the run's acquire and release (mean); ratio = median over turns"
        f" of the turn's time over {off}'s same turn.",
        "",
        "| saver | ms/turn (median) | requests/turn | lease requests/run"
        " (acquire / release / renew) | lease ms/run | other requests/turn | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    lease_ms = 1000 * sum(ours.seconds_by.get(m, 0.0) for m in ("lease.acquire", "lease.release"))
    counted = base.counts_requests and ours.counts_requests
    for p in (base, ours):
        total = sum(p.requests_by.values())
        if p is ours and runs:
            split = " / ".join(str(lease[m]) for m in LEASE_METHODS)
            lease_cell = f"{_per(lease_total, runs):.2f} ({split} in {runs} runs)"
        else:
            lease_cell = "none"
        ratio = 1.0 if p is base else paired_ratio(p, base)
        lines.append(
            f"| {p.saver} | {p.ms_per_turn:.2f}"
            f" | {f'{_per(total, len(p.samples_ms)):.2f}' if counted else 'n/a'}"
            f" | {lease_cell if counted else 'n/a'}"
            f" | {f'{_per(lease_ms, runs):.2f}' if p is ours and runs else 'none'}"
            f" | {f'{_per(own_requests(p), len(p.samples_ms)):.2f}' if counted else 'n/a'}"
            f" | {ratio:.3f} x |"
        )
    ratio = paired_ratio(ours, base)
    targets: list[tuple[str, bool]] = []
    if counted:
        with_lease = _per(own_requests(ours), turns)
        without = _per(own_requests(base), len(base.samples_ms))
        targets += [
            (
                f"W50 exclusive: one lease per run: {runs} taken"
                f" ({ours.calls_by.get(LEASE_WITH_READ, 0)} with the run's first read) and"
                f" {ours.calls_by.get('lease.release', 0)} releases for {turns} turns",
                runs == turns == ours.calls_by.get("lease.release", 0),
            ),
            (
                "W50 exclusive: no request added per write (issue 45; the fencing token"
                f" travels in the write's own request): {with_lease:.2f} requests/turn besides"
                f" the lease's, {without:.2f} without exclusive",
                # fewer is allowed: on DynamoDB a fenced put is one transaction where an
                # unfenced one is two plain requests (values, then the head)
                with_lease <= without,
            ),
            (
                f"W50 exclusive: the lease costs at most {lease_budget} request(s) per run"
                " (acquire + release, or the release alone where the acquire rides on the"
                " run's first read; a renewal only when a run lasts over ttl/3):"
                f" {_per(lease_total, runs):.2f}",
                runs > 0 and lease_total <= lease_budget * runs,
            ),
        ]
    targets.append(
        (
            f"W50 exclusive cost: at most {MAX_EXCLUSIVE_OVERHEAD} x the bare graph's ms/turn"
            f" (issue 45, turns in lockstep): {ratio:.3f} x"
            f" ({ours.ms_per_turn:.2f} vs {base.ms_per_turn:.2f} ms)",
            ratio <= MAX_EXCLUSIVE_OVERHEAD,
        )
    )
    return lines, targets


def encryption_rows(
    paired: Sequence[Paired], off: str, on: str, stored: Mapping[str, int | None]
) -> tuple[list[str], list[tuple[str, bool]]]:
    """Issue 47's cost rows: contender ``on`` (the saver with ``encryption=``, every record
    sealed with AES-256-GCM at its place) against ``off`` (the same saver without), turns in
    lockstep; ``stored``: each one's stored bytes for one W50 thread (the rounds' median,
    None: the suite does not measure them)."""
    by = {p.saver: p for p in paired}
    base, ours = by[off], by[on]
    lines = [
        "",
        "### Encryption cost (W50, turns in lockstep)",
        "",
        f"{off} without encryption, {on} with `encryption=KeyRing(...)` (AES-256-GCM under one"
        " 256-bit key, every checkpoint, channel value, list element and pending write sealed"
        f" at its place); {len(ours.samples_ms)} turns each, alternating turn by turn on"
        f" threads of their own; ratio = median over turns of the turn's time over {off}'s"
        " same turn; stored = one W50 thread's stored KiB after its turns (the rounds' median,"
        " as in the table above).",
        "",
        "| saver | ms/turn (median) | ratio | stored KiB / thread | stored ratio |",
        "|---|---|---|---|---|",
    ]
    plain = stored.get(off)
    for p in (base, ours):
        ratio = 1.0 if p is base else paired_ratio(p, base)
        size = stored.get(p.saver)
        size_cell = kib(size)
        size_ratio = f"{size / plain:.3f} x" if size is not None and plain else "n/a"
        lines.append(
            f"| {p.saver} | {p.ms_per_turn:.2f} | {ratio:.3f} x | {size_cell} | {size_ratio} |"
        )
    ratio = paired_ratio(ours, base)
    targets = [
        (
            f"W50 encryption cost: at most {MAX_ENCRYPTION_OVERHEAD} x the unencrypted ms/turn"
            f" (issue 47, turns in lockstep): {ratio:.3f} x"
            f" ({ours.ms_per_turn:.2f} vs {base.ms_per_turn:.2f} ms)",
            ratio <= MAX_ENCRYPTION_OVERHEAD,
        )
    ]
    return lines, targets
