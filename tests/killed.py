"""A worker process killed at a chosen point: the crash tests' one way to do it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def kill_at(script: str, args: list[str], line: str) -> None:
    """Run ``python -c script *args`` and SIGKILL it as soon as it prints ``line`` (its
    first line: the worker stops there, waiting to be killed)."""
    worker = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        said = worker.stdout.readline()
        assert said.strip() == line, worker.stderr and worker.stderr.read()
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == -signal.SIGKILL
