"""``encryption=`` (issue 47, item 1): records sealed at their place, reads that fail closed,
rotation — on real servers, every backend (``graphkeep_url``: Redis, Redis Cluster, MongoDB,
DynamoDB), sync and async.

The stored records are edited with each backend's own client (redis-py, pymongo, boto3,
through ``tests.scenarios.backends.DAMAGE``): an encrypted channel value copied onto another
thread, checkpoint or channel, a byte flipped, a record under a key the ring no longer holds.
Each read raises :class:`~graphkeep.errors.CorruptData` of its ``kind``, never state.

Records are told apart on the server by what the envelope leaves readable: its key id (the
test writes each record under a ring whose current key id names it; the ids all map to one
key, so only the place can fail) and its length (a channel value of random bytes does not
compress, so its envelope is the one of that length).
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

import graphkeep
from graphkeep.encryption import KeyRing
from graphkeep.errors import ConfigurationError, CorruptData
from tests.cli_runs import gk
from tests.scenarios.backends import DAMAGE, mongodb_documents

MODES = ("sync", "async")
KEY = os.urandom(32)
OTHER_KEY = os.urandom(32)
#: a channel value of this many random bytes: its envelope's length is known and unique
VALUE_BYTES = 3000
#: the envelope of a VALUE_BYTES value: header (3: one-letter key id) + nonce + ciphertext + tag
#: of the packed ("msgpack", bin(bin(VALUE_BYTES))) pair
MARKER = b"plaintext-marker-5d1e"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def ring(current: str, *others: str, key: bytes = KEY, **options: Any) -> KeyRing:
    """A ring whose key ids ``current`` and ``others`` all hold ``key``."""
    return KeyRing({k: key for k in (current, *others)}, current=current, **options)


IDS = ("a", "b", "c", "d")


def options_of(backend: str) -> dict[str, Any]:
    # DynamoDB compresses its items by default: the envelopes must stay findable on the server
    return {"compress": False} if backend == "dynamodb" else {}


# -- a saver, sync or async, called from the test's thread ------------------------------------


class Api:
    """A saver's calls for the test: the sync methods, or the async ones on a loop of its own."""

    def __init__(self, saver: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.saver, self.loop = saver, loop

    def _run(self, name: str, *args: Any) -> Any:
        if self.loop is None:
            return getattr(self.saver, name)(*args)
        coro = getattr(self.saver, "a" + name)(*args)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def put(self, config: Any, checkpoint: Any, versions: dict[str, Any]) -> Any:
        return self._run("put", config, checkpoint, {"source": "loop", "step": 1}, versions)

    def put_writes(self, config: Any, writes: list[tuple[str, Any]], task_id: str) -> None:
        self._run("put_writes", config, writes, task_id, "")

    def get_tuple(self, config: Any) -> Any:
        return self._run("get_tuple", config)

    def list(self, config: Any, filter: dict[str, Any] | None = None) -> list[Any]:
        if self.loop is None:
            return list(self.saver.list(config, filter=filter))

        async def collect() -> list[Any]:
            return [t async for t in self.saver.alist(config, filter=filter)]

        return asyncio.run_coroutine_threadsafe(collect(), self.loop).result(60)

    def copy_thread(self, source: str, target: str) -> None:
        self._run("copy_thread", source, target)


@contextmanager
def entered_on_a_loop(manager: Any) -> Iterator[tuple[Any, asyncio.AbstractEventLoop]]:
    """``async with manager`` entered on an event loop of its own thread: what it gives, and
    the loop (the test's thread hands it coroutines)."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        made = asyncio.run_coroutine_threadsafe(manager.__aenter__(), loop).result(60)
        try:
            yield made, loop
        finally:
            asyncio.run_coroutine_threadsafe(manager.__aexit__(None, None, None), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()


@contextmanager
def opened(mode: str, url: str, backend: str, encryption: Any, **options: Any) -> Iterator[Api]:
    options = {**options_of(backend), **options}
    if encryption is not None:
        options["encryption"] = encryption
    if mode == "sync":
        with graphkeep.connect(url, **options) as saver:
            yield Api(saver, None)
        return
    with entered_on_a_loop(graphkeep.aconnect(url, **options)) as (saver, loop):
        yield Api(saver, loop)


def config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(number: int, values: dict[str, Any], versions: dict[str, int]) -> Any:
    cp = empty_checkpoint()
    cp["id"] = f"1ef00000-0000-6000-8000-{number:012d}"
    cp["channel_values"] = values
    cp["channel_versions"] = dict(versions)
    return cp


# -- finding and editing envelopes with the backend's own client ------------------------------


def value_envelope_length(api: Api) -> int:
    ring_ = api.saver.encryption
    sealed = ring_.seal(
        __import__("graphkeep.port.codec", fromlist=["dump"]).dump(
            api.saver.serde, os.urandom(VALUE_BYTES), "probe"
        ),
        ("probe",),
    )
    return len(sealed.data)


def envelope_in(data: bytes, key_id: str, length: int) -> bytes | None:
    """The envelope of ``length`` under ``key_id`` a stored byte string ends with, if any."""
    if len(data) < length:
        return None
    tail = data[-length:]
    return tail if tail.startswith(b"\x01" + bytes([len(key_id)]) + key_id.encode()) else None


def collect(backend: str, url: str, key_id: str, length: int) -> list[bytes]:
    found: list[bytes] = []

    def look(data: bytes) -> None:
        envelope = envelope_in(data, key_id, length)
        if envelope is not None:
            found.append(envelope)

    DAMAGE[backend](url, look)  # type: ignore[arg-type]
    return found


def rewrite(backend: str, url: str, key_id: str, length: int, new: Callable[[bytes], bytes]) -> int:
    def change(data: bytes) -> bytes | None:
        envelope = envelope_in(data, key_id, length)
        return None if envelope is None else data[: len(data) - length] + new(envelope)

    return DAMAGE[backend](url, change)


def copy_envelope(backend: str, url: str, source: str, target: str, length: int) -> None:
    """The value envelope under key id ``source`` written over the one under ``target``."""
    (envelope,) = collect(backend, url, source, length)
    assert rewrite(backend, url, target, length, lambda _: envelope) == 1


def first_value(mode: str, url: str, backend: str, thread_id: str) -> tuple[int, Any]:
    """A first checkpoint of ``thread_id`` with one random value under key id ``a``: the
    value envelope's length and the checkpoint's config."""
    with opened(mode, url, backend, ring("a", *IDS)) as api:
        stored = api.put(
            config(thread_id), checkpoint(1, {"x": os.urandom(VALUE_BYTES)}, {"x": 1}), {"x": 1}
        )
        return value_envelope_length(api), stored


def raises_kind(kind: str, call: Callable[[], Any]) -> CorruptData:
    with pytest.raises(CorruptData) as raised:
        call()
    assert raised.value.kind == kind, raised.value
    return raised.value


# -- the tamper cases ----------------------------------------------------------------------------


def test_a_value_copied_from_another_thread_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    other = thread_id + "-other"
    cp = checkpoint(1, {"x": os.urandom(VALUE_BYTES)}, {"x": 1})
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        length = value_envelope_length(api)
        api.put(config(other), cp, {"x": 1})
    with opened(mode, graphkeep_url, graphkeep_backend, ring("b", *IDS)) as api:
        stored = api.put(
            config(thread_id), checkpoint(1, {"x": os.urandom(VALUE_BYTES)}, {"x": 1}), {"x": 1}
        )
        assert api.get_tuple(stored).checkpoint["channel_values"]["x"]
        copy_envelope(graphkeep_backend, graphkeep_url, "a", "b", length)
        exc = raises_kind("tampered", lambda: api.get_tuple(config(thread_id)))
        assert exc.thread_id == thread_id and exc.channel == "x"
        raises_kind("tampered", lambda: api.list(config(thread_id)))


def test_a_value_copied_from_another_checkpoint_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    length, first = first_value(mode, graphkeep_url, graphkeep_backend, thread_id)
    with opened(mode, graphkeep_url, graphkeep_backend, ring("b", *IDS)) as api:
        second = api.put(first, checkpoint(2, {"x": os.urandom(VALUE_BYTES)}, {"x": 2}), {"x": 2})
        copy_envelope(graphkeep_backend, graphkeep_url, "a", "b", length)
        exc = raises_kind("tampered", lambda: api.get_tuple(second))
        assert exc.checkpoint_id == second["configurable"]["checkpoint_id"]
        assert exc.channel == "x"


def test_a_value_copied_from_another_channel_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    length, first = first_value(mode, graphkeep_url, graphkeep_backend, thread_id)
    with opened(mode, graphkeep_url, graphkeep_backend, ring("b", *IDS)) as api:
        values = {"x": b"", "y": os.urandom(VALUE_BYTES)}
        second = api.put(first, checkpoint(2, values, {"x": 1, "y": 1}), {"y": 1})
        copy_envelope(graphkeep_backend, graphkeep_url, "a", "b", length)
        # the checkpoint before still reads: only the copy is refused
        assert len(api.get_tuple(first).checkpoint["channel_values"]["x"]) == VALUE_BYTES
        exc = raises_kind("tampered", lambda: api.get_tuple(second))
        assert exc.channel == "y"


def test_a_flipped_byte_is_tampered_in_a_value_and_a_pending_write(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    length, stored = first_value(mode, graphkeep_url, graphkeep_backend, thread_id)
    with opened(mode, graphkeep_url, graphkeep_backend, ring("b", *IDS)) as api:
        api.put_writes(stored, [("x", os.urandom(VALUE_BYTES))], "task-1")
        assert len(api.get_tuple(stored).pending_writes) == 1

        def flip(envelope: bytes) -> bytes:
            return envelope[:-1] + bytes([envelope[-1] ^ 0x01])

        assert rewrite(graphkeep_backend, graphkeep_url, "a", length, flip) == 1
        exc = raises_kind("tampered", lambda: api.get_tuple(stored))
        assert exc.channel == "x" and exc.task_id is None
    with opened(mode, graphkeep_url, graphkeep_backend, ring("c", *IDS)) as api:
        # the value restored by a new checkpoint; the write is then flipped
        again = api.put(stored, checkpoint(2, {"x": b"fine"}, {"x": 2}), {"x": 2})
        api.put_writes(again, [("x", os.urandom(VALUE_BYTES))], "task-2")
        assert rewrite(graphkeep_backend, graphkeep_url, "c", length, flip) == 1
        exc = raises_kind("tampered", lambda: api.get_tuple(again))
        assert exc.task_id == "task-2" and exc.channel == "x"


def test_a_pending_write_copied_to_another_task_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        length = value_envelope_length(api)
        stored = api.put(config(thread_id), checkpoint(1, {"x": b"v"}, {"x": 1}), {"x": 1})
        api.put_writes(stored, [("x", os.urandom(VALUE_BYTES))], "task-a")
    with opened(mode, graphkeep_url, graphkeep_backend, ring("b", *IDS)) as api:
        api.put_writes(stored, [("x", os.urandom(VALUE_BYTES))], "task-b")
        copy_envelope(graphkeep_backend, graphkeep_url, "a", "b", length)
        exc = raises_kind("tampered", lambda: api.get_tuple(stored))
        assert exc.task_id == "task-b"


def test_plaintext_is_refused_unless_allowed_and_writes_are_always_encrypted(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    with opened(mode, graphkeep_url, graphkeep_backend, None) as api:
        stored = api.put(config(thread_id), checkpoint(1, {"x": MARKER}, {"x": 1}), {"x": 1})
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a")) as api:
        exc = raises_kind("plaintext", lambda: api.get_tuple(stored))
        assert exc.thread_id == thread_id
        raises_kind("plaintext", lambda: api.list(config(thread_id)))
    window = ring("a", allow_plaintext=True)
    with opened(mode, graphkeep_url, graphkeep_backend, window) as api:
        assert api.get_tuple(stored).checkpoint["channel_values"]["x"] == MARKER
        assert window.plaintext_reads >= 2  # the checkpoint, its metadata, the value
        marked = MARKER + b"-2"
        api.put(stored, checkpoint(2, {"x": marked}, {"x": 2}), {"x": 2})
    seen: list[bytes] = []
    DAMAGE[graphkeep_backend](graphkeep_url, lambda data: seen.append(data) and None)  # type: ignore[func-returns-value]
    assert any(MARKER in data for data in seen)  # the old plaintext record
    assert not any(marked in data for data in seen)  # the new one: sealed


def test_a_record_under_a_dropped_key_is_unknown_key_and_rotation_keeps_old_records(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    old = KeyRing({"k1": KEY})
    with opened(mode, graphkeep_url, graphkeep_backend, old) as api:
        length = value_envelope_length(api)
        first = api.put(
            config(thread_id), checkpoint(1, {"x": os.urandom(VALUE_BYTES)}, {"x": 1}), {"x": 1}
        )
    rotated = KeyRing({"k2": OTHER_KEY, "k1": KEY}, current="k2")
    with opened(mode, graphkeep_url, graphkeep_backend, rotated) as api:
        assert len(api.get_tuple(first).checkpoint["channel_values"]["x"]) == VALUE_BYTES
        second = api.put(first, checkpoint(2, {"x": os.urandom(VALUE_BYTES)}, {"x": 2}), {"x": 2})
        assert len(api.get_tuple(second).checkpoint["channel_values"]["x"]) == VALUE_BYTES
    assert len(collect(graphkeep_backend, graphkeep_url, "k1", length)) == 1
    assert len(collect(graphkeep_backend, graphkeep_url, "k2", length)) == 1
    dropped = KeyRing({"k2": OTHER_KEY})
    with opened(mode, graphkeep_url, graphkeep_backend, dropped) as api:
        assert len(api.get_tuple(second).checkpoint["channel_values"]["x"]) == VALUE_BYTES
        exc = raises_kind("unknown_key", lambda: api.get_tuple(first))
        assert "'k1'" in str(exc)
    # a key id the ring holds with another key's bytes: the tag does not verify
    wrong = KeyRing({"k1": OTHER_KEY})
    with opened(mode, graphkeep_url, graphkeep_backend, wrong) as api:
        exc = raises_kind("tampered", lambda: api.get_tuple(first))
        assert "key ring" in str(exc) and "delete" not in str(exc)


# -- a real graph: lists shared, filters in the client, copy_thread, nothing readable ----------


class Chat(TypedDict):
    messages: list[str]
    turn: int


def chat_graph() -> StateGraph[Any]:
    def reply(state: Chat) -> dict[str, Any]:
        said = f"{MARKER.decode()} reply {state['turn']} " + "x" * 600
        return {"messages": [*state["messages"], said], "turn": state["turn"] + 1}

    builder: StateGraph[Any] = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def test_a_graph_runs_encrypted_with_shared_lists_filters_and_copies(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    keys = ring("a")
    with opened(mode, graphkeep_url, graphkeep_backend, keys) as api:
        graph = chat_graph().compile(checkpointer=api.saver)
        conf = config(thread_id)
        state: dict[str, Any] = {"messages": [], "turn": 0}
        for _ in range(3):
            if api.loop is None:
                state = graph.invoke(state, conf)
            else:
                state = asyncio.run_coroutine_threadsafe(
                    graph.ainvoke(state, conf), api.loop
                ).result(60)
        assert len(state["messages"]) == 3
        latest = api.get_tuple(conf)
        assert latest.checkpoint["channel_values"]["messages"] == state["messages"]
        found = api.list(conf, {"source": "loop"})
        assert found and all(t.metadata["source"] == "loop" for t in found)
        assert len(api.list(conf, {"source": "input"})) == len(api.list(conf)) - len(found)
        api.copy_thread(thread_id, thread_id + "-copy")
        copied = api.get_tuple(config(thread_id + "-copy"))
        assert copied.checkpoint["channel_values"]["messages"] == state["messages"]
    seen: list[bytes] = []
    DAMAGE[graphkeep_backend](graphkeep_url, lambda data: seen.append(data) and None)  # type: ignore[func-returns-value]
    assert seen and not any(MARKER in data for data in seen)
    assert not any(b"reply 1" in data for data in seen)
    if graphkeep_backend == "mongodb":  # a checkpoint's source stays readable (thread checks)
        sources = {
            (doc.get("metadata_doc") or {}).get("source")
            for _, doc in mongodb_documents(graphkeep_url)
        }
        assert "loop" in sources
    # a fresh saver (nothing remembered of the lists) reads them back
    with opened(mode, graphkeep_url, graphkeep_backend, keys) as api:
        again = api.get_tuple(config(thread_id + "-copy"))
        assert again.checkpoint["channel_values"]["messages"] == state["messages"]


def test_the_graphkeep_command_reads_an_encrypted_thread_with_graphkeep_keys(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --deep`` and ``dump`` open the records with the ring of ``$GRAPHKEEP_KEYS`` (as
    Agent Server does); without it a record reads as encrypted under its key id, not as
    damaged data."""
    with opened("sync", graphkeep_url, graphkeep_backend, ring("a")) as api:
        graph = chat_graph().compile(checkpointer=api.saver)
        graph.invoke({"messages": [], "turn": 0}, config(thread_id))
    check = ("check", graphkeep_url, "--thread", thread_id, "--deep")
    monkeypatch.delenv("GRAPHKEEP_KEYS", raising=False)
    blind = gk(*check)
    assert blind.code == 1
    assert "encrypted (key id 'a') and this reader has no key ring" in blind.out + blind.err
    monkeypatch.setenv("GRAPHKEEP_KEYS", "a:" + base64.b64encode(KEY).decode())
    keyed = gk(*check)
    assert keyed.code == 0, keyed.out + keyed.err
    dumped = gk("dump", graphkeep_url, "--thread-id", thread_id)
    assert dumped.code == 0, dumped.err
    assert "reply 0" in dumped.out and "__undecoded__" not in dumped.out


# -- the key ring ------------------------------------------------------------------------------


def test_key_ring_checks_its_keys_and_reads_graphkeep_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ({}, {"k": b"short"}, {"k": "not base64!"}, {"a:b": KEY}, {"": KEY}):
        with pytest.raises(ConfigurationError):
            KeyRing(bad)
    with pytest.raises(ConfigurationError, match="current"):
        KeyRing({"a": KEY, "b": KEY})
    with pytest.raises(ConfigurationError, match="not one of"):
        KeyRing({"a": KEY}, current="b")
    with pytest.raises(ConfigurationError) as raised:
        KeyRing({"k": KEY[:31]})
    assert KEY[:31].hex() not in str(raised.value)
    encoded = base64.b64encode(KEY).decode()
    monkeypatch.setenv("GRAPHKEEP_KEYS", f"k2:{base64.b64encode(OTHER_KEY).decode()}, k1:{encoded}")
    keys = KeyRing.from_env()
    assert keys.current == "k2" and keys.key_ids == ["k2", "k1"]
    assert encoded not in repr(keys)
    monkeypatch.setenv("GRAPHKEEP_KEYS", "k1")
    with pytest.raises(ConfigurationError):
        KeyRing.from_env()
    monkeypatch.delenv("GRAPHKEEP_KEYS")
    with pytest.raises(ConfigurationError, match="GRAPHKEEP_KEYS"):
        KeyRing.from_env()
    with pytest.raises(ConfigurationError, match="KeyRing"):
        with graphkeep.connect("redis://127.0.0.1:1/0", encryption="secret"):
            pass


# -- the node cache and the effect ledger -----------------------------------------------------


@contextmanager
def product(mode: str, kind: str, url: str, keys: KeyRing) -> Iterator[Callable[..., Any]]:
    """``call(name, *args)`` on a cache or ledger (``kind``) with ``encryption=keys``: the
    sync method, or its async twin on a loop of its own."""
    if mode == "sync":
        with getattr(graphkeep, f"connect_{kind}")(url, encryption=keys) as made:
            yield lambda name, *args: getattr(made, name)(*args)
        return
    manager = getattr(graphkeep, f"aconnect_{kind}")(url, encryption=keys)
    with entered_on_a_loop(manager) as (made, loop):

        def call(name: str, *args: Any) -> Any:
            coro = getattr(made, "a" + name)(*args)
            return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

        yield call


def envelope_length() -> int:
    from graphkeep.port import codec

    serde = __import__("langgraph.checkpoint.serde.jsonplus", fromlist=["x"]).JsonPlusSerializer()
    typed = codec.dump(serde, os.urandom(VALUE_BYTES), "probe")
    return len(ring("a").seal(typed, ("probe",)).data)


def test_a_cache_entry_copied_to_another_key_or_under_a_dropped_key_is_a_miss(
    graphkeep_backend: str, graphkeep_url: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    length = envelope_length()
    ns = ("node", "n1")
    first, second = os.urandom(VALUE_BYTES), os.urandom(VALUE_BYTES)
    with product(mode, "cache", graphkeep_url, ring("a", *IDS)) as call:
        call("set", {(ns, "k1"): (first, None)})
    with product(mode, "cache", graphkeep_url, ring("b", *IDS)) as call:
        call("set", {(ns, "k2"): (second, None)})
        assert call("get", [(ns, "k1"), (ns, "k2")]) == {(ns, "k1"): first, (ns, "k2"): second}
        copy_envelope(graphkeep_backend, graphkeep_url, "a", "b", length)
        assert call("get", [(ns, "k1"), (ns, "k2")]) == {(ns, "k1"): first}
        assert "tampered" in caplog.text or "does not verify" in caplog.text
    seen: list[bytes] = []
    DAMAGE[graphkeep_backend](graphkeep_url, lambda data: seen.append(data) and None)  # type: ignore[func-returns-value]
    assert not any(first in data or second in data for data in seen)
    with product(mode, "cache", graphkeep_url, KeyRing({"b": OTHER_KEY})) as call:
        assert call("get", [(ns, "k1")]) == {}  # under a dropped key: a miss


def test_an_effect_record_copied_to_another_key_is_tampered_and_never_replayed(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    length = envelope_length()
    ran: list[str] = []

    def effect(name: str) -> Callable[[], bytes]:
        def run() -> bytes:
            ran.append(name)
            return os.urandom(VALUE_BYTES)

        return run

    with product(mode, "effects", graphkeep_url, ring("a", *IDS)) as call:
        paid = call("run", "pay-1", effect("pay-1"))
    with product(mode, "effects", graphkeep_url, ring("b", *IDS)) as call:
        refund = call("run", "refund-1", effect("refund-1"))
        assert call("run", "refund-1", effect("refund-1")) == refund  # replayed
        assert call("run", "pay-1", effect("pay-1")) == paid
        assert ran == ["pay-1", "refund-1"]
        copy_envelope(graphkeep_backend, graphkeep_url, "a", "b", length)
        exc = raises_kind("tampered", lambda: call("run", "refund-1", effect("refund-1")))
        assert exc.key == "refund-1"
        assert ran == ["pay-1", "refund-1"]  # nothing ran again, nothing replayed
    with product(mode, "effects", graphkeep_url, KeyRing({"z": OTHER_KEY})) as call:
        raises_kind("unknown_key", lambda: call("run", "refund-1", effect("refund-1")))


def signature_of(key_id: str) -> bytes:
    """How a list manifest's signature under ``key_id`` starts, as msgpack stores it: the key
    id, then the 28-byte nonce and tag as 56 hex characters (a str8: Redis's cmsgpack, which
    expands manifests in the read script, cannot unpack bin)."""
    return b"\x92" + bytes([0xA0 | len(key_id)]) + key_id.encode() + b"\xd9\x38"


def test_a_manifest_signature_is_text_and_one_stored_as_bytes_still_verifies() -> None:
    keys = ring("a")
    place = ("manifest", "value", "t", "", "m", "1")
    key_id, mac = keys.sign(b"body", place)
    assert key_id == "a" and isinstance(mac, str) and len(bytes.fromhex(mac)) == 28
    keys.verify(b"body", place, [key_id, mac])
    keys.verify(b"body", place, [key_id, bytes.fromhex(mac)])  # as signatures were stored before
    for bad in ([key_id, mac[:-2]], [key_id, "zz" * 28], [key_id], "x", [7, mac]):
        with pytest.raises(CorruptData) as raised:
            keys.verify(b"body", place, bad)
        assert raised.value.kind == "tampered"
    with pytest.raises(CorruptData):
        keys.verify(b"other body", place, [key_id, mac])


def test_a_list_manifest_copied_from_another_thread_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    messages = [f"message {i} " + "m" * 300 for i in range(5)]  # a shared list: >= 1 KiB
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        api.put(config(thread_id + "-a"), checkpoint(1, {"m": messages}, {"m": 1}), {"m": 1})
    with opened(mode, graphkeep_url, graphkeep_backend, ring("b", *IDS)) as api:
        stored = api.put(config(thread_id), checkpoint(1, {"m": messages[:4]}, {"m": 1}), {"m": 1})
        assert api.get_tuple(stored).checkpoint["channel_values"]["m"] == messages[:4]
        manifests: list[bytes] = []
        DAMAGE[graphkeep_backend](
            graphkeep_url,
            lambda data: manifests.append(data) if signature_of("a") in data else None,  # type: ignore[func-returns-value]
        )
        (manifest,) = manifests

        def swap(data: bytes) -> bytes | None:
            return manifest if signature_of("b") in data else None

        assert DAMAGE[graphkeep_backend](graphkeep_url, swap) == 1
        exc = raises_kind("tampered", lambda: api.get_tuple(stored))
        assert exc.thread_id == thread_id and exc.channel == "m"


def test_each_refusal_is_counted_as_a_resume_failure_by_its_kind(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    from tests.test_telemetry import Otel

    with opened(mode, graphkeep_url, graphkeep_backend, None) as api:
        plain = api.put(config(thread_id + "-p"), checkpoint(1, {"x": b"v"}, {"x": 1}), {"x": 1})
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        length = value_envelope_length(api)
        sealed = api.put(
            config(thread_id), checkpoint(1, {"x": os.urandom(VALUE_BYTES)}, {"x": 1}), {"x": 1}
        )
    assert rewrite(
        graphkeep_backend, graphkeep_url, "a", length, lambda e: e[:-1] + bytes([e[-1] ^ 1])
    )
    otel = Otel()
    with opened(
        mode, graphkeep_url, graphkeep_backend, ring("a", *IDS), telemetry=otel.option()
    ) as api:
        raises_kind("plaintext", lambda: api.get_tuple(plain))
        raises_kind("tampered", lambda: api.get_tuple(sealed))
    with opened(
        mode, graphkeep_url, graphkeep_backend, KeyRing({"z": KEY}), telemetry=otel.option()
    ) as api:
        raises_kind("unknown_key", lambda: api.get_tuple(sealed))
    reasons = sorted(
        p.attributes["graphkeep.reason"] for p in otel.points("graphkeep.resume.failures")
    )
    assert reasons == ["plaintext", "tampered", "unknown_key"]
    otel.close()


def test_the_savers_effect_ledger_seals_with_the_savers_keys(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    def effect() -> str:
        return MARKER.decode()

    with opened(mode, graphkeep_url, graphkeep_backend, ring("a")) as api:
        ledger = api.saver.effects
        assert ledger.encryption is api.saver.encryption
        if api.loop is None:
            assert ledger.run("pay-1", effect) == MARKER.decode()
            assert ledger.run("pay-1", effect) == MARKER.decode()
        else:
            for _ in range(2):
                done = asyncio.run_coroutine_threadsafe(ledger.arun("pay-1", effect), api.loop)
                assert done.result(60) == MARKER.decode()
    seen: list[bytes] = []
    DAMAGE[graphkeep_backend](graphkeep_url, lambda data: seen.append(data) and None)  # type: ignore[func-returns-value]
    assert seen and not any(MARKER in data for data in seen)
