"""``python -m bench``: the Redis suite end to end, and how it counts requests."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

import graphkeep
from bench import cli, report
from bench.capacity import item_size
from bench.probes import LEASE_METHODS, Probe, count_round_trips, packed_size, trace_lease
from bench.suites import Options, growth_targets
from bench.suites.dynamodb import body_size, count_capacity, drop_table, dynamodb_client
from bench.worker import ROOT, InSubprocess
from bench.workloads import (
    Opened,
    Result,
    large_text,
    measure,
    measure_large,
    new_message_bytes,
    workload,
)
from graphkeep.backends.dynamodb.requests import error_code
from graphkeep.connect import BACKENDS

from .conftest import REDIS_URL

pytestmark = pytest.mark.redis

SAVERS = {
    "graphkeep",
    "graphkeep-otel",
    "graphkeep-notel",
    "graphkeep-enc",
    "plainredis",
    "InMemorySaver",
}


def checked_section(stdout: str, heading: str, target: str) -> str:
    """The report's ``### heading`` section, after checking ``target`` (a regex) is among
    the targets the run printed."""
    assert re.search(target, stdout), stdout
    return stdout.split(f"### {heading}")[1].split("###")[0]


def rekey_section(stdout: str) -> list[str]:
    """Issue 47's rekey row (records/s per backend) and its target: every record of the
    threads rewritten under the new key, none left under the old one."""
    section = checked_section(
        stdout,
        "Rekey cost (graphkeep rekey, W50 threads)",
        r"\[met\] rekey: every record of the 4 threads rewritten under the new key"
        r" \([0-9]+ records, 0 left under the old one\)",
    )
    (row,) = [line for line in section.splitlines() if line.startswith("| graphkeep-enc |")]
    _, threads, records, seconds, rate, per_thread = [c.strip() for c in row.strip("|").split("|")]
    assert int(threads) == 4 and int(records) > 4, section  # several records per thread
    assert float(seconds) > 0 and float(rate) > 0 and float(per_thread) > 0, section
    return [threads, records, seconds, rate, per_thread]


def encryption_section(stdout: str) -> dict[str, list[str]]:
    """Issue 47's cost rows (saver -> its cells), after checking the section's target line
    is there (its figure is never judged here: timings on a shared machine)."""
    section = checked_section(
        stdout,
        "Encryption cost (W50, turns in lockstep)",
        r"\[(met|MISSED)\] W50 encryption cost: at most 1\.05 x the unencrypted ms/turn"
        r" \(issue 47, turns in lockstep\): [0-9.]+ x \([0-9.]+ vs [0-9.]+ ms\)",
    )
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in ("graphkeep", "graphkeep-enc"):
            rows[cells[0]] = cells[1:]
    assert set(rows) == {"graphkeep", "graphkeep-enc"}, section
    rekey_section(stdout)
    assert rows["graphkeep"][1] == "1.000 x" and rows["graphkeep"][3] == "1.000 x", section
    for ms, ratio, stored, stored_ratio in rows.values():
        assert float(ms) > 0 and float(ratio.removesuffix(" x")) > 0, section
        assert float(stored.replace(",", "")) > 0, section
        assert float(stored_ratio.removesuffix(" x")) > 0, section
    return rows


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=dict(os.environ, REDIS_URL=REDIS_URL),
        capture_output=True,
        text=True,
        timeout=600,
    )


def table_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    """(workload, saver) -> the other cells of the main table."""
    rows: dict[tuple[str, str], list[str]] = {}
    main_table = markdown.split("### Where the requests go")[0]
    for line in main_table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0].startswith("W50") and cells[1] in SAVERS:
            # client CPU and ms/turn first and last 10 (numbers) left out: the other cells'
            # order; every saver's client CPU is measured, InMemorySaver's too (issue 48)
            assert all(NUMBER.match(c) for c in cells[3:6]), line
            rows[(cells[0], cells[1])] = [cells[2], *cells[6:]]
    return rows


#: a report cell holding a number
NUMBER = re.compile(r"^[0-9][0-9,]*(\.[0-9]+)?$")


def growth_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    """(workload, saver) -> the other cells of the growth table."""
    rows: dict[tuple[str, str], list[str]] = {}
    table = markdown.split("### Growth")[1].split("###")[0]
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].startswith("W50"):
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_quick_redis_suite_compares_three_savers_and_graphkeep_needs_8_requests_per_turn(
    tmp_path: Path,
) -> None:
    done = run_bench("--suite", "redis", "--quick", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert set(rows) == {(w, s) for w in ("W50", "W50-delta") for s in SAVERS}, done.stdout

    requests_per_turn = {key: cells[1] for key, cells in rows.items()}
    assert float(requests_per_turn[("W50", "graphkeep")]) <= 8
    assert float(requests_per_turn[("W50-delta", "graphkeep")]) <= 9
    assert requests_per_turn[("W50", "InMemorySaver")] == "n/a"
    # telemetry (an SDK configured, or off) never changes what is sent
    for work in ("W50", "W50-delta"):
        for name in ("graphkeep-otel", "graphkeep-notel"):
            assert requests_per_turn[(work, name)] == requests_per_turn[(work, "graphkeep")]
    # their cost: the W50 turns of the three run again in lockstep (turns alternating)
    lockstep = done.stdout.split("### Telemetry cost (W50, turns in lockstep)")[1].split("###")[0]
    for name in ("graphkeep-notel", "graphkeep-otel", "graphkeep"):
        row = rf"^\| {name} \| [0-9.]+ \| 8\.0 \| [0-9.]+ x \|$"
        assert re.search(row, lockstep, re.M), lockstep
    assert "W50 telemetry cost, with the SDK configured: at most 1.05 x" in done.stdout
    assert "W50 telemetry cost, no SDK: at most 1.05 x" in done.stdout
    # issue 45's cost rows: W50 with and without saver.exclusive, turns in lockstep; the
    # lease's requests counted apart (acquire + release per run), none added per write
    single = done.stdout.split("### Single-writer runs: cost of `saver.exclusive`")[1]
    single = single.split("###")[0]
    assert re.search(
        r"^\| graphkeep \| [0-9.]+ \| 8\.00 \| none \| none \| 8\.00 \| 1\.000 x \|$", single, re.M
    ), single
    # the lease is taken with the turn's first read (one script): its release is its request
    exclusive_row = (
        r"^\| graphkeep-exclusive \| [0-9.]+ \| 9\.00 \| 1\.00 \(0 / 10 / 0 in 10 runs\)"
        r" \| [0-9.]+ \| 8\.00 \| [0-9.]+ x \|$"
    )
    assert re.search(exclusive_row, single, re.M), single
    for met in (
        "[met] W50 exclusive: one lease per run: 10 taken (10 with the run's first read) and"
        " 10 releases for 10 turns",
        "[met] W50 exclusive: no request added per write",
        "[met] W50 exclusive: the lease costs at most 1 request(s) per run",
    ):
        assert met in done.stdout, done.stdout
    assert "W50 exclusive cost: at most 1.03 x the bare graph's ms/turn" in done.stdout
    # issue 47's cost rows: W50 with and without encryption=, turns in lockstep, and a
    # thread's stored bytes both ways (the main table's W50 figures); sealing adds no request
    sealed = encryption_section(done.stdout)
    assert sealed["graphkeep"][2] == rows[("W50", "graphkeep")][2]
    assert sealed["graphkeep-enc"][2] == rows[("W50", "graphkeep-enc")][2]
    # sealing adds no request: not where no list is shared (W50-delta), nor where one is (W50:
    # a signed list manifest is still expanded by the read script — its signature was msgpack
    # bin, which Redis's cmsgpack cannot unpack, and cost a second round trip per read)
    for shape in ("W50-delta", "W50"):
        plain = requests_per_turn[(shape, "graphkeep")]
        assert requests_per_turn[(shape, "graphkeep-enc")] == plain, shape
    # plainredis pays several round trips per saver call
    assert float(requests_per_turn[("W50", "plainredis")]) > 8

    history_entries = {key: int(cells[3]) for key, cells in rows.items()}
    assert set(history_entries.values()) == {40}  # 10 turns x 4 checkpoints

    # growth: the W50 thread goes on for 10 more turns; graphkeep-noshare only here
    growth = growth_rows(done.stdout)
    assert set(growth) == {
        *(("W50 / W50-20", s) for s in ("graphkeep-noshare", *SAVERS - {"InMemorySaver"})),
        *(("W50-delta", s) for s in SAVERS - {"InMemorySaver"}),
    }, done.stdout
    for saver in ("graphkeep", "plainredis", "graphkeep-noshare"):
        at_10, at_20, ratio, sent_10, median, sent_20, per_new = growth[("W50 / W50-20", saver)]
        assert 0 < float(at_10.replace(",", "")) < float(at_20.replace(",", ""))
        assert 1.5 < float(ratio) < 4.5
        assert min(float(c.replace(",", "")) for c in (sent_10, median, sent_20, per_new)) > 0
    # the growth row's 10-turn figure is the main table's W50 stored figure
    assert growth[("W50 / W50-20", "graphkeep")][0] == rows[("W50", "graphkeep")][2]
    assert "graphkeep-noshare" not in "".join(c for key in rows for c in key)

    written = (tmp_path / "redis.md").read_text()
    assert table_rows(written) == rows
    assert "### Where the requests go" in written
    assert (tmp_path / "redis.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_pipeline_or_one_script_call_counts_as_one_request() -> None:
    probe = Probe()
    with graphkeep.connect(REDIS_URL) as saver:
        client = count_round_trips(saver.client, probe)
        client.ping()
        assert probe.total == 1
        pipe = client.pipeline(transaction=False)
        for n in range(5):
            pipe.get(f"graphkeep-bench-test:{n}")
        pipe.execute()
        assert probe.total == 2
        client.register_script("return 1")()  # EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA
        assert probe.total in (3, 5)


def test_requests_are_attributed_to_the_saver_call_that_made_them() -> None:
    probe = Probe()
    with graphkeep.connect(REDIS_URL, key_prefix="graphkeep-bench-test") as saver:
        count_round_trips(saver.client, probe)
        probe.trace(saver)
        saver.get_tuple({"configurable": {"thread_id": "bench-attribution"}})
        list(saver.list({"configurable": {"thread_id": "bench-attribution"}}))
    tally = probe.take()
    assert tally.calls == {"get_tuple": 1, "list": 1}
    assert tally.requests == {"get_tuple": 1, "list": 1}


def test_the_lease_probe_counts_a_lease_apart_from_the_writes_made_under_it() -> None:
    probe = Probe()
    waits: list[float] = []
    thread = f"bench-lease-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with graphkeep.connect(REDIS_URL, key_prefix="graphkeep-bench-test") as saver:
        count_round_trips(saver.client, probe)
        trace_lease(probe.trace(saver), probe, waits)
        try:
            with saver.lock(thread) as lease:
                saver.put(config, empty_checkpoint(), {}, {})
                assert lease.extend()
            tally = probe.take()
            lease_calls = {m: 1 for m in LEASE_METHODS}
            assert tally.calls == {"put": 1, **lease_calls}
            assert tally.requests == {"put": 1, **lease_calls}
            assert len(waits) == 1 and waits[0] > 0
        finally:
            saver.delete_thread(thread)


def test_a_contender_can_run_in_another_interpreter() -> None:
    contender = InSubprocess("in-subprocess", sys.executable, "bench.worker:in_memory")
    result = contender.run(workload("W50-delta"), Options(turns=2, history_runs=1), "test")
    assert (result.saver, result.workload, result.history_entries) == (
        "in-subprocess",
        "W50-delta",
        8,
    )
    assert result.turn_tally.calls["put"] == 8
    assert result.requests_per_turn is None
    # client CPU is measured where the turns run (the child) and comes back with the result
    assert len(result.cpu_samples_ms) == 2 and min(result.cpu_samples_ms) > 0
    assert result.cpu_ms_per_turn is not None and result.cpu_ms_per_turn > 0


@pytest.mark.parametrize("scheme", ["mongodb", "dynamodb"])
def test_a_suite_whose_backend_has_not_landed_is_skipped_not_failed(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(BACKENDS, scheme, raising=False)
    assert cli.main(["--suite", scheme, "--out", str(tmp_path)]) == 0
    assert f"skipped: {scheme}: backend not available yet" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_the_large_message_check_runs_in_another_interpreter() -> None:
    contender = InSubprocess("in-subprocess", sys.executable, "bench.worker:in_memory")
    result = contender.run_large(50_000, "test")
    assert (result.saver, result.size_bytes, result.ok) == ("in-subprocess", 50_000, True)
    assert result.outcome == "stored and read back"
    assert result.ms_large_turn is not None and result.requests_per_turn is None


class RefusesLargeCheckpoints(InMemorySaver):
    """Stands for a saver on a store with an item limit and no guard."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if len(repr(checkpoint["channel_values"])) > 10_000:
            raise ValueError("Item size has exceeded the maximum allowed size")
        return super().put(config, checkpoint, metadata, new_versions)


