"""``graphkeep copy`` between integer-version and string-version savers, verified through
LangGraph's read path, on real servers.

The integer side is LangGraph's own MongoDBSaver (``langgraph-checkpoint-mongodb``) on the
session's MongoDB server, opened with ``--source-saver`` / ``--dest-saver``
(tests/copy_savers.py); the string side is graphkeep on every backend. Threads are written by
a real graph: a three-turn chat (add_messages), an ``update_state`` fork (which makes an
integer saver reuse a version number for another value), an approval interrupt, and a chat
whose messages are a DeltaChannel (tests/test_cli.py's).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from graphkeep.cli.verify import verify_graph
from graphkeep.moving.items import CheckpointItem
from graphkeep.moving.versions import plan_versions, string_ranks

from .cli_runs import gk
from .conftest import MONGODB_URI
from .copy_savers import chat_builder, mongodb_saver
from .test_cli import BACKEND_PARAMS, Store, unique_prefix
from .test_cli import chat as delta_chat
from .test_cli import chat_graph as delta_chat_graph

#: every test here reads or writes LangGraph's MongoDBSaver
pytestmark = pytest.mark.mongodb

SOURCE_SAVER = "tests.copy_savers:mongodb_saver"
GRAPH = "tests.copy_savers:builder"
COMPILED_GRAPH = "tests.copy_savers:compiled"


@pytest.fixture(params=BACKEND_PARAMS)
def store(request: pytest.FixtureRequest) -> Store:
    return Store(request.param, unique_prefix("copyv"))


def config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def ask(graph: Any, thread_id: str, text: str) -> Any:
    return graph.invoke(
        {"messages": [HumanMessage(content=text, id=f"h-{text}")]}, config(thread_id)
    )


def contents(values: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in values.get("messages", [])]


def history(graph: Any, thread_id: str) -> dict[str, Any]:
    """checkpoint id -> (values, next, interrupts) of every state of the thread."""
    return {
        s.config["configurable"]["checkpoint_id"]: (
            s.values,
            s.next,
            [i.value for t in s.tasks for i in t.interrupts],
        )
        for s in graph.get_state_history(config(thread_id))
    }


def write_threads(graph: Any, saver: Any) -> dict[str, Any]:
    """The three threads, through ``graph``: what the fork made the integer saver reuse."""
    for n in range(1, 4):
        ask(graph, "chat", f"question {n}")
    ask(graph, "fork", "first")
    ask(graph, "fork", "second")
    states = list(graph.get_state_history(config("fork")))
    before_second = next(s for s in states if contents(s.values) == ["first", "answer 1 to first"])
    graph.update_state(
        before_second.config, {"messages": [HumanMessage(content="instead", id="h-instead")]}
    )
    ask(graph, "fork", "after the fork")
    ask(graph, "approve", "please approve the budget")
    return {t: history(graph, t) for t in ("chat", "fork", "approve")}


def reused_versions(saver: Any, thread_id: str) -> set[tuple[str, Any]]:
    """(channel, version) pairs that name different values on different checkpoints."""
    values: dict[tuple[str, Any], list[Any]] = {}
    for t in saver.list(config(thread_id)):
        for ch, v in t.checkpoint["channel_versions"].items():
            if ch in t.checkpoint["channel_values"]:
                values.setdefault((ch, v), []).append(t.checkpoint["channel_values"][ch])
    return {key for key, seen in values.items() if any(x != seen[0] for x in seen)}


def copy_argv(src: str, dst: str, *rest: str) -> list[str]:
    return ["copy", src, dst, *rest, "--json"]


def test_threads_of_langgraph_mongodb_continue_fork_and_resume_on_graphkeep(
    store: Store, mongo_url: str
) -> None:
    with mongodb_saver(mongo_url) as source:
        on_source = chat_builder().compile(checkpointer=source)
        before = write_threads(on_source, source)
        assert reused_versions(source, "fork"), "the fork should reuse an integer version"
        argv = copy_argv(
            mongo_url,
            store.url,
            "--all",
            "--source-saver",
            SOURCE_SAVER,
            "--dst-key-prefix",
            store.prefix,
            "--graph",
            GRAPH,
        )
        copied = gk(*argv)
        assert copied.code == 0, copied.out + copied.err
        report = {t["thread_id"]: t for t in copied.json()["threads"]}
        assert set(report) == {"chat", "fork", "approve"}
        assert all(t["verified"] and not t["problems"] for t in report.values()), report
        again = gk(*argv)
        assert again.code == 0, again.out
        assert all(t["checkpoints_copied"] == 0 for t in again.json()["threads"])
        # what the source does next, to compare with graphkeep doing the same
        ask(on_source, "chat", "question 4")
        source_chat = on_source.get_state(config("chat")).values
        on_source.invoke(Command(resume="yes"), config("approve"))
        source_approved = on_source.get_state(config("approve")).values
        ask(on_source, "fork", "later")
        source_fork = on_source.get_state(config("fork")).values

    with store.saver() as saver:
        here = chat_builder().compile(checkpointer=saver)
        for thread_id, states in before.items():
            assert history(here, thread_id) == states, thread_id
        fork = history(here, "fork")
        branches = {tuple(contents(values)) for values, _, _ in fork.values()}
        assert ("first", "answer 1 to first", "second") in branches
        assert ("first", "answer 1 to first", "instead") in branches
        # the next turn steps from translated versions (string after string)
        ask(here, "chat", "question 4")
        assert here.get_state(config("chat")).values == source_chat
        assert contents(source_chat)[-1] == (
            "answer 4 to question 1 | question 2 | question 3 | question 4"
        )
        ask(here, "fork", "later")  # the fork's branch goes on as on the source
        assert here.get_state(config("fork")).values == source_fork
        assert contents(source_fork)[-1] == "answer 4 to first | instead | after the fork | later"
        waiting = here.get_state(config("approve"))
        assert waiting.next == ("approval",)
        here.invoke(Command(resume="yes"), config("approve"))
        assert here.get_state(config("approve")).values == source_approved
        assert source_approved["approved"] == "yes after 2 message(s)"


async def test_a_graphkeep_thread_copied_into_langgraph_mongodb_continues_there(
    store: Store, mongo_url: str
) -> None:
    import graphkeep

    async with graphkeep.aconnect(store.url, key_prefix=store.prefix) as saver:
        here = chat_builder().compile(checkpointer=saver)
        for text in ("one", "two"):
            await here.ainvoke(
                {"messages": [HumanMessage(content=text, id=f"h-{text}")]}, config("t")
            )
        states = [s async for s in here.aget_state_history(config("t"))]
        at_one = next(s for s in states if contents(s.values) == ["one", "answer 1 to one"])
        await here.aupdate_state(
            at_one.config, {"messages": [HumanMessage(content="fork", id="h-fork")]}
        )
        before = {
            s.config["configurable"]["checkpoint_id"]: s.values
            async for s in here.aget_state_history(config("t"))
        }
    back = gk(
        *copy_argv(
            store.url,
            mongo_url,
            "--thread",
            "t",
            "--src-key-prefix",
            store.prefix,
            "--dest-saver",
            SOURCE_SAVER,
            "--graph",
            COMPILED_GRAPH,
        )
    )
    assert back.code == 0, back.out + back.err
    assert back.json()["threads"][0]["verified"] is True
    with mongodb_saver(mongo_url) as there:
        graph = chat_builder().compile(checkpointer=there)
        copied = {
            s.config["configurable"]["checkpoint_id"]: s.values
            for s in graph.get_state_history(config("t"))
        }
        assert copied == before
        # MongoDBSaver steps from an integer: get_next_version works on what was copied
        ask(graph, "t", "three")
        assert contents(graph.get_state(config("t")).values) == [
            "one",
            "answer 1 to one",
            "fork",
            "three",
            "answer 3 to one | fork | three",
        ]
        versions = [
            v for t in there.list(config("t")) for v in t.checkpoint["channel_versions"].values()
        ]
        assert versions and all(isinstance(v, int) for v in versions)


def test_a_delta_channel_thread_of_langgraph_mongodb_replays_and_continues_on_graphkeep(
    store: Store, mongo_url: str
) -> None:
    with mongodb_saver(mongo_url) as source:
        on_source = delta_chat_graph(source)
        delta_chat(on_source, "delta", 5)
        before = {
            s.config["configurable"]["checkpoint_id"]: s.values
            for s in on_source.get_state_history(config("delta"))
        }
        copied = gk(
            *copy_argv(
                mongo_url,
                store.url,
                "--thread",
                "delta",
                "--source-saver",
                SOURCE_SAVER,
                "--dst-key-prefix",
                store.prefix,
            )
        )
        assert copied.code == 0, copied.out + copied.err
        delta_chat(on_source, "delta", 1, start=6)
        after = on_source.get_state(config("delta")).values
    with store.saver() as saver:
        here = delta_chat_graph(saver)
        assert {
            s.config["configurable"]["checkpoint_id"]: s.values
            for s in here.get_state_history(config("delta"))
        } == before
        delta_chat(here, "delta", 1, start=6)
        assert here.get_state(config("delta")).values == after
        assert len(after["messages"]) == 12


def test_copy_reports_a_destination_that_differs_and_never_overwrites_it(
    store: Store, mongo_url: str
) -> None:
    with mongodb_saver(mongo_url) as source:
        graph = chat_builder().compile(checkpointer=source)
        ask(graph, "t", "hello")
        ask(graph, "t", "again")
        argv = copy_argv(
            mongo_url,
            store.url,
            "--thread",
            "t",
            "--source-saver",
            SOURCE_SAVER,
            "--dst-key-prefix",
            store.prefix,
        )
        first = gk(*argv)
        assert first.code == 0, first.out + first.err
        with store.saver() as saver:
            head = saver.get_tuple(config("t"))
            assert head is not None
            # one value changed on the destination, as a stray writer would: the head's
            # messages lose their last one
            body = {**head.checkpoint, "channel_values": dict(head.checkpoint["channel_values"])}
            body["channel_values"]["messages"] = body["channel_values"]["messages"][:-1]
            bumped = saver.get_next_version(body["channel_versions"]["messages"], None)
            body["channel_versions"] = {**body["channel_versions"], "messages": bumped}
            saver.put(head.parent_config, body, head.metadata, {"messages": bumped})
            changed_id = head.config["configurable"]["checkpoint_id"]
            held = len(list(saver.list(config("t"))))
        ask(graph, "t", "more")  # the source moves on: nothing of it may land on top
        rerun = gk(*argv)
    assert rerun.code == 1, rerun.out
    problems = rerun.json()["threads"][0]["problems"]
    assert any(
        changed_id in p and "not overwritten" in p and "channel_values (messages)" in p
        for p in problems
    ), problems
    with store.saver() as saver:
        kept = saver.get_tuple(config("t", changed_id))
        assert kept is not None
        assert len(kept.checkpoint["channel_values"]["messages"]) == 3
        assert len(list(saver.list(config("t")))) == held


def test_a_re_run_adds_the_writes_a_copied_checkpoint_gained_on_the_source(
    store: Store, mongo_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with mongodb_saver(mongo_url) as source:
        graph = chat_builder().compile(checkpointer=source)
        ask(graph, "t", "please approve the plan")
        argv = copy_argv(
            mongo_url,
            store.url,
            "--thread",
            "t",
            "--source-saver",
            SOURCE_SAVER,
            "--dst-key-prefix",
            store.prefix,
        )
        assert gk(*argv).code == 0
        head = source.get_tuple(config("t"))
        assert head is not None
        # a worker of the live app records its task's output on the head meanwhile
        source.put_writes(head.config, [("approved", "seen")], "late-task")
        # the re-run opens the source with a callable that takes no URL (SRC_URL: a label)
        monkeypatch.setenv("MONGODB_URI", MONGODB_URI)
        monkeypatch.setenv("GK_COPY_MONGODB_DB", mongo_url.rsplit("/", 1)[1])
        rerun = gk(
            *copy_argv(
                "old-mongodb",
                store.url,
                "--thread",
                "t",
                "--source-saver",
                "tests.copy_savers:session_mongodb_saver",
                "--dst-key-prefix",
                store.prefix,
            )
        )
        assert rerun.code == 0, rerun.out
        assert rerun.json()["threads"][0]["checkpoints_copied"] == 0
        want = source.get_tuple(head.config)
    with store.saver() as saver:
        have = saver.get_tuple(config("t", head.config["configurable"]["checkpoint_id"]))
    assert want is not None and have is not None
    assert sorted(w[:2] for w in have.pending_writes) == sorted(w[:2] for w in want.pending_writes)
    assert ("late-task", "approved") in [w[:2] for w in have.pending_writes]


def test_a_source_thread_that_cannot_be_read_is_reported_and_the_others_are_copied(
    store: Store, mongo_url: str
) -> None:
    with mongodb_saver(mongo_url) as source:
        graph = chat_builder().compile(checkpointer=source)
        ask(graph, "good", "hello")
        ask(graph, "bad", "hello")
        # one stored checkpoint of "bad" is no longer msgpack (0xc1 is never used)
        damaged = source.checkpoint_collection.update_one(
            {"thread_id": "bad"}, {"$set": {"checkpoint": b"\xc1broken"}}
        )
        assert damaged.modified_count == 1
        result = gk(
            *copy_argv(
                mongo_url,
                store.url,
                "--thread",
                "good",
                "bad",
                "--source-saver",
                SOURCE_SAVER,
                "--dst-key-prefix",
                store.prefix,
            )
        )
        want = graph.get_state(config("good")).values
    assert result.code == 1, result.out + result.err
    threads = {t["thread_id"]: t for t in result.json()["threads"]}
    assert threads["good"]["verified"] is True
    assert threads["bad"]["verified"] is False
    assert threads["bad"]["problems"][0].startswith("source: "), threads["bad"]
    with store.saver() as saver:
        assert chat_builder().compile(checkpointer=saver).get_state(config("good")).values == want
        assert saver.get_tuple(config("bad")) is None


def test_graph_verification_names_the_states_that_read_differently(store: Store) -> None:
    with store.saver() as saver:
        graph = chat_builder().compile(checkpointer=saver)
        ask(graph, "a", "hello")
        ask(graph, "b", "hello")
        assert verify_graph(chat_builder(), saver, saver, "a", "a") == []
        ask(graph, "b", "again")
        problems = verify_graph(chat_builder(), saver, saver, "a", "b")
    assert problems[0].startswith("graph get_state: differs: checkpoint"), problems
    assert "values (messages)" in problems[0]
    assert any("get_state_history: " in p for p in problems), problems


def test_a_saver_option_that_does_not_yield_a_saver_is_a_usage_error(tmp_path: Any) -> None:
    wrong = gk(
        "copy",
        "x://a",
        f"sqlite:///{tmp_path / 'd.db'}",
        "--all",
        "--source-saver",
        "tests.copy_savers:chat_builder",
    )
    assert wrong.code == 2 and "--source-saver" in wrong.err, wrong.err
    missing = gk("copy", "x://a", "y://b", "--all", "--dest-saver", "tests.copy_savers")
    assert missing.code == 2 and "MODULE:ATTR" in missing.err, missing.err


def test_string_versions_map_to_ordered_integers_one_to_one() -> None:
    padded = {f"{n:032}.{f:016}" for n, f in ((1, 5), (2, 1), (10, 7))}
    assert sorted(string_ranks(padded).values()) == [1, 2, 10]
    # a fork made two versions share a leading integer: ranks keep order and tell them apart
    forked = padded | {f"{2:032}.{9:016}"}
    ranks = string_ranks(forked)
    assert [ranks[v] for v in sorted(forked)] == [1, 2, 3, 4]


def test_a_reused_integer_gets_one_version_per_value_and_each_branch_sees_its_own() -> None:
    def item(checkpoint_id: str, parent: str | None, version: int, value: str) -> CheckpointItem:
        body = {
            "channel_versions": {"messages": version, "branch:to:bot": version},
            "channel_values": {"messages": [value]},
            "versions_seen": {"bot": {"messages": version, "branch:to:bot": version}},
        }
        return CheckpointItem("", checkpoint_id, parent, body, {})

    root = item("1", None, 1, "a")
    main, fork = item("2", "1", 2, "b"), item("3", "1", 2, "c")  # update_state reused 2
    plan = plan_versions([root, main, fork], "str", lambda v: repr(v).encode())
    ours, theirs = plan.versions(main)["messages"], plan.versions(fork)["messages"]
    assert ours != theirs and ours.startswith(f"{2:032}.") and theirs.startswith(f"{2:032}.")
    assert plan.versions(root)["messages"] < min(ours, theirs)
    for branch in (main, fork):  # what a node saw is the value of its own branch
        assert plan.seen(branch)["bot"] == plan.versions(branch)
    again = plan_versions([root, main, fork], "str", lambda v: repr(v).encode())
    assert again.versions(fork) == plan.versions(fork), "a re-run must map as the first run"
    # and back into integers: one-to-one, in order
    back = [
        CheckpointItem("", i.checkpoint_id, i.parent_id, plan.checkpoint(i), {})
        for i in (root, main, fork)
    ]
    ints = plan_versions(back, "int", lambda v: repr(v).encode())
    numbers = [ints.versions(i)["messages"] for i in back]
    assert numbers[0] < numbers[1] and numbers[0] < numbers[2] and numbers[1] != numbers[2]
