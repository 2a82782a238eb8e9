"""Real graphs on every backend set-up (issue #5 s1), through the sync and the async API.

Each scenario runs a graph with deterministic nodes on a saver from ``graphkeep.connect`` or
``graphkeep.aconnect``, and reads results back through a NEW saver instance (as after a process
restart), often in the other mode: sync and async savers share one storage format.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.types import Command, StateSnapshot

from conformance.factory import Api, Mode
from tests.scenarios import worker
from tests.scenarios.backends import (
    MODES,
    Graph,
    Store,
    checkpoint_ids,
    other_mode,
    thread_config,
)
from tests.scenarios.graphs import (
    FlakyError,
    RunLog,
    chain_graph,
    chat_graph,
    chat_transcript,
    fan_out_graph,
    flaky_chain_graph,
    interview_graph,
    nested_graph,
    rich_graph,
    rich_values,
    user_line,
)

AES_KEY = b"graphkeep-scen-k"  # 16 bytes: AES-128


@pytest.fixture
def runs(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path / "runs.log")


def chat(graph: Graph, thread_id: str, turns: range) -> None:
    for turn in turns:
        graph.invoke({"log": [user_line(thread_id, turn)]}, thread_config(thread_id))


# -- memory ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_multi_turn_memory_reads_back_from_a_new_saver(
    store: Store, mode: Mode, thread_id: str
) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        graph = Graph(api, chat_graph())
        chat(graph, thread_id, range(1, 4))
        assert graph.state(config).values == {"log": chat_transcript(thread_id, 3)}
    with store.open(other_mode(mode)) as fresh:
        graph = Graph(fresh, chat_graph())
        assert graph.state(config).values == {"log": chat_transcript(thread_id, 3)}
        chat(graph, thread_id, range(4, 5))
        assert graph.state(config).values == {"log": chat_transcript(thread_id, 4)}
        assert len(graph.history(config)) == 4 * 3  # input, start and reply per turn


# -- interrupt / resume from another process -------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_interrupt_then_resume_from_a_new_process(
    store: Store, mode: Mode, thread_id: str, runs: RunLog
) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        graph = Graph(api, interview_graph(runs))
        out = graph.invoke({"log": ["start"]}, config)
        assert [i.value for i in out["__interrupt__"]] == [{"question": "name?"}]
        paused = graph.state(config)
        assert paused.next == ("ask",)
        assert [i.value for i in paused.interrupts] == [{"question": "name?"}]
    values = worker.run(
        "resume-interview", store.backend.url, store.prefix, thread_id, runs.path,
        "--mode", mode, "--answer", "Ada",
    )  # fmt: skip
    assert values == {"log": ["start", "prepare", "answer:Ada", "finish"]}
    # the node before the interrupt ran once; the interrupted node re-ran on resume (by design)
    assert runs.counts() == {"prepare": 1, "ask": 2, "finish": 1}
    with store.open(mode) as api:
        done = Graph(api, interview_graph(runs)).state(config)
        assert done.values == values and done.next == () and not done.interrupts


# -- time travel -----------------------------------------------------------------------------


def _parent_id(snapshot: StateSnapshot) -> str | None:
    parent = snapshot.parent_config
    return parent["configurable"]["checkpoint_id"] if parent else None


def _summary(snapshot: StateSnapshot) -> tuple[Any, ...]:
    return (snapshot.values, snapshot.next, _parent_id(snapshot), snapshot.metadata)


@pytest.mark.parametrize("mode", MODES)
def test_time_travel_history_replay_and_fork(
    store: Store, mode: Mode, thread_id: str, runs: RunLog
) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        graph = Graph(api, chain_graph(runs))
        graph.invoke({"log": ["in"]}, config)
        history = graph.history(config)

        # newest first, one parent chain back to the input checkpoint
        assert [s.next for s in history] == [(), ("c",), ("b",), ("a",), ("__start__",)]
        assert [(s.metadata or {}).get("step") for s in history] == [3, 2, 1, 0, -1]
        ids = checkpoint_ids(history)
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
        assert [_parent_id(s) for s in history] == [*ids[1:], None]
        original = {s.config["configurable"]["checkpoint_id"]: _summary(s) for s in history}

        # replay from the checkpoint before b: b and c run again, a does not
        before_b, before_c = history[2], history[1]
        assert graph.invoke(None, before_b.config) == {"log": ["in", "a", "b", "c"]}
        assert runs.counts() == {"a": 1, "b": 2, "c": 2}

        # update_state on an old checkpoint forks from it
        fork_base = before_c.config["configurable"]["checkpoint_id"]
        fork = graph.update(before_c.config, {"log": ["X"]})
        forked = graph.state(fork)
        assert forked.values == {"log": ["in", "a", "b", "X"]} and forked.next == ("c",)
        assert _parent_id(forked) == fork_base
        assert graph.invoke(None, fork) == {"log": ["in", "a", "b", "X", "c"]}
        assert runs.counts() == {"a": 1, "b": 2, "c": 3}

    with store.open(other_mode(mode)) as fresh:
        graph = Graph(fresh, chain_graph(runs))
        after = {
            s.config["configurable"]["checkpoint_id"]: _summary(s) for s in graph.history(config)
        }
        # the original history is untouched: same checkpoints, values, links and metadata
        assert {i: after[i] for i in original} == original
        # everything new is newer and branches off the checkpoints we replayed or forked
        branch_points = {before_b.config["configurable"]["checkpoint_id"], fork_base}
        for new_id in set(after) - set(original):
            assert new_id > ids[0]
            ancestor: str | None = new_id
            while ancestor not in original:
                ancestor = after[ancestor][2]
                assert ancestor is not None, f"{new_id} does not descend from the history"
            assert ancestor in branch_points
        head = graph.state(thread_config(thread_id, checkpoint_id=ids[0]))
        assert head.values == {"log": ["in", "a", "b", "c"]}
        assert graph.state(config).values == {"log": ["in", "a", "b", "X", "c"]}


# -- subgraphs -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_subgraph_state_namespaces_and_interrupt_resume(
    store: Store, mode: Mode, thread_id: str, runs: RunLog
) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        graph = Graph(api, nested_graph(runs))
        out = graph.invoke({"log": ["in"]}, config)
        assert [i.value for i in out["__interrupt__"]] == ["inner?"]
        paused = graph.state(config, subgraphs=True)
        assert paused.next == ("sub",)
        (task,) = paused.tasks
        inner = task.state
        assert isinstance(inner, StateSnapshot)
        ns = inner.config["configurable"]["checkpoint_ns"]
        assert ns.startswith("sub:")
        assert inner.values == {"log": ["in", "prep", "inner_work"]}
        assert inner.next == ("inner_ask",)
        stored = api.list({"configurable": {"thread_id": thread_id}})
        assert {t.config["configurable"]["checkpoint_ns"] for t in stored} == {"", ns}
        assert all(t.config["configurable"]["thread_id"] == thread_id for t in stored)

    with store.open(other_mode(mode)) as fresh:
        graph = Graph(fresh, nested_graph(runs))
        inner_again = graph.state(config, subgraphs=True).tasks[0].state
        assert isinstance(inner_again, StateSnapshot) and inner_again.values == inner.values
        done = graph.invoke(Command(resume="yes"), config)
        # the subgraph returns its whole log, which the parent's reducer appends
        assert done == {
            "log": ["in", "prep", "in", "prep", "inner_work", "inner_answer:yes", "after"]
        }
        assert runs.counts() == {"prep": 1, "inner_work": 1, "inner_ask": 2, "after": 1}
        final = graph.state(config, subgraphs=True)
        assert final.next == () and final.tasks == ()


# -- pending writes --------------------------------------------------------------------------


def _fail_once_after_sibling_is_stored(api: Api, thread_id: str, runs: RunLog) -> Any:
    """boom's hook: wait until ok's write is in the store, then fail on boom's first run."""

    def hook() -> None:
        deadline = time.monotonic() + 30
        while True:
            found = api.saver.get_tuple(thread_config(thread_id))  # from a worker thread
            if found and any(v == ["ok"] for _, _, v in found.pending_writes or []):
                break
            assert time.monotonic() < deadline, "ok's write never reached the store"
            time.sleep(0.02)
        if runs.count("boom") == 1:
            raise FlakyError("boom fails on its first run")

    return hook


