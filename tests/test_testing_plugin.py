"""graphkeep.testing, the pytest plugin: a user's project, run by pytest in a subprocess.

The project is the documentation's own test file (docs/testing.md, "Test your graph on
every backend"), so the instructions a user follows are what is tested. ``env`` runs against
the loopback servers of ``./dev services up``; ``containers`` against the images ``./dev
containers up`` builds, when a Docker engine answers here (CI's loopback path starts none:
that case then says so and skips).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import pymongo
import pytest
import redis

from tests.cli_runs import ctrl_c_reaches_it
from tests.conftest import REDIS_CLUSTER_URL, REDIS_URL

REPO = Path(__file__).resolve().parents[1]
MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
DYNAMODB_ENDPOINT = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
VALKEY_URL = os.environ.get("VALKEY_URL", "redis://127.0.0.1:16390/0")
VALKEY_CLUSTER_URL = os.environ.get("VALKEY_CLUSTER_URL", "redis+cluster://127.0.0.1:17101")
#: the default selection; the valkey backends are opt-in
BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb")
VALKEY_BACKENDS = ("valkey", "valkey-cluster")
ENV_URLS = {
    "GRAPHKEEP_REDIS_URL": REDIS_URL,
    "GRAPHKEEP_REDIS_CLUSTER_URL": REDIS_CLUSTER_URL,
    "GRAPHKEEP_MONGODB_URL": MONGODB_URI,
    "GRAPHKEEP_DYNAMODB_URL": f"dynamodb://unused?region=us-east-1&endpoint_url={DYNAMODB_ENDPOINT}",
    # set, yet no default run starts or needs them (test_..._with_env_servers runs the four)
    "GRAPHKEEP_VALKEY_URL": VALKEY_URL,
    "GRAPHKEEP_VALKEY_CLUSTER_URL": VALKEY_CLUSTER_URL,
}


def readme_test_file() -> str:
    """The user's test file that docs/testing.md ("Test your graph on every backend") shows."""
    text = (REPO / "docs" / "testing.md").read_text()
    match = re.search(r"```python\n(# tests/test_my_graph.py\n.*?)```", text, re.S)
    assert match, "docs/testing.md lost its user test file"
    return match.group(1)


def run_user_project(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_project(tmp_path, {"test_my_graph.py": readme_test_file()}, *args, **env)


def user_environ(**env: str) -> dict[str, str]:
    """This environment without the suite's own graphkeep and pytest settings, plus ``env``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHKEEP_", "PYTEST"))}
    return {**environ, **env}


def run_project(
    tmp_path: Path, files: dict[str, str], *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """pytest -v on a user project in ``tmp_path`` made of ``files`` (under tests/)."""
    (tmp_path / "tests").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp_path / "tests" / name).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests", *args],
        cwd=tmp_path,
        env=user_environ(**env),
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


#: a conftest.py beside the user's tests that writes down every name the plugin gave a test
#: (its graphkeep_url), so the leftover check looks at this run's data only: the other lanes of
#: ./dev test use the same servers at the same time, their own gk_ names included
RECORDER = """
import os
from urllib.parse import parse_qs, urlsplit

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    outcome = yield
    if fixturedef.argname == "graphkeep_url" and outcome.excinfo is None:
        parts = urlsplit(outcome.get_result())
        name = parse_qs(parts.query).get("key_prefix", [""])[0] or parts.path.strip("/")
        with open(os.environ["GK_TEST_NAMES"], "a") as out:
            out.write((name or parts.netloc) + "\\n")
"""


def run_recorded_project(
    tmp_path: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The README project with RECORDER beside it: its result and the names its tests got."""
    names = tmp_path / "names.txt"
    files = {"test_my_graph.py": readme_test_file(), "conftest.py": RECORDER}
    result = run_project(tmp_path, files, *args, GK_TEST_NAMES=str(names), **env)
    return result, set(names.read_text().split()) if names.exists() else set()


def leftovers(names: set[str]) -> dict[str, list[str]]:
    """What is left on the loopback servers of the per-test data named ``names`` (gk_<hex>)."""
    assert names and all(re.fullmatch(r"gk_[0-9a-f]{12}", n) for n in names), names
    ours = re.compile("|".join(sorted(names)))
    found: dict[str, list[str]] = {}
    for name, url in (("redis", REDIS_URL), ("valkey", VALKEY_URL)):
        with redis.Redis.from_url(url) as single:
            found[name] = [k.decode() for k in single.scan_iter(match="*gk_*", count=1000)]
    for name, url in (("redis-cluster", REDIS_CLUSTER_URL), ("valkey-cluster", VALKEY_CLUSTER_URL)):
        with redis.RedisCluster.from_url(url.replace("redis+cluster", "redis")) as c:
            found[name] = [
                k.decode() for k in c.scan_iter(match="*gk_*", count=1000, target_nodes="all")
            ]
    mongo: Any = pymongo.MongoClient(MONGODB_URI, serverSelectionTimeoutMS=5000)
    with mongo:
        found["mongodb"] = [n for n in mongo.list_database_names() if n.startswith("gk_")]
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=DYNAMODB_ENDPOINT)
    found["dynamodb"] = [n for n in client.list_tables()["TableNames"] if n.startswith("gk_")]
    found = {k: [n for n in v if ours.search(n)] for k, v in found.items()}
    return {k: v for k, v in found.items() if v}


