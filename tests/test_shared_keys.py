"""Unit tests of identifier handling and serde helpers (no server)."""

from __future__ import annotations

import pytest

from graphkeep.checkpoint.filters import check_filter, matches
from graphkeep.checkpoint.ids import next_version, normalize_thread_id
from graphkeep.errors import InvalidFilter, InvalidThreadId, mask_url
from graphkeep.port import codec


@pytest.mark.parametrize(
    "value", [None, "", "x" * 1025, "a\x00b", {"$gt": ""}, ["a"], True, 1.5, b"t"]
)
def test_bad_thread_ids_are_rejected(value: object) -> None:
    with pytest.raises(InvalidThreadId):
        normalize_thread_id(value)


def test_int_and_str_thread_ids_are_one_thread() -> None:
    assert normalize_thread_id(7) == normalize_thread_id("7") == "7"


def test_thread_id_limit_counts_utf8_bytes() -> None:
    normalize_thread_id("é" * 512)
    with pytest.raises(InvalidThreadId):
        normalize_thread_id("é" * 513)
    normalize_thread_id("x" * 2000, max_bytes=4096)


def test_versions_sort_as_strings_in_numeric_order() -> None:
    versions = [None]
    for _ in range(12):
        versions.append(next_version(versions[-1]))
    produced = versions[1:]
    assert produced == sorted(produced)
    assert int(produced[9].split(".")[0]) == 10
    assert next_version(5).startswith(f"{6:032}.")


def test_versions_of_forks_differ() -> None:
    assert next_version("00000000000000000000000000000003.5") != next_version(
        "00000000000000000000000000000003.5"
    )


def test_mask_url_hides_passwords() -> None:
    masked = mask_url("redis://user:s3cret@host:6379/0")
    assert "s3cret" not in masked and "***" in masked
    assert "s3cret" not in mask_url("mongodb+srv://u:s3cret@cluster.example/db?x=1")
    assert mask_url("redis://host:6379") == "redis://host:6379"


def test_filter_keys_that_look_like_operators_are_rejected() -> None:
    with pytest.raises(InvalidFilter):
        check_filter({"$where": "1"})
    with pytest.raises(InvalidFilter):
        check_filter({"": 1})


def test_filter_matches_top_level_keys_with_deep_equality() -> None:
    metadata = {"source": "loop", "step": 2, "nested": {"a": [1, 2]}, "flag": True}
    assert matches(metadata, check_filter({"step": 2.0, "source": "loop"}))
    assert matches(metadata, check_filter({"nested": {"a": (1, 2)}}))
    assert not matches(metadata, check_filter({"flag": 1}))
    assert matches(metadata, check_filter({"missing": None}))


def test_split_and_join_are_inverse() -> None:
    data = bytes(range(256)) * 1000
    chunks = codec.split(data, 1000)
    assert len(chunks) == 256 and codec.join(chunks) == data
    assert codec.split(b"", 10) == [b""]


@pytest.mark.parametrize("level", [1, 6])
@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 1000, 2048, 2049, 4096, 20000, 32768, 70000])
def test_deflate_is_zlibs_stream_with_a_window_sized_to_the_data(level: int, size: int) -> None:
    """Any zlib reader reads it (older graphkeep included), and it is no larger than what
    ``zlib.compress`` makes of the same bytes, but for a few bytes of a smaller hash table."""
    import random
    import zlib

    words = b"the agent calls a tool with the weather in paris and answers the user".split()
    rng = random.Random(size)
    data = b" ".join(rng.choice(words) for _ in range(size))[:size]
    packed = codec.deflate(data, level)
    assert zlib.decompress(packed) == data
    assert zlib.decompressobj().decompress(packed) == data
    full = zlib.compress(data, level)
    assert len(packed) <= len(full) * 1.02 + 4
    if size <= codec.DEFLATE_SIZED_BYTES:
        window = 1 << ((packed[0] >> 4) + 8)  # the zlib header's CINFO
        assert window >= min(size, 512) and (window < 32768 or size > 16384)
