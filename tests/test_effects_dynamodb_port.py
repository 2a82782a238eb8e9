"""The effect ledger's DynamoDB port (:class:`DynamoDBEffectsPort`) on a real DynamoDB endpoint
(moto_server over HTTP): every transition and its races, driven through the executors the
public classes use (:func:`graphkeep.port.drive` / ``adrive``).

One table for the module (created by the port's own ``setup``, deleted at the end); every
test works under its own ``key_prefix``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb.cache import DynamoDBCachePort
from graphkeep.backends.dynamodb.checkpoint import DynamoDBSaver
from graphkeep.backends.dynamodb.client import async_client, async_executor, executor
from graphkeep.backends.dynamodb.effects import DynamoDBEffectsPort
from graphkeep.backends.dynamodb.requests import Call
from graphkeep.cache.port import Entry
from graphkeep.effects.port import DONE, FAILED, MAX_KEY_CHARS, STARTED, EffectRecord
from graphkeep.errors import LeaseLost, PayloadTooLarge
from graphkeep.port import Op, adrive, drive

from .conftest import unique_prefix
from .test_dynamodb import ENDPOINT, REGION, reachable

pytestmark = pytest.mark.dynamodb

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    made = boto3.client("dynamodb", region_name=REGION, endpoint_url=ENDPOINT)
    yield made
    made.close()


@pytest.fixture(scope="module")
def table(client: Any) -> Iterator[str]:
    if not reachable(ENDPOINT):
        pytest.fail(f"no DynamoDB endpoint answers at {ENDPOINT}; run ./dev services up")
    name = f"gk_effects_{uuid.uuid4().hex[:10]}"
    drive(DynamoDBEffectsPort(name).setup(), executor(client, name))  # creates the table
    yield name
    client.delete_table(TableName=name)


class Ledger:
    """A port and the executor that runs its ops on the module's table."""

    def __init__(self, client: Any, table: str, key_prefix: str) -> None:
        self.port = DynamoDBEffectsPort(table, key_prefix=key_prefix)
        self.execute: Callable[[Any], Any] = executor(client, table)

    def run(self, op: Op[Any]) -> Any:
        return drive(op, self.execute)


@pytest.fixture
def ledger(client: Any, table: str) -> Ledger:
    return Ledger(client, table, unique_prefix("fx"))


def now() -> int:
    return int(time.time() * 1000)


def record(
    thread: str = "t",
    key: str = "k",
    *,
    token: str | None = None,
    at: int | None = None,
    lease_ms: int = 30_000,
    ttl_ms: int = HOUR_MS,
    name: str = "app.tools.send_mail",
) -> EffectRecord:
    at = now() if at is None else at
    return EffectRecord(
        thread_id=thread,
        key=key,
        state=STARTED,
        token=token or uuid.uuid4().hex,
        lease_until_ms=at + lease_ms,
        expires_ms=at + ttl_ms,
        data=None,
        name=name,
        created_ms=at,
        updated_ms=at,
    )


def raw_items(client: Any, table: str, pk: str) -> list[dict[str, Any]]:
    found = client.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": pk}},
        ConsistentRead=True,
    )
    return list(found["Items"])


# --------------------------------------------------------------------------- claim


def test_claim_stores_and_a_second_claim_returns_the_first_record(ledger: Ledger) -> None:
    first, second = record(), record()
    assert ledger.run(ledger.port.claim(first, now())) is None
    assert ledger.run(ledger.port.get("t", "k")) == first
    assert ledger.run(ledger.port.claim(second, now())) == first
    assert ledger.run(ledger.port.get("t", "k")) == first


def test_claim_of_a_live_record_whose_lease_ended_still_returns_it(ledger: Ledger) -> None:
    at = now()
    first = record(at=at - 10_000, lease_ms=1)
    assert ledger.run(ledger.port.claim(first, at - 10_000)) is None
    assert ledger.run(ledger.port.claim(record(at=at), at)) == first


