"""Bench output: a markdown report (table, ratios, growth, targets, where requests go) and a
PNG chart."""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from graphkeep.bench.probes import OUTSIDE, TRACED_METHODS, Tally
from graphkeep.bench.workloads import (
    GROWTH_WORKLOAD,
    HISTORY_LIMIT,
    LargeResult,
    Result,
    Workload,
    new_message_bytes,
)

NA = "n/a"


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


#: bytes sent per turn: the median is over this many last turns
SENT_WINDOW = 10
#: a chart panel's value for one saver, by x group (None: not measured)
Series = Callable[[str], float | int | None]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return NA
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _kib(value: int | None) -> str:
    return NA if value is None else f"{value / 1024:,.1f}"


def _ratio(theirs: float | int | None, ours: float | int | None) -> str:
    if theirs is None or ours is None or not ours:
        return NA
    return f"{theirs / ours:.2f}x"


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
        f" langgraph {_version('langgraph')}, langgraph-checkpoint"
        f" {_version('langgraph-checkpoint')}, graphkeep {_version('graphkeep')},"
        f" Python {platform.python_version()}.",
        "",
    ]
    lines += [f"- {w.name}: {w.description}" for w in ctx.workloads]
    lines += [
        f"- requests = {ctx.request_label}",
        f"- stored = {ctx.stored_label}",
        *[f"- {note}" for note in ctx.notes],
        "- timings are medians on a shared, noisy machine: compare within one run only",
        "",
        "| workload | saver | ms/turn (median) | requests/turn | stored KiB"
        " | history entries | history ms (median) | history requests |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.workload} | {r.saver} | {_num(r.ms_per_turn, 2)}"
            f" | {_num(r.requests_per_turn, 2)} | {_kib(r.stored_bytes)}"
            f" | {r.history_entries} | {_num(r.history_ms, 1)}"
            f" | {_num(r.history_requests)} |"
        )
    if ctx.rival:
        lines += ["", f"Ratios {ctx.rival} / {ctx.baseline} (above 1 = graphkeep better):", ""]
        by = {(r.saver, r.workload): r for r in results}
        for work in ctx.workloads:
            ours, theirs = by.get((ctx.baseline, work.name)), by.get((ctx.rival, work.name))
            if not ours or not theirs:
                continue
            lines.append(
                f"- {work.name}: ms/turn {_ratio(theirs.ms_per_turn, ours.ms_per_turn)},"
                f" requests/turn {_ratio(theirs.requests_per_turn, ours.requests_per_turn)},"
                f" stored {_ratio(theirs.stored_bytes, ours.stored_bytes)},"
                f" history ms {_ratio(theirs.history_ms, ours.history_ms)},"
                f" history requests {_ratio(theirs.history_requests, ours.history_requests)}"
            )
    lines += growth_table(ctx, [*results, *growth])
    lines += large_table(large)
    if targets:
        lines += ["", "Targets:", ""]
        lines += [f"- [{'met' if met else 'MISSED'}] {text}" for text, met in targets]
    lines += ["", *where_requests_go(results)]
    return "\n".join(lines) + "\n"


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
        f"| workload | saver | stored KiB, {n} turns | stored KiB, {far} turns"
        f" | stored {far}/{n} | KiB sent at turn {n} | KiB sent/turn, median {first_window}"
        f" | KiB sent at turn {far} | sent / new at turn {n} |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        stored_far = r.stored_last if r.extra_turns == extra else None
        ratio = _ratio(stored_far, r.stored_first)
        at_n, at_far = sent_at(r, n), sent_at(r, far)
        median = sent_median(r, n)
        lines.append(
            f"| {r.workload}{'' if stored_far is None else f' / {GROWTH_WORKLOAD}-{far}'}"
            f" | {r.saver} | {_kib(r.stored_first)} | {_kib(stored_far)}"
            f" | {ratio.rstrip('x')} | {_kib(at_n)}"
            f" | {NA if median is None else f'{median / 1024:,.1f}'} | {_kib(at_far)}"
            f" | {NA if at_n is None else f'{at_n / new:,.1f}'} |"
        )
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
        "| saver | outcome | ms of the large turn | requests/turn | stored KiB |",
        "|---|---|---:|---:|---:|",
    ]
    for r in large:
        outcome = r.outcome.replace("|", "\\|")
        lines.append(
            f"| {r.saver} | {'ok: ' if r.ok else 'FAILED, '}{outcome}"
            f" | {_num(r.ms_large_turn, 1)} | {_num(r.requests_per_turn, 2)}"
            f" | {_kib(r.stored_bytes)} |"
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
        "| workload | saver | phase | " + " | ".join(header) + " |",
        "|---|---|---|" + "---:|" * len(header),
    ]
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
            lines.append(f"| {r.workload} | {r.saver} | {phase} | " + " | ".join(cells) + " |")
    return lines


