"""Bench output: a markdown report (table, ratios, targets, where requests go) and a PNG chart."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from graphkeep.bench.probes import OUTSIDE, TRACED_METHODS, Tally
from graphkeep.bench.workloads import HISTORY_LIMIT, LargeResult, Result, Workload

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
) -> str:
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
    lines += large_table(large)
    if targets:
        lines += ["", "Targets:", ""]
        lines += [f"- [{'met' if met else 'MISSED'}] {text}" for text, met in targets]
    lines += ["", *where_requests_go(results)]
    return "\n".join(lines) + "\n"


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


def chart(ctx: Context, results: Sequence[Result], path: Path) -> None:
    """Grouped bars per metric: one group per workload, one bar per saver."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    savers = list(dict.fromkeys(r.saver for r in results))
    workloads = [w.name for w in ctx.workloads if any(r.workload == w.name for r in results)]
    by = {(r.saver, r.workload): r for r in results}
    panels: list[tuple[str, str]] = [
        ("ms_per_turn", "ms per turn (median)"),
        ("requests_per_turn", "requests per turn"),
        ("stored_bytes", "stored (KiB)"),
        ("history_ms", "history read (ms, median)"),
        ("history_requests", "requests to read the history"),
    ]
    colors = {"graphkeep": "#2a7ab9", "InMemorySaver": "#9aa5b1"}
    palette = ["#e07b39", "#5aa469", "#b5446e", "#7d5ba6"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    width = 0.8 / max(len(savers), 1)
    for ax, (attr, title) in zip(axes.flat, panels, strict=False):
        for i, saver in enumerate(savers):
            color = colors.get(saver) or palette[i % len(palette)]
            for j, name in enumerate(workloads):
                r = by.get((saver, name))
                raw = getattr(r, attr) if r else None
                x = j + (i - (len(savers) - 1) / 2) * width
                if raw is None:
                    ax.text(x, 0, NA, ha="center", va="bottom", fontsize=8, color="#666")
                    continue
                value = raw / 1024 if attr == "stored_bytes" else float(raw)
                ax.bar(x, value, width * 0.95, color=color, label=saver if j == 0 else None)
                whole = value >= 100 or isinstance(raw, int) and attr != "stored_bytes"
                label = f"{value:,.0f}" if whole else f"{value:,.1f}"
                ax.text(x, value, label, ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=11)
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set_xlim(-0.5, len(workloads) - 0.5)
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
