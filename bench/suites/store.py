"""Store suite: workload S1 (:mod:`bench.store_workload`) on every LangGraph store.

Contenders, each on a fresh, empty scratch space of the same server in one run:

- ``graphkeep-redis`` (``graphkeep.connect_store``) and ``RedisStore``
  (langgraph-checkpoint-redis) on the Redis Stack server of ``REDIS_STACK_URL`` (default:
  the ``redis-stack`` service that ``./dev bench`` starts on 127.0.0.1:16380): RedisStore
  needs RediSearch and RedisJSON, whose indexes live in database 0, so both run in
  database 0 (one after the other, each flushing it first), graphkeep with its Query Engine
  vector index (``vector_index=True``). Without a Redis Stack server graphkeep runs on
  ``REDIS_URL`` (database 13, exact scan in Lua) and RedisStore is left out, saying why.
- ``graphkeep-mongodb`` and ``MongoDBStore`` (langgraph-store-mongodb) on ``MONGODB_URI``,
  each in its own database, dropped first.
- ``graphkeep-dynamodb`` and ``DynamoDBStore`` (langgraph-checkpoint-aws, in
  ``.bench-venvs/aws`` like the dynamodb suite's rival) on ``DYNAMODB_ENDPOINT_URL``, each in
  its own table, deleted first.
- ``InMemoryStore`` with the same index: the floor, and the reference answers.

How each is opened and its requests counted (as the other suites count them: Redis
commands at the connection, MongoDB commands, DynamoDB HTTP requests):
:mod:`bench.suites.store_contenders`; this module runs them, pools the rounds and
renders the report (:mod:`bench.render`). A rival that cannot build its vector
index on this server is run without it and its semantic row says why; a graphkeep backend
that has not landed is left out with "not available yet".

Run it with ``./dev bench --suite store`` or ``python -m bench.suites.store``
(``--only NAME,...`` picks contenders; ``--scale`` shrinks S1; ``--data 10`` runs S10, ten
times the items in ten times the namespaces with the same calls).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench import render
from bench.render import NA, Bars, Figure, Panel, number, ratio, section, table, versions
from bench.store_workload import (
    KINDS,
    OpResult,
    Sizes,
    StoreResult,
    same_top_k,
)
from bench.suites import Options, Skip, Suite
from bench.suites.store_contenders import (
    CONTENDERS,
    PAIRS,
    REFERENCE,
    Contender,
    Unavailable,
    contenders,
)

FULL_TURNS = 50  # Options.turns of a full run: S1 is scaled by turns / 50 (--quick: 0.2)


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """One contender's pooled result, or why it did not run."""

    name: str
    result: StoreResult | None = None
    skipped: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _pool(results: Sequence[StoreResult]) -> StoreResult:
    """Rounds pooled: all timings together, requests summed; answers of the first round."""
    first = results[0]
    pooled = StoreResult(first.contender, notes=list(first.notes))
    for kind, op in first.ops.items():
        same = [r.ops[kind] for r in results if kind in r.ops]
        counted = [o.requests for o in same]
        pooled.ops[kind] = OpResult(
            calls=sum(o.calls for o in same),
            ms=[ms for o in same for ms in o.ms],
            requests=None if None in counted else sum(c or 0 for c in counted),
            answers=op.answers,
            scores=op.scores,
            error=next((o.error for o in same if o.error), None),
        )
    return pooled


def run_contenders(
    contenders: Sequence[Contender], sizes: Sizes, rounds: int, only: set[str] | None = None
) -> list[Outcome]:
    import time

    outcomes: dict[str, Outcome] = {}
    samples: dict[str, list[StoreResult]] = {}
    chosen = [c for c in contenders if only is None or c.name in only]
    for round_ in range(rounds):
        shift = round_ % max(len(chosen), 1)
        for contender in chosen[shift:] + chosen[:shift]:
            outcome = outcomes.setdefault(contender.name, Outcome(contender.name))
            if outcome.skipped:
                continue
            print(f"  store round {round_ + 1}/{rounds}: {contender.name} ...", end="", flush=True)
            started = time.perf_counter()
            try:
                measured = contender.measure(sizes)  # before the list: a failure leaves none
                samples.setdefault(contender.name, []).append(measured)
            except Unavailable as exc:
                outcome.skipped = str(exc)
            except Exception as exc:  # noqa: BLE001 - one contender failing is reported
                outcome.skipped = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            outcome.seconds += time.perf_counter() - started
            print(f" {outcome.skipped or f'{time.perf_counter() - started:.1f} s'}", flush=True)
    for name, results in samples.items():
        outcomes[name].result = _pool(results)
    return [outcomes[c.name] for c in chosen]


