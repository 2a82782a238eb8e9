"""graphkeep.testing, the pytest plugin: a user's project, run by pytest in a subprocess.

The project is the README's own test file ("Test your graph on every backend"), so the
instructions a user follows are what is tested. ``env`` runs against the loopback servers of
``./dev services up``; ``containers`` against the images ``./dev containers up`` builds, when
a Docker engine answers here (CI's loopback path starts none: that case then says so and
skips).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pymongo
import pytest
import redis

from tests.conftest import REDIS_CLUSTER_URL, REDIS_URL

REPO = Path(__file__).resolve().parents[1]
MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
DYNAMODB_ENDPOINT = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb")
ENV_URLS = {
    "GRAPHKEEP_REDIS_URL": REDIS_URL,
    "GRAPHKEEP_REDIS_CLUSTER_URL": REDIS_CLUSTER_URL,
    "GRAPHKEEP_MONGODB_URL": MONGODB_URI,
    "GRAPHKEEP_DYNAMODB_URL": f"dynamodb://unused?region=us-east-1&endpoint_url={DYNAMODB_ENDPOINT}",
}


def readme_test_file() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Test your graph on every backend", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(# tests/test_my_graph.py\n.*?)```", section, re.S)
    assert match, "the README's section lost its user test file"
    return match.group(1)


def run_user_project(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_my_graph.py").write_text(readme_test_file())
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHKEEP_", "PYTEST"))}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests", *args],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )


def passed_ids(result: subprocess.CompletedProcess[str]) -> set[str]:
    return set(re.findall(r"::(\w+\[[\w-]+\]) PASSED", result.stdout))


TESTS = (
    "test_a_thread_remembers_across_savers",
    "test_every_test_starts_empty",
    "test_async_graph",
    "test_long_term_memory",
)


def leftovers() -> dict[str, list[str]]:
    """What the plugin's per-test data (named gk_<hex>) left on the loopback servers."""
    found: dict[str, list[str]] = {}
    with redis.Redis.from_url(REDIS_URL) as single:
        found["redis"] = [k.decode() for k in single.scan_iter(match="*gk_*", count=1000)]
    with redis.RedisCluster.from_url(REDIS_CLUSTER_URL.replace("redis+cluster", "redis")) as c:
        found["redis-cluster"] = [
            k.decode() for k in c.scan_iter(match="*gk_*", count=1000, target_nodes="all")
        ]
    mongo: Any = pymongo.MongoClient(MONGODB_URI, serverSelectionTimeoutMS=5000)
    with mongo:
        found["mongodb"] = [n for n in mongo.list_database_names() if n.startswith("gk_")]
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=DYNAMODB_ENDPOINT)
    found["dynamodb"] = [n for n in client.list_tables()["TableNames"] if n.startswith("gk_")]
    return {k: v for k, v in found.items() if v}


def test_the_readme_project_passes_on_every_backend_with_env_servers(tmp_path: Path) -> None:
    before = leftovers()
    result = run_user_project(tmp_path, "--graphkeep-servers=env", **ENV_URLS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in BACKENDS}
    assert leftovers() == before, "the plugin left per-test data behind"


def test_backends_narrow_the_parametrisation(tmp_path: Path) -> None:
    result = run_user_project(
        tmp_path, "--graphkeep-servers=env", "--graphkeep-backends=mongodb", **ENV_URLS
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert passed_ids(result) == {f"{t}[mongodb]" for t in TESTS}


def test_a_bad_backend_name_is_a_usage_error(tmp_path: Path) -> None:
    result = run_user_project(tmp_path, "--graphkeep-backends=redis,postgres")
    assert result.returncode == 4  # pytest's usage error
    assert "--graphkeep-backends: unknown postgres; choose from redis" in result.stderr


def test_env_servers_without_a_url_fail_clearly_and_only_that_backend(tmp_path: Path) -> None:
    urls = {k: v for k, v in ENV_URLS.items() if k != "GRAPHKEEP_MONGODB_URL"}
    result = run_user_project(
        tmp_path, "--graphkeep-servers=env", "--graphkeep-backends=redis,mongodb", **urls
    )
    assert result.returncode == 1
    assert "GRAPHKEEP_MONGODB_URL is not set" in result.stdout
    assert passed_ids(result) == {f"{t}[redis]" for t in TESTS}
    assert "Traceback" not in result.stdout


def test_containers_without_a_docker_engine_fail_with_one_clear_line(tmp_path: Path) -> None:
    result = run_user_project(
        tmp_path,
        "--graphkeep-servers=containers",
        "--graphkeep-backends=redis",
        DOCKER_HOST="unix:///nonexistent/docker.sock",
    )
    assert result.returncode == 1
    assert "no Docker engine answers" in result.stdout
    assert "./dev containers up" in result.stdout


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:  # noqa: BLE001 — any failure means no engine here
        return False


def _container_images() -> dict[str, str]:
    exports = REPO / ".services" / "containers.env"
    if not exports.exists():
        return {}
    pairs = re.findall(r"^export (\w+)=(\S+)$", exports.read_text(), re.M)
    return dict(pairs)


def test_the_readme_project_passes_on_every_backend_in_containers(tmp_path: Path) -> None:
    images = _container_images()
    if not (_docker_answers() and images):
        pytest.skip("no Docker engine answers here (./dev containers up starts one)")
    import docker

    client = docker.from_env()
    result = run_user_project(tmp_path, "--graphkeep-servers=containers", **images)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in BACKENDS}
    left = client.containers.list(all=True, filters={"label": "dev.graphkeep.testing"})
    assert left == [], "the plugin left containers behind"


DYING = """
import docker


def test_1_the_redis_container_dies(graphkeep_url, graphkeep_backend):
    if graphkeep_backend == "redis":
        for c in docker.from_env().containers.list(filters={"label": "dev.graphkeep.testing"}):
            if c.attrs["Config"]["Image"] == __import__("os").environ["GRAPHKEEP_REDIS_IMAGE"]:
                c.kill()


def test_2_needs_the_server(graphkeep_saver):
    assert list(graphkeep_saver.list({"configurable": {"thread_id": "x"}})) == []
"""


def test_a_container_dying_mid_session_fails_only_its_tests_with_storage_unavailable(
    tmp_path: Path,
) -> None:
    images = _container_images()
    if not (_docker_answers() and images):
        pytest.skip("no Docker engine answers here (./dev containers up starts one)")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_dying.py").write_text(DYING)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHKEEP_", "PYTEST"))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests"]
        + ["--graphkeep-servers=containers", "--graphkeep-backends=redis,mongodb"],
        cwd=tmp_path,
        env={**environ, **images, "COLUMNS": "400"},  # whole lines in the short summary
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert passed_ids(result) == {
        "test_1_the_redis_container_dies[mongodb]",
        "test_2_needs_the_server[mongodb]",
        "test_1_the_redis_container_dies[redis]",
    }, result.stdout[-3000:]
    errors = re.findall(r"^ERROR \S+\[redis\] - (\S+)", result.stdout, re.M)
    assert errors and all("StorageUnavailable" in e for e in errors), result.stdout[-3000:]
    import docker

    left = docker.from_env().containers.list(all=True, filters={"label": "dev.graphkeep.testing"})
    assert left == []
