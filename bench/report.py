"""The saver suites' report: the markdown (table, ratios, growth, targets, where the
requests go) and the chart, drawn with :mod:`bench.render`."""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import render
from bench.probes import OUTSIDE, TRACED_METHODS, Tally
from bench.render import (
    NA,
    Bars,
    Figure,
    Legend,
    Panel,
    kib,
    number,
    ratio,
    table,
    target_lines,
    version,
)
from bench.workloads import (
    EDGE_TURNS,
    GROWTH_WORKLOAD,
    HISTORY_LIMIT,
    LargeResult,
    Result,
    Workload,
    new_message_bytes,
)


@dataclass(frozen=True)
class Context:
    suite_title: str
    where: str
    turns: int
    history_runs: int
    rounds: int
    stored_label: str
    request_label: str
    baseline: str
    rival: str | None
    notes: Sequence[str]
    workloads: Sequence[Workload]
    #: how bytes sent are counted, and what the growth rows' stored bytes are
    sent_label: str = ""
    growth_stored_label: str = ""
    #: how capacity units are counted (the DynamoDB suite), for the capacity section
    capacity_label: str = ""


#: what the client CPU column measures (issue 48)
CPU_LABEL = (
    "time.process_time() around each turn in the process that runs it (every thread: the"
    " saver's client and driver, LangGraph, the graph; a rival in its own virtualenv is"
    " measured in that interpreter), median per turn; the servers are other processes and"
    " are not counted"
)
#: bytes sent per turn: the median is over this many last turns
SENT_WINDOW = 10
#: a chart panel's value for one saver and x group (None: not measured)
Series = Callable[[str, str], float | int | None]


def markdown(
    ctx: Context,
    results: Sequence[Result],
    targets: Sequence[tuple[str, bool]],
    large: Sequence[LargeResult] = (),
    growth: Sequence[Result] = (),
) -> str:
    """The report; ``growth``: results of savers measured for the growth rows only."""
    lines = [
        f"## graphkeep bench: {ctx.suite_title}",
        "",
        f"{ctx.where}; {ctx.turns} turns per workload on one thread, {ctx.rounds}"
        f" round(s) per saver and workload in rotating order, medians pooled over rounds;"
        f" history = `get_state_history(limit={HISTORY_LIMIT})`,"
        f" {ctx.history_runs} read(s) per round."
        f" langgraph {version('langgraph', '?')}, langgraph-checkpoint"
        f" {version('langgraph-checkpoint', '?')}, graphkeep {version('graphkeep', '?')},"
        f" Python {platform.python_version()}.",
        "",
    ]
    lines += [f"- {w.name}: {w.description}" for w in ctx.workloads]
    lines += [
        f"- requests = {ctx.request_label}",
        f"- stored = {ctx.stored_label}",
        *[f"- {note}" for note in ctx.notes],
        f"- client CPU = {CPU_LABEL}",
        "- timings are medians on a shared, noisy machine: compare within one run only",
        "",
    ]
    lines += table(
        [
            "workload",
            "saver",
            "ms/turn (median)",
            "client CPU ms/turn (median)",
            f"ms/turn, first {EDGE_TURNS}",
            f"ms/turn, last {EDGE_TURNS}",
            "requests/turn",
            "stored KiB",
            "history entries",
            "history ms (median)",
            "history requests",
        ],
        [
            [
                r.workload,
                r.saver,
                number(r.ms_per_turn, 2),
                number(r.cpu_ms_per_turn, 2),
                number(r.first_ms, 2),
                number(r.last_ms, 2),
                number(r.requests_per_turn, 2),
                kib(r.stored_bytes),
                r.history_entries,
                number(r.history_ms, 1),
                number(r.history_requests),
            ]
            for r in results
        ],
        "llrrrrrrrrr",
    )
    if ctx.rival:
        lines += ["", f"Ratios {ctx.rival} / {ctx.baseline} (above 1 = graphkeep better):", ""]
        by = {(r.saver, r.workload): r for r in results}
        for work in ctx.workloads:
            ours, theirs = by.get((ctx.baseline, work.name)), by.get((ctx.rival, work.name))
            if not ours or not theirs:
                continue
            lines.append(
                f"- {work.name}: ms/turn {ratio(theirs.ms_per_turn, ours.ms_per_turn)},"
                f" requests/turn {ratio(theirs.requests_per_turn, ours.requests_per_turn)},"
                f" stored {ratio(theirs.stored_bytes, ours.stored_bytes)},"
                f" history ms {ratio(theirs.history_ms, ours.history_ms)},"
                f" history requests {ratio(theirs.history_requests, ours.history_requests)}"
            )
    lines += capacity_table(ctx, results)
    lines += growth_table(ctx, [*results, *growth])
    lines += large_table(large)
    lines += target_lines(targets)
    lines += ["", *where_requests_go(results)]
    lines += requests_by_operation(results)
    return "\n".join(lines) + "\n"


