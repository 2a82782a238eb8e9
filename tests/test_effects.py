"""The effect ledger in real graphs, on every backend (real servers), sync and async.

- a worker process (tests/effects_worker.py: ``create_react_agent`` with a ``ledger.once``
  tool counting into a file) is kill -9'd after the tool returned and before its output was
  written; a new process resumes the thread: the tool ran once and the final state carries
  the recorded result;
- a node with a side effect before ``interrupt()`` resumed 3 times: the effect ran once;
- a replay of the head (twice) and of an older checkpoint re-run no effect; a fork with
  other arguments (``update_state``) runs it for them; its resume and a failed task's retry
  repeat nothing; identical ``Send``s are two effects; a record keyed by the task id (the
  key of earlier versions) is replayed when its pending task resumes;
- 50 concurrent calls with one key (threads sharing a sync ledger, tasks sharing an async
  one): one execution, 50 identical results;
- ``delete_thread`` removes a thread's records; an encrypting serializer leaves no
  plaintext result in a raw scan of the store;
- ``graphkeep effects URL`` lists, ``graphkeep effects URL clear`` removes.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel

import graphkeep
from conformance.setups import Setup, all_setups
from conformance.testing import marks_for
from tests.cli_runs import gk
from tests.conftest import unique_prefix

ROOT = Path(__file__).resolve().parent.parent
SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in all_setups() if s.marker]
MODES = ["sync", "async"]
SECRET = "plaintext-secret-7f3a"


@pytest.fixture(params=SETUPS)
def setup(request: pytest.FixtureRequest) -> Setup:
    return request.param  # type: ignore[no-any-return]


def _worker(setup: Setup, prefix: str, thread: str, counter: Path, mode: str, phase: str) -> Any:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.effects_worker",
            setup.url,
            prefix,
            thread,
            str(counter),
            mode,
            phase,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_killed_before_its_output_is_saved_does_not_run_again_on_resume(
    setup: Setup, mode: str, tmp_path: Path
) -> None:
    prefix, thread = unique_prefix("fx"), "ticket-thread"
    counter = tmp_path / "tickets.txt"
    crashing = _worker(setup, prefix, thread, counter, mode, "crash")
    try:
        assert crashing.stdout is not None
        line = crashing.stdout.readline()
        assert line.strip() == "TOOL-RETURNED", crashing.stderr.read() if crashing.stderr else ""
        assert counter.read_text().splitlines() == ["parcel lost"]
        os.kill(crashing.pid, signal.SIGKILL)
        crashing.wait(timeout=30)
        assert crashing.returncode == -signal.SIGKILL
    finally:
        if crashing.poll() is None:
            crashing.kill()
    resumed = _worker(setup, prefix, thread, counter, mode, "resume")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    messages = [json.loads(line) for line in out.splitlines()]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
    assert messages[2]["content"] == "ticket #1: parcel lost"  # the recorded result
    assert messages[3]["content"] == "Done: ticket #1: parcel lost"
    assert counter.read_text().splitlines() == ["parcel lost"]  # the tool ran once
    with graphkeep.connect(setup.url, key_prefix=prefix) as saver:
        [record] = saver.effects.records(thread)
        assert record.state == "done" and record.name == "create_ticket"
        saver.delete_thread(thread)
        assert saver.effects.records() == []


class Order(BaseModel):
    number: str


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def _approval_graph(saver: Any, sent: list[str], *, asynchronous: bool = False) -> Any:
    """Two nodes, each sending a mail (an effect) and then asking for approval."""
    ledger = saver.effects

    @ledger.once
    def send_email(to: str, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return f"mail to {to}"

    @ledger.once
    async def asend_email(to: str, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return f"mail to {to}"

    def ask(state: Log) -> dict[str, Any]:
        receipt = send_email("bob@example.com")
        answer = interrupt(f"{receipt}: approve?")
        return {"log": [receipt, str(answer)]}

    async def aask(state: Log) -> dict[str, Any]:
        receipt = await asend_email("bob@example.com")
        answer = interrupt(f"{receipt}: approve?")
        return {"log": [receipt, str(answer)]}

    node = aask if asynchronous else ask
    builder = StateGraph(Log)
    builder.add_node("first", node)
    builder.add_node("second", node)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile(checkpointer=saver)


def test_a_side_effect_before_interrupt_runs_once_across_resumes(setup: Setup) -> None:
    sent: list[str] = []
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("fx")) as saver:
        graph = _approval_graph(saver, sent)
        config = {"configurable": {"thread_id": 7}}
        graph.invoke({"log": []}, config)
        for _ in range(3):  # resumed without an answer: the node re-runs up to interrupt()
            graph.invoke(None, config)
        graph.invoke(Command(resume="yes"), config)  # on to the second node's interrupt
        for _ in range(2):
            graph.invoke(None, config)
        state = graph.invoke(Command(resume="ok"), config)
        assert state["log"] == ["mail to bob@example.com", "yes", "mail to bob@example.com", "ok"]
        assert len(sent) == 2 and len(set(sent)) == 2  # one per node, different keys
        assert all(k.startswith("auto:") for k in sent)
        assert {r.thread_id for r in saver.effects.records()} == {"7"}  # 7 and "7": one thread
        saver.delete_thread("7")
        assert saver.effects.records() == []


async def test_a_side_effect_before_interrupt_runs_once_across_async_resumes(setup: Setup) -> None:
    sent: list[str] = []
    async with graphkeep.aconnect(setup.url, key_prefix=unique_prefix("fx")) as saver:
        graph = _approval_graph(saver, sent, asynchronous=True)
        config = {"configurable": {"thread_id": "t-async"}}
        await graph.ainvoke({"log": []}, config)
        for _ in range(3):
            await graph.ainvoke(None, config)
        await graph.ainvoke(Command(resume="yes"), config)
        for _ in range(2):
            await graph.ainvoke(None, config)
        state = await graph.ainvoke(Command(resume="ok"), config)
        assert state["log"] == ["mail to bob@example.com", "yes", "mail to bob@example.com", "ok"]
        assert len(sent) == 2 and len(set(sent)) == 2
        await saver.adelete_thread("t-async")
        assert await saver.effects.arecords() == []


def test_50_threads_sharing_a_sync_ledger_run_one_key_once(setup: Setup) -> None:
    ran: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def charge(amount: int) -> dict[str, Any]:
        with lock:
            ran.append(amount)
        return {"charged": amount, "receipt": "r-1"}

    with graphkeep.connect_effects(setup.url, key_prefix=unique_prefix("fx"), poll=0.02) as ledger:

        def call(_: int) -> Any:
            start.wait()
            return ledger.run("charge-order-1", charge, 42)

        with ThreadPoolExecutor(50) as pool:
            results = list(pool.map(call, range(50)))
        assert ran == [42]
        assert results == [{"charged": 42, "receipt": "r-1"}] * 50
        assert ledger.clear() == 1


async def test_50_tasks_sharing_an_async_ledger_run_one_key_once(setup: Setup) -> None:
    ran: list[int] = []

    async def charge(amount: int) -> dict[str, Any]:
        ran.append(amount)
        await asyncio.sleep(0.05)
        return {"charged": amount}

    async with graphkeep.aconnect_effects(
        setup.url, key_prefix=unique_prefix("fx"), poll=0.02
    ) as ledger:
        once = ledger.once(charge, key="charge-order-2")
        results = await asyncio.gather(*(once(7) for _ in range(50)))
        assert ran == [7]
        assert results == [{"charged": 7}] * 50
        assert await ledger.aclear() == 1


def _raw(setup: Setup, prefix: str) -> Iterator[bytes]:
    """Every stored byte under ``prefix``'s effect records, read past graphkeep."""
    scheme = setup.url.split("://", 1)[0]
    if scheme.startswith("redis"):
        import redis
        from redis.cluster import RedisCluster

        url = setup.url.replace("redis+cluster://", "redis://")
        client: Any = (
            RedisCluster.from_url(url) if "cluster" in scheme else redis.Redis.from_url(url)
        )
        with client:
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                kind = client.type(key)
                values = client.hgetall(key) if kind == b"hash" else client.zrange(key, 0, -1)
                yield key + b"".join(
                    [*values.keys(), *values.values()] if isinstance(values, dict) else values
                )
    elif scheme.startswith("mongodb"):
        import bson
        from pymongo import MongoClient

        from graphkeep.backends.mongodb.client import database_from_url

        with MongoClient(setup.url) as client:
            db = client[database_from_url(setup.url)]
            for doc in db[f"{prefix}_effects"].find():
                yield bson.encode(doc)
    else:
        from graphkeep.backends.dynamodb.client import parse_url, sync_client

        table, client_kwargs = parse_url(setup.url)
        with sync_client(**client_kwargs) as client:
            for page in client.get_paginator("scan").paginate(TableName=table):
                for item in page["Items"]:
                    if str(item.get("pk", {}).get("S", "")).startswith(prefix):
                        yield repr(item).encode()


