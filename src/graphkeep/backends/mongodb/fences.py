"""The fencing tokens of ``saver.lock()`` on MongoDB (:mod:`graphkeep.port.fence`): one
fence document per thread in the thread's collection, raised at each grant, a copy of it in
the effect ledger's collection, and the guard every write made under a lease sends first in
its command.

The fence document::

    {_id: digest("f", thread), thread_id, kind: "fence", token, holder, expires_at}

``token`` is the last grant's fencing token, ``holder`` the lease token it was granted to.
It lives in ``P_payloads``, beside the thread's data, because MongoDB cannot condition a
write on a document of another collection without a transaction: a write under a lease is
ONE ordered ``bulk_write`` whose first operation is the guard,
``{_id: <fence>, token: {$gt: <holder's token>}}`` ``$inc``-ing the fence document's
string ``kind`` — a no-op unless a newer token was granted, and then a type mismatch
(code 14): the ordered batch stops there, before any of the write's operations, and the
port raises :class:`~graphkeep.errors.LeaseLost` (reading the newest token for its message,
on that path only). A missing fence document (expired, or removed by hand) refuses nothing,
and the guard never creates one: unlike an upsert colliding on ``_id``, it cannot fail for
two writers under one token racing to create it, and the executor's retry of upsert races
never re-sends a refusal. Same shard as the thread (``thread_id`` is the shard key and in
the guard's filter when sharded), so the batch still targets one shard. ``put`` and
``put_writes`` stay one ``update`` command; a deletion under a lease is one ``bulk_write``
that MongoDB sends as two commands (the guard is an update), the second only when the
first passed.

The effect ledger's records live in ``P_effects`` (:mod:`.effects`), which the fence
document cannot guard for the same reason, so each grant copies its token into a mirror
fence document there (:class:`Mirror`, ``{_id: "<escaped thread>//fence", kind: "fence",
token, expires_at}``, raised with ``$max``: never lowered), and a fenced ``claim`` or
``take_over`` sends the same guard against the mirror first in its own ``bulk_write``
(:class:`Guard` is both collections' guard and refusal).

The guard and the writes share one command, not one atomic step (no transaction): a grant
that lands while a command is already past its guard does not stop the rest of that
command; every command sent after the grant is refused.

A grant is three requests (the lease in ``P_locks``, then the token raised here, then its
mirror raised in ``P_effects``, before ``acquire`` returns); the token is ``max(last + 1,
epoch ms)``, so it keeps growing after a fence document expired. The three are not one
step either: an acquirer that stalls between the first two past its lease's ``ttl`` while
another run takes the lease and raises the token raises it once more when it resumes, and
then the other run's writes are refused (one holder's writes are stored at any time, never
two); between the second and the third, the superseded holder's saver writes are refused
already while its effects can still start (its claim's guard reads the mirror not raised
yet). A grant that fails after taking the lease
(before the mirror is raised) leaves the ledger fenced at the previous token until the
lease is re-armed (the holder's retry: its re-arm raises the mirror again) or granted anew.
Its kind keeps the fence document out
of every read, inventory, export, listing, TTL refresh and deletion of the thread (each
names the kinds it reads, or :func:`~.documents.thread_data`; the format-1 rewrite reads
only documents with ``data``): ``delete_thread`` leaves it, and it expires
:data:`FENCE_TTL` after the last grant (``purge_expired`` removes it then where the server
has no TTL index; the mirror stays there, and a later grant's token, at least the clock's
milliseconds, still exceeds it).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from graphkeep.backends.mongodb.client import IncompleteBulkReply
from graphkeep.backends.mongodb.documents import KIND_FENCE, fence_id
from graphkeep.backends.mongodb.requests import Command, find
from graphkeep.backends.mongodb.upserts import Upserts
from graphkeep.errors import LeaseLost
from graphkeep.port import Op

#: how long a fence document outlives its last grant (or the lease's ttl, if longer):
#: tokens are at least the granting clock's milliseconds, so a forgotten one is never reused
FENCE_TTL = timedelta(days=30)
#: MongoDB's TypeMismatch: the guard's ``$inc`` of the string ``kind`` of a newer fence
REFUSED = 14
TOKEN_ONLY: dict[str, Any] = {"_id": 0, "token": 1, "holder": 1}


def epoch_ms(now: datetime) -> int:
    return int(now.timestamp() * 1000)


class Guard:
    """The guard and the refusal of writes under a lease in one collection, against the
    fence document ``key(thread_id)`` names there."""

    def __init__(self, collection: str, key: Callable[[str], dict[str, Any]]) -> None:
        self.collection = collection
        self.key = key

    def guard(self, thread_id: str, fence: int) -> UpdateOne:
        """The first operation of a write under fencing token ``fence``: fails (type
        mismatch: ``kind`` is a string) when the thread's token is newer, else matches
        nothing and writes nothing."""
        return UpdateOne({**self.key(thread_id), "token": {"$gt": fence}}, {"$inc": {"kind": 1}})

    def bulk(
        self,
        thread_id: str,
        ops: list[Any],
        fence: int | None,
        *,
        ordered: bool,
        retry_conflicts: bool = True,
    ) -> Op[Any]:
        """ONE ``bulk_write`` of ``ops`` on the thread; under a lease (``fence``), ordered
        behind :meth:`guard` and refused as :class:`~graphkeep.errors.LeaseLost`, nothing
        of it written, once a newer token was granted. ``retry_conflicts``: as
        :class:`~.requests.Command`'s (False where a duplicate key is an answer)."""
        if fence is not None:
            ops, ordered = [self.guard(thread_id, fence), *ops], True
        bulk = Command(self.collection, "bulk_write", (ops,), {"ordered": ordered}, retry_conflicts)
        if fence is None:
            return (yield bulk)
        try:
            return (yield bulk)
        except (BulkWriteError, IncompleteBulkReply) as exc:
            refused = is_refusal(exc)
            if refused is False:
                raise
            docs = yield find(self.collection, self.key(thread_id), projection=TOKEN_ONLY, limit=1)
            newest = int(docs[0]["token"]) if docs else None
            if refused or (newest is not None and newest > fence):
                raise LeaseLost(
                    thread_id, fence, newest if newest and newest > fence else None
                ) from None
            raise