def test_claim_of_an_expired_record_replaces_it(ledger: Ledger, client: Any) -> None:
    at = now()
    old = record(at=at - 1000, ttl_ms=1000)  # gone at `at`, exactly
    assert ledger.run(ledger.port.claim(old, at - 1000)) is None
    done = old.settled(DONE, b"old result", at - 500, at)
    assert ledger.run(ledger.port.finish(done, at - 500))
    new = record(at=at)
    assert ledger.run(ledger.port.claim(new, at)) is None
    assert ledger.run(ledger.port.get("t", "k")) == new
    (item,) = raw_items(client, ledger.port.table, ledger.port.partition("t"))
    assert "v" not in item  # nothing of the old record is left


def test_a_retried_claim_whose_first_attempt_was_applied_counts_as_claimed(
    ledger: Ledger,
) -> None:
    mine = record()
    assert ledger.run(ledger.port.claim(mine, now())) is None
    assert ledger.run(ledger.port.claim(mine, now())) is None  # same token: it was ours


def test_claim_reads_the_item_when_the_server_does_not_return_it(
    ledger: Ledger, client: Any
) -> None:
    """The fallback of a server without ReturnValuesOnConditionCheckFailure (moto has it):
    a GetItem, and the claim sent again when the item vanished in between."""
    first = record()
    assert ledger.run(ledger.port.claim(first, now())) is None
    calls: list[str] = []

    def stripping(request: Any) -> Any:
        calls.append(request.operation if isinstance(request, Call) else "sleep")
        try:
            return ledger.execute(request)
        except ClientError as exc:
            exc.response.pop("Item", None)
            raise

    assert drive(ledger.port.claim(record(), now()), stripping) == first
    assert calls == ["put_item", "get_item"]

    vanished = {"done": False}

    def vanishing(request: Any) -> Any:
        try:
            return ledger.execute(request)
        except ClientError as exc:
            exc.response.pop("Item", None)
            if not vanished["done"]:  # released between the failed write and the read
                vanished["done"] = True
                assert ledger.run(ledger.port.release("t", "k", first.token))
            raise

    third = record()
    assert drive(ledger.port.claim(third, now()), vanishing) is None
    assert ledger.run(ledger.port.get("t", "k")) == third


def test_twenty_concurrent_claims_exactly_one_wins(ledger: Ledger) -> None:
    records = [record(key="race") for _ in range(20)]
    barrier = threading.Barrier(20)

    def claim(one: EffectRecord) -> EffectRecord | None:
        barrier.wait()
        result: EffectRecord | None = ledger.run(ledger.port.claim(one, now()))
        return result

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(claim, records))
    winners = [r for r, result in zip(records, results, strict=True) if result is None]
    assert len(winners) == 1
    assert all(result == winners[0] for result in results if result is not None)
    assert ledger.run(ledger.port.get("t", "race")) == winners[0]


# --------------------------------------------------------------------------- take_over


def test_take_over_needs_the_old_token_and_an_ended_lease(ledger: Ledger) -> None:
    at = now()
    held = record(at=at, lease_ms=1000)
    assert ledger.run(ledger.port.claim(held, at)) is None
    heir = record(at=at + 1000)
    # the lease still runs
    assert not ledger.run(ledger.port.take_over(heir, held.token, at + 999))
    # a wrong old token
    assert not ledger.run(ledger.port.take_over(heir, "not-the-holder", at + 1000))
    assert ledger.run(ledger.port.get("t", "k")) == held
    # the right one, lease ended (lease_until_ms <= now)
    assert ledger.run(ledger.port.take_over(heir, held.token, at + 1000))
    assert ledger.run(ledger.port.get("t", "k")) == heir
    # the old holder has lost it: neither a second take-over, nor finish, nor release
    assert not ledger.run(ledger.port.take_over(record(at=at + 2000), held.token, at + 99_999))
    assert not ledger.run(ledger.port.finish(held.settled(DONE, b"x", at, at + HOUR_MS), at))
    assert not ledger.run(ledger.port.release("t", "k", held.token))
    assert ledger.run(ledger.port.get("t", "k")) == heir