def test_an_encrypting_serializer_leaves_no_plaintext_in_the_store(setup: Setup) -> None:
    prefix = unique_prefix("fx")
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    with graphkeep.connect_effects(setup.url, key_prefix=prefix, serde=serde) as ledger:
        assert ledger.run("k", lambda: {"note": SECRET}) == {"note": SECRET}
        assert ledger.run("k", lambda: None) == {"note": SECRET}  # replayed, decrypted
        stored = list(_raw(setup, prefix))
        assert stored, "the raw scan found no record"
        assert not any(SECRET.encode() in raw for raw in stored)
        ledger.clear()
    # the same records through a plain serializer: the plaintext never comes back
    with graphkeep.connect_effects(setup.url, key_prefix=prefix, serde=serde) as ledger:
        ledger.run("k2", lambda: SECRET)
        with graphkeep.connect_effects(setup.url, key_prefix=prefix) as plain:
            with pytest.raises(Exception) as caught:
                plain.run("k2", lambda: "ran again")
            assert SECRET not in str(caught.value)
        ledger.clear()


def test_the_cli_lists_and_clears_effect_records(setup: Setup) -> None:
    prefix = unique_prefix("fx")
    url = f"{setup.url}{'&' if '?' in setup.url else '?'}key_prefix={prefix}"
    with graphkeep.connect_effects(setup.url, key_prefix=prefix) as ledger:
        ledger.run("order-1", lambda: {"secret": SECRET})
        with graphkeep.connect(setup.url, key_prefix=prefix) as saver:
            sent: list[str] = []
            graph = _approval_graph(saver, sent)
            graph.invoke({"log": []}, {"configurable": {"thread_id": "cli-thread"}})
        listed = gk("effects", url, "--json")
        assert listed.code == 0, listed.err
        rows = json.loads(listed.out)
        assert {(r["thread_id"], r["state"]) for r in rows} == {
            ("", "done"),
            ("cli-thread", "done"),
        }
        assert SECRET not in listed.out  # names and states, never results
        only = json.loads(gk("effects", url, "--thread", "cli-thread", "--json").out)
        assert [r["thread_id"] for r in only] == ["cli-thread"]
        outside = json.loads(gk("effects", url, "--thread", "-", "--json").out)
        assert [(r["thread_id"], r["key"]) for r in outside] == [("", "order-1")]
        table = gk("effects", url)
        assert "order-1" in table.out and "cli-thread" in table.out
        cleared = gk("effects", url, "clear", "--thread", "cli-thread")
        assert cleared.code == 0 and "1 record" in cleared.out
        assert [r.key for r in ledger.records()] == ["order-1"]
        assert gk("effects", "clear", url).code == 0  # the action first reads the same
        assert ledger.records() == []
        assert gk("effects", url, "--thread", "nope", "--json").out.strip() == "[]"


