"""``graphkeep materialize``: DeltaChannel threads made readable by LangGraph 1.1 (issue 25).

The current LangGraph writes DeltaChannel chats (a ``RemoveMessage``, an ``Overwrite``, ~24
messages, snapshots on the way) and an interrupted one. LangGraph 1.1.10, the last release
before DeltaChannel, runs in the side venv ``./dev test`` makes
(``$GRAPHKEEP_LANGGRAPH_1_1_PYTHON``; tests/old_runtime.py, one process per store speaking JSON
lines): it sees no message before;
after ``graphkeep materialize`` it sees every message in order, continues the chat and resumes the
interrupt, and the current LangGraph reads what it wrote. On every graphkeep backend, on
LangGraph's SQLite saver and on its Postgres saver. A missing side venv fails, never skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from langgraph.types import Overwrite, interrupt

import graphkeep
from conformance.setups import all_setups
from graphkeep.checkpoint.append import MATERIALIZED_KEY
from graphkeep.checkpoint.materialize import amaterialize, materialize
from graphkeep.cli.console import UsageError
from graphkeep.cli.materialize import load_graph

from .cli_runs import gk
from .conftest import postgres_saver, unique_prefix

ROOT = Path(__file__).resolve().parents[1]
OLD_RUNTIME = ROOT / "tests" / "old_runtime.py"
SIDE_VENV_PYTHON = ROOT / ".services" / "langgraph-1.1" / "venv" / "bin" / "python"


# -- the current LangGraph's graph: tests/old_runtime.py's, on a DeltaChannel -----------------


class ChatState(TypedDict):
    messages: Annotated[
        list[AnyMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=5)
    ]


def route(state: ChatState) -> str:
    last = state["messages"][-1] if state["messages"] else None
    return "ask" if last is not None and "approve" in str(last.content) else "bot"


def bot(state: ChatState) -> dict[str, Any]:
    last = state["messages"][-1]
    answer = AIMessage(f"answer to {last.content}", id=f"ai-{last.id}")
    if last.content == "forget the first question":
        return {"messages": [RemoveMessage(id=state["messages"][0].id or ""), answer]}
    if last.content == "forget a message that never was":
        # LangGraph 1.2's messages reducer ignores an unknown id (add_messages would raise)
        return {"messages": [RemoveMessage(id="never-was"), answer]}
    if last.content == "keep only my questions":
        humans = [m for m in state["messages"] if m.type == "human"]
        return {"messages": Overwrite([*humans, answer])}
    return {"messages": [answer]}


def ask(state: ChatState) -> dict[str, Any]:
    decision = interrupt("approve?")
    return {"messages": [AIMessage(f"approved: {decision}", id=f"ai-approved-{decision}")]}


def chat_graph(saver: Any) -> Any:
    builder = StateGraph(ChatState)
    builder.add_node("bot", bot)
    builder.add_node("ask", ask)
    builder.add_conditional_edges(START, route, ["bot", "ask"])
    builder.add_edge("bot", END)
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


TEXTS = [
    *(f"question {n}" for n in range(1, 6)),
    "forget the first question",
    *(f"question {n}" for n in range(6, 9)),
    "keep only my questions",
    *(f"question {n}" for n in range(9, 16)),
    # last, after every snapshot, so materialize replays it
    "forget a message that never was",
]


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def app_config(thread_id: str) -> Any:
    """The app's config: its metadata lands in each checkpoint's (a user id here)."""
    return {**config(thread_id), "metadata": {"user_id": "u-7"}}


def write_chat(graph: Any, thread_id: str) -> None:
    for n, text in enumerate(TEXTS):
        graph.invoke({"messages": [HumanMessage(text, id=f"h{n}")]}, app_config(thread_id))


def write_interrupted(graph: Any, thread_id: str) -> None:
    for n, text in enumerate(TEXTS[:4]):
        graph.invoke({"messages": [HumanMessage(text, id=f"h{n}")]}, app_config(thread_id))
    graph.invoke(
        {"messages": [HumanMessage("please approve", id="h-approve")]}, app_config(thread_id)
    )


def shown(graph: Any, thread_id: str) -> list[list[Any]]:
    """The messages ``get_state`` shows, as tests/old_runtime.py reports them."""
    values = graph.get_state(config(thread_id)).values
    return [[m.type, m.id, m.content] for m in values.get("messages", [])]


# -- stores ------------------------------------------------------------------------------


@dataclass
class Target:
    """A store: its URL for the CLI and tests/old_runtime.py, and how to open its saver."""

    name: str
    url: str
    key_prefix: str | None

    def argv(self, *rest: str) -> list[str]:
        prefix = [] if self.key_prefix is None else ["--key-prefix", self.key_prefix]
        return ["materialize", self.url, *rest, *prefix]

    def saver(self) -> AbstractContextManager[Any]:
        if self.url.startswith("sqlite:///"):
            return SqliteSaver.from_conn_string(self.url[len("sqlite:///") :])
        if self.url.startswith("postgresql://"):
            return _setup_postgres(self.url)
        return graphkeep.connect(self.url, key_prefix=self.key_prefix)


@contextmanager
def _setup_postgres(url: str) -> Iterator[Any]:
    with postgres_saver(url) as saver:
        saver.setup()
        yield saver


def _graphkeep_params() -> list[Any]:
    params = []
    for setup in all_setups():
        if setup.name == "reference" or setup.url.split("://", 1)[0] not in graphkeep.BACKENDS:
            continue
        marks = [getattr(pytest.mark, setup.marker)] if setup.marker else []
        params.append(pytest.param(setup.url, id=setup.name, marks=marks))
    return params


GRAPHKEEP_PARAMS = _graphkeep_params()


@pytest.fixture(params=[*GRAPHKEEP_PARAMS, "sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target("sqlite", f"sqlite:///{tmp_path / 'chat.db'}", None)
    elif request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        yield Target("postgres", url, None)
    else:
        yield Target(request.node.callspec.id, request.param, unique_prefix("mat"))


@pytest.fixture(params=GRAPHKEEP_PARAMS)
def native(request: pytest.FixtureRequest) -> Target:
    return Target(request.node.callspec.id, request.param, unique_prefix("mat"))


# -- the CLI and the side venv -----------------------------------------------------------


@pytest.fixture(scope="session")
def old_python() -> str:
    """The LangGraph 1.1.10 side venv's python (``./dev test`` makes it); missing fails."""
    python = os.environ.get("GRAPHKEEP_LANGGRAPH_1_1_PYTHON") or str(SIDE_VENV_PYTHON)
    if not os.access(python, os.X_OK):
        pytest.fail(
            f"no LangGraph 1.1 side venv at {python}: `./dev test` makes it"
            " (or set GRAPHKEEP_LANGGRAPH_1_1_PYTHON)",
            pytrace=False,
        )
    return python