def test_the_large_message_check_reports_a_failing_saver_in_the_table() -> None:
    opened = Opened(RefusesLargeCheckpoints(), Probe(counts_requests=False))
    failed = measure_large(opened, suite="test", saver_name="refuses", size=20_000)
    assert not failed.ok
    assert failed.outcome.startswith("turn 1: ValueError: Item size has exceeded"), failed.outcome

    fine = measure_large(
        Opened(InMemorySaver(), Probe(counts_requests=False)),
        suite="test",
        saver_name="graphkeep",
        size=20_000,
    )
    assert fine.ok, fine.outcome
    table = "\n".join(report.large_table([fine, failed]))
    assert "| refuses | FAILED, turn 1: ValueError: Item size has exceeded" in table
    assert "| graphkeep | ok: stored and read back |" in table
    assert report.large_targets([fine, failed], "graphkeep") == [
        ("graphkeep stores one 20 KB message and reads it back", True)
    ]


def test_large_text_is_deterministic_text_of_the_size_asked() -> None:
    text = large_text(500_000)
    assert len(text.encode()) == 500_000 and text == large_text(500_000)
    assert 2 < len(text) / len(zlib.compress(text.encode())) < 8  # compressible, like prose


def resp_size(*args: bytes) -> int:
    """Bytes of one command in RESP: ``*<n>`` then ``$<length>`` and the bytes of each argument."""
    return len(f"*{len(args)}\r\n") + sum(len(f"${len(a)}\r\n") + len(a) + 2 for a in args)


