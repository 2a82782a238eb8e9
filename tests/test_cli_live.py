"""``graphkeep watch`` and ``graphkeep events`` as subprocesses, against real servers, with a
writer in this process running at the same time.

Every backend: Redis (a native feed, blocking reads) and Redis Cluster, MongoDB and DynamoDB
(polling). Each test works in its own key prefix. Error paths run in-process through
``run([...])`` (no server round trip needed to judge them, or one at most).
"""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import graphkeep
from conformance.setups import all_setups
from graphkeep.cli import run
from tests.cli_runs import ctrl_c_reaches_it

from .conftest import unique_prefix

SETUPS = {s.name: s for s in all_setups()}


def _backend(name: str) -> Any:
    setup = SETUPS[name]
    return pytest.param(setup.url, id=name, marks=[getattr(pytest.mark, setup.marker or name)])


BACKENDS = [_backend(name) for name in ("redis", "redis-cluster", "mongodb", "dynamodb")]
REDIS = SETUPS["redis"].url
#: generous bounds: a subprocess imports LangGraph first, polling stores poll every 200 ms
LINE_TIMEOUT = 30.0


class Cli:
    """``python -m graphkeep.cli ...`` running; its stdout lines arrive on a queue."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "graphkeep.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            preexec_fn=ctrl_c_reaches_it,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line(self, timeout: float = LINE_TIMEOUT) -> str:
        try:
            got = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"no line within {timeout} s; stderr: {self.stderr()}") from None
        if got is None:
            raise AssertionError(f"the command ended early; stderr: {self.stderr()}")
        return got

    def finish(self, timeout: float = 60) -> tuple[int, list[str], str]:
        """Wait for the exit; returns (code, the lines not taken yet, stderr)."""
        code = self.proc.wait(timeout=timeout)
        self._pump.join(timeout=10)
        rest = []
        while True:
            got = self.lines.get_nowait() if not self.lines.empty() else None
            if got is None:
                break
            rest.append(got)
        return code, rest, self.stderr()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@contextmanager
def cli(*argv: str) -> Iterator[Cli]:
    command = Cli(*argv)
    try:
        yield command
    finally:
        command.kill()


def in_process(*argv: str) -> tuple[int, str, str]:
    """``graphkeep ARGV`` in this process; argparse's own errors land in ``err`` too."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


