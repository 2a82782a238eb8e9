"""``python -m graphkeep.bench``: the Redis suite end to end, and how it counts requests."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

import graphkeep
from graphkeep.bench import cli, report
from graphkeep.bench.probes import Probe, count_round_trips
from graphkeep.bench.suites import Options
from graphkeep.bench.worker import InSubprocess
from graphkeep.bench.workloads import Opened, large_text, measure_large, workload
from graphkeep.connect import BACKENDS

from .conftest import REDIS_URL

pytestmark = pytest.mark.redis

SAVERS = {"graphkeep", "plainredis", "InMemorySaver"}


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphkeep.bench", *args],
        env=dict(os.environ, REDIS_URL=REDIS_URL),
        capture_output=True,
        text=True,
        timeout=600,
    )


def table_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    """(workload, saver) -> the other cells of the main table."""
    rows: dict[tuple[str, str], list[str]] = {}
    main_table = markdown.split("### Where the requests go")[0]
    for line in main_table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0].startswith("W50") and cells[1] in SAVERS:
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_quick_redis_suite_compares_three_savers_and_graphkeep_needs_8_requests_per_turn(
    tmp_path: Path,
) -> None:
    done = run_bench("--suite", "redis", "--quick", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert set(rows) == {(w, s) for w in ("W50", "W50-delta") for s in SAVERS}, done.stdout

    requests_per_turn = {key: cells[1] for key, cells in rows.items()}
    assert float(requests_per_turn[("W50", "graphkeep")]) <= 8
    assert float(requests_per_turn[("W50-delta", "graphkeep")]) <= 9
    assert requests_per_turn[("W50", "InMemorySaver")] == "n/a"
    # plainredis pays several round trips per saver call
    assert float(requests_per_turn[("W50", "plainredis")]) > 8

    history_entries = {key: int(cells[3]) for key, cells in rows.items()}
    assert set(history_entries.values()) == {40}  # 10 turns x 4 checkpoints

    written = (tmp_path / "redis.md").read_text()
    assert table_rows(written) == rows
    assert "### Where the requests go" in written
    assert (tmp_path / "redis.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_pipeline_or_one_script_call_counts_as_one_request() -> None:
    probe = Probe()
    with graphkeep.connect(REDIS_URL) as saver:
        client = count_round_trips(saver.client, probe)
        client.ping()
        assert probe.total == 1
        pipe = client.pipeline(transaction=False)
        for n in range(5):
            pipe.get(f"graphkeep-bench-test:{n}")
        pipe.execute()
        assert probe.total == 2
        client.register_script("return 1")()  # EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA
        assert probe.total in (3, 5)


def test_requests_are_attributed_to_the_saver_call_that_made_them() -> None:
    probe = Probe()
    with graphkeep.connect(REDIS_URL, key_prefix="graphkeep-bench-test") as saver:
        count_round_trips(saver.client, probe)
        probe.trace(saver)
        saver.get_tuple({"configurable": {"thread_id": "bench-attribution"}})
        list(saver.list({"configurable": {"thread_id": "bench-attribution"}}))
    tally = probe.take()
    assert tally.calls == {"get_tuple": 1, "list": 1}
    assert tally.requests == {"get_tuple": 1, "list": 1}


def test_a_contender_can_run_in_another_interpreter() -> None:
    contender = InSubprocess("in-subprocess", sys.executable, "graphkeep.bench.worker:in_memory")
    result = contender.run(workload("W50-delta"), Options(turns=2, history_runs=1), "test")
    assert (result.saver, result.workload, result.history_entries) == (
        "in-subprocess",
        "W50-delta",
        8,
    )
    assert result.turn_tally.calls["put"] == 8
    assert result.requests_per_turn is None


@pytest.mark.parametrize("scheme", ["mongodb", "dynamodb"])
def test_a_suite_whose_backend_has_not_landed_is_skipped_not_failed(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(BACKENDS, scheme, raising=False)
    assert cli.main(["--suite", scheme, "--out", str(tmp_path)]) == 0
    assert f"skipped: {scheme}: backend not available yet" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_the_large_message_check_runs_in_another_interpreter() -> None:
    contender = InSubprocess("in-subprocess", sys.executable, "graphkeep.bench.worker:in_memory")
    result = contender.run_large(50_000, "test")
    assert (result.saver, result.size_bytes, result.ok) == ("in-subprocess", 50_000, True)
    assert result.outcome == "stored and read back"
    assert result.ms_large_turn is not None and result.requests_per_turn is None


class RefusesLargeCheckpoints(InMemorySaver):
    """Stands for a saver on a store with an item limit and no guard."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if len(repr(checkpoint["channel_values"])) > 10_000:
            raise ValueError("Item size has exceeded the maximum allowed size")
        return super().put(config, checkpoint, metadata, new_versions)


def test_the_large_message_check_reports_a_failing_saver_in_the_table() -> None:
    opened = Opened(RefusesLargeCheckpoints(), Probe(counts_requests=False))
    failed = measure_large(opened, suite="test", saver_name="refuses", size=20_000)
    assert not failed.ok
    assert failed.outcome.startswith("turn 1: ValueError: Item size has exceeded"), failed.outcome

    fine = measure_large(
        Opened(InMemorySaver(), Probe(counts_requests=False)),
        suite="test",
        saver_name="graphkeep",
        size=20_000,
    )
    assert fine.ok, fine.outcome
    table = "\n".join(report.large_table([fine, failed]))
    assert "| refuses | FAILED, turn 1: ValueError: Item size has exceeded" in table
    assert "| graphkeep | ok: stored and read back |" in table
    assert report.large_targets([fine, failed], "graphkeep") == [
        ("graphkeep stores one 20 KB message and reads it back", True)
    ]


def test_large_text_is_deterministic_text_of_the_size_asked() -> None:
    text = large_text(500_000)
    assert len(text.encode()) == 500_000 and text == large_text(500_000)
    assert 2 < len(text) / len(zlib.compress(text.encode())) < 8  # compressible, like prose