def test_bytes_sent_are_the_packed_resp_bytes_of_each_command() -> None:
    assert packed_size([b"*1\r\n", memoryview(b"$4\r\nPING\r\n")]) == 14
    assert packed_size(b"PING\r\n") == packed_size("PING\r\n") == 6
    probe = Probe()
    key = b"graphkeep-bench-test:sent"
    with graphkeep.connect(REDIS_URL) as saver:
        client = count_round_trips(saver.client, probe)
        client.set(key, b"v" * 1000, ex=60)
        assert probe.bytes_sent == resp_size(b"SET", key, b"v" * 1000, b"EX", b"60")
        pipe = client.pipeline(transaction=False)
        pipe.get(key)
        pipe.get(key)
        before = probe.bytes_sent
        pipe.execute()
        assert probe.total == 2
        assert probe.bytes_sent - before == 2 * resp_size(b"GET", key)


def test_a_request_body_is_counted_whatever_botocore_holds_it_in() -> None:
    stream = io.BytesIO(b"0123456789")
    stream.seek(3)
    assert body_size(stream) == 7 and stream.tell() == 3
    assert (body_size(b"abc"), body_size("é"), body_size(None)) == (3, 2, 0)


def test_growth_turns_go_on_after_the_history_and_measure_the_store_again() -> None:
    stored = iter([1000, 2100])
    opened = Opened(InMemorySaver(), Probe(), stored_bytes=lambda: next(stored))
    result = measure(
        opened, workload("W50"), suite="test", saver_name="s", turns=2, history_runs=1,
        extra_turns=2,
    )  # fmt: skip
    assert (result.stored_bytes, result.stored_first, result.stored_last) == (1000, 1000, 2100)
    assert result.sent_bytes == [0, 0, 0, 0]  # one per turn, growth turns included
    assert result.history_entries == 8 and result.extra_turns == 2


