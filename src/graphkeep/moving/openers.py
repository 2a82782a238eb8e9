"""LangGraph's own savers opened as a source or a destination, once for the library and the CLI.

``sqlite:///file.db`` opens ``SqliteSaver`` and ``postgresql://…`` ``PostgresSaver`` (the rivals'
URLs: :mod:`.rivals`), each as a :class:`Reader`: the saver, used through LangGraph's public
API, with the readers that know its storage where it has them (``write_rows``: each write's
``idx`` / ``task_path`` from its tables, which neither returns through ``get_tuple``).
``graphkeep copy`` (:mod:`graphkeep.cli.foreign`) and ``fallback=`` (:mod:`.sources`) both
open them here. A package that is not installed is a one-line
:class:`~graphkeep.errors.ConfigurationError` naming it; a saver that cannot be opened (the
server away, a file that cannot be opened) is :class:`~graphkeep.errors.StorageUnavailable`
(or ``ConfigurationError`` when the failure is not the server's), the URL masked, never a
driver traceback (:func:`entered`).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from graphkeep.errors import ConfigurationError, GraphkeepError, StorageUnavailable, mask_url

T = TypeVar("T")

SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres")
POSTGRES_INSTALL = "langgraph-checkpoint-postgres 'psycopg[binary]'"

#: (task_id, idx, task_path, channel) rows of one checkpoint's writes, when the store says
WriteRows = Callable[[str, str, str], list[tuple[str, int, str, str]] | None]
#: every thread id of the saver, by its own listing
Threads = Callable[[], Iterator[str]]
#: every checkpoint of one thread (every namespace), newest first, read the right way
Tuples = Callable[[str], list[Any]]

#: the names of driver errors that say the server (or file) cannot be reached, whatever the
#: driver (redis, psycopg, sqlite3, pymongo, botocore): matched along the error's classes
_UNREACHABLE = frozenset(
    {
        "ConnectionError",
        "TimeoutError",
        "OperationalError",
        "ConnectionFailure",
        "ServerSelectionTimeoutError",
        "EndpointConnectionError",
        "ConnectTimeoutError",
    }
)


@dataclass
class Reader:
    """A LangGraph saver opened at a URL, with its own readers where it has them:
    ``threads`` (its listing of its threads), ``tuples`` (every checkpoint of a thread, read
    by the route that gives back what it stored) and ``write_rows``; None: its public API."""

    saver: Any
    kind: str
    write_rows: WriteRows | None = None
    threads: Threads | None = None
    tuples: Tuples | None = None


class UrlOpeners(Generic[T]):
    """How one product's ``fallback=`` opens a SOURCE URL: ``by_scheme`` (LangGraph's and
    the rivals' openers, each ``opener(url)`` a context manager), else graphkeep's own URL,
    whose opener ``graphkeep.connect`` registers (this layer sits below it); ``own`` makes
    what that opener yields the product's ``T``."""

    def __init__(
        self,
        by_scheme: Mapping[str, Callable[[str], AbstractContextManager[T]]],
        own: Callable[[Any], T],
    ) -> None:
        self.by_scheme = dict(by_scheme)
        self.own = own
        self.graphkeep: list[Callable[[str], AbstractContextManager[Any]]] = []

    def register(self, open_url: Callable[[str], AbstractContextManager[Any]]) -> None:
        """Open graphkeep URLs with ``open_url`` (``graphkeep.connect`` registers it)."""
        self.graphkeep[:] = [open_url]

    def opened(self, url: str, stack: ExitStack) -> T:
        """What ``url`` names, entered on ``stack``."""
        opener = self.by_scheme.get(scheme_of(url))
        if opener is not None:
            return stack.enter_context(opener(url))
        if not self.graphkeep:
            raise ConfigurationError("fallback= URLs need graphkeep.connect (import graphkeep)")
        return self.own(stack.enter_context(self.graphkeep[0](url)))


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def shown(url: str) -> str:
    """``url`` as messages show it: masked (a SQLite URL as given: it has no secret, and
    masking re-assembles ``sqlite:////abs.db`` into ``sqlite://abs.db``)."""
    return url if scheme_of(url) in SQLITE_SCHEMES else mask_url(url)


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs/x.db`` -> ``/abs/x.db``."""
    rest = url.split("://", 1)[1]
    if not rest.startswith("/"):
        raise ConfigurationError(
            f"SQLite URLs look like sqlite:///relative/file.db or sqlite:////abs/file.db,"
            f" got {mask_url(url)}"
        )
    path = rest[1:].split("?", 1)[0]
    if not path:
        raise ConfigurationError(f"no database file in {mask_url(url)}")
    return path


def postgres_conn_string(url: str) -> str:
    """``postgres://...`` or ``postgresql://...`` as the ``postgresql://`` psycopg takes."""
    return "postgresql://" + url.split("://", 1)[1]


def missing_package(scheme: str, what: str, install: str) -> ConfigurationError:
    """The one line of a URL whose saver's package is not installed."""
    return ConfigurationError(f"{scheme}:// URLs need LangGraph's {what}: pip install {install}")