def test_the_readme_project_passes_on_every_backend_with_env_servers(tmp_path: Path) -> None:
    result, names = run_recorded_project(tmp_path, "--graphkeep-servers=env", **ENV_URLS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in BACKENDS}
    # one name per test that used graphkeep_url (each fixture below it does), all removed
    assert len(names) == len(TESTS) * len(BACKENDS), names
    assert leftovers(names) == {}, "the plugin left per-test data behind"


def test_the_valkey_backends_are_opt_in_and_run_the_readme_project_with_env_servers(
    tmp_path: Path,
) -> None:
    result, names = run_recorded_project(
        tmp_path,
        "--graphkeep-servers=env",
        "--graphkeep-backends=valkey,valkey-cluster",
        **ENV_URLS,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in VALKEY_BACKENDS}
    header = re.search(r"^graphkeep: servers=env; (.*)$", result.stdout, re.M)
    assert header and header.group(1) == (
        f"valkey {VALKEY_URL}, valkey-cluster {VALKEY_CLUSTER_URL}"
    ), result.stdout[-2000:]
    assert len(names) == len(TESTS) * len(VALKEY_BACKENDS), names
    assert leftovers(names) == {}, "the plugin left per-test data behind"


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


@pytest.fixture
def images() -> dict[str, str]:
    """The image variables ``./dev containers up`` wrote; skips when no engine answers here."""
    exports = REPO / ".services" / "containers.env"
    if not (_docker_answers() and exports.exists()):
        pytest.skip("no Docker engine answers here (./dev containers up starts one)")
    return dict(re.findall(r"^export (\w+)=(\S+)$", exports.read_text(), re.M))


LABEL = "dev.graphkeep.testing"


def plugin_containers() -> set[str]:
    """Ids of every container graphkeep.testing runs here (``./dev test --containers``'s own
    session among them: tests compare before and after)."""
    import docker

    client = docker.from_env()
    return {c.id for c in client.containers.list(all=True, filters={"label": LABEL})}


def test_the_readme_project_passes_on_every_backend_in_containers(
    tmp_path: Path, images: dict[str, str]
) -> None:
    before = plugin_containers()
    result = run_user_project(tmp_path, "--graphkeep-servers=containers", **images)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in BACKENDS}
    assert plugin_containers() <= before, "the plugin left containers behind"


