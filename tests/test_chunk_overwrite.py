"""No chunk of an overwritten large value is left behind, and no read returns a value whose
chunks are gone as if it were whole or absent — every backend, sync and async.

MongoDB splits a payload over ``chunk_size`` into a head and tail documents (``part``; a
checkpoint's own payload into a ``kind: "checkpoint"`` document group), DynamoDB a payload over
its 400 KB item limit into ``k#`` chunk items whose keys carry the bytes' digest; Redis keeps a
value whole (it has no chunks: its cases prove the values read back). A value written again in
place with other bytes names a new generation, so the old one's chunks stay unless the write
deletes them: a checkpoint put again with its id (LangGraph allows re-putting), a channel value
written again, a special write replaced, a regular write sent again with other bytes (the first
is kept), a store item put over. The tests count the chunks with each backend's own client
(``mongodb_documents``, a boto3 Scan): every chunk stored belongs to the record that names it,
and after ``delete_thread`` / a store ``delete`` none is left.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR

import graphkeep
from conformance.factory import Api, AsyncApi, EventLoop, SyncApi
from graphkeep.backends.dynamodb.keys import parse_sk
from graphkeep.errors import CorruptData
from tests.conftest import REDIS_FAMILY
from tests.scenarios.backends import dynamodb_client, mongodb_documents

#: MongoDB's smallest chunk size (1 KiB): a few KiB make several tail documents
MONGODB_CHUNK = 1024


def large(backend: str) -> int:
    """Bytes over the backend's chunking limit, as small as it allows (random: compression
    does not bring them under): DynamoDB's 400 KB item limit, MongoDB's chunk size here."""
    return 800_000 if backend == "dynamodb" else 5 * MONGODB_CHUNK


def options(backend: str) -> dict[str, Any]:
    if backend == "mongodb":
        return {"chunk_size": MONGODB_CHUNK}
    return {"compress": False} if backend == "dynamodb" else {}


@contextmanager
def api(url: str, backend: str, mode: str) -> Iterator[Api]:
    if mode == "sync":
        with graphkeep.connect(url, **options(backend)) as saver:
            yield SyncApi(saver)
        return
    loop = EventLoop()
    try:
        with loop.enter(graphkeep.aconnect(url, **options(backend))) as saver:
            yield AsyncApi(saver, loop)
    finally:
        loop.close()


def chunks(backend: str, url: str) -> tuple[int, list[Any]]:
    """How many chunks are stored, and those no stored record names (read with the backend's
    own client). MongoDB: tail documents (``part``), each named by its head's generation
    ``g``, and ``kind: "checkpoint"`` payloads, named by a checkpoint document without an
    inline payload; DynamoDB: ``k#`` items, each named by an owner item with its digest."""
    if backend.startswith(REDIS_FAMILY):
        return 0, []
    if backend == "mongodb":
        docs = [doc for _, doc in mongodb_documents(url) if {"kind", "ns", "ref"} <= set(doc)]

        def group(doc: dict[str, Any]) -> tuple[Any, ...]:
            return (doc["thread_id"], doc["ns"], doc["kind"], doc["ref"], doc.get("sub") or "")

        heads = {group(d): d for d in docs if not d.get("part")}
        chunked_cps = {
            (d["thread_id"], d["ns"], d["ref"]) for d in docs if d["kind"] == "cp" and "d" not in d
        }
        tails = [d for d in docs if d.get("part")]
        stored = [d for d in docs if d["kind"] == "checkpoint" and not d.get("part")]
        orphans = [
            (d["kind"], d["ref"], d["part"])
            for d in tails
            if group(d) not in heads or not d["part"].startswith(f"{heads[group(d)].get('g')}/")
        ]
        orphans += [
            ("checkpoint", d["ref"])
            for d in stored
            if (d["thread_id"], d["ns"], d["ref"]) not in chunked_cps
        ]
        return len(tails) + len(stored), orphans
    client, table = dynamodb_client(url)
    items = [
        item
        for page in client.get_paginator("scan").paginate(TableName=table)
        for item in page["Items"]
    ]
    owners = {(i["pk"]["S"], i["sk"]["S"]): i for i in items}
    found = [i for i in items if i["sk"]["S"].startswith("k#")]
    orphans = []
    for item in found:
        parsed = parse_sk(item["sk"]["S"])
        owner = owners.get((item["pk"]["S"], parsed.owner))
        if owner is None or owner.get("dg", {}).get("S") != parsed.digest:
            orphans.append(item["sk"]["S"])
    return len(found), orphans