#: the saver methods whose capacity units per call the capacity section shows
CAPACITY_METHODS = ("put", "put_writes", "get_tuple")


def capacity_table(ctx: Context, results: Sequence[Result]) -> list[str]:
    """Capacity units per turn (DynamoDB's WCU and RCU), and per saver call of the turns."""
    rows = [r for r in results if r.write_units_per_turn is not None]
    if not rows:
        return []
    lines = [
        "",
        "### Capacity units per turn",
        "",
        "Write and read capacity units (WCU, RCU) the turns' requests consume, computed by"
        " AWS's rules from each request and its response, beside the requests per turn; then"
        " WCU / RCU per saver call of the turns.",
        "",
        *([f"- {ctx.capacity_label}"] if ctx.capacity_label else []),
        "",
    ]
    headers = [
        "workload",
        "saver",
        "requests/turn",
        "WCU/turn",
        "RCU/turn",
        *(f"{m}: WCU / RCU per call" for m in CAPACITY_METHODS),
    ]
    cells = []
    for r in rows:
        per_call = []
        for method in CAPACITY_METHODS:
            calls = r.turn_tally.calls.get(method, 0)
            if not calls:
                per_call.append("")
                continue
            wcu = r.turn_tally.write_units.get(method, 0.0) / calls
            rcu = r.turn_tally.read_units.get(method, 0.0) / calls
            per_call.append(f"{wcu:,.2f} / {rcu:,.2f}")
        cells.append(
            [
                r.workload,
                r.saver,
                number(r.requests_per_turn, 2),
                number(r.write_units_per_turn, 2),
                number(r.read_units_per_turn, 2),
                *per_call,
            ]
        )
    lines += table(headers, cells, "ll" + "r" * (len(headers) - 2))
    return lines


def sent_at(r: Result, turn: int) -> int | None:
    """Bytes sent in ``turn`` (1-based), if counted and run."""
    return r.sent_bytes[turn - 1] if 0 < turn <= len(r.sent_bytes) else None


def sent_median(r: Result, last: int) -> float | None:
    """Median bytes sent per turn over the :data:`SENT_WINDOW` turns ending at ``last``."""
    window = r.sent_bytes[max(last - SENT_WINDOW, 0) : last]
    return statistics.median(window) if window and last <= len(r.sent_bytes) else None


def growth_table(ctx: Context, results: Sequence[Result]) -> list[str]:
    """Issue 13's rows: stored after N and 2N turns of one W50 thread, bytes sent per turn."""
    rows = [r for r in results if r.sent_bytes or r.stored_first is not None]
    if not rows:
        return []
    n = rows[0].turns
    extra = max(r.extra_turns for r in rows)
    far = n + extra
    first_window = f"{max(n - SENT_WINDOW, 0) + 1}-{n}"
    new = new_message_bytes(n)
    lines = [
        "",
        f"### Growth: stored bytes and bytes sent per turn ({GROWTH_WORKLOAD}, {n} and {far}"
        " turns)",
        "",
        f"In round 1 the {GROWTH_WORKLOAD} thread goes on after its history read for {extra}"
        f" more turns ({GROWTH_WORKLOAD}-{far}; untimed, 1 round) and the store is measured"
        f" again: stored({far})/stored({n}) is 2.0 for storage linear in the turns, 4.0 for"
        " quadratic. Sent = the requests of each turn as the client writes them, replies not"
        f" counted; the median is over turns {first_window}. The messages turn {n} adds"
        f" serialize to {new:,} bytes (LangGraph's JsonPlusSerializer, msgpack, ids included);"
        " *sent / new* divides the bytes sent at that turn by them.",
        "",
        f"- stored = {ctx.growth_stored_label or ctx.stored_label}",
        *([f"- sent = {ctx.sent_label}"] if ctx.sent_label else []),
        "",
    ]
    headers = [
        "workload",
        "saver",
        f"stored KiB, {n} turns",
        f"stored KiB, {far} turns",
        f"stored {far}/{n}",
        f"KiB sent at turn {n}",
        f"KiB sent/turn, median {first_window}",
        f"KiB sent at turn {far}",
        f"sent / new at turn {n}",
    ]
    cells = []
    for r in rows:
        stored_far = r.stored_last if r.extra_turns == extra else None
        at_n, at_far = sent_at(r, n), sent_at(r, far)
        cells.append(
            [
                r.workload + ("" if stored_far is None else f" / {GROWTH_WORKLOAD}-{far}"),
                r.saver,
                kib(r.stored_first),
                kib(stored_far),
                ratio(stored_far, r.stored_first).rstrip("x"),
                kib(at_n),
                kib(sent_median(r, n)),
                kib(at_far),
                NA if at_n is None else f"{at_n / new:,.1f}",
            ]
        )
    lines += table(headers, cells, "llrrrrrrr")
    return lines


