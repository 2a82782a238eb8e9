"""``python -m bench --suite hot --quick``: the report's shape and what the hot layer
saves the durable store in requests and bytes, never its timings.

On every durable store (MongoDB, DynamoDB, Postgres), with Redis as the hot layer and without:
both rows measured, the hot one read from Redis on the read-heavy turn (hit rate above 0),
and a hot thread's read-heavy turn reads fewer durable bytes — invoke's read is served from
Redis after a key-only probe — at the price of at most one more durable request (the probe of
get_state, which misses after the previous turn's writes).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.suites import Options, load
from bench.suites import hot as hot_suite

pytestmark = pytest.mark.redis

NUMBER = re.compile(r"^-?\d[\d,]*(\.\d+)?%?$")


def test_the_hot_suite_is_registered_with_its_own_runner() -> None:
    suite = load("hot")
    assert suite.name == "hot" and suite.run is not None


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("mongodb", marks=pytest.mark.mongodb),
        pytest.param("dynamodb", marks=pytest.mark.dynamodb),
        pytest.param("postgres"),
    ],
)
def test_quick_hot_suite_reads_fewer_durable_bytes_with_the_layer(
    backend: str, tmp_path: Path
) -> None:
    rows = hot_suite.run(Options(turns=10), tmp_path, False, [backend])
    assert [(r.backend, r.mode) for r in rows] == [(backend, "plain"), (backend, "hot")]
    for row in rows:
        assert row.errors == [], row.errors
        for phase in (row.w50, row.read_heavy):
            assert phase.turns == row.threads * 2 and phase.requests > 0
    plain, hot = rows
    assert plain.read_heavy.reads == {} and plain.read_heavy.footprint is None

    heavy, before = hot.read_heavy, plain.read_heavy
    hit_rate = heavy.hit_rate
    assert hit_rate is not None and hit_rate > 0
    assert heavy.footprint is not None and heavy.footprint > 0
    assert heavy.read < before.read, (heavy.read, before.read)
    # invoke's first read is a hit: only the probe's keys come from the durable store
    hot_invoke, plain_invoke = heavy.part("invoke"), before.part("invoke")
    assert hot_invoke is not None and plain_invoke is not None
    assert hot_invoke[1] < plain_invoke[1] / 10, (hot_invoke, plain_invoke)
    # at most one key-only read more per miss — get_state's and the history page's, the first
    # views after the turn's writes (issue 27 asks for half: see the targets)
    assert heavy.requests <= before.requests + 2 * heavy.turns, (heavy.requests, before.requests)
    # a reload (nothing written since its first view): every read from Redis, no payload
    # from the durable store, never more requests than without the layer
    again, plain_again = hot.reload, plain.reload
    assert again.turns == plain_again.turns == hot.threads * 2
    assert again.reads["hit"] == sum(again.reads.values()) > 0, again.reads
    assert again.read < plain_again.read / 5, (again.read, plain_again.read)
    assert again.requests <= plain_again.requests, (again.requests, plain_again.requests)

    report = (tmp_path / "hot.md").read_text()
    assert "payload reads from the durable store -> 0" in report
    assert "durable requests per read-heavy turn down by >= 50%" in report
    table = [line for line in report.splitlines() if line.startswith(f"| {backend} |")]
    assert len(table) == 6 + 3 + 2  # 6 result rows, 3 ratio rows, 2 by-part rows
    for line in table[:6]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert all(NUMBER.match(c) for c in cells[3:6]), line