def test_tools_tasks_and_plain_calls_derive_their_keys_from_the_task(setup: Setup) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.func import entrypoint, task
    from langgraph.graph import MessagesState
    from langgraph.prebuilt import ToolNode

    from graphkeep.errors import EffectKeyRequired

    calls: list[str] = []
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("fx")) as saver:
        ledger = saver.effects

        @tool
        @ledger.once
        def open_ticket(title: str, idempotency_key: str) -> str:
            """Open a ticket."""
            calls.append(f"open {title}")
            return f"ticket for {title}"

        @tool
        def refund(order: str) -> str:
            """Refund an order."""
            calls.append(f"refund {order}")
            return f"refunded {order}"

        @tool
        @ledger.once(key=lambda order, verbose=False: f"look-up-{order.number}")
        def look_up(order: Order, verbose: bool = False) -> str:
            """Look an order up."""
            return order.number

        # the key parameter is the ledger's, never the model's; the rest is the function's
        assert set(open_ticket.args) == {"title"}
        assert set(look_up.args) == {"order", "verbose"}
        assert look_up.invoke({"order": {"number": "5521"}}) == "5521"
        assert [r.key for r in ledger.records("")] == ["look-up-5521"]
        with pytest.raises(EffectKeyRequired):
            ledger.once(lambda: None)()

        def model(state: MessagesState) -> dict[str, Any]:
            if len(state["messages"]) > 1:
                return {"messages": [AIMessage("done")]}
            same = {"order": "5521"}
            tool_calls = [
                {"name": "open_ticket", "args": {"title": "lost"}, "id": "c1"},
                {"name": "refund", "args": same, "id": "c2"},
                {"name": "refund", "args": same, "id": "c3"},  # asked twice: two refunds
            ]
            return {"messages": [AIMessage("", tool_calls=tool_calls)]}

        builder = StateGraph(MessagesState)
        builder.add_node("model", model)
        builder.add_node("tools", ToolNode([open_ticket, ledger.once(refund)]))
        builder.add_edge(START, "model")
        builder.add_conditional_edges(
            "model", lambda s: "tools" if s["messages"][-1].tool_calls else END
        )
        builder.add_edge("tools", "model")
        graph = builder.compile(checkpointer=saver)
        out = graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}})
        assert [m.content for m in out["messages"][2:5]] == [
            "ticket for lost",
            "refunded 5521",
            "refunded 5521",
        ]
        assert sorted(calls) == ["open lost", "refund 5521", "refund 5521"]
        records = saver.effects.records("t")
        names = sorted(r.name.rsplit(".", 1)[-1] for r in records)
        assert names == ["open_ticket", "refund", "refund"]

        @task
        @ledger.once
        def notify(user: str) -> str:
            calls.append(f"notify {user}")
            return f"notified {user}"

        @entrypoint(checkpointer=saver)
        def workflow(user: str) -> str:
            receipt = notify(user).result()
            return str(interrupt(receipt))

        config = {"configurable": {"thread_id": "wf"}}
        workflow.invoke("ada", config)
        workflow.invoke(Command(resume="ok"), config)
        assert calls.count("notify ada") == 1
        assert [r.state for r in saver.effects.records("wf")] == ["done"]
        for thread in ("t", "wf"):
            saver.delete_thread(thread)


