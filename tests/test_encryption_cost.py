"""What makes ``encryption=`` cheaper (issue 47's cost target) changes no stored byte and
trusts nothing it did not check.

- The envelope's associated data is packed from a start kept per key id and the place packed
  alone: the same bytes as before, so records written before and after read both ways.
- A sealed port remembers the list elements it sealed or opened (their envelope bytes and
  payload) and does not decrypt the same bytes at the same place again: an element changed or
  replaced in the store after this saver read it is still ``tampered`` — on real servers,
  every backend, sync and async.
- The records' ``with_value`` / ``with_payloads`` (used instead of ``dataclasses.replace``)
  keep every other field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import ormsgpack
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graphkeep.checkpoint import sealed as sealed_module
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL
from graphkeep.checkpoint.records import BlobRecord, CheckpointRecord, WriteRecord
from graphkeep.checkpoint.sealed import OpenedElements, SealedPort
from graphkeep.encryption import ENVELOPE_TAG, KeyRing
from graphkeep.port import codec
from graphkeep.port.codec import Typed
from tests.scenarios.backends import DAMAGE
from tests.test_encryption import (
    IDS,
    MODES,
    checkpoint,
    config,
    opened,
    raises_kind,
    rewrite,
    ring,
)

KEY = os.urandom(32)
PLACE = ("write", "thread-1", "", "1ef0-cid", "task-1", 3, "messages")
#: a list element of this many random bytes: its envelope's length is known and unique
ELEMENT_BYTES = 2500


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def sealed_as_before(key_id: str, value: Typed, place: tuple[Any, ...]) -> bytes:
    """An envelope made as the first release of the format did, without graphkeep: header,
    nonce, AES-256-GCM of the packed pair under associated data
    ``msgpack([ENVELOPE_TAG, header, list(place)])``."""
    header = bytes((1, len(key_id))) + key_id.encode()
    nonce = os.urandom(12)
    associated = ormsgpack.packb([ENVELOPE_TAG, header, list(place)])
    packed = ormsgpack.packb((value.tag, value.data))
    return header + nonce + AESGCM(KEY).encrypt(nonce, packed, associated)


def test_the_associated_data_is_packed_as_before_so_records_read_both_ways() -> None:
    keys = KeyRing({"k1": KEY, "k2": KEY}, current="k2")
    value = Typed("msgpack", os.urandom(300))
    for place in (PLACE, ("element", "t", "ns", "__graphkeep.element__", "ab" * 12)):
        old = Typed(ENVELOPE_TAG, sealed_as_before("k1", value, place))
        assert keys.open(old, place) == value
        new = keys.seal(value, place).data
        header = new[: 2 + new[1]]
        assert header == b"\x01\x02k2"
        associated = ormsgpack.packb([ENVELOPE_TAG, header, list(place)])
        body = new[len(header) :]
        plain = AESGCM(KEY).decrypt(body[:12], body[12:], associated)
        assert codec.unpack_typed(plain) == value
        with pytest.raises(Exception) as raised:
            keys.open(Typed(ENVELOPE_TAG, new), (*place[:-1], "other"))
        assert getattr(raised.value, "kind", None) == "tampered"


def test_setting_current_seals_under_that_key_and_signs_with_it() -> None:
    keys = KeyRing({"k1": KEY, "k2": os.urandom(32)}, current="k1")
    value = Typed("msgpack", b"v")
    assert keys.seal(value, PLACE).data.startswith(b"\x01\x02k1")
    keys.current = "k2"  # as bench/rekey_cost.py rotates its ring
    sealed = keys.seal(value, PLACE)
    assert sealed.data.startswith(b"\x01\x02k2") and keys.open(sealed, PLACE) == value
    assert keys.sign(b"body", PLACE)[0] == "k2"
    with pytest.raises(Exception, match="not one of its key ids"):
        keys.current = "k3"
    assert keys.current == "k2"


def test_record_copies_keep_every_other_field() -> None:
    a, b = Typed("a", b"1"), Typed("b", b"2")
    record = CheckpointRecord(
        "t", "ns", "cid", "parent", {"c": "1"}, ["c"], ["d"], "run", a, a, {"step": 1}, "loop"
    )
    assert [f.name for f in fields(CheckpointRecord)] == [
        "thread_id",
        "ns",
        "checkpoint_id",
        "parent_id",
        "versions",
        "present",
        "needs_history",
        "run_id",
        "checkpoint",
        "metadata",
        "metadata_doc",
        "source",
    ], "a new field: add it to CheckpointRecord.with_payloads"
    assert record.with_payloads(b, a) == replace(record, checkpoint=b, metadata=a)
    assert record.with_payloads(b, b, {}) == replace(
        record, checkpoint=b, metadata=b, metadata_doc={}
    )
    write = WriteRecord("task", 2, "c", "path", a)
    assert [f.name for f in fields(WriteRecord)] == [
        "task_id",
        "idx",
        "channel",
        "task_path",
        "value",
    ]
    assert write.with_value(b) == replace(write, value=b)
    blob = BlobRecord("c", "1", a)
    assert [f.name for f in fields(BlobRecord)] == ["channel", "version", "value"]
    assert blob.with_value(b) == replace(blob, value=b)


def test_the_remembered_elements_are_bounded_and_never_change_once_handed_out() -> None:
    memory = OpenedElements(limit=5)
    value = Typed("msgpack", b"v")
    memory.remember("t1", "", {"a": (b"1", value), "b": (b"2", value)})
    held = memory.known("t1", "")
    memory.remember("t1", "", {"c": (b"3", value)})
    assert sorted(held) == ["a", "b"]  # a new dict replaced it
    assert sorted(memory.known("t1", "")) == ["a", "b", "c"]
    memory.remember("t2", "", {"d": (b"4", value), "e": (b"5", value)})
    memory.known("t1", "")  # t1 used last: t2 goes first
    memory.remember("t3", "", {"f": (b"6", value)})
    assert memory.known("t2", "") == {} and memory.remembered == (2, 4)
    memory.remember("t4", "", {str(i): (b"x", value) for i in range(6)})  # alone over the limit
    assert memory.known("t4", "") == {} and memory.remembered == (2, 4)


def test_the_remembered_elements_are_bounded_in_bytes() -> None:
    """Large elements (tool outputs, documents) are bounded by their bytes, not their number."""
    memory = OpenedElements(limit=1000, limit_bytes=10_000)
    big = Typed("msgpack", b"v" * 3000)
    memory.remember("t1", "", {"a": (b"e" * 1000, big)})  # 4,000 bytes
    memory.remember("t2", "", {"b": (b"e" * 1000, big)})
    assert memory.remembered == (2, 2) and memory.remembered_bytes == 8000
    memory.remember("t3", "", {"c": (b"e" * 1000, big)})  # 12,000: the oldest slot goes
    assert memory.known("t1", "") == {} and memory.remembered == (2, 2)
    assert memory.remembered_bytes == 8000
    memory.remember("t3", "", {"d": (b"e" * 1000, big)})  # t3 alone is 8,000: t2 goes
    assert memory.known("t2", "") == {} and memory.remembered_bytes == 8000
    memory.remember("t4", "", {"e": (b"e" * 7001, big)})  # alone over the bound: not kept
    assert memory.known("t4", "") == {} and memory.remembered_bytes == 8000


def element_envelope_length(keys: KeyRing, element: bytes) -> int:
    return len(keys.seal(codec.dump(JsonPlusSerializer(), element, "probe"), ("probe",)).data)


def test_an_element_changed_after_this_saver_read_it_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    first, second = os.urandom(ELEMENT_BYTES), os.urandom(ELEMENT_BYTES + 7)
    keys = ring("a", *IDS)
    length = element_envelope_length(keys, first)
    with opened(mode, graphkeep_url, graphkeep_backend, keys) as api:
        port = api.saver.port
        assert isinstance(port, SealedPort)
        stored = api.put(
            config(thread_id), checkpoint(1, {"m": [first, second]}, {"m": 1}), {"m": 1}
        )
        assert port.elements.remembered == (1, 2)  # sealed here: remembered
        for _ in range(2):  # opened from what this port sealed, then from what it read
            assert api.get_tuple(stored).checkpoint["channel_values"]["m"] == [first, second]

        def flip(envelope: bytes) -> bytes:
            return envelope[:-1] + bytes([envelope[-1] ^ 0x01])

        # DynamoDB's port keeps the elements it wrote or read (an element key names one content
        # for good: backends/dynamodb/elements.py) and does not read them again: this saver
        # goes on reading what it stored, never the changed bytes; a new saver reads the store
        cached = getattr(port.inner, "element_cache", None) is not None

        def read_changed() -> None:
            if cached:
                assert api.get_tuple(stored).checkpoint["channel_values"]["m"] == [first, second]
                with opened(mode, graphkeep_url, graphkeep_backend, keys) as fresh:
                    exc = raises_kind("tampered", lambda: fresh.get_tuple(stored))
            else:
                exc = raises_kind("tampered", lambda: api.get_tuple(stored))
            assert exc.thread_id == thread_id and exc.channel == ELEMENT_CHANNEL

        assert rewrite(graphkeep_backend, graphkeep_url, "a", length, flip) == 1
        read_changed()
        # put back as it was: the same bytes read as before
        assert rewrite(graphkeep_backend, graphkeep_url, "a", length, flip) == 1
        assert api.get_tuple(stored).checkpoint["channel_values"]["m"] == [first, second]
        # the element's envelope replaced by one sealed at another element's place
        other = keys.seal(
            codec.dump(api.saver.serde, first, "probe"),
            ("element", thread_id, "", ELEMENT_CHANNEL, "0" * 24),
        ).data
        assert len(other) == length
        assert rewrite(graphkeep_backend, graphkeep_url, "a", length, lambda _: other) == 1
        read_changed()


def test_remembering_elements_measures_what_it_adds_not_the_whole_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The slot's bytes are kept beside it: a call measures the entries it adds or replaces
    (it measured the whole slot at every call: ~0.2 ms of a long W50 turn), and the bytes
    held stay exact when an entry is replaced."""
    measured: list[Any] = []
    size = sealed_module.entry_bytes

    def counting(entry: Any) -> int:
        measured.append(entry)
        return size(entry)

    monkeypatch.setattr(sealed_module, "entry_bytes", counting)
    memory = OpenedElements()
    value = Typed("msgpack", b"v" * 10)
    memory.remember("t", "", {str(i): (b"e" * 20, value) for i in range(1000)})
    assert memory.remembered_bytes == 1000 * 30
    measured.clear()
    memory.remember("t", "", {"new": (b"e" * 5, value), "7": (b"e" * 40, value)})
    assert len(measured) == 3  # the two new entries and the one "7" replaced, nothing else
    assert all(isinstance(entry, tuple) for entry in measured)
    assert memory.remembered == (1, 1001)
    assert memory.remembered_bytes == 1000 * 30 + 15 + 20


