"""``python -m bench --suite turncost --quick``: the turn cost section (issue 48) is produced with
every column filled on every backend, never its timings.

The quick run measures W50 on Redis (graphkeep, plainredis), Redis Stack (graphkeep,
RedisSaver), MongoDB (graphkeep, MongoDBSaver) and DynamoDB (graphkeep, DynamoDBSaver in its
own virtualenv), each beside InMemorySaver, and the live suite's AG-UI endpoint and
``stream_run`` rows on every backend of the live suite. Under ``--suite all`` the section
reads what the other suites measured: that path is run here on the rows of a real quick
Redis run handed to it as ``--suite all`` would.

Redis Stack's database 0 is shared (nothing is flushed: fresh key prefixes, dropped after), but
the bench's concurrency suite flushes it, so these tests stay in the main lane with the other
``redis_stack`` tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cli
from bench.suites import SUITES, turncost
from bench.suites import live as live_suite
from bench.worker import ROOT

from .conftest import REDIS_STACK_URL, REDIS_URL

pytestmark = [
    pytest.mark.redis,
    pytest.mark.redis_stack,
    pytest.mark.mongodb,
    pytest.mark.dynamodb,
]

NUMBER = r"[0-9][0-9,]*(\.[0-9]+)?"
TIMES = re.compile(rf"^{NUMBER} x$")
PLAIN = re.compile(rf"^{NUMBER}$")
HEADERS = [
    "saver",
    "ms/turn",
    "ms x InMemorySaver",
    "client CPU ms/turn",
    "CPU x InMemorySaver",
    "requests/turn",
]
AGUI_HEADERS = [
    "backend",
    "AG-UI events",
    "AG-UI events/s",
    "AG-UI requests / 1,000 events",
    "stream_run events/s",
    "stream_run requests / 1,000 events",
    "stream_run / AG-UI events/s",
]
SAVERS = {
    "Redis": ["**graphkeep**", "plainredis", "InMemorySaver"],
    "Redis Stack": ["**graphkeep**", "RedisSaver", "InMemorySaver"],
    "MongoDB": ["**graphkeep**", "MongoDBSaver", "InMemorySaver"],
    "DynamoDB": ["**graphkeep**", "DynamoDBSaver", "InMemorySaver"],
}


def tables(markdown: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """``### title`` -> (the header cells, the rows' cells) of the table under it."""
    found: dict[str, tuple[list[str], list[list[str]]]] = {}
    for part in markdown.split("\n### ")[1:]:
        title, _, body = part.partition("\n")
        lines = [line for line in body.splitlines() if line.startswith("|")]
        assert lines, f"no table under {title!r}:\n{body}"
        cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
        found[title.strip()] = (cells[0], cells[2:])
    return found


def check_backend(title: str, header: list[str], rows: list[list[str]]) -> None:
    """Every column there and filled, for graphkeep, the rival and InMemorySaver."""
    assert header == HEADERS, (title, header)
    assert [row[0] for row in rows] == SAVERS[title], (title, rows)
    for saver, ms, ms_x, cpu, cpu_x, requests in rows:
        assert PLAIN.match(ms) and float(ms.replace(",", "")) > 0, (title, saver, ms)
        assert PLAIN.match(cpu) and float(cpu.replace(",", "")) > 0, (title, saver, cpu)
        assert TIMES.match(ms_x) and TIMES.match(cpu_x), (title, saver, ms_x, cpu_x)
        if saver == "InMemorySaver":
            assert (ms_x, cpu_x, requests) == ("1.00 x", "1.00 x", "0 (in process)"), title
        else:
            assert PLAIN.match(requests) and float(requests) >= 1, (title, saver, requests)
    # the client's CPU is part of its wall time (the turns run on one client, servers apart)
    graphkeep = rows[0]
    assert float(graphkeep[3].replace(",", "")) <= 1.5 * float(graphkeep[1].replace(",", ""))


def check_agui(header: list[str], rows: list[list[str]], backends: list[str]) -> None:
    assert header == AGUI_HEADERS, header
    assert [row[0] for row in rows] == backends, rows
    for backend, events, *figures, ratio in rows:
        assert PLAIN.match(events) and int(events.replace(",", "")) > 2, (backend, events)
        assert all(PLAIN.match(c) and float(c.replace(",", "")) > 0 for c in figures), figures
        assert TIMES.match(ratio), (backend, ratio)


