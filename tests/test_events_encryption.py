"""``encryption=`` on the run event log (issue 47, item 1): each event's payload sealed at
``("event", run id, event id)``, reads that fail closed — on real servers, every backend the
event log has (``graphkeep_url``), sync and async.

The stored payloads are edited with each backend's own client (redis-py, pymongo, boto3,
through ``tests.scenarios.backends.DAMAGE``; a DynamoDB item packs several payloads in one
msgpack list, unpacked here): a payload copied onto another event id of its run or onto
another run, a byte flipped, a payload written without encryption, one under a key the ring
no longer holds. Each read raises :class:`~graphkeep.errors.CorruptData` of its ``kind``,
never an event. Payloads are told apart on the server by the key id of their envelope (each
is written under a ring whose current key id names it; the ids all map to one key, so only
the place can fail).
"""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypedDict

import ormsgpack
import pytest
from langgraph.graph import END, START, StateGraph

import graphkeep
from graphkeep.encryption import ENVELOPE_TAG, KeyRing
from graphkeep.errors import ConfigurationError, CorruptData
from graphkeep.events.port import MAX_EVENT_BYTES
from graphkeep.events.streaming import stream_run
from tests.cli_runs import gk
from tests.scenarios.backends import DAMAGE
from tests.test_encryption import IDS, KEY, MARKER, OTHER_KEY, entered_on_a_loop, raises_kind, ring

MODES = ("sync", "async")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def run_id() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