@pytest.mark.parametrize("mode", MODES)
def test_pending_writes_spare_the_finished_branch_on_resume(
    store: Store, mode: Mode, thread_id: str, runs: RunLog
) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        hook = _fail_once_after_sibling_is_stored(api, thread_id, runs)
        graph = Graph(api, fan_out_graph(runs, ("ok", "boom"), hook))
        with pytest.raises(FlakyError):
            graph.invoke({"log": ["in"]}, config)
    with store.open(other_mode(mode)) as fresh:
        hook = _fail_once_after_sibling_is_stored(fresh, thread_id, runs)
        graph = Graph(fresh, fan_out_graph(runs, ("ok", "boom"), hook))
        failed = graph.state(config)
        assert failed.next == ("boom",)
        tasks = {t.name: t for t in failed.tasks}
        assert tasks["ok"].result == {"log": ["ok"]} and tasks["ok"].error is None
        assert "boom fails" in str(tasks["boom"].error)
        assert graph.invoke(None, config) == {"log": ["in", "boom", "ok", "join"]}
    assert runs.counts() == {"ok": 1, "boom": 2, "join": 1}


# -- durability ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("failure", ["interrupt", "error"])
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_each_durability_mode_leaves_a_resumable_state(
    store: Store, mode: Mode, durability: Any, failure: str, thread_id: str, runs: RunLog
) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        graph = Graph(api, flaky_chain_graph(runs, failure))
        if failure == "error":
            with pytest.raises(FlakyError):
                graph.invoke({"log": ["in"]}, config, durability=durability)
        else:
            out = graph.invoke({"log": ["in"]}, config, durability=durability)
            assert [i.value for i in out["__interrupt__"]] == ["go on?"]
        stored = len(api.list(config))
    # "exit" saves once, when the run stops; the others after every step
    assert stored == (1 if durability == "exit" else 3)
    with store.open(other_mode(mode)) as fresh:
        graph = Graph(fresh, flaky_chain_graph(runs, failure))
        paused = graph.state(config)
        assert paused.values == {"log": ["in", "a"]} and paused.next == ("b",)
        resume: Command[Any] | None = Command(resume="yes") if failure == "interrupt" else None
        done = graph.invoke(resume, config, durability=durability)
        b_wrote = "b:yes" if failure == "interrupt" else "b"
        assert done == {"log": ["in", "a", b_wrote, "c"]}
        assert graph.state(config).values == done
    assert runs.counts() == {"a": 1, "b": 2, "c": 1}


