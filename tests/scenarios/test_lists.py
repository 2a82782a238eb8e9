"""Shared lists (issue #13): a chat thread's ``messages`` costs what changed, on every set-up.

A chat graph on ``add_messages`` (no DeltaChannel) runs on graphkeep and on LangGraph's
``InMemorySaver``; state and history must be identical, while the store holds each message
once (element records named by small manifests). Prune, delete, copy, a cold saver, encryption,
edits in the middle of the list, a missing element and a writer killed between its element
writes and its checkpoint are checked on real servers, sync and async.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from conformance.factory import Api, Mode
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest, manifest_keys
from graphkeep.checkpoint.records import Typed
from graphkeep.errors import CorruptData
from tests.scenarios.backends import MODES, Graph, Store, thread_config
from tests.scenarios.worker import REPO

AES_KEY = b"graphkeep-scen-k"
FILLER = "lorem ipsum dolor sit amet " * 8  # ~200 bytes per message, like a short chat turn


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def reply(state: Chat) -> dict[str, Any]:
    turn = state.get("turns", 0) + 1
    last = state["messages"][-1]
    return {
        "messages": [AIMessage(f"re: {last.content} {FILLER}", id=f"a{turn}")],
        "turns": turn,
    }


def chat_graph() -> StateGraph[Any]:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def user(turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"question {turn} {FILLER}", id=f"h{turn}")]}


def run_chat(graph: Graph, thread_id: str, turns: range) -> None:
    for turn in turns:
        graph.invoke(user(turn), thread_config(thread_id))


def reference(turns: range, *edits: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """State and history values of the same conversation on InMemorySaver."""
    graph = chat_graph().compile(checkpointer=InMemorySaver())
    config = thread_config("ref")
    for turn in turns:
        graph.invoke(user(turn), config)
    for edit in edits:
        graph.update_state(config, edit)
    return graph.get_state(config).values, [s.values for s in graph.get_state_history(config)]


def inventory(api: Api, thread_id: str) -> Any:
    saver: Any = api.saver
    return api_call(api, saver.port.inventory(thread_id))


def api_call(api: Api, op: Any) -> Any:
    saver: Any = api.saver
    if api.mode == "async":
        return api.run(saver._acall(op))  # type: ignore[attr-defined]
    return saver._call(op)


def elements(api: Api, thread_id: str) -> set[tuple[str, str, str]]:
    return {k for k in inventory(api, thread_id).blob_keys if k[1] == ELEMENT_CHANNEL}


def head_manifest_keys(api: Api, thread_id: str) -> set[tuple[str, str, str]]:
    saver: Any = api.saver
    loaded = api_call(api, saver.port.load(thread_id, "", None))
    manifest: Typed = loaded.blobs["messages"]
    assert is_manifest(manifest), "the head's messages are not stored as a shared list"
    return {("", ELEMENT_CHANNEL, key) for key in manifest_keys(manifest)}


# -- identical state, linear storage -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_chat_state_and_history_match_in_memory_saver_and_each_message_is_stored_once(
    store: Store, mode: Mode, thread_id: str
) -> None:
    turns = range(1, 31)
    edits = (
        {"messages": [RemoveMessage(id="h3")]},
        {"messages": [HumanMessage("edited in the middle", id="a10")]},
    )
    expected, expected_history = reference(turns, *edits)
    with store.open(mode) as api:
        graph = Graph(api, chat_graph())
        run_chat(graph, thread_id, turns)
        for edit in edits:
            graph.update(thread_config(thread_id), edit)
        state = graph.state(thread_config(thread_id)).values
        assert state == expected
        assert [type(m) for m in state["messages"]] == [type(m) for m in expected["messages"]]
        assert [s.values for s in graph.history(thread_config(thread_id))] == expected_history
        stored = elements(api, thread_id)
    # 60 messages plus the edited one, each once (the first turns may be below the size limit)
    assert 55 <= len(stored) <= 61, f"{len(stored)} element records for 61 distinct messages"
    with store.open(mode) as fresh:  # a new saver instance reads the same
        assert Graph(fresh, chat_graph()).state(thread_config(thread_id)).values == expected


@pytest.mark.parametrize("mode", MODES)
def test_a_new_saver_continues_the_thread_without_rewriting_its_messages(
    store: Store, mode: Mode, thread_id: str
) -> None:
    with store.open(mode) as api:
        run_chat(Graph(api, chat_graph()), thread_id, range(1, 11))
        before = elements(api, thread_id)
    with store.open(mode) as cold:
        run_chat(Graph(cold, chat_graph()), thread_id, range(11, 21))
        after = elements(cold, thread_id)
        assert before <= after
        assert len(after - before) == 20, "a cold saver wrote old messages again"
        assert (
            Graph(cold, chat_graph()).state(thread_config(thread_id)).values
            == reference(range(1, 21))[0]
        )


def test_share_lists_false_keeps_one_blob_per_version(store: Store, thread_id: str) -> None:
    with store.open("sync", share_lists=False) as api:
        run_chat(Graph(api, chat_graph()), thread_id, range(1, 6))
        assert not elements(api, thread_id)
        saver: Any = api.saver
        loaded = api_call(api, saver.port.load(thread_id, "", None))
        assert not is_manifest(loaded.blobs["messages"])
    with store.open("sync") as shared:  # and a sharing saver reads and continues it
        graph = Graph(shared, chat_graph())
        run_chat(graph, thread_id, range(6, 9))
        assert graph.state(thread_config(thread_id)).values == reference(range(1, 9))[0]


def reply_editing_in_place(state: Chat) -> dict[str, Any]:
    """``reply``, after editing the first message in place (the same object, other content):
    the saver must store it as it is now, not as a put before stored it."""
    state["messages"][0].content += f" (edited in place at turn {state.get('turns', 0) + 1})"
    return reply(state)


def editing_graph() -> StateGraph[Any]:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply_editing_in_place)
    builder.add_edge(START, "reply")
    return builder


@pytest.mark.parametrize("mode", MODES)
def test_an_element_mutated_in_place_is_stored_as_it_is_now(
    store: Store, mode: Mode, thread_id: str
) -> None:
    turns = range(1, 9)
    reference_graph = editing_graph().compile(checkpointer=InMemorySaver())
    # durability="sync": each checkpoint stored before the next step runs (by default a put
    # runs beside the next step, which may edit the message while the put serializes it)
    for turn in turns:
        reference_graph.invoke(user(turn), thread_config("ref"), durability="sync")
    expected = reference_graph.get_state(thread_config("ref")).values
    history = [s.values for s in reference_graph.get_state_history(thread_config("ref"))]
    assert expected["messages"][0].content.endswith("(edited in place at turn 8)")
    with store.open(mode) as api:
        graph = Graph(api, editing_graph())
        for turn in turns:
            graph.invoke(user(turn), thread_config(thread_id), durability="sync")
        assert graph.state(thread_config(thread_id)).values == expected
        assert [s.values for s in graph.history(thread_config(thread_id))] == history
    with store.open(mode) as fresh:  # what the store holds, read by a saver that wrote nothing
        graph = Graph(fresh, editing_graph())
        assert graph.state(thread_config(thread_id)).values == expected
        assert [s.values for s in graph.history(thread_config(thread_id))] == history


# -- prune, delete, copy -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_prune_keeps_exactly_the_elements_the_head_names_and_delete_leaves_nothing(
    store: Store, mode: Mode, thread_id: str
) -> None:
    with store.open(mode) as api:
        graph = Graph(api, chat_graph())
        run_chat(graph, thread_id, range(1, 16))
        graph.update(thread_config(thread_id), {"messages": [RemoveMessage(id="h2")]})
        expected = graph.state(thread_config(thread_id)).values
        api.prune([thread_id], strategy="keep_latest")
        assert elements(api, thread_id) == head_manifest_keys(api, thread_id)
        assert graph.state(thread_config(thread_id)).values == expected
        run_chat(graph, thread_id, range(16, 18))  # the graph goes on after a prune
        assert len(graph.state(thread_config(thread_id)).values["messages"]) == 33
        api.delete_thread(thread_id)
        assert not inventory(api, thread_id).blob_keys
    # all but the thread's fencing token (prune took its lease), which outlives it by design
    assert store.data() == {}, "delete_thread left records behind"


@pytest.mark.parametrize("mode", MODES)
def test_copy_thread_target_reads_the_same_lists_and_diverges_alone(
    store: Store, mode: Mode, thread_id: str
) -> None:
    target = f"{thread_id}-copy"
    with store.open(mode) as api:
        graph = Graph(api, chat_graph())
        run_chat(graph, thread_id, range(1, 11))
        source_state = graph.state(thread_config(thread_id)).values
        api.copy_thread(thread_id, target)
        assert graph.state(thread_config(target)).values == source_state
        run_chat(graph, target, range(11, 13))
        assert graph.state(thread_config(thread_id)).values == source_state
        assert len(graph.state(thread_config(target)).values["messages"]) == 24


# -- encryption, corruption, crash -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_encrypted_elements_are_each_encrypted_and_still_stored_once(
    store: Store, mode: Mode, thread_id: str
) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY)
    with store.open(mode, serde=serde) as api:
        graph = Graph(api, chat_graph())
        run_chat(graph, thread_id, range(1, 11))
        assert graph.state(thread_config(thread_id)).values == reference(range(1, 11))[0]
        keys = elements(api, thread_id)
        assert 16 <= len(keys) <= 20
        saver: Any = api.saver
        got = api_call(api, saver.port.get_blobs(thread_id, sorted(keys)))
        assert got and all(t.tag.endswith("+aes") for t in got.values())
    leaks = [k for k, data in store.scan().items() if b"question 3 lorem" in data]
    assert not leaks, f"plaintext message found in {leaks}"


@pytest.mark.parametrize("mode", MODES)
def test_a_missing_element_raises_corrupt_data_naming_the_thread(
    store: Store, mode: Mode, thread_id: str
) -> None:
    with store.open(mode) as api:
        run_chat(Graph(api, chat_graph()), thread_id, range(1, 8))
        victim = sorted(head_manifest_keys(api, thread_id))[0]
        saver: Any = api.saver
        api_call(api, saver.port.delete_records(thread_id, [], [victim]))
    with store.open(mode) as fresh, pytest.raises(CorruptData, match=thread_id):
        fresh.get_tuple(thread_config(thread_id, checkpoint_ns=""))


CRASHING_WRITER = """
import os, signal, sys
import graphkeep
from tests.scenarios.backends import Graph
from tests.scenarios.test_lists import chat_graph, run_chat