# --------------------------------------------------------------------------- report


def top_k_column(outcomes: Sequence[Outcome], sizes: Sizes) -> dict[str, str]:
    """Contender -> "yes" / "no" / "n/a (why)" for "semantic top-10 = InMemoryStore"."""
    by = {o.name: o.result for o in outcomes if o.result}
    reference = by.get(REFERENCE)
    out: dict[str, str] = {}
    for name, result in by.items():
        op = result.ops.get("search (semantic)")
        if name == REFERENCE:
            out[name] = "reference"
        elif reference is None or "search (semantic)" not in reference.ops:
            out[name] = "n/a (no reference)"
        elif op is None:
            out[name] = "n/a (no semantic search on this server)"
        elif op.error:
            out[name] = "n/a (search failed)"
        else:
            same = same_top_k(op, reference.ops["search (semantic)"], sizes)
            out[name] = "n/a" if same is None else "yes" if same else "no"
    return out


def markdown(outcomes: Sequence[Outcome], sizes: Sizes, rounds: int, where: str) -> str:
    by = {o.name: o.result for o in outcomes if o.result}
    top = top_k_column(outcomes, sizes)
    dists = ("langgraph", "graphkeep", "langgraph-checkpoint-redis", "langgraph-store-mongodb")
    lines = [
        f"## graphkeep bench: Store (workload {sizes.label})",
        "",
        f"{where}. {sizes.label}: {sizes.items:,} puts in {sizes.namespaces} namespaces"
        f' (`("users", "u<n>", "memories")`, value = text + category + score),'
        f" {sizes.gets:,} gets, {sizes.searches:,} filtered searches (one namespace,"
        f" category equality and score `$gt`, limit 10), {sizes.semantic:,} semantic"
        f' searches over `("users",)` (top 10), {sizes.list_namespaces:,} list_namespaces,'
        f" then {sizes.calls('put (index=False)'):,} puts of new keys with `index=False`"
        " (nothing to embed);"
        f" index = 64-dim hashing bag-of-words on `text` (local, deterministic);"
        f" {rounds} round(s), one thread, medians pooled over rounds. {versions(dists)}.",
        "",
        "- requests/op = Redis commands at the connection (pipeline = 1), MongoDB commands"
        " (CommandListener), DynamoDB HTTP requests (botocore before-send); n/a in process",
        "- top-10 = InMemoryStore: every semantic search returns InMemoryStore's top 10 in"
        " its order (items of equal score may trade places)",
        "- timings are medians on a shared, noisy machine: compare within one run only",
        "",
    ]
    ops = [
        [
            kind,
            o.name,
            number(op.ms_median, 3),
            number(op.requests_per_op, 2),
            (op.error or "").replace("|", "\\|"),
        ]
        for kind in KINDS
        for o in outcomes
        if o.result and (op := o.result.ops.get(kind)) is not None
    ]
    lines += table(
        ["operation", "contender", "ms/op (median)", "requests/op", "error"], ops, "llrrl"
    )
    lines.append("")
    lines += table(
        ["contender", "top-10 = InMemoryStore", "run time s"],
        [
            [
                o.name,
                top.get(o.name, f"not run: {o.skipped}" if o.skipped else NA).replace("|", "/"),
                f"{o.seconds:,.1f}",
            ]
            for o in outcomes
        ],
        "llr",
    )
    ratio_lines: list[str] = []
    for ours_name, (rival, label) in PAIRS.items():
        ours, theirs = by.get(ours_name), by.get(rival)
        if not ours or not theirs:
            continue
        parts = []
        for kind in KINDS:
            a, b = ours.ops.get(kind), theirs.ops.get(kind)
            if a and b and not a.error and not b.error:
                parts.append(
                    f"{kind} ms {ratio(b.ms_median, a.ms_median)},"
                    f" requests {ratio(b.requests_per_op, a.requests_per_op)}"
                )
        ratio_lines.append(f"{label}, {rival} / {ours_name}: " + "; ".join(parts))
    floor = by.get(REFERENCE)
    for ours_name in PAIRS:
        ours = by.get(ours_name)
        if ours and floor:
            parts = [
                f"{kind} {ratio(ours.ops[kind].ms_median, floor.ops[kind].ms_median)}"
                for kind in KINDS
                if kind in ours.ops and kind in floor.ops and not ours.ops[kind].error
            ]
            ratio_lines.append(f"{ours_name} / InMemoryStore ms: " + ", ".join(parts))
    lines += section("Ratios (rival / graphkeep: above 1 = graphkeep better)", ratio_lines)
    notes = [n for o in outcomes if o.result for n in o.result.notes]
    notes += [f"{o.name} not run: {o.skipped}" for o in outcomes if o.skipped]
    lines += section("Notes", notes)
    return "\n".join(lines) + "\n"


