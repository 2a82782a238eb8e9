"""Savers measured turn by turn in lockstep: the telemetry cost rows of issue 22.

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
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any

from bench.workloads import Opened, Workload, human_message

#: the at-most ratio of issue 22's cost target (ms/turn with telemetry over without)
MAX_OVERHEAD = 1.05


@dataclass
class Paired:
    """One contender's turns of a lockstep run (pooled over rounds)."""

    saver: str
    samples_ms: list[float] = field(default_factory=list)
    calls: int = 0

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
            apps = [work.build(o.probe.trace(o.saver)) for o in opened]
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
                paired[i].calls += sum(o.probe.take().calls.values())
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
