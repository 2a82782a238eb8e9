"""Faults (issue #5 s3): a worker killed mid super-step, a server restarted between steps, a
reply lost on its way back (retries must be safe).

The kill -9 scenario runs on every backend set-up. The restart scenarios start a PRIVATE server
(tests/scenarios/servers.py) for every registered backend whose server we can run ourselves:
Redis with ``appendonly yes`` + ``appendfsync always`` (stopped with SIGTERM and, since the
AOF is fsynced on every write, also crashed with SIGKILL), FerretDB on its own SQLite directory,
moto (in memory only: its restart is expected to lose everything, see RELIABILITY.md).
The lost reply comes from :class:`~tests.scenarios.servers.LossyProxy` in front of the server.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from conformance.factory import Api, Mode
from graphkeep.errors import StorageUnavailable
from tests.conftest import unique_prefix
from tests.scenarios import worker
from tests.scenarios.backends import (
    MODES,
    RESTARTABLE,
    SETUPS,
    Backend,
    Graph,
    Store,
    other_mode,
    reachable,
    thread_config,
)
from tests.scenarios.graphs import RunLog, chat_graph, chat_transcript, user_line
from tests.scenarios.servers import LossyProxy

#: a call against a stopped server must give up within this (retries are bounded)
UNAVAILABLE_WITHIN_S = 20.0
#: if a call hangs anyway, dump every stack and exit rather than hang CI
HANG_GUARD_S = 120.0


# -- kill -9 in the middle of a super-step --------------------------------------------------


def _fast_write_stored(api: Api, thread_id: str) -> bool:
    found = api.get_tuple(thread_config(thread_id))
    return found is not None and any(v == ["fast"] for _, _, v in found.pending_writes or [])


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_mid_super_step_then_resume_in_a_new_process(
    store: Store, mode: Mode, thread_id: str, tmp_path: Path
) -> None:
    runs = RunLog(tmp_path / "runs.log")
    hang, started = tmp_path / "hang", tmp_path / "started"
    hang.touch()
    where = (store.backend.url, store.prefix, thread_id, runs.path)
    flags = ("--hang-flag", str(hang), "--started", str(started))
    errors = tmp_path / "worker.err"
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            worker.command("crash-run", *where, "--mode", mode, *flags),
            cwd=worker.REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        # kill only once "slow" is inside its step and "fast" (its sibling) is stored
        with store.open("sync") as api:
            deadline = time.monotonic() + 60
            while not (started.exists() and _fast_write_stored(api, thread_id)):
                assert process.poll() is None, errors.read_text(errors="replace")
                assert time.monotonic() < deadline, "the worker never reached mid-step"
                time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert runs.counts() == {"fast": 1, "slow": 1}

    hang.unlink()
    values = worker.run("crash-resume", *where, "--mode", other_mode(mode), *flags)
    assert values == {"log": ["in", "fast", "slow", "join"]}
    # the finished sibling was not re-run; the killed step and the rest ran once more
    assert runs.counts() == {"fast": 1, "slow": 2, "join": 1}


# -- server restart between steps ------------------------------------------------------------


def _stop_signals(backend: Backend) -> tuple[signal.Signals, ...]:
    # Redis fsyncs its AOF on every write here, so even a crash must keep what it acknowledged
    return (signal.SIGTERM, signal.SIGKILL) if backend.name == "redis" else (signal.SIGTERM,)


RESTARTS = [
    pytest.param(b, sig, id=f"{b.name}-{sig.name}", marks=getattr(pytest.mark, b.marker))
    for b in RESTARTABLE
    for sig in _stop_signals(b)
]


def _history(graph: Graph, config: Any) -> list[tuple[Any, ...]]:
    return [(s.config, s.values, s.next, s.parent_config) for s in graph.history(config)]


def _unavailable(call: Any) -> tuple[StorageUnavailable, float]:
    """Run ``call``, which must raise StorageUnavailable; the error and the seconds it took."""
    faulthandler.dump_traceback_later(HANG_GUARD_S, exit=True)
    started = time.monotonic()
    try:
        with pytest.raises(StorageUnavailable) as raised:
            call()
    finally:
        faulthandler.cancel_dump_traceback_later()
    return raised.value, time.monotonic() - started


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("kind", "stop_signal"), RESTARTS)
def test_server_restart_between_steps(
    kind: Backend,
    stop_signal: signal.Signals,
    mode: Mode,
    thread_id: str,
    tmp_path: Path,
) -> None:
    reachable(kind)  # the shared server answering means ./dev services up has run
    assert kind.private_server is not None
    config = thread_config(thread_id)
    with kind.private_server(tmp_path / "server") as server:
        target = Store(replace(kind, url=server.url), unique_prefix("restart"))
        with target.open(mode) as api:
            graph = Graph(api, chat_graph())
            for turn in (1, 2):
                graph.invoke({"log": [user_line(thread_id, turn)]}, config)
            acknowledged = _history(graph, config)

            server.stop(stop_signal)
            error, took = _unavailable(
                lambda: graph.invoke({"log": [user_line(thread_id, 3)]}, config)
            )
            print(f"{kind.name} {mode}: StorageUnavailable after {took:.2f}s: {error}")
            assert took < UNAVAILABLE_WITHIN_S
            assert str(server.port) in str(error), f"message does not name the server: {error}"
            error, took = _unavailable(lambda: api.get_tuple(config))
            assert took < UNAVAILABLE_WITHIN_S

            server.start()
            if server.persists:
                assert _history(graph, config) == acknowledged
                graph.invoke({"log": [user_line(thread_id, 3)]}, config)
                assert graph.state(config).values == {"log": chat_transcript(thread_id, 3)}
        if not server.persists:
            # moto keeps everything in memory: after its restart a new saver (which sets the
            # table up again) finds the thread gone, and the graph starts over
            with target.open(mode) as api:
                graph = Graph(api, chat_graph())
                assert graph.state(config).values == {}
                graph.invoke({"log": [user_line(thread_id, 1)]}, config)
                assert graph.state(config).values == {"log": chat_transcript(thread_id, 1)}


# -- a reply lost on the way back ------------------------------------------------------------


def _address(url: str) -> tuple[str, int]:
    """host and port of the server a graphkeep URL points at (DynamoDB: its endpoint_url)."""
    parts = urlsplit(url)
    if parts.scheme == "dynamodb":
        parts = urlsplit(parse_qs(parts.query)["endpoint_url"][0])
    return parts.hostname or "127.0.0.1", parts.port or 0


#: a cluster client learns the nodes' own addresses and would route around the proxy; the
#: single-node Redis set-up runs the very same code
BEHIND_A_PROXY = [b.param() for b in SETUPS if b.name != "redis-cluster"]


@pytest.mark.parametrize("backend", BEHIND_A_PROXY)
def test_a_lease_whose_acquire_reply_was_lost_is_still_taken(
    backend: Backend, thread_id: str
) -> None:
    """Retries must be safe: the server took the lease, the reply was lost, the saver retried.

    Taking a lease is not idempotent as a plain "set if absent": the retry finds the lease
    present (ours!) and reports "held by another run", and nobody can take it until it expires.
    """
    host, port = _address(reachable(backend).url)
    proxy = LossyProxy((host, port))
    proxied = replace(backend, url=backend.url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}"))
    store = Store(proxied, unique_prefix("lost"))
    try:
        with store.open("sync") as api:
            saver: Any = api.saver
            proxy.lose_reply_to(thread_id.encode())
            lease = saver.lock(thread_id, ttl=30, blocking=False)
            lease.acquire()
            assert proxy.lost == 1, "no reply was lost: the test did not test anything"
            assert lease.release() is True
            saver.lock(thread_id, ttl=30, blocking=False).acquire()
    finally:
        store.purge()
        proxy.close()
