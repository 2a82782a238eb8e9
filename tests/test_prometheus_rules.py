"""deploy/: the rules pass ``promtool check rules`` and their unit tests pass ``promtool test
rules``, a broken copy of either fails; the Grafana dashboard's queries name only metrics
graphkeep emits or the rules record, and each parses on the real Prometheus of ``./dev
services up prometheus``.

promtool is Debian's (the ``prometheus`` package ``./dev test`` installs): ``$GRAPHKEEP_PROMTOOL``
(exported by ``./dev``), else ``promtool`` on the PATH. Missing, the tests FAIL; nothing skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from graphkeep.cli.health import GAUGES

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "graphkeep-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "graphkeep-rules.test.yml"
ALERTS = (
    "GraphkeepCheckpointWriteLatencyHigh",
    "GraphkeepResumeFailures",
    "GraphkeepInterruptedThreadsRising",
    "GraphkeepActiveThreadsJump",
    "GraphkeepRunawayThreads",
    "GraphkeepConcurrentForks",
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
    assert "SUCCESS: 15 rules found" in done.stdout


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


# -- the Grafana dashboard -------------------------------------------------------------

DASHBOARD = ROOT / "deploy" / "grafana" / "graphkeep-dashboard.json"
PROMETHEUS_URL = os.environ.get("GRAPHKEEP_PROMETHEUS_URL") or os.environ.get(
    "PROMETHEUS_URL", "http://127.0.0.1:19090"
)
#: what graphkeep emits (OTel, as the Prometheus exporter names it), what `graphkeep health
#: --format prometheus` writes, and what the rules record
KNOWN_METRICS = {
    "db_client_operation_duration_seconds_bucket",
    "db_client_operation_duration_seconds_count",
    "db_client_operation_duration_seconds_sum",
    "graphkeep_resume_failures_total",
    *(name for name, _, _ in GAUGES),
    "graphkeep_runaway_thread_checkpoints",
}


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p["targets"]]


def test_the_dashboard_is_json_with_a_panel_for_each_signal() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    text = " ".join(expr for _, expr in dashboard_queries())
    for signal in (
        "graphkeep:checkpoint_put_duration_seconds:p99_5m",
        "graphkeep:resume_failures:increase5m",
        "graphkeep_threads_active",
        "graphkeep_threads_interrupted",
        "graphkeep_threads_runaway",
        "graphkeep_storage_bytes",
        "graphkeep:storage_bytes:used_ratio",
    ):
        assert signal in text, signal


def test_the_dashboard_and_the_rules_name_only_metrics_graphkeep_emits_or_records() -> None:
    recorded = set(re.findall(r"record: (\S+)", RULES.read_text()))
    known = KNOWN_METRICS | recorded
    groups = yaml.safe_load(RULES.read_text())["groups"]
    exprs = [expr for _, expr in dashboard_queries()]
    exprs += [rule["expr"] for group in groups for rule in group["rules"]]
    for expr in exprs:
        # label matchers and grouping name labels (graphkeep_reason), not metrics
        bare = re.sub(r"\{[^}]*\}|\b(?:by|on|without|ignoring) \([^)]*\)", " ", expr)
        for name in re.findall(r"\b((?:graphkeep|db_client)[a-z0-9_:]*)", bare):
            assert name in known, f"{name} in {expr!r}"
    assert "graphkeep_threads_runaway" in " ".join(exprs)


def test_every_dashboard_query_parses_on_a_real_prometheus() -> None:
    """The server of ``./dev services up prometheus`` evaluates each panel's query."""
    for title, expr in dashboard_queries():
        query = expr.replace("$backend", ".*")
        url = f"{PROMETHEUS_URL}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                answer = json.load(reply)
        except urllib.error.HTTPError as exc:
            pytest.fail(f"{title}: {query!r}: {exc.read().decode()}", pytrace=False)
        except OSError as exc:
            pytest.fail(
                f"no Prometheus at {PROMETHEUS_URL} ({exc}): run ./dev services up prometheus",
                pytrace=False,
            )
        assert answer["status"] == "success", (title, answer)
