"""Concurrent forks (issue 45, langgraph#8796) on real servers, every backend
(``graphkeep_url``: Redis, Redis Cluster, MongoDB, DynamoDB), sync and async.

Two runs start on one thread at once, each in its own thread (or task) with its own saver:
the graph's node waits on a barrier until both runs are in it, so each run has read the
thread's head before the other wrote its next checkpoint, every time. ``graphkeep check``
then reports the fork (``concurrent_fork``, naming both children and their run ids),
``graphkeep health`` counts it, and the Prometheus alert fires on the number it writes
(promtool's rule unit test over it). The branches LangGraph writes when asked
(``update_state`` on an older checkpoint, a replay, a copy) are not findings.
"""

from __future__ import annotations

import asyncio
import io
import json
import operator
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Annotated, Any, TypedDict

import yaml
from langgraph.graph import END, START, StateGraph

import graphkeep
from graphkeep.checkpoint.check import findings_of
from graphkeep.checkpoint.forks import concurrent_forks
from graphkeep.checkpoint.health import afleet_health, fleet_health
from graphkeep.checkpoint.records import Inventory, Link, Summary
from graphkeep.cli import main

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "graphkeep-rules.yml"
#: seconds a barrier waits for the other run before the test fails
BARRIER_TIMEOUT = 60


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def graph(saver: Any, node: Callable[..., Any]) -> Any:
    builder = StateGraph(State)
    builder.add_node("work", node)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def plain(state: State) -> dict[str, list[str]]:
    return {"log": [f"turn {len(state['log'])}"]}


def config(thread_id: str, run_id: str | None = None, **configurable: Any) -> Any:
    found: dict[str, Any] = {"configurable": {"thread_id": thread_id, **configurable}}
    if run_id is not None:
        found["metadata"] = {"run_id": run_id}  # what LangGraph's Agent Server passes
    return found


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def check_json(url: str, *threads: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli("check", url, "--json", "--thread", *threads)
    assert code in (0, 1, 3), err
    report: dict[str, Any] = json.loads(out)
    return code, report


def children_by_parent(saver: Any, thread_id: str) -> dict[str, list[tuple[str, Any]]]:
    """Every stored checkpoint of the thread's root namespace by parent id: (id, metadata)."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for item in saver.list(config(thread_id)):
        if item.parent_config is not None:
            parent = item.parent_config["configurable"]["checkpoint_id"]
            found.setdefault(parent, []).append(
                (item.config["configurable"]["checkpoint_id"], item.metadata)
            )
    return found


def race(url: str, thread_id: str, run_ids: list[str]) -> None:
    """Two runs of one thread at once, each in its own thread with its own saver; the node
    holds each run until both are in it (each read the head before the other's next put)."""
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT)

    def meet(state: State) -> dict[str, list[str]]:
        barrier.wait()
        return {"log": ["raced"]}

    errors: list[BaseException] = []

    def run(run_id: str) -> None:
        try:
            with graphkeep.connect(url) as saver:
                graph(saver, meet).invoke({"log": [run_id]}, config(thread_id, run_id))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=run, args=(r,)) for r in run_ids]
    for w in workers:
        w.start()
    for w in workers:
        w.join(BARRIER_TIMEOUT * 2)
    assert not errors, errors


def assert_one_fork(report: dict[str, Any], thread_id: str, run_ids: list[str]) -> None:
    findings = report["findings"]
    assert [(f["kind"], f["severity"], f["thread_id"]) for f in findings] == [
        ("concurrent_fork", "error", thread_id)
    ], findings
    fork = findings[0]
    children = fork["children"]
    assert len(children) == 2
    assert {c["run_id"] for c in children} == set(run_ids)
    assert {c["source"] for c in children} <= {"input", "loop"}
    for child in children:
        assert child["checkpoint_id"] in fork["detail"]
        assert child["run_id"] in fork["detail"]
    assert report["errors"] == 1 and report["kinds"] == {"concurrent_fork": 1}


