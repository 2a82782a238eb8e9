"""Every error graphkeep raises on purpose derives from :class:`GraphkeepError`.

Messages say what was wrong and what to do about it. Errors about the caller's
input are raised before anything is written to the store. :func:`mask_url` keeps passwords
out of every message that names a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit


class GraphkeepError(Exception):
    """Base class of all graphkeep errors."""


class ConfigurationError(GraphkeepError, ValueError):
    """A URL, option or constructor argument is not usable."""


class InvalidInput(GraphkeepError, ValueError):
    """An argument of a saver call cannot be stored (raised before any write)."""


class InvalidThreadId(InvalidInput):
    """A thread id is missing, of the wrong type, too long or contains NUL."""


class InvalidNamespace(InvalidInput):
    """A checkpoint namespace or id cannot be stored."""


class InvalidFilter(InvalidInput):
    """A metadata filter for ``list`` cannot be evaluated safely."""


class SerializationError(GraphkeepError, TypeError):
    """A value in graph state (or a write) cannot be serialized."""


class PayloadTooLarge(GraphkeepError):
    """A value is larger than the store accepts and chunking is disabled."""


class StorageUnavailable(GraphkeepError, ConnectionError):
    """The store cannot be reached (refused, timed out, restarting)."""


class PoolExhausted(StorageUnavailable):
    """No connection of a client's pool came free for ``pool_timeout`` seconds while a
    request waited for one (raise ``max_connections`` or ``pool_timeout``); never retried."""


class PermissionDenied(GraphkeepError):
    """The server refused a request because the credentials lack a permission: a Redis or
    Valkey ACL user without a command or the key pattern (``NOPERM``), an IAM principal
    without a DynamoDB action on the table (``AccessDeniedException``). Never retried.

    ``action`` is the command or DynamoDB action refused, ``resource`` what it lacks on (the
    key pattern such as ``~app:*``, or the table), ``user`` the user when known. The message
    names them and says what to grant: ``graphkeep setup URL --print-acl`` (Redis, Valkey)
    or ``--print-iam-policy`` (DynamoDB) prints it.
    """

    def __init__(
        self, message: str, *, action: str, resource: str, user: str | None = None
    ) -> None:
        super().__init__(message)
        self.action = action
        self.resource = resource
        self.user = user

    def __reduce__(self) -> Any:
        return (_permission_denied, (str(self), self.action, self.resource, self.user))


def _permission_denied(
    message: str, action: str, resource: str, user: str | None
) -> PermissionDenied:
    return PermissionDenied(message, action=action, resource=resource, user=user)


class LockNotAcquired(GraphkeepError):
    """A per-thread lease is held by someone else."""


class ThreadBusy(LockNotAcquired):
    """Another run holds the thread's lease (``saver.exclusive``: waited ``timeout`` seconds,
    or ``on_busy="reject"``)."""


class LeaseLost(GraphkeepError):
    """A write made under a thread's lease was refused, nothing of it stored: a newer lease
    was granted on the thread since (the holder stalled past its ``ttl`` and another run took
    over). ``token`` is the holder's fencing token, ``newer`` the newest one granted."""

    def __init__(self, thread_id: str, token: int, newer: int | None = None) -> None:
        self.thread_id = thread_id
        self.token = token
        self.newer = newer
        newest = "a newer one" if newer is None else f"newer token {newer}"
        super().__init__(
            f"the lease on thread {thread_id!r} was lost: a write under fencing token {token}"
            f" was refused and nothing of it stored ({newest} was granted since)"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.thread_id, self.token, self.newer))


class MoveFailed(GraphkeepError):
    """A thread read through ``fallback=`` did not arrive here as the fallback holds it (a
    checkpoint already here that differs, one the fallback cannot read): nothing is served
    from it until that is fixed; the thread stays unsettled and the fallback untouched.
    ``thread_id`` names it, ``problems`` what differs (one line each, no values)."""

    def __init__(self, thread_id: str, problems: list[str]) -> None:
        self.thread_id = thread_id
        self.problems = problems
        shown = "; ".join(problems[:3]) + (
            f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        )
        super().__init__(f"thread {thread_id!r} could not be moved from the fallback: {shown}")


class SetupTimeout(GraphkeepError, TimeoutError):
    """``setup()`` waited its bound for another process to finish creating the schema
    (MongoDB: a collection's setup lease stayed held and its indexes missing)."""


