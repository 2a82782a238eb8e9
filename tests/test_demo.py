"""``python -m graphkeep.demo`` on Redis, run as users run it: a process of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import graphkeep
from graphkeep import demo
from graphkeep.connect import BACKENDS

from .conftest import REDIS_URL

pytestmark = pytest.mark.redis


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REDIS_URL=REDIS_URL)
    return subprocess.run(
        [sys.executable, "-m", "graphkeep.demo", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_on_redis_checks_every_fact_it_prints_and_keeps_the_thread() -> None:
    done = run_demo("--backend", "redis")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for line in [
        "=== graphkeep demo on redis",
        "turn 1  user: Hi, I'm Ada.",
        "-> paused for approval: Approve refund of $249.00 for order #1042?",
        "[ok] 6 messages (3 user, 3 bot) survived the saver restarts",
        "[ok] turn 2's answer names Ada and #1042, which only turn 1 mentioned",
        "| pending interrupt in ('approval',)",
        "[ok] child process exited 0",
        "[ok] draft_refund (the node before the interrupt) ran once",
        "[ok] approval committed exactly once",
        "get_state_history (newest first):",
        "nodes re-run by the replay: {'respond': 1}",
        "[ok] only 'respond' (after the checkpoint) re-ran; triage did not",
        "[ok] the fork's parent is the old checkpoint",
        "[ok] the fork has its own values: priority urgent, 2 messages",
        "checkpoints of the original history are unchanged",
        "5. Long-term memory across threads (store + semantic search)",
        "[ok] the new thread used the preference learned in the first one (contact by email)",
        "[ok] semantic search found the earlier cracked-screen ticket for the new message",
        "[ok] 4 ticket notes from both threads are in the store, newest first",
        "key prefix 'graphkeep-demo'",
        "What OpenTelemetry recorded (graphkeep's metrics, read from the SDK; this process):",
        "[ok] every backend recorded its calls and checkpoint writes, and no resume failure",
        "demo passed",
    ]:
        assert line in out, f"missing {line!r} in:\n{out}"
    assert "[FAIL]" not in out
    # the metrics summary's row: calls, puts, put P50/P99 ms, requests per call, 0 failures
    row = re.search(r"^  redis +(\d+) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +0$", out, re.M)
    assert row, out
    assert int(row.group(1)) > 0 and int(row.group(2)) > 0
    assert float(row.group(3)) <= float(row.group(4))
    # the child really was another process
    child = re.search(r"child pid (\d+)", out)
    assert child and int(child.group(1)) != os.getpid()

    # nothing was cleaned up: the thread is there to inspect
    thread_id = re.search(r"thread id : (ticket-[0-9a-f]+)", out)
    assert thread_id, out
    with graphkeep.connect(REDIS_URL, key_prefix="graphkeep-demo") as saver:
        config = {"configurable": {"thread_id": thread_id.group(1)}}
        assert saver.get_tuple(config) is not None
        assert len(list(saver.list(config))) > 13


def test_demo_refuses_a_backend_that_has_not_landed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(BACKENDS, "dynamodb", raising=False)
    assert demo.main(["--backend", "dynamodb"]) == 1
    assert "dynamodb: backend not available yet" in capsys.readouterr().out
