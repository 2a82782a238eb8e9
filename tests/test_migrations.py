"""Schema migrations (``schema_version=`` / ``migrations=``, ``graphkeep migrate``) on every
backend set-up, sync and async, on real servers.

The proof: an app interrupts a thread under schema 1 (a HITL approval pending), is redeployed
with schema 2 (``title`` renamed ``name``; ``tags``, an ``operator.add`` list, moved to a new
channel ``tag_set`` with a de-duplicating reducer, as the notes advise instead of changing a
reducer in place), and the version-2 graph resumes the interrupted thread to the right final
state; time travel to a version-1 checkpoint works under version 2; ``graphkeep migrate`` then
leaves every head at version 2 and the same resumptions still pass.
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphkeep
from graphkeep.checkpoint.migrations import StateUpgrade
from graphkeep.connect import class_for
from graphkeep.errors import (
    ConfigurationError,
    MigrationFailed,
    SchemaError,
    SchemaVersionTooNew,
)
from tests.cli_runs import gk
from tests.conftest import unique_prefix
from tests.scenarios.backends import MODES, SETUPS, Backend

# -- the app, version 1 and version 2 --------------------------------------------------------


def dedupe(current: list[str] | None, update: list[str] | None) -> list[str]:
    out = list(current or [])
    out += [x for x in dict.fromkeys(update or []) if x not in out]
    return out


class StateV1(TypedDict, total=False):
    title: str
    tags: Annotated[list[str], operator.add]
    approved: bool


class StateV2(TypedDict, total=False):
    name: str
    tag_set: Annotated[list[str], dedupe]
    approved: bool


def v1_graph(saver: Any) -> Any:
    def approve(state: StateV1) -> dict[str, Any]:
        answer = interrupt({"title": state["title"]})
        return {"approved": answer == "yes", "tags": ["reviewed"]}

    g = StateGraph(StateV1)
    g.add_node("draft", lambda s: {"title": s["title"].strip(), "tags": ["draft"]})
    g.add_node("approve", approve)
    g.add_node("finish", lambda s: {"tags": ["done"], "title": s["title"] + " (final)"})
    g.add_edge(START, "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", "finish")
    g.add_edge("finish", END)
    return g.compile(checkpointer=saver)


def v2_graph(saver: Any) -> Any:
    def approve(state: StateV2) -> dict[str, Any]:
        answer = interrupt({"name": state["name"]})
        return {"approved": answer == "yes", "tag_set": ["reviewed", "a"]}

    g = StateGraph(StateV2)
    g.add_node("draft", lambda s: {"name": s["name"].strip(), "tag_set": ["draft"]})
    g.add_node("approve", approve)
    g.add_node("finish", lambda s: {"tag_set": ["done"], "name": s["name"] + " (final)"})
    g.add_edge(START, "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", "finish")
    g.add_edge("finish", END)
    return g.compile(checkpointer=saver)


def upgrade_1_to_2(state: StateUpgrade) -> None:
    state.rename("title", "name")
    state.move("tags", "tag_set", value=lambda tags: dedupe([], tags))


MIGRATIONS = {1: upgrade_1_to_2}
V2 = {"schema_version": 2, "migrations": MIGRATIONS}
FINAL_YES = {
    "name": "Report (final)",
    "tag_set": ["a", "draft", "reviewed", "done"],
    "approved": True,
}
FINAL_NO = {**FINAL_YES, "approved": False}
INTERRUPTED_V2 = {"name": "Report", "tag_set": ["a", "draft"]}


def failing(state: StateUpgrade) -> None:
    raise KeyError("no such field")


# -- running it on a backend, sync or async -----------------------------------------------------


class App:
    """A compiled graph on a saver, called sync or async as ``mode`` says."""

    def __init__(self, graph: Any, mode: str) -> None:
        self.graph, self.mode = graph, mode

    async def invoke(self, value: Any, config: Any) -> Any:
        if self.mode == "sync":
            return self.graph.invoke(value, config)
        return await self.graph.ainvoke(value, config)

    async def state(self, config: Any) -> Any:
        if self.mode == "sync":
            return self.graph.get_state(config)
        return await self.graph.aget_state(config)

    async def history(self, config: Any) -> list[Any]:
        if self.mode == "sync":
            return list(self.graph.get_state_history(config))
        return [s async for s in self.graph.aget_state_history(config)]


@asynccontextmanager
async def opened(backend: Backend, prefix: str, mode: str, **options: Any) -> AsyncIterator[Any]:
    if mode == "sync":
        with graphkeep.connect(backend.url, key_prefix=prefix, **options) as saver:
            yield saver
    else:
        async with graphkeep.aconnect(backend.url, key_prefix=prefix, **options) as saver:
            yield saver


def cfg(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


@pytest.fixture(params=[b.param() for b in SETUPS])
def backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def prefix(backend: Backend) -> Any:
    name = unique_prefix("mig")
    yield name
    backend.raw.purge(backend.url, name)


async def interrupt_under_v1(backend: Backend, prefix: str, mode: str, thread: str) -> None:
    async with opened(backend, prefix, mode, schema_version=1) as saver:
        app = App(v1_graph(saver), mode)
        # the app's metadata (a user id) lands in the checkpoints' metadata
        started = {**cfg(thread), "metadata": {"user_id": "u-7"}}
        out = await app.invoke({"title": " Report ", "tags": ["a", "a"]}, started)
        assert out["__interrupt__"][0].value == {"title": "Report"}


# -- the proof ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_v2_resumes_a_thread_interrupted_under_v1_and_time_travels_to_v1(
    backend: Backend, prefix: str, mode: str
) -> None:
    await interrupt_under_v1(backend, prefix, mode, "t1")
    async with opened(backend, prefix, mode, **V2) as saver:
        app = App(v2_graph(saver), mode)
        history = await app.history(cfg("t1"))
        assert [h.metadata["schema_version"] for h in history] == [1, 1, 1]
        interrupted = history[0]
        assert interrupted.values == INTERRUPTED_V2 and interrupted.next == ("approve",)
        assert await app.invoke(Command(resume="yes"), cfg("t1")) == FINAL_YES
        head = await app.state(cfg("t1"))
        assert head.metadata["schema_version"] == 2 and head.next == ()
        # the v1 checkpoint now holds v2 writes of the resume beside its v1 ones: read again,
        # the state is as before (the migration leaves writes already on tag_set alone)
        again = await app.state(interrupted.config)
        assert again.values == INTERRUPTED_V2 and again.next == ("approve",)
        if mode == "sync":
            stored = saver.get_tuple(interrupted.config)
        else:
            stored = await saver.aget_tuple(interrupted.config)
        channels = [(ch, value) for _, ch, value in stored.pending_writes]
        assert ("tag_set", ["reviewed", "a"]) in channels and ("approved", True) in channels
        assert not any(ch in ("tags", "title") for ch, _ in channels)
        assert stored.metadata["schema_version"] == 1
        # time travel: the v1 checkpoint before `draft`, read and replayed under v2
        before_draft = history[1]
        assert before_draft.values == {"name": " Report ", "tag_set": ["a"]}
        out = await app.invoke(None, before_draft.config)
        assert out["__interrupt__"][0].value == {"name": "Report"}
        assert await app.invoke(Command(resume="no"), cfg("t1")) == FINAL_NO


@pytest.mark.parametrize("mode", MODES)
async def test_put_records_schema_version_and_unversioned_savers_add_nothing(
    backend: Backend, prefix: str, mode: str
) -> None:
    async with opened(backend, prefix, mode) as saver:
        app = App(v1_graph(saver), mode)
        await app.invoke({"title": "x", "tags": []}, cfg("plain"))
        assert all("schema_version" not in h.metadata for h in await app.history(cfg("plain")))
    async with opened(backend, prefix, mode, schema_version=1) as saver:
        found = (
            [t async for t in saver.alist(cfg("plain"))]
            if mode == "async"
            else list(saver.list(cfg("plain")))
        )
        # an unversioned checkpoint is read as the running version when there is no chain
        assert found and all("schema_version" not in t.metadata for t in found)
        versioned = App(v1_graph(saver), mode)
        await versioned.invoke({"title": "y", "tags": []}, cfg("versioned"))
        if mode == "sync":
            filtered = list(saver.list(None, filter={"schema_version": 1}))
        else:
            filtered = [t async for t in saver.alist(None, filter={"schema_version": 1})]
        assert {t.config["configurable"]["thread_id"] for t in filtered} == {"versioned"}


async def test_unversioned_checkpoints_read_as_the_first_version_of_the_chain(
    backend: Backend, prefix: str
) -> None:
    async with opened(backend, prefix, "sync") as saver:
        App(v1_graph(saver), "sync").graph.invoke({"title": " Report ", "tags": ["a"]}, cfg("t"))
    async with opened(backend, prefix, "sync", **V2) as saver:
        app = App(v2_graph(saver), "sync")
        state = await app.state(cfg("t"))
        assert state.values == INTERRUPTED_V2
        assert await app.invoke(Command(resume="yes"), cfg("t")) == FINAL_YES


# -- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_checkpoint_newer_than_the_running_code_is_refused(
    backend: Backend, prefix: str, mode: str
) -> None:
    await interrupt_under_v1(backend, prefix, "sync", "t1")
    async with opened(backend, prefix, mode, **V2) as saver:
        await App(v2_graph(saver), mode).invoke(Command(resume="yes"), cfg("t1"))
    async with opened(backend, prefix, mode, schema_version=1) as saver:
        app = App(v1_graph(saver), mode)
        with pytest.raises(SchemaVersionTooNew) as caught:
            await app.state(cfg("t1"))
        error = caught.value
        assert isinstance(error, SchemaError)
        assert (error.thread_id, error.stored_version, error.running_version) == ("t1", 2, 1)
        assert "'t1'" in str(error) and error.checkpoint_id in str(error)


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_migration_names_thread_checkpoint_and_step_and_writes_nothing(
    backend: Backend, prefix: str, mode: str
) -> None:
    await interrupt_under_v1(backend, prefix, "sync", "t1")
    before = backend.raw.data(backend.url, prefix)
    async with opened(backend, prefix, mode, schema_version=2, migrations={1: failing}) as saver:
        app = App(v2_graph(saver), mode)
        with pytest.raises(MigrationFailed) as caught:
            await app.invoke(Command(resume="yes"), cfg("t1"))
    error = caught.value
    assert isinstance(error, SchemaError) and error.thread_id == "t1" and error.step == 1
    assert "'t1'" in str(error) and error.checkpoint_id in str(error)
    assert "1 → 2" in str(error) and isinstance(error.__cause__, KeyError)
    assert backend.raw.data(backend.url, prefix) == before


def test_connect_checks_the_chain(backend: Backend, prefix: str) -> None:
    cases: list[dict[str, Any]] = [
        {"schema_version": 3, "migrations": {1: upgrade_1_to_2}},  # no step 2 → 3
        {"schema_version": 2, "migrations": {1: upgrade_1_to_2, 2: upgrade_1_to_2}},
        {"schema_version": 0},
        {"schema_version": "2"},
        {"migrations": MIGRATIONS},
        {"schema_version": 2, "migrations": {1: "not callable"}},
        {"schema_version": 2, "migrations": {"1": upgrade_1_to_2}},
    ]
    for options in cases:
        with (
            pytest.raises(ConfigurationError),
            graphkeep.connect(backend.url, key_prefix=prefix, setup=False, **options),
        ):
            pass
    with (
        pytest.raises(ConfigurationError, match="2 → 3"),
        graphkeep.connect(
            backend.url,
            key_prefix=prefix,
            setup=False,
            schema_version=4,
            migrations={1: upgrade_1_to_2, 3: upgrade_1_to_2},
        ),
    ):
        pass


async def test_the_saver_classes_take_the_options_too(backend: Backend, prefix: str) -> None:
    sync_class = class_for(backend.url)
    async_class = class_for(backend.url, is_async=True)
    with pytest.raises(ConfigurationError, match="2 → 3"):
        with sync_class.from_url(
            backend.url, key_prefix=prefix, schema_version=3, migrations=MIGRATIONS
        ):
            pass
    with pytest.raises(ConfigurationError, match="2 → 3"):
        async with async_class.from_url(
            backend.url, key_prefix=prefix, schema_version=3, migrations=MIGRATIONS
        ):
            pass
    with sync_class.from_url(backend.url, key_prefix=prefix, **V2) as saver:
        assert saver.state_schema.version == 2
    async with async_class.from_url(backend.url, key_prefix=prefix, **V2) as saver:
        assert saver.state_schema.version == 2


# -- graphkeep migrate ------------------------------------------------------------------------

FAILING = {1: failing}


def migrate(backend: Backend, prefix: str, *argv: str) -> tuple[int, Any]:
    done = gk(
        "migrate",
        backend.url,
        "--to",
        "2",
        *argv,
        "--key-prefix",
        prefix,
        "--json",
    )
    return done.code, done.json()


def by_thread(report: Any) -> dict[str, Any]:
    return {t["thread_id"]: t for t in report["threads"]}


async def three_v1_threads(backend: Backend, prefix: str) -> None:
    """t1, t2 interrupted under v1; t3 finished under v1."""
    await interrupt_under_v1(backend, prefix, "sync", "t1")
    await interrupt_under_v1(backend, prefix, "sync", "t2")
    await interrupt_under_v1(backend, prefix, "sync", "t3")
    async with opened(backend, prefix, "sync", schema_version=1) as saver:
        v1_graph(saver).invoke(Command(resume="yes"), cfg("t3"))


@pytest.mark.parametrize("mode", MODES)
async def test_migrate_leaves_every_head_at_v2_and_the_resumptions_still_pass(
    backend: Backend, prefix: str, mode: str
) -> None:
    await three_v1_threads(backend, prefix)
    code, report = migrate(
        backend, prefix, "--migrations", "tests.test_migrations:MIGRATIONS", "--all"
    )
    assert code == 0 and report["ok"], report
    threads = by_thread(report)
    assert {t: r["status"] for t, r in threads.items()} == dict.fromkeys(
        ("t1", "t2", "t3"), "migrated"
    )
    (t1,) = threads["t1"]["namespaces"]
    assert t1["from_version"] == 1 and t1["verified"] and t1["interrupted"]
    assert t1["channels_changed"] == ["name", "tag_set"]
    async with opened(backend, prefix, mode, **V2) as saver:
        app = App(v2_graph(saver), mode)
        for thread in ("t1", "t2", "t3"):
            head = await app.state(cfg(thread))
            assert head.metadata["schema_version"] == 2
            assert head.metadata["graphkeep_migrate"]["from_version"] == 1
            if thread == "t1":  # the head migrate appended after keeps the app's metadata
                assert head.metadata["user_id"] == "u-7"
            assert len(await app.history(cfg(thread))) in (4, 6)  # history kept, one appended
        interrupted = await app.state(cfg("t1"))
        # the interrupt is raised again when `approve` runs: none is pending on the new head
        assert interrupted.values == INTERRUPTED_V2 and interrupted.next == ("approve",)
        assert interrupted.interrupts == ()
        assert await app.invoke(Command(resume="yes"), cfg("t1")) == FINAL_YES
        assert (await app.state(cfg("t3"))).values == FINAL_YES
        # time travel on a migrated thread to its v1 checkpoint before `draft`
        before_draft = (await app.history(cfg("t2")))[2]
        assert before_draft.metadata["schema_version"] == 1
        out = await app.invoke(None, before_draft.config)
        assert out["__interrupt__"][0].value == {"name": "Report"}
        assert await app.invoke(Command(resume="no"), cfg("t2")) == FINAL_NO
    # the same without the migrations: every head reads as stored, at v2
    async with opened(backend, prefix, "sync", schema_version=2) as saver:
        assert v2_graph(saver).get_state(cfg("t3")).values == FINAL_YES
    before = backend.raw.data(backend.url, prefix)
    code, again = migrate(
        backend, prefix, "--migrations", "tests.test_migrations:MIGRATIONS", "--all"
    )
    assert code == 0 and again["summary"]["up_to_date"] == 3
    assert backend.raw.data(backend.url, prefix) == before


async def test_migrate_dry_run_writes_nothing(backend: Backend, prefix: str) -> None:
    await three_v1_threads(backend, prefix)
    before = backend.raw.data(backend.url, prefix)
    code, report = migrate(
        backend, prefix, "--migrations", "tests.test_migrations:MIGRATIONS", "--all", "--dry-run"
    )
    assert code == 0 and report["dry_run"]
    assert {r["status"] for r in report["threads"]} == {"would_migrate"}
    assert all(n["checkpoint_id"] is None for r in report["threads"] for n in r["namespaces"])
    assert backend.raw.data(backend.url, prefix) == before


async def test_migrate_skips_a_locked_thread_and_a_rerun_finishes_without_migrating_twice(
    backend: Backend, prefix: str
) -> None:
    await three_v1_threads(backend, prefix)
    spec = "tests.test_migrations:MIGRATIONS"
    code, first = migrate(
        backend, prefix, "--migrations", spec, "--thread", "t3"
    )  # a batch cut short
    assert code == 0 and by_thread(first)["t3"]["status"] == "migrated"
    async with opened(backend, prefix, "sync") as saver:
        with saver.lock("t1", ttl=30):  # a live run holds t1
            code, second = migrate(backend, prefix, "--migrations", spec, "--all")
        counts = {t: len(list(saver.list(cfg(t)))) for t in ("t1", "t2", "t3")}
    threads = by_thread(second)
    assert code == 1 and not second["ok"]
    assert threads["t1"]["status"] == "locked" and "lease" in threads["t1"]["problems"][0]
    assert threads["t2"]["status"] == "migrated" and threads["t3"]["status"] == "up_to_date"
    assert counts == {"t1": 3, "t2": 4, "t3": 6}
    code, third = migrate(backend, prefix, "--migrations", spec, "--all")
    assert code == 0 and {t: r["status"] for t, r in by_thread(third).items()} == {
        "t1": "migrated",
        "t2": "up_to_date",
        "t3": "up_to_date",
    }
    async with opened(backend, prefix, "sync") as saver:
        assert {t: len(list(saver.list(cfg(t)))) for t in counts} == {"t1": 4, "t2": 4, "t3": 6}


async def test_migrate_with_a_failing_migration_reports_it_and_writes_nothing(
    backend: Backend, prefix: str
) -> None:
    await interrupt_under_v1(backend, prefix, "sync", "t1")
    before = backend.raw.data(backend.url, prefix)
    code, report = migrate(
        backend, prefix, "--migrations", "tests.test_migrations:FAILING", "--all"
    )
    (t1,) = report["threads"]
    assert code == 1 and t1["status"] == "failed"
    assert "'t1'" in t1["problems"][0] and "1 → 2" in t1["problems"][0]
    assert backend.raw.data(backend.url, prefix) == before


# -- DeltaChannel history across a rename ---------------------------------------------------


def concat(state: list[str] | None, writes: Any) -> list[str]:
    out = list(state or [])
    for w in writes:
        out += w
    return out


class ChatV1(TypedDict, total=False):
    chat: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=3)]


class ChatV2(TypedDict, total=False):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=3)]


def chat_graph(state: Any, channel: str, saver: Any) -> Any:
    g = StateGraph(state)
    g.add_node("say", lambda s: {channel: [f"m{len(s.get(channel) or [])}"]})
    g.add_edge(START, "say")
    g.add_edge("say", END)
    return g.compile(checkpointer=saver)


def rename_chat(state: StateUpgrade) -> None:
    state.rename("chat", "log")


async def test_delta_channel_history_reads_a_renamed_channel_under_its_older_name(
    backend: Backend, prefix: str
) -> None:
    async with opened(backend, prefix, "sync", schema_version=1) as saver:
        v1 = chat_graph(ChatV1, "chat", saver)
        for _ in range(5):
            v1.invoke({}, cfg("c"))
        assert v1.get_state(cfg("c")).values["chat"] == ["m0", "m1", "m2", "m3", "m4"]
        v1_history = list(v1.get_state_history(cfg("c")))
    async with opened(
        backend, prefix, "sync", schema_version=2, migrations={1: rename_chat}
    ) as saver:
        v2 = chat_graph(ChatV2, "log", saver)
        assert v2.get_state(cfg("c")).values == {"log": ["m0", "m1", "m2", "m3", "m4"]}
        middle = v1_history[4]  # a v1 checkpoint between snapshots
        assert v2.get_state(middle.config).values == {"log": middle.values["chat"]}
        # v2 checkpoints on v1 ancestors: the history of `log` reads `chat` below them
        v2.invoke({}, cfg("c"))
        v2.invoke({}, cfg("c"))
        assert v2.get_state(cfg("c")).values == {"log": [f"m{n}" for n in range(7)]}
        assert saver.get_tuple(cfg("c")).metadata["schema_version"] == 2


# -- subgraphs ------------------------------------------------------------------------------


class ReviewV1(TypedDict, total=False):
    title: str
    approved: bool


class ReviewV2(TypedDict, total=False):
    name: str
    approved: bool


def review_graph(state: Any, field: str, saver: Any) -> Any:
    """A parent whose `review` node is a subgraph interrupting for approval."""

    def ask(s: Any) -> dict[str, Any]:
        answer = interrupt({field: s[field]})
        return {"approved": answer == "yes", field: s[field] + "!"}

    sub = StateGraph(state)
    sub.add_node("ask", ask)
    sub.add_edge(START, "ask")
    sub.add_edge("ask", END)
    g = StateGraph(state)
    g.add_node("prep", lambda s: {field: s[field].upper()})
    g.add_node("review", sub.compile())
    g.add_edge(START, "prep")
    g.add_edge("prep", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def rename_title(state: StateUpgrade) -> None:
    state.rename("title", "name")


TITLE_TO_NAME = {1: rename_title}


@pytest.mark.parametrize("mode", MODES)
async def test_subgraph_state_interrupted_under_v1_resumes_under_v2_before_and_after_migrate(
    backend: Backend, prefix: str, mode: str
) -> None:
    async with opened(backend, prefix, mode, schema_version=1) as saver:
        v1 = App(review_graph(ReviewV1, "title", saver), mode)
        for thread in ("lazy", "migrated"):
            await v1.invoke({"title": "doc"}, cfg(thread))
    async with opened(backend, prefix, mode, schema_version=2, migrations=TITLE_TO_NAME) as saver:
        v2 = App(review_graph(ReviewV2, "name", saver), mode)
        config = cfg("lazy")
        if mode == "sync":
            state = v2.graph.get_state(config, subgraphs=True)
        else:
            state = await v2.graph.aget_state(config, subgraphs=True)
        assert state.tasks[0].state.values == {"name": "DOC"}
        assert await v2.invoke(Command(resume="yes"), cfg("lazy")) == {
            "name": "DOC!",
            "approved": True,
        }
    code, report = migrate(
        backend, prefix, "--migrations", "tests.test_migrations:TITLE_TO_NAME", "--all"
    )
    assert code == 0, report
    migrated = by_thread(report)["migrated"]
    assert sorted(bool(n["checkpoint_ns"]) for n in migrated["namespaces"]) == [False, True]
    async with opened(backend, prefix, mode, schema_version=2, migrations=TITLE_TO_NAME) as saver:
        v2 = App(review_graph(ReviewV2, "name", saver), mode)
        assert await v2.invoke(Command(resume="yes"), cfg("migrated")) == {
            "name": "DOC!",
            "approved": True,
        }


async def test_migrate_an_encrypted_store_with_the_apps_key(
    backend: Backend, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "0123456789abcdef0123456789abcdef"
    monkeypatch.setenv("LANGGRAPH_AES_KEY", key)
    serde = EncryptedSerializer.from_pycryptodome_aes(key=key.encode())
    async with opened(backend, prefix, "sync", schema_version=1, serde=serde) as saver:
        v1_graph(saver).invoke({"title": " Report ", "tags": ["a", "a"]}, cfg("t1"))
    code, report = migrate(
        backend, prefix, "--migrations", "tests.test_migrations:MIGRATIONS", "--all"
    )
    assert code == 0 and by_thread(report)["t1"]["status"] == "migrated"
    async with opened(backend, prefix, "sync", serde=serde, **V2) as saver:
        assert v2_graph(saver).invoke(Command(resume="yes"), cfg("t1")) == FINAL_YES


def move_chat_failing(state: StateUpgrade) -> None:
    state.move("chat", "log", write=lambda update: update["missing"])


async def test_a_failing_transform_of_delta_channel_history_names_where(
    backend: Backend, prefix: str
) -> None:
    async with opened(backend, prefix, "sync", schema_version=1) as saver:
        v1 = chat_graph(ChatV1, "chat", saver)
        for _ in range(2):
            v1.invoke({}, cfg("c"))
    options: dict[str, Any] = {"schema_version": 2, "migrations": {1: move_chat_failing}}
    async with opened(backend, prefix, "sync", **options) as saver:
        with pytest.raises(MigrationFailed) as caught:
            chat_graph(ChatV2, "log", saver).get_state(cfg("c"))
    error = caught.value
    assert error.thread_id == "c" and error.step == 1 and "'chat'" in str(error)
    assert isinstance(error.__cause__, TypeError)


def test_migrate_refuses_migrations_it_cannot_load_before_opening_the_store() -> None:
    # port 1: nothing listens there; the command stops before it would connect
    url = "redis://127.0.0.1:1/0"
    for spec, message in (
        ("no_such_app_module:MIGRATIONS", "cannot import 'no_such_app_module'"),
        ("tests.test_migrations:NO_SUCH", "has no 'NO_SUCH'"),
        ("tests.test_migrations:cfg", "is a function, not a mapping of version"),
        ("tests.test_migrations", "--migrations takes MODULE:ATTR"),
    ):
        done = gk("migrate", url, "--to", "2", "--migrations", spec, "--all")
        assert done.code == 2, (spec, done.err)
        assert done.err.startswith("graphkeep: error: ") and message in done.err, done.err