class Log:
    """An event log's calls for the test: the sync methods, or the async ones on a loop of
    its own."""

    def __init__(self, log: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.log, self.loop = log, loop

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.loop is None:
            return getattr(self.log, name)(*args, **kwargs)
        coro = getattr(self.log, name)(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def read(self, run_id: str, after: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        if self.loop is None:
            return list(self.log.read(run_id, after=after, follow=False))

        async def collect() -> list[tuple[str, dict[str, Any]]]:
            return [pair async for pair in self.log.read(run_id, after=after, follow=False)]

        return asyncio.run_coroutine_threadsafe(collect(), self.loop).result(60)


@contextmanager
def opened(mode: str, url: str, encryption: KeyRing | None, **options: Any) -> Iterator[Log]:
    if encryption is not None:
        options["encryption"] = encryption
    if mode == "sync":
        with graphkeep.connect_events(url, **options) as log:
            yield Log(log, None)
        return
    with entered_on_a_loop(graphkeep.aconnect_events(url, **options)) as (log, loop):
        yield Log(log, loop)


# -- stored payloads, with the backend's own client -------------------------------------------


def key_id_of(payload: bytes) -> str | None:
    """The key id of a sealed event payload (None: not one)."""
    try:
        tag, data = ormsgpack.unpackb(payload)
    except (ormsgpack.MsgpackDecodeError, TypeError, ValueError):
        return None
    if tag != ENVELOPE_TAG or not isinstance(data, bytes):
        return None
    return str(data[2 : 2 + data[1]].decode())


def each_payload(change: Callable[[bytes], bytes | None]) -> Callable[[bytes], bytes | None]:
    """``change`` of every event payload a stored byte string holds: itself, or (DynamoDB)
    each of the msgpack list an item packs."""

    def rewrite(data: bytes) -> bytes | None:
        deflated = False
        try:
            packed = ormsgpack.unpackb(data)
        except (ormsgpack.MsgpackDecodeError, TypeError, ValueError):
            try:  # a DynamoDB item's list, zlib-compressed (its "z" attribute stays "zlib")
                packed, deflated = ormsgpack.unpackb(zlib.decompress(data)), True
            except (zlib.error, ormsgpack.MsgpackDecodeError, TypeError, ValueError):
                packed = None
        if not (isinstance(packed, list) and packed and all(isinstance(p, bytes) for p in packed)):
            return change(data)
        changed = [change(p) for p in packed]
        if all(c is None for c in changed):
            return None
        new = bytes(
            ormsgpack.packb([p if c is None else c for p, c in zip(packed, changed, strict=True)])
        )
        return zlib.compress(new) if deflated else new

    return rewrite


def payloads(backend: str, url: str) -> list[bytes]:
    seen: list[bytes] = []

    def look(data: bytes) -> None:
        seen.append(data)

    DAMAGE[backend](url, each_payload(look))  # type: ignore[arg-type]
    return seen


def rewrite(backend: str, url: str, key_id: str, new: Callable[[bytes], bytes]) -> int:
    """Every payload sealed under ``key_id`` replaced by ``new(payload)``; how many."""

    def change(data: bytes) -> bytes | None:
        return new(data) if key_id_of(data) == key_id else None

    return DAMAGE[backend](url, each_payload(change))


def copy_payload(backend: str, url: str, source: str, target: str) -> None:
    """The payload sealed under key id ``source`` written over the one under ``target``."""
    (payload,) = [p for p in payloads(backend, url) if key_id_of(p) == source]
    assert rewrite(backend, url, target, lambda _: payload) == 1


# -- the tests ---------------------------------------------------------------------------------


def test_event_payloads_are_sealed_and_read_back_from_any_id(
    graphkeep_backend: str, graphkeep_url: str, mode: str, run_id: str
) -> None:
    with pytest.raises(ConfigurationError, match="KeyRing"):
        graphkeep.connect_events(graphkeep_url, encryption="k1:secret").__enter__()
    events = [{"type": "token", "text": f"{MARKER.decode()} {i}"} for i in range(3)]
    with opened(mode, graphkeep_url, ring("a")) as log:
        ids = log.call("append_many", run_id, events)
        ids.append(log.call("append", run_id, {"type": "custom", "note": MARKER.decode()}))
        # the largest event there is, sealed, still fits a record (a DynamoDB item: 400 KB)
        large = {"type": "custom", "blob": "x" * (MAX_EVENT_BYTES - 40)}
        ids.append(log.call("append", run_id, large))
        ids.append(log.call("close", run_id, "success"))
        read = log.read(run_id)
        assert [i for i, _ in read] == ids
        assert [e for _, e in read][:3] == events
        assert read[-1][1] == {"type": "close", "status": "success"}
        assert read[-2][1] == large
        assert log.read(run_id, after=ids[1]) == read[2:]  # resume by id
        assert log.call("state", run_id).closed == "success"  # the status stays readable
    stored = payloads(graphkeep_backend, graphkeep_url)
    sealed = [p for p in stored if key_id_of(p) == "a"]
    assert len(sealed) == len(ids)
    assert not any(MARKER in p or b'"type"' in p for p in stored)
    with opened(mode, graphkeep_url, None) as plain:  # no ring: says so, returns nothing
        exc = raises_kind("unknown_key", lambda: plain.read(run_id))
        assert exc.run_id == run_id and exc.event_id == ids[0]
        assert "encrypted" in str(exc) and "encryption=KeyRing" in str(exc)


def test_an_event_copied_to_another_id_or_another_run_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, run_id: str
) -> None:
    other = run_id + "-other"
    with opened(mode, graphkeep_url, ring("a", *IDS)) as log:
        log.call("append", other, {"n": "other"})
    ids = []
    for key_id in ("b", "c", "d"):  # a log of its own each: it learns the run's newest id
        with opened(mode, graphkeep_url, ring(key_id, *IDS)) as log:
            ids.append(log.call("append", run_id, {"n": key_id}))
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-")))
    with opened(mode, graphkeep_url, ring("a", *IDS)) as log:
        assert [e["n"] for _, e in log.read(run_id)] == ["b", "c", "d"]
        copy_payload(graphkeep_backend, graphkeep_url, "c", "b")  # onto an earlier id
        exc = raises_kind("tampered", lambda: log.read(run_id))
        assert (exc.run_id, exc.event_id) == (run_id, ids[0])
        assert [e["n"] for _, e in log.read(run_id, after=ids[0])] == ["c", "d"]
        copy_payload(graphkeep_backend, graphkeep_url, "a", "d")  # from another run
        exc = raises_kind("tampered", lambda: log.read(run_id, after=ids[0]))
        assert (exc.run_id, exc.event_id) == (run_id, ids[2])
        assert [e["n"] for _, e in log.read(other)] == ["other"]


def test_a_flipped_byte_plaintext_and_a_dropped_key_fail_closed_and_are_counted(
    graphkeep_backend: str, graphkeep_url: str, mode: str, run_id: str
) -> None:
    from tests.test_telemetry import Otel

    plain, flipped, kept = run_id + "-plain", run_id + "-flipped", run_id + "-kept"
    with opened(mode, graphkeep_url, None) as log:
        log.call("append", plain, {"n": 1})
    with opened(mode, graphkeep_url, ring("a", *IDS)) as log:
        log.call("append", flipped, {"n": 2})
    with opened(mode, graphkeep_url, ring("b", *IDS)) as log:
        log.call("append", kept, {"n": 3})
    assert rewrite(graphkeep_backend, graphkeep_url, "a", lambda p: p[:-1] + bytes([p[-1] ^ 1]))
    otel = Otel()
    with opened(mode, graphkeep_url, ring("a", *IDS), telemetry=otel.option()) as log:
        assert raises_kind("plaintext", lambda: log.read(plain)).run_id == plain
        assert raises_kind("tampered", lambda: log.read(flipped)).run_id == flipped
        assert [e for _, e in log.read(kept)] == [{"n": 3}]
    with opened(mode, graphkeep_url, KeyRing({"z": KEY}), telemetry=otel.option()) as log:
        assert raises_kind("unknown_key", lambda: log.read(kept)).run_id == kept
    reasons = sorted(
        p.attributes["graphkeep.reason"] for p in otel.points("graphkeep.resume.failures")
    )
    assert reasons == ["plaintext", "tampered", "unknown_key"]
    otel.close()
    migrating = ring("a", *IDS, allow_plaintext=True)
    with opened(mode, graphkeep_url, migrating) as log:  # a migration window reads plaintext
        assert [e for _, e in log.read(plain)] == [{"n": 1}]
        log.call("append", plain, {"n": 4})  # and writes sealed
    assert migrating.plaintext_reads == 1
    with opened(mode, graphkeep_url, KeyRing({"b": OTHER_KEY})) as log:  # same id, other key
        raises_kind("tampered", lambda: log.read(kept))


def test_the_graphkeep_events_command_reads_a_sealed_run_with_graphkeep_keys(
    graphkeep_url: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with opened("sync", graphkeep_url, ring("a")) as log:
        first = log.call("append", run_id, {"note": MARKER.decode()})
        log.call("close", run_id, "success")
    monkeypatch.delenv("GRAPHKEEP_KEYS", raising=False)
    blind = gk("events", graphkeep_url, run_id)
    assert blind.code != 0
    assert "encrypted (key id 'a') and this reader has no key ring" in blind.out + blind.err
    monkeypatch.setenv("GRAPHKEEP_KEYS", "a:" + base64.b64encode(KEY).decode())
    keyed = gk("events", graphkeep_url, run_id)
    assert keyed.code == 0, keyed.out + keyed.err
    assert keyed.out.splitlines()[0].startswith(first + "\t")
    assert MARKER.decode() in keyed.out and '"status":"success"' in keyed.out.replace(" ", "")


def test_writers_racing_on_one_sealed_run_keep_every_event_readable(
    graphkeep_url: str, run_id: str
) -> None:
    keys = ring("a")
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            with graphkeep.connect_events(graphkeep_url, encryption=keys) as log:
                for i in range(15):
                    log.append_many(run_id, [{"w": name, "i": i}, {"w": name, "i": i, "j": 1}])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(name,)) for name in ("x", "y", "z")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert not errors, errors
    with graphkeep.connect_events(graphkeep_url, encryption=keys) as log:
        read = list(log.read(run_id, follow=False))
    assert len(read) == 90 and len({i for i, _ in read}) == 90
    for name in ("x", "y", "z"):  # each writer's events in its order
        mine = [(e["i"], e.get("j", 0)) for _, e in read if e["w"] == name]
        assert mine == sorted(mine) and len(mine) == 30


class Chat(TypedDict):
    text: str


def chat_graph() -> Any:
    def reply(state: Chat) -> Chat:
        return {"text": state["text"] + " " + MARKER.decode()}

    builder: StateGraph[Any] = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile()


def test_stream_run_keeps_a_sealed_run_that_a_follower_reads(
    graphkeep_backend: str, graphkeep_url: str, mode: str, run_id: str
) -> None:
    graph = chat_graph()

    async def run(log: Any) -> list[Any]:
        stream = stream_run(graph, {"text": "hi"}, {}, log, run_id=run_id)
        return [chunk async for chunk in stream]

    with opened(mode, graphkeep_url, ring("a")) as log:
        if log.loop is None:
            chunks = asyncio.run(run(log.log))
        else:
            chunks = asyncio.run_coroutine_threadsafe(run(log.log), log.loop).result(60)
        assert chunks == [{"reply": {"text": "hi " + MARKER.decode()}}]
        read = [e for _, e in log.read(run_id)]
        assert read == [
            {"mode": "updates", "data": {"reply": {"text": "hi " + MARKER.decode()}}},
            {"type": "close", "status": "success"},
        ]
    stored = payloads(graphkeep_backend, graphkeep_url)
    assert len([p for p in stored if key_id_of(p) == "a"]) == 2
    assert not any(MARKER in p for p in stored)


async def test_the_agui_endpoint_serves_and_replays_a_sealed_run_and_refuses_a_changed_one(
    graphkeep_backend: str, graphkeep_url: str
) -> None:
    from graphkeep.agui import AGUIRuns
    from tests.agui.graph import build_graph
    from tests.test_agui import collect, request

    keys = ring("a")
    async with graphkeep.aconnect(graphkeep_url, encryption=keys) as saver:
        async with graphkeep.aconnect_events(graphkeep_url, encryption=keys) as log:
            runs = AGUIRuns(build_graph(saver, token_delay=0.01), log)
            try:
                ask = request("t-weather", "what is the weather in Paris")
                await runs.start(ask)
                full = await collect(runs.serve("t-weather", ask.run_id))
                assert any(e is not None and e["type"] == "RUN_FINISHED" for _, e in full)
                cut = len(full) // 2
                after = full[cut][0]
                assert after is not None
                rejoined = await collect(runs.serve("t-weather", ask.run_id, after=after))
                assert [p for p in rejoined if p[0] is not None] == full[cut + 1 :]
                stored = payloads(graphkeep_backend, graphkeep_url)
                assert stored and not any(b"Paris" in p or b"TEXT_MESSAGE" in p for p in stored)
                flipped = rewrite(
                    graphkeep_backend, graphkeep_url, "a", lambda p: p[:-1] + bytes([p[-1] ^ 1])
                )
                assert flipped  # every payload (a DynamoDB item packs several: counted once)
                with pytest.raises(CorruptData) as raised:
                    await collect(runs.serve("t-weather", ask.run_id, after=after))
                assert raised.value.kind == "tampered"
                assert raised.value.run_id == ask.run_id
            finally:
                await runs.aclose()