def test_growth_runs_in_another_interpreter_too() -> None:
    contender = InSubprocess("in-subprocess", sys.executable, "bench.worker:in_memory")
    result = contender.run(workload("W50"), Options(turns=2, history_runs=1), "test", 2)
    assert result.extra_turns == 2 and result.turn_tally.calls["put"] == 8
    assert (result.sent_bytes, result.stored_first) == ([], None)  # no store behind it


def grown(saver: str, first: int, last: int, sent: list[int]) -> Result:
    return Result(
        suite="test", saver=saver, workload="W50", turns=50, ms_per_turn=1.0,
        requests_per_turn=8.0, stored_bytes=first, history_entries=200, history_ms=1.0,
        history_requests=1, sent_bytes=sent, extra_turns=50, stored_first=first,
        stored_last=last,
    )  # fmt: skip


def test_growth_rows_and_issue_13_targets() -> None:
    new = new_message_bytes(50)
    assert 500 < new < 2000 and new == new_message_bytes(50)
    linear = grown("graphkeep", 400_000, 800_000, [9000] * 49 + [9000 + 3 * new] + [9100] * 50)
    quadratic = grown("rival", 4_000_000, 15_600_000, [1000 * t for t in range(1, 101)])
    targets = dict(growth_targets([linear, quadratic], stored_max=500_000))
    assert list(targets.values()) == [True, True, True], targets
    assert "0.400 MB" in next(iter(targets))
    missed = growth_targets([quadratic], stored_max=500_000, baseline="rival")
    assert [met for _, met in missed] == [False, False, False]

    ctx = report.Context(
        suite_title="Test", where="here", turns=50, history_runs=1, rounds=1,
        stored_label="bytes", request_label="requests", baseline="graphkeep", rival="rival",
        notes=[], workloads=[workload("W50")], sent_label="body bytes",
    )  # fmt: skip
    table = "\n".join(report.growth_table(ctx, [linear, quadratic]))
    assert "- sent = body bytes" in table
    assert "| W50 / W50-100 | graphkeep | 390.6 | 781.2 | 2.00 | 11.6 | 8.8 | 8.9 |" in table
    assert "| W50 / W50-100 | rival | 3,906.2 | 15,234.4 | 3.90 | 48.8 | 44.4 | 97.7 |" in table