def test_take_over_of_a_settled_or_absent_record_fails(ledger: Ledger) -> None:
    at = now()
    held = record(at=at, lease_ms=0)
    assert not ledger.run(ledger.port.take_over(record(), held.token, at + 1))  # absent
    assert ledger.run(ledger.port.claim(held, at)) is None
    done = held.settled(DONE, b"ok", at, at + HOUR_MS)
    assert ledger.run(ledger.port.finish(done, at))
    assert not ledger.run(ledger.port.take_over(record(at=at + 1), held.token, at + HOUR_MS))
    assert ledger.run(ledger.port.get("t", "k")) == done


# --------------------------------------------------------------------------- fenced


def leases(client: Any, ledger: Ledger, thread: str = "t") -> tuple[int, int]:
    """Two fencing tokens of ``thread``'s lease, granted one after the other by the saver
    under the port's ``key_prefix``: the first is superseded, the second is current."""
    saver = DynamoDBSaver(client, table_name=ledger.port.table, key_prefix=ledger.port.key_prefix)
    with saver.lock(thread, ttl=10) as old:
        pass
    with saver.lock(thread, ttl=10) as new:
        pass
    assert old.fence is not None and new.fence is not None and old.fence < new.fence
    return old.fence, new.fence


class Recording:
    """Runs the ledger's requests, recording each; ``strip`` drops the items a failed
    condition returns (a server without ReturnValuesOnConditionCheckFailure)."""

    def __init__(self, ledger: Ledger, *, strip: bool = False) -> None:
        self.ledger, self.strip = ledger, strip
        self.calls: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.calls.append(request)
        try:
            return self.ledger.execute(request)
        except ClientError as exc:
            if self.strip:
                exc.response.pop("Item", None)
                for reason in exc.response.get("CancellationReasons") or []:
                    reason.pop("Item", None)
            raise

    @property
    def operations(self) -> list[str]:
        return [c.operation if isinstance(c, Call) else "sleep" for c in self.calls]


def test_a_fenced_claim_is_one_transaction_of_the_put_and_the_leases_check(
    ledger: Ledger, client: Any
) -> None:
    _, current = leases(client, ledger)
    mine, calls = record(), Recording(ledger)
    assert drive(ledger.port.claim(mine, now(), current), calls) is None
    assert calls.operations == ["transact_write_items"]  # no extra round trip
    put, check = calls.calls[0].params["TransactItems"]
    assert put["Put"]["Item"]["tok"] == {"S": mine.token}
    lease = {"pk": {"S": f"{ledger.port.prefix}#1#t"}, "sk": {"S": "l#"}}
    assert check["ConditionCheck"]["Key"] == lease
    assert ledger.run(ledger.port.get("t", "k")) == mine
    # unfenced: the single PutItem it always was
    plain = Recording(ledger)
    assert drive(ledger.port.claim(record(key="k2"), now()), plain) is None
    assert plain.operations == ["put_item"]


@pytest.mark.parametrize("strip", [False, True], ids=["item-returned", "item-not-returned"])
def test_a_fenced_claim_refused_leaves_nothing_and_names_the_newer_token(
    ledger: Ledger, client: Any, strip: bool
) -> None:
    superseded, current = leases(client, ledger)
    calls = Recording(ledger, strip=strip)
    with pytest.raises(LeaseLost) as lost:
        drive(ledger.port.claim(record(), now(), superseded), calls)
    assert (lost.value.thread_id, lost.value.token) == ("t", superseded)
    assert lost.value.newer == current
    # the newer token read back only when the reply lacked it
    assert calls.operations == ["transact_write_items"] + ["get_item"] * strip
    assert raw_items(client, ledger.port.table, ledger.port.partition("t")) == []
    held = record()
    assert ledger.run(ledger.port.claim(held, now())) is None
    heir = record(at=now() + 1)
    with pytest.raises(LeaseLost) as lost:
        drive(ledger.port.take_over(heir, held.token, now() + HOUR_MS, superseded), calls)
    assert lost.value.newer == current
    assert ledger.run(ledger.port.get("t", "k")) == held  # not replaced


