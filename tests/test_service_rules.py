"""--graphkeep-rules: every rule of every rules set fires on a request that breaks it on
purpose, on the real servers, and nothing fires on what the services accept.

The requests are made by user projects (tests/rules_projects/) run by pytest in a subprocess,
once per family; each outer test reads one inner test's outcome from the JUnit report.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import REDIS_CLUSTER_URL, REDIS_STACK_URL, REDIS_URL
from tests.test_testing_plugin import MONGODB_URI, user_environ

PROJECTS = Path(__file__).parent / "rules_projects"
ES, AZ = "[elasticache-serverless]", "[azure-redis-oss]"
DDB, VCORE, RU = "[documentdb]", "[cosmos-mongodb-vcore]", "[cosmos-mongodb-ru]"
SERVERS = {
    "REDIS_URL": REDIS_URL,
    "REDIS_STACK_URL": REDIS_STACK_URL,
    "REDIS_CLUSTER_URL": REDIS_CLUSTER_URL,
    "MONGODB_URI": MONGODB_URI,
}


def run_inner(
    tmp: Path, project: str | None, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str | None]]:
    """pytest on one project; each test's failure text (None: it passed)."""
    tmp.mkdir(parents=True, exist_ok=True)
    files = []
    if project:
        (tmp / f"test_{project}.py").write_text((PROJECTS / f"{project}.py").read_text())
        files.append(f"test_{project}.py")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "--junitxml=report.xml",
            *files,
            *args,
        ],
        cwd=tmp,
        env=user_environ(**SERVERS, **env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    outcomes: dict[str, str | None] = {}
    if (tmp / "report.xml").exists():
        for case in ET.parse(tmp / "report.xml").iter("testcase"):
            texts = [
                (e.get("message") or "") + (e.text or "")
                for e in case
                if e.tag in ("failure", "error")
            ]
            outcomes[case.get("name", "")] = "\n".join(texts) if texts else None
    return result, outcomes


@pytest.fixture(scope="module")
def redis_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, str | None]]:
    return run_inner(
        tmp_path_factory.mktemp("redis-rules"),
        "redis_rules_project",
        "--graphkeep-rules=elasticache-serverless,azure-redis-oss",
        "--graphkeep-servers=env",
        "--graphkeep-backends=redis,redis-cluster",
    )


@pytest.fixture(scope="module")
def mongodb_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, str | None]]:
    return run_inner(
        tmp_path_factory.mktemp("mongodb-rules"),
        "mongodb_rules_project",
        "--graphkeep-servers=env",
        "--graphkeep-backends=mongodb",
        # the variable works as the option does
        GRAPHKEEP_RULES="documentdb,cosmos-mongodb-vcore,cosmos-mongodb-ru",
    )


#: inner test -> what its failure must say (each: a rules set and a rule), [] -> it passes
REDIS_EXPECTED: dict[str, list[str]] = {
    "test_script_without_keys": [f"{ES} script-without-keys: EVAL"],
    "test_function_without_keys": [f"{ES} script-without-keys: FCALL"],
    "test_undeclared_key_in_script": [
        f"{ES} undeclared-script-key",
        f"{AZ} undeclared-script-key",
        "'gkrules:{a}:built' with GET",
    ],
    "test_undeclared_key_in_script_error_swallowed": [f"{ES} undeclared-script-key"],
    "test_undeclared_key_on_a_cluster_node": [f"{ES} undeclared-script-key", "gkrules:{c}:built"],
    "test_undeclared_key_behind_a_translated_address": [
        f"{ES} undeclared-script-key",
        "gkrules:{p}:built",
    ],
    "test_undeclared_key_async": [f"{AZ} undeclared-script-key", "gkrules:{b}:built"],
    "test_cross_slot_command": [f"{ES} cross-slot: MGET", f"{AZ} cross-slot: MGET"],
    "test_cross_slot_transaction": [f"{ES} cross-slot: MULTI … EXEC", f"{AZ} cross-slot"],
    "test_cross_slot_transaction_async": [f"{ES} cross-slot: MULTI … EXEC"],
    "test_argument_limit": [f"{ES} argument-limit: RPUSH", "4000 arguments"],
    "test_restricted_command": [f"{ES} restricted-command: CONFIG GET", f"{AZ} restricted-command"],
    "test_search_command": [f"{ES} module-command: FT._LIST", f"{AZ} module-command"],
    "test_json_command": [f"{AZ} module-command: JSON.SET"],
    "test_accepted_requests": [],
    "test_another_process_breaking_rules_is_not_ours": [],
}
#: what a test's failure must not say (a rule of a set that allows the request)
REDIS_ABSENT = {
    "test_script_without_keys": [AZ],
    "test_argument_limit": [AZ],
    "test_json_command": [ES],
}

