"""MongoDB checkpoint savers: :class:`MongoDBSaver` (sync) and :class:`AsyncMongoDBSaver`.

Both run on PyMongo (``pymongo>=4.13.2``): the sync saver on ``pymongo.MongoClient``,
the async one natively on ``pymongo.AsyncMongoClient`` (no motor, no thread hops).
Construct from an existing client or with ``from_url`` as a context manager::

    with MongoDBSaver.from_url("mongodb://localhost:27017/mydb") as saver:
        graph = builder.compile(checkpointer=saver)

    async with AsyncMongoDBSaver.from_url("mongodb+srv://user:pw@cluster0.example.net/") as saver:
        ...

    saver = MongoDBSaver(MongoClient(...), db_name="graphkeep", ttl=86400)
    saver.setup()

The database comes from the URL path (default ``graphkeep``); query-string options go
to the client. Sync and async share one source: the store (:mod:`.store`) yields
:class:`~.store.Command` requests that two small executors below run.

Collections (``P`` = ``key_prefix``, default ``graphkeep``)
-----------------------------------------------------------
``P_payloads`` holds everything of a thread (format 2), told apart by ``kind``, so that
one ordered command writes a checkpoint with its values::

    {_id, thread_id, ns, kind, ref, sub, part, expires_at, ...}

Only the indexed and queried fields keep readable names; what only the client reads is
short-named or packed (FerretDB keeps a document as JSON with its field names and a type
schema, binary as base64: this layout stores W50 in about half the bytes of 0.1.x's).
``sub`` is left out when empty, ``part`` on heads (both index as null).

- ``kind: "cp"``, a checkpoint; ``ref`` = checkpoint id::

    {..., s: Binary,         # msgpack [format 2, parent_id, {channel: version}, present,
                             #   needs_history, delta {channel: [id, v]},
                             #   lists {channel: [version, [[epoch, lo, hi], ...]]}, chunked]
     d: Binary,              # msgpack [checkpoint tag, bytes, metadata tag, bytes] (exact)
     run_id,                 # indexed (sparse): delete_for_runs
     metadata_doc: {...}, metadata_opaque: [key, ...]}   # queryable copy (see below)

  ``delta`` is the DeltaChannel bookkeeping for the TTL, ``lists`` the element runs of
  its list channels; ``d`` is absent when the payload moved to chunk documents.
- ``kind: "blob"``, a channel value: ``ref`` = ``"<len(channel)>:<channel>:<version>"``;
  also ``y`` (type tag) and ``d`` (bytes, left out when empty). Stored once per (thread,
  ns, channel, version), only for channels in ``new_versions``. A list value is a small
  *manifest* blob plus one *element* blob per element (channel ``__graphkeep.element__``,
  version = element key; see :mod:`graphkeep.checkpoint.lists`), each stored once per thread.
- ``kind: "write"``: ``ref`` = checkpoint id, ``sub`` = ``"<len(task_id)>:<task_id>:<idx>"``;
  also ``channel`` (queried by the DeltaChannel history), ``p`` (task path, when set),
  ``y``, ``d``. Regular writes are insert-if-absent (``$setOnInsert`` upserts), special
  writes (idx < 0) replace; one ``bulk_write``.
- ``kind: "checkpoint"``: the packed checkpoint + metadata of a checkpoint too large to
  inline (``ref`` = checkpoint id).

One collection makes ``put`` ONE ordered ``update`` command: element and blob upserts,
expiry refreshes, then the checkpoint document last; an ordered batch stops at its first
error, so no reader ever finds a checkpoint whose values are missing (no transaction).
``get_tuple`` is two ``find`` commands: the checkpoint, then its writes, blobs *and* list
elements (read as index ranges of ``ref``, from the checkpoint's ``lists`` runs); FerretDB
1.24, our test server, has no ``$lookup``/``$unionWith``. A checkpoint whose list
channels its writer did not know (a new process putting with the list unchanged) has no
``lists`` entry for them and costs one more find to read.

Format 1 (graphkeep 0.1.x) kept checkpoints in ``P_checkpoints`` and spelled every field
out (``_id`` the identity itself, ``type``/``data``/``count``/``gen``, ``channel`` and
``version`` on blobs, ``task_id``/``idx``/``task_path`` on writes, chunk tails
``part: "<gen>:<n>"``). ``setup()`` rewrites it: payload documents in place (new
document first, then the old one deleted; the two never collide in the unique index, and
readers accept both layouts meanwhile), checkpoints moved into ``P_payloads``, the
emptied ``P_checkpoints`` dropped; resumable. Stop 0.1.x writers before upgrading: what
they write afterwards is not read.

``P_locks`` holds the per-thread leases of ``saver.lock()`` (``_id`` = thread id, a
token and ``expires_at``), apart from the thread's data.

Indexes (``MongoDBSaver.schema()`` returns them as dicts; ``setup()`` creates them
idempotently, comparing key *and* options; ``setup=False`` skips it)::

    P_payloads     gk_thread_ns_kind_ref    {thread_id, ns, kind, ref, sub, part}  unique
                   gk_run_id                {run_id}  sparse (only checkpoints carry it)
                   gk_expires_at            {expires_at}  expireAfterSeconds: 0 (TTL)
    P_locks        gk_expires_at            {expires_at}  expireAfterSeconds: 0 (TTL)

Every document has a deterministic ``_id``: a 128-bit digest (22 base64url characters) of
its identity, length-prefixed: ``c``, thread, ns, checkpoint id for a checkpoint; ``p``,
thread, ns, kind, ref, sub, part for a payload. Every upsert names its document by ``_id``, the
primary key that every MongoDB-compatible server looks up through an index (FerretDB's
SQLite handler pushes down no other filter, so upserts on the compound key would scan
the collection there). Queries use the compound indexes above.

Sharding: shard ``P_payloads`` on ``{thread_id: 1}`` and pass
``sharded=True`` (``graphkeep.connect(url, sharded=True)``): MongoDB requires an upsert
on a sharded collection to name the full shard key, so the upserts then filter on
``{_id, thread_id}``. Every unique index leads with ``thread_id``, so MongoDB can
enforce it on this ranged shard key, every query carries ``thread_id`` and every
operation of a thread targets one shard. A hashed ``{thread_id: "hashed"}`` key spreads
hot threads more evenly, but MongoDB cannot enforce compound unique indexes there:
create the ``schema()`` indexes without ``unique`` yourself and pass ``setup=False``.
Nothing is lost: the ``_id`` encodes the thread, so all copies of one record would live
on the thread's shard, where ``_id`` is unique.

The 16 MB guard: our own chunk documents, not GridFS
---------------------------------------------------
Any payload (blob, write, or checkpoint + metadata) over ``chunk_size`` (8 MiB) is
split into a *head* document (no ``part``, first chunk, count ``n``, ``g`` = digest of
the whole payload) and tail documents (``part: "<g>/<i>"``) in the same payloads
collection, under the same ``ref``. So the queries that fetch a checkpoint's writes and
blobs fetch their chunks too (no extra round trip), deleting by ``ref`` deletes every
chunk, and the TTL refresh of a ``ref`` covers every chunk. A reader assembles only the
head's generation, so a retried or overwritten payload never mixes chunks; an incomplete
payload reads as not yet written. GridFS would need two more collections, a second
query per file and its own deletion and expiry, and knows nothing of threads.
Documents stay far below 16 MiB: identity fields are bounded (1 KiB ids, 64 KiB task
paths), the queryable metadata copy is capped at 1 MiB.

Metadata filters
----------------
``metadata_doc`` is a plain BSON copy of the metadata, so ``list(filter=...)`` runs on the
server for any top-level key, as ``{"metadata_doc.<key>": {"$eq": value}}`` (values are
always wrapped in ``$eq``, never operators). Keys containing "." or "$" are left out of
the copy and never pushed down; values a document cannot hold portably (ints beyond
int64, NaN/inf, arrays nested directly in arrays, keys with "."/"$" inside) are listed
in ``metadata_opaque`` so the server still selects those checkpoints. The saver
re-checks every filter in Python, and the serialized ``metadata`` is the source of truth.

TTL
---
``ttl`` sets an absolute ``expires_at`` on every document written; a TTL index with
``expireAfterSeconds: 0`` lets MongoDB delete it. The window slides per thread without
touching the whole thread: each ``put`` writes fresh expiries on its documents and, in
the same command, extends what the new checkpoint needs: the blobs of unchanged
channels, the list elements its manifests name, and, for DeltaChannels rebuilt from
history, the ancestors (checkpoints, writes, chunks) from the nearest stored value up to
the parent plus that seed value. List elements get 1.5 ``ttl`` and are refreshed only
once less than one ``ttl`` is left (a filter on ``expires_at``), so a growing list is
not rewritten at every put and an element never expires before a checkpoint naming it
(it may outlive its last one by ttl/2). A put whose writer does not know the list
channels of an unchanged value (cold cache) refreshes every element of the namespace.
Where that history starts is kept in each checkpoint's ``delta`` field and in a small
in-process cache, so ``put`` reads its parent only after a restart (one extra find).
``put_writes`` stamps its writes. Old history a live head does not need expires on
schedule. Documents past ``expires_at`` are hidden from every read even before the TTL
monitor (which runs about once a minute) deletes them. Servers without TTL indexes
(FerretDB 1.x) get a plain index instead and a warning; call ``purge_expired()``
periodically there. ``refresh_ttl_on_read`` extends what each read returns (one more
command per read).

Errors: a lost server raises :class:`graphkeep.errors.StorageUnavailable` naming the URL
(password masked). Every request is idempotent, so quick connection drops and upsert
races on a unique key are retried with backoff; after the driver itself waited for a
server, the error is raised at once. ``from_url`` sets ``serverSelectionTimeoutMS`` to
10 s unless the URL sets it (PyMongo's default is 30 s).

Wire-compatible servers: everything used here exists on MongoDB and on FerretDB 1.24;
the code avoids ``$lookup``, pipeline updates, ``collMod``, partial and hashed indexes
and never stores nested arrays, NaN or dotted keys. Where FerretDB differs, the code
adapts without changing behaviour on MongoDB: no TTL indexes (see TTL), and reply
batches not capped at 16 MiB (a reply over the 48 MB wire limit is re-read in small
batches). FerretDB 1.x answers every query but ``_id`` equality by scanning the
collection, so it gets slow as a collection grows; MongoDB uses the indexes above.

Round trips: ``put`` 1 command (one ordered batch), ``put_writes`` 1, ``get_tuple`` 2
(+1 for list channels its checkpoint does not name), a ``list`` page 2 (writes, blobs and
elements of the whole page in one ``find``), ``get_delta_channel_history`` 2 for up to
1,000 ancestors, ``delete_thread`` 1. Multi-document transactions are never used: blobs
and chunks are written before the checkpoint and deleted after it, in ordered batches,
so a reader never sees a checkpoint whose values are missing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit

from graphkeep.backends.mongodb.checkpoint import Command, MongoDBCheckpointPort
from graphkeep.backends.mongodb.documents import index_specs
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, ttl_seconds
from graphkeep.errors import ConfigurationError, StorageUnavailable, mask_url

try:
    import pymongo
    from pymongo.asynchronous.command_cursor import AsyncCommandCursor
    from pymongo.asynchronous.cursor import AsyncCursor
    from pymongo.command_cursor import CommandCursor
    from pymongo.cursor import Cursor
    from pymongo.driver_info import DriverInfo
    from pymongo.errors import (
        AutoReconnect,
        BulkWriteError,
        ConnectionFailure,
        DuplicateKeyError,
        InvalidURI,
        OperationFailure,
        ProtocolError,
        ServerSelectionTimeoutError,
    )
    from pymongo.errors import ConfigurationError as PyMongoConfigurationError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the MongoDB backend needs PyMongo >= 4.13.2: pip install 'graphkeep[mongodb]'"
    ) from exc

__all__ = ["AsyncMongoDBSaver", "Command", "MongoDBSaver", "MongoDBCheckpointPort", "index_specs"]

DEFAULT_DB = "graphkeep"
RETRY_DELAYS = (0.05, 0.2, 0.5)
#: MongoDB's error code for a write that lost a race with a concurrent one
WRITE_CONFLICT = 112
#: a dropped connection is retried only when the failed attempt was this quick: after a
#: longer wait the driver has already looked for a server (and retried reads/writes itself)
QUICK_FAILURE_S = 1.0
#: from_url's serverSelectionTimeoutMS unless the URL sets one (PyMongo's default is 30 s):
#: a call fails within ~10 s when the server is gone, and PyMongo's own retry still covers
#: a replica-set election (typically under 12 s)
SERVER_SELECTION_TIMEOUT_MS = 10_000
#: documents per reply batch that always fit a 48 MB message (see _smaller_batches)
SAFE_BATCH = 4
SCHEMES = ("mongodb", "mongodb+srv")
_BAD_DB_CHARS = set('/\\. "$*<>:|?\x00')


def _driver_info() -> DriverInfo:
    import graphkeep

    return cast(DriverInfo, DriverInfo("graphkeep", str(graphkeep.__version__)))


def database_from_url(url: str) -> str:
    """The database named by the URL path, or ``graphkeep``."""
    try:
        path = urlsplit(url).path
    except ValueError as exc:
        raise ConfigurationError(f"bad MongoDB URL {mask_url(url)}: {exc}") from exc
    return check_db_name(unquote(path.lstrip("/")) or DEFAULT_DB)


def check_client(client: Any, sync: bool, name: str) -> None:
    """``name`` (a store or cache class) runs on a ``MongoClient`` when ``sync``, else on an
    ``AsyncMongoClient``; the other kind is refused, naming the class to use instead."""
    wanted = pymongo.MongoClient if sync else pymongo.AsyncMongoClient
    if not isinstance(client, wanted):
        other = name.removeprefix("Async") if name.startswith("Async") else f"Async{name}"
        other_client = "MongoClient" if wanted is pymongo.AsyncMongoClient else "AsyncMongoClient"
        raise ConfigurationError(
            f"{name} needs a pymongo.{wanted.__name__}, got {type(client).__name__};"
            f" use {other} with pymongo.{other_client}"
        )


def check_db_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigurationError("db_name must be a non-empty string")
    if _BAD_DB_CHARS & set(name) or len(name.encode("utf-8")) > 63:
        raise ConfigurationError(
            f"{name!r} is not a valid MongoDB database name (at most 63 bytes, none of"
            ' / \\ . " $ * < > : | ? or spaces)'
        )
    return name


def _describe(client: Any) -> str:
    try:
        hosts = ",".join(f"{h}:{p}" for h, p in client.topology_description.server_descriptions())
    except Exception:  # noqa: BLE001 - a description is best effort
        hosts = ""
    return f"mongodb://{hosts}" if hosts else type(client).__name__


def _unavailable(where: str, exc: BaseException) -> StorageUnavailable:
    return StorageUnavailable(
        f"MongoDB at {where} is unavailable ({type(exc).__name__}: {exc}); is the server"
        " running and reachable? (locally: ./dev services up)"
    )


def _retryable(exc: BaseException, request: Command, took: float) -> bool:
    """Worth another attempt: a dropped connection, a busy server, or an upsert race.

    Every request is idempotent (upserts, insert-if-absent, deletes by key), so
    re-sending it is safe.
    """
    if isinstance(exc, ServerSelectionTimeoutError):
        return False  # the driver already waited serverSelectionTimeoutMS
    if isinstance(exc, AutoReconnect):
        return took < QUICK_FAILURE_S
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors") or []
        duplicates = sum(1 for e in errors if e.get("code") == 11000)
        busy = sum(1 for e in errors if _busy(e.get("code"), str(e.get("errmsg", ""))))
        if duplicates and not request.retry_conflicts:
            return False
        return bool(errors) and duplicates + busy == len(errors)
    if isinstance(exc, DuplicateKeyError):
        return request.retry_conflicts
    if isinstance(exc, OperationFailure):
        return _busy(exc.code, str(exc)) or exc.has_error_label("RetryableWriteError")
    return False


def _pause_before_retry(
    exc: Exception, request: Command, took: float, delay: float | None, where: str
) -> float:
    """``delay`` when ``exc`` is worth another attempt and one is left, else raise what the
    caller sees: ``StorageUnavailable`` for a connection failure, the error itself otherwise."""
    if delay is not None and _retryable(exc, request, took):
        return delay
    if isinstance(exc, ConnectionFailure):
        raise _unavailable(where, exc) from exc
    raise exc


def _busy(code: Any, message: str) -> bool:
    """A server too busy to take the write now: MongoDB's WriteConflict, or lock
    contention of a wire-compatible server (FerretDB's SQLite handler: SQLITE_BUSY)."""
    return code == WRITE_CONFLICT or "SQLITE_BUSY" in message


def _call(db: Any, request: Any) -> Any:
    if not isinstance(request, Command):
        raise TypeError(f"unknown MongoDB request {request!r}")
    target = db if request.collection is None else db[request.collection]
    return getattr(target, request.method)(*request.args, **request.kwargs)


def _smaller_batches(request: Command, exc: ProtocolError) -> Command | None:
    """The same find with small batches, after a reply too large for the wire.

    MongoDB caps a reply batch at 16 MiB, but some wire-compatible servers
    (FerretDB 1.x) do not and answer a large ``batch_size`` with one reply over
    the 48 MB message limit, which the driver refuses. Documents are at most
    ``chunk_size`` (8 MiB) plus bounded identity fields, so a few per batch fit.
    """
    if request.method != "find" or "max message size" not in str(exc):
        return None
    return replace(request, kwargs={**request.kwargs, "batch_size": SAFE_BATCH})


class _SyncExecutor:
    def __init__(self, db: Any, where: str) -> None:
        self.db = db
        self.where = where

    def __call__(self, request: Any) -> Any:
        for delay in (*RETRY_DELAYS, None):
            started = time.monotonic()
            try:
                try:
                    return self._once(request)
                except ProtocolError as exc:
                    smaller = _smaller_batches(request, exc)
                    if smaller is None:
                        raise
                    return self._once(smaller)
            except (ConnectionFailure, OperationFailure) as exc:
                took = time.monotonic() - started
                pause = _pause_before_retry(exc, request, took, delay, self.where)
            time.sleep(pause)
        raise AssertionError("unreachable")

    def _once(self, request: Any) -> Any:
        result = _call(self.db, request)
        if isinstance(result, (Cursor, CommandCursor)):
            return list(result)
        return result


class _AsyncExecutor:
    def __init__(self, db: Any, where: str) -> None:
        self.db = db
        self.where = where

    async def __call__(self, request: Any) -> Any:
        for delay in (*RETRY_DELAYS, None):
            started = time.monotonic()
            try:
                try:
                    return await self._once(request)
                except ProtocolError as exc:
                    smaller = _smaller_batches(request, exc)
                    if smaller is None:
                        raise
                    return await self._once(smaller)
            except (ConnectionFailure, OperationFailure) as exc:
                took = time.monotonic() - started
                pause = _pause_before_retry(exc, request, took, delay, self.where)
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def _once(self, request: Any) -> Any:
        result = _call(self.db, request)
        if asyncio.iscoroutine(result):
            result = await result
        if isinstance(result, (AsyncCursor, AsyncCommandCursor)):
            return await result.to_list(None)
        return result


def _store(options: dict[str, Any]) -> tuple[MongoDBCheckpointPort, dict[str, Any]]:
    store = MongoDBCheckpointPort(
        key_prefix=options.pop("key_prefix", "graphkeep"),
        ttl=ttl_seconds(options.pop("ttl", None)),
        refresh_ttl_on_read=bool(options.pop("refresh_ttl_on_read", False)),
        **({"chunk_size": options.pop("chunk_size")} if "chunk_size" in options else {}),
        sharded=options.pop("sharded", False),
    )
    return store, options


class _Schema:
    """``Saver.schema()`` -> the index specs; on an instance, for its own ``key_prefix``."""

    def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., list[dict[str, Any]]]:
        if obj is None:

            def for_prefix(key_prefix: str = "graphkeep") -> list[dict[str, Any]]:
                return index_specs(key_prefix)

            return for_prefix
        store: MongoDBCheckpointPort = obj.port

        def for_saver() -> list[dict[str, Any]]:
            return store.schema()

        return for_saver