def assert_alert_fires(promtool_value: float, tmp_path: Path) -> None:
    """promtool's rule unit test with ``graphkeep_concurrent_forks`` at the value the command
    wrote: the shipped rule fires."""
    promtool = shutil.which(os.environ.get("GRAPHKEEP_PROMTOOL") or "promtool")
    assert promtool is not None, "promtool not found (apt-get install prometheus)"
    value = int(promtool_value)
    (tmp_path / "forks.test.yml").write_text(
        f"""rule_files:
  - {RULES}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'graphkeep_concurrent_forks{{backend="redis"}}'
        values: '{value}x5'
    alert_rule_test:
      - eval_time: 2m
        alertname: GraphkeepConcurrentForks
        exp_alerts:
          - exp_labels:
              severity: critical
              backend: redis
            exp_annotations:
              summary: "{value} concurrent fork(s) on redis"
              description: {json.dumps(_annotation("description"))}
"""
    )
    done = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "forks.test.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _annotation(name: str) -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (rule,) = [
        r for g in groups for r in g["rules"] if r.get("alert") == "GraphkeepConcurrentForks"
    ]
    text: str = rule["annotations"][name]
    return text


def prometheus_value(url: str, name: str) -> float:
    code, out, err = cli("health", url, "--format", "prometheus")
    assert code == 0, err
    for line in out.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in {out}")


# -- races -----------------------------------------------------------------------------


def test_two_runs_racing_on_one_thread_are_a_concurrent_fork_that_check_and_health_report(
    graphkeep_url: str, thread_id: str, tmp_path: Path
) -> None:
    with graphkeep.connect(graphkeep_url) as saver:
        graph(saver, plain).invoke({"log": ["hello"]}, config(thread_id))
    run_ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    race(graphkeep_url, thread_id, run_ids)
    with graphkeep.connect(graphkeep_url) as saver:
        forked = {p: c for p, c in children_by_parent(saver, thread_id).items() if len(c) > 1}
        health = fleet_health(saver)
    # the race as LangGraph left it: one parent, a child of each run
    assert len(forked) == 1
    ((parent, children),) = forked.items()
    assert {m["run_id"] for _, m in children} == set(run_ids)

    code, report = check_json(graphkeep_url, thread_id)
    assert code == 1
    assert_one_fork(report, thread_id, run_ids)
    assert report["findings"][0]["checkpoint_id"] == parent
    assert sorted(c["checkpoint_id"] for c in report["findings"][0]["children"]) == sorted(
        cid for cid, _ in children
    )
    code, out, _ = cli("check", graphkeep_url, "--thread", thread_id)
    assert code == 1
    assert f"ERROR concurrent_fork: thread {thread_id} checkpoint {parent}: 2 children" in out

    assert (health.concurrent_forks, health.forked_ids) == (1, [thread_id])
    code, out, err = cli("health", graphkeep_url, "--json")
    assert code == 0, err
    assert (json.loads(out)["concurrent_forks"], json.loads(out)["forked"]) == (1, [thread_id])
    value = prometheus_value(graphkeep_url, "graphkeep_concurrent_forks")
    assert value == 1
    assert_alert_fires(value, tmp_path)

    # a copy of the thread keeps what tells the fork (the heads' source)
    copy = f"{thread_id}-copy"
    with graphkeep.connect(graphkeep_url) as saver:
        saver.copy_thread(thread_id, copy)
    code, report = check_json(graphkeep_url, copy)
    assert code == 1
    assert_one_fork(report, copy, run_ids)


