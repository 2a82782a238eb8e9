"""The per-thread leases of ``saver.lock()`` on MongoDB: one document per held thread in
``<prefix>_locks`` (``_id`` = thread id, a token and ``expires_at``).

Leases live apart from the thread's data, so ``delete_thread`` or a TTL refresh never
touches one; each grant of ``saver.lock()`` also raises the thread's fencing token, kept in
the thread's collection (:mod:`.fences`). Expiry uses the client's clock (no server-side
clock in plain update documents on every wire-compatible server): keep worker clocks in
sync well within ``ttl``. See docs/architecture.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from graphkeep.backends.mongodb.requests import Command
from graphkeep.port import Op


def _taking(
    thread_id: str, token: str, ttl_ms: int, now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter and update of a lease upsert: free, expired, or already ``token``'s (a
    retry after a lost reply); its insert collides with a live lease of another token."""
    return (
        {"_id": thread_id, "$or": [{"expires_at": {"$lte": now}}, {"token": {"$eq": token}}]},
        {"$set": {"token": token, "expires_at": now + timedelta(milliseconds=ttl_ms)}},
    )


def acquire_lease(locks: str, thread_id: str, token: str, ttl_ms: int, now: datetime) -> Op[bool]:
    """Take the lease unless a live one of another token exists (one upsert)."""
    try:
        yield Command(
            locks,
            "update_one",
            _taking(thread_id, token, ttl_ms, now),
            {"upsert": True},
            retry_conflicts=False,
        )
    except DuplicateKeyError:
        return False  # a live lease exists: the upsert's insert collided with it
    return True


def take_lease(
    locks: str, thread_id: str, token: str, ttl_ms: int, now: datetime
) -> Op[bool | None]:
    """:func:`acquire_lease` telling a grant from a re-arm (one ``findAndModify`` answering
    the lease as it was): None when another holder has it, True when it was already
    ``token``'s (re-armed), False when newly taken. The fencing token of a grant is raised
    afterwards (:mod:`.fences`)."""
    try:
        before = yield Command(
            locks,
            "find_one_and_update",
            _taking(thread_id, token, ttl_ms, now),
            {"upsert": True},  # no projection: FerretDB 1.x has none in findAndModify
            retry_conflicts=False,
        )
    except DuplicateKeyError:
        return None
    return before is not None and before.get("token") == token


def release_lease(locks: str, thread_id: str, token: str) -> Op[bool]:
    result = yield Command(locks, "delete_one", ({"_id": thread_id, "token": token},))
    return bool(result.deleted_count)


def extend_lease(locks: str, thread_id: str, token: str, ttl_ms: int, now: datetime) -> Op[bool]:
    result = yield Command(
        locks,
        "update_one",
        (
            {"_id": thread_id, "token": token, "expires_at": {"$gt": now}},
            {"$set": {"expires_at": now + timedelta(milliseconds=ttl_ms)}},
        ),
    )
    return bool(result.matched_count)
