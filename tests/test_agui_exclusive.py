"""``graphkeep.agui`` through ``saver.exclusive(graph)`` on every backend: the endpoint's one run
per thread is the thread's fenced lease, across processes.

Two app processes behind a load balancer share the saver and the event log. Each checks that
no run of the thread is live before it starts one, but two starts at once both pass that check
and both runs read the same head: the thread forks and one turn is lost. Through ``exclusive``
a start takes the thread's lease before its checks and keeps it until its run is closed in the
log: a second start waits for the lease and runs after the first (one chain with both turns),
or — ``on_busy="reject"`` — is answered ``RUN_ERROR`` naming the busy thread, nothing written.
Real processes (``python -m tests.agui.graph`` twice) over HTTP, and two connections in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import graphkeep
from conformance.setups import Setup
from graphkeep.agui import AGUIRuns, RunExists
from graphkeep.checkpoint.check import findings_of
from graphkeep.errors import ThreadBusy
from tests.agui.graph import reply_to
from tests.conftest import unique_prefix
from tests.leases import forks
from tests.scenarios.backends import thread_config
from tests.scenarios.servers import AppProcess, free_port, run_app
from tests.test_agui import (
    SETUPS,
    Transcript,
    collect,
    events_of,
    post,
    request,
    sse,
    talk_graph,
)

#: the two-process cases start two app processes each (most of their time): one set-up per
#: backend; the in-process cases run on every set-up, the lease itself is the conformance
#: matrix's write_ownership on every row
PER_BACKEND = [p for p in SETUPS if p.values[0].name in ("redis", "mongodb", "dynamodb")]

#: seconds between the fake model's chunks: a reply of ~30 words streams in ~1.2 s, far longer
#: than two requests sent together take to reach their servers
TOKEN_DELAY = 0.04
WORDS = " ".join(f"w{i}" for i in range(12))


def _turns(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m.type, m.text) for m in messages]


def _one_chain(setup: Setup, prefix: str, thread_id: str) -> list[tuple[str, str]]:
    """The thread's messages at its head, after checking its history is one chain that
    ``graphkeep check`` finds nothing on."""
    with graphkeep.connect(setup.url, key_prefix=prefix) as saver:
        history = list(saver.list(thread_config(thread_id)))
        assert forks(history) == {}, [(t.checkpoint["id"], t.parent_config) for t in history]
        inventory = saver.drive(saver.port.inventory(thread_id))
        assert [f.kind for f in findings_of(thread_id, inventory).findings] == []
        head = saver.get_tuple(thread_config(thread_id))
        return _turns(head.checkpoint["channel_values"]["messages"])


# -- two app processes over HTTP ---------------------------------------------------------


@contextlib.contextmanager
def two_servers(setup: Setup, on_busy: str, logs: Path) -> Iterator[tuple[list[str], str]]:
    """``python -m tests.agui.graph`` twice on ``setup``, one key prefix, the graph through
    ``saver.exclusive(graph, on_busy=on_busy)``: the two endpoints' URLs and the prefix."""
    prefix = unique_prefix("aguix")
    urls = []
    with contextlib.ExitStack() as stack:
        for i in (1, 2):
            port = free_port()
            env = {
                **os.environ,
                "GRAPHKEEP_URL": setup.url,
                "GRAPHKEEP_KEY_PREFIX": prefix,
                "AGUI_PORT": str(port),
                "AGUI_TOKEN_DELAY": str(TOKEN_DELAY),
                "AGUI_ON_BUSY": on_busy,
            }
            url = f"http://127.0.0.1:{port}/agent"
            command = [sys.executable, "-m", "tests.agui.graph"]
            log = logs / f"server-{i}.log"
            stack.enter_context(run_app(AppProcess, setup.name, url, command, env, log, "/health"))
            urls.append(url)
        yield urls, prefix


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Each call in a thread of its own, all released together; their results in order."""
    barrier = threading.Barrier(len(calls))

    def go(call: Callable[[], Any]) -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(go, call) for call in calls]]


def _body(thread_id: str, run: str, text: str) -> dict[str, Any]:
    message = {"id": f"{run}-msg", "role": "user", "content": text}
    return {"threadId": thread_id, "runId": run, "messages": [message]}


@pytest.mark.parametrize("setup", PER_BACKEND)
def test_two_processes_starting_a_thread_at_once_make_one_chain_with_both_turns(
    setup: Setup, thread_id: str, tmp_path: Path
) -> None:
    prompts = ["the first question", "a second question now"]
    with two_servers(setup, "wait", tmp_path) as (urls, prefix):
        answers = at_once(
            *(
                partial(post, url, _body(thread_id, f"run-{i}", prompt))
                for i, (url, prompt) in enumerate(zip(urls, prompts, strict=True))
            )
        )
    for (status, body), prompt in zip(answers, prompts, strict=True):
        assert status == 200, body
        seen = Transcript().apply([event for _id, event in sse(body)])
        assert seen.outcome is not None and seen.outcome["type"] == "RUN_FINISHED", body
        assert seen.texts()[-1] == reply_to(prompt)  # (its closing snapshot: the thread's)
    turns = _one_chain(setup, prefix, thread_id)
    first, second = prompts if turns[0][1] == prompts[0] else prompts[::-1]
    assert turns == [
        ("human", first),
        ("ai", reply_to(first)),
        ("human", second),
        ("ai", reply_to(second)),
    ]


@pytest.mark.parametrize("setup", PER_BACKEND)
def test_with_on_busy_reject_the_other_process_answers_run_error_naming_the_busy_thread(
    setup: Setup, thread_id: str, tmp_path: Path
) -> None:
    prompts = ["the first question", "a second question now"]
    with two_servers(setup, "reject", tmp_path) as (urls, prefix):
        answers = at_once(
            *(
                partial(post, url, _body(thread_id, f"run-{i}", prompt))
                for i, (url, prompt) in enumerate(zip(urls, prompts, strict=True))
            )
        )
        for status, _body_text in answers:
            assert status == 200
        streams = [sse(body) for _status, body in answers]
        finished = [s for s in streams if s[-1][1]["type"] == "RUN_FINISHED"]
        (rejected,) = [s for s in streams if s[-1][1]["type"] == "RUN_ERROR"]
        assert len(finished) == 1, streams
        # a run that ended at once, kept nowhere (no event ids): the client can send it again
        assert [event["type"] for _id, event in rejected] == ["RUN_STARTED", "RUN_ERROR"]
        assert all(event_id is None for event_id, _ in rejected)
        error = rejected[-1][1]
        assert error["code"] == "ThreadBusy"
        assert thread_id in error["message"] and "busy" in error["message"]
        Transcript().apply([event for _id, event in rejected])  # the protocol's rules hold
        won = prompts[streams.index(finished[0])]
        assert _one_chain(setup, prefix, thread_id) == [("human", won), ("ai", reply_to(won))]
        # the lease was let go with the run's close: the thread takes a new run
        status, body = post(urls[1], _body(thread_id, "run-again", "one more question"))
        assert status == 200 and sse(body)[-1][1]["type"] == "RUN_FINISHED", body


# -- two connections in one process ------------------------------------------------------


@contextlib.asynccontextmanager
async def two_connections(
    setup: Setup, build: Callable[[Any], Any], *on_busy: str
) -> AsyncIterator[list[AGUIRuns]]:
    """An ``AGUIRuns`` per ``on_busy``, each over a saver and an event log of its own (one
    key prefix): the graph ``build(saver)`` through ``saver.exclusive``."""
    prefix = unique_prefix("aguix")
    async with contextlib.AsyncExitStack() as stack:
        runs = []
        for mode in on_busy:
            saver = await stack.enter_async_context(
                graphkeep.aconnect(setup.url, key_prefix=prefix)
            )
            log = await stack.enter_async_context(
                graphkeep.aconnect_events(setup.url, key_prefix=prefix)
            )
            agui = AGUIRuns(saver.exclusive(build(saver), on_busy=mode, timeout=60), log)
            stack.push_async_callback(agui.aclose)
            runs.append(agui)
        yield runs


async def _streaming(runs: AGUIRuns, thread_id: str, run_id: str) -> None:
    """Return once the run streams its reply."""
    async for _id, event in runs.serve(thread_id, run_id):
        if event is not None and event["type"] == "TEXT_MESSAGE_CONTENT":
            return


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_start_while_another_connection_runs_the_thread_waits_then_runs_after_it(
    setup: Setup, thread_id: str
) -> None:
    gate = asyncio.Event()  # the first run streams 3 words, then waits for the gate
    build = partial(talk_graph, text=WORDS, gate=gate, gate_after=3)
    async with two_connections(setup, build, "wait", "wait") as (one, two):
        first = request(thread_id, "the first question")
        await one.start(first)
        await _streaming(one, thread_id, first.run_id)
        with pytest.raises(RunExists):  # a retried request joins at once, lease or not
            await asyncio.wait_for(two.start(first), 5)
        second = request(thread_id, "a second question")
        waiting = asyncio.create_task(two.start(second))
        await asyncio.sleep(1.0)
        assert not waiting.done(), "the second start waits for the lease (not refused)"
        assert await two.events.state(second.run_id) is None  # nothing written meanwhile
        gate.set()
        await asyncio.wait_for(waiting, 30)
        for runs, run in ((one, first), (two, second)):
            events = events_of(await collect(runs.serve(thread_id, run.run_id)))
            assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        state = await two.graph.aget_state(thread_config(thread_id))
        assert _turns(state.values["messages"]) == [
            ("human", "the first question"),
            ("ai", WORDS),
            ("human", "a second question"),
            ("ai", WORDS),
        ]
        history = [t async for t in one.graph.saver.alist(thread_config(thread_id))]
        assert forks(history) == {}


@pytest.mark.parametrize("setup", SETUPS)
async def test_a_start_rejected_for_a_busy_thread_writes_nothing_and_the_live_run_stays_joined(
    setup: Setup, thread_id: str
) -> None:
    gate = asyncio.Event()
    build = partial(talk_graph, text=WORDS, gate=gate, gate_after=3)
    async with two_connections(setup, build, "wait", "reject") as (one, two):
        first = request(thread_id, "the first question")
        await one.start(first)
        await _streaming(one, thread_id, first.run_id)
        rejected = request(thread_id, "me too")
        with pytest.raises(ThreadBusy, match=f"{thread_id}.*busy"):
            await two.start(rejected)
        assert await two.events.state(rejected.run_id) is None
        # the thread's index still names the live run: a page load joins it
        assert await two.live_run(thread_id) == first.run_id
        gate.set()
        page = events_of(await collect(two.connect(thread_id, "page-load")))
        assert page[0]["runId"] == first.run_id and page[-1]["type"] == "RUN_FINISHED"
        assert Transcript().apply(page).texts() == [WORDS]
        # once the run is closed its lease is free: a rejecting start goes ahead
        again = request(thread_id, "now me")
        await two.start(again)
        events = events_of(await collect(two.serve(thread_id, again.run_id)))
        assert events[-1]["type"] == "RUN_FINISHED"
        state = await two.graph.aget_state(thread_config(thread_id))
        assert [text for kind, text in _turns(state.values["messages"]) if kind == "human"] == [
            "the first question",
            "now me",
        ]