class OldRuntime:
    """tests/old_runtime.py in the side venv: LangGraph 1.1.10 on ``target``'s store."""

    def __init__(self, python: str, target: Target) -> None:
        args = json.dumps({"url": target.url, "key_prefix": target.key_prefix})
        self.proc = subprocess.Popen(
            [python, str(OLD_RUNTIME), args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )

    def ask(self, op: str, thread_id: str, **rest: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, "thread_id": thread_id, **rest}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            pytest.fail(f"LangGraph 1.1 side process died:\n{self.proc.stderr.read()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def count_checkpoints(saver: Any, thread_id: str) -> int:
    return sum(1 for _ in saver.list(config(thread_id)))


# -- the proof ---------------------------------------------------------------------------


def test_langgraph_1_1_reads_and_continues_delta_threads_after_materialize(
    target: Target, old_python: str
) -> None:
    chat, waiting = "chat", "waiting"
    with target.saver() as saver:
        graph = chat_graph(saver)
        write_chat(graph, chat)
        write_interrupted(graph, waiting)
        expected = {t: shown(graph, t) for t in (chat, waiting)}
        assert len(expected[chat]) == 26 and len(expected[waiting]) == 9
        assert ["human", "h0", "question 1"] not in expected[chat]  # removed, then overwritten
        before_counts = {t: count_checkpoints(saver, t) for t in (chat, waiting)}

        old = OldRuntime(old_python, target)
        try:
            # before: LangGraph 1.1 sees no message of either thread
            before = {t: old.ask("read", t) for t in (chat, waiting)}
            assert before[chat]["langgraph"] == "1.1.10"
            assert [len(before[t]["messages"]) for t in (chat, waiting)] == [0, 0]

            dry = gk(*target.argv("--all", "--dry-run", "--json"))
            assert dry.code == 0, dry.err
            assert {t["thread_id"]: t["status"] for t in dry.json()["threads"]} == {
                chat: "would_materialize",
                waiting: "would_materialize",
            }
            assert dry.json()["written"] == 0
            assert {t: count_checkpoints(saver, t) for t in (chat, waiting)} == before_counts

            done = gk(*target.argv("--all", "--json"))
            assert done.code == 0, done.err
            report = {t["thread_id"]: t for t in done.json()["threads"]}
            for thread_id in (chat, waiting):
                assert report[thread_id]["status"] == "materialized"
                assert report[thread_id]["verified"] is True
                (ns,) = report[thread_id]["namespaces"]
                assert ns["channels"] == {"messages": len(expected[thread_id])}
                head = saver.get_tuple(config(thread_id))
                assert (
                    head.metadata[MATERIALIZED_KEY]["from_checkpoint_id"]
                    == ns["source_checkpoint_id"]
                )
                assert head.metadata["source"] == "update"
                assert count_checkpoints(saver, thread_id) == before_counts[thread_id] + 1
                # the current LangGraph reads the materialized head as before
                assert shown(graph, thread_id) == expected[thread_id]
            # like after update_state: the same next step, no pending interrupt
            state = graph.get_state(config(waiting))
            assert state.next == ("ask",) and state.interrupts == ()

            again = gk(*target.argv("--all", "--json"))
            assert again.code == 0, again.err
            assert again.json()["written"] == 0
            assert {t["status"] for t in again.json()["threads"]} == {"already_plain"}

            # after: every message, in order; the chat goes on; the interrupt resumes
            after = {t: old.ask("read", t) for t in (chat, waiting)}
            assert after[chat]["messages"] == expected[chat]
            assert after[waiting]["messages"] == expected[waiting]
            assert after[waiting]["next"] == ["ask"] and after[waiting]["interrupts"] == []
            more = old.ask("turn", chat, text="one more question", id="h-more")
            assert more["messages"][:-2] == expected[chat]
            assert more["messages"][-2:] == [
                ["human", "h-more", "one more question"],
                ["ai", "ai-h-more", "answer to one more question"],
            ]
            resumed = old.ask("resume", waiting, value="yes")
            assert resumed["messages"] == [
                *expected[waiting],
                ["ai", "ai-approved-yes", "approved: yes"],
            ]
            assert resumed["next"] == []
        finally:
            old.close()
        print(
            f"\n{target.name}: LangGraph 1.1.10 saw {len(before[chat]['messages'])} of"
            f" {len(expected[chat])} messages before, {len(after[chat]['messages'])} after;"
            f" interrupted thread {len(before[waiting]['messages'])} ->"
            f" {len(after[waiting]['messages'])} of {len(expected[waiting])}"
        )
        # the current LangGraph reads what LangGraph 1.1 wrote on top
        assert shown(graph, chat) == more["messages"]
        assert shown(graph, waiting) == resumed["messages"]
        graph.invoke({"messages": [HumanMessage("back on 1.2", id="h-back")]}, config(chat))
        assert shown(graph, chat)[-2:] == [
            ["human", "h-back", "back on 1.2"],
            ["ai", "ai-h-back", "answer to back on 1.2"],
        ]


# -- the lease, bad input, other reducers, an interrupted batch ----------------------------


def test_a_thread_locked_by_a_live_run_is_skipped_and_reported(native: Target) -> None:
    with native.saver() as saver:
        graph = chat_graph(saver)
        write_chat(graph, "busy")
        write_chat(graph, "free")
        counts = {t: count_checkpoints(saver, t) for t in ("busy", "free")}
        with saver.lock("busy", ttl=60):
            held = gk(*native.argv("--all", "--json"))
        assert held.code == 1, held.err
        report = {t["thread_id"]: t for t in held.json()["threads"]}
        assert report["busy"]["status"] == "locked" and report["busy"]["written"] == 0
        assert "locked by another run" in report["busy"]["reason"]
        assert report["free"]["status"] == "materialized"
        assert count_checkpoints(saver, "busy") == counts["busy"]
        assert count_checkpoints(saver, "free") == counts["free"] + 1
        text = gk(*native.argv("--thread", "busy"))
        assert text.code == 0, text.err
        assert text.out.startswith("busy: 1 checkpoint(s) written: messages (26); verified")
        assert count_checkpoints(saver, "busy") == counts["busy"] + 1


@pytest.mark.redis
def test_a_graph_that_cannot_be_imported_is_a_usage_error_and_writes_nothing() -> None:
    setup = next(s for s in all_setups() if s.name == "redis")
    store = Target("redis", setup.url, unique_prefix("mat"))
    with store.saver() as saver:
        write_chat(chat_graph(saver), "t1")
        count = count_checkpoints(saver, "t1")
        for spec, message in (
            ("no_such_app_module:graph", "cannot import 'no_such_app_module'"),
            ("tests.test_materialize:no_such_graph", "has no 'no_such_graph'"),
            ("tests.test_materialize:TEXTS", "is a list, not a compiled LangGraph graph"),
            ("tests.test_materialize", "--graph takes MODULE:ATTR"),
        ):
            result = gk(*store.argv("--all", "--graph", spec))
            assert result.code == 2, (spec, result.err)
            assert result.err.startswith("graphkeep: error: ") and message in result.err, result.err
            assert result.out == ""
        assert count_checkpoints(saver, "t1") == count


def append_batches(state: list[str] | None, batches: Any) -> list[str]:
    result = list(state or [])
    for batch in batches:
        result.extend(batch)
    return result


class ItemsState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]
    items: Annotated[list[str], DeltaChannel(append_batches, snapshot_frequency=3)]


def _note(state: ItemsState) -> dict[str, Any]:
    n = len(state["items"])
    return {"items": [f"item {n}", f"item {n + 1}"], "messages": [AIMessage(f"{n}", id=f"a{n}")]}


class InnerState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]
    log: Annotated[list[str], DeltaChannel(append_batches)]


