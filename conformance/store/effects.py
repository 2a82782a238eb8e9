"""effects: the effect ledger of ``graphkeep.connect_effects`` / ``aconnect_effects``.

What every store's ledger must do (see :mod:`graphkeep.effects.ledger`): an effect runs once
per key and later calls return its recorded result (serialized, so equal, not identical);
an exception records nothing (the next call runs) unless ``cache_errors=True``; a record
whose holder died (a claim nobody finishes) waits out its lease, then is run again
(``on_unknown="retry"``, same key) or raised (``"raise"``); a live holder makes a duplicate
wait ``wait`` seconds, then ``EffectInProgress``; records expire after ``ttl``; records are
kept and cleared per thread (``1`` and ``"1"`` are one thread, ``"1"`` and ``"10"`` two);
bad input raises before anything is written. Cases call effects outside a graph, so with
explicit keys; a dead holder's claim is made through the ledger's port.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from conformance.store._registry import case
from conformance.store.api import EffectsApi, StoreFactory
from graphkeep.effects.port import STARTED, EffectRecord
from graphkeep.errors import (
    ConfigurationError,
    EffectFailed,
    EffectInProgress,
    EffectOutcomeUnknown,
    InvalidInput,
    SerializationError,
)
from graphkeep.port.clock import now_ms

#: the ttl of the expiry case, seconds
TTL = 2
RESULT = {"id": 7, "text": "ticket wörld ✓", "tags": ["a", "b"], "nested": {"n": None, "f": 0.5}}


class Counter:
    """A side effect the case can count."""

    def __init__(self, result: Any = RESULT) -> None:
        self.calls: list[Any] = []
        self.result = result

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.result


def _raises(error: type[Exception], call: Any) -> Exception:
    try:
        call()
    except error as exc:
        return exc
    raise AssertionError(f"expected {error.__name__}")


def held(
    effects: EffectsApi, key: str, *, thread: str = "", lease: float = 0.5, state: str = STARTED
) -> EffectRecord:
    """A record claimed by a holder that never finishes (it died), lease ``lease`` seconds."""
    now = now_ms()
    record = EffectRecord(
        thread_id=thread,
        key=key,
        state=state,
        token=uuid.uuid4().hex,
        lease_until_ms=now + int(lease * 1000),
        expires_ms=now + 3_600_000,
        data=None,
        name="dead holder",
        created_ms=now,
        updated_ms=now,
    )
    assert effects.drive(effects.ledger.port.claim(record, now)) is None
    return record


@case("effects")
def an_effect_runs_once_and_replays_its_recorded_result(factory: StoreFactory) -> None:
    with factory.open_effects() as effects:
        count = Counter()
        once = effects.once(count, key="order-5521")
        assert once("a", 1) == RESULT
        assert once("a", 1) == RESULT
        assert effects.run("order-5521", count, "other") == RESULT
        assert len(count.calls) == 1
        other = Counter("second")
        assert effects.run("order-5522", other) == "second"
        assert len(other.calls) == 1
        states = {(r.key, r.state) for r in effects.records()}
        assert states == {("order-5521", "done"), ("order-5522", "done")}


@case("effects")
def key_prefixes_do_not_share_records(factory: StoreFactory) -> None:
    with factory.open_effects() as first, factory.sibling("b").open_effects() as second:
        count = Counter()
        first.run("k", count)
        second.run("k", count)
        assert len(count.calls) == 2
        assert [r.key for r in second.records()] == ["k"]
        assert second.clear() == 1
        assert [r.key for r in first.records()] == ["k"]


@case("effects")
def an_exception_records_nothing_and_the_next_call_runs(factory: StoreFactory) -> None:
    with factory.open_effects() as effects:
        attempts: list[int] = []

        def flaky() -> str:
            attempts.append(1)
            if len(attempts) == 1:
                raise ValueError("the outside system said no")
            return "ok"

        _raises(ValueError, lambda: effects.run("flaky", flaky))
        assert effects.records() == []
        assert effects.run("flaky", flaky) == "ok"
        assert effects.run("flaky", flaky) == "ok"
        assert len(attempts) == 2


@case("effects")
def cache_errors_records_the_failure_and_replays_it(factory: StoreFactory) -> None:
    with factory.open_effects() as effects:
        attempts: list[int] = []

        def refuse() -> None:
            attempts.append(1)
            raise PermissionError("card declined")

        once = effects.once(refuse, key="charge", cache_errors=True)
        _raises(PermissionError, once)
        failed = _raises(EffectFailed, once)
        assert isinstance(failed, EffectFailed)
        assert failed.error_type == "PermissionError" and "card declined" in str(failed)
        assert len(attempts) == 1
        assert [r.state for r in effects.records()] == ["failed"]


@case("effects")
def a_dead_holders_effect_runs_again_after_its_lease_with_the_same_key(
    factory: StoreFactory,
) -> None:
    with factory.open_effects(poll=0.05) as effects:
        started = time.monotonic()
        dead = held(effects, "charge", lease=0.6)
        keys: list[str] = []

        def charge(idempotency_key: str) -> str:
            keys.append(idempotency_key)
            return "charged"

        assert effects.once(charge, key="charge")() == "charged"
        assert time.monotonic() - started >= 0.55  # it ran only once the lease had ended
        assert keys == ["charge"]
        [record] = effects.records()
        assert record.state == "done" and record.name.endswith("charge")
        assert round(record.created_at.timestamp() * 1000) == dead.created_ms  # the same record


@case("effects")
def on_unknown_raise_surfaces_a_dead_holders_effect(factory: StoreFactory) -> None:
    with factory.open_effects(on_unknown="raise", poll=0.05) as effects:
        held(effects, "charge", lease=0.3)
        count = Counter()
        error = _raises(EffectOutcomeUnknown, lambda: effects.run("charge", count))
        assert isinstance(error, EffectOutcomeUnknown) and error.key == "charge"
        assert count.calls == []
        assert [r.state for r in effects.records()] == ["started"]
        assert effects.clear() == 1  # a person checked the outside system
        assert effects.run("charge", count) == RESULT


@case("effects")
def a_duplicate_waits_for_a_live_holder_then_gives_up(factory: StoreFactory) -> None:
    with factory.open_effects(wait=0.4, poll=0.05) as effects:
        held(effects, "busy", lease=30)
        count = Counter()
        started = time.monotonic()
        error = _raises(EffectInProgress, lambda: effects.run("busy", count))
        assert 0.3 <= time.monotonic() - started < 5
        assert isinstance(error, EffectInProgress) and error.key == "busy"
        assert count.calls == []


@case("effects")
def records_expire_after_their_ttl(factory: StoreFactory) -> None:
    with factory.open_effects(ttl=TTL) as effects:
        count = Counter()
        started = time.monotonic()
        effects.run("short", count)
        listed = [r.key for r in effects.records()]
        if time.monotonic() - started < TTL * 0.9:  # a slow server may take longer than TTL
            assert listed == ["short"]
        time.sleep(max(0.0, started + TTL + 0.3 - time.monotonic()))
        assert effects.records() == []
        effects.run("short", count)
        assert len(count.calls) == 2


@case("effects")
def records_are_kept_and_cleared_per_thread(factory: StoreFactory) -> None:
    with factory.open_effects() as effects:
        for thread in ("1", "10", "t{x}%"):
            for key in ("a", "b"):
                held(effects, key, thread=thread, lease=30)
        effects.run("a", Counter())  # no thread
        assert {r.key for r in effects.records(1)} == {"a", "b"}
        assert {r.thread_id for r in effects.records("1")} == {"1"}
        assert {r.thread_id for r in effects.records()} == {"", "1", "10", "t{x}%"}
        assert effects.clear(1) == 2
        assert effects.records("1") == []
        assert len(effects.records("10")) == 2
        assert len(effects.records("t{x}%")) == 2
        assert effects.clear("10") == 2
        assert [r.thread_id for r in effects.records()] == ["", "t{x}%", "t{x}%"]


@case("effects")
def bad_input_raises_before_anything_is_written(factory: StoreFactory) -> None:
    with factory.open_effects() as effects:
        count = Counter()
        for key in (123, "", "k" * 513, "a\x00b"):
            _raises(InvalidInput, lambda key=key: effects.run(key, count))
        _raises(InvalidInput, lambda: effects.records(["not", "a", "thread"]))

        def unserializable() -> Any:
            count()
            return object()

        error = _raises(SerializationError, lambda: effects.run("odd", unserializable))
        assert "stays 'started'" in str(error)
        assert count.calls == [()]  # it ran; its record stays started (documented)
        assert [(r.key, r.state) for r in effects.records()] == [("odd", "started")]
    for options in ({"lease": 0.01, "poll": 0.05}, {"on_unknown": "ignore"}, {"ttl": -1}):
        _raises(ConfigurationError, lambda options=options: _open(factory, options))
    _raises(ConfigurationError, lambda: _open(factory, {"no_such_option": 1}))


def _open(factory: StoreFactory, options: dict[str, Any]) -> None:
    with factory.open_effects(**options):
        pass


@case("effects")
def a_savers_effects_are_deleted_with_its_thread(factory: StoreFactory) -> None:
    with factory.open_saver() as saver:
        effects = EffectsApi(saver.saver.effects, factory.mode, saver.loop)
        try:
            held(effects, "k", thread="gone", lease=30)
            held(effects, "k", thread="kept", lease=30)
            if factory.mode == "sync":
                saver.saver.delete_thread("gone")
            else:
                saver.run(saver.saver.adelete_thread("gone"))
            assert [r.thread_id for r in effects.records()] == ["kept"]
        finally:
            effects.cleanup()
