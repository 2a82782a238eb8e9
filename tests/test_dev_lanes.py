"""What ``./dev test`` runs where, by pytest's own collection through the arguments ``./dev``
gives it: ``--quick`` (tools/quick.py), the inner loop — one backend per product family, none
of the tests that need a side venv, a browser or a rival, never CI's — and the main lane's
files the lanes share out (tools/lane_queue.py), each run once, none on Redis Stack."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import lane_queue, quick

ROOT = Path(__file__).resolve().parent.parent

#: files with each kind of case: backends parametrized by the plugin (test_check_forks) and by
#: the tests themselves (test_concurrency_pools: Redis, Cluster, MongoDB, DynamoDB; Valkey ones
#: in test_least_privilege), a Redis Stack case (vector_index) and the bench's whole-suite runs
FILES = (
    "tests/test_check_forks.py",
    "tests/test_concurrency_pools.py",
    "tests/test_least_privilege.py",
    "tests/test_store_redis.py",
    "tests/test_bench.py",
)


def collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["--graphkeep-servers=env", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def backend_of(test_id: str) -> str | None:
    """The backend a test id names (``[redis]``, ``[redis-cluster-sync]``…), if any."""
    match = re.search(r"\[(.+)\]$", test_id)
    if match is None:
        return None
    words = set(match.group(1).split("-"))
    for name in ("valkey", "cluster", "redis", "mongodb", "dynamodb"):
        if name in words:
            return "valkey" if name == "valkey" else "redis-cluster" if name == "cluster" else name
    return None


def test_quick_runs_one_backend_per_family_and_leaves_out_side_venvs_and_rivals() -> None:
    full = collected(*FILES)
    chosen = collected(*quick.pytest_args(), *FILES)
    assert set(chosen) < set(full)
    # the full run has every backend; the quick one Redis, MongoDB and DynamoDB only
    assert {backend_of(t) for t in full} >= {"redis", "redis-cluster", "valkey", "mongodb"}
    assert {backend_of(t) for t in chosen} - {None} == {"redis", "mongodb", "dynamodb"}
    for name in ("test_500_concurrent", "vector_index", "test_quick_"):
        assert any(name in t for t in full), name
        assert not any(name in t for t in chosen), name
    for path in FILES:
        assert any(t.startswith(path) for t in chosen), path


def test_ci_runs_the_whole_suite_not_the_quick_one() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec ./dev test\n" in ci and "--quick" not in ci
    assert "cmd_test_quick" in (ROOT / "dev").read_text()


@pytest.mark.parametrize("argv", [["--explain"], []])
def test_the_quick_selection_explains_itself(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert quick.main(argv) == 0
    out = capsys.readouterr().out
    if argv:
        for word in quick.LEFT_OUT:
            assert word in out
    else:
        assert out.splitlines() == quick.pytest_args()


# -- the main lane's shared chunks (tools/lane_queue.py) -------------------------------------


def test_the_shared_chunks_are_the_files_the_main_lane_leaves_out_and_none_uses_redis_stack() -> (
    None
):
    files = [path for chunk in lane_queue.CHUNKS for path in chunk]
    assert len(set(files)) == len(files)
    assert lane_queue.ignore().splitlines() == [f"--ignore={path}" for path in files]
    for path in files:
        # the Redis Stack server's database 0 is the bench's (flushed): its users stay in order
        text = (ROOT / path).read_text()
        assert "REDIS_STACK" not in text and "redis_stack" not in text, path
    # every shared file has main-lane tests (a chunk of none would fail its session: exit 5)
    chosen = collected(*lane_queue.main_lane_selection(), *files)
    for path in files:
        assert any(t.startswith(f"{path}::") for t in chosen), path


def test_a_chunk_is_claimed_by_one_lane_and_the_report_fails_on_a_chunk_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lane_queue.claim(tmp_path, "chunk-1")
    assert not lane_queue.claim(tmp_path, "chunk-1")
    for index, _ in enumerate(lane_queue.CHUNKS):
        name = lane_queue.chunk_name(index)
        (tmp_path / f"{name}.log").write_text(f"{name}: 3 passed\n")
        (tmp_path / f"{name}.rc").write_text("0\n")
    assert lane_queue.report(tmp_path) == 0
    (tmp_path / "chunk-2.rc").unlink()
    assert lane_queue.report(tmp_path) == 1
    assert "chunk-2" in capsys.readouterr().err