def _log(state: InnerState) -> dict[str, Any]:
    return {"log": [f"saw {len(state['messages'])} messages"]}


def _subgraph() -> Any:
    builder = StateGraph(InnerState)
    builder.add_node("log", _log)
    builder.add_edge(START, "log")
    builder.add_edge("log", END)
    return builder.compile()


def items_graph(saver: Any) -> Any:
    """``note`` writes two items and a message; ``inner``, a subgraph, keeps a ``log`` (a
    DeltaChannel of strings) in a namespace of its own."""
    builder = StateGraph(ItemsState)
    builder.add_node("note", _note)
    builder.add_node("inner", _subgraph())
    builder.add_edge(START, "note")
    builder.add_edge("note", "inner")
    builder.add_edge("inner", END)
    return builder.compile(checkpointer=saver)


#: the app's graph, as ``--graph tests.test_materialize:ITEMS_GRAPH`` loads it
ITEMS_GRAPH = items_graph(None)
#: the same app's graph as its builder (``--graph`` compiles it)
ITEMS_BUILDER = ITEMS_GRAPH.builder


def test_graph_takes_a_compiled_graph_a_builder_or_a_factory() -> None:
    """``--graph`` gives materialize a compiled graph: a ``StateGraph`` builder (which has
    ``channels`` of its own, but no subgraphs) is compiled, a factory called."""
    compiled = load_graph("tests.test_materialize:ITEMS_GRAPH")
    assert compiled is ITEMS_GRAPH
    built = load_graph("tests.test_materialize:ITEMS_BUILDER")
    assert hasattr(built, "get_state") and built is not ITEMS_BUILDER
    assert {name for name, _ in built.get_subgraphs()} == {"inner"}
    made = load_graph("tests.test_materialize:items_graph_factory")
    assert hasattr(made, "get_state")
    with pytest.raises(UsageError, match="not a compiled LangGraph graph"):
        load_graph("tests.test_materialize:ItemsState")