url, prefix, thread_id = sys.argv[1:4]
with graphkeep.connect(url, key_prefix=prefix) as saver:
    from conformance.factory import SyncApi
    graph = Graph(SyncApi(saver), chat_graph())
    run_chat(graph, thread_id, range(1, 6))
    put = saver.port.put_checkpoint

    def crashing(record, blobs, fence=None):
        if not any(b.channel == "__graphkeep.element__" for b in blobs):
            return (yield from put(record, blobs, fence))
        op = put(record, blobs, fence)
        request = next(op)
        while True:
            result = yield request
            try:
                request = op.send(result)
            except StopIteration as stop:
                # one request wrote everything: die before the put returns
                os.kill(os.getpid(), signal.SIGKILL)
                return stop.value
            # the elements went out, the checkpoint did not: die now
            os.kill(os.getpid(), signal.SIGKILL)

    saver.port.put_checkpoint = crashing
    run_chat(graph, thread_id, range(6, 7))
"""


def test_a_writer_killed_between_elements_and_checkpoint_leaves_no_broken_list(
    store: Store, thread_id: str
) -> None:
    process = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, store.backend.url, store.prefix, thread_id],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO}/src:{REPO}"},
        capture_output=True,
        timeout=120,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()[-2000:]
    with store.open("sync") as api:
        graph = Graph(api, chat_graph())
        state = graph.state(thread_config(thread_id)).values  # never CorruptData
        # the last complete checkpoint: 5 turns, plus the killed turn's input if it landed
        assert state["messages"][:10] == reference(range(1, 6))[0]["messages"]
        for snapshot in graph.history(thread_config(thread_id)):
            assert isinstance(snapshot.values.get("messages", []), list)
        api.prune([thread_id], strategy="keep_latest")
        assert elements(api, thread_id) == head_manifest_keys(api, thread_id)
        run_chat(graph, thread_id, range(7, 9))
        assert len(graph.state(thread_config(thread_id)).values["messages"]) >= 14


def test_unserializable_element_fails_before_anything_is_written(
    store: Store, thread_id: str
) -> None:
    with store.open("sync") as api:
        graph = Graph(api, chat_graph())
        run_chat(graph, thread_id, range(1, 6))
        before = store.scan()
        saver: Any = api.saver
        tup = saver.get_tuple(thread_config(thread_id, checkpoint_ns=""))
        checkpoint = dict(tup.checkpoint)
        values = dict(checkpoint["channel_values"])
        values["messages"] = [*values["messages"], object()]
        checkpoint["channel_values"] = values
        versions = dict(checkpoint["channel_versions"])
        versions["messages"] = saver.get_next_version(versions["messages"], None)
        checkpoint["channel_versions"] = versions
        checkpoint["id"] = checkpoint["id"][:-1] + ("0" if checkpoint["id"][-1] != "0" else "1")
        with pytest.raises(Exception, match=r"messages.*\[10\]") as info:
            saver.put(tup.config, checkpoint, tup.metadata, {"messages": versions["messages"]})
        assert type(info.value).__module__ == "graphkeep.errors"
        assert store.scan() == before
        json.dumps(sorted(before))  # keys are plain text