def unreachable(exc: BaseException) -> bool:
    """Does ``exc`` (a driver's) say the server or file cannot be reached?"""
    return isinstance(exc, OSError) or bool(_UNREACHABLE & {c.__name__ for c in type(exc).__mro__})


def open_failed(url: str, exc: BaseException) -> GraphkeepError:
    """A failure to open ``url`` as one line: the server's as StorageUnavailable."""
    text = " ".join(f"{type(exc).__name__}: {exc}".replace(url, shown(url)).split())
    if unreachable(exc):
        return StorageUnavailable(f"{shown(url)} is unavailable ({text})")
    return ConfigurationError(f"cannot open {shown(url)}: {text}")


@contextmanager
def entered(
    url: str,
    manager: AbstractContextManager[T],
    failure: Callable[[Exception], BaseException | None] | None = None,
    keep: tuple[type[BaseException], ...] = (GraphkeepError,),
) -> Iterator[T]:
    """``manager`` (what opens ``url``) entered. A failure to enter it is ``failure(exc)``
    (:func:`open_failed`'s one line by default; ``None``: raised as it is), those of
    ``keep`` (graphkeep's own errors) raised as they are; what the block raises is not
    touched, and ``manager`` is exited as ``with`` would."""
    try:
        opened = manager.__enter__()
    except keep:
        raise
    except Exception as exc:
        mapped = open_failed(url, exc) if failure is None else failure(exc)
        if mapped is None:
            raise
        raise mapped from exc
    with _exiting(manager):
        yield opened


@contextmanager
def _exiting(manager: AbstractContextManager[Any]) -> Iterator[None]:
    """Exit an entered ``manager`` after the block, handing it what the block raised."""
    try:
        yield
    except BaseException as exc:
        if not manager.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        manager.__exit__(None, None, None)


@contextmanager
def _sqlite_saver(url: str, setup: bool, serde: Any, must_exist: bool) -> Iterator[Reader]:
    path = sqlite_path(url)
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        raise missing_package("sqlite", "SQLite saver", "langgraph-checkpoint-sqlite") from None
    if must_exist and not setup and not os.path.exists(path):
        # never created by a reader (sqlite3.connect would make an empty file)
        raise ConfigurationError(f"no SQLite database at {path}")
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn, serde=serde)
        if setup:
            saver.setup()

        def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, int, str, str]]:
            query = (
                "SELECT task_id, idx, {path}, channel FROM writes"
                " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
            )
            params = (thread_id, ns, checkpoint_id)
            with saver.lock:
                try:
                    found = conn.execute(query.format(path="task_path"), params).fetchall()
                except sqlite3.OperationalError:  # databases from before task_path
                    found = conn.execute(query.format(path="''"), params).fetchall()
            return [(str(t), int(i), str(p or ""), str(c)) for t, i, p, c in found]

        yield Reader(saver, "sqlite", rows)
    finally:
        conn.close()


def open_sqlite_saver(
    url: str, *, setup: bool = False, serde: Any = None, must_exist: bool = True
) -> AbstractContextManager[Reader]:
    """LangGraph's ``SqliteSaver`` at ``url`` (``setup``: its tables created)."""
    return entered(url, _sqlite_saver(url, setup, serde, must_exist))


@contextmanager
def _postgres_saver(url: str, setup: bool, serde: Any) -> Iterator[Reader]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise missing_package("postgresql", "Postgres saver", POSTGRES_INSTALL) from None
    with PostgresSaver.from_conn_string(postgres_conn_string(url)) as saver:
        if serde is not None:
            saver.serde = serde
        if setup:
            saver.setup()

        def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, int, str, str]]:
            with saver._cursor() as cur:
                cur.execute(
                    "SELECT task_id, idx, task_path, channel FROM checkpoint_writes"
                    " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
                    (thread_id, ns, checkpoint_id),
                )
                found = cur.fetchall()
            return [
                (str(r["task_id"]), int(r["idx"]), str(r["task_path"] or ""), str(r["channel"]))
                for r in found
            ]

        yield Reader(saver, "postgres", rows)


def open_postgres_saver(
    url: str, *, setup: bool = False, serde: Any = None, must_exist: bool = True
) -> AbstractContextManager[Reader]:
    """LangGraph's ``PostgresSaver`` at ``url`` (``setup``: its migrations run)."""
    return entered(url, _postgres_saver(url, setup, serde))


@contextmanager
def open_postgres_store(
    url: str, *, setup: bool = False, index: dict[str, Any] | None = None
) -> Iterator[Any]:
    """LangGraph's ``PostgresStore`` at ``url`` (``setup`` creates its tables); a failure to
    open it is :func:`open_failed`'s one line."""
    try:
        from langgraph.store.postgres import PostgresStore
    except ImportError as exc:
        raise missing_package("postgresql", "Postgres store", POSTGRES_INSTALL) from exc
    connect = PostgresStore.from_conn_string(postgres_conn_string(url), index=cast(Any, index))
    with entered(url, connect) as store:
        if setup:
            store.setup()
        yield store