MONGODB_EXPECTED: dict[str, list[str]] = {
    "test_expr": [f"{DDB} unsupported-operator", "$expr"],
    "test_where": [f"{DDB} unsupported-operator", f"{VCORE} unsupported-operator", "$where"],
    "test_json_schema": [f"{DDB} unsupported-operator", "$jsonSchema"],
    "test_pipeline_update": [f"{DDB} pipeline-update: update"],
    "test_now": [f"{DDB} unsupported-variable", "$$NOW"],
    "test_stage[$unionWith]": [f"{DDB} unsupported-stage", f"{RU} unsupported-stage", "$unionWith"],
    "test_stage[$merge]": [f"{DDB} unsupported-stage", "$merge"],
    "test_stage[$graphLookup]": [f"{DDB} unsupported-stage", "$graphLookup"],
    "test_stage[$setWindowFields]": [f"{DDB} unsupported-stage", f"{RU} unsupported-stage"],
    "test_stage[$set]": [f"{DDB} unsupported-stage", "$set is"],
    "test_stage[$unset]": [f"{DDB} unsupported-stage", "$unset is"],
    "test_stage[$densify]": [f"{DDB} unsupported-stage", f"{RU} unsupported-stage", "$densify"],
    "test_stage[$fill]": [f"{DDB} unsupported-stage", f"{RU} unsupported-stage", "$fill"],
    "test_function": [
        f"{DDB} unsupported-operator",
        f"{VCORE} unsupported-operator",
        f"{RU} unsupported-operator",
        "$function",
    ],
    "test_accumulator": [
        f"{DDB} unsupported-operator",
        f"{VCORE} unsupported-operator",
        "$accumulator",
    ],
    "test_index_kind[partial]": [f"{DDB} unsupported-index", "partial"],
    "test_index_kind[hashed]": [
        f"{DDB} unsupported-index",
        f"{VCORE} unsupported-index",
        f"{RU} unsupported-index",
    ],
    "test_index_kind[wildcard]": [f"{DDB} unsupported-index", "wildcard"],
    "test_index_kind[text]": [f"{DDB} unsupported-index", f"{RU} unsupported-index", "text"],
    "test_index_kind[sparse]": [f"{VCORE} unsupported-index", f"{RU} unsupported-index", "sparse"],
    "test_ttl_collmod": [f"{DDB} ttl-collmod: collMod"],
    "test_two_index_builds_at_once": [
        f"{DDB} concurrent-index-builds",
        f"{VCORE} concurrent-index-builds",
    ],
    "test_unique_index_on_a_collection_with_data": [f"{RU} unique-index-on-data: createIndexes"],
    "test_transaction_over_30_seconds": [f"{VCORE} transaction-lifetime"],
    "test_async_client_is_checked_too": [f"{DDB} unsupported-operator", "$where"],
    "test_accepted_requests": [],
}
MONGODB_ABSENT = {
    "test_index_kind[sparse]": [DDB],
    "test_unique_index_on_a_collection_with_data": [DDB, VCORE],
    "test_transaction_over_30_seconds": [DDB, RU],
}


def check(
    outcomes: dict[str, str | None], name: str, expected: list[str], absent: list[str]
) -> None:
    assert name in outcomes, f"{name} did not run: {sorted(outcomes)}"
    failure = outcomes[name]
    if not expected:
        assert failure is None, failure
        return
    assert failure is not None, f"{name} passed: no rule fired"
    for text in expected:
        assert text in failure, f"{name}: {text!r} not in\n{failure}"
    for text in absent:
        assert text not in failure, f"{name}: {text!r} fired, the service allows it\n{failure}"
    assert "see https://" in failure  # the service's page


@pytest.mark.redis
@pytest.mark.parametrize("name", sorted(REDIS_EXPECTED))
def test_redis_rule(
    redis_run: tuple[subprocess.CompletedProcess[str], dict[str, str | None]], name: str
) -> None:
    check(redis_run[1], name, REDIS_EXPECTED[name], REDIS_ABSENT.get(name, []))


@pytest.mark.redis
def test_a_request_outside_any_test_fails_the_session(
    redis_run: tuple[subprocess.CompletedProcess[str], dict[str, str | None]],
) -> None:
    result, outcomes = redis_run
    assert result.returncode == 1
    assert "graphkeep rules (outside any test): 1 request(s)" in result.stdout
    assert f"{ES} script-without-keys: EVAL" in result.stdout
    assert "graphkeep rules: elasticache-serverless, azure-redis-oss" in result.stdout  # header


@pytest.mark.mongodb
@pytest.mark.parametrize("name", sorted(MONGODB_EXPECTED))
def test_mongodb_rule(
    mongodb_run: tuple[subprocess.CompletedProcess[str], dict[str, str | None]], name: str
) -> None:
    check(mongodb_run[1], name, MONGODB_EXPECTED[name], MONGODB_ABSENT.get(name, []))


def test_an_unknown_rules_set_is_a_usage_error(tmp_path: Path) -> None:
    result, _ = run_inner(tmp_path / "a", None, "--graphkeep-rules=documentdb,elasticache")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert (
        "--graphkeep-rules: unknown elasticache; choose from elasticache-serverless,"
        in result.stderr
    )
    env_result, _ = run_inner(tmp_path / "b", None, GRAPHKEEP_RULES="cosmos")
    assert env_result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "unknown cosmos; choose from" in env_result.stderr


@pytest.mark.redis
def test_a_rules_set_of_another_family_is_said_at_the_start(tmp_path: Path) -> None:
    (tmp_path / "test_redis_only.py").write_text(
        "import os, redis\n\ndef test_get():\n"
        "    with redis.Redis.from_url(os.environ['REDIS_URL']) as r:\n        r.get('gkrules:k')\n"
    )
    result, outcomes = run_inner(
        tmp_path,
        None,
        "test_redis_only.py",
        "--graphkeep-backends=redis",
        "--graphkeep-rules=documentdb,elasticache-serverless",
        "--graphkeep-servers=env",
    )
    assert result.returncode == 0, result.stdout[-2000:]
    header = result.stdout.split("collect")[0]
    assert (
        "graphkeep rules: documentdb checks MongoDB requests, and no MongoDB backend is selected"
        in header
    )
    assert "elasticache-serverless checks" not in header
    assert (
        "graphkeep rules: documentdb: no MongoDB request was sent in this session" in result.stdout
    )
    assert outcomes == {"test_get": None}