def test_the_readme_project_passes_on_valkey_in_containers(
    tmp_path: Path, images: dict[str, str]
) -> None:
    before = plugin_containers()
    result = run_user_project(
        tmp_path,
        "--graphkeep-servers=containers",
        "--graphkeep-backends=valkey,valkey-cluster",
        **images,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in VALKEY_BACKENDS}
    assert plugin_containers() <= before, "the plugin left containers behind"


DYING = """
import os

import docker


def test_1_the_redis_container_dies(graphkeep_url, graphkeep_backend):
    if graphkeep_backend == "redis":
        mine = {"label": f"dev.graphkeep.testing.pid={os.getpid()}"}  # not another session's
        for c in docker.from_env().containers.list(filters=mine):
            if c.attrs["Config"]["Image"] == os.environ["GRAPHKEEP_REDIS_IMAGE"]:
                c.kill()


def test_2_needs_the_server(graphkeep_saver):
    assert list(graphkeep_saver.list({"configurable": {"thread_id": "x"}})) == []
"""


def test_a_container_dying_mid_session_fails_only_its_tests_with_storage_unavailable(
    tmp_path: Path, images: dict[str, str]
) -> None:
    before = plugin_containers()
    result = run_project(
        tmp_path,
        {"test_dying.py": DYING},
        "--graphkeep-servers=containers",
        "--graphkeep-backends=redis,mongodb",
        **images,
        COLUMNS="400",  # whole lines in the short summary
    )
    assert passed_ids(result) == {
        "test_1_the_redis_container_dies[mongodb]",
        "test_2_needs_the_server[mongodb]",
        "test_1_the_redis_container_dies[redis]",
    }, result.stdout[-3000:]
    errors = re.findall(r"^ERROR \S+\[redis\] - (\S+)", result.stdout, re.M)
    assert errors and all("StorageUnavailable" in e for e in errors), result.stdout[-3000:]

    assert plugin_containers() <= before


# --------------------------------------------------------------------------- local servers

#: the programs ./dev runs, as --graphkeep-servers=local takes them (./dev exports the same)
LOCAL_PROGRAMS = {
    "GRAPHKEEP_MONGODB_SERVER": str(REPO / ".services" / "bin" / "ferretdb"),
    "GRAPHKEEP_DYNAMODB_SERVER": f"{sys.executable} {REPO / 'tools' / 'moto_server.py'}",
}
SERVER_PROGRAMS = ("redis-server", "ferretdb", "moto_server", "valkey-server")