def test_a_node_retried_by_its_retry_policy_does_not_repeat_its_effect(setup: Setup) -> None:
    from langgraph.types import RetryPolicy

    sent: list[str] = []
    attempts: list[int] = []
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("fx")) as saver:

        @saver.effects.once
        def charge(order: str) -> str:
            sent.append(order)
            return f"charged {order}"

        def pay(state: Log) -> dict[str, Any]:
            receipt = charge("5521")
            attempts.append(1)
            if len(attempts) == 1:
                raise ConnectionError("the mail server after the charge was down")
            return {"log": [receipt]}

        builder = StateGraph(Log)
        builder.add_node(
            "pay", pay, retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01)
        )
        builder.add_edge(START, "pay")
        graph = builder.compile(checkpointer=saver)
        state = graph.invoke({"log": []}, {"configurable": {"thread_id": "retried"}})
        assert state["log"] == ["charged 5521"]
        assert len(attempts) == 2 and sent == ["5521"]  # retried once, charged once
        saver.delete_thread("retried")


class Mail(TypedDict):
    to: str
    log: Annotated[list[str], operator.add]


def _mail_graph(saver: Any, sent: list[str], filed: list[str], *, asynchronous: bool) -> Any:
    """prepare -> send (a mail, then approval) -> archive (an effect, then a failure the first
    time): every node's input comes from ``to``, which ``update_state`` can change."""
    ledger = saver.effects
    failures: list[str] = []

    @ledger.once
    def send_email(to: str) -> str:
        sent.append(to)
        return f"mail to {to}"

    @ledger.once
    def file_copy(to: str) -> str:
        filed.append(to)
        return f"filed {to}"

    def prepare(state: Mail) -> dict[str, Any]:
        return {"log": [f"to {state['to']}"]}

    def send(state: Mail) -> dict[str, Any]:
        receipt = send_email(state["to"])
        return {"log": [receipt, str(interrupt(f"{receipt}: approve?"))]}

    def archive(state: Mail) -> dict[str, Any]:
        note = file_copy(state["to"])
        if not failures:
            failures.append(note)
            raise ConnectionError("the archive went down after filing")
        return {"log": [note]}

    @ledger.once(name="send_email")
    async def asend_email(to: str) -> str:
        sent.append(to)
        return f"mail to {to}"

    async def afile_copy(to: str) -> str:
        filed.append(to)
        return f"filed {to}"

    async def asend(state: Mail) -> dict[str, Any]:
        receipt = await asend_email(state["to"])
        return {"log": [receipt, str(interrupt(f"{receipt}: approve?"))]}

    async def aarchive(state: Mail) -> dict[str, Any]:
        note = await ledger.arun(None, afile_copy, state["to"])
        if not failures:
            failures.append(note)
            raise ConnectionError("the archive went down after filing")
        return {"log": [note]}

    builder = StateGraph(Mail)
    builder.add_node("prepare", prepare)
    builder.add_node("send", asend if asynchronous else send)
    builder.add_node("archive", aarchive if asynchronous else archive)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "send")
    builder.add_edge("send", "archive")
    builder.add_edge("archive", END)
    return builder.compile(checkpointer=saver)