async def test_two_async_runs_racing_on_one_thread_are_a_concurrent_fork(
    graphkeep_url: str, thread_id: str
) -> None:
    async with graphkeep.aconnect(graphkeep_url) as saver:
        await graph(saver, plain).ainvoke({"log": ["hello"]}, config(thread_id))
    barrier = asyncio.Barrier(2)

    async def meet(state: State) -> dict[str, list[str]]:
        await asyncio.wait_for(barrier.wait(), BARRIER_TIMEOUT)
        return {"log": ["raced"]}

    run_ids = [str(uuid.uuid4()), str(uuid.uuid4())]

    async def run(run_id: str) -> None:
        async with graphkeep.aconnect(graphkeep_url) as saver:
            await graph(saver, meet).ainvoke({"log": [run_id]}, config(thread_id, run_id))

    await asyncio.gather(*(run(r) for r in run_ids))
    async with graphkeep.aconnect(graphkeep_url) as saver:
        health = await afleet_health(saver)
        inventory: Inventory = await saver.adrive(saver.port.inventory(thread_id))
    assert (health.concurrent_forks, health.forked_ids) == (1, [thread_id])
    checked = findings_of(thread_id, inventory)
    assert [f.kind for f in checked.findings] == ["concurrent_fork"]
    assert {c.run_id for c in checked.findings[0].children} == set(run_ids)
    code, report = await asyncio.to_thread(check_json, graphkeep_url, thread_id)
    assert code == 1
    assert_one_fork(report, thread_id, run_ids)


# -- branches someone asked for --------------------------------------------------------


def test_update_state_on_an_older_checkpoint_a_replay_and_a_copy_are_not_forks(
    graphkeep_url: str, thread_id: str
) -> None:
    with graphkeep.connect(graphkeep_url) as saver:
        chat = graph(saver, plain)
        for turn in range(3):
            chat.invoke({"log": [f"user {turn}"]}, config(thread_id))
        history = list(chat.get_state_history(config(thread_id)))
        older = history[len(history) // 2].config  # a checkpoint with a child already
        # update_state on it (source "update"), then the run continuing that branch
        branch = chat.update_state(older, {"log": ["edited"]})
        chat.invoke(None, branch)
        # a replay of it (source "fork", then its steps), twice
        chat.invoke(None, older)
        chat.invoke(None, older)
        # a copy of it (source "fork", a sibling of it)
        chat.update_state(older, None, as_node="__copy__")
        # and the thread goes on from its head
        chat.invoke({"log": ["user 3"]}, config(thread_id))
        siblings = {p: c for p, c in children_by_parent(saver, thread_id).items() if len(c) > 1}
        health = fleet_health(saver)
    # the history has branches: the test would see a rule that counted them
    assert len(siblings) >= 2
    assert max(len(c) for c in siblings.values()) >= 4
    assert all(sum(m["source"] in ("input", "loop") for _, m in c) <= 1 for c in siblings.values())
    code, report = check_json(graphkeep_url, thread_id)
    assert (code, report["findings"]) == (0, [])
    assert (health.concurrent_forks, health.forked_ids) == (0, [])
    assert prometheus_value(graphkeep_url, "graphkeep_concurrent_forks") == 0


# -- the rule --------------------------------------------------------------------------


def _link(cid: str, parent: str | None, source: str | None, ns: str = "") -> Link:
    return Link(ns, cid, parent, source, None)


def test_the_rule_counts_only_run_written_children_of_one_parent_in_one_namespace() -> None:
    links = [
        _link("a", None, "input"),
        _link("b1", "a", "loop"),
        _link("b2", "a", "update"),
        _link("b3", "a", "fork"),
        _link("b4", "a", None),  # a head that does not say (written before the source was kept)
        _link("c1", "b1", "input"),
        _link("c2", "b1", "loop"),
        _link("d1", "x", "input", ns="sub:1"),
        _link("d2", "x", "input", ns="sub:2"),
    ]
    forks = concurrent_forks(links)
    assert [(f.ns, f.parent_id, [c.checkpoint_id for c in f.children]) for f in forks] == [
        ("", "b1", ["c1", "c2"])
    ]
    summaries = [
        Summary(link.ns, link.checkpoint_id, link.parent_id, {}, [], [], None, link.source)
        for link in links
        if link.ns == ""
    ]
    checked = findings_of("t", Inventory(summaries, set(), set()))
    assert [(f.kind, f.checkpoint_id) for f in checked.findings] == [("concurrent_fork", "b1")]
    assert "c1 (input, no run id), c2 (loop, no run id)" in checked.findings[0].detail
