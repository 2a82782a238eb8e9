"""No silent corruption on the read path (issue 23, item 3), on real servers: every backend
(``graphkeep_url``: Redis, Redis Cluster, MongoDB, DynamoDB), sync and async.

Real LangGraph graphs write a thread; one stored payload is then damaged with the backend's
own client (redis-py, pymongo, boto3): bytes of a channel value, a list element, a pending
write or the checkpoint's metadata made unreadable in place (the store's framing around them
intact), a compressed payload whose zlib stream no longer checks, a whole record replaced.
Reading through the graph (``get_state``, ``invoke`` to resume, ``get_state_history`` /
``list``) raises :class:`~graphkeep.errors.CorruptData` naming the place, never partial
state, and its message never quotes the damaged bytes. The same for store items (namespace
and key) and events (run and event id); a damaged cache entry is a logged miss.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
import uuid
import zlib
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

import graphkeep
from graphkeep.errors import CorruptData
from tests.scenarios.backends import DAMAGE, Rewrite
from tests.test_telemetry import two_nodes

MODES = ("sync", "async")

#: written into stored data, then made unreadable on the server
MARKER = b"corrupt-me-7f3a2c"
#: what a marker becomes: the same length, never valid UTF-8 (0xc1 is never used by msgpack)
BAD = b"\xc1" * len(MARKER)
#: a whole record replaced by bytes no reader reads
GARBAGE = b"\xc1" * 16


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- damaging stored bytes with the backend's own client ---------------------------------------


def garble(data: bytes) -> bytes | None:
    """The marker's bytes made unreadable in place (the framing around them intact)."""
    return data.replace(MARKER, BAD) if MARKER in data else None


def replace_whole(data: bytes) -> bytes | None:
    """A byte string holding the marker replaced whole: the store's own record is damaged."""
    return GARBAGE if MARKER in data else None


def _inflates_to_marker(data: bytes) -> bool:
    try:
        return MARKER in zlib.decompress(data)
    except (zlib.error, TypeError):
        return False


def _flip_last(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])  # the zlib stream's checksum no longer checks


def break_zlib(data: bytes) -> bytes | None:
    """A zlib-compressed payload holding the marker with its checksum damaged: either the
    stored bytes themselves (MongoDB's payload field, a DynamoDB item's value) or the data of
    a packed ``(tag, data)`` pair (a Redis hash field)."""
    if _inflates_to_marker(data):
        return _flip_last(data)
    try:
        pair = ormsgpack.unpackb(data)
    except (ormsgpack.MsgpackDecodeError, ValueError, TypeError):
        return None
    if (
        isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[1], bytes)
        and _inflates_to_marker(pair[1])
    ):
        return bytes(ormsgpack.packb([pair[0], _flip_last(pair[1])]))
    return None


def damage(backend: str, url: str, rewrite: Rewrite) -> None:
    assert DAMAGE[backend](url, rewrite) >= 1, "nothing stored held the marker"


def saver_options(backend: str, compressed: bool = False) -> dict[str, Any]:
    # DynamoDB compresses every item by default: the marker must stay findable on the server
    return {"compress": False} if backend == "dynamodb" and not compressed else {}


def assert_quotes_nothing(exc: BaseException) -> None:
    text = str(exc)
    for bad in (MARKER, BAD, GARBAGE):
        assert repr(bad)[2:-1] not in text
        assert bad.decode("latin-1") not in text
    assert "\\xc1" not in text


# -- graphs --------------------------------------------------------------------------------------


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


class TextState(TypedDict):
    text: str
    step: int


class Failing:
    """Fails its node until allowed to pass (a run to resume)."""

    def __init__(self) -> None:
        self.fail = True

    def __call__(self, state: LogState) -> dict[str, list[str]]:
        if self.fail:
            time.sleep(0.3)  # after ``good`` wrote: a failed step keeps its finished writes
            raise RuntimeError("planned failure")
        return {"log": ["bad done"]}


def fan_out(failing: Failing) -> StateGraph[Any]:
    """``good`` and ``bad`` run in one step: when ``bad`` fails, ``good``'s write is a pending
    write of the step's checkpoint, read back when the run resumes."""
    builder: StateGraph[Any] = StateGraph(LogState)
    builder.add_node("good", lambda state: {"log": [MARKER.decode()]})
    builder.add_node("bad", failing, retry_policy=RetryPolicy(max_attempts=1))
    builder.add_edge(START, "good")
    builder.add_edge(START, "bad")
    builder.add_edge("good", END)
    builder.add_edge("bad", END)
    return builder


