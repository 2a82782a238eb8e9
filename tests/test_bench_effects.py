"""``python -m bench --suite effects --quick``: the report's shape and request counts,
never its timings.

Every backend (Redis, Redis Cluster, MongoDB, DynamoDB) gives a number in every cell, and the
ledger's cost in requests is what issue 26 asks: one atomic request per transition, so a first
call is 2 requests (claim, record) and a replay 1 (the claim returns the record).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.suites import Options, load
from bench.suites import effects as effects_suite

pytestmark = pytest.mark.redis

NUMBER = re.compile(r"^\d[\d,]*(\.\d+)?$")


def test_the_effects_suite_is_registered_with_its_own_runner() -> None:
    suite = load("effects")
    assert suite.name == "effects" and suite.run is not None


def test_quick_effects_suite_costs_two_requests_per_first_call_and_one_per_replay(
    tmp_path: Path,
) -> None:
    columns = effects_suite.run(Options(turns=10), tmp_path, False)
    assert [c.backend for c in columns] == list(effects_suite.BACKENDS)
    for column in columns:
        assert column.errors == [], column.errors
        assert column.first_requests == 2 and column.replay_requests == 1, column
    report = (tmp_path / "effects.md").read_text()
    assert "[met] one atomic request per transition" in report
    rows = [line for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    for line in rows[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert all(NUMBER.match(c) for c in cells[1:]), line