def server_processes() -> set[int]:
    """Pids of every server program running here (read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(program in command for program in SERVER_PROGRAMS):
            found.add(int(entry.name))
    return found


def settled(before: set[int], timeout: float = 15.0) -> set[int]:
    """The server processes started since ``before`` that are still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (extra := server_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    return extra


def test_the_readme_project_passes_on_every_backend_with_local_servers(tmp_path: Path) -> None:
    before = server_processes()
    result = run_user_project(tmp_path, "--graphkeep-servers=local", **LOCAL_PROGRAMS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in BACKENDS}
    header = re.search(r"^graphkeep: servers=local; (.*)$", result.stdout, re.M)
    assert header and all(b in header.group(1) for b in BACKENDS), result.stdout[:2000]
    assert settled(before) == set(), "the plugin left server processes running"


def test_the_readme_project_passes_on_valkey_with_local_servers(tmp_path: Path) -> None:
    before = server_processes()
    result = run_user_project(
        tmp_path, "--graphkeep-servers=local", "--graphkeep-backends=valkey,valkey-cluster"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert passed_ids(result) == {f"{t}[{b}]" for t in TESTS for b in VALKEY_BACKENDS}
    header = re.search(r"^graphkeep: servers=local; (.*)$", result.stdout, re.M)
    assert header and re.fullmatch(
        r"valkey redis://127\.0\.0\.1:\d+/0, valkey-cluster redis\+cluster://127\.0\.0\.1:\d+",
        header.group(1),
    ), result.stdout[:2000]
    assert settled(before) == set(), "the plugin left server processes running"


def test_local_servers_without_the_program_fail_clearly(tmp_path: Path) -> None:
    result = run_user_project(
        tmp_path,
        "--graphkeep-servers=local",
        "--graphkeep-backends=mongodb",
        GRAPHKEEP_MONGODB_SERVER="/nonexistent/mongod",
    )
    assert result.returncode == 1
    assert "--graphkeep-servers=local cannot start mongodb with /nonexistent/mongod" in (
        result.stdout
    )
    assert "Traceback" not in result.stdout


SLOW = """
import pathlib, time


def test_waits(graphkeep_saver, graphkeep_backend):
    pathlib.Path("started-" + graphkeep_backend).write_text("1")
    time.sleep(120)
"""


def _interrupt(tmp_path: Path, sig: int, *args: str, **env: str) -> subprocess.Popen[str]:
    """Start a user project whose test waits, and send ``sig`` to pytest once it runs."""
    (tmp_path / "tests").mkdir(parents=True)
    (tmp_path / "tests" / "test_slow.py").write_text(SLOW)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests", *args],
        cwd=tmp_path,
        env=user_environ(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("started-*")):
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the test never started"
        time.sleep(0.1)
    process.send_signal(sig)
    process.wait(timeout=60)
    return process


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_local_servers_stop_when_pytest_is_interrupted_or_killed(
    tmp_path: Path, sig: signal.Signals
) -> None:
    before = server_processes()
    workdirs = set(Path(tempfile.gettempdir()).glob("graphkeep-*"))
    _interrupt(tmp_path, sig, "--graphkeep-servers=local", **LOCAL_PROGRAMS)
    # Ctrl-C: pytest stops them; kill -9: they die with it (the kernel's parent-death signal)
    assert settled(before) == set(), f"server processes left after {sig.name}"
    if sig == signal.SIGINT:  # only a kill -9 leaves the session's temporary directory
        assert set(Path(tempfile.gettempdir()).glob("graphkeep-*")) <= workdirs


def test_graphkeep_env_sets_an_apps_own_variables_before_its_conftest_imports(
    tmp_path: Path,
) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\ngraphkeep_env =\n    APP_REDIS=redis\n    APP_DYNAMO=dynamodb:endpoint_url\n"
    )
    conftest = "import os\nREDIS = os.environ['APP_REDIS']\nDYNAMO = os.environ['APP_DYNAMO']\n"
    app = (
        "import redis\nfrom conftest import REDIS, DYNAMO\n\n"
        "def test_the_app_reaches_them():\n"
        "    assert redis.Redis.from_url(REDIS).ping()\n"
        "    assert DYNAMO.startswith('http://127.0.0.1:')\n"
    )
    result = run_project(
        tmp_path,
        {"conftest.py": conftest, "test_app.py": app},
        "--graphkeep-servers=local",
        "--graphkeep-backends=redis,dynamodb",
        **LOCAL_PROGRAMS,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "test_the_app_reaches_them PASSED" in result.stdout


APP_VALKEY = """
import os

import redis


def test_the_app_reaches_valkey():
    url = os.environ.get("APP_VALKEY")
    if os.environ.get("EXPECT_NONE"):
        assert url is None
    else:
        assert redis.Redis.from_url(url).info("server")["server_name"] == "valkey"
"""


def test_graphkeep_env_naming_valkey_starts_it_unless_the_backends_leave_it_out(
    tmp_path: Path,
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ngraphkeep_env =\n    APP_VALKEY=valkey\n")
    files = {"test_app.py": APP_VALKEY}
    named = run_project(tmp_path, files, "--graphkeep-servers=env", **ENV_URLS)
    assert named.returncode == 0, named.stdout[-3000:] + named.stderr[-2000:]
    assert f"graphkeep: servers=env; valkey {VALKEY_URL}" in named.stdout
    left_out = run_project(
        tmp_path, files, "--graphkeep-servers=env", "--graphkeep-backends=redis", EXPECT_NONE="1"
    )
    assert left_out.returncode == 0, left_out.stdout[-3000:] + left_out.stderr[-2000:]
    assert "graphkeep: servers=env\n" in left_out.stdout


def test_a_bad_graphkeep_env_line_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ngraphkeep_env =\n    APP_DB=postgres\n")
    result = run_project(tmp_path, {"test_x.py": "def test_x():\n    pass\n"})
    assert result.returncode == 4, result.stdout + result.stderr
    assert "graphkeep_env: 'APP_DB=postgres' is not VARIABLE=backend[:param]" in result.stderr


def test_the_suite_exports_every_backend_through_graphkeep_env() -> None:
    """pyproject's graphkeep_env names each variable the suite and the matrix read."""
    text = (REPO / "pyproject.toml").read_text()
    lines = set(re.findall(r'^\s+"(\w+=[\w:-]+)",$', text.split("graphkeep_env", 1)[1], re.M))
    assert lines == {
        "REDIS_URL=redis",
        "REDIS_CLUSTER_URL=redis-cluster",
        "MONGODB_URI=mongodb",
        "DYNAMODB_ENDPOINT_URL=dynamodb:endpoint_url",
        "VALKEY_URL=valkey",
        "VALKEY_CLUSTER_URL=valkey-cluster",
    }


def test_the_ci_workflow_runs_tox_envs_that_exist_with_variables_the_plugin_reads() -> None:
    import yaml

    from graphkeep.testing import IMAGE_VARIABLES

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    tox = (REPO / "tox.ini").read_text()
    envs = set(re.findall(r"^\[testenv:([\w-]+)\]$", tox, re.M))
    matrix = workflow["jobs"]["backend"]["strategy"]["matrix"]
    # the suite per backend runs on 3.11-3.13 (its dev extras need 3.11); 3.10, the older claimed
    # Python, has a `pythons` job of its own (test_docs checks every claimed one has a job)
    assert matrix["python"] == ["3.11", "3.12", "3.13"]
    names = {b["name"] for b in matrix["backend"]}
    assert names == {
        "redis", "redis-cluster", "valkey-8", "valkey-cluster-8",
        "mongodb-7", "mongodb-8", "dynamodb-moto", "dynamodb-local",
    }  # fmt: skip
    for backend in matrix["backend"]:
        assert backend["tox"] in envs
        assert backend["image_var"] in IMAGE_VARIABLES.values()
    mongo = {b["image"] for b in matrix["backend"] if b["tox"] == "mongodb"}
    assert mongo == {"mongo:7.0", "mongo:8.0"}  # real mongod, not FerretDB
    valkey = {b["image"] for b in matrix["backend"] if b["tox"].startswith("valkey")}
    assert valkey == {"valkey/valkey:8"}  # the Valkey the local servers run
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    toxed = re.findall(r"tox -e ([\w${}. -]+?)(?: --|$)", "\n".join(runs), re.M)
    assert {"lint", "suite"} <= set(toxed) <= envs | {"${{ matrix.backend.tox }}"}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_no_container_is_left_after_ctrl_c_or_after_the_next_session_of_a_kill_9(
    tmp_path: Path, images: dict[str, str], sig: signal.Signals
) -> None:
    before = plugin_containers()
    _interrupt(tmp_path / "a", sig, "--graphkeep-servers=containers", **images)
    if sig == signal.SIGKILL:  # nothing ran at exit: the next session on this host sweeps
        assert plugin_containers() - before, "kill -9 left nothing?"
        result = run_user_project(
            tmp_path / "b", "--graphkeep-servers=containers", "--graphkeep-backends=redis", **images
        )
        assert result.returncode == 0, result.stdout[-3000:]
    assert plugin_containers() <= before
