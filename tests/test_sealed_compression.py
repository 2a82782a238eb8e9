"""With ``encryption=``, a checkpoint's payloads are compressed *before* they are sealed, by the
rule the backend applies without encryption — on real servers, every backend, sync and async.

Ciphertext does not compress. Redis and MongoDB leave compression to the saver
(:func:`graphkeep.port.codec.squeeze`: level 1, from 256 bytes), which runs before the sealed
port seals; DynamoDB compresses per item (its ``compress`` option: level 6, from 128 bytes), so
a sealed saver on DynamoDB used to hand it envelopes it could not shrink. Now the saver
compresses each payload by the port's own rule first (``compression``) and the DynamoDB item
holding envelopes is stored as it is (no ``z``). Items written the old way (an envelope
compressed after sealing, ``z = zlib`` on the item) still read.

The payloads as stored are read through the saver's inner port (``saver.port.inner``, the
records before they are opened) and opened with the ring at their place: their inner tag says
whether they were compressed (``z:``).
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest

import graphkeep
from graphkeep.checkpoint.records import ThreadDump
from graphkeep.checkpoint.sealed import record_place, value_place
from graphkeep.port import codec
from tests.scenarios.backends import dynamodb_client
from tests.test_encryption import MODES, checkpoint, config, opened, ring

#: a channel value that serializes to 128..255 bytes: DynamoDB compresses it, the others do not
SMALL = ("the same few words again " * 8)[:180]
#: one well over every backend's floor
LARGE = "a chat message that says much the same thing as the one before it " * 60


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def stored(url: str, thread_id: str, **options: Any) -> tuple[ThreadDump, Any]:
    """The thread's records as stored (sealed), and the ring that opens them."""
    keys = ring("a")
    with graphkeep.connect(url, encryption=keys, **options) as saver:
        return saver.drive(saver.port.inner.export_thread(thread_id)), keys


def inner_tags(dump: ThreadDump, keys: Any, thread_id: str) -> dict[str, str]:
    """The tag each sealed payload opens to: per channel value, and ``checkpoint``."""
    tags = {
        blob.channel: keys.open(blob.value, value_place(thread_id, ns, blob.channel, blob.version))
        for ns, blob in dump.blobs
    }
    (record,) = dump.checkpoints
    tags["checkpoint"] = keys.open(record.checkpoint, record_place("checkpoint", record))
    return {name: opened_.tag for name, opened_ in tags.items()}


def dynamodb_items(url: str) -> list[dict[str, Any]]:
    client, table = dynamodb_client(url)
    return [
        item
        for page in client.get_paginator("scan").paginate(TableName=table)
        for item in page["Items"]
    ]


def test_sealed_payloads_are_compressed_before_sealing_by_the_backends_rule(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, mode: str
) -> None:
    """A large and a small compressible value, sealed: the large one is compressed inside its
    envelope on every backend; the small one (128..255 bytes) as the backend compresses it
    without encryption (DynamoDB: yes; Redis, MongoDB: no). On DynamoDB no item is
    compressed after sealing, and with ``compress=False`` nothing is compressed at all."""
    values = {"small": SMALL, "large": LARGE}
    versions = {"small": 1, "large": 1}
    dynamodb = graphkeep_backend == "dynamodb"
    default = {"compress": True} if dynamodb else {}  # (``opened`` turns it off on DynamoDB)
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a"), **default) as api:
        api.put(config(thread_id), checkpoint(1, values, versions), versions)
        got = api.get_tuple(config(thread_id))
        assert got.checkpoint["channel_values"] == values
    dump, keys = stored(graphkeep_url, thread_id)
    tags = inner_tags(dump, keys, thread_id)
    assert tags["large"].startswith(codec.COMPRESSED_PREFIX), tags
    assert tags["small"].startswith(codec.COMPRESSED_PREFIX) == dynamodb, tags
    if not dynamodb:
        return
    # DynamoDB: the items holding envelopes are stored as they are (ciphertext: no ``z``)
    assert [i["sk"]["S"] for i in dynamodb_items(graphkeep_url) if "z" in i] == []
    # compress=False: the payloads go into their envelopes as serialized
    other = f"{thread_id}-plain"
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a"), compress=False) as api:
        api.put(config(other), checkpoint(1, values, versions), versions)
        assert api.get_tuple(config(other)).checkpoint["channel_values"] == values
    dump, keys = stored(graphkeep_url, other, compress=False)
    tags = inner_tags(dump, keys, other)
    assert not any(t.startswith(codec.COMPRESSED_PREFIX) for t in tags.values()), tags


def test_a_dynamodb_item_compressed_after_sealing_still_reads(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, mode: str
) -> None:
    """Records written before this release (an envelope holding an uncompressed payload, the
    item's bytes zlib-compressed around it, ``z = zlib``) read back whole; every backend
    reads the same thread (on Redis and MongoDB nothing was ever compressed after sealing:
    the thread simply reads)."""
    values = {"small": SMALL, "large": LARGE}
    versions = {"small": 1, "large": 1}
    # written with the payloads left uncompressed inside their envelopes, as before
    # (``opened`` passes compress=False on DynamoDB)
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a")) as api:
        api.put(config(thread_id), checkpoint(1, values, versions), versions)
    if graphkeep_backend == "dynamodb":
        client, table = dynamodb_client(graphkeep_url)
        redone = 0
        for item in dynamodb_items(graphkeep_url):
            if "v" in item and "z" not in item and item["sk"]["S"].startswith(("c#", "b#")):
                item["v"] = {"B": zlib.compress(bytes(item["v"]["B"]), 6)}
                item["z"] = {"S": "zlib"}
                client.put_item(TableName=table, Item=item)
                redone += 1
        assert redone >= 3  # the head and both values
    default = {"compress": True} if graphkeep_backend == "dynamodb" else {}
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a"), **default) as api:
        got = api.get_tuple(config(thread_id))
        assert got is not None and got.checkpoint["channel_values"] == values
