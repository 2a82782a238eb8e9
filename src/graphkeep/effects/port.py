"""The effect ledger's port: the :class:`EffectsPort` protocol a backend implements, the
record it stores (:class:`EffectRecord`) and the checks of what reaches it.

A record is one side effect, addressed by ``(thread_id, key)``: ``thread_id`` is the thread
the effect ran in (``""``: none, an effect called outside a graph) and ``key`` its
idempotency key (at most :data:`MAX_KEY_CHARS` characters). Its life::

    (absent) --claim--> started --finish--> done | failed
                        started --release--> (absent)       the effect raised
                        started --take_over--> started      its lease ended: a new holder

Every transition is ONE atomic request on the store (Redis: a script on the thread's slot;
MongoDB: an insert on the unique ``_id`` or a conditional update; DynamoDB: a conditional
``PutItem`` / ``UpdateItem`` / ``DeleteItem``). A record is gone at ``expires_ms`` (the
store's native TTL reaps it; reads treat a record past it as absent), and with its thread
(``clear(thread_id)``, which the saver's ``delete_thread`` runs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from graphkeep.port import Op

#: the states of a record
STARTED, DONE, FAILED = "started", "done", "failed"
STATES = (STARTED, DONE, FAILED)
#: the longest idempotency key a caller may give
MAX_KEY_CHARS = 512
#: options every ledger accepts beyond serde, key_prefix, setup, telemetry and the pool's
#: (see :class:`graphkeep.effects.ledger.LedgerBase`)
LEDGER_OPTIONS = frozenset({"ttl", "lease", "wait", "poll", "on_unknown", "cache_errors"})


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """One side effect's record, as stored."""

    #: the thread the effect ran in; "" when called outside a graph
    thread_id: str
    #: the idempotency key (given, or derived from the LangGraph task: ``auto:<digest>``)
    key: str
    #: STARTED, DONE or FAILED
    state: str
    #: who holds the lease of a started record (a random hex per attempt)
    token: str
    #: epoch ms when a started record's lease ends (its holder is then presumed dead)
    lease_until_ms: int
    #: epoch ms when the record is gone
    expires_ms: int
    #: DONE: the packed typed result; FAILED: the packed typed error; STARTED: None
    data: bytes | None
    #: the effect's name (the function's qualified name), for listings
    name: str
    #: epoch ms of the first claim, and of the last transition
    created_ms: int
    updated_ms: int

    def settled(self, state: str, data: bytes | None, now_ms: int, expires_ms: int) -> EffectRecord:
        """This record in a final state (same thread, key, token and creation time)."""
        return replace(self, state=state, data=data, updated_ms=now_ms, expires_ms=expires_ms)


class EffectsPort(Protocol):
    """What a backend maps onto its store; arguments arrive validated.

    - ``claim(record, now_ms, fence=None)``: store ``record`` (STARTED) when no live record
      has its ``(thread_id, key)`` — a record past its ``expires_ms`` counts as absent and is
      replaced — and return None; otherwise return the live record, unchanged. Atomic: of
      concurrent claims of one address exactly one returns None.
    - ``take_over(record, old_token, now_ms, fence=None)``: replace the STARTED record of
      ``record``'s address held by ``old_token`` whose ``lease_until_ms <= now_ms`` with
      ``record`` (a new token and lease); True when replaced, False when the stored record is
      anything else.
    - ``fence`` (both): the fencing token of the lease the caller holds on the thread
      (:mod:`graphkeep.port.fence`; None: none, nothing checked). The request checks it
      against the thread's lease as the saver under the same ``key_prefix`` on this store
      keeps it, and once a newer token was granted stores nothing and raises
      :class:`~graphkeep.errors.LeaseLost`: a holder that lost its lease starts no effect.
      ``finish`` and ``release`` are not fenced: they record what already happened in the
      world (refusing a finish would make the next holder run the effect again).
    - ``finish(record, now_ms)``: store ``record`` (DONE or FAILED, with its data and expiry)
      when the stored record of its address is STARTED under ``record.token``; True when
      stored, False otherwise (the lease was lost: another holder took over).
    - ``release(thread_id, key, token)``: delete the STARTED record held by ``token``; True
      when deleted.
    - ``get(thread_id, key)``: the stored record (possibly past its expiry: the caller
      checks), or None.
    - ``list(thread_id)``: the thread's records (``None``: every thread's, under this
      ledger's key prefix), expired ones included or not; any order.
    - ``reseal(record, fence=None)``: replace the stored record's data with ``record.data``
      when the stored record of its address is still in ``record.state`` under
      ``record.token`` and ``record.updated_ms`` (nothing happened to it since it was read);
      True when replaced. ``graphkeep rekey`` seals an outcome again under a new key with
      it, under the thread's lease: ``fence`` is checked as ``claim``'s is (``LeaseLost``,
      nothing written, once a newer token was granted).
    - ``clear(thread_id)``: delete the thread's records (``None``: every record under this
      ledger's key prefix); returns how many were deleted (a store may count expired ones).
    """

    def setup(self) -> Op[None]: ...

    def claim(
        self, record: EffectRecord, now_ms: int, fence: int | None = None
    ) -> Op[EffectRecord | None]: ...

    def take_over(
        self, record: EffectRecord, old_token: str, now_ms: int, fence: int | None = None
    ) -> Op[bool]: ...

    def finish(self, record: EffectRecord, now_ms: int) -> Op[bool]: ...

    def release(self, thread_id: str, key: str, token: str) -> Op[bool]: ...

    def get(self, thread_id: str, key: str) -> Op[EffectRecord | None]: ...

    def list(self, thread_id: str | None) -> Op[list[EffectRecord]]: ...

    def reseal(self, record: EffectRecord, fence: int | None = None) -> Op[bool]: ...

    def clear(self, thread_id: str | None) -> Op[int]: ...