def chart(outcomes: Sequence[Outcome], sizes: Sizes, path: Path) -> None:
    """ms/op and requests/op per operation kind, one bar per contender."""
    ran = [o for o in outcomes if o.result]

    def bars(pick: Callable[[OpResult], float | None]) -> list[Bars]:
        out = []
        for o in ran:
            assert o.result is not None
            found = [o.result.ops.get(kind) for kind in KINDS]
            out.append(Bars(o.name, [pick(op) if op and not op.error else None for op in found]))
        return out

    panels = [
        Panel("ms/op (median, log scale)", KINDS, bars(lambda op: op.ms_median), log=True),
        Panel("requests/op", KINDS, bars(lambda op: op.requests_per_op), legend=True),
    ]
    for panel in panels:
        panel.tick_size = 8
    title = f"graphkeep bench: Store (workload {sizes.label})"
    render.chart(Figure(title, panels, size=(15, 5.5)), path)


def run(
    options: Options,
    out: Path,
    chart_too: bool,
    only: set[str] | None = None,
    data: int = 1,
) -> list[Outcome]:
    """S1 (S10 with ``data=10``) for every contender (``only``: these), report to stdout and
    ``<out>/store.md`` (``store-s10.md``)."""
    sizes = Sizes.scaled(min(options.turns / FULL_TURNS, 1.0), data)
    listed, where = contenders(options)
    outcomes = run_contenders(listed, sizes, options.rounds, only)
    text = markdown(outcomes, sizes, options.rounds, where)
    name = "store" if data == 1 else f"store-{sizes.label.lower()}"
    render.publish(text, out, name, partial(chart, outcomes, sizes) if chart_too else None)
    return outcomes


def unavailable() -> Skip | None:
    return None  # InMemoryStore always runs; every other contender says why it did not


SUITE = Suite(
    name="store",
    title="Store (workload S1)",
    stored_label="n/a",
    request_label="round trips counted at the client",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suites.store")
    parser.add_argument("--quick", action="store_true", help="S1 at a fifth of its size")
    parser.add_argument("--scale", type=float, default=None, help="S1 size factor (1.0)")
    parser.add_argument(
        "--data", type=int, default=1, help="times S1's items and namespaces (10: S10)"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default=None, help=f"comma list of: {', '.join(CONTENDERS)}")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--force-flush", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    scale = args.scale if args.scale is not None else 0.2 if args.quick else 1.0
    only = set(args.only.split(",")) if args.only else None
    if only and only - set(CONTENDERS):
        parser.error(f"unknown contenders: {', '.join(sorted(only - set(CONTENDERS)))}")
    options = Options(
        turns=max(1, round(scale * FULL_TURNS)), rounds=args.rounds, force_flush=args.force_flush
    )
    if args.data < 1:
        parser.error("--data must be 1 or more")
    run(options, args.out, not args.no_chart, only, args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