def _asked(out: dict[str, Any]) -> str:
    return str(out["__interrupt__"][0].value)


def test_a_replay_or_fork_of_the_thread_does_not_repeat_its_effects(setup: Setup) -> None:
    sent: list[str] = []
    filed: list[str] = []
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("fx")) as saver:
        graph = _mail_graph(saver, sent, filed, asynchronous=False)
        config = {"configurable": {"thread_id": "forked"}}
        assert _asked(graph.invoke({"to": "bob", "log": []}, config)) == "mail to bob: approve?"
        assert sent == ["bob"]
        history = list(graph.get_state_history(config))
        [older] = [s.config for s in history if s.next == ("prepare",)]
        head = graph.get_state(config).config
        # time travel to before prepare: both steps re-execute, one step later than at first
        assert _asked(graph.invoke(None, older)) == "mail to bob: approve?"
        for _ in range(2):  # the head replayed twice: same state, same arguments
            assert _asked(graph.invoke(None, head)) == "mail to bob: approve?"
        assert sent == ["bob"]  # the world did not fork: the recorded result came back
        # a fork from the older checkpoint with other arguments: a new effect
        fork = graph.update_state(older, {"to": "carol"})
        assert _asked(graph.invoke(None, fork)) == "mail to carol: approve?"
        assert sent == ["bob", "carol"]
        # the fork resumed (send re-runs to its interrupt), archive fails, then is retried
        with pytest.raises(ConnectionError):
            graph.invoke(Command(resume="yes"), config)
        state = graph.invoke(None, config)
        assert state["log"] == ["to carol", "mail to carol", "yes", "filed carol"]
        assert sent == ["bob", "carol"] and filed == ["carol"]
        saver.delete_thread("forked")
        assert saver.effects.records() == []


async def test_a_replay_or_fork_of_the_thread_does_not_repeat_its_async_effects(
    setup: Setup,
) -> None:
    sent: list[str] = []
    filed: list[str] = []
    async with graphkeep.aconnect(setup.url, key_prefix=unique_prefix("fx")) as saver:
        graph = _mail_graph(saver, sent, filed, asynchronous=True)
        config = {"configurable": {"thread_id": "aforked"}}
        out = await graph.ainvoke({"to": "bob", "log": []}, config)
        assert _asked(out) == "mail to bob: approve?"
        history = [s async for s in graph.aget_state_history(config)]
        [older] = [s.config for s in history if s.next == ("prepare",)]
        head = (await graph.aget_state(config)).config
        assert _asked(await graph.ainvoke(None, older)) == "mail to bob: approve?"
        for _ in range(2):
            assert _asked(await graph.ainvoke(None, head)) == "mail to bob: approve?"
        assert sent == ["bob"]
        fork = await graph.aupdate_state(older, {"to": "carol"})
        assert _asked(await graph.ainvoke(None, fork)) == "mail to carol: approve?"
        assert sent == ["bob", "carol"]
        with pytest.raises(ConnectionError):
            await graph.ainvoke(Command(resume="yes"), config)
        state = await graph.ainvoke(None, config)
        assert state["log"] == ["to carol", "mail to carol", "yes", "filed carol"]
        assert sent == ["bob", "carol"] and filed == ["carol"]
        await saver.adelete_thread("aforked")


