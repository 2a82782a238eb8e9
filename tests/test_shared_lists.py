"""Unit tests of the shared-list logic (no store): manifests, dedup, memory bounds, encryption."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graphkeep.checkpoint.lists import (
    ELEMENT_CHANNEL,
    ListSharer,
    element_key,
    encode_manifest,
    manifest_keys,
    rebuild,
    split_key,
)
from graphkeep.errors import CorruptData, SerializationError
from graphkeep.port import codec

TEXT = "lorem ipsum dolor sit amet " * 8


def chat(turns: int) -> list[Any]:
    out: list[Any] = []
    for t in range(turns):
        out += [HumanMessage(f"q{t} {TEXT}", id=f"h{t}"), AIMessage(f"a{t} {TEXT}", id=f"a{t}")]
    return out


def test_an_append_only_list_is_one_run_and_a_manifest_round_trips_any_order() -> None:
    keys = [element_key("00ff00ff00ff00ff", i) for i in range(500)]
    manifest = encode_manifest((k, *split_key(k)) for k in keys)
    assert len(manifest.data) < 40, "an append-only manifest must stay O(1)"
    assert manifest_keys(manifest) == keys
    mixed = [keys[3], keys[1], keys[1], element_key("aa" * 8, 7), keys[2]]
    assert manifest_keys(encode_manifest((k, *split_key(k)) for k in mixed)) == mixed


def test_a_put_writes_only_new_elements_and_only_after_commit_are_they_known() -> None:
    sharer = ListSharer(JsonPlusSerializer())
    first = sharer.share("t", "", "messages", chat(5), "channel")
    assert first is not None and len(first.elements) == 10
    again = sharer.share("t", "", "messages", chat(6), "channel")
    assert again is not None and len(again.elements) == 12, "not committed: nothing is known"
    sharer.committed("t", "", [again])
    grown = sharer.share("t", "", "messages", chat(7), "channel")
    assert grown is not None and len(grown.elements) == 2
    keys = [e.version for e in first.elements + again.elements + grown.elements]
    assert len(set(keys)) == len(keys), "an element key is never reused, even after a failed put"
    assert all(e.channel == ELEMENT_CHANNEL for e in grown.elements)
    elements = {e.version: e.value for e in again.elements + grown.elements}
    value, _ = rebuild(JsonPlusSerializer(), grown.manifest, elements, "here")
    assert value == chat(7)


def test_small_lists_tuples_and_subclasses_keep_the_plain_path() -> None:
    sharer = ListSharer(JsonPlusSerializer())
    assert sharer.share("t", "", "c", ["a", "b"], "channel") is None
    assert sharer.share("t", "", "c", tuple(chat(5)), "channel") is None

    class Sub(list[Any]):
        pass

    assert sharer.share("t", "", "c", Sub(chat(5)), "channel") is None


def test_a_missing_element_is_corrupt_data_never_a_shorter_list() -> None:
    sharer = ListSharer(JsonPlusSerializer())
    shared = sharer.share("t", "", "messages", chat(3), "channel")
    assert shared is not None
    elements = {e.version: e.value for e in shared.elements[1:]}
    with pytest.raises(CorruptData, match="thread 'x'"):
        rebuild(JsonPlusSerializer(), shared.manifest, elements, "thread 'x'")


def test_an_unserializable_element_is_named() -> None:
    sharer = ListSharer(JsonPlusSerializer())
    with pytest.raises(SerializationError, match=r"channel 'messages'\[6\]"):
        sharer.share("t", "", "messages", [*chat(3), object()], "channel 'messages'")


def test_encrypted_elements_dedup_on_plain_bytes_and_are_each_encrypted() -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    sharer = ListSharer(serde)
    first = sharer.share("t", "", "messages", chat(4), "channel")
    assert first is not None
    sharer.committed("t", "", [first])
    grown = sharer.share("t", "", "messages", chat(5), "channel")
    assert grown is not None and len(grown.elements) == 2
    assert all(e.value.tag.endswith("+aes") for e in first.elements + grown.elements)
    elements = {e.version: e.value for e in first.elements + grown.elements}
    assert rebuild(serde, grown.manifest, elements, "here")[0] == chat(5)


def test_a_read_teaches_a_new_saver_what_the_store_has() -> None:
    writer = ListSharer(JsonPlusSerializer())
    shared = writer.share("t", "", "messages", chat(5), "channel")
    assert shared is not None
    stored = {e.version: codec.squeeze(e.value) for e in shared.elements}
    reader = ListSharer(JsonPlusSerializer())
    value, pairs = rebuild(JsonPlusSerializer(), shared.manifest, stored, "here")
    reader.learned("t", "", "messages", value, pairs)
    grown = reader.share("t", "", "messages", chat(6), "channel")
    assert grown is not None and len(grown.elements) == 2
    assert grown.elements[0].version[:16] != shared.elements[0].version[:16], "own epoch"


def test_memory_is_bounded_by_slots_and_by_element_hashes() -> None:
    sharer = ListSharer(JsonPlusSerializer(), entries=8, elements=100)
    for n in range(20):
        shared = sharer.share(f"t{n}", "", "messages", chat(10), "channel")
        assert shared is not None
        sharer.committed(f"t{n}", "", [shared])
        slots, hashes = sharer.remembered
        assert slots <= 8 and hashes <= 100
    assert sharer.remembered == (5, 100)  # 20 hashes per thread: the 5 most recent fit
    sharer.forget("t19")
    assert sharer.remembered[1] == 80


def _stored(serde: Any, values: list[Any]) -> list[codec.Typed]:
    return [codec.squeeze(codec.Typed(*serde.dumps_typed(v)), 128) for v in values]


def test_a_list_decoded_in_one_call_equals_its_elements_decoded_one_by_one() -> None:
    serde = JsonPlusSerializer()
    values = [*chat(12), None, {"k": [1, 2.5, "x", b"raw"]}, 7, "text", [None, {}]]
    stored = _stored(serde, values)
    assert any(t.tag.startswith(codec.COMPRESSED_PREFIX) for t in stored)
    got = codec.load_many(serde, stored)
    assert got == values == [codec.load(serde, t) for t in stored]
    assert [type(x) for x in got] == [type(x) for x in values]
    assert got[0] is not codec.load_many(serde, stored)[0]  # fresh objects at every read


def _one_by_one(serde: Any, stored: list[codec.Typed]) -> Any:
    try:
        return [codec.load(serde, t) for t in stored]
    except CorruptData:
        return CorruptData


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-3],  # truncated: it would take the next element's first bytes
        lambda d: d + b"\x01",  # padded: one by one ignores it, a batch would shift
        lambda d: b"\xc1" + d[1:],  # a byte msgpack never uses
        lambda d: b"\x92" + d,  # two values where one was
    ],
    ids=["truncated", "padded", "never-used-byte", "one-more-value"],
)
def test_a_damaged_element_decodes_in_a_batch_as_it_does_alone(damage: Any) -> None:
    """Never a list shifted by one element's damage: a batch answers what decoding each
    element alone answers (CorruptData, or the same values)."""
    serde = JsonPlusSerializer()
    values = chat(10)
    stored = [codec.Typed("msgpack", serde.dumps_typed(v)[1]) for v in values]
    stored[4] = codec.Typed("msgpack", damage(stored[4].data))
    expected = _one_by_one(serde, stored)
    if expected is CorruptData:
        with pytest.raises(CorruptData):
            codec.load_many(serde, stored)
    else:
        assert codec.load_many(serde, stored) == expected


def test_a_batch_element_decoded_to_none_that_is_not_none_is_corrupt_data() -> None:
    serde = JsonPlusSerializer()
    stored = _stored(serde, chat(3))
    stored[2] = codec.Typed("msgpack", b"\xd4\x7f\x00")  # an extension no reader knows
    with pytest.raises(CorruptData):
        codec.load_many(serde, stored)
