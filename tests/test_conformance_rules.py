"""The conformance matrix's rows run under their set-up's service rules (conformance/rules.py):
on the real MongoDB server, a case that sends a request DocumentDB refuses fails with the rule
named, the request and the service's page, in both modes; a real spec case of the same row
passes; a row without rules checks nothing, and ``$GRAPHKEEP_RULES`` adds to every row."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from pymongo import AsyncMongoClient, MongoClient

from conformance.factory import Mode, SaverFactory, connector_for
from conformance.rules import checked, row_rules
from conformance.runner import SetupReport, render_problems, run_case
from conformance.setups import MONGODB_RULES, by_name
from conformance.spec import Case, runs
from graphkeep.testing.rules import mongodb_check, unchecked
from tests.conftest import REDIS_URL

ROOT = Path(__file__).resolve().parent.parent

#: the collection the case below queries (nothing is written to it)
DATABASE, COLLECTION = "graphkeep_test", "gk_rules_probe"


def _where(factory: SaverFactory) -> None:
    """Saves one checkpoint (graphkeep's requests: within the rules), then queries the
    database with ``$where`` (DocumentDB and Cosmos DB have none) as the case's own client."""
    url = factory.setup.url
    with factory.connect():
        pass
    query = {"$where": "true"}
    if factory.mode == "sync":
        client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=5000)
        try:
            list(client[DATABASE][COLLECTION].find(query).limit(1))
        finally:
            client.close()
        return

    async def query_async() -> None:
        aclient: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
            url, serverSelectionTimeoutMS=5000
        )
        try:
            await aclient[DATABASE][COLLECTION].find(query).limit(1).to_list()
        finally:
            await aclient.close()

    asyncio.run(query_async())


BREAKS_A_RULE = Case("rules", "where_on_purpose", _where, ("sync", "async"))


def _first_real_case(mode: Mode) -> Case:
    return next(case for case, m in runs(["thread_ids"]) if m == mode)


