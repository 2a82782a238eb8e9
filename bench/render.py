"""How every bench report is drawn: number cells, markdown tables and sections, grouped-bar
charts, and writing ``<out>/<suite>.md`` / ``.png`` (the saver suites' :mod:`.report`, the
store and live suites alike)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

NA = "n/a"


# --------------------------------------------------------------------------- cells


def number(value: float | int | None, digits: int = 1) -> str:
    """``1,234`` for an int, ``1,234.5`` (``digits`` decimals) for a float, n/a for None or
    a float that is not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def kib(size: int | float | None) -> str:
    """Bytes as KiB with one decimal."""
    return NA if size is None else f"{size / 1024:,.1f}"


def ratio(theirs: float | int | None, ours: float | int | None) -> str:
    """``theirs / ours`` as ``2.50x`` (above 1: ours is better for a cost)."""
    if theirs is None or ours is None or not ours:
        return NA
    return f"{theirs / ours:.2f}x"


def version(dist: str, missing: str = "-") -> str:
    """The installed version of ``dist``, else ``missing``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return missing


def versions(dists: Sequence[str], missing: str = "-") -> str:
    """``langgraph 1.0.1, graphkeep 0.2.0, ...``"""
    return ", ".join(f"{d} {version(d, missing)}" for d in dists)


# --------------------------------------------------------------------------- markdown


def row(cells: Sequence[object]) -> str:
    """One markdown table line."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str) -> list[str]:
    """A markdown table; ``align`` has one letter per column: ``l`` (text) or ``r`` (numbers)."""
    if len(align) != len(headers):
        raise ValueError(f"{len(headers)} columns, alignment {align!r}")
    lines = [row(headers), "|" + "".join("---:|" if a == "r" else "---|" for a in align)]
    lines += [row(cells) for cells in rows]
    return lines


def section(title: str, items: Sequence[str]) -> list[str]:
    """``Title:`` and a bullet per item, after a blank line; nothing without items."""
    if not items:
        return []
    return ["", f"{title}:", "", *[f"- {item}" for item in items]]


def target_lines(targets: Sequence[tuple[str, bool]]) -> list[str]:
    """The ``Targets:`` section: ``- [met] ...`` / ``- [MISSED] ...``."""
    return section("Targets", [f"[{'met' if met else 'MISSED'}] {text}" for text, met in targets])


def publish(text: str, out: Path, name: str, chart: Callable[[Path], None] | None = None) -> None:
    """Write the report to ``<out>/<name>.md`` and stdout, and the chart to ``<name>.png``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    print()
    print(text)
    print(f"written: {out / f'{name}.md'}")
    if chart is not None:
        chart(out / f"{name}.png")
        print(f"written: {out / f'{name}.png'}")


# --------------------------------------------------------------------------- charts


@dataclass
class Bars:
    """One series of a panel: a value per x group (None: not measured)."""

    label: str
    values: Sequence[float | None]
    color: str | None = None
    #: text over each bar (None: no text); a group without a value shows its label at the
    #: foot of the panel, or n/a when that is empty
    labels: Sequence[str] | None = None


@dataclass
class Panel:
    title: str
    groups: Sequence[str]
    bars: Sequence[Bars]
    log: bool = False
    #: a legend of the series inside the panel
    legend: bool = False
    tick_size: float | None = None
    #: a dashed horizontal reference line: (y, its legend label)
    line: tuple[float, str] | None = None


@dataclass
class Legend:
    """A panel of its own holding the legend (label, color) and a note under it."""

    entries: Sequence[tuple[str, str]]
    note: str = ""


@dataclass
class Figure:
    title: str
    panels: Sequence[Panel]
    rows: int = 1
    columns: int = 2
    size: tuple[float, float] = (13, 5)
    title_size: float | None = None
    legend: Legend | None = None


def chart(figure: Figure, path: Path) -> None:
    """Draw ``figure``'s grouped bars (one group per x label, one bar per series) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, grid = plt.subplots(figure.rows, figure.columns, figsize=figure.size, squeeze=False)
    axes = list(grid.flat)
    for ax, panel in zip(axes, figure.panels, strict=False):
        width = 0.8 / max(len(panel.bars), 1)
        for i, bars in enumerate(panel.bars):
            xs: list[float] = []
            ys: list[float] = []
            for j, value in enumerate(bars.values):
                x = j + (i - (len(panel.bars) - 1) / 2) * width
                if value is None or (panel.log and value <= 0):
                    if bars.labels is not None:
                        # at the foot of the axis (y in axes units: seen on a log scale too)
                        ax.text(
                            x,
                            0.01,
                            bars.labels[j] or NA,
                            ha="center",
                            va="bottom",
                            fontsize=8,
                            color="#666",
                            transform=ax.get_xaxis_transform(),
                        )
                    continue
                xs.append(x)
                ys.append(value)
                if bars.labels is not None:
                    ax.text(x, value, bars.labels[j], ha="center", va="bottom", fontsize=8)
            ax.bar(xs, ys, width * 0.95, color=bars.color, label=bars.label)
        ax.set_title(panel.title, fontsize=11)
        ax.set_xticks(range(len(panel.groups)), panel.groups, fontsize=panel.tick_size)
        ax.set_xlim(-0.5, max(len(panel.groups), 1) - 0.5)
        if panel.log:
            ax.set_yscale("log")
        else:
            ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
        if panel.line is not None:
            y, label = panel.line
            ax.axhline(y, color="grey", linestyle="--", linewidth=0.8, label=label)
        if panel.legend:
            ax.legend(fontsize=8)
    spare = axes[len(figure.panels) :]
    for ax in spare:
        ax.axis("off")
    if figure.legend is not None and spare:
        ax = spare[0]
        handles = [Patch(color=color) for _, color in figure.legend.entries]
        labels = [label for label, _ in figure.legend.entries]
        ax.legend(handles, labels, loc="upper left", fontsize=11, frameon=False)
        ax.text(0.0, 0.45, figure.legend.note, fontsize=10, va="top", transform=ax.transAxes)
    fig.suptitle(figure.title, fontsize=figure.title_size)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