@pytest.mark.parametrize("strip", [False, True], ids=["item-returned", "item-not-returned"])
def test_a_fenced_claim_of_a_live_record_answers_the_record_not_a_lost_lease(
    ledger: Ledger, client: Any, strip: bool
) -> None:
    superseded, current = leases(client, ledger)
    at = now()
    held = record(at=at, lease_ms=1000)
    assert ledger.run(ledger.port.claim(held, at)) is None
    calls = Recording(ledger, strip=strip)
    # the Put's own condition refused it: today's answers, under the current token
    assert drive(ledger.port.claim(record(), at, current), calls) == held
    assert calls.operations == ["transact_write_items"] + ["get_item"] * strip
    assert drive(ledger.port.claim(held, at, current), calls) is None  # our own, retried
    assert not drive(ledger.port.take_over(record(), "not-the-holder", at + 1000, current), calls)
    assert not drive(ledger.port.take_over(record(), held.token, at + 999, current), calls)
    # both conditions refused it: the lost lease wins
    with pytest.raises(LeaseLost):
        drive(ledger.port.claim(record(), at, superseded), calls)
    assert ledger.run(ledger.port.get("t", "k")) == held
    heir = record(at=at + 1000)
    assert drive(ledger.port.take_over(heir, held.token, at + 1000, current), calls)
    assert ledger.run(ledger.port.get("t", "k")) == heir
    if not strip:  # the server returns the item: a retried take-over counts as applied
        assert drive(ledger.port.take_over(heir, held.token, at + 1000, current), calls)


# --------------------------------------------------------------------------- finish


@pytest.mark.parametrize("state", [DONE, FAILED])
def test_finish_only_under_the_holders_token(ledger: Ledger, state: str) -> None:
    at = now()
    held = record(at=at)
    assert ledger.run(ledger.port.claim(held, at)) is None
    intruder = EffectRecord(**{**_fields(held), "token": "someone-else"})
    assert not ledger.run(ledger.port.finish(intruder.settled(state, b"no", at, at + 5), at))
    settled = held.settled(state, b"\x00packed\xff", at + 7, at + 2 * HOUR_MS)
    assert ledger.run(ledger.port.finish(settled, at + 7))
    got = ledger.run(ledger.port.get("t", "k"))
    assert got == settled
    assert (got.state, got.data, got.created_ms, got.updated_ms) == (
        state,
        b"\x00packed\xff",
        at,
        at + 7,
    )


def test_finish_of_an_absent_record_fails(ledger: Ledger) -> None:
    held = record()
    assert not ledger.run(ledger.port.finish(held.settled(DONE, b"x", now(), now()), now()))
    assert ledger.run(ledger.port.get("t", "k")) is None


def test_a_large_compressible_result_is_stored_compressed(ledger: Ledger, client: Any) -> None:
    held = record()
    assert ledger.run(ledger.port.claim(held, now())) is None
    data = b"a long, repetitive tool result. " * 40_000  # 1.28 MB, compresses to a few KB
    settled = held.settled(DONE, data, now(), now() + HOUR_MS)
    assert ledger.run(ledger.port.finish(settled, now()))
    (item,) = raw_items(client, ledger.port.table, ledger.port.partition("t"))
    assert item["z"] == {"S": "zlib"} and len(item["v"]["B"]) < 100_000
    assert ledger.run(ledger.port.get("t", "k")).data == data
    assert [r.data for r in ledger.run(ledger.port.list("t"))] == [data]


def test_a_result_too_large_even_compressed_raises_before_writing(
    ledger: Ledger, client: Any
) -> None:
    held = record(name="app.tools.fetch_report")
    assert ledger.run(ledger.port.claim(held, now())) is None
    data = os.urandom(500_000)  # random bytes do not compress
    calls: list[Any] = []

    def counting(request: Any) -> Any:
        calls.append(request)
        return ledger.execute(request)

    settled = held.settled(DONE, data, now(), now() + HOUR_MS)
    with pytest.raises(PayloadTooLarge, match="app.tools.fetch_report"):
        drive(ledger.port.finish(settled, now()), counting)
    assert calls == []
    assert ledger.run(ledger.port.get("t", "k")) == held  # still started, no data
    (item,) = raw_items(client, ledger.port.table, ledger.port.partition("t"))
    assert "v" not in item