# --------------------------------------------------------------------------- capacity units


@pytest.fixture
def metered() -> Iterator[tuple[Any, str, Probe]]:
    """A boto3 client on a fresh ``pk``/``sk`` table of the DynamoDB endpoint, its calls'
    capacity units reported to a probe."""
    client = dynamodb_client()
    table = f"gk_test_capacity_{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=table,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    probe = Probe()
    count_capacity(client, probe, "pk", "sk")
    try:
        yield client, table, probe
    finally:
        drop_table(client, table)
        client.close()


def sized(pk: str, sk: str, size: int) -> dict[str, Any]:
    """An item of exactly ``size`` bytes by DynamoDB's rules."""
    item = {"pk": {"S": pk}, "sk": {"S": sk}}
    item["v"] = {"B": b"x" * (size - item_size(item) - 1)}
    assert item_size(item) == size
    return item


def units(probe: Probe, call: Any) -> tuple[float, float]:
    """(WCU, RCU) the call consumed."""
    before = probe.write_units, probe.read_units
    try:
        call()
    except ClientError as exc:
        assert error_code(exc) in (
            "ConditionalCheckFailedException",
            "TransactionCanceledException",
        )
    return probe.write_units - before[0], probe.read_units - before[1]


@pytest.mark.dynamodb
def test_capacity_units_follow_aws_rules_for_each_api_call(
    metered: tuple[Any, str, Probe],
) -> None:
    client, table, probe = metered
    big, small = sized("p", "a", 1500), sized("p", "b", 300)
    # writes: 1 WCU per KB rounded up per item; a replacement bills the larger image
    assert units(probe, lambda: client.put_item(TableName=table, Item=big)) == (2, 0)
    assert units(probe, lambda: client.put_item(TableName=table, Item=small)) == (1, 0)
    assert units(probe, lambda: client.put_item(TableName=table, Item=sized("p", "b", 200))) == (
        1,
        0,
    )
    # a failed condition still bills the existing item
    conditional = {"ConditionExpression": "attribute_not_exists(sk)"}
    replace_big = sized("p", "a", 100)
    assert units(
        probe, lambda: client.put_item(TableName=table, Item=replace_big, **conditional)
    ) == (2, 0)
    # BatchWriteItem: each item alone; TransactWriteItems: every action twice
    three = [sized("q", f"{n}", 1500) for n in range(3)]
    requests = [{"PutRequest": {"Item": item}} for item in three]
    assert units(probe, lambda: client.batch_write_item(RequestItems={table: requests})) == (6, 0)
    pair = [{"Put": {"TableName": table, "Item": sized("t", f"{n}", 500)}} for n in range(2)]
    assert units(probe, lambda: client.transact_write_items(TransactItems=pair)) == (4, 0)
    # UpdateItem bills the larger of before and after
    update = {
        "TableName": table,
        "Key": {"pk": {"S": "p"}, "sk": {"S": "b"}},
        "UpdateExpression": "SET #v = :v",
        "ExpressionAttributeNames": {"#v": "v"},
        "ExpressionAttributeValues": {":v": {"B": b"y" * 2100}},
    }
    assert units(probe, lambda: client.update_item(**update)) == (3, 0)

    # reads: 1 RCU per 4 KB strongly consistent, half eventually, rounded per item
    key = {"pk": {"S": "p"}, "sk": {"S": "a"}}
    assert units(probe, lambda: client.get_item(TableName=table, Key=key, ConsistentRead=True)) == (
        0,
        1,
    )
    assert units(probe, lambda: client.get_item(TableName=table, Key=key)) == (0, 0.5)
    missing = {"pk": {"S": "p"}, "sk": {"S": "zz"}}
    assert units(
        probe, lambda: client.get_item(TableName=table, Key=missing, ConsistentRead=True)
    ) == (0, 1)
    keys = [{"pk": {"S": "q"}, "sk": {"S": f"{n}"}} for n in range(3)]
    batch = {table: {"Keys": keys, "ConsistentRead": True}}
    assert units(probe, lambda: client.batch_get_item(RequestItems=batch)) == (0, 3)
    # Query: the bytes of every item read, rounded up once (3 x 1500 B = 2 RCU)
    query = {
        "TableName": table,
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "q"}},
        "ConsistentRead": True,
    }
    assert units(probe, lambda: client.query(**query)) == (0, 2)
    # ... a projection does not make the items read smaller, a filter drops them after
    assert units(probe, lambda: client.query(**query, ProjectionExpression="sk")) == (0, 2)
    filtered = {"FilterExpression": "sk = :one", "ExpressionAttributeValues": {
        ":p": {"S": "q"}, ":one": {"S": "1"}}}  # fmt: skip
    assert units(probe, lambda: client.query(**{**query, **filtered})) == (0, 2)
    # ... a page reads up to its LastEvaluatedKey; the next starts after it
    pages: list[dict[str, Any]] = []
    assert units(probe, lambda: pages.append(client.query(**query, Limit=1))) == (0, 1)
    rest = {**query, "ExclusiveStartKey": pages[0]["LastEvaluatedKey"]}
    rest["ProjectionExpression"] = "pk"
    assert units(probe, lambda: client.query(**rest)) == (0, 1)  # 3,000 B
    between = {
        **query,
        "KeyConditionExpression": "pk = :p AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":p": {"S": "q"}, ":lo": {"S": "1"}, ":hi": {"S": "2"}},
        "ConsistentRead": False,
    }
    assert units(probe, lambda: client.query(**between)) == (0, 0.5)  # 3,000 B