class Writer:
    """Puts checkpoints on one thread of a saver, choosing which channels change."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver = saver
        self.config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.versions: dict[str, Any] = {}
        self.step = -1

    def put(self, *changed: str) -> str:
        new = {ch: self.saver.get_next_version(self.versions.get(ch), None) for ch in changed}
        self.versions.update(new)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=self.step + 1))
        checkpoint["channel_values"] = {ch: f"{ch} at {self.step}" for ch in self.versions}
        checkpoint["channel_versions"] = dict(self.versions)
        metadata: Any = {"source": "loop" if self.step >= 0 else "input", "step": self.step}
        self.config = self.saver.put(self.config, checkpoint, metadata, new)
        self.step += 1
        return str(self.config["configurable"]["checkpoint_id"])


# -- watch -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", BACKENDS)
def test_watch_prints_every_checkpoint_a_concurrent_writer_commits_once_in_order(
    url: str,
) -> None:
    prefix, thread = unique_prefix("watch"), f"t-{uuid.uuid4().hex[:8]}"
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        writer = Writer(saver, thread)
        start = writer.put("messages", "todo")  # before the watcher: passed as --after
        changes = [("messages",), ("messages",), ("todo",), ("messages", "todo"), ("messages",)]
        argv = ["watch", url, thread, "--after", start, "--json", "--key-prefix", prefix]
        with cli(*argv, "--timeout", "4") as watcher:
            ids: list[str] = []

            def write() -> None:
                for changed in changes:
                    ids.append(writer.put(*changed))
                    time.sleep(0.05)

            concurrent = threading.Thread(target=write)
            concurrent.start()
            rows = [json.loads(watcher.line()) for _ in changes]
            concurrent.join()
            code, rest, err = watcher.finish()
        assert code == 0, err
        assert rest == [] and err == ""
        assert [r["checkpoint_id"] for r in rows] == ids
        assert [r["parent_checkpoint_id"] for r in rows] == [start, *ids[:-1]]
        assert [r["channels_changed"] for r in rows] == [sorted(c) for c in changes]
        assert [(r["step"], r["source"]) for r in rows] == [(s, "loop") for s in range(5)]
        assert {r["thread_id"] for r in rows} == {thread}
        assert {r["checkpoint_ns"] for r in rows} == {""}
        saver.delete_thread(thread)


@pytest.mark.parametrize("url", BACKENDS)
def test_a_restarted_watcher_passing_the_last_id_it_printed_misses_nothing(url: str) -> None:
    prefix, thread = unique_prefix("rewatch"), f"t-{uuid.uuid4().hex[:8]}"
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        writer = Writer(saver, thread)
        start = writer.put("messages")
        first_ids = [writer.put("messages") for _ in range(2)]
        argv = ["watch", url, thread, "--key-prefix", prefix, "--timeout", "2"]
        with cli(*argv, "--after", start) as first:
            lines = [first.line(), first.line()]
            code, rest, err = first.finish()
        assert code == 0 and rest == [], err
        # text lines: id, step, source, changed channels
        assert lines[0].split() == [first_ids[0], "step=0", "source=loop", "changed=messages"]
        last_seen = lines[-1].split()[0]
        assert last_seen == first_ids[-1]
        # written while no watcher runs
        missed_while_down = [writer.put("messages") for _ in range(3)]
        with cli(*argv, "--after", last_seen) as second:
            got = [second.line().split()[0] for _ in missed_while_down]
            code, rest, err = second.finish()
        assert code == 0 and rest == [], err
        assert got == missed_while_down
        saver.delete_thread(thread)


@pytest.mark.redis
def test_watch_ctrl_c_exits_130_without_a_traceback() -> None:
    prefix, thread = unique_prefix("watchint"), f"t-{uuid.uuid4().hex[:8]}"
    with graphkeep.connect(REDIS, key_prefix=prefix) as saver:
        writer = Writer(saver, thread)
        start = writer.put("messages")
        with cli("watch", REDIS, thread, "--after", start, "--key-prefix", prefix) as watcher:
            writer.put("messages")
            watcher.line()  # running and following now
            watcher.proc.send_signal(signal.SIGINT)
            code, rest, err = watcher.finish()
        assert code == 130
        assert rest == [] and err == ""
        saver.delete_thread(thread)


@pytest.mark.redis
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["watch", REDIS, "t1", "--after", "not-a-checkpoint\x00id"], "checkpoint"),
        (["watch", REDIS, ""], "thread"),
        (["watch", REDIS, "t1", "--timeout", "0"], "positive"),
        (["watch", REDIS, "t1", "--timeout", "soon"], "not a duration"),
        (["watch", "sqlite:///x.db", "t1"], "needs a graphkeep URL"),
        (["watch", "nosuch://host/0", "t1"], "nosuch"),
    ],
)
def test_watch_refuses_bad_input_in_one_line_with_exit_code_2(
    argv: list[str], message: str
) -> None:
    code, out, err = in_process(*argv)
    assert code == 2, err
    assert out == ""
    last = err.strip().splitlines()[-1]  # argparse prints its usage lines first
    assert last.startswith("graphkeep") and message in last
    assert "Traceback" not in err


# -- events ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", BACKENDS)
def test_events_prints_a_run_then_follows_a_concurrent_writer_to_the_close(url: str) -> None:
    prefix, run_id = unique_prefix("events"), f"run-{uuid.uuid4().hex[:8]}"
    with graphkeep.connect_events(url, key_prefix=prefix) as log:
        stored = log.append_many(run_id, [{"type": "token", "n": i} for i in range(3)])
        code, out, err = in_process("events", url, run_id, "--key-prefix", prefix)
        assert code == 0, err
        assert out.splitlines() == [
            f"{event_id}\t{json.dumps({'type': 'token', 'n': i}, separators=(',', ':'))}"
            for i, event_id in enumerate(stored)
        ]
        argv = ["events", url, run_id, "--after", stored[0], "--follow", "--json"]
        with cli(*argv, "--key-prefix", prefix) as follower:
            assert json.loads(follower.line()) == {
                "id": stored[1],
                "event": {"type": "token", "n": 1},
            }
            live: list[str] = []

            def write() -> None:
                for i in range(3, 8):
                    live.append(log.append(run_id, {"type": "token", "n": i, "text": "héllo"}))
                    time.sleep(0.02)
                live.append(log.close(run_id, "success"))

            concurrent = threading.Thread(target=write)
            concurrent.start()
            rows = [json.loads(follower.line()) for _ in range(1 + 5 + 1)]
            concurrent.join()
            code, rest, err = follower.finish()
        assert code == 0 and rest == [], err
        assert [r["id"] for r in rows] == [stored[2], *live]
        assert [r["event"].get("n") for r in rows[:-1]] == list(range(2, 8))
        assert rows[1]["event"]["text"] == "héllo"
        assert rows[-1]["event"] == {"type": "close", "status": "success"}
        log.delete(run_id)


@pytest.mark.redis
def test_events_ctrl_c_while_following_exits_130_without_a_traceback() -> None:
    prefix, run_id = unique_prefix("eventsint"), f"run-{uuid.uuid4().hex[:8]}"
    with graphkeep.connect_events(REDIS, key_prefix=prefix) as log:
        log.append(run_id, {"type": "start"})
        with cli("events", REDIS, run_id, "--follow", "--key-prefix", prefix) as follower:
            follower.line()
            follower.proc.send_signal(signal.SIGINT)
            code, rest, err = follower.finish()
        assert code == 130
        assert rest == [] and err == ""
        log.delete(run_id)


@pytest.mark.redis
def test_events_of_an_unknown_run_is_not_found_exit_4() -> None:
    prefix = unique_prefix("eventsnf")
    code, out, err = in_process("events", REDIS, "no-such-run", "--key-prefix", prefix)
    assert code == 4
    assert out == ""
    assert err.startswith("graphkeep: error: ") and "no-such-run" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.redis
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["events", REDIS, "run-1", "--after", "not an id"], "not an id"),
        (["events", REDIS, ""], "run id"),
        (["events", "sqlite:///x.db", "run-1"], "needs a graphkeep URL"),
        (["events", "nosuch://host/0", "run-1"], "nosuch"),
        (["events", "no-url-at-all", "run-1"], "expected a URL"),
    ],
)
def test_events_refuses_bad_input_in_one_line_with_exit_code_2(
    argv: list[str], message: str
) -> None:
    prefix = unique_prefix("eventsbad")
    code, out, err = in_process(*argv, "--key-prefix", prefix)
    assert code == 2, err
    assert out == ""
    assert message in err
    assert err.startswith("graphkeep: error: ")
    assert len(err.strip().splitlines()) == 1