class Ping(TypedDict):
    to: str


def test_identical_sends_are_two_effects_and_a_subgraph_per_round_is_not_collapsed(
    setup: Setup,
) -> None:
    from langgraph.types import Send

    pings: list[str] = []
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("fx")) as saver:

        @saver.effects.once
        def ping(to: str) -> str:
            pings.append(to)
            return f"pinged {to}"

        def notify(state: Ping) -> dict[str, Any]:
            return {"log": [ping(state["to"])]}

        builder = StateGraph(Log)
        builder.add_node("notify", notify)
        builder.add_conditional_edges(START, lambda _: [Send("notify", {"to": "ada"})] * 2)
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "sends"}}
        assert graph.invoke({"log": []}, config)["log"] == ["pinged ada"] * 2
        assert pings == ["ada", "ada"]  # two Sends of one node and argument: two effects
        history = graph.get_state_history(config)
        [before] = [s.config for s in history if s.next == ("notify", "notify")]
        assert graph.invoke(None, before)["log"] == ["pinged ada"] * 2
        assert pings == ["ada", "ada"]  # replayed: each Send gets its own record back

        # a subgraph's steps start over each time its node runs: two rounds, two effects
        inner = StateGraph(Log)
        inner.add_node("inner", lambda state: {"log": [ping("bob")]})
        inner.add_edge(START, "inner")
        sub = inner.compile()

        def outer(state: Log) -> dict[str, Any]:
            return {"log": sub.invoke({"log": []})["log"]}

        looping = StateGraph(Log)
        looping.add_node("outer", outer)
        looping.add_edge(START, "outer")
        looping.add_conditional_edges("outer", lambda s: "outer" if len(s["log"]) < 2 else END)
        rounds = looping.compile(checkpointer=saver)
        out = rounds.invoke({"log": []}, {"configurable": {"thread_id": "rounds"}})
        assert out["log"] == ["pinged bob"] * 2 and pings.count("bob") == 2
        for thread in ("sends", "rounds"):
            saver.delete_thread(thread)


def test_a_record_keyed_by_the_task_id_as_earlier_versions_did_is_replayed_on_resume(
    setup: Setup,
) -> None:
    from langgraph.config import get_config

    from graphkeep.effects.keys import arguments_digest, digest

    sent: list[str] = []
    with graphkeep.connect(setup.url, key_prefix=unique_prefix("fx")) as saver:
        ledger = saver.effects

        def send_email(to: str) -> str:
            sent.append(to)
            return f"mail to {to}"

        def send(state: Log) -> dict[str, Any]:
            if not sent:  # the run an earlier graphkeep made: its key named the task id
                conf = get_config()["configurable"]
                parts = (conf["thread_id"], conf["checkpoint_ns"], conf["__pregel_task_id"], "")
                arguments = arguments_digest(ledger.serde, ("bob",), {})
                old = "auto:" + digest(*parts, "send_email", arguments, "0")
                receipt = ledger.run(old, send_email, "bob")
            else:  # upgraded, the pending task resumed
                receipt = ledger.once(send_email, name="send_email")("bob")
            return {"log": [receipt, str(interrupt(receipt))]}

        builder = StateGraph(Log)
        builder.add_node("send", send)
        builder.add_edge(START, "send")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "upgraded"}}
        graph.invoke({"log": []}, config)
        state = graph.invoke(Command(resume="ok"), config)
        assert state["log"] == ["mail to bob", "ok"] and sent == ["bob"]
        saver.delete_thread("upgraded")