def three_turns(suite: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m bench --suite SUITE`` on 3 turns, one round, no growth turns: succeeded."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--suite", suite, "--turns", "3",
         "--rounds", "1", "--history-runs", "1", "--growth-turns", "0", "--no-chart",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.mongodb
def test_quick_mongodb_suite_reports_the_encryption_cost_rows(tmp_path: Path) -> None:
    """Issue 47's rows on MongoDB (the Redis and DynamoDB suites' are checked with theirs)."""
    done = three_turns(suite="mongodb", out=tmp_path)
    rows = encryption_section(done.stdout)
    assert rows == encryption_section((tmp_path / "mongodb.md").read_text())
    assert "graphkeep-enc = graphkeep with encryption=KeyRing(...)" in done.stdout


@pytest.mark.dynamodb
def test_quick_dynamodb_suite_reports_capacity_units_per_turn_beside_the_rivals(
    tmp_path: Path,
) -> None:
    done = three_turns(suite="dynamodb", out=tmp_path)
    section = done.stdout.split("### Capacity units per turn")[1].split("###")[0]
    rows: dict[tuple[str, str], list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0].startswith("W50"):
            rows[(cells[0], cells[1])] = cells[2:]
    savers = {"graphkeep", "graphkeep-nozlib", "graphkeep-otel", "graphkeep-notel", "graphkeep-enc"}
    assert set(rows) == {(w, s) for w in ("W50", "W50-delta") for s in {*savers, "DynamoDBSaver"}}
    for (work, saver), (requests, wcu, rcu, put, _, get_tuple) in rows.items():
        # every write request bills at least 1 WCU, every read at least 0.5 RCU
        assert float(wcu) >= 1 and float(rcu) >= 0.5, (work, saver)
        assert float(wcu) + 2 * float(rcu) >= float(requests), (work, saver)
        assert float(put.split(" / ")[0]) >= 1 and float(get_tuple.split(" / ")[1]) >= 0.5
    # most of graphkeep's puts write the head and its new values (a BatchWriteItem of the
    # values, then the head's PutItem), each item 1 WCU; a put of the head alone is 1 WCU
    assert float(rows[("W50", "graphkeep")][3].split(" / ")[0]) > 2
    assert re.search(
        r"\[(met|MISSED)\] W50: graphkeep WCU/turn <= DynamoDBSaver's \(issue 28\): [0-9.]+ vs"
        r" [0-9.]+",
        done.stdout,
    )
    assert "W50: graphkeep RCU/turn <= DynamoDBSaver's (issue 28)" in done.stdout
    assert "moto's own ReturnConsumedCapacity figures are fixed" in done.stdout
    assert re.search(
        r"\[(met|MISSED)\] W50: graphkeep ms/turn flat, last 10 turns within 20% of the first 10"
        r" \(issue 48\): [0-9.]+ -> [0-9.]+ ms",
        done.stdout,
    )
    assert section in (tmp_path / "dynamodb.md").read_text()
    # issue 48: each method's requests per turn by operation, adding up to the turn's
    by_op = done.stdout.split("### Requests per turn by operation")[1].split("###")[0]
    ops: dict[tuple[str, str, str], tuple[float, str]] = {}
    for line in by_op.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("W50"):
            ops[(cells[0], cells[1], cells[2])] = (float(cells[3]), cells[4])
    for saver in ("graphkeep", "DynamoDBSaver"):
        assert ops[("W50", saver, "**all**")][0] == float(rows[("W50", saver)][0]), ops
    assert "BatchWriteItem" in ops[("W50", "graphkeep", "put")][1], ops
    assert ops[("W50", "graphkeep", "put_writes")][1] == "PutItem 3.00", ops
    assert ops[("W50", "graphkeep", "get_tuple")][1].startswith("Query 1.00"), ops
    # issue 47's cost rows: sealing adds no request (the same items, their values sealed)
    encryption_section(done.stdout)
    assert rows[("W50", "graphkeep-enc")][0] == rows[("W50", "graphkeep")][0]
