"""The suite registry: one suite per store, each comparing savers on the same server.

A suite module defines ``SUITE = Suite(...)``: how to tell whether it can run
(its graphkeep backend is registered, its server answers) and the contenders,
i.e. the savers it measures. A contender either opens a saver in this process
(:class:`InProcess`) or runs the whole measurement elsewhere, e.g. in another
virtualenv (:class:`bench.worker.InSubprocess`). Adding a store means
one module and one line in :data:`SUITES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from bench.workloads import (
    GROWTH_WORKLOAD,
    WORKLOADS,
    LargeResult,
    Opened,
    Result,
    Workload,
    measure,
    measure_large,
    new_message_bytes,
)

#: the report's note on the growth-only contender every saver suite has
NOSHARE_NOTE = (
    "graphkeep-noshare = graphkeep with share_lists=False (each list value stored whole per"
    " version, the layout of 0.1.x; the other changes since, e.g. compression, still apply):"
    " measured for the growth rows only, one run after the rounds"
)
#: issue 13: stored(2N turns) / stored(N turns) of a linear store (2.0 exactly, plus slack)
MAX_GROWTH_RATIO = 2.3
#: issue 13: bytes sent at turn N at most this many times the turn's new messages, plus a
#: fixed overhead (taken as what turn 1 sent)
MAX_SENT_PER_NEW_BYTE = 3

#: suite name -> module defining ``SUITE`` (imported only when that suite runs)
SUITES: dict[str, str] = {
    "redis": "bench.suites.redis",
    "mongodb": "bench.suites.mongodb",
    "dynamodb": "bench.suites.dynamodb",
    "store": "bench.suites.store",
    "live": "bench.suites.live",
    "concurrency": "bench.suites.concurrency",
    "effects": "bench.suites.effects",
    "hot": "bench.suites.hot",
    # last: under --suite all it reads what the suites above measured
    "turncost": "bench.suites.turncost",
}


class BenchError(Exception):
    """The bench cannot run as asked (message says why and what to do)."""


@dataclass(frozen=True)
class Options:
    turns: int = 50
    #: turns W50 goes on for after its history read in round 1 (the growth rows; 0: none)
    growth_turns: int = 0
    history_runs: int = 5
    #: every contender runs every workload this many times, in rotating order
    rounds: int = 1
    #: first logical database of the Redis suite (graphkeep uses it, plainredis the next)
    redis_db: int = 14
    #: flush the bench databases even when they hold keys the bench did not write
    force_flush: bool = False
    #: the concurrency suite's numbers of concurrent threads (empty: its default)
    threads: tuple[int, ...] = ()
    #: the backends a suite that has several runs (empty: all)
    backends: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skip:
    """Why a suite cannot run. ``expected``: its backend has not landed yet (not an error)."""

    reason: str
    expected: bool = False


NOT_YET = "backend not available yet"


class Contender(Protocol):
    name: str

    def run(self, work: Workload, options: Options, suite: str, extra_turns: int = 0) -> Result: ...

    def run_large(self, size: int, suite: str) -> LargeResult: ...


@dataclass
class InProcess:
    """A saver opened in this process, fresh for every workload."""

    name: str
    open: Callable[[Workload], AbstractContextManager[Opened]]

    def run(self, work: Workload, options: Options, suite: str, extra_turns: int = 0) -> Result:
        with self.open(work) as opened:
            return measure(
                opened,
                work,
                suite=suite,
                saver_name=self.name,
                turns=options.turns,
                history_runs=options.history_runs,
                extra_turns=extra_turns,
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
    #: under ``--suite all``, run instead of ``run`` and given what each suite before it
    #: returned (suite name -> ``run_suite``'s results, or its own ``run``'s value): the turn
    #: cost section reuses the saver suites' W50 rows and the live suite's AG-UI rows
    run_after: Callable[[Options, Path, bool, Mapping[str, object]], object] | None = None
    #: savers measured for the growth rows only (one W50 run after the rounds), e.g.
    #: graphkeep with ``share_lists=False``: the storage of 0.1.x, "before" in the same run
    growth_contenders: Callable[[Options], list[Contender]] = lambda options: []
    #: how the bytes sent to the store are counted, for the growth rows
    sent_label: str = ""
    #: what the growth rows' stored bytes measure, when not ``stored_label``
    growth_stored_label: str | None = None
    #: how capacity units are counted, when the suite counts them (DynamoDB)
    capacity_label: str = ""
    #: in-process contenders whose W50 turns also run in lockstep after the rounds (the
    #: first is the baseline), and the cost statements judged on them
    #: (:mod:`bench.lockstep`)
    lockstep: tuple[str, ...] = ()
    lockstep_costs: tuple[tuple[str, str], ...] = ()
    #: the requests one lease of ``saver.exclusive`` may cost per run on this store
    #: (acquire + release, no renewal): the suite's baseline then also runs W50 in lockstep
    #: with and without ``exclusive`` (issue 45's cost rows); None: not measured
    lease_requests: int | None = None


#: the name of the baseline's twin whose every turn runs through ``saver.exclusive``
EXCLUSIVE = "graphkeep-exclusive"
#: the name of the baseline's twin opened with ``encryption=`` (issue 47's cost rows)
ENCRYPTED = "graphkeep-enc"
ENCRYPTION_NOTE = (
    f"{ENCRYPTED} = graphkeep with encryption=KeyRing(...) (AES-256-GCM, one random 256-bit key"
    " per run: every checkpoint, channel value, list element and pending write sealed at its"
    " place); its cost is judged on the lockstep section below (turns alternating with"
    " graphkeep's), not on these rows"
)


def bench_ring() -> Any:
    """A key ring of two random 256-bit keys, ``bench`` current, for the :data:`ENCRYPTED`
    contender: its turns seal under one key; the rekey rows (:mod:`bench.rekey_cost`)
    rotate its threads to ``bench-next``."""
    import os

    from graphkeep.encryption import KeyRing

    return KeyRing({"bench": os.urandom(32), "bench-next": os.urandom(32)}, current="bench")


def exclusive_opener(
    open_saver: Callable[[Workload], AbstractContextManager[Opened]],
) -> Callable[[Workload], AbstractContextManager[Opened]]:
    """``open_saver``'s saver, its turns run through ``saver.exclusive(graph)``."""

    @contextmanager
    def open_exclusive(work: Workload) -> Iterator[Opened]:
        with open_saver(work) as opened:
            yield replace(opened, exclusive=True)

    return open_exclusive