def extend(state: list[str] | None, batches: Any) -> list[str]:
    out = list(state or [])
    for batch in batches:
        out.extend(batch)
    return out


class ChatState(TypedDict):
    messages: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=50)]


def text_graph() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(TextState)
    builder.add_node("grow", lambda state: {"step": state.get("step", 0) + 1})
    builder.add_edge(START, "grow")
    builder.add_edge("grow", END)
    return builder


def config_of(thread_id: str, **metadata: Any) -> Any:
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
    if metadata:
        config["metadata"] = metadata
    return config


class Run:
    """One graph on one saver, sync or async: the calls a test makes, either way."""

    def __init__(self, mode: str, backend: str, url: str, **options: Any) -> None:
        self.mode, self.backend, self.url, self.options = mode, backend, url, options

    def __call__(self, builder: StateGraph[Any], body: Callable[[Any, Any], Any]) -> None:
        """``body(graph, saver)`` (a coroutine function when async) on a fresh connection."""
        if self.mode == "sync":
            with graphkeep.connect(self.url, **self.options) as saver:
                body(builder.compile(checkpointer=saver), saver)
            return

        async def main() -> None:
            async with graphkeep.aconnect(self.url, **self.options) as saver:
                await body(builder.compile(checkpointer=saver), saver)

        asyncio.run(main())


def check_reads(
    run: Run,
    builder: StateGraph[Any],
    config: Any,
    expect: Callable[[CorruptData], None],
    resume: Any = None,
) -> None:
    """``get_state``, ``invoke`` (resume with ``resume``) and ``get_state_history`` each raise
    CorruptData that ``expect`` accepts, on a fresh connection."""
    errors: list[CorruptData] = []

    def sync_body(graph: Any, saver: Any) -> None:
        for call in (
            lambda: graph.get_state(config),
            lambda: graph.invoke(resume, config),
            lambda: list(graph.get_state_history(config)),
            lambda: list(saver.list(config)),
        ):
            with pytest.raises(CorruptData) as raised:
                call()
            errors.append(raised.value)

    async def async_body(graph: Any, saver: Any) -> None:
        async def history() -> list[Any]:
            return [s async for s in graph.aget_state_history(config)]

        async def listed() -> list[Any]:
            return [t async for t in saver.alist(config)]

        for call in (
            lambda: graph.aget_state(config),
            lambda: graph.ainvoke(resume, config),
            history,
            listed,
        ):
            with pytest.raises(CorruptData) as raised:
                await call()
            errors.append(raised.value)

    run(builder, sync_body if run.mode == "sync" else async_body)
    assert len(errors) == 4
    for exc in errors:
        assert_quotes_nothing(exc)
        expect(exc)


def write(run: Run, builder: StateGraph[Any], graph_input: Any, config: Any) -> Any:
    """Run the graph once; the config of the checkpoint it ended at."""
    out: list[Any] = []

    def sync_body(graph: Any, saver: Any) -> None:
        graph.invoke(graph_input, config)
        out.append(graph.get_state(config))

    async def async_body(graph: Any, saver: Any) -> None:
        await graph.ainvoke(graph_input, config)
        out.append(await graph.aget_state(config))

    run(builder, sync_body if run.mode == "sync" else async_body)
    return out[0]


def at_checkpoint(thread_id: str, checkpoint_id: str, channel: str | None) -> Any:
    def expect(exc: CorruptData) -> None:
        assert exc.thread_id == thread_id
        assert exc.checkpoint_ns == ""
        assert exc.checkpoint_id == checkpoint_id
        assert exc.channel == channel
        assert f"thread {thread_id!r}" in str(exc)
        assert f"checkpoint {checkpoint_id!r}" in str(exc)
        if channel is not None:
            assert f"channel {channel!r}" in str(exc)

    return expect


# -- checkpoints -----------------------------------------------------------------------------