class _MongoSaverMixin:
    """What both MongoDB savers add to the shared contract."""

    #: ``MongoDBSaver.schema(key_prefix="graphkeep")`` or ``saver.schema()``: index specs
    schema = _Schema()
    port: Any

    if TYPE_CHECKING:  # provided by SyncSaver / AsyncSaver

        def _call(self, op: Any) -> Any: ...

        async def _acall(self, op: Any) -> Any: ...

    def purge_expired(self) -> int:
        """Delete expired documents now (servers without TTL indexes); returns the count."""
        return int(self._call(cast(MongoDBCheckpointPort, self.port).purge_expired()))

    async def apurge_expired(self) -> int:
        return int(await self._acall(cast(MongoDBCheckpointPort, self.port).purge_expired()))


class MongoDBSaver(_MongoSaverMixin, SyncSaver):
    """Sync saver on a ``pymongo.MongoClient``.

    Options: ``db_name`` (default ``"graphkeep"``), ``serde``, ``ttl`` (seconds or
    timedelta, sliding per thread), ``refresh_ttl_on_read``, ``key_prefix`` (default
    ``"graphkeep"``: collections ``<prefix>_payloads`` and ``<prefix>_locks``),
    ``chunk_size`` (default 8 MiB), ``max_id_bytes`` (default 1024), ``sharded``
    (default False; True when the collections are sharded on ``thread_id``).
    """

    def __init__(self, client: Any, db_name: str = DEFAULT_DB, **options: Any) -> None:
        if not isinstance(client, pymongo.MongoClient):
            raise ConfigurationError(
                f"MongoDBSaver needs a pymongo.MongoClient, got {type(client).__name__};"
                " use AsyncMongoDBSaver with pymongo.AsyncMongoClient (motor is not supported)"
            )
        store, rest = _store(dict(options))
        self.client = client
        self.db = client[check_db_name(db_name)]
        super().__init__(store, _SyncExecutor(self.db, _describe(client)), **rest)

    @classmethod
    @contextmanager
    def from_url(
        cls, url: str, *, db_name: str | None = None, setup: bool = True, **options: Any
    ) -> Iterator[MongoDBSaver]:
        name = check_db_name(db_name) if db_name is not None else database_from_url(url)
        client = sync_client(url)
        try:
            saver = cls(client, db_name=name, **options)
            saver._execute.where = mask_url(url)  # type: ignore[attr-defined]
            if setup:
                saver.setup()
            yield saver
        finally:
            client.close()


