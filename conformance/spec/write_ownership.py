"""write_ownership: a thread's fenced lease decides who may write it (issue 45, langgraph#8796).

- A holder superseded by a newer lease (it stalled past its ttl and another took the thread
  over) is refused observably — LeaseLost, naming its token and the newer one — on ``put``,
  ``put_writes`` and ``delete_thread``, and nothing of those writes is stored.
- An expired lease lets a new holder proceed without the old one releasing it; fencing tokens
  grow.
- The old holder's late pending writes of a task (its checkpoint resumed by the new holder)
  are refused too, and the new holder's stay.
The stall is a sleep past a short ttl; the new holder is the same case acting in turn, each
holder's calls carrying its own token (``Lease.carry``).
"""

from __future__ import annotations

import time
from typing import Any

from conformance.factory import SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint_id_of,
    config,
    ids,
    must_get,
    new_thread,
    put_one,
    write_values,
)

#: the stalled holder's lease: short, so the case waits little past it
TTL = 0.3


def _stall() -> None:
    time.sleep(TTL + 0.3)


def _refused(lease_lost: type[Exception], action: Any, token: int, newer: int, label: str) -> None:
    try:
        action()
    except lease_lost as exc:
        got = (getattr(exc, "token", None), getattr(exc, "newer", None))
        assert got == (token, newer), f"{label}: LeaseLost names {got}, not {(token, newer)}"
        return
    raise AssertionError(f"{label}: a superseded holder's write was not refused (LeaseLost)")


@case("write_ownership")
def superseded_holder_writes_are_refused_and_store_nothing(factory: SaverFactory) -> None:
    lease_lost, _ = factory.connector.lease_errors()
    thread = new_thread("own")
    with factory.open() as api:
        old = api.lease(thread, TTL)
        old.acquire()
        first = put_one(api, thread, values={"turn": "old"}, version=1)
        _stall()
        new = api.lease(thread, 10)
        new.acquire()
        assert new.fence > old.fence, f"fencing tokens must grow: {old.fence} then {new.fence}"
        second = put_one(api, thread, parent=first, values={"turn": "new"}, version=2)
        old.carry()  # the stalled holder wakes up and writes on
        tokens = (old.fence, new.fence)
        _refused(
            lease_lost,
            lambda: put_one(api, thread, parent=second, values={"turn": "late"}, version=3),
            *tokens,
            "put",
        )
        _refused(
            lease_lost,
            lambda: api.put_writes(second, [("turn", "late")], "t-late"),
            *tokens,
            "put_writes",
        )
        _refused(lease_lost, lambda: api.delete_thread(thread), *tokens, "delete_thread")
        new.carry()
        assert new.release()
        stored = ids(api.list(config(thread)))
        assert stored == [checkpoint_id_of(second), checkpoint_id_of(first)], stored
        head = must_get(api, config(thread))
        assert head.checkpoint["channel_values"] == {"turn": "new"}
        assert write_values(head) == []


@case("write_ownership")
def an_expired_lease_lets_a_new_holder_proceed(factory: SaverFactory) -> None:
    _, not_acquired = factory.connector.lease_errors()
    thread = new_thread("own")
    with factory.open() as api:
        old = api.lease(thread, TTL)
        old.acquire()
        try:
            api.lease(thread, 10).acquire()
        except not_acquired:
            pass
        else:
            raise AssertionError("a live lease was taken by another holder")
        _stall()  # never released: it expires
        new = api.lease(thread, 10)
        new.acquire()
        assert new.fence > old.fence
        put_one(api, thread, values={"turn": "new"}, version=1)
        assert must_get(api, config(thread)).checkpoint["channel_values"] == {"turn": "new"}
        assert new.release()
        assert not old.release(), "an expired, superseded lease was released by its old holder"


@case("write_ownership")
def late_pending_writes_of_a_superseded_holder_are_refused(factory: SaverFactory) -> None:
    lease_lost, _ = factory.connector.lease_errors()
    thread = new_thread("own")
    with factory.open() as api:
        old = api.lease(thread, TTL)
        old.acquire()
        pending = put_one(api, thread, values={"turn": "old"}, version=1)
        api.put_writes(pending, [("turn", "a1")], "task-a")  # under the live lease: kept
        _stall()
        new = api.lease(thread, 10)
        new.acquire()
        api.put_writes(pending, [("turn", "b1")], "task-b")  # the new holder resumes it
        old.carry()
        _refused(
            lease_lost,
            lambda: api.put_writes(pending, [("turn", "a2"), ("turn", "a3")], "task-a2"),
            old.fence,
            new.fence,
            "put_writes of a pending task",
        )
        new.carry()
        assert new.release()
        got = sorted(value for _, value in write_values(must_get(api, pending)))
        assert got == ["a1", "b1"], got