class Fences(Guard):
    """The fence documents of one checkpoint port's thread collection."""

    def __init__(self, payloads: str, upserts: Upserts) -> None:
        super().__init__(
            payloads, lambda thread_id: upserts.key({"_id": fence_id(thread_id)}, thread_id)
        )

    def granted(
        self, thread_id: str, holder: str, ttl_ms: int, now: datetime, rearmed: bool
    ) -> Op[int]:
        """The fencing token of a lease just taken by ``holder``: raised, unless the lease
        was already ``holder``'s (``rearmed``) and so is the token (one read then); a
        re-armed lease whose raise was lost (the grant failed after taking it) is raised."""
        if rearmed:
            docs = yield find(self.collection, self.key(thread_id), projection=TOKEN_ONLY, limit=1)
            if docs and docs[0].get("holder") == holder:
                return int(docs[0]["token"])
        return (yield from self._raise(thread_id, holder, ttl_ms, now))

    def _raise(self, thread_id: str, holder: str, ttl_ms: int, now: datetime) -> Op[int]:
        """``token = max(token + 1, now_ms)`` without a pipeline update (DocumentDB has
        none): set to ``now_ms`` where lower (an upsert, one request), else, when the
        upsert collides with a token already at ``now_ms`` or beyond (grants within one
        millisecond, a clock behind), incremented (one more)."""
        key = self.key(thread_id)
        now_ms = epoch_ms(now)
        keep = max(FENCE_TTL, timedelta(milliseconds=ttl_ms))
        mark = {"holder": holder, "expires_at": now + keep}
        inserted = {"kind": KIND_FENCE, **({} if "thread_id" in key else {"thread_id": thread_id})}
        while True:
            try:
                doc = yield Command(
                    self.collection,
                    "find_one_and_update",
                    (
                        {**key, "token": {"$lt": now_ms}},
                        {"$set": {"token": now_ms, **mark}, "$setOnInsert": inserted},
                    ),
                    # no projection: FerretDB 1.x has none in findAndModify
                    {"upsert": True, "return_document": ReturnDocument.AFTER},
                    retry_conflicts=False,
                )
                return int(doc["token"])
            except DuplicateKeyError:
                pass  # the token is at now_ms or beyond
            doc = yield Command(
                self.collection,
                "find_one_and_update",
                (key, {"$inc": {"token": 1}, "$set": mark}),
                {"return_document": ReturnDocument.AFTER},
            )
            if doc is not None:
                return int(doc["token"])
            # the fence document expired in between: set it anew


class Mirror(Guard):
    """The copies of the threads' fencing tokens in the effect ledger's collection: the
    guard of a fenced ``claim`` or ``take_over`` (:mod:`.effects`) reads them there."""

    def raised(self, thread_id: str, token: int, ttl_ms: int, now: datetime) -> Op[None]:
        """The mirror of ``thread_id`` raised to ``token`` (a grant's), never lowered:
        one upsert, ``$max`` of the token and of the expiry."""
        keep = max(FENCE_TTL, timedelta(milliseconds=ttl_ms))
        yield Command(
            self.collection,
            "update_one",
            (
                self.key(thread_id),
                {
                    "$max": {"token": token, "expires_at": now + keep},
                    "$setOnInsert": {"kind": KIND_FENCE},
                },
            ),
            {"upsert": True},
        )


def is_refusal(exc: BulkWriteError | IncompleteBulkReply) -> bool | None:
    """Whether a fenced bulk failed on its guard: True or False from MongoDB's error
    (index 0, type mismatch), None when the reply does not say (FerretDB 1.x: then the
    fence document says)."""
    if isinstance(exc, IncompleteBulkReply):
        return None
    errors = exc.details.get("writeErrors") or []
    return bool(errors) and errors[0].get("index") == 0 and errors[0].get("code") == REFUSED
