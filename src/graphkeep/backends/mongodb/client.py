"""The MongoDB driver side: clients from URLs, the server's name in errors, and the executors.

A port's :class:`~graphkeep.backends.mongodb.requests.Command` is sent once by
:func:`send` / :func:`asend`; the executors retry it by the one policy of
:mod:`graphkeep.port.retry`, this backend giving only its data (:data:`RETRY`: the
delays, which failures are worth another attempt, and what the caller sees). See
docs/architecture.md ("The port and its executors").
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import time
import weakref
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import pymongo
from pymongo import common as pymongo_options
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

from graphkeep.backends.mongodb.requests import Command
from graphkeep.construction import Opening, Product
from graphkeep.errors import (
    ConfigurationError,
    PermissionDenied,
    StorageUnavailable,
    credentials_refused,
    mask_url,
)
from graphkeep.port.pools import Pool, PoolOptions, pool_for, pool_options, register
from graphkeep.port.retry import AsyncExecutor, Retry, SyncExecutor
from graphkeep.port.telemetry import Target
from graphkeep.port.tls import check_tls_options, server_unavailable, tls_reason

DEFAULT_DB = "graphkeep"
RETRY_DELAYS = (0.05, 0.2, 0.5)
#: MongoDB's error code for a write that lost a race with a concurrent one
WRITE_CONFLICT = 112
#: MongoDB's error codes for a refused login and a privilege the user lacks
AUTHENTICATION_FAILED = 18
UNAUTHORIZED = 13
#: the refused command and database in MongoDB's "not authorized on DB to execute command
#: { NAME: ..." and FerretDB's "Command NAME requires authentication"
_NOT_AUTHORIZED = re.compile(r"not authorized on (?P<db>\S+) to execute command \{ ?(?P<cmd>\w+)")
_NEEDS_LOGIN = re.compile(r"[Cc]ommand (?P<cmd>\w+) requires authentication")
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
#: PyMongo's own maxPoolSize default (a client whose maxPoolSize is 0, i.e. unbounded)
DEFAULT_MAX_POOL_SIZE = 100
_BAD_DB_CHARS = set('/\\. "$*<>:|?\x00')
#: a TLS URL's connectTimeoutMS unless it sets one (PyMongo's default is 20 s, longer than
#: server selection): a handshake a plain port never answers fails in 5 s, as on Redis
TLS_CONNECT_TIMEOUT_MS = 5_000
#: the URL option that names the CA a server's certificate is checked against
CA_OPTION = "tlsCAFile="
#: the URL's TLS options (MongoDB's spellings; PyMongo reads them case-insensitively)
TLS_OPTIONS = tuple(
    name
    for name in (
        "tls",
        "ssl",
        "tlsInsecure",
        "tlsAllowInvalidCertificates",
        "tlsAllowInvalidHostnames",
        "tlsCAFile",
        "tlsCertificateKeyFile",
        "tlsCertificateKeyFilePassword",
        "tlsCRLFile",
        "tlsDisableOCSPEndpointCheck",
    )
    if name.lower() in pymongo_options.VALIDATORS
)
#: how often the first request of a client looks at its first handshakes
_HANDSHAKE_POLL_S = 0.02


# -- names -----------------------------------------------------------------------------


def database_from_url(url: str) -> str:
    """The database named by the URL path, or ``graphkeep``."""
    try:
        path = urlsplit(url).path
    except ValueError as exc:
        raise ConfigurationError(f"bad MongoDB URL {mask_url(url)}: {exc}") from exc
    return check_db_name(unquote(path.lstrip("/")) or DEFAULT_DB)


def check_client(client: Any, sync: bool, name: str) -> None:
    """``name`` (a product class) runs on a ``MongoClient`` when ``sync``, else on an
    ``AsyncMongoClient``; the other kind is refused, naming the class to use instead."""
    wanted = pymongo.MongoClient if sync else pymongo.AsyncMongoClient
    if not isinstance(client, wanted):
        other = name.removeprefix("Async") if name.startswith("Async") else f"Async{name}"
        other_client = "MongoClient" if wanted is pymongo.AsyncMongoClient else "AsyncMongoClient"
        raise ConfigurationError(
            f"{name} needs a pymongo.{wanted.__name__}, got {type(client).__name__};"
            f" use {other} with pymongo.{other_client} (motor is not supported)"
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


def describe(client: Any) -> str:
    """The server a client talks to, for errors (``mongodb://host:port,...``)."""
    try:
        hosts = ",".join(f"{h}:{p}" for h, p in client.topology_description.server_descriptions())
    except Exception:  # noqa: BLE001 - a description is best effort
        hosts = ""
    return f"mongodb://{hosts}" if hosts else type(client).__name__


def target(db: Any) -> Target:
    """What a database's requests go to, as telemetry names it (database, first host)."""
    name = str(getattr(db, "name", "")) or None
    try:
        host, port = next(iter(db.client.topology_description.server_descriptions()))
    except Exception:  # noqa: BLE001 - a description is best effort
        return Target("mongodb", name)
    return Target("mongodb", name, str(host), int(port))


def unavailable(where: str, exc: BaseException) -> StorageUnavailable:
    return server_unavailable("MongoDB", where, exc, CA_OPTION)


class IncompleteBulkReply(OperationFailure):
    """A write of a ``bulk_write`` failed and the server's reply did not say which: FerretDB
    1.x answers an ``update`` command with write errors without the counts PyMongo merges
    (``n``, ``nModified``), and PyMongo then raises ``KeyError``. An ordered batch stopped
    at the failed write, as on MongoDB, which answers a ``BulkWriteError`` instead."""


def _incomplete(request: Command, exc: KeyError) -> IncompleteBulkReply | None:
    """``exc`` as :class:`IncompleteBulkReply` when PyMongo could not merge a bulk reply."""
    if request.method != "bulk_write" or exc.args not in (("nModified",), ("n",)):
        return None
    return IncompleteBulkReply(
        "a write of the bulk failed; the server's reply lacks the counts that say which"
        f" ({exc.args[0]!r} missing: FerretDB 1.x)"
    )


# -- the retry data --------------------------------------------------------------------


def retryable(exc: BaseException, request: Command, took: float) -> bool:
    """Worth another attempt: a dropped connection, a busy server, or an upsert race.

    Every request is idempotent (upserts, insert-if-absent, deletes by key), so
    re-sending it is safe.
    """
    if isinstance(exc, ServerSelectionTimeoutError):
        return False  # the driver already waited serverSelectionTimeoutMS
    if isinstance(exc, ConnectionFailure) and tls_reason(exc) is not None:
        return False  # a failed TLS handshake fails the same way again
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


def failure(exc: BaseException, where: str) -> BaseException:
    """What the caller sees: ``StorageUnavailable`` for a connection failure or a refused
    login, ``PermissionDenied`` for a privilege the user lacks, else ``exc``."""
    if isinstance(exc, ConnectionFailure):
        return unavailable(where, exc)
    if isinstance(exc, OperationFailure) and exc.code == AUTHENTICATION_FAILED:
        return credentials_refused("MongoDB", where, f"AuthenticationFailed: {exc.details}")
    if isinstance(exc, OperationFailure) and exc.code == UNAUTHORIZED:
        return denied(exc, where)
    return exc


def denied(exc: OperationFailure, where: str) -> PermissionDenied:
    """The :class:`PermissionDenied` of a command the user may not run: the command and the
    database (an unauthenticated client's refusal names no database: FerretDB's)."""
    said = str((exc.details or {}).get("errmsg", exc))
    named = _NOT_AUTHORIZED.search(said) or _NEEDS_LOGIN.search(said)
    action = named.group("cmd") if named else "the command"
    database = named.groupdict().get("db") if named else None
    resource = f"database {database}" if database else "the database"
    return PermissionDenied(
        f"MongoDB at {where} refused {action} on {resource}: the user lacks the privilege (or"
        " the URL names no user); applications need the readWrite role on their database and"
        " setup=False, and `graphkeep setup URL` is run once by a user with dbAdmin"
        f" (docs/security.md). MongoDB said: {said}",
        action=action,
        resource=database or where,
    )


def _busy(code: Any, message: str) -> bool:
    """A server too busy to take the write now: MongoDB's WriteConflict, or lock
    contention of a wire-compatible server (FerretDB's SQLite handler: SQLITE_BUSY)."""
    return code == WRITE_CONFLICT or "SQLITE_BUSY" in message


#: how every MongoDB request is retried (graphkeep.port.retry runs it)
RETRY = Retry(delays=RETRY_DELAYS, retryable=retryable, failure=failure)


# -- sending one request once ----------------------------------------------------------


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


def _once(db: Any, request: Any) -> Any:
    result = _call(db, request)
    if isinstance(result, (Cursor, CommandCursor)):
        return list(result)
    return result


async def _aonce(db: Any, request: Any) -> Any:
    result = _call(db, request)
    if asyncio.iscoroutine(result):
        result = await result
    if isinstance(result, (AsyncCursor, AsyncCommandCursor)):
        return await result.to_list(None)
    return result


#: the clients whose first handshakes were looked at (see :func:`_first_contact`), by
#: identity: PyMongo's clients compare equal by their hosts, whatever their TLS options
_CONTACTED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


#: the clients graphkeep made from a TLS URL (see :func:`_contact`)
_TLS_CLIENTS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _made_for_tls(client: Any) -> bool:
    return _TLS_CLIENTS.get(id(client)) is client


def _contacted(client: Any) -> bool:
    return _CONTACTED.get(id(client)) is client


def _first_contact(client: Any) -> BaseException | None | bool:
    """What the client's monitors know so far: True once a server answered or failed other
    than in TLS (the driver's server selection takes it from there), a TLS failure when
    every server failed its handshake, else False (nothing known yet)."""
    servers = list(client.topology_description.server_descriptions().values())
    failed = []
    for server in servers:
        if server.is_server_type_known:
            return True
        if server.error is not None:
            if tls_reason(server.error) is None:
                return True
            failed.append(server.error)
    if servers and len(failed) == len(servers):
        return AutoReconnect(str(failed[0]))
    return False


def _deadline(client: Any) -> float:
    return time.monotonic() + float(client.options.server_selection_timeout)


def _contact(client: Any) -> None:
    """Before a client's first request: fail at once when its handshakes failed in TLS
    (PyMongo would wait out serverSelectionTimeoutMS, then say "timeout"); only a client
    graphkeep made from a TLS URL (one the application made may not be connected yet)."""
    if _contacted(client) or not _made_for_tls(client):
        return
    deadline = _deadline(client)
    while (known := _first_contact(client)) is False and time.monotonic() < deadline:
        time.sleep(_HANDSHAKE_POLL_S)
    if isinstance(known, BaseException):
        raise known
    _CONTACTED[id(client)] = client


async def _acontact(client: Any) -> None:
    """The asyncio :func:`_contact` (an ``AsyncMongoClient`` connects on first use). PyMongo's
    asyncio monitor never gives up a handshake a plain port does not answer (its sync one
    does after connectTimeoutMS): a TLS client graphkeep made that has heard nothing from any
    server by then fails as that handshake's timeout."""
    if _contacted(client) or not _made_for_tls(client):
        return
    await client.aconnect()
    deadline = _deadline(client)
    timeout = float(client.options.pool_options.connect_timeout)
    silent = time.monotonic() + timeout + 0.5
    while (known := _first_contact(client)) is False and time.monotonic() < deadline:
        if time.monotonic() > silent:
            where = ", ".join(
                f"{h}:{p}" for h, p in client.topology_description.server_descriptions()
            )
            known = AutoReconnect(
                f"SSL handshake failed: {where}: the handshake operation timed out (no TLS"
                f" answer within connectTimeoutMS, {timeout} s)"
            )
            break
        await asyncio.sleep(_HANDSHAKE_POLL_S)
    if isinstance(known, BaseException):
        raise known
    _CONTACTED[id(client)] = client


def send(db: Any, request: Any) -> Any:
    """Run ``request`` once on a ``MongoClient`` database (cursors read to the end); a find
    whose reply is too large for the wire is read again in small batches; a failed bulk
    write whose reply PyMongo cannot merge raises :class:`IncompleteBulkReply`; a client's
    first request fails at once when its TLS handshakes did (:func:`_contact`)."""
    _contact(db.client)
    try:
        return _once(db, request)
    except ProtocolError as exc:
        smaller = _smaller_batches(request, exc)
        if smaller is None:
            raise
        return _once(db, smaller)
    except KeyError as exc:
        incomplete = _incomplete(request, exc)
        if incomplete is None:
            raise
        raise incomplete from exc


async def asend(db: Any, request: Any) -> Any:
    """The async :func:`send`, on an ``AsyncMongoClient`` database."""
    await _acontact(db.client)
    try:
        return await _aonce(db, request)
    except ProtocolError as exc:
        smaller = _smaller_batches(request, exc)
        if smaller is None:
            raise
        return await _aonce(db, smaller)
    except KeyError as exc:
        incomplete = _incomplete(request, exc)
        if incomplete is None:
            raise
        raise incomplete from exc


def sync_executor(db: Any, where: str) -> SyncExecutor:
    """Runs the ports' requests on ``db``, retried by :data:`RETRY`; errors name ``where``;
    at most as many at once as the client's pool holds (see :mod:`graphkeep.port.pools`)."""
    return SyncExecutor(partial(send, db), RETRY, where, target(db), pool=_gate(db.client, where))


def async_executor(db: Any, where: str) -> AsyncExecutor:
    return AsyncExecutor(partial(asend, db), RETRY, where, target(db), pool=_gate(db.client, where))


def _gate(client: Any, where: str) -> Pool:
    """The client's gate: registered by :func:`sync_client` / :func:`async_client`, or, for a
    client the application made, as many slots as its ``maxPoolSize``."""

    def default() -> Pool:
        size = client.options.pool_options.max_pool_size or DEFAULT_MAX_POOL_SIZE
        return Pool(f"MongoDB at {where}", PoolOptions(max_connections=size))

    return pool_for(client, default)


# -- clients ---------------------------------------------------------------------------


def _driver_info() -> DriverInfo:
    # the installed distribution's version: importing the graphkeep package itself from here
    # would reach up to graphkeep.connect (docs/architecture.md, "Import rules")
    try:
        version = importlib.metadata.version("graphkeep")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return cast(DriverInfo, DriverInfo("graphkeep", version))


def _check_scheme(url: str) -> None:
    if not isinstance(url, str) or url.split("://", 1)[0].lower() not in SCHEMES:
        raise ConfigurationError(
            f"not a MongoDB URL (mongodb:// or mongodb+srv://): {mask_url(str(url))}"
        )


def _client_options(url: str, pool: PoolOptions) -> dict[str, Any]:
    """The driver's options: the URL's own win (a ``maxPoolSize`` or ``waitQueueTimeoutMS``
    in its query over ``max_connections`` / ``pool_timeout``)."""
    options: dict[str, Any] = {"driver": _driver_info()}
    query = urlsplit(url).query.lower()
    if _uses_tls(url) and "connecttimeoutms=" not in query:
        options["connectTimeoutMS"] = TLS_CONNECT_TIMEOUT_MS
    if "serverselectiontimeoutms=" not in query:
        options["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
    if "maxpoolsize=" not in query:
        options["maxPoolSize"] = pool.max_connections
    if "waitqueuetimeoutms=" not in query:
        options["waitQueueTimeoutMS"] = int(pool.pool_timeout * 1000)
    return options


def _uses_tls(url: str) -> bool:
    """The URL asks for TLS (``tls=true``/``ssl=true``; ``mongodb+srv://`` unless ``false``)."""
    parts = urlsplit(url)
    given = {k.lower(): v.lower() for k, v in parse_qsl(parts.query)}
    flag = given.get("tls", given.get("ssl"))
    if flag is None:
        return parts.scheme.lower() == "mongodb+srv"
    return flag == "true"


def check_tls(url: str) -> None:
    """A misspelt TLS option (PyMongo only warns, and connects without it) is refused."""
    names = [name for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)]
    check_tls_options(names, TLS_OPTIONS, backend="MongoDB", url=mask_url(url), fold=True)


def _made(make: Any, url: str, pool: PoolOptions | None) -> Any:
    _check_scheme(url)
    check_tls(url)
    options = pool or PoolOptions()
    try:
        client = make(url, **_client_options(url, options))
    except (InvalidURI, PyMongoConfigurationError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"bad MongoDB URL {mask_url(url)}: {exc}") from exc
    except ConnectionFailure as exc:
        raise unavailable(mask_url(url), exc) from exc
    if _uses_tls(url):
        _TLS_CLIENTS[id(client)] = client
    size = client.options.pool_options.max_pool_size or options.max_connections
    gate = Pool(f"MongoDB at {mask_url(url)}", replace(options, max_connections=size))
    return register(client, gate)


def sync_client(url: str, pool: PoolOptions | None = None) -> Any:
    """A ``MongoClient`` for ``url``, its connections bounded as ``pool`` says."""
    return _made(pymongo.MongoClient, url, pool)


def async_client(url: str, pool: PoolOptions | None = None) -> Any:
    """The ``AsyncMongoClient`` twin of :func:`sync_client`."""
    return _made(pymongo.AsyncMongoClient, url, pool)


# -- the products' construction (graphkeep.construction) --------------------------------


@dataclass(frozen=True)
class MongoDBSite:
    """One database of a PyMongo client as the products' ports see it."""

    db: Any
    where: str

    def executor(self, port: Any, is_async: bool) -> SyncExecutor | AsyncExecutor:
        return (async_executor if is_async else sync_executor)(self.db, self.where)


class OnMongoDB(Product):
    """A product on PyMongo: a ``pymongo.MongoClient``, or PyMongo's native
    ``pymongo.AsyncMongoClient`` for an ``Async…`` class (motor is not supported).
    ``Class(client, db_name="graphkeep", *, where=None, **options)``: ``where`` names the
    server in errors (default: the client's hosts); ``from_url`` takes the database from the
    URL path unless ``db_name=`` names it, and ``max_connections`` / ``pool_timeout``."""

    client_options = frozenset({"db_name"})

    def __init__(
        self, client: Any, db_name: str = DEFAULT_DB, *, where: str | None = None, **options: Any
    ) -> None:
        check_client(client, not self.is_async(), type(self).__name__)
        self.client = client
        self.db = client[check_db_name(db_name)]
        self.build(MongoDBSite(self.db, where or describe(client)), options)

    @classmethod
    def opening(cls, url: str, options: dict[str, Any]) -> Opening:
        named = options.pop("db_name", None)
        db_name = check_db_name(named) if named is not None else database_from_url(url)
        pool = pool_options(options)

        def client(is_async: bool) -> Any:
            return (async_client if is_async else sync_client)(url, pool)

        return Opening(client, {"db_name": db_name, "where": mask_url(url)})
