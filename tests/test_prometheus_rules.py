"""deploy/prometheus: the rules pass ``promtool check rules`` and their unit tests pass
``promtool test rules``; a broken copy of either fails.

promtool is Debian's (the ``prometheus`` package ``./dev test`` installs): ``$GRAPHKEEP_PROMTOOL``
(exported by ``./dev``), else ``promtool`` on the PATH. Missing, the tests FAIL; nothing skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "graphkeep-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "graphkeep-rules.test.yml"
ALERTS = (
    "GraphkeepCheckpointWriteLatencyHigh",
    "GraphkeepResumeFailures",
    "GraphkeepInterruptedThreadsRising",
    "GraphkeepActiveThreadsJump",
    "GraphkeepRunawayThreads",
    "GraphkeepStorageGrowing",
    "GraphkeepStorageNearlyFull",
    "GraphkeepHealthScanStale",
)


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which(os.environ.get("GRAPHKEEP_PROMTOOL") or "promtool")
    if found is None:
        pytest.fail(
            "promtool not found: `./dev test` installs Debian's prometheus package"
            " (or: apt-get install prometheus; or set GRAPHKEEP_PROMTOOL)",
            pytrace=False,
        )
    return found


def run(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_pass_promtool_check_rules(promtool: str) -> None:
    done = run(promtool, "check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 14 rules found" in done.stdout


def test_the_rules_unit_tests_pass_promtool_test_rules(promtool: str) -> None:
    done = run(promtool, "test", "rules", RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    text = RULE_TESTS.read_text()
    for alert in ALERTS:
        assert f"alert: {alert}" in RULES.read_text()
        cases = text.count(f"alertname: {alert}\n")
        assert cases >= 2, f"{alert}: {cases} case(s)"
        block = text.split(f"alertname: {alert}\n")
        assert any(part.lstrip().startswith("exp_alerts: []") for part in block[1:]), alert
        assert any(part.lstrip().startswith("exp_alerts:\n") for part in block[1:]), alert


def _copy(tmp_path: Path, rules: str) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "graphkeep-rules.yml").write_text(rules)
    copy = tmp_path / "tests" / "graphkeep-rules.test.yml"
    shutil.copy(RULE_TESTS, copy)
    return copy


def test_a_rule_that_no_longer_fires_fails_the_unit_tests(promtool: str, tmp_path: Path) -> None:
    rules = RULES.read_text()
    broken = rules.replace(
        "expr: graphkeep:checkpoint_put_duration_seconds:p99_5m > 0.5",
        "expr: graphkeep:checkpoint_put_duration_seconds:p99_5m > 5",
    )
    assert broken != rules
    done = run(promtool, "test", "rules", _copy(tmp_path, broken))
    assert done.returncode != 0
    assert "GraphkeepCheckpointWriteLatencyHigh" in done.stdout + done.stderr


def test_a_rule_that_does_not_parse_fails_check_rules(promtool: str, tmp_path: Path) -> None:
    broken = RULES.read_text().replace(
        "expr: graphkeep_threads_runaway > 0", "expr: graphkeep_threads_runaway >"
    )
    _copy(tmp_path, broken)
    done = run(promtool, "check", "rules", tmp_path / "graphkeep-rules.yml")
    assert done.returncode != 0
    assert "GraphkeepRunawayThreads" in done.stdout + done.stderr
    assert "parse error" in done.stdout + done.stderr