def _fields(one: EffectRecord) -> dict[str, Any]:
    return {f: getattr(one, f) for f in EffectRecord.__dataclass_fields__}


# --------------------------------------------------------------------------- release


def test_release_deletes_only_the_holders_started_record(ledger: Ledger) -> None:
    held = record()
    assert not ledger.run(ledger.port.release("t", "k", held.token))  # absent
    assert ledger.run(ledger.port.claim(held, now())) is None
    assert not ledger.run(ledger.port.release("t", "k", "someone-else"))
    assert ledger.run(ledger.port.release("t", "k", held.token))
    assert ledger.run(ledger.port.get("t", "k")) is None
    assert not ledger.run(ledger.port.release("t", "k", held.token))
    # a settled record is never released
    again = record()
    assert ledger.run(ledger.port.claim(again, now())) is None
    assert ledger.run(ledger.port.finish(again.settled(FAILED, b"e", now(), now() + 9), now()))
    assert not ledger.run(ledger.port.release("t", "k", again.token))
    assert ledger.run(ledger.port.get("t", "k")) is not None


# --------------------------------------------------------------------------- get, list, clear


def test_get_of_an_expired_record_returns_it_for_the_caller_to_check(ledger: Ledger) -> None:
    at = now()
    old = record(at=at - 10, ttl_ms=5)
    assert ledger.run(ledger.port.claim(old, at - 10)) is None
    assert ledger.run(ledger.port.get("t", "k")) == old
    assert ledger.run(ledger.port.get("t", "other")) is None
    assert ledger.run(ledger.port.get("other", "k")) is None


def by_key(records: list[EffectRecord]) -> list[EffectRecord]:
    return sorted(records, key=lambda r: (r.thread_id, r.key))


def test_list_and_clear_by_thread_and_all(ledger: Ledger) -> None:
    port = ledger.port
    stored = [record(thread, key) for thread in ("a", "b", "") for key in ("k1", "k2", "k3")]
    for one in stored:
        assert ledger.run(port.claim(one, now())) is None
    assert by_key(ledger.run(port.list("a"))) == by_key(stored[:3])
    assert by_key(ledger.run(port.list(""))) == by_key(stored[6:])
    assert by_key(ledger.run(port.list(None))) == by_key(stored)
    assert ledger.run(port.list("c")) == []
    assert ledger.run(port.clear("a")) == 3
    assert ledger.run(port.clear("a")) == 0
    assert ledger.run(port.get("a", "k1")) is None
    assert by_key(ledger.run(port.list(None))) == by_key(stored[3:])
    assert ledger.run(port.clear(None)) == 6
    assert ledger.run(port.list(None)) == []
    assert ledger.run(port.clear(None)) == 0


def test_list_and_clear_page_through_many_records(ledger: Ledger) -> None:
    """Enough records (with data) that Query and Scan pages and BatchWriteItem groups split."""
    blob = os.urandom(30_000)
    for i in range(40):
        one = record("many", f"k{i:03d}")
        assert ledger.run(ledger.port.claim(one, now())) is None
        assert ledger.run(ledger.port.finish(one.settled(DONE, blob, now(), now() + HOUR_MS), 0))
    assert len(ledger.run(ledger.port.list("many"))) == 40
    assert len(ledger.run(ledger.port.list(None))) == 40
    assert ledger.run(ledger.port.clear(None)) == 40
    assert ledger.run(ledger.port.list("many")) == []


def test_threads_1_10_and_none_are_separate(ledger: Ledger, client: Any) -> None:
    port = ledger.port
    records = {thread: record(thread, "k") for thread in ("1", "10", "")}
    for one in records.values():
        assert ledger.run(port.claim(one, now())) is None
    for thread, one in records.items():
        assert ledger.run(port.get(thread, "k")) == one
        assert ledger.run(port.list(thread)) == [one]
    partitions = {port.partition(thread) for thread in records}
    assert len(partitions) == 3 and all(pk.startswith(port.base) for pk in partitions)
    assert ledger.run(port.clear("1")) == 1
    assert ledger.run(port.list("10")) == [records["10"]]
    assert ledger.run(port.list("")) == [records[""]]
    assert ledger.run(port.clear("")) == 1
    assert ledger.run(port.list(None)) == [records["10"]]