#: how a :class:`Place` names each of its set fields, in the order it names them
_PLACE_FORMS = (
    ("thread_id", "thread {!r}"),
    ("checkpoint_ns", "namespace {!r}"),
    ("checkpoint_id", "checkpoint {!r}"),
    ("task_id", "pending write of task {!r} (idx {idx})"),
    ("channel", "channel {!r}"),
    ("namespace", "store namespace {!r}"),
    ("key", "key {!r}"),
    ("run_id", "run {!r}"),
    ("event_id", "event {!r}"),
    ("part", "{}"),
)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a stored payload is, for :class:`CorruptData`: names and ids only, never bytes.

    A checkpoint's value: ``thread_id``, ``checkpoint_ns``, ``checkpoint_id``, ``channel``;
    a pending write adds ``task_id`` and ``idx``; a store item is ``namespace`` and ``key``;
    an event is ``run_id`` and ``event_id``. ``part`` names what else it is (``checkpoint``,
    ``metadata``, ``list element <key>``). Unset fields are None.
    """

    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    channel: str | None = None
    task_id: str | None = None
    idx: int | None = None
    namespace: tuple[str, ...] | None = None
    key: str | None = None
    run_id: str | None = None
    event_id: str | None = None
    part: str | None = None

    def __str__(self) -> str:
        named = (
            form.format(value, idx=self.idx)
            for name, form in _PLACE_FORMS
            if (value := getattr(self, name)) is not None
        )
        return ", ".join(named) or "a stored payload"


#: :attr:`CorruptData.kind`: graphkeep's own framing of stored data is damaged (a record that
#: does not unpack, a compressed payload that does not inflate, chunks that do not match)
CORRUPT_FRAMING = "corrupt_data"
#: the serializer cannot decode a payload, or returned None for a non-empty one
UNDECODABLE = "undecodable"
#: a record the stored data names is not stored (a list element, a chunk)
MISSING_VALUE = "missing_value"
#: encryption is on (``encryption=``) and the record is not encrypted (:mod:`graphkeep.encryption`)
PLAINTEXT = "plaintext"
#: the record is encrypted under a key id the key ring does not hold
UNKNOWN_KEY = "unknown_key"
#: the record's authentication tag does not verify at the place it was read from: its bytes
#: were changed, or it was copied from another record, thread, checkpoint or channel
TAMPERED = "tampered"


class CorruptData(GraphkeepError):
    """Stored data cannot be read back whole: a payload the serializer cannot decode (or
    decodes to None), damaged framing, a missing list element or chunk.

    Raised instead of returning partial state. ``place`` (:class:`Place`; also as the
    attributes ``thread_id``, ``checkpoint_ns``, ``checkpoint_id``, ``channel``, ``task_id``,
    ``idx``, ``namespace``, ``key``, ``run_id``, ``event_id``) says where, ``reason`` what
    was wrong and ``kind`` which of :data:`CORRUPT_FRAMING`, :data:`UNDECODABLE`,
    :data:`MISSING_VALUE`, and with encryption on :data:`PLAINTEXT`, :data:`UNKNOWN_KEY` and
    :data:`TAMPERED` it is. The message names both and never quotes payload bytes.
    ``CorruptData("text")`` alone is a message without a place.
    """

    def __init__(
        self,
        message: str = "",
        *,
        reason: str | None = None,
        kind: str = CORRUPT_FRAMING,
        place: Place | None = None,
        advice: str | None = None,
    ) -> None:
        self.place = place if place is not None else Place()
        self.reason = reason if reason is not None else message
        self.kind = kind
        self.advice = advice
        self.thread_id = self.place.thread_id
        self.checkpoint_ns = self.place.checkpoint_ns
        self.checkpoint_id = self.place.checkpoint_id
        self.channel = self.place.channel
        self.task_id = self.place.task_id
        self.idx = self.place.idx
        self.namespace = self.place.namespace
        self.key = self.place.key
        self.run_id = self.place.run_id
        self.event_id = self.place.event_id
        if not message:
            message = f"{self.place}: {self.reason}. " + (
                advice
                or "The stored data is damaged and is not returned in part: restore it from a"
                " backup or delete it"
            )
        super().__init__(message)

    def at(self, place: Place) -> CorruptData:
        """This error at ``place`` (one that already names a place is returned as it is)."""
        if self.place != Place():
            return self
        return type(self)(reason=self.reason, kind=self.kind, place=place, advice=self.advice)


class UnsafePrune(GraphkeepError):
    """A prune plan would take from a kept checkpoint what it needs (nothing was deleted)."""


class SchemaError(GraphkeepError):
    """A checkpoint's state could not be given in the running schema version
    (``schema_version=`` / ``migrations=``); nothing was written. ``thread_id``,
    ``checkpoint_ns`` and ``checkpoint_id`` name the checkpoint."""

    def __init__(
        self, message: str, *, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id


class SchemaVersionTooNew(SchemaError):
    """A checkpoint was written with a ``schema_version`` newer than the reading saver's
    (it is never read downgraded). ``stored_version`` and ``running_version`` say how."""

    def __init__(
        self,
        message: str,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        stored_version: int,
        running_version: int,
    ) -> None:
        super().__init__(
            message, thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id
        )
        self.stored_version = stored_version
        self.running_version = running_version


class MigrationFailed(SchemaError):
    """A schema migration raised (the cause is chained) or is missing while a checkpoint was
    read upgraded. ``step`` is the version the failed step upgrades from."""

    def __init__(
        self, message: str, *, thread_id: str, checkpoint_ns: str, checkpoint_id: str, step: int
    ) -> None:
        super().__init__(
            message, thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id
        )
        self.step = step


class EffectError(GraphkeepError):
    """A side effect of the effect ledger (``graphkeep.connect_effects``) could not be run
    or replayed. ``thread_id`` (``""``: none) and ``key`` name its record."""

    def __init__(self, message: str, *, thread_id: str, key: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.key = key


class EffectInProgress(EffectError):
    """Another call holds the effect (its lease is live) and did not finish within the
    ledger's ``wait`` seconds; nothing ran here."""