class AsyncMongoDBSaver(_MongoSaverMixin, AsyncSaver):
    """Asyncio saver on PyMongo's native ``pymongo.AsyncMongoClient`` (same options)."""

    def __init__(self, client: Any, db_name: str = DEFAULT_DB, **options: Any) -> None:
        if not isinstance(client, pymongo.AsyncMongoClient):
            raise ConfigurationError(
                f"AsyncMongoDBSaver needs a pymongo.AsyncMongoClient, got"
                f" {type(client).__name__}; use MongoDBSaver with pymongo.MongoClient"
                " (motor is not supported)"
            )
        store, rest = _store(dict(options))
        self.client = client
        self.db = client[check_db_name(db_name)]
        super().__init__(store, _AsyncExecutor(self.db, _describe(client)), **rest)

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, db_name: str | None = None, setup: bool = True, **options: Any
    ) -> AsyncIterator[AsyncMongoDBSaver]:
        name = check_db_name(db_name) if db_name is not None else database_from_url(url)
        client = async_client(url)
        try:
            saver = cls(client, db_name=name, **options)
            saver._aexecute.where = mask_url(url)  # type: ignore[attr-defined]
            if setup:
                await saver.asetup()
            yield saver
        finally:
            await client.close()


def _check_scheme(url: str) -> None:
    if not isinstance(url, str) or url.split("://", 1)[0].lower() not in SCHEMES:
        raise ConfigurationError(
            f"not a MongoDB URL (mongodb:// or mongodb+srv://): {mask_url(str(url))}"
        )


