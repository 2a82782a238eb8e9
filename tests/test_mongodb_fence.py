"""Fenced leases on MongoDB: what only this backend's mapping does (the contract itself is
proved on every backend elsewhere). The fencing token lives in a fence document of the
thread's collection, which no read, inventory, export or deletion of the thread takes for
its data; a grant is three requests (the lease, the token, its copy for the effect ledger)
and a write under the lease is still one, an effect's start too; a re-armed lease keeps its
token unless the raise of its grant was lost; and a refusal is read from MongoDB's error and
from FerretDB 1.x's reply, which lacks the counts PyMongo merges.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pymongo
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pymongo import monitoring
from pymongo.errors import BulkWriteError

from graphkeep.backends.mongodb import MongoDBSaver
from graphkeep.backends.mongodb.client import IncompleteBulkReply
from graphkeep.backends.mongodb.documents import KIND_FENCE, fence_id
from graphkeep.backends.mongodb.fences import REFUSED, is_refusal
from graphkeep.backends.mongodb.schema import collection_names
from graphkeep.effects.port import STARTED, EffectRecord
from graphkeep.errors import LeaseLost
from graphkeep.port.fence import fence_of

from .conftest import unique_prefix

pytestmark = pytest.mark.mongodb

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
DB = "graphkeep"


class Recorder(monitoring.CommandListener):
    """The commands the monitored client starts: (name, collection)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self.lock:
            self.commands.append((event.command_name, event.command.get(event.command_name)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def since(self, start: int, *collections: str) -> list[tuple[str, Any]]:
        """The commands after the ``start``-th, on ``collections`` only."""
        return [c for c in self.commands[start:] if c[1] in collections]


RECORDER = Recorder()


@pytest.fixture(scope="module")
def client() -> Iterator[pymongo.MongoClient[Any]]:
    mongo: pymongo.MongoClient[Any] = pymongo.MongoClient(
        MONGODB_URI, event_listeners=[RECORDER], serverSelectionTimeoutMS=10_000
    )
    yield mongo
    mongo.close()


@pytest.fixture
def saver(client: pymongo.MongoClient[Any]) -> MongoDBSaver:
    s = MongoDBSaver(client, db_name=DB, key_prefix=unique_prefix("fence"))
    s.setup()
    return s


def _config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(saver: MongoDBSaver, thread_id: str, step: int) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"n": step}
    cp["channel_versions"] = {"n": step + 1}
    saver.put(_config(thread_id), cp, {"step": step}, {"n": step + 1})
    return str(cp["id"])


def _effect(thread_id: str, token: str, lease_until_ms: int, key: str = "mail-1") -> EffectRecord:
    now = int(time.time() * 1000)
    return EffectRecord(thread_id, key, STARTED, token, lease_until_ms, now + 60_000, None,
                        "send", now, now)  # fmt: skip


def _fence_doc(client: Any, saver: MongoDBSaver, thread_id: str) -> Any:
    payloads, _ = collection_names(saver.port.prefix)
    return client[DB][payloads].find_one({"_id": fence_id(thread_id)})


def test_a_grant_is_three_requests_and_a_write_under_the_lease_is_still_one(
    saver: MongoDBSaver, thread_id: str
) -> None:
    payloads, locks = collection_names(saver.port.prefix)
    effects = saver.effects.port.collection
    start = len(RECORDER.commands)
    lease = saver.lock(thread_id, ttl=30)
    assert lease.acquire()
    # the lease, the token raised (and read back) in the fence document, then its copy in
    # the effect ledger's collection
    expected = [("findAndModify", locks), ("findAndModify", payloads), ("update", effects)]
    assert RECORDER.since(start, payloads, locks, effects) == expected
    mirror = saver.client[DB][effects].find_one({"_id": saver.effects.port.fence_id(thread_id)})
    assert mirror["token"] == lease.fence and mirror["kind"] == KIND_FENCE
    start = len(RECORDER.commands)
    cid = _put(saver, thread_id, 0)
    saver.put_writes(_config(thread_id, cid), [("x", 1)], "task")
    # the guard rides in each write's one command (an update, as theirs)
    assert RECORDER.since(start, payloads) == [("update", payloads)] * 2
    start = len(RECORDER.commands)
    saver.delete_thread(thread_id)
    # one bulk_write, which MongoDB takes as two commands: the guard (an update), then the
    # deletes, sent only when the guard passed
    assert RECORDER.since(start, payloads) == [("update", payloads), ("delete", payloads)]
    lease.release()
    start = len(RECORDER.commands)
    _put(saver, thread_id, 1)
    saver.delete_thread(thread_id)
    # outside the lease, as before: no guard
    assert RECORDER.since(start, payloads) == [("update", payloads), ("delete", payloads)]
    assert _fence_doc(saver.client, saver, thread_id)["token"] == lease.fence


def test_a_lease_taken_by_another_costs_one_request_and_grants_no_token(
    saver: MongoDBSaver, client: Any, thread_id: str
) -> None:
    payloads, locks = collection_names(saver.port.prefix)
    effects = saver.effects.port.collection
    held = saver.lock(thread_id, ttl=30)
    held.acquire()
    before = _fence_doc(client, saver, thread_id)
    start = len(RECORDER.commands)
    assert saver.drive(saver.port.acquire_lock(thread_id, "another", 30_000)) == 0
    assert RECORDER.since(start, locks, payloads, effects) == [("findAndModify", locks)]
    assert _fence_doc(client, saver, thread_id) == before
    held.release()


def test_a_re_armed_lease_keeps_its_token_unless_its_grant_lost_the_raise(
    saver: MongoDBSaver, client: Any, thread_id: str
) -> None:
    port = saver.port
    first = saver.drive(port.acquire_lock(thread_id, "holder", 30_000))
    # taking a lease already ours (a retry after a lost reply) answers the same token
    assert saver.drive(port.acquire_lock(thread_id, "holder", 30_000)) == first
    # a grant whose raise was lost (the lease taken, then the request failed): the fence
    # still names the previous holder, so re-arming raises it instead of answering theirs
    payloads, _ = collection_names(port.prefix)
    client[DB][payloads].update_one({"_id": fence_id(thread_id)}, {"$set": {"holder": "old"}})
    raised = saver.drive(port.acquire_lock(thread_id, "holder", 30_000))
    assert raised > first
    assert saver.drive(port.acquire_lock(thread_id, "holder", 30_000)) == raised
    # a token already at the clock's milliseconds or beyond grows by one
    ahead = raised + 10**9
    client[DB][payloads].update_one({"_id": fence_id(thread_id)}, {"$set": {"token": ahead}})
    assert saver.drive(port.release_lock(thread_id, "holder"))
    assert saver.drive(port.acquire_lock(thread_id, "next", 30_000)) == ahead + 1


def test_an_effect_starts_in_one_command_under_the_lease_and_reads_only_a_record_it_finds(
    saver: MongoDBSaver, thread_id: str
) -> None:
    ledger, effects = saver.effects, saver.effects.port.collection
    port = ledger.port
    with saver.lock(thread_id, ttl=30) as lease:
        now = int(time.time() * 1000)
        first = _effect(thread_id, "first", now + 30_000)
        start = len(RECORDER.commands)
        assert ledger.drive(port.claim(first, now, lease.fence)) is None
        # the guard rides in the claim's one command (an update, as the insert)
        assert RECORDER.since(start, effects) == [("update", effects)]
        start = len(RECORDER.commands)
        assert ledger.drive(port.claim(first, now, lease.fence)) is None  # re-sent: still won
        second = _effect(thread_id, "second", now + 30_000)
        assert ledger.drive(port.claim(second, now, lease.fence)) == first
        # a bulk write cannot answer the record it matched: read it, on that path only
        assert RECORDER.since(start, effects) == [("update", effects), ("find", effects)] * 2
        start = len(RECORDER.commands)
        heir = _effect(thread_id, "heir", now + 60_000)
        assert ledger.drive(port.take_over(heir, "first", now + 30_000, lease.fence)) is True
        assert RECORDER.since(start, effects) == [("update", effects)]
    start = len(RECORDER.commands)
    assert ledger.drive(port.claim(second, now)) == heir  # outside the lease, as before
    assert RECORDER.since(start, effects) == [("findAndModify", effects)]


def test_a_refused_effect_leaves_its_expired_record_and_clearing_keeps_the_token(
    saver: MongoDBSaver, client: Any, thread_id: str
) -> None:
    ledger, effects = saver.effects, saver.effects.port.collection
    port = ledger.port
    old = saver.drive(saver.port.acquire_lock(thread_id, "old", 30_000))
    saver.drive(saver.port.release_lock(thread_id, "old"))
    new = saver.drive(saver.port.acquire_lock(thread_id, "new", 30_000))
    now = int(time.time() * 1000)
    expired = replace(_effect(thread_id, "gone", now - 1), expires_ms=now - 1)
    assert ledger.drive(port.claim(expired, now - 10)) is None
    before = list(client[DB][effects].find({}))
    # a superseded holder's claim of an expired record does not replace it
    with pytest.raises(LeaseLost) as refused:
        ledger.drive(port.claim(_effect(thread_id, "late", now + 30_000), now, old))
    assert (refused.value.token, refused.value.newer) == (old, new)
    assert list(client[DB][effects].find({})) == before
    # the token's copy is no record: listing and clearing every thread leave it
    assert ledger.drive(port.list(None)) == [expired]
    assert ledger.drive(port.clear(None)) == 1
    assert [d["_id"] for d in client[DB][effects].find({})] == [port.fence_id(thread_id)]
    with pytest.raises(LeaseLost):
        ledger.drive(port.claim(_effect(thread_id, "late", now + 30_000), now, old))
    assert ledger.drive(port.list(None)) == []
    assert ledger.drive(port.claim(_effect(thread_id, "now", now + 30_000), now, new)) is None
    # its _id is none of a record's, even of keys that spell it
    for key in ("fence", "/fence"):
        spelled = _effect(thread_id, "x", now + 30_000, key=key)
        assert ledger.drive(port.claim(spelled, now, new)) is None
        assert ledger.drive(port.get(thread_id, key)) == spelled
    assert client[DB][effects].count_documents({}) == 4
    saver.delete_thread(thread_id)  # clears the thread's records, keeps the copy
    assert [d["_id"] for d in client[DB][effects].find({})] == [port.fence_id(thread_id)]


def test_the_fence_document_is_none_of_the_threads_data(
    saver: MongoDBSaver, client: Any, thread_id: str
) -> None:
    with saver.lock(thread_id, ttl=30) as lease:
        token = lease.fence
        assert token is not None and fence_of(thread_id) == token
        cid = _put(saver, thread_id, 0)
        saver.put_writes(_config(thread_id, cid), [("x", 1)], "task")
    port = saver.port
    fence = _fence_doc(client, saver, thread_id)
    assert fence["kind"] == KIND_FENCE and fence["token"] == token and "expires_at" in fence
    inventory = saver.drive(port.inventory(thread_id))
    assert [s.checkpoint_id for s in inventory.checkpoints] == [cid]
    assert fence["_id"] not in {e.ref for e in inventory.expiries}
    dump = saver.drive(port.export_thread(thread_id))
    assert (len(dump.checkpoints), len(dump.writes), len(dump.blobs)) == (1, 1, 1)
    copy = f"{thread_id}-copy"
    saver.copy_thread(thread_id, copy)
    assert _fence_doc(client, saver, copy) is None  # a copy is data only
    saver.delete_thread(thread_id)
    payloads, _ = collection_names(port.prefix)
    left = list(client[DB][payloads].find({"thread_id": thread_id}))
    assert [d["_id"] for d in left] == [fence["_id"]]  # delete_thread leaves the token
    assert thread_id not in saver.drive(port.list_threads(None, 100))[0]
    empty = saver.drive(port.inventory(thread_id))
    assert not empty.checkpoints and not empty.expiries
    with saver.lock(thread_id, ttl=30) as later:
        assert later.fence is not None and later.fence > token


def test_a_refused_write_stores_nothing_and_names_the_newer_token(
    saver: MongoDBSaver, client: Any, thread_id: str
) -> None:
    port = saver.port
    old = saver.drive(port.acquire_lock(thread_id, "old", 30_000))
    saver.drive(port.release_lock(thread_id, "old"))
    new = saver.drive(port.acquire_lock(thread_id, "new", 30_000))
    assert new > old
    cp = empty_checkpoint()
    cp["channel_values"], cp["channel_versions"] = {"n": 1}, {"n": 1}
    payloads, _ = collection_names(port.prefix)
    before = client[DB][payloads].count_documents({})
    for write in (
        lambda: saver.drive(port.delete_thread(thread_id, old)),
        lambda: saver.drive(port.delete_records(thread_id, [("", "x")], [], old)),
    ):
        with pytest.raises(LeaseLost) as refused:
            write()
        assert (refused.value.token, refused.value.newer) == (old, new)
    from graphkeep.port.fence import drop, hold

    hold(thread_id, old)
    try:
        with pytest.raises(LeaseLost):
            saver.put(_config(thread_id), cp, {"step": 1}, {"n": 1})
    finally:
        drop(thread_id)
    assert client[DB][payloads].count_documents({}) == before
    # the holder of the newest token writes
    assert saver.drive(port.delete_thread(thread_id, new)) is None


def test_a_refusal_is_read_from_mongodbs_error_and_from_ferretdbs_reply() -> None:
    def failed(index: int, code: int) -> BulkWriteError:
        return BulkWriteError({"writeErrors": [{"index": index, "code": code, "errmsg": "x"}]})

    assert is_refusal(failed(0, REFUSED)) is True  # the guard: a newer token
    assert is_refusal(failed(0, 112)) is False  # the guard, busy: not a refusal
    assert is_refusal(failed(3, REFUSED)) is False  # past the guard: one of the writes
    assert is_refusal(failed(2, 11000)) is False
    assert is_refusal(IncompleteBulkReply("x")) is None  # FerretDB 1.x: the fence decides


async def test_an_async_saver_grants_and_refuses_the_same_way(thread_id: str) -> None:
    from graphkeep.backends.mongodb import AsyncMongoDBSaver

    mongo: pymongo.AsyncMongoClient[Any] = pymongo.AsyncMongoClient(
        MONGODB_URI, serverSelectionTimeoutMS=10_000
    )
    try:
        saver = AsyncMongoDBSaver(mongo, db_name=DB, key_prefix=unique_prefix("fence"))
        await saver.asetup()
        port = saver.port
        old = await saver.adrive(port.acquire_lock(thread_id, "old", 30_000))
        assert await saver.adrive(port.acquire_lock(thread_id, "old", 30_000)) == old
        assert await saver.adrive(port.acquire_lock(thread_id, "new", 30_000)) == 0
        await saver.adrive(port.release_lock(thread_id, "old"))
        new = await saver.adrive(port.acquire_lock(thread_id, "new", 30_000))
        assert new > old
        with pytest.raises(LeaseLost) as refused:
            await saver.adrive(port.delete_thread(thread_id, old))
        assert (refused.value.token, refused.value.newer) == (old, new)
        assert await saver.adrive(port.delete_thread(thread_id, new)) is None
        # an effect's start: refused under the old token, nothing stored; won under the new
        ledger, now = saver.effects, int(time.time() * 1000)
        mail = _effect(thread_id, "mail", now + 30_000)
        with pytest.raises(LeaseLost) as refused:
            await ledger.adrive(ledger.port.claim(mail, now, old))
        assert refused.value.newer == new
        assert await ledger.adrive(ledger.port.get(thread_id, mail.key)) is None
        assert await ledger.adrive(ledger.port.claim(mail, now, new)) is None
        assert await ledger.adrive(ledger.port.claim(mail, now, new)) is None
        other = replace(mail, token="other")
        assert await ledger.adrive(ledger.port.claim(other, now, new)) == mail
    finally:
        await mongo.close()