def chart(
    ctx: Context, results: Sequence[Result], path: Path, growth: Sequence[Result] = ()
) -> None:
    """Grouped bars per metric: one group per workload (or growth point), one bar per saver;
    ``growth``: savers shown in the growth panels only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    main = list(dict.fromkeys(r.saver for r in results))
    savers = list(dict.fromkeys([*main, *(r.saver for r in growth)]))
    workloads = [w.name for w in ctx.workloads if any(r.workload == w.name for r in results)]
    by = {(r.saver, r.workload): r for r in [*results, *growth]}
    turns = results[0].turns if results else ctx.turns
    extra = max((r.extra_turns for r in [*results, *growth]), default=0)

    def field(attr: str) -> Callable[[str], Series]:
        def per_saver(saver: str) -> Series:
            def per_group(group: str) -> float | int | None:
                r = by.get((saver, group))
                value: float | int | None = getattr(r, attr) if r else None
                return value

            return per_group

        return per_saver

    def stored_growth(saver: str) -> Series:
        r = by.get((saver, GROWTH_WORKLOAD))
        points = {
            f"{GROWTH_WORKLOAD}": r.stored_first if r else None,
            f"{GROWTH_WORKLOAD}-{turns + extra}": r.stored_last if r else None,
        }
        return lambda group: points.get(group)

    def sent(saver: str) -> Series:
        return lambda group: sent_at(by[(saver, group)], turns) if (saver, group) in by else None

    growth_groups = [GROWTH_WORKLOAD, f"{GROWTH_WORKLOAD}-{turns + extra}"] if extra else []
    # (title, savers, x groups, value per saver and group, shown in KiB)
    panels: list[tuple[str, list[str], list[str], Callable[[str], Series], bool]] = [
        ("ms per turn (median)", main, workloads, field("ms_per_turn"), False),
        ("requests per turn", main, workloads, field("requests_per_turn"), False),
        ("stored (KiB)", main, workloads, field("stored_bytes"), True),
        ("history read (ms, median)", main, workloads, field("history_ms"), False),
        ("requests to read the history", main, workloads, field("history_requests"), False),
        (
            f"stored (KiB) after {turns} and {turns + extra} turns",
            savers,
            growth_groups,
            stored_growth,
            True,
        ),
        (f"KiB sent to the store at turn {turns}", savers, workloads, sent, True),
    ]
    colors = {"graphkeep": "#2a7ab9", "InMemorySaver": "#9aa5b1"}
    palette = ["#e07b39", "#5aa469", "#b5446e", "#7d5ba6"]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    for ax, (title, shown, groups, values, in_kib) in zip(axes.flat, panels, strict=False):
        width = 0.8 / max(len(shown), 1)
        for i, saver in enumerate(shown):
            color = colors.get(saver) or palette[savers.index(saver) % len(palette)]
            of = values(saver)
            for j, name in enumerate(groups):
                raw = of(name)
                x = j + (i - (len(shown) - 1) / 2) * width
                if raw is None:
                    ax.text(x, 0, NA, ha="center", va="bottom", fontsize=8, color="#666")
                    continue
                value = raw / 1024 if in_kib else float(raw)
                ax.bar(x, value, width * 0.95, color=color, label=saver if j == 0 else None)
                whole = value >= 100 or isinstance(raw, int) and not in_kib
                label = f"{value:,.0f}" if whole else f"{value:,.1f}"
                ax.text(x, value, label, ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=11)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_xlim(-0.5, max(len(groups), 1) - 0.5)
        ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
    legend_ax = axes.flat[len(panels)]
    legend_ax.axis("off")
    handles = [
        Patch(color=colors.get(s) or palette[i % len(palette)]) for i, s in enumerate(savers)
    ]
    legend_ax.legend(handles, savers, loc="upper left", fontsize=11, frameon=False)
    legend_ax.text(
        0.0,
        0.45,
        f"{ctx.suite_title}: {ctx.turns} turns per workload, {ctx.rounds} round(s)\n"
        f"history = get_state_history(limit={HISTORY_LIMIT})\n"
        "requests: round trips counted at the client\n"
        "sent: request bytes counted at the client\n"
        f"growth: the {GROWTH_WORKLOAD} thread of round 1, {extra} more turns\n"
        "n/a: no store behind the saver\n"
        "medians on a noisy machine",
        fontsize=10,
        va="top",
        transform=legend_ax.transAxes,
    )
    fig.suptitle(f"graphkeep bench: {ctx.suite_title}", fontsize=14)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