def test_a_garbled_channel_value_raises_naming_the_channel(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    run = Run(mode, graphkeep_backend, graphkeep_url, **saver_options(graphkeep_backend))
    config = config_of(thread_id)
    state = write(run, two_nodes(), {"log": [MARKER.decode()]}, config)
    latest = state.config["configurable"]["checkpoint_id"]
    damage(graphkeep_backend, graphkeep_url, garble)

    def expect(exc: CorruptData) -> None:
        at_checkpoint(thread_id, latest, "log")(exc)
        assert exc.kind == "undecodable"
        assert "serializer" in exc.reason

    check_reads(run, two_nodes(), config, expect)


def test_an_encrypted_thread_read_without_its_key_says_so_and_never_to_delete_it(
    graphkeep_url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef0123456789abcdef")
    sealed = EncryptedSerializer.from_pycryptodome_aes()
    with graphkeep.connect(graphkeep_url, serde=sealed) as saver:
        two_nodes().compile(checkpointer=saver).invoke({"log": ["x"]}, config_of(thread_id))
    monkeypatch.setenv("LANGGRAPH_AES_KEY", "fedcba9876543210fedcba9876543210")
    other = EncryptedSerializer.from_pycryptodome_aes()
    for serde, why in ((None, "has no cipher"), (other, "does not decrypt with")):
        options = {} if serde is None else {"serde": serde}
        with graphkeep.connect(graphkeep_url, **options) as saver:
            with pytest.raises(CorruptData) as raised:
                saver.get_tuple(config_of(thread_id))
        assert why in str(raised.value) and "LANGGRAPH_AES_KEY" in str(raised.value)
        assert "delete it" not in str(raised.value)
        assert raised.value.thread_id == thread_id and raised.value.kind == "undecodable"


def test_a_garbled_list_element_raises_naming_the_channel_and_element(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    run = Run(mode, graphkeep_backend, graphkeep_url, **saver_options(graphkeep_backend))
    config = config_of(thread_id)
    # a list of 1 KB and more keeps its elements as records of their own (shared lists)
    filler = [f"line-{i:03d}-{uuid.uuid4().hex}" for i in range(40)]
    state = write(run, two_nodes(), {"log": [MARKER.decode(), *filler]}, config)
    latest = state.config["configurable"]["checkpoint_id"]
    damage(graphkeep_backend, graphkeep_url, garble)

    def expect(exc: CorruptData) -> None:
        at_checkpoint(thread_id, latest, "log")(exc)
        assert exc.place.part is not None and exc.place.part.startswith("list element ")
        assert exc.kind == "undecodable"

    check_reads(run, two_nodes(), config, expect)


def test_a_garbled_pending_write_raises_naming_the_task_and_channel(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    failing = Failing()
    run = Run(mode, graphkeep_backend, graphkeep_url, **saver_options(graphkeep_backend))
    config = config_of(thread_id)
    found: list[Any] = []

    def sync_body(graph: Any, saver: Any) -> None:
        with pytest.raises(RuntimeError, match="planned failure"):
            graph.invoke({"log": ["start"]}, config)
        found.append(graph.get_state(config))

    async def async_body(graph: Any, saver: Any) -> None:
        with pytest.raises(RuntimeError, match="planned failure"):
            await graph.ainvoke({"log": ["start"]}, config)
        found.append(await graph.aget_state(config))

    run(fan_out(failing), sync_body if mode == "sync" else async_body)
    state = found[0]
    (good,) = [t for t in state.tasks if t.name == "good"]
    checkpoint_id = state.config["configurable"]["checkpoint_id"]
    damage(graphkeep_backend, graphkeep_url, garble)
    failing.fail = False

    def expect(exc: CorruptData) -> None:
        at_checkpoint(thread_id, checkpoint_id, "log")(exc)
        assert exc.task_id == good.id
        assert exc.idx == 0
        assert f"pending write of task {good.id!r} (idx 0)" in str(exc)
        assert exc.kind == "undecodable"

    # resuming (invoke(None)) reads the pending write back: it must not run without it
    check_reads(run, fan_out(failing), config, expect)


def test_garbled_checkpoint_metadata_raises_naming_the_checkpoint(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    run = Run(mode, graphkeep_backend, graphkeep_url, **saver_options(graphkeep_backend))
    state = write(run, two_nodes(), {"log": ["hi"]}, config_of(thread_id, note=MARKER.decode()))
    latest = state.config["configurable"]["checkpoint_id"]
    damage(graphkeep_backend, graphkeep_url, garble)

    def expect(exc: CorruptData) -> None:
        at_checkpoint(thread_id, latest, None)(exc)
        assert exc.place.part == "metadata"
        assert "metadata" in str(exc)

    check_reads(run, two_nodes(), config_of(thread_id), expect)


def test_a_compressed_payload_that_does_not_inflate_raises_corrupt_data(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    # compressed as stored: graphkeep's own zlib payloads (Redis, MongoDB), DynamoDB's items
    run = Run(mode, graphkeep_backend, graphkeep_url)
    config = config_of(thread_id)
    text = MARKER.decode() + " and more words" * 200
    state = write(run, text_graph(), {"text": text}, config)
    latest = state.config["configurable"]["checkpoint_id"]
    damage(graphkeep_backend, graphkeep_url, break_zlib)

    def expect(exc: CorruptData) -> None:
        assert exc.thread_id == thread_id
        assert exc.checkpoint_ns == ""
        assert exc.kind == "corrupt_data"
        assert "decompress" in exc.reason
        at_checkpoint(thread_id, latest, "text")(exc)

    check_reads(run, text_graph(), config, expect, resume={"text": "again"})


def test_a_damaged_record_raises_corrupt_data_naming_the_thread(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    run = Run(mode, graphkeep_backend, graphkeep_url, **saver_options(graphkeep_backend))
    config = config_of(thread_id)
    write(run, two_nodes(), {"log": [MARKER.decode()]}, config)
    # the record itself: Redis' and DynamoDB's framing of the value, MongoDB's payload field
    damage(graphkeep_backend, graphkeep_url, replace_whole)

    def expect(exc: CorruptData) -> None:
        assert exc.thread_id == thread_id
        assert exc.checkpoint_ns == ""
        assert exc.kind in ("corrupt_data", "undecodable")

    check_reads(run, two_nodes(), config, expect)


def test_delta_channel_history_raises_naming_the_write(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    builder: StateGraph[Any] = StateGraph(ChatState)
    builder.add_node("bot", lambda state: {"messages": [f"answer {len(state['messages'])}"]})
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    run = Run(mode, graphkeep_backend, graphkeep_url, **saver_options(graphkeep_backend))
    config = config_of(thread_id)
    write(run, builder, {"messages": [MARKER.decode()]}, config)
    write(run, builder, {"messages": ["second"]}, config)
    damage(graphkeep_backend, graphkeep_url, garble)

    def expect(exc: CorruptData) -> None:
        assert exc.thread_id == thread_id
        assert exc.checkpoint_ns == ""
        assert exc.channel == "messages"
        assert exc.task_id is not None and exc.checkpoint_id is not None
        assert exc.kind == "undecodable"

    errors: list[CorruptData] = []

    def sync_body(graph: Any, saver: Any) -> None:
        with pytest.raises(CorruptData) as raised:
            saver.get_delta_channel_history(config=config, channels=["messages"])
        errors.append(raised.value)
        with pytest.raises(CorruptData) as raised:
            graph.get_state(config)
        errors.append(raised.value)

    async def async_body(graph: Any, saver: Any) -> None:
        with pytest.raises(CorruptData) as raised:
            await saver.aget_delta_channel_history(config=config, channels=["messages"])
        errors.append(raised.value)
        with pytest.raises(CorruptData) as raised:
            await graph.aget_state(config)
        errors.append(raised.value)

    run(builder, sync_body if mode == "sync" else async_body)
    for exc in errors:
        assert_quotes_nothing(exc)
        expect(exc)


# -- store items, events, cache entries -------------------------------------------------------


def test_a_garbled_store_item_raises_naming_namespace_and_key(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    namespace, key = ("users", "u1"), "profile"
    errors: list[CorruptData] = []
    if mode == "sync":
        with graphkeep.connect_store(graphkeep_url) as store:
            store.put(namespace, key, {"note": MARKER.decode()})
            store.put(namespace, "other", {"note": "fine"})
            damage(graphkeep_backend, graphkeep_url, garble)
            with pytest.raises(CorruptData) as raised:
                store.get(namespace, key)
            errors.append(raised.value)
            with pytest.raises(CorruptData) as raised:
                store.search(("users",))
            errors.append(raised.value)
            assert store.get(namespace, "other") is not None
    else:

        async def main() -> None:
            async with graphkeep.aconnect_store(graphkeep_url) as store:
                await store.aput(namespace, key, {"note": MARKER.decode()})
                await store.aput(namespace, "other", {"note": "fine"})
                damage(graphkeep_backend, graphkeep_url, garble)
                with pytest.raises(CorruptData) as raised:
                    await store.aget(namespace, key)
                errors.append(raised.value)
                with pytest.raises(CorruptData) as raised:
                    await store.asearch(("users",))
                errors.append(raised.value)
                assert await store.aget(namespace, "other") is not None

        asyncio.run(main())
    for exc in errors:
        assert_quotes_nothing(exc)
        assert exc.namespace == namespace
        assert exc.key == key
        assert f"key {key!r}" in str(exc)
        assert exc.kind == "undecodable"


def test_a_garbled_event_raises_naming_run_and_event(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    errors: list[CorruptData] = []
    ids: list[str] = []
    if mode == "sync":
        with graphkeep.connect_events(graphkeep_url) as events:
            ids.append(events.append(run_id, {"type": "token", "text": "fine"}))
            ids.append(events.append(run_id, {"type": "token", "text": MARKER.decode()}))
            events.close(run_id, "success")
            damage(graphkeep_backend, graphkeep_url, garble)
            seen = []
            with pytest.raises(CorruptData) as raised:
                for event_id, _ in events.read(run_id, follow=False):
                    seen.append(event_id)
            errors.append(raised.value)
    else:

        async def main() -> None:
            async with graphkeep.aconnect_events(graphkeep_url) as events:
                ids.append(await events.append(run_id, {"type": "token", "text": "fine"}))
                ids.append(await events.append(run_id, {"type": "token", "text": MARKER.decode()}))
                await events.close(run_id, "success")
                damage(graphkeep_backend, graphkeep_url, garble)
                with pytest.raises(CorruptData) as raised:
                    async for _ in events.read(run_id, follow=False):
                        pass
                errors.append(raised.value)

        asyncio.run(main())
    (exc,) = errors
    assert_quotes_nothing(exc)
    assert exc.run_id == run_id
    assert exc.event_id == ids[1]
    assert f"run {run_id!r}" in str(exc)


def test_a_damaged_cache_entry_is_a_miss_logged_without_its_bytes(
    graphkeep_backend: str, graphkeep_url: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    # entries whose value no longer decodes, whose stored record is replaced whole (Redis'
    # and DynamoDB's framing of the entry, MongoDB's value field), and a large one whose
    # compressed bytes no longer inflate where the store compresses it (DynamoDB from 4 KiB;
    # elsewhere it is garbled); one more stays readable
    garbled, replaced, kept = (("c",), "garbled"), (("c",), "replaced"), (("c",), "kept")
    large = (("c",), "large")
    values = {
        garbled: ({"v": MARKER.decode()}, None),
        replaced: ({"v": MARKER.decode() + "!"}, None),
        large: ({"v": MARKER.decode() + " and more words" * 400}, None),
        kept: ({"v": "fine"}, None),
    }

    def first_garbled_then_whole(data: bytes) -> bytes | None:
        if MARKER + b"!" in data:
            return GARBAGE
        return break_zlib(data) or garble(data)

    found: list[dict[Any, Any]] = []
    caplog.set_level(logging.WARNING, logger="graphkeep.cache")
    if mode == "sync":
        with graphkeep.connect_cache(graphkeep_url) as cache:
            cache.set(values)
            damage(graphkeep_backend, graphkeep_url, first_garbled_then_whole)
            found.append(cache.get([garbled, replaced, large, kept]))
    else:

        async def main() -> None:
            async with graphkeep.aconnect_cache(graphkeep_url) as cache:
                await cache.aset(values)
                damage(graphkeep_backend, graphkeep_url, first_garbled_then_whole)
                found.append(await cache.aget([garbled, replaced, large, kept]))

        asyncio.run(main())
    assert found[0] == {kept: {"v": "fine"}}
    lines = [r.getMessage() for r in caplog.records if r.name == "graphkeep.cache"]
    assert len(lines) == 3, lines
    for line in lines:
        assert "treated as a miss" in line
        for bad in (MARKER, BAD, GARBAGE):
            assert repr(bad)[2:-1] not in line and bad.decode("latin-1") not in line