def large_table(large: Sequence[LargeResult]) -> list[str]:
    if not large:
        return []
    first = large[0]
    lines = [
        "",
        f"### One large message ({first.size_bytes / 1000:,.0f} KB)",
        "",
        f"The W50 graph on a fresh thread: turn 1 sends one human message of"
        f" {first.size_bytes:,} bytes of text, then {first.turns - 1} ordinary turns; the"
        " state is read back and compared.",
        "",
    ]
    lines += table(
        ["saver", "outcome", "ms of the large turn", "requests/turn", "stored KiB"],
        [
            [
                r.saver,
                ("ok: " if r.ok else "FAILED, ") + r.outcome.replace("|", "\\|"),
                number(r.ms_large_turn, 1),
                number(r.requests_per_turn, 2),
                kib(r.stored_bytes),
            ]
            for r in large
        ],
        "llrrr",
    )
    return lines


def large_targets(large: Sequence[LargeResult], baseline: str) -> list[tuple[str, bool]]:
    return [
        (f"{r.saver} stores one {r.size_bytes / 1000:,.0f} KB message and reads it back", r.ok)
        for r in large
        if r.saver == baseline
    ]


def _cell(tally: Tally, method: str, per: int, counted: bool) -> str:
    calls, requests = tally.calls.get(method, 0), tally.requests.get(method, 0)
    if not calls and not requests:
        return ""
    ms = f"{tally.seconds.get(method, 0.0) * 1000 / per:,.2f} ms"
    if per > 1:
        req = f"{requests / per:.2f}" if counted else NA
        return f"{calls / per:.2f} / {req} / {ms}"
    return f"{calls} / {requests if counted else NA} / {ms}"


def where_requests_go(results: Sequence[Result]) -> list[str]:
    """Saver calls the runtime made and the round trips each made, per method."""
    methods = [
        m
        for m in TRACED_METHODS
        if any(m in r.turn_tally.calls or m in r.history_tally.calls for r in results)
    ]
    outside = any(
        OUTSIDE in r.turn_tally.requests or OUTSIDE in r.history_tally.requests for r in results
    )
    header = [*methods, *([OUTSIDE] if outside else [])]
    lines = [
        "### Where the requests go",
        "",
        "Per saver method: calls made by the LangGraph runtime / round trips they made /"
        " wall time inside them, summed over threads (calls a saver makes on itself count"
        " towards the outer call). Turns: per turn, first round; history: one full"
        " `get_state_history` read. The times are a rough attribution only: puts and"
        " writes run on background threads and their wall time includes waiting for the"
        " GIL while nodes run.",
        "",
    ]
    body = []
    for r in results:
        counted = r.requests_per_turn is not None
        for phase, tally, per in (
            ("turns", r.turn_tally, r.turns),
            ("history", r.history_tally, 1),
        ):
            cells = [_cell(tally, m, per, counted) for m in methods]
            if outside:
                extra = tally.requests.get(OUTSIDE, 0)
                cells.append(NA if not counted else f"{extra / per:.2f}" if per > 1 else str(extra))
            body.append([r.workload, r.saver, phase, *cells])
    lines += table(["workload", "saver", "phase", *header], body, "lll" + "r" * len(header))
    return lines


def requests_by_operation(results: Sequence[Result]) -> list[str]:
    """Per turn, each saver method's requests by the store's operation (where the client
    names them: DynamoDB's ``Query``, ``BatchGetItem``, ``PutItem`` ...); first round."""
    rows = [r for r in results if r.turn_tally.operations and r.turns]
    if not rows:
        return []
    lines = [
        "",
        "### Requests per turn by operation",
        "",
        "The turns' requests (first round, retries included) per saver method and the"
        " store operation that carried them, per turn.",
        "",
    ]
    body = []
    for r in rows:
        for method in [*TRACED_METHODS, OUTSIDE]:
            ops = r.turn_tally.operations.get(method)
            if not ops:
                continue
            split = ", ".join(
                f"{op} {n / r.turns:.2f}" for op, n in sorted(ops.items(), key=lambda e: -e[1])
            )
            body.append([r.workload, r.saver, method, f"{sum(ops.values()) / r.turns:.2f}", split])
        total = sum(n for ops in r.turn_tally.operations.values() for n in ops.values())
        body.append([r.workload, r.saver, "**all**", f"{total / r.turns:.2f}", ""])
    lines += table(["workload", "saver", "method", "requests/turn", "by operation"], body, "lllrl")
    return lines


