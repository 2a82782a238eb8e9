"""`python -m conformance --queue DIR` / `--report DIR`: the matrix shared out between processes
(`./dev test` runs one `--queue` process per lane), on the in-process reference set-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
#: two rows, quick ones: the reference saver's thread_ids group and its store's batch cases
ROWS = ["--backend", "reference", "--no-official", "--group", "thread_ids", "--capability", "batch"]


def command(*args: str) -> list[str]:
    """`python -m conformance` on ROWS with ARGS."""
    return [sys.executable, "-m", "conformance", *ROWS, *args]


def conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_queue_processes_run_each_row_once_and_the_report_is_one_matrix(tmp_path: Path) -> None:
    queue = tmp_path / "queue"
    argv = command("--queue", str(queue))
    workers = [
        subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    ran = [
        line.split(" (", 1)[0].removeprefix("== ")
        for _, err in outputs
        for line in err.splitlines()
        if line.startswith("== ")
    ]
    # every row exactly once across the two processes
    assert sorted(ran) == ["reference", "reference store"], outputs

    report = conformance("--report", str(queue))
    assert report.returncode == 0, report.stdout + report.stderr
    assert "| reference | 10/10      | PASS   |" in report.stdout
    assert "| reference | 12/12 | PASS   |" in report.stdout


def test_a_row_whose_result_is_missing_fails_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = tmp_path / "queue"
    assert main([*ROWS, "--queue", str(queue)]) == 0
    (queue / "reference-store.report").unlink()
    capsys.readouterr()
    assert main([*ROWS, "--report", str(queue)]) == 1
    out = capsys.readouterr().out
    assert "[reference store] did not finish" in out
    assert "| reference | 10/10      | PASS   |" in out


def test_a_queue_whose_rows_are_all_claimed_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    (queue / "reference.claimed").mkdir()
    (queue / "reference-store.claimed").mkdir()
    assert main([*ROWS, "--queue", str(queue)]) == 0
    assert "== " not in capsys.readouterr().err
    assert main([*ROWS, "--report", str(queue)]) == 1