class EffectOutcomeUnknown(EffectError):
    """The effect was started and its holder's lease ended without a result (the process
    died mid-effect): whether it happened is unknown. Raised under ``on_unknown="raise"``
    for a person to decide; nothing ran here."""


class EffectFailed(EffectError):
    """The effect raised when it first ran and its error was recorded
    (``cache_errors=True``); ``error_type`` and the message are the original's."""

    def __init__(self, message: str, *, thread_id: str, key: str, error_type: str) -> None:
        super().__init__(message, thread_id=thread_id, key=key)
        self.error_type = error_type


class EffectKeyRequired(InvalidInput):
    """An effect without an explicit key was called outside a LangGraph task (its default
    key is derived from the running task)."""


class UnknownRun(InvalidInput):
    """An event-log run id has no events, heartbeat or close (never written, or expired)."""


class RunClosed(InvalidInput):
    """An event was appended to a run after its close event."""


class RunStale(GraphkeepError):
    """A followed run stopped appending and heart-beating before its close (writer gone)."""


class EventsTrimmed(GraphkeepError):
    """Events after the requested id were dropped by retention (``max_events`` / TTL)."""


__all__ = [
    "ConfigurationError",
    "CorruptData",
    "EffectError",
    "EffectFailed",
    "EffectInProgress",
    "EffectKeyRequired",
    "EffectOutcomeUnknown",
    "EventsTrimmed",
    "GraphkeepError",
    "InvalidFilter",
    "InvalidInput",
    "InvalidNamespace",
    "InvalidThreadId",
    "LeaseLost",
    "LockNotAcquired",
    "MigrationFailed",
    "PayloadTooLarge",
    "PermissionDenied",
    "Place",
    "PoolExhausted",
    "RunClosed",
    "RunStale",
    "SchemaError",
    "SchemaVersionTooNew",
    "SerializationError",
    "SetupTimeout",
    "StorageUnavailable",
    "ThreadBusy",
    "UnknownRun",
    "UnsafePrune",
    "mask_url",
]


def credentials_refused(store: str, where: str, detail: str) -> StorageUnavailable:
    """The :class:`StorageUnavailable` of a server that refused the login: a wrong user or
    password, or (MongoDB) the wrong ``authSource``. Never retried: another attempt with the
    same credentials is refused again, so the message says to fix them, not to wait."""
    return StorageUnavailable(
        f"{store} at {where} refused the credentials ({detail}): check the URL's user and"
        " password" + (" and authSource" if store == "MongoDB" else "")
    )


def mask_url(url: str) -> str:
    """Return ``url`` with any password (and secret query values) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}{':***' if sep else ''}@{host}"
    query = re.sub(
        r"(?i)((?:password|secret|token|aws_secret_access_key|aws_session_token)=)[^&]*",
        r"\1***",
        parts.query,
    )
    # a URL inside the query (an endpoint_url), as given or percent-encoded: its password
    query = re.sub(
        r"(?i)((?:://|%3A%2F%2F)[^:/@&%]*(?::|%3A))[^@&/]*?(@|%40)",
        r"\1***\2",
        query,
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