def _client_options(url: str) -> dict[str, Any]:
    options: dict[str, Any] = {"driver": _driver_info()}
    query = urlsplit(url).query.lower()
    if "serverselectiontimeoutms=" not in query:
        options["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
    return options


def sync_client(url: str) -> Any:
    _check_scheme(url)
    try:
        return pymongo.MongoClient(url, **_client_options(url))
    except (InvalidURI, PyMongoConfigurationError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"bad MongoDB URL {mask_url(url)}: {exc}") from exc
    except ConnectionFailure as exc:
        raise _unavailable(mask_url(url), exc) from exc


def async_client(url: str) -> Any:
    _check_scheme(url)
    try:
        return pymongo.AsyncMongoClient(url, **_client_options(url))
    except (InvalidURI, PyMongoConfigurationError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"bad MongoDB URL {mask_url(url)}: {exc}") from exc
    except ConnectionFailure as exc:
        raise _unavailable(mask_url(url), exc) from exc


# the memory store, the node cache and the run event log build on the executors and clients above
from graphkeep.backends.mongodb.cache import AsyncMongoDBCache, MongoDBCache  # noqa: E402
from graphkeep.backends.mongodb.events import AsyncMongoDBEventLog, MongoDBEventLog  # noqa: E402
from graphkeep.backends.mongodb.store import AsyncMongoDBStore, MongoDBStore  # noqa: E402

__all__ += [
    "AsyncMongoDBCache",
    "AsyncMongoDBEventLog",
    "AsyncMongoDBStore",
    "MongoDBCache",
    "MongoDBEventLog",
    "MongoDBStore",
]
