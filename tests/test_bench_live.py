"""``python -m bench --suite live --quick``: the report's shape, never its timings.

The quick run measures every backend (Redis, Redis Cluster, MongoDB, DynamoDB) at a fifth
of the sizes and the PUBLISH comparison on the same Redis; the test checks that every
cell of every backend that has its event log and watch is a number, that a cell that is
not says why in the notes, and what the issue makes checkable without timing: the
graphkeep reader loses nothing in the disconnect test, batching costs fewer requests
than events, and a watcher misses no checkpoint. The AG-UI endpoint's measurement is also run
on its own on every backend, its counts checked against what the event log and ``serve`` hold.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import graphkeep
from bench.live_workload import Requests, forget_agui, measure_agui, percentile
from bench.suites import live as live_suite
from bench.suites import load
from bench.worker import ROOT
from graphkeep.events.threads import index_id

from .conftest import REDIS_URL

pytestmark = pytest.mark.redis

BACKENDS = list(live_suite.BACKENDS)
NUMBER = re.compile(r"^\d[\d,]*(\.\d+)?$")


def cells(markdown: str, first_header: str) -> dict[str, list[str]]:
    """The table starting with ``| first_header |``: first cell -> the other cells."""
    table = markdown.split(f"| {first_header} |", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in table.splitlines()[1:]:  # [0]: the rest of the header line
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if parts and not parts[0].startswith("---"):
            rows[parts[0]] = parts[1:]
    return rows


def test_percentiles_are_nearest_rank_and_sizes_scale_down_for_quick() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0
    assert percentile([7.0], 0.95) == 7.0
    full, quick = live_suite.Sizes.full(), live_suite.Sizes.scaled(0.2)
    assert (full.batched, full.idle_watchers, full.disconnect_events) == (5000, 100, 5000)
    assert quick.batched < full.batched and quick.watch_puts < full.watch_puts
    assert quick.idle_settle == 0 and full.idle_settle > 5  # full: after the back-off


def test_the_live_suite_is_registered_with_its_own_runner() -> None:
    suite = load("live")
    assert suite.name == "live" and suite.run is not None
    assert suite.unavailable() is None


def test_quick_live_suite_reports_every_backend_side_by_side(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--suite", "live", "--quick"] + ["--out", str(tmp_path)],
        cwd=ROOT,
        env=dict(os.environ, REDIS_URL=REDIS_URL),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = (tmp_path / "live.md").read_text()
    assert report in done.stdout
    assert (tmp_path / "live.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    main = cells(report, "measure")
    assert list(main) == [label for label, _ in live_suite.ROWS]
    header = report.split("| measure |", 1)[1].splitlines()[0]
    assert [c.strip() for c in header.strip(" |").split("|")] == BACKENDS
    notes = report.split("Notes:", 1)[1] if "Notes:" in report else ""
    for column, backend in enumerate(BACKENDS):
        column_cells = {label: row[column] for label, row in main.items()}
        if backend == "redis":  # the reference backend: every cell measured
            assert "n/a" not in column_cells.values(), (column_cells, notes)
        for label, cell in column_cells.items():
            if cell == "n/a":
                assert f"- {backend}: " in notes, (backend, label)
        if column_cells["watch: checkpoints missed"] != "n/a":
            assert column_cells["watch: checkpoints missed"] == "0"
            for label in ("watch latency p50 (ms)", "watch latency p95 (ms)"):
                assert NUMBER.match(column_cells[label]), (backend, label)
        if column_cells["watch burst: checkpoints missed"] != "n/a":
            assert column_cells["watch burst: checkpoints missed"] == "0", backend
            assert NUMBER.match(column_cells["watch burst latency p95 (ms)"]), backend
        for label, cell in column_cells.items():
            if label.endswith(")"):  # a measure with its unit: a number
                assert cell == "n/a" or NUMBER.match(cell), (backend, label, cell)
        stream = column_cells["stream_run, token graph (requests / 1,000 events)"]
        agui = column_cells["AG-UI endpoint, token graph (requests / 1,000 events)"]
        if stream != "n/a":  # the same event log: the AG-UI endpoint is measured too
            assert agui != "n/a", (backend, notes)
        if agui != "n/a":
            assert float(agui.replace(",", "")) > 0, backend
            rate = column_cells["AG-UI endpoint, token graph (events/s)"]
            assert float(rate.replace(",", "")) > 0, backend
        one = column_cells["append one by one (requests / 1,000 events)"]
        many = column_cells["append_many, batches of 100 (requests / 1,000 events)"]
        if one != "n/a" and many != "n/a":
            assert float(many.replace(",", "")) * 5 < float(one.replace(",", ""))

    rival = cells(report, "approach")
    publish = rival["PUBLISH + SUBSCRIBE"]
    ours = rival["graphkeep `append` + `read(after=)`"]
    assert NUMBER.match(publish[0]) and publish[1] == "1,000"
    quick = live_suite.Sizes.scaled(10 / live_suite.FULL_TURNS)
    # received, lost, duplicated, in order
    assert ours[2:] == [f"{quick.disconnect_events:,}", "0", "0", "yes"], ours
    assert int(publish[3].replace(",", "")) > 0, publish  # PUBLISH loses what it missed

    targets = report.split("Targets:\n\n", 1)[1].split("\n\n", 1)[0]
    assert "Redis: a watcher sees a checkpoint at most 20 ms (p95)" in targets
    assert "Redis: 1,000 small events cost far fewer" in targets
    assert ", AG-UI endpoint " in targets.split("1,000 small events", 1)[1].splitlines()[0]
    assert "- [met] Redis: 1,000 small events cost far fewer" in targets
    assert "- [met] Redis disconnect test" in targets
    # the polling backends keep up with a burst (issue 28 item 6)
    for backend in ("mongodb", "dynamodb"):
        assert f"{backend}: a polling watcher keeps up with a burst" in targets, targets


def test_agui_endpoint_measurement_counts_what_the_log_holds(
    graphkeep_backend: str, graphkeep_url: str
) -> None:
    """The AG-UI row's figures: every event of the run counted once (the log holds them and the
    close, ``serve`` sends them), the requests of the log and of the saver counted."""
    tokens = 60
    with graphkeep.connect(graphkeep_url) as saver, graphkeep.connect_events(graphkeep_url) as log:
        counter, saver_counter = Requests().wrap(log), Requests().wrap(saver)
        result = measure_agui(saver, saver_counter, log, counter, tokens)
        try:
            stored = [event for _, event in log.read(result.run, follow=False)]
            assert stored[-1] == {"type": "close", "status": "success"}
            assert result.events == len(stored) - 1
            kinds = [event["type"] for event in stored[:-1]]
            assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
            assert kinds.count("TEXT_MESSAGE_CONTENT") == tokens
            assert result.events > tokens  # RUN_STARTED, the message's start and end ...
            # the run's close, RUN_STARTED and the thread's index are requests of their own;
            # the graph's checkpoint is read and written through the saver
            assert result.requests - result.saver_requests >= 3
            assert result.saver_requests >= 2
            assert result.requests <= counter.count + saver_counter.count
            assert result.seconds > 0 and result.per_second > 0
            assert saver.get_tuple({"configurable": {"thread_id": result.thread}}) is not None
        finally:
            forget_agui(saver, log, result)
        assert log.state(result.run) is None and log.state(index_id(result.thread)) is None
        assert saver.get_tuple({"configurable": {"thread_id": result.thread}}) is None