def test_long_and_unusual_keys_and_threads(ledger: Ledger) -> None:
    port = ledger.port
    long_thread = "thread/" + "é#$ " * 600  # past the partition-key component limit
    keys = [
        "x" * (MAX_KEY_CHARS - 1) + "a",
        "x" * (MAX_KEY_CHARS - 1) + "b",  # same head, shortened: the digest tells them apart
        "auto:#$\x00 ✓" + "€" * 400,
        "",
    ]
    for key in keys:
        one = record(long_thread, key)
        assert ledger.run(port.claim(one, now())) is None
        assert ledger.run(port.get(long_thread, key)) == one
    assert sorted(r.key for r in ledger.run(port.list(long_thread))) == sorted(keys)
    assert ledger.run(port.clear(long_thread)) == 4


def test_key_prefixes_are_isolated(client: Any, table: str) -> None:
    base = unique_prefix("fx")
    one, other = Ledger(client, table, base), Ledger(client, table, base + "#x")
    a, b = record(), record()
    assert one.run(one.port.claim(a, now())) is None
    assert other.run(other.port.claim(b, now())) is None  # same thread and key, own record
    assert one.run(one.port.list(None)) == [a]
    assert other.run(other.port.list(None)) == [b]
    assert one.run(one.port.clear(None)) == 1
    assert other.run(other.port.get("t", "k")) == b


def test_effects_never_meet_the_saver_cache_or_event_log_items(ledger: Ledger, client: Any) -> None:
    """Same prefix, thread and key everywhere: the other products' partitions are untouched
    and never listed or cleared."""
    port, table = ledger.port, ledger.port.table
    prefix = port.prefix
    foreign = [
        {"pk": {"S": f"{prefix}#1#t"}, "sk": {"S": "l#"}},  # the saver's lease
        {"pk": {"S": f"{prefix}#e1#t"}, "sk": {"S": "e#k"}},  # event log-like, same sk
        {"pk": {"S": f"{prefix}#e1#t"}, "sk": {"S": "m#"}},
        {"pk": {"S": f"{prefix}#m1#t#"}, "sk": {"S": "i#k"}},
    ]
    for item in foreign:
        client.put_item(TableName=table, Item=item)
    cache = DynamoDBCachePort(table, key_prefix=ledger.port.key_prefix)
    ledger.run(cache.set([Entry(("t",), "k", b"cached", None)], now()))
    assert ledger.run(port.list(None)) == []
    assert ledger.run(port.clear(None)) == 0
    mine = record()
    assert ledger.run(port.claim(mine, now())) is None
    assert ledger.run(port.list(None)) == [mine]
    assert ledger.run(port.clear(None)) == 1
    for item in foreign:
        key = {"pk": item["pk"], "sk": item["sk"]}
        assert "Item" in client.get_item(TableName=table, Key=key, ConsistentRead=True)
    assert ledger.run(cache.get([(("t",), "k")]))


# --------------------------------------------------------------------------- async


async def test_the_port_on_the_async_executor(table: str) -> None:
    port = DynamoDBEffectsPort(table, key_prefix=unique_prefix("fx"))
    async with async_client(REGION, ENDPOINT) as made:
        run = async_executor(made, table)
        held, late = record(), record()
        assert await adrive(port.claim(held, now()), run) is None
        assert await adrive(port.claim(late, now()), run) == held
        settled = held.settled(DONE, b"result", now(), now() + HOUR_MS)
        assert await adrive(port.finish(settled, now()), run)
        assert await adrive(port.get("t", "k"), run) == settled
        assert await adrive(port.list(None), run) == [settled]
        assert await adrive(port.clear("t"), run) == 1