@pytest.mark.mongodb
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_case_that_breaks_a_rule_fails_with_the_rule_named_and_a_real_case_passes(
    mode: Mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GRAPHKEEP_RULES", raising=False)
    setup = by_name("mongodb")
    assert row_rules(setup) == MONGODB_RULES
    connector = connector_for(setup)
    with checked(setup) as checks:
        assert checks is not None
        broken = run_case(BREAKS_A_RULE, mode, setup, connector, checks)
        real = run_case(_first_real_case(mode), mode, setup, connector, checks)
    assert real.ok, real.error  # graphkeep's own requests follow the rules
    assert not broken.ok
    error = broken.error or ""
    for rule_set in ("documentdb", "cosmos-mongodb-vcore"):  # RU's page does not list $where
        assert f"[{rule_set}] unsupported-operator: find {DATABASE}.{COLLECTION}" in error, error
    assert "$where is not supported" in error
    assert "(see https://" in error  # the service's page
    row = SetupReport(setup, ["thread_ids"], with_official=False, spec=[broken, real])
    assert not row.ok
    problems = render_problems([row])  # the matrix's problems report names it
    assert f"spec rules.where_on_purpose[{mode}] failed" in problems
    assert "[documentdb] unsupported-operator" in problems
    assert "thread_ids" not in problems


@pytest.mark.mongodb
def test_a_row_without_rules_checks_nothing_and_graphkeep_rules_adds_to_every_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GRAPHKEEP_RULES", raising=False)
    bare = dataclasses.replace(by_name("mongodb"), rules=())
    connector = connector_for(bare)
    with checked(bare) as checks:
        assert checks is None
        with unchecked():  # nor by this session's own --graphkeep-rules (./dev test's lane)
            assert run_case(BREAKS_A_RULE, "sync", bare, connector, checks).ok
    monkeypatch.setenv("GRAPHKEEP_RULES", "documentdb")
    assert row_rules(bare) == ("documentdb",)
    assert row_rules(by_name("redis")) == ("documentdb",)
    with checked(bare) as checks:
        outcome = run_case(BREAKS_A_RULE, "sync", bare, connector, checks)
    assert "[documentdb] unsupported-operator" in (outcome.error or "")
    assert "[cosmos-mongodb-ru]" not in (outcome.error or "")


@pytest.mark.mongodb
def test_the_rules_are_removed_after_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAPHKEEP_RULES", raising=False)
    setup = by_name("mongodb")
    connector = connector_for(setup)
    active = list(mongodb_check.ACTIVE)
    with checked(setup):
        assert len(mongodb_check.ACTIVE) == len(active) + 1
    assert mongodb_check.ACTIVE == active  # the row's checker is gone
    with unchecked():  # nor checked by this session's own --graphkeep-rules (./dev test's lane)
        assert run_case(BREAKS_A_RULE, "sync", setup, connector).ok


def test_the_setups_with_rules() -> None:
    rows = {name: by_name(name).rules for name in ("mongodb", "mongodb+hot", "valkey")}
    assert rows == {
        "mongodb": MONGODB_RULES,
        "mongodb+hot": MONGODB_RULES,
        "valkey": ("azure-redis-oss",),
    }
    assert by_name("valkey-cluster").rules == ("elasticache-serverless",)
    for name in ("redis", "redis-cluster", "dynamodb", "dynamodb+hot", "reference"):
        assert by_name(name).rules == (), name


INNER = '''
import pytest
from pymongo import MongoClient

from conformance.setups import by_name


@pytest.mark.parametrize("setup", [by_name("mongodb"), by_name("redis")], ids=["mongodb", "redis"])
def test_where(setup):
    """The same request under each set-up: only the MongoDB row has DocumentDB's rules."""
    client = MongoClient(by_name("mongodb").url, serverSelectionTimeoutMS=5000)
    try:
        list(client["graphkeep_test"]["gk_rules_probe"].find({"$where": "true"}).limit(1))
    finally:
        client.close()
'''


@pytest.mark.mongodb
def test_the_pytest_form_runs_each_setups_tests_under_its_rules(tmp_path: Path) -> None:
    """conformance/test_*.py: conformance/conftest.py runs a test with a ``setup`` parameter
    under that set-up's rules (the set-up's test fails naming the rule, the other passes)."""
    (tmp_path / "conftest.py").write_text(
        "from conformance.conftest import pytest_configure, row_checks  # noqa: F401\n"
    )
    (tmp_path / "test_inner.py").write_text(INNER)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHKEEP_", "PYTEST"))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "test_inner.py"],
        cwd=tmp_path,
        env={**environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout
    assert "test_where[redis] PASSED" in out, out + result.stderr
    assert "test_where[mongodb] FAILED" in out, out + result.stderr
    assert "[documentdb] unsupported-operator: find graphkeep_test.gk_rules_probe" in out


def _scripts(factory: SaverFactory) -> None:
    """Saves with graphkeep, then sends two scripts ElastiCache Serverless refuses: one that
    declares no key (the hook sees it) and one that touches a key it did not declare (only
    the server's MONITOR sees it: synced at the case's end)."""
    with factory.connect():
        pass
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.eval("return 1", 0)
        client.eval("return redis.call('EXISTS', KEYS[1] .. ':undeclared')", 1, "gk-rules-probe")
    finally:
        client.close()


SCRIPTS = Case("rules", "scripts_on_purpose", _scripts, ("sync",))


@pytest.mark.redis
def test_a_redis_row_fails_a_case_on_the_hook_and_on_the_monitor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GRAPHKEEP_RULES", raising=False)
    setup = dataclasses.replace(by_name("valkey-cluster"), url=REDIS_URL)  # a single node here
    connector = connector_for(setup)
    with checked(setup) as checks:
        broken = run_case(SCRIPTS, "sync", setup, connector, checks)
        real = run_case(_first_real_case("sync"), "sync", setup, connector, checks)
    error = broken.error or ""
    assert "[elasticache-serverless] script-without-keys: EVAL" in error, error
    assert "[elasticache-serverless] undeclared-script-key" in error, error
    assert "gk-rules-probe:undeclared" in error, error
    assert real.ok, real.error
