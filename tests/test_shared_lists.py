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


def test_an_element_mutated_in_place_is_a_new_element_and_the_list_reads_as_it_is_now() -> None:
    sharer = ListSharer(JsonPlusSerializer())
    value = chat(5)
    first = sharer.share("t", "", "messages", value, "channel")
    assert first is not None
    sharer.committed("t", "", [first])
    value[3].content += " (edited in place)"  # the same object, other content
    again = sharer.share("t", "", "messages", value, "channel")
    assert again is not None and len(again.elements) == 1, "only the edited element is new"
    stored = {e.version: e.value for e in first.elements + again.elements}
    assert rebuild(JsonPlusSerializer(), again.manifest, stored, "here")[0] == value
    assert rebuild(JsonPlusSerializer(), first.manifest, stored, "here")[0] == chat(5)


def test_large_elements_are_remembered_by_digest_and_memory_is_bounded_in_bytes() -> None:
    big = [HumanMessage("x" * 5000 + str(i), id=f"b{i}") for i in range(10)]
    sharer = ListSharer(JsonPlusSerializer(), budget=12_000)
    for n in range(3):
        shared = sharer.share(f"t{n}", "", "messages", chat(10), "channel")
        assert shared is not None
        sharer.committed(f"t{n}", "", [shared])
        assert sharer.remembered_bytes <= 12_000
    assert sharer.remembered == (1, 20), "20 messages of ~500 bytes: one thread fits the budget"
    wide = ListSharer(JsonPlusSerializer())
    shared = wide.share("t", "", "messages", big, "channel")
    assert shared is not None
    wide.committed("t", "", [shared])
    assert wide.remembered == (1, 10)
    assert wide.remembered_bytes < 10 * 200, "elements over IDENTITY_BYTES are held as digests"
    big[4].content += "!"  # in place: a new element, found by its digest
    again = wide.share("t", "", "messages", big, "channel")
    assert again is not None and len(again.elements) == 1