#: the records of a put a sealed port remembers (besides list elements), by what they are
LAST_PUT_PARTS = ("checkpoint", "metadata", "manifest", "value")


def swap(old: bytes, new: bytes) -> Callable[[bytes], bytes | None]:
    return lambda data: data.replace(old, new) if old in data else None


@pytest.mark.parametrize("part", LAST_PUT_PARTS)
def test_a_record_changed_after_this_saver_put_it_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str, part: str
) -> None:
    """The records of a sealed port's last put (checkpoint, metadata, a list's manifest, a
    channel value) are read without decrypting or verifying them again only while the store
    holds their very bytes: one changed in the store after the put is ``tampered`` on the
    same saver's next read, and reads again once put back."""
    messages = [f"message {i} " + "m" * 300 for i in range(5)]  # a shared list: >= 1 KiB
    value = os.urandom(ELEMENT_BYTES)
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        port = api.saver.port
        assert isinstance(port, SealedPort)
        versions = {"m": 1, "x": 1}
        stored = api.put(
            config(thread_id), checkpoint(1, {"m": messages, "x": value}, versions), versions
        )
        cid = stored["configurable"]["checkpoint_id"]
        last = port.last_puts.known(thread_id, "")
        channel = {"manifest": "m", "value": "x"}.get(part)
        (key,) = [k for k in last if k == (part, cid) or (channel and k[0] == channel)]
        envelope = last[key][1]

        def read() -> Any:
            found = api.get_tuple(stored)
            assert found.checkpoint["channel_values"] == {"m": messages, "x": value}
            assert found.metadata["source"] == "loop"
            return found

        read()
        flipped = envelope[:-1] + bytes([envelope[-1] ^ 0x01])
        assert DAMAGE[graphkeep_backend](graphkeep_url, swap(envelope, flipped)) == 1
        exc = raises_kind("tampered", lambda: api.get_tuple(stored))
        assert exc.thread_id == thread_id and exc.checkpoint_id == cid
        if channel:
            assert exc.channel == channel
        else:
            assert exc.place is not None and exc.place.part == part
        assert DAMAGE[graphkeep_backend](graphkeep_url, swap(flipped, envelope)) == 1
        read()