def items_graph_factory() -> Any:
    return items_graph(None)


@pytest.fixture(params=["redis", "sqlite"])
def two_kinds(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A graphkeep store and a LangGraph one: the reducer choice does not depend on more."""
    if request.param == "sqlite":
        return Target("sqlite", f"sqlite:///{tmp_path / 'items.db'}", None)
    setup = next(s for s in all_setups() if s.name == "redis")
    return Target("redis", setup.url, unique_prefix("mat"))


def test_a_delta_channel_that_is_not_messages_needs_the_app_graph(two_kinds: Target) -> None:
    target = two_kinds
    with target.saver() as saver:
        graph = items_graph(saver)
        for n in range(4):
            graph.invoke({"messages": [HumanMessage(f"q{n}", id=f"h{n}")]}, config("items"))
        expected = graph.get_state(config("items")).values
        assert len(expected["items"]) == 8 and len(expected["messages"]) == 8
        count = count_checkpoints(saver, "items")

        refused = gk(*target.argv("--thread", "items", "--json"))
        assert refused.code == 1
        (thread,) = refused.json()["threads"]
        assert thread["status"] == "failed" and thread["written"] == 0
        assert "channel 'items' is not a list of messages" in thread["reason"]
        assert "channel 'log' is not a list of messages" in thread["reason"]
        assert "--graph module:attr" in thread["reason"]
        assert count_checkpoints(saver, "items") == count

        # --channel: only the messages (the built-in reducer); items and log stay deltas, and
        # the current LangGraph still replays them across the new checkpoints
        first = gk(*target.argv("--thread", "items", "--channel", "messages"))
        assert first.code == 0, first.err
        head = saver.get_tuple(config("items"))
        assert head.metadata[MATERIALIZED_KEY]["channels"] == ["messages"]
        assert "items" not in head.checkpoint["channel_values"]
        assert head.metadata["counters_since_delta_snapshot"]["items"][1] >= 1
        assert graph.get_state(config("items")).values == expected

        done = gk(
            *target.argv("--thread", "items", "--graph", "tests.test_materialize:ITEMS_GRAPH")
        )
        assert done.code == 0, done.err
        namespaces = {
            str(t.config["configurable"]["checkpoint_ns"]).split(":")[0]
            for t in saver.list(config("items"))
        }
        assert namespaces == {"", "inner"}
        heads = {
            ns: saver.get_tuple({"configurable": {"thread_id": "items", "checkpoint_ns": ns}})
            for ns in {
                str(t.config["configurable"]["checkpoint_ns"]) for t in saver.list(config("items"))
            }
        }
        assert len(heads) == 5  # the root and one namespace per run of the subgraph
        for ns, head in heads.items():
            values = head.checkpoint["channel_values"]
            if ns:
                assert head.metadata[MATERIALIZED_KEY]["channels"] == ["log"]
                assert len(values["log"]) == 1 and values["log"][0].startswith("saw ")
            else:
                assert head.metadata[MATERIALIZED_KEY]["channels"] == ["items"]
            assert "counters_since_delta_snapshot" not in head.metadata
        assert heads[""].checkpoint["channel_values"]["items"] == expected["items"]
        assert heads[""].checkpoint["channel_values"]["messages"] == expected["messages"]
        assert graph.get_state(config("items")).values == expected
        assert count_checkpoints(saver, "items") == count + 2 * len(heads)


def test_an_interrupted_batch_is_finished_by_running_it_again(native: Target) -> None:
    with native.saver() as saver:
        graph = chat_graph(saver)
        threads = ["a", "b", "c"]
        for thread_id in threads:
            write_chat(graph, thread_id)
        counts = {t: count_checkpoints(saver, t) for t in threads}
        # the batch stopped after its first thread (the Python function, as an app calls it)
        first = materialize(saver, "a")
        assert (first.status, first.written, first.verified) == ("materialized", 1, True)
        rest = gk(*native.argv("--all", "--json"))
        assert rest.code == 0, rest.err
        statuses = {t["thread_id"]: t["status"] for t in rest.json()["threads"]}
        assert statuses == {"a": "already_plain", "b": "materialized", "c": "materialized"}
        assert {t: count_checkpoints(saver, t) for t in threads} == {
            t: n + 1 for t, n in counts.items()
        }
        dry = materialize(saver, "a", dry_run=True)
        assert (dry.status, dry.written) == ("already_plain", 0)


@pytest.mark.redis
def test_an_encrypted_thread_is_materialized_encrypted_with_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "0123456789abcdef0123456789abcdef"
    setup = next(s for s in all_setups() if s.name == "redis")
    store = Target("redis", setup.url, unique_prefix("mat"))
    serde = EncryptedSerializer.from_pycryptodome_aes(key=key.encode())
    with graphkeep.connect(store.url, key_prefix=store.key_prefix, serde=serde) as saver:
        graph = chat_graph(saver)
        write_chat(graph, "secret")
        expected = shown(graph, "secret")
        count = count_checkpoints(saver, "secret")
        monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
        refused = gk(*store.argv("--thread", "secret"))
        assert refused.code == 1 and "graphkeep: error: " in refused.err
        assert count_checkpoints(saver, "secret") == count
        monkeypatch.setenv("LANGGRAPH_AES_KEY", key)
        done = gk(*store.argv("--thread", "secret", "--json"))
        assert done.code == 0, done.err
        assert done.json()["threads"][0]["verified"] is True
        assert count_checkpoints(saver, "secret") == count + 1
        assert shown(graph, "secret") == expected
    monkeypatch.delenv("LANGGRAPH_AES_KEY")
    dumped = gk("dump", store.url, "--thread-id", "secret", "--channel", "messages",
                "--key-prefix", str(store.key_prefix))  # fmt: skip
    entry = dumped.json()["channels"]["messages"]
    assert (
        entry["seed_checkpoint_id"] == done.json()["threads"][0]["namespaces"][0]["checkpoint_id"]
    )
    # a shared list (graphkeep.checkpoint.lists): each element stored encrypted
    assert entry["seed"] == [{"__encrypted__": "msgpack+aes"}] * len(expected)


@pytest.mark.redis
async def test_amaterialize_drives_the_same_code_on_an_async_saver() -> None:
    setup = next(s for s in all_setups() if s.name == "redis")
    async with graphkeep.aconnect(setup.url, key_prefix=unique_prefix("mat")) as saver:
        graph = chat_graph(saver)
        for n, text in enumerate(TEXTS):
            await graph.ainvoke({"messages": [HumanMessage(text, id=f"h{n}")]}, config("t"))
        expected = (await graph.aget_state(config("t"))).values["messages"]
        report = await amaterialize(saver, "t")
        assert (report.status, report.written, report.verified) == ("materialized", 1, True)
        head = await saver.aget_tuple(config("t"))
        assert head is not None and head.checkpoint["channel_values"]["messages"] == expected
        assert (await amaterialize(saver, "t")).status == "already_plain"
        # the current LangGraph goes on from the plain value, as a DeltaChannel again
        await graph.ainvoke(
            {"messages": [{"role": "user", "content": "more", "id": "m"}]}, config("t")
        )
        after = (await graph.aget_state(config("t"))).values["messages"]
        assert after[:-2] == expected and [m.id for m in after[-2:]] == ["m", "ai-m"]
        head = await saver.aget_tuple(config("t"))
        assert head is not None and "messages" not in head.checkpoint["channel_values"]
        assert (await amaterialize(saver, "t", dry_run=True)).status == "would_materialize"


def test_the_cli_runs_without_langgraphs_runtime_and_materialize_says_what_it_needs() -> None:
    """graphkeep needs only langgraph-checkpoint: its other commands start without the runtime,
    and materialize, which reduces with the runtime's DeltaChannel, says what to install."""
    script = (
        "import sys\n"
        "runtime = ('langgraph.graph', 'langgraph.channels',\n"
        "           'langgraph.pregel', 'langgraph.types')\n"
        "for m in runtime:\n"
        "    sys.modules[m] = None\n"
        "from graphkeep.cli import main\n"
        "assert main(['threads', '--help']) == 0\n"
        "sys.exit(main(['materialize', 'sqlite:///nothing-here.db', '--all']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "needs LangGraph 1.2 or later" in done.stderr
    assert "usage: graphkeep threads" in done.stdout
