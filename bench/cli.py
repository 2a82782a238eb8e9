"""Command line of ``python -m bench`` (``./dev bench``).

    python -m bench [--suite redis|mongodb|dynamodb|store|live|concurrency|effects
                                       |hot|turncost|all]
                              [--turns N | --quick] [--rounds N] [--growth-turns N]
                              [--threads 1,10,100,500] [--backends redis,mongodb,...]

The default suite is ``redis`` (a minute or so); ``all`` runs every suite. In a
suite every contender runs every workload on the same server, in rounds with a
rotating order; the report goes to stdout and to ``<out>/<suite>.md``, the chart
to ``<out>/<suite>.png``. In the first round W50 goes on for ``--growth-turns``
more turns after its history read (default as many again: W50-100), for the
growth rows (stored after 50 and 100 turns, bytes sent per turn). A suite whose
graphkeep backend has not landed yet prints ``skipped: backend not available yet``
(exit status 0); a suite asked for by name that cannot reach its server fails.
The redis, mongodb and dynamodb suites also run graphkeep's W50 turns in lockstep with and
without ``saver.exclusive`` (issue 45's cost rows: requests/turn with the lease's counted
apart, ms/turn and their paired ratio), and with and without ``encryption=`` (issue 47's
rows: ms/turn, their paired ratio and a thread's stored bytes both ways, then the rekey
row: a few W50 threads rotated to a new key, records/s, :mod:`bench.rekey_cost`); the concurrency
suite runs graphkeep through ``saver.exclusive`` at each N, one run per thread and N runs
sharing few threads (the lease's wait under contention).
The ``store``, ``live``, ``concurrency``, ``effects`` and ``hot`` suites have their own
workloads and reports (:mod:`.suites.store`, :mod:`.suites.live`: watch latency and run event
logs on every backend, and PUBLISH per event on the same Redis; :mod:`.suites.concurrency`: N
threads at once on one async saver, ``--threads`` and ``--backends`` pick the N and the
backends; :mod:`.suites.effects`: the effect ledger's cost per call on every backend;
:mod:`.suites.hot`: MongoDB, DynamoDB and Postgres with and without Redis as the hot layer,
durable requests and bytes read per turn, ``--backends`` picks the stores).
Every saver suite's table has each saver's client CPU ms/turn (``time.process_time()`` in
the process that runs the turns). The ``turncost`` suite (:mod:`.suites.turncost`, issue 48)
is what one W50 turn costs per backend, ms, client CPU and requests, beside InMemorySaver and
each rival, with the AG-UI endpoint's rows (``<out>/turn-cost.md`` and ``.png``); under
``all`` it runs last and is built from what the other suites measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

from langgraph.checkpoint.memory import InMemorySaver

from bench import lockstep, report
from bench.probes import Probe
from bench.rekey_cost import rekey_rows
from bench.suites import (
    ENCRYPTED,
    EXCLUSIVE,
    SUITES,
    BenchError,
    Contender,
    InProcess,
    Options,
    Suite,
    exclusive_opener,
    load,
)
from bench.workloads import (
    GROWTH_WORKLOAD,
    WORKLOADS,
    LargeResult,
    Opened,
    Result,
    Workload,
    combine,
    measure,
    workload,
)

QUICK_TURNS = 10


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="graphkeep vs other LangGraph checkpoint savers on the same store",
    )
    parser.add_argument(
        "--suite",
        choices=[*SUITES, "all"],
        default="redis",
        help="default redis; all = every suite (mongodb on FerretDB takes ~15 minutes)",
    )
    parser.add_argument("--turns", type=int, default=None, help="turns per workload (50)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns, 1 round")
    parser.add_argument(
        "--history-runs", type=int, default=None, help="history reads per round (3)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="runs per saver and workload, pooled (default: the suite's, 3 for redis)",
    )
    parser.add_argument(
        "--growth-turns",
        type=int,
        default=None,
        help="turns W50 goes on for after its history read in round 1, for the growth rows"
        " (default: as many as --turns, i.e. W50-100; 0 = none)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG")
    parser.add_argument(
        "--redis-db", type=int, default=Options.redis_db,
        help="first of the two scratch databases of the redis suite (default 14, 15)",
    )  # fmt: skip
    parser.add_argument(
        "--threads",
        type=_positive_list,
        default=(),
        help="concurrency suite: comma list of concurrent threads (default 1,10,100,500)",
    )
    parser.add_argument(
        "--backends",
        type=lambda text: tuple(b for b in text.split(",") if b),
        default=(),
        help="concurrency suite: comma list of backends (default: all of"
        " redis,redis-stack,redis-cluster,mongodb,dynamodb); hot suite: of"
        " mongodb,dynamodb,postgres",
    )
    parser.add_argument("--force-flush", action="store_true", help=argparse.SUPPRESS)
    return parser


def _positive_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def warm_up() -> None:
    """A few untimed turns of each workload, so the first contender pays no first-use costs."""
    for work in WORKLOADS:
        measure(
            Opened(InMemorySaver(), Probe(counts_requests=False)),
            work,
            suite="warm-up",
            saver_name="warm-up",
            turns=3,
            history_runs=1,
        )


Opener = Callable[[Workload], AbstractContextManager[Opened]]


def _in_lockstep(
    suite: Suite, chosen: list[tuple[str, Opener]], options: Options
) -> list[lockstep.Paired]:
    started = time.perf_counter()
    names = ", ".join(name for name, _ in chosen)
    print(f"  {suite.name}: {names} on {GROWTH_WORKLOAD} in lockstep ...", end="", flush=True)
    paired = lockstep.measure_lockstep(
        chosen, workload(GROWTH_WORKLOAD), turns=options.turns, rounds=options.rounds
    )
    print(f" {time.perf_counter() - started:.1f} s", flush=True)
    return paired


def run_lockstep(
    suite: Suite,
    contenders: Sequence[Contender],
    options: Options,
    results: Sequence[Result] = (),
) -> tuple[list[str], list[tuple[str, bool]]]:
    """The suite's lockstep contenders on W50 (:mod:`bench.lockstep`), then its baseline
    with and without ``saver.exclusive`` (when the suite gives ``lease_requests``) and
    with and without ``encryption=`` (when the suite has the :data:`ENCRYPTED` contender;
    the stored bytes from ``results``): the report's sections and the cost targets; nothing
    when the suite names none."""
    by = {c.name: c for c in contenders if isinstance(c, InProcess)}
    lines: list[str] = []
    targets: list[tuple[str, bool]] = []
    chosen = [(name, by[name].open) for name in suite.lockstep if name in by]
    if len(chosen) >= 2:
        paired = _in_lockstep(suite, chosen, options)
        lines, targets = lockstep.telemetry_rows(paired, chosen[0][0], suite.lockstep_costs)
    base = by.get(suite.baseline)
    if suite.lease_requests is not None and base is not None:
        pair = [(base.name, base.open), (EXCLUSIVE, exclusive_opener(base.open))]
        more_lines, more_targets = lockstep.exclusive_rows(
            _in_lockstep(suite, pair, options), base.name, EXCLUSIVE, suite.lease_requests
        )
        lines, targets = lines + more_lines, targets + more_targets
    sealed = by.get(ENCRYPTED)
    if base is not None and sealed is not None:
        stored = {
            r.saver: r.stored_bytes
            for r in results
            if r.workload == GROWTH_WORKLOAD and r.saver in (base.name, sealed.name)
        }
        pair = [(base.name, base.open), (sealed.name, sealed.open)]
        more_lines, more_targets = lockstep.encryption_rows(
            _in_lockstep(suite, pair, options), base.name, sealed.name, stored
        )
        lines, targets = lines + more_lines, targets + more_targets
        started = time.perf_counter()
        print(f"  {suite.name}: {sealed.name} rekey ...", end="", flush=True)
        more_lines, more_targets = rekey_rows(
            sealed.name, sealed.open, workload(GROWTH_WORKLOAD), options.turns
        )
        print(f" {time.perf_counter() - started:.1f} s", flush=True)
        lines, targets = lines + more_lines, targets + more_targets
    return lines, targets


def run_suite(suite: Suite, options: Options, out: Path, chart: bool) -> list[Result]:
    contenders = suite.contenders(options)
    warm_up()
    samples: dict[tuple[str, str], list[Result]] = {}
    for round_ in range(options.rounds):
        # rotate the order so no saver always runs first (or right after another's flush)
        shift = round_ % max(len(contenders), 1)
        order = contenders[shift:] + contenders[:shift]
        for work in WORKLOADS:
            for contender in order:
                started = time.perf_counter()
                label = f"round {round_ + 1}/{options.rounds}: {contender.name} on {work.name}"
                extra = options.growth_turns if round_ == 0 and work.name == GROWTH_WORKLOAD else 0
                if extra:
                    label += f" (+{extra} growth turns)"
                print(f"  {suite.name} {label} ...", end="", flush=True)
                result = contender.run(work, options, suite.name, extra_turns=extra)
                samples.setdefault((contender.name, work.name), []).append(result)
                print(f" {time.perf_counter() - started:.1f} s", flush=True)
    results = [
        combine(samples[(contender.name, work.name)])
        for work in WORKLOADS
        for contender in contenders
    ]
    growth: list[Result] = []
    if options.growth_turns:
        for contender in suite.growth_contenders(options):
            started = time.perf_counter()
            print(
                f"  {suite.name}: {contender.name} on {GROWTH_WORKLOAD}"
                f" (+{options.growth_turns} growth turns; growth rows only) ...",
                end="",
                flush=True,
            )
            growth.append(
                contender.run(
                    workload(GROWTH_WORKLOAD),
                    replace(options, history_runs=1),
                    suite.name,
                    extra_turns=options.growth_turns,
                )
            )
            print(f" {time.perf_counter() - started:.1f} s", flush=True)
    large: list[LargeResult] = []
    if suite.large_message:
        for contender in contenders:
            started = time.perf_counter()
            print(f"  {suite.name}: {contender.name} on one large message ...", end="", flush=True)
            large.append(contender.run_large(suite.large_message, suite.name))
            print(f" {time.perf_counter() - started:.1f} s", flush=True)
    ctx = report.Context(
        suite_title=suite.title,
        where=suite.where(options),
        turns=options.turns,
        history_runs=options.history_runs,
        rounds=options.rounds,
        stored_label=suite.stored_label,
        request_label=suite.request_label,
        sent_label=suite.sent_label,
        growth_stored_label=suite.growth_stored_label or suite.stored_label,
        capacity_label=suite.capacity_label,
        baseline=suite.baseline,
        rival=suite.rival,
        notes=suite.notes,
        workloads=WORKLOADS,
    )
    lockstep_lines, lockstep_targets = run_lockstep(suite, contenders, options, results)
    targets = (
        suite.targets(results) + lockstep_targets + report.large_targets(large, suite.baseline)
    )
    text = report.markdown(ctx, results, targets, large, growth)
    if lockstep_lines:
        head, marker, tail = text.partition("\n### ")
        text = head + "\n".join(lockstep_lines) + "\n" + marker + tail
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{suite.name}.md").write_text(text)
    print()
    print(text)
    print(f"written: {out / f'{suite.name}.md'}")
    if chart:
        report.chart(ctx, results, out / f"{suite.name}.png", growth)
        print(f"written: {out / f'{suite.name}.png'}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    turns = args.turns or (QUICK_TURNS if args.quick else 50)
    history_runs = args.history_runs or (2 if args.quick else 3)
    if min(turns, history_runs, args.rounds or 1) < 1:
        print("error: --turns, --history-runs and --rounds must be positive", file=sys.stderr)
        return 2
    growth_turns = turns if args.growth_turns is None else args.growth_turns
    if growth_turns < 0:
        print("error: --growth-turns must not be negative", file=sys.stderr)
        return 2
    options = Options(
        turns=turns,
        growth_turns=growth_turns,
        history_runs=history_runs,
        rounds=args.rounds or 1,
        redis_db=args.redis_db,
        force_flush=args.force_flush,
        threads=args.threads,
        backends=args.backends,
    )
    names = list(SUITES) if args.suite == "all" else [args.suite]
    failed = False
    ran = 0
    #: what each suite returned, for a suite that reads the others' (turncost)
    measured: dict[str, object] = {}
    for name in names:
        suite = load(name)
        skip = suite.unavailable()
        if skip is not None:
            print(f"skipped: {name}: {skip.reason}")
            failed |= not skip.expected and args.suite != "all"
            continue
        rounds = args.rounds or (1 if args.quick else suite.default_rounds)
        print(f"suite {name}: {turns} turns per workload, {rounds} round(s)")
        chosen = replace(options, rounds=rounds)
        try:
            if suite.run_after is not None and args.suite == "all":
                measured[name] = suite.run_after(chosen, args.out, not args.no_chart, measured)
            elif suite.run is not None:  # the store suite: its own workload and report
                measured[name] = suite.run(chosen, args.out, not args.no_chart)
            else:
                measured[name] = run_suite(suite, chosen, args.out, chart=not args.no_chart)
            ran += 1
        except BenchError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            failed = True
    if not ran and not failed:
        print("nothing ran (start the servers: ./dev services up)")
    return 1 if failed else 0
