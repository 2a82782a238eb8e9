"""The per-thread leases of ``saver.lock()`` on MongoDB: one document per held thread in
``<prefix>_locks`` (``_id`` = thread id, a token and ``expires_at``).

Leases live apart from the thread's data, so ``delete_thread`` or a TTL refresh never
touches one. Expiry uses the client's clock (no server-side clock in plain update
documents on every wire-compatible server): keep worker clocks in sync well within
``ttl``. See docs/architecture.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pymongo.errors import DuplicateKeyError

from graphkeep.backends.mongodb.requests import Command
from graphkeep.port import Op


def acquire_lease(locks: str, thread_id: str, token: str, ttl_ms: int, now: datetime) -> Op[bool]:
    """Take the lease unless a live one of another token exists (one upsert)."""
    try:
        yield Command(
            locks,
            "update_one",
            (
                # free, expired, or already ours (a retry after a lost reply)
                {
                    "_id": thread_id,
                    "$or": [{"expires_at": {"$lte": now}}, {"token": {"$eq": token}}],
                },
                {"$set": {"token": token, "expires_at": now + timedelta(milliseconds=ttl_ms)}},
            ),
            {"upsert": True},
            retry_conflicts=False,
        )
    except DuplicateKeyError:
        return False  # a live lease exists: the upsert's insert collided with it
    return True


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