# -- rich state ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_rich_state_round_trips_with_its_types(store: Store, mode: Mode, thread_id: str) -> None:
    config = thread_config(thread_id)
    with store.open(mode) as api:
        Graph(api, rich_graph()).invoke({"labels": set()}, config)
    with store.open(other_mode(mode)) as fresh:
        values = Graph(fresh, rich_graph()).state(config).values
    expected = rich_values()
    assert values == expected
    assert {k: type(v) for k, v in values.items()} == {k: type(v) for k, v in expected.items()}
    assert values["when"].tzinfo is not None and values["when"] == expected["when"]
    assert values["profile"].manager.born.utcoffset() == expected["profile"].born.utcoffset()
    assert values["nested"]["list"][5]["deep"]["deeper"][0] == b"bin"


# -- encryption ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_encrypted_state_leaves_no_plaintext_in_the_store(
    store: Store, mode: Mode, thread_id: str
) -> None:
    canary = f"canary-{uuid4().hex}"
    config = thread_config(thread_id)
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY)
    with store.open(mode, serde=serde) as api:
        graph = Graph(api, chat_graph())
        graph.invoke({"log": [f"user:{canary}"]}, config)
        graph.invoke({"log": [f"user:{canary}-2"]}, config)
        expected = graph.state(config).values
    with store.open(
        other_mode(mode), serde=EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY)
    ) as fresh:
        assert Graph(fresh, chat_graph()).state(config).values == expected

    raw = store.scan()
    assert raw, f"the raw scan found nothing under prefix {store.prefix}"
    leaks = sorted(key for key, data in raw.items() if canary.encode() in data)
    assert not leaks, f"plaintext state found in {leaks}"

    # control: without encryption the same scan does see the string
    plain = store.sibling("plain")
    with plain.open(mode) as api:
        Graph(api, chat_graph()).invoke({"log": [f"user:{canary}"]}, config)
    assert any(canary.encode() in data for data in plain.scan().values())
