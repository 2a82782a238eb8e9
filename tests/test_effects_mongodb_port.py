"""The effect ledger's MongoDB port on a real wire-protocol server (FerretDB locally).

The port's ops are driven directly (``graphkeep.port.drive`` / ``adrive`` with the
backend's executors); every test uses its own ``key_prefix`` (one ``<prefix>_effects``
collection) in one throw-away database. Documents are inspected with PyMongo. Nothing is
mocked.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import pymongo
import pytest
from pymongo.errors import BulkWriteError, DuplicateKeyError

from graphkeep.backends.mongodb.client import IncompleteBulkReply, async_executor, sync_executor
from graphkeep.backends.mongodb.effects import (
    MAX_DATA_BYTES,
    MongoDBEffects,
    MongoDBEffectsPort,
    lost_race,
)
from graphkeep.backends.mongodb.schema import EFFECTS_INDEXES
from graphkeep.connect import accepted_options
from graphkeep.effects.port import DONE, FAILED, STARTED, EffectRecord
from graphkeep.errors import ConfigurationError, LeaseLost, PayloadTooLarge, mask_url
from graphkeep.port import adrive, drive

from .conftest import unique_prefix

pytestmark = pytest.mark.mongodb

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")
TEST_DB = f"gk_effects_{uuid.uuid4().hex[:10]}"
LEASE_MS = 30_000
TTL_MS = 3_600_000


def url(db: str = TEST_DB) -> str:
    return urlsplit(MONGODB_URI)._replace(path=f"/{db}").geturl()


def now() -> int:
    return int(time.time() * 1000)


def started(thread_id: str, key: str, t: int, *, token: str | None = None) -> EffectRecord:
    return EffectRecord(
        thread_id=thread_id,
        key=key,
        state=STARTED,
        token=token or uuid.uuid4().hex,
        lease_until_ms=t + LEASE_MS,
        expires_ms=t + TTL_MS,
        data=None,
        name="tests.send_email",
        created_ms=t,
        updated_ms=t,
    )


@pytest.fixture(scope="module")
def client() -> Iterator[pymongo.MongoClient[Any]]:
    mongo: pymongo.MongoClient[Any] = pymongo.MongoClient(url(), serverSelectionTimeoutMS=5000)
    try:
        mongo.admin.command("ping")
    except pymongo.errors.PyMongoError as exc:
        pytest.fail(
            f"MongoDB at {mask_url(MONGODB_URI)} is not answering ({exc}); run ./dev services up"
        )
    yield mongo
    mongo.drop_database(TEST_DB)
    mongo.close()


class Ports:
    """One port on its own collection, its ops run synchronously."""

    def __init__(self, client: pymongo.MongoClient[Any], prefix: str) -> None:
        self.port = MongoDBEffectsPort(key_prefix=prefix)
        self.collection = client[TEST_DB][self.port.collection]
        self.execute = sync_executor(client[TEST_DB], "test")
        drive(self.port.setup(), self.execute)

    def __getattr__(self, name: str) -> Any:
        op = getattr(self.port, name)
        return lambda *args: drive(op(*args), self.execute)


@pytest.fixture
def prefix(client: pymongo.MongoClient[Any]) -> Iterator[str]:
    name = unique_prefix("ef")
    yield name
    client[TEST_DB].drop_collection(f"{name}_effects")


@pytest.fixture
def ports(client: pymongo.MongoClient[Any], prefix: str) -> Ports:
    return Ports(client, prefix)


# -- setup and layout ------------------------------------------------------------------


def test_setup_creates_the_thread_and_expiry_indexes_idempotently(ports: Ports) -> None:
    names = {ix["name"] for ix in ports.collection.list_indexes()}
    assert "gk_thread" in names
    # a server without TTL indexes (FerretDB 1.x) gets the plain fallback
    assert "gk_expires_at" in names or "gk_expires_at_plain" in names
    ports.setup()
    assert {ix["name"] for ix in ports.collection.list_indexes()} == names
    assert [spec["name"] for spec in EFFECTS_INDEXES] == ["gk_thread", "gk_expires_at"]
    assert "db_name" in accepted_options(MongoDBEffects, "effects")


def test_a_record_is_one_document_with_the_documented_fields(ports: Ports) -> None:
    t = now()
    record = started("th/1", "k%{#}", t)
    assert ports.claim(record, t) is None
    doc = ports.collection.find_one({})
    assert doc is not None
    assert doc["_id"] == "th%2F1/k%25%7B%23%7D"
    assert {
        k: doc.get(k) for k in ("t", "k", "s", "tok", "lease", "exp_ms", "d", "n", "c", "u")
    } == {
        "t": "th/1",
        "k": "k%{#}",
        "s": STARTED,
        "tok": record.token,
        "lease": t + LEASE_MS,
        "exp_ms": t + TTL_MS,
        "d": None,
        "n": "tests.send_email",
        "c": t,
        "u": t,
    }
    assert abs(doc["expires_at"].timestamp() * 1000 - (t + TTL_MS)) < 2
    assert ports.get("th/1", "k%{#}") == record


def test_the_prefix_is_checked() -> None:
    with pytest.raises(ConfigurationError):
        MongoDBEffectsPort(key_prefix="bad$prefix")
    with pytest.raises(ConfigurationError):
        MongoDBEffectsPort(key_prefix="")


# -- claim -----------------------------------------------------------------------------


def test_claim_twice_returns_the_first_record_unchanged(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    assert ports.claim(first, t) is None
    second = started("t", "k", t + 5)
    assert ports.claim(second, t + 5) == first
    assert ports.get("t", "k") == first
    assert ports.collection.count_documents({}) == 1


def test_claim_of_a_settled_live_record_returns_it(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    ports.claim(first, t)
    done = first.settled(DONE, b"result", t + 1, t + TTL_MS)
    assert ports.finish(done, t + 1) is True
    assert ports.claim(started("t", "k", t + 2), t + 2) == done


def test_claim_of_an_expired_record_replaces_it(ports: Ports) -> None:
    t = now()
    old = replace(started("t", "k", t - 10_000), expires_ms=t - 1)
    ports.claim(old, t - 10_000)
    ports.finish(old.settled(FAILED, b"boom", t - 9_000, t - 1), t - 9_000)
    new = started("t", "k", t)
    assert ports.claim(new, t) is None
    assert ports.get("t", "k") == new
    # exactly at the expiry a record is gone as well
    newer = started("t", "k", t + TTL_MS)
    assert ports.claim(newer, t + TTL_MS) is None
    assert ports.get("t", "k") == newer
    assert ports.collection.count_documents({}) == 1


def test_claim_resent_after_a_lost_reply_is_still_the_holders(ports: Ports) -> None:
    # a re-sent insert finds its own record (same token): the claim is still won
    t = now()
    record = started("t", "k", t)
    assert ports.claim(record, t) is None
    assert ports.claim(record, t) is None
    assert ports.claim(started("t", "k", t), t) == record


@pytest.mark.parametrize("fenced", [False, True], ids=["unfenced", "fenced"])
def test_concurrent_claims_exactly_one_wins(ports: Ports, fenced: bool) -> None:
    # fenced: each claim is a guarded bulk write that cannot answer the record it matched;
    # the losers read the winner's (an insert that collides with it: see the next test)
    t = now()
    fence = t if fenced else None
    if fenced:
        drive(
            ports.port.fences.raised("race", t, LEASE_MS, datetime.now(timezone.utc)), ports.execute
        )
    results: list[EffectRecord | None] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(20)

    def claim(i: int) -> None:
        record = started("race", "k", t, token=f"{i:032x}")
        barrier.wait()
        try:
            result = ports.claim(record, t, fence)
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)
            return
        with lock:
            results.append(result)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(results) == 20
    assert results.count(None) == 1
    winner = ports.get("race", "k")
    assert winner is not None
    assert all(r == winner for r in results if r is not None)


def test_a_fenced_claims_failure_is_a_lost_insert_race_only_when_it_says_duplicate_key() -> None:
    # what a guarded insert's failure says: a duplicate key, or from FerretDB 1.x a failed
    # write it does not name (the guard passed: the fence was read); anything else is raised
    def failed(*codes: int) -> BulkWriteError:
        return BulkWriteError({"writeErrors": [{"index": 1, "code": c} for c in codes]})

    assert lost_race(failed(11000)) is True
    assert lost_race(DuplicateKeyError("E11000")) is True
    assert lost_race(IncompleteBulkReply("x")) is True
    assert lost_race(failed(14)) is False
    assert lost_race(failed(11000, 112)) is False
    assert lost_race(BulkWriteError({"writeErrors": []})) is False


def test_a_grant_between_a_fenced_claims_requests_refuses_its_replacement(ports: Ports) -> None:
    # under a lease a claim that finds an expired record needs three requests (the guarded
    # insert, the read, the guarded replacement): each is checked against the token then
    t = now()
    ports.claim(replace(started("t", "k", t - 10_000), expires_ms=t - 1), t - 10_000)
    expired = ports.get("t", "k")

    def grant(token: int) -> None:
        drive(
            ports.port.fences.raised("t", token, LEASE_MS, datetime.now(timezone.utc)),
            ports.execute,
        )

    grant(1)
    sent: list[Any] = []

    def execute(request: Any) -> Any:
        sent.append(request)
        result = ports.execute(request)
        if len(sent) == 1:
            grant(2)  # lands after the claim's first request
        return result

    with pytest.raises(LeaseLost) as refused:
        drive(ports.port.claim(started("t", "k", t), t, 1), execute)
    assert (refused.value.token, refused.value.newer) == (1, 2)
    assert [r.method for r in sent] == ["bulk_write", "find_one", "bulk_write", "find"]
    assert ports.get("t", "k") == expired  # not replaced
    assert ports.claim(started("t", "k", t), t, 2) is None


# -- take_over, finish, release ----------------------------------------------------------


def test_take_over_needs_the_old_token_and_an_ended_lease(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    ports.claim(first, t)
    lease_end = first.lease_until_ms
    heir = replace(first, token=uuid.uuid4().hex, lease_until_ms=lease_end + LEASE_MS)
    # the lease still runs
    assert ports.take_over(heir, first.token, lease_end - 1) is False
    # a wrong old token
    assert ports.take_over(heir, uuid.uuid4().hex, lease_end) is False
    assert ports.get("t", "k") == first
    # the lease ended (exactly at lease_until_ms): the heir holds it
    assert ports.take_over(heir, first.token, lease_end) is True
    assert ports.get("t", "k") == heir
    # the old holder cannot take it back, finish or release it any more
    assert ports.take_over(first, heir.token, heir.lease_until_ms - 1) is False
    assert ports.finish(first.settled(DONE, b"x", t, t + TTL_MS), lease_end) is False
    assert ports.release("t", "k", first.token) is False
    assert ports.get("t", "k") == heir


def test_take_over_of_a_settled_or_absent_record_fails(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    heir = replace(first, token=uuid.uuid4().hex)
    far = t + 10 * LEASE_MS
    assert ports.take_over(heir, first.token, far) is False  # absent
    assert ports.get("t", "k") is None
    ports.claim(first, t)
    ports.finish(first.settled(DONE, b"ok", t, t + TTL_MS), t)
    assert ports.take_over(heir, first.token, far) is False  # done
    assert ports.get("t", "k") == first.settled(DONE, b"ok", t, t + TTL_MS)


def test_take_over_resent_after_a_lost_reply_is_still_won(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    ports.claim(first, t)
    heir = replace(first, token=uuid.uuid4().hex, lease_until_ms=t + 2 * LEASE_MS)
    assert ports.take_over(heir, first.token, t + LEASE_MS) is True
    assert ports.take_over(heir, first.token, t + LEASE_MS) is True
    other = replace(first, token=uuid.uuid4().hex)
    assert ports.take_over(other, first.token, t + 10 * LEASE_MS) is False


def test_finish_only_under_the_holders_token(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    ports.claim(first, t)
    intruder = replace(first, token=uuid.uuid4().hex).settled(DONE, b"no", t, t + TTL_MS)
    assert ports.finish(intruder, t) is False
    assert ports.get("t", "k") == first
    done = first.settled(DONE, b"\x00result\xff", t + 3, t + TTL_MS)
    assert ports.finish(done, t + 3) is True
    assert ports.get("t", "k") == done
    doc = ports.collection.find_one({})
    assert doc is not None and doc["s"] == DONE and doc["u"] == t + 3
    # settled: no second finish, no release, no take-over
    assert ports.finish(first.settled(FAILED, b"err", t + 4, t + TTL_MS), t + 4) is False
    assert ports.release("t", "k", first.token) is False
    assert ports.get("t", "k") == done


def test_finish_failed_and_an_absent_record(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    assert ports.finish(first.settled(FAILED, b"err", t, t + TTL_MS), t) is False
    assert ports.get("t", "k") is None
    ports.claim(first, t)
    failed = first.settled(FAILED, b"err", t + 1, t + 1000)
    assert ports.finish(failed, t + 1) is True
    assert ports.get("t", "k") == failed
    # its shorter expiry is the document's
    doc = ports.collection.find_one({})
    assert doc is not None and doc["exp_ms"] == t + 1000


def test_a_result_too_large_raises_before_anything_is_written(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    ports.claim(first, t)
    huge = first.settled(DONE, b"x" * (MAX_DATA_BYTES + 1), t + 1, t + TTL_MS)
    with pytest.raises(PayloadTooLarge, match="tests.send_email"):
        ports.finish(huge, t + 1)
    # the op raised before its first request: the record is still the holder's
    assert ports.get("t", "k") == first
    # the largest allowed result is stored and read back whole
    big = first.settled(DONE, b"y" * MAX_DATA_BYTES, t + 2, t + TTL_MS)
    assert ports.finish(big, t + 2) is True
    stored = ports.get("t", "k")
    assert stored is not None and stored.data == big.data


def test_the_size_check_needs_no_server() -> None:
    port = MongoDBEffectsPort(key_prefix="nowhere")
    t = now()
    huge = started("t", "k", t).settled(DONE, b"x" * (MAX_DATA_BYTES + 1), t, t)
    op = port.finish(huge, t)
    with pytest.raises(PayloadTooLarge, match="tests.send_email"):
        next(op)


def test_release_deletes_only_the_holders_started_record(ports: Ports) -> None:
    t = now()
    first = started("t", "k", t)
    assert ports.release("t", "k", first.token) is False  # absent
    ports.claim(first, t)
    assert ports.release("t", "k", uuid.uuid4().hex) is False
    assert ports.get("t", "k") == first
    assert ports.release("t", "k", first.token) is True
    assert ports.get("t", "k") is None
    assert ports.release("t", "k", first.token) is False
    # released: the next claim wins
    assert ports.claim(started("t", "k", t + 1), t + 1) is None


# -- get, list, clear ------------------------------------------------------------------


def fill(ports: Ports, t: int) -> dict[str, list[EffectRecord]]:
    by_thread: dict[str, list[EffectRecord]] = {"1": [], "10": [], "": []}
    for thread_id, count in (("1", 3), ("10", 2), ("", 1)):
        for i in range(count):
            record = started(thread_id, f"key-{i}", t)
            assert ports.claim(record, t) is None
            by_thread[thread_id].append(record)
    return by_thread


def key_of(record: EffectRecord) -> tuple[str, str]:
    return record.thread_id, record.key


def test_get_list_and_clear_by_thread(ports: Ports) -> None:
    t = now()
    by_thread = fill(ports, t)
    # "1" and "10" are different threads; so are key "1/x"-like collisions of escaping
    assert ports.get("1", "key-2") == by_thread["1"][2]
    assert ports.get("10", "key-2") is None
    assert ports.get("", "key-0") == by_thread[""][0]
    for thread_id, records in by_thread.items():
        assert sorted(ports.list(thread_id), key=key_of) == sorted(records, key=key_of)
    assert ports.list("100") == []
    assert ports.clear("10") == 2
    assert ports.list("10") == []
    assert sorted(ports.list("1"), key=key_of) == by_thread["1"]
    assert ports.clear("10") == 0
    assert len(ports.list(None)) == 4


def test_list_and_clear_all(ports: Ports) -> None:
    t = now()
    by_thread = fill(ports, t)
    everything = [r for records in by_thread.values() for r in records]
    assert sorted(ports.list(None), key=key_of) == sorted(everything, key=key_of)
    assert ports.clear(None) == 6
    assert ports.list(None) == []
    assert ports.clear(None) == 0


def test_addresses_do_not_collide_through_escaping(ports: Ports) -> None:
    t = now()
    a = started("a/b", "c", t)
    b = started("a", "b/c", t)
    c = started("a%2Fb", "c", t)
    for record in (a, b, c):
        assert ports.claim(record, t) is None
    assert ports.get("a/b", "c") == a
    assert ports.get("a", "b/c") == b
    assert ports.get("a%2Fb", "c") == c
    assert ports.list("a") == [b]


def test_key_prefixes_are_isolated(client: pymongo.MongoClient[Any], prefix: str) -> None:
    other_prefix = unique_prefix("ef")
    try:
        one, two = Ports(client, prefix), Ports(client, other_prefix)
        t = now()
        first = started("t", "k", t)
        assert one.claim(first, t) is None
        assert two.get("t", "k") is None
        assert two.list(None) == []
        second = started("t", "k", t)
        assert two.claim(second, t) is None
        assert two.clear(None) == 1
        assert one.get("t", "k") == first
        assert one.list("t") == [first]
    finally:
        client[TEST_DB].drop_collection(f"{other_prefix}_effects")


# -- the async executor ----------------------------------------------------------------


@pytest.fixture
async def aclient() -> AsyncIterator[pymongo.AsyncMongoClient[Any]]:
    mongo: pymongo.AsyncMongoClient[Any] = pymongo.AsyncMongoClient(
        url(), serverSelectionTimeoutMS=5000
    )
    yield mongo
    await mongo.close()


async def test_every_op_through_the_async_executor(
    aclient: pymongo.AsyncMongoClient[Any], prefix: str
) -> None:
    port = MongoDBEffectsPort(key_prefix=prefix)
    execute = async_executor(aclient[TEST_DB], "test")
    await adrive(port.setup(), execute)
    t = now()
    first = started("t", "k", t)
    assert await adrive(port.claim(first, t), execute) is None
    assert await adrive(port.claim(started("t", "k", t), t), execute) == first
    heir = replace(first, token=uuid.uuid4().hex, lease_until_ms=t + 2 * LEASE_MS)
    assert await adrive(port.take_over(heir, first.token, t + LEASE_MS), execute) is True
    done = heir.settled(DONE, b"ok", t + LEASE_MS, t + TTL_MS)
    assert await adrive(port.finish(done, t + LEASE_MS), execute) is True
    assert await adrive(port.get("t", "k"), execute) == done
    other = started("t", "other", t)
    assert await adrive(port.claim(other, t), execute) is None
    assert await adrive(port.release("t", "other", other.token), execute) is True
    assert await adrive(port.list("t"), execute) == [done]
    assert await adrive(port.clear("t"), execute) == 1
    assert await adrive(port.list(None), execute) == []