def requests_budget(results: list[Result], limit: float, what: str) -> list[tuple[str, bool]]:
    """ "W50: graphkeep at most ``limit`` ``what``", judged on graphkeep's W50 requests/turn."""
    return [
        (
            f"W50: graphkeep at most {limit} {what}: {r.requests_per_turn:.2f}",
            r.requests_per_turn <= limit,
        )
        for r in results
        if r.saver == "graphkeep" and r.workload == "W50" and r.requests_per_turn is not None
    ]


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


TELEMETRY_NOTE = (
    "graphkeep-otel = graphkeep with the OpenTelemetry SDK configured (a TracerProvider with a"
    " BatchSpanProcessor to an in-memory exporter and a MeterProvider with an in-memory reader:"
    " every span and metric made, none sent); graphkeep-notel = graphkeep with"
    " telemetry=False; graphkeep itself has telemetry on by default and no SDK installed."
    " Their cost is judged on the lockstep section below (turns alternating), not on these"
    " rows, which ran one after the other"
)
#: the contenders of the telemetry rows and the ``telemetry`` option of each
TELEMETRY_CONTENDERS = ("graphkeep-otel", "graphkeep-notel")
#: the contenders whose W50 turns run in lockstep for issue 22's cost target (the first is
#: the baseline, telemetry=False), and each other's cost statement
TELEMETRY_LOCKSTEP = ("graphkeep-notel", "graphkeep-otel", "graphkeep")
TELEMETRY_COSTS = (("graphkeep-otel", "with the SDK configured"), ("graphkeep", "no SDK"))


def telemetry_option(name: str) -> Any:
    """The ``telemetry`` option of contender ``name`` (one of :data:`TELEMETRY_CONTENDERS`):
    real SDK providers of its own for ``graphkeep-otel``, False for ``graphkeep-notel``."""
    if name == "graphkeep-notel":
        return False
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return {"tracer_provider": tracer_provider, "meter_provider": meter_provider}


def growth_targets(
    results: list[Result], stored_max: int | None, baseline: str = "graphkeep"
) -> list[tuple[str, bool]]:
    """Issue 13's storage rows for ``baseline``, judged on the growth figures of this run.

    ``stored_max``: the ceiling on what a 50-turn W50 thread stores (checked only when the
    run has 50 turns).
    """
    r = next((r for r in results if (r.saver, r.workload) == (baseline, GROWTH_WORKLOAD)), None)
    if r is None:
        return []
    out: list[tuple[str, bool]] = []
    n = r.turns
    if stored_max is not None and r.stored_first is not None and n == 50:
        out.append(
            (
                f"W50: {baseline} stores at most {stored_max / 1e6:g} MB (issue 13):"
                f" {r.stored_first / 1e6:.3f} MB",
                r.stored_first <= stored_max,
            )
        )
    if r.extra_turns == n and r.stored_first and r.stored_last is not None:
        ratio = r.stored_last / r.stored_first
        out.append(
            (
                f"W50: stored after {2 * n} turns / after {n} turns at most {MAX_GROWTH_RATIO}"
                f" (linear; issue 13): {ratio:.2f}",
                ratio <= MAX_GROWTH_RATIO,
            )
        )
    if len(r.sent_bytes) >= n:
        sent, new, fixed = r.sent_bytes[n - 1], new_message_bytes(n), r.sent_bytes[0]
        limit = MAX_SENT_PER_NEW_BYTE * new + fixed
        out.append(
            (
                f"W50: bytes sent at turn {n} at most {MAX_SENT_PER_NEW_BYTE} x the turn's new"
                f" messages ({new:,} B) + what turn 1 sent ({fixed:,} B) = {limit:,} B"
                f" (issue 13): {sent:,} B",
                sent <= limit,
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