def checkpoint(cid: str, value: bytes) -> dict[str, Any]:
    return {
        **empty_checkpoint(),
        "id": cid,
        "channel_values": {"x": value},
        "channel_versions": {"x": 1},
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_checkpoint_put_again_and_its_writes_replaced_leave_no_old_chunk(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, mode: str
) -> None:
    """One checkpoint id put four times (large -> other large -> small -> large: its body,
    metadata and channel value, the value under the same version), a special write replaced
    the same way, a regular write sent again with other large bytes (the first kept): after
    each step every value reads back exact and every stored chunk is named by its record;
    ``delete_thread`` leaves none."""
    size = large(graphkeep_backend)
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cid = empty_checkpoint()["id"]
    with api(graphkeep_url, graphkeep_backend, mode) as saver:
        first = os.urandom(size)
        steps = [os.urandom(size), os.urandom(size), b"small", os.urandom(size)]
        regular = os.urandom(size)
        for n, value in enumerate(steps):
            stored = saver.put(cfg, checkpoint(cid, value), {"note": value, "step": n}, {"x": 1})
            saver.put_writes(stored, [(ERROR, value)], "task-1")
            saver.put_writes(stored, [("w", regular if n == 0 else first)], "task-2")
            got = saver.get_tuple(cfg)
            assert got is not None and got.config["configurable"]["checkpoint_id"] == cid
            assert got.checkpoint["channel_values"]["x"] == value
            assert got.metadata["note"] == value and got.metadata["step"] == n
            assert sorted(got.pending_writes) == sorted(
                [("task-1", ERROR, value), ("task-2", "w", regular)]
            )
            count, orphans = chunks(graphkeep_backend, graphkeep_url)
            assert orphans == [], f"step {n}: chunks of old values left behind"
            if not graphkeep_backend.startswith(REDIS_FAMILY):
                # chunked: the body (MongoDB: with its metadata), the value, both writes
                assert count >= (2 if len(value) < size else 6), count
        saver.delete_thread(thread_id)
        assert saver.get_tuple(cfg) is None
    assert chunks(graphkeep_backend, graphkeep_url) == (0, [])


def store_options(backend: str) -> dict[str, Any]:
    return {"compress": False} if backend == "dynamodb" else {}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_store_item_put_over_leaves_no_old_chunk(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    """A store item over the backend's chunking limit (DynamoDB: 400 KB; MongoDB and Redis
    keep a store value whole, up to 16 MB on MongoDB) put over with other large bytes, a
    small value, a large one again, then deleted: each reads back exact, every chunk stored
    is named by its item, none is left after the delete."""
    size = 600_000 if graphkeep_backend == "dynamodb" else 64 * 1024
    values = [os.urandom(size).hex(), os.urandom(size).hex(), "small", os.urandom(size).hex()]
    ns = ("docs", "chunked")

    def check(expected: str | None) -> None:
        count, orphans = chunks(graphkeep_backend, graphkeep_url)
        assert orphans == []
        if graphkeep_backend == "dynamodb":
            assert (count > 0) == (expected is not None and len(expected) > size)

    if mode == "sync":
        with graphkeep.connect_store(graphkeep_url, **store_options(graphkeep_backend)) as store:
            for value in values:
                store.put(ns, "k", {"v": value})
                item = store.get(ns, "k")
                assert item is not None and item.value == {"v": value}
                check(value)
            store.delete(ns, "k")
            assert store.get(ns, "k") is None
    else:

        async def run() -> None:
            async with graphkeep.aconnect_store(
                graphkeep_url, **store_options(graphkeep_backend)
            ) as store:
                for value in values:
                    await store.aput(ns, "k", {"v": value})
                    item = await store.aget(ns, "k")
                    assert item is not None and item.value == {"v": value}
                    check(value)
                await store.adelete(ns, "k")
                assert await store.aget(ns, "k") is None

        asyncio.run(run())
    check(None)
    assert chunks(graphkeep_backend, graphkeep_url) == (0, [])


def test_a_reader_racing_overwrites_of_a_chunked_checkpoint_reads_it_whole(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str
) -> None:
    """One thread puts one checkpoint id again and again with other large bytes while another
    reads it: the old chunks are deleted right after each new head is stored, so a read that
    met the old head finds its chunks gone; it reads again. Every read returns one whole
    version (its value and metadata of the same put), never a value read as absent, never a
    CorruptData; no chunk is left behind."""
    size = large(graphkeep_backend)
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cid = empty_checkpoint()["id"]
    puts = 12 if graphkeep_backend == "dynamodb" else 30
    versions = [os.urandom(size) for _ in range(puts)]
    with graphkeep.connect(graphkeep_url, **options(graphkeep_backend)) as saver:
        saver.put(cfg, checkpoint(cid, versions[0]), {"note": versions[0]}, {"x": 1})
        done = threading.Event()
        failures: list[BaseException] = []

        def write() -> None:
            try:
                for value in versions[1:]:
                    saver.put(cfg, checkpoint(cid, value), {"note": value}, {"x": 1})
            except BaseException as exc:  # noqa: BLE001 — reported by the test
                failures.append(exc)
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        reads = 0
        try:
            while not done.is_set() or reads < 3:
                got = saver.get_tuple(cfg)
                assert got is not None
                value = got.checkpoint["channel_values"].get("x")
                assert value in versions, "a value read in part, or as absent"
                assert got.metadata["note"] in versions
                reads += 1
        except CorruptData as exc:
            pytest.fail(f"a read racing an overwrite failed instead of reading again: {exc}")
        finally:
            writer.join()
        assert not failures, failures
    assert chunks(graphkeep_backend, graphkeep_url)[1] == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_copy_thread_onto_a_thread_with_the_same_records_leaves_no_old_chunk(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, mode: str
) -> None:
    """``copy_thread`` onto a thread that holds the same checkpoint, value version and write
    with other large bytes (an import over stored records): the target reads the source's
    bytes and no chunk of its own old ones is left."""
    size = large(graphkeep_backend)
    target = f"{thread_id}-target"
    cid = empty_checkpoint()["id"]
    mine, theirs = os.urandom(size), os.urandom(size)
    with api(graphkeep_url, graphkeep_backend, mode) as saver:
        for thread, value in ((thread_id, mine), (target, theirs)):
            cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            stored = saver.put(cfg, checkpoint(cid, value), {"note": value}, {"x": 1})
            saver.put_writes(stored, [(ERROR, value)], "task-1")
        saver.copy_thread(thread_id, target)
        got = saver.get_tuple({"configurable": {"thread_id": target, "checkpoint_ns": ""}})
        assert got is not None and got.checkpoint["channel_values"]["x"] == mine
        assert got.metadata["note"] == mine and got.pending_writes == [("task-1", ERROR, mine)]
    count, orphans = chunks(graphkeep_backend, graphkeep_url)
    assert orphans == []
    if not graphkeep_backend.startswith(REDIS_FAMILY):
        assert count > 0
