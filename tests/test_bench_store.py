"""The store bench (workload S1): graphkeep on Redis and InMemoryStore, tiny size.

The rivals (RedisStore on Redis Stack, MongoDBStore, DynamoDBStore) are optional: the
suite runs them when their server and package are there, and these tests do not ask for
them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from bench.store_workload import (
    KINDS,
    OpResult,
    Sizes,
    StoreResult,
    calls,
    embed,
    exact_scores,
    same_top_k,
)
from bench.suites import Options, load
from bench.suites import store as store_suite
from bench.suites.store_contenders import Contender

from .conftest import REDIS_URL

pytestmark = pytest.mark.redis

TINY = Options(turns=3)  # S1 at 6%: 60 items, 120 gets, 12 + 6 searches, 1 list


def test_the_embedding_is_local_deterministic_and_unit_length() -> None:
    first, again = embed(["Coffee in the morning", "jazz piano"]), embed(["coffee in the MORNING"])
    assert first[0] == again[0]
    assert all(len(v) == 64 and math.isclose(sum(x * x for x in v), 1.0) for v in first)
    assert first[0] != first[1]


def test_s1_is_the_same_calls_every_time_at_every_scale() -> None:
    full = Sizes.full()
    assert (full.items, full.namespaces, full.gets, full.searches) == (1000, 20, 2000, 200)
    assert (full.semantic, full.list_namespaces) == (100, 20)
    tiny = Sizes.scaled(0.06)
    assert calls(tiny) == calls(tiny)
    assert len({ns for ns, _, _ in calls(tiny).puts}) == 20
    assert all(tiny.calls(kind) >= 1 for kind in KINDS)


def test_a_top_10_may_differ_from_the_reference_only_among_equal_scores() -> None:
    sizes = Sizes.scaled(0.06)
    scores = exact_scores(sizes)
    reference = OpResult(calls=len(scores))
    for by_id in scores:
        ranked = sorted(by_id, key=lambda i: -by_id[i])[:10]
        reference.answers.append(ranked)
        reference.scores.append([by_id[i] for i in ranked])
    assert same_top_k(reference, reference, sizes) is True
    worse = OpResult(calls=reference.calls, answers=[list(a) for a in reference.answers])
    by_id = scores[0]
    last = sorted(by_id, key=lambda i: -by_id[i])[-1]
    worse.answers[0][0] = last  # the lowest-scored item at rank 1
    assert same_top_k(worse, reference, sizes) is False


def test_quick_store_suite_runs_graphkeep_and_in_memory_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    outcomes = store_suite.run(TINY, tmp_path, False, only={"InMemoryStore", "graphkeep-redis"})
    by = {o.name: o for o in outcomes}
    reference = by["InMemoryStore"].result
    assert reference is not None
    assert set(reference.ops) == set(KINDS)
    assert all(op.error is None and op.requests is None for op in reference.ops.values())
    written = (tmp_path / "store.md").read_text()
    assert "| get | InMemoryStore |" in written

    graphkeep = by["graphkeep-redis"]
    if graphkeep.skipped and "not available yet" in graphkeep.skipped:
        pytest.skip(graphkeep.skipped)
    assert graphkeep.result is not None, graphkeep.skipped
    for kind, op in graphkeep.result.ops.items():
        assert op.error is None, (kind, op.error)
        assert op.calls == TINY_SIZES.calls(kind)
        assert op.requests_per_op is not None and op.requests_per_op >= 1, kind
    assert graphkeep.result.ops["get"].answers == reference.ops["get"].answers
    # a put with nothing to embed is one round trip (with texts to embed, two: their digests)
    assert graphkeep.result.ops["put (index=False)"].requests_per_op == 1
    assert graphkeep.result.ops["put"].requests_per_op >= 2
    assert "| put (index=False) | InMemoryStore |" in written
    assert store_suite.top_k_column(outcomes, TINY_SIZES)["graphkeep-redis"] == "yes"
    assert "| graphkeep-redis | yes |" in written


def test_the_store_suite_is_registered_with_its_own_runner() -> None:
    suite = load("store")
    assert suite.name == "store" and suite.run is not None
    assert suite.unavailable() is None  # InMemoryStore always runs


TINY_SIZES = Sizes.scaled(TINY.turns / store_suite.FULL_TURNS)


def test_s10_is_ten_times_the_data_with_the_same_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s1, s10 = Sizes.scaled(0.06), Sizes.scaled(0.06, 10)
    assert (s1.label, s10.label) == ("S1", "S10")
    assert (s10.items, s10.namespaces) == (10 * s1.items, 10 * s1.namespaces)
    assert all(s10.calls(kind) == s1.calls(kind) for kind in KINDS if kind != "put")
    assert len({ns for ns, _, _ in calls(s10).puts}) == 200

    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    outcomes = store_suite.run(
        TINY, tmp_path, False, only={"InMemoryStore", "graphkeep-redis"}, data=10
    )
    written = (tmp_path / "store-s10.md").read_text()
    assert "workload S10" in written and "S10: 600 puts in 200 namespaces" in written
    by = {o.name: o.result for o in outcomes}
    ours, reference = by["graphkeep-redis"], by["InMemoryStore"]
    assert ours is not None and reference is not None
    assert ours.ops["put"].calls == 600
    assert ours.ops["list_namespaces"].answers == reference.ops["list_namespaces"].answers


def test_a_contender_that_fails_is_reported_and_the_others_still_pooled() -> None:
    def broken(sizes: Sizes) -> Any:
        raise RuntimeError("database 0 holds keys the bench did not write")

    def fine(sizes: Sizes) -> Any:
        return StoreResult("fine")

    outcomes = store_suite.run_contenders(
        [Contender("broken", run=broken), Contender("fine", run=fine)], TINY_SIZES, rounds=2
    )
    by = {o.name: o for o in outcomes}
    assert by["broken"].result is None
    why = "failed: RuntimeError: database 0 holds keys the bench did not write"
    assert by["broken"].skipped == why
    assert by["fine"].result is not None and by["fine"].skipped is None