def test_quick_turn_cost_section_fills_every_column_on_every_backend(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--suite", "turncost", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        env=dict(os.environ, REDIS_URL=REDIS_URL, REDIS_STACK_URL=REDIS_STACK_URL),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = (tmp_path / "turn-cost.md").read_text()
    assert written in done.stdout
    found = tables(written)
    assert list(found) == [*SAVERS, "AG-UI endpoint"], list(found)
    for title in SAVERS:
        check_backend(title, *found[title])
    check_agui(*found["AG-UI endpoint"], list(live_suite.BACKENDS))
    # graphkeep's request budget on Redis (one per saver call), the same on Redis Stack
    assert found["Redis"][1][0][5] == found["Redis Stack"][1][0][5] == "8.00"
    assert "the servers are other processes and are not counted" in written
    assert re.search(r"Run on \d{4}-\d\d-\d\d \d\d:\d\d UTC, .+ \(\d+ CPUs\)", written), written
    assert (tmp_path / "turn-cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_under_suite_all_the_section_reads_the_other_suites_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--suite all`` through ``cli.main``, cut to the redis suite and the section (and the
    section to Redis and Redis Stack, the AG-UI rows to Redis: the first test covers the rest):
    the Redis rows are the redis suite's W50 rows of the same run, the figures of its report;
    Redis Stack, which no suite measures, and the AG-UI rows (the live suite did not run) are
    measured by the section."""
    monkeypatch.setattr(cli, "SUITES", {"redis": SUITES["redis"], "turncost": SUITES["turncost"]})
    monkeypatch.setattr(turncost, "BACKENDS", turncost.BACKENDS[:2])
    monkeypatch.setattr(live_suite, "BACKENDS", ("redis",))
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("REDIS_STACK_URL", REDIS_STACK_URL)
    args = ["--suite", "all", "--turns", "3", "--rounds", "1", "--history-runs", "1"]
    assert cli.main([*args, "--growth-turns", "0", "--no-chart", "--out", str(tmp_path)]) == 0
    written = (tmp_path / "turn-cost.md").read_text()
    assert "the W50 rows of the redis suite(s) of this run" in written
    found = tables(written)
    assert list(found) == ["Redis", "Redis Stack", "AG-UI endpoint"], list(found)
    for title in ("Redis", "Redis Stack"):
        check_backend(title, *found[title])
    check_agui(*found["AG-UI endpoint"], ["redis"])
    # the redis suite's own W50 figures (its main table: ms/turn, client CPU, requests)
    suite_rows = {}
    for line in (tmp_path / "redis.md").read_text().split("### ")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0] == "W50":
            suite_rows[cells[1]] = (cells[2], cells[3], cells[6])
    for saver, ms, _, cpu, _, requests in found["Redis"][1]:
        name = saver.strip("*")
        expected_ms, expected_cpu, expected_requests = suite_rows[name]
        assert (ms, cpu) == (expected_ms, expected_cpu), saver
        if name != "InMemorySaver":
            assert requests == expected_requests, saver
    assert not (tmp_path / "turn-cost.png").exists()


def test_the_readme_comparison_table_says_it_is_the_turn_cost_section_and_which_run() -> None:
    readme = (ROOT / "README.md").read_text()
    compared = readme.split("## Compared with the official savers")[1].split("\n## ")[0]
    assert "`./dev bench --suite turncost`" in compared and "turn-cost.md" in compared
    assert re.search(r"Run on \d{4}-\d\d-\d\d at \d\d:\d\d UTC on a \d-core", compared), compared
    header = "| server | saver | ms / turn | client CPU ms / turn | requests / turn |"
    table = compared.split(header)[1].split("\n\n")[0]
    rows = [line.split("|")[2].strip() for line in table.strip().splitlines()[1:]]
    rivals = [r for r in rows if "graphkeep" not in r]
    for rival in ("plainredis", "RedisSaver", "MongoDBSaver", "DynamoDBSaver"):
        assert sum(rival in r for r in rivals) == 1, (rival, rows)
    assert rows.count("**graphkeep**") == 4, rows