#: bar colors: graphkeep and the reference saver fixed, the others from the palette
COLORS = {"graphkeep": "#2a7ab9", "InMemorySaver": "#9aa5b1"}
PALETTE = ["#e07b39", "#5aa469", "#b5446e", "#7d5ba6"]


def chart(
    ctx: Context, results: Sequence[Result], path: Path, growth: Sequence[Result] = ()
) -> None:
    """Grouped bars per metric: one group per workload (or growth point), one bar per saver;
    ``growth``: savers shown in the growth panels only."""
    main = list(dict.fromkeys(r.saver for r in results))
    savers = list(dict.fromkeys([*main, *(r.saver for r in growth)]))
    workloads = [w.name for w in ctx.workloads if any(r.workload == w.name for r in results)]
    by = {(r.saver, r.workload): r for r in [*results, *growth]}
    turns = results[0].turns if results else ctx.turns
    extra = max((r.extra_turns for r in [*results, *growth]), default=0)
    colors = {s: COLORS.get(s) or PALETTE[i % len(PALETTE)] for i, s in enumerate(savers)}

    def field(attr: str) -> Series:
        def value(saver: str, group: str) -> float | int | None:
            r = by.get((saver, group))
            found: float | int | None = getattr(r, attr) if r else None
            return found

        return value

    def stored_growth(saver: str, group: str) -> float | int | None:
        r = by.get((saver, GROWTH_WORKLOAD))
        if r is None:
            return None
        return r.stored_first if group == GROWTH_WORKLOAD else r.stored_last

    def sent(saver: str, group: str) -> float | int | None:
        r = by.get((saver, group))
        return sent_at(r, turns) if r else None

    def panel(
        title: str, shown: list[str], groups: list[str], values: Series, in_kib: bool
    ) -> Panel:
        bars = []
        for saver in shown:
            raw = [values(saver, group) for group in groups]
            scaled = [None if v is None else v / 1024 if in_kib else float(v) for v in raw]
            labels = [
                ""
                if v is None or x is None
                else f"{x:,.0f}"
                if x >= 100 or isinstance(v, int) and not in_kib
                else f"{x:,.1f}"
                for v, x in zip(raw, scaled, strict=True)
            ]
            bars.append(Bars(saver, scaled, colors[saver], labels))
        return Panel(title, groups, bars)

    growth_groups = [GROWTH_WORKLOAD, f"{GROWTH_WORKLOAD}-{turns + extra}"] if extra else []
    panels = [
        panel("ms per turn (median)", main, workloads, field("ms_per_turn"), False),
        panel("client CPU ms per turn (median)", main, workloads, field("cpu_ms_per_turn"), False),
        panel("requests per turn", main, workloads, field("requests_per_turn"), False),
        panel("stored (KiB)", main, workloads, field("stored_bytes"), True),
        panel("history read (ms, median)", main, workloads, field("history_ms"), False),
        panel("requests to read the history", main, workloads, field("history_requests"), False),
        panel(
            f"stored (KiB) after {turns} and {turns + extra} turns",
            savers,
            growth_groups,
            stored_growth,
            True,
        ),
        panel(f"KiB sent to the store at turn {turns}", savers, workloads, sent, True),
    ]
    note = (
        f"{ctx.suite_title}: {ctx.turns} turns per workload, {ctx.rounds} round(s)\n"
        f"history = get_state_history(limit={HISTORY_LIMIT})\n"
        "requests: round trips counted at the client\n"
        "sent: request bytes counted at the client\n"
        f"growth: the {GROWTH_WORKLOAD} thread of round 1, {extra} more turns\n"
        "n/a: no store behind the saver\n"
        "medians on a noisy machine"
    )
    figure = Figure(
        f"graphkeep bench: {ctx.suite_title}",
        panels,
        rows=2,
        columns=4,
        size=(20, 8.5),
        title_size=14,
        legend=Legend([(s, colors[s]) for s in savers], note),
    )
    render.chart(figure, path)
