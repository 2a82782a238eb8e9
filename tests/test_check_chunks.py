"""``graphkeep check`` finds the chunks an overwrite of an earlier release left behind, and
``--repair`` removes exactly them — every backend (Redis keeps no chunks: its thread simply
checks clean and reads), sync and async writers.

Before the chunk fix (tests/test_chunk_overwrite.py), a large payload written again in place
with other bytes left its old chunks: MongoDB's tail documents of the old generation and a
checkpoint's ``kind: "checkpoint"`` payload once the checkpoint is stored inline, DynamoDB's
chunk items of the old digest. Data written then still holds them. The test plants them as
that release left them: it snapshots the chunks with the server's own client (pymongo, boto3),
puts the checkpoint again with other bytes (this release deletes the old chunks), and writes
the deleted ones back. It also plants a chunk whose owner is not stored (what a put in flight
looks like: chunks first): never reported, never removed.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import graphkeep
from graphkeep.backends.dynamodb import keys as dynamodb_keys
from tests.cli_runs import gk
from tests.conftest import REDIS_FAMILY
from tests.scenarios.backends import dynamodb_client, mongodb_documents
from tests.test_chunk_overwrite import large, options

MODES = ("sync", "async")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def put(
    url: str, backend: str, mode: str, thread_id: str, cid: str, value: bytes, note: bytes
) -> None:
    """Checkpoint ``cid`` with value ``x`` (version 1) and metadata ``note``: large ones
    are chunked."""
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cp = {**empty_checkpoint(), "id": cid}
    cp["channel_values"], cp["channel_versions"] = {"x": value}, {"x": 1}
    if mode == "sync":
        with graphkeep.connect(url, **options(backend)) as saver:
            saver.put(cfg, cp, {"note": note}, {"x": 1})
        return

    async def run() -> None:
        async with graphkeep.aconnect(url, **options(backend)) as saver:
            await saver.aput(cfg, cp, {"note": note}, {"x": 1})

    asyncio.run(run())


def read(url: str, backend: str, thread_id: str) -> tuple[Any, Any]:
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with graphkeep.connect(url, **options(backend)) as saver:
        got = saver.get_tuple(cfg)
    assert got is not None
    return got.checkpoint["channel_values"]["x"], got.metadata["note"]


# -- the chunks, with the server's own client ----------------------------------------------


def chunks(backend: str, url: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every chunk stored, by its ref (MongoDB ``_id``, DynamoDB sort key): (where, record)."""
    if backend.startswith(REDIS_FAMILY):
        return {}
    if backend == "mongodb":
        return {
            str(doc["_id"]): (collection.name, doc)
            for collection, doc in mongodb_documents(url)
            if doc.get("part") or doc.get("kind") == "checkpoint"
        }
    client, table = dynamodb_client(url)
    return {
        item["sk"]["S"]: (table, item)
        for page in client.get_paginator("scan").paginate(TableName=table)
        for item in page["Items"]
        if item["sk"]["S"].startswith("k#")
    }


def write_back(backend: str, url: str, records: list[tuple[str, dict[str, Any]]]) -> None:
    if not records:
        return
    if backend == "mongodb":
        import pymongo

        with pymongo.MongoClient(url, serverSelectionTimeoutMS=5000) as client:
            db = client.get_default_database()
            for collection, doc in records:
                db[collection].insert_one(doc)
        return
    client, _ = dynamodb_client(url)
    for table, item in records:
        client.put_item(TableName=table, Item=item)


def in_flight(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A copy of DynamoDB chunk item ``record`` whose owner item is not stored (a put in
    flight writes its chunks first): its sort key, and the item. (On MongoDB a tail without
    its head is a value or write no checkpoint names: ``orphan_values`` / ``orphan_writes``,
    tests/test_check.py.)"""
    parsed = dynamodb_keys.parse_sk(record["sk"]["S"])
    owner = (parsed.owner or "") + "-in-flight"
    sk = dynamodb_keys.chunk_sk(owner, parsed.digest or "", 0)
    return sk, {**record, "sk": {"S": sk}}


def test_check_lists_old_chunk_leftovers_and_repair_removes_exactly_them(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, mode: str
) -> None:
    size = large(graphkeep_backend)
    first_value, first_note = os.urandom(size), os.urandom(size)
    cid = empty_checkpoint()["id"]  # of now: the grace period holds a repair off it
    put(graphkeep_url, graphkeep_backend, mode, thread_id, cid, first_value, first_note)
    before = chunks(graphkeep_backend, graphkeep_url)
    # put again with other bytes: a larger value, a small note (the checkpoint inline)
    value = os.urandom(size + 100)
    put(graphkeep_url, graphkeep_backend, mode, thread_id, cid, value, b"small")
    live = chunks(graphkeep_backend, graphkeep_url)
    planted = {ref: rec for ref, rec in before.items() if ref not in live}
    write_back(graphkeep_backend, graphkeep_url, list(planted.values()))  # as 0.1 left them
    flight: dict[str, tuple[str, dict[str, Any]]] = {}
    if graphkeep_backend == "dynamodb":
        where, record = live[min(live)]
        flight_ref, copy = in_flight(record)
        flight[flight_ref] = (where, copy)
        write_back(graphkeep_backend, graphkeep_url, [(where, copy)])
    chunked = not graphkeep_backend.startswith(REDIS_FAMILY)
    if chunked:  # the value's old chunks and the old chunked checkpoint payload
        assert len(planted) >= 3, sorted(planted)
    assert read(graphkeep_url, graphkeep_backend, thread_id) == (value, b"small")

    checked = gk("check", graphkeep_url, "--thread", thread_id, "--json")
    findings = [f for f in checked.json()["findings"] if f["kind"] == "orphan_chunks"]
    if not chunked:
        assert checked.code == 0 and findings == [], checked.out
    else:
        assert checked.code == 3, checked.out + checked.err  # warnings only
        ((finding,),) = [findings]
        assert finding["severity"] == "warning"
        assert finding["detail"].startswith(f"{len(planted)} chunk(s)"), finding

    # within the grace period (the thread was just written) nothing is removed
    kept = gk("check", graphkeep_url, "--thread", thread_id, "--repair", "--yes", "--json")
    assert kept.json()["repair"]["chunks_deleted"] == 0, kept.out
    assert set(chunks(graphkeep_backend, graphkeep_url)) == set(live) | set(planted) | set(flight)

    repaired = gk(
        "check", graphkeep_url, "--thread", thread_id, "--repair", "--yes", "--grace", "0", "--json"
    )
    report = repaired.json()
    assert repaired.code == 0, repaired.out + repaired.err
    assert report["repair"]["chunks_deleted"] == len(planted), report["repair"]
    plan = report["repair"]["plan"]
    assert sorted(c for t in plan for c in t["chunks"]) == sorted(planted)
    # exactly the leftovers: the live chunks and the one of a put in flight stay
    assert set(chunks(graphkeep_backend, graphkeep_url)) == set(live) | set(flight)
    assert not [f for f in report["findings"] if f["kind"] == "orphan_chunks"]
    assert read(graphkeep_url, graphkeep_backend, thread_id) == (value, b"small")
