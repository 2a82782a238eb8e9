"""The suite registry: one suite per store, each comparing savers on the same server.

A suite module defines ``SUITE = Suite(...)``: how to tell whether it can run
(its graphkeep backend is registered, its server answers) and the contenders,
i.e. the savers it measures. A contender either opens a saver in this process
(:class:`InProcess`) or runs the whole measurement elsewhere, e.g. in another
virtualenv (:class:`graphkeep.bench.worker.InSubprocess`). Adding a store means
one module and one line in :data:`SUITES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from graphkeep.bench.workloads import (
    WORKLOADS,
    LargeResult,
    Opened,
    Result,
    Workload,
    measure,
    measure_large,
)

#: suite name -> module defining ``SUITE`` (imported only when that suite runs)
SUITES: dict[str, str] = {
    "redis": "graphkeep.bench.suites.redis",
    "mongodb": "graphkeep.bench.suites.mongodb",
    "dynamodb": "graphkeep.bench.suites.dynamodb",
    "store": "graphkeep.bench.suites.store",
}


class BenchError(Exception):
    """The bench cannot run as asked (message says why and what to do)."""


@dataclass(frozen=True)
class Options:
    turns: int = 50
    history_runs: int = 5
    #: every contender runs every workload this many times, in rotating order
    rounds: int = 1
    #: first logical database of the Redis suite (graphkeep uses it, plainredis the next)
    redis_db: int = 14
    #: flush the bench databases even when they hold keys the bench did not write
    force_flush: bool = False


@dataclass(frozen=True)
class Skip:
    """Why a suite cannot run. ``expected``: its backend has not landed yet (not an error)."""

    reason: str
    expected: bool = False


NOT_YET = "backend not available yet"


class Contender(Protocol):
    name: str

    def run(self, work: Workload, options: Options, suite: str) -> Result: ...

    def run_large(self, size: int, suite: str) -> LargeResult: ...


@dataclass
class InProcess:
    """A saver opened in this process, fresh for every workload."""

    name: str
    open: Callable[[Workload], AbstractContextManager[Opened]]

    def run(self, work: Workload, options: Options, suite: str) -> Result:
        with self.open(work) as opened:
            return measure(
                opened,
                work,
                suite=suite,
                saver_name=self.name,
                turns=options.turns,
                history_runs=options.history_runs,
            )

    def run_large(self, size: int, suite: str) -> LargeResult:
        with self.open(WORKLOADS[0]) as opened:
            return measure_large(opened, suite=suite, saver_name=self.name, size=size)


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    #: what ``stored_bytes`` measures, for the table header
    stored_label: str
    #: what one request is for this store, for the table header
    request_label: str
    #: ``None`` when the suite can run, else why not
    unavailable: Callable[[], Skip | None]
    contenders: Callable[[Options], list[Contender]]
    #: rounds when ``--rounds`` is not given (a slow store can ask for fewer)
    default_rounds: int = 3
    #: graphkeep's name in the results, and the saver it is compared with
    baseline: str = "graphkeep"
    rival: str | None = None
    #: where the run happens (server, databases), for the report
    where: Callable[[Options], str] = lambda options: ""
    #: the issue's targets as (statement, met) pairs, judged on this suite's results
    targets: Callable[[list[Result]], list[tuple[str, bool]]] = lambda results: []
    #: bytes of the one large message each contender is also given (``None``: not run)
    large_message: int | None = None
    notes: list[str] = field(default_factory=list)
    #: a suite with its own workload and report (the store suite): runs instead of the
    #: saver workloads, given the options, the output directory and whether to chart
    run: Callable[[Options, Path, bool], object] | None = None


def faster_per_turn(results: list[Result], rival: str) -> list[tuple[str, bool]]:
    """The "graphkeep faster per turn than ``rival``" target, for each workload run."""
    by = {(r.saver, r.workload): r for r in results}
    out: list[tuple[str, bool]] = []
    for name in ("W50", "W50-delta"):
        ours, theirs = by.get(("graphkeep", name)), by.get((rival, name))
        if ours and theirs:
            out.append(
                (
                    f"{name}: graphkeep faster per turn than {rival}:"
                    f" {ours.ms_per_turn:.2f} vs {theirs.ms_per_turn:.2f} ms (median)",
                    ours.ms_per_turn < theirs.ms_per_turn,
                )
            )
    return out


def load(name: str) -> Suite:
    if name not in SUITES:
        raise BenchError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    suite = importlib.import_module(SUITES[name]).SUITE
    if not isinstance(suite, Suite):
        raise TypeError(f"{SUITES[name]}.SUITE is not a Suite")
    return suite


def backend_registered(scheme: str) -> bool:
    """Whether ``graphkeep.connect`` knows the URL scheme (the backend has landed)."""
    backends = importlib.import_module("graphkeep.connect").BACKENDS
    return scheme in backends


def not_yet(scheme: str) -> Skip | None:
    """The expected skip while ``scheme://`` has no graphkeep backend."""
    if backend_registered(scheme):
        return None
    return Skip(f"{NOT_YET} ({scheme}:// is not registered in graphkeep.connect)", expected=True)
